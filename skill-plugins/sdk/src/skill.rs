//! The description of a skill: the data behind the `manifest` and
//! `instructions` exports.

use serde::Serialize;
use serde_json::{Value, json};

use crate::bindings::skillhost::skill::types;

/// Everything a skill declares, built by the function passed to
/// [`export_skill!`](crate::export_skill) when the host reads the manifest or
/// the instructions (never on `run`, which stays cheap).
///
/// `has-steps` is not set by hand: it is true exactly when steps are given to
/// [`export_skill!`](crate::export_skill).
pub struct Skill {
    name: &'static str,
    version: Option<&'static str>,
    description: &'static str,
    parameters: Value,
    tools: Vec<&'static str>,
    unlocks: Vec<&'static str>,
    instructions: &'static str,
    test_cases: Vec<TestCase>,
}

impl Skill {
    /// Starts a skill named `name`: the function name an LLM calls, e.g.
    /// `processRefund` (ASCII letters, digits, `_` and `-`, starting with a
    /// letter; the host refuses other names).
    ///
    /// Defaults: version = the skill crate's version, no tools, no unlocks, no
    /// test cases, and parameters `{"type": "object", "properties":
    /// {}, "additionalProperties": false}` (takes no input).
    pub fn new(name: &'static str) -> Self {
        Skill {
            name,
            version: None,
            description: "",
            parameters: json!({ "type": "object", "properties": {}, "additionalProperties": false }),
            tools: Vec::new(),
            unlocks: Vec::new(),
            instructions: "",
            test_cases: Vec::new(),
        }
    }

    /// Overrides the semantic version (default: the crate's `CARGO_PKG_VERSION`).
    pub fn version(mut self, version: &'static str) -> Self {
        self.version = Some(version);
        self
    }

    /// What the skill does and when to use it; the LLM reads this to decide
    /// whether to call the skill.
    pub fn description(mut self, description: &'static str) -> Self {
        self.description = description;
        self
    }

    /// The JSON Schema of the skill's input; must describe an object.
    pub fn parameters(mut self, schema: Value) -> Self {
        self.parameters = schema;
        self
    }

    /// The only tools the skill may call, on either path. The host refuses
    /// calls to any other tool with [`ToolErrorKind::NotPermitted`](crate::ToolErrorKind::NotPermitted).
    pub fn tools(mut self, tools: impl IntoIterator<Item = &'static str>) -> Self {
        self.tools = tools.into_iter().collect();
        self
    }

    /// Tools the main agent sees only while this skill's instructions are
    /// loaded in its context (`load_skill`).
    pub fn unlocks(mut self, tools: impl IntoIterator<Item = &'static str>) -> Self {
        self.unlocks = tools.into_iter().collect();
        self
    }

    /// The system prompt of the LLM-driven path, typically
    /// `include_str!("../instructions.md")`.
    pub fn instructions(mut self, instructions: &'static str) -> Self {
        self.instructions = instructions;
        self
    }

    /// Adds a regression case that `skillhost test` runs.
    pub fn test_case(mut self, case: TestCase) -> Self {
        self.test_cases.push(case);
        self
    }

    pub(crate) fn into_manifest(
        self,
        crate_version: &'static str,
        has_steps: bool,
    ) -> types::Manifest {
        let strings = |names: Vec<&'static str>| names.into_iter().map(String::from).collect();
        types::Manifest {
            name: self.name.to_owned(),
            version: self.version.unwrap_or(crate_version).to_owned(),
            description: self.description.to_owned(),
            parameters: self.parameters.to_string(),
            tools: strings(self.tools),
            unlocks: strings(self.unlocks),
            has_steps,
            test_cases: self
                .test_cases
                .into_iter()
                .map(TestCase::into_wit)
                .collect(),
        }
    }

    pub(crate) fn instructions_text(&self) -> &'static str {
        self.instructions
    }

}

/// How deterministic steps ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The final result as JSON text; the main agent sees only this.
    /// [`Outcome::done`] builds it from a JSON value.
    Done(String),
    /// The steps cannot finish alone: the LLM-driven path continues with the
    /// skill's instructions and this note (what was done, what is left).
    Handover(String),
}

impl Outcome {
    /// Finishes with `result` as the skill's final result: a JSON value
    /// (e.g. built with [`json!`](crate::json)) or any `Serialize` type.
    ///
    /// # Panics
    ///
    /// When `result` cannot be represented as JSON (a map with non-string
    /// keys): a bug in the skill, reported to the host as a trap with this
    /// message.
    pub fn done(result: impl Serialize) -> Self {
        match serde_json::to_string(&result) {
            Ok(json) => Outcome::Done(json),
            Err(e) => panic!("the skill's result is not representable as JSON: {e}"),
        }
    }

    /// Hands the rest of the job to the LLM-driven path, with a note for it.
    pub fn handover(note: impl Into<String>) -> Self {
        Outcome::Handover(note.into())
    }
}

/// A regression case shipped with the skill and run by `skillhost test`.
#[derive(Debug, Clone)]
pub struct TestCase {
    name: &'static str,
    input: Value,
    expect_tools: Vec<&'static str>,
    expect_contains: Vec<&'static str>,
}

impl TestCase {
    /// A case labelled `name` that calls the skill with `input`.
    pub fn new(name: &'static str, input: Value) -> Self {
        TestCase {
            name,
            input,
            expect_tools: Vec::new(),
            expect_contains: Vec::new(),
        }
    }

    /// Tools that must have been called, in any order.
    pub fn expect_tools(mut self, tools: impl IntoIterator<Item = &'static str>) -> Self {
        self.expect_tools = tools.into_iter().collect();
        self
    }

    /// Substrings the final result must contain.
    pub fn expect_contains(mut self, needles: impl IntoIterator<Item = &'static str>) -> Self {
        self.expect_contains = needles.into_iter().collect();
        self
    }

    fn into_wit(self) -> types::TestCase {
        types::TestCase {
            name: self.name.to_owned(),
            input: serde_json::to_string(&self.input).expect("a JSON value always serializes"),
            expect_tools: self.expect_tools.into_iter().map(String::from).collect(),
            expect_contains: self.expect_contains.into_iter().map(String::from).collect(),
        }
    }
}
