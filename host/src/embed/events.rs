//! What a [`SkillHost`](super::SkillHost) reports to its subscribers: reloads,
//! replaced trust, tools and limits, and the skill invocations and
//! confirmations of every run it starts.
//!
//! Each run's [`AgentEvent`]s pass through an observer on their way to the
//! run's caller. The observer records metrics (synchronously, so no figure is
//! lost) and publishes the events subscribers care about as [`HostEvent`]s
//! on the host's [`EventLog`] (numbered, the latest kept for a follower
//! that comes back; a subscriber that falls behind is told how many it
//! missed).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::broadcast;

use super::feed::{EventFeed, EventId, EventLog};
use super::metrics::{HostMetrics, Live};
use crate::agent::{
    AgentEvent, CallOutcome, ConfirmationId, PendingConfirmation, Resolution, RunId, RunTracker,
    SkillPath,
};
use crate::runtime::{Limits, RuntimeConfig};
use crate::skills::signature::{Fingerprint, SignaturePolicy};
use crate::skills::{ReloadEvent, SkillName, SkillRegistry};
use crate::tools::ToolRegistry;

/// One thing that happened in a host, for [`SkillHost::subscribe`](super::SkillHost::subscribe).
/// Serialized with a `type` field naming the variant (`reload`, `trust`,
/// `tools`, `limits`, `invocation`, `confirmation_pending`,
/// `confirmation_resolved`).
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum HostEvent {
    /// A skill file changed and the registry followed (or refused it).
    Reload(ReloadEvent),
    /// The signature policy was replaced: a key added, rotated or revoked.
    /// What that unloaded or loaded follows as reloads.
    Trust(TrustChange),
    /// The tools were replaced: an MCP server's listed again, or the
    /// embedder's own. What that unloaded or loaded follows as reloads.
    Tools(ToolsChange),
    /// The sandbox limits invocations start with were replaced.
    Limits(LimitsChange),
    /// A skill invocation finished, whether the agent or a caller of
    /// [`SkillHost::invoke`](super::SkillHost::invoke) started it.
    Invocation(Invocation),
    /// A run waits for a person's approval of a call.
    ConfirmationPending(PendingConfirmation),
    /// A pending confirmation was answered, expired, or was withdrawn by
    /// its run's end: every pending one gets one.
    ConfirmationResolved {
        /// The confirmation.
        id: ConfirmationId,
        /// The run that waited.
        run: RunId,
        /// The tool it was for.
        tool: String,
        /// How it ended.
        resolution: Resolution,
    },
}

impl HostEvent {
    /// The `type` field: `reload`, `trust`, `tools`, `limits`,
    /// `invocation`, `confirmation_pending` or `confirmation_resolved` (the
    /// SSE event name in the gateway).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Reload(_) => "reload",
            Self::Trust(_) => "trust",
            Self::Tools(_) => "tools",
            Self::Limits(_) => "limits",
            Self::Invocation(_) => "invocation",
            Self::ConfirmationPending(_) => "confirmation_pending",
            Self::ConfirmationResolved { .. } => "confirmation_resolved",
        }
    }
}

/// A signature policy replaced on a running host
/// ([`SkillHost::replace_signature_policy`](super::SkillHost::replace_signature_policy)):
/// what it trusts now, against what it trusted before.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct TrustChange {
    /// Whether signatures are checked (`false`: `AllowUnsigned`).
    pub signatures_required: bool,
    /// The keys trusted now.
    pub keys: Vec<Fingerprint>,
    /// Of those, the ones not trusted before.
    pub added: Vec<Fingerprint>,
    /// The keys trusted before and no longer.
    pub removed: Vec<Fingerprint>,
}

impl TrustChange {
    /// From what `before` trusted to what `after` does.
    pub(super) fn between(before: &SignaturePolicy, after: &SignaturePolicy) -> Self {
        let (old, keys) = (before.trusted_keys(), after.trusted_keys());
        Self {
            signatures_required: matches!(after, SignaturePolicy::Require(_)),
            added: keys
                .iter()
                .filter(|key| !old.contains(key))
                .copied()
                .collect(),
            removed: old
                .iter()
                .filter(|key| !keys.contains(key))
                .copied()
                .collect(),
            keys,
        }
    }
}

/// Tools changed on a running host (an MCP server's listed again, or
/// [`SkillHost::update_tools`](super::SkillHost::update_tools)): what
/// changed, by tool name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ToolsChange {
    /// The MCP server whose tools were listed again; `None` when the
    /// embedder changed the tools.
    pub server: Option<String>,
    /// The tools new.
    pub added: Vec<String>,
    /// The tools gone.
    pub removed: Vec<String>,
    /// The tools kept whose description, parameters or access changed.
    pub changed: Vec<String>,
}

impl ToolsChange {
    /// From the tools `before` to those `after`, `server`'s doing.
    pub(super) fn between(
        server: Option<String>,
        before: &ToolRegistry,
        after: &ToolRegistry,
    ) -> Self {
        let names = |tools: &ToolRegistry, of: &ToolRegistry, differ: bool| -> Vec<String> {
            tools
                .specs()
                .filter(|spec| match of.get(&spec.name) {
                    None => !differ,
                    Some(other) => differ && other.spec() != *spec,
                })
                .map(|spec| spec.name.clone())
                .collect()
        };
        Self {
            server,
            added: names(after, before, false),
            removed: names(before, after, false),
            changed: names(after, before, true),
        }
    }

    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

/// Sandbox limits replaced on a running host
/// ([`SkillHost::replace_limits`](super::SkillHost::replace_limits)): those
/// in force now, and whose changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct LimitsChange {
    /// The limits of a skill without limits of its own.
    pub limits: Limits,
    /// The skills with limits of their own, and theirs.
    pub skill_limits: BTreeMap<SkillName, Limits>,
    /// The skills loaded, or named before or now, whose limits changed.
    pub changed: Vec<SkillName>,
}

impl LimitsChange {
    /// From the limits of `before` to those of `after`, for the skills
    /// `loaded` and those either names; `None` when they are the same.
    pub(super) fn between<'a>(
        before: &'a RuntimeConfig,
        after: &'a RuntimeConfig,
        loaded: impl IntoIterator<Item = &'a SkillName>,
    ) -> Option<Self> {
        if (before.limits, &before.skill_limits) == (after.limits, &after.skill_limits) {
            return None;
        }
        let named = before.skill_limits.keys().chain(after.skill_limits.keys());
        let skills: BTreeSet<&SkillName> = loaded.into_iter().chain(named).collect();
        Some(Self {
            limits: after.limits,
            skill_limits: after.skill_limits.clone(),
            changed: skills
                .into_iter()
                .filter(|name| before.limits_for(name) != after.limits_for(name))
                .cloned()
                .collect(),
        })
    }
}

/// A finished skill invocation.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Invocation {
    /// The run it belonged to.
    pub run: RunId,
    /// The skill.
    pub skill: SkillName,
    /// Deterministic steps or the sub-agent.
    pub path: SkillPath,
    /// What it produced, or why it failed.
    pub outcome: CallOutcome,
    /// How long it took, excluding time spent waiting for a person.
    pub duration_ms: f64,
}

/// What every run of a host reports to: the metrics and the subscribers.
pub(super) struct Observers {
    pub(super) metrics: HostMetrics,
    events: EventLog,
    /// Its tools tell a model's invented function names from real ones.
    skills: Arc<SkillRegistry>,
}

impl Observers {
    /// Observers of a host over `skills` whose gauges read `live`.
    pub(super) fn new(skills: Arc<SkillRegistry>, live: Live) -> Self {
        let metrics = HostMetrics::observing(live);
        Self {
            metrics,
            events: EventLog::new(),
            skills,
        }
    }

    pub(super) fn subscribe(&self) -> broadcast::Receiver<HostEvent> {
        self.events.subscribe()
    }

    pub(super) fn follow(&self, after: Option<EventId>) -> EventFeed {
        self.events.follow(after)
    }

    fn publish(&self, make: impl FnOnce() -> HostEvent) {
        self.events.publish(make);
    }

    /// Logs replaced tools and tells the subscribers.
    pub(super) fn tools(&self, change: &ToolsChange) {
        let tools = |names: &[String]| listed(names.iter().map(String::as_str));
        tracing::info!(
            server = change
                .server
                .as_deref()
                .unwrap_or("none (the embedder's tools)"),
            added = tools(&change.added),
            removed = tools(&change.removed),
            changed = tools(&change.changed),
            "tools replaced"
        );
        self.publish(|| HostEvent::Tools(change.clone()));
    }

    /// Logs a replaced trust store (an audit trail of who is trusted) and
    /// tells the subscribers.
    pub(super) fn trust(&self, change: &TrustChange) {
        let listed = |keys: &[Fingerprint]| {
            keys.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(",")
        };
        tracing::info!(
            signatures_required = change.signatures_required,
            keys = listed(&change.keys),
            added = listed(&change.added),
            removed = listed(&change.removed),
            "trust store replaced"
        );
        self.publish(|| HostEvent::Trust(change.clone()));
    }

    /// Logs replaced limits (an audit trail of what bounds the skills) and
    /// tells the subscribers.
    pub(super) fn limits(&self, change: &LimitsChange) {
        tracing::info!(
            limits = %change.limits,
            skills_with_their_own = change.skill_limits.len(),
            changed = listed(change.changed.iter().map(SkillName::as_str)),
            "sandbox limits replaced"
        );
        self.publish(|| HostEvent::Limits(change.clone()));
    }

    pub(super) fn reload(&self, event: ReloadEvent, skills_loaded: usize) {
        self.metrics.reload(&event, skills_loaded);
        self.publish(|| HostEvent::Reload(event));
    }

    /// The tracker of the run `run`, for [`AgentBuilder::observe_runs`](crate::agent::AgentBuilder::observe_runs).
    pub(super) fn track(self: &Arc<Self>, run: &RunId) -> RunTracker {
        let mut tracker = RunTracking {
            observers: self.clone(),
            run: run.clone(),
            skill: None,
            waiting_since: None,
        };
        Box::new(move |event| tracker.observe(event))
    }
}

/// Names for a log line: `a, b`, or `none`.
fn listed<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let names: Vec<&str> = names.collect();
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

/// Forwards the reload events of `registry`, which `reloads` receives, to
/// `observers` until the registry is gone or the task is aborted.
pub(super) async fn forward_reloads(
    mut reloads: broadcast::Receiver<ReloadEvent>,
    registry: Arc<SkillRegistry>,
    observers: Arc<Observers>,
) {
    loop {
        match reloads.recv().await {
            Ok(event) => observers.reload(event, registry.snapshot().len()),
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                tracing::warn!(missed, "reload events missed by the host's observer");
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// A skill invocation in progress.
struct SkillInFlight {
    name: SkillName,
    path: SkillPath,
    started: Instant,
    /// Time spent waiting for people, excluded from the latency.
    waited: Duration,
}

/// Follows one run's events.
struct RunTracking {
    observers: Arc<Observers>,
    run: RunId,
    /// A run invokes skills one at a time (calls execute in order).
    skill: Option<SkillInFlight>,
    waiting_since: Option<Instant>,
}

impl RunTracking {
    fn observe(&mut self, event: &AgentEvent) {
        let observers = &*self.observers;
        match event {
            AgentEvent::SkillStarted { skill, path, .. } => {
                self.skill = Some(SkillInFlight {
                    name: skill.clone(),
                    path: *path,
                    started: Instant::now(),
                    waited: Duration::ZERO,
                });
            }
            AgentEvent::SkillFinished { skill, outcome } => {
                let Some(in_flight) = self.skill.take().filter(|s| &s.name == skill) else {
                    return;
                };
                let took = in_flight.started.elapsed().saturating_sub(in_flight.waited);
                observers.metrics.invocation(skill, outcome, took);
                observers.publish(|| {
                    HostEvent::Invocation(Invocation {
                        run: self.run.clone(),
                        skill: skill.clone(),
                        path: in_flight.path,
                        outcome: outcome.clone(),
                        duration_ms: took.as_secs_f64() * 1000.0,
                    })
                });
            }
            AgentEvent::ToolCalled { tool, outcome, .. } => {
                let known = observers.skills.tools().contains(tool)
                    || tool == crate::agent::catalog::LOAD_SKILL;
                observers
                    .metrics
                    .tool_call(if known { tool } else { "unknown" }, outcome);
            }
            AgentEvent::Usage { caller, usage } => observers.metrics.llm_usage(caller, usage),
            AgentEvent::ConfirmationPending(pending) => {
                self.waiting_since = Some(Instant::now());
                observers.metrics.confirmation_opened();
                observers.publish(|| HostEvent::ConfirmationPending(pending.clone()));
            }
            AgentEvent::ConfirmationResolved {
                id,
                tool,
                resolution,
            } => {
                if let (Some(since), Some(skill)) = (self.waiting_since.take(), &mut self.skill) {
                    skill.waited += since.elapsed();
                }
                observers.metrics.confirmation_resolved(resolution);
                observers.publish(|| HostEvent::ConfirmationResolved {
                    id: id.clone(),
                    run: self.run.clone(),
                    tool: tool.clone(),
                    resolution: resolution.clone(),
                });
            }
            // Rounds, compactions, handovers, text: nothing the host counts.
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::tools::{Access, StandIn, ToolSpec};

    fn tools(specs: &[(&str, Access)]) -> ToolRegistry {
        let mut tools = ToolRegistry::new();
        for (name, access) in specs {
            let spec = ToolSpec {
                name: (*name).to_owned(),
                description: "A tool.".into(),
                parameters: json!({"type": "object"}),
                access: *access,
            };
            tools
                .register(Arc::new(StandIn::new(spec, "never called")))
                .unwrap();
        }
        tools
    }

    #[test]
    fn a_tools_change_names_the_tools_added_removed_and_changed() {
        let before = tools(&[
            ("kept", Access::Read),
            ("gone", Access::Read),
            ("now", Access::Read),
        ]);
        let after = tools(&[
            ("kept", Access::Read),
            ("now", Access::Write),
            ("new", Access::Read),
        ]);
        let change = ToolsChange::between(Some("crm".into()), &before, &after);
        assert_eq!(
            (change.added, change.removed, change.changed),
            (
                vec!["new".to_owned()],
                vec!["gone".to_owned()],
                vec!["now".to_owned()]
            )
        );
        assert!(ToolsChange::between(None, &before, &before).is_empty());
    }
}
