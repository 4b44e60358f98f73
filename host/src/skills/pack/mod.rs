//! Declarative skills: a skill written as text, packed into an ordinary
//! instruction-only component (`skillhost pack`) with no wasm toolchain.
//!
//! Two input formats, chosen by the file's extension:
//!
//! - **`.yaml` / `.yml`**, the articles' skill file. Required: `name`,
//!   `description`, `tools` (a list, may be empty), `parameters` (the JSON
//!   Schema of the input, written as YAML) and `instructions`. Optional:
//!   `version` (default [`DEFAULT_VERSION`]), `unlocks` (tools the main agent
//!   sees only while the skill is loaded) and `test_cases`, each with
//!   `input` (required), `name` (default `case <n>`), `expect_tools` and
//!   `expect_contains` (default empty). Article 000's spelling `tool_ids` is
//!   *not* accepted: every field has one name, and the unknown-field error
//!   lists `unlocks`.
//! - **`.md`**, an Agent Skills `SKILL.md`: YAML front matter between a first
//!   line `---` and the next line `---`, then the Markdown body, which is the
//!   instructions (leading blank lines and trailing whitespace removed).
//!   Front matter: `name` and `description` (required); `allowed-tools`, tool
//!   names separated by spaces or commas, or a YAML list (the skill's
//!   `tools`; default none); `license`, `compatibility` and `metadata` as
//!   Agent Skills defines them, where `metadata.version` is the skill's
//!   version and the rest is checked for shape but not carried into the
//!   component. skillhost's own fields may be added: `version` (instead of
//!   `metadata.version`, not both), `parameters` (default: an object with one
//!   required string, `request`, "What the user asked for"), `unlocks` and
//!   `test_cases`.
//!
//! Unknown fields are errors in both formats. YAML is read as YAML 1.2
//! (`yes`/`no` are text). Every error names the file, line and column, and
//! the field where there is one ([`PackError::Invalid`]). The manifest rules
//! are [`Manifest::resolve`]'s own, so a packed skill passes them at load;
//! only whether its tools exist waits for the host's tool registry.

mod encode;
mod source;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;

pub use encode::{ComponentizeError, EncodeError, NO_STEPS, componentize};
pub use source::DEFAULT_VERSION;

use super::manifest::{Manifest, ManifestError, RawManifest};
use crate::runtime::bindings::skillhost::skill::types as wit;
use crate::tools::{Access, StandIn, ToolRegistry, ToolSpec};
use source::{Draft, Located, require};

/// How a skill file is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The articles' YAML skill file (`.yaml`, `.yml`).
    Yaml,
    /// An Agent Skills `SKILL.md` (`.md`).
    SkillMd,
}

impl Format {
    /// The format of `path`, by its extension (case-insensitive).
    pub fn of(path: &Path) -> Option<Self> {
        let extension = path.extension()?.to_str()?.to_ascii_lowercase();
        match extension.as_str() {
            "yaml" | "yml" => Some(Self::Yaml),
            "md" => Some(Self::SkillMd),
            _ => None,
        }
    }
}

/// A place in an input file, both counted from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// The line, counted from the top of the file (also in a `SKILL.md`,
    /// whose YAML starts on line 2).
    pub line: u64,
    /// The column, in characters.
    pub column: u64,
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// Why a skill file could not be packed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PackError {
    /// The file could not be read (missing, unreadable, not UTF-8).
    #[error("cannot read {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The extension is none of `.yaml`, `.yml` or `.md`.
    #[error(
        "{}: not a skill file (expected a .yaml or .yml skill, or an Agent Skills SKILL.md)",
        path.display()
    )]
    UnknownFormat { path: PathBuf },
    /// The content of `file` is wrong at `at`.
    #[error("{}:{at}: {problem}", file.display())]
    Invalid {
        file: PathBuf,
        at: Position,
        problem: Problem,
    },
}

/// What is wrong with a skill file's content.
#[derive(Debug, thiserror::Error)]
pub enum Problem {
    /// Malformed YAML, a value of the wrong type, or an unknown or repeated
    /// field; the parser's message names the field.
    #[error("{0}")]
    Yaml(String),
    /// Reported at the mapping that lacks it.
    #[error("missing required field `{0}`")]
    MissingField(&'static str),
    /// A `SKILL.md` that does not start with a line `---`.
    #[error(
        "no YAML front matter: a SKILL.md starts with a line `---`, then the front matter, then a line `---`"
    )]
    NoFrontMatter,
    /// A `SKILL.md` whose front matter has no closing line `---`.
    #[error("the front matter is not closed by a line `---`")]
    UnclosedFrontMatter,
    /// The instructions (named as the input calls them) are blank.
    #[error("{0} is empty; an instruction-only skill needs instructions")]
    EmptyInstructions(String),
    /// A `SKILL.md` sets both `version` and `metadata.version`.
    #[error("the version is given twice (`version` and `metadata.version`); keep one")]
    TwoVersions,
    /// A manifest rule (see [`Manifest::resolve`]) refused the value of `field`.
    #[error("`{field}`: {error}")]
    Manifest { field: String, error: ManifestError },
}

/// A problem at a position of a file not yet named.
#[derive(Debug)]
struct Fault {
    at: Position,
    problem: Problem,
}

impl Fault {
    fn in_file(self, file: &Path) -> PackError {
        PackError::Invalid {
            file: file.to_owned(),
            at: self.at,
            problem: self.problem,
        }
    }
}

/// A declarative skill, read and checked: what its component will export.
#[derive(Debug, Clone)]
pub struct DeclarativeSkill {
    /// What the component's `manifest()` returns, byte for byte.
    raw: RawManifest,
    /// The same manifest as the host will resolve it.
    manifest: Manifest,
    instructions: String,
}

impl DeclarativeSkill {
    /// Reads and checks the skill file at `path`, in the format its
    /// extension says.
    pub fn read(path: &Path) -> Result<Self, PackError> {
        let format = Format::of(path).ok_or_else(|| PackError::UnknownFormat {
            path: path.to_owned(),
        })?;
        let text = std::fs::read_to_string(path).map_err(|source| PackError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text, format, path)
    }

    /// Reads and checks `text`, written in `format`. `file` names the input
    /// in errors.
    pub fn parse(text: &str, format: Format, file: &Path) -> Result<Self, PackError> {
        source::parse(text, format)
            .and_then(Draft::check)
            .map_err(|fault| fault.in_file(file))
    }

    /// The manifest, as the host will see it.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The instructions (the system prompt of the LLM-driven path).
    pub fn instructions(&self) -> &str {
        &self.instructions
    }

    /// Builds the instruction-only component. Deterministic: the same skill
    /// always gives the same bytes. The component is unsigned.
    pub fn to_component(&self) -> Result<Vec<u8>, EncodeError> {
        encode::component(&self.raw, &self.instructions)
    }

    /// The core module [`Self::to_component`] wraps ([`componentize`]),
    /// the `skill` world named in it as wit-bindgen names it in the module
    /// of a skill built with the guest SDK.
    pub fn to_module(&self) -> Result<Vec<u8>, EncodeError> {
        encode::module(&self.raw, &self.instructions)
    }
}

impl Draft {
    /// Applies the manifest rules and builds what the component exports.
    fn check(self) -> Result<DeclarativeSkill, Fault> {
        if self.instructions.value.trim().is_empty() {
            return Err(Fault {
                at: self.instructions.at,
                problem: Problem::EmptyInstructions(self.instructions.field),
            });
        }
        let test_cases = (1..)
            .zip(&self.test_cases)
            .map(|(number, case)| {
                let input = require("input", case.value.input.as_ref(), case.at)?;
                Ok(wit::TestCase {
                    name: (case.value.name.clone()).unwrap_or_else(|| format!("case {number}")),
                    input: input.to_string(),
                    expect_tools: case.value.expect_tools.clone(),
                    expect_contains: case.value.expect_contains.clone(),
                })
            })
            .collect::<Result<_, Fault>>()?;
        let values =
            |list: &[Located<String>]| list.iter().map(|item| item.value.clone()).collect();
        let raw = RawManifest {
            name: self.name.value.clone(),
            version: (self.version.as_ref())
                .map_or(DEFAULT_VERSION, |version| &version.value)
                .to_owned(),
            description: self.description.value.clone(),
            parameters: self.parameters.value.to_string(),
            tools: values(&self.tools),
            unlocks: values(&self.unlocks),
            has_steps: false,
            test_cases,
        };
        let (manifest, _) = Manifest::resolve(raw.clone(), &stand_in_tools(&raw))
            .map_err(|error| self.locate(error, &raw))?;
        Ok(DeclarativeSkill {
            raw,
            manifest,
            instructions: self.instructions.value,
        })
    }

    /// Points a manifest error at the field and line it is about.
    fn locate(&self, error: ManifestError, raw: &RawManifest) -> Fault {
        let mapping = |field: &str| (field.to_owned(), self.at);
        let (field, at) = match &error {
            ManifestError::InvalidName(_)
            | ManifestError::ReservedName(_)
            | ManifestError::NameIsATool(_) => self.name.place(),
            ManifestError::InvalidVersion { .. } => {
                (self.version.as_ref()).map_or_else(|| mapping("version"), Located::place)
            }
            ManifestError::EmptyDescription => self.description.place(),
            ManifestError::ParametersNotJson(_)
            | ManifestError::ParametersNotSchema(_)
            | ManifestError::ParametersNotObject => self.parameters.place(),
            ManifestError::InvalidToolName { field, tool }
            | ManifestError::UnknownTool { field, tool }
            | ManifestError::DuplicateTool { field, tool } => {
                let list = if *field == "unlocks" {
                    &self.unlocks
                } else {
                    &self.tools
                };
                // The last mention: for a duplicate, the repeat.
                (list.iter().rev().find(|item| item.value == *tool))
                    .map_or_else(|| mapping(field), Located::place)
            }
            ManifestError::InvalidTestCase { case, .. } => (raw.test_cases.iter())
                .position(|raw_case| raw_case.name == *case)
                .map_or_else(
                    || mapping("test_cases"),
                    |index| self.test_cases[index].place(),
                ),
        };
        Fault {
            at,
            problem: Problem::Manifest { field, error },
        }
    }
}

/// At pack time there is no tool registry. A registry of stand-ins named
/// after every declared tool lets [`Manifest::resolve`] apply all its other
/// rules (names, version, schema, duplicates, test cases); whether the tools
/// exist is checked when the component is loaded. A name no tool can have
/// gets no stand-in: `resolve` refuses it, at its line.
pub fn stand_in_tools(raw: &RawManifest) -> ToolRegistry {
    let mut registry = ToolRegistry::new();
    let names: BTreeSet<&String> = raw.tools.iter().chain(&raw.unlocks).collect();
    for name in names {
        let stand_in = StandIn::new(
            ToolSpec {
                name: name.clone(),
                description: String::new(),
                parameters: json!({ "type": "object" }),
                access: Access::Read,
            },
            "a pack-time stand-in is never executed",
        );
        // Names are distinct and the schema valid: only a name no tool can
        // have is refused, and `resolve` says so.
        let _ = registry.register(Arc::new(stand_in));
    }
    registry
}
