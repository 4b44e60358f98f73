//! The half of the host that talks to a model.
//!
//! - [`llm`]: the client for OpenAI-compatible chat completions.
//! - [`catalog`]: what the main agent is offered — progressive disclosure
//!   (article 003) and per-round masking after `load_skill` (article 000).
//! - [`Agent`]: the main agent (a ReAct loop) and the scoped sub-agent
//!   executor that runs skills, with confirmations of write tools.
//! - [`cases`]: skills' test cases, run and checked (`skillhost test`).
//!
//! # Runs, events and confirmations
//!
//! [`Agent::ask`] / [`Agent::start`] (a conversation) and
//! [`Agent::start_skill`] (one skill, no LLM needed for deterministic
//! steps) spawn a run and return a [`RunHandle`]: a stream of
//! [`AgentEvent`]s (rounds with the functions offered, every call with its
//! outcome — inside skills too —, pending confirmations, compactions,
//! token usage, the answer) and, once the run ends, its result.
//! [`Agent::start_streaming`] also reports the model's text as it is
//! generated ([`AgentEvent::TextDelta`]), for chat front ends.
//!
//! A call to a tool that needs approval ([`ConfirmationPolicy`]) — whether
//! the main agent, a sub-agent or a skill's deterministic steps make it —
//! waits for a person. Deterministic steps do not wait inside the sandbox:
//! the invocation is suspended at that call (its wasm instance released),
//! the run waits and executes the call outside it, and the steps run again
//! in a fresh instance, every call made before answered from the run's
//! journal instead of executed again (deterministic steps make the same
//! calls given the same input and answers; a step that calls something else
//! on the way is told the call was not executed). The run reports
//! [`AgentEvent::ConfirmationPending`] (id, tool, arguments, summary); the
//! answer comes through [`Agent::confirmations`] by id, from any task (a
//! CLI prompt, an HTTP `POST /v1/confirmations/{id}`). The arguments never
//! leave the run, so an approver cannot change them; an unanswered
//! confirmation expires as a rejection; a rejection is reported to the
//! model as the call's result, and the model answers accordingly. A run
//! dropped while it waits reports the confirmation withdrawn. A run that
//! waits can be kept on disk ([`RunStore`], [`AgentBuilder::keep_runs`]),
//! so that the next process resumes it.
//!
//! # Invariants
//!
//! - The main agent's function list is recomputed before every round from
//!   the catalog and the transcript: masking is a function of the messages
//!   in context, never cached across rounds. Compaction that evicts a
//!   `load_skill` result revokes that skill's unlocks.
//! - Every call is re-checked when executed: masked, absorbed, unknown and
//!   out-of-scope names, unparsable or schema-invalid arguments are refused
//!   and reported to the model, never executed.
//! - A skill's sub-agent sees exactly the skill's declared tools; the main
//!   agent sees only the skill's final result.
//! - Nothing the model or a skill does makes the host panic; only LLM
//!   failures and the loop limits end a run with an error.
//! - A person's approval never holds a wasm instance: deterministic steps
//!   are suspended and replayed around it, and each tool call of theirs is
//!   executed (and reported) once however many attempts they take. Every
//!   attempt sees the same input, answers, WASI random bytes and clock
//!   readings ([`crate::runtime::WasiSources`]), so deterministic steps make
//!   the same calls again.

mod activity;
mod config;
mod confirm;
mod events;
mod ids;
pub mod kept;
mod react;
mod run;
mod service;
mod skill;
mod transcript;

pub mod cases;
pub mod catalog;
pub mod llm;
pub mod tokens;

pub use config::{AgentConfig, ConfirmationPolicy, DEFAULT_SYSTEM_PROMPT, UnknownPolicyTool};
pub use confirm::{
    ConfirmError, ConfirmationId, ConfirmationStatus, ConfirmationWatch, Confirmations, Decision,
    MAX_EXPIRY, PendingConfirmation, RESOLUTIONS_KEPT, RESOLUTIONS_KEPT_BYTES,
    RESOLUTIONS_KEPT_FOR, ResolvedConfirmation,
};
pub use events::{AgentEvent, CallOutcome, Caller, Declined, Resolution, SkillPath};
pub use ids::RunId;
pub(crate) use ids::random_id;
pub use kept::{
    InterruptedRun, KeptRunInfo, ResumedRun, Returned, RunStore, RunStoreError, UnreadableRun,
    list_kept_runs,
};
pub use run::{
    Finished, RunHandle, RunObserver, RunOptions, RunOutput, RunStats, RunTracker, SkillOutput,
};
pub use service::{Agent, AgentBuilder, AgentError};
pub use transcript::{Compaction, Transcript};
