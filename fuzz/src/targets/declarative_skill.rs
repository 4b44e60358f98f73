//! Any text as a declarative skill (`skillhost pack`), in either format. What
//! the packer accepts must build a component that loads and reads back as
//! the same manifest and instructions; what it refuses, it refuses with an
//! error, never a panic.

use std::path::Path;
use std::sync::LazyLock;

use crate::Sandbox;
use skillhost::skills::pack::{DeclarativeSkill, Format};

static SANDBOX: LazyLock<Sandbox> = LazyLock::new(Sandbox::default);

/// One input. Returns whether it reached the checks on the loaded component:
/// the seed replay makes sure the seeds meant to be valid still do.
pub fn run(input: (bool, &str)) -> bool {
    let (markdown, text) = input;
    let (format, file) = if markdown {
        (Format::SkillMd, Path::new("SKILL.md"))
    } else {
        (Format::Yaml, Path::new("skill.yaml"))
    };
    let Ok(skill) = DeclarativeSkill::parse(text, format, file) else {
        return false;
    };
    let bytes = skill.to_component().expect("an accepted skill encodes");
    // The packer knows no host's tools: a skill may list a tool this host
    // lacks, or be named like one of its tools. Any other refusal is the
    // packer's fault.
    let loaded = match SANDBOX.load(bytes) {
        Ok(loaded) => loaded,
        Err(error)
            if error.to_string().contains("not a registered tool")
                || error.to_string().contains("already the name of a tool") =>
        {
            return false;
        }
        Err(error) => panic!("an accepted skill does not load: {error}"),
    };
    let json = |manifest| serde_json::to_value(manifest).expect("a manifest serializes");
    assert_eq!(json(loaded.manifest()), json(skill.manifest()));
    assert_eq!(loaded.instructions(), skill.instructions());
    true
}
