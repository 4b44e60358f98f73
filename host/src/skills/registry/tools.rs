//! Tools replaced on a running registry: every skill held to the new ones
//! at once ([`SkillRegistry::replace_tools`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{
    Contender, FailureKind, FileError, ReloadEvent, ReloadOutcome, SkillRegistry, SkillSnapshot,
};
use crate::runtime::LoadError;
use crate::tools::ToolRegistry;

impl SkillRegistry {
    /// Replaces the tools skills may call and unlock — an MCP server that
    /// lists other tools now, say — and holds every skill to them at once:
    ///
    /// - a skill serving that no longer fits them (a tool it calls or
    ///   unlocks is gone, or a tool now has its name) is unloaded in the
    ///   same swap that puts the tools in place
    ///   ([`ReloadOutcome::Unresolved`]), its file refused for its manifest;
    /// - content refused for its manifest (a tool it names was missing) is
    ///   tried again, and loads when it fits the new tools.
    ///
    /// Runs under way keep the tools and skills of the snapshot they
    /// started on. A load under way as the tools change checks its content
    /// again under the new ones before it installs. Returns what changed,
    /// each also broadcast.
    pub async fn replace_tools(&self, tools: ToolRegistry) -> Vec<ReloadEvent> {
        let _replacing = self.replacing.lock().await;
        let (mut events, waiting) = self.put_tools_in_place(Arc::new(tools)).await;
        self.sync_waiting(waiting).await;
        let refused_for_manifest: Vec<PathBuf> = self
            .snapshot()
            .failures()
            .filter(|failure| failure.kind == FailureKind::Manifest)
            .map(|failure| failure.path.clone())
            .collect();
        for path in refused_for_manifest {
            let Some((event, waiting)) = self.retry_manifest(&path).await else {
                continue;
            };
            if event.outcome != ReloadOutcome::Unchanged {
                events.push(event);
            }
            self.sync_waiting(waiting).await;
        }
        events
    }

    /// Swaps in a snapshot with `tools` and without the skills that no
    /// longer fit them; a skill kept to take a name over that no longer
    /// fits is refused for its manifest instead. Returns the events, and
    /// the files waiting for a name the unloaded skills freed.
    async fn put_tools_in_place(
        &self,
        tools: Arc<ToolRegistry>,
    ) -> (Vec<ReloadEvent>, Vec<PathBuf>) {
        let writer = self.writer.lock().await;
        let mut next = SkillSnapshot::clone(&self.current.load());
        next.tools = tools;
        let unfit: Vec<_> = next
            .skills()
            .filter_map(|skill| {
                let misfit = skill.component.manifest().check_against(&next.tools);
                let digest = skill.component.digest().to_owned();
                misfit
                    .err()
                    .map(|error| (skill.path.clone(), digest, error))
            })
            .collect();
        let mut events = Vec::new();
        for (path, digest, error) in unfit {
            let failure =
                FileError::Load(LoadError::Manifest(error)).into_failure(&path, Some(digest));
            let outcome = ReloadOutcome::Unresolved {
                reason: failure.reason.clone(),
            };
            events.push(ReloadEvent {
                old: next.withdraw(&path, failure),
                path,
                new: None,
                outcome,
            });
        }
        let tools = next.tools.clone();
        for failure in next.failures.values_mut() {
            let Some(Contender(skill)) = &failure.contender else {
                continue;
            };
            if let Err(error) = skill.component.manifest().check_against(&tools) {
                let error = FileError::Load(LoadError::Manifest(error));
                *failure = error.into_failure(&failure.path, failure.digest.clone());
            }
        }
        let waiting = self.commit(writer, next, &events);
        (events, waiting)
    }

    /// Tries the content of `path` again under the tools now in place when
    /// it is the content refused for its manifest; `None` when the file
    /// holds other content (its own sync is on its way) or none.
    async fn retry_manifest(&self, path: &Path) -> Option<(ReloadEvent, Vec<PathBuf>)> {
        let lock = self.syncing.of(path);
        let _syncing = lock.acquire().await;
        let (file, _share) = self.loader.read(path).await;
        let file = file.ok()?;
        let refused = self.snapshot().failure_for(path).is_some_and(|failure| {
            failure.kind == FailureKind::Manifest
                && failure.digest.as_deref() == Some(file.digest.as_str())
        });
        if !refused {
            return None;
        }
        self.load_content(path, file).await
    }
}
