//! `/mcp`: the skills as the tools of an MCP server over Streamable HTTP,
//! for remote MCP clients, behind the API keys like every API route.
//!
//! Stateless: no session. `POST` answers each message with a JSON body,
//! never an event stream, so nothing is asked of the client. `GET` opens
//! the stream of what the server says unasked: `notifications/tools/list_changed`
//! whenever a reload changes the skills. A call is an invocation as at
//! `POST /v1/skills/{name}/invoke`, on record under `/v1/runs/{id}` and
//! acting for the request's caller: a write the confirmation policy holds
//! parks the run, and the call's result says so, with the confirmation and
//! where an approver answers it (the answer's response, and the run's
//! record, then carry the skill's result).
//!
//! A request must be `application/json`: a web page of another origin can
//! then not send one without the preflight that CORS refuses, and one with
//! an `Origin` that `cors_origins` does not list is refused outright.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::errors::ApiError;
use super::openai::pending_text;
use super::ops::{LastEventId, Relay, host_event_stream};
use super::skills::{Invoked, drive_invocation, start_invocation};
use super::{AppState, Mount, RunStart};
use crate::agent::{CallOutcome, RunOptions};
use crate::embed::mcp::{
    self, INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, ToolsNews, answer, error_answer,
    list_changed,
};
use crate::tools::mcp::PROTOCOL_VERSIONS;

/// Answers one JSON-RPC message.
pub async fn message(
    State(state): State<Arc<AppState>>,
    mount: Mount,
    RunStart(options): RunStart,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err((status, reason)) = check_headers(&state, &headers) {
        return refused(status, INVALID_REQUEST, &reason);
    }
    let Ok(message) = serde_json::from_slice::<Value>(&body) else {
        return refused(StatusCode::BAD_REQUEST, PARSE_ERROR, "the body is not JSON");
    };
    let id = message.get("id").cloned();
    let Some(method) = message.get("method").and_then(Value::as_str) else {
        return match id {
            // An answer to a request of the server's: it sends none.
            Some(_) => StatusCode::ACCEPTED.into_response(),
            None => refused(
                StatusCode::BAD_REQUEST,
                INVALID_REQUEST,
                "a message needs a method (a batch is not taken)",
            ),
        };
    };
    let Some(id) = id else {
        // A notification: nothing to answer.
        return StatusCode::ACCEPTED.into_response();
    };
    let params = message.get("params").cloned().unwrap_or(json!({}));
    let answered = match method {
        "tools/call" => call(&state, &mount, options, &id, &params).await,
        other => mcp::answer_request(
            &state.host,
            options.skill_scope(),
            &id,
            other,
            &params,
            true,
        ),
    };
    Json(answered).into_response()
}

/// `GET /mcp`: the stream of the server's own messages, as server-sent
/// events: `notifications/tools/list_changed` whenever a reload changes the
/// skills (or events were missed), with the reload's event id. A client
/// coming back with `Last-Event-ID` is told again of a reload it missed.
/// Ends when the gateway shuts down.
pub async fn stream(
    State(state): State<Arc<AppState>>,
    last_event_id: Result<LastEventId, ApiError>,
    headers: HeaderMap,
) -> Response {
    let accepts_stream = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|value| value.contains("text/event-stream"));
    if !accepts_stream {
        let reason = "GET opens the server's event stream: send Accept: text/event-stream";
        return refused(StatusCode::NOT_ACCEPTABLE, INVALID_REQUEST, reason);
    }
    if let Err((status, reason)) = check_origin_and_version(&state, &headers) {
        return refused(status, INVALID_REQUEST, &reason);
    }
    let after = match last_event_id {
        Ok(LastEventId(after)) => after,
        Err(error) => return refused(error.status(), INVALID_REQUEST, error.message()),
    };
    host_event_stream(&state, after, |received| match ToolsNews::of(&received) {
        ToolsNews::Changed => {
            let message = Event::default()
                .event("message")
                .data(list_changed().to_string());
            Relay::Send(match received {
                Ok((id, _)) => message.id(id.to_string()),
                Err(_) => message,
            })
        }
        ToolsNews::Same => Relay::Skip,
        ToolsNews::Ended => Relay::End,
    })
    .into_response()
}

/// Refuses a request of the wrong kind, or from a web page of an origin
/// the gateway does not serve, or of a protocol revision it does not
/// speak.
fn check_headers(state: &AppState, headers: &HeaderMap) -> Result<(), (StatusCode, String)> {
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/json"));
    if !json {
        return Err((
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "send the message as application/json".into(),
        ));
    }
    check_origin_and_version(state, headers)
}

/// Refuses a request from a web page of an origin the gateway does not
/// serve, or of a protocol revision it does not speak.
fn check_origin_and_version(
    state: &AppState,
    headers: &HeaderMap,
) -> Result<(), (StatusCode, String)> {
    if let Some(origin) = headers.get(header::ORIGIN) {
        let allowed = state
            .config
            .cors_origins
            .iter()
            .any(|allowed| allowed.as_str().as_bytes() == origin.as_bytes());
        if !allowed {
            return Err((
                StatusCode::FORBIDDEN,
                "this origin is not among the gateway's cors_origins".into(),
            ));
        }
    }
    if let Some(version) = headers.get("mcp-protocol-version") {
        let known = version
            .to_str()
            .is_ok_and(|version| PROTOCOL_VERSIONS.contains(&version));
        if !known {
            return Err((
                StatusCode::BAD_REQUEST,
                format!(
                    "unsupported MCP-Protocol-Version; this gateway speaks {}",
                    PROTOCOL_VERSIONS.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

fn refused(status: StatusCode, code: i64, reason: &str) -> Response {
    (status, Json(error_answer(&Value::Null, code, reason))).into_response()
}

/// Runs the skill a `tools/call` names: the answer to request `id`.
async fn call(
    state: &AppState,
    mount: &Mount,
    options: RunOptions,
    id: &Value,
    params: &Value,
) -> Value {
    let name = params.get("name").and_then(Value::as_str).unwrap_or("");
    let arguments = params.get("arguments").cloned().unwrap_or(json!({}));
    let invocation = match start_invocation(state, name, arguments, options) {
        Ok(invocation) => invocation,
        // Not one of the client's tools: unknown, or outside its key's scope.
        Err(error)
            if matches!(
                error.status(),
                StatusCode::NOT_FOUND | StatusCode::FORBIDDEN
            ) =>
        {
            return error_answer(id, INVALID_PARAMS, error.message());
        }
        Err(error) => return answer(id, mcp::error_result(error.message())),
    };
    let result = match drive_invocation(state, invocation, mount).await {
        Ok(Invoked::Done(mut body)) => mcp::call_result(CallOutcome::Done {
            result: body["result"].take(),
        }),
        Ok(Invoked::Pending {
            body,
            pending,
            answer_path,
        }) => json!({
            "content": [{"type": "text", "text": pending_text(&pending, &answer_path)}],
            "structuredContent": body,
        }),
        Err(error) => mcp::error_result(error.message()),
    };
    answer(id, result)
}
