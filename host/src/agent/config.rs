//! How the agent behaves. Every default is set and documented here.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::catalog::DisclosureConfig;
use crate::tools::{Access, ToolRegistry, ToolSpec};

/// The main agent's default system prompt. Deliberately generic: embedders
/// put their domain in [`AgentConfig::system_prompt`].
pub const DEFAULT_SYSTEM_PROMPT: &str = "You are a helpful assistant. Use the functions you are \
    offered to act on the user's behalf; skills are functions that carry out a whole procedure, \
    so prefer a skill to calling its tools one by one. When a function reports an error or that \
    the user declined it, explain the outcome to the user instead of retrying. Answer in the \
    user's language.";

/// Settings of an [`Agent`](super::Agent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentConfig {
    /// The main agent's system prompt, first in every run; a
    /// conversation's leading system messages are added after it, never in
    /// its place. Default: [`DEFAULT_SYSTEM_PROMPT`].
    pub system_prompt: String,
    /// LLM rounds the main agent may take in one run. The last one asks
    /// the model to answer in text (`tool_choice: "none"`); calls it makes
    /// anyway are refused unexecuted (nobody would read their results) and
    /// the run ends with
    /// [`AgentError::RoundLimit`](super::AgentError::RoundLimit).
    /// Default: 10 (issue 4) — the articles' flows take 2 or 3.
    pub max_rounds: u32,
    /// LLM rounds a skill's sub-agent may take in one invocation, the last
    /// one as [`Self::max_rounds`]'s; a skill whose model still calls
    /// fails, and the main agent is told. Default: 5 (article 003's scoped
    /// sub-agent).
    pub skill_max_rounds: u32,
    /// How many calls of one answer of the model run; the rest are refused
    /// unexecuted, and the model is told to make them in its next answer.
    /// Default: 16 — above the parallel calls a task needs, and a bound on
    /// what one answer (up to 16 MiB) can set off: each call of a skill may
    /// start a sub-agent of its own.
    pub max_calls_per_answer: u32,
    /// How many identical calls (same function, same arguments up to key
    /// order) one loop may make. The call that reaches this number is not
    /// executed; the model is told it repeats itself. One more ends the loop
    /// with [`AgentError::RepeatedCall`](super::AgentError::RepeatedCall).
    /// Default: 3 — two identical calls can be a legitimate re-check, a
    /// third is a model going in circles. Values below 2 count as 2. A call
    /// whose turn compaction evicted stops counting: the model no longer
    /// sees its result.
    pub max_identical_calls: u32,
    /// Context budget in estimated tokens (see [`super::tokens`]): the
    /// messages plus the round's function list. Over it, the oldest turns
    /// are evicted before the round (see [`Transcript::compact`]). A tool's
    /// or skill's result longer than a quarter of it (and than 1,000
    /// tokens) is cut, saying so.
    /// Default: 32,000 — within every context window the client targets,
    /// with room left for the answer.
    ///
    /// [`Transcript::compact`]: super::Transcript::compact
    pub context_budget: usize,
    /// Run a skill's deterministic steps when it has them. `false` sends
    /// every skill down the LLM-driven path (to compare the two, or when the
    /// steps are distrusted). Default: true.
    pub use_steps: bool,
    /// What the main agent is offered.
    pub disclosure: DisclosureConfig,
    /// Which calls need a person's approval.
    pub confirmation: ConfirmationPolicy,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            system_prompt: DEFAULT_SYSTEM_PROMPT.to_owned(),
            max_rounds: 10,
            skill_max_rounds: 5,
            max_calls_per_answer: 16,
            max_identical_calls: 3,
            context_budget: 32_000,
            use_steps: true,
            disclosure: DisclosureConfig::default(),
            confirmation: ConfirmationPolicy::default(),
        }
    }
}

/// Which tool calls wait for a person's approval, and for how long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfirmationPolicy {
    /// Whether write tools ([`Access::Write`]) need approval. Default: true
    /// (fail closed: a write runs unattended only when configured so).
    pub require_for_writes: bool,
    /// Per-tool exceptions: `true` always asks (even for a read), `false`
    /// never asks (auto-approve). Default: none.
    pub overrides: BTreeMap<String, bool>,
    /// How long a pending confirmation waits. An unanswered confirmation
    /// expires and counts as a rejection. Default: 10 minutes — long enough
    /// for a person to read a confirmation card, short enough that an
    /// abandoned run does not hold its resources for long. At most
    /// [`MAX_EXPIRY`](super::MAX_EXPIRY) (30 days) is used.
    pub expiry: Duration,
    /// Whether an approval must come from someone other than the principal
    /// the run acts for (four eyes): an approval on behalf of that principal,
    /// or of nobody, is refused ([`ConfirmError::SameApprover`]); anyone may
    /// still reject. Default: false (a chat user approves their own request).
    ///
    /// [`ConfirmError::SameApprover`]: super::ConfirmError::SameApprover
    pub separate_approver: bool,
    /// Who may approve a call (principals: API keys' names, users' ids),
    /// unless [`Self::tool_approvers`] names the tool: an approval on behalf
    /// of anyone else, or of nobody, is refused
    /// ([`ConfirmError::NotAnApprover`]); anyone may still reject. An empty
    /// set lets nobody approve. Default: `None`, anyone may approve.
    ///
    /// [`ConfirmError::NotAnApprover`]: super::ConfirmError::NotAnApprover
    pub approvers: Option<BTreeSet<String>>,
    /// Who may approve a call of a given tool, in place of
    /// [`Self::approvers`]: e.g. refunds by the finance desk alone.
    /// Default: none.
    pub tool_approvers: BTreeMap<String, BTreeSet<String>>,
}

impl Default for ConfirmationPolicy {
    fn default() -> Self {
        Self {
            require_for_writes: true,
            overrides: BTreeMap::new(),
            expiry: Duration::from_secs(600),
            separate_approver: false,
            approvers: None,
            tool_approvers: BTreeMap::new(),
        }
    }
}

impl ConfirmationPolicy {
    /// A policy that never asks: every call runs unattended.
    pub fn never() -> Self {
        Self {
            require_for_writes: false,
            ..Self::default()
        }
    }

    /// Lets `tool` run without approval.
    pub fn auto_approve(mut self, tool: impl Into<String>) -> Self {
        self.overrides.insert(tool.into(), false);
        self
    }

    /// Makes `tool` always ask, even when it only reads.
    pub fn always_ask(mut self, tool: impl Into<String>) -> Self {
        self.overrides.insert(tool.into(), true);
        self
    }

    /// Makes every approval come from someone other than the principal the
    /// run acts for ([`Self::separate_approver`]).
    pub fn require_separate_approver(mut self) -> Self {
        self.separate_approver = true;
        self
    }

    /// Lets only `principals` approve a call ([`Self::approvers`]).
    pub fn approvers<S: Into<String>>(mut self, principals: impl IntoIterator<Item = S>) -> Self {
        self.approvers = Some(principals.into_iter().map(Into::into).collect());
        self
    }

    /// Lets only `principals` approve a call of `tool`
    /// ([`Self::tool_approvers`]).
    pub fn tool_approvers<S: Into<String>>(
        mut self,
        tool: impl Into<String>,
        principals: impl IntoIterator<Item = S>,
    ) -> Self {
        let principals = principals.into_iter().map(Into::into).collect();
        self.tool_approvers.insert(tool.into(), principals);
        self
    }

    /// Who may approve a call of `tool`: `None` when anyone may.
    pub fn approvers_of(&self, tool: &str) -> Option<&BTreeSet<String>> {
        self.tool_approvers.get(tool).or(self.approvers.as_ref())
    }

    /// Checks that every per-tool setting names a tool of `tools`: a
    /// misspelt name would leave the tool it meant to the default, e.g. a
    /// read meant to ask running unattended, or a refund anyone may approve.
    pub fn check(&self, tools: &ToolRegistry) -> Result<(), UnknownPolicyTool> {
        let mut settings = self
            .overrides
            .iter()
            .map(|(tool, &asks)| (tool, if asks { "always_ask" } else { "auto_approve" }))
            .chain(
                self.tool_approvers
                    .keys()
                    .map(|tool| (tool, "tool_approvers")),
            );
        let Some((tool, setting)) = settings.find(|(tool, _)| !tools.contains(tool)) else {
            return Ok(());
        };
        let known: Vec<&str> = tools.specs().map(|spec| spec.name.as_str()).collect();
        let meant = known
            .iter()
            .find(|known| known.eq_ignore_ascii_case(tool))
            .map(|known| format!("; did you mean `{known}`?"))
            .unwrap_or_default();
        Err(UnknownPolicyTool {
            tool: tool.clone(),
            setting,
            known: known.join(", "),
            meant,
        })
    }

    /// Whether a call to the tool `spec` needs approval.
    pub fn requires(&self, spec: &ToolSpec) -> bool {
        self.overrides
            .get(&spec.name)
            .copied()
            .unwrap_or(self.require_for_writes && spec.access == Access::Write)
    }
}

/// A confirmation policy's exception names no registered tool
/// ([`ConfirmationPolicy::check`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the confirmation policy's {setting} names `{tool}`, which is not a registered tool \
     (the tools: {known}){meant}"
)]
pub struct UnknownPolicyTool {
    /// The name given.
    pub tool: String,
    /// `always_ask`, `auto_approve` or `tool_approvers`.
    pub setting: &'static str,
    known: String,
    meant: String,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn spec(name: &str, access: Access) -> ToolSpec {
        ToolSpec {
            name: name.to_owned(),
            description: String::new(),
            parameters: json!({"type": "object"}),
            access,
        }
    }

    #[test]
    fn writes_ask_by_default_and_overrides_win() {
        let policy = ConfirmationPolicy::default();
        assert!(policy.requires(&spec("applyRefund", Access::Write)));
        assert!(!policy.requires(&spec("queryOrder", Access::Read)));
        let policy = policy.auto_approve("applyRefund").always_ask("queryOrder");
        assert!(!policy.requires(&spec("applyRefund", Access::Write)));
        assert!(policy.requires(&spec("queryOrder", Access::Read)));
        assert!(!ConfirmationPolicy::never().requires(&spec("applyRefund", Access::Write)));
    }

    #[test]
    fn an_exception_naming_no_tool_is_an_error_naming_its_setting() {
        let mut tools = ToolRegistry::new();
        for (name, access) in [("queryOrder", Access::Read), ("applyRefund", Access::Write)] {
            tools
                .register(crate::tools::test_tools::named(name, access))
                .unwrap();
        }
        let policy = ConfirmationPolicy::default().auto_approve("applyRefund");
        assert_eq!(policy.check(&tools), Ok(()));
        let error = policy.always_ask("queryorder").check(&tools).unwrap_err();
        assert_eq!(
            (error.tool.as_str(), error.setting),
            ("queryorder", "always_ask")
        );
        let message = error.to_string();
        assert!(message.contains("did you mean `queryOrder`?"), "{message}");
        let policy = ConfirmationPolicy::default().tool_approvers("applyRefund", ["finance"]);
        assert_eq!(policy.check(&tools), Ok(()));
        let error = policy
            .tool_approvers("applyrefund", ["finance"])
            .check(&tools)
            .unwrap_err();
        assert_eq!(
            (error.tool.as_str(), error.setting),
            ("applyrefund", "tool_approvers")
        );
    }
}
