//! W3C Trace Context carried through a run: read from what starts it (a
//! gateway request's `traceparent` and `tracestate` headers, an MCP
//! `tools/call`'s `params._meta`), kept with it while it waits on disk, and
//! sent on with every call it makes to another service — the LLM (headers),
//! HTTP tools (headers), MCP servers (`params._meta`, as MCP's SEP-414 says,
//! and headers over HTTP) — so that their spans join the caller's trace.
//!
//! When the host's own spans are exported (an OpenTelemetry layer records
//! them: the binary's OTLP export), a request's or run's span is a child of
//! the caller's, and each call goes out from inside the host's span of it
//! (a tool call, an LLM call), which is the parent the service's spans hang
//! from ([`TraceContext::to_send`]). The layer is tracing-opentelemetry
//! 0.32's: an embedder's of another release is not seen, and then, as when
//! the spans are not exported, the caller's parent id goes on unchanged:
//! the services' spans hang from the caller's span, the nearest one a trace
//! backend has. `tracestate` goes with it untouched. A malformed
//! `traceparent` is no trace context at all (nothing is sent); a malformed
//! `tracestate` is dropped and the `traceparent` kept, as the W3C
//! recommendation allows.
//!
//! A process started by a traced job (a CI step, a batch script) finds its
//! context in the environment, as OpenTelemetry's environment-variable
//! carrier passes it ([`TraceContext::from_env`]): the CLI's `run`, `ask`
//! and `chat` run in it.

use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The header (and `_meta` key) naming the caller's trace and span.
pub const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
/// The header (and `_meta` key) carrying vendors' own trace data.
pub const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

/// The environment variable a process is handed its caller's
/// `traceparent` in (OpenTelemetry's environment-variable carrier).
pub const TRACEPARENT_VAR: &str = "TRACEPARENT";
/// The environment variable beside [`TRACEPARENT_VAR`] with the `tracestate`.
pub const TRACESTATE_VAR: &str = "TRACESTATE";

/// The longest `tracestate` passed on: the W3C recommendation's 512
/// characters, beyond which vendors may cut members anyway.
const MAX_TRACESTATE: usize = 512;

/// Where a run sits in its caller's distributed trace. Cheap to clone.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Carried", into = "Carried")]
pub struct TraceContext {
    /// `00-<trace id>-<parent id>-<flags>`, as sent on: a later version's
    /// header is read for its first four fields and sent as version `00`,
    /// the one this host knows.
    traceparent: String,
    tracestate: Option<String>,
}

impl TraceContext {
    /// The context of a `traceparent` value and the `tracestate` beside it;
    /// `None` when `traceparent` is not a valid one.
    pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Option<Self> {
        let mut parts = traceparent.split('-');
        let (version, trace, parent, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let hex = |part: &str, len: usize| {
            part.len() == len && part.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        };
        let not_zero = |part: &str| part.bytes().any(|b| b != b'0');
        // Version 00 has exactly four parts; later versions may add some.
        let parts_fit = version != "00" || parts.next().is_none();
        let valid = hex(version, 2)
            && version != "ff"
            && parts_fit
            && hex(trace, 32)
            && not_zero(trace)
            && hex(parent, 16)
            && not_zero(parent)
            && hex(flags, 2);
        valid.then(|| Self {
            traceparent: format!("00-{trace}-{parent}-{flags}"),
            tracestate: tracestate
                .filter(|state| passable(state))
                .map(str::to_owned),
        })
    }

    /// The context `headers` carry: their `traceparent`, with their
    /// `tracestate` (several headers joined, as one list).
    /// Two `traceparent` headers are none: which one is meant is unknown.
    pub fn from_headers(headers: &HeaderMap) -> Option<Self> {
        let mut traceparents = headers.get_all(TRACEPARENT).iter();
        let traceparent = traceparents.next()?.to_str().ok()?;
        if traceparents.next().is_some() {
            return None;
        }
        let states: Option<Vec<&str>> = headers
            .get_all(TRACESTATE)
            .iter()
            .map(|value| value.to_str().ok())
            .collect();
        let tracestate = states
            .filter(|states| !states.is_empty())
            .map(|s| s.join(","));
        Self::parse(traceparent, tracestate.as_deref())
    }

    /// The context an MCP request's `params._meta` carries (SEP-414).
    pub fn from_meta(meta: &Value) -> Option<Self> {
        let traceparent = meta.get(TRACEPARENT.as_str())?.as_str()?;
        let tracestate = meta.get(TRACESTATE.as_str()).and_then(Value::as_str);
        Self::parse(traceparent, tracestate)
    }

    /// The context the process was started in: the environment's
    /// [`TRACEPARENT_VAR`] and [`TRACESTATE_VAR`]. `Ok(None)` without a
    /// `TRACEPARENT`.
    pub fn from_env() -> Result<Option<Self>, InvalidTraceparent> {
        let Some(traceparent) = std::env::var_os(TRACEPARENT_VAR) else {
            return Ok(None);
        };
        let traceparent = traceparent.to_string_lossy();
        let tracestate = std::env::var(TRACESTATE_VAR).ok();
        Self::parse(&traceparent, tracestate.as_deref())
            .map(Some)
            .ok_or_else(|| InvalidTraceparent(traceparent.into_owned()))
    }

    /// The context to send on with a call made now, within `run`'s trace:
    /// the current span's own when an OpenTelemetry layer records spans
    /// (the call's span is then the parent of the service's), else `run`'s.
    pub fn to_send(run: Option<&Self>) -> Option<Self> {
        Self::of_current_span().or_else(|| run.cloned())
    }

    /// The current span's context, when an OpenTelemetry layer records it.
    pub fn of_current_span() -> Option<Self> {
        let context = tracing::Span::current().context();
        let span = context.span();
        let ids = span.span_context();
        if !ids.is_valid() {
            return None;
        }
        let state = ids.trace_state().header();
        Some(Self {
            traceparent: format!(
                "00-{}-{}-{:02x}",
                ids.trace_id(),
                ids.span_id(),
                ids.trace_flags().to_u8()
            ),
            tracestate: Some(state).filter(|state| passable(state)),
        })
    }

    /// Makes the caller's span the parent of `span` (just made, not yet
    /// entered), for an OpenTelemetry layer that records it; nothing
    /// without one.
    pub fn adopt(&self, span: &tracing::Span) {
        let hex = |from: usize, to: usize| &self.traceparent[from..to];
        let parent = SpanContext::new(
            TraceId::from_hex(hex(3, 35)).expect("checked when parsed"),
            SpanId::from_hex(hex(36, 52)).expect("checked when parsed"),
            TraceFlags::new(u8::from_str_radix(hex(53, 55), 16).expect("checked when parsed")),
            true,
            self.tracestate
                .as_deref()
                .and_then(|state| state.parse::<TraceState>().ok())
                .unwrap_or_default(),
        );
        // Without a layer (or a span it does not record) there is no
        // parent to set: that is not an error.
        let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(parent));
    }

    /// The trace's id: 32 lowercase hex digits.
    pub fn trace_id(&self) -> &str {
        &self.traceparent[3..35]
    }

    /// The `traceparent` value sent on.
    pub fn traceparent(&self) -> &str {
        &self.traceparent
    }

    /// The `tracestate` value sent on, when the caller gave a valid one.
    pub fn tracestate(&self) -> Option<&str> {
        self.tracestate.as_deref()
    }

    /// Adds the context to `headers`, unless they name a `traceparent`
    /// already (one a tool's configuration sets or forwards on purpose).
    pub fn add_to_headers(&self, headers: &mut HeaderMap) {
        if headers.contains_key(TRACEPARENT) {
            return;
        }
        let value = |text: &str| HeaderValue::from_str(text).expect("checked when parsed");
        headers.insert(TRACEPARENT, value(&self.traceparent));
        if let Some(state) = &self.tracestate {
            headers.insert(TRACESTATE, value(state));
        }
    }

    /// Adds the context to an MCP request's `params._meta` (SEP-414),
    /// making the `_meta` object when there is none.
    pub fn add_to_meta(&self, params: &mut Map<String, Value>) {
        let meta = params
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(meta) = meta {
            meta.insert(TRACEPARENT.to_string(), self.traceparent.clone().into());
            if let Some(state) = &self.tracestate {
                meta.insert(TRACESTATE.to_string(), state.clone().into());
            }
        }
    }
}

/// A `traceparent` that is not a valid one: what it was.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a W3C traceparent (`00-<32 hex digits>-<16 hex digits>-<2 hex digits>`): {0:?}")]
pub struct InvalidTraceparent(pub String);

/// Whether a `tracestate` may be passed on as it is: printable ASCII (what
/// its list members are made of), within the recommended length.
fn passable(state: &str) -> bool {
    !state.trim().is_empty()
        && state.len() <= MAX_TRACESTATE
        && state.bytes().all(|b| matches!(b, b' '..=b'~'))
}

/// A [`TraceContext`] as a kept run writes it down: read back through
/// [`TraceContext::parse`], so a hand-edited file cannot smuggle an invalid
/// header in.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Carried {
    traceparent: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tracestate: Option<String>,
}

impl TryFrom<Carried> for TraceContext {
    type Error = InvalidTraceparent;

    fn try_from(carried: Carried) -> Result<Self, InvalidTraceparent> {
        Self::parse(&carried.traceparent, carried.tracestate.as_deref())
            .ok_or(InvalidTraceparent(carried.traceparent))
    }
}

impl From<TraceContext> for Carried {
    fn from(context: TraceContext) -> Self {
        Self {
            traceparent: context.traceparent,
            tracestate: context.tracestate,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

    #[test]
    fn a_traceparent_is_read_only_when_it_is_well_formed() {
        let valid = format!("00-{TRACE}-00f067aa0ba902b7-01");
        let context = TraceContext::parse(&valid, None).expect("valid");
        assert_eq!(context.trace_id(), TRACE);
        assert_eq!(context.traceparent(), valid);
        // A later version is read for its first four fields, sent as 00.
        let later = TraceContext::parse(&format!("01-{TRACE}-00f067aa0ba902b7-01-more"), None);
        assert_eq!(later.as_ref().map(TraceContext::traceparent), Some(&*valid));
        for malformed in [
            format!("00-{TRACE}-00f067aa0ba902b7-01-more"),
            format!("ff-{TRACE}-00f067aa0ba902b7-01"),
            format!("00-{}-00f067aa0ba902b7-01", TRACE.to_uppercase()),
            format!("00-{}-00f067aa0ba902b7-01", "0".repeat(32)),
            format!("00-{TRACE}-0000000000000000-01"),
            format!("00-{TRACE}-00f067aa0ba902b7"),
            format!("00-{TRACE}-00f067aa0ba902b7-1"),
            String::new(),
        ] {
            assert_eq!(TraceContext::parse(&malformed, None), None, "{malformed}");
        }
    }

    #[test]
    fn a_tracestate_goes_with_its_traceparent_when_it_can_be_passed_on() {
        let traceparent = format!("00-{TRACE}-00f067aa0ba902b7-01");
        let mut headers = HeaderMap::new();
        headers.insert(TRACEPARENT, traceparent.parse().unwrap());
        headers.append(TRACESTATE, "congo=t61rcWkgMzE".parse().unwrap());
        headers.append(TRACESTATE, "rojo=00f067aa0ba902b7".parse().unwrap());
        let context = TraceContext::from_headers(&headers).expect("valid");
        assert_eq!(
            context.tracestate(),
            Some("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
        );
        headers.append(TRACEPARENT, traceparent.parse().unwrap());
        assert_eq!(TraceContext::from_headers(&headers), None);
        for dropped in ["", " ", "caf\u{e9}=1", &"a=b,".repeat(200)] {
            let context = TraceContext::parse(&traceparent, Some(dropped)).expect("valid");
            assert_eq!(context.tracestate(), None, "{dropped:?}");
        }
    }

    #[test]
    fn the_context_is_sent_in_headers_and_mcp_meta_and_read_back_from_them() {
        let context = TraceContext::parse(
            &format!("00-{TRACE}-00f067aa0ba902b7-01"),
            Some("congo=t61rcWkgMzE"),
        )
        .unwrap();
        let mut headers = HeaderMap::new();
        context.add_to_headers(&mut headers);
        assert_eq!(
            TraceContext::from_headers(&headers).as_ref(),
            Some(&context)
        );
        // A traceparent a tool sets on purpose stays.
        let own = format!("00-{}-00f067aa0ba902b7-00", "1".repeat(32));
        let mut configured = HeaderMap::new();
        configured.insert(TRACEPARENT, own.parse().unwrap());
        context.add_to_headers(&mut configured);
        assert_eq!(configured[TRACEPARENT], own.as_str());

        let mut params = json!({"name": "lookup", "_meta": {"progressToken": 7}});
        context.add_to_meta(params.as_object_mut().unwrap());
        assert_eq!(params["_meta"]["progressToken"], 7);
        assert_eq!(
            TraceContext::from_meta(&params["_meta"]).as_ref(),
            Some(&context)
        );
        let mut bare = Map::new();
        context.add_to_meta(&mut bare);
        assert_eq!(bare["_meta"]["tracestate"], "congo=t61rcWkgMzE");
    }

    #[test]
    fn a_kept_context_is_read_back_only_when_valid() {
        let context =
            TraceContext::parse(&format!("00-{TRACE}-00f067aa0ba902b7-01"), None).unwrap();
        let written = serde_json::to_value(&context).unwrap();
        assert_eq!(written, json!({"traceparent": context.traceparent()}));
        let read: TraceContext = serde_json::from_value(written).unwrap();
        assert_eq!(read, context);
        let forged = json!({"traceparent": "00-x-y-01\r\nX-Admin: 1"});
        let error = serde_json::from_value::<TraceContext>(forged).unwrap_err();
        assert!(
            error.to_string().contains("not a W3C traceparent"),
            "{error}"
        );
    }

    #[test]
    fn with_an_opentelemetry_layer_a_span_hangs_from_the_caller_and_calls_go_out_from_it() {
        use opentelemetry::trace::TracerProvider as _;
        use tracing_subscriber::layer::SubscriberExt;

        let caller =
            TraceContext::parse(&format!("00-{TRACE}-00f067aa0ba902b7-01"), Some("shop=7"))
                .unwrap();
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("run");
            caller.adopt(&span);
            let _in_run = span.enter();
            let sent = TraceContext::to_send(Some(&caller)).expect("the run's span");
            assert_eq!(sent.trace_id(), TRACE);
            assert_ne!(
                sent.traceparent(),
                caller.traceparent(),
                "the caller's span"
            );
            assert_eq!(sent.tracestate(), Some("shop=7"));
        });
        // Without a layer, the caller's context goes on as it came.
        assert_eq!(TraceContext::to_send(Some(&caller)), Some(caller));
        assert_eq!(TraceContext::to_send(None), None);
    }
}
