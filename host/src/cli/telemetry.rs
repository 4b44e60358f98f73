//! OTLP export of the host's spans — requests, runs, skill invocations,
//! agent rounds, tool and LLM calls, with the fields the logs show — as
//! OpenTelemetry's environment variables configure it: on when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is
//! set (unless `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`),
//! over OTLP/HTTP, protobuf unless the protocol variable says `http/json`.
//! The SDK reads the rest (`OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_SERVICE_NAME`,
//! `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER`, `OTEL_BSP_*`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::{Key, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use tracing::Subscriber;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;

use super::console;

/// The service name the spans are exported under, unless the environment
/// names one.
const SERVICE_NAME: &str = "skillhost";

/// The log targets of the host's own spans (the library's modules and the
/// binary's), the ones exported.
const HOST_TARGETS: &str = "skillhost";

/// The exporter the environment asked for. Dropping it sends what is left
/// to send, so hold it until the command is done.
pub struct SpanExport {
    provider: SdkTracerProvider,
}

impl SpanExport {
    /// The export the environment asks for; `None` when it asks for none.
    /// `Err`: why the one it asks for cannot be made, for a warning once
    /// the logs are set up (the command runs on without it).
    pub fn from_env() -> Result<Option<Self>, String> {
        let set = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
        let endpoint = set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .or_else(|| set("OTEL_EXPORTER_OTLP_ENDPOINT"));
        let disabled = set("OTEL_SDK_DISABLED").is_some_and(|value| value == "true")
            || set("OTEL_TRACES_EXPORTER").is_some_and(|value| value == "none");
        let Some(endpoint) = endpoint.filter(|_| !disabled) else {
            return Ok(None);
        };
        // The SDK would send to localhost:4318 instead of an endpoint it
        // cannot read.
        if !reqwest::Url::parse(&endpoint).is_ok_and(|url| matches!(url.scheme(), "http" | "https"))
        {
            return Err(format!(
                "OTLP endpoint `{endpoint}`: not an http(s) URL; no spans are exported"
            ));
        }
        let protocol = match set("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .or_else(|| set("OTEL_EXPORTER_OTLP_PROTOCOL"))
            .as_deref()
        {
            None | Some("http/protobuf") => Protocol::HttpBinary,
            Some("http/json") => Protocol::HttpJson,
            Some(other) => {
                return Err(format!(
                    "OTLP protocol `{other}`: this build sends spans over http/protobuf or \
                     http/json only (a collector's port 4318); no spans are exported"
                ));
            }
        };
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(protocol)
            .build()
            .map_err(|error| format!("the OTLP span exporter: {error}; no spans are exported"))?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(Told {
                exporter,
                endpoint,
                failing: AtomicBool::new(false),
            })
            .with_resource(resource())
            .build();
        Ok(Some(Self { provider }))
    }

    /// The layer that hands the host's spans (and the events in them) to
    /// the exporter: the `skillhost` targets' at info, whatever the log
    /// level, so that quiet logs do not mean an empty trace.
    pub fn layer<S>(&self) -> impl Layer<S> + use<S>
    where
        S: Subscriber + for<'span> LookupSpan<'span>,
    {
        tracing_opentelemetry::layer()
            .with_tracer(self.provider.tracer(SERVICE_NAME))
            .with_filter(Targets::new().with_target(HOST_TARGETS, tracing::Level::INFO))
    }
}

impl Drop for SpanExport {
    fn drop(&mut self) {
        if let Err(error) = self.provider.shutdown() {
            console::warn(&format!("exporting the last spans: {error}"));
        }
    }
}

/// An exporter whose failures are told on stderr, once until it works
/// again: the SDK would drop the spans silently.
#[derive(Debug)]
struct Told<E> {
    exporter: E,
    endpoint: String,
    failing: AtomicBool,
}

impl<E: SpanExporter> SpanExporter for Told<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let result = self.exporter.export(batch).await;
        let failed = result.is_err();
        if self.failing.swap(failed, Ordering::Relaxed) != failed {
            console::warn(&match &result {
                Err(error) => format!(
                    "exporting spans to {}: {error}; spans are dropped until it works again",
                    self.endpoint
                ),
                Ok(()) => format!("exporting spans to {} works again", self.endpoint),
            });
        }
        result
    }

    fn shutdown_with_timeout(&mut self, timeout: Duration) -> OTelSdkResult {
        self.exporter.shutdown_with_timeout(timeout)
    }

    fn force_flush(&mut self) -> OTelSdkResult {
        self.exporter.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.exporter.set_resource(resource);
    }
}

/// What the spans are of: the environment's service name and attributes,
/// else `skillhost`, with this build's version.
fn resource() -> Resource {
    let detected = Resource::builder().build();
    let named = detected
        .get(&Key::new("service.name"))
        .is_some_and(|name| !name.as_str().starts_with("unknown_service"));
    let builder = Resource::builder()
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    if named {
        builder.build()
    } else {
        builder.with_service_name(SERVICE_NAME).build()
    }
}
