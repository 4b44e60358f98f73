//! The two input formats, read into a [`Draft`]: every value with the field
//! it came from and its place in the file.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeOwned, Deserializer, SeqAccess, Visitor};
use serde_json::{Value, json};
use serde_saphyr::{Location, MessageFormatter, Spanned};

use super::{Fault, Format, Position, Problem};

/// A value read from the input, with the field it came from (as the input
/// spells it) and where.
#[derive(Debug)]
pub(super) struct Located<T> {
    pub value: T,
    pub field: String,
    pub at: Position,
}

impl<T> Located<T> {
    /// The field and position, for an error about this value.
    pub fn place(&self) -> (String, Position) {
        (self.field.clone(), self.at)
    }
}

/// A skill as written, before any rule is checked.
#[derive(Debug)]
pub(super) struct Draft {
    /// Where the YAML mapping starts: the place of a missing field.
    pub at: Position,
    pub name: Located<String>,
    pub version: Option<Located<String>>,
    pub description: Located<String>,
    pub parameters: Located<Value>,
    pub tools: Vec<Located<String>>,
    pub unlocks: Vec<Located<String>>,
    pub test_cases: Vec<Located<TestCase>>,
    pub instructions: Located<String>,
}

/// One entry of `test_cases`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TestCase {
    /// Default: `case <n>`, counting from 1.
    pub name: Option<String>,
    /// Required: the skill's input, an object matching `parameters`.
    pub input: Option<Value>,
    #[serde(default)]
    pub expect_tools: Vec<String>,
    #[serde(default)]
    pub expect_contains: Vec<String>,
}

/// The articles' skill file. Required fields are `Option`s so that a
/// missing one is reported at the mapping, by name.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SkillYaml {
    name: Option<Spanned<String>>,
    description: Option<Spanned<String>>,
    version: Option<Spanned<String>>,
    tools: Option<Vec<Spanned<String>>>,
    parameters: Option<Spanned<Value>>,
    instructions: Option<Spanned<String>>,
    #[serde(default)]
    unlocks: Vec<Spanned<String>>,
    #[serde(default)]
    test_cases: Vec<Spanned<TestCase>>,
}

/// The front matter of an Agent Skills `SKILL.md`, plus skillhost's
/// optional `version`, `parameters`, `unlocks` and `test_cases`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FrontMatter {
    name: Option<Spanned<String>>,
    description: Option<Spanned<String>>,
    #[serde(rename = "allowed-tools")]
    allowed_tools: Option<Spanned<ToolList>>,
    /// Agent Skills' license name; must be text, is not carried into the
    /// component (the manifest has no such field).
    #[serde(rename = "license")]
    _license: Option<String>,
    /// Agent Skills' environment requirements; must be text, is not carried
    /// into the component.
    #[serde(rename = "compatibility")]
    _compatibility: Option<String>,
    /// Agent Skills' string-to-string map; `metadata.version` is the skill's
    /// version, the other keys are not carried into the component.
    #[serde(default)]
    metadata: BTreeMap<String, Spanned<String>>,
    version: Option<Spanned<String>>,
    parameters: Option<Spanned<Value>>,
    #[serde(default)]
    unlocks: Vec<Spanned<String>>,
    #[serde(default)]
    test_cases: Vec<Spanned<TestCase>>,
}

/// `allowed-tools`: tool names separated by spaces or commas (the Agent
/// Skills form), or a YAML list of names.
struct ToolList(Vec<String>);

impl<'de> Deserialize<'de> for ToolList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ToolListVisitor;

        impl<'de> Visitor<'de> for ToolListVisitor {
            type Value = ToolList;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("tool names separated by spaces or commas, or a list of tool names")
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<ToolList, E> {
                let names = text
                    .split(|c: char| c.is_whitespace() || c == ',')
                    .filter(|name| !name.is_empty())
                    .map(str::to_owned);
                Ok(ToolList(names.collect()))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<ToolList, A::Error> {
                let mut names = Vec::new();
                while let Some(name) = items.next_element()? {
                    names.push(name);
                }
                Ok(ToolList(names))
            }
        }

        deserializer.deserialize_any(ToolListVisitor)
    }
}

/// The version of a skill that does not state one.
pub const DEFAULT_VERSION: &str = "0.1.0";

/// The input schema of a `SKILL.md` without `parameters`: the user's request
/// as text.
fn default_parameters() -> Value {
    json!({
        "type": "object",
        "properties": {
            "request": { "type": "string", "description": "What the user asked for" }
        },
        "required": ["request"]
    })
}

/// Reads `text` in `format`.
pub(super) fn parse(text: &str, format: Format) -> Result<Draft, Fault> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    match format {
        Format::Yaml => parse_yaml(text),
        Format::SkillMd => parse_skill_md(text),
    }
}

fn parse_yaml(text: &str) -> Result<Draft, Fault> {
    let yaml = Yaml { first_line: 1 };
    let (doc, at) = yaml.parse::<SkillYaml>(text)?;
    Ok(Draft {
        at,
        name: yaml.required("name", doc.name, at)?,
        version: doc.version.map(|v| yaml.located("version", v)),
        description: yaml.required("description", doc.description, at)?,
        tools: yaml.list("tools", require("tools", doc.tools, at)?),
        parameters: yaml.required("parameters", doc.parameters, at)?,
        unlocks: yaml.list("unlocks", doc.unlocks),
        test_cases: yaml.list("test_cases", doc.test_cases),
        instructions: yaml.required("instructions", doc.instructions, at)?,
    })
}

fn parse_skill_md(text: &str) -> Result<Draft, Fault> {
    let parts = split_front_matter(text)?;
    let yaml = Yaml {
        first_line: parts.front_matter_line,
    };
    let (mut doc, at) = yaml.parse::<FrontMatter>(parts.front_matter)?;
    let version = match (doc.version, doc.metadata.remove("version")) {
        (Some(_), Some(second)) => {
            return Err(Fault {
                at: yaml.position(&second.referenced),
                problem: Problem::TwoVersions,
            });
        }
        (Some(version), None) => Some(yaml.located("version", version)),
        (None, Some(version)) => Some(yaml.located("metadata.version", version)),
        (None, None) => None,
    };
    let tools = match doc.allowed_tools {
        Some(list) => {
            let at = yaml.position(&list.referenced);
            (list.value.0.into_iter())
                .map(|value| Located {
                    value,
                    field: "allowed-tools".to_owned(),
                    at,
                })
                .collect()
        }
        None => Vec::new(),
    };
    Ok(Draft {
        at,
        name: yaml.required("name", doc.name, at)?,
        version,
        description: yaml.required("description", doc.description, at)?,
        tools,
        parameters: match doc.parameters {
            Some(parameters) => yaml.located("parameters", parameters),
            None => Located {
                value: default_parameters(),
                field: "parameters".to_owned(),
                at,
            },
        },
        unlocks: yaml.list("unlocks", doc.unlocks),
        test_cases: yaml.list("test_cases", doc.test_cases),
        instructions: Located {
            value: parts.body.to_owned(),
            field: "the Markdown body".to_owned(),
            at: Position {
                line: parts.body_line,
                column: 1,
            },
        },
    })
}

/// A `SKILL.md` cut in two.
struct SkillMdParts<'a> {
    front_matter: &'a str,
    /// The file line of the front matter's first line.
    front_matter_line: u64,
    /// The body without its leading blank lines and trailing whitespace.
    body: &'a str,
    /// The file line where `body` starts.
    body_line: u64,
}

/// Splits a `SKILL.md` into its front matter (between a first line `---`
/// and the next line `---`) and the Markdown body after it.
fn split_front_matter(text: &str) -> Result<SkillMdParts<'_>, Fault> {
    let start = Position { line: 1, column: 1 };
    let mut lines = text.split_inclusive('\n');
    if lines.next().map(str::trim_end) != Some("---") {
        return Err(Fault {
            at: start,
            problem: Problem::NoFrontMatter,
        });
    }
    let front_matter_start = text.find('\n').map_or(text.len(), |end| end + 1);
    let mut offset = front_matter_start;
    for (line_number, line) in (2..).zip(lines) {
        if line.trim_end() == "---" {
            let mut body_line = line_number + 1;
            let mut body = &text[offset + line.len()..];
            while let Some((first, rest)) = body.split_once('\n')
                && first.trim().is_empty()
            {
                body = rest;
                body_line += 1;
            }
            return Ok(SkillMdParts {
                front_matter: &text[front_matter_start..offset],
                front_matter_line: 2,
                body: body.trim_end(),
                body_line,
            });
        }
        offset += line.len();
    }
    Err(Fault {
        at: start,
        problem: Problem::UnclosedFrontMatter,
    })
}

/// YAML that starts at line `first_line` of the input file.
struct Yaml {
    first_line: u64,
}

impl Yaml {
    /// Deserializes `text` (one YAML mapping) and returns it with the
    /// position where it starts.
    fn parse<T: DeserializeOwned>(&self, text: &str) -> Result<(T, Position), Fault> {
        let options = serde_saphyr::options! {
            // YAML 1.2: `yes`, `no`, `on` and `off` stay text.
            strict_booleans: true,
            // Errors are reported as file:line:column, without a snippet.
            with_snippet: false,
        };
        match serde_saphyr::from_str_with_options::<Spanned<T>>(text, options) {
            Ok(doc) => Ok((doc.value, self.position(&doc.referenced))),
            Err(error) => Err(Fault {
                at: error.location().map_or(
                    Position {
                        line: self.first_line,
                        column: 1,
                    },
                    |location| self.position(&location),
                ),
                problem: Problem::Yaml(
                    serde_saphyr::DefaultMessageFormatter
                        .format_message(&error)
                        .into_owned(),
                ),
            }),
        }
    }

    /// The file position of a YAML location.
    fn position(&self, location: &Location) -> Position {
        Position {
            line: location.line() + self.first_line - 1,
            column: location.column(),
        }
    }

    fn located<T>(&self, field: &str, value: Spanned<T>) -> Located<T> {
        Located {
            at: self.position(&value.referenced),
            value: value.value,
            field: field.to_owned(),
        }
    }

    /// The elements of the list `field`, each named `field[index]`.
    fn list<T>(&self, field: &str, items: Vec<Spanned<T>>) -> Vec<Located<T>> {
        (items.into_iter().enumerate())
            .map(|(index, item)| self.located(&format!("{field}[{index}]"), item))
            .collect()
    }

    fn required<T>(
        &self,
        field: &'static str,
        value: Option<Spanned<T>>,
        mapping: Position,
    ) -> Result<Located<T>, Fault> {
        Ok(self.located(field, require(field, value, mapping)?))
    }
}

/// A required field's value, or an error at `mapping`, the place of the
/// mapping that lacks it.
pub(super) fn require<T>(
    field: &'static str,
    value: Option<T>,
    mapping: Position,
) -> Result<T, Fault> {
    value.ok_or(Fault {
        at: mapping,
        problem: Problem::MissingField(field),
    })
}
