//! Tools replaced on a running registry: every skill held to the new ones
//! at once ([`SkillRegistry::replace_tools`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{
    Contender, FailureKind, FileError, LoadFailure, ReloadEvent, ReloadOutcome, SkillRegistry,
    SkillSnapshot, SkillVersion, rejected,
};
use crate::runtime::{LoadError, SkillComponent};
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
    use crate::tools::{Access, StandIn, ToolSpec};

    /// Stand-ins named `names`.
    fn tools(names: &[&str]) -> ToolRegistry {
        let mut tools = ToolRegistry::new();
        for name in names {
            let spec = ToolSpec {
                name: (*name).to_owned(),
                description: "A tool.".into(),
                parameters: json!({"type": "object"}),
                access: Access::Read,
            };
            tools
                .register(Arc::new(StandIn::new(spec, "never called")))
                .unwrap();
        }
        tools
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
        let events = registry.replace_tools(tools(&["first"])).await;
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
        let events = registry.replace_tools(tools(&["first", "second"])).await;
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

        let events = registry.replace_tools(tools(&["first", "desk"])).await;
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
}
