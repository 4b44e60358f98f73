//! Skill test cases (article 003): run a skill on a case's input, then check
//! which tools it called and what its result says, so that edited
//! instructions or steps do not regress unnoticed.
//!
//! A case ([`TestCase`]) carries an input, the tools the skill is expected
//! to call and text its result must contain. [`run_case`] runs the skill
//! the way the main agent would call it ([`Agent::start_skill`]): its
//! deterministic steps when it has them, else its scoped sub-agent on the
//! agent's LLM. Every check is made and every failure reported, not just
//! the first.
//!
//! - **Tools**: every tool in `expect_tools` must have been *executed* by
//!   the skill (a call that ran, successfully or not), in any order. Calls
//!   the host refused (out of scope, invalid arguments) do not count.
//! - **Text**: every string in `expect_contains` must occur, case-sensitively,
//!   in the result as the main agent receives it
//!   ([`CallOutcome::to_tool_content`]): the sub-agent's final text, or the
//!   steps' JSON result as compact JSON text.
//!
//! A case that needs an LLM when none is configured is *skipped*, not failed.

use std::time::{Duration, Instant};

use serde::Serialize;

use super::confirm::Decision;
use super::events::{AgentEvent, CallOutcome, Caller, SkillPath};
use super::service::{Agent, AgentError};
use crate::skills::SkillName;
use crate::skills::manifest::TestCase;

/// How a case ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// Every expectation held.
    Passed,
    /// At least one expectation failed; all failures are listed.
    Failed {
        /// What went wrong, in the order checked.
        failures: Vec<CaseFailure>,
    },
    /// The case could not run here, e.g. it needs an LLM and none is
    /// configured.
    Skipped {
        /// Why.
        reason: String,
    },
}

/// One expectation of a case that did not hold.
#[derive(Debug, Clone, PartialEq, Serialize, thiserror::Error)]
#[serde(tag = "failure", rename_all = "snake_case")]
#[non_exhaustive]
pub enum CaseFailure {
    /// A tool in `expect_tools` was not executed by the skill.
    #[error("expected tool `{tool}` was not called (called: {})", list(.called))]
    ToolNotCalled {
        /// The expected tool.
        tool: String,
        /// The tools the skill did execute, in order.
        called: Vec<String>,
    },
    /// A string in `expect_contains` is not in the result.
    #[error("the result does not contain {text:?}")]
    TextMissing {
        /// The expected text.
        text: String,
    },
    /// The skill produced no result: it failed, or a call it needed was
    /// refused or declined. Its text checks are not made.
    #[error("the skill produced no result: {reason}")]
    NoResult {
        /// What the main agent would have been told.
        reason: String,
    },
    /// The run itself failed (an LLM error, an input the skill refuses).
    #[error("the run failed: {error}")]
    RunFailed {
        /// The error.
        error: String,
    },
}

/// `a, b, c`, or `none`.
fn list(items: &[String]) -> String {
    if items.is_empty() {
        "none".to_owned()
    } else {
        items.join(", ")
    }
}

/// What running one case showed.
#[derive(Debug, Clone, Serialize)]
pub struct CaseReport {
    /// The skill under test.
    pub skill: SkillName,
    /// The case's name.
    pub case: String,
    /// How the skill ran (steps or sub-agent); `None` when it never started.
    pub path: Option<SkillPath>,
    /// Passed, failed (with every failure) or skipped (with why).
    #[serde(flatten)]
    pub verdict: Verdict,
    /// The tools the skill executed, in order.
    pub tools_called: Vec<String>,
    /// The write tools whose confirmation was approved automatically.
    pub auto_approved: Vec<String>,
    /// The result as the main agent would receive it, when there is one.
    pub result: Option<String>,
    /// LLM calls the case made (none for deterministic steps).
    pub llm_calls: u32,
    /// Wall time of the run.
    #[serde(rename = "elapsed_ms", serialize_with = "millis")]
    pub elapsed: Duration,
}

impl CaseReport {
    /// Whether the case passed.
    pub fn passed(&self) -> bool {
        self.verdict == Verdict::Passed
    }
}

fn millis<S: serde::Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_f64(duration.as_secs_f64() * 1e3)
}

/// Runs `case` against the skill `skill` on `agent` and checks its
/// expectations.
///
/// **Every confirmation the run asks for is approved**: a case is a test of
/// the skill, not a decision about real data. Give `agent` scratch tools —
/// e.g. the demo tools on a fresh
/// [`DemoDb::in_memory`](crate::tools::demo::DemoDb::in_memory) per case,
/// with [`AgentBuilder::tools`](super::AgentBuilder::tools) — never tools
/// over live state. Must be called inside a Tokio runtime.
pub async fn run_case(agent: &Agent, skill: &SkillName, case: &TestCase) -> CaseReport {
    let started = Instant::now();
    let mut report = CaseReport {
        skill: skill.clone(),
        case: case.name.clone(),
        path: None,
        verdict: Verdict::Passed,
        tools_called: Vec::new(),
        auto_approved: Vec::new(),
        result: None,
        llm_calls: 0,
        elapsed: Duration::ZERO,
    };
    let handle = match agent.start_skill(skill.as_str(), case.input.clone()) {
        Ok(handle) => handle,
        Err(error) => {
            report.verdict = Verdict::Failed {
                failures: vec![CaseFailure::RunFailed {
                    error: error.to_string(),
                }],
            };
            return report;
        }
    };
    let finished = handle.finish_with(|_| Decision::Approve).await;
    report.elapsed = started.elapsed();
    let caller = Caller::Skill(skill.clone());
    let mut handed_over = false;
    for event in &finished.events {
        match event {
            AgentEvent::SkillStarted { path, .. } => report.path = Some(*path),
            AgentEvent::SkillHandover { .. } => handed_over = true,
            AgentEvent::ToolCalled {
                caller: by,
                tool,
                outcome: CallOutcome::Done { .. } | CallOutcome::Failed { .. },
                ..
            } if *by == caller => report.tools_called.push(tool.clone()),
            AgentEvent::ConfirmationPending(pending) => {
                report.auto_approved.push(pending.tool.clone());
            }
            _ => {}
        }
    }
    let output = match finished.result {
        Ok(output) => output,
        Err(AgentError::NotConfigured) => {
            let why = if handed_over {
                "its deterministic steps handed over to its LLM-driven path"
            } else {
                "the skill runs on its instructions (no deterministic steps)"
            };
            report.verdict = Verdict::Skipped {
                reason: format!("no LLM configured: {why}"),
            };
            return report;
        }
        Err(error) => {
            report.verdict = Verdict::Failed {
                failures: vec![CaseFailure::RunFailed {
                    error: error.to_string(),
                }],
            };
            return report;
        }
    };
    report.llm_calls = output.stats.llm_calls;
    let mut failures: Vec<CaseFailure> = case
        .expect_tools
        .iter()
        .filter(|tool| !report.tools_called.contains(tool))
        .map(|tool| CaseFailure::ToolNotCalled {
            tool: tool.clone(),
            called: report.tools_called.clone(),
        })
        .collect();
    match &output.outcome {
        CallOutcome::Done { .. } => {
            let text = output.outcome.to_tool_content();
            failures.extend(
                case.expect_contains
                    .iter()
                    .filter(|expected| !text.contains(expected.as_str()))
                    .map(|expected| CaseFailure::TextMissing {
                        text: expected.clone(),
                    }),
            );
            report.result = Some(text);
        }
        other => failures.push(CaseFailure::NoResult {
            reason: other.to_tool_content(),
        }),
    }
    if !failures.is_empty() {
        report.verdict = Verdict::Failed { failures };
    }
    report
}
