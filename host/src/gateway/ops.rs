//! Operator routes: health, metrics, events, pending confirmations, models.

use std::convert::Infallible;
use std::sync::Arc;

use axum::Json;
use axum::extract::{FromRequestParts, State};
use axum::http::header;
use axum::http::request::Parts;
use axum::response::IntoResponse;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;
use serde_json::{Value, json};

use super::chat::answer_path;
use super::errors::{ApiError, ApiPath};
use super::openai::confirmation_json;
use super::{AppState, Mount};
use crate::embed::metrics::CONTENT_TYPE;
use crate::embed::{EventId, FeedError, Health, HostEvent, NotAnEventId};
use crate::text;

/// `GET /healthz`: always 200 while the process serves (liveness), with
/// [`SkillHost::health`](crate::embed::SkillHost::health) as the body.
pub async fn healthz(State(state): State<Arc<AppState>>, mount: Mount) -> Json<Health> {
    let listing = format!("the skill listing (GET {}/v1/skills)", mount.prefix());
    Json(state.host.health_pointing_to(&listing).await)
}

/// `GET /metrics`.
pub async fn metrics(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, CONTENT_TYPE)],
        state.host.metrics().encode(),
    )
}

/// `GET /v1/models`: the configured model, or none.
pub async fn models(State(state): State<Arc<AppState>>) -> Json<Value> {
    let models: Vec<Value> = served_model(&state)
        .as_deref()
        .into_iter()
        .map(model_json)
        .collect();
    Json(json!({"object": "list", "data": models}))
}

/// `GET /v1/models/{id}`: the configured model by its id (OpenAI's
/// `models.retrieve`, which some clients call before chatting).
pub async fn model(
    State(state): State<Arc<AppState>>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Value>, ApiError> {
    match served_model(&state) {
        Some(model) if model == id => Ok(Json(model_json(&model))),
        served => Err(ApiError::not_found(
            "model_not_found",
            format!(
                "the model `{}` is not served here ({})",
                text::escaped(&id, text::OUTSIDE_TEXT_BYTES),
                match served {
                    Some(model) => format!("this gateway serves `{model}`"),
                    None => "no LLM is configured".into(),
                }
            ),
        )
        .with_param("model")),
    }
}

fn served_model(state: &AppState) -> Option<String> {
    state.host.llm().ok().map(|llm| llm.config().model.clone())
}

fn model_json(model: &str) -> Value {
    json!({"id": model, "object": "model", "created": 0, "owned_by": "skillhost"})
}

/// `GET /v1/confirmations`: every pending confirmation, soonest to expire
/// first.
pub async fn pending_confirmations(
    State(state): State<Arc<AppState>>,
    mount: Mount,
) -> Json<Value> {
    let pending: Vec<Value> = state
        .host
        .confirmations()
        .pending()
        .iter()
        .map(|pending| confirmation_json(pending, &answer_path(&mount, pending)))
        .collect();
    Json(json!({"object": "list", "data": pending}))
}

/// `GET /v1/tools`: the tools skills may call and unlock now (an MCP
/// server's as last listed), by name, each with its access, whether a call
/// waits for a person's approval, its parameters and, for an MCP server's,
/// the server.
pub async fn tools(State(state): State<Arc<AppState>>) -> Json<Value> {
    let policy = &state.host.agent().config().confirmation;
    let servers = state.host.mcp_tool_servers();
    let tools: Vec<Value> = state
        .host
        .tools()
        .specs()
        .map(|spec| {
            let mut tool = json!({
                "object": "tool",
                "name": spec.name,
                "access": spec.access,
                "approval": policy.requires(spec),
                "description": spec.description,
                "parameters": spec.parameters,
            });
            if let Some(server) = servers.get(&spec.name) {
                tool["server"] = json!(server);
            }
            tool
        })
        .collect();
    Json(json!({"object": "list", "data": tools}))
}

/// `GET /v1/events`: the host's events as SSE, named by their `type`, each
/// with its `id`. A client coming back with `Last-Event-ID` gets those it
/// missed first, as far as the host keeps them; one that lost events (fell
/// behind, or came back too late) gets a `lagged` event saying how many.
/// Ends when the gateway shuts down.
pub async fn events(
    State(state): State<Arc<AppState>>,
    LastEventId(after): LastEventId,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    host_event_stream(&state, after, |received| match received {
        Ok((id, event)) => Relay::Send(
            match serde_json::to_string(&event) {
                Ok(data) => Event::default().event(event.kind()).data(data),
                Err(error) => Event::default()
                    .event("error")
                    .data(json!({"error": error.to_string()}).to_string()),
            }
            .id(id.to_string()),
        ),
        Err(FeedError::Missed { count, unknown_id }) => Relay::Send(
            Event::default()
                .event("lagged")
                .data(json!({"missed": count, "unknown_id": unknown_id}).to_string()),
        ),
        Err(FeedError::Ended) => Relay::End,
    })
}

/// The `Last-Event-ID` header: the id of the last event a client that
/// comes back got. One that is no id the host gives is refused.
pub(super) struct LastEventId(pub Option<EventId>);

impl<S: Sync> FromRequestParts<S> for LastEventId {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        let Some(value) = parts.headers.get("last-event-id") else {
            return Ok(Self(None));
        };
        let id = value.to_str().ok().and_then(|text| text.parse().ok());
        id.map(|id| Self(Some(id))).ok_or_else(|| {
            ApiError::bad_request(
                "invalid_last_event_id",
                format!(
                    "Last-Event-ID `{}` is {NotAnEventId}",
                    text::escaped(
                        &String::from_utf8_lossy(value.as_bytes()),
                        text::OUTSIDE_TEXT_BYTES
                    )
                ),
            )
            .with_param("Last-Event-ID")
        })
    }
}

/// What a stream of the host's events does with one thing received.
pub(super) enum Relay {
    Send(Event),
    Skip,
    End,
}

/// The host's events after `after` (from now on without it), as `relay`
/// turns each into an SSE event (or none), until `relay` ends the stream or
/// the gateway shuts down.
pub(super) fn host_event_stream<R>(
    state: &AppState,
    after: Option<EventId>,
    relay: R,
) -> Sse<impl Stream<Item = Result<Event, Infallible>> + use<R>>
where
    R: Fn(Result<(EventId, HostEvent), FeedError>) -> Relay + Send + 'static,
{
    let feed = state.host.follow_events(after);
    let closing = state.closing.subscribe();
    let stream = futures::stream::unfold(
        (feed, closing, relay),
        |(mut feed, mut closing, relay)| async move {
            loop {
                let received = tokio::select! {
                    _ = closing.wait_for(|closing| *closing) => return None,
                    received = feed.recv() => received,
                };
                match relay(received) {
                    Relay::Send(event) => return Some((Ok(event), (feed, closing, relay))),
                    Relay::Skip => {}
                    Relay::End => return None,
                }
            }
        },
    );
    Sse::new(stream).keep_alive(KeepAlive::default())
}
