//! Hot reload on real files: a temporary skills directory, the real watcher,
//! real signatures. The `versioned` fixtures are one skill at 1.0.0 and
//! 2.0.0 whose `run` answers with its own version.
//!
//! Every wait is for an event, with a generous timeout; nothing depends on
//! how fast a reload is.

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::broadcast;

use skillhost::agent::{Agent, CallOutcome, PendingConfirmation, RunHandle, SkillOutput};
use skillhost::embed::{HostEvent, SkillHost};
use skillhost::runtime::{RunOutcome, Runtime, RuntimeConfig, SkillComponent, digest_of};
use skillhost::skills::pack::{DeclarativeSkill, Format};
use skillhost::skills::registry::MAX_SKILL_FILE_BYTES;
use skillhost::skills::signature::{KeyScope, SignaturePolicy, SigningKey, TrustStore, TrustedKey};
use skillhost::skills::{
    FailureKind, ReloadEvent, ReloadOutcome, SkillName, SkillRegistry, SkillVersion, WatchHandle,
    watch,
};

use skillhost::tools::ToolRegistry;
use skillhost::tools::demo::DemoDb;

use crate::support::configmap::ConfigMapVolume;
use crate::support::fixtures::{DemoHost, fixture, repo_root};
use crate::support::hand_written::{BARE, HandWritten};
use crate::support::signing::{demo_policy, signed, unsigned};

/// How long any one reload may take before a test gives up: compiling is
/// slow on a loaded machine, and a test checks behaviour, not speed.
const PATIENCE: Duration = Duration::from_secs(120);

fn v1() -> Vec<u8> {
    std::fs::read(fixture("versioned-1")).unwrap()
}

fn v2() -> Vec<u8> {
    std::fs::read(fixture("versioned-2")).unwrap()
}

/// A watched skills directory and the registry it feeds.
struct Watched {
    /// Holds the skills directory (or is it).
    _root: tempfile::TempDir,
    dir: PathBuf,
    host: DemoHost,
    registry: Arc<SkillRegistry>,
    events: broadcast::Receiver<ReloadEvent>,
    _watch: WatchHandle,
}

impl Watched {
    /// Writes `files` into a fresh directory, loads it under `policy` and
    /// starts watching it.
    async fn start(files: &[(&str, &[u8])], policy: SignaturePolicy) -> Self {
        let dir = tempfile::tempdir().unwrap();
        for (name, bytes) in files {
            std::fs::write(dir.path().join(name), bytes).unwrap();
        }
        Self::start_in(dir, DemoHost::new(), policy).await
    }

    /// Loads `dir` as it is on `host` under `policy` and starts watching it.
    async fn start_in(dir: tempfile::TempDir, host: DemoHost, policy: SignaturePolicy) -> Self {
        let path = dir.path().to_owned();
        Self::start_at(dir, path, host, policy).await
    }

    /// Loads `dir`, somewhere in `root`, as it is on `host` under `policy`
    /// and starts watching it.
    async fn start_at(
        root: tempfile::TempDir,
        dir: PathBuf,
        host: DemoHost,
        policy: SignaturePolicy,
    ) -> Self {
        let registry =
            SkillRegistry::load_dir(host.runtime.clone(), host.tools.clone(), policy, &dir)
                .await
                .unwrap();
        let registry = Arc::new(registry);
        // Subscribed before watching: no event can be missed.
        let events = registry.subscribe();
        let watch = watch(registry.clone(), &dir).unwrap();
        Self {
            _root: root,
            dir,
            host,
            registry,
            events,
            _watch: watch,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Deploys `bytes` as `name` the way editors and `mv` deployments do:
    /// written in full under a temporary name, then renamed over the file.
    fn rename_over(&self, name: &str, bytes: &[u8]) {
        let temporary = self.path(&format!(".{name}.tmp"));
        std::fs::write(&temporary, bytes).unwrap();
        std::fs::rename(&temporary, self.path(name)).unwrap();
    }

    /// The next event about `path`; events about other files are skipped.
    async fn event_for(&mut self, path: &Path) -> ReloadEvent {
        let wait = async {
            loop {
                let event = self.events.recv().await.expect("the event stream");
                if event.path == path {
                    return event;
                }
            }
        };
        tokio::time::timeout(PATIENCE, wait)
            .await
            .unwrap_or_else(|_| panic!("no event for {} in {PATIENCE:?}", path.display()))
    }

    /// Waits for the event about `path` and checks that it replaced
    /// `versioned` 1.0.0 by 2.0.0, which calls now answer with.
    async fn expect_upgrade_to_v2(&mut self, path: &Path) {
        let event = self.event_for(path).await;
        assert_eq!(event.outcome, ReloadOutcome::Loaded);
        assert_eq!(event.old, version_of(&v1(), "1.0.0"));
        assert_eq!(event.new, version_of(&v2(), "2.0.0"));
        assert_eq!(self.answer().await.as_deref(), Some("2.0.0"));
    }

    /// Writes the first half of `bytes` to `path` in place, as a writer that
    /// stopped halfway would (`cp` writes in place), and returns the event
    /// refusing the half, checked to call it truncated.
    ///
    /// Writing in place empties the file first: a sync may catch it empty or
    /// partly written and refuse that as well, in an event of its own. Such
    /// events are skipped. The refusal of the half is the one whose failure
    /// the snapshot holds with the half's digest once its event is received
    /// (the registry swaps a failure in before it broadcasts the event);
    /// no event follows it, since later syncs find the same refused content.
    async fn write_half(&mut self, path: &Path, bytes: &[u8]) -> ReloadEvent {
        let half = &bytes[..bytes.len() / 2];
        std::fs::write(path, half).unwrap();
        let digest = Some(digest_of(half));
        loop {
            let event = self.event_for(path).await;
            let snapshot = self.registry.snapshot();
            let Some(failure) = snapshot.failure_for(path) else {
                continue;
            };
            let of_the_half = ReloadOutcome::Rejected {
                kind: failure.kind,
                reason: failure.reason.clone(),
            };
            if failure.digest == digest && event.outcome == of_the_half {
                assert_rejected(&event, FailureKind::Signature, "truncated");
                return event;
            }
        }
    }

    /// The version `versioned` answers with now, if it is loaded.
    async fn answer(&self) -> Option<String> {
        let skill = self.registry.get("versioned")?;
        Some(run_version(&skill, &self.host.tools).await)
    }
}

/// Runs `skill` (a `versioned` fixture) and returns the version it answered.
async fn run_version(skill: &SkillComponent, tools: &Arc<ToolRegistry>) -> String {
    let report = skill
        .run(&json!({}), tools.clone())
        .await
        .expect("a versioned run");
    match report.outcome {
        RunOutcome::Done(value) => value["version"].as_str().unwrap().to_owned(),
        RunOutcome::Handover(note) => panic!("unexpected handover: {note}"),
    }
}

/// A host serving without hot reload follows its directory when asked to
/// rescan: each file is synced by the rules of a watched one (a bad update
/// keeps the version serving), a second rescan changes nothing, and a
/// directory that cannot be listed is refused, unloading nothing.
#[tokio::test]
async fn a_rescan_brings_an_unwatched_host_in_line_with_its_directory() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("skills");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("versioned.wasm"), v1()).unwrap();
    let host = SkillHost::builder(&dir, demo_policy())
        .hot_reload(false)
        .build()
        .await
        .unwrap();
    let serving = |host: &SkillHost| {
        let snapshot = host.snapshot();
        let skill = &snapshot
            .get("versioned")
            .expect("versioned serves")
            .component;
        SkillVersion::of(skill)
    };
    std::fs::write(dir.join("versioned.wasm"), v2()).unwrap();
    std::fs::write(dir.join("broken.wasm"), b"\0asm not a component").unwrap();
    assert_eq!(Some(serving(&host)), version_of(&v1(), "1.0.0"));

    let events = host.rescan_skills().await.unwrap();
    let files: Vec<_> = events
        .iter()
        .map(|event| event.path.file_name().unwrap())
        .collect();
    assert_eq!(files, ["broken.wasm", "versioned.wasm"]);
    assert_rejected(&events[0], FailureKind::Signature, "");
    assert_eq!(events[1].outcome, ReloadOutcome::Loaded);
    assert_eq!(Some(serving(&host)), version_of(&v2(), "2.0.0"));
    let again = host.rescan_skills().await.unwrap();
    assert!(
        again
            .iter()
            .all(|event| event.outcome == ReloadOutcome::Unchanged),
        "{again:?}"
    );

    std::fs::write(dir.join("versioned.wasm"), b"\0asm truncated").unwrap();
    let events = host.rescan_skills().await.unwrap();
    assert!(matches!(events[1].outcome, ReloadOutcome::Rejected { .. }));
    assert_eq!(Some(serving(&host)), version_of(&v2(), "2.0.0"));

    std::fs::rename(&dir, root.path().join("moved")).unwrap();
    let error = host.rescan_skills().await.unwrap_err().to_string();
    assert!(error.contains("cannot read skills directory"), "{error}");
    assert_eq!(Some(serving(&host)), version_of(&v2(), "2.0.0"));
}

/// The name, version and digest the registry reports for `bytes`.
fn version_of(bytes: &[u8], version: &str) -> Option<SkillVersion> {
    Some(SkillVersion {
        name: SkillName::new("versioned").unwrap(),
        version: version.to_owned(),
        digest: digest_of(bytes),
    })
}

fn assert_rejected(event: &ReloadEvent, kind: FailureKind, words: &str) {
    match &event.outcome {
        ReloadOutcome::Rejected {
            kind: refused,
            reason,
        } => {
            assert_eq!(*refused, kind, "{reason}");
            assert!(reason.contains(words), "`{words}` not in: {reason}");
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
}

#[tokio::test]
async fn a_new_file_loads_and_is_announced() {
    let mut watched = Watched::start(&[], demo_policy()).await;
    assert_eq!(watched.answer().await, None);
    let bytes = v1();
    let path = watched.path("versioned.wasm");
    watched.rename_over("versioned.wasm", &bytes);
    let event = watched.event_for(&path).await;
    assert_eq!(event.outcome, ReloadOutcome::Loaded);
    assert_eq!(event.old, None);
    assert_eq!(event.new, version_of(&bytes, "1.0.0"));
    assert_eq!(watched.answer().await.as_deref(), Some("1.0.0"));
    let snapshot = watched.registry.snapshot();
    let loaded = snapshot.get("versioned").unwrap();
    assert_eq!(loaded.path, path);
    assert!(loaded.signer.is_some(), "verified by the demo key");
}

#[tokio::test]
async fn a_rename_over_replaces_the_version_and_a_handle_taken_before_keeps_its_own() {
    let mut watched = Watched::start(&[("versioned.wasm", &v1())], demo_policy()).await;
    let path = watched.path("versioned.wasm");
    // Taken before the swap, run after it (as an invocation that looked the
    // skill up just before the swap runs).
    let before = watched.registry.get("versioned").unwrap();
    watched.rename_over("versioned.wasm", &v2());
    watched.expect_upgrade_to_v2(&path).await;
    assert_eq!(run_version(&before, &watched.host.tools).await, "1.0.0");
    assert!(watched.registry.snapshot().failure_for(&path).is_none());
}

#[tokio::test]
async fn a_run_reports_the_versions_it_started_on_after_a_reload() {
    let mut watched = Watched::start(&[("versioned.wasm", &v1())], demo_policy()).await;
    let path = watched.path("versioned.wasm");
    let agent = Agent::builder(watched.registry.clone())
        .build()
        .expect("an agent without an LLM");
    let run = agent.start_skill("versioned", json!({})).expect("started");
    watched.rename_over("versioned.wasm", &v2());
    watched.expect_upgrade_to_v2(&path).await;

    let ran = run.skills().get("versioned").expect("the skill it runs");
    assert_eq!(
        Some(SkillVersion::of(&ran.component)),
        version_of(&v1(), "1.0.0")
    );
    let output = run.result().await.expect("a versioned run");
    let CallOutcome::Done { result } = output.outcome else {
        panic!("not done: {:?}", output.outcome);
    };
    assert_eq!(result["version"], "1.0.0");
}

#[tokio::test]
async fn a_deleted_file_unloads_its_skill() {
    let mut watched = Watched::start(&[("versioned.wasm", &v1())], demo_policy()).await;
    let path = watched.path("versioned.wasm");
    std::fs::remove_file(&path).unwrap();
    let event = watched.event_for(&path).await;
    assert_eq!(event.outcome, ReloadOutcome::Unloaded);
    assert_eq!(event.old, version_of(&v1(), "1.0.0"));
    assert_eq!(event.new, None);
    assert_eq!(watched.answer().await, None);
    assert!(watched.registry.snapshot().is_empty());
}

#[tokio::test]
async fn a_file_renamed_away_unloads_its_skill() {
    let mut watched = Watched::start(&[("versioned.wasm", &v1())], demo_policy()).await;
    let path = watched.path("versioned.wasm");
    std::fs::rename(&path, watched.path("versioned.wasm.disabled")).unwrap();
    let event = watched.event_for(&path).await;
    assert_eq!(event.outcome, ReloadOutcome::Unloaded);
    assert_eq!(event.old, version_of(&v1(), "1.0.0"));
    assert_eq!(watched.answer().await, None);
}

/// Looks a skill up continuously, counting the lookups that miss it.
struct Gaps {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<usize>,
}

impl Gaps {
    fn watch(registry: &Arc<SkillRegistry>, name: &'static str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let (registry, stop) = (registry.clone(), stop.clone());
            async move {
                let mut missing = 0;
                while !stop.load(Ordering::Relaxed) {
                    if registry.get(name).is_none() {
                        missing += 1;
                    }
                    tokio::task::yield_now().await;
                }
                missing
            }
        });
        Self { stop, task }
    }

    /// The lookups that missed the skill.
    async fn stop(self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap()
    }
}

#[tokio::test]
async fn a_renamed_file_moves_its_skill_without_a_gap() {
    let mut watched = Watched::start(&[("versioned.wasm", &v1())], demo_policy()).await;
    let from = watched.path("versioned.wasm");
    let to = watched.path("renamed.wasm");
    let gaps = Gaps::watch(&watched.registry, "versioned");
    std::fs::rename(&from, &to).unwrap();
    let moved_in = watched.event_for(&to).await;
    assert_eq!(gaps.stop().await, 0, "the skill was missing while it moved");
    assert_eq!(moved_in.outcome, ReloadOutcome::Loaded);
    assert_eq!(moved_in.new, version_of(&v1(), "1.0.0"));
    let snapshot = watched.registry.snapshot();
    assert_eq!(snapshot.get("versioned").unwrap().path, to);
    assert_eq!(snapshot.len(), 1);
    assert_eq!(watched.answer().await.as_deref(), Some("1.0.0"));
}

#[tokio::test]
async fn a_truncated_write_keeps_the_old_version_until_the_write_completes() {
    let mut watched = Watched::start(&[("versioned.wasm", &v1())], demo_policy()).await;
    let path = watched.path("versioned.wasm");
    let new = v2();
    let event = watched.write_half(&path, &new).await;
    assert_eq!(event.old, version_of(&v1(), "1.0.0"));
    assert_eq!(event.new, event.old, "the old version keeps serving");
    assert_eq!(watched.answer().await.as_deref(), Some("1.0.0"));
    let snapshot = watched.registry.snapshot();
    let failure = snapshot.failure_for_skill("versioned").expect("a failure");
    assert_eq!(failure.path, path);
    assert_eq!(failure.kind, FailureKind::Signature);
    assert_eq!(failure.digest, Some(digest_of(&new[..new.len() / 2])));

    // The write completes (renamed into place: written in place, the file
    // would be emptied first, which a sync could catch and refuse).
    watched.rename_over("versioned.wasm", &new);
    watched.expect_upgrade_to_v2(&path).await;
    assert!(watched.registry.snapshot().failure_for(&path).is_none());
}

#[tokio::test]
async fn restoring_the_loaded_content_clears_the_failure() {
    let mut watched = Watched::start(&[("versioned.wasm", &v1())], demo_policy()).await;
    let path = watched.path("versioned.wasm");
    let old = v1();
    watched.write_half(&path, &old).await;
    watched.rename_over("versioned.wasm", &old);
    let event = watched.event_for(&path).await;
    assert_eq!(event.outcome, ReloadOutcome::Restored);
    assert_eq!(event.old, version_of(&old, "1.0.0"));
    assert_eq!(event.new, event.old, "the skill did not change");
    assert!(watched.registry.snapshot().failure_for(&path).is_none());
}

/// A file too large to be a skill (a stray download, a core dump) replacing
/// a skill is refused without being read into memory; the old version keeps
/// serving. The file is sparse: its size costs no disk.
/// Regression: the watcher synced one file at a time, so one slow load (a
/// large componentize-py skill compiling) held up every other file. Here a
/// skill file is a FIFO, whose sync reads until the test closes its end.
/// Regression: a FIFO named like a skill file was opened to read, which
/// waits for a writer — forever when none comes — and every file deleted
/// after it waits for what was due before it: deleted skills kept serving
/// until a restart, and the host could not shut down.
#[tokio::test]
async fn a_fifo_among_the_skills_is_refused_unread_and_holds_up_no_other_file() {
    let mut watched = Watched::start(
        &[("versioned.wasm", &v1()), ("noop.wasm", &noop())],
        demo_policy(),
    )
    .await;
    let fifo = watched.path("stuck.wasm");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success(), "mkfifo: {made}");
    let event = watched.event_for(&fifo).await;
    assert_rejected(&event, FailureKind::Read, "not a regular file (a FIFO)");
    // A deletion after it, and a replacement.
    let deleted = watched.path("noop.wasm");
    std::fs::remove_file(&deleted).unwrap();
    let event = watched.event_for(&deleted).await;
    assert_eq!(event.outcome, ReloadOutcome::Unloaded);
    assert_eq!(event.old, noop_version());
    let path = watched.path("versioned.wasm");
    watched.rename_over("versioned.wasm", &v2());
    watched.expect_upgrade_to_v2(&path).await;
}

/// Regression: a host subscribed to its registry's events only when the
/// task forwarding them first ran, so a reload sent before then (the
/// watcher's first rescan finding a change) reached neither its subscribers
/// (`/v1/events`) nor its metrics.
#[tokio::test]
async fn a_reload_before_the_host_ran_any_task_reaches_its_subscribers() {
    let dir = tempfile::tempdir().unwrap();
    let host = SkillHost::builder(dir.path(), demo_policy())
        .runtime_config(RuntimeConfig {
            max_concurrent_instances: 8,
            ..RuntimeConfig::default()
        })
        .hot_reload(false)
        .build()
        .await
        .unwrap();
    let mut events = host.subscribe();
    let path = dir.path().join("versioned.wasm");
    std::fs::write(&path, v1()).unwrap();
    // Synced on another thread's runtime while this one, which runs the
    // host's tasks, waits: the reload is sent before any of them has run.
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(host.skills().sync_path(&path))
        });
    });
    let event = tokio::time::timeout(PATIENCE, events.recv())
        .await
        .expect("the reload reaches the host's subscribers")
        .unwrap();
    let HostEvent::Reload(reload) = event else {
        panic!("expected a reload, got {event:?}");
    };
    assert_eq!((reload.path, reload.outcome), (path, ReloadOutcome::Loaded));
    let metrics = host.metrics().encode();
    assert!(
        metrics.contains(r#"skillhost_reloads_total{outcome="loaded"} 1"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_file_larger_than_a_skill_may_be_is_refused_unread() {
    let mut watched = Watched::start(&[("versioned.wasm", &v1())], demo_policy()).await;
    let path = watched.path("versioned.wasm");
    let huge = MAX_SKILL_FILE_BYTES + 1;
    // Made under a hidden name, which the watcher ignores, then renamed
    // into place: made in place, the file would be empty for a moment.
    let staged = watched.path(".versioned.wasm.tmp");
    std::fs::File::create(&staged)
        .unwrap()
        .set_len(huge)
        .unwrap();
    std::fs::rename(&staged, &path).unwrap();
    let event = watched.event_for(&path).await;
    assert_rejected(&event, FailureKind::TooLarge, &format!("{huge} bytes"));
    assert_eq!(
        event.new,
        version_of(&v1(), "1.0.0"),
        "the old version keeps serving"
    );
    assert_eq!(watched.answer().await.as_deref(), Some("1.0.0"));
    let snapshot = watched.registry.snapshot();
    let failure = snapshot.failure_for(&path).expect("a failure");
    assert_eq!(
        (failure.kind, &failure.digest),
        (FailureKind::TooLarge, &None)
    );
}

/// `versioned`, packed as an instruction-only skill whose manifest names a
/// tool the host does not have, signed.
fn signed_with_invalid_manifest() -> Vec<u8> {
    let yaml = "name: versioned\nversion: 3.0.0\ndescription: A skill whose tool does not exist.\n\
                tools: [noSuchTool]\nparameters: {type: object}\ninstructions: Call noSuchTool.\n";
    let skill = DeclarativeSkill::parse(yaml, Format::Yaml, Path::new("versioned.yaml")).unwrap();
    signed(&skill.to_component().unwrap())
}

#[tokio::test]
async fn bad_updates_keep_the_old_version_serving_and_say_why() {
    let mut watched = Watched::start(&[("versioned.wasm", &v1())], demo_policy()).await;
    let path = watched.path("versioned.wasm");
    let mut tampered = v2();
    let middle = tampered.len() / 2;
    tampered[middle] ^= 0x01;
    let not_a_component = signed(&wat::parse_str("(module)").unwrap());
    let bad_updates = [
        (tampered, FailureKind::Signature, "tampered"),
        (
            unsigned(&fixture("versioned-2")),
            FailureKind::Signature,
            "unsigned",
        ),
        (
            signed_with_invalid_manifest(),
            FailureKind::Manifest,
            "noSuchTool",
        ),
        (
            not_a_component,
            FailureKind::Compile,
            "not a valid WebAssembly component",
        ),
    ];
    for (bytes, kind, words) in bad_updates {
        watched.rename_over("versioned.wasm", &bytes);
        let event = watched.event_for(&path).await;
        assert_rejected(&event, kind, words);
        assert_eq!(event.old, version_of(&v1(), "1.0.0"));
        assert_eq!(event.new, event.old);
        assert_eq!(watched.answer().await.as_deref(), Some("1.0.0"));
        let snapshot = watched.registry.snapshot();
        let failure = snapshot
            .failure_for(&path)
            .expect("the failure is recorded");
        assert_eq!(failure.kind, kind);
        assert_eq!(failure.digest, Some(digest_of(&bytes)));
    }
    watched.rename_over("versioned.wasm", &v2());
    let event = watched.event_for(&path).await;
    assert_eq!(event.outcome, ReloadOutcome::Loaded);
    assert_eq!(watched.answer().await.as_deref(), Some("2.0.0"));
}

#[tokio::test]
async fn unsigned_skills_are_refused_by_default() {
    let bytes = unsigned(&fixture("versioned-1"));
    let mut watched = Watched::start(&[("versioned.wasm", &bytes)], demo_policy()).await;
    let path = watched.path("versioned.wasm");
    assert_eq!(watched.answer().await, None);
    let snapshot = watched.registry.snapshot();
    let failure = snapshot.failure_for(&path).expect("refused at load");
    assert_eq!(failure.kind, FailureKind::Signature);
    assert!(failure.reason.contains("unsigned"), "{}", failure.reason);
    // Nor does an unsigned update get in.
    watched.rename_over("versioned.wasm", &unsigned(&fixture("versioned-2")));
    let event = watched.event_for(&path).await;
    assert_rejected(&event, FailureKind::Signature, "unsigned");
    assert_eq!(event.new, None);
}

#[tokio::test]
async fn unsigned_skills_load_with_allow_unsigned() {
    let bytes = unsigned(&fixture("versioned-1"));
    let mut watched = Watched::start(
        &[("versioned.wasm", &bytes)],
        SignaturePolicy::AllowUnsigned,
    )
    .await;
    let path = watched.path("versioned.wasm");
    assert_eq!(watched.answer().await.as_deref(), Some("1.0.0"));
    assert_eq!(
        watched.registry.snapshot().get("versioned").unwrap().signer,
        None
    );
    let update = unsigned(&fixture("versioned-2"));
    watched.rename_over("versioned.wasm", &update);
    let event = watched.event_for(&path).await;
    assert_eq!(event.outcome, ReloadOutcome::Loaded);
    assert_eq!(event.new, version_of(&update, "2.0.0"));
}

/// Regression: a refused file's reason quotes the file's own text (here a
/// manifest's name), and was logged at warn and kept raw, so a skill file
/// could write log lines of its own.
#[tokio::test]
async fn a_refused_files_reason_keeps_its_text_escaped() {
    let host = DemoHost::new();
    let dir = tempfile::tempdir().unwrap();
    let forged = HandWritten {
        name: "bad\nINFO forged line",
        ..BARE
    };
    std::fs::write(dir.path().join("forged.wasm"), forged.build()).unwrap();
    let policy = SignaturePolicy::AllowUnsigned;
    let registry = SkillRegistry::load_dir(host.runtime, host.tools, policy, dir.path())
        .await
        .unwrap();
    let snapshot = registry.snapshot();
    let failure = snapshot.failures().next().expect("refused");
    assert_eq!(failure.kind, FailureKind::Manifest);
    assert!(
        failure.reason.contains("`bad\\nINFO forged line`") && !failure.reason.contains('\n'),
        "{}",
        failure.reason
    );
}

#[tokio::test]
async fn two_files_with_one_skill_name_the_first_holds_it_until_it_goes() {
    let mut watched = Watched::start(&[("a.wasm", &v1()), ("b.wasm", &v2())], demo_policy()).await;
    let (a, b) = (watched.path("a.wasm"), watched.path("b.wasm"));
    assert_eq!(watched.answer().await.as_deref(), Some("1.0.0"));
    let snapshot = watched.registry.snapshot();
    let failure = snapshot.failure_for(&b).expect("b is refused");
    assert_eq!(failure.kind, FailureKind::NameTaken);
    assert!(failure.reason.contains("a.wasm"), "{}", failure.reason);

    // A third file with the name is refused as it arrives.
    let c = watched.path("c.wasm");
    watched.rename_over("c.wasm", &v1());
    let event = watched.event_for(&c).await;
    assert_rejected(&event, FailureKind::NameTaken, "already taken");
    assert_eq!(event.new, None);

    // Once a.wasm is gone, a waiting file takes the name over.
    std::fs::remove_file(&c).unwrap();
    assert_eq!(watched.event_for(&c).await.outcome, ReloadOutcome::Unloaded);
    std::fs::remove_file(&a).unwrap();
    assert_eq!(watched.event_for(&a).await.outcome, ReloadOutcome::Unloaded);
    let event = watched.event_for(&b).await;
    assert_eq!(event.outcome, ReloadOutcome::Loaded);
    assert_eq!(event.new, version_of(&v2(), "2.0.0"));
    assert_eq!(watched.answer().await.as_deref(), Some("2.0.0"));
    assert!(watched.registry.snapshot().failure_for(&b).is_none());
}

/// Regression: a file refused for a name another file held was compiled
/// again only after the holder's removal had been swapped in, so the skill
/// was missing for a whole compile — when a deployment adds the new file
/// first and removes the old one after, the safe order.
#[tokio::test]
async fn a_file_waiting_for_a_name_takes_it_over_without_a_gap() {
    let mut watched = Watched::start(&[("a.wasm", &v1()), ("b.wasm", &v2())], demo_policy()).await;
    let (a, b) = (watched.path("a.wasm"), watched.path("b.wasm"));
    assert_eq!(watched.answer().await.as_deref(), Some("1.0.0"));
    let gaps = Gaps::watch(&watched.registry, "versioned");
    std::fs::remove_file(&a).unwrap();
    let unloaded = watched.event_for(&a).await;
    assert_eq!(unloaded.outcome, ReloadOutcome::Unloaded);
    let taken_over = watched.event_for(&b).await;
    assert_eq!(gaps.stop().await, 0, "the skill was missing meanwhile");
    assert_eq!(taken_over.outcome, ReloadOutcome::Loaded);
    assert_eq!(taken_over.old, None);
    assert_eq!(taken_over.new, version_of(&v2(), "2.0.0"));
    assert_eq!(watched.answer().await.as_deref(), Some("2.0.0"));
    assert!(watched.registry.snapshot().failure_for(&b).is_none());
}

/// Several tasks invoke `versioned` in a loop while the file is replaced
/// 100 times; no invocation fails, and each answers with the version of the
/// component that ran it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn invocations_never_fail_while_a_skill_is_replaced_100_times() {
    const SWAPS: usize = 100;
    const INVOKERS: usize = 4;
    let mut watched = Watched::start(&[("versioned.wasm", &v1())], demo_policy()).await;
    let path = watched.path("versioned.wasm");
    let stop = Arc::new(AtomicBool::new(false));
    let mut invokers = Vec::new();
    for _ in 0..INVOKERS {
        let registry = watched.registry.clone();
        let tools = watched.host.tools.clone();
        let stop = stop.clone();
        invokers.push(tokio::spawn(async move {
            let (mut runs, mut seen) = (0usize, [false; 2]);
            while !stop.load(Ordering::Relaxed) {
                let skill = registry
                    .get("versioned")
                    .expect("versioned is always loaded");
                let expected = skill.manifest().version.to_string();
                let answered = run_version(&skill, &tools).await;
                assert_eq!(
                    answered, expected,
                    "the answer comes from the version that ran"
                );
                match answered.as_str() {
                    "1.0.0" => seen[0] = true,
                    "2.0.0" => seen[1] = true,
                    other => panic!("unexpected version {other}"),
                }
                runs += 1;
            }
            (runs, seen)
        }));
    }
    let versions = [(v1(), "1.0.0"), (v2(), "2.0.0")];
    for swap in 1..=SWAPS {
        let (old, new) = (&versions[(swap - 1) % 2], &versions[swap % 2]);
        watched.rename_over("versioned.wasm", &new.0);
        let event = watched.event_for(&path).await;
        assert_eq!(event.outcome, ReloadOutcome::Loaded, "swap {swap}");
        assert_eq!(event.old, version_of(&old.0, old.1), "swap {swap}");
        assert_eq!(event.new, version_of(&new.0, new.1), "swap {swap}");
    }
    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    let mut seen = [false; 2];
    for invoker in invokers {
        // A failed invocation panics its task, which fails the join.
        let (runs, saw) = invoker.await.expect("an invoker failed");
        total += runs;
        seen = [seen[0] || saw[0], seen[1] || saw[1]];
    }
    assert!(total >= SWAPS, "only {total} invocations ran");
    assert_eq!(seen, [true, true], "both versions answered");
}

#[test]
fn a_compilation_cache_other_users_could_write_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let parent = tempfile::tempdir().unwrap();
    let config = |dir: &Path| RuntimeConfig {
        max_concurrent_instances: 1,
        cache_dir: Some(dir.to_owned()),
        ..RuntimeConfig::default()
    };
    // Created for this user alone.
    let fresh = parent.path().join("cache");
    Runtime::new(config(&fresh)).unwrap();
    let mode = std::fs::metadata(&fresh).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);

    std::fs::set_permissions(&fresh, std::fs::Permissions::from_mode(0o777)).unwrap();
    let error = format!("{:#}", Runtime::new(config(&fresh)).err().expect("refused"));
    assert!(
        error.contains("compilation cache directory") && error.contains("chmod go-w"),
        "{error}"
    );
}

#[tokio::test]
async fn a_warm_start_loads_every_skill_from_the_compilation_cache() {
    let skills = tempfile::tempdir().unwrap();
    std::fs::write(skills.path().join("versioned.wasm"), v1()).unwrap();
    std::fs::copy(fixture("noop"), skills.path().join("noop.wasm")).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let host = DemoHost::new();
    let start = || async {
        let runtime = Runtime::new(RuntimeConfig {
            max_concurrent_instances: 8,
            cache_dir: Some(cache.path().to_owned()),
            ..RuntimeConfig::default()
        })
        .unwrap();
        let registry =
            SkillRegistry::load_dir(runtime, host.tools.clone(), demo_policy(), skills.path())
                .await
                .unwrap();
        assert_eq!(registry.snapshot().len(), 2);
        registry.runtime().cache_stats().expect("a cache")
    };
    let cold = start().await;
    assert_eq!((cold.hits, cold.misses), (0, 2), "a cold start compiles");
    assert!(std::fs::read_dir(cache.path()).unwrap().next().is_some());
    let warm = start().await;
    assert_eq!(
        (warm.hits, warm.misses),
        (2, 0),
        "a warm start compiles nothing"
    );
}

// Kubernetes ConfigMap and Secret volumes (and other atomic-swap deployments):
// the `*.wasm` entries are links through `..data`, and an update swaps
// `..data` to a new timestamped directory. No event names a `*.wasm` whose
// content changed; the watcher rescans.

fn noop() -> Vec<u8> {
    std::fs::read(fixture("noop")).unwrap()
}

/// The version the registry reports for the `noop` fixture.
fn noop_version() -> Option<SkillVersion> {
    Some(SkillVersion {
        name: SkillName::new("noop").unwrap(),
        version: "0.1.0".to_owned(),
        digest: digest_of(&noop()),
    })
}

/// A watched ConfigMap-style volume holding `files`, on a runtime with a
/// compilation cache so that the test can count compiles, once the watcher
/// has settled. The cache directory must outlive the test's use of the
/// registry.
async fn configmap(files: &[(&str, &[u8])]) -> (Watched, ConfigMapVolume, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let volume = ConfigMapVolume::create(dir.path(), files);
    let cache = tempfile::tempdir().unwrap();
    let mut host = DemoHost::new();
    host.runtime = Runtime::new(RuntimeConfig {
        max_concurrent_instances: 64,
        cache_dir: Some(cache.path().to_owned()),
        ..RuntimeConfig::default()
    })
    .unwrap();
    let mut watched = Watched::start_in(dir, host, demo_policy()).await;
    // The watcher's first rescan is over before the test changes anything:
    // it would pick up a change made meanwhile on its own.
    let seen = watched.settle().await;
    assert!(seen.is_empty(), "{seen:?}");
    (watched, volume, cache)
}

impl Watched {
    /// Components compiled so far (taken from the compilation cache or not):
    /// every load that got past signature verification.
    fn compiles(&self) -> usize {
        let stats = self.registry.runtime().cache_stats().expect("a cache");
        stats.hits + stats.misses
    }

    /// Waits until the watcher has synced everything it was asked to before
    /// this call, and returns the events broadcast meanwhile: a file is
    /// put in place, refused and removed, and the watcher syncs a file gone
    /// only once every sync due before it has finished.
    async fn settle(&mut self) -> Vec<ReloadEvent> {
        let marker = self.path("zz-settle.wasm");
        let mut seen = Vec::new();
        self.rename_over("zz-settle.wasm", b"not a component");
        let wait = async {
            loop {
                let event = self.events.recv().await.expect("the event stream");
                if event.path != marker {
                    seen.push(event);
                } else if event.outcome == ReloadOutcome::Unloaded {
                    return;
                } else {
                    assert_rejected(&event, FailureKind::Signature, "malformed");
                    std::fs::remove_file(&marker).unwrap();
                }
            }
        };
        tokio::time::timeout(PATIENCE, wait)
            .await
            .expect("the marker's events");
        seen
    }
}

#[tokio::test]
async fn a_configmap_volume_loads_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let _volume = ConfigMapVolume::create(
        dir.path(),
        &[("versioned.wasm", &v1()), ("noop.wasm", &noop())],
    );
    // Hidden files are never skills, whatever their name ends in.
    std::fs::write(dir.path().join(".stray.wasm"), v2()).unwrap();
    let mut watched = Watched::start_in(dir, DemoHost::new(), demo_policy()).await;
    let snapshot = watched.registry.snapshot();
    assert_eq!(snapshot.len(), 2);
    assert_eq!(snapshot.failures().count(), 0);
    // Skills keep the path of the link, not of the timestamped directory.
    let versioned = snapshot.get("versioned").unwrap();
    assert_eq!(versioned.path, watched.path("versioned.wasm"));
    assert_eq!(versioned.component.digest(), digest_of(&v1()));
    assert!(versioned.signer.is_some());
    assert_eq!(
        snapshot.get("noop").unwrap().path,
        watched.path("noop.wasm")
    );
    assert_eq!(watched.answer().await.as_deref(), Some("1.0.0"));
    // The watcher's first rescan changes nothing.
    let seen = watched.settle().await;
    assert!(seen.is_empty(), "{seen:?}");
    assert_eq!(watched.registry.snapshot().len(), 2);
}

#[tokio::test]
async fn a_configmap_swap_replaces_the_version_without_a_restart() {
    let (mut watched, mut volume, _cache) =
        configmap(&[("versioned.wasm", &v1()), ("noop.wasm", &noop())]).await;
    let path = watched.path("versioned.wasm");
    assert_eq!(watched.compiles(), 2);
    // Taken before the swap, run after it: it keeps its version.
    let before = watched.registry.get("versioned").unwrap();
    volume.update(&[("versioned.wasm", &v2()), ("noop.wasm", &noop())]);
    watched.expect_upgrade_to_v2(&path).await;
    assert_eq!(run_version(&before, &watched.host.tools).await, "1.0.0");
    // The unchanged file was read and hashed, not compiled again.
    let seen = watched.settle().await;
    assert!(seen.is_empty(), "{seen:?}");
    assert_eq!(watched.compiles(), 3, "only the changed file compiles");
    let snapshot = watched.registry.snapshot();
    assert_eq!(snapshot.len(), 2);
    assert_eq!(snapshot.failures().count(), 0);
    assert_eq!(snapshot.get("versioned").unwrap().path, path);
}

#[tokio::test]
async fn a_configmap_swap_that_drops_a_file_unloads_its_skill() {
    let (mut watched, mut volume, _cache) =
        configmap(&[("versioned.wasm", &v1()), ("noop.wasm", &noop())]).await;
    let path = watched.path("noop.wasm");
    volume.update(&[("versioned.wasm", &v1())]);
    let event = watched.event_for(&path).await;
    assert_eq!(event.outcome, ReloadOutcome::Unloaded);
    assert_eq!(event.old, noop_version());
    assert_eq!(event.new, None);
    assert!(watched.registry.get("noop").is_none());
    assert_eq!(watched.answer().await.as_deref(), Some("1.0.0"));
    let seen = watched.settle().await;
    assert!(seen.is_empty(), "{seen:?}");
    assert_eq!(watched.compiles(), 2);
    let snapshot = watched.registry.snapshot();
    assert_eq!(snapshot.len(), 1);
    assert_eq!(snapshot.failures().count(), 0);
}

#[tokio::test]
async fn a_configmap_swap_that_adds_a_file_loads_its_skill() {
    let (mut watched, mut volume, _cache) = configmap(&[("versioned.wasm", &v1())]).await;
    let path = watched.path("noop.wasm");
    assert!(watched.registry.get("noop").is_none());
    volume.update(&[("versioned.wasm", &v1()), ("noop.wasm", &noop())]);
    let event = watched.event_for(&path).await;
    assert_eq!(event.outcome, ReloadOutcome::Loaded);
    assert_eq!(event.old, None);
    assert_eq!(event.new, noop_version());
    let snapshot = watched.registry.snapshot();
    assert_eq!(snapshot.get("noop").unwrap().path, path);
    assert_eq!(watched.answer().await.as_deref(), Some("1.0.0"));
    let seen = watched.settle().await;
    assert!(seen.is_empty(), "{seen:?}");
    assert_eq!(watched.compiles(), 2, "versioned is not compiled again");
}

#[tokio::test]
async fn a_configmap_swap_to_a_bad_component_keeps_the_old_version_serving() {
    let (mut watched, mut volume, _cache) =
        configmap(&[("versioned.wasm", &v1()), ("noop.wasm", &noop())]).await;
    let path = watched.path("versioned.wasm");
    let mut tampered = v2();
    let middle = tampered.len() / 2;
    tampered[middle] ^= 0x01;
    let bad_updates = [
        (tampered, "tampered"),
        (b"garbage, not WebAssembly".to_vec(), "malformed"),
    ];
    for (bytes, words) in bad_updates {
        volume.update(&[("versioned.wasm", &bytes), ("noop.wasm", &noop())]);
        let event = watched.event_for(&path).await;
        assert_rejected(&event, FailureKind::Signature, words);
        assert_eq!(event.old, version_of(&v1(), "1.0.0"));
        assert_eq!(event.new, event.old, "the old version keeps serving");
        assert_eq!(watched.answer().await.as_deref(), Some("1.0.0"));
        let snapshot = watched.registry.snapshot();
        let failure = snapshot
            .failure_for_skill("versioned")
            .expect("the failure is recorded");
        assert_eq!(failure.path, path);
        assert_eq!(failure.kind, FailureKind::Signature);
        assert_eq!(failure.digest, Some(digest_of(&bytes)));
        assert!(snapshot.get("noop").is_some());
    }
    // Refused before compiling; the unchanged noop is not compiled either.
    let seen = watched.settle().await;
    assert!(seen.is_empty(), "{seen:?}");
    assert_eq!(watched.compiles(), 2);
    // A good update afterwards loads and clears the failure.
    volume.update(&[("versioned.wasm", &v2()), ("noop.wasm", &noop())]);
    watched.expect_upgrade_to_v2(&path).await;
    assert!(watched.registry.snapshot().failure_for(&path).is_none());
}

// The skills directory's own path: a link on it swapped (git-sync's `--link`:
// `current -> .worktrees/<commit>`, skills in `current/skills`), or the
// directory deleted and created again. No event inside the watched directory
// says so; the watcher follows the path to where it leads now.

/// A checkout laid out the way git-sync's `--link` keeps one: each commit in
/// its own worktree, `current` a link swapped to the newest, the old
/// worktree deleted after the swap.
struct Checkout {
    root: PathBuf,
    commit: u32,
}

impl Checkout {
    /// A checkout in `root` (which must exist) of a first commit holding
    /// `files` in `skills/`.
    fn create(root: &Path, files: &[(&str, &[u8])]) -> Self {
        let mut checkout = Self {
            root: root.to_owned(),
            commit: 0,
        };
        checkout.publish(files);
        checkout
    }

    /// The skills directory, as a deployment names it: through `current`.
    fn skills(&self) -> PathBuf {
        self.root.join("current/skills")
    }

    fn worktree(&self, commit: u32) -> PathBuf {
        self.root.join(".worktrees").join(format!("{commit:040x}"))
    }

    /// Checks out a new commit holding `files`, swaps `current` to it
    /// atomically and deletes the previous worktree.
    fn publish(&mut self, files: &[(&str, &[u8])]) {
        self.commit += 1;
        let worktree = self.worktree(self.commit);
        std::fs::create_dir_all(worktree.join("skills")).unwrap();
        for (name, bytes) in files {
            std::fs::write(worktree.join("skills").join(name), bytes).unwrap();
        }
        let link = self.root.join(".current.tmp");
        std::os::unix::fs::symlink(worktree.strip_prefix(&self.root).unwrap(), &link).unwrap();
        std::fs::rename(&link, self.root.join("current")).unwrap();
        if self.commit > 1 {
            std::fs::remove_dir_all(self.worktree(self.commit - 1)).unwrap();
        }
    }
}

#[tokio::test]
async fn a_link_swapped_on_the_directory_path_is_followed() {
    let root = tempfile::tempdir().unwrap();
    let mut checkout = Checkout::create(
        root.path(),
        &[("versioned.wasm", &v1()), ("noop.wasm", &noop())],
    );
    let skills = checkout.skills();
    let mut watched = Watched::start_at(root, skills, DemoHost::new(), demo_policy()).await;
    let seen = watched.settle().await;
    assert!(seen.is_empty(), "{seen:?}");
    assert_eq!(watched.answer().await.as_deref(), Some("1.0.0"));

    checkout.publish(&[("versioned.wasm", &v2()), ("noop.wasm", &noop())]);
    let path = watched.path("versioned.wasm");
    watched.expect_upgrade_to_v2(&path).await;

    // The new worktree is the one watched now: a plain deployment into it
    // (the old one is gone, and with it any watch left on it) is seen.
    watched.rename_over("versioned.wasm", &v1());
    let event = watched.event_for(&path).await;
    assert_eq!(event.outcome, ReloadOutcome::Loaded);
    assert_eq!(event.new, version_of(&v1(), "1.0.0"));
    // And so is the next swap.
    checkout.publish(&[("versioned.wasm", &v2())]);
    let event = watched.event_for(&watched.path("noop.wasm")).await;
    assert_eq!(event.outcome, ReloadOutcome::Unloaded);
    let seen = watched.settle().await;
    let snapshot = watched.registry.snapshot();
    assert_eq!(snapshot.len(), 1, "{seen:?}");
    assert_eq!(snapshot.failures().count(), 0);
    assert_eq!(watched.answer().await.as_deref(), Some("2.0.0"));
    assert_eq!(snapshot.get("versioned").unwrap().path, path);
}

#[tokio::test]
async fn a_directory_deleted_and_created_again_is_watched_again() {
    let root = tempfile::tempdir().unwrap();
    let skills = root.path().join("skills");
    std::fs::create_dir(&skills).unwrap();
    std::fs::write(skills.join("versioned.wasm"), v1()).unwrap();
    let mut watched = Watched::start_at(root, skills.clone(), DemoHost::new(), demo_policy()).await;
    let seen = watched.settle().await;
    assert!(seen.is_empty(), "{seen:?}");

    let path = watched.path("versioned.wasm");
    std::fs::remove_dir_all(&skills).unwrap();
    assert_eq!(
        watched.event_for(&path).await.outcome,
        ReloadOutcome::Unloaded
    );
    std::fs::create_dir(&skills).unwrap();
    watched.rename_over("versioned.wasm", &v2());
    let event = watched.event_for(&path).await;
    assert_eq!(event.outcome, ReloadOutcome::Loaded);
    assert_eq!(event.new, version_of(&v2(), "2.0.0"));
    // Watched in its new incarnation: a later deployment is seen.
    watched.rename_over("versioned.wasm", &v1());
    let event = watched.event_for(&path).await;
    assert_eq!(event.outcome, ReloadOutcome::Loaded);
    assert_eq!(event.new, version_of(&v1(), "1.0.0"));
    assert_eq!(watched.answer().await.as_deref(), Some("1.0.0"));
}

/// A policy trusting exactly `keys`.
fn trusting(keys: &[&SigningKey]) -> SignaturePolicy {
    let keys = keys
        .iter()
        .map(|key| TrustedKey::new(key.public_key().clone(), "test"));
    SignaturePolicy::Require(TrustStore::new(keys).unwrap())
}

/// A bundled skill's component without its demo signature.
fn bundled_unsigned(name: &str) -> Vec<u8> {
    unsigned(&repo_root().join(format!("skills/{name}.wasm")))
}

#[tokio::test]
async fn a_key_taken_out_of_the_trust_store_unloads_what_it_signed_at_once() {
    let (alice, bob) = (SigningKey::generate(), SigningKey::generate());
    let refund = alice.sign(&bundled_unsigned("processRefund")).unwrap();
    let inquire = bob.sign(&bundled_unsigned("inquireOrderStatus")).unwrap();
    let mut watched = Watched::start(
        &[("refund.wasm", &refund), ("inquire.wasm", &inquire)],
        trusting(&[&alice, &bob]),
    )
    .await;
    let path = watched.path("refund.wasm");
    assert_eq!(watched.registry.snapshot().len(), 2);

    // Alice's key is revoked: her skill goes, though its file stays.
    let events = watched.registry.replace_policy(trusting(&[&bob])).await;
    assert_eq!(events.len(), 1, "{events:?}");
    let event = &events[0];
    assert_eq!(event.path, path);
    assert_eq!(event.old.as_ref().unwrap().name.as_str(), "processRefund");
    assert_eq!(event.new, None);
    let ReloadOutcome::Untrusted { reason } = &event.outcome else {
        panic!("unloaded as untrusted: {event:?}");
    };
    assert!(reason.contains("signed by an unknown key"), "{reason}");
    assert_eq!(watched.event_for(&path).await.outcome, event.outcome);
    let snapshot = watched.registry.snapshot();
    assert!(snapshot.get("processRefund").is_none());
    assert!(snapshot.get("inquireOrderStatus").is_some());
    assert_eq!(
        snapshot.failure_for(&path).unwrap().kind,
        FailureKind::Signature
    );
    // The file did not change: it stays refused.
    let synced = watched.registry.sync_path(&path).await;
    assert_eq!(synced.outcome, ReloadOutcome::Unchanged);
    assert!(watched.registry.get("processRefund").is_none());

    // Trusted again, her skill loads without its file changing.
    let events = watched
        .registry
        .replace_policy(trusting(&[&alice, &bob]))
        .await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(
        (events[0].path.as_path(), &events[0].outcome),
        (path.as_path(), &ReloadOutcome::Loaded)
    );
    let snapshot = watched.registry.snapshot();
    let loaded = snapshot.get("processRefund").unwrap();
    assert_eq!(loaded.signer, Some(alice.public_key().fingerprint()));
    assert!(snapshot.failure_for(&path).is_none());
    // Replacing a policy with the same keys changes nothing.
    let events = watched
        .registry
        .replace_policy(trusting(&[&alice, &bob]))
        .await;
    assert!(events.is_empty(), "{events:?}");
}

#[tokio::test]
async fn a_skill_signed_by_two_keys_keeps_serving_when_one_is_revoked() {
    let (alice, bob) = (SigningKey::generate(), SigningKey::generate());
    let both = bob
        .sign(&alice.sign(&bundled_unsigned("processRefund")).unwrap())
        .unwrap();
    let watched = Watched::start(&[("refund.wasm", &both)], trusting(&[&alice])).await;
    let signer = |watched: &Watched| {
        watched
            .registry
            .snapshot()
            .get("processRefund")
            .unwrap()
            .signer
    };
    assert_eq!(signer(&watched), Some(alice.public_key().fingerprint()));

    let events = watched.registry.replace_policy(trusting(&[&bob])).await;
    assert!(events.is_empty(), "nothing unloaded: {events:?}");
    assert_eq!(signer(&watched), Some(bob.public_key().fingerprint()));
}

#[tokio::test]
async fn a_revoked_version_whose_file_holds_a_refused_update_goes_and_the_update_loads_once_trusted()
 {
    let (alice, bob, carol) = (
        SigningKey::generate(),
        SigningKey::generate(),
        SigningKey::generate(),
    );
    let v1 = alice.sign(&unsigned(&fixture("versioned-1"))).unwrap();
    let mut watched = Watched::start(&[("versioned.wasm", &v1)], trusting(&[&alice])).await;
    let path = watched.path("versioned.wasm");
    // An update signed by a key not yet trusted is refused; 1.0.0 serves on.
    let v2 = carol.sign(&unsigned(&fixture("versioned-2"))).unwrap();
    watched.rename_over("versioned.wasm", &v2);
    let refused = watched.event_for(&path).await;
    assert!(
        matches!(
            refused.outcome,
            ReloadOutcome::Rejected {
                kind: FailureKind::Signature,
                ..
            }
        ),
        "{refused:?}"
    );
    assert_eq!(refused.new.unwrap().version, "1.0.0");

    // Alice revoked: 1.0.0's bytes are gone from the file, and its signer
    // is no longer trusted, so it goes; the update stays refused.
    let events = watched.registry.replace_policy(trusting(&[&bob])).await;
    assert_eq!(events.len(), 1, "{events:?}");
    let ReloadOutcome::Untrusted { reason } = &events[0].outcome else {
        panic!("unloaded as untrusted: {events:?}");
    };
    assert!(
        reason.contains(&format!("key {}", alice.public_key().fingerprint())),
        "{reason}"
    );
    assert_eq!(events[0].old.as_ref().unwrap().version, "1.0.0");
    let snapshot = watched.registry.snapshot();
    assert!(snapshot.get("versioned").is_none());
    assert_eq!(
        snapshot.failure_for(&path).unwrap().digest.as_deref(),
        Some(digest_of(&v2).as_str()),
        "the file's failure is still its update's"
    );

    // Carol trusted: the update loads.
    let events = watched
        .registry
        .replace_policy(trusting(&[&bob, &carol]))
        .await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].outcome, ReloadOutcome::Loaded);
    assert_eq!(events[0].new.as_ref().unwrap().version, "2.0.0");
}

/// A host over `dir` without hot reload, its demo tools on a fresh
/// in-memory shop, and the shop.
async fn unwatched_shop(dir: &Path, policy: SignaturePolicy) -> (SkillHost, Arc<DemoDb>) {
    let db = Arc::new(DemoDb::in_memory().unwrap());
    let host = SkillHost::builder(dir, policy)
        .demo_tools(db.clone())
        .hot_reload(false)
        .build()
        .await
        .unwrap();
    (host, db)
}

/// `skill` invoked on `host` with `input`, waiting for its write's
/// approval: the run, its confirmation, and the host's events from before
/// the run started.
async fn waiting_for_approval(
    host: &SkillHost,
    skill: &str,
    input: &Value,
) -> (
    RunHandle<SkillOutput>,
    PendingConfirmation,
    broadcast::Receiver<HostEvent>,
) {
    let mut events = host.subscribe();
    let run = host.invoke(skill, input.clone()).unwrap();
    loop {
        if let HostEvent::ConfirmationPending(pending) = events.recv().await.unwrap() {
            return (run, pending, events);
        }
    }
}

/// The first of `events` that `pick` takes, none before it a reload: a
/// change is told before what it unloaded or loaded.
async fn told_before_reloads<T>(
    events: &mut broadcast::Receiver<HostEvent>,
    pick: impl Fn(HostEvent) -> Option<T>,
) -> T {
    loop {
        let event = events.recv().await.unwrap();
        if let HostEvent::Reload(reload) = &event {
            panic!("a reload before the change: {reload:?}");
        }
        if let Some(picked) = pick(event) {
            return picked;
        }
    }
}

/// Revoking a key stops its code, not only its next loads: steps waiting
/// for an approval when their signer is revoked do not run again. The call
/// a person approved runs as approved, and the run says so.
#[tokio::test]
async fn steps_waiting_for_an_approval_do_not_run_again_once_their_signer_is_revoked() {
    let (alice, bob) = (SigningKey::generate(), SigningKey::generate());
    let dir = tempfile::tempdir().unwrap();
    let refund = alice.sign(&bundled_unsigned("processRefund")).unwrap();
    std::fs::write(dir.path().join("refund.wasm"), refund).unwrap();
    let (host, db) = unwatched_shop(dir.path(), trusting(&[&alice])).await;
    let input = json!({"orderId": "88231", "reason": "broken"});
    let (run, pending, mut events) = waiting_for_approval(&host, "processRefund", &input).await;

    let replaced = host.replace_signature_policy(trusting(&[&bob])).await;
    assert!(
        matches!(
            replaced.reloads[..],
            [ReloadEvent {
                outcome: ReloadOutcome::Untrusted { .. },
                ..
            }]
        ),
        "{replaced:?}"
    );
    let (alice_key, bob_key) = (
        alice.public_key().fingerprint(),
        bob.public_key().fingerprint(),
    );
    let trust = &replaced.trust;
    assert_eq!(
        (&trust.keys, &trust.added, &trust.removed),
        (&vec![bob_key], &vec![bob_key], &vec![alice_key])
    );
    // Subscribers are told, before what it unloaded.
    let told = told_before_reloads(&mut events, |event| match event {
        HostEvent::Trust(change) => Some(change),
        _ => None,
    })
    .await;
    assert_eq!(&told, trust);
    host.approve(pending.id.as_str()).unwrap();
    let CallOutcome::Failed { error } = run.result().await.unwrap().outcome else {
        panic!("the steps were stopped");
    };
    let revoked = format!("key {}", alice.public_key().fingerprint());
    assert!(
        error.contains("stopped after an approval, before its steps ran again")
            && error.contains(&revoked)
            && error.contains("already executed: queryOrder, applyRefund"),
        "{error}"
    );
    assert_eq!(
        db.refunds_for("88231").unwrap().len(),
        1,
        "approved, so done"
    );
    assert!(host.invoke("processRefund", input).is_err(), "unloaded");
}

/// An embedder's tools replaced on a running host: the skill calling a tool
/// gone is unloaded, saying which, while a run it started before keeps the
/// tools it started with, and its approved write runs; with the tool back,
/// the skill loads again.
#[tokio::test]
async fn replaced_tools_unload_the_skills_that_no_longer_fit_and_runs_keep_theirs() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["processRefund", "inquireOrderStatus"] {
        let file = format!("{name}.wasm");
        std::fs::copy(
            repo_root().join("skills").join(&file),
            dir.path().join(file),
        )
        .unwrap();
    }
    let (host, db) = unwatched_shop(dir.path(), demo_policy()).await;
    let input = json!({"orderId": "88231", "reason": "broken"});
    let (run, pending, mut events) = waiting_for_approval(&host, "processRefund", &input).await;

    let all = host.tools();
    let without = host.update_tools(|current| {
        let mut without = ToolRegistry::clone(current);
        without
            .remove("applyRefund")
            .then_some(without)
            .ok_or("no applyRefund")
    });
    let replaced = without.await.unwrap();
    let change = &replaced.tools;
    assert_eq!(
        (
            &change.server,
            &change.removed,
            &change.added,
            &change.changed
        ),
        (&None, &vec!["applyRefund".to_owned()], &vec![], &vec![])
    );
    let [unloaded] = replaced.reloads.as_slice() else {
        panic!("one change: {replaced:?}");
    };
    assert_eq!(unloaded.path, dir.path().join("processRefund.wasm"));
    let ReloadOutcome::Unresolved { reason } = &unloaded.outcome else {
        panic!("not unresolved: {unloaded:?}");
    };
    assert!(
        reason.contains("`applyRefund`, which is not a registered tool"),
        "{reason}"
    );
    // Subscribers are told, before what it unloaded.
    let told = told_before_reloads(&mut events, |event| match event {
        HostEvent::Tools(change) => Some(change),
        _ => None,
    })
    .await;
    assert_eq!(&told, change);
    assert!(
        host.invoke("processRefund", input.clone()).is_err(),
        "unloaded"
    );
    let status = host.invoke("inquireOrderStatus", json!({"orderId": "88231"}));
    let outcome = status.unwrap().result().await.unwrap().outcome;
    assert!(matches!(outcome, CallOutcome::Done { .. }), "{outcome:?}");

    // The run started before calls the tool it started with.
    host.approve(pending.id.as_str()).unwrap();
    let outcome = run.result().await.unwrap().outcome;
    assert!(matches!(outcome, CallOutcome::Done { .. }), "{outcome:?}");
    assert_eq!(db.refunds_for("88231").unwrap().len(), 1);

    let back = host.update_tools(|_| Ok::<_, Infallible>(ToolRegistry::clone(&all)));
    let back = back.await.unwrap();
    assert_eq!(back.tools.added, ["applyRefund"]);
    assert!(matches!(
        back.reloads[..],
        [ReloadEvent {
            outcome: ReloadOutcome::Loaded,
            ..
        }]
    ));
    assert!(host.snapshot().get("processRefund").is_some());
}

#[tokio::test]
async fn a_scoped_key_signs_only_the_skills_and_tools_its_scope_names() {
    let alice = SigningKey::generate();
    let scoped = |scope: KeyScope| {
        let key = alice.public_key();
        let store = TrustStore::new([TrustedKey::new(key.clone(), "test")]).unwrap();
        SignaturePolicy::Require(store.with_scope(key.fingerprint(), scope))
    };
    let reads_orders = || KeyScope {
        skills: None,
        tools: Some(vec!["queryOrder".into(), "queryLogistics".into()]),
    };
    let refund = alice.sign(&bundled_unsigned("processRefund")).unwrap();
    let inquire = alice.sign(&bundled_unsigned("inquireOrderStatus")).unwrap();
    let watched = Watched::start(
        &[("refund.wasm", &refund), ("inquire.wasm", &inquire)],
        scoped(reads_orders()),
    )
    .await;
    let snapshot = watched.registry.snapshot();
    assert!(snapshot.get("inquireOrderStatus").is_some());
    assert!(snapshot.get("processRefund").is_none());
    let refused = snapshot.failure_for(&watched.path("refund.wasm")).unwrap();
    assert_eq!(refused.kind, FailureKind::Scope);
    assert!(
        refused.reason.contains(
            "it calls `applyRefund`, not among the tools the key may sign for (queryOrder, \
             queryLogistics)"
        ),
        "{}",
        refused.reason
    );

    // Scoped by name instead: the refund is in, the inquiry out.
    let by_name = || KeyScope {
        skills: Some(vec!["process*".into()]),
        tools: None,
    };
    let events = watched.registry.replace_policy(scoped(by_name())).await;
    let outcomes: Vec<_> = events
        .iter()
        .map(|event| {
            (
                event.path.file_name().unwrap().to_str().unwrap(),
                &event.outcome,
            )
        })
        .collect();
    let [
        ("inquire.wasm", ReloadOutcome::Untrusted { reason }),
        ("refund.wasm", ReloadOutcome::Loaded),
    ] = outcomes[..]
    else {
        panic!("{events:?}");
    };
    assert!(
        reason.contains(
            "its name `inquireOrderStatus` matches none of the names the key may sign (process*)"
        ),
        "{reason}"
    );
    // The same scope again changes nothing, and reports nothing.
    let events = watched.registry.replace_policy(scoped(by_name())).await;
    assert!(events.is_empty(), "{events:?}");
}
