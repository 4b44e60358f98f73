//! Runs kept on disk while they wait for a person, so that a restart does
//! not lose them: the approvals that pause and resume a serialized run of
//! the OpenAI Agents SDK.
//!
//! What is kept, once an agent has a store ([`AgentBuilder::keep_runs`]):
//! - a direct skill run ([`Agent::start_skill`]) whose steps wait: the
//!   skill (name, version, digest), its input, the steps' journal (the
//!   calls answered so far, the WASI seed and clock readings) and the call
//!   that waits. Its steps run again from the journal, only on the
//!   component of that digest;
//! - a conversation ([`Agent::start`]): its messages and everything it was
//!   told since, in order (each model answer, tool result,
//!   person's answer and WASI source). Resumed, it runs again from its
//!   messages with each of those answered from the record instead of
//!   asked — no model call, no tool call, no event — until it reaches the
//!   confirmation it waited on. A run that does something else on the way
//!   (the skills or settings changed) is stopped, since past that point a
//!   call could repeat a write.
//!
//! With either, whom the run acts for, its skill and tool scopes, and the
//! distributed trace it is part of ([`TraceContext`]): resumed, its calls
//! carry that trace on.
//!
//! Not kept: a run whose tool context holds what its embedder attached
//! (forwarded headers, a tenant): that cannot be written down, and resumed
//! without it the run would act for nobody.
//!
//! The file is written (a temporary file, synced, then renamed) as the
//! confirmation opens. Rejected or expired, it is removed; approved, it is
//! replaced, before the call runs, by the approval, to which what the call
//! returned is added once it returns; the run's end removes it. A run is
//! never resumed past an approval: a crash while the approved call is under
//! way, or later in the run, leaves the approval, and the next host, rather
//! than ask again for a write that may have run, reports the run as
//! interrupted ([`InterruptedRun`]), saying which call may or may not have
//! run, or that it ran and what it returned. A run aborted
//! ([`RunHandle::abort`](super::RunHandle::abort)) is removed too; one that
//! ends with the process stays, and the next host started on the directory
//! resumes it ([`Agent::resume_kept_runs`]): the same run id, its
//! confirmation pending again under the same id until the same expiry (one
//! that expired meanwhile is declined without being shown).
//!
//! [`AgentBuilder::keep_runs`]: super::AgentBuilder::keep_runs
//! [`Agent::start_skill`]: super::Agent::start_skill
//! [`Agent::start`]: super::Agent::start
//! [`Agent::resume_kept_runs`]: super::Agent::resume_kept_runs

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ConfirmationPolicy;
use super::confirm::{ConfirmationId, PendingConfirmation, summarize};
use super::events::{Caller, Declined, Resolution};
use super::ids::RunId;
use super::llm::{ChatResponse, Message};
use super::run::{Journal, RunContext, RunHandle, RunOutput, SkillOutput};
use crate::runtime::WasiSources;
use crate::skills::SkillVersion;
use crate::text::clip;
use crate::tools::ToolError;
use crate::trace_context::TraceContext;

/// The directory runs are kept in ([`AgentBuilder::keep_runs`]): one JSON
/// file per run, `run_….json`, readable by its owner alone (inputs and
/// arguments are the end users' data). One store at a time uses a
/// directory: two hosts resuming the same runs could each run an approved
/// write.
///
/// [`AgentBuilder::keep_runs`]: super::AgentBuilder::keep_runs
#[derive(Debug)]
pub struct RunStore {
    dir: PathBuf,
    /// `.lock` in the directory, locked for as long as the store lives (the
    /// system releases it when the process ends, however it ends).
    _lock: std::fs::File,
}

/// Why a run store cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("runs directory {}: {cause:#}", dir.display())]
pub struct RunStoreError {
    dir: PathBuf,
    cause: anyhow::Error,
}

/// The version of the kept file's format; a file of another is left alone.
const FORMAT: u32 = 1;

/// How much of an interrupted run's returned result its message shows.
const SHOWN_RESULT_CHARS: usize = 500;

/// The file in a runs directory its host holds locked while it lives.
const LOCK_FILE: &str = ".lock";

/// A runs directory others may use in any way is refused, since:
const PRIVATE_MODE_REFUSED: u32 = 0o077;
const KEPT_RUNS_ARE_PRIVATE: &str = "kept runs hold end users' inputs";

/// How many times opening a runs directory tries again, 20 ms apart, when
/// its lock is taken: once a lister is done with it, it is free.
const LOCK_ATTEMPTS: u32 = 5;

/// What is written of a run whose approved call is under way.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ApprovedRun {
    pub(super) format: u32,
    pub(super) run: RunId,
    pub(super) requested_by: Option<String>,
    /// Who asked for the call: the main agent or a skill.
    pub(super) caller: Caller,
    /// The confirmation that was approved.
    pub(super) approved: KeptConfirmation,
    /// Who approved it, when the answer said.
    pub(super) by: Option<String>,
    pub(super) at: SystemTime,
    /// What the call returned, once it did: written then, and kept until
    /// the run ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) returned: Option<Returned>,
    /// The distributed trace the run is part of, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) trace: Option<TraceContext>,
}

/// What an approved call returned.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Returned {
    /// Its result.
    Result(Value),
    /// Why it failed.
    Error(String),
}

impl Returned {
    pub(super) fn of(result: &Result<Value, ToolError>) -> Self {
        match result {
            Ok(value) => Self::Result(value.clone()),
            Err(error) => Self::Error(error.to_string()),
        }
    }
}

impl ApprovedRun {
    /// What to write once `approved`, of `run`, is approved (by `by`),
    /// while the call runs.
    pub(super) fn of(run: &RunContext, approved: &PendingConfirmation, by: Option<&str>) -> Self {
        Self {
            format: FORMAT,
            run: run.id.clone(),
            requested_by: run.requested_by.clone(),
            caller: approved.caller.clone(),
            approved: KeptConfirmation::of(approved),
            by: by.map(str::to_owned),
            at: SystemTime::now(),
            returned: None,
            trace: run.trace.clone(),
        }
    }
}

/// What a file of the directory holds.
pub(super) enum Stored {
    /// A run waiting for a person.
    Waiting(KeptRun),
    /// A run whose approved call was under way.
    Approved(ApprovedRun),
}

impl Stored {
    fn run(&self) -> &RunId {
        match self {
            Self::Waiting(kept) => &kept.run,
            Self::Approved(approved) => &approved.run,
        }
    }

    fn format(&self) -> u32 {
        match self {
            Self::Waiting(kept) => kept.format,
            Self::Approved(approved) => approved.format,
        }
    }
}

/// What is written of a kept run.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct KeptRun {
    pub(super) format: u32,
    pub(super) run: RunId,
    pub(super) requested_by: Option<String>,
    /// The patterns of the run's [`SkillScope`](crate::scope::SkillScope);
    /// absent: every skill.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) skills: Option<Vec<String>>,
    /// The patterns of the run's [`ToolScope`](crate::scope::ToolScope);
    /// absent: every tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) tools: Option<Vec<String>>,
    pub(super) kept: Kept,
    pub(super) waiting: KeptConfirmation,
    /// When the run started; absent in the files of older hosts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) started: Option<SystemTime>,
    /// The distributed trace it is part of, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) trace: Option<TraceContext>,
}

/// What a kept run runs again from.
#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub(super) enum Kept {
    /// A direct skill run: its steps run again from the journal.
    Skill {
        /// The skill, with the digest of the component whose steps made
        /// the calls: other code would not make the same ones.
        skill: SkillVersion,
        input: Value,
        journal: Box<Journal>,
    },
    /// A conversation: it runs again from its messages, each thing it was
    /// told answered from `told` instead of asked again.
    Chat {
        messages: Vec<Message>,
        told: Vec<Told>,
    },
}

/// One thing a kept conversation was told, in the order it was told.
#[derive(Clone, Serialize, Deserialize)]
#[serde(tag = "what", rename_all = "snake_case", deny_unknown_fields)]
pub(super) enum Told {
    /// The model's answer to one LLM call.
    Llm { response: ChatResponse },
    /// What a tool call returned.
    Tool {
        tool: String,
        arguments: Value,
        result: Result<Value, ToolError>,
    },
    /// How a person answered a confirmation (or that it expired).
    Answer {
        tool: String,
        arguments: Value,
        answer: KeptAnswer,
    },
    /// The WASI randomness and clocks of one skill invocation's steps.
    Wasi { sources: WasiSources },
}

/// [`Resolution`] as a kept run records it: a run that goes on was not
/// withdrawn.
#[derive(Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub(super) enum KeptAnswer {
    Approved { by: Option<String> },
    Declined(Declined),
}

impl KeptAnswer {
    pub(super) fn of(resolution: &Resolution) -> Option<Self> {
        match resolution {
            Resolution::Approved { by } => Some(Self::Approved { by: by.clone() }),
            Resolution::Declined(why) => Some(Self::Declined(why.clone())),
            Resolution::Withdrawn => None,
        }
    }

    pub(super) fn resolution(self) -> Resolution {
        match self {
            Self::Approved { by } => Resolution::Approved { by },
            Self::Declined(why) => Resolution::Declined(why),
        }
    }
}

/// What a kept conversation was told so far, and how far a resumed one has
/// replayed it.
#[derive(Default)]
pub(super) struct Tape {
    told: Vec<Told>,
    replayed: usize,
    /// The confirmation the kept run waited on, until the resumed run
    /// reaches it again (its replay ends there).
    again: Option<KeptConfirmation>,
    /// Why the resumed run stopped replaying before it got there: it did
    /// something else than before, and ends.
    diverged: Option<String>,
}

impl Tape {
    /// A resumed run's: `told` to replay, then `again` to reopen.
    pub(super) fn resumed(told: Vec<Told>, again: KeptConfirmation) -> Self {
        Self {
            told,
            replayed: 0,
            again: Some(again),
            diverged: None,
        }
    }

    /// Ends the replay: the run did something else than before (`why`).
    pub(super) fn diverge(&mut self, why: String) {
        self.again = None;
        self.diverged.get_or_insert(why);
    }

    /// Why the run stopped replaying, if it diverged.
    pub(super) fn divergence(&self) -> Option<&str> {
        self.diverged.as_deref()
    }

    /// Whether the run is replaying what it was told before its host
    /// stopped: until it reaches the confirmation it waited on.
    pub(super) fn replaying(&self) -> bool {
        self.again.is_some()
    }

    /// The next thing told, while replaying.
    pub(super) fn next(&mut self) -> Option<Told> {
        let told = self.told.get(self.replayed)?.clone();
        self.replayed += 1;
        Some(told)
    }

    /// Records what the run was told, past the replay.
    pub(super) fn record(&mut self, told: Told) {
        self.told.push(told);
        self.replayed = self.told.len();
    }

    /// The kept confirmation, once everything before it is replayed and the
    /// run asks for `tool` with `arguments` again: the replay ends.
    pub(super) fn take_again(&mut self, tool: &str, arguments: &Value) -> Option<KeptConfirmation> {
        let again = self.again.as_ref()?;
        (self.replayed == self.told.len() && again.tool == tool && again.arguments == *arguments)
            .then(|| self.again.take())
            .flatten()
    }

    pub(super) fn told(&self) -> &[Told] {
        &self.told
    }
}

/// The confirmation a kept run waits on.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct KeptConfirmation {
    pub(super) id: ConfirmationId,
    pub(super) tool: String,
    pub(super) arguments: Value,
    pub(super) expires_at: SystemTime,
}

impl KeptConfirmation {
    pub(super) fn of(pending: &PendingConfirmation) -> Self {
        Self {
            id: pending.id.clone(),
            tool: pending.tool.clone(),
            arguments: pending.arguments.clone(),
            expires_at: pending.expires_at,
        }
    }

    /// The confirmation as a host shows it: for `run`, asked by `caller`,
    /// approved by whom `policy` says now.
    pub(super) fn shown(
        &self,
        run: RunId,
        requested_by: Option<String>,
        caller: Caller,
        policy: &ConfirmationPolicy,
    ) -> PendingConfirmation {
        PendingConfirmation {
            id: self.id.clone(),
            run,
            requested_by,
            caller,
            tool: self.tool.clone(),
            summary: summarize(&self.tool, &self.arguments),
            arguments: self.arguments.clone(),
            separate_approver: policy.separate_approver,
            approvers: policy.approvers_of(&self.tool).cloned(),
            expires_at: self.expires_at,
        }
    }
}

/// A kept run, resumed ([`Agent::resume_kept_runs`](super::Agent::resume_kept_runs)): waiting again on its
/// confirmation, or ended at once when it could not go on (its skill
/// changed meanwhile), or interrupted: not resumed, only told.
pub enum ResumedRun {
    /// A direct skill run.
    Skill {
        /// The skill the run invoked, as it was then.
        skill: SkillVersion,
        /// Whom the run acts for ([`RunOptions::on_behalf_of`](super::RunOptions::on_behalf_of)).
        requested_by: Option<String>,
        run: RunHandle<SkillOutput>,
    },
    /// A conversation's run.
    Chat {
        requested_by: Option<String>,
        /// When the conversation's run started, before the restart (an
        /// older host's file does not say: then, now).
        started: SystemTime,
        run: RunHandle<RunOutput>,
    },
    /// A run whose approved call was under way when its process ended.
    Interrupted(InterruptedRun),
}

/// A run whose approved call was under way when the process that ran it
/// ended, or had returned and the run had not ended yet. It is not resumed,
/// since the call may have run (or did); its requester is to be told (the
/// gateway records it as failed, `run_interrupted`). Serialized, it is the
/// approval as a client acts on it: `tool`, `confirmation`, `approved_by`,
/// `approved_at` (an HTTP date) and `returned` (null when the call may not
/// have returned).
#[derive(Debug, Clone, Serialize)]
pub struct InterruptedRun {
    #[serde(skip)]
    pub run: RunId,
    /// Whom the run acted for.
    #[serde(skip)]
    pub requested_by: Option<String>,
    /// The approved call's tool.
    pub tool: String,
    pub confirmation: ConfirmationId,
    /// Who approved it, when the answer said.
    pub approved_by: Option<String>,
    #[serde(serialize_with = "super::confirm::http_date")]
    pub approved_at: SystemTime,
    /// What the call returned, when it did before the host stopped.
    pub returned: Option<Returned>,
}

impl InterruptedRun {
    /// What happened, without what the call returned (its result, or its
    /// error's message): for logs, which carry neither for a write.
    pub fn without_result(&self) -> impl std::fmt::Display + '_ {
        Telling {
            run: self,
            with_result: false,
        }
    }
}

impl std::fmt::Display for InterruptedRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        Telling {
            run: self,
            with_result: true,
        }
        .fmt(f)
    }
}

/// How an interrupted run is told, with or without the call's result.
struct Telling<'a> {
    run: &'a InterruptedRun,
    with_result: bool,
}

impl std::fmt::Display for Telling<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let InterruptedRun {
            tool,
            confirmation,
            returned,
            ..
        } = self.run;
        write!(
            f,
            "the host stopped after `{tool}` was approved (confirmation {confirmation}) "
        )?;
        match returned {
            None => f.write_str(
                "and before the call returned: it may or may not have run; check before asking \
                 for it again",
            ),
            Some(returned) => {
                match returned {
                    Returned::Result(result) if self.with_result => {
                        let result = result.to_string();
                        write!(
                            f,
                            "and the call ran, returning {}",
                            clip(&result, SHOWN_RESULT_CHARS)
                        )?;
                    }
                    Returned::Error(error) if self.with_result => {
                        write!(f, "and the call failed: {error}")?;
                    }
                    Returned::Result(_) => f.write_str("and the call ran")?,
                    Returned::Error(_) => f.write_str("and the call failed")?,
                }
                f.write_str("; the run stopped there, before its end")
            }
        }
    }
}

impl std::error::Error for InterruptedRun {}

impl From<ApprovedRun> for InterruptedRun {
    fn from(approved: ApprovedRun) -> Self {
        Self {
            run: approved.run,
            requested_by: approved.requested_by,
            tool: approved.approved.tool,
            confirmation: approved.approved.id,
            approved_by: approved.by,
            approved_at: approved.at,
            returned: approved.returned,
        }
    }
}

impl ResumedRun {
    /// The run's id.
    pub fn id(&self) -> &RunId {
        match self {
            Self::Skill { run, .. } => &run.id,
            Self::Chat { run, .. } => &run.id,
            Self::Interrupted(interrupted) => &interrupted.run,
        }
    }

    /// Waits until the run has replayed what it was told and waits again on
    /// its confirmation (open from then on), or has ended.
    pub async fn settle(&self) {
        match self {
            Self::Skill { run, .. } => run.settle().await,
            Self::Chat { run, .. } => run.settle().await,
            Self::Interrupted(_) => {}
        }
    }
}

/// A file of the directory that holds no run this host can resume, and why.
#[derive(Debug)]
pub struct UnreadableRun {
    pub path: PathBuf,
    pub reason: String,
}

impl RunStore {
    /// Opens `dir`, creating it (for this user alone) when missing. Refused
    /// when another user could read or write it.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Self, RunStoreError> {
        let dir = dir.into();
        let lock = Self::lock(&dir).map_err(|cause| RunStoreError {
            dir: dir.clone(),
            cause,
        })?;
        Ok(Self { dir, _lock: lock })
    }

    /// Whether [`RunStore::open`] would take `dir`, short of its lock (a
    /// host may hold it), creating nothing: a directory missing is created
    /// then. For a check before a start.
    pub fn check(dir: &Path) -> Result<(), RunStoreError> {
        if !dir.exists() {
            return Ok(());
        }
        crate::private_dir::check(dir, PRIVATE_MODE_REFUSED, KEPT_RUNS_ARE_PRIVATE).map_err(
            |cause| RunStoreError {
                dir: dir.to_owned(),
                cause,
            },
        )
    }

    fn lock(dir: &Path) -> anyhow::Result<std::fs::File> {
        crate::private_dir::ensure(dir, PRIVATE_MODE_REFUSED, KEPT_RUNS_ARE_PRIVATE)?;
        let lock = std::fs::File::create(dir.join(LOCK_FILE))?;
        // A lister (`skillhost runs`) holds the lock shared for an instant
        // to learn whether a host is there: wait that out before refusing.
        let mut attempts = 0;
        loop {
            match lock.try_lock() {
                Ok(()) => return Ok(lock),
                Err(std::fs::TryLockError::WouldBlock) if attempts < LOCK_ATTEMPTS => {
                    attempts += 1;
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(anyhow::anyhow!(
                        "another host keeps its runs there; give each its own directory"
                    ));
                }
                Err(std::fs::TryLockError::Error(error)) => return Err(error.into()),
            }
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path_of(&self, run: &RunId) -> PathBuf {
        path_of(&self.dir, run)
    }

    /// Writes `record` in place of what was kept of `run`: whole or not at
    /// all, and on disk when this returns.
    pub(super) fn save(&self, run: &RunId, record: &impl Serialize) -> std::io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = self.path_of(run);
        let temporary = path.with_extension("json.tmp");
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temporary)?;
        file.write_all(&serde_json::to_vec(record)?)?;
        file.sync_all()?;
        std::fs::rename(&temporary, &path)?;
        // The rename itself is on disk once the directory is synced.
        std::fs::File::open(&self.dir)?.sync_all()
    }

    /// Whether `run` is kept on disk now.
    pub fn holds(&self, run: &RunId) -> bool {
        self.path_of(run).exists()
    }

    /// Takes what was kept of `run` off disk, if anything was.
    pub(super) fn remove(&self, run: &RunId) {
        match std::fs::remove_file(self.path_of(run)) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
                tracing::warn!(%run, %error, dir = %self.dir.display(),
                    "a kept run could not be taken off disk: it would be resumed at the next start");
            }
            _ => {}
        }
    }

    /// Every run kept in the directory, and the files that hold none this
    /// host can resume (left where they are).
    pub(super) fn load_all(&self) -> (Vec<Stored>, Vec<UnreadableRun>) {
        read_all(&self.dir)
    }
}

/// The file that keeps `run` in `dir`.
fn path_of(dir: &Path, run: &RunId) -> PathBuf {
    dir.join(format!("{run}.json"))
}

/// Every run kept in `dir`, and the files that hold none.
fn read_all(dir: &Path) -> (Vec<Stored>, Vec<UnreadableRun>) {
    let mut kept = Vec::new();
    let mut unreadable = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) => {
            unreadable.push(UnreadableRun {
                path: dir.to_owned(),
                reason: error.to_string(),
            });
            return (kept, unreadable);
        }
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    paths.sort();
    for path in paths {
        match read(dir, &path) {
            Ok(run) => kept.push(run),
            Err(reason) => unreadable.push(UnreadableRun { path, reason }),
        }
    }
    (kept, unreadable)
}

/// What the file at `path`, in `dir`, keeps.
fn read(dir: &Path, path: &Path) -> Result<Stored, String> {
    let bytes = std::fs::read(path).map_err(|error| error.to_string())?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|error| error.to_string())?;
    let stored = if value.get("approved").is_some() {
        serde_json::from_value(value).map(Stored::Approved)
    } else {
        serde_json::from_value(value).map(Stored::Waiting)
    }
    .map_err(|error| error.to_string())?;
    if stored.format() != FORMAT {
        return Err(format!(
            "format {} (this host reads format {FORMAT})",
            stored.format()
        ));
    }
    if path_of(dir, stored.run()) != path {
        return Err(format!(
            "it holds run `{}`, which is not the run its name says",
            crate::text::escaped(stored.run().as_str(), 80)
        ));
    }
    Ok(stored)
}

/// A run kept in a runs directory, as a person reads it
/// ([`list_kept_runs`]).
#[derive(Debug, Clone, Serialize)]
pub struct KeptRunInfo {
    pub run: RunId,
    /// Whom the run acts for.
    pub requested_by: Option<String>,
    /// `waiting`: its confirmation pending (again at the next start, when
    /// no host holds the directory); `running`: approved, its call under
    /// way or the run going on past it, in the host that holds the
    /// directory; `interrupted`: the same when no host holds it, the host
    /// that ran it having stopped — the next start tells of it rather
    /// than run it again.
    pub state: &'static str,
    /// `skill` (a direct invocation) or `chat`; none for an approved run
    /// (its record keeps only the approval).
    pub kind: Option<&'static str>,
    /// The skill a direct invocation runs.
    pub skill: Option<SkillVersion>,
    /// The confirmation waiting, or approved.
    pub confirmation: ConfirmationId,
    /// Its call, as the approver sees it (`applyRefund: orderId '88231'`).
    pub summary: String,
    /// When the confirmation expires (an HTTP date).
    pub expires_at: String,
    /// Who approved it, when the answer said (approved runs).
    pub approved_by: Option<String>,
    /// When it was approved (approved runs; an HTTP date).
    pub approved_at: Option<String>,
    /// What the approved call returned, when it did (approved runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub returned: Option<Returned>,
    /// The id of the distributed trace the run is part of, if any.
    pub trace_id: Option<String>,
}

impl KeptRunInfo {
    /// What `stored` says, its approved call `running` when a host holds
    /// the directory and `interrupted` when none does.
    fn of_stored(stored: Stored, host_there: bool) -> Self {
        match stored {
            Stored::Waiting(kept) => {
                let (kind, skill) = match kept.kept {
                    Kept::Skill { skill, .. } => ("skill", Some(skill)),
                    Kept::Chat { .. } => ("chat", None),
                };
                Self {
                    kind: Some(kind),
                    skill,
                    ..Self::of(
                        kept.run,
                        kept.requested_by,
                        "waiting",
                        kept.waiting,
                        kept.trace,
                    )
                }
            }
            Stored::Approved(approved) => Self {
                approved_by: approved.by,
                approved_at: Some(httpdate::fmt_http_date(approved.at)),
                returned: approved.returned,
                ..Self::of(
                    approved.run,
                    approved.requested_by,
                    if host_there { "running" } else { "interrupted" },
                    approved.approved,
                    approved.trace,
                )
            },
        }
    }

    /// `run`, in `state`, on `call`, in `trace`: what every kept run says.
    fn of(
        run: RunId,
        requested_by: Option<String>,
        state: &'static str,
        call: KeptConfirmation,
        trace: Option<TraceContext>,
    ) -> Self {
        Self {
            run,
            requested_by,
            state,
            kind: None,
            skill: None,
            summary: summarize(&call.tool, &call.arguments),
            confirmation: call.id,
            expires_at: httpdate::fmt_http_date(call.expires_at),
            approved_by: None,
            approved_at: None,
            returned: None,
            trace_id: trace.map(|trace| trace.trace_id().to_owned()),
        }
    }
}

/// The runs kept in `dir` (an [`AgentBuilder::keep_runs`] store's, `serve
/// --runs-dir`) and the files that hold none, read without taking the
/// directory: also while a host keeps its runs there.
///
/// [`AgentBuilder::keep_runs`]: super::AgentBuilder::keep_runs
pub fn list_kept_runs(dir: &Path) -> (Vec<KeptRunInfo>, Vec<UnreadableRun>) {
    let host_there = held_by_a_host(dir);
    let (stored, unreadable) = read_all(dir);
    (
        stored
            .into_iter()
            .map(|stored| KeptRunInfo::of_stored(stored, host_there))
            .collect(),
        unreadable,
    )
}

/// Whether a host keeps its runs in `dir` now: it holds the directory's
/// lock for as long as it lives. Asked by taking the lock shared, and
/// letting it go at once.
fn held_by_a_host(dir: &Path) -> bool {
    let Ok(lock) = std::fs::File::open(dir.join(LOCK_FILE)) else {
        return false;
    };
    matches!(
        lock.try_lock_shared(),
        Err(std::fs::TryLockError::WouldBlock)
    )
}

/// What a run keeps on disk while it waits for a person, and where.
pub(super) struct Keeping {
    pub(super) store: Arc<RunStore>,
    pub(super) what: KeptWhat,
    /// The approval on disk, from when it is given until the run ends or
    /// waits again: rewritten once its call returns.
    approval: Mutex<Option<ApprovedRun>>,
    /// Whether the run's file is on disk: a run that never waited ends
    /// without touching the directory.
    on_disk: AtomicBool,
    /// When the run started, before any restart.
    started: SystemTime,
}

/// What a kept run is made of besides its journal or tape.
pub(super) enum KeptWhat {
    /// A direct skill run: its skill and input; the journal is the steps'.
    Skill { skill: SkillVersion, input: Value },
    /// A conversation: its messages, and everything it was told.
    Chat {
        messages: Vec<Message>,
        tape: Mutex<Tape>,
    },
}

impl Keeping {
    /// Keeps a run that started now in `store`.
    pub(super) fn new(store: Arc<RunStore>, what: KeptWhat) -> Self {
        Self::resumed(store, what, false, SystemTime::now())
    }

    /// Keeps a run that `started` in `store`; `on_disk` when its file is
    /// there already (a resumed run's).
    pub(super) fn resumed(
        store: Arc<RunStore>,
        what: KeptWhat,
        on_disk: bool,
        started: SystemTime,
    ) -> Self {
        Self {
            store,
            what,
            approval: Mutex::new(None),
            on_disk: AtomicBool::new(on_disk),
            started,
        }
    }

    /// Writes `waiting` as the run's file.
    pub(super) fn save(&self, waiting: &KeptRun) -> std::io::Result<()> {
        self.store.save(&waiting.run, waiting)?;
        self.on_disk.store(true, Ordering::Release);
        self.take_approval();
        Ok(())
    }

    /// Writes `approval` as the run's file, and holds it to be written
    /// again once its call returns.
    pub(super) fn save_approval(&self, approval: ApprovedRun) -> std::io::Result<()> {
        self.store.save(&approval.run, &approval)?;
        self.on_disk.store(true, Ordering::Release);
        *self.approval.lock().unwrap_or_else(PoisonError::into_inner) = Some(approval);
        Ok(())
    }

    /// The approval on disk, taken to be written again.
    pub(super) fn take_approval(&self) -> Option<ApprovedRun> {
        self.approval
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// Takes the run's file off disk, if it is there.
    pub(super) fn remove(&self, run: &RunId) {
        self.take_approval();
        if self.on_disk.swap(false, Ordering::AcqRel) {
            self.store.remove(run);
        }
    }

    /// What to write while the run waits on `waiting`: a skill run with its
    /// steps' `journal` (`None`: the wait is not its steps', so nothing is
    /// kept), a conversation with its tape.
    pub(super) fn kept_run(
        &self,
        run: &RunContext,
        journal: Option<&Journal>,
        waiting: KeptConfirmation,
    ) -> Option<KeptRun> {
        let kept = match &self.what {
            KeptWhat::Skill { skill, input } => Kept::Skill {
                skill: skill.clone(),
                input: input.clone(),
                journal: Box::new(journal?.clone()),
            },
            KeptWhat::Chat { messages, tape } => Kept::Chat {
                messages: messages.clone(),
                told: lock(tape).told().to_vec(),
            },
        };
        Some(KeptRun {
            format: FORMAT,
            run: run.id.clone(),
            requested_by: run.requested_by.clone(),
            skills: run.skills.patterns().map(<[String]>::to_vec),
            tools: run.tools.patterns().map(<[String]>::to_vec),
            kept,
            waiting,
            started: Some(self.started),
            trace: run.trace.clone(),
        })
    }

    /// The conversation's tape, for a kept conversation.
    pub(super) fn tape(&self) -> Option<MutexGuard<'_, Tape>> {
        match &self.what {
            KeptWhat::Chat { tape, .. } => Some(lock(tape)),
            KeptWhat::Skill { .. } => None,
        }
    }
}

fn lock(tape: &Mutex<Tape>) -> MutexGuard<'_, Tape> {
    tape.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn interrupted(returned: Option<Returned>) -> InterruptedRun {
        InterruptedRun {
            run: RunId::random(),
            requested_by: None,
            tool: "applyRefund".into(),
            confirmation: ConfirmationId::random(),
            approved_by: Some("supervisor".into()),
            approved_at: SystemTime::now(),
            returned,
        }
    }

    #[test]
    fn an_interrupted_run_is_told_with_what_its_call_returned_but_logged_without_it() {
        let ran = interrupted(Some(Returned::Result(json!({"refundId": "RF20260629001"}))));
        let told = ran.to_string();
        assert!(
            told.contains("the call ran, returning {\"refundId\":\"RF20260629001\"}"),
            "{told}"
        );
        let logged = ran.without_result().to_string();
        assert!(
            logged.contains("and the call ran; the run stopped there"),
            "{logged}"
        );
        assert!(!logged.contains("RF2026"), "{logged}");

        let failed = interrupted(Some(Returned::Error("order 88231 is not delivered".into())));
        assert!(failed.to_string().contains("the call failed: order 88231"));
        let logged = failed.without_result().to_string();
        assert!(
            logged.contains("and the call failed;") && !logged.contains("88231"),
            "{logged}"
        );

        let unknown = interrupted(None);
        assert_eq!(unknown.to_string(), unknown.without_result().to_string());
        assert!(unknown.to_string().contains("it may or may not have run"));
    }
}
