//! An OpenTelemetry collector on loopback: it takes OTLP/HTTP exports in
//! JSON (`OTEL_EXPORTER_OTLP_PROTOCOL=http/json`) and keeps their spans.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::routing::post;
use serde_json::Value;

/// One span as it was exported, with its resource's service name.
#[derive(Debug, Clone)]
pub struct ExportedSpan {
    pub service: String,
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    /// 1 internal, 2 server, 3 client.
    pub kind: u64,
    pub attributes: Value,
}

impl ExportedSpan {
    /// The value of the string attribute `key`.
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes.as_array()?.iter().find_map(|attribute| {
            (attribute["key"] == key).then(|| attribute["value"]["stringValue"].as_str())?
        })
    }
}

pub struct Collector {
    /// What OTEL_EXPORTER_OTLP_ENDPOINT is set to.
    pub endpoint: String,
    received: Arc<Mutex<Vec<Value>>>,
}

impl Collector {
    pub async fn start() -> Self {
        let received = Arc::new(Mutex::new(Vec::new()));
        let app = Router::new().route(
            "/v1/traces",
            post({
                let received = received.clone();
                async move |body: axum::body::Bytes| {
                    let export: Value = serde_json::from_slice(&body).expect("an OTLP JSON export");
                    received.lock().unwrap().push(export);
                    "{}"
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { endpoint, received }
    }

    /// Every span exported so far.
    pub fn spans(&self) -> Vec<ExportedSpan> {
        let received = self.received.lock().unwrap();
        let mut spans = Vec::new();
        for export in received.iter() {
            for resource in export["resourceSpans"].as_array().into_iter().flatten() {
                let service = resource["resource"]["attributes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|attribute| attribute["key"] == "service.name")
                    .and_then(|attribute| attribute["value"]["stringValue"].as_str())
                    .unwrap_or_default();
                let scoped = resource["scopeSpans"].as_array().into_iter().flatten();
                for span in scoped.flat_map(|scope| scope["spans"].as_array().into_iter().flatten())
                {
                    let text = |key: &str| span[key].as_str().unwrap_or_default().to_owned();
                    spans.push(ExportedSpan {
                        service: service.to_owned(),
                        name: text("name"),
                        trace_id: text("traceId"),
                        span_id: text("spanId"),
                        parent_span_id: text("parentSpanId"),
                        kind: span["kind"].as_u64().unwrap_or_default(),
                        attributes: span["attributes"].clone(),
                    });
                }
            }
        }
        spans
    }
}
