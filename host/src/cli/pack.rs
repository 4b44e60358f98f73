//! `skillhost pack`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use serde_json::json;

use skillhost::runtime::{Runtime, RuntimeConfig, SkillComponent, digest_of};
use skillhost::skills::Manifest;
use skillhost::skills::pack::{DeclarativeSkill, componentize, stand_in_tools};

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
    /// instructions; optional version, unlocks, test_cases), an Agent
    /// Skills SKILL.md (.md), or a core module (.wasm) built against the
    /// Rust guest SDK for wasm32-unknown-unknown.
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

/// A component packed, and its manifest.
struct Packed {
    component: Vec<u8>,
    manifest: Manifest,
    /// What it is, for people: `instructions only` or `steps`.
    kind: &'static str,
}

pub async fn pack(args: &PackArgs) -> anyhow::Result<ExitCode> {
    let progress = Progress::spinner(&format!("packing {}", args.input.display()));
    let packed = if args.input.extension().is_some_and(|ext| ext == "wasm") {
        wrap_module(&args.input).await?
    } else {
        declarative(&args.input)?
    };
    drop(progress);
    let Packed {
        component,
        manifest,
        kind,
    } = packed;
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
        "packed {} {} ({kind}) from {}",
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

/// A declarative skill's instruction-only component.
fn declarative(input: &Path) -> anyhow::Result<Packed> {
    let skill = DeclarativeSkill::read(input)?;
    let component = skill
        .to_component()
        .with_context(|| format!("packing {}", input.display()))?;
    Ok(Packed {
        component,
        manifest: skill.manifest().clone(),
        kind: "instructions only",
    })
}

/// A core module wrapped into a component, then checked as a host loads
/// it (in the default sandbox, the tools it names standing in): a module
/// that does not fit the skill world, or whose manifest a host would
/// refuse, is refused here.
async fn wrap_module(input: &Path) -> anyhow::Result<Packed> {
    let module = std::fs::read(input).with_context(|| format!("reading {}", input.display()))?;
    let component = componentize(&module)
        .with_context(|| format!("{} cannot be made a skill component", input.display()))?;
    let runtime = Runtime::new(RuntimeConfig::default())?;
    let skill = SkillComponent::load_with(&runtime, component.clone(), stand_in_tools)
        .await
        .with_context(|| {
            format!(
                "{}: the component made of it is not a skill a host would load",
                input.display()
            )
        })?;
    let manifest = skill.manifest().clone();
    let kind = if manifest.has_steps {
        "steps"
    } else {
        "instructions only"
    };
    Ok(Packed {
        component,
        manifest,
        kind,
    })
}
