//! What a run reports as it goes: enough to print every round, every call
//! (inside skills too) and every pending confirmation.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::confirm::{ConfirmationId, PendingConfirmation};
use super::llm::Usage;
use crate::skills::SkillName;
use crate::tools::ToolCaller;

/// Who made an LLM call or a tool call.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Caller {
    /// The main agent.
    Main,
    /// A skill: its sub-agent or its deterministic steps.
    Skill(SkillName),
}

impl Caller {
    /// How the logs name this caller: `agent` or `skill:<name>`.
    pub fn tool_caller(&self) -> ToolCaller<'_> {
        match self {
            Self::Main => ToolCaller::Agent,
            Self::Skill(skill) => ToolCaller::Skill(skill.as_str()),
        }
    }
}

impl fmt::Display for Caller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Main => f.write_str("main agent"),
            Self::Skill(skill) => write!(f, "skill {skill}"),
        }
    }
}

/// How a skill invocation is carried out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SkillPath {
    /// Its deterministic steps, in the sandbox; no LLM call.
    Steps,
    /// The scoped sub-agent: its instructions, its tools, an LLM.
    Llm,
}

/// How a person's confirmation ended. Serialized flat, as one object with
/// a `decision`: `{"decision": "approved", "by"?}`, `{"decision":
/// "rejected", "reason": …, "by"?}`, `{"decision": "expired", "after":
/// <ms>}` or `{"decision": "withdrawn"}`; `by` is there when the answer
/// said who gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Resolution {
    /// Approved: the call ran with the arguments shown.
    Approved {
        /// Who approved it, when the answer said
        /// ([`Confirmations::answer`](super::Confirmations::answer)).
        by: Option<String>,
    },
    /// Rejected or expired: the call did not run.
    Declined(Declined),
    /// The run ended while the confirmation waited (it was aborted, or its
    /// holder went away): the call did not run, and there is nobody left
    /// to tell.
    Withdrawn,
}

impl Resolution {
    /// The `decision` it is serialized with: `approved`, `rejected`,
    /// `expired` or `withdrawn`.
    pub fn decision(&self) -> &'static str {
        match self {
            Self::Approved { .. } => "approved",
            Self::Declined(Declined::Rejected { .. }) => "rejected",
            Self::Declined(Declined::Expired { .. }) => "expired",
            Self::Withdrawn => "withdrawn",
        }
    }

    /// Who answered, when the answer said.
    pub fn by(&self) -> Option<&str> {
        match self {
            Self::Approved { by } | Self::Declined(Declined::Rejected { by, .. }) => by.as_deref(),
            Self::Declined(Declined::Expired { .. }) | Self::Withdrawn => None,
        }
    }
}

impl Serialize for Resolution {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        if let Self::Declined(declined) = self {
            return declined.serialize(serializer);
        }
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("decision", self.decision())?;
        if let Some(by) = self.by() {
            map.serialize_entry("by", by)?;
        }
        map.end()
    }
}

/// Why a call that needed approval did not run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Declined {
    /// A person rejected it, with their reason if they gave one.
    Rejected {
        /// Why, in the person's words.
        reason: Option<String>,
        /// Who rejected it, when the answer said. Neither the model nor the
        /// skill is told.
        #[serde(skip_serializing_if = "Option::is_none")]
        by: Option<String>,
    },
    /// Nobody answered in time; treated as a rejection.
    Expired {
        /// How long it waited.
        #[serde(with = "millis")]
        after: Duration,
    },
}

impl Declined {
    /// What happened, for a person or a skill's steps.
    pub(super) fn describe(&self, tool: &str) -> String {
        match self {
            Self::Rejected { reason: None, .. } => format!("a person declined `{tool}`"),
            Self::Rejected {
                reason: Some(reason),
                ..
            } => format!("a person declined `{tool}`: {reason}"),
            Self::Expired { after } => format!(
                "the confirmation for `{tool}` expired after {} s without an answer",
                after.as_secs()
            ),
        }
    }

    /// What the model is told: the call did not run, and what to do now.
    pub(super) fn tell_model(&self, tool: &str) -> String {
        match self {
            Self::Rejected { reason, .. } => format!(
                "the user declined `{tool}`{}; it was not executed. Do not call it again; tell \
                 the user it was not done and ask how they want to proceed.",
                reason
                    .as_deref()
                    .map(|reason| format!(" (their reason: {reason})"))
                    .unwrap_or_default()
            ),
            Self::Expired { after } => format!(
                "the confirmation for `{tool}` expired after {after:?} without an answer, so it \
                 was cancelled and not executed. Tell the user it was not done."
            ),
        }
    }
}

/// What became of one function call.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
#[non_exhaustive]
pub enum CallOutcome {
    /// It ran and returned `result` (for a skill on the LLM-driven path, the
    /// sub-agent's final text as a JSON string).
    Done {
        /// The result.
        result: Value,
    },
    /// It ran and failed: a tool error (including a business refusal such
    /// as "order not delivered") or a skill that failed.
    Failed {
        /// What went wrong.
        error: String,
    },
    /// The host did not run it: unknown name, masked or absorbed tool,
    /// outside a skill's scope, invalid arguments, or a repeated call.
    Refused {
        /// Why, as told to the model.
        reason: String,
    },
    /// A person rejected it, or its confirmation expired; it did not run.
    Declined {
        /// The tool that was declined.
        tool: String,
        /// Rejected or expired.
        why: Declined,
    },
}

impl CallOutcome {
    /// The `status` it is serialized with: `done`, `failed`, `refused` or
    /// `declined`.
    pub fn status(&self) -> &'static str {
        match self {
            Self::Done { .. } => "done",
            Self::Failed { .. } => "failed",
            Self::Refused { .. } => "refused",
            Self::Declined { .. } => "declined",
        }
    }

    /// The content of the tool message that reports this outcome to the
    /// model: the result itself (a string as is, anything else as JSON),
    /// or `{"error": ...}` saying what happened and what to do.
    pub fn to_tool_content(&self) -> String {
        match self {
            Self::Done {
                result: Value::String(text),
            } => text.clone(),
            Self::Done { result } => result.to_string(),
            _ => serde_json::json!({ "error": self.error_text().unwrap_or_default() }).to_string(),
        }
    }

    /// What went wrong and what to do, as the model is told it; `None`
    /// when the call ran and returned.
    pub fn error_text(&self) -> Option<String> {
        match self {
            Self::Done { .. } => None,
            Self::Failed { error } => Some(error.clone()),
            Self::Refused { reason } => Some(reason.clone()),
            Self::Declined { tool, why } => Some(why.tell_model(tool)),
        }
    }
}

/// One thing that happened in a run, in order. Events of a skill's
/// sub-agent or steps carry `Caller::Skill` and come between that skill's
/// [`AgentEvent::SkillStarted`] and [`AgentEvent::SkillFinished`].
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
#[non_exhaustive]
pub enum AgentEvent {
    /// An LLM round begins with this function list.
    RoundStarted {
        /// The main agent or the skill whose sub-agent this is.
        caller: Caller,
        /// 1-based round number within that loop.
        round: u32,
        /// The names of the functions offered, in order.
        functions: Vec<String>,
        /// Estimated tokens of the request (messages and functions).
        tokens: usize,
    },
    /// The server's token count for one LLM call.
    Usage {
        /// Whose call it was.
        caller: Caller,
        /// The tokens.
        usage: Usage,
    },
    /// Older turns were evicted to fit the context budget.
    Compacted {
        /// Whose transcript.
        caller: Caller,
        /// Messages removed.
        evicted_messages: usize,
        /// Skills whose load result was evicted: their unlocks are revoked.
        revoked: Vec<SkillName>,
        /// Estimated tokens before and after.
        tokens_before: usize,
        /// See `tokens_before`.
        tokens_after: usize,
    },
    /// A function call finished (or was refused). Every call the model or a
    /// skill's steps make gets exactly one such event, except calls that ran
    /// a skill, which get [`AgentEvent::SkillStarted`] and
    /// [`AgentEvent::SkillFinished`] instead.
    ToolCalled {
        /// Who called.
        caller: Caller,
        /// The function's name as called (a tool, `load_skill`, or an
        /// unknown name).
        tool: String,
        /// The arguments as parsed, or the raw text when they are not JSON.
        arguments: Value,
        /// What became of it.
        outcome: CallOutcome,
    },
    /// A skill began to run.
    SkillStarted {
        /// The skill.
        skill: SkillName,
        /// Its input (validated).
        input: Value,
        /// Steps or sub-agent.
        path: SkillPath,
    },
    /// A skill's steps handed over to its sub-agent.
    SkillHandover {
        /// The skill.
        skill: SkillName,
        /// What the steps say is left to do.
        note: String,
    },
    /// A skill finished; its outcome is what the main agent is told.
    SkillFinished {
        /// The skill.
        skill: SkillName,
        /// The outcome.
        outcome: CallOutcome,
    },
    /// The run waits for a person: answer with
    /// [`Confirmations::approve`](super::Confirmations::approve) or
    /// [`Confirmations::reject`](super::Confirmations::reject).
    ConfirmationPending(PendingConfirmation),
    /// A pending confirmation was answered or expired, or withdrawn when
    /// the run ended while it waited: every
    /// [`AgentEvent::ConfirmationPending`] gets one.
    ConfirmationResolved {
        /// Its id.
        id: ConfirmationId,
        /// The tool it was for.
        tool: String,
        /// How it ended.
        resolution: Resolution,
    },
    /// Text the model generated, as it arrives; only in runs started with
    /// [`Agent::start_streaming`](super::Agent::start_streaming). The
    /// deltas of a round add up to that round's text; a round that ends in
    /// function calls may have text too.
    TextDelta {
        /// Whose LLM call: the main agent or a skill's sub-agent.
        caller: Caller,
        /// The next piece of text.
        text: String,
    },
    /// The main agent's final answer.
    Answer {
        /// The text.
        text: String,
    },
}

/// Serializes a [`Duration`] as whole milliseconds.
mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u128(duration.as_millis())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        u64::deserialize(deserializer).map(Duration::from_millis)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::{Declined, Resolution};

    #[test]
    fn a_resolution_is_one_object_with_a_decision() {
        let shapes = [
            (
                Resolution::Approved { by: None },
                json!({"decision": "approved"}),
            ),
            (
                Resolution::Approved {
                    by: Some("support".into()),
                },
                json!({"decision": "approved", "by": "support"}),
            ),
            (
                Resolution::Declined(Declined::Rejected {
                    reason: Some("not today".into()),
                    by: None,
                }),
                json!({"decision": "rejected", "reason": "not today"}),
            ),
            (
                Resolution::Declined(Declined::Rejected {
                    reason: None,
                    by: Some("support".into()),
                }),
                json!({"decision": "rejected", "reason": null, "by": "support"}),
            ),
            (
                Resolution::Declined(Declined::Expired {
                    after: Duration::from_secs(3),
                }),
                json!({"decision": "expired", "after": 3000}),
            ),
            (Resolution::Withdrawn, json!({"decision": "withdrawn"})),
        ];
        for (resolution, shape) in shapes {
            assert_eq!(json!(resolution), shape);
        }
    }
}
