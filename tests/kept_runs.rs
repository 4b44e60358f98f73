//! Runs kept on disk while their steps wait for a person
//! ([`SkillHostBuilder::keep_runs`]). Each "process" is a Tokio runtime of
//! its own: dropping it ends its runs' tasks as a process's end would, and
//! the next host built on the same directories resumes what was kept.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};
use tempfile::TempDir;

use skillhost::agent::{AgentEvent, CallOutcome, ConfirmationStatus, RunId};
use skillhost::embed::SkillHost;
use skillhost::skills::signature::{SignaturePolicy, TrustStore};
use skillhost::tools::demo::DemoDb;

use crate::agent_common::refund_input;
use crate::support::fixtures::{repo_root, skill_file};

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
        let trusted = TrustStore::load(&[repo_root().join("keys/trusted")]).unwrap();
        SkillHost::builder(
            self.dir.path().join("skills"),
            SignaturePolicy::Require(trusted),
        )
        .demo_tools(self.db.clone())
        .keep_runs(&self.runs)
        .build()
        .await
        .expect("building the host")
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

    fn kept_file(&self, run: &RunId) -> PathBuf {
        self.runs.join(format!("{run}.json"))
    }
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
        kept["skill"]["digest"] = json!(format!("sha256:{}", "0".repeat(64)));
    });

    let process = tokio::runtime::Runtime::new().unwrap();
    process.block_on(async {
        let host = premises.host().await;
        let mut resumed = host.take_resumed_runs();
        assert_eq!(resumed.len(), 1);
        let resumed = resumed.pop().unwrap();
        assert_eq!(resumed.run.id, run);
        let output = resumed.run.result().await.unwrap();
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
        let resumed = host.take_resumed_runs().pop().expect("the kept run");
        let finished = resumed.run.finish_with(|_| panic!("nobody is asked")).await;
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
