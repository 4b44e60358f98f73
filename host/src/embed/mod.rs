//! The embedding API: a whole host — sandbox, signed skills, tools, agent,
//! hot reload, events and metrics — behind one entry point,
//! [`SkillHost::builder`].
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use serde_json::json;
//! use skillhost::agent::Decision;
//! use skillhost::embed::SkillHost;
//! use skillhost::skills::signature::{SignaturePolicy, TrustStore};
//! use skillhost::tools::demo::DemoDb;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let trusted = TrustStore::load(&["keys/trusted"])?;
//! let host = SkillHost::builder("skills", SignaturePolicy::Require(trusted))
//!     .demo_tools(Arc::new(DemoDb::open("shop.db")?))
//!     .llm_from_env() // none configured: only deterministic skills run
//!     .keep_public(["queryOrder", "searchKnowledge", "getCurrentTime"])
//!     .build()
//!     .await?;
//!
//! // Run a skill's deterministic steps; approve its write on the spot.
//! let run = host.invoke("processRefund", json!({"orderId": "88231", "reason": "broken"}))?;
//! let finished = run.finish_with(|_pending| Decision::Approve).await;
//! println!("{:?}", finished.result?.outcome);
//!
//! // Or watch everything the host does: a loop that lasts as long as the
//! // host, so in an application it gets a task of its own.
//! let mut events = host.subscribe();
//! while let Ok(event) = events.recv().await {
//!     println!("{}", serde_json::to_string(&event)?);
//! }
//! # Ok(()) }
//! ```
//!
//! Trust can change while the host runs: give
//! [`SkillHost::replace_signature_policy`] the store read again (a key
//! added, rotated or revoked), and every skill is held to it at once —
//! what a revoked key signed is unloaded, and does not run again in runs
//! under way. A key may be limited to the skills and tools it signs for
//! ([`TrustStore::with_scope`](crate::skills::signature::TrustStore::with_scope)).
//!
//! A [`SkillHost`] is cheap to clone; clones share everything. Hot reload
//! (on unless [`SkillHostBuilder::hot_reload`] turns it off) and the
//! forwarding of reload events stop when the last clone is dropped. The
//! HTTP gateway ([`crate::gateway`]) is built on this API and nothing else.

mod events;
mod feed;
pub mod mcp;
mod mcp_servers;
pub mod metrics;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwap;
use serde_json::Value;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

pub use events::{HostEvent, Invocation, LimitsChange, ToolsChange, TrustChange};
pub use feed::{EventFeed, EventId, FeedError, NotAnEventId};
pub use metrics::HostMetrics;

use crate::agent::catalog::DisclosureConfig;
use crate::agent::llm::{ConfigError, LlmClient, LlmConfig, LlmError, Message};
use crate::agent::{
    Agent, AgentConfig, AgentError, ConfirmError, ConfirmationPolicy, Confirmations, Decision,
    PendingConfirmation, ResumedRun, RunHandle, RunOptions, RunOutput, RunStore, RunStoreError,
    SkillOutput, UnknownPolicyTool,
};
use crate::runtime::{Limits, MemoryLimitFixed, Runtime, RuntimeConfig};
use crate::skills::registry::RegistryError;
use crate::skills::signature::SignaturePolicy;
use crate::skills::watcher::WatchError;
use crate::skills::{
    LoadProgress, ReloadEvent, SkillName, SkillRegistry, SkillSnapshot, WatchHandle,
};
use crate::tools::demo::{self, DemoDb};
use crate::tools::mcp::{McpConnection, McpError, McpServerConfig};
use crate::tools::{RegisterError, ToolRegistry};
use events::Observers;
use mcp_servers::McpServers;

/// Why a host could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// A tool could not be registered.
    #[error("registering tools: {0}")]
    Tools(#[from] RegisterError),
    /// The LLM settings are unusable (an absent LLM is not an error).
    #[error("configuring the LLM: {0}")]
    Llm(#[from] LlmError),
    /// The sandbox could not start.
    #[error("starting the sandbox: {0:#}")]
    Runtime(anyhow::Error),
    /// The skills directory could not be read. (A skill that fails to load
    /// is not an error: it is reported in the snapshot's failures.)
    #[error(transparent)]
    Skills(#[from] RegistryError),
    /// Hot reload was asked for and the directory cannot be watched.
    #[error(transparent)]
    Watch(#[from] WatchError),
    /// The confirmation policy names a tool that is not registered.
    #[error(transparent)]
    Policy(#[from] UnknownPolicyTool),
    /// The directory to keep waiting runs in cannot be used.
    #[error(transparent)]
    KeptRuns(#[from] RunStoreError),
    /// An MCP server could not be reached, started or listed.
    #[error(transparent)]
    Mcp(#[from] McpError),
}

/// Why a host has no LLM, phrased as how to configure one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NoLlm(String);

/// Looks a setting up by its environment variable's name.
type Lookup = Box<dyn Fn(&str) -> Option<String> + Send>;

/// Where the LLM settings come from.
enum LlmSetup {
    None,
    FromLookup(Lookup),
    Config(LlmConfig),
    Client(LlmClient),
}

impl LlmSetup {
    /// The client it sets up, or why there is none; an error for settings
    /// that are there but wrong (a URL that does not parse, say).
    fn client(self) -> Result<Result<LlmClient, NoLlm>, LlmError> {
        Ok(match self {
            LlmSetup::None => Err(NoLlm(AgentError::NotConfigured.to_string())),
            LlmSetup::FromLookup(lookup) => match LlmConfig::from_lookup(lookup) {
                Ok(config) => Ok(LlmClient::new(config)?),
                Err(error @ ConfigError::NotConfigured { .. }) => Err(NoLlm(error.to_string())),
                Err(error) => return Err(error.into()),
            },
            LlmSetup::Config(config) => Ok(LlmClient::new(config)?),
            LlmSetup::Client(client) => Ok(client),
        })
    }
}

/// Builds a [`SkillHost`]. Every setting has a documented default except
/// the two [`SkillHost::builder`] requires.
pub struct SkillHostBuilder {
    skills_dir: PathBuf,
    policy: SignaturePolicy,
    tools: ToolRegistry,
    /// The first failed registration, reported by `build`.
    tools_error: Option<RegisterError>,
    llm: LlmSetup,
    runtime: RuntimeConfig,
    agent: AgentConfig,
    hot_reload: bool,
    load_progress: Option<Box<dyn FnMut(LoadProgress) + Send>>,
    kept_runs: Option<PathBuf>,
    mcp_servers: Vec<McpServerConfig>,
}

impl SkillHostBuilder {
    /// The tools skills and the agent may call, replacing any registered so
    /// far. Default: no tools (only skills that declare none load).
    pub fn tools(mut self, tools: ToolRegistry) -> Self {
        self.tools = tools;
        self
    }

    /// Registers tools on the builder's registry, e.g. an application's own
    /// [`Tool`](crate::tools::Tool)s. An error is reported by
    /// [`SkillHostBuilder::build`].
    pub fn register_tools(
        mut self,
        register: impl FnOnce(&mut ToolRegistry) -> Result<(), RegisterError>,
    ) -> Self {
        if let Err(error) = register(&mut self.tools) {
            self.tools_error.get_or_insert(error);
        }
        self
    }

    /// Takes tools from the MCP server `server` declares (see
    /// [`crate::tools::mcp`]), connected as the host is built, `${VAR}`s
    /// in its headers and environment read from the process environment;
    /// a server that cannot be reached or listed stops the build, naming
    /// it. The host follows the server's tools while it runs: when the
    /// server says they changed, when it restarted, and at
    /// [`SkillHost::relist_mcp_tools`].
    pub fn mcp_server(mut self, server: McpServerConfig) -> Self {
        self.mcp_servers.push(server);
        self
    }

    /// Registers the demo shop's tools (both articles' dialects) on `db`.
    pub fn demo_tools(self, db: Arc<DemoDb>) -> Self {
        self.register_tools(|tools| demo::register_all(tools, db))
    }

    /// The LLM of the main agent and the skills' sub-agents. Default: none —
    /// only skills with deterministic steps run, and chat is unavailable.
    pub fn llm(mut self, config: LlmConfig) -> Self {
        self.llm = LlmSetup::Config(config);
        self
    }

    /// Like [`SkillHostBuilder::llm`], with a client built by the caller
    /// (clones share its connection pool and usage totals).
    pub fn llm_client(mut self, client: LlmClient) -> Self {
        self.llm = LlmSetup::Client(client);
        self
    }

    /// Reads the LLM settings from the environment when the host is built
    /// ([`LlmConfig::from_env`]). Settings that are absent leave the host
    /// without an LLM; settings that are present but invalid fail `build`.
    pub fn llm_from_env(self) -> Self {
        self.llm_from_lookup(|name| std::env::var(name).ok())
    }

    /// Like [`SkillHostBuilder::llm_from_env`], with the variables looked up
    /// by `lookup` (e.g. the environment over a config file), see
    /// [`LlmConfig::from_lookup`].
    pub fn llm_from_lookup(
        mut self,
        lookup: impl Fn(&str) -> Option<String> + Send + 'static,
    ) -> Self {
        self.llm = LlmSetup::FromLookup(Box::new(lookup));
        self
    }

    /// Engine-wide settings. Default: [`RuntimeConfig::default`].
    pub fn runtime_config(mut self, config: RuntimeConfig) -> Self {
        self.runtime = config;
        self
    }

    /// Per-invocation limits. Default: [`Limits::default`].
    pub fn limits(mut self, limits: Limits) -> Self {
        self.runtime.limits = limits;
        self
    }

    /// Per-invocation limits of the skill `name`, in place of
    /// [`SkillHostBuilder::limits`] (see [`RuntimeConfig::skill_limits`]).
    pub fn skill_limits(mut self, name: SkillName, limits: Limits) -> Self {
        self.runtime.skill_limits.insert(name, limits);
        self
    }

    /// The agent's settings, replacing any set so far (disclosure and
    /// confirmation policy included). Default: [`AgentConfig::default`].
    pub fn agent_config(mut self, config: AgentConfig) -> Self {
        self.agent = config;
        self
    }

    /// What the main agent is offered. Default: [`DisclosureConfig::default`].
    pub fn disclosure(mut self, disclosure: DisclosureConfig) -> Self {
        self.agent.disclosure = disclosure;
        self
    }

    /// Tools that stay visible to the main agent even when skills absorb
    /// them (article 003's `queryOrder`, `searchKnowledge`,
    /// `getCurrentTime`). Default: none.
    pub fn keep_public<S: Into<String>>(mut self, tools: impl IntoIterator<Item = S>) -> Self {
        self.agent.disclosure.keep_public = tools.into_iter().map(Into::into).collect();
        self
    }

    /// Which calls need a person's approval. Default:
    /// [`ConfirmationPolicy::default`] (every write tool).
    pub fn confirmation_policy(mut self, policy: ConfirmationPolicy) -> Self {
        self.agent.confirmation = policy;
        self
    }

    /// Watch the skills directory and swap skills in and out as files
    /// change. Default: on — replacing a skill file is how a running host
    /// is updated.
    pub fn hot_reload(mut self, on: bool) -> Self {
        self.hot_reload = on;
        self
    }

    /// Called as [`SkillHostBuilder::build`] loads the skills directory
    /// (see [`SkillRegistry::load_dir_with_progress`]). Default: none.
    pub fn on_load_progress(mut self, progress: impl FnMut(LoadProgress) + Send + 'static) -> Self {
        self.load_progress = Some(Box::new(progress));
        self
    }

    /// Keeps runs that wait for a person (skill invocations and
    /// conversations) in `dir`, created for this user alone, so that they
    /// outlive the process: the next host built on `dir` resumes them,
    /// their confirmations pending again under the same ids
    /// ([`SkillHost::take_resumed_runs`]). Which runs are kept, and how:
    /// the `agent::kept` module. Default: none, runs waiting for a person
    /// end with the process.
    pub fn keep_runs(mut self, dir: impl Into<PathBuf>) -> Self {
        self.kept_runs = Some(dir.into());
        self
    }

    /// Starts the sandbox, loads the skills directory (in parallel; files
    /// that fail are reported in [`SkillSnapshot::failures`]) and, with hot
    /// reload, starts watching it. Call inside a Tokio runtime.
    pub async fn build(mut self) -> Result<SkillHost, BuildError> {
        if let Some(error) = self.tools_error {
            return Err(error.into());
        }
        let env = |name: &str| std::env::var(name).ok();
        let connected = McpConnection::open_all(&self.mcp_servers, env).await?;
        for tool in connected.iter().flat_map(|(_, tools)| tools) {
            self.tools.register(tool.clone())?;
        }
        // Before any skill loads: a policy mistake starts nothing.
        self.agent.confirmation.check(&self.tools)?;
        let kept_runs = self.kept_runs.map(RunStore::open).transpose()?;
        let llm = self.llm.client()?;
        let runtime = Runtime::new(self.runtime).map_err(BuildError::Runtime)?;
        let tools = Arc::new(self.tools);
        let progress = self.load_progress.unwrap_or_else(|| Box::new(|_| {}));
        let skills = Arc::new(
            SkillRegistry::load_dir_with_progress(
                runtime,
                tools.clone(),
                self.policy,
                &self.skills_dir,
                progress,
            )
            .await?,
        );
        // Made before the agent, so that the metrics can read its runs.
        let confirmations = Confirmations::default();
        let live = metrics::Live {
            runtime: skills.runtime().clone(),
            confirmations: confirmations.clone(),
        };
        let observers = Arc::new(Observers::new(skills.clone(), live));
        observers.metrics.set_skills_loaded(skills.snapshot().len());
        // Subscribed here, before the watcher starts, not in the task (which
        // may first run after the watcher's first events): no change is missed.
        let reloads = AbortOnDrop(tokio::spawn(events::forward_reloads(
            skills.subscribe(),
            skills.clone(),
            observers.clone(),
        )));
        let mcp = McpServers::new(skills.clone(), observers.clone(), connected);
        let watch = if self.hot_reload {
            Some(crate::skills::watch(skills.clone(), &self.skills_dir)?)
        } else {
            None
        };
        let tracked = observers.clone();
        let mut agent = Agent::builder(skills.clone())
            .config(self.agent)
            .confirmations(confirmations)
            .observe_runs(Arc::new(move |run| tracked.track(run)));
        if let Ok(llm) = &llm {
            agent = agent.llm(llm.clone());
        }
        if let Some(store) = kept_runs {
            agent = agent.keep_runs(Arc::new(store));
        }
        let agent = agent.build()?;
        let resumed = resume_kept_runs(&agent).await;
        Ok(SkillHost {
            inner: Arc::new(Inner {
                agent,
                resumed: Mutex::new(resumed),
                skills,
                skills_dir: self.skills_dir,
                llm: ArcSwap::from_pointee(llm),
                observers,
                mcp,
                _watch: watch,
                _reloads: reloads,
            }),
        })
    }
}

/// Resumes the runs `agent` keeps, saying in the log what it resumed and
/// which files it could not. Returns once each waits again on its
/// confirmation, or ended: an answer sent as soon as the host serves finds
/// its confirmation open.
async fn resume_kept_runs(agent: &Agent) -> Vec<ResumedRun> {
    let (resumed, unreadable) = agent.resume_kept_runs();
    for run in &resumed {
        run.settle().await;
    }
    for file in unreadable {
        tracing::warn!(file = %file.path.display(), reason = %file.reason,
            "a kept run could not be resumed; the file is left where it is");
    }
    for kept in &resumed {
        match kept {
            ResumedRun::Interrupted(interrupted) => {
                tracing::warn!(run = %interrupted.run, "{}", interrupted.without_result());
            }
            _ => {
                tracing::info!(run = %kept.id(), "a kept run resumed: it waits again for its answer")
            }
        }
    }
    resumed
}

/// Aborts a background task when dropped.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Why [`SkillHost::replace_mcp_servers`] changed nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplaceServersError {
    /// Two servers declared go by one name.
    #[error("two MCP servers are named `{0}`; give each its own name")]
    NameTwice(String),
    /// A server added could not be connected, or its tools not taken.
    #[error(transparent)]
    Connect(#[from] McpError),
    /// A tool of a server added has the name of another tool.
    #[error(transparent)]
    Tools(#[from] RegisterError),
}

/// What [`SkillHost::replace_signature_policy`] did.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PolicyReplaced {
    /// The keys trusted now, against before.
    pub trust: TrustChange,
    /// What changed in the skill files known ([`SkillRegistry::replace_policy`]).
    pub reloads: Vec<ReloadEvent>,
}

/// What [`SkillHost::update_tools`] did.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ToolsReplaced {
    /// The tools now, against before.
    pub tools: ToolsChange,
    /// What changed in the skill files known ([`SkillRegistry::update_tools`]).
    pub reloads: Vec<ReloadEvent>,
}

/// A running host: invoke skills, run the agent, answer confirmations,
/// subscribe to events, read metrics. Cheap to clone.
#[derive(Clone)]
pub struct SkillHost {
    inner: Arc<Inner>,
}

struct Inner {
    agent: Agent,
    /// The kept runs resumed as the host started, until taken.
    resumed: Mutex<Vec<ResumedRun>>,
    skills: Arc<SkillRegistry>,
    skills_dir: PathBuf,
    /// The agent's LLM, or why there is none; replaced with the agent's
    /// ([`SkillHost::replace_llm_from_lookup`]).
    llm: ArcSwap<Result<LlmClient, NoLlm>>,
    observers: Arc<Observers>,
    /// With a task per server, relisting its tools as they change.
    mcp: McpServers,
    _watch: Option<WatchHandle>,
    _reloads: AbortOnDrop,
}

impl SkillHost {
    /// The one entry point. `skills_dir` holds the skill components
    /// (`*.wasm`); `policy` decides which of them may load — there is no
    /// default, so that loading unsigned skills is always asked for by name
    /// ([`SignaturePolicy::AllowUnsigned`]).
    pub fn builder(skills_dir: impl Into<PathBuf>, policy: SignaturePolicy) -> SkillHostBuilder {
        SkillHostBuilder {
            skills_dir: skills_dir.into(),
            policy,
            tools: ToolRegistry::new(),
            tools_error: None,
            llm: LlmSetup::None,
            runtime: RuntimeConfig::default(),
            agent: AgentConfig::default(),
            hot_reload: true,
            load_progress: None,
            kept_runs: None,
            mcp_servers: Vec::new(),
        }
    }

    /// Where runs waiting for a person are kept
    /// ([`SkillHostBuilder::keep_runs`]), if they are.
    pub fn run_store(&self) -> Option<&RunStore> {
        self.inner.agent.run_store()
    }

    /// The runs kept on disk by an earlier host on the same directory
    /// ([`SkillHostBuilder::keep_runs`]) and resumed as this one started:
    /// each waits again on its confirmation (answer it as any other), or
    /// ended at once when it could not go on (its skill changed
    /// meanwhile), or was interrupted while its approved call ran
    /// ([`ResumedRun::Interrupted`]: tell its requester). Taken once; a run
    /// not taken goes on all the same.
    pub fn take_resumed_runs(&self) -> Vec<ResumedRun> {
        std::mem::take(
            &mut self
                .inner
                .resumed
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    /// Runs the skill `name` on `input`: its deterministic steps (no LLM
    /// needed) or its sub-agent. Fails at once, before anything runs, when
    /// no such skill is loaded ([`AgentError::UnknownSkill`]) or the input
    /// does not match its parameters ([`AgentError::InvalidInput`]). Writes
    /// that need approval wait for [`SkillHost::approve`]. The version that
    /// runs is the one loaded now, whatever reloads follow
    /// ([`RunHandle::skills`]). The run is a task of its own: like
    /// [`SkillHost::chat`], call it inside a Tokio runtime.
    pub fn invoke(&self, name: &str, input: Value) -> Result<RunHandle<SkillOutput>, AgentError> {
        self.inner.agent.start_skill(name, input)
    }

    /// Like [`SkillHost::invoke`], as `options` say: what every tool the
    /// run calls is handed, such as the end user it acts for
    /// ([`RunOptions::with`]).
    pub fn invoke_with(
        &self,
        name: &str,
        input: Value,
        options: RunOptions,
    ) -> Result<RunHandle<SkillOutput>, AgentError> {
        self.inner.agent.start_skill_with(name, input, options)
    }

    /// Runs the main agent on a conversation (see [`Agent::start`]).
    pub fn chat(&self, messages: Vec<Message>) -> Result<RunHandle<RunOutput>, AgentError> {
        self.inner.agent.start(messages)
    }

    /// Like [`SkillHost::chat`], as `options` say: streaming, and what
    /// every tool the run calls is handed ([`RunOptions::with`]).
    pub fn chat_with(
        &self,
        messages: Vec<Message>,
        options: RunOptions,
    ) -> Result<RunHandle<RunOutput>, AgentError> {
        self.inner.agent.start_with(messages, options)
    }

    /// Like [`SkillHost::chat`], reporting the model's text as it is
    /// generated (see [`Agent::start_streaming`]).
    pub fn chat_streaming(
        &self,
        messages: Vec<Message>,
    ) -> Result<RunHandle<RunOutput>, AgentError> {
        self.inner.agent.start_streaming(messages)
    }

    /// Approves the pending confirmation `id`: the call runs with the
    /// arguments shown. Returns what was approved.
    pub fn approve(&self, id: &str) -> Result<PendingConfirmation, ConfirmError> {
        self.confirmations().approve(id)
    }

    /// Rejects the pending confirmation `id`; the model (or the skill) is
    /// told, with `reason` if given.
    pub fn reject(
        &self,
        id: &str,
        reason: Option<String>,
    ) -> Result<PendingConfirmation, ConfirmError> {
        self.confirmations().reject(id, reason)
    }

    /// Answers the pending confirmation `id` on behalf of `by` (your
    /// user's id): the resolution in the run's events, the host's
    /// [`HostEvent`]s and the logs names them.
    pub fn answer(
        &self,
        id: &str,
        decision: Decision,
        by: Option<String>,
    ) -> Result<PendingConfirmation, ConfirmError> {
        self.confirmations().answer(id, decision, by)
    }

    /// Every pending confirmation of every run.
    pub fn confirmations(&self) -> &Confirmations {
        self.inner.agent.confirmations()
    }

    /// Runs at work now (see [`Agent::runs_at_work`]).
    pub fn runs_at_work(&self) -> usize {
        self.inner.agent.runs_at_work()
    }

    /// Resolves once no run is at work: each has ended or waits for a
    /// person's answer (see [`Agent::idle`]). Await it after your server's
    /// graceful shutdown, before the process exits, so that approved runs
    /// nobody reads any more finish; [`Gateway::serve`](crate::gateway::Gateway::serve)
    /// does.
    pub fn idle(&self) -> impl Future<Output = ()> + Send + 'static {
        self.inner.agent.idle()
    }

    /// Reloads, invocations and confirmations from now on. A subscriber
    /// that falls more than 1024 events behind misses the oldest and is
    /// told how many (`RecvError::Lagged`).
    pub fn subscribe(&self) -> broadcast::Receiver<HostEvent> {
        self.inner.observers.subscribe()
    }

    /// The same events, each with its [`EventId`], after `after`: a
    /// follower that went away and comes back with the id of the last it
    /// got (an SSE client's `Last-Event-ID`) gets those it missed first,
    /// as far as the host still keeps them — the latest 1024 and 8 MiB of
    /// their JSON — and is told how many it lost beyond those
    /// ([`FeedError::Missed`]). Without `after`, from now on. Events are
    /// kept from the first follower on.
    pub fn follow_events(&self, after: Option<EventId>) -> EventFeed {
        self.inner.observers.follow(after)
    }

    /// The host's metrics.
    pub fn metrics(&self) -> &HostMetrics {
        &self.inner.observers.metrics
    }

    /// The loaded skills as of now; hold the snapshot for one request.
    pub fn snapshot(&self) -> Arc<SkillSnapshot> {
        self.inner.skills.snapshot()
    }

    /// The skill registry (for [`SkillRegistry::sync_path`] and the like).
    pub fn skills(&self) -> &Arc<SkillRegistry> {
        &self.inner.skills
    }

    /// The directory the skills are loaded from.
    pub fn skills_dir(&self) -> &Path {
        &self.inner.skills_dir
    }

    /// Brings the skills in line with the skills directory as it is now
    /// ([`SkillRegistry::rescan`]), for changes hot reload did not report:
    /// a host built without it, a network file system that sends no
    /// events. What changed reaches subscribers as reload events too.
    pub async fn rescan_skills(&self) -> Result<Vec<ReloadEvent>, RegistryError> {
        self.inner.skills.rescan(&self.inner.skills_dir).await
    }

    /// Replaces the signature policy skills are held to — a trust store
    /// with a key added, rotated or revoked — without a restart
    /// ([`SkillRegistry::replace_policy`]): a skill the new policy no longer
    /// admits is unloaded now (and runs under way do not run its code
    /// again), and a file refused for an unknown key loads once its key is
    /// trusted. Subscribers get the [`TrustChange`] (also logged, at info),
    /// then what it changed as reload events.
    pub async fn replace_signature_policy(&self, policy: SignaturePolicy) -> PolicyReplaced {
        let trust = TrustChange::between(&self.inner.skills.policy(), &policy);
        self.inner.observers.trust(&trust);
        let reloads = self.inner.skills.replace_policy(policy).await;
        PolicyReplaced { trust, reloads }
    }

    /// Puts new limits in place of those skills' invocations start with —
    /// the defaults ([`SkillHostBuilder::limits`]) and those of particular
    /// skills ([`SkillHostBuilder::skill_limits`]) — without a restart
    /// ([`Runtime::replace_limits`]): every invocation from now on gets
    /// them; one under way keeps its own. Memory limits are fixed when the
    /// host is built: new limits that change one are refused, and nothing
    /// changes. Returns what changed, `None` when the limits are those in
    /// force already; subscribers get the [`LimitsChange`] (also logged, at
    /// info).
    pub fn replace_limits(
        &self,
        limits: Limits,
        skill_limits: BTreeMap<SkillName, Limits>,
    ) -> Result<Option<LimitsChange>, MemoryLimitFixed> {
        let runtime = self.inner.skills.runtime();
        let before = runtime.replace_limits(limits, skill_limits)?;
        let snapshot = self.snapshot();
        let loaded = snapshot.skills().map(|skill| skill.component.name());
        let change = LimitsChange::between(&before, &runtime.config(), loaded);
        if let Some(change) = &change {
            self.inner.observers.limits(change);
        }
        Ok(change)
    }

    /// The tools as of now ([`SkillRegistry::tools`]).
    pub fn tools(&self) -> Arc<ToolRegistry> {
        self.inner.skills.tools()
    }

    /// Changes the tools skills and the agent call — the application's own
    /// tools changed — without a restart ([`SkillRegistry::update_tools`]):
    /// `change` gets the tools in place and returns those to put in their
    /// place; an error it returns changes nothing. A skill that names a
    /// tool the new tools lack is unloaded now, and a file refused for such
    /// a tool loads once it fits. Runs under way keep the tools they
    /// started with. The tools the host takes from MCP servers are among
    /// those `change` gets, and are its own to follow: keep them. Changes
    /// are made one at a time, relists of the MCP servers' tools among
    /// them, so none builds on tools another is replacing.
    /// When a tool's name, description, parameters or access changed,
    /// subscribers get the [`ToolsChange`] (also logged, at info); then
    /// what it changed as reload events.
    pub async fn update_tools<E>(
        &self,
        change: impl FnOnce(&ToolRegistry) -> Result<ToolRegistry, E>,
    ) -> Result<ToolsReplaced, E> {
        let mut told = None;
        let reloads = self
            .inner
            .skills
            .update_tools(|current| {
                let next = change(current)?;
                let tools = ToolsChange::between(None, current, &next);
                if !tools.is_empty() {
                    self.inner.observers.tools(&tools);
                }
                told = Some(tools);
                Ok(Some(next))
            })
            .await?;
        Ok(ToolsReplaced {
            tools: told.expect("the change ran: it returned tools"),
            reloads,
        })
    }

    /// Replaces the MCP servers the host takes tools from with those
    /// `servers` declare, without a restart: a server added is connected
    /// (started, for a `command`) and its tools put in place, a server
    /// taken out is followed no more and its tools go (its process ends
    /// once the runs under way that hold its tools are done), a server
    /// whose declaration changed is connected anew; the servers declared
    /// as before stay as they are. What it does to the tools is one change,
    /// as [`SkillHost::update_tools`] makes: subscribers get the
    /// [`ToolsChange`] when a tool's spec changed, then what it did to the
    /// skills as reload events. A server that cannot be connected, two
    /// servers of one name, or a tool taking another's name change nothing.
    /// `${VAR}`s are read from the environment.
    pub async fn replace_mcp_servers(
        &self,
        servers: &[McpServerConfig],
    ) -> Result<ToolsReplaced, ReplaceServersError> {
        let env = |name: &str| std::env::var(name).ok();
        let (tools, reloads) = self.inner.mcp.replace(servers, env).await?;
        Ok(ToolsReplaced { tools, reloads })
    }

    /// The MCP server each tool taken from one comes from, by tool name
    /// ([`SkillHostBuilder::mcp_server`]; as last listed).
    pub fn mcp_tool_servers(&self) -> BTreeMap<String, String> {
        self.inner.mcp.servers_of_tools()
    }

    /// Lists the tools of every MCP server the host takes tools from again
    /// ([`SkillHostBuilder::mcp_server`]), and puts what changed in place
    /// as [`SkillHost::update_tools`] does: for servers that cannot say
    /// that their tools changed (one at a url offering no stream of its
    /// own messages), at an operator's
    /// word. What it did to the skills reaches subscribers as reload events
    /// too; a server that cannot be listed keeps its tools, and the log
    /// says why.
    pub async fn relist_mcp_tools(&self) -> Vec<ReloadEvent> {
        self.inner.mcp.relist_all().await
    }

    /// The agent, for what this API does not cover.
    pub fn agent(&self) -> &Agent {
        &self.inner.agent
    }

    /// The LLM client in force, or why there is none and how to configure
    /// one.
    pub fn llm(&self) -> Result<LlmClient, NoLlm> {
        Result::clone(&self.inner.llm.load())
    }

    /// Sets the LLM up again from the variables `lookup` finds, as
    /// [`SkillHostBuilder::llm_from_lookup`] does at the start, and puts it
    /// in force: runs under way make their next call to the model with it,
    /// and with no model configured there is no LLM from now on (chat
    /// fails, skills without steps too). Settings that are there but wrong
    /// are an error, and change nothing.
    pub fn replace_llm_from_lookup(
        &self,
        lookup: impl Fn(&str) -> Option<String> + Send + 'static,
    ) -> Result<(), LlmError> {
        let llm = LlmSetup::FromLookup(Box::new(lookup)).client()?;
        self.inner.agent.replace_llm(llm.clone().ok());
        self.inner.llm.store(Arc::new(llm));
        Ok(())
    }

    /// A summary for health checks: what is loaded, and whether what is
    /// served differs from what the skills directory asks for — it cannot
    /// be read (its skills were unloaded with it), or files in it did not
    /// load. The problems carry no paths or reasons, so that an open health
    /// route shows none; [`SkillHost::snapshot`] and the log have them.
    pub async fn health(&self) -> Health {
        self.health_pointing_to("the skills snapshot (`SkillHost::snapshot`)")
            .await
    }

    /// [`SkillHost::health`], naming `listing` as where a failed file's
    /// reason is: the gateway names its own route, under its mount.
    pub(crate) async fn health_pointing_to(&self, listing: &str) -> Health {
        let snapshot = self.snapshot();
        let failures = snapshot.failures().count();
        let mut problems = Vec::new();
        if let Err(error) = tokio::fs::read_dir(self.skills_dir()).await {
            problems.push(format!(
                "the skills directory cannot be read ({}); the skills it held are unloaded until it can",
                error.kind()
            ));
        }
        if failures > 0 {
            let files = if failures == 1 { "file" } else { "files" };
            problems.push(format!(
                "{failures} skill {files} did not load; {listing} says why"
            ));
        }
        Health {
            status: if problems.is_empty() {
                HealthStatus::Ok
            } else {
                HealthStatus::Degraded
            },
            skills: snapshot.len(),
            failures,
            llm: self.llm().is_ok(),
            problems,
        }
    }
}

/// [`SkillHost::health`]: the body of the gateway's `/healthz`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct Health {
    /// `ok`, or `degraded` while [`Health::problems`] names something the
    /// host does not serve.
    pub status: HealthStatus,
    /// Skills loaded.
    pub skills: usize,
    /// Files in the skills directory that did not load.
    pub failures: usize,
    /// Whether an LLM is configured.
    pub llm: bool,
    /// What makes the status `degraded`, in words; empty when `ok`.
    pub problems: Vec<String>,
}

/// Whether the host serves what its skills directory asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HealthStatus {
    Ok,
    Degraded,
}
