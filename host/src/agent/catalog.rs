//! What the main agent may see and call: progressive disclosure and
//! per-round masking.
//!
//! Rules (BRIEF.md, articles 003 and 000):
//! - **Disclosure.** Tools that skills exposed as functions use are
//!   *absorbed*: the skill calls them in its own scope, so the main agent does
//!   not see them — unless they are *keep-public*, or some skill unlocks them
//!   (unlock tools are governed by masking instead).
//! - **Masking.** `masked = ⋃ unlocks(all skills) − ⋃ unlocks(loaded skills)`,
//!   where a skill is loaded while its `load_skill` result is in context. A
//!   tool in no skill's unlocks is never masked; a tool several skills unlock
//!   is visible when any of them is loaded.
//!
//! A [`Catalog`] is computed once per skill snapshot; each round only
//! subtracts the masked set from prebuilt, shared function definitions.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::json;

use super::llm::ToolDefinition;
use super::tokens;
use crate::scope::{SkillScope, ToolScope};
use crate::skills::{LoadedSkill, Manifest, SkillName, SkillSnapshot};
use crate::tools::ToolRegistry;

pub use crate::skills::manifest::LOAD_SKILL;

/// How skills are offered to the main agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DisclosureConfig {
    /// Offer each skill as a function run by the scoped sub-agent (article
    /// 003). Default: on.
    pub skill_functions: bool,
    /// Hide tools absorbed by skill functions. Default: on.
    pub progressive_disclosure: bool,
    /// Tools that stay visible even when absorbed. Default: empty.
    pub keep_public: BTreeSet<String>,
    /// When to offer `load_skill`. Default: [`LoadSkillMode::WhenUnlocks`].
    pub load_skill: LoadSkillMode,
}

impl Default for DisclosureConfig {
    fn default() -> Self {
        Self {
            skill_functions: true,
            progressive_disclosure: true,
            keep_public: BTreeSet::new(),
            load_skill: LoadSkillMode::WhenUnlocks,
        }
    }
}

/// When the main agent gets the `load_skill` function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadSkillMode {
    /// Only when some skill unlocks tools, which is when loading matters.
    WhenUnlocks,
    /// Whenever there is at least one skill.
    Always,
    /// Never; skills are reachable only as functions.
    Never,
}

/// What a name in the main agent's function list refers to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Callable {
    /// A registered tool, executed directly.
    Tool(String),
    /// A skill, run by the scoped sub-agent executor.
    Skill(SkillName),
    /// The `load_skill` function.
    LoadSkill,
}

/// Why the main agent may not call a name this round.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// An unlock tool none of whose skills is loaded.
    #[error(
        "tool `{tool}` is locked: load one of these skills first with load_skill: {}; a \
         skill's tools unlock in the answer after the one that loads it",
        .skills.join(", ")
    )]
    Masked {
        /// The tool called.
        tool: String,
        /// The skills whose loading unlocks it.
        skills: Vec<String>,
    },
    /// A tool this run may not use: outside the run's [`ToolScope`], or an
    /// unlock tool nothing can unlock in it — the agent does not offer
    /// `load_skill` ([`LoadSkillMode::Never`]), or only skills outside the
    /// run's [`SkillScope`] unlock it.
    #[error("tool `{0}` is not available in this conversation; do without it")]
    Unavailable(String),
    /// A tool absorbed by skills (progressive disclosure).
    #[error("`{0}` is used inside skills and is not offered directly; call the skill instead")]
    Absorbed(String),
    /// Neither a tool, a skill nor `load_skill`.
    #[error("no function named `{0}` is available")]
    Unknown(String),
}

/// One function the main agent may be offered.
#[derive(Clone)]
struct Function {
    callable: Callable,
    definition: Arc<ToolDefinition>,
    /// Estimated tokens of the definition, computed once.
    tokens: usize,
}

impl Function {
    fn new(callable: Callable, definition: ToolDefinition) -> Self {
        let tokens = tokens::definition(&definition);
        Self {
            callable,
            definition: Arc::new(definition),
            tokens,
        }
    }
}

/// The functions offered in one round, in a stable order.
#[derive(Debug, Clone, Default)]
pub struct Functions {
    /// The definitions, shared with the catalog.
    pub definitions: Vec<Arc<ToolDefinition>>,
    /// Estimated tokens of the definitions as sent (see [`super::tokens`]).
    pub tokens: usize,
    /// Tools left out of this list by masking.
    pub masked: usize,
}

impl Functions {
    /// The functions' names, in order.
    pub fn names(&self) -> Vec<String> {
        self.definitions
            .iter()
            .map(|definition| definition.name().to_owned())
            .collect()
    }

    /// Whether a function of this name is offered.
    pub fn contains(&self, name: &str) -> bool {
        self.definitions
            .iter()
            .any(|definition| definition.name() == name)
    }

    fn collect<'a>(functions: impl Iterator<Item = &'a Function>) -> Self {
        let mut list = Self::default();
        for function in functions {
            list.definitions.push(function.definition.clone());
            list.tokens += function.tokens;
        }
        list
    }
}

/// The main agent's view of one skill snapshot over one tool registry.
pub struct Catalog {
    /// Everything the agent could be offered, in a stable order, with what
    /// each name refers to. Absorbed tools are already left out.
    offered: Vec<Function>,
    by_name: BTreeMap<String, usize>,
    absorbed: BTreeSet<String>,
    /// For each unlock tool, the skills in scope that unlock it.
    unlocked_by: BTreeMap<String, Vec<SkillName>>,
    /// Tools outside the run's tool scope, and unlock tools that only
    /// skills outside its skill scope unlock.
    unreachable: BTreeSet<String>,
    /// Every registered tool as a function, for skills' scopes.
    tools: BTreeMap<String, Function>,
    /// Whether `load_skill` is offered, so that unlock tools can be.
    offers_load_skill: bool,
}

impl Catalog {
    /// Computes what the main agent can be offered for this snapshot, in
    /// a run that may use the skills of `skill_scope` and the tools of
    /// `tool_scope`.
    pub fn new(
        tools: &ToolRegistry,
        skills: &SkillSnapshot,
        skill_scope: &SkillScope,
        tool_scope: &ToolScope,
        config: &DisclosureConfig,
    ) -> Self {
        let in_scope = |skill: &&LoadedSkill| skill_scope.allows(skill.component.name().as_str());
        let mut unlocked_by: BTreeMap<String, Vec<SkillName>> = BTreeMap::new();
        let mut out_of_scope_unlocks = BTreeSet::new();
        for skill in skills.skills() {
            let manifest = skill.component.manifest();
            for tool in &manifest.unlocks {
                if !tool_scope.allows(tool) {
                    continue;
                }
                if in_scope(&skill) {
                    unlocked_by
                        .entry(tool.clone())
                        .or_default()
                        .push(manifest.name.clone());
                } else {
                    out_of_scope_unlocks.insert(tool.clone());
                }
            }
        }
        // Outside the tool scope, or only a skill outside the skill scope
        // unlocks these: never offered.
        let unreachable: BTreeSet<String> = out_of_scope_unlocks
            .into_iter()
            .filter(|tool| !unlocked_by.contains_key(tool))
            .chain(
                tools
                    .specs()
                    .filter(|spec| !tool_scope.allows(&spec.name))
                    .map(|spec| spec.name.clone()),
            )
            .collect();
        let absorbed: BTreeSet<String> = if config.skill_functions && config.progressive_disclosure
        {
            skills
                .skills()
                .flat_map(|skill| skill.component.manifest().tools.iter())
                .filter(|tool| {
                    !config.keep_public.contains(*tool)
                        && !unlocked_by.contains_key(*tool)
                        && !unreachable.contains(*tool)
                })
                .cloned()
                .collect()
        } else {
            BTreeSet::new()
        };
        let tool_functions: BTreeMap<String, Function> = tools
            .specs()
            .map(|spec| {
                let definition = ToolDefinition::function(
                    &spec.name,
                    &spec.description,
                    spec.parameters.clone(),
                );
                let function = Function::new(Callable::Tool(spec.name.clone()), definition);
                (spec.name.clone(), function)
            })
            .collect();
        let mut offered: Vec<Function> = tool_functions
            .values()
            .filter(|function| {
                let name = function.definition.name();
                !absorbed.contains(name) && !unreachable.contains(name)
            })
            .cloned()
            .collect();
        if config.skill_functions {
            for skill in skills.skills().filter(in_scope) {
                let manifest = skill.component.manifest();
                let definition = ToolDefinition::function(
                    manifest.name.as_str(),
                    &manifest.description,
                    manifest.parameters.clone(),
                );
                offered.push(Function::new(
                    Callable::Skill(manifest.name.clone()),
                    definition,
                ));
            }
        }
        let offer_load_skill = match config.load_skill {
            LoadSkillMode::Always => skills.skills().any(|skill| in_scope(&skill)),
            LoadSkillMode::WhenUnlocks => !unlocked_by.is_empty(),
            LoadSkillMode::Never => false,
        };
        if offer_load_skill {
            offered.push(Function::new(
                Callable::LoadSkill,
                load_skill_definition(skills.skills().filter(in_scope), tool_scope),
            ));
        }
        let by_name = offered
            .iter()
            .enumerate()
            .map(|(index, function)| (function.definition.name().to_owned(), index))
            .collect();
        Self {
            offered,
            by_name,
            absorbed,
            unlocked_by,
            unreachable,
            tools: tool_functions,
            offers_load_skill: offer_load_skill,
        }
    }

    /// Tools masked this round, given the skills whose load result is in context.
    pub fn masked(&self, loaded: &BTreeSet<SkillName>) -> BTreeSet<&str> {
        self.unlocked_by
            .iter()
            .filter(|(_, skills)| !skills.iter().any(|skill| loaded.contains(skill)))
            .map(|(tool, _)| tool.as_str())
            .collect()
    }

    /// The function list for one round.
    pub fn functions(&self, loaded: &BTreeSet<SkillName>) -> Functions {
        let masked = self.masked(loaded);
        let mut functions = Functions::collect(self.offered.iter().filter(|function| {
            !matches!(&function.callable, Callable::Tool(tool) if masked.contains(tool.as_str()))
        }));
        functions.masked = masked.len();
        functions
    }

    /// The function list of a skill's sub-agent: exactly the tools its
    /// manifest declares, whatever the main agent's disclosure and masking.
    pub fn scope(&self, manifest: &Manifest) -> Functions {
        // `Manifest::resolve` guarantees every declared tool is registered.
        Functions::collect(
            manifest
                .tools
                .iter()
                .filter_map(|tool| self.tools.get(tool)),
        )
    }

    /// Re-checks a call at execution time: the model may call a name it saw
    /// in an earlier round or in a message, not in this round's list.
    pub fn resolve(&self, name: &str, loaded: &BTreeSet<SkillName>) -> Result<Callable, Refusal> {
        if self.unreachable.contains(name) {
            return Err(Refusal::Unavailable(name.to_owned()));
        }
        if let Some(skills) = self.unlocked_by.get(name)
            && !skills.iter().any(|skill| loaded.contains(skill))
        {
            if !self.offers_load_skill {
                return Err(Refusal::Unavailable(name.to_owned()));
            }
            return Err(Refusal::Masked {
                tool: name.to_owned(),
                skills: skills.iter().map(ToString::to_string).collect(),
            });
        }
        if self.absorbed.contains(name) {
            return Err(Refusal::Absorbed(name.to_owned()));
        }
        self.by_name
            .get(name)
            .map(|&index| self.offered[index].callable.clone())
            .ok_or_else(|| Refusal::Unknown(name.to_owned()))
    }
}

/// `load_skill(skill)`: its description lists the skills, and tells the
/// model that some tools appear only once the matching skill is loaded, so
/// that the skill list — not this round's tool list — decides what is
/// possible.
fn load_skill_definition<'a>(
    skills: impl Iterator<Item = &'a LoadedSkill>,
    tool_scope: &ToolScope,
) -> ToolDefinition {
    let mut description = String::from(
        "Load a skill's instructions (its procedure) into the conversation before handling a task it covers.\n\
         Some business tools appear in your tool list only after the skill that governs them is loaded: \
         do not decide that a task is unsupported from the current tool list; decide from this skill list.\n\
         Skills:\n",
    );
    let mut names = Vec::new();
    for skill in skills {
        let manifest = skill.component.manifest();
        description.push_str(&format!("- {}: {}", manifest.name, manifest.description));
        let unlocks: Vec<&str> = manifest
            .unlocks
            .iter()
            .map(String::as_str)
            .filter(|tool| tool_scope.allows(tool))
            .collect();
        if !unlocks.is_empty() {
            description.push_str(&format!(" (unlocks: {})", unlocks.join(", ")));
        }
        description.push('\n');
        names.push(manifest.name.as_str());
    }
    ToolDefinition::function(
        LOAD_SKILL,
        description.trim_end(),
        json!({
            "type": "object",
            "properties": { "skill": { "type": "string", "enum": names, "description": "The skill to load." } },
            "required": ["skill"],
            "additionalProperties": false
        }),
    )
}
