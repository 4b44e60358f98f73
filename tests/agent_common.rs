//! What the agent tests share: the demo shop with a chosen set of tools and
//! bundled skills, an agent on the scripted LLM, and ways to read a run's
//! events.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Value, json};
use tempfile::TempDir;

use skillhost::agent::llm::LlmClient;
use skillhost::agent::{
    Agent, AgentConfig, AgentEvent, CallOutcome, Caller, Decision, Finished, PendingConfirmation,
    Resolution, RunHandle, RunOutput, SkillOutput,
};
use skillhost::runtime::{Runtime, RuntimeConfig};
use skillhost::skills::signature::SignaturePolicy;
use skillhost::skills::{SkillName, SkillRegistry};
use skillhost::tools::demo::{DemoClock, DemoDb};
use skillhost::tools::{Tool, ToolRegistry};

use crate::support::fixtures::skill_file;
use crate::support::scripted_llm::{ScriptedLlm, Step};

/// The article's refund request.
pub const REFUND_REQUEST: &str = "my order 88231 robot vacuum is broken, refund it";

/// The arguments of the `processRefund` call in [`REFUND_REQUEST`].
pub fn refund_input() -> Value {
    json!({"orderId": "88231", "reason": "the robot vacuum is broken"})
}

/// The model's answer to [`REFUND_REQUEST`]: a call of the `processRefund`
/// skill for order 88231.
pub fn refund_call() -> Step {
    Step::tool_call("processRefund", refund_input())
}

/// The demo shop with some of its tools and some bundled skills loaded.
pub struct Shop {
    pub db: Arc<DemoDb>,
    pub skills: Arc<SkillRegistry>,
    /// Holds the skills directory for as long as the shop lives.
    _dir: TempDir,
}

impl Shop {
    /// `tools` on a fresh database whose clock is fixed at 2026-06-29 14:00
    /// (the first refund is `RF20260629001`), and the bundled `skills`.
    /// Panics if any skill fails to load, so a broken setup fails loudly.
    pub async fn new(
        tools: impl FnOnce(Arc<DemoDb>) -> Vec<Arc<dyn Tool>>,
        skills: &[&str],
    ) -> Self {
        let files: Vec<PathBuf> = skills.iter().map(|name| skill_file(name)).collect();
        Self::with_files(tools, &files).await
    }

    /// Like [`Shop::new`], with skill components from any files.
    pub async fn with_files(
        tools: impl FnOnce(Arc<DemoDb>) -> Vec<Arc<dyn Tool>>,
        files: &[PathBuf],
    ) -> Self {
        Self::with_instances(tools, files, 8).await
    }

    /// Like [`Shop::with_files`], with a pool of `instances` wasm instances.
    pub async fn with_instances(
        tools: impl FnOnce(Arc<DemoDb>) -> Vec<Arc<dyn Tool>>,
        files: &[PathBuf],
        instances: u32,
    ) -> Self {
        let clock = DemoClock::Fixed("2026-06-29 14:00:00".parse().expect("a shop time"));
        let db = Arc::new(
            DemoDb::in_memory()
                .expect("the demo database")
                .with_clock(clock),
        );
        let mut registry = ToolRegistry::new();
        for tool in tools(db.clone()) {
            registry.register(tool).expect("registering a demo tool");
        }
        let dir = tempfile::tempdir().expect("a temporary skills directory");
        for file in files {
            let name = file.file_name().expect("a skill file name");
            std::fs::copy(file, dir.path().join(name)).expect("copying a skill component");
        }
        let runtime = Runtime::new(RuntimeConfig {
            max_concurrent_instances: instances,
            ..RuntimeConfig::default()
        })
        .expect("the runtime");
        // Signatures are not what these tests are about (tests of the
        // registry cover them); the bundled files are loaded as they are.
        let registry = SkillRegistry::load_dir(
            runtime,
            Arc::new(registry),
            SignaturePolicy::AllowUnsigned,
            dir.path(),
        )
        .await
        .expect("loading the skills directory");
        let snapshot = registry.snapshot();
        let failures: Vec<_> = snapshot.failures().collect();
        assert!(failures.is_empty(), "skills failed to load: {failures:?}");
        assert_eq!(snapshot.len(), files.len());
        Self {
            db,
            skills: Arc::new(registry),
            _dir: dir,
        }
    }

    /// An agent on the scripted LLM with `config`.
    pub fn agent(&self, llm: &ScriptedLlm, config: AgentConfig) -> Agent {
        Agent::builder(self.skills.clone())
            .llm(client(llm))
            .config(config)
            .build()
            .unwrap()
    }
}

/// Asks `agent` `request` and answers every confirmation with `decision`,
/// to the end of the run.
pub async fn ask_deciding(agent: &Agent, request: &str, decision: Decision) -> Finished<RunOutput> {
    agent
        .ask(request)
        .unwrap()
        .finish_with(|_| decision.clone())
        .await
}

/// A client for the scripted server with fast retries.
pub fn client(llm: &ScriptedLlm) -> LlmClient {
    LlmClient::new(llm.config()).expect("a client for the scripted server")
}

pub fn skill(name: &str) -> SkillName {
    SkillName::new(name).expect("a valid skill name")
}

/// The function lists of the rounds of `caller`, in order.
pub fn rounds_of(events: &[AgentEvent], caller: &Caller) -> Vec<Vec<String>> {
    events
        .iter()
        .filter_map(|event| match event {
            AgentEvent::RoundStarted {
                caller: of,
                functions,
                ..
            } if of == caller => Some(functions.clone()),
            _ => None,
        })
        .collect()
}

/// Whether each call of `caller` ran to a result (`CallOutcome::Done`),
/// in order.
pub fn executed(events: &[AgentEvent], caller: &Caller) -> Vec<bool> {
    calls_of(events, caller)
        .into_iter()
        .map(|(_, _, outcome)| matches!(outcome, CallOutcome::Done { .. }))
        .collect()
}

/// `(tool, arguments, outcome)` of every `ToolCalled` event of `caller`.
pub fn calls_of(events: &[AgentEvent], caller: &Caller) -> Vec<(String, Value, CallOutcome)> {
    events
        .iter()
        .filter_map(|event| match event {
            AgentEvent::ToolCalled {
                caller: of,
                tool,
                arguments,
                outcome,
            } if of == caller => Some((tool.clone(), arguments.clone(), outcome.clone())),
            _ => None,
        })
        .collect()
}

/// The names of the tools `caller` called, in order.
pub fn tools_called(events: &[AgentEvent], caller: &Caller) -> Vec<String> {
    calls_of(events, caller)
        .into_iter()
        .map(|(tool, _, _)| tool)
        .collect()
}

/// The refusal reason of a call's outcome; panics on any other outcome.
pub fn refusal(outcome: &CallOutcome) -> &str {
    match outcome {
        CallOutcome::Refused { reason } => reason,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// Every confirmation the run asked for.
pub fn confirmations(events: &[AgentEvent]) -> Vec<PendingConfirmation> {
    events
        .iter()
        .filter_map(|event| match event {
            AgentEvent::ConfirmationPending(pending) => Some(pending.clone()),
            _ => None,
        })
        .collect()
}

/// The outcome of every skill run that finished, in order.
pub fn skill_outcomes(events: &[AgentEvent]) -> Vec<CallOutcome> {
    events
        .iter()
        .filter_map(|event| match event {
            AgentEvent::SkillFinished { outcome, .. } => Some(outcome.clone()),
            _ => None,
        })
        .collect()
}

/// How every confirmation of the run ended.
pub fn resolutions(events: &[AgentEvent]) -> Vec<Resolution> {
    events
        .iter()
        .filter_map(|event| match event {
            AgentEvent::ConfirmationResolved { resolution, .. } => Some(resolution.clone()),
            _ => None,
        })
        .collect()
}

/// The content of the tool message answering the call `call_id` in a
/// recorded request's messages.
pub fn tool_result(messages: &[Value], call_id: &str) -> String {
    messages
        .iter()
        .find(|message| message["role"] == "tool" && message["tool_call_id"] == call_id)
        .and_then(|message| message["content"].as_str())
        .unwrap_or_else(|| panic!("no tool result for {call_id} in {messages:#?}"))
        .to_owned()
}

/// Reads the skill run's events up to its first pending confirmation: the
/// events so far (that one included) and the confirmation.
pub async fn until_confirmation(
    run: &mut RunHandle<SkillOutput>,
) -> (Vec<AgentEvent>, PendingConfirmation) {
    let mut events = Vec::new();
    loop {
        let event = run.events.recv().await.expect("a pending confirmation");
        events.push(event.clone());
        if let AgentEvent::ConfirmationPending(pending) = event {
            return (events, pending);
        }
    }
}

/// Runs `skill`'s steps on `input` up to the write they wait on, approves
/// it, and returns the confirmation with the steps' final result.
pub async fn approve_the_write(
    agent: &Agent,
    skill: &str,
    input: Value,
) -> (PendingConfirmation, Value) {
    let mut run = agent.start_skill(skill, input).unwrap();
    let (_, pending) = until_confirmation(&mut run).await;
    agent.confirmations().approve(pending.id.as_str()).unwrap();
    while run.events.recv().await.is_some() {}
    let CallOutcome::Done { result } = run.result().await.unwrap().outcome else {
        panic!("the steps did not finish");
    };
    (pending, result)
}
