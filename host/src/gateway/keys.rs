//! Who may call what: the gateway's keys, their names, and the guards of
//! the API and admin routes (see the module docs of [`super`]).

use std::fmt;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use super::AppState;
use super::errors::{ApiError, ErrorType};

/// A bearer key API routes accept, and the name it goes by: a request that
/// presents it acts as that [`Principal`], so that the events and logs of
/// a confirmation it answers say who approved. `From<&str>`/`From<String>`
/// make a key without a name, which goes by `api-key-<n>`, its position
/// in [`GatewayConfig::api_keys`](super::GatewayConfig::api_keys) from 1.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey {
    /// What the key's holder is called in events and logs, e.g. `support-desk`.
    pub name: Option<String>,
    /// The key itself, as clients send it.
    pub key: String,
}

impl ApiKey {
    /// A key that goes by `name`.
    pub fn named(name: impl Into<String>, key: impl Into<String>) -> Self {
        Self {
            name: Some(name.into()),
            key: key.into(),
        }
    }

    /// The [`Principal`] a request presenting the key acts as: its name,
    /// or `api-key-<position>` (from 1) without one.
    pub fn principal(&self, position: usize) -> String {
        match &self.name {
            Some(name) => name.clone(),
            None => format!("api-key-{position}"),
        }
    }
}

impl From<String> for ApiKey {
    fn from(key: String) -> Self {
        Self { name: None, key }
    }
}

impl From<&str> for ApiKey {
    fn from(key: &str) -> Self {
        key.to_owned().into()
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiKey")
            .field("name", &self.name)
            .field("key", &"<redacted>")
            .finish()
    }
}

/// Who sent a request: the name of the key it presented (`admin` for the
/// admin key), or what an application that mounts
/// [`Gateway::router`](super::Gateway::router) behind its own
/// authentication attached to it (in the request's extensions, as a
/// [`ToolContext`](crate::tools::ToolContext) is attached), which comes
/// first. A confirmation a request answers is resolved on its behalf:
/// `{"decision": "approved", "by": "<principal>"}` in the events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal(pub String);

/// Marks a request that presented the admin key, on an admin route or an
/// API route: it may read every run's record, not only those of the runs
/// that act for it (see [`super::ledger::run_status`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct AdminKey;

/// Whose key opened a route.
struct KeyHolder {
    name: Arc<str>,
    admin: bool,
}

impl KeyHolder {
    fn admin() -> Self {
        Self {
            name: ADMIN_PRINCIPAL.into(),
            admin: true,
        }
    }
}

/// What a guard decided: whose key opened the route (none when the route is
/// open to anyone), or the error that refuses it.
type Checked = Result<Option<KeyHolder>, ApiError>;

/// The [`Principal`] a request presenting the admin key acts as.
pub const ADMIN_PRINCIPAL: &str = "admin";

/// SHA-256 digests of the configured keys, compared in constant time, with
/// the names they go by.
pub(super) struct Keys {
    api: Vec<([u8; 32], Arc<str>)>,
    admin: Option<[u8; 32]>,
}

fn digest(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// Equality that takes the same time wherever the first difference is.
fn same(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

impl Keys {
    /// The keys of `api` and `admin`. A key is trimmed, as presented keys
    /// are; an empty one is no key.
    pub(super) fn new(api: &[ApiKey], admin: Option<&str>) -> Self {
        let key = |key: &str| Some(key.trim()).filter(|key| !key.is_empty()).map(digest);
        let api = api
            .iter()
            .enumerate()
            .filter_map(|(index, api)| Some((key(&api.key)?, api.principal(index + 1).into())))
            .collect();
        Self {
            api,
            admin: admin.and_then(key),
        }
    }

    /// The names the keys go by: each API key's, then the admin key's.
    pub(super) fn names(&self) -> Vec<String> {
        let api = self.api.iter().map(|(_, name)| name.to_string());
        let admin = self.admin.map(|_| ADMIN_PRINCIPAL.to_owned());
        api.chain(admin).collect()
    }

    /// Whether any key is configured: then `Authorization` carries one.
    pub(super) fn any(&self) -> bool {
        !self.api.is_empty() || self.admin.is_some()
    }

    /// The name of the API key `key`, if it is one. Every key is compared,
    /// so the time taken says nothing of which matched.
    fn api_name(&self, key: &[u8; 32]) -> Option<&Arc<str>> {
        self.api.iter().fold(None, |found, (api, name)| {
            found.or(same(api, key).then_some(name))
        })
    }

    fn is_admin(&self, key: &[u8; 32]) -> bool {
        self.admin.as_ref().is_some_and(|admin| same(admin, key))
    }

    /// Whether the gateway is open: no key of any kind.
    fn open(&self) -> bool {
        self.api.is_empty() && self.admin.is_none()
    }

    /// Checks the key presented to an API route; returns whose key opened
    /// it. With no API key configured the routes are open to anyone: an
    /// admin key presented is still known.
    fn check_api(&self, presented: Option<&str>) -> Checked {
        let key = presented.map(digest);
        let holder = key.and_then(|key| match self.api_name(&key) {
            Some(name) => Some(KeyHolder {
                name: name.clone(),
                admin: false,
            }),
            None => self.is_admin(&key).then(KeyHolder::admin),
        });
        match (holder, presented) {
            (Some(holder), _) => Ok(Some(holder)),
            _ if self.api.is_empty() => Ok(None),
            (None, None) => Err(missing_key("an API key")),
            (None, Some(_)) => Err(invalid_key()),
        }
    }

    /// Checks the key presented to an admin route; returns whose key opened
    /// it, the admin's, unless the routes are open.
    fn check_admin(&self, presented: Option<&str>) -> Checked {
        if self.admin.is_none() {
            return if self.api.is_empty() {
                Ok(None)
            } else {
                Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    ErrorType::PermissionError,
                    "admin_disabled",
                    "admin routes are disabled: this gateway has API keys but no admin key \
                     (set SKILLHOST_ADMIN_KEY)",
                ))
            };
        }
        let key = digest(presented.ok_or_else(|| missing_key("the admin key"))?);
        if self.is_admin(&key) {
            Ok(Some(KeyHolder::admin()))
        } else if self.api_name(&key).is_some() {
            Err(ApiError::new(
                StatusCode::FORBIDDEN,
                ErrorType::PermissionError,
                "admin_key_required",
                "this route needs the admin key; an API key is not enough",
            ))
        } else {
            Err(invalid_key())
        }
    }
}

fn missing_key(which: &str) -> ApiError {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        ErrorType::AuthenticationError,
        "missing_api_key",
        format!("this route needs {which}: send `Authorization: Bearer <key>`"),
    )
}

/// Refuses a request to an open gateway (no keys) that names a host other
/// than `localhost`, an IP address or one of `allowed`: a web page that
/// made its own name resolve to 127.0.0.1 (DNS rebinding) sends its name,
/// and could otherwise approve confirmations or run skills on a loopback
/// gateway. A request without a host (not a browser's) passes.
fn check_open_host(request: &Request, allowed: &[String]) -> Result<(), ApiError> {
    let authority = request.uri().host().map(str::to_owned).or_else(|| {
        let value = request.headers().get(header::HOST)?.to_str().ok()?;
        Some(host_of(value).to_owned())
    });
    let Some(host) = authority else {
        return Ok(());
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.eq_ignore_ascii_case("localhost")
        || host.parse::<std::net::IpAddr>().is_ok()
        || allowed.iter().any(|name| name.eq_ignore_ascii_case(host))
    {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::FORBIDDEN,
        ErrorType::PermissionError,
        "host_not_allowed",
        format!(
            "this gateway has no keys, so it answers only requests addressed to localhost or \
             an IP address, not to `{host}` (which a web page could make resolve to it); list \
             the name in [server] allowed_hosts, or set API keys"
        ),
    ))
}

/// The host of a `Host` header value, without its port.
fn host_of(value: &str) -> &str {
    if let Some(rest) = value.strip_prefix('[') {
        return rest.split_once(']').map_or(rest, |(host, _)| host);
    }
    value.rsplit_once(':').map_or(value, |(host, _)| host)
}

fn invalid_key() -> ApiError {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        ErrorType::AuthenticationError,
        "invalid_api_key",
        "the API key is not valid for this gateway",
    )
}

/// The token of an `Authorization: Bearer <token>` header.
fn bearer(request: &Request) -> Option<&str> {
    let value = request
        .headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|token| !token.is_empty())
}

/// Guards an API route.
pub(super) async fn require_api_key(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    guard(&state, request, next, Keys::check_api).await
}

/// Guards an admin route.
pub(super) async fn require_admin_key(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    guard(&state, request, next, Keys::check_admin).await
}

/// Lets `request` through when `check` accepts the key it presents (or,
/// on an open gateway, the host it names), as the [`Principal`] of the
/// key unless the application attached one, and marked [`AdminKey`] when
/// it is the admin key.
async fn guard(
    state: &AppState,
    mut request: Request,
    next: Next,
    check: fn(&Keys, Option<&str>) -> Checked,
) -> Response {
    let keys = state.keys();
    let checked = if keys.open() {
        check_open_host(&request, &state.config.allowed_hosts).map(|()| None)
    } else {
        check(&keys, bearer(&request))
    };
    match checked {
        Ok(holder) => {
            if let Some(holder) = holder {
                if holder.admin {
                    request.extensions_mut().insert(AdminKey);
                }
                if request.extensions().get::<Principal>().is_none() {
                    request
                        .extensions_mut()
                        .insert(Principal(holder.name.to_string()));
                }
            }
            next.run(request).await
        }
        Err(error) => error.into_response(),
    }
}
