//! Following what a long-running command was started from as it changes on
//! disk (`serve`'s API keys file, the trust store): a watch on the directories holding it that
//! calls back when what it holds differs from what was last read.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context;
use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;

/// How long the watcher lets a burst of events settle before it reads
/// again: an editor's save or a Secret update is several events.
pub(crate) const SETTLE: Duration = Duration::from_millis(200);

/// A watch [`watch`] started; dropping it stops the watch.
pub(crate) struct Following {
    _watcher: Arc<Mutex<RecommendedWatcher>>,
}

/// Watches `dirs` and awaits `on_change` whenever `read` gives other than it
/// did last, starting from `seen`, what the settings in force were read
/// from: an edit, an atomic replace, a Kubernetes Secret or ConfigMap
/// volume swapping its `..data` link. Directories, not files, are watched,
/// so a replaced file is still followed; so are their parents, and the
/// directories are watched again after every change, so that one replaced
/// whole (`mv trusted.new trusted`) is followed from then on. Reads (ours
/// among them) are not changes. `read` is compared once as the watch
/// begins, for a change made while the host was starting. `what` names
/// what is followed in errors.
pub(crate) fn watch<S, F>(
    what: &str,
    dirs: &[PathBuf],
    seen: S,
    read: impl Fn() -> S + Send + 'static,
    on_change: impl Fn() -> F + Send + 'static,
) -> anyhow::Result<Following>
where
    S: PartialEq + Send + 'static,
    F: Future<Output = ()> + Send,
{
    let (changed, mut changes) = mpsc::unbounded_channel();
    let started = changed.clone();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let is_read = |kind: &EventKind| {
            matches!(kind, EventKind::Access(access)
                if *access != AccessKind::Close(AccessMode::Write))
        };
        // An error (a lost event) may hide a change: look.
        if event.as_ref().map_or(true, |event| !is_read(&event.kind)) {
            let _ = changed.send(());
        }
    })?;
    let mut watched: Vec<PathBuf> = dirs.iter().map(|dir| parent_dir(dir)).collect();
    watched.extend(dirs.iter().cloned());
    watched.sort();
    watched.dedup();
    for dir in &watched {
        watcher
            .watch(dir, RecursiveMode::NonRecursive)
            .with_context(|| format!("watching {} for changes to {what}", dir.display()))?;
    }
    let watcher = Arc::new(Mutex::new(watcher));
    let rearm = Arc::downgrade(&watcher);
    let _ = started.send(());
    let mut last = seen;
    tokio::spawn(async move {
        while changes.recv().await.is_some() {
            tokio::time::sleep(SETTLE).await;
            while changes.try_recv().is_ok() {}
            let Some(watcher) = rearm.upgrade() else {
                return;
            };
            // A directory replaced since is another one: watch it (one
            // gone for now is watched again at a later change).
            for dir in &watched {
                let _ = lock(&watcher).watch(dir, RecursiveMode::NonRecursive);
            }
            drop(watcher);
            let now = read();
            if now != last {
                on_change().await;
                last = now;
            }
        }
    });
    Ok(Following { _watcher: watcher })
}

fn lock(watcher: &Mutex<RecommendedWatcher>) -> std::sync::MutexGuard<'_, RecommendedWatcher> {
    watcher.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The directory holding `file`: `.` for a bare name.
pub(crate) fn parent_dir(file: &Path) -> PathBuf {
    match file.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
        _ => PathBuf::from("."),
    }
}
