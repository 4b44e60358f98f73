//! Runs kept on disk while their steps wait for a person
//! ([`SkillHostBuilder::keep_runs`]). Each "process" is a Tokio runtime of
//! its own: dropping it ends its runs' tasks as a process's end would, and
//! the next host built on the same directories resumes what was kept.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};
use tempfile::TempDir;

use skillhost::agent::llm::Message;
use skillhost::agent::{
    AgentEvent, CallOutcome, ConfirmationStatus, Decision, ResumedRun, Returned, RunHandle, RunId,
    RunOptions, SkillOutput, list_kept_runs,
};
use skillhost::embed::{SkillHost, SkillHostBuilder};
use skillhost::gateway::{Gateway, GatewayConfig};
use skillhost::scope::{SkillScope, ToolScope};
use skillhost::skills::signature::{SignaturePolicy, TrustStore};
use skillhost::tools::demo::{DemoDb, article_003_tools};
use skillhost::tools::{Tool, ToolContext, ToolError, ToolSpec};
use skillhost::trace_context::TraceContext;

use crate::agent_common::{REFUND_REQUEST, refund_call, refund_input};
use crate::support::fixtures::{repo_root, skill_file};
use crate::support::scripted_llm::{ScriptedLlm, Step};

/// The trace the conversations of these tests are part of.
const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// A shop whose skills directory, runs directory and database outlive the
/// hosts started on them.
struct Premises {
    dir: TempDir,
    runs: PathBuf,
    db: Arc<DemoDb>,
}

impl Premises {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("skills")).unwrap();
        std::fs::copy(
            skill_file("processRefund"),
            dir.path().join("skills/processRefund.wasm"),
        )
        .unwrap();
        let runs = dir.path().join("runs");
        Self {
            dir,
            runs,
            db: Arc::new(DemoDb::in_memory().unwrap()),
        }
    }

    async fn host(&self) -> SkillHost {
        self.host_with(None).await
    }

    /// The host, with `llm` as its model when given.
    async fn host_with(&self, llm: Option<&ScriptedLlm>) -> SkillHost {
        let mut builder = self.builder().demo_tools(self.db.clone());
        if let Some(llm) = llm {
            builder = builder.llm(llm.config());
        }
        builder.build().await.expect("building the host")
    }

    /// A host on the premises' skills and runs, its tools yet to be given.
    fn builder(&self) -> SkillHostBuilder {
        let trusted = TrustStore::load(&[repo_root().join("keys/trusted")]).unwrap();
        SkillHost::builder(
            self.dir.path().join("skills"),
            SignaturePolicy::Require(trusted),
        )
        .keep_runs(&self.runs)
    }

    /// The one run the host resumed, a skill run.
    fn resumed_skill_run(host: &SkillHost) -> RunHandle<SkillOutput> {
        match host.take_resumed_runs().pop() {
            Some(ResumedRun::Skill { run, .. }) => run,
            _ => panic!("no skill run was resumed"),
        }
    }

    /// In a process of its own that then ends: a refund of 88231 invoked,
    /// left waiting for its approval. Returns the run's id.
    fn refund_left_waiting(&self) -> RunId {
        let process = tokio::runtime::Runtime::new().unwrap();
        process.block_on(async {
            let host = self.host().await;
            let mut run = host.invoke("processRefund", refund_input()).unwrap();
            while let Some(event) = run.events.recv().await {
                if matches!(event, AgentEvent::ConfirmationPending(_)) {
                    return run.id.clone();
                }
            }
            panic!("the refund did not wait for its approval");
        })
    }

    /// In a process of its own that then ends: a chat whose model calls
    /// `processRefund`, left waiting for the refund's approval inside the
    /// skill, for a caller limited to that skill and to `queryOrder` of the
    /// tools. Returns the run's id and
    /// the confirmation's.
    fn refund_chat_left_waiting(&self) -> (RunId, String) {
        let process = tokio::runtime::Runtime::new().unwrap();
        process.block_on(async {
            let llm = ScriptedLlm::start(vec![refund_call()]).await;
            let host = self.host_with(Some(&llm)).await;
            let options = RunOptions::new()
                .skills(SkillScope::only(["processRefund"]))
                .tools(ToolScope::only(["queryOrder"]))
                .trace(TraceContext::parse(TRACEPARENT, None).unwrap());
            let mut run = host
                .chat_with(vec![Message::user(REFUND_REQUEST)], options)
                .unwrap();
            while let Some(event) = run.events.recv().await {
                if let AgentEvent::ConfirmationPending(pending) = event {
                    return (run.id.clone(), pending.id.to_string());
                }
            }
            panic!("the conversation did not wait for the refund's approval");
        })
    }

    fn kept_file(&self, run: &RunId) -> PathBuf {
        self.runs.join(format!("{run}.json"))
    }

    /// The next host on the premises, serving on loopback, after `run` was
    /// interrupted past an approval: it asks nothing again and takes the
    /// file off disk. Returns its base URL and the run's record there,
    /// failed with `run_interrupted`.
    async fn next_host_tells_interrupted(&self, run: &RunId) -> (String, Value) {
        let host = self.host().await;
        assert!(!self.kept_file(run).exists(), "told once, still on disk");
        assert!(host.confirmations().pending().is_empty(), "asked again");
        let base = serve(&host, GatewayConfig::default()).await;
        let record: Value = reqwest::get(format!("{base}/v1/runs/{run}"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(record["status"], "failed", "{record:#}");
        assert_eq!(record["error"]["code"], "run_interrupted", "{record:#}");
        (base, record)
    }
}

/// Serves `host` on a loopback port, its gateway made (and the runs it
/// resumed taken in) under `config`; returns the base URL.
async fn serve(host: &SkillHost, config: GatewayConfig) -> String {
    let gateway = Gateway::new(host.clone(), config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { gateway.serve(listener, std::future::pending()).await });
    base
}

/// Changes what `file` (a kept run) says with `edit`.
fn edit(file: &Path, edit: impl FnOnce(&mut Value)) {
    let mut kept: Value = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
    edit(&mut kept);
    std::fs::write(file, serde_json::to_vec(&kept).unwrap()).unwrap();
}

#[test]
fn a_kept_run_whose_skill_changed_meanwhile_is_not_run_again() {
    let premises = Premises::new();
    let run = premises.refund_left_waiting();
    let file = premises.kept_file(&run);
    edit(&file, |kept| {
        kept["kept"]["skill"]["digest"] = json!(format!("sha256:{}", "0".repeat(64)));
    });

    let process = tokio::runtime::Runtime::new().unwrap();
    process.block_on(async {
        let host = premises.host().await;
        let resumed = Premises::resumed_skill_run(&host);
        assert_eq!(resumed.id, run);
        let output = resumed.result().await.unwrap();
        let CallOutcome::Failed { error } = output.outcome else {
            panic!("a changed skill ran: {:?}", output.outcome);
        };
        assert!(
            error.contains(
                "was not run again after its host restarted: it changed while the run waited"
            ) && error.ends_with("already executed: queryOrder"),
            "{error}"
        );
        assert!(host.confirmations().pending().is_empty());
    });
    assert!(premises.db.refunds_for("88231").unwrap().is_empty());
    assert!(!file.exists(), "an ended run is still kept");
}

#[test]
fn a_kept_run_whose_confirmation_expired_meanwhile_writes_nothing() {
    let premises = Premises::new();
    let run = premises.refund_left_waiting();
    let file = premises.kept_file(&run);
    let mut confirmation = String::new();
    edit(&file, |kept| {
        kept["waiting"]["expires_at"] = json!({"secs_since_epoch": 1, "nanos_since_epoch": 0});
        confirmation = kept["waiting"]["id"].as_str().unwrap().to_owned();
    });

    let process = tokio::runtime::Runtime::new().unwrap();
    process.block_on(async {
        let host = premises.host().await;
        let resumed = Premises::resumed_skill_run(&host);
        let finished = resumed.finish_with(|_| panic!("nobody is asked")).await;
        let asked = finished
            .events
            .iter()
            .any(|event| matches!(event, AgentEvent::ConfirmationPending(_)));
        assert!(!asked, "{:#?}", finished.events);
        let output = finished.result.expect("the run ends");
        assert!(
            format!("{:?}", output.outcome).contains("expired"),
            "{:?}",
            output.outcome
        );
        let Some(ConfirmationStatus::Resolved(resolved)) =
            host.confirmations().status(confirmation.as_str())
        else {
            panic!("the confirmation is not on record as resolved");
        };
        assert_eq!(resolved.resolution.decision(), "expired");
    });
    assert!(premises.db.refunds_for("88231").unwrap().is_empty());
    assert!(!file.exists(), "an ended run is still kept");
}

#[tokio::test]
async fn an_aborted_run_is_not_kept_an_unreadable_file_is_left_alone_and_a_second_host_is_refused()
{
    use std::os::unix::fs::DirBuilderExt;
    let premises = Premises::new();
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&premises.runs)
        .unwrap();
    let unreadable = premises.runs.join("run_0123.json");
    std::fs::write(&unreadable, "{not json").unwrap();
    let host = premises.host().await;
    assert!(host.take_resumed_runs().is_empty());
    assert!(unreadable.exists());

    let mut run = host.invoke("processRefund", refund_input()).unwrap();
    while let Some(event) = run.events.recv().await {
        if matches!(event, AgentEvent::ConfirmationPending(_)) {
            break;
        }
    }
    assert!(run.is_kept());
    // One host at a time keeps runs in a directory.
    let trusted = TrustStore::load(&[repo_root().join("keys/trusted")]).unwrap();
    let second = SkillHost::builder(
        premises.dir.path().join("skills"),
        SignaturePolicy::Require(trusted),
    )
    .keep_runs(&premises.runs)
    .build()
    .await
    .err()
    .expect("a second host on the same runs directory");
    assert!(
        second
            .to_string()
            .contains("another host keeps its runs there"),
        "{second}"
    );
    let file = premises.kept_file(&run.id);
    assert!(file.exists());
    run.abort();
    assert!(!file.exists(), "an aborted run is still kept");
}

/// A conversation whose model called `processRefund`, waiting for the
/// refund's approval inside the skill's steps when its process ended: the
/// next host resumes it from what it was told (the model's call, the
/// order's lookup) without asking the model or the shop again, the
/// approval runs the refund once, and only the final answer is asked of
/// the model.
#[test]
fn a_conversation_waiting_for_an_approval_is_resumed_and_answered() {
    let premises = Premises::new();
    let (run_id, confirmation) = premises.refund_chat_left_waiting();
    let kept: Value = serde_json::from_slice(&std::fs::read(premises.kept_file(&run_id)).unwrap())
        .expect("the kept run");
    // Resumed as limited as it started, in the same trace.
    assert_eq!(kept["skills"], json!(["processRefund"]));
    assert_eq!(kept["tools"], json!(["queryOrder"]));
    assert_eq!(kept["trace"], json!({"traceparent": TRACEPARENT}));

    let process = tokio::runtime::Runtime::new().unwrap();
    process.block_on(async {
        let answer = "Your refund RF20260629001 is on its way.";
        let llm = ScriptedLlm::start(vec![Step::text(answer)]).await;
        let host = premises.host_with(Some(&llm)).await;
        let Some(ResumedRun::Chat { mut run, .. }) = host.take_resumed_runs().pop() else {
            panic!("the conversation was not resumed");
        };
        assert_eq!(run.id, run_id);
        // What it replayed is not reported again: the first event is the
        // confirmation, pending again under its id.
        let Some(AgentEvent::ConfirmationPending(pending)) = run.events.recv().await else {
            panic!("the resumed conversation did not wait first");
        };
        assert_eq!(pending.id.as_str(), confirmation);
        assert_eq!(pending.tool, "applyRefund");
        assert!(llm.requests().is_empty(), "the model was asked again");
        assert!(premises.db.refunds_for("88231").unwrap().is_empty());

        host.approve(&confirmation).unwrap();
        let output = run.result().await.expect("the conversation ends");
        assert_eq!(output.answer, answer);
        let requests = llm.requests();
        assert_eq!(requests.len(), 1, "only the final answer is asked");
        assert_eq!(requests[0].header("traceparent"), Some(TRACEPARENT));
        // Not searchKnowledge nor the others: queryOrder alone, which the
        // skill absorbs.
        assert_eq!(
            requests[0].tool_names(),
            ["processRefund"],
            "not as limited"
        );
        let messages = requests[0].body["messages"].as_array().unwrap();
        let result = messages
            .iter()
            .find(|message| message["role"] == "tool")
            .and_then(|message| message["content"].as_str())
            .expect("the skill's result");
        assert!(result.contains("RF20260629001"), "{result}");
    });
    assert_eq!(premises.db.refunds_for("88231").unwrap().len(), 1);
    assert!(
        !premises.kept_file(&run_id).exists(),
        "an ended run is still kept"
    );
}

/// A conversation resumed on skills that changed meanwhile (here the skill
/// it called is gone) no longer makes the calls it made: it is stopped,
/// saying why, and nothing is written.
#[test]
fn a_resumed_conversation_that_does_something_else_is_stopped() {
    let premises = Premises::new();
    let (run_id, _) = premises.refund_chat_left_waiting();
    std::fs::remove_file(premises.dir.path().join("skills/processRefund.wasm")).unwrap();

    let process = tokio::runtime::Runtime::new().unwrap();
    process.block_on(async {
        let llm = ScriptedLlm::start(vec![Step::text("never asked")]).await;
        let host = premises.host_with(Some(&llm)).await;
        let Some(ResumedRun::Chat { run, .. }) = host.take_resumed_runs().pop() else {
            panic!("the conversation was not resumed");
        };
        let error = run.result().await.expect_err("a diverged run fails");
        assert!(
            error
                .to_string()
                .contains("resumed after its host restarted, the run")
                && error.to_string().contains("so it was stopped"),
            "{error}"
        );
        assert!(llm.requests().is_empty());
        assert!(host.confirmations().pending().is_empty());
    });
    assert!(premises.db.refunds_for("88231").unwrap().is_empty());
    assert!(
        !premises.kept_file(&run_id).exists(),
        "an ended run is still kept"
    );
}

/// Runs kept across a restart wait again past the gateway's cap on waiting
/// runs (lowered meanwhile, say): the restart loses none of them, and they
/// take the places a new run would need.
#[test]
fn kept_runs_wait_again_past_the_gateways_cap_and_count_toward_it() {
    let premises = Premises::new();
    let kept = [
        premises.refund_left_waiting(),
        premises.refund_left_waiting(),
    ];
    let process = tokio::runtime::Runtime::new().unwrap();
    process.block_on(async {
        let host = premises.host().await;
        let config = GatewayConfig {
            max_parked_runs: 1,
            ..GatewayConfig::default()
        };
        let base = serve(&host, config).await;
        let http = reqwest::Client::new();

        let refused = http
            .post(format!("{base}/v1/skills/processRefund/invoke"))
            .json(&refund_input())
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), reqwest::StatusCode::SERVICE_UNAVAILABLE);
        let waiting = host.confirmations().pending();
        let mut runs: Vec<&RunId> = waiting.iter().map(|pending| &pending.run).collect();
        runs.sort();
        let mut expected: Vec<&RunId> = kept.iter().collect();
        expected.sort();
        assert_eq!(runs, expected);
        for pending in &waiting {
            let answer = http
                .post(format!("{base}/v1/confirmations/{}", pending.id))
                .json(&json!({"decision": "reject"}))
                .send()
                .await
                .unwrap();
            assert_eq!(answer.status(), reqwest::StatusCode::OK);
            let done: Value = answer.json().await.unwrap();
            assert_eq!(done["run"], json!(pending.run), "{done:#}");
            assert_eq!(done["status"], "done", "{done:#}");
        }
    });
    assert!(premises.db.refunds_for("88231").unwrap().is_empty());
    for run in &kept {
        assert!(!premises.kept_file(run).exists());
    }
}

/// A write that, once called, never returns: the process ends while it
/// runs.
struct Stuck {
    spec: ToolSpec,
    reached: Arc<tokio::sync::Notify>,
}

#[async_trait::async_trait]
impl Tool for Stuck {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn invoke(&self, _context: &ToolContext, _arguments: Value) -> Result<Value, ToolError> {
        self.reached.notify_one();
        std::future::pending().await
    }
}

/// A refund approved, its process ending while `applyRefund` runs: the
/// next host does not run it again (the refund may have been written) nor
/// ask again, and the gateway tells the requester the run was interrupted,
/// naming the call.
#[test]
fn a_run_whose_approved_call_was_under_way_is_told_as_interrupted_and_not_run_again() {
    let premises = Premises::new();
    let process = tokio::runtime::Runtime::new().unwrap();
    let (run, confirmation) = process.block_on(async {
        let reached = Arc::new(tokio::sync::Notify::new());
        let tools = article_003_tools(premises.db.clone())
            .into_iter()
            .map(|tool| {
                if tool.spec().name != "applyRefund" {
                    return tool;
                }
                let stuck: Arc<dyn Tool> = Arc::new(Stuck {
                    spec: tool.spec().clone(),
                    reached: reached.clone(),
                });
                stuck
            });
        let host = premises
            .builder()
            .register_tools(|registry| {
                tools
                    .into_iter()
                    .try_for_each(|tool| registry.register(tool))
            })
            .build()
            .await
            .unwrap();
        let in_trace = RunOptions::new().trace(TraceContext::parse(TRACEPARENT, None).unwrap());
        let mut run = host
            .invoke_with("processRefund", refund_input(), in_trace)
            .unwrap();
        let mut approved = None;
        while let Some(event) = run.events.recv().await {
            if let AgentEvent::ConfirmationPending(pending) = event {
                host.answer(
                    pending.id.as_str(),
                    Decision::Approve,
                    Some("supervisor".into()),
                )
                .unwrap();
                approved = Some(pending.id.to_string());
                break;
            }
        }
        reached.notified().await;
        // While the host lives, its approved call is running, not interrupted.
        let (listed, _) = list_kept_runs(&premises.runs);
        assert_eq!((&listed[0].run, listed[0].state), (&run.id, "running"));
        (
            run.id.clone(),
            approved.expect("applyRefund asked for approval"),
        )
    });
    drop(process);
    let file = premises.kept_file(&run);
    assert!(file.exists(), "the approval is not on disk");
    let (listed, unreadable) = list_kept_runs(&premises.runs);
    assert!(unreadable.is_empty(), "{unreadable:?}");
    assert_eq!(listed.len(), 1);
    assert_eq!((&listed[0].run, listed[0].state), (&run, "interrupted"));
    assert!(listed[0].summary.starts_with("applyRefund: "));
    assert!(listed[0].approved_at.is_some());
    // Its trace is told, to find the call's spans by.
    assert_eq!(
        listed[0].trace_id.as_deref(),
        Some("4bf92f3577b34da6a3ce929d0e0e4736")
    );

    let process = tokio::runtime::Runtime::new().unwrap();
    process.block_on(async {
        let (base, record) = premises.next_host_tells_interrupted(&run).await;
        let message = record["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("`applyRefund` was approved") && message.contains("may or may not"),
            "{message}"
        );
        let approval = &record["interrupted"];
        assert_eq!(
            (&approval["tool"], &approval["confirmation"]),
            (&json!("applyRefund"), &json!(confirmation))
        );
        assert_eq!(approval["approved_by"], "supervisor");
        assert!(approval["returned"].is_null(), "{record:#}");
        // The approver finds their answer, and that its outcome is unknown.
        let path = format!("{base}/v1/confirmations/{confirmation}");
        let status: Value = reqwest::get(&path).await.unwrap().json().await.unwrap();
        assert_eq!(status["status"], "resolved", "{status:#}");
        assert_eq!(
            status["resolution"],
            json!({"decision": "approved", "by": "supervisor"})
        );
        assert_eq!(status["confirmation"]["run"], run.as_str());
        assert_eq!(
            status["confirmation"]["caller"],
            json!({"skill": "processRefund"})
        );
        assert_eq!(status["interrupted"], record["error"]["message"]);
        let again = reqwest::Client::new()
            .post(&path)
            .json(&json!({"decision": "approve"}))
            .send()
            .await
            .unwrap();
        assert_eq!(again.status(), reqwest::StatusCode::CONFLICT);
        let again: Value = again.json().await.unwrap();
        assert_eq!(again["error"]["code"], "confirmation_resolved");
        let message = again["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("approved by `supervisor`") && message.contains("may or may not"),
            "{message}"
        );
    });
    assert!(premises.db.refunds_for("88231").unwrap().is_empty());
}

/// A conversation whose approved refund ran, its host then stopping while
/// the model was still asked for the answer: the next host tells that the
/// refund ran, with its result, and does not run it again.
#[test]
fn a_run_stopped_after_its_approved_call_returned_is_told_with_what_the_call_returned() {
    let premises = Premises::new();
    let process = tokio::runtime::Runtime::new().unwrap();
    let run = process.block_on(async {
        let (_never, held) = tokio::sync::oneshot::channel();
        let llm = ScriptedLlm::start(vec![
            refund_call(),
            Step::text("never answered").held_until(held),
        ])
        .await;
        let host = premises.host_with(Some(&llm)).await;
        let mut run = host.chat(vec![Message::user(REFUND_REQUEST)]).unwrap();
        while let Some(event) = run.events.recv().await {
            if let AgentEvent::ConfirmationPending(pending) = event {
                host.approve(pending.id.as_str()).unwrap();
                break;
            }
        }
        // The refund is written and the model asked for the answer.
        llm.asked(2).await;
        run.id.clone()
    });
    drop(process);
    assert_eq!(premises.db.refunds_for("88231").unwrap().len(), 1);
    let (listed, _) = list_kept_runs(&premises.runs);
    assert_eq!((&listed[0].run, listed[0].state), (&run, "interrupted"));
    let Some(Returned::Result(result)) = &listed[0].returned else {
        panic!("what the refund returned is not on disk: {:?}", listed[0]);
    };
    assert_eq!(result["refundId"], "RF20260629001");

    let process = tokio::runtime::Runtime::new().unwrap();
    process.block_on(async {
        let (_, record) = premises.next_host_tells_interrupted(&run).await;
        let message = record["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("`applyRefund` was approved")
                && message.contains("the call ran, returning")
                && message.contains("RF20260629001")
                && message.contains("before its end"),
            "{message}"
        );
        // The requester reads the refund's id from the run's record.
        assert_eq!(
            record["interrupted"]["returned"]["result"]["refundId"], "RF20260629001",
            "{record:#}"
        );
    });
    assert_eq!(premises.db.refunds_for("88231").unwrap().len(), 1);
}

/// A run whose approved call returned and that then ended leaves nothing
/// on disk.
#[tokio::test]
async fn a_run_that_ends_after_its_approved_call_leaves_nothing_kept() {
    let premises = Premises::new();
    let host = premises.host().await;
    let mut run = host.invoke("processRefund", refund_input()).unwrap();
    while let Some(event) = run.events.recv().await {
        if let AgentEvent::ConfirmationPending(pending) = event {
            host.approve(pending.id.as_str()).unwrap();
            break;
        }
    }
    let id = run.id.clone();
    let output = run.result().await.unwrap();
    assert!(matches!(output.outcome, CallOutcome::Done { .. }));
    assert!(!premises.kept_file(&id).exists());
    assert_eq!(list_kept_runs(&premises.runs).0.len(), 0);
}
