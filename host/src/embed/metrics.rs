//! Prometheus metrics of one [`SkillHost`](super::SkillHost).
//!
//! Each host has its own registry (no global recorder), so several hosts in
//! one process — an embedder's, a test's — keep separate counts. The host
//! records what its runs and reloads report; the gateway adds its HTTP
//! figures ([`HostMetrics::record_http`]). [`HostMetrics::encode`] renders
//! the OpenMetrics text format, which Prometheus scrapes natively.
//!
//! | metric | labels | what |
//! |---|---|---|
//! | `skillhost_invocations_total` | `skill`, `outcome` (`done`, `failed`) | skill invocations, direct or by the agent |
//! | `skillhost_invocation_duration_seconds` | `skill` | invocation latency, excluding time waiting for a person |
//! | `skillhost_tool_calls_total` | `tool`, `outcome` (`done`, `failed`, `refused`, `declined`) | tool calls by agents and skills |
//! | `skillhost_errors_total` | `kind` (`skill_failed`, `tool_failed`, `tool_refused`) | failures inside runs |
//! | `skillhost_llm_calls_total` | `caller` (`main`, `skill`) | LLM calls that returned |
//! | `skillhost_llm_tokens_total` | `type` (`prompt`, `completion`) | tokens the LLM server counted |
//! | `skillhost_confirmations_total` | `resolution` (`pending`, `approved`, `rejected`, `expired`, `withdrawn`) | confirmations opened (`pending`) and how each ended: `pending` minus the others is how many wait now |
//! | `skillhost_reloads_total` | `outcome` (`loaded`, `restored`, `unloaded`, `rejected`, `untrusted`, `unresolved`) | changes to the skills directory, skills a new trust store no longer accepts, and skills whose tools went |
//! | `skillhost_config_reloads_total` | `part`, `outcome` (`applied`, `kept`) | settings the embedder read again ([`HostMetrics::record_config_reload`]; `serve` and `mcp` at SIGHUP: the parts of the config file, the trust store, the API keys file): put in force, or refused with what was in force kept |
//! | `skillhost_skills_loaded` | | skills serving now |
//! | `skillhost_instance_slots` | | size of the sandbox's instance pool |
//! | `skillhost_instances_live` | | instances alive now (invocations running, manifests being read) |
//! | `skillhost_instances_waiting` | | invocations and loads waiting for a free slot |
//! | `skillhost_runs_at_work` | | runs started and not ended, less those waiting for a person: what a shutdown waits for |
//! | `skillhost_http_requests_total` | `route`, `method` (standard methods, else `other`), `status` | gateway requests |
//! | `skillhost_http_request_duration_seconds` | `route` | gateway latency until the response starts |
//! | `skillhost_http_errors_total` | `code` | gateway error responses by error code |

use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
/// The registry type [`HostMetrics::register`] takes: prometheus-client's,
/// the version this crate is built with.
pub use prometheus_client::registry::Registry;

use crate::agent::llm::Usage;
use crate::agent::{CallOutcome, Caller, Confirmations, Resolution};
use crate::runtime::Runtime;
use crate::skills::{ReloadEvent, ReloadOutcome, SkillName};

/// The prefix of every metric's name.
const PREFIX: &str = "skillhost";

/// The content type of [`HostMetrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Latency buckets: 100 µs doubling to about 3.3 s (16 buckets), wide enough
/// for a warm sandboxed invocation (tens of µs) and an LLM round trip alike.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_1, 2.0, 16))
}

type LatencyFamily<L> = Family<L, Histogram, fn() -> Histogram>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SkillOutcome {
    skill: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SkillLabel {
    skill: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolOutcome {
    tool: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Kind {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallerLabel {
    caller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenType {
    r#type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResolutionLabel {
    resolution: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PartOutcome {
    part: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HttpRequest {
    route: String,
    method: &'static str,
    status: u16,
}

/// `method` as a label value: one of HTTP's standard methods, or `other`.
fn method_label(method: &str) -> &'static str {
    const STANDARD: [&str; 9] = [
        "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE",
    ];
    STANDARD
        .into_iter()
        .find(|standard| *standard == method)
        .unwrap_or("other")
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabel {
    route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabel {
    code: &'static str,
}

/// What the gauges read at each scrape, so that they are never stale: the
/// instance pool, and the runs (through their confirmations, which know
/// which runs wait).
#[derive(Clone)]
pub(super) struct Live {
    pub(super) runtime: Runtime,
    pub(super) confirmations: Confirmations,
}

/// The gauges read from [`Live`].
struct LiveGauges(Live);

impl std::fmt::Debug for LiveGauges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("LiveGauges").finish_non_exhaustive()
    }
}

impl Collector for LiveGauges {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let slots = self.0.runtime.instance_slots();
        for (name, help, value) in [
            (
                "instance_slots",
                "Size of the sandbox's instance pool",
                slots.total,
            ),
            (
                "instances_live",
                "Skill instances alive now (invocations running, manifests being read)",
                slots.in_use,
            ),
            (
                "instances_waiting",
                "Invocations and loads waiting for a free instance slot or room in the pool",
                slots.waiting,
            ),
            (
                "runs_at_work",
                "Runs started and not ended, less those waiting for a person's answer",
                self.0.confirmations.activity().at_work(),
            ),
        ] {
            let gauge = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
            let metric = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
            gauge.encode(metric)?;
        }
        Ok(())
    }
}

/// The metrics of one host, shared by all its clones
/// ([`SkillHost::metrics`](super::SkillHost::metrics)); recording is
/// lock-free once a label set has been seen. Served by the gateway's
/// `/metrics` ([`HostMetrics::encode`]); an application with a registry of
/// its own adds them to it with [`HostMetrics::register`].
pub struct HostMetrics {
    registry: Registry,
    families: Families,
    /// Read for the gauges at each scrape.
    live: Option<Live>,
}

/// The families a host records into; cloning one shares its values.
#[derive(Clone)]
struct Families {
    invocations: Family<SkillOutcome, Counter>,
    invocation_seconds: LatencyFamily<SkillLabel>,
    tool_calls: Family<ToolOutcome, Counter>,
    errors: Family<Kind, Counter>,
    llm_calls: Family<CallerLabel, Counter>,
    llm_tokens: Family<TokenType, Counter>,
    confirmations: Family<ResolutionLabel, Counter>,
    reloads: Family<OutcomeLabel, Counter>,
    config_reloads: Family<PartOutcome, Counter>,
    skills_loaded: Gauge,
    http_requests: Family<HttpRequest, Counter>,
    http_seconds: LatencyFamily<RouteLabel>,
    http_errors: Family<CodeLabel, Counter>,
}

impl Default for Families {
    fn default() -> Self {
        Self {
            invocations: Family::default(),
            invocation_seconds: Family::new_with_constructor(latency_histogram),
            tool_calls: Family::default(),
            errors: Family::default(),
            llm_calls: Family::default(),
            llm_tokens: Family::default(),
            confirmations: Family::default(),
            reloads: Family::default(),
            config_reloads: Family::default(),
            skills_loaded: Gauge::default(),
            http_requests: Family::default(),
            http_seconds: Family::new_with_constructor(latency_histogram),
            http_errors: Family::default(),
        }
    }
}

impl std::fmt::Debug for HostMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostMetrics").finish_non_exhaustive()
    }
}

impl Default for HostMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl HostMetrics {
    /// Every family registered, all at zero.
    pub fn new() -> Self {
        Self::with_live(None)
    }

    /// Like [`HostMetrics::new`], with the gauges of the instance pool and
    /// the runs, read from `live` at each scrape.
    pub(super) fn observing(live: Live) -> Self {
        Self::with_live(Some(live))
    }

    fn with_live(live: Option<Live>) -> Self {
        let mut metrics = Self {
            registry: Registry::default(),
            families: Families::default(),
            live,
        };
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        metrics.registry = registry;
        metrics
    }

    /// Registers these metrics in `registry`, under the prefix `skillhost`,
    /// so that an application's own `/metrics` serves them beside its own:
    /// the same values [`HostMetrics::encode`] shows, as they change.
    pub fn register(&self, registry: &mut Registry) {
        self.register_families(registry.sub_registry_with_prefix(PREFIX));
    }

    fn register_families(&self, registry: &mut Registry) {
        let families = self.families.clone();
        registry.register(
            "invocations",
            "Skill invocations, direct or by the agent, by outcome",
            families.invocations,
        );
        registry.register(
            "invocation_duration_seconds",
            "Skill invocation latency, excluding time waiting for a person",
            families.invocation_seconds,
        );
        registry.register(
            "tool_calls",
            "Tool calls by agents and skills, by outcome",
            families.tool_calls,
        );
        registry.register("errors", "Failures inside runs, by kind", families.errors);
        registry.register(
            "llm_calls",
            "LLM calls that returned a response",
            families.llm_calls,
        );
        registry.register(
            "llm_tokens",
            "Tokens counted by the LLM server",
            families.llm_tokens,
        );
        registry.register(
            "confirmations",
            "Confirmations opened (pending) and how they ended",
            families.confirmations,
        );
        registry.register(
            "reloads",
            "Changes to the skills directory, by outcome",
            families.reloads,
        );
        registry.register(
            "config_reloads",
            "Settings read again by the embedder, by part: put in force (applied) or refused (kept)",
            families.config_reloads,
        );
        registry.register(
            "skills_loaded",
            "Skills serving now",
            families.skills_loaded,
        );
        registry.register(
            "http_requests",
            "Gateway requests by route, method and status",
            families.http_requests,
        );
        registry.register(
            "http_request_duration_seconds",
            "Gateway latency until the response starts, by route",
            families.http_seconds,
        );
        registry.register(
            "http_errors",
            "Gateway error responses by error code",
            families.http_errors,
        );
        if let Some(live) = &self.live {
            registry.register_collector(Box::new(LiveGauges(live.clone())));
        }
    }

    /// The OpenMetrics text exposition (content type [`CONTENT_TYPE`]).
    pub fn encode(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("writing to a String cannot fail");
        text
    }

    pub(super) fn invocation(&self, skill: &SkillName, outcome: &CallOutcome, took: Duration) {
        let outcome = match outcome {
            CallOutcome::Done { .. } => "done",
            _ => {
                self.error("skill_failed");
                "failed"
            }
        };
        let skill = skill.to_string();
        self.families
            .invocations
            .get_or_create(&SkillOutcome {
                skill: skill.clone(),
                outcome,
            })
            .inc();
        self.families
            .invocation_seconds
            .get_or_create(&SkillLabel { skill })
            .observe(took.as_secs_f64());
    }

    /// A tool call; `tool` is the name as called, or `unknown` when no such
    /// function exists (a model's invention must not create label values).
    pub(super) fn tool_call(&self, tool: &str, outcome: &CallOutcome) {
        let outcome = match outcome {
            CallOutcome::Done { .. } => "done",
            CallOutcome::Failed { .. } => {
                self.error("tool_failed");
                "failed"
            }
            CallOutcome::Refused { .. } => {
                self.error("tool_refused");
                "refused"
            }
            CallOutcome::Declined { .. } => "declined",
        };
        self.families
            .tool_calls
            .get_or_create(&ToolOutcome {
                tool: tool.to_owned(),
                outcome,
            })
            .inc();
    }

    fn error(&self, kind: &'static str) {
        self.families.errors.get_or_create(&Kind { kind }).inc();
    }

    pub(super) fn llm_usage(&self, caller: &Caller, usage: &Usage) {
        let caller = match caller {
            Caller::Main => "main",
            Caller::Skill(_) => "skill",
        };
        self.families
            .llm_calls
            .get_or_create(&CallerLabel { caller })
            .inc();
        for (kind, tokens) in [
            ("prompt", usage.prompt_tokens),
            ("completion", usage.completion_tokens),
        ] {
            self.families
                .llm_tokens
                .get_or_create(&TokenType { r#type: kind })
                .inc_by(tokens);
        }
    }

    pub(super) fn confirmation_opened(&self) {
        self.confirmation("pending");
    }

    pub(super) fn confirmation_resolved(&self, resolution: &Resolution) {
        self.confirmation(resolution.decision());
    }

    fn confirmation(&self, resolution: &'static str) {
        self.families
            .confirmations
            .get_or_create(&ResolutionLabel { resolution })
            .inc();
    }

    pub(super) fn reload(&self, event: &ReloadEvent, skills_loaded: usize) {
        let outcome = match event.outcome {
            ReloadOutcome::Loaded => "loaded",
            ReloadOutcome::Restored => "restored",
            // Never broadcast: a sync that changed nothing is not counted.
            ReloadOutcome::Unchanged => "unchanged",
            ReloadOutcome::Unloaded => "unloaded",
            ReloadOutcome::Rejected { .. } => "rejected",
            ReloadOutcome::Untrusted { .. } => "untrusted",
            ReloadOutcome::Unresolved { .. } => "unresolved",
        };
        self.families
            .reloads
            .get_or_create(&OutcomeLabel { outcome })
            .inc();
        self.set_skills_loaded(skills_loaded);
    }

    /// Counts a reading again of the host's settings by the embedder — a
    /// config file at SIGHUP, say — that changed something: `part` names
    /// what was read (`http_tools`, `trust_store`…), `applied` whether it
    /// was put in force or refused, what was in force kept. An alert on
    /// `outcome="kept"` catches a reload that left the old settings serving.
    pub fn record_config_reload(&self, part: &'static str, applied: bool) {
        let outcome = if applied { "applied" } else { "kept" };
        let label = PartOutcome { part, outcome };
        self.families.config_reloads.get_or_create(&label).inc();
    }

    pub(super) fn set_skills_loaded(&self, skills: usize) {
        self.families
            .skills_loaded
            .set(i64::try_from(skills).unwrap_or(i64::MAX));
    }

    /// One gateway request: `route` is the route's pattern (e.g.
    /// `/v1/skills/{name}`), never the raw path, and a method outside HTTP's
    /// standard ones counts as `other`, so that clients cannot add label
    /// values. `error_code` is the error's `code` when the response is an
    /// error.
    pub fn record_http(
        &self,
        route: &str,
        method: &str,
        status: u16,
        took: Duration,
        error_code: Option<&'static str>,
    ) {
        self.families
            .http_requests
            .get_or_create(&HttpRequest {
                route: route.to_owned(),
                method: method_label(method),
                status,
            })
            .inc();
        self.families
            .http_seconds
            .get_or_create(&RouteLabel {
                route: route.to_owned(),
            })
            .observe(took.as_secs_f64());
        if let Some(code) = error_code {
            self.families
                .http_errors
                .get_or_create(&CodeLabel { code })
                .inc();
        }
    }
}
