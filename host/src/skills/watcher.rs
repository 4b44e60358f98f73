//! Hot reload: watch the skills directory and keep the registry in line.
//!
//! Every create, modify, delete or rename of a `*.wasm` file schedules a
//! sync of that path once it has been quiet for [`DEBOUNCE`]. A file still
//! being written when the sync runs fails to verify or compile and is
//! refused — the previous good version keeps serving — and the writer's
//! next event syncs it again.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::SkillRegistry;
use super::registry::is_skill_file;

/// Quiet time after a file's last event before it is synced. Default: 20 ms —
/// long enough to coalesce the bursts of events one `cp` or editor save
/// makes, short enough that a rename-over answers within tens of
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

/// Starts watching `dir` (not recursively) and syncing `registry` with it.
/// Must be called inside a tokio runtime.
pub fn watch(registry: Arc<SkillRegistry>, dir: &Path) -> Result<WatchHandle, WatchError> {
    let (sender, receiver) = mpsc::unbounded_channel();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        match event {
            Ok(event) => {
                for path in event.paths.into_iter().filter(|path| is_skill_file(path)) {
                    // The receiver is gone only when the handle was dropped.
                    let _ = sender.send(path);
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
    let task = tokio::spawn(debounce_and_sync(registry, receiver));
    Ok(WatchHandle {
        _watcher: watcher,
        task,
    })
}

async fn debounce_and_sync(
    registry: Arc<SkillRegistry>,
    mut changes: mpsc::UnboundedReceiver<PathBuf>,
) {
    let mut due: HashMap<PathBuf, Instant> = HashMap::new();
    loop {
        let next_due = due.values().min().copied();
        let change = match next_due {
            Some(deadline) => tokio::select! {
                change = changes.recv() => change,
                () = tokio::time::sleep_until(deadline) => {
                    let now = Instant::now();
                    let ready: Vec<PathBuf> = due
                        .iter()
                        .filter(|(_, at)| **at <= now)
                        .map(|(path, _)| path.clone())
                        .collect();
                    for path in ready {
                        due.remove(&path);
                        registry.sync_path(&path).await;
                    }
                    continue;
                }
            },
            None => changes.recv().await,
        };
        let Some(path) = change else { return };
        due.insert(path, Instant::now() + DEBOUNCE);
    }
}
