//! The tools of MCP servers, declared in configuration: a team that already
//! serves its operations over the Model Context Protocol offers them to
//! skills and the agent without writing Rust.
//!
//! ```toml
//! [[mcp_servers]]
//! name = "crm"
//! url = "https://crm.example.com/mcp"
//! headers = { Authorization = "Bearer ${CRM_TOKEN}" }
//! tools = ["lookupCustomer", "updateCustomer"]   # default: every tool the server lists
//! read = ["lookupCustomer"]                       # the others are writes
//!
//! [[mcp_servers]]
//! name = "docs"
//! command = "npx"
//! args = ["-y", "@modelcontextprotocol/server-filesystem", "/srv/docs"]
//! ```
//!
//! A server is reached at a `url` (module `streamable_http`) or started as a
//! `command` and spoken to on its standard streams (module `stdio`). When the
//! tools are built ([`connect`]) the host opens a session (`initialize`,
//! then `notifications/initialized`) and lists the server's tools
//! (`tools/list`, every page); each one taken becomes a [`Tool`] with the
//! server's name, description and input schema, so the registry validates
//! a call's arguments before the server sees them. A server that cannot be
//! reached or started, or that `tools` or `read` name a tool of that it
//! does not list, stops the host from starting with an error naming the
//! server: a misspelt name would otherwise leave a tool missing, or a read
//! asking for approval.
//!
//! A server's tools may change while the host runs. An [`McpConnection`]
//! keeps the session to list them again ([`McpConnection::relist`]) when
//! they may have ([`McpConnection::changed`]): the server said so
//! (`notifications/tools/list_changed`, on a started server's output, in a
//! POST's event stream, or in the stream a GET opens for the server's own
//! messages, which the session listens to when the server offers one), or
//! a new session was opened (the server restarted). A host built with the server
//! ([`SkillHostBuilder::mcp_server`](crate::embed::SkillHostBuilder::mcp_server))
//! follows it.
//!
//! A tool is a write unless `read` names it: a write waits for a person's
//! approval as the confirmation policy says, and the server's own
//! `readOnlyHint` is the service's claim, not the operator's word.
//!
//! A call is a `tools/call` in the session (made in a trace, it carries the
//! trace's `traceparent` and `tracestate` in its `params._meta`, MCP's
//! SEP-414, and over HTTP in its headers too), its answer at most
//! [`MAX_RESPONSE_BYTES`](super::http::MAX_RESPONSE_BYTES). A server that
//! has forgotten the session (`404`), or whose process had ended, gets a
//! new one and the call is sent again, once: it never reached the tool.
//! The result is the tool's `structuredContent` when it sends one, else
//! its text — parsed when it is JSON — (several contents make an array;
//! images and other binary contents are named, not passed on). A result
//! the tool marks `isError` is a [`ToolError::Rejected`] carrying its text,
//! which the model can relay; the JSON-RPC error for invalid parameters a
//! [`ToolError::InvalidArguments`]; any other JSON-RPC error, an HTTP
//! error, a process that ended or a broken answer a [`ToolError::Failed`].
//! Headers and `env` values hold secrets (`${VAR}` from the environment,
//! as for HTTP tools), are never logged, and headers do not follow a
//! redirect to another origin; `forward_headers` sends on, with each tool
//! call to a `url` server, headers of the request that started the run
//! (the end user's id), as HTTP tools do.

mod stdio;
mod streamable_http;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio::sync::Notify;

use super::http::{
    DEFAULT_TIMEOUT, call_headers, client, expand_env, forward_list, secret_headers, snippet,
};
use super::{Access, Tool, ToolContext, ToolError, ToolSpec};
use crate::skills::manifest::is_function_name;
use crate::trace_context::TraceContext;

/// The protocol revision the host asks for. A server may answer with
/// another of [`PROTOCOL_VERSIONS`].
const PROTOCOL_VERSION: &str = "2025-06-18";

/// The revisions whose tool calls this client (and `skillhost mcp`, the
/// server) speaks, oldest first: the same `initialize`, `tools/list` and
/// `tools/call` in each.
pub const PROTOCOL_VERSIONS: [&str; 3] = ["2025-03-26", "2025-06-18", "2025-11-25"];

/// Pages of `tools/list` read at most: a server whose cursor never ends
/// would otherwise hold the host's start for ever.
const MAX_LIST_PAGES: usize = 100;

/// JSON-RPC's error codes, spoken by this client and by the host's own
/// MCP server (`crate::embed::mcp`).
pub const PARSE_ERROR: i64 = -32700;
/// A message that is no request, notification or answer.
pub const INVALID_REQUEST: i64 = -32600;
/// A method the receiver does not offer.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// Parameters that do not fit the method: for `tools/call`, an unknown tool
/// or arguments its schema refuses.
pub const INVALID_PARAMS: i64 = -32602;

/// One MCP server as declared in configuration: reached at `url`, or
/// started as `command` and spoken to on its standard input and output.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// What errors and logs call the server.
    pub name: String,
    /// The server's MCP endpoint, `http(s)://host/path`.
    #[serde(default)]
    pub url: Option<String>,
    /// Header values may hold `${VAR}`, read from the environment. `url`
    /// servers only.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The program to start, looked up on `PATH`, instead of a `url`.
    #[serde(default)]
    pub command: Option<String>,
    /// The program's arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// The program's environment, values with `${VAR}` as in headers.
    /// It gets these, `PATH` and `HOME`; no other variable of the host's
    /// (its LLM key, say) reaches it.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The tools to take from the server. Default: every tool it lists.
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// The tools that only read; every other one is a write.
    #[serde(default)]
    pub read: Vec<String>,
    /// Headers of the request that started the run sent on with each
    /// tool call (not with `initialize` or `tools/list`, which no run
    /// makes), as for HTTP tools: a call without one fails, unsent. `url`
    /// servers only.
    #[serde(default)]
    pub forward_headers: Vec<String>,
    /// Seconds one request may take. Default: [`super::http::DEFAULT_TIMEOUT`].
    #[serde(default)]
    pub timeout_secs: Option<u64>,
}

/// Why an MCP server's tools could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("MCP server `{server}`{place}: {reason}")]
pub struct McpError {
    server: String,
    /// ` (its URL without credentials)`, ` (command `…`)`, or nothing
    /// when the config gives neither.
    place: String,
    reason: String,
}

impl McpError {
    fn new(config: &McpServerConfig, place: &str, reason: String) -> Self {
        Self {
            server: config.name.clone(),
            place: place.to_owned(),
            reason,
        }
    }
}

/// Connects to the server `config` declares (starting it, for a
/// `command`) and builds the tools it takes from it, reading `${VAR}`s in
/// header and environment values through `env`.
pub async fn connect(
    config: &McpServerConfig,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Vec<Arc<dyn Tool>>, McpError> {
    McpConnection::open(config, env)
        .await
        .map(|(_, tools)| tools)
}

/// The session with one MCP server, kept to list its tools again when they
/// may have changed ([`McpConnection::changed`]).
pub struct McpConnection {
    config: McpServerConfig,
    /// Where the server is, as [`McpError`] says it.
    place: String,
    session: Arc<Session>,
}

impl McpConnection {
    /// Connects to the server `config` declares (starting it, for a
    /// `command`), reading `${VAR}`s in header and environment values
    /// through `env`; the session, and the tools taken from the server.
    pub async fn open(
        config: &McpServerConfig,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<(Self, Vec<Arc<dyn Tool>>), McpError> {
        let place = match (&config.url, &config.command) {
            (Some(url), _) => format!(" ({})", streamable_http::shown_url(url)),
            (None, Some(command)) => format!(" (command `{command}`)"),
            (None, None) => String::new(),
        };
        let error = |reason| McpError::new(config, &place, reason);
        let changed = Arc::new(Notify::new());
        let (transport, forward) = transport(config, &env, &changed).map_err(&error)?;
        let session = Arc::new(Session {
            server: config.name.clone(),
            transport,
            forward,
            changed,
            listening: std::sync::Mutex::new(None),
            state: tokio::sync::RwLock::new(None),
            renewing: tokio::sync::Mutex::new(()),
            opened: AtomicU64::new(0),
            next_id: AtomicU64::new(1),
        });
        session.open().await.map_err(&error)?;
        let listed = session.list_tools().await.map_err(&error)?;
        check_named(config, &listed).map_err(&error)?;
        let tools = take_tools(config, listed, &session).map_err(&error)?;
        let connection = Self {
            config: config.clone(),
            place,
            session,
        };
        Ok((connection, tools))
    }

    /// [`McpConnection::open`] for each of `servers`, all at once; the
    /// first that fails stops them all, its error naming it.
    pub async fn open_all(
        servers: &[McpServerConfig],
        env: impl Fn(&str) -> Option<String> + Copy,
    ) -> Result<Vec<(Self, Vec<Arc<dyn Tool>>)>, McpError> {
        futures::future::try_join_all(servers.iter().map(|server| Self::open(server, env))).await
    }

    /// The server's name, as configured.
    pub fn server(&self) -> &str {
        &self.config.name
    }

    /// The server as declared.
    pub fn config(&self) -> &McpServerConfig {
        &self.config
    }

    /// Waits until the server's tools may have changed since they were
    /// last listed: the server said so (`notifications/tools/list_changed`),
    /// or a new session was opened with it (the server, or its process,
    /// restarted). A change before the wait began is not missed.
    pub async fn changed(&self) {
        self.session.changed.notified().await;
    }

    /// Lists the server's tools again: the tools the configuration takes
    /// from it now. A name `tools` or `read` gives that the server no
    /// longer lists is logged, not an error: the server dropped the tool.
    pub async fn relist(&self) -> Result<Vec<Arc<dyn Tool>>, McpError> {
        let error = |reason| McpError::new(&self.config, &self.place, reason);
        let listed = self.session.list_tools().await.map_err(error)?;
        if let Err(missing) = check_named(&self.config, &listed) {
            tracing::warn!(server = %self.config.name, "MCP server's tools changed: {missing}");
        }
        take_tools(&self.config, listed, &self.session).map_err(error)
    }
}

/// How `config` reaches its server, and the headers its calls forward;
/// the transport tells `changed` when the server says its tools changed.
fn transport(
    config: &McpServerConfig,
    env: &impl Fn(&str) -> Option<String>,
    changed: &Arc<Notify>,
) -> Result<(Transport, Vec<HeaderName>), String> {
    if config.timeout_secs == Some(0) {
        return Err("timeout_secs must be at least 1".into());
    }
    match (&config.url, &config.command) {
        (Some(url), None) => {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err("the url must be http(s)".into());
            }
            if !(config.args.is_empty() && config.env.is_empty()) {
                return Err("args and env are for a server started as a command".into());
            }
            let headers = secret_headers(&config.headers, env)?;
            let forward = forward_list(&config.forward_headers, &headers)?;
            let http = client(config.timeout_secs)?;
            let transport = streamable_http::Transport {
                server: config.name.clone(),
                url: url.clone(),
                http,
                headers,
                changed: Arc::clone(changed),
            };
            Ok((Transport::Http(transport), forward))
        }
        (None, Some(command)) => {
            if !(config.headers.is_empty() && config.forward_headers.is_empty()) {
                return Err(
                    "headers and forward_headers are for a server reached at a url; a command's \
                     messages carry none"
                        .into(),
                );
            }
            let mut environment = BTreeMap::new();
            for (name, value) in &config.env {
                environment.insert(name.clone(), expand_env(value, "env", env)?);
            }
            let program = stdio::Program {
                server: config.name.clone(),
                command: command.clone(),
                args: config.args.clone(),
                env: environment,
                timeout: config
                    .timeout_secs
                    .map_or(DEFAULT_TIMEOUT, Duration::from_secs),
            };
            let transport = stdio::Transport::new(program, Arc::clone(changed));
            Ok((Transport::Stdio(transport), Vec::new()))
        }
        (Some(_), Some(_)) => Err("give either a url or a command, not both".into()),
        (None, None) => Err("give the server's url, or the command that starts it".into()),
    }
}

/// An error for a name in `tools` or `read` that the server does not list.
fn check_named(config: &McpServerConfig, listed: &[ListedTool]) -> Result<(), String> {
    let names: BTreeSet<&str> = listed.iter().map(|tool| tool.name.as_str()).collect();
    let named = config.tools.iter().flatten().map(|name| ("tools", name));
    for (key, name) in named.chain(config.read.iter().map(|name| ("read", name))) {
        if !names.contains(name.as_str()) {
            let offered: Vec<&str> = names.iter().copied().collect();
            return Err(format!(
                "{key} names `{name}`, which the server does not list (it lists: {})",
                if offered.is_empty() {
                    "no tools".to_owned()
                } else {
                    offered.join(", ")
                }
            ));
        }
    }
    Ok(())
}

/// The listed tools `config` takes, with their access.
fn take_tools(
    config: &McpServerConfig,
    listed: Vec<ListedTool>,
    session: &Arc<Session>,
) -> Result<Vec<Arc<dyn Tool>>, String> {
    let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
    for tool in listed {
        if config
            .tools
            .as_ref()
            .is_some_and(|taken| !taken.contains(&tool.name))
        {
            continue;
        }
        if !is_function_name(&tool.name) {
            return Err(format!(
                "tool `{}`: not a name a model can call (an ASCII letter, then letters, digits, \
                 `_` or `-`, at most 64 bytes); leave it out with `tools`",
                tool.name
            ));
        }
        if tool.input_schema.get("type").and_then(Value::as_str) != Some("object") {
            return Err(format!(
                "tool `{}`: its inputSchema does not describe an object",
                tool.name
            ));
        }
        let access = if config.read.contains(&tool.name) {
            Access::Read
        } else {
            Access::Write
        };
        tools.push(Arc::new(McpTool {
            spec: ToolSpec {
                description: tool
                    .description
                    .or(tool.title)
                    .unwrap_or_else(|| tool.name.clone()),
                name: tool.name,
                parameters: tool.input_schema,
                access,
            },
            session: Arc::clone(session),
        }));
    }
    Ok(tools)
}

/// A tool as `tools/list` describes it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListedTool {
    name: String,
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    description: Option<String>,
    input_schema: Value,
}

/// A page of `tools/list`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolsPage {
    tools: Vec<ListedTool>,
    #[serde(default)]
    next_cursor: Option<String>,
}

/// A JSON-RPC request, serialized straight from what it borrows: a tool
/// call's arguments are not copied into a new tree to be sent.
#[derive(serde::Serialize)]
struct Request<'a> {
    jsonrpc: &'static str,
    id: u64,
    method: &'a str,
    params: &'a Value,
}

/// How messages reach one server.
enum Transport {
    Http(streamable_http::Transport),
    Stdio(stdio::Transport),
}

/// The session with one server, shared by its tools.
struct Session {
    server: String,
    transport: Transport,
    /// Headers a tool call takes from its run ([`McpServerConfig::forward_headers`]).
    forward: Vec<HeaderName>,
    /// Told when the tools may have changed ([`McpConnection::changed`]).
    changed: Arc<Notify>,
    /// The task listening to the server's own messages in the session
    /// open now, for a server at a url; aborted with the session.
    listening: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Set once the session is open.
    state: tokio::sync::RwLock<Option<SessionState>>,
    /// Held while a forgotten session is renewed, so that calls that find
    /// it forgotten together open one new session, not one each.
    renewing: tokio::sync::Mutex<()>,
    /// Sessions opened so far: tells one session from the next when the
    /// server sets no session id (a restarted process).
    opened: AtomicU64,
    next_id: AtomicU64,
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(listener) = self.listening().take() {
            listener.abort();
        }
    }
}

/// What `initialize` agreed on.
#[derive(Clone, PartialEq, Eq)]
struct SessionState {
    /// `Mcp-Session-Id`, when the server keeps sessions.
    id: Option<HeaderValue>,
    protocol: HeaderValue,
    /// Which session of [`Session::opened`] this is.
    number: u64,
}

/// Why a request got no result.
enum Failure {
    /// The server no longer knows the session, or its process has ended,
    /// before the request reached it: a new one may be opened.
    SessionGone(String),
    /// The server answered with a JSON-RPC error.
    Rpc { code: i64, message: String },
    /// Anything else: unreachable, an HTTP error, a broken answer.
    Other(String),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::SessionGone(reason) | Self::Other(reason) => f.write_str(reason),
            Self::Rpc { code, message } => write!(f, "the server answered error {code}: {message}"),
        }
    }
}

impl Session {
    /// `initialize` and `notifications/initialized`: the session's state.
    async fn open(&self) -> Result<(), String> {
        if let Transport::Stdio(stdio) = &self.transport {
            stdio.start()?;
        }
        let params = json!({
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "skillhost", "version": env!("CARGO_PKG_VERSION")},
        });
        let (result, session_id) = self
            .post("initialize", &params, None, &HeaderMap::new())
            .await
            .map_err(|failure| format!("initialize: {failure}"))?;
        let protocol = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .ok_or("initialize: the answer has no protocolVersion")?;
        if !PROTOCOL_VERSIONS.contains(&protocol) {
            return Err(format!(
                "the server speaks MCP {protocol}; this host speaks {}",
                PROTOCOL_VERSIONS.join(", ")
            ));
        }
        let state = SessionState {
            id: session_id,
            protocol: HeaderValue::from_str(protocol).map_err(|e| e.to_string())?,
            number: self.opened.fetch_add(1, Ordering::Relaxed) + 1,
        };
        let initialized = "notifications/initialized";
        match &self.transport {
            Transport::Http(http) => {
                http.notify(initialized, &state).await?;
                let listener = http.listen(state.clone());
                if let Some(before) = self.listening().replace(listener) {
                    before.abort();
                }
            }
            Transport::Stdio(stdio) => stdio.notify(initialized).await?,
        }
        *self.state.write().await = Some(state);
        Ok(())
    }

    fn listening(&self) -> std::sync::MutexGuard<'_, Option<tokio::task::JoinHandle<()>>> {
        self.listening
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Every tool the server lists, page after page.
    async fn list_tools(&self) -> Result<Vec<ListedTool>, String> {
        let mut tools = Vec::new();
        let mut cursor = None;
        for _ in 0..MAX_LIST_PAGES {
            let params = cursor.map_or_else(|| json!({}), |cursor| json!({ "cursor": cursor }));
            let result = self
                .call("tools/list", params, &HeaderMap::new())
                .await
                .map_err(|failure| format!("tools/list: {failure}"))?;
            let page: ToolsPage = serde_json::from_value(result)
                .map_err(|e| format!("tools/list: an unreadable answer: {e}"))?;
            tools.extend(page.tools);
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(tools),
            }
        }
        Err(format!(
            "tools/list: more than {MAX_LIST_PAGES} pages; the cursor does not end"
        ))
    }

    /// A request in the session, with `extra` headers, renewed once if
    /// the server forgot it.
    async fn call(&self, method: &str, params: Value, extra: &HeaderMap) -> Result<Value, Failure> {
        let state = self.state.read().await.clone();
        match self.post(method, &params, state.as_ref(), extra).await {
            Err(Failure::SessionGone(_)) => {
                self.renew(state).await.map_err(Failure::Other)?;
                let state = self.state.read().await.clone();
                self.post(method, &params, state.as_ref(), extra)
                    .await
                    .map(|(result, _)| result)
            }
            answered => answered.map(|(result, _)| result),
        }
    }

    /// Opens a new session in place of `forgotten`, unless another call
    /// already has.
    async fn renew(&self, forgotten: Option<SessionState>) -> Result<(), String> {
        let _renewing = self.renewing.lock().await;
        if *self.state.read().await != forgotten {
            return Ok(());
        }
        tracing::info!(server = %self.server, "MCP session forgotten or server ended; opening a new one");
        self.open().await?;
        // A server that restarted may list other tools.
        self.changed.notify_one();
        Ok(())
    }

    /// Sends one request; its result and the session id the answer set.
    async fn post(
        &self,
        method: &str,
        params: &Value,
        state: Option<&SessionState>,
        extra: &HeaderMap,
    ) -> Result<(Value, Option<HeaderValue>), Failure> {
        let request = Request {
            jsonrpc: "2.0",
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            method,
            params,
        };
        let (answer, session_id) = match &self.transport {
            Transport::Http(http) => http.exchange(&request, state, extra).await?,
            Transport::Stdio(stdio) => (stdio.exchange(&request).await?, None),
        };
        result_of(answer, request.id).map(|result| (result, session_id))
    }
}

/// Takes in `message`, which the server sent of its own accord (it has a
/// `method`): `notifications/tools/list_changed` tells `changed`, other
/// notifications are logged; a request gets the reply to send returned —
/// `ping` only, this client offers nothing else.
fn server_message(server: &str, message: &Value, changed: &Notify) -> Option<Value> {
    let method = message.get("method").and_then(Value::as_str).unwrap_or("");
    let Some(id) = message.get("id") else {
        if method == "notifications/tools/list_changed" {
            tracing::info!(server, "MCP server says its tools changed");
            changed.notify_one();
        } else {
            tracing::debug!(server, method, "MCP notification");
        }
        return None;
    };
    Some(if method == "ping" {
        json!({"jsonrpc": "2.0", "id": id, "result": {}})
    } else {
        let message = format!("this client offers no `{method}`");
        json!({"jsonrpc": "2.0", "id": id, "error": {"code": METHOD_NOT_FOUND, "message": message}})
    })
}

/// The `result` of the JSON-RPC answer to request `id`.
fn result_of(mut answer: Value, id: u64) -> Result<Value, Failure> {
    if answer.get("id") != Some(&json!(id)) {
        return Err(Failure::Other(format!(
            "the answer is not to this request: {}",
            snippet(&answer.to_string())
        )));
    }
    if let Some(error) = answer.get("error") {
        return Err(Failure::Rpc {
            code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
            message: error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("no message")
                .to_owned(),
        });
    }
    answer
        .get_mut("result")
        .map(Value::take)
        .ok_or_else(|| Failure::Other("the answer has neither result nor error".into()))
}

/// One tool of an MCP server.
struct McpTool {
    spec: ToolSpec,
    session: Arc<Session>,
}

impl fmt::Debug for McpTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpTool")
            .field("name", &self.spec.name)
            .field("server", &self.session.server)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Tool for McpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn invoke(&self, context: &ToolContext, arguments: Value) -> Result<Value, ToolError> {
        let name = &self.spec.name;
        let headers = call_headers(name, HeaderMap::new(), &self.session.forward, context)?;
        let mut params = Map::new();
        params.insert("name".into(), name.clone().into());
        params.insert("arguments".into(), arguments);
        if let Some(trace) = TraceContext::to_send(context.get::<TraceContext>()) {
            trace.add_to_meta(&mut params);
        }
        match self
            .session
            .call("tools/call", params.into(), &headers)
            .await
        {
            Ok(result) => tool_result(name, result),
            Err(Failure::Rpc { code, message }) if code == INVALID_PARAMS => {
                Err(ToolError::InvalidArguments {
                    tool: name.clone(),
                    message,
                })
            }
            Err(failure) => Err(ToolError::Failed(format!(
                "{name} (MCP server `{}`): {failure}",
                self.session.server
            ))),
        }
    }
}

/// A `tools/call` result as the tool's result, or its error.
fn tool_result(name: &str, mut result: Value) -> Result<Value, ToolError> {
    let contents = result
        .get("content")
        .and_then(Value::as_array)
        .map(|contents| contents.iter().map(content_value).collect::<Vec<_>>())
        .unwrap_or_default();
    if result.get("isError") == Some(&Value::Bool(true)) {
        let text = contents
            .iter()
            .map(|content| match content {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n");
        return Err(ToolError::Rejected(format!("{name}: {text}")));
    }
    if let Some(structured) = result.get_mut("structuredContent") {
        return Ok(structured.take());
    }
    Ok(match <[Value; 1]>::try_from(contents) {
        Ok([only]) => only,
        Err(contents) => Value::Array(contents),
    })
}

/// One content of a result: text (parsed when it is JSON), or what kind of
/// content was left out.
fn content_value(content: &Value) -> Value {
    match content.get("type").and_then(Value::as_str) {
        Some("text") => {
            let text = content.get("text").and_then(Value::as_str).unwrap_or("");
            serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
        }
        kind => json!({
            "type": kind.unwrap_or("unknown"),
            "omitted": "only text contents are passed on",
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_prefer_structured_content_then_text_parsed_when_json() {
        let text = |text: &str| json!({"type": "text", "text": text});
        assert_eq!(
            tool_result(
                "t",
                json!({"content": [text("{\"a\":1}")], "structuredContent": {"b": 2}})
            ),
            Ok(json!({"b": 2}))
        );
        assert_eq!(
            tool_result("t", json!({"content": [text("{\"a\":1}")]})),
            Ok(json!({"a": 1}))
        );
        assert_eq!(
            tool_result("t", json!({"content": [text("plain")]})),
            Ok(json!("plain"))
        );
        assert_eq!(
            tool_result(
                "t",
                json!({"content": [text("1"), {"type": "image", "data": "AAAA"}]})
            ),
            Ok(json!([1, {"type": "image", "omitted": "only text contents are passed on"}]))
        );
        assert_eq!(
            tool_result(
                "t",
                json!({"content": [text("no such customer")], "isError": true})
            ),
            Err(ToolError::Rejected("t: no such customer".into()))
        );
    }

    #[test]
    fn an_rpc_error_or_a_stray_answer_is_a_failure() {
        match result_of(
            json!({"id": 1, "error": {"code": -32602, "message": "bad"}}),
            1,
        ) {
            Err(Failure::Rpc { code, message }) => {
                assert_eq!((code, message.as_str()), (-32602, "bad"))
            }
            _ => panic!("not an RPC error"),
        }
        assert!(matches!(
            result_of(json!({"id": 2, "result": {}}), 1),
            Err(Failure::Other(_))
        ));
        assert!(matches!(
            result_of(json!({"id": 1}), 1),
            Err(Failure::Other(_))
        ));
    }
}
