//! `skillhost new`: a skill to start from, in Rust, Python, JavaScript or as
//! a SKILL.md, with what building it needs beside it (the SDK, the
//! contract).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

use skillhost::skills::SkillName;
use skillhost::skills::pack::{DeclarativeSkill, Format};

/// The versions of the build tools `skill-plugins/build-interpreted.sh`
/// builds and tests the SDKs with: the commands printed name them.
const COMPONENTIZE_PY: &str = "0.25.1";
const COMPONENTIZE_JS: &str = "0.23.0";

/// What a Rust skill is built for: a core module without WASI, which
/// `skillhost pack` wraps into a component of the skill world.
const RUST_TARGET: &str = "wasm32-unknown-unknown";

/// The Rust guest SDK, as skill-plugins' workspace builds it: its manifest,
/// the workspace's, and its sources.
const SDK_MANIFEST: &str = include_str!("../../../skill-plugins/sdk/Cargo.toml");
const PLUGINS_WORKSPACE: &str = include_str!("../../../skill-plugins/Cargo.toml");
const SDK_SOURCES: [(&str, &str); 5] = [
    (
        "sdk/src/lib.rs",
        include_str!("../../../skill-plugins/sdk/src/lib.rs"),
    ),
    (
        "sdk/src/heap.rs",
        include_str!("../../../skill-plugins/sdk/src/heap.rs"),
    ),
    (
        "sdk/src/log.rs",
        include_str!("../../../skill-plugins/sdk/src/log.rs"),
    ),
    (
        "sdk/src/skill.rs",
        include_str!("../../../skill-plugins/sdk/src/skill.rs"),
    ),
    (
        "sdk/src/tool.rs",
        include_str!("../../../skill-plugins/sdk/src/tool.rs"),
    ),
];
/// Where the SDK's bindings find the contract: in the repository, and in
/// the SDK written beside a new skill (`sdk/wit/skill.wit`).
const SDK_WIT_PATH: (&str, &str) = (r#"path: "../../wit/skill@0.1.0","#, r#"path: "wit","#);

/// `skillhost new`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "The skill it writes looks up an order with the demo shop's queryOrder (in \
                  Rust, Python and JavaScript, as steps with a test case that `skillhost test` \
                  passes): build it as it says, then make it yours."
)]
pub struct NewArgs {
    /// The skill's name, the function name the LLM calls: ASCII letters,
    /// digits, `_` and `-`, starting with a letter.
    name: String,
    /// What it is written in: `rust` (cargo, for wasm32-unknown-unknown,
    /// then `skillhost pack`), `python` (componentize-py), `js`
    /// (componentize-js), or `md`, instructions only, for `skillhost pack`.
    #[arg(long, value_enum)]
    lang: Lang,
    /// The directory to create [default: ./<NAME>].
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Lang {
    Rust,
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
        Lang::Rust => {
            let package = package_name(name);
            let mut files = vec![
                (
                    "Cargo.toml",
                    named(include_str!("new/Cargo.toml.in")).replace("{{package}}", &package),
                ),
                ("src/lib.rs", named(include_str!("new/lib.rs"))),
                // As `cargo new` writes it: the build stays out of version control.
                (".gitignore", "/target\n".to_owned()),
                (
                    "instructions.md",
                    named(include_str!("new/instructions.md")),
                ),
            ];
            files.extend(rust_sdk());
            files
        }
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
        Lang::Rust | Lang::Python | Lang::Js => {
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

/// The guest SDK as a crate of its own, beside a new Rust skill: what its
/// manifest takes from skill-plugins' workspace written into it, the
/// contract in its `wit/`.
fn rust_sdk() -> Vec<File> {
    let mut files = vec![
        ("sdk/Cargo.toml", sdk_manifest()),
        ("sdk/wit/skill.wit", skillhost::SKILL_WIT.to_owned()),
    ];
    for (path, text) in SDK_SOURCES {
        let (in_repository, beside) = SDK_WIT_PATH;
        files.push((path, text.replace(in_repository, beside)));
    }
    files
}

/// The SDK's `Cargo.toml` with each setting it inherits from the workspace
/// (`x.workspace = true`) written out as the workspace sets it, and
/// without the workspace's lints; the rest line for line.
fn sdk_manifest() -> String {
    let workspace: toml::Table = PLUGINS_WORKSPACE.parse().expect("skill-plugins/Cargo.toml");
    let workspace = &workspace["workspace"];
    let mut manifest = String::new();
    let mut section = "";
    for line in SDK_MANIFEST.lines() {
        if line.starts_with('[') {
            section = line.trim_matches(['[', ']']);
        }
        if section == "lints" {
            continue;
        }
        match line.strip_suffix(".workspace = true") {
            Some(key) => {
                let value = &workspace[section][key];
                manifest.push_str(&format!("{key} = {value}\n"));
            }
            None => manifest.push_str(&format!("{line}\n")),
        }
    }
    manifest.trim_end().to_owned() + "\n"
}

/// A Cargo package name for the skill `name`: `processRefund` is
/// `process-refund`.
fn package_name(name: &str) -> String {
    let mut package = String::new();
    for (at, character) in name.char_indices() {
        if character.is_ascii_uppercase() && at > 0 {
            package.push('-');
        }
        package.push(match character {
            '_' => '-',
            other => other.to_ascii_lowercase(),
        });
    }
    package
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
        Lang::Rust => vec![
            format!("rustup target add {RUST_TARGET}"),
            format!(
                "cargo build --manifest-path {dir}/Cargo.toml --release --target {RUST_TARGET}"
            ),
            format!(
                "skillhost pack {dir}/target/{RUST_TARGET}/release/skill.wasm --out {name}.wasm"
            ),
        ],
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
            Self::Rust => "Rust",
            Self::Python => "Python",
            Self::Js => "JavaScript",
            Self::Md => "SKILL.md, instructions only",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::package_name;

    #[test]
    fn a_package_is_named_after_its_skill_in_kebab_case() {
        for (skill, package) in [
            ("processRefund", "process-refund"),
            ("order_change", "order-change"),
            ("fault-diagnosis", "fault-diagnosis"),
            ("newRust2", "new-rust2"),
            ("x", "x"),
        ] {
            assert_eq!(package_name(skill), package);
        }
    }
}
