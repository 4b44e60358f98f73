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
//! verified and compiled (see [`SkillRegistry::sync_path`]). Files still
//! there are synced before files that are gone, so a skill whose file was
//! renamed in the swap is taken over rather than unloaded and loaded again.
//!
//! Hidden entries (names starting with `.`) are never skills: temporary
//! files written before a rename into place (`.x.wasm.tmp`), and the
//! `..<timestamp>` directories, whose files are reached only through the
//! top-level links. Subdirectories are not scanned for skills, nor watched
//! (the watch is not recursive): a change inside one is seen only when it
//! is swapped in as described.
//!
//! A file still being written when its sync runs (a writer pausing longer
//! than [`DEBOUNCE`]) is refused — a cut-short file fails signature
//! verification, or compilation when signatures are not required — and the
//! previous good version keeps serving; the writer's next event syncs it
//! again. When the watcher starts, and whenever the OS reports that events
//! were lost, the directory is rescanned.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::event::{AccessKind, AccessMode, CreateKind, ModifyKind, RemoveKind, RenameMode};
use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::SkillRegistry;
use super::registry::{is_skill_file, wasm_files};

/// Quiet time after a file's last event before it is synced (the
/// destination of a rename is synced at once), and after the last event
/// asking for a rescan before the rescan runs. Default: 20 ms — long enough
/// to coalesce the bursts of events one `cp`, in-place save or ConfigMap
/// swap makes, short enough that such a write is picked up within tens of
/// milliseconds (Spin's watch waits 100 ms, then restarts the whole app).
pub const DEBOUNCE: Duration = Duration::from_millis(20);

/// Keeps the registry watching while alive; dropping it stops the watcher.
pub struct WatchHandle {
    _watcher: notify::RecommendedWatcher,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for WatchHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Why watching could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot watch {}: {source}", dir.display())]
pub struct WatchError {
    dir: PathBuf,
    source: notify::Error,
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
    let (sender, receiver) = mpsc::unbounded_channel();
    let catch_up = sender.clone();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        match event {
            Ok(event) => {
                if let Some(change) = change_of(event) {
                    // The receiver is gone only when the handle was dropped.
                    let _ = sender.send(change);
                }
            }
            Err(error) => tracing::warn!(%error, "file watcher error"),
        }
    })
    .map_err(|source| WatchError {
        dir: dir.to_owned(),
        source,
    })?;
    watcher
        .watch(dir, RecursiveMode::NonRecursive)
        .map_err(|source| WatchError {
            dir: dir.to_owned(),
            source,
        })?;
    // Queued after the watch is in place: nothing falls in between.
    let _ = catch_up.send(Change::Rescan);
    let task = tokio::spawn(debounce_and_sync(registry, dir.to_owned(), receiver));
    Ok(WatchHandle {
        _watcher: watcher,
        task,
    })
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

/// Every file a rescan syncs: the directory's skill files and every file the
/// registry knows (those may be gone).
fn everything(registry: &SkillRegistry, dir: &Path) -> Vec<PathBuf> {
    let mut paths = wasm_files(dir).unwrap_or_else(|error| {
        tracing::warn!(dir = %dir.display(), %error, "cannot list the skills directory");
        Vec::new()
    });
    let snapshot = registry.snapshot();
    paths.extend(snapshot.skills().map(|skill| skill.path.clone()));
    paths.extend(snapshot.failures().map(|failure| failure.path.clone()));
    paths.sort();
    paths.dedup();
    paths
}

/// What is due when: single files, and at most one rescan.
#[derive(Debug, Default)]
struct Schedule {
    files: HashMap<PathBuf, Instant>,
    rescan: Option<Instant>,
}

impl Schedule {
    /// Takes `change`, which arrived at `now`: each file (and the rescan) is
    /// due once it has been quiet for its time, so a later event about it
    /// pushes it back.
    fn add(&mut self, change: Change, now: Instant) {
        match change {
            Change::Paths(paths) => {
                for (path, quiet) in paths {
                    self.files.insert(path, now + quiet);
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
    /// debounce). In the order to sync them: files that exist first, so
    /// that should both names of a rename be due together, the destination
    /// takes the skill over before the source unloads it.
    fn take_due(
        &mut self,
        now: Instant,
        everything: impl FnOnce() -> Vec<PathBuf>,
    ) -> Vec<PathBuf> {
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
        }
        ready.sort_by_key(|path| (!path.exists(), path.clone()));
        ready.dedup();
        ready
    }
}

async fn debounce_and_sync(
    registry: Arc<SkillRegistry>,
    dir: PathBuf,
    mut changes: mpsc::UnboundedReceiver<Change>,
) {
    let mut schedule = Schedule::default();
    loop {
        let change = match schedule.next_due() {
            Some(deadline) => tokio::select! {
                change = changes.recv() => change,
                () = tokio::time::sleep_until(deadline) => {
                    let ready = schedule.take_due(Instant::now(), || everything(&registry, &dir));
                    for path in ready {
                        registry.sync_path(&path).await;
                    }
                    continue;
                }
            },
            None => changes.recv().await,
        };
        match change {
            None => return,
            Some(change) => schedule.add(change, Instant::now()),
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
        assert!(schedule.take_due(at(start, 30), everything).is_empty());
        assert_eq!(listed.get(), 0, "not listed before the burst is over");
        let ready = schedule.take_due(at(start, 35), everything);
        assert_eq!(ready, [PathBuf::from("/nonexistent/a.wasm")]);
        assert_eq!(listed.get(), 1);
        assert_eq!(schedule.next_due(), None);
        assert!(schedule.take_due(at(start, 100), everything).is_empty());
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
        assert_eq!(ready, [b]);
        assert_eq!(schedule.next_due(), Some(at(start, 15) + DEBOUNCE));
        assert_eq!(schedule.take_due(at(start, 35), Vec::new), [a]);
    }

    #[test]
    fn files_that_exist_are_synced_first() {
        let dir = tempfile::tempdir().unwrap();
        let here = dir.path().join("z.wasm");
        std::fs::write(&here, b"").unwrap();
        let gone = dir.path().join("a.wasm");
        let mut schedule = Schedule::default();
        let start = Instant::now();
        schedule.add(Change::Rescan, start);
        let ready = schedule.take_due(at(start, 20), || vec![gone.clone(), here.clone()]);
        assert_eq!(ready, [here, gone]);
    }
}
