//! The [`Agent`]: what a run needs, and how runs start.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use arc_swap::{ArcSwap, ArcSwapOption};
use serde_json::Value;

use super::catalog::Catalog;
use super::config::{AgentConfig, UnknownPolicyTool};
use super::confirm::Confirmations;
use super::events::{AgentEvent, Caller};
use super::ids::RunId;
use super::kept::{
    ApprovedRun, InterruptedRun, Keeping, Kept, KeptRun, KeptWhat, ResumedRun, RunStore, Stored,
    Tape, UnreadableRun,
};
use super::llm::{LlmClient, LlmError, Message};
use super::react::{Loop, MainScope};
use super::run::{RunContext, RunHandle, RunObserver, RunOptions, RunOutput, SkillOutput};
use super::skill;
use super::transcript::Transcript;
use crate::runtime::InvokeError;
use crate::scope::{SkillScope, ToolScope};
use crate::skills::{SkillRegistry, SkillSnapshot, SkillVersion};
use crate::tools::ToolRegistry;

/// Why a run could not start or did not finish.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// The run needs an LLM and none is configured. Skills with
    /// deterministic steps still run without one
    /// ([`Agent::start_skill`]), unless their steps hand over.
    #[error(
        "no LLM is configured, so only skills with deterministic steps can run; {}",
        crate::agent::llm::HOW_TO_CONFIGURE
    )]
    NotConfigured,
    /// An LLM call failed (after the client's retries).
    #[error("the {caller}'s LLM call failed: {cause}")]
    Llm {
        /// Whose call.
        caller: Caller,
        /// Why (in the message, so not also its `source()`).
        cause: LlmError,
    },
    /// The loop used all its rounds without a final answer. For a skill's
    /// sub-agent this is reported to the main agent, not raised.
    #[error("the {caller} gave no final answer within {rounds} rounds")]
    RoundLimit {
        /// Whose loop.
        caller: Caller,
        /// The limit.
        rounds: u32,
    },
    /// The model kept making the same call after being told it repeats
    /// itself. For a skill's sub-agent this is reported to the main agent.
    #[error(
        "the {caller} called `{function}` with the same arguments {times} times, even after being \
         told the result would not change; stopped"
    )]
    RepeatedCall {
        /// Whose loop.
        caller: Caller,
        /// The function called.
        function: String,
        /// Identical calls made.
        times: u32,
    },
    /// The request has no user message to answer.
    #[error("the request has no user message")]
    NoUserMessage,
    /// [`Agent::start_skill`] named no loaded skill.
    #[error("no skill named `{0}` is loaded")]
    UnknownSkill(String),
    /// [`Agent::start_skill_with`] named a skill outside the run's
    /// [`SkillScope`] ([`RunOptions::skills`]).
    #[error("the skill `{skill}` is not one this caller may use (its skills: {scope})")]
    SkillNotPermitted { skill: String, scope: SkillScope },
    /// [`Agent::start_skill`] got input its parameters schema refuses.
    #[error(transparent)]
    InvalidInput(InvokeError),
    /// The run's task panicked or was aborted.
    #[error("the run ended abnormally: {0}")]
    Aborted(String),
}

impl AgentError {
    /// A stable snake_case name of the variant, for logs and metrics
    /// labels (`llm`, `round_limit`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            AgentError::NotConfigured => "not_configured",
            AgentError::Llm { .. } => "llm",
            AgentError::RoundLimit { .. } => "round_limit",
            AgentError::RepeatedCall { .. } => "repeated_call",
            AgentError::NoUserMessage => "no_user_message",
            AgentError::UnknownSkill(_) => "unknown_skill",
            AgentError::SkillNotPermitted { .. } => "skill_not_permitted",
            AgentError::InvalidInput(_) => "invalid_input",
            AgentError::Aborted(_) => "aborted",
        }
    }
}

/// What every run of an agent shares.
pub(super) struct AgentInner {
    /// Replaced whole ([`Agent::replace_llm`]); read through
    /// [`AgentInner::llm`] for each call to the model.
    llm: ArcSwapOption<LlmClient>,
    pub(super) skills: Arc<SkillRegistry>,
    /// The tools every call runs on ([`AgentBuilder::tools`]); `None`: those
    /// of the snapshot the run started on.
    tools: Option<Arc<ToolRegistry>>,
    /// Replaced whole ([`Agent::replace_config`]); read through
    /// [`AgentInner::config`] where it is used.
    config: ArcSwap<AgentConfig>,
    pub(super) confirmations: Confirmations,
    pub(super) observer: Option<RunObserver>,
    /// Where direct skill runs are kept while their steps wait.
    kept_runs: Option<Arc<RunStore>>,
    /// The catalog of the latest snapshot a run started on, under the
    /// settings it was built with.
    catalog: Mutex<Option<CachedCatalog>>,
}

/// A catalog of every skill and tool, and what it was built from.
struct CachedCatalog {
    snapshot: Arc<SkillSnapshot>,
    config: Arc<AgentConfig>,
    catalog: Arc<Catalog>,
}

impl AgentInner {
    /// The settings in force.
    pub(super) fn config(&self) -> Arc<AgentConfig> {
        self.config.load_full()
    }

    /// The LLM in force, if any.
    pub(super) fn llm(&self) -> Option<Arc<LlmClient>> {
        self.llm.load_full()
    }

    /// The tools a run over `snapshot` calls.
    pub(super) fn tools_of<'a>(&'a self, snapshot: &'a SkillSnapshot) -> &'a Arc<ToolRegistry> {
        self.tools.as_ref().unwrap_or(snapshot.tools())
    }

    /// The functions a run over `snapshot` that may use the skills of
    /// `skill_scope` and the tools of `tool_scope` is offered. The catalog
    /// of every skill and tool is kept for the next run on the same
    /// snapshot.
    pub(super) fn catalog_for(
        &self,
        snapshot: &Arc<SkillSnapshot>,
        skill_scope: &SkillScope,
        tool_scope: &ToolScope,
    ) -> Arc<Catalog> {
        let tools = self.tools_of(snapshot);
        let config = self.config();
        let catalog = || {
            let disclosure = &config.disclosure;
            Catalog::new(tools, snapshot, skill_scope, tool_scope, disclosure)
        };
        if !skill_scope.is_all() || !tool_scope.is_all() {
            return Arc::new(catalog());
        }
        let mut cached = self.catalog.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(cached) = cached.as_ref()
            && Arc::ptr_eq(&cached.snapshot, snapshot)
            && Arc::ptr_eq(&cached.config, &config)
        {
            return cached.catalog.clone();
        }
        let catalog = Arc::new(catalog());
        *cached = Some(CachedCatalog {
            snapshot: snapshot.clone(),
            config: config.clone(),
            catalog: catalog.clone(),
        });
        catalog
    }
}

/// The main agent and the scoped sub-agent executor over one skill
/// registry. Cheap to clone; clones share the pending confirmations.
///
/// ```ignore
/// let agent = Agent::builder(skills).llm(LlmClient::from_env()?).build()?;
/// let mut run = agent.ask("my order 88231 robot vacuum is broken, refund it")?;
/// while let Some(event) = run.events.recv().await {
///     if let AgentEvent::ConfirmationPending(pending) = &event {
///         agent.confirmations().approve(pending.id.as_str())?;
///     }
/// }
/// let output = run.result().await?;
/// ```
#[derive(Clone)]
pub struct Agent {
    inner: Arc<AgentInner>,
}

/// Builds an [`Agent`].
pub struct AgentBuilder {
    skills: Arc<SkillRegistry>,
    tools: Option<Arc<ToolRegistry>>,
    llm: Option<LlmClient>,
    config: AgentConfig,
    observer: Option<RunObserver>,
    confirmations: Confirmations,
    kept_runs: Option<Arc<RunStore>>,
}

impl AgentBuilder {
    /// The LLM of the main agent and the sub-agents. Without one, only
    /// deterministic skills run.
    pub fn llm(mut self, llm: LlmClient) -> Self {
        self.llm = Some(llm);
        self
    }

    /// Settings; default: [`AgentConfig::default`].
    pub fn config(mut self, config: AgentConfig) -> Self {
        self.config = config;
        self
    }

    /// Executes every tool call on `tools` instead of the registry's
    /// ([`SkillRegistry::tools`], which may change): the same tools over
    /// other state, e.g. the demo tools on a scratch database for a test
    /// run. Skills were resolved against the registry's tools; a declared
    /// tool missing from `tools` is refused as unknown when called, never
    /// run anywhere else.
    pub fn tools(mut self, tools: Arc<ToolRegistry>) -> Self {
        self.tools = Some(tools);
        self
    }

    /// Watches every run: `observer` is called as each run starts and
    /// returns the function that sees that run's events, in order, as they
    /// are emitted (metrics, host-wide event streams). It runs on the run's
    /// own task, so observing costs no task or channel per run.
    pub fn observe_runs(mut self, observer: RunObserver) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Keeps runs that wait for a person in `store`, so that they outlive
    /// the process ([`super::kept`] says which runs, and how);
    /// [`Agent::resume_kept_runs`] resumes what it holds.
    pub fn keep_runs(mut self, store: Arc<RunStore>) -> Self {
        self.kept_runs = Some(store);
        self
    }

    /// Opens the runs' confirmations in `confirmations`, which the caller
    /// already shares (the host's metrics read it before the agent exists).
    pub(crate) fn confirmations(mut self, confirmations: Confirmations) -> Self {
        self.confirmations = confirmations;
        self
    }

    /// The agent; an error when its confirmation policy names a tool that
    /// is not registered.
    pub fn build(self) -> Result<Agent, UnknownPolicyTool> {
        let tools = self.tools.clone().unwrap_or_else(|| self.skills.tools());
        check(&self.config, &tools)?;
        Ok(Agent {
            inner: Arc::new(AgentInner {
                llm: ArcSwapOption::from_pointee(self.llm),
                tools: self.tools,
                skills: self.skills,
                config: ArcSwap::from_pointee(self.config),
                confirmations: self.confirmations,
                observer: self.observer,
                kept_runs: self.kept_runs,
                catalog: Mutex::new(None),
            }),
        })
    }
}

/// Checks `config` against `tools`: an error when its confirmation policy
/// names a tool that is not registered; a warning for each `keep_public`
/// tool that is not.
fn check(config: &AgentConfig, tools: &ToolRegistry) -> Result<(), UnknownPolicyTool> {
    config.confirmation.check(tools)?;
    for name in &config.disclosure.keep_public {
        if !tools.contains(name) {
            tracing::warn!(tool = %name, "keep_public names a tool that is not registered");
        }
    }
    Ok(())
}

impl Agent {
    /// An agent over `skills` and, unless [`AgentBuilder::tools`] says
    /// otherwise, the tools they were resolved against: a run takes both
    /// from the snapshot it starts on ([`SkillSnapshot::tools`]), so skills
    /// and tools always agree.
    pub fn builder(skills: Arc<SkillRegistry>) -> AgentBuilder {
        AgentBuilder {
            skills,
            tools: None,
            llm: None,
            config: AgentConfig::default(),
            observer: None,
            confirmations: Confirmations::default(),
            kept_runs: None,
        }
    }

    /// The settings in force.
    pub fn config(&self) -> Arc<AgentConfig> {
        self.inner.config()
    }

    /// Puts `config` in force from now on, for the runs under way too in
    /// what they read from now on: the functions a round offers, whether a
    /// call waits for approval; and who may approve a confirmation still
    /// pending is what its policy says now.
    /// An error, changing nothing, when the policy names a tool that is not
    /// registered.
    pub fn replace_config(&self, config: AgentConfig) -> Result<(), UnknownPolicyTool> {
        let tools = self
            .inner
            .tools
            .clone()
            .unwrap_or_else(|| self.inner.skills.tools());
        check(&config, &tools)?;
        let config = Arc::new(config);
        self.inner.config.store(config.clone());
        self.inner.confirmations.hold_to(&config.confirmation);
        Ok(())
    }

    /// Puts `llm` in force from now on (`None`: no LLM), for the runs
    /// under way too: their next call to the model goes to it. An agent
    /// of a [`SkillHost`](crate::embed::SkillHost) is given its LLM by
    /// [`SkillHost::replace_llm_from_lookup`](crate::embed::SkillHost::replace_llm_from_lookup),
    /// which keeps the host's `llm()` in step.
    pub fn replace_llm(&self, llm: Option<LlmClient>) {
        self.inner.llm.store(llm.map(Arc::new));
    }

    /// Whether an LLM is configured.
    pub fn has_llm(&self) -> bool {
        self.inner.llm.load().is_some()
    }

    /// The pending confirmations of every run: answer them here.
    pub fn confirmations(&self) -> &Confirmations {
        &self.inner.confirmations
    }

    /// Runs at work now: started and not ended, and not waiting for a
    /// person's answer.
    pub fn runs_at_work(&self) -> usize {
        self.inner.confirmations.activity().at_work()
    }

    /// Resolves once no run is at work: every run has ended or waits for a
    /// person's answer. What a shutdown waits for after its last request,
    /// so that runs carried on with nobody reading them — approved by a
    /// person whose client went away — finish what was approved. A run
    /// that waits does not hold it up: it would wait until its expiry.
    /// An answer puts its run back to work at once, before the run wakes.
    pub fn idle(&self) -> impl Future<Output = ()> + Send + 'static {
        self.inner.confirmations.activity().idle()
    }

    /// What the main agent can be offered over the current skills.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.inner.catalog_for(
            &self.inner.skills.snapshot(),
            &SkillScope::all(),
            &ToolScope::all(),
        )
    }

    /// Starts the main agent on one user message.
    pub fn ask(&self, text: &str) -> Result<RunHandle<RunOutput>, AgentError> {
        self.start(vec![Message::user(text)])
    }

    /// Starts the main agent on a conversation (its latest user message is
    /// the one to answer). [`AgentConfig::system_prompt`] comes first; the
    /// conversation's leading system messages are added to it, so that a
    /// client's persona never replaces the operator's prompt. Loaded skills
    /// are recognized in the history (see [`Transcript`]).
    ///
    /// The run is a spawned task (call this inside a Tokio runtime) that
    /// outlives the returned handle.
    pub fn start(&self, messages: Vec<Message>) -> Result<RunHandle<RunOutput>, AgentError> {
        self.start_with(messages, RunOptions::new())
    }

    /// Like [`Agent::start`], and the run also reports the text the model
    /// generates as it arrives ([`AgentEvent::TextDelta`]): every LLM call
    /// of the run asks the server to stream. For chat front ends.
    pub fn start_streaming(
        &self,
        messages: Vec<Message>,
    ) -> Result<RunHandle<RunOutput>, AgentError> {
        self.start_with(messages, RunOptions::new().streaming())
    }

    /// Like [`Agent::start`], as `options` say: streaming, and what every
    /// tool the run calls is handed ([`RunOptions::with`]).
    pub fn start_with(
        &self,
        messages: Vec<Message>,
        options: RunOptions,
    ) -> Result<RunHandle<RunOutput>, AgentError> {
        if !self.has_llm() {
            return Err(AgentError::NotConfigured);
        }
        if !messages
            .iter()
            .any(|message| matches!(message, Message::User { .. }))
        {
            return Err(AgentError::NoUserMessage);
        }
        let messages = with_system_prompt(&self.inner.config().system_prompt, messages);
        let kept = self.keeping(&options, || KeptWhat::Chat {
            messages: messages.clone(),
            tape: Mutex::default(),
        });
        let snapshot = self.inner.skills.snapshot();
        let (run, events) =
            RunContext::new(self.inner.clone(), options, RunId::random(), snapshot, kept);
        let body = main_agent(run.clone(), Transcript::from_messages(messages));
        Ok(RunHandle::spawn(&run, events, body))
    }

    /// Runs the skill `name` on `input` directly, as the main agent would
    /// call it: its deterministic steps (which need no LLM), or its
    /// sub-agent. Events and confirmations work as in [`Agent::start`].
    pub fn start_skill(
        &self,
        name: &str,
        input: Value,
    ) -> Result<RunHandle<SkillOutput>, AgentError> {
        self.start_skill_with(name, input, RunOptions::new())
    }

    /// Like [`Agent::start_skill`], as `options` say (see
    /// [`Agent::start_with`]).
    pub fn start_skill_with(
        &self,
        name: &str,
        input: Value,
        options: RunOptions,
    ) -> Result<RunHandle<SkillOutput>, AgentError> {
        let scope = options.skill_scope();
        if !scope.allows(name) {
            return Err(AgentError::SkillNotPermitted {
                skill: name.to_owned(),
                scope: scope.clone(),
            });
        }
        let snapshot = self.inner.skills.snapshot();
        let skill = snapshot
            .get(name)
            .ok_or_else(|| AgentError::UnknownSkill(name.to_owned()))?
            .clone();
        skill
            .component
            .validate_input(&input)
            .map_err(AgentError::InvalidInput)?;
        let kept = self.keeping(&options, || KeptWhat::Skill {
            skill: SkillVersion::of(&skill.component),
            input: input.clone(),
        });
        let (run, events) =
            RunContext::new(self.inner.clone(), options, RunId::random(), snapshot, kept);
        let body = {
            let run = run.clone();
            async move {
                let outcome = skill::invoke(&run, &skill, input).await?;
                Ok(SkillOutput {
                    outcome,
                    stats: run.stats(),
                })
            }
        };
        Ok(RunHandle::spawn(&run, events, body))
    }

    /// What a new run started with `options` keeps while it waits: `what`,
    /// when the agent keeps runs and the run's tool context is empty (what
    /// an embedder attached cannot be written down, see `kept`).
    fn keeping(&self, options: &RunOptions, what: impl FnOnce() -> KeptWhat) -> Option<Keeping> {
        let store = self.inner.kept_runs.clone()?;
        options
            .context_is_empty()
            .then(|| Keeping::new(store, what()))
    }

    /// Where runs are kept while they wait ([`AgentBuilder::keep_runs`]).
    pub fn run_store(&self) -> Option<&RunStore> {
        self.inner.kept_runs.as_deref()
    }

    /// Resumes every run kept in the agent's store ([`AgentBuilder::keep_runs`]),
    /// each under its own id and waiting again on its confirmation (same id,
    /// same expiry), and returns them with the files that hold no run this
    /// host can resume (left where they are, for a person to look at). A
    /// skill run whose skill is no longer loaded, or changed, ends at once
    /// with its skill failed, saying what already ran; a conversation that
    /// no longer makes the calls it made is stopped. Call it once, as the
    /// host starts, inside a Tokio runtime.
    pub fn resume_kept_runs(&self) -> (Vec<ResumedRun>, Vec<UnreadableRun>) {
        let Some(store) = &self.inner.kept_runs else {
            return (Vec::new(), Vec::new());
        };
        let (stored, unreadable) = store.load_all();
        let runs = stored
            .into_iter()
            .map(|stored| match stored {
                Stored::Waiting(kept) => self.resume(store, kept),
                // Told once, then gone: the next start does not tell again.
                Stored::Approved(approved) => {
                    store.remove(&approved.run);
                    ResumedRun::Interrupted(self.interrupted(approved))
                }
            })
            .collect();
        (runs, unreadable)
    }

    /// A kept run whose approved call was under way when its host stopped,
    /// to be told. Its confirmation is on record as approved and
    /// interrupted ([`Confirmations::status`]).
    fn interrupted(&self, approved: ApprovedRun) -> InterruptedRun {
        let confirmation = approved.approved.shown(
            approved.run.clone(),
            approved.requested_by.clone(),
            approved.caller.clone(),
            &self.inner.config().confirmation,
        );
        let interrupted = InterruptedRun::from(approved);
        self.inner
            .confirmations
            .remember_interrupted(confirmation, &interrupted);
        interrupted
    }

    fn resume(&self, store: &Arc<RunStore>, kept: KeptRun) -> ResumedRun {
        let KeptRun {
            run: id,
            requested_by,
            skills,
            tools,
            kept,
            waiting,
            started,
            trace,
            ..
        } = kept;
        let started = started.unwrap_or_else(SystemTime::now);
        let snapshot = self.inner.skills.snapshot();
        // As limited as when it started: a restart widens no scope.
        let mut options = RunOptions::new()
            .skills(SkillScope::of(skills))
            .tools(ToolScope::of(tools));
        if let Some(principal) = &requested_by {
            options = options.on_behalf_of(principal.clone());
        }
        if let Some(trace) = trace {
            options = options.trace(trace);
        }
        let open = |what| {
            let kept = Keeping::resumed(store.clone(), what, true, started);
            RunContext::new(
                self.inner.clone(),
                options,
                id,
                snapshot.clone(),
                Some(kept),
            )
        };
        match kept {
            Kept::Skill {
                skill,
                input,
                journal,
            } => {
                let loaded = snapshot.get(skill.name.as_str()).cloned();
                let (run, events) = open(KeptWhat::Skill {
                    skill: skill.clone(),
                    input: input.clone(),
                });
                let body = {
                    let (run, skill) = (run.clone(), skill.clone());
                    async move {
                        let kept = skill::KeptInvocation {
                            skill,
                            input,
                            journal: *journal,
                            waiting,
                        };
                        let outcome = skill::resume(&run, loaded.as_ref(), kept).await?;
                        Ok(SkillOutput {
                            outcome,
                            stats: run.stats(),
                        })
                    }
                };
                ResumedRun::Skill {
                    skill,
                    requested_by,
                    run: RunHandle::spawn(&run, events, body),
                }
            }
            Kept::Chat { messages, told } => {
                let (run, events) = open(KeptWhat::Chat {
                    messages: messages.clone(),
                    tape: Mutex::new(Tape::resumed(told, waiting)),
                });
                let body = {
                    let run = run.clone();
                    async move { main_agent(run.clone(), Transcript::from_messages(messages)).await }
                };
                ResumedRun::Chat {
                    requested_by,
                    started,
                    run: RunHandle::spawn(&run, events, body),
                }
            }
        }
    }
}

/// The main agent's run.
async fn main_agent(
    run: Arc<RunContext>,
    mut transcript: Transcript,
) -> Result<RunOutput, AgentError> {
    let main = Loop {
        run: &run,
        caller: Caller::Main,
        scope: MainScope,
        max_rounds: run.agent.config().max_rounds,
    };
    let end = main.run(&mut transcript).await?;
    run.emit(AgentEvent::Answer {
        text: end.answer.clone(),
    });
    Ok(RunOutput {
        answer: end.answer,
        finish_reason: end.finish_reason,
        messages: transcript.into_messages(),
        rounds: end.rounds,
        stats: run.stats(),
    })
}

/// `messages` after the operator's `prompt`, into which the conversation's
/// leading system messages are merged: one system message, first, as some
/// servers' chat templates accept a system message nowhere else.
fn with_system_prompt(prompt: &str, messages: Vec<Message>) -> Vec<Message> {
    let mut system = prompt.to_owned();
    let mut messages = messages.into_iter().peekable();
    while let Some(Message::System { content }) =
        messages.next_if(|message| matches!(message, Message::System { .. }))
    {
        system.push_str("\n\n");
        system.push_str(&content);
    }
    std::iter::once(Message::system(system))
        .chain(messages)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{Message, with_system_prompt};

    #[test]
    fn a_conversations_system_messages_add_to_the_operators_prompt() {
        let merged = with_system_prompt(
            "You work for Bit Select.",
            vec![
                Message::system("Answer like a pirate."),
                Message::system("Be brief."),
                Message::user("hi"),
                Message::system("Later instructions stay in place."),
            ],
        );
        assert_eq!(
            merged,
            [
                Message::system("You work for Bit Select.\n\nAnswer like a pirate.\n\nBe brief."),
                Message::user("hi"),
                Message::system("Later instructions stay in place."),
            ]
        );
        let alone = with_system_prompt("You work for Bit Select.", vec![Message::user("hi")]);
        assert_eq!(
            alone,
            [
                Message::system("You work for Bit Select."),
                Message::user("hi")
            ]
        );
    }
}
