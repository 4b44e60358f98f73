//! A scripted OpenAI-compatible chat-completions server on loopback.
//!
//! [`ScriptedLlm::start`] serves `POST /v1/chat/completions` on
//! `127.0.0.1:<free port>` and answers each request with the next [`Step`]
//! of its script, recording every request (body and headers) for the test to
//! inspect. A request beyond the script gets a 500 whose message starts
//! with "script exhausted", so a test that makes one call too many fails
//! loudly.
//!
//! ```ignore
//! let llm = ScriptedLlm::start(vec![
//!     Step::tool_call("queryOrder", json!({"orderId": "88231"})).fragments(4),
//!     Step::text("Your refund is on its way."),
//! ])
//! .await;
//! let client = LlmClient::new(llm.config())?;
//! // ... run the agent ...
//! assert_eq!(llm.requests()[0].tool_names(), ["queryOrder", "applyRefund"]);
//! assert_eq!(llm.remaining(), 0);
//! ```

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use tokio::sync::oneshot;

use skillhost::agent::llm::LlmConfig;

/// What one scripted answer says.
enum Reply {
    Text(String),
    /// `(name, raw arguments text)` per call.
    ToolCalls(Vec<(String, String)>),
    Error {
        status: StatusCode,
        message: String,
    },
    Raw {
        status: StatusCode,
        content_type: String,
        body: String,
    },
    Dynamic(Box<dyn Fn(&Value) -> Step + Send + Sync>),
}

/// One scripted answer, with how to deliver it.
pub struct Step {
    reply: Reply,
    /// `None`: stream when the request says `"stream": true`.
    stream: Option<bool>,
    /// Pieces each text and each tool call's arguments are split into when
    /// streamed.
    fragments: usize,
    usage: (u64, u64),
    headers: Vec<(HeaderName, HeaderValue)>,
    delay: Duration,
    /// Opened (sent on, or dropped) when the answer may go.
    gate: Option<oneshot::Receiver<()>>,
    /// `None`: `stop`, or `tool_calls` when the answer has calls.
    finish_reason: Option<&'static str>,
}

impl Step {
    fn new(reply: Reply) -> Self {
        Self {
            reply,
            stream: None,
            fragments: 1,
            usage: (10, 5),
            headers: Vec::new(),
            delay: Duration::ZERO,
            gate: None,
            finish_reason: None,
        }
    }

    /// The assistant answers `text` (finish reason `stop`).
    pub fn text(text: impl Into<String>) -> Self {
        Self::new(Reply::Text(text.into()))
    }

    /// The assistant calls one function with `arguments`.
    pub fn tool_call(name: &str, arguments: Value) -> Self {
        Self::tool_calls([(name, arguments)])
    }

    /// The assistant calls several functions at once, in this order (ids
    /// `call_<request#>_<i>`, finish reason `tool_calls`).
    pub fn tool_calls<'a>(calls: impl IntoIterator<Item = (&'a str, Value)>) -> Self {
        Self::new(Reply::ToolCalls(
            calls
                .into_iter()
                .map(|(name, arguments)| (name.to_owned(), arguments.to_string()))
                .collect(),
        ))
    }

    /// The assistant calls `name` with arguments exactly as `raw` (e.g. text
    /// that is not JSON).
    pub fn raw_tool_call(name: &str, raw: &str) -> Self {
        Self::new(Reply::ToolCalls(vec![(name.to_owned(), raw.to_owned())]))
    }

    /// An HTTP error with an OpenAI error body carrying `message`.
    pub fn error(status: u16, message: &str) -> Self {
        Self::new(Reply::Error {
            status: status_code(status),
            message: message.to_owned(),
        })
    }

    /// `body` exactly as given, with this status and content type, whatever
    /// the request asked (e.g. malformed JSON, a broken stream).
    pub fn raw(status: u16, content_type: &str, body: &str) -> Self {
        Self::new(Reply::Raw {
            status: status_code(status),
            content_type: content_type.to_owned(),
            body: body.to_owned(),
        })
    }

    /// Decides the answer from the request body when the request arrives.
    pub fn respond_with(decide: impl Fn(&Value) -> Step + Send + Sync + 'static) -> Self {
        Self::new(Reply::Dynamic(Box::new(decide)))
    }

    /// Streams (`true`) or answers in one JSON body (`false`) whatever the
    /// request's `stream` flag says.
    pub fn streamed(mut self, stream: bool) -> Self {
        self.stream = Some(stream);
        self
    }

    /// When streamed, splits the text and each call's arguments into `n`
    /// pieces, one chunk each.
    pub fn fragments(mut self, n: usize) -> Self {
        self.fragments = n.max(1);
        self
    }

    /// The token usage reported (default: 10 prompt, 5 completion).
    pub fn usage(mut self, prompt_tokens: u64, completion_tokens: u64) -> Self {
        self.usage = (prompt_tokens, completion_tokens);
        self
    }

    /// Adds a response header, e.g. `("retry-after", "1")`.
    pub fn header(mut self, name: &'static str, value: &'static str) -> Self {
        self.headers.push((
            HeaderName::from_static(name),
            HeaderValue::from_static(value),
        ));
        self
    }

    /// Reports this finish reason (e.g. `length`) instead of the natural one.
    pub fn finish_reason(mut self, reason: &'static str) -> Self {
        self.finish_reason = Some(reason);
        self
    }

    /// Waits this long before answering.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Answers only once `gate` opens: its sender sends, or is dropped.
    pub fn held_until(mut self, gate: oneshot::Receiver<()>) -> Self {
        self.gate = Some(gate);
        self
    }
}

fn status_code(status: u16) -> StatusCode {
    StatusCode::from_u16(status).expect("a valid HTTP status code")
}

/// One request the server received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// The JSON body (`Value::String` of the raw text if it was not JSON).
    pub body: Value,
    /// The request headers.
    pub headers: HeaderMap,
}

impl Recorded {
    /// The names of the functions offered (`tools[].function.name`).
    pub fn tool_names(&self) -> Vec<String> {
        self.body["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|tool| tool["function"]["name"].as_str().map(str::to_owned))
            .collect()
    }

    /// The `messages` array.
    pub fn messages(&self) -> &[Value] {
        self.body["messages"].as_array().map_or(&[], Vec::as_slice)
    }

    /// A header's value as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }
}

#[derive(Default)]
struct Shared {
    script: Mutex<VecDeque<Step>>,
    requests: Mutex<Vec<Recorded>>,
}

/// A running scripted server; stops when dropped.
pub struct ScriptedLlm {
    base_url: String,
    shared: Arc<Shared>,
    shutdown: Option<oneshot::Sender<()>>,
}

impl ScriptedLlm {
    /// Starts serving `steps`, one per request, in order.
    pub async fn start(steps: Vec<Step>) -> Self {
        let shared = Arc::new(Shared {
            script: Mutex::new(steps.into()),
            requests: Mutex::default(),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(chat_completions))
            .fallback(|| async {
                error_response(
                    StatusCode::NOT_FOUND,
                    "the scripted LLM serves only POST /v1/chat/completions",
                )
            })
            .with_state(Arc::clone(&shared));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let addr = listener.local_addr().expect("a bound address");
        let (shutdown, stopped) = oneshot::channel::<()>();
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await
                .expect("the scripted LLM server runs");
        });
        Self {
            base_url: format!("http://{addr}/v1"),
            shared,
            shutdown: Some(shutdown),
        }
    }

    /// The API root to configure a client with (`http://127.0.0.1:<port>/v1`).
    pub fn base_url(&self) -> String {
        self.base_url.clone()
    }

    /// A client configuration for this server, model `test-model`, with
    /// fast backoff, so that retries take milliseconds.
    pub fn config(&self) -> LlmConfig {
        LlmConfig {
            backoff_base: Duration::from_millis(1),
            backoff_max: Duration::from_millis(5),
            ..LlmConfig::new(self.base_url(), "test-model")
        }
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// Waits until the server has received `count` requests, at most 30 s.
    pub async fn asked(&self, count: usize) {
        let reached = async {
            while self.requests().len() < count {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(30), reached)
            .await
            .unwrap_or_else(|_| panic!("{count} request(s) did not reach the model within 30 s"));
    }

    /// Steps not served yet.
    pub fn remaining(&self) -> usize {
        self.shared.script.lock().unwrap().len()
    }
}

impl Drop for ScriptedLlm {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}

async fn chat_completions(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body = serde_json::from_slice(&body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
    let round = {
        let mut requests = shared.requests.lock().unwrap();
        requests.push(Recorded {
            body: body.clone(),
            headers,
        });
        requests.len()
    };
    let next = shared.script.lock().unwrap().pop_front();
    let Some(mut step) = next else {
        return error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("script exhausted: request #{round} has no scripted step"),
        );
    };
    while let Reply::Dynamic(decide) = &step.reply {
        step = decide(&body);
    }
    if let Some(gate) = step.gate.take() {
        // Dropping the sender opens the gate as well.
        let _ = gate.await;
    }
    tokio::time::sleep(step.delay).await;
    let stream = step
        .stream
        .unwrap_or_else(|| body["stream"].as_bool().unwrap_or(false));
    let include_usage = body["stream_options"]["include_usage"]
        .as_bool()
        .unwrap_or(false);
    let model = body["model"].as_str().unwrap_or("scripted").to_owned();
    let mut response = render(&step, round, &model, stream, include_usage);
    response.headers_mut().extend(step.headers);
    response
}

fn error_response(status: StatusCode, message: &str) -> Response {
    let body = json!({"error": {"message": message, "type": "scripted_error", "param": null, "code": null}});
    (status, axum::Json(body)).into_response()
}

/// The assistant message of a reply: `(content, tool calls as wire JSON)`.
fn assistant(step: &Step, round: usize) -> (Option<&str>, Vec<(String, &str, &str)>) {
    match &step.reply {
        Reply::Text(text) => (Some(text), Vec::new()),
        Reply::ToolCalls(calls) => (
            None,
            calls
                .iter()
                .enumerate()
                .map(|(i, (name, arguments))| {
                    (
                        format!("call_{round}_{i}"),
                        name.as_str(),
                        arguments.as_str(),
                    )
                })
                .collect(),
        ),
        _ => (None, Vec::new()),
    }
}

fn render(step: &Step, round: usize, model: &str, stream: bool, include_usage: bool) -> Response {
    match &step.reply {
        Reply::Error { status, message } => return error_response(*status, message),
        Reply::Raw {
            status,
            content_type,
            body,
        } => {
            return (
                *status,
                [(header::CONTENT_TYPE, content_type.clone())],
                body.clone(),
            )
                .into_response();
        }
        Reply::Text(_) | Reply::ToolCalls(_) | Reply::Dynamic(_) => {}
    }
    let (content, calls) = assistant(step, round);
    let finish_reason = step.finish_reason.unwrap_or(if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    });
    let (prompt, completion) = step.usage;
    let usage = json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion});
    let id = format!("chatcmpl-scripted-{round}");
    if !stream {
        let tool_calls: Vec<Value> = calls
            .iter()
            .map(|(call_id, name, arguments)| {
                json!({"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}})
            })
            .collect();
        let mut message = json!({"role": "assistant", "content": content});
        if !tool_calls.is_empty() {
            message["tool_calls"] = Value::Array(tool_calls);
        }
        let body = json!({
            "id": id, "object": "chat.completion", "created": 0, "model": model,
            "system_fingerprint": "scripted",
            "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish_reason}],
            "usage": usage,
        });
        return axum::Json(body).into_response();
    }

    let chunk = |delta: Value, finish: Option<&str>| {
        json!({
            "id": id, "object": "chat.completion.chunk", "created": 0, "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        })
    };
    let mut events = vec![chunk(
        json!({"role": "assistant", "content": content.map(|_| "")}),
        None,
    )];
    for piece in split(content.unwrap_or(""), step.fragments) {
        events.push(chunk(json!({"content": piece}), None));
    }
    for (i, (call_id, name, arguments)) in calls.iter().enumerate() {
        events.push(chunk(
            json!({"tool_calls": [{"index": i, "id": call_id, "type": "function",
                                   "function": {"name": name, "arguments": ""}}]}),
            None,
        ));
        for piece in split(arguments, step.fragments) {
            events.push(chunk(
                json!({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}),
                None,
            ));
        }
    }
    events.push(chunk(json!({}), Some(finish_reason)));
    if include_usage {
        events.push(json!({
            "id": id, "object": "chat.completion.chunk", "created": 0, "model": model,
            "choices": [], "usage": usage,
        }));
    }
    let frames = std::iter::once(": scripted keep-alive\n\n".to_owned())
        .chain(events.into_iter().map(|event| format!("data: {event}\n\n")))
        .chain(std::iter::once("data: [DONE]\n\n".to_owned()))
        .map(|frame| Ok::<_, Infallible>(Bytes::from(frame)));
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(futures::stream::iter(frames)),
    )
        .into_response()
}

/// `text` cut into at most `n` pieces of near-equal length, on character
/// boundaries. Empty text gives no pieces.
fn split(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let size = chars.len().div_ceil(n.max(1)).max(1);
    chars
        .chunks(size)
        .map(|piece| piece.iter().collect())
        .collect()
}
