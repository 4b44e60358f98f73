//! The manifest a skill exports, checked and resolved.
//!
//! A component's `manifest()` returns the raw WIT record
//! ([`RawManifest`]); [`Manifest::resolve`] turns it into a [`Manifest`] only
//! when every field holds, so code past this point never re-checks.

use std::collections::BTreeSet;
use std::fmt;

use serde::Serialize;
use serde_json::Value;

use crate::runtime::bindings::skillhost::skill::types as wit;
use crate::tools::ToolRegistry;

/// The manifest record exactly as the guest returned it.
pub type RawManifest = wit::Manifest;

/// The name of the function the main agent's tool list reserves for
/// `load_skill`; no skill may take it.
pub const LOAD_SKILL: &str = "load_skill";

/// Whether `name` can name a function an LLM calls (a skill or a tool):
/// ASCII letter first, then letters, digits, `_` or `-`, at most 64 bytes.
pub(crate) fn is_function_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 64
        && chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// A skill's name: what an LLM calls. ASCII letter first, then letters,
/// digits, `_` or `-`, at most 64 bytes (the limit OpenAI-compatible APIs put
/// on function names).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct SkillName(String);

impl SkillName {
    pub fn new(name: &str) -> Result<Self, ManifestError> {
        if !is_function_name(name) {
            return Err(ManifestError::InvalidName(name.to_owned()));
        }
        if name == LOAD_SKILL {
            return Err(ManifestError::ReservedName(name.to_owned()));
        }
        Ok(Self(name.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Read back (a kept run names its skill), a name is checked as when a
/// manifest gives it.
impl<'de> serde::Deserialize<'de> for SkillName {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        Self::new(&name).map_err(serde::de::Error::custom)
    }
}

impl std::borrow::Borrow<str> for SkillName {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SkillName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

/// A case `skillhost test` runs against the skill.
#[derive(Debug, Clone, Serialize)]
pub struct TestCase {
    pub name: String,
    pub input: Value,
    pub expect_tools: Vec<String>,
    pub expect_contains: Vec<String>,
}

/// A manifest whose every field has been checked.
#[derive(Debug, Clone, Serialize)]
pub struct Manifest {
    pub name: SkillName,
    pub version: semver::Version,
    pub description: String,
    /// JSON Schema of the input; always `"type": "object"`.
    pub parameters: Value,
    /// The only tools the skill may call; no duplicates, all registered.
    pub tools: Vec<String>,
    /// Tools unlocked for the main agent by `load_skill`; all registered.
    pub unlocks: Vec<String>,
    pub has_steps: bool,
    pub test_cases: Vec<TestCase>,
}

/// Why a manifest was refused. Each variant names the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ManifestError {
    #[error(
        "name `{0}` is not a usable function name (an ASCII letter, then letters, digits, `_` or `-`, at most 64 bytes)"
    )]
    InvalidName(String),
    #[error("name `{0}` is reserved by the host")]
    ReservedName(String),
    #[error("name `{0}` is already the name of a tool")]
    NameIsATool(String),
    #[error("version `{version}` is not semantic versioning: {reason}")]
    InvalidVersion { version: String, reason: String },
    #[error("description is empty")]
    EmptyDescription,
    #[error("parameters is not valid JSON: {0}")]
    ParametersNotJson(String),
    #[error("parameters is not a valid JSON Schema: {0}")]
    ParametersNotSchema(String),
    #[error("parameters must describe an object (`\"type\": \"object\"`)")]
    ParametersNotObject,
    #[error(
        "{field} lists `{tool}`, which cannot be a tool's name (an ASCII letter, then letters, \
         digits, `_` or `-`, at most 64 bytes; not `load_skill`)"
    )]
    InvalidToolName { field: &'static str, tool: String },
    #[error("{field} lists `{tool}`, which is not a registered tool")]
    UnknownTool { field: &'static str, tool: String },
    #[error("{field} lists `{tool}` more than once")]
    DuplicateTool { field: &'static str, tool: String },
    #[error("test case `{case}`: {reason}")]
    InvalidTestCase { case: String, reason: String },
}

impl Manifest {
    /// Checks every field of `raw` and resolves tool names against `tools`.
    /// Returns the manifest and the compiled validator of its input schema.
    pub fn resolve(
        raw: RawManifest,
        tools: &ToolRegistry,
    ) -> Result<(Manifest, jsonschema::Validator), ManifestError> {
        let name = SkillName::new(&raw.name)?;
        let version =
            semver::Version::parse(&raw.version).map_err(|e| ManifestError::InvalidVersion {
                version: raw.version.clone(),
                reason: e.to_string(),
            })?;
        if raw.description.trim().is_empty() {
            return Err(ManifestError::EmptyDescription);
        }
        let parameters: Value = serde_json::from_str(&raw.parameters)
            .map_err(|e| ManifestError::ParametersNotJson(e.to_string()))?;
        if parameters.get("type").and_then(Value::as_str) != Some("object") {
            return Err(ManifestError::ParametersNotObject);
        }
        let validator = jsonschema::validator_for(&parameters)
            .map_err(|e| ManifestError::ParametersNotSchema(e.to_string()))?;
        check_tool_list("tools", &raw.tools)?;
        check_tool_list("unlocks", &raw.unlocks)?;
        let test_cases = raw
            .test_cases
            .into_iter()
            .map(|case| resolve_test_case(case, &validator))
            .collect::<Result<_, _>>()?;
        let manifest = Manifest {
            name,
            version,
            description: raw.description,
            parameters,
            tools: raw.tools,
            unlocks: raw.unlocks,
            has_steps: raw.has_steps,
            test_cases,
        };
        manifest.check_against(tools)?;
        Ok((manifest, validator))
    }

    /// Whether the manifest fits `tools`: every tool it calls or unlocks
    /// is registered, and its name is not a tool's. Checked at load, and
    /// again when the tools change under a loaded skill.
    pub fn check_against(&self, tools: &ToolRegistry) -> Result<(), ManifestError> {
        if tools.contains(self.name.as_str()) {
            return Err(ManifestError::NameIsATool(self.name.to_string()));
        }
        let listed = [("tools", &self.tools), ("unlocks", &self.unlocks)];
        for (field, names) in listed {
            if let Some(tool) = names.iter().find(|tool| !tools.contains(tool)) {
                return Err(ManifestError::UnknownTool {
                    field,
                    tool: tool.clone(),
                });
            }
        }
        Ok(())
    }
}

/// The tool names `field` lists, checked as names: callable, not
/// `load_skill`, each once.
fn check_tool_list(field: &'static str, names: &[String]) -> Result<(), ManifestError> {
    let mut seen = BTreeSet::new();
    for tool in names {
        if !is_function_name(tool) || tool == LOAD_SKILL {
            return Err(ManifestError::InvalidToolName {
                field,
                tool: tool.clone(),
            });
        }
        if !seen.insert(tool) {
            return Err(ManifestError::DuplicateTool {
                field,
                tool: tool.clone(),
            });
        }
    }
    Ok(())
}

fn resolve_test_case(
    case: wit::TestCase,
    validator: &jsonschema::Validator,
) -> Result<TestCase, ManifestError> {
    let invalid = |reason: String| ManifestError::InvalidTestCase {
        case: case.name.clone(),
        reason,
    };
    let input: Value = serde_json::from_str(&case.input)
        .map_err(|e| invalid(format!("input is not valid JSON: {e}")))?;
    crate::schema::check(validator, &input).map_err(|violations| {
        invalid(format!(
            "input does not match the parameters schema: {violations}"
        ))
    })?;
    Ok(TestCase {
        name: case.name,
        input,
        expect_tools: case.expect_tools,
        expect_contains: case.expect_contains,
    })
}
