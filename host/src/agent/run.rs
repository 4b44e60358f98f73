//! One run: its shared state, how it executes tools (with confirmations),
//! and the handle its caller holds.
//!
//! A run is a spawned task. Its caller gets a [`RunHandle`]: the run's
//! events as they happen and, at the end, its result. The task does not
//! depend on the handle: it keeps running (e.g. while it waits for a
//! confirmation) when the request that started it is gone, and ends on its
//! own — with an answer, an error, or a declined confirmation once it
//! expires. [`RunHandle::abort`] stops it early.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;
use tracing::{Instrument, Span, field};

use super::AgentError;
use super::catalog::Catalog;
use super::confirm::{ConfirmationId, Confirmations, Decision, PendingConfirmation};
use super::events::{AgentEvent, CallOutcome, Caller, Declined, Resolution};
use super::ids::RunId;
use super::kept::{ApprovedRun, Keeping, KeptAnswer, KeptConfirmation, Returned, RunStore, Told};
use super::llm::{ChatRequest, ChatResponse, FinishReason, Message, Usage};
use super::service::AgentInner;
use crate::runtime::{DispatchError, ToolDispatch, WasiSources};
use crate::scope::{SkillScope, ToolScope};
use crate::skills::{LoadedSkill, Manifest, SkillName, SkillSnapshot};
use crate::tools::{Access, ToolCallSpan, ToolContext, ToolError, ToolRegistry};
use crate::trace_context::TraceContext;

/// LLM calls and tokens of one run, sub-agents included.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RunStats {
    /// LLM calls that returned a response.
    pub llm_calls: u32,
    /// Tokens the server counted, summed.
    pub usage: Usage,
}

/// The result of a conversation run ([`Agent::start`](super::Agent::start)).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RunOutput {
    /// The main agent's final answer.
    pub answer: String,
    /// Why the final answer ended, as the server said (`Stop` when it did
    /// not): `Length` (the token limit cut it short) and `ContentFilter`
    /// (withheld) tell a client the answer is not whole.
    pub finish_reason: FinishReason,
    /// The conversation as it ends (after any compaction), answer
    /// included: what to send back for the next turn.
    pub messages: Vec<Message>,
    /// LLM rounds the main agent took.
    pub rounds: u32,
    /// LLM calls and tokens, sub-agents included.
    pub stats: RunStats,
}

/// The result of a direct skill run
/// ([`Agent::start_skill`](super::Agent::start_skill)).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SkillOutput {
    /// What the skill produced, or why it failed.
    pub outcome: CallOutcome,
    /// LLM calls and tokens (none when its deterministic steps finished).
    pub stats: RunStats,
}

/// Everything a run reported, and how it ended.
#[derive(Debug)]
#[non_exhaustive]
pub struct Finished<T> {
    /// Every event, in order.
    pub events: Vec<AgentEvent>,
    /// The result.
    pub result: Result<T, AgentError>,
}

/// A started run.
///
/// Read [`RunHandle::events`] until it closes (the run has ended), then
/// take the result with [`RunHandle::result`]. Dropping the handle does not
/// stop the run.
pub struct RunHandle<T> {
    /// The run's id, also carried by its pending confirmations.
    pub id: RunId,
    /// The run's events, in order. Unbounded, so a run never waits for its
    /// reader; a run's events are bounded by its rounds and calls. Closes
    /// when the run ends.
    pub events: mpsc::UnboundedReceiver<AgentEvent>,
    skills: Arc<SkillSnapshot>,
    confirmations: Confirmations,
    milestones: Arc<Milestones>,
    /// Where the run is kept while it waits, if it is.
    kept: Option<Arc<RunStore>>,
    task: JoinHandle<Result<T, AgentError>>,
}

/// Tells a run's holder that the run needs it: a confirmation is pending or
/// the run has ended. Lets a holder that reads no event as it comes sleep
/// through the rest (see [`RunHandle::settle`]).
#[derive(Default)]
pub(super) struct Milestones {
    notify: Notify,
    ended: AtomicBool,
}

impl Milestones {
    fn reached(&self) {
        // A permit is stored when nobody waits yet: no wake-up is lost.
        self.notify.notify_one();
    }
}

/// Marks the run ended when its task finishes, panics or is aborted.
struct EndOfRun(Arc<Milestones>);

impl Drop for EndOfRun {
    fn drop(&mut self) {
        self.0.ended.store(true, Ordering::Release);
        self.0.reached();
    }
}

/// Records on a `run` span how the run ended and how long it took, when
/// the run's future finishes or is dropped unfinished (aborted, or its task
/// panicked): `aborted` unless told otherwise.
struct RunSpanEnd {
    span: Span,
    /// `None` when the span is disabled: not even the clock is read.
    started: Option<Instant>,
    outcome: &'static str,
}

impl RunSpanEnd {
    fn new(span: Span) -> Self {
        Self {
            started: (!span.is_disabled()).then(Instant::now),
            span,
            outcome: "aborted",
        }
    }
}

impl Drop for RunSpanEnd {
    fn drop(&mut self) {
        let Some(started) = self.started else { return };
        self.span.record("outcome", self.outcome);
        // An abort is the caller's choice (gone, or stopping it).
        if !matches!(self.outcome, "ok" | "aborted") {
            self.span.record("otel.status_code", "error");
        }
        self.span
            .record("duration_ms", started.elapsed().as_secs_f64() * 1e3);
    }
}

impl<T: Send + 'static> RunHandle<T> {
    pub(super) fn spawn<F>(
        run: &Arc<RunContext>,
        events: mpsc::UnboundedReceiver<AgentEvent>,
        body: F,
    ) -> Self
    where
        F: Future<Output = Result<T, AgentError>> + Send + 'static,
    {
        let end = EndOfRun(run.milestones.clone());
        let running = run.agent.confirmations.activity().run_started();
        // A run's future holds a wasmtime call's state: kilobytes, which
        // tokio would otherwise copy whole each time it moves the task's
        // stage (spawn, completion, reading the output). Boxed, it moves once.
        // In a span of its own, inside the one it was started in (an
        // embedder's request): its logs say which run they are of, whom it
        // acts for, the trace it is part of, and carry that request's fields.
        let span = tracing::info_span!(
            "run",
            run_id = %run.id,
            requested_by = run.requested_by.as_deref(),
            trace_id = run.trace.as_ref().map(TraceContext::trace_id),
            outcome = field::Empty,
            duration_ms = field::Empty,
            otel.status_code = field::Empty,
        );
        if let Some(trace) = &run.trace {
            // A run started outside a span of its trace (by the CLI, resumed
            // from disk, an MCP call naming a trace of its own) hangs from
            // the caller's span.
            let within = TraceContext::of_current_span()
                .is_some_and(|current| current.trace_id() == trace.trace_id());
            if !within {
                trace.adopt(&span);
            }
        }
        let span_end = RunSpanEnd::new(span.clone());
        let body = Box::pin(
            async move {
                // Moved in whole, so that it drops with the future.
                let mut span_end = span_end;
                let result = body.await;
                span_end.outcome = match &result {
                    Ok(_) => "ok",
                    Err(error) => error.kind(),
                };
                result
            }
            .instrument(span),
        );
        Self {
            id: run.id.clone(),
            skills: run.snapshot.clone(),
            confirmations: run.agent.confirmations.clone(),
            events,
            milestones: run.milestones.clone(),
            kept: run.kept.as_ref().map(|kept| kept.store.clone()),
            task: tokio::spawn({
                let run = run.clone();
                async move {
                    let (_end, _running) = (end, running);
                    let result = body.await;
                    // However it ended, nothing of it is to be resumed or told.
                    run.unkeep();
                    result
                }
            }),
        }
    }

    /// Sleeps until the run reaches its next milestone — a confirmation is
    /// pending, or the run has ended — without waking for the events in
    /// between: they stay queued in [`RunHandle::events`]. For holders that
    /// need only the outcome; a holder that shows events as they come reads
    /// `events` instead. May return once more for a milestone already seen:
    /// callers look at `events` and [`RunHandle::has_ended`] and settle again.
    pub async fn settle(&self) {
        if !self.has_ended() {
            self.milestones.notify.notified().await;
        }
    }

    /// The skills the run sees, as they were when it started: the versions
    /// it runs, whatever reloads happen meanwhile.
    pub fn skills(&self) -> &Arc<SkillSnapshot> {
        &self.skills
    }

    /// Whether the run's task is over (finished, failed or aborted). Its
    /// last events may still be queued in [`RunHandle::events`].
    pub fn has_ended(&self) -> bool {
        self.milestones.ended.load(Ordering::Acquire)
    }

    /// Waits for the run to end and returns its result.
    pub async fn result(self) -> Result<T, AgentError> {
        self.task
            .await
            .map_err(|error| AgentError::Aborted(error.to_string()))?
    }

    /// Stops the run; its pending confirmations are withdrawn, and it is
    /// no longer kept on disk.
    pub fn abort(&self) {
        self.task.abort();
        if let Some(store) = &self.kept {
            store.remove(&self.id);
        }
    }

    /// Whether the run is kept on disk while it waits for a person
    /// ([`AgentBuilder::keep_runs`](super::AgentBuilder::keep_runs)), so
    /// that it outlives the process.
    pub fn is_kept(&self) -> bool {
        self.kept.is_some()
    }

    /// Drives the run to its end, answering each pending confirmation with
    /// `decide`, and returns every event with the result. For callers that
    /// decide on the spot (scripts, tests, `--yes`/`--no`); an approval that
    /// needs a separate approver is a rejection
    /// ([`Confirmations::answer_on_the_spot`]).
    pub async fn finish_with(
        mut self,
        mut decide: impl FnMut(&PendingConfirmation) -> Decision,
    ) -> Finished<T> {
        let mut events = Vec::new();
        while let Some(event) = self.events.recv().await {
            if let AgentEvent::ConfirmationPending(pending) = &event {
                let id = pending.id.as_str();
                // An answer can be refused only when the confirmation is
                // already gone (expired, run aborted); the run says so in
                // its own events.
                let _ = self
                    .confirmations
                    .answer_on_the_spot(id, decide(pending), None);
            }
            events.push(event);
        }
        Finished {
            events,
            result: self.result().await,
        }
    }
}

/// Why a tool call did not produce a result.
pub(super) enum CallError {
    /// The tool (or its lookup or validation) failed.
    Tool(ToolError),
    /// A person rejected it, or the confirmation expired.
    Declined(Declined),
}

impl From<ToolError> for CallError {
    fn from(error: ToolError) -> Self {
        Self::Tool(error)
    }
}

impl CallOutcome {
    /// The outcome of a tool call as executed by [`RunContext::call_tool`].
    pub(super) fn of_tool(tool: &str, result: &Result<Value, CallError>) -> Self {
        match result {
            Ok(result) => Self::Done {
                result: result.clone(),
            },
            Err(CallError::Declined(why)) => Self::Declined {
                tool: tool.to_owned(),
                why: why.clone(),
            },
            // Never executed: the name or the arguments are wrong.
            Err(CallError::Tool(
                error @ (ToolError::UnknownTool(_) | ToolError::InvalidArguments { .. }),
            )) => Self::Refused {
                reason: error.to_string(),
            },
            Err(CallError::Tool(error)) => Self::Failed {
                error: error.to_string(),
            },
        }
    }
}

/// Where a resumed run's replay is at one thing it is told ([`super::kept`]).
enum Replayed {
    /// Not replaying: the run asks for real (and records, when kept).
    Live,
    /// What it was told at this point before.
    Told(Told),
    /// Replaying, past everything it was told: only the confirmation it
    /// waited on may come now.
    PastTheRecord,
}

/// How a call that needs a person's approval asks for it.
pub(super) enum Ask<'a> {
    /// With a new confirmation.
    Anew,
    /// With a new confirmation, the run written down while it waits (when
    /// it is kept, see [`super::kept`]): the steps' journal so far.
    Keeping(&'a Journal),
    /// With the confirmation a kept run waited on when its host stopped:
    /// the same id and expiry.
    Again(&'a KeptConfirmation),
}

/// A confirmation its run waits on: reported resolved with its answer
/// ([`Awaiting::resolved`]), or withdrawn when the run is dropped while it
/// waits (aborted, or its task ended by a panic), so that every pending
/// confirmation's watchers see it end.
struct Awaiting<'a> {
    run: &'a RunContext,
    /// Taken when the resolution is reported.
    id: Option<ConfirmationId>,
    tool: &'a str,
}

impl Awaiting<'_> {
    fn resolved(mut self, resolution: Resolution) {
        self.report(resolution);
    }

    fn report(&mut self, resolution: Resolution) {
        if let Some(id) = self.id.take() {
            self.run.emit(AgentEvent::ConfirmationResolved {
                id,
                tool: self.tool.to_owned(),
                resolution,
            });
        }
    }
}

impl Drop for Awaiting<'_> {
    fn drop(&mut self) {
        self.report(Resolution::Withdrawn);
    }
}

/// Sees each event of one run as it is emitted, before the run's reader
/// does. Runs on the emitting task: keep it short and never block.
pub type RunTracker = Box<dyn FnMut(&AgentEvent) + Send>;

/// Makes the [`RunTracker`] of each run as it starts (see
/// [`AgentBuilder::observe_runs`](super::AgentBuilder::observe_runs)).
pub type RunObserver = Arc<dyn Fn(&RunId) -> RunTracker + Send + Sync>;

/// The state one run shares between its main loop, its sub-agents and its
/// skills' tool dispatch.
pub(super) struct RunContext {
    pub(super) id: RunId,
    pub(super) agent: Arc<AgentInner>,
    /// The skills as they were when the run started; the run keeps them.
    pub(super) snapshot: Arc<SkillSnapshot>,
    pub(super) catalog: Arc<Catalog>,
    /// Stream LLM calls and report their text as [`AgentEvent::TextDelta`].
    stream: bool,
    events: mpsc::UnboundedSender<AgentEvent>,
    milestones: Arc<Milestones>,
    tracker: Option<Mutex<RunTracker>>,
    stats: Mutex<RunStats>,
    /// The last write call that ran, as (tool, arguments as JSON text): the
    /// same call right after it is not run again (see
    /// [`Self::confirm_and_call`]).
    last_write: Mutex<Option<(String, String)>>,
    /// Every call a person declined (or let expire) in this run, in order,
    /// as (tool, why): what a skill saw declined, its caller is told too
    /// ([`Self::declined_since`]).
    declined: Mutex<Vec<(String, Declined)>>,
    /// What every tool call of the run is handed: the embedder's values,
    /// the run's id and its trace context.
    tool_context: ToolContext,
    /// Who the run acts for ([`RunOptions::on_behalf_of`]).
    pub(super) requested_by: Option<String>,
    /// The skills it may use ([`RunOptions::skills`]).
    pub(super) skills: SkillScope,
    /// The tools its model may be offered ([`RunOptions::tools`]): kept
    /// with the run; its catalog applies it.
    pub(super) tools: ToolScope,
    /// The distributed trace it is part of ([`RunOptions::trace`]).
    pub(super) trace: Option<TraceContext>,
    /// What the run keeps on disk while it waits for a person: set for a
    /// run that may be kept ([`super::kept`]).
    kept: Option<Keeping>,
}

/// How to start a run: [`Agent::start_with`](super::Agent::start_with),
/// [`Agent::start_skill_with`](super::Agent::start_skill_with). Default: no
/// streaming, an empty tool context.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    stream: bool,
    context: ToolContext,
    requested_by: Option<String>,
    skills: SkillScope,
    tools: ToolScope,
    trace: Option<TraceContext>,
}

impl RunOptions {
    pub fn new() -> Self {
        Self::default()
    }

    /// The run also reports the text the model generates as it arrives
    /// ([`AgentEvent::TextDelta`]): every LLM call of the run asks the
    /// server to stream. For chat front ends.
    #[must_use]
    pub fn streaming(mut self) -> Self {
        self.stream = true;
        self
    }

    /// Every tool the run calls is handed `value` ([`ToolContext::get`]):
    /// who the end user is, their tenant, a request id. A model or a skill
    /// can neither see nor change it.
    #[must_use]
    pub fn with<T: Clone + Send + Sync + 'static>(mut self, value: T) -> Self {
        self.context.insert(value);
        self
    }

    /// Every tool the run calls is handed `context`, replacing the values
    /// given so far.
    #[must_use]
    pub fn context(mut self, context: ToolContext) -> Self {
        self.context = context;
        self
    }

    /// The run acts for `principal` (a user's id, an API key's name): every
    /// confirmation it opens names them as
    /// [`PendingConfirmation::requested_by`], beside whoever answers it.
    #[must_use]
    pub fn on_behalf_of(mut self, principal: impl Into<String>) -> Self {
        self.requested_by = Some(principal.into());
        self
    }

    /// The run may use only the skills of `scope`: the others are neither
    /// offered to its model nor run when named
    /// ([`AgentError::SkillNotPermitted`]), and a tool only they unlock is
    /// never offered. Tools no skill unlocks are offered as without a
    /// scope: [`Self::tools`] limits those.
    #[must_use]
    pub fn skills(mut self, scope: SkillScope) -> Self {
        self.skills = scope;
        self
    }

    /// The skills the run may use.
    pub fn skill_scope(&self) -> &SkillScope {
        &self.skills
    }

    /// The run's model may be offered, and call itself, only the tools of
    /// `scope`: any other is left out of its function list (also once a
    /// skill that unlocks it is loaded) and refused as unavailable when
    /// called. The skills it runs call the tools their manifests declare,
    /// whatever `scope` says.
    #[must_use]
    pub fn tools(mut self, scope: ToolScope) -> Self {
        self.tools = scope;
        self
    }

    /// The tools the run's model may use itself.
    pub fn tool_scope(&self) -> &ToolScope {
        &self.tools
    }

    /// The run is part of the distributed trace `context`: its LLM calls
    /// and its calls to HTTP tools and MCP servers carry it on
    /// ([`crate::trace_context`]), its tools find it in their
    /// [`ToolContext`], its `run` log span names the trace, and it is kept
    /// with the run while it waits on disk.
    #[must_use]
    pub fn trace(mut self, context: TraceContext) -> Self {
        self.trace = Some(context);
        self
    }

    /// The distributed trace the run is part of, if any.
    pub fn trace_context(&self) -> Option<&TraceContext> {
        self.trace.as_ref()
    }

    /// Whether the run's tools are handed nothing but what the run adds.
    pub(super) fn context_is_empty(&self) -> bool {
        self.context.is_empty()
    }
}

impl RunContext {
    /// A run `id` of `agent` over `snapshot`, and the receiver of its
    /// events; kept on disk while it waits when `kept` says how.
    pub(super) fn new(
        agent: Arc<AgentInner>,
        options: RunOptions,
        id: RunId,
        snapshot: Arc<SkillSnapshot>,
        kept: Option<Keeping>,
    ) -> (Arc<Self>, mpsc::UnboundedReceiver<AgentEvent>) {
        let (events, receiver) = mpsc::unbounded_channel();
        let catalog = agent.catalog_for(&snapshot, &options.skills, &options.tools);
        let tracker = agent
            .observer
            .as_ref()
            .map(|observe| Mutex::new(observe(&id)));
        let RunOptions {
            stream,
            context,
            requested_by,
            skills,
            tools,
            trace,
        } = options;
        let mut tool_context = context.with(id.clone());
        if let Some(trace) = &trace {
            tool_context.insert(trace.clone());
        }
        let run = Self {
            tool_context,
            id,
            agent,
            snapshot,
            catalog,
            stream,
            events,
            milestones: Arc::default(),
            tracker,
            stats: Mutex::default(),
            last_write: Mutex::default(),
            declined: Mutex::default(),
            requested_by,
            skills,
            tools,
            trace,
            kept,
        };
        (Arc::new(run), receiver)
    }

    /// Reports an event: to the run's tracker at once, then to its reader.
    /// Nobody reading is fine.
    pub(super) fn emit(&self, event: AgentEvent) {
        // A resumed run's replay was reported by the run it resumes.
        if self.replaying() {
            return;
        }
        if let Some(tracker) = &self.tracker {
            (tracker.lock().unwrap_or_else(PoisonError::into_inner))(&event);
        }
        let milestone = matches!(event, AgentEvent::ConfirmationPending(_));
        let _ = self.events.send(event);
        if milestone {
            self.milestones.reached();
        }
    }

    /// LLM calls and tokens so far.
    pub(super) fn stats(&self) -> RunStats {
        *self.stats.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One LLM call on behalf of `caller`, counted in the run's stats. In a
    /// streaming run the call streams and its text is reported as
    /// [`AgentEvent::TextDelta`]s as it arrives.
    pub(super) async fn chat(
        &self,
        caller: &Caller,
        request: ChatRequest,
    ) -> Result<ChatResponse, AgentError> {
        if let Some(why) = self.divergence() {
            return Err(AgentError::Aborted(why));
        }
        let response = match self.replay() {
            Replayed::Told(Told::Llm { response }) => response,
            Replayed::Told(_) | Replayed::PastTheRecord => {
                return Err(self.diverged("asked the model where it had not"));
            }
            Replayed::Live => self.ask_llm(caller, request).await?,
        };
        {
            let mut stats = self.stats.lock().unwrap_or_else(PoisonError::into_inner);
            stats.llm_calls += 1;
            if let Some(usage) = &response.usage {
                stats.usage.add(usage);
            }
        }
        if let Some(usage) = response.usage {
            self.emit(AgentEvent::Usage {
                caller: caller.clone(),
                usage,
            });
        }
        Ok(response)
    }

    /// [`Self::chat`]'s call to the model, recorded when the run is kept.
    async fn ask_llm(
        &self,
        caller: &Caller,
        request: ChatRequest,
    ) -> Result<ChatResponse, AgentError> {
        let llm = self.agent.llm().ok_or(AgentError::NotConfigured)?;
        let request = match &self.trace {
            Some(trace) => request.with_trace(trace.clone()),
            None => request,
        };
        let response = if self.stream {
            let (deltas, mut received) = mpsc::unbounded_channel();
            let request = request.with_stream(true).with_deltas(deltas);
            // The request (and with it the sender) is dropped when the call
            // ends, which ends the forwarding: every delta is reported before
            // the response is used.
            let call = async move { llm.chat(&request).await };
            let forward = async {
                while let Some(text) = received.recv().await {
                    self.emit(AgentEvent::TextDelta {
                        caller: caller.clone(),
                        text,
                    });
                }
            };
            tokio::join!(call, forward).0
        } else {
            llm.chat(&request).await
        };
        let response = response.map_err(|cause| AgentError::Llm {
            caller: caller.clone(),
            cause,
        })?;
        self.record(|| Told::Llm {
            response: response.clone(),
        });
        Ok(response)
    }

    /// Executes a tool for `caller`: checks the arguments, waits for a
    /// person's approval when the policy asks for it, then runs the tool.
    /// Scope and masking are the caller's to check first. The whole call
    /// is one `tool_call` span ([`ToolCallSpan`]).
    pub(super) async fn call_tool(
        &self,
        caller: &Caller,
        tool: &str,
        arguments: Value,
        ask: Ask<'_>,
    ) -> Result<Value, CallError> {
        let mut span = ToolCallSpan::open(caller.tool_caller(), tool);
        let result = self
            .confirm_and_call(caller, tool, arguments, ask, &mut span)
            .await;
        match &result {
            Ok(_) => span.finish(Ok(())),
            Err(CallError::Tool(error)) => span.finish(Err(error)),
            Err(CallError::Declined(why)) => {
                span.finish(Err(&ToolError::Declined(why.describe(tool))));
            }
        }
        result
    }

    /// The tools the run calls: those of the snapshot it started on,
    /// unless the agent runs every call on its own.
    fn tools(&self) -> &ToolRegistry {
        self.agent.tools_of(&self.snapshot)
    }

    /// Whether a call of `tool` with `arguments` would wait for a person:
    /// the tool exists, the arguments are valid (nobody is asked to approve
    /// a call that cannot run) and the policy asks.
    pub(super) fn waits_for_approval(&self, tool: &str, arguments: &Value) -> bool {
        self.tools().get(tool).is_some_and(|registered| {
            self.agent.config().confirmation.requires(registered.spec())
                && registered.validate(arguments).is_ok()
        })
    }

    /// The skill `name` as the run sees it: loaded when the run started,
    /// and in its scope.
    pub(super) fn skill(&self, name: &str) -> Option<&LoadedSkill> {
        self.snapshot.get(name).filter(|_| self.skills.allows(name))
    }

    /// Every skill the run may use.
    pub(super) fn usable_skills(&self) -> impl Iterator<Item = &LoadedSkill> {
        self.snapshot
            .skills()
            .filter(|skill| self.skills.allows(skill.component.name().as_str()))
    }

    /// Whether any call of `tool` may wait for a person.
    pub(super) fn may_wait_for_approval(&self, tool: &str) -> bool {
        self.tools()
            .get(tool)
            .is_some_and(|registered| self.agent.config().confirmation.requires(registered.spec()))
    }

    /// The steps of [`Self::call_tool`], each recorded on its span.
    async fn confirm_and_call(
        &self,
        caller: &Caller,
        tool: &str,
        arguments: Value,
        ask: Ask<'_>,
        span: &mut ToolCallSpan<'_>,
    ) -> Result<Value, CallError> {
        let registered = self
            .tools()
            .get(tool)
            .ok_or_else(|| ToolError::UnknownTool(tool.to_owned()))?;
        span.resolved(registered.spec(), &arguments);
        // Nobody is asked to approve a call that cannot run.
        registered.validate(&arguments)?;
        // A model that repeats a write (twice in one answer, or after a
        // skill made it) would otherwise cancel, pay or refund twice, and a
        // person be asked to approve the repeat. Only the repeat of the
        // last write is refused: after another write (a cart changed, an
        // address set back) the same call may do something new. serde_json's
        // maps are sorted, so key order does not matter.
        let write = (registered.spec().access == Access::Write)
            .then(|| (tool.to_owned(), arguments.to_string()));
        if write.is_some() && *self.last_write() == write {
            return Err(ToolError::NotPermitted {
                tool: tool.to_owned(),
                reason: "it is the write that just ran, with the same arguments: it is not run \
                         twice; use its earlier result"
                    .to_owned(),
            }
            .into());
        }
        // A resumed run that stopped keeping to its record makes no call.
        if let Some(why) = self.divergence() {
            return Err(ToolError::Failed(format!("not executed: {why}")).into());
        }
        let policy = &self.agent.config().confirmation;
        let confirmed = policy.requires(registered.spec());
        if confirmed {
            let resolution = match self.replay() {
                Replayed::Told(Told::Answer {
                    tool: told_tool,
                    arguments: told_arguments,
                    answer,
                }) if told_tool == tool && told_arguments == arguments => answer.resolution(),
                Replayed::Told(_) => return Err(self.diverged_call(tool)),
                // Past the record only the confirmation it waited on may
                // come: `ask_person` reopens it, or stops the run.
                Replayed::Live | Replayed::PastTheRecord => {
                    let resolution = self.ask_person(caller, tool, &arguments, ask).await?;
                    if let Some(answer) = KeptAnswer::of(&resolution) {
                        self.record(|| Told::Answer {
                            tool: tool.to_owned(),
                            arguments: arguments.clone(),
                            answer,
                        });
                    }
                    resolution
                }
            };
            let approved = matches!(resolution, Resolution::Approved { .. });
            span.confirmed(approved, resolution.by());
            if let Resolution::Declined(why) = resolution {
                self.declined_calls().push((tool.to_owned(), why.clone()));
                return Err(CallError::Declined(why));
            }
        }
        let result = match self.replay() {
            Replayed::Told(Told::Tool {
                tool: told_tool,
                arguments: told_arguments,
                result,
            }) if told_tool == tool && told_arguments == arguments => result?,
            Replayed::Told(_) | Replayed::PastTheRecord => return Err(self.diverged_call(tool)),
            Replayed::Live => {
                let taped = self.taping().then(|| arguments.clone());
                let result = span
                    .execute(registered, &self.tool_context, arguments)
                    .await;
                if confirmed {
                    self.keep_returned(&result);
                }
                if let Some(arguments) = taped {
                    self.record(|| Told::Tool {
                        tool: tool.to_owned(),
                        arguments,
                        result: result.clone(),
                    });
                }
                result?
            }
        };
        if write.is_some() {
            *self.last_write() = write;
        }
        Ok(result)
    }

    /// Asks a person to approve `tool` with `arguments` and waits for the
    /// answer (or the expiry). A kept run is written down while it waits;
    /// a resumed one reopens the confirmation it waited on.
    async fn ask_person(
        &self,
        caller: &Caller,
        tool: &str,
        arguments: &Value,
        ask: Ask<'_>,
    ) -> Result<Resolution, CallError> {
        let policy = &self.agent.config().confirmation;
        let confirmations = &self.agent.confirmations;
        // A resumed conversation reaches the confirmation it waited on.
        let again = self
            .kept
            .as_ref()
            .and_then(Keeping::tape)
            .and_then(|mut tape| tape.take_again(tool, arguments));
        if again.is_none() && self.replaying() {
            return Err(self.diverged_call(tool));
        }
        let ask = match &again {
            Some(kept) => Ask::Again(kept),
            None => ask,
        };
        let ticket = match &ask {
            Ask::Again(kept) => confirmations.reopen(
                kept,
                self.id.clone(),
                self.requested_by.clone(),
                caller.clone(),
                policy,
            ),
            Ask::Anew | Ask::Keeping(_) => Ok(confirmations.open(
                self.id.clone(),
                self.requested_by.clone(),
                caller.clone(),
                tool,
                arguments.clone(),
                policy,
            )),
        };
        let resolution = match ticket {
            Ok(ticket) => {
                let journal = match ask {
                    Ask::Keeping(journal) => Some(journal),
                    Ask::Anew | Ask::Again(_) => None,
                };
                let pending = ticket.pending().clone();
                self.keep(journal, &pending);
                self.emit(AgentEvent::ConfirmationPending(pending.clone()));
                let waiting = Awaiting {
                    run: self,
                    id: Some(pending.id.clone()),
                    tool,
                };
                let resolution = ticket.resolution().await;
                waiting.resolved(resolution.clone());
                // Approved, the run is not asked again: it is told as
                // interrupted should the call not return in this process.
                if let Resolution::Approved { by } = &resolution {
                    self.keep_approved(&pending, by.as_deref());
                    return Ok(resolution);
                }
                resolution
            }
            // A kept run's confirmation that expired while no host ran.
            Err(expired) => expired,
        };
        // Declined: what follows is not asked again.
        self.unkeep();
        Ok(resolution)
    }

    /// The WASI randomness and clocks of a new skill invocation's steps:
    /// fresh, or in a resumed conversation those they had before.
    fn wasi_sources(&self) -> WasiSources {
        match self.replay() {
            Replayed::Told(Told::Wasi { sources }) => sources,
            // Fresh ones, for steps that make no call any more: the run
            // has stopped keeping to its record.
            Replayed::Told(_) | Replayed::PastTheRecord => {
                self.diverged("ran steps where it had not");
                WasiSources::fresh()
            }
            Replayed::Live => {
                let sources = WasiSources::fresh();
                self.record(|| Told::Wasi {
                    sources: sources.clone(),
                });
                sources
            }
        }
    }

    /// Where a resumed run's replay is, at the next thing it is told.
    fn replay(&self) -> Replayed {
        let Some(mut tape) = self.kept.as_ref().and_then(Keeping::tape) else {
            return Replayed::Live;
        };
        if !tape.replaying() {
            return Replayed::Live;
        }
        tape.next().map_or(Replayed::PastTheRecord, Replayed::Told)
    }

    /// Why a resumed run stopped keeping to its record, if it did.
    fn divergence(&self) -> Option<String> {
        let tape = self.kept.as_ref().and_then(Keeping::tape)?;
        tape.divergence().map(str::to_owned)
    }

    /// Whether the run is a resumed conversation still replaying.
    fn replaying(&self) -> bool {
        self.kept
            .as_ref()
            .and_then(Keeping::tape)
            .is_some_and(|tape| tape.replaying())
    }

    /// Whether what the run is told is recorded: a kept conversation.
    fn taping(&self) -> bool {
        self.kept.as_ref().and_then(Keeping::tape).is_some()
    }

    /// Records what the run was told, when it is taped.
    fn record(&self, told: impl FnOnce() -> Told) {
        if let Some(mut tape) = self.kept.as_ref().and_then(Keeping::tape) {
            tape.record(told());
        }
    }

    /// The error of a resumed run that did not do what it did before: it
    /// ends, since past that point a call could repeat a write.
    fn diverged(&self, what: &str) -> AgentError {
        let why = format!(
            "resumed after its host restarted, the run {what}: it does not make the same calls \
             as before (the model, the skills or the settings changed), so it was stopped"
        );
        if let Some(mut tape) = self.kept.as_ref().and_then(Keeping::tape) {
            tape.diverge(why.clone());
        }
        AgentError::Aborted(why)
    }

    /// [`Self::diverged`] at a call of `tool`, which is not made: the run
    /// stops at its next step.
    fn diverged_call(&self, tool: &str) -> CallError {
        let why = self.diverged(&format!("called `{tool}` where it had not"));
        CallError::Tool(ToolError::Failed(format!("not executed: {why}")))
    }

    /// How many calls have been declined so far: a mark for
    /// [`Self::declined_since`].
    pub(super) fn declined_count(&self) -> usize {
        self.declined_calls().len()
    }

    /// The calls declined after `mark` (a [`Self::declined_count`]).
    pub(super) fn declined_since(&self, mark: usize) -> Vec<(String, Declined)> {
        self.declined_calls()
            .get(mark..)
            .unwrap_or_default()
            .to_vec()
    }

    fn declined_calls(&self) -> std::sync::MutexGuard<'_, Vec<(String, Declined)>> {
        self.declined.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes the run down while it waits on `pending`, when it is kept: a
    /// skill run with its steps' `journal`, a conversation with its tape.
    /// A run that cannot be written down still waits, in memory alone; the
    /// log says so.
    fn keep(&self, journal: Option<&Journal>, pending: &PendingConfirmation) {
        let Some(keeping) = &self.kept else { return };
        let Some(kept) = keeping.kept_run(self, journal, KeptConfirmation::of(pending)) else {
            return;
        };
        if let Err(error) = keeping.save(&kept) {
            tracing::warn!(run = %self.id, %error, dir = %keeping.store.dir().display(),
                "a run waiting for a person could not be kept on disk: a restart would lose it");
        }
    }

    /// Writes down, in place of the wait, that `approved` was approved (by
    /// `by`) and its call is under way, when the run is kept. Should that
    /// fail, the wait is taken off all the same: a restart must not ask
    /// again for a write that may have run.
    fn keep_approved(&self, approved: &PendingConfirmation, by: Option<&str>) {
        let Some(keeping) = &self.kept else { return };
        let record = ApprovedRun::of(self, approved, by);
        self.keep_approval(keeping, record, "while the call runs");
    }

    /// Writes down what the approved call returned, in place of the
    /// approval, when the run is kept: until the run ends, a restart tells
    /// that the call ran and what came of it, rather than nothing.
    fn keep_returned(&self, result: &Result<Value, ToolError>) {
        let Some(keeping) = &self.kept else { return };
        let Some(mut record) = keeping.take_approval() else {
            return;
        };
        record.returned = Some(Returned::of(result));
        self.keep_approval(keeping, record, "before the run ends");
    }

    /// Writes `record` down; should that fail, what was kept of the run is
    /// taken off all the same, since a restart must not ask again for a
    /// write that may have run (`until` says how long the log's warning
    /// holds).
    fn keep_approval(&self, keeping: &Keeping, record: ApprovedRun, until: &str) {
        if let Err(error) = keeping.save_approval(record) {
            tracing::warn!(run = %self.id, %error, dir = %keeping.store.dir().display(),
                "an approval could not be written down: a restart {until} would not tell of it");
            keeping.remove(&self.id);
        }
    }

    /// Takes what was kept of the run off disk: it does not wait any more.
    pub(super) fn unkeep(&self) {
        if let Some(kept) = &self.kept {
            kept.remove(&self.id);
        }
    }

    fn last_write(&self) -> std::sync::MutexGuard<'_, Option<(String, String)>> {
        self.last_write
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// [`Self::call_tool`], reported as a [`AgentEvent::ToolCalled`] event
    /// (its outcome holds a copy of the result, which is returned as is).
    pub(super) async fn call_tool_reported(
        &self,
        caller: &Caller,
        tool: &str,
        arguments: Value,
        ask: Ask<'_>,
    ) -> Result<Value, CallError> {
        let result = self.call_tool(caller, tool, arguments.clone(), ask).await;
        self.report(caller, tool, arguments, CallOutcome::of_tool(tool, &result));
        result
    }

    /// Reports a finished (or refused) call.
    pub(super) fn report(
        &self,
        caller: &Caller,
        tool: &str,
        arguments: Value,
        outcome: CallOutcome,
    ) {
        self.emit(AgentEvent::ToolCalled {
            caller: caller.clone(),
            tool: tool.to_owned(),
            arguments,
            outcome,
        });
    }
}

/// Where a skill's deterministic steps send their tool calls: the run's
/// executor, so that they are confirmed and reported like any other call.
///
/// A call that waits for a person's approval is not awaited inside the
/// sandbox, where it would hold the instance and its pool slot for as long
/// as the person takes: the dispatcher suspends the invocation instead
/// ([`DispatchError::Suspend`]), the skill's executor asks and waits
/// outside it, and the steps run again in a fresh instance. Every call
/// answered so far is then answered from the [`Journal`], not executed
/// again: deterministic steps make the same calls given the same input and
/// answers.
pub(super) struct StepsDispatch {
    run: Arc<RunContext>,
    /// Whether calls are recorded: only when one of the skill's tools may
    /// wait for approval, since only a suspension leads to a replay.
    journaled: bool,
    journal: Mutex<Journal>,
}

/// The calls a skill's steps made in one invocation, across its attempts.
/// Serialized (for a kept run, see [`super::kept`]) it is what the next
/// attempt replays: the answers and the WASI sources.
#[derive(Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Journal {
    /// The calls answered so far, in order.
    answered: Vec<AnsweredCall>,
    /// How many of them the current attempt has made again.
    #[serde(skip)]
    replayed: usize,
    /// The call the current attempt was suspended at: a tool and its
    /// arguments, waiting for approval.
    #[serde(skip)]
    parked: Option<(String, Value)>,
    /// The WASI randomness and clocks every attempt shares, from the first
    /// attempt that used WASI.
    wasi: Option<WasiSources>,
    /// How the current attempt's calls departed from the journal, if they
    /// did: from there on no call of the attempt runs, and the invocation
    /// fails ([`Journal::take_divergence`]).
    #[serde(skip)]
    divergence: Option<String>,
}

#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct AnsweredCall {
    tool: String,
    arguments: Value,
    answer: Result<Value, ToolError>,
}

impl Journal {
    /// Takes the call the last attempt was suspended at.
    pub(super) fn take_parked(&mut self) -> Option<(String, Value)> {
        self.parked.take()
    }

    /// Records the answer to a call, made after every call answered before.
    pub(super) fn record(
        &mut self,
        tool: String,
        arguments: Value,
        answer: Result<Value, ToolError>,
    ) {
        self.answered.push(AnsweredCall {
            tool,
            arguments,
            answer,
        });
        self.replayed = self.answered.len();
    }

    /// Whether the current attempt has calls of the journal still to make.
    fn replaying(&self) -> bool {
        self.divergence.is_none() && self.replayed < self.answered.len()
    }

    /// The recorded answer when the attempt is replaying: the answer given
    /// before. Once the steps make a different call, that call and every
    /// later one of the attempt are refused unexecuted: past the change, a
    /// call could repeat a write that already ran (after its approval).
    fn replay(&mut self, tool: &str, arguments: &Value) -> Option<Result<Value, ToolError>> {
        const NOT_EXECUTED: &str = "not executed: after an approval, the steps made other \
                                    calls than before, so the invocation ends";
        if self.divergence.is_some() {
            return Some(Err(ToolError::Failed(NOT_EXECUTED.to_owned())));
        }
        let before = self.answered.get(self.replayed)?;
        self.replayed += 1;
        if before.tool == tool && before.arguments == *arguments {
            return Some(before.answer.clone());
        }
        self.divergence = Some(if before.tool == tool {
            format!("called `{tool}` with other arguments than before")
        } else {
            format!("called `{tool}` where they had called `{}`", before.tool)
        });
        Some(Err(ToolError::Failed(NOT_EXECUTED.to_owned())))
    }

    /// How the last attempt departed from the journal, if it did, and the
    /// tools its calls ran before ([`Journal::ran`]).
    pub(super) fn take_divergence(&mut self) -> Option<(String, Vec<String>)> {
        let divergence = self.divergence.take()?;
        Some((divergence, self.ran()))
    }

    /// Whether any call was answered: the steps have been suspended.
    pub(super) fn answered_any(&self) -> bool {
        !self.answered.is_empty()
    }

    /// The tools of the calls answered so far that ran (a declined call did
    /// not).
    pub(super) fn ran(&self) -> Vec<String> {
        self.answered
            .iter()
            .filter(|call| !matches!(call.answer, Err(ToolError::Declined(_))))
            .map(|call| call.tool.clone())
            .collect()
    }
}

impl StepsDispatch {
    /// A dispatcher for one attempt of `skill`'s steps, which replays
    /// `journal` from its start.
    pub(super) fn new(run: Arc<RunContext>, skill: &Manifest, mut journal: Journal) -> Self {
        journal.replayed = 0;
        let journaled = skill
            .tools
            .iter()
            .any(|tool| run.may_wait_for_approval(tool));
        Self {
            run,
            journaled,
            journal: Mutex::new(journal),
        }
    }

    /// The journal, once the attempt is over.
    pub(super) fn take_journal(&self) -> Journal {
        std::mem::take(&mut self.journal())
    }

    fn journal(&self) -> std::sync::MutexGuard<'_, Journal> {
        self.journal.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A failed call as the steps see it.
pub(super) fn steps_error(tool: &str, error: CallError) -> ToolError {
    match error {
        CallError::Tool(error) => error,
        CallError::Declined(why) => ToolError::Declined(why.describe(tool)),
    }
}

#[async_trait]
impl ToolDispatch for StepsDispatch {
    async fn call_tool(
        &self,
        skill: &SkillName,
        tool: &str,
        arguments: Value,
    ) -> Result<Value, DispatchError> {
        if let Some(answer) = self.journal().replay(tool, &arguments) {
            return Ok(answer?);
        }
        // Unjournaled, none of the skill's tools asks for approval.
        if self.journaled && self.run.waits_for_approval(tool, &arguments) {
            self.journal().parked = Some((tool.to_owned(), arguments));
            return Err(DispatchError::Suspend);
        }
        let caller = Caller::Skill(skill.clone());
        let recorded = self.journaled.then(|| arguments.clone());
        let answer = self
            .run
            .call_tool_reported(&caller, tool, arguments, Ask::Anew)
            .await
            .map_err(|error| steps_error(tool, error));
        if let Some(arguments) = recorded {
            self.journal()
                .record(tool.to_owned(), arguments, answer.clone());
        }
        Ok(answer?)
    }

    fn replaying(&self) -> bool {
        self.journal().replaying()
    }

    fn wasi_sources(&self) -> WasiSources {
        self.journal()
            .wasi
            .get_or_insert_with(|| self.run.wasi_sources())
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_replay_answers_the_same_calls_and_refuses_others() {
        let mut journal = Journal::default();
        let order = json!({"orderId": "88231"});
        journal.record(
            "queryOrder".into(),
            order.clone(),
            Ok(json!({"status": "delivered"})),
        );
        journal.record(
            "applyRefund".into(),
            json!({"orderId": "88231"}),
            Err(ToolError::Declined(
                "a person declined `applyRefund`".into(),
            )),
        );
        assert_eq!(journal.replayed, 2);

        assert!(!journal.replaying());

        journal.replayed = 0;
        assert!(journal.replaying());
        assert_eq!(
            journal.replay("queryOrder", &order),
            Some(Ok(json!({"status": "delivered"})))
        );
        assert!(journal.replaying());
        let Some(Err(ToolError::Failed(why))) = journal.replay("applyRefund", &json!({})) else {
            panic!("a call with other arguments was answered");
        };
        assert!(why.starts_with("not executed"), "{why}");
        // Past the change, nothing of the attempt runs, even past the
        // journal's end; and no call is replayed any more.
        assert!(!journal.replaying());
        assert!(matches!(
            journal.replay("applyRefund", &json!({"orderId": "88231"})),
            Some(Err(ToolError::Failed(_)))
        ));
        let (change, ran) = journal.take_divergence().expect("the attempt diverged");
        assert_eq!(
            change,
            "called `applyRefund` with other arguments than before"
        );
        // The declined write did not run.
        assert_eq!(ran, ["queryOrder"]);
    }

    #[test]
    fn an_attempt_that_keeps_to_the_journal_goes_on_past_it() {
        let mut journal = Journal::default();
        let order = json!({"orderId": "88231"});
        journal.record("queryOrder".into(), order.clone(), Ok(json!({})));
        journal.replayed = 0;
        assert_eq!(journal.replay("queryOrder", &order), Some(Ok(json!({}))));
        // Past the journal, calls are new: the dispatcher makes them.
        assert_eq!(journal.replay("applyRefund", &json!({})), None);
        assert!(journal.take_divergence().is_none());
    }
}
