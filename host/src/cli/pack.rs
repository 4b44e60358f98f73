//! `skillhost pack`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use serde_json::json;

use skillhost::runtime::digest_of;
use skillhost::skills::pack::DeclarativeSkill;

use super::progress::Progress;
use super::sign::write_atomic;

/// `skillhost pack`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "The component is unsigned: sign it with `skillhost sign` before \
                        a host that requires signatures (the default) will load it."
)]
pub struct PackArgs {
    /// The skill: a .yaml/.yml file (name, description, tools, parameters,
    /// instructions; optional version, unlocks, test_cases) or an Agent
    /// Skills SKILL.md (.md).
    input: PathBuf,
    /// Write the component to this file. Default: <name>.wasm next to the
    /// input.
    #[arg(long, value_name = "FILE", conflicts_with = "out_dir")]
    out: Option<PathBuf>,
    /// Write <name>.wasm into this directory instead.
    #[arg(long, value_name = "DIR")]
    out_dir: Option<PathBuf>,
    /// Replace the output file if it exists (by default pack refuses: the
    /// file it would replace may be a signed skill).
    #[arg(long)]
    force: bool,
    /// Print the result as JSON: name, version, source, out, size, digest,
    /// signed (always false).
    #[arg(long)]
    json: bool,
}

pub fn pack(args: &PackArgs) -> anyhow::Result<ExitCode> {
    let progress = Progress::spinner(&format!("packing {}", args.input.display()));
    let skill = DeclarativeSkill::read(&args.input)?;
    let component = skill
        .to_component()
        .with_context(|| format!("packing {}", args.input.display()))?;
    drop(progress);
    let manifest = skill.manifest();
    let out = match (&args.out, &args.out_dir) {
        (Some(out), _) => out.clone(),
        (None, dir) => {
            let dir = dir
                .as_deref()
                .unwrap_or_else(|| args.input.parent().unwrap_or(Path::new("")));
            dir.join(format!("{}.wasm", manifest.name))
        }
    };
    if !args.force && out.try_exists().unwrap_or(true) {
        anyhow::bail!(
            "{} already exists; pack writes an unsigned component, which would replace it \
             (a signed skill there would be lost): choose another --out, or pass --force",
            out.display()
        );
    }
    // Renamed into place: a watching host never sees half a component.
    write_atomic(&out, &component)?;
    let digest = digest_of(&component);
    if args.json {
        let packed = json!({
            "name": manifest.name,
            "version": manifest.version.to_string(),
            "source": args.input,
            "out": out,
            "size": component.len(),
            "digest": digest,
            "signed": false,
        });
        println!("{}", serde_json::to_string_pretty(&packed)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "packed {} {} (instructions only) from {}",
        manifest.name,
        manifest.version,
        args.input.display()
    );
    println!("  {}: {} bytes, {}", out.display(), component.len(), digest);
    println!(
        "  unsigned: sign it with `skillhost sign` before a host that requires signatures loads it"
    );
    Ok(ExitCode::SUCCESS)
}
