//! The skills as the tools of an MCP server: the messages `skillhost mcp`
//! (standard streams) and the gateway's `/mcp` (HTTP) both answer and send
//! with, so that the two transports describe and run skills alike.
//!
//! Each loaded skill is a tool named after it, its parameters the input
//! schema, marked read-only when every tool it may call only reads; a call
//! is an invocation ([`SkillHost::invoke`]), whose result is the tool's
//! structured content (and its text), and whose failure a result marked
//! `isError` that the client's model can read. A call whose `params._meta`
//! names a trace (`traceparent`, MCP's SEP-414) runs in it
//! ([`in_callers_trace`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::oneshot;

use super::{EventId, FeedError, HostEvent, SkillHost};
use crate::agent::{CallOutcome, Decision, PendingConfirmation, RunOptions};
use crate::scope::SkillScope;
use crate::tools::Access;
use crate::tools::mcp::PROTOCOL_VERSIONS;
use crate::trace_context::TraceContext;

pub use crate::tools::mcp::{INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR};

/// What one of the host's events ([`SkillHost::follow_events`]) means to a
/// client that follows the tools list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolsNews {
    /// The skills changed (a reload), or events were missed that may have
    /// changed them: send [`list_changed`].
    Changed,
    /// Nothing about the list.
    Same,
    /// The host is gone: no more news.
    Ended,
}

impl ToolsNews {
    /// What `received` from a host's event feed means.
    pub fn of(received: &Result<(EventId, HostEvent), FeedError>) -> Self {
        match received {
            Ok((_, event)) => Self::of_event(event),
            Err(FeedError::Missed { .. }) => Self::Changed,
            Err(FeedError::Ended) => Self::Ended,
        }
    }

    /// What `received` from a subscription to the host's events
    /// ([`SkillHost::subscribe`]) means: for a client that follows them
    /// live only, for which the host keeps none.
    pub fn of_live(received: &Result<HostEvent, RecvError>) -> Self {
        match received {
            Ok(event) => Self::of_event(event),
            Err(RecvError::Lagged(_)) => Self::Changed,
            Err(RecvError::Closed) => Self::Ended,
        }
    }

    fn of_event(event: &HostEvent) -> Self {
        match event {
            HostEvent::Reload(_) => Self::Changed,
            _ => Self::Same,
        }
    }
}

/// The notification that the tools changed, for the client to list them
/// again.
pub fn list_changed() -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
}

/// The result of `initialize`: the client's protocol revision when this
/// host speaks it, else the newest it does; `list_changed` when the
/// transport can tell the client that the tools changed.
fn initialize_result(params: &Value, list_changed: bool) -> Value {
    let asked = params.get("protocolVersion").and_then(Value::as_str);
    let newest = PROTOCOL_VERSIONS[PROTOCOL_VERSIONS.len() - 1];
    let protocol = asked
        .filter(|asked| PROTOCOL_VERSIONS.contains(asked))
        .unwrap_or(newest);
    json!({
        "protocolVersion": protocol,
        "capabilities": {"tools": {"listChanged": list_changed}},
        "serverInfo": {"name": "skillhost", "version": env!("CARGO_PKG_VERSION")},
    })
}

/// The result of `tools/list`: every loaded skill of `scope`, in one page.
fn tools_list(host: &SkillHost, scope: &SkillScope) -> Value {
    let snapshot = host.snapshot();
    let reads = |name: &String| {
        snapshot
            .tools()
            .get(name)
            .is_some_and(|tool| tool.spec().access == Access::Read)
    };
    let tools: Vec<Value> = snapshot
        .skills()
        .filter(|skill| scope.allows(skill.component.name().as_str()))
        .map(|skill| {
            let manifest = skill.component.manifest();
            json!({
                "name": manifest.name.as_str(),
                "title": format!("{} {}", manifest.name.as_str(), manifest.version),
                "description": manifest.description,
                "inputSchema": manifest.parameters,
                "annotations": {"readOnlyHint": manifest.tools.iter().all(reads)},
            })
        })
        .collect();
    json!({ "tools": tools })
}

/// The answer to request `id` of any method but `tools/call`, which runs
/// a skill and is each transport's own: `initialize` (`list_changed` when
/// the transport can tell the client that the tools changed), `ping`,
/// `tools/list` (the skills of `scope`), or an error naming the method.
pub fn answer_request(
    host: &SkillHost,
    scope: &SkillScope,
    id: &Value,
    method: &str,
    params: &Value,
    list_changed: bool,
) -> Value {
    match method {
        "initialize" => answer(id, initialize_result(params, list_changed)),
        "ping" => answer(id, json!({})),
        "tools/list" => answer(id, tools_list(host, scope)),
        other => error_answer(id, METHOD_NOT_FOUND, &format!("no method `{other}`")),
    }
}

/// `options` for the run of a `tools/call` with `params`: in the trace its
/// `_meta` names (SEP-414), which comes before any the transport gave.
pub fn in_callers_trace(options: RunOptions, params: &Value) -> RunOptions {
    match params.get("_meta").and_then(TraceContext::from_meta) {
        Some(trace) => options.trace(trace),
        None => options,
    }
}

/// A `tools/call` result: a finished skill's result, or what went wrong.
pub fn call_result(outcome: CallOutcome) -> Value {
    match outcome {
        CallOutcome::Done { result } => {
            let text = match &result {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            let mut answer = json!({"content": [{"type": "text", "text": text}]});
            if result.is_object() {
                answer["structuredContent"] = result;
            }
            answer
        }
        other => error_result(&other.error_text().unwrap_or_default()),
    }
}

/// A `tools/call` result that reports an error to the client's model.
pub fn error_result(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": true})
}

/// The answer to request `id` with `result`.
pub fn answer(id: &Value, result: Value) -> Value {
    let mut answer = json!({"jsonrpc": "2.0", "id": id});
    answer["result"] = result;
    answer
}

/// The answer to request `id` (`null` when it could not be read) with an
/// error.
pub fn error_answer(id: &Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// The server's requests to a client that it waits on, by id: each
/// transport's way back from the client's answer to its asker.
#[derive(Debug)]
pub struct Asked {
    waiting: Mutex<HashMap<u64, oneshot::Sender<Value>>>,
    next_id: AtomicU64,
}

impl Default for Asked {
    fn default() -> Self {
        Self {
            waiting: Mutex::default(),
            next_id: AtomicU64::new(1),
        }
    }
}

impl Asked {
    /// A fresh id for a request, and where its answer will come.
    pub fn ask(&self) -> (u64, oneshot::Receiver<Value>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (sender, answer) = oneshot::channel();
        self.lock().insert(id, sender);
        (id, answer)
    }

    /// Hands `message`, the client's answer to request `id`, to its asker;
    /// whether one waited on it.
    pub fn answered(&self, id: u64, message: Value) -> bool {
        match self.lock().remove(&id) {
            // The asker may have stopped waiting.
            Some(asker) => asker.send(message).is_ok(),
            None => false,
        }
    }

    /// Stops waiting on request `id`.
    pub fn forget(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// Stops waiting on every request: the client is gone.
    pub fn forget_all(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<u64, oneshot::Sender<Value>>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Request `id` asking the client to ask its user whether the write
/// `pending` waits on may run (`elicitation/create`, a yes/no form).
pub fn approval_question(id: u64, pending: &PendingConfirmation) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": "elicitation/create",
        "params": {
            "message": format!("Approve this write? {}", pending.summary),
            "requestedSchema": {
                "type": "object",
                "properties": {"approve": {"type": "boolean", "title": "Approve"}},
                "required": ["approve"],
            },
        },
    })
}

/// What the client's answer to an [`approval_question`] decides: an
/// approval only when its user accepted and ticked `approve`.
pub fn approval_decision(answer: &Value) -> Decision {
    let result = &answer["result"];
    if result["action"] == "accept" && result["content"]["approve"] == true {
        Decision::Approve
    } else {
        Decision::Reject(Some("the client's user declined".into()))
    }
}
