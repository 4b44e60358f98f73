//! Runs kept on disk while they wait for a person, so that a restart does
//! not lose them: the approvals that pause and resume a serialized run of
//! the OpenAI Agents SDK, for a skill's deterministic steps.
//!
//! What is kept: a direct skill run ([`Agent::start_skill`]) whose steps
//! wait for an approval. Its state is then small and exact: the skill (name
//! and digest), its input, the calls answered so far, the call that waits
//! with its confirmation's id and expiry, and the WASI seed and clock
//! readings every attempt shares. A run on a model's path (a conversation,
//! a skill's sub-agent) is not kept: its state is a transcript mid-round.
//! Nor is a run whose tool context holds what its embedder attached
//! (forwarded headers, a tenant): that cannot be written down, and resumed
//! without it the run would act for nobody.
//!
//! The file is written (a temporary file, synced, then renamed) as the
//! confirmation opens, and removed once it is answered or expires, before
//! the approved call runs: a crash after that loses the run rather than ask
//! again for a write that may have run. A run aborted
//! ([`RunHandle::abort`](super::RunHandle::abort)) is removed too; one that
//! ends with the process stays, and the next host started on the directory
//! resumes it ([`Agent::resume_kept_runs`]): the same run id, its
//! confirmation pending again under the same id until the same expiry, and
//! once answered the steps run again from the journal, as they would have.
//! A kept skill that changed or went away meanwhile is not run again.
//!
//! [`Agent::start_skill`]: super::Agent::start_skill
//! [`Agent::resume_kept_runs`]: super::Agent::resume_kept_runs

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::confirm::{ConfirmationId, PendingConfirmation};
use super::ids::RunId;
use super::run::{Journal, RunHandle, SkillOutput};
use crate::skills::SkillVersion;

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

/// What is written of a kept run.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct KeptRun {
    pub(super) format: u32,
    pub(super) run: RunId,
    pub(super) requested_by: Option<String>,
    /// The skill, with the digest of the component whose steps made the
    /// calls: other code would not make the same ones.
    pub(super) skill: SkillVersion,
    pub(super) input: Value,
    pub(super) journal: Journal,
    pub(super) waiting: KeptConfirmation,
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
}

/// A kept run, resumed ([`Agent::resume_kept_runs`]): waiting again on its
/// confirmation, or ended at once when its skill changed meanwhile.
pub struct ResumedRun {
    /// The skill the run invoked, as it was then.
    pub skill: SkillVersion,
    /// Whom the run acts for ([`RunOptions::on_behalf_of`](super::RunOptions::on_behalf_of)).
    pub requested_by: Option<String>,
    pub run: RunHandle<SkillOutput>,
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

    fn lock(dir: &Path) -> anyhow::Result<std::fs::File> {
        crate::private_dir::ensure(dir, 0o077, "kept runs hold end users' inputs")?;
        let lock = std::fs::File::create(dir.join(".lock"))?;
        match lock.try_lock() {
            Ok(()) => Ok(lock),
            Err(std::fs::TryLockError::WouldBlock) => Err(anyhow::anyhow!(
                "another host keeps its runs there; give each its own directory"
            )),
            Err(std::fs::TryLockError::Error(error)) => Err(error.into()),
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path_of(&self, run: &RunId) -> PathBuf {
        self.dir.join(format!("{run}.json"))
    }

    /// Writes `kept` in place of what was kept of its run: whole or not at
    /// all, and on disk when this returns.
    pub(super) fn save(&self, kept: &KeptRun) -> std::io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = self.path_of(&kept.run);
        let temporary = path.with_extension("json.tmp");
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temporary)?;
        file.write_all(&serde_json::to_vec(kept)?)?;
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
    pub(super) fn load_all(&self) -> (Vec<KeptRun>, Vec<UnreadableRun>) {
        let mut kept = Vec::new();
        let mut unreadable = Vec::new();
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(error) => {
                unreadable.push(UnreadableRun {
                    path: self.dir.clone(),
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
            match self.read(&path) {
                Ok(run) => kept.push(run),
                Err(reason) => unreadable.push(UnreadableRun { path, reason }),
            }
        }
        (kept, unreadable)
    }

    fn read(&self, path: &Path) -> Result<KeptRun, String> {
        let bytes = std::fs::read(path).map_err(|error| error.to_string())?;
        let kept: KeptRun = serde_json::from_slice(&bytes).map_err(|error| error.to_string())?;
        if kept.format != FORMAT {
            return Err(format!(
                "format {} (this host reads format {FORMAT})",
                kept.format
            ));
        }
        if self.path_of(&kept.run) != path {
            return Err(format!(
                "it holds run `{}`, which is not the run its name says",
                crate::text::escaped(kept.run.as_str(), 80)
            ));
        }
        Ok(kept)
    }
}

impl KeptRun {
    pub(super) fn new(
        run: RunId,
        requested_by: Option<String>,
        steps: &KeptSteps,
        journal: Journal,
        waiting: KeptConfirmation,
    ) -> Self {
        Self {
            format: FORMAT,
            run,
            requested_by,
            skill: steps.skill.clone(),
            input: steps.input.clone(),
            journal,
            waiting,
        }
    }
}

/// What a run keeps of its skill while its steps wait for a person.
pub(super) struct KeptSteps {
    pub(super) store: std::sync::Arc<RunStore>,
    pub(super) skill: SkillVersion,
    pub(super) input: Value,
}
