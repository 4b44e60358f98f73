//! `skillhost new`: a skill to start from, in Python, JavaScript or as a
//! SKILL.md, with what building it needs beside it (the SDK, the contract).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

use skillhost::skills::SkillName;
use skillhost::skills::pack::{DeclarativeSkill, Format};

/// The versions of the build tools `skill-plugins/build-interpreted.sh`
/// builds and tests the SDKs with: the commands printed name them.
const COMPONENTIZE_PY: &str = "0.25.1";
const COMPONENTIZE_JS: &str = "0.23.0";

/// `skillhost new`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "The skill it writes looks up an order with the demo shop's queryOrder (in \
                  Python and JavaScript, as steps with a test case that `skillhost test` passes): \
                  build it as it says, then make it yours. Skills in Rust live in a workspace \
                  with the guest SDK: skill-plugins/ in the skillhost repository."
)]
pub struct NewArgs {
    /// The skill's name, the function name the LLM calls: ASCII letters,
    /// digits, `_` and `-`, starting with a letter.
    name: String,
    /// What it is written in: `python` (componentize-py), `js`
    /// (componentize-js), or `md`, instructions only, for `skillhost pack`.
    #[arg(long, value_enum)]
    lang: Lang,
    /// The directory to create [default: ./<NAME>].
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Lang {
    Python,
    Js,
    Md,
}

/// A file of the new skill: its path in the directory, and its text.
type File = (&'static str, String);

pub fn new(args: &NewArgs) -> anyhow::Result<ExitCode> {
    let name = args.name.as_str();
    let dir = args.dir.clone().unwrap_or_else(|| PathBuf::from(name));
    let named = |template: &str| template.replace("{{name}}", name);
    let files: Vec<File> = match args.lang {
        Lang::Python => vec![
            ("app.py", named(include_str!("new/app.py"))),
            (
                "instructions.md",
                named(include_str!("new/instructions.md")),
            ),
            (
                "skillhost_skill.py",
                include_str!("../../../skill-plugins/python/skillhost_skill.py").to_owned(),
            ),
            ("wit/skill.wit", skillhost::SKILL_WIT.to_owned()),
        ],
        Lang::Js => vec![
            ("app.js", named(include_str!("new/app.js"))),
            (
                "skillhost_skill.js",
                include_str!("../../../skill-plugins/js/skillhost_skill.js").to_owned(),
            ),
            ("wit/skill.wit", skillhost::SKILL_WIT.to_owned()),
        ],
        Lang::Md => vec![("SKILL.md", named(include_str!("new/SKILL.md")))],
    };
    check_name(name, args.lang, &files)?;
    if dir.try_exists().unwrap_or(true) {
        anyhow::bail!(
            "{} already exists; new writes a directory of its own: choose another --dir",
            dir.display()
        );
    }
    for (path, text) in &files {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    let written: Vec<&str> = files.iter().map(|(path, _)| *path).collect();
    println!(
        "created {} ({}): {}",
        dir.display(),
        args.lang.title(),
        written.join(", ")
    );
    println!("build it:");
    for command in build_commands(args.lang, name, &dir) {
        println!("  {command}");
    }
    println!("sign it, and put it in a skills directory of its own:");
    println!("  skillhost sign {name}.wasm --key <your signing key>");
    match args.lang {
        Lang::Python | Lang::Js => {
            println!("then its test case runs its steps on the demo shop:");
            println!("  skillhost test {name} --skills <that directory> --trust <your public key>");
        }
        Lang::Md => {
            println!("then the agent can load it (instructions need a model to run):");
            println!("  skillhost serve --skills <that directory> --trust <your public key>");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Refuses a name the host would refuse in the manifest, or that the
/// declarative skill would not pack with.
fn check_name(name: &str, lang: Lang, files: &[File]) -> anyhow::Result<()> {
    SkillName::new(name).with_context(|| format!("`{name}` cannot name a skill"))?;
    if let Lang::Md = lang {
        let (_, text) = &files[0];
        DeclarativeSkill::parse(text, Format::SkillMd, Path::new("SKILL.md"))
            .with_context(|| format!("`{name}` cannot name a SKILL.md skill"))?;
    }
    Ok(())
}

/// The commands that turn the skill in `dir` into `<name>.wasm` here.
fn build_commands(lang: Lang, name: &str, dir: &Path) -> Vec<String> {
    let dir = dir.display();
    match lang {
        Lang::Python => vec![
            format!("pip install componentize-py=={COMPONENTIZE_PY}"),
            format!(
                "componentize-py --wit-path {dir}/wit --world skill componentize \
                 --python-path {dir} app --output {name}.wasm"
            ),
        ],
        Lang::Js => vec![
            format!("npm install @bytecodealliance/componentize-js@{COMPONENTIZE_JS}"),
            // Without http and fetch-event disabled, the component imports
            // wasi:http, which the host does not link.
            format!(
                "npx componentize-js {dir}/app.js --wit {dir}/wit --world-name skill \
                 --disable http fetch-event --out {name}.wasm"
            ),
        ],
        Lang::Md => vec![format!("skillhost pack {dir}/SKILL.md --out {name}.wasm")],
    }
}

impl Lang {
    fn title(self) -> &'static str {
        match self {
            Self::Python => "Python",
            Self::Js => "JavaScript",
            Self::Md => "SKILL.md, instructions only",
        }
    }
}
