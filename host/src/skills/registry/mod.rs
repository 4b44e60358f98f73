//! The set of loaded skills: an immutable snapshot behind an atomic pointer.
//!
//! Readers take the current snapshot (`Arc`) and keep it for as long as they
//! need; writers build a new snapshot and swap it in. An invocation that has
//! started keeps the `SkillComponent` it started with, so replacing a skill
//! never disturbs calls in flight. A file that fails to load never replaces
//! the version that file last loaded successfully.
//!
//! [`SkillRegistry::sync_path`] brings the registry in line with one file
//! (the watcher calls it; so may an embedder). Its rules:
//!
//! - The file's content is read and hashed once; those bytes are verified
//!   (signature first), compiled, linked and their manifest checked. Nothing
//!   is read twice, so a file changing meanwhile cannot slip past
//!   verification. Reading, hashing, verifying and compiling run off the
//!   async executor. A file larger than [`MAX_SKILL_FILE_BYTES`] is refused
//!   unread.
//! - New content that loads replaces what the file provided before, in one
//!   swap. Content that fails is recorded as the file's [`LoadFailure`]
//!   (`kind`, `reason`, digest) and the file's previous version keeps
//!   serving. A missing file (or a symlink that leads nowhere) unloads its
//!   skill.
//! - A skill name belongs to one file. Content declaring a name another file
//!   holds is refused ([`FailureKind::NameTaken`]), kept compiled, and takes
//!   the name over in the same swap that frees it (the holder is deleted,
//!   renamed, or now declares another name), so the skill never disappears.
//!   When the holder's file is already gone — `mv a.wasm b.wasm`, whose
//!   removal event has not been synced yet — the new file takes the skill
//!   over in the swap that loads it.
//! - Syncs of one file are serialized, so the last content read is the
//!   content that wins; syncs of different files run independently.
//! - Every change to the snapshot is broadcast as a [`ReloadEvent`]: a skill
//!   loaded or unloaded, an update refused, and a file back to the content
//!   serving from it after a refused update ([`ReloadOutcome::Restored`]:
//!   its failure is cleared). A sync that changes nothing (the content is
//!   the one already loaded or already refused) returns
//!   [`ReloadOutcome::Unchanged`] and is not broadcast.

use std::collections::{BTreeMap, HashMap};
use std::io::Read as _;
use std::num::NonZero;
use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use futures::StreamExt as _;
use serde::Serialize;
use tokio::sync::{Mutex, MutexGuard, OwnedSemaphorePermit, Semaphore, broadcast};

use super::SkillName;
use super::signature::{Fingerprint, NotAdmitted, SignatureError, SignaturePolicy, Verification};
use crate::blocking::{off_executor, panic_message};
use crate::runtime::{LoadError, Runtime, SkillComponent, compile, digest_of};
use crate::text::{self, OUTSIDE_TEXT_BYTES};
use crate::tools::ToolRegistry;

mod tools;
mod trust;

/// A skill as loaded from a file.
#[derive(Clone)]
#[non_exhaustive]
pub struct LoadedSkill {
    /// The compiled, checked component.
    pub component: SkillComponent,
    /// The file it was loaded from.
    pub path: PathBuf,
    /// The trusted key that signed the file; `None` only when loaded under
    /// [`SignaturePolicy::AllowUnsigned`].
    pub signer: Option<Fingerprint>,
}

/// Which check refused a file's content. Serialized as [`FailureKind::name`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailureKind {
    /// The file could not be read.
    Read,
    /// The file is larger than [`MAX_SKILL_FILE_BYTES`]; it was not read.
    TooLarge,
    /// The signature policy refused it: unsigned, unknown key, tampered,
    /// truncated (a half-written file) or malformed.
    Signature,
    /// It is not a valid WebAssembly component.
    Compile,
    /// It does not fit the skill world (e.g. it imports something the host
    /// does not provide).
    Link,
    /// Its manifest is invalid or could not be read.
    Manifest,
    /// Its signer's key may not sign it ([`KeyScope`](super::signature::KeyScope)):
    /// its name, or a tool it calls or unlocks, is outside the key's scope.
    Scope,
    /// Another file already provides a skill of the same name.
    NameTaken,
}

impl FailureKind {
    /// The kind in snake case, as listings and events show it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::TooLarge => "too_large",
            Self::Signature => "signature",
            Self::Compile => "compile",
            Self::Link => "link",
            Self::Manifest => "manifest",
            Self::Scope => "scope",
            Self::NameTaken => "name_taken",
        }
    }
}

impl Serialize for FailureKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

/// The check a component failed when it was loaded.
impl From<&LoadError> for FailureKind {
    fn from(error: &LoadError) -> Self {
        match error {
            LoadError::Compile(_) | LoadError::MemoryLimit { .. } => Self::Compile,
            LoadError::Link(_) => Self::Link,
            LoadError::Describe(_) | LoadError::Manifest(_) | LoadError::EmptyInstructions(_) => {
                Self::Manifest
            }
        }
    }
}

/// A file in the skills directory whose latest content did not load, and
/// why. The file's previous good version, if any, is still serving.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct LoadFailure {
    /// The file.
    #[serde(serialize_with = "lossy_path")]
    pub path: PathBuf,
    /// Which check refused the content.
    pub kind: FailureKind,
    /// Why, in words.
    pub reason: String,
    /// `sha256:<hex>` of the refused content; `None` when the file could not
    /// be read.
    pub digest: Option<String>,
    /// The refused content, compiled and checked, when it was refused only
    /// because another file holds its name: it takes the name over in the
    /// swap that frees it, with no gap while it would compile again.
    #[serde(skip)]
    contender: Option<Contender>,
}

/// A skill refused only for its name ([`LoadFailure`]).
#[derive(Clone)]
struct Contender(Box<LoadedSkill>);

impl std::fmt::Debug for Contender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Contender({})", self.0.component.name())
    }
}

impl Contender {
    fn name(&self) -> &SkillName {
        self.0.component.name()
    }
}

/// The largest skill file the host reads. Default: 256 MiB. A skill that
/// carries an interpreter (componentize-py, componentize-js) is tens of
/// MiB, the bundled skills under 100 KiB; a larger file in the skills
/// directory (a stray download, a core dump) is refused before it is read
/// into memory.
pub const MAX_SKILL_FILE_BYTES: u64 = 256 << 20;

/// The most bytes of skill files being read, verified and compiled at once.
/// Compiling takes memory in proportion to the file: without a bound, a
/// directory of large files changed at once (or of sparse files made to
/// look large) would be held and compiled all together. A file larger than
/// this loads alone. Default: 128 MiB.
const LOADING_BUDGET_BYTES: u64 = 128 << 20;
/// The budget is counted in KiB: semaphore permits are `u32`s.
const BUDGET_UNIT_BYTES: u64 = 1 << 10;

/// The share of the loading budget a file of `size` bytes takes.
fn budget_units(size: u64) -> u32 {
    let units = size.min(LOADING_BUDGET_BYTES).div_ceil(BUDGET_UNIT_BYTES);
    u32::try_from(units).expect("the budget fits u32 units")
}

/// A skill file's content as read.
struct SkillFile {
    bytes: Vec<u8>,
    /// `sha256:<hex>` of `bytes`, computed once as they are read.
    digest: String,
}

/// Reads and hashes the skill file at `path` off the async executor,
/// refusing one larger than [`MAX_SKILL_FILE_BYTES`], or one that is not a
/// regular file, without reading it.
async fn read_skill_file(path: &Path) -> Result<SkillFile, FileError> {
    let path = path.to_owned();
    off_executor(move || {
        let file = std::fs::OpenOptions::new()
            .read(true)
            // A FIFO opened to read waits for a writer, forever if none
            // comes, holding up the files gone after it: opened without
            // waiting, it is refused below. Reads of a regular file
            // ignore the flag.
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
            .map_err(FileError::Read)?;
        let meta = file.metadata().map_err(FileError::Read)?;
        if !meta.is_file() {
            return Err(FileError::NotAFile(file_type_name(meta.file_type())));
        }
        let size = meta.len();
        if size > MAX_SKILL_FILE_BYTES {
            return Err(FileError::TooLarge { bytes: size });
        }
        let mut bytes = Vec::with_capacity(size as usize);
        // The file may have grown since its size was read.
        file.take(MAX_SKILL_FILE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(FileError::Read)?;
        match bytes.len() as u64 {
            read if read > MAX_SKILL_FILE_BYTES => Err(FileError::TooLarge { bytes: read }),
            _ => Ok(SkillFile {
                digest: digest_of(&bytes),
                bytes,
            }),
        }
    })
    .await
    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// What a file that is not a regular file is, for [`FileError::NotAFile`].
fn file_type_name(file_type: std::fs::FileType) -> &'static str {
    if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_socket() {
        "a socket"
    } else if file_type.is_char_device() || file_type.is_block_device() {
        "a device"
    } else if file_type.is_dir() {
        "a directory"
    } else {
        "another kind of file"
    }
}

/// Why a file's content did not load.
#[derive(Debug, thiserror::Error)]
enum FileError {
    #[error("cannot read file: {0}")]
    Read(#[source] std::io::Error),
    #[error("not a regular file ({0}); a skill file must be one, and was not read")]
    NotAFile(&'static str),
    #[error(
        "the file has {bytes} bytes, more than the {} MiB a skill file may have; not read",
        MAX_SKILL_FILE_BYTES >> 20
    )]
    TooLarge { bytes: u64 },
    #[error("{}", signature_refusal(.0))]
    Signature(#[source] SignatureError),
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("skill name `{name}` is already taken by {}", holder.display())]
    NameTaken { name: SkillName, holder: PathBuf },
    /// The policy does not admit the skill: its signer (as verified, or as
    /// recorded for a version whose bytes the file no longer holds) is not
    /// trusted, or the skill is outside what the key may sign.
    #[error("{}", match .0 {
        NotAdmitted::Signer(why) => format!("signature refused: {why}"),
        out_of_scope => out_of_scope.to_string(),
    })]
    NotAdmitted(NotAdmitted),
}

/// A refused signature check, said as what is wrong with the file: a file
/// that cannot be read as WebAssembly never got as far as its signature.
fn signature_refusal(error: &SignatureError) -> String {
    match error {
        SignatureError::Truncated(_) | SignatureError::Malformed(_) => {
            format!("not a readable component: {error}")
        }
        _ => format!("signature refused: {error}"),
    }
}

impl FileError {
    fn kind(&self) -> FailureKind {
        match self {
            Self::Read(_) | Self::NotAFile(_) => FailureKind::Read,
            Self::TooLarge { .. } => FailureKind::TooLarge,
            Self::Signature(_) | Self::NotAdmitted(NotAdmitted::Signer(_)) => {
                FailureKind::Signature
            }
            Self::NotAdmitted(NotAdmitted::OutOfScope { .. }) => FailureKind::Scope,
            Self::Load(error) => error.into(),
            Self::NameTaken { .. } => FailureKind::NameTaken,
        }
    }

    /// The failure of the file `path` whose content (`digest`) failed so.
    fn into_failure(self, path: &Path, digest: Option<String>) -> LoadFailure {
        let kind = self.kind();
        // It may quote the file's own text (a manifest's name, a trap's
        // backtrace), and is logged at warn and served to clients.
        let reason = text::escaped(&self.to_string(), OUTSIDE_TEXT_BYTES).into_owned();
        LoadFailure {
            path: path.to_owned(),
            kind,
            reason,
            digest,
            contender: None,
        }
    }
}

/// One consistent view of the loaded skills, and of the tools they were
/// checked against.
#[derive(Default, Clone)]
pub struct SkillSnapshot {
    /// Every tool the skills may call or unlock is one of these; replaced
    /// whole by [`SkillRegistry::update_tools`].
    tools: Arc<ToolRegistry>,
    skills: BTreeMap<SkillName, LoadedSkill>,
    /// Which skill each file provides.
    by_path: BTreeMap<PathBuf, SkillName>,
    failures: BTreeMap<PathBuf, LoadFailure>,
}

impl SkillSnapshot {
    /// The tools the skills were checked against: a run takes its tools
    /// from the snapshot it started on, as it takes its skills.
    pub fn tools(&self) -> &Arc<ToolRegistry> {
        &self.tools
    }

    /// The loaded skill called `name`.
    pub fn get(&self, name: &str) -> Option<&LoadedSkill> {
        self.skills.get(name)
    }

    /// Every loaded skill, by name.
    pub fn skills(&self) -> impl Iterator<Item = &LoadedSkill> {
        self.skills.values()
    }

    /// Why `name` finds no skill, for a person: the skills loaded, and the
    /// one meant when only the case differs.
    pub fn not_loaded(&self, name: &str) -> String {
        let loaded: Vec<&str> = self.skills.keys().map(SkillName::as_str).collect();
        let meant = loaded
            .iter()
            .find(|loaded| loaded.eq_ignore_ascii_case(name))
            .map(|loaded| format!("; did you mean `{loaded}`?"))
            .unwrap_or_default();
        format!(
            "no skill named `{name}` is loaded (loaded: {}){meant}",
            loaded.join(", ")
        )
    }

    /// Every file whose latest content did not load, by path.
    pub fn failures(&self) -> impl Iterator<Item = &LoadFailure> {
        self.failures.values()
    }

    /// The latest load failure of the file `path`, if its latest content failed.
    pub fn failure_for(&self, path: &Path) -> Option<&LoadFailure> {
        self.failures.get(path)
    }

    /// The last reload error of the skill `name`: why the latest content of
    /// the file serving it was refused, while this version keeps serving.
    /// `None` when the skill is not loaded or its file is up to date.
    pub fn failure_for_skill(&self, name: &str) -> Option<&LoadFailure> {
        self.failures.get(&self.skills.get(name)?.path)
    }

    /// How many skills are loaded.
    pub fn len(&self) -> usize {
        self.skills.len()
    }

    /// Whether no skill is loaded.
    pub fn is_empty(&self) -> bool {
        self.skills.is_empty()
    }

    fn skill_at(&self, path: &Path) -> Option<&LoadedSkill> {
        self.by_path
            .get(path)
            .and_then(|name| self.skills.get(name))
    }

    /// Whether the content `digest` of `path` is what this snapshot already
    /// decided for that file, so syncing it again would change nothing: the
    /// loaded content with no failure pending, or the refused content when
    /// refusing it again is certain (a name collision is not, once the name
    /// is free).
    fn is_settled(&self, path: &Path, digest: &str) -> bool {
        match self.failures.get(path) {
            None => self
                .skill_at(path)
                .is_some_and(|skill| skill.component.digest() == digest),
            Some(failure) => {
                failure.digest.as_deref() == Some(digest)
                    && failure.contender.as_ref().is_none_or(|contender| {
                        self.skills
                            .get(contender.name())
                            .is_some_and(|holder| holder.path != path)
                    })
            }
        }
    }

    /// Files refused only because another file held `name`.
    fn contesting(&self, name: &SkillName) -> impl Iterator<Item = &Path> {
        self.failures
            .values()
            .filter(move |failure| failure.contender.as_ref().map(Contender::name) == Some(name))
            .map(|failure| failure.path.as_path())
    }

    /// Puts `skill` in place of whatever its file provided before, unless
    /// another file holds its name: then it is refused, and kept in the
    /// failure as the name's contender.
    fn install(&mut self, skill: LoadedSkill, digest: String) -> Result<(), LoadFailure> {
        let name = skill.component.name().clone();
        if let Some(holder) = self
            .skills
            .get(&name)
            .filter(|held| held.path != skill.path)
        {
            let error = FileError::NameTaken {
                name,
                holder: holder.path.clone(),
            };
            let failure = error.into_failure(&skill.path, Some(digest));
            return Err(LoadFailure {
                contender: Some(Contender(Box::new(skill))),
                ..failure
            });
        }
        self.remove(&skill.path);
        self.failures.remove(&skill.path);
        self.by_path.insert(skill.path.clone(), name.clone());
        self.skills.insert(name, skill);
        Ok(())
    }

    /// Gives each name `before` held and this snapshot no longer holds to
    /// the first file (still there) whose content was refused only for
    /// that name, and whose signer `policy` trusts, in the same swap that
    /// frees it; returns their events. (A contender always fits the
    /// snapshot's tools: one that stops fitting is refused for its manifest
    /// as the tools are replaced.)
    fn take_over_freed_names(
        &mut self,
        before: &SkillSnapshot,
        policy: &SignaturePolicy,
    ) -> Vec<ReloadEvent> {
        let mut events = Vec::new();
        // Taking a name over may free the name the contender's file held.
        while let Some(contender) = before
            .skills
            .keys()
            .filter(|name| !self.skills.contains_key(*name))
            .find_map(|name| {
                self.contesting(name)
                    .filter(|path| matches!(path.try_exists(), Ok(true)))
                    .find_map(|path| {
                        let contender = self.failures.get(path)?.contender.as_ref()?;
                        let Contender(skill) = contender;
                        let admitted =
                            policy.check_skill(skill.signer.as_ref(), skill.component.manifest());
                        admitted.is_ok().then(|| contender.clone())
                    })
            })
        {
            let Contender(skill) = contender;
            let path = skill.path.clone();
            let old = self
                .skill_at(&path)
                .map(|held| SkillVersion::of(&held.component));
            let new = SkillVersion::of(&skill.component);
            self.install(*skill, new.digest.clone())
                .expect("the contender's name is free");
            events.push(ReloadEvent {
                path,
                old,
                new: Some(new),
                outcome: ReloadOutcome::Loaded,
            });
        }
        events
    }

    fn remove(&mut self, path: &Path) -> Option<LoadedSkill> {
        let name = self.by_path.remove(path)?;
        self.skills.remove(&name)
    }

    /// Unloads the skill serving from `path`, its content refused now as
    /// `failure`; returns its version. The refusal becomes the file's
    /// failure, unless the file holds other content that already has one.
    fn withdraw(&mut self, path: &Path, failure: LoadFailure) -> Option<SkillVersion> {
        let old = self
            .remove(path)
            .map(|skill| SkillVersion::of(&skill.component));
        let holds_other_refused_content = self
            .failures
            .get(path)
            .is_some_and(|held| held.digest != failure.digest);
        if !holds_other_refused_content {
            self.fail(failure);
        }
        old
    }

    fn fail(&mut self, failure: LoadFailure) {
        self.failures.insert(failure.path.clone(), failure);
    }
}

/// Name, version and digest of one loaded version of a skill.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SkillVersion {
    /// The skill's name.
    pub name: SkillName,
    /// Its manifest version (semver).
    pub version: String,
    /// `sha256:<hex>` of the component file's bytes.
    pub digest: String,
}

impl std::fmt::Display for SkillVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} ({})", self.name, self.version, self.digest)
    }
}

/// A version for a log line: `none` when there is none.
fn logged(version: Option<&SkillVersion>) -> String {
    version.map_or_else(|| "none".to_owned(), SkillVersion::to_string)
}

impl SkillVersion {
    /// The version `component` is.
    pub fn of(component: &SkillComponent) -> Self {
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
#[non_exhaustive]
pub enum ReloadOutcome {
    /// A skill was added or replaced by the file's new content.
    Loaded,
    /// The file is back to the content serving from it after an update of
    /// it was refused (a half-written file completed with the old content, a
    /// bad update reverted): the file's failure is cleared; the skill, `old`
    /// and `new`, did not change.
    Restored,
    /// Nothing changed: the file's content is the one already loaded or the
    /// one already refused, or a missing file provided nothing. Returned by
    /// [`SkillRegistry::sync_path`], never broadcast.
    Unchanged,
    /// The file is gone (deleted, or renamed away) and its skill unloaded.
    Unloaded,
    /// The new content was refused; `old`, if any, keeps serving.
    Rejected {
        /// Which check refused it.
        kind: FailureKind,
        /// Why, in words.
        reason: String,
    },
    /// The signature policy was replaced ([`SkillRegistry::replace_policy`])
    /// and no longer accepts the version serving, `old`: its key was taken
    /// out of the trust store. The skill is unloaded, though its file stays.
    Untrusted {
        /// Why, in words.
        reason: String,
    },
    /// The tools were replaced ([`SkillRegistry::update_tools`]) and the
    /// version serving, `old`, no longer fits them: a tool it calls or
    /// unlocks is gone (an MCP server stopped listing it), or a tool now
    /// has its name. The skill is unloaded, though its file stays; it loads
    /// again when the tools fit it once more.
    Unresolved {
        /// Why, in words.
        reason: String,
    },
}

/// A path as text, bytes that are not UTF-8 replaced: serde refuses such a
/// `PathBuf`, and a file name is whatever the directory holds.
fn lossy_path<S: serde::Serializer>(path: &Path, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&path.to_string_lossy())
}

/// One change to the registry, for subscribers of [`SkillRegistry::subscribe`].
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct ReloadEvent {
    /// The file that changed.
    #[serde(serialize_with = "lossy_path")]
    pub path: PathBuf,
    /// The version serving from this file before the change.
    pub old: Option<SkillVersion>,
    /// The version serving from this file after the change.
    pub new: Option<SkillVersion>,
    /// What happened.
    #[serde(flatten)]
    pub outcome: ReloadOutcome,
}

/// Why the skills directory could not be read at all. Problems with single
/// files are [`LoadFailure`]s in the snapshot instead.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// Listing the directory failed.
    #[error("cannot read skills directory {}: {cause}", dir.display())]
    ReadDir {
        /// The directory.
        dir: PathBuf,
        /// Why (in the message, so not also its `source()`).
        cause: std::io::Error,
    },
}

/// How far [`SkillRegistry::load_dir_with_progress`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadProgress {
    /// Files loaded or refused so far.
    pub done: usize,
    /// Skill files in the directory.
    pub total: usize,
}

/// Events kept for a subscriber that falls behind; older ones are dropped
/// and the subscriber is told how many it missed. Default: 256.
const EVENT_BUFFER: usize = 256;

/// Turns a file's bytes into a loaded skill: signature first, then compile,
/// link and manifest checks.
struct Loader {
    runtime: Runtime,
    /// Replaced whole by [`SkillRegistry::replace_policy`].
    policy: ArcSwap<SignaturePolicy>,
    /// [`LOADING_BUDGET_BYTES`] in [`BUDGET_UNIT_BYTES`].
    budget: Arc<Semaphore>,
}

impl Loader {
    /// Reads the file at `path` once its share of the loading budget is
    /// free. Hold the returned share until the file is loaded or refused.
    async fn read(
        &self,
        path: &Path,
    ) -> (Result<SkillFile, FileError>, Option<OwnedSemaphorePermit>) {
        // The size as it is now: a file that grows before it is read takes
        // more than its share, up to MAX_SKILL_FILE_BYTES. A missing file
        // or one refused unread takes none.
        let size = tokio::fs::metadata(path).await.map_or(0, |meta| meta.len());
        let share = match budget_units(size) {
            0 => None,
            units => Some(
                self.budget
                    .clone()
                    .acquire_many_owned(units)
                    .await
                    .expect("the loading budget is never closed"),
            ),
        };
        (read_skill_file(path).await, share)
    }

    /// The signature policy files are checked against now.
    fn policy(&self) -> Arc<SignaturePolicy> {
        self.policy.load_full()
    }

    /// Loads `file`, its signature checked against `policy` and its
    /// manifest against `tools`.
    async fn load(
        &self,
        policy: &Arc<SignaturePolicy>,
        tools: &ToolRegistry,
        path: &Path,
        file: SkillFile,
    ) -> Result<LoadedSkill, FileError> {
        // Verification reads only the bytes, so it happens before any of
        // them reach the compiler.
        let (bytes, signer) = verify(policy.clone(), path, file.bytes).await?;
        let component = compile(&self.runtime, bytes).await?;
        let component =
            SkillComponent::from_component(&self.runtime, &component, file.digest, tools).await?;
        policy
            .check_skill(signer.as_ref(), component.manifest())
            .map_err(FileError::NotAdmitted)?;
        Ok(LoadedSkill {
            component,
            path: path.to_owned(),
            signer,
        })
    }

    async fn load_file(
        &self,
        path: &Path,
        tools: &ToolRegistry,
    ) -> Result<LoadedSkill, LoadFailure> {
        let (file, _share) = self.read(path).await;
        let file = file.map_err(|error| error.into_failure(path, None))?;
        let digest = file.digest.clone();
        self.load(&self.policy(), tools, path, file)
            .await
            .map_err(|error| error.into_failure(path, Some(digest)))
    }
}

/// Checks `bytes` against `policy` off the async executor (a hash of up to
/// [`MAX_SKILL_FILE_BYTES`], then an Ed25519 check per signature and trusted
/// key); gives them back with their signer.
async fn verify(
    policy: Arc<SignaturePolicy>,
    path: &Path,
    bytes: Vec<u8>,
) -> Result<(Vec<u8>, Option<Fingerprint>), FileError> {
    let path = path.to_owned();
    off_executor(move || match policy.check(&path, &bytes) {
        Ok(Verification::Verified(verified)) => Ok((bytes, Some(verified.signer))),
        Ok(Verification::Unverified) => Ok((bytes, None)),
        Err(error) => Err(FileError::Signature(error)),
    })
    .await
    // A panic in the check (a parser bug on hostile bytes) refuses the
    // file rather than ending the sync, and with it hot reload.
    .unwrap_or_else(|panic| {
        Err(FileError::Signature(SignatureError::Malformed(format!(
            "the signature check failed on this file (it panicked: {})",
            panic_message(&panic)
        ))))
    })
}

/// One lock per file being synced, so that syncs of one file never overlap
/// (an older read finishing last would win). A file has an entry only while
/// a sync holds or waits for its lock: the table does not grow with every
/// file name ever synced (versioned names, files come and gone).
#[derive(Default)]
struct FileLocks(std::sync::Mutex<HashMap<PathBuf, Arc<Mutex<()>>>>);

impl FileLocks {
    /// The lock of the file `path`, entered in the table until the returned
    /// handle is dropped.
    fn of<'a>(&'a self, path: &'a Path) -> FileLock<'a> {
        let lock = self.table().entry(path.to_owned()).or_default().clone();
        FileLock {
            locks: self,
            path,
            lock,
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, Arc<Mutex<()>>>> {
        self.0.lock().expect("sync lock table poisoned")
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.table().len()
    }
}

/// A file's lock, held or waited for; its entry leaves the table with the
/// last handle, even when a wait for it is cancelled.
struct FileLock<'a> {
    locks: &'a FileLocks,
    path: &'a Path,
    lock: Arc<Mutex<()>>,
}

impl FileLock<'_> {
    /// Waits until no other sync of the file runs.
    async fn acquire(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().await
    }
}

impl Drop for FileLock<'_> {
    fn drop(&mut self) {
        let mut table = self.locks.table();
        // The table's and this handle's: no other sync holds or waits for
        // it, and none can take it meanwhile (that takes the table's lock).
        if Arc::strong_count(&self.lock) == 2 {
            table.remove(self.path);
        }
    }
}

/// The loaded skills of one directory.
pub struct SkillRegistry {
    loader: Loader,
    current: ArcSwap<SkillSnapshot>,
    /// Serializes writers so that two reloads never build on the same base.
    writer: Mutex<()>,
    /// Serializes [`SkillRegistry::replace_policy`] and
    /// [`SkillRegistry::update_tools`] calls.
    replacing: Mutex<()>,
    syncing: FileLocks,
    events: broadcast::Sender<ReloadEvent>,
}

impl SkillRegistry {
    /// An empty registry whose skills must pass `policy`.
    pub fn new(runtime: Runtime, tools: Arc<ToolRegistry>, policy: SignaturePolicy) -> Self {
        Self {
            loader: Loader {
                runtime,
                policy: ArcSwap::from_pointee(policy),
                budget: Arc::new(Semaphore::new(budget_units(LOADING_BUDGET_BYTES) as usize)),
            },
            current: ArcSwap::from_pointee(SkillSnapshot {
                tools,
                ..SkillSnapshot::default()
            }),
            writer: Mutex::new(()),
            replacing: Mutex::new(()),
            syncing: FileLocks::default(),
            events: broadcast::channel(EVENT_BUFFER).0,
        }
    }

    /// Loads every skill file in `dir` ([`is_skill_file`]: `*.wasm`, not
    /// hidden; a symlink is read through), as many at a time as there are
    /// cores (each compile runs off the async executor). Files that fail are
    /// reported in the snapshot's failures; the others load. Of two files
    /// declaring the same skill name, the first by path wins.
    pub async fn load_dir(
        runtime: Runtime,
        tools: Arc<ToolRegistry>,
        policy: SignaturePolicy,
        dir: &Path,
    ) -> Result<Self, RegistryError> {
        Self::load_dir_with_progress(runtime, tools, policy, dir, |_| {}).await
    }

    /// [`SkillRegistry::load_dir`], calling `progress` once the files are
    /// listed (`done` 0) and after each file is loaded or refused, for a
    /// progress display.
    pub async fn load_dir_with_progress(
        runtime: Runtime,
        tools: Arc<ToolRegistry>,
        policy: SignaturePolicy,
        dir: &Path,
        mut progress: impl FnMut(LoadProgress),
    ) -> Result<Self, RegistryError> {
        let registry = Self::new(runtime, tools, policy);
        let paths = wasm_files(dir).map_err(|cause| RegistryError::ReadDir {
            dir: dir.to_owned(),
            cause,
        })?;
        let mut seen = LoadProgress {
            done: 0,
            total: paths.len(),
        };
        progress(seen);
        let loader = &registry.loader;
        let tools = &registry.tools();
        let parallel = std::thread::available_parallelism().map_or(1, NonZero::get);
        let mut loaded: Vec<_> = futures::stream::iter(paths)
            .map(|path| async move {
                let result = loader.load_file(&path, tools).await;
                (path, result)
            })
            .buffer_unordered(parallel)
            .inspect(|_| {
                seen.done += 1;
                progress(seen);
            })
            .collect()
            .await;
        // Sorted so that which of two same-named files wins is stable.
        loaded.sort_by(|a, b| a.0.cmp(&b.0));
        let mut snapshot = SkillSnapshot::clone(&registry.snapshot());
        for (path, result) in loaded {
            let installed = result.and_then(|skill| {
                let digest = skill.component.digest().to_owned();
                snapshot.install(skill, digest)
            });
            if let Err(failure) = installed {
                tracing::warn!(path = %path.display(), reason = %failure.reason, "skill not loaded");
                snapshot.fail(failure);
            }
        }
        registry.current.store(Arc::new(snapshot));
        Ok(registry)
    }

    /// The current snapshot. Hold it for the length of one request.
    pub fn snapshot(&self) -> Arc<SkillSnapshot> {
        self.current.load_full()
    }

    /// The current version of the skill `name`. The component stays usable
    /// (and runs this version) however the registry changes afterwards.
    pub fn get(&self, name: &str) -> Option<SkillComponent> {
        self.current
            .load()
            .get(name)
            .map(|skill| skill.component.clone())
    }

    /// The runtime skills are compiled and run on.
    pub fn runtime(&self) -> &Runtime {
        &self.loader.runtime
    }

    /// The signature policy files are held to now.
    pub fn policy(&self) -> Arc<SignaturePolicy> {
        self.loader.policy()
    }

    /// The tools skills may call now ([`SkillSnapshot::tools`]).
    pub fn tools(&self) -> Arc<ToolRegistry> {
        self.current.load().tools.clone()
    }

    /// Every change from now on, as it happens.
    pub fn subscribe(&self) -> broadcast::Receiver<ReloadEvent> {
        self.events.subscribe()
    }

    /// Brings the registry in line with the file at `path`: loads it when it
    /// exists, unloads its skill when it does not (see the module docs for
    /// the rules). Returns what happened to `path`; files that were waiting
    /// for a skill name `path` released are synced too, and their events are
    /// broadcast.
    pub async fn sync_path(&self, path: &Path) -> ReloadEvent {
        let path = &file_key(path);
        let (event, waiting) = self.sync_file(path).await;
        self.sync_waiting(waiting).await;
        event
    }

    /// Syncs the files waiting for a skill name a change freed, and those
    /// their syncs free in turn.
    async fn sync_waiting(&self, mut waiting: Vec<PathBuf>) {
        while !waiting.is_empty() {
            let next = waiting.remove(0);
            waiting.extend(self.sync_file(&next).await.1);
        }
    }

    /// Brings the registry in line with `dir` as it is now, one file at a
    /// time, with the rules of [`SkillRegistry::sync_path`]: every skill file
    /// there, and every file the registry holds a skill or a refusal of. For
    /// changes no watcher reported: a host that does not watch, a network
    /// file system that sends no events. Returns what happened to each file,
    /// unchanged ones included. Files still there sync before files gone,
    /// as the watcher's do, so that a rename moves its skill without a gap.
    /// A directory that cannot be listed changes nothing: its skills are
    /// not taken for deleted.
    pub async fn rescan(&self, dir: &Path) -> Result<Vec<ReloadEvent>, RegistryError> {
        let listed = wasm_files(dir).map_err(|cause| RegistryError::ReadDir {
            dir: dir.to_owned(),
            cause,
        })?;
        let (present, gone): (Vec<_>, Vec<_>) = self
            .and_known_files(listed)
            .into_iter()
            .partition(|path| path.exists());
        let mut events = Vec::new();
        for path in present.iter().chain(&gone) {
            events.push(self.sync_path(path).await);
        }
        Ok(events)
    }

    /// `listed` with every file the registry holds a skill or a refusal of
    /// (those may be gone), sorted, each once: the files a rescan syncs.
    pub(crate) fn and_known_files(&self, mut listed: Vec<PathBuf>) -> Vec<PathBuf> {
        let snapshot = self.snapshot();
        listed.extend(snapshot.skills().map(|skill| skill.path.clone()));
        listed.extend(snapshot.failures().map(|failure| failure.path.clone()));
        listed.sort();
        listed.dedup();
        listed
    }

    /// Syncs one file; returns its event and the files waiting for a skill
    /// name the change released.
    async fn sync_file(&self, path: &Path) -> (ReloadEvent, Vec<PathBuf>) {
        let lock = self.syncing.of(path);
        let _syncing = lock.acquire().await;
        loop {
            let (file, _share) = self.loader.read(path).await;
            let file = match file {
                Ok(file) => file,
                Err(FileError::Read(error)) if error.kind() == std::io::ErrorKind::NotFound => {
                    return self.unload(path).await;
                }
                Err(error) => return self.reject(self.writer.lock().await, path, error, None),
            };
            let current = self.snapshot();
            if current.is_settled(path, &file.digest) {
                return (unchanged(path, current.skill_at(path)), Vec::new());
            }
            if current
                .skill_at(path)
                .is_some_and(|skill| skill.component.digest() == file.digest)
            {
                // The loaded content is back (e.g. a half-written update was
                // completed with the old content): only the failure goes.
                return self.clear_failure(path).await;
            }
            if let Some(done) = self.load_content(path, file).await {
                return done;
            }
        }
    }

    /// Loads `file`, the content of `path`, and installs or refuses it;
    /// `None` when the signature policy or the tools were replaced
    /// meanwhile, so that the content must be checked again under the new
    /// ones. Verifying and compiling run outside the writer lock: a slow
    /// compile must not hold up changes to other files.
    async fn load_content(
        &self,
        path: &Path,
        file: SkillFile,
    ) -> Option<(ReloadEvent, Vec<PathBuf>)> {
        let policy = self.loader.policy();
        let tools = self.tools();
        let digest = file.digest.clone();
        let loaded = self.loader.load(&policy, &tools, path, file).await;
        let writer = self.writer.lock().await;
        if !Arc::ptr_eq(&policy, &self.loader.policy.load())
            || !Arc::ptr_eq(&tools, &self.current.load().tools)
        {
            return None;
        }
        Some(match loaded {
            Ok(skill) => self.install(writer, skill),
            Err(error) => self.reject(writer, path, error, Some(digest)),
        })
    }

    fn install(
        &self,
        writer: MutexGuard<'_, ()>,
        skill: LoadedSkill,
    ) -> (ReloadEvent, Vec<PathBuf>) {
        let mut next = SkillSnapshot::clone(&self.current.load());
        let path = skill.path.clone();
        let mut events = Vec::new();
        // The file holding this name is gone: it was renamed to `path` (or
        // deleted) and its own sync is still on its way. Take the skill over
        // now, in this swap, so that it never disappears in between.
        let moved_from = next
            .skills
            .get(skill.component.name())
            .map(|holder| holder.path.clone())
            .filter(|holder| *holder != path && matches!(holder.try_exists(), Ok(false)));
        if let Some(holder) = moved_from {
            let old = next
                .remove(&holder)
                .map(|moved| SkillVersion::of(&moved.component));
            next.failures.remove(&holder);
            events.push(ReloadEvent {
                path: holder,
                old,
                new: None,
                outcome: ReloadOutcome::Unloaded,
            });
        }
        let old = next
            .skill_at(&path)
            .map(|held| SkillVersion::of(&held.component));
        let new = SkillVersion::of(&skill.component);
        let event = match next.install(skill, new.digest.clone()) {
            Ok(()) => ReloadEvent {
                path,
                old,
                new: Some(new),
                outcome: ReloadOutcome::Loaded,
            },
            Err(failure) => {
                let outcome = rejected(&failure);
                next.fail(failure);
                ReloadEvent {
                    path,
                    new: old.clone(),
                    old,
                    outcome,
                }
            }
        };
        events.push(event.clone());
        (event, self.commit(writer, next, &events))
    }

    fn reject(
        &self,
        writer: MutexGuard<'_, ()>,
        path: &Path,
        error: FileError,
        digest: Option<String>,
    ) -> (ReloadEvent, Vec<PathBuf>) {
        let mut next = SkillSnapshot::clone(&self.current.load());
        let serving = next
            .skill_at(path)
            .map(|skill| SkillVersion::of(&skill.component));
        let failure = error.into_failure(path, digest);
        // Refused again as it was (content tried again under a new policy
        // that still refuses it): no change to report.
        if next.failures.get(path).is_some_and(|held| {
            (&held.digest, held.kind, &held.reason)
                == (&failure.digest, failure.kind, &failure.reason)
                && held.contender.is_none()
        }) {
            return (unchanged(path, next.skill_at(path)), Vec::new());
        }
        let event = ReloadEvent {
            path: path.to_owned(),
            old: serving.clone(),
            new: serving,
            outcome: rejected(&failure),
        };
        next.fail(failure);
        let waiting = self.commit(writer, next, std::slice::from_ref(&event));
        (event, waiting)
    }

    async fn clear_failure(&self, path: &Path) -> (ReloadEvent, Vec<PathBuf>) {
        let writer = self.writer.lock().await;
        let mut next = SkillSnapshot::clone(&self.current.load());
        let serving = next
            .skill_at(path)
            .map(|skill| SkillVersion::of(&skill.component));
        next.failures.remove(path);
        let event = ReloadEvent {
            path: path.to_owned(),
            old: serving.clone(),
            new: serving,
            outcome: ReloadOutcome::Restored,
        };
        let waiting = self.commit(writer, next, std::slice::from_ref(&event));
        (event, waiting)
    }

    async fn unload(&self, path: &Path) -> (ReloadEvent, Vec<PathBuf>) {
        let writer = self.writer.lock().await;
        let mut next = SkillSnapshot::clone(&self.current.load());
        let old = next
            .remove(path)
            .map(|skill| SkillVersion::of(&skill.component));
        let had_failure = next.failures.remove(path).is_some();
        let outcome = if old.is_some() || had_failure {
            ReloadOutcome::Unloaded
        } else {
            ReloadOutcome::Unchanged
        };
        let event = ReloadEvent {
            path: path.to_owned(),
            old,
            new: None,
            outcome,
        };
        if event.outcome == ReloadOutcome::Unchanged {
            return (event, Vec::new());
        }
        let waiting = self.commit(writer, next, std::slice::from_ref(&event));
        (event, waiting)
    }

    /// Swaps `next` in, with every name it frees taken over by a file that
    /// was refused only for that name, and broadcasts `events` and the
    /// takeovers'; returns the files still waiting for a skill name that
    /// `next` no longer holds. Takes the writer guard to prove the lock is
    /// held.
    fn commit(
        &self,
        _writer: MutexGuard<'_, ()>,
        mut next: SkillSnapshot,
        events: &[ReloadEvent],
    ) -> Vec<PathBuf> {
        let taken_over = next.take_over_freed_names(&self.current.load(), &self.loader.policy());
        let before = self.current.swap(Arc::new(next));
        let after = self.current.load();
        let waiting = before
            .skills
            .keys()
            .filter(|name| !after.skills.contains_key(*name))
            .flat_map(|name| after.contesting(name).map(Path::to_owned))
            .collect();
        for event in events.iter().chain(&taken_over) {
            self.emit(event);
        }
        waiting
    }

    fn emit(&self, event: &ReloadEvent) {
        match &event.outcome {
            ReloadOutcome::Rejected { reason, .. } => {
                tracing::warn!(path = %event.path.display(), %reason, serving = logged(event.new.as_ref()), "skill update refused")
            }
            ReloadOutcome::Untrusted { reason } => {
                tracing::warn!(path = %event.path.display(), %reason, old = logged(event.old.as_ref()), "skill unloaded: the signature policy no longer accepts it")
            }
            ReloadOutcome::Unresolved { reason } => {
                tracing::warn!(path = %event.path.display(), %reason, old = logged(event.old.as_ref()), "skill unloaded: it no longer fits the tools")
            }
            outcome => {
                tracing::info!(path = %event.path.display(), ?outcome, old = logged(event.old.as_ref()), new = logged(event.new.as_ref()), "skills reloaded")
            }
        }
        // No subscribers is fine: events are for whoever listens.
        let _ = self.events.send(event.clone());
    }
}

fn rejected(failure: &LoadFailure) -> ReloadOutcome {
    ReloadOutcome::Rejected {
        kind: failure.kind,
        reason: failure.reason.clone(),
    }
}

/// What a sync that changed nothing at `path` reports; `serving` is the
/// skill served from it, if any.
fn unchanged(path: &Path, serving: Option<&LoadedSkill>) -> ReloadEvent {
    let serving = serving.map(|skill| SkillVersion::of(&skill.component));
    ReloadEvent {
        path: path.to_owned(),
        old: serving.clone(),
        new: serving,
        outcome: ReloadOutcome::Unchanged,
    }
}

/// Whether `path` names a skill component file: `*.wasm`, not hidden.
/// Hidden entries (names starting with `.`) are never skills: temporary
/// files written before a rename into place (`.x.wasm.tmp`), and the
/// `..<timestamp>` directories of a Kubernetes ConfigMap or Secret volume,
/// whose files are reached through the top-level links (see the watcher).
pub fn is_skill_file(path: &Path) -> bool {
    let hidden = path
        .file_name()
        .is_some_and(|name| name.as_encoded_bytes().starts_with(b"."));
    !hidden && path.extension().is_some_and(|ext| ext == "wasm")
}

/// `path` as the registry keys files: absolute, as the watcher's events
/// name them, so that a relative skills directory (`--skills skills`) and
/// its events meet on the same keys.
fn file_key(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_owned())
}

/// The skill component files in `dir` (symlinks to files included, not
/// subdirectories), sorted, as absolute paths ([`file_key`]).
pub(crate) fn wasm_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(std::path::absolute(dir)?)? {
        let path = entry?.path();
        if is_skill_file(&path) && path.is_file() {
            paths.push(path);
        }
    }
    paths.sort();
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use futures::FutureExt as _;

    use super::*;
    use crate::runtime::RuntimeConfig;

    #[test]
    fn a_bad_signature_section_is_a_refused_signature_and_a_bad_file_unreadable() {
        let refused = signature_refusal(&SignatureError::MalformedSignature("why".into()));
        assert_eq!(refused, "signature refused: malformed signature: why");
        let unreadable = signature_refusal(&SignatureError::Malformed("why".into()));
        assert_eq!(unreadable, "not a readable component: malformed: why");
    }

    #[tokio::test]
    async fn a_file_lock_serializes_syncs_and_leaves_the_table_with_the_last() {
        let locks = FileLocks::default();
        let (a, b) = (Path::new("/s/a.wasm"), Path::new("/s/b.wasm"));
        let first = locks.of(a);
        let held = first.acquire().await;
        let second = locks.of(a);
        assert!(second.acquire().now_or_never().is_none(), "a is held");
        assert!(locks.of(b).acquire().now_or_never().is_some(), "b is not");
        assert_eq!(locks.len(), 1, "b is forgotten with its only sync");
        drop(held);
        drop(first);
        assert_eq!(locks.len(), 1, "a sync still waits for a");
        drop(second.acquire().await);
        drop(second);
        assert_eq!(locks.len(), 0);
    }

    #[tokio::test]
    async fn a_cancelled_wait_for_a_file_lock_leaves_no_entry() {
        let locks = FileLocks::default();
        let path = Path::new("/s/a.wasm");
        let first = locks.of(path);
        let held = first.acquire().await;
        let waiting = locks.of(path);
        assert!(waiting.acquire().now_or_never().is_none());
        drop(waiting);
        drop(held);
        drop(first);
        assert_eq!(locks.len(), 0);
    }

    fn unsigned_registry() -> SkillRegistry {
        let runtime = Runtime::new(RuntimeConfig {
            max_concurrent_instances: 1,
            ..RuntimeConfig::default()
        })
        .unwrap();
        let tools = Arc::new(ToolRegistry::new());
        SkillRegistry::new(runtime, tools, SignaturePolicy::AllowUnsigned)
    }

    /// Regression: the table kept one lock per file ever synced.
    #[tokio::test]
    async fn syncs_leave_no_lock_behind() {
        let registry = unsigned_registry();
        let dir = tempfile::tempdir().unwrap();
        for version in 0..3 {
            let path = dir.path().join(format!("skill-{version}.wasm"));
            std::fs::write(&path, b"not a component").unwrap();
            registry.sync_path(&path).await;
            std::fs::remove_file(&path).unwrap();
            registry.sync_path(&path).await;
        }
        assert_eq!(registry.syncing.len(), 0);
    }

    #[test]
    fn a_file_takes_its_size_of_the_loading_budget_and_a_larger_one_all_of_it() {
        assert_eq!(budget_units(0), 0);
        assert_eq!(budget_units(1), 1);
        assert_eq!(budget_units(100 << 10), 100);
        let whole = budget_units(LOADING_BUDGET_BYTES);
        assert_eq!(budget_units(LOADING_BUDGET_BYTES + 1), whole);
        assert_eq!(budget_units(MAX_SKILL_FILE_BYTES), whole);
    }

    #[tokio::test]
    async fn a_file_is_read_only_once_its_share_of_the_loading_budget_is_free() {
        let registry = unsigned_registry();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.wasm");
        std::fs::write(&path, b"not a component").unwrap();
        let whole = budget_units(LOADING_BUDGET_BYTES);
        let loading = registry
            .loader
            .budget
            .clone()
            .acquire_many_owned(whole)
            .await;
        let mut read = Box::pin(registry.loader.read(&path));
        let waiting = tokio::time::timeout(std::time::Duration::from_millis(200), &mut read);
        assert!(waiting.await.is_err(), "waits for its share");
        drop(loading);
        let (file, share) = read.await;
        assert_eq!(file.unwrap().bytes, b"not a component");
        assert_eq!(share.unwrap().num_permits(), 1);
        // A missing file waits for nothing.
        let whole = registry
            .loader
            .budget
            .clone()
            .acquire_many_owned(whole)
            .await;
        let (missing, share) = registry.loader.read(&dir.path().join("gone.wasm")).await;
        assert!(matches!(missing, Err(FileError::Read(_))) && share.is_none());
        drop(whole);
    }
}
