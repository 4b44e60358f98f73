//! The set of loaded skills: an immutable snapshot behind an atomic pointer.
//!
//! Readers take the current snapshot (`Arc`) and keep it for as long as they
//! need; writers build a new snapshot and swap it in. An invocation that has
//! started keeps the `SkillComponent` it started with, so replacing a skill
//! never disturbs calls in flight. A file that fails to load never replaces
//! the version that file last loaded successfully.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use serde::Serialize;
use tokio::sync::{Mutex, broadcast};

use super::SkillName;
use super::signature::{Fingerprint, SignaturePolicy, Verification};
use crate::runtime::{Runtime, SkillComponent};
use crate::tools::ToolRegistry;

/// A skill as loaded from a file.
#[derive(Clone)]
pub struct LoadedSkill {
    pub component: SkillComponent,
    pub path: PathBuf,
    /// The trusted key that signed the file; `None` only when loaded under
    /// [`SignaturePolicy::AllowUnsigned`].
    pub signer: Option<Fingerprint>,
}

/// A file in the skills directory whose latest content did not load, and
/// why. The file's previous good version, if any, is still serving.
#[derive(Debug, Clone, Serialize)]
pub struct LoadFailure {
    pub path: PathBuf,
    pub reason: String,
}

/// One consistent view of the loaded skills.
#[derive(Default, Clone)]
pub struct SkillSnapshot {
    skills: BTreeMap<SkillName, LoadedSkill>,
    /// Which skill each file provides.
    by_path: BTreeMap<PathBuf, SkillName>,
    failures: BTreeMap<PathBuf, LoadFailure>,
}

impl SkillSnapshot {
    pub fn get(&self, name: &str) -> Option<&LoadedSkill> {
        self.skills.get(name)
    }

    pub fn skills(&self) -> impl Iterator<Item = &LoadedSkill> {
        self.skills.values()
    }

    pub fn failures(&self) -> impl Iterator<Item = &LoadFailure> {
        self.failures.values()
    }

    /// The latest load failure of the file `path`, if its latest content failed.
    pub fn failure_for(&self, path: &Path) -> Option<&LoadFailure> {
        self.failures.get(path)
    }

    pub fn len(&self) -> usize {
        self.skills.len()
    }

    pub fn is_empty(&self) -> bool {
        self.skills.is_empty()
    }

    fn skill_at(&self, path: &Path) -> Option<&LoadedSkill> {
        self.by_path
            .get(path)
            .and_then(|name| self.skills.get(name))
    }

    /// Puts `skill` in place of whatever its file provided before.
    fn install(&mut self, skill: LoadedSkill) -> Result<(), String> {
        let name = skill.component.name().clone();
        if let Some(holder) = self
            .skills
            .get(&name)
            .filter(|held| held.path != skill.path)
        {
            return Err(format!(
                "skill name `{name}` is already taken by {}",
                holder.path.display()
            ));
        }
        self.remove(&skill.path);
        self.failures.remove(&skill.path);
        self.by_path.insert(skill.path.clone(), name.clone());
        self.skills.insert(name, skill);
        Ok(())
    }

    fn remove(&mut self, path: &Path) -> Option<LoadedSkill> {
        let name = self.by_path.remove(path)?;
        self.skills.remove(&name)
    }

    fn fail(&mut self, path: &Path, reason: String) {
        let path = path.to_owned();
        self.failures
            .insert(path.clone(), LoadFailure { path, reason });
    }
}

/// Name, version and digest of one loaded version of a skill.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkillVersion {
    pub name: SkillName,
    pub version: String,
    pub digest: String,
}

impl SkillVersion {
    fn of(component: &SkillComponent) -> Self {
        Self {
            name: component.name().clone(),
            version: component.manifest().version.to_string(),
            digest: component.digest().to_owned(),
        }
    }
}

/// What a change to one file did to the registry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum ReloadOutcome {
    /// A skill was added or replaced by the file's new content.
    Loaded,
    /// The file's content is what is already loaded; nothing changed.
    Unchanged,
    /// The file was deleted and its skill unloaded.
    Unloaded,
    /// The new content was refused; `old`, if any, keeps serving.
    Rejected { reason: String },
}

/// One change to the registry, for subscribers of [`SkillRegistry::subscribe`].
#[derive(Debug, Clone, Serialize)]
pub struct ReloadEvent {
    pub path: PathBuf,
    /// The version serving from this file before the change.
    pub old: Option<SkillVersion>,
    /// The version serving from this file after the change.
    pub new: Option<SkillVersion>,
    #[serde(flatten)]
    pub outcome: ReloadOutcome,
}

/// Why the skills directory could not be read at all. Problems with single
/// files are [`LoadFailure`]s in the snapshot instead.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("cannot read skills directory {}: {source}", dir.display())]
    ReadDir {
        dir: PathBuf,
        source: std::io::Error,
    },
}

/// Events kept for a subscriber that falls behind; older ones are dropped
/// and the subscriber is told how many it missed.
const EVENT_BUFFER: usize = 256;

/// Turns a file's bytes into a loaded skill: signature first, then compile,
/// link and manifest checks.
struct Loader {
    runtime: Runtime,
    tools: Arc<ToolRegistry>,
    policy: SignaturePolicy,
}

impl Loader {
    async fn load(&self, path: &Path, bytes: Vec<u8>) -> Result<LoadedSkill, String> {
        // Verification reads only the bytes, so it happens before any of
        // them reach the compiler.
        let signer = match self.policy.check(path, &bytes) {
            Ok(Verification::Verified(verified)) => Some(verified.signer),
            Ok(Verification::Unverified) => None,
            Err(error) => return Err(format!("signature refused: {error}")),
        };
        let component = SkillComponent::load(&self.runtime, bytes, &self.tools)
            .await
            .map_err(|e| e.to_string())?;
        Ok(LoadedSkill {
            component,
            path: path.to_owned(),
            signer,
        })
    }

    async fn load_file(&self, path: &Path) -> Result<LoadedSkill, String> {
        let bytes = tokio::fs::read(path)
            .await
            .map_err(|e| format!("cannot read file: {e}"))?;
        self.load(path, bytes).await
    }
}

/// The loaded skills of one directory.
pub struct SkillRegistry {
    loader: Arc<Loader>,
    current: ArcSwap<SkillSnapshot>,
    /// Serializes writers so that two reloads never build on the same base.
    writer: Mutex<()>,
    events: broadcast::Sender<ReloadEvent>,
}

impl SkillRegistry {
    /// An empty registry whose skills must pass `policy`.
    pub fn new(runtime: Runtime, tools: Arc<ToolRegistry>, policy: SignaturePolicy) -> Self {
        Self {
            loader: Arc::new(Loader {
                runtime,
                tools,
                policy,
            }),
            current: ArcSwap::from_pointee(SkillSnapshot::default()),
            writer: Mutex::new(()),
            events: broadcast::channel(EVENT_BUFFER).0,
        }
    }

    /// Loads every `*.wasm` in `dir`, compiling in parallel. Files that fail
    /// are reported in the snapshot's failures; the others load.
    pub async fn load_dir(
        runtime: Runtime,
        tools: Arc<ToolRegistry>,
        policy: SignaturePolicy,
        dir: &Path,
    ) -> Result<Self, RegistryError> {
        let registry = Self::new(runtime, tools, policy);
        let paths = wasm_files(dir).map_err(|source| RegistryError::ReadDir {
            dir: dir.to_owned(),
            source,
        })?;
        let mut tasks = tokio::task::JoinSet::new();
        for path in paths {
            let loader = registry.loader.clone();
            tasks.spawn(async move {
                let result = loader.load_file(&path).await;
                (path, result)
            });
        }
        let mut loaded = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            loaded.push(joined.expect("a skill load task panicked"));
        }
        // Sorted so that which of two same-named files wins is stable.
        loaded.sort_by(|a, b| a.0.cmp(&b.0));
        let mut snapshot = SkillSnapshot::default();
        for (path, result) in loaded {
            if let Err(reason) = result.and_then(|skill| snapshot.install(skill)) {
                tracing::warn!(path = %path.display(), %reason, "skill not loaded");
                snapshot.fail(&path, reason);
            }
        }
        registry.current.store(Arc::new(snapshot));
        Ok(registry)
    }

    /// The current snapshot. Hold it for the length of one request.
    pub fn snapshot(&self) -> Arc<SkillSnapshot> {
        self.current.load_full()
    }

    pub fn get(&self, name: &str) -> Option<SkillComponent> {
        self.current
            .load()
            .get(name)
            .map(|skill| skill.component.clone())
    }

    pub fn runtime(&self) -> &Runtime {
        &self.loader.runtime
    }

    pub fn tools(&self) -> &Arc<ToolRegistry> {
        &self.loader.tools
    }

    /// Every change from now on, as it happens.
    pub fn subscribe(&self) -> broadcast::Receiver<ReloadEvent> {
        self.events.subscribe()
    }

    /// Brings the registry in line with the file at `path`: loads it when it
    /// exists, unloads its skill when it does not.
    pub async fn sync_path(&self, path: &Path) -> ReloadEvent {
        let bytes = match tokio::fs::read(path).await {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return self.unload(path).await;
            }
            Err(error) => {
                return self
                    .reject(path, format!("cannot read file: {error}"))
                    .await;
            }
        };
        let digest = crate::runtime::digest_of(&bytes);
        let current = self.snapshot();
        if let Some(skill) = current
            .skill_at(path)
            .filter(|skill| skill.component.digest() == digest)
        {
            let version = Some(SkillVersion::of(&skill.component));
            return self.emit(ReloadEvent {
                path: path.to_owned(),
                old: version.clone(),
                new: version,
                outcome: ReloadOutcome::Unchanged,
            });
        }
        // Verify and compile outside the writer lock: a slow compile must
        // not hold up changes to other files.
        match self.loader.load(path, bytes).await {
            Ok(skill) => self.install(skill).await,
            Err(reason) => self.reject(path, reason).await,
        }
    }

    async fn install(&self, skill: LoadedSkill) -> ReloadEvent {
        let _writer = self.writer.lock().await;
        let path = skill.path.clone();
        let mut next = SkillSnapshot::clone(&self.current.load());
        let old = next
            .skill_at(&path)
            .map(|held| SkillVersion::of(&held.component));
        let new = SkillVersion::of(&skill.component);
        let outcome = match next.install(skill) {
            Ok(()) => ReloadOutcome::Loaded,
            Err(reason) => {
                next.fail(&path, reason.clone());
                ReloadOutcome::Rejected { reason }
            }
        };
        let new = if outcome == ReloadOutcome::Loaded {
            Some(new)
        } else {
            old.clone()
        };
        self.current.store(Arc::new(next));
        self.emit(ReloadEvent {
            path,
            old,
            new,
            outcome,
        })
    }

    async fn reject(&self, path: &Path, reason: String) -> ReloadEvent {
        let _writer = self.writer.lock().await;
        let mut next = SkillSnapshot::clone(&self.current.load());
        let old = next
            .skill_at(path)
            .map(|skill| SkillVersion::of(&skill.component));
        next.fail(path, reason.clone());
        self.current.store(Arc::new(next));
        self.emit(ReloadEvent {
            path: path.to_owned(),
            new: old.clone(),
            old,
            outcome: ReloadOutcome::Rejected { reason },
        })
    }

    async fn unload(&self, path: &Path) -> ReloadEvent {
        let _writer = self.writer.lock().await;
        let mut next = SkillSnapshot::clone(&self.current.load());
        let old = next
            .remove(path)
            .map(|skill| SkillVersion::of(&skill.component));
        next.failures.remove(path);
        self.current.store(Arc::new(next));
        self.emit(ReloadEvent {
            path: path.to_owned(),
            old,
            new: None,
            outcome: ReloadOutcome::Unloaded,
        })
    }

    fn emit(&self, event: ReloadEvent) -> ReloadEvent {
        match &event.outcome {
            ReloadOutcome::Rejected { reason } => {
                tracing::warn!(path = %event.path.display(), %reason, "skill update refused")
            }
            outcome => {
                tracing::info!(path = %event.path.display(), ?outcome, new = ?event.new, "skills reloaded")
            }
        }
        // No subscribers is fine: events are for whoever listens.
        let _ = self.events.send(event.clone());
        event
    }
}

/// Whether `path` names a skill component file (`*.wasm`).
pub fn is_skill_file(path: &Path) -> bool {
    path.extension().is_some_and(|ext| ext == "wasm")
}

fn wasm_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if is_skill_file(&path) && path.is_file() {
            paths.push(path);
        }
    }
    paths.sort();
    Ok(paths)
}
