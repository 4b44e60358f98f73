//! Hot reload: watch the skills directory and keep the registry in line.
//!
//! Every create, write, delete or rename of a skill file (`*.wasm`, not
//! hidden; see [`is_skill_file`]) schedules a sync of that path
//! ([`SkillRegistry::sync_path`]) once it has been quiet for [`DEBOUNCE`].
//! Renames count for both names: the rename-over that editors and `cp`/`mv`
//! deployments do (write `.x.wasm.tmp`, rename it onto `x.wasm`) syncs the
//! destination, and a file renamed away unloads. The destination of a
//! rename is synced at once, without the debounce: a rename is atomic, so
//! the file it puts in place is complete. A skill whose file is renamed
//! (`mv a.wasm b.wasm`) therefore loads from `b.wasm` — taking the skill
//! over from the vanished `a.wasm` — before `a.wasm` is synced, and never
//! disappears. Reads (including the registry's own) are ignored.
//!
//! Files sync in parallel, each in its own task, so that a slow compile (a
//! large componentize-py skill) holds up neither another file nor the
//! watcher's reading of events. A file still there syncs as soon as it is
//! due; a file gone waits until every sync due before it has finished, so
//! that a renamed skill's new file, which may still be compiling, takes the
//! skill over before the old file's sync unloads it (see `SyncOrder`). The
//! registry serializes syncs of one file, each reading it when its turn
//! comes, so an older content never overwrites a newer one.
//!
//! A skill file may be a symlink; it is read through the link, and the
//! skill keeps the link's path. That is how a Kubernetes ConfigMap or Secret
//! volume (and other atomic-swap deployments) lays the directory out:
//!
//! ```text
//! skills/refund.wasm -> ..data/refund.wasm        (one link per file)
//! skills/..data      -> ..2026_11_30_04_41_02.1   (swapped by a rename)
//! skills/..2026_11_30_04_41_02.1/refund.wasm      (the content)
//! ```
//!
//! An update writes a new `..<timestamp>` directory, renames a new `..data`
//! link over the old one, adds or removes the top-level links of files
//! added or removed, and deletes the old directory: no event names the
//! `*.wasm` links whose content changed. So an event on anything that can
//! change what a skill file leads to — an entry whose name starts with `..`,
//! a directory or a symlink that is not itself a skill file — schedules a
//! *rescan*, as lost events do: every skill file in the directory and every
//! file the registry knows is synced, once the directory has been quiet for
//! [`DEBOUNCE`]. Each event pushes the pending rescan back, so the burst of
//! events one swap makes runs one rescan, after the swap is complete. A
//! rescan reads and hashes each file; only content that changed is
//! verified and compiled (see [`SkillRegistry::sync_path`]). Files gone
//! sync after the files still there, so a skill whose file was renamed in
//! the swap is taken over rather than unloaded and loaded again.
//!
//! Hidden entries (names starting with `.`) are never skills: temporary
//! files written before a rename into place (`.x.wasm.tmp`), and the
//! `..<timestamp>` directories, whose files are reached only through the
//! top-level links. Subdirectories are not scanned for skills, nor watched
//! (the watch is not recursive): a change inside one is seen only when it
//! is swapped in as described.
//!
//! The directory's own path is followed as well. Where it leads can change
//! with no event inside it: the directory is deleted and created again, or
//! a link on its path is swapped — git-sync's `--link` (`current ->
//! .worktrees/<commit>`, the skills directory `current/skills`), a
//! `current -> releases/<n>` deployment. A second watcher watches the
//! directories holding the entries the path goes through (each symlink met
//! while resolving it, and the directory's own entry); a create, remove or
//! rename of one of those entries asks for a rescan, and before each rescan
//! the path is resolved again: if it now leads to another directory, the
//! watches are set up afresh there (see `Watches::follow`) and the rescan
//! loads what that directory holds.
//!
//! A file still being written when its sync runs (a writer pausing longer
//! than [`DEBOUNCE`]) is refused — a cut-short file fails signature
//! verification, or compilation when signatures are not required — and the
//! previous good version keeps serving; the writer's next event syncs it
//! again. When the watcher starts, and whenever the OS reports that events
//! were lost, the directory is rescanned.

use std::collections::hash_map::Entry as MapEntry;
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::panic::AssertUnwindSafe;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::FutureExt as _;
use futures::future::join_all;
use notify::event::{AccessKind, AccessMode, CreateKind, ModifyKind, RemoveKind, RenameMode};
use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::SkillRegistry;
use super::registry::{is_skill_file, wasm_files};
use crate::blocking::panic_message;

/// Quiet time after a file's last event before it is synced (the
/// destination of a rename is synced at once), and after the last event
/// asking for a rescan before the rescan runs. Default: 20 ms — long enough
/// to coalesce the bursts of events one `cp`, in-place save or ConfigMap
/// swap makes, short enough that such a write is picked up within tens of
/// milliseconds (Spin's watch waits 100 ms, then restarts the whole app).
pub const DEBOUNCE: Duration = Duration::from_millis(20);

/// Symlinks followed while resolving the skills directory's path before
/// giving up on finding where it leads (the kernel's own limit is 40).
const MAX_LINKS: usize = 40;

/// Keeps the registry watching while alive; dropping it stops the watcher
/// and aborts the syncs it started.
pub struct WatchHandle {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for WatchHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Why watching could not start. The message includes the cause, which is
/// therefore not also its `source()`: a chain printer would say it twice.
#[derive(Debug, thiserror::Error)]
#[error("cannot watch {}: {cause}", dir.display())]
pub struct WatchError {
    dir: PathBuf,
    cause: notify::Error,
}

/// What one file-system event asks of the registry.
#[derive(Debug, PartialEq, Eq)]
enum Change {
    /// Sync these skill files, each once it has been quiet for the time
    /// given: [`DEBOUNCE`], or zero for the destination of a rename.
    Paths(Vec<(PathBuf, Duration)>),
    /// Sync everything once nothing has asked for a rescan for [`DEBOUNCE`]:
    /// events were lost, or an entry that skill files may lead through
    /// changed (a `..` entry, a directory, a symlink).
    Rescan,
}

/// Starts watching `dir` (not recursively) and syncing `registry` with it,
/// beginning with a rescan, so that changes made since the registry was
/// loaded are not missed. Must be called inside a tokio runtime.
pub fn watch(registry: Arc<SkillRegistry>, dir: &Path) -> Result<WatchHandle, WatchError> {
    // Absolute, as notify names what it reports (and the registry its files).
    let dir = std::path::absolute(dir).map_err(|cause| WatchError {
        dir: dir.to_owned(),
        cause: notify::Error::io(cause),
    })?;
    let (sender, receiver) = mpsc::unbounded_channel();
    let watches = Watches::set(&dir, sender.clone())?;
    // Queued after the watches are in place: nothing falls in between.
    let _ = sender.send(Change::Rescan);
    let task = tokio::spawn(debounce_and_sync(registry, watches, receiver));
    Ok(WatchHandle { task })
}

/// The watches on the skills directory `dir`: one on its entries, one on
/// the entries its path goes through. Replaced whole when the path comes to
/// lead to another directory: a fresh watcher has no state about the old
/// one, whose deletion may still be reported under the same path.
struct Watches {
    dir: PathBuf,
    changes: mpsc::UnboundedSender<Change>,
    /// Device and inode of the directory `dir` led to when it was watched.
    target: (u64, u64),
    /// Set when that directory was deleted or moved away: a directory
    /// created in its place may get the same inode number.
    gone: Arc<AtomicBool>,
    _entries: RecommendedWatcher,
    _path: Option<RecommendedWatcher>,
}

impl Watches {
    /// Watches what `dir` leads to now. Fails when that directory cannot be
    /// watched; the path's entries are watched where possible (a parent the
    /// host may not read is logged and skipped).
    fn set(dir: &Path, changes: mpsc::UnboundedSender<Change>) -> Result<Self, WatchError> {
        let error = |cause| WatchError {
            dir: dir.to_owned(),
            cause,
        };
        let target = identity(dir).map_err(|e| error(notify::Error::io(e)))?;
        let sender = changes.clone();
        let gone = Arc::new(AtomicBool::new(false));
        let (watched_dir, watched_gone) = (dir.to_owned(), gone.clone());
        let mut entries =
            notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                match event {
                    Ok(event) => {
                        // Events about the watched directory itself carry its path.
                        let moved = matches!(
                            event.kind,
                            EventKind::Remove(_) | EventKind::Modify(ModifyKind::Name(_))
                        );
                        if moved && event.paths.contains(&watched_dir) {
                            watched_gone.store(true, Ordering::Relaxed);
                        }
                        if let Some(change) = change_of(event) {
                            // The receiver is gone only when the handle was dropped.
                            let _ = sender.send(change);
                        }
                    }
                    Err(error) => {
                        // An event may be lost with it: a rescan finds the change.
                        tracing::warn!(%error, "file watcher error; rescanning the skills directory");
                        let _ = sender.send(Change::Rescan);
                    }
                }
            })
            .map_err(error)?;
        entries
            .watch(dir, RecursiveMode::NonRecursive)
            .map_err(error)?;
        Ok(Self {
            dir: dir.to_owned(),
            _path: watch_path(dir, changes.clone()),
            changes,
            target,
            gone,
            _entries: entries,
        })
    }

    /// Called before each rescan: when `dir` now leads to another directory
    /// (a swapped link, a directory created anew), watches that one instead.
    /// While `dir` leads nowhere the old watches stay; the path's watch sees
    /// it come back.
    fn follow(&mut self) {
        let same = identity(&self.dir).is_ok_and(|now| now == self.target);
        if same && !self.gone.load(Ordering::Relaxed) {
            return;
        }
        match Self::set(&self.dir, self.changes.clone()) {
            Ok(watches) => {
                tracing::info!(
                    dir = %self.dir.display(),
                    "the skills directory's path leads to another directory now; watching it"
                );
                *self = watches;
            }
            Err(error) => tracing::warn!(%error, "the skills directory cannot be watched"),
        }
    }
}

/// Device and inode of the directory `dir` leads to now.
fn identity(dir: &Path) -> std::io::Result<(u64, u64)> {
    std::fs::metadata(dir).map(|meta| (meta.dev(), meta.ino()))
}

/// Watches the directories holding the entries `dir`'s path goes through
/// ([`entries_on_the_way`]); a create, remove or rename of one of those
/// entries (or lost events) asks for a rescan. `None` when no such
/// directory could be watched.
fn watch_path(dir: &Path, changes: mpsc::UnboundedSender<Change>) -> Option<RecommendedWatcher> {
    let entries: HashSet<PathBuf> = entries_on_the_way(dir).into_iter().collect();
    let parents: HashSet<PathBuf> = entries
        .iter()
        .filter_map(|entry| entry.parent().map(Path::to_owned))
        .collect();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let event = match event {
            Ok(event) => event,
            Err(error) => {
                tracing::warn!(%error, "skills directory path watcher error; rescanning");
                let _ = changes.send(Change::Rescan);
                return;
            }
        };
        // Opening or listing the directory, or a change of its metadata,
        // changes nothing about where the path leads.
        let moved = matches!(
            event.kind,
            EventKind::Create(_) | EventKind::Remove(_) | EventKind::Modify(ModifyKind::Name(_))
        );
        let ours = event.paths.iter().any(|path| entries.contains(path));
        if event.need_rescan() || (moved && ours) {
            let _ = changes.send(Change::Rescan);
        }
    })
    .inspect_err(|error| tracing::warn!(%error, "cannot watch the skills directory's path"))
    .ok()?;
    let mut watching = false;
    for parent in &parents {
        match watcher.watch(parent, RecursiveMode::NonRecursive) {
            Ok(()) => watching = true,
            Err(error) => tracing::warn!(
                dir = %dir.display(), parent = %parent.display(), %error,
                "cannot watch a directory on the skills directory's path; a link swapped there \
                 will not be followed"
            ),
        }
    }
    watching.then_some(watcher)
}

/// The entries resolving `dir` goes through that can change where it leads,
/// each as the absolute path it was met at: every symlink on the way, and
/// the directory's own entry where it really is. `current/skills` with
/// `current -> .worktrees/abc` gives `/…/current` and
/// `/…/.worktrees/abc/skills`.
fn entries_on_the_way(dir: &Path) -> Vec<PathBuf> {
    let Ok(absolute) = std::path::absolute(dir) else {
        return Vec::new();
    };
    let mut entries = Vec::new();
    let mut resolved = PathBuf::new();
    let mut rest = VecDeque::new();
    queue_components(&mut rest, &mut resolved, &absolute);
    let mut links = 0;
    while let Some(name) = rest.pop_front() {
        if name == ".." {
            resolved.pop();
            continue;
        }
        let entry = resolved.join(&name);
        match std::fs::read_link(&entry) {
            Ok(target) if links < MAX_LINKS => {
                links += 1;
                entries.push(entry);
                // A relative target continues from the link's directory.
                queue_components(&mut rest, &mut resolved, &target);
            }
            _ => resolved = entry,
        }
    }
    entries.push(resolved);
    entries
}

/// Puts `path`'s components at the front of the names still to resolve; a
/// root starts the resolution over from it.
fn queue_components(rest: &mut VecDeque<OsString>, resolved: &mut PathBuf, path: &Path) {
    for component in path.components().rev() {
        match component {
            Component::RootDir | Component::Prefix(_) => {
                *resolved = PathBuf::from(component.as_os_str());
            }
            Component::CurDir => {}
            Component::ParentDir | Component::Normal(_) => {
                rest.push_front(component.as_os_str().to_owned());
            }
        }
    }
}

/// What an entry of the skills directory is to the watcher.
#[derive(Debug, PartialEq, Eq)]
enum Entry {
    /// A skill file: synced on its own.
    Skill,
    /// Something skill files may lead through (a `..` entry, a directory or
    /// a symlink): a change to it may change any skill file's content.
    Indirection,
    /// Anything else (temporary files, notes): ignored.
    Other,
}

/// What the entry at `path` is, given the kind of the event about it.
fn entry_of(path: &Path, kind: &EventKind) -> Entry {
    let name = path.file_name().map(|name| name.as_encoded_bytes());
    if name.is_some_and(|name| name.starts_with(b"..")) {
        return Entry::Indirection;
    }
    if is_skill_file(path) {
        return Entry::Skill;
    }
    if matches!(
        kind,
        EventKind::Create(CreateKind::Folder) | EventKind::Remove(RemoveKind::Folder)
    ) {
        return Entry::Indirection;
    }
    // A removed or renamed-away entry can no longer be looked at; what it
    // was is lost, and a plain file is by far the likelier.
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() || meta.is_symlink() => Entry::Indirection,
        _ => Entry::Other,
    }
}

/// The skill files an event concerns, or `None` when it changes nothing.
fn change_of(event: notify::Event) -> Option<Change> {
    if event.need_rescan() {
        return Some(Change::Rescan);
    }
    // Where a rename puts a file (`To` carries it alone, `Both` last).
    let destination = match event.kind {
        // A finished write is worth a sync; opening or reading a file is
        // not — and the registry's own reads would otherwise loop.
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => None,
        EventKind::Access(_) => return None,
        EventKind::Modify(ModifyKind::Name(RenameMode::To | RenameMode::Both)) => {
            event.paths.last().cloned()
        }
        _ => None,
    };
    let mut paths = Vec::new();
    for path in event.paths {
        match entry_of(&path, &event.kind) {
            // A rescan syncs every skill file, these included.
            Entry::Indirection => return Some(Change::Rescan),
            Entry::Skill => {
                let quiet = if destination.as_ref() == Some(&path) {
                    Duration::ZERO
                } else {
                    DEBOUNCE
                };
                paths.push((path, quiet));
            }
            Entry::Other => {}
        }
    }
    (!paths.is_empty()).then_some(Change::Paths(paths))
}

/// Every file a rescan syncs ([`SkillRegistry::and_known_files`]). A
/// directory that cannot be listed is taken for empty, as when it is gone.
fn everything(registry: &SkillRegistry, dir: &Path) -> Vec<PathBuf> {
    let listed = wasm_files(dir).unwrap_or_else(|error| {
        tracing::warn!(dir = %dir.display(), %error, "cannot list the skills directory");
        Vec::new()
    });
    registry.and_known_files(listed)
}

/// What is due when: single files, and at most one rescan.
#[derive(Debug, Default)]
struct Schedule {
    files: HashMap<PathBuf, Instant>,
    rescan: Option<Instant>,
    /// The source of each rename whose destination is not due yet: it
    /// never falls due before the destination, so that a destination
    /// pushed back by a later event (a `chmod` right after the `mv`) still
    /// takes the skill over instead of the source unloading it first.
    renamed_from: HashMap<PathBuf, PathBuf>,
}

impl Schedule {
    /// Takes `change`, which arrived at `now`: each file (and the rescan) is
    /// due once it has been quiet for its time, so a later event about it
    /// pushes it back.
    fn add(&mut self, change: Change, now: Instant) {
        match change {
            Change::Paths(paths) => {
                // A rename's destination is the path with no quiet time.
                let destination = paths
                    .iter()
                    .find(|(_, quiet)| quiet.is_zero())
                    .map(|(path, _)| path.clone());
                for (path, quiet) in paths {
                    let due = now + quiet;
                    if let Some(source) = self.renamed_from.get(&path) {
                        self.files
                            .entry(source.clone())
                            .and_modify(|at| *at = (*at).max(due));
                    }
                    match &destination {
                        Some(destination) if *destination != path => {
                            self.renamed_from.insert(destination.clone(), path.clone());
                        }
                        _ => {}
                    }
                    self.files.insert(path, due);
                }
            }
            Change::Rescan => self.rescan = Some(now + DEBOUNCE),
        }
    }

    /// When the next file or rescan is due.
    fn next_due(&self) -> Option<Instant> {
        self.files.values().copied().chain(self.rescan).min()
    }

    /// Takes what is due at `now`: the files due, and when the rescan is
    /// due, the files `everything` lists (called once), less those whose
    /// own quiet time is still running (a write in progress keeps its
    /// debounce); split into files still there and files gone, which sync
    /// in that order ([`SyncOrder`]).
    fn take_due(&mut self, now: Instant, everything: impl FnOnce() -> Vec<PathBuf>) -> Due {
        let mut ready: Vec<PathBuf> = self
            .files
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(path, _)| path.clone())
            .collect();
        if self.rescan.is_some_and(|at| at <= now) {
            self.rescan = None;
            let pending = &self.files;
            ready.extend(
                everything()
                    .into_iter()
                    .filter(|path| pending.get(path).is_none_or(|at| *at <= now)),
            );
        }
        for path in &ready {
            self.files.remove(path);
            self.renamed_from.remove(path);
        }
        ready.sort();
        ready.dedup();
        let (present, gone) = ready.into_iter().partition(|path| path.exists());
        Due { present, gone }
    }
}

/// The files due for a sync at one time.
#[derive(Debug, Default, PartialEq, Eq)]
struct Due {
    /// Files still there.
    present: Vec<PathBuf>,
    /// Files gone (deleted, renamed away, a link leading nowhere).
    gone: Vec<PathBuf>,
}

/// Syncs the watcher starts as one task: one file still there, or the
/// files gone of one [`Due`].
#[derive(Debug, PartialEq, Eq)]
struct SyncTask {
    /// Its place in the order things were due in.
    turn: u64,
    paths: Vec<PathBuf>,
}

/// When the watcher's syncs start. A file still there syncs as soon as it
/// is due, whatever else is syncing: a slow compile (a large
/// componentize-py skill) holds up no other file. The files gone of one
/// `Due` sync once every sync due before them (those of the same `Due`
/// included) has finished, so a skill whose file was renamed is taken over
/// by the new file, which may still be compiling, rather than unloaded in
/// between. Syncs of one file never overlap whatever the order here: the
/// registry serializes them, each reading the file once it is its turn.
///
/// A file due again while its sync runs (rewritten during a slow compile)
/// syncs once more when that sync finishes, however often it was due
/// meanwhile: that one sync reads the file as it is then.
#[derive(Debug, Default)]
struct SyncOrder {
    next_turn: u64,
    /// Turns of the syncs started or waiting, not finished yet.
    unfinished: BTreeSet<u64>,
    /// Syncs of files gone waiting for their turn, in the order they were due.
    waiting: VecDeque<SyncTask>,
    /// Files still there whose sync runs, with its turn.
    running: HashMap<PathBuf, u64>,
    /// For a file in `running`, the sync due since, to start after it.
    again: HashMap<PathBuf, SyncTask>,
}

impl SyncOrder {
    /// Takes the files `due`; returns the syncs to start now.
    fn due(&mut self, due: Due) -> Vec<SyncTask> {
        let mut start = Vec::new();
        for path in due.present {
            if self.again.contains_key(&path) {
                continue;
            }
            let task = self.task(vec![path.clone()]);
            match self.running.entry(path) {
                MapEntry::Occupied(running) => {
                    self.again.insert(running.key().clone(), task);
                }
                MapEntry::Vacant(idle) => {
                    idle.insert(task.turn);
                    start.push(task);
                }
            }
        }
        if !due.gone.is_empty() {
            let gone = self.task(due.gone);
            self.waiting.push_back(gone);
        }
        start.extend(self.next_gone());
        start
    }

    /// Records that the sync `turn` finished; returns the syncs it let
    /// start.
    fn finished(&mut self, turn: u64) -> Vec<SyncTask> {
        self.unfinished.remove(&turn);
        let mut start = Vec::new();
        let path = self
            .running
            .iter()
            .find_map(|(path, &running)| (running == turn).then(|| path.clone()));
        if let Some(path) = path {
            self.running.remove(&path);
            if let Some(task) = self.again.remove(&path) {
                self.running.insert(path, task.turn);
                start.push(task);
            }
        }
        start.extend(self.next_gone());
        start
    }

    fn task(&mut self, paths: Vec<PathBuf>) -> SyncTask {
        let turn = self.next_turn;
        self.next_turn += 1;
        self.unfinished.insert(turn);
        SyncTask { turn, paths }
    }

    /// The first sync of files gone waiting, once nothing due before it is
    /// unfinished. It stays unfinished while it runs, so the next waits.
    fn next_gone(&mut self) -> Option<SyncTask> {
        let turn = self.waiting.front()?.turn;
        if self.unfinished.first() != Some(&turn) {
            return None;
        }
        self.waiting.pop_front()
    }
}

/// The syncs the watcher started, each a task, in [`SyncOrder`]. Dropped
/// with the watcher's own task when its [`WatchHandle`] is: the syncs still
/// running are aborted then (a sync cut short has swapped in a whole
/// snapshot or none).
struct Syncs {
    registry: Arc<SkillRegistry>,
    order: SyncOrder,
    running: JoinSet<u64>,
}

impl Syncs {
    fn due(&mut self, due: Due) {
        for task in self.order.due(due) {
            self.start(task);
        }
    }

    /// Takes the turn of a sync task that finished.
    fn finished(&mut self, turn: u64) {
        for task in self.order.finished(turn) {
            self.start(task);
        }
    }

    /// Starts `task`. A sync that panics (a bug) is logged and counts as
    /// finished: the registry keeps the snapshot it had (a sync swaps in a
    /// whole one or none), and hot reload goes on for every other file.
    fn start(&mut self, task: SyncTask) {
        let registry = self.registry.clone();
        self.running.spawn(async move {
            let syncs = join_all(task.paths.iter().map(|path| registry.sync_path(path)));
            if let Err(panic) = AssertUnwindSafe(syncs).catch_unwind().await {
                tracing::error!(
                    paths = ?task.paths, panic = panic_message(&panic),
                    "a skill file's sync panicked; the skills loaded before stay"
                );
            }
            task.turn
        });
    }
}

/// Sleeps until `deadline`; without one, forever.
async fn sleep_until_due(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

async fn debounce_and_sync(
    registry: Arc<SkillRegistry>,
    mut watches: Watches,
    mut changes: mpsc::UnboundedReceiver<Change>,
) {
    let mut schedule = Schedule::default();
    let mut syncs = Syncs {
        registry: registry.clone(),
        order: SyncOrder::default(),
        running: JoinSet::new(),
    };
    loop {
        tokio::select! {
            change = changes.recv() => match change {
                None => return,
                Some(change) => schedule.add(change, Instant::now()),
            },
            () = sleep_until_due(schedule.next_due()) => {
                // A rescan first makes sure it lists the directory the path
                // leads to now, watched from now on.
                let rescan = || {
                    watches.follow();
                    everything(&registry, &watches.dir)
                };
                syncs.due(schedule.take_due(Instant::now(), rescan));
            }
            // Never an error: sync tasks catch their panics, and are
            // aborted only with this task.
            Some(Ok(turn)) = syncs.running.join_next() => syncs.finished(turn),
        }
    }
}

#[cfg(test)]
mod tests {
    use notify::event::{CreateKind, DataChange, Flag, RemoveKind};

    use super::*;

    fn event(kind: EventKind, paths: &[&str]) -> notify::Event {
        paths.iter().fold(notify::Event::new(kind), |event, path| {
            event.add_path(PathBuf::from(path))
        })
    }

    /// Paths synced after the debounce, and `now` synced at once.
    fn paths(debounced: &[&str], now: &[&str]) -> Option<Change> {
        let debounced = debounced.iter().map(|path| (PathBuf::from(path), DEBOUNCE));
        let now = now.iter().map(|path| (PathBuf::from(path), Duration::ZERO));
        Some(Change::Paths(debounced.chain(now).collect()))
    }

    #[test]
    fn reads_do_not_trigger_a_sync() {
        for kind in [
            AccessKind::Open(AccessMode::Any),
            AccessKind::Close(AccessMode::Read),
            AccessKind::Read,
        ] {
            let change = change_of(event(EventKind::Access(kind), &["/s/a.wasm"]));
            assert_eq!(change, None, "{kind:?}");
        }
    }

    #[test]
    fn writes_creates_and_removes_of_skill_files_are_synced() {
        for kind in [
            EventKind::Create(CreateKind::File),
            EventKind::Modify(ModifyKind::Data(DataChange::Any)),
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
            EventKind::Remove(RemoveKind::File),
        ] {
            let change = change_of(event(kind, &["/s/a.wasm"]));
            assert_eq!(change, paths(&["/s/a.wasm"], &[]), "{kind:?}");
        }
    }

    #[test]
    fn a_rename_syncs_its_destination_at_once_and_its_source_debounced() {
        let both = EventKind::Modify(ModifyKind::Name(RenameMode::Both));
        assert_eq!(
            change_of(event(both, &["/s/.a.wasm.tmp", "/s/a.wasm"])),
            paths(&[], &["/s/a.wasm"])
        );
        assert_eq!(
            change_of(event(both, &["/s/a.wasm", "/s/a.wasm.bak"])),
            paths(&["/s/a.wasm"], &[])
        );
        assert_eq!(
            change_of(event(both, &["/s/a.wasm", "/s/b.wasm"])),
            paths(&["/s/a.wasm"], &["/s/b.wasm"])
        );
        let to = EventKind::Modify(ModifyKind::Name(RenameMode::To));
        assert_eq!(
            change_of(event(to, &["/s/a.wasm"])),
            paths(&[], &["/s/a.wasm"])
        );
        let from = EventKind::Modify(ModifyKind::Name(RenameMode::From));
        assert_eq!(
            change_of(event(from, &["/s/a.wasm"])),
            paths(&["/s/a.wasm"], &[])
        );
    }

    #[test]
    fn other_files_are_ignored_and_lost_events_rescan() {
        let create = EventKind::Create(CreateKind::File);
        assert_eq!(change_of(event(create, &["/s/a.wasm.tmp"])), None);
        let overflow = notify::Event::new(EventKind::Other).set_flag(Flag::Rescan);
        assert_eq!(change_of(overflow), Some(Change::Rescan));
    }

    #[test]
    fn hidden_files_are_never_skills() {
        for kind in [
            EventKind::Create(CreateKind::File),
            EventKind::Modify(ModifyKind::Data(DataChange::Any)),
            EventKind::Remove(RemoveKind::File),
        ] {
            for path in ["/s/.a.wasm", "/s/.a.wasm.tmp", "/s/.a.wasm.1234.tmp"] {
                assert_eq!(change_of(event(kind, &[path])), None, "{kind:?} {path}");
            }
        }
        // Our own rename into place syncs the destination only.
        let both = EventKind::Modify(ModifyKind::Name(RenameMode::Both));
        assert_eq!(
            change_of(event(both, &["/s/.a.wasm.tmp", "/s/a.wasm"])),
            paths(&[], &["/s/a.wasm"])
        );
    }

    /// A Kubernetes ConfigMap update, as inotify reports it on the volume.
    #[test]
    fn a_configmap_swap_rescans() {
        let folder = EventKind::Create(CreateKind::Folder);
        let link = EventKind::Create(CreateKind::File);
        let both = EventKind::Modify(ModifyKind::Name(RenameMode::Both));
        let from = EventKind::Modify(ModifyKind::Name(RenameMode::From));
        let to = EventKind::Modify(ModifyKind::Name(RenameMode::To));
        let gone = EventKind::Remove(RemoveKind::Folder);
        let attrib = EventKind::Modify(ModifyKind::Metadata(notify::event::MetadataKind::Any));
        for (kind, paths) in [
            (folder, &["/s/..2026_11_30_04_41_02.123456789"][..]),
            (link, &["/s/..data_tmp"]),
            (from, &["/s/..data_tmp"]),
            (to, &["/s/..data"]),
            (both, &["/s/..data_tmp", "/s/..data"]),
            (gone, &["/s/..2026_11_30_04_40_00.987654321"]),
            (attrib, &["/s/..data"]),
            // Any directory, hidden or not.
            (folder, &["/s/.worktrees"]),
            (gone, &["/s/archive"]),
        ] {
            assert_eq!(
                change_of(event(kind, paths)),
                Some(Change::Rescan),
                "{kind:?} {paths:?}"
            );
        }
        // The links of files added or removed are skill files.
        assert_eq!(
            change_of(event(link, &["/s/refund.wasm"])),
            paths(&["/s/refund.wasm"], &[])
        );
        // Reading through the links (our own loads) is not a change.
        for kind in [
            AccessKind::Open(AccessMode::Any),
            AccessKind::Close(AccessMode::Read),
        ] {
            let change = change_of(event(EventKind::Access(kind), &["/s/..data"]));
            assert_eq!(change, None, "{kind:?}");
        }
    }

    #[test]
    fn symlinks_and_directories_that_are_not_skill_files_rescan() {
        let dir = tempfile::tempdir().unwrap();
        let release = dir.path().join("release-3");
        std::fs::create_dir(&release).unwrap();
        let current = dir.path().join("current");
        std::os::unix::fs::symlink(&release, &current).unwrap();
        let notes = dir.path().join("NOTES.md");
        std::fs::write(&notes, "notes").unwrap();
        let skill = dir.path().join("a.wasm");
        std::os::unix::fs::symlink(current.join("a.wasm"), &skill).unwrap();

        let to = EventKind::Modify(ModifyKind::Name(RenameMode::To));
        let attrib = EventKind::Modify(ModifyKind::Metadata(notify::event::MetadataKind::Any));
        let path = |path: &Path| path.to_str().unwrap().to_owned();
        assert_eq!(
            change_of(event(to, &[&path(&current)])),
            Some(Change::Rescan)
        );
        assert_eq!(
            change_of(event(attrib, &[&path(&release)])),
            Some(Change::Rescan)
        );
        assert_eq!(change_of(event(attrib, &[&path(&notes)])), None);
        // A skill file is synced on its own, link or not.
        assert_eq!(
            change_of(event(to, &[&path(&skill)])),
            paths(&[], &[&path(&skill)])
        );
    }

    #[test]
    fn the_directory_path_is_resolved_through_every_link_on_it() {
        use std::os::unix::fs::symlink;
        let root = tempfile::tempdir().unwrap();
        // Resolved already, so that the expected paths are where they lead.
        let root = root.path().canonicalize().unwrap();
        let worktree = root.join(".worktrees/abc");
        std::fs::create_dir_all(worktree.join("skills")).unwrap();
        std::fs::create_dir(root.join("releases")).unwrap();
        symlink(".worktrees/abc", root.join("current")).unwrap();
        symlink(root.join("current"), root.join("live")).unwrap();
        symlink("../current", root.join("releases/latest")).unwrap();

        let skills = worktree.join("skills");
        assert_eq!(entries_on_the_way(&skills), std::slice::from_ref(&skills));
        assert_eq!(
            entries_on_the_way(&root.join("current/skills")),
            [root.join("current"), skills.clone()]
        );
        assert_eq!(
            entries_on_the_way(&root.join("live/skills")),
            [root.join("live"), root.join("current"), skills.clone()]
        );
        assert_eq!(
            entries_on_the_way(&root.join("releases/latest/skills")),
            [root.join("releases/latest"), root.join("current"), skills]
        );
        // A link to the directory itself, and a directory not there (yet).
        assert_eq!(
            entries_on_the_way(&root.join("current")),
            [root.join("current"), worktree]
        );
        let missing = root.join("missing/skills");
        assert_eq!(entries_on_the_way(&missing), [missing]);
    }

    fn at(start: Instant, ms: u64) -> Instant {
        start + Duration::from_millis(ms)
    }

    #[test]
    fn a_burst_of_rescans_runs_one_after_the_last() {
        let start = Instant::now();
        let mut schedule = Schedule::default();
        let listed = std::cell::Cell::new(0);
        let everything = || {
            listed.set(listed.get() + 1);
            vec![PathBuf::from("/nonexistent/a.wasm")]
        };
        for ms in [0, 5, 10, 15] {
            schedule.add(Change::Rescan, at(start, ms));
        }
        assert_eq!(schedule.next_due(), Some(at(start, 15) + DEBOUNCE));
        assert_eq!(schedule.take_due(at(start, 30), everything), Due::default());
        assert_eq!(listed.get(), 0, "not listed before the burst is over");
        let ready = schedule.take_due(at(start, 35), everything);
        assert_eq!(ready, gone(&["/nonexistent/a.wasm"]));
        assert_eq!(listed.get(), 1);
        assert_eq!(schedule.next_due(), None);
        assert_eq!(
            schedule.take_due(at(start, 100), everything),
            Due::default()
        );
        assert_eq!(listed.get(), 1, "one rescan");
    }

    #[test]
    fn a_rescan_leaves_a_write_in_progress_to_its_debounce() {
        let start = Instant::now();
        let mut schedule = Schedule::default();
        let (a, b) = (PathBuf::from("/n/a.wasm"), PathBuf::from("/n/b.wasm"));
        schedule.add(Change::Rescan, start);
        schedule.add(Change::Paths(vec![(a.clone(), DEBOUNCE)]), at(start, 15));
        let ready = schedule.take_due(at(start, 20), || vec![a.clone(), b.clone()]);
        assert_eq!(ready, gone(&["/n/b.wasm"]));
        assert_eq!(schedule.next_due(), Some(at(start, 15) + DEBOUNCE));
        assert_eq!(
            schedule.take_due(at(start, 35), Vec::new),
            gone(&["/n/a.wasm"])
        );
    }

    #[test]
    fn a_renamed_file_falls_due_no_earlier_than_its_destination() {
        let start = Instant::now();
        let mut schedule = Schedule::default();
        let (from, to) = (PathBuf::from("/n/a.wasm"), PathBuf::from("/n/b.wasm"));
        // `mv a.wasm b.wasm`, then 10 ms later `chmod 644 b.wasm`.
        schedule.add(
            Change::Paths(vec![(from.clone(), DEBOUNCE), (to.clone(), Duration::ZERO)]),
            start,
        );
        schedule.add(Change::Paths(vec![(to.clone(), DEBOUNCE)]), at(start, 10));
        assert_eq!(
            schedule.take_due(at(start, 20), Vec::new),
            Due::default(),
            "a.wasm waits for b.wasm"
        );
        assert_eq!(
            schedule.take_due(at(start, 30), Vec::new),
            gone(&["/n/a.wasm", "/n/b.wasm"])
        );
        assert!(schedule.renamed_from.is_empty());
    }

    /// Files due that are all gone.
    fn gone(paths: &[&str]) -> Due {
        Due {
            present: Vec::new(),
            gone: paths.iter().map(PathBuf::from).collect(),
        }
    }

    #[test]
    fn files_due_are_split_into_those_still_there_and_those_gone() {
        let dir = tempfile::tempdir().unwrap();
        let here = dir.path().join("z.wasm");
        std::fs::write(&here, b"").unwrap();
        let away = dir.path().join("a.wasm");
        let mut schedule = Schedule::default();
        let start = Instant::now();
        schedule.add(Change::Rescan, start);
        let ready = schedule.take_due(at(start, 20), || vec![away.clone(), here.clone()]);
        assert_eq!(
            ready,
            Due {
                present: vec![here],
                gone: vec![away]
            }
        );
    }

    /// The paths of `tasks`, one list per task.
    fn paths_of(tasks: &[SyncTask]) -> Vec<Vec<PathBuf>> {
        tasks.iter().map(|task| task.paths.clone()).collect()
    }

    #[test]
    fn files_still_there_sync_at_once_and_files_gone_after_everything_due_before() {
        let path = |name: &str| PathBuf::from(format!("/s/{name}.wasm"));
        let mut order = SyncOrder::default();
        let first = order.due(Due {
            present: vec![path("a"), path("b")],
            gone: vec![path("c"), path("d")],
        });
        assert_eq!(paths_of(&first), [[path("a")], [path("b")]], "c and d wait");
        let second = order.due(Due {
            present: vec![path("e")],
            gone: vec![path("f")],
        });
        assert_eq!(paths_of(&second), [[path("e")]], "e waits for nothing");
        assert_eq!(order.finished(second[0].turn), []);
        assert_eq!(order.finished(first[0].turn), [], "b is still syncing");
        let c_and_d = order.finished(first[1].turn).pop().expect("c and d's turn");
        assert_eq!(c_and_d.paths, [path("c"), path("d")]);
        let third = order.due(Due {
            present: vec![path("g")],
            gone: Vec::new(),
        });
        assert_eq!(paths_of(&third), [[path("g")]], "g waits for nothing");
        let next = order.finished(c_and_d.turn).pop().expect("f's turn");
        assert_eq!(next.paths, [path("f")]);
        assert_eq!(order.finished(next.turn), []);
        let last = order.due(gone(&["/s/h.wasm"]));
        assert!(last.is_empty(), "h waits for g");
        let last = order.finished(third[0].turn).pop().expect("h's turn");
        assert_eq!(last.paths, [path("h")]);
        assert_eq!(order.finished(last.turn), []);
        // With nothing unfinished, a file gone syncs at once.
        let at_once = order.due(gone(&["/s/i.wasm"]));
        assert_eq!(paths_of(&at_once), [[path("i")]]);
    }

    #[test]
    fn a_file_due_again_while_it_syncs_syncs_once_more_after_it() {
        let a = PathBuf::from("/s/a.wasm");
        let present = |path: &PathBuf| Due {
            present: vec![path.clone()],
            gone: Vec::new(),
        };
        let mut order = SyncOrder::default();
        let first = order.due(present(&a));
        assert_eq!(paths_of(&first), [[a.clone()]]);
        // Rewritten three times while its compile runs: one more sync.
        for _ in 0..3 {
            assert_eq!(order.due(present(&a)), []);
        }
        let gone_after = order.due(gone(&["/s/b.wasm"]));
        assert!(gone_after.is_empty());
        let again = order.finished(first[0].turn);
        assert_eq!(
            paths_of(&again),
            [[a.clone()]],
            "b waits for a's second sync"
        );
        let b = order.finished(again[0].turn);
        assert_eq!(paths_of(&b), [[PathBuf::from("/s/b.wasm")]]);
        assert_eq!(order.finished(b[0].turn), []);
        // Nothing runs: a file due syncs at once again.
        assert_eq!(paths_of(&order.due(present(&a))), [[a]]);
    }
}
