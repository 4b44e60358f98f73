//! Tools changed on a running registry: every skill held to the new ones
//! at once ([`SkillRegistry::update_tools`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{
    Contender, FailureKind, FileError, LoadFailure, ReloadEvent, ReloadOutcome, SkillRegistry,
    SkillSnapshot, SkillVersion, rejected,
};
use crate::runtime::{LoadError, SkillComponent};
use crate::tools::ToolRegistry;

impl SkillRegistry {
    /// Changes the tools skills may call and unlock — an MCP server lists
    /// other tools now, an operator edited the HTTP tools — and holds every
    /// skill to them at once. `change` builds the new tools from those in
    /// place, or says there is nothing to change (`Ok(None)`); changes are
    /// made one at a time, so none builds on tools another is replacing and
    /// none is lost. An error from `change` changes nothing and is returned.
    ///
    /// - a skill serving that no longer fits them (a tool it calls or
    ///   unlocks is gone, or a tool now has its name) is unloaded in the
    ///   same swap that puts the tools in place
    ///   ([`ReloadOutcome::Unresolved`]), its file refused for its manifest;
    /// - content refused for its manifest (a tool it names was missing) is
    ///   tried again when a tool's name, description, parameters or access
    ///   changed, and loads when it fits the new tools.
    ///
    /// Runs under way keep the tools and skills of the snapshot they
    /// started on. A load under way as the tools change checks its content
    /// again under the new ones before it installs. Returns what changed,
    /// each also broadcast.
    pub async fn update_tools<E>(
        &self,
        change: impl FnOnce(&ToolRegistry) -> Result<Option<ToolRegistry>, E>,
    ) -> Result<Vec<ReloadEvent>, E> {
        let _replacing = self.replacing.lock().await;
        let current = self.tools();
        let Some(tools) = change(&current)? else {
            return Ok(Vec::new());
        };
        let specs_changed = !current.specs().eq(tools.specs());
        let (mut events, waiting) = self.put_tools_in_place(Arc::new(tools)).await;
        self.sync_waiting(waiting).await;
        if !specs_changed {
            // The same specs: no manifest fits now that did not before.
            return Ok(events);
        }
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
        Ok(events)
    }

    /// Swaps in a snapshot with `tools` and without the skills that no
    /// longer fit them; a skill kept to take a name over that no longer
    /// fits is refused for its manifest instead ([`ReloadOutcome::Rejected`]:
    /// what its file serves, if anything, stays). Returns the events, and
    /// the files waiting for a name the unloaded skills freed.
    async fn put_tools_in_place(
        &self,
        tools: Arc<ToolRegistry>,
    ) -> (Vec<ReloadEvent>, Vec<PathBuf>) {
        let writer = self.writer.lock().await;
        let mut next = SkillSnapshot::clone(&self.current.load());
        next.tools = tools;
        let unfit: Vec<LoadFailure> = next
            .skills()
            .filter_map(|skill| misfit(&skill.component, &next.tools, &skill.path))
            .collect();
        let mut events = Vec::new();
        for failure in unfit {
            let path = failure.path.clone();
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
        let unfit_contenders: Vec<LoadFailure> = next
            .failures
            .values()
            .filter_map(|failure| {
                let Contender(skill) = failure.contender.as_ref()?;
                misfit(&skill.component, &next.tools, &failure.path)
            })
            .collect();
        for refused in unfit_contenders {
            let serving = next
                .skill_at(&refused.path)
                .map(|skill| SkillVersion::of(&skill.component));
            events.push(ReloadEvent {
                path: refused.path.clone(),
                old: serving.clone(),
                new: serving,
                outcome: rejected(&refused),
            });
            next.fail(refused);
        }
        let waiting = self.commit(writer, next, &events);
        (events, waiting)
    }
}

/// The refusal of `component`, the content of `path`, for its manifest
/// when it does not fit `tools`.
fn misfit(component: &SkillComponent, tools: &ToolRegistry, path: &Path) -> Option<LoadFailure> {
    let error = component.manifest().check_against(tools).err()?;
    let digest = Some(component.digest().to_owned());
    Some(FileError::Load(LoadError::Manifest(error)).into_failure(path, digest))
}

impl SkillRegistry {
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

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::json;

    use super::*;
    use crate::runtime::{Runtime, RuntimeConfig};
    use crate::skills::pack::{DeclarativeSkill, Format};
    use crate::skills::signature::SignaturePolicy;
    use crate::tools::{Access, RegisterError, StandIn, Tool, ToolSpec};

    /// A stand-in named `name`.
    fn stand_in(name: &str) -> Arc<dyn Tool> {
        let spec = ToolSpec {
            name: name.to_owned(),
            description: "A tool.".into(),
            parameters: json!({"type": "object"}),
            access: Access::Read,
        };
        Arc::new(StandIn::new(spec, "never called"))
    }

    /// Stand-ins named `names`.
    fn tools(names: &[&str]) -> ToolRegistry {
        let mut tools = ToolRegistry::new();
        for name in names {
            tools.register(stand_in(name)).unwrap();
        }
        tools
    }

    /// Puts `tools` in place of those in `registry`.
    async fn replace(registry: &SkillRegistry, tools: ToolRegistry) -> Vec<ReloadEvent> {
        let replaced = registry.update_tools(|_| Ok::<_, RegisterError>(Some(tools)));
        replaced.await.unwrap()
    }

    /// Writes `file` in `dir`: the unsigned skill `name` calling `tool`.
    fn write_skill(dir: &Path, file: &str, name: &str, tool: &str) -> PathBuf {
        let yaml = format!(
            "name: {name}\nversion: 1.0.0\ndescription: Calls {tool}.\ntools: [{tool}]\n\
             parameters: {{type: object}}\ninstructions: Call {tool}.\n"
        );
        let skill = DeclarativeSkill::parse(&yaml, Format::Yaml, Path::new("s.yaml")).unwrap();
        let path = dir.join(file);
        std::fs::write(&path, skill.to_component().unwrap()).unwrap();
        path
    }

    async fn registry(dir: &Path, names: &[&str]) -> SkillRegistry {
        let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
        let tools = Arc::new(tools(names));
        let policy = SignaturePolicy::AllowUnsigned;
        SkillRegistry::load_dir(runtime, tools, policy, dir)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_skill_kept_to_take_a_name_over_is_refused_once_its_tool_goes_and_loads_when_it_is_back()
     {
        let dir = tempfile::tempdir().unwrap();
        let holder = write_skill(dir.path(), "a.wasm", "desk", "first");
        let contender = write_skill(dir.path(), "b.wasm", "desk", "second");
        let registry = registry(dir.path(), &["first", "second"]).await;
        let failure = registry.snapshot().failure_for(&contender).unwrap().clone();
        assert_eq!(failure.kind, FailureKind::NameTaken);

        // Its tool goes: no longer a contender, but refused for the tool.
        let events = replace(&registry, tools(&["first"])).await;
        let [refused] = events.as_slice() else {
            panic!("one change: {events:?}");
        };
        assert_eq!((&refused.path, &refused.new), (&contender, &None));
        assert!(matches!(
            refused.outcome,
            ReloadOutcome::Rejected {
                kind: FailureKind::Manifest,
                ..
            }
        ));
        let snapshot = registry.snapshot();
        let failure = snapshot.failure_for(&contender).unwrap();
        assert_eq!(failure.kind, FailureKind::Manifest);
        assert!(failure.reason.contains("`second`"), "{}", failure.reason);
        // So the freed name stays free.
        std::fs::remove_file(&holder).unwrap();
        registry.sync_path(&holder).await;
        assert!(registry.get("desk").is_none());

        // The tool is back: the file loads.
        let events = replace(&registry, tools(&["first", "second"])).await;
        let [loaded] = events.as_slice() else {
            panic!("one change: {events:?}");
        };
        assert_eq!(
            (&loaded.path, &loaded.outcome),
            (&contender, &ReloadOutcome::Loaded)
        );
        assert!(registry.get("desk").is_some());
    }

    #[tokio::test]
    async fn a_tool_taking_a_skills_name_unloads_the_skill() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_skill(dir.path(), "desk.wasm", "desk", "first");
        let registry = registry(dir.path(), &["first"]).await;
        let before = registry.snapshot();

        let events = replace(&registry, tools(&["first", "desk"])).await;
        let [unloaded] = events.as_slice() else {
            panic!("one change: {events:?}");
        };
        let ReloadOutcome::Unresolved { reason } = &unloaded.outcome else {
            panic!("not unresolved: {unloaded:?}");
        };
        assert_eq!(unloaded.path, path);
        assert!(
            reason.contains("`desk` is already the name of a tool"),
            "{reason}"
        );
        assert!(registry.get("desk").is_none());
        assert!(registry.tools().contains("desk"));
        // A run holding the snapshot before has both as they were.
        assert!(before.get("desk").is_some() && !before.tools().contains("desk"));
    }

    #[tokio::test]
    async fn changes_made_at_once_are_all_kept() {
        let dir = tempfile::tempdir().unwrap();
        let registry = Arc::new(registry(dir.path(), &["first"]).await);
        let changes = (0..16).map(|n| {
            let registry = registry.clone();
            tokio::spawn(async move {
                let added = registry.update_tools(|current| {
                    let mut next = ToolRegistry::clone(current);
                    next.register(stand_in(&format!("tool_{n}")))?;
                    Ok::<_, RegisterError>(Some(next))
                });
                added.await.unwrap();
            })
        });
        for change in changes.collect::<Vec<_>>() {
            change.await.unwrap();
        }
        let tools = registry.tools();
        assert!(tools.contains("first"));
        let lost: Vec<String> = (0..16)
            .map(|n| format!("tool_{n}"))
            .filter(|name| !tools.contains(name))
            .collect();
        assert!(lost.is_empty(), "changes lost: {lost:?}");
    }

    #[tokio::test]
    async fn a_change_that_fails_or_has_nothing_to_change_leaves_the_tools_in_place() {
        let dir = tempfile::tempdir().unwrap();
        write_skill(dir.path(), "a.wasm", "desk", "first");
        let registry = registry(dir.path(), &["first"]).await;
        let before = registry.tools();

        let failed = registry
            .update_tools(|_| Err::<Option<ToolRegistry>, _>("no such server"))
            .await;
        assert_eq!(failed.unwrap_err(), "no such server");
        let unchanged = registry.update_tools(|_| Ok::<_, RegisterError>(None));
        assert!(unchanged.await.unwrap().is_empty());
        assert!(Arc::ptr_eq(&before, &registry.tools()));
        assert!(registry.get("desk").is_some());
    }
}
