//! Hot reload: watch the skills directory and keep the registry in line.
//!
//! Every create, write, delete or rename of a `*.wasm` file schedules a
//! sync of that path ([`SkillRegistry::sync_path`]) once it has been quiet
//! for [`DEBOUNCE`]. Renames count for both names: the rename-over that
//! editors and `cp`/`mv` deployments do (write `x.wasm.tmp`, rename it onto
//! `x.wasm`) syncs the destination, and a file renamed away unloads. The
//! destination of a rename is synced at once, without the debounce: a rename
//! is atomic, so the file it puts in place is complete. A skill whose file
//! is renamed (`mv a.wasm b.wasm`) therefore loads from `b.wasm` — taking
//! the skill over from the vanished `a.wasm` — before `a.wasm` is synced,
//! and never disappears. Reads (including the registry's own) are ignored.
//!
//! A file still being written when its sync runs (a writer pausing longer
//! than [`DEBOUNCE`]) is refused — a cut-short file fails signature
//! verification, or compilation when signatures are not required — and the
//! previous good version keeps serving; the writer's next event syncs it
//! again. When the watcher starts, and whenever the OS reports that events
//! were lost, every file in the directory and every file the registry knows
//! is synced (files whose content did not change cost a read and a hash).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::event::{AccessKind, AccessMode, ModifyKind, RenameMode};
use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::SkillRegistry;
use super::registry::{is_skill_file, wasm_files};

/// Quiet time after a file's last event before it is synced (the
/// destination of a rename is synced at once). Default: 20 ms — long enough
/// to coalesce the bursts of events one `cp` or in-place save makes, short
/// enough that such a write is picked up within tens of milliseconds (Spin's
/// watch waits 100 ms, then restarts the whole app).
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
    /// Events were lost: sync everything after [`DEBOUNCE`].
    Rescan,
}

/// Starts watching `dir` (not recursively) and syncing `registry` with it,
/// beginning with a sync of every file, so that changes made since the
/// registry was loaded are not missed. Must be called inside a tokio runtime.
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
    let paths: Vec<(PathBuf, Duration)> = event
        .paths
        .into_iter()
        .filter(|path| is_skill_file(path))
        .map(|path| {
            let quiet = if destination.as_ref() == Some(&path) {
                Duration::ZERO
            } else {
                DEBOUNCE
            };
            (path, quiet)
        })
        .collect();
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

async fn debounce_and_sync(
    registry: Arc<SkillRegistry>,
    dir: PathBuf,
    mut changes: mpsc::UnboundedReceiver<Change>,
) {
    let mut due: HashMap<PathBuf, Instant> = HashMap::new();
    loop {
        let next_due = due.values().min().copied();
        let change = match next_due {
            Some(deadline) => tokio::select! {
                change = changes.recv() => change,
                () = tokio::time::sleep_until(deadline) => {
                    let now = Instant::now();
                    let mut ready: Vec<PathBuf> = due
                        .iter()
                        .filter(|(_, at)| **at <= now)
                        .map(|(path, _)| path.clone())
                        .collect();
                    // Files that exist first: should both names of a rename
                    // be due together, the destination takes the skill over
                    // before the source unloads it.
                    ready.sort_by_key(|path| (!path.exists(), path.clone()));
                    for path in ready {
                        due.remove(&path);
                        registry.sync_path(&path).await;
                    }
                    continue;
                }
            },
            None => changes.recv().await,
        };
        let paths = match change {
            None => return,
            Some(Change::Paths(paths)) => paths,
            Some(Change::Rescan) => everything(&registry, &dir)
                .into_iter()
                .map(|path| (path, DEBOUNCE))
                .collect(),
        };
        let now = Instant::now();
        for (path, quiet) in paths {
            due.insert(path, now + quiet);
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
}
