//! A small MCP server on loopback (Streamable HTTP, JSON-RPC over POST,
//! and when asked a GET stream of its own messages), behind the MCP tools'
//! tests: the messages it got are kept to be read.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// An MCP server on standard input and output (Python), for servers
/// started as a command: its first argument is the file it logs to.
pub const STDIO_SERVER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/support/mcp_stdio_server.py"
);

/// The Python interpreter itself: `python3` on PATH may be a shim (pyenv's
/// is a shell script) that adds variables of its own to the server's.
pub fn python() -> &'static str {
    static PYTHON: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PYTHON.get_or_init(|| {
        let output = std::process::Command::new("python3")
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .expect("python3 runs the MCP stdio server of these tests");
        String::from_utf8(output.stdout).unwrap().trim().to_owned()
    })
}

/// What the server got: one message a line, `method session protocol`.
#[derive(Clone, Default)]
pub struct McpServer {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Default)]
struct Inner {
    received: Vec<Received>,
    sessions: BTreeSet<String>,
    opened: usize,
    /// The protocol revision `initialize` answers with.
    protocol: Option<String>,
    /// Tools `tools/list` leaves out, as if the server no longer had them.
    withdrawn: BTreeSet<String>,
    /// Whether a GET opens a stream of the server's own messages (else 405).
    streams: bool,
    /// The streams open, by session.
    listeners: Vec<(String, mpsc::UnboundedSender<Value>)>,
}

/// One message the server got.
#[derive(Clone, Debug)]
pub struct Received {
    pub method: String,
    pub session: Option<String>,
    pub protocol: Option<String>,
    /// `X-User-Id`: whom the request says it acts for.
    pub user: Option<String>,
    /// The trace the request's headers say it is part of.
    pub traceparent: Option<String>,
    pub params: Value,
}

impl McpServer {
    /// Serves on loopback; the endpoint's URL.
    pub async fn start(&self) -> String {
        let app = Router::new()
            .route("/mcp", post(message).get(stream))
            .with_state(self.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        url
    }

    /// Answers `initialize` with `protocol` instead of the client's.
    pub fn speaking(self, protocol: &str) -> Self {
        self.inner.lock().unwrap().protocol = Some(protocol.to_owned());
        self
    }

    /// Lists `tool` no more (`false`), or again (`true`), as a server
    /// deployed with other tools does.
    pub fn offer(&self, tool: &str, offered: bool) {
        let withdrawn = &mut self.inner.lock().unwrap().withdrawn;
        if offered {
            withdrawn.remove(tool);
        } else {
            withdrawn.insert(tool.to_owned());
        }
    }

    /// Offers a stream of its own messages to a GET in a session.
    pub fn streaming(self) -> Self {
        self.inner.lock().unwrap().streams = true;
        self
    }

    /// Waits until a stream is open for a session, and says on each one
    /// that the tools changed, after a ping the client must answer.
    pub async fn say_tools_changed(&self) {
        let open = async {
            while self.inner.lock().unwrap().listeners.is_empty() {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(10), open)
            .await
            .expect("a stream opened");
        let inner = self.inner.lock().unwrap();
        for (_, listener) in &inner.listeners {
            let _ = listener.send(json!({"jsonrpc": "2.0", "id": "ping-1", "method": "ping"}));
            let _ = listener
                .send(json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}));
        }
    }

    /// Ends every stream open, as a proxy's idle timeout does.
    pub fn close_streams(&self) {
        self.inner.lock().unwrap().listeners.clear();
    }

    /// The sessions a stream is open for.
    pub fn listening(&self) -> Vec<String> {
        let inner = self.inner.lock().unwrap();
        let open = inner
            .listeners
            .iter()
            .filter(|(_, listener)| !listener.is_closed());
        open.map(|(session, _)| session.clone()).collect()
    }

    /// Forgets every session, as a restarted server does.
    pub fn forget_sessions(&self) {
        self.inner.lock().unwrap().sessions.clear();
    }

    pub fn received(&self) -> Vec<Received> {
        self.inner.lock().unwrap().received.clone()
    }

    /// The `tools/call`s it got: tool name and arguments.
    pub fn calls(&self) -> Vec<(String, Value)> {
        self.received()
            .into_iter()
            .filter(|received| received.method == "tools/call")
            .map(|call| {
                (
                    call.params["name"].as_str().unwrap().to_owned(),
                    call.params["arguments"].clone(),
                )
            })
            .collect()
    }
}

/// Its tools, in two pages of `tools/list`.
fn tool_pages() -> [Value; 2] {
    let object = |properties: Value, required: Value| json!({"type": "object", "properties": properties, "required": required});
    [
        json!({
            "tools": [
                {"name": "lookupCustomer", "description": "Look a customer up by id.",
                 "inputSchema": object(json!({"id": {"type": "string"}}), json!(["id"])),
                 "annotations": {"readOnlyHint": true}},
                {"name": "updateCustomer", "title": "Update a customer",
                 "inputSchema": object(json!({"id": {"type": "string"}, "level": {"type": "string"}}), json!(["id", "level"])),
                 // The server's claim: the host still treats it as a write.
                 "annotations": {"readOnlyHint": true}},
            ],
            "nextCursor": "page-2",
        }),
        json!({
            "tools": [
                {"name": "customerReport", "description": "A report, streamed.",
                 "inputSchema": object(json!({}), json!([]))},
                {"name": "risky.tool", "description": "Not a function name.",
                 "inputSchema": object(json!({}), json!([]))},
            ],
        }),
    ]
}

/// A GET: the stream of the server's own messages in the request's
/// session, when the server offers one.
async fn stream(State(server): State<McpServer>, headers: HeaderMap) -> Response {
    let mut inner = server.inner.lock().unwrap();
    if !inner.streams {
        return StatusCode::METHOD_NOT_ALLOWED.into_response();
    }
    let session = headers
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_owned());
    let Some(session) = session.filter(|id| inner.sessions.contains(id)) else {
        return (StatusCode::NOT_FOUND, "no such session").into_response();
    };
    let (sender, receiver) = mpsc::unbounded_channel();
    inner.listeners.push((session, sender));
    let events = futures::stream::unfold(receiver, |mut receiver| async move {
        let message = receiver.recv().await?;
        let event = format!("event: message\ndata: {message}\n\n");
        Some((Ok::<_, std::convert::Infallible>(event), receiver))
    });
    (
        [(header::CONTENT_TYPE, "text/event-stream")],
        axum::body::Body::from_stream(events),
    )
        .into_response()
}

async fn message(State(server): State<McpServer>, headers: HeaderMap, body: String) -> Response {
    let message: Value = serde_json::from_str(&body).unwrap();
    let header_text = |name: &str| headers.get(name).map(|v| v.to_str().unwrap().to_owned());
    // The client's answer to a request of the server's.
    let method = message["method"].as_str().unwrap_or("answer").to_owned();
    let session = header_text("mcp-session-id");
    let mut inner = server.inner.lock().unwrap();
    inner.received.push(Received {
        method: method.clone(),
        session: session.clone(),
        protocol: header_text("mcp-protocol-version"),
        user: header_text("x-user-id"),
        traceparent: header_text("traceparent"),
        params: message["params"].clone(),
    });
    if method != "initialize"
        && !session
            .as_ref()
            .is_some_and(|id| inner.sessions.contains(id))
    {
        return (StatusCode::NOT_FOUND, "no such session").into_response();
    }
    let id = message["id"].clone();
    let answer = |result: Value| json!({"jsonrpc": "2.0", "id": id, "result": result});
    match method.as_str() {
        "initialize" => {
            inner.opened += 1;
            let session = format!("session-{}", inner.opened);
            inner.sessions.insert(session.clone());
            let protocol = inner.protocol.clone().unwrap_or_else(|| {
                message["params"]["protocolVersion"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            });
            let result = answer(json!({
                "protocolVersion": protocol,
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "crm", "version": "1.0.0"},
            }));
            ([("mcp-session-id", session)], axum::Json(result)).into_response()
        }
        "notifications/initialized" | "answer" => StatusCode::ACCEPTED.into_response(),
        "tools/list" => {
            let [first, second] = tool_pages();
            let mut page = if message["params"]["cursor"] == "page-2" {
                second
            } else {
                first
            };
            let offered = |tool: &Value| !inner.withdrawn.contains(tool["name"].as_str().unwrap());
            let tools = page["tools"].as_array_mut().unwrap();
            tools.retain(offered);
            axum::Json(answer(page)).into_response()
        }
        "tools/call" => {
            let arguments = &message["params"]["arguments"];
            match message["params"]["name"].as_str().unwrap() {
                "lookupCustomer" if arguments["id"] == "u1001" => axum::Json(answer(json!({
                    "content": [{"type": "text", "text": "{\"id\":\"u1001\",\"name\":\"Li Lei\",\"level\":\"gold\"}"}],
                })))
                .into_response(),
                "lookupCustomer" => axum::Json(answer(json!({
                    "content": [{"type": "text", "text": format!("no customer {}", arguments["id"])}],
                    "isError": true,
                })))
                .into_response(),
                "updateCustomer" => axum::Json(answer(json!({
                    "content": [{"type": "text", "text": "updated"}],
                    "structuredContent": {"id": arguments["id"], "level": arguments["level"]},
                })))
                .into_response(),
                // An event stream: a progress notification, then the answer.
                "customerReport" => {
                    let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress",
                                          "params": {"progress": 1}});
                    let result = answer(json!({"content": [{"type": "text", "text": "3 customers"}]}));
                    let body = format!("event: message\ndata: {progress}\n\nevent: message\ndata: {result}\n\n");
                    ([(header::CONTENT_TYPE, "text/event-stream")], body).into_response()
                }
                other => axum::Json(json!({"jsonrpc": "2.0", "id": id,
                    "error": {"code": -32602, "message": format!("unknown tool {other}")}}))
                .into_response(),
            }
        }
        other => axum::Json(json!({"jsonrpc": "2.0", "id": id,
            "error": {"code": -32601, "message": format!("no method {other}")}}))
        .into_response(),
    }
}
