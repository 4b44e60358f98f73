//! `/mcp`: the skills as the tools of an MCP server over Streamable HTTP,
//! for remote MCP clients, behind the API keys like every API route.
//!
//! A call is an invocation as at `POST /v1/skills/{name}/invoke`, on
//! record under `/v1/runs/{id}` and acting for the request's caller. `GET`
//! opens the stream of what the server says unasked:
//! `notifications/tools/list_changed` whenever a reload changes the skills.
//!
//! Sessions are the client's choice. `initialize` opens one
//! (`Mcp-Session-Id`, [`super::mcp_sessions`]); when its client says it can
//! ask its user (`elicitation`) and takes an event stream, a `tools/call`
//! in it is answered as server-sent events: an `elicitation/create` for
//! each write the call waits on (the client `POST`s the answer in the
//! session), then the call's result. Otherwise — no session, a client that
//! cannot ask, a policy that names who may approve — `POST` answers with a
//! JSON body, and a write the confirmation policy holds parks the run: the
//! call's result says so, with the confirmation and where an approver
//! answers it (the answer's response, and the run's record, then carry
//! the skill's result). `DELETE` ends a session.
//!
//! A request must be `application/json`: a web page of another origin can
//! then not send one without the preflight that CORS refuses, and one with
//! an `Origin` that `cors_origins` does not list is refused outright.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::SystemTime;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::errors::ApiError;
use super::keys::Principal;
use super::mcp_sessions::{McpSession, SESSION_HEADER};
use super::openai::pending_text;
use super::ops::{LastEventId, Relay, host_event_stream};
use super::skills::{Invoked, Nobody, OnTheSpot, drive_invocation_asking, start_invocation};
use super::{AppState, Mount, RunStart};
use crate::agent::{CallOutcome, PendingConfirmation, RunOptions};
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
    principal: Option<Extension<Principal>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err((status, reason)) = check_headers(&state, &headers) {
        return refused(status, INVALID_REQUEST, &reason);
    }
    let Ok(message) = serde_json::from_slice::<Value>(&body) else {
        return refused(StatusCode::BAD_REQUEST, PARSE_ERROR, "the body is not JSON");
    };
    let principal = principal.map(|Extension(Principal(name))| name);
    let session = match session_of(&state, &headers, principal.as_deref()) {
        Ok(session) => session,
        Err(unknown) => return unknown.into_response(),
    };
    let id = message.get("id").cloned();
    let Some(method) = message.get("method").and_then(Value::as_str) else {
        return match id {
            // An answer to a request of the server's, asked in a session.
            Some(id) => {
                if let (Some(session), Some(id)) = (&session, id.as_u64()) {
                    session.asked.answered(id, message);
                }
                StatusCode::ACCEPTED.into_response()
            }
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
    if method == "tools/call" {
        let options = mcp::in_callers_trace(options, &params);
        return match session.filter(|session| session.elicits && accepts_stream(&headers)) {
            Some(session) => call_asking(state, mount, options, session, principal, id, params),
            None => {
                Json(call(&state, &mount, options, &id, &params, &Nobody).await).into_response()
            }
        };
    }
    let answered = Json(mcp::answer_request(
        &state.host,
        options.skill_scope(),
        &id,
        method,
        &params,
        true,
    ));
    if method != "initialize" {
        return answered.into_response();
    }
    let elicits = params.pointer("/capabilities/elicitation").is_some();
    let opened = state.mcp_sessions.open(principal, elicits);
    ([(SESSION_HEADER, opened)], answered).into_response()
}

/// `DELETE /mcp`: ends the session the request names.
pub async fn end_session(
    State(state): State<Arc<AppState>>,
    principal: Option<Extension<Principal>>,
    headers: HeaderMap,
) -> Response {
    if let Err((status, reason)) = check_origin_and_version(&state, &headers) {
        return refused(status, INVALID_REQUEST, &reason);
    }
    let principal = principal.map(|Extension(Principal(name))| name);
    let Some(id) = headers.get(SESSION_HEADER) else {
        let reason = "name the session to end in the Mcp-Session-Id header";
        return refused(StatusCode::BAD_REQUEST, INVALID_REQUEST, reason);
    };
    let ended = id
        .to_str()
        .is_ok_and(|id| state.mcp_sessions.end(id, principal.as_deref()));
    if ended {
        StatusCode::NO_CONTENT.into_response()
    } else {
        UnknownSession.into_response()
    }
}

/// The session the request names (`Mcp-Session-Id`), if any: one that is
/// not open, or is another key's, is refused with a 404, which tells the
/// client to initialize again.
fn session_of(
    state: &AppState,
    headers: &HeaderMap,
    principal: Option<&str>,
) -> Result<Option<Arc<McpSession>>, UnknownSession> {
    let Some(id) = headers.get(SESSION_HEADER) else {
        return Ok(None);
    };
    id.to_str()
        .ok()
        .and_then(|id| state.mcp_sessions.get(id, principal))
        .map(Some)
        .ok_or(UnknownSession)
}

/// A request naming a session that is not open, or is another key's.
struct UnknownSession;

impl IntoResponse for UnknownSession {
    fn into_response(self) -> Response {
        let reason = "no such session (it ended or expired, or is another key's): initialize again";
        refused(StatusCode::NOT_FOUND, INVALID_REQUEST, reason)
    }
}

fn accepts_stream(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|value| value.contains("text/event-stream"))
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
    if !accepts_stream(&headers) {
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

/// Runs the skill a `tools/call` names, asking the session's client to ask
/// its user about each write that waits for a person: the answer to
/// request `id`, sent as server-sent events after the questions.
fn call_asking(
    state: Arc<AppState>,
    mount: Mount,
    options: RunOptions,
    session: Arc<McpSession>,
    principal: Option<String>,
    id: Value,
    params: Value,
) -> Response {
    let (out, messages) = mpsc::unbounded_channel::<Value>();
    tokio::spawn(async move {
        let user = ClientUser {
            state: &state,
            session: &session,
            out: &out,
            principal,
        };
        let answered = call(&state, &mount, options, &id, &params, &user).await;
        // The client may have gone: the run's record has the result.
        let _ = out.send(answered);
    });
    let stream = futures::stream::unfold(messages, |mut messages| async move {
        let message = messages.recv().await?;
        let event = Event::default().event("message").data(message.to_string());
        Some((Ok::<_, Infallible>(event), messages))
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// The user of a session's client, asked on the stream `out` of a call
/// whether the writes it waits on may run, answering on behalf of
/// `principal`. Not asked — the run is parked, to be answered at
/// `/v1/confirmations/{id}` — when the policy names who may approve (a
/// client's user cannot be named), or once the client is gone or the
/// gateway shuts down.
struct ClientUser<'a> {
    state: &'a AppState,
    session: &'a McpSession,
    out: &'a mpsc::UnboundedSender<Value>,
    principal: Option<String>,
}

impl OnTheSpot for ClientUser<'_> {
    async fn answer(&self, pending: &PendingConfirmation) -> bool {
        let Self {
            state,
            session,
            out,
            principal,
        } = self;
        if pending.separate_approver || pending.approvers.is_some() {
            return false;
        }
        let (asked, answer) = session.asked.ask();
        if out.send(mcp::approval_question(asked, pending)).is_err() {
            session.asked.forget(asked);
            return false;
        }
        let wait = pending
            .expires_at
            .duration_since(SystemTime::now())
            .unwrap_or_default();
        let mut closing = state.closing.subscribe();
        let answered = tokio::select! {
            answered = tokio::time::timeout(wait, answer) => answered,
            () = out.closed() => {
                session.asked.forget(asked);
                return false;
            }
            _ = closing.wait_for(|closing| *closing) => {
                session.asked.forget(asked);
                return false;
            }
        };
        match answered {
            Ok(Ok(answer)) => {
                let decision = mcp::approval_decision(&answer);
                // Refused only once it expired or its run ended: the run says so.
                let _ = state
                    .host
                    .answer(pending.id.as_str(), decision, principal.clone());
            }
            // No answer before it expired: the run says so.
            _ => session.asked.forget(asked),
        }
        true
    }
}

/// Runs the skill a `tools/call` names, `ask` answering the confirmations
/// it can: the answer to request `id`.
async fn call(
    state: &AppState,
    mount: &Mount,
    options: RunOptions,
    id: &Value,
    params: &Value,
    answerer: &impl OnTheSpot,
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
    let result = match drive_invocation_asking(state, invocation, mount, answerer).await {
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
