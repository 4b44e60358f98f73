//! The HTTP gateway: a [`SkillHost`] behind an OpenAI-compatible API.
//!
//! `skillhost serve` runs it on its own; an application mounts
//! [`Gateway::router`] next to its own routes (see
//! `host/examples/embed_axum.rs`).
//!
//! # Routes
//!
//! | route | access | what |
//! |---|---|---|
//! | `POST /v1/chat/completions` | API | OpenAI chat completions; the agent runs behind it; `stream: true` streams SSE chunks |
//! | `POST /v1/confirmations/{id}` | API | `{"decision": "approve" \| "reject", "reason"?, "stream"?, "stream_options"?}`: answers a pending confirmation and resumes its run; `409` `confirmation_resolved` saying how it ended when it was answered already |
//! | `GET /v1/confirmations/{id}` | API | where a confirmation is: `pending` (with how to answer it), or `resolved` with `resolution` (`decision`, `by`?, `reason`?), `resolved_at` and, for an approval whose call a stop of the host cut short (`--runs-dir`), `interrupted` saying so, for an hour after (the latest 1024, 16 MiB of arguments): how a requester learns what a separate approver decided |
//! | `GET /v1/runs/{id}` | API | a run that waited for a person: `pending_confirmation`, `running`, `done` with its `result` (invocation) or `answer` (chat), or `failed` with `error` (and, for a run a stop of the host cut short after a write's approval, `interrupted`: `tool`, `confirmation`, `approved_by`, `approved_at`, and `returned`, `{"result": …}` or `{"error": …}` when the call returned, else null); for an hour after its last change (the latest 4096 states, 32 MiB): what a run did after someone else resumed it; shown to the principal the run acts for and the admin key |
//! | `GET /v1/models` | API | the configured model, for clients that list models first |
//! | `GET /v1/models/{id}` | API | that model, or a 404 `model_not_found` naming the one served |
//! | `GET /v1/skills` | API | loaded skills (manifest, version, digest, signer, status, last reload error) and failed files |
//! | `GET /v1/skills/{name}` | API | one skill |
//! | `POST /v1/skills/{name}/invoke` | API | runs a skill on the JSON body; no LLM needed for deterministic steps |
//! | `POST /mcp` | API | the skills as MCP tools (Streamable HTTP, stateless, JSON answers): `initialize`, `tools/list`, `tools/call` (an invocation; a held write parks it and the result says where to approve) |
//! | `GET /mcp` | API | SSE: `notifications/tools/list_changed` whenever a reload changes the skills (`Accept: text/event-stream`, else 406) |
//! | `GET /v1/events` | admin | SSE: `reload`, `trust`, `tools`, `limits`, `invocation`, `confirmation_pending`, `confirmation_resolved` ([`HostEvent`](crate::embed::HostEvent)), each with its id; `Last-Event-ID` resumes ([`SkillHost::follow_events`](crate::embed::SkillHost::follow_events)) |
//! | `GET /v1/confirmations` | admin | every pending confirmation |
//! | `GET /v1/tools` | admin | the tools skills may call and unlock now (MCP servers' as last listed): `name`, `access`, `approval` (whether a call waits for a person), `description`, `parameters`, and `server` for an MCP server's |
//! | `GET /metrics` | admin | Prometheus metrics (OpenMetrics text, see [`crate::embed::metrics`]) |
//! | `GET /healthz` | open | liveness (always 200) and a summary: skills loaded, failures, LLM configured; `degraded`, with `problems`, while the skills directory cannot be read or files in it did not load |
//!
//! Every response carries `X-Request-Id`: the request's own (1 to 128
//! visible ASCII characters), else a fresh `req_…`; what the request logs,
//! the runs it starts included, sits in a `request` span with that id (and
//! the trace id of a valid W3C `traceparent`). The runs a request starts
//! pass its `traceparent` and `tracestate` on to the LLM, HTTP tools and MCP
//! servers they call ([`crate::trace_context`]); an MCP `tools/call`'s own
//! `params._meta` context comes before the header's.
//!
//! # Confirmations in OpenAI's format
//!
//! When a run reaches a write that needs a person's approval, the chat
//! route answers with an ordinary completion — `finish_reason: "stop"`, so
//! no client mistakes it for a tool call to execute itself — whose
//! assistant `content` says what waits for approval and how to answer
//! (readable in any chat UI), plus a `skillhost` extension field that
//! clients ignore unless they know it:
//!
//! ```json
//! "skillhost": {"run": "run_…", "status": "pending_confirmation",
//!               "confirmation": {"id": "cf_…", "tool": "applyRefund", "arguments": {…},
//!                                "summary": "…", "expires_at": "…",
//!                                "answer": {"method": "POST", "path": "/v1/confirmations/cf_…"}}}
//! ```
//!
//! (`"status": "completed"` on every other completion, whose
//! `finish_reason` is that of the model's final answer: `length` or
//! `content_filter` when the server cut it short or withheld it, else
//! `stop`.) When the main agent left older turns of the conversation out to
//! fit its context budget, the field also carries `"compacted":
//! {"evicted_messages", "revoked"}` (runs::Compacted). Streaming ends the
//! same way: the explanation as content, a final chunk carrying the
//! extension field, `data: [DONE]`. The run waits server-side, holding the
//! arguments; `POST /v1/confirmations/{id}` resumes it and answers with the
//! run's next completion — its final answer, or the next pending
//! confirmation — as JSON, or as SSE chunks with `"stream": true`. A direct
//! invocation (`/v1/skills/{name}/invoke`) answers `202` with the pending
//! confirmation instead, and the confirmation route then answers with the
//! invocation's result. Each response's `usage` is what the run used for
//! it: a resumed run's counts from the answer. Each request is one run over
//! the messages it carries: the host's internal calls are not returned, so
//! a later request starts from the conversation's text, and a history's
//! `load_skill` results are the client's text, which unlocks nothing. The
//! operator's system prompt comes first; a request's leading system
//! messages are added to it.
//!
//! # Who a run acts for
//!
//! An application that mounts [`Gateway::router`] behind its own
//! authentication attaches a [`ToolContext`] to each request (in the
//! request's extensions: a middleware's `request.extensions_mut().insert(…)`
//! or axum's `Extension` layer). The run a chat or an invocation starts
//! hands it to every tool it calls, so that a tool acts for the user the
//! application authenticated, whatever the model or the skill writes in
//! the arguments. It stays with the run: the request answering a
//! confirmation cannot change it. A [`Principal`] attached the same way
//! says who the user is: a confirmation their request answers is resolved
//! on their behalf.
//!
//! Without code of its own, a deployment can pass request headers on to
//! HTTP tools instead: those [`GatewayConfig::forward_headers`] names are
//! put in the run's context as a [`Forwarded`], and an HTTP tool sends on
//! those its own `forward_headers` lists (the end user's id, set by the
//! proxy in front). With keys configured, `Authorization` carries the
//! gateway's key and is never forwarded.
//!
//! # Safety at the edge
//!
//! - **Keys** ([`GatewayConfig`]): with API keys configured, API routes need
//!   `Authorization: Bearer <key>` (401 otherwise). Admin routes need the
//!   admin key; the events and metrics routes are admin routes because they
//!   show every user's confirmations and the whole host's activity. Without
//!   an admin key, admin routes are open only when no API key is configured
//!   either, and refused (403) otherwise — adding API keys never leaves the
//!   admin routes open. The admin key also works on API routes. Each key
//!   has a name ([`ApiKey`]; the admin key's is `admin`): a request that
//!   presents it acts as that [`Principal`], unless the application that
//!   mounts the router attached its own, and a confirmation it answers is
//!   resolved on its behalf (`"by"` in `confirmation_resolved`). A run's
//!   record (`GET /v1/runs/{id}`) is shown to the principal the run acts
//!   for and to the admin key; to any other it is unknown.
//!   `/healthz` is always open. A gateway with no key at all answers only
//!   requests addressed to `localhost`, an IP address or one of
//!   [`GatewayConfig::allowed_hosts`] (403 `host_not_allowed`): a web page
//!   that makes its own name resolve to 127.0.0.1 (DNS rebinding) sends
//!   its name. Browsers let pages of another origin call the gateway only
//!   when [`GatewayConfig::cors_origins`] lists it (no wildcard).
//! - **Errors** are OpenAI-style bodies, `{"error": {"message", "type",
//!   "param", "code"}}`, with a 4xx for everything a client can fix (see
//!   [`errors`]); a 5xx says `x-should-retry: false`, as a retry would run
//!   a whole run again. The model's server failing is a 503 when it rate
//!   limits, a 504 when it times out, else a 502, each with its own code.
//!   A streamed chat's response starts once the model has answered: a run
//!   failing before (the model's server refused the conversation or the
//!   key, a timeout) is answered with the error's status; after it, the
//!   error is the stream's last chunk before `[DONE]`.
//! - **Limits**: a body limit and a per-request timeout (defaults on
//!   [`GatewayConfig`]); a streaming response's run gets the same time.
//!   [`Gateway::serve`] caps the connections it serves at once and gives
//!   each request's headers a deadline, which also closes idle keep-alive
//!   connections: a client holding connections open without sending
//!   requests keeps each for that long at most.
//!   At most [`GatewayConfig::max_parked_runs`] runs wait for a person's
//!   answer at once; a run reaching a confirmation past it is aborted,
//!   nothing written, and answered 503. With
//!   [`GatewayConfig::max_parked_runs_per_principal`], one client past its
//!   share is answered 429 the same way, and the others are not held up.
//!   With [`GatewayConfig::rate_limits`], each key may make so many
//!   requests a minute of the API routes; one past it is answered 429
//!   `rate_limited` with `Retry-After`, before anything runs.
//! - **Shutdown** ([`Gateway::serve`]): stop accepting, end event streams,
//!   let in-flight requests finish, then the runs still at work (answered,
//!   with nobody reading them); runs parked on a confirmation are left.

mod chat;
mod connections;
mod cors;
pub mod errors;
mod keys;
mod ledger;
mod mcp;
mod mcp_sessions;
mod openai;
mod ops;
mod rate;
mod runs;
mod skills;

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::fmt;
use std::num::NonZeroUsize;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use axum::extract::{DefaultBodyLimit, FromRequestParts, MatchedPath, OriginalUri, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tower_http::catch_panic::CatchPanicLayer;
use tracing::{Instrument, field};

use crate::agent::RunOptions;
use crate::embed::SkillHost;
use crate::scope::{SkillScope, ToolScope};
use crate::tools::ToolContext;
use crate::tools::http::Forwarded;
use crate::trace_context::TraceContext;
pub use cors::{CorsOrigin, InvalidOrigin};
use errors::{ApiError, ErrorCode, ErrorType};
pub use keys::{ADMIN_PRINCIPAL, ApiKey, Principal};
use keys::{Keys, require_admin_key, require_api_key};
use ledger::RunLedger;
use mcp_sessions::McpSessions;
pub use rate::RateLimits;
use rate::{Limiter, rate_limit};
use runs::{Parking, ParkingLimits};

/// Largest request body accepted. Default: 1 MiB — a chat request with a
/// long conversation is tens of KiB; a skill's input is far smaller.
pub const DEFAULT_BODY_LIMIT: usize = 1 << 20;

/// Time a request may take until its response starts (for a streamed
/// chat, until its run ends or waits). Default: 5 minutes — room for a
/// multi-round agent run against a slow model, short enough that a stuck
/// request does not hold a connection for long.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(300);

/// Time a client has to send a request's headers once its connection waits
/// for them, idle keep-alive time included. Default: 30 s (hyper's): ample
/// for any client but one holding connections open on purpose.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest [`GatewayConfig::header_timeout`] that applies: an hour. A
/// longer one is taken as an hour (the deadline is an `Instant`, which a
/// far-off duration would overflow).
pub const MAX_HEADER_TIMEOUT: Duration = Duration::from_secs(3600);

/// Connections served at once. Default: 512 — far more than a proxy in front
/// or a few applications keep open, and well inside the 1024 file descriptors
/// a process is commonly allowed (skills, the database and watches use some).
pub const DEFAULT_MAX_CONNECTIONS: NonZeroUsize = NonZeroUsize::new(512).expect("not zero");

/// How the gateway guards its edge. Keys are compared in constant time and
/// never logged (`Debug` redacts them).
#[derive(Clone)]
pub struct GatewayConfig {
    /// Bearer keys accepted on API routes, each with the name its holder
    /// goes by (`"key".into()` for one named by its position). Default:
    /// none — API routes are open (fine on loopback, not beyond).
    pub api_keys: Vec<ApiKey>,
    /// Bearer key for admin routes; it goes by `admin`. Default: none (see
    /// the module docs for what admin routes do then).
    pub admin_key: Option<String>,
    /// Default: [`DEFAULT_BODY_LIMIT`].
    pub body_limit: usize,
    /// Default: [`DEFAULT_REQUEST_TIMEOUT`].
    pub request_timeout: Duration,
    /// How long [`Gateway::serve`] waits for a request's headers on a
    /// connection, including a keep-alive connection's wait for its next
    /// request; then the connection is closed. Default:
    /// [`DEFAULT_HEADER_TIMEOUT`]; at most [`MAX_HEADER_TIMEOUT`].
    pub header_timeout: Duration,
    /// The most connections [`Gateway::serve`] serves at once; further
    /// clients wait to be accepted until one closes. With
    /// [`GatewayConfig::header_timeout`], a client that opens connections
    /// and sends nothing holds each for that long at most. Default:
    /// [`DEFAULT_MAX_CONNECTIONS`].
    pub max_connections: NonZeroUsize,
    /// The most runs held at once waiting for a person's answer (each up to
    /// the confirmation expiry). A run that reaches a confirmation beyond
    /// it is aborted, nothing written, and its request answered 503, so a
    /// client that starts runs and never answers cannot grow the gateway
    /// without bound. Runs kept across a restart
    /// ([`SkillHostBuilder::keep_runs`](crate::embed::SkillHostBuilder::keep_runs))
    /// wait again whatever it is, and count toward it. Default:
    /// [`DEFAULT_MAX_PARKED_RUNS`].
    pub max_parked_runs: usize,
    /// The most of those runs one [`Principal`] (an API key's holder, or
    /// the user an application named) has waiting at once; past it, its
    /// run is aborted the same way and answered 429, while other clients'
    /// runs still park. Runs on nobody's behalf (no keys, no principal)
    /// count only against [`GatewayConfig::max_parked_runs`]. Default:
    /// none, for a gateway with one client.
    pub max_parked_runs_per_principal: Option<usize>,
    /// Host names an open gateway (no API key, no admin key) answers
    /// besides `localhost` and IP addresses. Default: none. Without keys,
    /// a request naming any other host (`Host: evil.example`) is refused:
    /// that is what a web page reaching a loopback gateway through DNS
    /// rebinding sends.
    pub allowed_hosts: Vec<String>,
    /// Web origins whose pages may call the gateway from a browser
    /// (`https://chat.example.com`): their preflights are answered and
    /// responses to them carry `Access-Control-Allow-Origin`. Default:
    /// none — browsers keep pages of other origins from reading any
    /// response. Keys still guard the routes; there is no wildcard.
    pub cors_origins: Vec<CorsOrigin>,
    /// Request headers a chat or an invocation passes on to the HTTP tools
    /// its run calls (as a [`Forwarded`] in the run's [`ToolContext`],
    /// beside what an application attached; each tool sends only those its
    /// own `forward_headers` lists). Forward only headers the proxy in
    /// front sets or checks: a client can send any. `Authorization` is not
    /// forwarded while keys are configured, since it carries the gateway's
    /// key. Default: none.
    pub forward_headers: Vec<HeaderName>,
    /// The skills and tools API keys may use, by the keys' names.
    /// Default: none (every key uses every skill and tool).
    /// [`Gateway::set_scopes`] replaces them.
    pub scopes: KeyScopes,
    /// How many requests a minute each key may make of the API routes;
    /// past it, a request is answered 429 `rate_limited` with
    /// `Retry-After`, before anything runs. Default: unlimited.
    /// [`Gateway::set_rate_limits`] replaces them.
    pub rate_limits: RateLimits,
}

/// What API keys may use, by the key's name (`api-key-1`, or its name in
/// the keys file) ([`GatewayConfig::scopes`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyScopes {
    /// The skills a key may use: it is shown, invokes, calls over `/mcp`
    /// and has the chat's agent offered only these; another skill is a
    /// 403 `skill_not_permitted`. A key not named here may use every skill.
    pub skills: BTreeMap<String, SkillScope>,
    /// The tools a key's chat agent may be offered and call itself
    /// ([`RunOptions::tools`]); the skills it runs call the tools their
    /// manifests declare. A key not named here: every tool.
    pub tools: BTreeMap<String, ToolScope>,
}

impl KeyScopes {
    /// The names of the keys some scope is given to.
    pub fn key_names(&self) -> impl Iterator<Item = &str> {
        let names: BTreeSet<&str> = self
            .skills
            .keys()
            .chain(self.tools.keys())
            .map(String::as_str)
            .collect();
        names.into_iter()
    }

    /// The skills the key `name` may use.
    fn skills_of(&self, name: &str) -> SkillScope {
        self.skills.get(name).cloned().unwrap_or_default()
    }

    /// The tools the key `name`'s chat agent may use itself.
    fn tools_of(&self, name: &str) -> ToolScope {
        self.tools.get(name).cloned().unwrap_or_default()
    }
}

/// Default [`GatewayConfig::max_parked_runs`]: 10,000.
pub const DEFAULT_MAX_PARKED_RUNS: usize = 10_000;

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            api_keys: Vec::new(),
            admin_key: None,
            body_limit: DEFAULT_BODY_LIMIT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_parked_runs: DEFAULT_MAX_PARKED_RUNS,
            max_parked_runs_per_principal: None,
            allowed_hosts: Vec::new(),
            cors_origins: Vec::new(),
            forward_headers: Vec::new(),
            scopes: KeyScopes::default(),
            rate_limits: RateLimits::default(),
        }
    }
}

impl fmt::Debug for GatewayConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GatewayConfig")
            .field(
                "api_keys",
                &format_args!("<{} redacted>", self.api_keys.len()),
            )
            .field("admin_key", &self.admin_key.as_ref().map(|_| "<redacted>"))
            .field("body_limit", &self.body_limit)
            .field("request_timeout", &self.request_timeout)
            .field("header_timeout", &self.header_timeout)
            .field("max_connections", &self.max_connections)
            .field("max_parked_runs", &self.max_parked_runs)
            .field(
                "max_parked_runs_per_principal",
                &self.max_parked_runs_per_principal,
            )
            .field("allowed_hosts", &self.allowed_hosts)
            .field("cors_origins", &self.cors_origins)
            .field("forward_headers", &self.forward_headers)
            .field("scopes", &self.scopes)
            .field("rate_limits", &self.rate_limits)
            .finish()
    }
}

/// The options of a run a request starts: the [`ToolContext`] an
/// application attached to the request, if any, with the headers
/// [`GatewayConfig::forward_headers`] names (see the module docs), on
/// behalf of the request's [`Principal`], in the request's
/// [`TraceContext`].
struct RunStart(RunOptions);

impl FromRequestParts<Arc<AppState>> for RunStart {
    type Rejection = Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Infallible> {
        let mut context = parts
            .extensions
            .get::<ToolContext>()
            .cloned()
            .unwrap_or_default();
        let forwarded = state
            .config
            .forward_headers
            .iter()
            .filter(|name| **name != header::AUTHORIZATION || !state.keys().any());
        let mut forwarded = Forwarded::from_request(&parts.headers, forwarded);
        if !forwarded.is_empty() {
            // What the application attached comes first.
            if let Some(attached) = context.get::<Forwarded>() {
                forwarded = attached.clone().or(&forwarded);
            }
            context.insert(forwarded);
        }
        let mut options = RunOptions::new().context(context);
        if let Some(trace) = parts.extensions.get::<TraceContext>() {
            options = options.trace(trace.clone());
        }
        Ok(Self(match parts.extensions.get::<Principal>() {
            Some(Principal(name)) => {
                let scopes = state.scopes();
                options
                    .skills(scopes.skills_of(name))
                    .tools(scopes.tools_of(name))
                    .on_behalf_of(name.clone())
            }
            None => options,
        }))
    }
}

/// The skills the request's caller may use
/// ([`KeyScopes::skills`]).
struct CallerSkills(SkillScope);

impl FromRequestParts<Arc<AppState>> for CallerSkills {
    type Rejection = Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Infallible> {
        Ok(Self(match parts.extensions.get::<Principal>() {
            Some(Principal(name)) => state.scopes().skills_of(name),
            None => SkillScope::all(),
        }))
    }
}

/// A host served over HTTP. Cheap to clone.
#[derive(Clone)]
pub struct Gateway {
    state: Arc<AppState>,
}

/// What every handler shares.
struct AppState {
    host: SkillHost,
    config: GatewayConfig,
    /// Replaced whole by [`Gateway::set_api_keys`].
    keys: RwLock<Arc<Keys>>,
    /// Replaced whole by [`Gateway::set_scopes`].
    scopes: RwLock<Arc<KeyScopes>>,
    /// Replaced by [`Gateway::set_rate_limits`], with the buckets whose
    /// rate stayed.
    limiter: RwLock<Arc<Limiter>>,
    /// The sessions of `/mcp`.
    mcp_sessions: McpSessions,
    parking: Arc<Parking>,
    /// What became of the runs that waited (`GET /v1/runs/{id}`).
    ledger: Arc<RunLedger>,
    /// Set when the gateway shuts down: event streams end.
    closing: watch::Sender<bool>,
}

impl Gateway {
    pub fn new(host: SkillHost, config: GatewayConfig) -> Self {
        let keys = RwLock::new(Arc::new(Keys::new(
            &config.api_keys,
            config.admin_key.as_deref(),
        )));
        let scopes = RwLock::new(Arc::new(config.scopes.clone()));
        let limiter = RwLock::new(Arc::new(Limiter::new(config.rate_limits.clone())));
        let parking = Arc::new(Parking::new(ParkingLimits {
            total: config.max_parked_runs,
            per_principal: config.max_parked_runs_per_principal,
        }));
        let state = Arc::new(AppState {
            host,
            config,
            keys,
            scopes,
            limiter,
            mcp_sessions: McpSessions::default(),
            parking,
            ledger: Arc::default(),
            closing: watch::Sender::new(false),
        });
        // Runs the host resumed from disk are parked here as they wait
        // (outside a Tokio runtime, they are left to the host).
        if tokio::runtime::Handle::try_current().is_ok() {
            for run in state.host.take_resumed_runs() {
                runs::take_in(&state, run);
            }
        }
        Self { state }
    }

    /// The routes, with their guards and limits. Mount it in an
    /// application with `Router::merge` (when the application has no
    /// fallback of its own) or `Router::nest` (then the OpenAI base URL is
    /// `<prefix>/v1`).
    pub fn router(&self) -> Router {
        let state = &self.state;
        let api = Router::new()
            .route("/v1/chat/completions", post(chat::chat_completions))
            .route(
                "/v1/confirmations/{id}",
                get(chat::confirmation_status).post(chat::answer_confirmation),
            )
            .route("/v1/runs/{id}", get(ledger::run_status))
            .route("/v1/models", get(ops::models))
            .route("/v1/models/{id}", get(ops::model))
            .route("/v1/skills", get(skills::list))
            .route("/v1/skills/{name}", get(skills::get))
            .route("/v1/skills/{name}/invoke", post(skills::invoke))
            .route(
                "/mcp",
                post(mcp::message).get(mcp::stream).delete(mcp::end_session),
            )
            // The key first: a request is counted against the key it
            // presents.
            .route_layer(from_fn_with_state(state.clone(), rate_limit))
            .route_layer(from_fn_with_state(state.clone(), require_api_key));
        let admin = Router::new()
            .route("/v1/events", get(ops::events))
            .route("/v1/confirmations", get(ops::pending_confirmations))
            .route("/v1/tools", get(ops::tools))
            .route("/metrics", get(ops::metrics))
            .route_layer(from_fn_with_state(state.clone(), require_admin_key));
        let router = Router::new()
            .route("/healthz", get(ops::healthz))
            .merge(api)
            .merge(admin)
            .fallback(errors::not_found)
            .method_not_allowed_fallback(errors::method_not_allowed)
            .layer(DefaultBodyLimit::max(state.config.body_limit))
            .layer(Extension(errors::BodyLimit(state.config.body_limit)))
            .layer(from_fn_with_state(state.clone(), time_limit))
            .layer(CatchPanicLayer::custom(errors::panic_response))
            .layer(from_fn_with_state(state.clone(), track))
            .with_state(state.clone());
        // Outermost: a preflight carries no key, and is answered here.
        match state.config.cors_origins.as_slice() {
            [] => router,
            origins => router.layer(cors::layer(origins)),
        }
    }

    /// Replaces the API keys (not the admin key), for a key rotation without
    /// a restart: requests from now on are checked against `api_keys`, and
    /// runs parked meanwhile keep waiting. An empty list opens the API
    /// routes, as at the start.
    pub fn set_api_keys(&self, api_keys: &[ApiKey]) {
        let admin = self.state.config.admin_key.as_deref();
        let keys = Arc::new(Keys::new(api_keys, admin));
        *self
            .state
            .keys
            .write()
            .unwrap_or_else(PoisonError::into_inner) = keys;
    }

    /// The names the keys in force go by ([`ApiKey::principal`], then
    /// [`ADMIN_PRINCIPAL`] with an admin key): whom runs act for and
    /// answers are given on behalf of.
    pub fn key_names(&self) -> Vec<String> {
        self.state.keys().names()
    }

    /// Replaces the API keys' scopes ([`GatewayConfig::scopes`]):
    /// requests from now on are held to `scopes`; runs under way keep the
    /// scopes they started with.
    pub fn set_scopes(&self, scopes: KeyScopes) {
        *self
            .state
            .scopes
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(scopes);
    }

    /// The API keys' scopes in force.
    pub fn scopes(&self) -> Arc<KeyScopes> {
        self.state.scopes()
    }

    /// Replaces the keys' request rates ([`GatewayConfig::rate_limits`]):
    /// a key whose rate changed starts with a full minute's worth, the
    /// others go on with what they have left.
    pub fn set_rate_limits(&self, limits: RateLimits) {
        let mut limiter = self
            .state
            .limiter
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        *limiter = Arc::new(Limiter::succeeding(limits, Some(&limiter)));
    }

    /// The keys' request rates in force.
    pub fn rate_limits(&self) -> RateLimits {
        self.state.limiter().limits().clone()
    }

    /// Ends the event streams (`GET /v1/events`), which would otherwise
    /// keep a graceful shutdown waiting forever. [`Gateway::serve`] calls it
    /// when its shutdown signal fires; call it yourself when you serve
    /// [`Gateway::router`] in your own server.
    pub fn close_streams(&self) {
        self.state.closing.send_replace(true);
    }

    /// Serves on `listener` (HTTP/1.1) until `shutdown` completes, then
    /// shuts down gracefully: stops accepting, ends event streams, and
    /// returns once in-flight requests (streamed chats included) have
    /// finished and no run is at work ([`SkillHost::idle`]): a run approved
    /// by a client that then went away finishes what was approved. Runs
    /// parked on a confirmation do not hold the shutdown up.
    ///
    /// Connections are capped and their request headers have a deadline
    /// ([`GatewayConfig::max_connections`],
    /// [`GatewayConfig::header_timeout`]); an application serving
    /// [`Gateway::router`] in its own server sets its own.
    pub async fn serve(
        &self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        connections::serve(listener, self.router(), &self.state.config, async {
            shutdown.await;
            self.close_streams();
        })
        .await;
        self.host().idle().await;
        Ok(())
    }

    /// The host behind the gateway.
    pub fn host(&self) -> &SkillHost {
        &self.state.host
    }
}

/// Where the gateway is mounted: the path prefix in front of its routes
/// (empty unless nested), so that answer paths are right either way.
pub(crate) struct Mount(String);

impl Mount {
    /// Mounted at the root: a run no request drives (one taken in as the
    /// gateway is made) answers paths from there.
    fn root() -> Self {
        Self(String::new())
    }

    fn prefix(&self) -> &str {
        &self.0
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Mount {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Infallible> {
        let prefix = parts
            .extensions
            .get::<OriginalUri>()
            .and_then(|original| original.path().strip_suffix(parts.uri.path()))
            .unwrap_or_default();
        Ok(Self(prefix.to_owned()))
    }
}

/// The error of a request (or a streamed run) that ran out of time.
fn timeout_error(after: Duration) -> ApiError {
    ApiError::new(
        StatusCode::GATEWAY_TIMEOUT,
        ErrorType::TimeoutError,
        "request_timeout",
        format!("the request took longer than this gateway allows ({after:?})"),
    )
}

impl AppState {
    /// The key scopes in force now.
    fn scopes(&self) -> Arc<KeyScopes> {
        self.scopes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The request rates in force now.
    fn limiter(&self) -> Arc<Limiter> {
        self.limiter
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The keys in force now.
    fn keys(&self) -> Arc<Keys> {
        self.keys
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Ends a request that takes longer than the configured timeout. Its run,
/// if it has one, is aborted with it, unless a person's answer resumed the
/// run: that goes on to its end ([`runs::OwnedRun`]).
async fn time_limit(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let limit = state.config.request_timeout;
    tokio::time::timeout(limit, next.run(request))
        .await
        .unwrap_or_else(|_| timeout_error(limit).into_response())
}

/// The header a request's id comes and goes back in.
pub const REQUEST_ID_HEADER: &str = "x-request-id";
/// The longest request id taken from a request.
const REQUEST_ID_MAX: usize = 128;

/// A request's id: the one a client or a proxy in front gave
/// (`X-Request-Id`, 1 to 128 visible ASCII characters), else a fresh one.
fn request_id(request: &Request) -> HeaderValue {
    request
        .headers()
        .get(REQUEST_ID_HEADER)
        .filter(|given| {
            let given = given.as_bytes();
            (1..=REQUEST_ID_MAX).contains(&given.len()) && given.iter().all(u8::is_ascii_graphic)
        })
        .cloned()
        .unwrap_or_else(|| {
            HeaderValue::from_str(&crate::agent::random_id("req_")).expect("hex is a header value")
        })
}

/// Counts and logs every request, under its id: the `request` span every
/// line it logs sits in (the runs it starts too), with the trace id of its
/// `traceparent` when it has one, and the `X-Request-Id` of its response.
/// Its [`TraceContext`] goes into its extensions, for the runs it starts.
async fn track(State(state): State<Arc<AppState>>, mut request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str)
        .to_owned();
    let method = request.method().clone();
    let id = request_id(&request);
    // What an application in front attached comes first.
    let trace = match request.extensions().get::<TraceContext>() {
        Some(attached) => Some(attached.clone()),
        None => TraceContext::from_headers(request.headers()),
    };
    // Exported (OTLP), a span is named for its route, as OpenTelemetry's
    // HTTP conventions name a server's.
    let span = tracing::info_span!(
        "request",
        request_id = id.to_str().unwrap_or_default(),
        trace_id = trace.as_ref().map(TraceContext::trace_id),
        otel.name = %format_args!("{method} {route}"),
        otel.kind = "server",
        http.response.status_code = field::Empty,
        otel.status_code = field::Empty,
    );
    if let Some(trace) = trace {
        trace.adopt(&span);
        request.extensions_mut().insert(trace);
    }
    let started = Instant::now();
    let mut response = next.run(request).instrument(span.clone()).await;
    response.headers_mut().insert(REQUEST_ID_HEADER, id);
    let _in_request = span.enter();
    let took = started.elapsed();
    let status = response.status();
    span.record("http.response.status_code", status.as_u16());
    if status.is_server_error() {
        span.record("otel.status_code", "error");
    }
    let code = response.extensions().get::<ErrorCode>().map(|code| code.0);
    state
        .host
        .metrics()
        .record_http(&route, method.as_str(), status.as_u16(), took, code);
    tracing::debug!(%method, %route, status = status.as_u16(), ?took, code, "request");
    response
}
