//! The scoped sub-agent executor: how one skill invocation runs.
//!
//! Deterministic steps first, when the skill has them (and
//! [`AgentConfig::use_steps`](super::AgentConfig::use_steps) allows): they
//! run in the sandbox and call tools through the run's executor, so writes
//! are confirmed like any other call. When the skill has no steps, or the
//! steps hand over, a ReAct loop takes over whose system prompt is the
//! skill's instructions (plus the handover note), whose user message is the
//! call's input as JSON, and whose functions are exactly the skill's
//! declared tools; a call outside them is refused and never executed. The
//! caller sees only the final outcome.

use std::sync::Arc;

use serde_json::Value;

use super::AgentError;
use super::events::{AgentEvent, CallOutcome, Caller, Declined, SkillPath};
use super::kept::KeptConfirmation;
use super::llm::Message;
use super::react::{Loop, SkillScope};
use super::run::{Ask, Journal, RunContext, StepsDispatch, steps_error};
use super::transcript::Transcript;
use crate::runtime::{InvokeError, RunOutcome, RunReport, SkillComponent};
use crate::skills::signature::NotAdmitted;
use crate::skills::{LoadedSkill, SkillName, SkillVersion};

/// Runs `loaded` on `input` (already validated against its parameters) and
/// returns its outcome, reported as
/// [`AgentEvent::SkillStarted`] … [`AgentEvent::SkillFinished`].
///
/// A skill that fails — a trap, a limit, a sub-agent out of rounds, a
/// signer the trust store no longer holds — is an outcome the model is told
/// about. Only what would fail any call is an error: the LLM failing, or no
/// LLM for a skill that needs one.
pub(super) async fn invoke(
    run: &Arc<RunContext>,
    loaded: &LoadedSkill,
    input: Value,
) -> Result<CallOutcome, AgentError> {
    let path = if loaded.component.manifest().has_steps && run.agent.config().use_steps {
        SkillPath::Steps
    } else {
        SkillPath::Llm
    };
    invoke_on(run, loaded, input, path, StepsStart::Anew).await
}

/// What a kept skill run wrote down ([`super::kept::Kept::Skill`]), and
/// the call it waited on.
pub(super) struct KeptInvocation {
    pub(super) skill: SkillVersion,
    pub(super) input: Value,
    pub(super) journal: Journal,
    pub(super) waiting: KeptConfirmation,
}

/// Resumes a kept run's skill ([`super::kept`]): the call it waited on is
/// asked again, then its steps run on from the journal, as in [`invoke`].
/// `loaded` is the skill of that name now loaded, if any: other code than
/// the kept digest is not run.
pub(super) async fn resume(
    run: &Arc<RunContext>,
    loaded: Option<&LoadedSkill>,
    kept: KeptInvocation,
) -> Result<CallOutcome, AgentError> {
    let KeptInvocation {
        skill,
        input,
        journal,
        waiting,
    } = kept;
    // The component whose steps made the calls, or why it is not there.
    let same = match loaded {
        None => Err("it is no longer loaded".to_owned()),
        Some(loaded) if loaded.component.digest() != skill.digest => Err(format!(
            "it changed while the run waited ({}, now {})",
            skill.digest,
            loaded.component.digest()
        )),
        Some(loaded) => Ok(loaded),
    };
    let outcome = match same {
        Ok(loaded) => {
            let start = StepsStart::Kept {
                journal,
                waiting: &waiting,
            };
            invoke_on(run, loaded, input, SkillPath::Steps, start).await?
        }
        Err(changed) => {
            run.emit(AgentEvent::SkillStarted {
                skill: skill.name.clone(),
                input,
                path: SkillPath::Steps,
            });
            let outcome = CallOutcome::Failed {
                error: format!(
                    "skill `{}` was not run again after its host restarted: {}; already \
                     executed: {}",
                    skill.name,
                    changed,
                    executed(&journal.ran())
                ),
            };
            run.emit(AgentEvent::SkillFinished {
                skill: skill.name,
                outcome: outcome.clone(),
            });
            outcome
        }
    };
    Ok(outcome)
}

/// [`invoke`] on `path`, the steps starting from `start`.
async fn invoke_on(
    run: &Arc<RunContext>,
    loaded: &LoadedSkill,
    input: Value,
    path: SkillPath,
    start: StepsStart<'_>,
) -> Result<CallOutcome, AgentError> {
    let skill = &loaded.component;
    let name = skill.name().clone();
    run.emit(AgentEvent::SkillStarted {
        skill: name.clone(),
        input: input.clone(),
        path,
    });
    let outcome = match (untrusted(run, loaded), path) {
        (Some(why), _) => CallOutcome::Failed {
            error: format!("skill `{name}` was not run: {why}"),
        },
        (None, SkillPath::Llm) => sub_agent(run, skill, &input, None).await?,
        (None, SkillPath::Steps) => match run_steps(run, loaded, &input, start).await {
            Ok(report) => match report.outcome {
                RunOutcome::Done(result) => CallOutcome::Done { result },
                RunOutcome::Handover(note) => {
                    run.emit(AgentEvent::SkillHandover {
                        skill: name.clone(),
                        note: note.clone(),
                    });
                    sub_agent(run, skill, &input, Some(&note)).await?
                }
            },
            Err(error) => CallOutcome::Failed {
                error: error.to_string(),
            },
        },
    };
    run.emit(AgentEvent::SkillFinished {
        skill: name,
        outcome: outcome.clone(),
    });
    Ok(outcome)
}

/// Where a skill's deterministic steps start.
enum StepsStart<'a> {
    /// From nothing.
    Anew,
    /// From what a kept run wrote down: its journal, and the call it waited
    /// on, which is asked again first.
    Kept {
        journal: Journal,
        waiting: &'a KeptConfirmation,
    },
}

/// A skill's result as the main model reads it, followed by what a person
/// declined while the skill ran, in the host's words: the skill's steps or
/// sub-agent may have made anything of the refusal (or nothing), and the
/// model must neither believe a declined write happened nor make it again.
pub(super) fn with_declines_noted(content: String, declined: &[(String, Declined)]) -> String {
    declined.iter().fold(content, |mut content, (tool, why)| {
        content.push_str("\n\n[from the host: while this skill ran, ");
        content.push_str(&why.tell_model(tool));
        content.push(']');
        content
    })
}

/// Why a skill's deterministic steps gave no result.
#[derive(Debug, thiserror::Error)]
enum StepsFailed {
    #[error(transparent)]
    Invoke(#[from] InvokeError),
    /// Run again after an approval, the steps made other calls than before:
    /// they are stopped there, and the calls that already ran are named,
    /// so that nobody runs them again believing they did not.
    #[error(
        "skill `{skill}` was stopped: run again after an approval, its steps {change}, and \
         deterministic steps must make the same calls given the same input and answers; \
         already executed: {}",
        executed(ran)
    )]
    Diverged {
        skill: SkillName,
        change: String,
        ran: Vec<String>,
    },
    /// While the steps waited for an approval, the trust store was
    /// replaced and no longer admits the skill (its signer, or the key's
    /// scope): its code does not run again.
    #[error(
        "skill `{skill}` was stopped after an approval, before its steps ran again: {why}; \
         already executed: {}",
        executed(ran)
    )]
    Untrusted {
        skill: SkillName,
        why: NotAdmitted,
        ran: Vec<String>,
    },
}

/// The tools `ran`, for a message.
fn executed(ran: &[String]) -> String {
    if ran.is_empty() {
        "nothing".to_owned()
    } else {
        ran.join(", ")
    }
}

/// Why `loaded` may no longer run, if it may not: the trust store was
/// replaced since the run took its snapshot of the skills, and no longer
/// admits it (the key that signed it, or what that key may sign).
fn untrusted(run: &RunContext, loaded: &LoadedSkill) -> Option<NotAdmitted> {
    let policy = run.agent.skills.policy();
    let manifest = loaded.component.manifest();
    policy.check_skill(loaded.signer.as_ref(), manifest).err()
}

/// Runs the skill's deterministic steps. When a call needs a person's
/// approval, the invocation is suspended (its instance released), the call
/// is confirmed and executed here, and the steps run again with the calls
/// answered so far replayed ([`StepsDispatch`]), unless the skill's signer
/// is no longer trusted by then. Each suspension adds one answered call and
/// the tool-call limit bounds them, so this ends.
async fn run_steps(
    run: &Arc<RunContext>,
    loaded: &LoadedSkill,
    input: &Value,
    start: StepsStart<'_>,
) -> Result<RunReport, StepsFailed> {
    let skill = &loaded.component;
    let caller = Caller::Skill(skill.name().clone());
    // The call to confirm and make before the next attempt, and the kept
    // confirmation it is asked with again, if it is.
    let (mut journal, mut waiting) = match start {
        StepsStart::Anew => (Journal::default(), None),
        StepsStart::Kept { journal, waiting } => (
            journal,
            Some((
                waiting.tool.clone(),
                waiting.arguments.clone(),
                Some(waiting),
            )),
        ),
    };
    loop {
        if let Some((tool, arguments, kept)) = waiting.take() {
            let ask = match kept {
                Some(kept) => Ask::Again(kept),
                None => Ask::Keeping(&journal),
            };
            let answer = run
                .call_tool_reported(&caller, &tool, arguments.clone(), ask)
                .await
                .map_err(|error| steps_error(&tool, error));
            journal.record(tool, arguments, answer);
        }
        if journal.answered_any()
            && let Some(why) = untrusted(run, loaded)
        {
            return Err(StepsFailed::Untrusted {
                skill: skill.name().clone(),
                why,
                ran: journal.ran(),
            });
        }
        let dispatch = Arc::new(StepsDispatch::new(run.clone(), skill.manifest(), journal));
        let result = skill.run_validated(input, dispatch.clone()).await;
        journal = dispatch.take_journal();
        // Whatever the steps made of the refusal, they did not do what was
        // approved in the way it was approved.
        if let Some((change, ran)) = journal.take_divergence() {
            return Err(StepsFailed::Diverged {
                skill: skill.name().clone(),
                change,
                ran,
            });
        }
        // Only the dispatcher suspends the steps, and it parks the call
        // first; anything else is the invocation's end.
        let (Err(InvokeError::Suspended { .. }), Some((tool, arguments))) =
            (&result, journal.take_parked())
        else {
            return Ok(result?);
        };
        waiting = Some((tool, arguments, None));
    }
}

/// The LLM-driven path: a ReAct loop in the skill's scope.
async fn sub_agent(
    run: &Arc<RunContext>,
    skill: &SkillComponent,
    input: &Value,
    handover: Option<&str>,
) -> Result<CallOutcome, AgentError> {
    let mut system = skill.instructions().to_owned();
    if let Some(note) = handover {
        system.push_str("\n\n## Where the skill's deterministic steps left off\n\n");
        system.push_str(note);
    }
    let mut transcript =
        Transcript::from_messages([Message::system(system), Message::user(input.to_string())]);
    let sub = Loop {
        run,
        caller: Caller::Skill(skill.name().clone()),
        scope: SkillScope {
            skill,
            functions: run.catalog.scope(skill.manifest()),
        },
        max_rounds: run.agent.config().skill_max_rounds,
    };
    match sub.run(&mut transcript).await {
        Ok(end) => Ok(CallOutcome::Done {
            result: Value::String(end.answer),
        }),
        // The skill failed, not the run: the main agent is told.
        Err(error @ (AgentError::RoundLimit { .. } | AgentError::RepeatedCall { .. })) => {
            Ok(CallOutcome::Failed {
                error: error.to_string(),
            })
        }
        Err(error) => Err(error),
    }
}
