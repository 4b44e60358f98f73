//! HTTP endpoints as tools, declared in configuration: a team exposes its
//! existing REST services to skills and the agent without writing Rust.
//!
//! ```toml
//! [[tools]]
//! name = "lookupCustomer"
//! description = "Look up a customer by id"
//! access = "read"
//! method = "GET"
//! url = "https://crm.example.com/customers/{customerId}"
//! headers = { Authorization = "Bearer ${CRM_TOKEN}" }
//! parameters = { type = "object", required = ["customerId"], properties = { customerId = { type = "string" } } }
//! ```
//!
//! A call fills each `{field}` of the URL with that argument,
//! percent-encoded (so an argument can never change the host or add path
//! segments; a value that would make a `.` or `..` segment, which the URL
//! parser resolves to another path, is refused, and so is an empty one),
//! and sends the remaining arguments as the query string (`GET`, `DELETE`)
//! or as a JSON body (`POST`, `PUT`, `PATCH`). Only the arguments the schema
//! declares are accepted: `additionalProperties` defaults to `false`, so an
//! extra key a model or skill adds is refused, not sent. `${VAR}` in a header
//! value is replaced by the environment variable `VAR` when the tool is
//! built — a missing variable is an error, never an empty header — and
//! header values are never logged or shown. `forward_headers` names headers
//! of the request that started the run (a [`Forwarded`] in its
//! [`ToolContext`], which the gateway fills from its own `forward_headers`
//! and the CLI from `--header`)
//! sent on with each call, so that the service acts for the end user
//! (`X-User-Id`, their own token); a call whose run does not carry one of
//! them fails without reaching the service. A call made in a trace carries
//! its `traceparent` and `tracestate` ([`crate::trace_context`]). A JSON
//! response is the tool's
//! result (other text becomes a string); a 4xx is a
//! [`ToolError::Rejected`] carrying the service's message, a 5xx or a
//! connection failure a [`ToolError::Failed`].

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::{Access, Tool, ToolContext, ToolError, ToolSpec};
use crate::trace_context::TraceContext;

/// Time one call may take, connecting included. Default: 30 s.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Largest response body read. Default: 1 MiB — the result goes into an LLM
/// context or a skill's input, where even that is plenty.
pub const MAX_RESPONSE_BYTES: usize = 1 << 20;

/// Characters of an error response kept in the error message.
const ERROR_SNIPPET_CHARS: usize = 300;

/// The methods an HTTP tool may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum HttpMethod {
    Get,
    Post,
    Put,
    Patch,
    Delete,
}

impl HttpMethod {
    fn sends_body(self) -> bool {
        matches!(self, Self::Post | Self::Put | Self::Patch)
    }

    fn as_reqwest(self) -> reqwest::Method {
        match self {
            Self::Get => reqwest::Method::GET,
            Self::Post => reqwest::Method::POST,
            Self::Put => reqwest::Method::PUT,
            Self::Patch => reqwest::Method::PATCH,
            Self::Delete => reqwest::Method::DELETE,
        }
    }
}

/// One HTTP tool as declared in configuration.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpToolConfig {
    /// The tool's name, as skills declare it and models call it.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema of the arguments; must be `"type": "object"`.
    pub parameters: Value,
    /// `read` or `write`. Write tools need a person's approval by default.
    pub access: Access,
    /// Default: `GET`.
    #[serde(default = "default_method")]
    pub method: HttpMethod,
    /// `http(s)://host/path/{field}?fixed=1`; placeholders only after the
    /// host, each naming a required parameter.
    pub url: String,
    /// Header values may hold `${VAR}`, read from the environment.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Headers passed on from the request that started the run (its
    /// [`Forwarded`]), e.g. `["X-User-Id"]`. Each must be there: a call
    /// without one fails, unsent, rather than reach the service as nobody
    /// (or as the service account `headers` may carry).
    #[serde(default)]
    pub forward_headers: Vec<String>,
    /// Default: [`DEFAULT_TIMEOUT`].
    #[serde(default)]
    pub timeout_secs: Option<u64>,
}

fn default_method() -> HttpMethod {
    HttpMethod::Get
}

/// Why an HTTP tool's declaration is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("HTTP tool `{tool}`: {reason}")]
pub struct HttpToolError {
    tool: String,
    reason: String,
}

/// A piece of a URL template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Literal(String),
    Field(String),
}

/// An HTTP endpoint as a [`Tool`].
pub struct HttpTool {
    spec: ToolSpec,
    method: HttpMethod,
    template: Vec<Piece>,
    headers: HeaderMap,
    forward: Vec<HeaderName>,
    http: reqwest::Client,
}

/// Headers of the request that started a run, for the HTTP tools it calls
/// to pass on (each tool's `forward_headers` says which). Attach it to the
/// run's [`ToolContext`] ([`RunOptions::with`](crate::agent::RunOptions::with));
/// the gateway does for the headers its
/// [`GatewayConfig::forward_headers`](crate::gateway::GatewayConfig::forward_headers)
/// names. Values are marked sensitive, so they are never logged.
#[derive(Debug, Clone, Default)]
pub struct Forwarded(HeaderMap);

impl Forwarded {
    /// The headers of `request` that `names` lists; the rest stay behind.
    pub fn from_request<'a>(
        request: &HeaderMap,
        names: impl IntoIterator<Item = &'a HeaderName>,
    ) -> Self {
        let mut forwarded = Self::default();
        for name in names {
            for value in request.get_all(name) {
                forwarded.append(name.clone(), value.clone());
            }
        }
        forwarded
    }

    /// Adds a value of `name`.
    pub fn append(&mut self, name: HeaderName, mut value: HeaderValue) {
        value.set_sensitive(true);
        self.0.append(name, value);
    }

    /// The values of `name`.
    pub fn get_all(&self, name: &HeaderName) -> impl Iterator<Item = &HeaderValue> {
        self.0.get_all(name).iter()
    }

    /// Whether no header is here.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// These headers, and those of `other` that are not among them.
    pub fn or(mut self, other: &Self) -> Self {
        for name in other.0.keys() {
            if !self.0.contains_key(name) {
                for value in other.0.get_all(name) {
                    self.0.append(name.clone(), value.clone());
                }
            }
        }
        self
    }
}

/// Headers the HTTP client sets itself, from the request it sends: passed
/// on from elsewhere, they would describe another request.
const UNFORWARDABLE: [HeaderName; 5] = [
    reqwest::header::HOST,
    reqwest::header::CONTENT_LENGTH,
    reqwest::header::CONTENT_TYPE,
    reqwest::header::TRANSFER_ENCODING,
    reqwest::header::CONNECTION,
];

impl fmt::Debug for HttpTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpTool")
            .field("name", &self.spec.name)
            .field("method", &self.method)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("forward_headers", &self.forward)
            .finish_non_exhaustive()
    }
}

impl HttpTool {
    /// Checks `config` and builds the tool, reading `${VAR}`s in header
    /// values through `env` (the process environment:
    /// `|name| std::env::var(name).ok()`).
    pub fn new(
        config: HttpToolConfig,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, HttpToolError> {
        let invalid = |reason: String| HttpToolError {
            tool: config.name.clone(),
            reason,
        };
        if config.parameters.get("type").and_then(Value::as_str) != Some("object") {
            return Err(invalid(
                "parameters must describe an object (`type = \"object\"`)".into(),
            ));
        }
        let template = parse_template(&config.url).map_err(&invalid)?;
        let required: Vec<&str> = config.parameters["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let mut placed = Vec::new();
        for piece in &template {
            let Piece::Field(field) = piece else { continue };
            if !required.contains(&field.as_str()) {
                return Err(invalid(format!(
                    "the URL uses `{{{field}}}`, which is not a required parameter"
                )));
            }
            if placed.contains(&field) {
                return Err(invalid(format!(
                    "the URL uses `{{{field}}}` twice; a parameter goes into it once"
                )));
            }
            placed.push(field);
        }
        // Only declared arguments are sent: an extra key a model or a skill
        // adds would otherwise reach the service as a body field or a query
        // parameter no one reviewed. A schema that allows them says so.
        let mut parameters = config.parameters;
        if let Some(schema) = parameters.as_object_mut() {
            schema
                .entry("additionalProperties")
                .or_insert(Value::Bool(false));
        }
        let headers = secret_headers(&config.headers, &env).map_err(&invalid)?;
        let forward = forward_list(&config.forward_headers, &headers).map_err(&invalid)?;
        let http = client(config.timeout_secs).map_err(invalid)?;
        Ok(Self {
            spec: ToolSpec {
                name: config.name,
                description: config.description,
                parameters,
                access: config.access,
            },
            method: config.method,
            template,
            headers,
            forward,
            http,
        })
    }

    /// The configured headers with those forwarded from `context` and its
    /// trace context; an error naming the first that the run does not
    /// carry.
    fn headers_for(&self, context: &ToolContext) -> Result<HeaderMap, ToolError> {
        call_headers(
            &self.spec.name,
            self.headers.clone(),
            &self.forward,
            context,
        )
    }

    /// The URL for `arguments`, and the arguments the template did not use.
    fn url(
        &self,
        mut arguments: Map<String, Value>,
    ) -> Result<(String, Map<String, Value>), ToolError> {
        let mut url = String::new();
        let mut placed = Vec::new();
        for piece in &self.template {
            match piece {
                Piece::Literal(text) => url.push_str(text),
                Piece::Field(field) => {
                    let text = match arguments.remove(field) {
                        Some(Value::String(text)) => text,
                        Some(value @ (Value::Number(_) | Value::Bool(_))) => value.to_string(),
                        other => {
                            return Err(ToolError::InvalidArguments {
                                tool: self.spec.name.clone(),
                                message: format!(
                                    "field `{field}` must be a string or a number to go into \
                                     the URL, got {}",
                                    other.map_or_else(|| "nothing".into(), |v| v.to_string())
                                ),
                            });
                        }
                    };
                    if text.is_empty() {
                        return Err(ToolError::InvalidArguments {
                            tool: self.spec.name.clone(),
                            message: format!(
                                "field `{field}` is empty; it goes into the URL, where it \
                                 would leave a gap the service may read as another address"
                            ),
                        });
                    }
                    let start = url.len();
                    percent_encode(&text, &mut url);
                    placed.push((field, start..url.len()));
                }
            }
        }
        let path = path_range(&url);
        for segment in url[path.clone()]
            .split('/')
            .scan(path.start, |start, segment| {
                let range = *start..*start + segment.len();
                *start = range.end + 1;
                Some(range)
            })
        {
            if !is_dot_segment(&url[segment.clone()]) {
                continue;
            }
            // Literal dot segments are refused with the template, so a
            // field made this one.
            let fields: Vec<_> = placed
                .iter()
                .filter(|(_, at)| at.start < segment.end && segment.start < at.end)
                .map(|(field, _)| format!("`{field}`"))
                .collect();
            return Err(ToolError::InvalidArguments {
                tool: self.spec.name.clone(),
                message: format!(
                    "field {} would make the path segment `{}`, which moves the request to \
                     another path",
                    fields.join(" and "),
                    &url[segment]
                ),
            });
        }
        Ok((url, arguments))
    }
}

#[async_trait]
impl Tool for HttpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn invoke(&self, context: &ToolContext, arguments: Value) -> Result<Value, ToolError> {
        // The registry validated the arguments against an object schema.
        let Value::Object(arguments) = arguments else {
            return Err(ToolError::InvalidArguments {
                tool: self.spec.name.clone(),
                message: "arguments must be an object".into(),
            });
        };
        let headers = self.headers_for(context)?;
        let (url, rest) = self.url(arguments)?;
        let mut request = self
            .http
            .request(self.method.as_reqwest(), &url)
            .headers(headers);
        if self.method.sends_body() {
            request = request.json(&rest);
        } else if !rest.is_empty() {
            let query: Vec<(String, String)> = rest
                .into_iter()
                .map(|(key, value)| match value {
                    Value::String(text) => (key, text),
                    other => (key, other.to_string()),
                })
                .collect();
            request = request.query(&query);
        }
        let failed = |what: String| ToolError::Failed(format!("{}: {what}", self.spec.name));
        let response = request
            .send()
            .await
            .map_err(|e| failed(crate::text::error_chain(&e.without_url())))?;
        let status = response.status();
        let is_json = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| value.contains("json"));
        let body = read_limited(response).await.map_err(failed)?;
        if status.is_client_error() {
            return Err(ToolError::Rejected(format!(
                "{} answered {status}: {}",
                self.spec.name,
                snippet(&body)
            )));
        }
        if !status.is_success() {
            return Err(failed(format!(
                "the service answered {status}: {}",
                snippet(&body)
            )));
        }
        if is_json {
            serde_json::from_str(&body)
                .map_err(|e| failed(format!("the service sent invalid JSON: {e}")))
        } else {
            Ok(Value::String(body))
        }
    }
}

/// The body, at most [`MAX_RESPONSE_BYTES`].
pub(super) async fn read_limited(response: reqwest::Response) -> Result<String, String> {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| format!("reading the response failed: {e}"))?;
        if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
            return Err(format!(
                "the response is larger than {MAX_RESPONSE_BYTES} bytes"
            ));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

pub(super) fn snippet(text: &str) -> String {
    crate::text::clip(text.trim(), ERROR_SNIPPET_CHARS)
}

/// Splits a URL template into literals and `{field}`s; placeholders may
/// appear only after the host.
fn parse_template(url: &str) -> Result<Vec<Piece>, String> {
    let authority_end = url
        .find("://")
        .filter(|_| url.starts_with("http://") || url.starts_with("https://"))
        .map(|scheme| scheme + 3)
        .and_then(|start| url[start..].find('/').map(|slash| start + slash))
        .ok_or_else(|| format!("`{url}` is not an http(s) URL with a path"))?;
    if url[..authority_end].contains(['{', '}']) {
        return Err(format!(
            "`{url}`: placeholders may appear only in the path and query, not in the host"
        ));
    }
    if url[path_range(url)]
        .split('/')
        .any(|segment| is_dot_segment(segment) && !segment.contains('{'))
    {
        return Err(format!(
            "`{url}`: the path has a `.` or `..` segment; write the path it leads to"
        ));
    }
    let mut pieces = Vec::new();
    let mut rest = url;
    while let Some(open) = rest.find('{') {
        let close = rest[open..]
            .find('}')
            .map(|close| open + close)
            .ok_or_else(|| format!("`{url}`: unclosed `{{`"))?;
        let field = &rest[open + 1..close];
        if field.is_empty() || !field.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("`{url}`: `{{{field}}}` is not a parameter name"));
        }
        if open > 0 {
            pieces.push(Piece::Literal(rest[..open].to_owned()));
        }
        pieces.push(Piece::Field(field.to_owned()));
        rest = &rest[close + 1..];
    }
    if rest.contains('}') {
        return Err(format!("`{url}`: unmatched `}}`"));
    }
    if !rest.is_empty() {
        pieces.push(Piece::Literal(rest.to_owned()));
    }
    Ok(pieces)
}

/// The configured headers, each `${VAR}` replaced through `env`, marked
/// sensitive so that they are never logged.
pub(super) fn secret_headers(
    configured: &BTreeMap<String, String>,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<HeaderMap, String> {
    let mut headers = HeaderMap::new();
    for (name, value) in configured {
        let value = expand_env(value, "a header", env)?;
        let name = HeaderName::try_from(name.as_str())
            .map_err(|e| format!("header name `{name}`: {e}"))?;
        let mut value = HeaderValue::try_from(value)
            .map_err(|_| format!("header `{name}` has an invalid value"))?;
        value.set_sensitive(true);
        headers.insert(name, value);
    }
    Ok(headers)
}

/// `forward_headers` as header names: none the request sets itself, none
/// also in `headers` (which value would be sent would be unclear), none
/// twice.
pub(super) fn forward_list(
    names: &[String],
    headers: &HeaderMap,
) -> Result<Vec<HeaderName>, String> {
    let mut forward = Vec::new();
    for name in names {
        let name = HeaderName::try_from(name.as_str())
            .map_err(|e| format!("forward_headers: `{name}`: {e}"))?;
        if UNFORWARDABLE.contains(&name) {
            return Err(format!(
                "forward_headers: `{name}` describes the request the tool sends; it cannot \
                 come from another"
            ));
        }
        if headers.contains_key(&name) {
            return Err(format!(
                "`{name}` is both in headers and in forward_headers; say which it is"
            ));
        }
        if forward.contains(&name) {
            return Err(format!("forward_headers lists `{name}` twice"));
        }
        forward.push(name);
    }
    Ok(forward)
}

/// The headers a call of `tool` sends: `headers` with those named in
/// `forward` taken from the run's [`Forwarded`], and the run's
/// [`TraceContext`] unless they carry a `traceparent` already; refused
/// naming the first of `forward` the run does not carry.
pub(super) fn call_headers(
    tool: &str,
    mut headers: HeaderMap,
    forward: &[HeaderName],
    context: &ToolContext,
) -> Result<HeaderMap, ToolError> {
    let forwarded = context.get::<Forwarded>();
    for name in forward {
        let mut values = forwarded
            .into_iter()
            .flat_map(|f| f.get_all(name))
            .peekable();
        if values.peek().is_none() {
            return Err(ToolError::NotPermitted {
                tool: tool.to_owned(),
                reason: format!(
                    "it acts for the caller named by the `{name}` header, and this run was \
                     started without one"
                ),
            });
        }
        for value in values {
            headers.append(name.clone(), value.clone());
        }
    }
    if let Some(trace) = TraceContext::to_send(context.get::<TraceContext>()) {
        trace.add_to_headers(&mut headers);
    }
    Ok(headers)
}

/// The client a configured service is called with: `timeout_secs` per
/// call (default [`DEFAULT_TIMEOUT`]; zero is refused), redirects within
/// the service's origin only.
pub(super) fn client(timeout_secs: Option<u64>) -> Result<reqwest::Client, String> {
    if timeout_secs == Some(0) {
        return Err("timeout_secs must be at least 1".into());
    }
    let timeout = timeout_secs.map_or(DEFAULT_TIMEOUT, Duration::from_secs);
    reqwest::Client::builder()
        .timeout(timeout)
        .user_agent(concat!("skillhost/", env!("CARGO_PKG_VERSION")))
        .redirect(same_origin_redirects())
        .build()
        .map_err(|e| format!("cannot build an HTTP client: {e}"))
}

/// Follows redirects within the service's origin only: reqwest strips the
/// standard credential headers on a redirect elsewhere, but not a tool's own
/// (`X-Api-Key = "${CRM_KEY}"`), which must never reach another host.
fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let origin = attempt.previous()[0].origin();
        if attempt.url().origin() != origin {
            let elsewhere = attempt.url().origin().ascii_serialization();
            attempt.error(format!(
                "the service redirected to {elsewhere}, another origin; not followed, so that \
                 the tool's headers stay with its service"
            ))
        } else if attempt.previous().len() > 10 {
            attempt.error("more than 10 redirects")
        } else {
            attempt.follow()
        }
    })
}

/// Where the path of `url` (an http(s) URL with a path) is: from the `/`
/// after the host to the query or fragment.
fn path_range(url: &str) -> std::ops::Range<usize> {
    let authority = url.find("://").map_or(0, |scheme| scheme + 3);
    let start = url[authority..]
        .find('/')
        .map_or(url.len(), |slash| authority + slash);
    let end = url[start..]
        .find(['?', '#'])
        .map_or(url.len(), |end| start + end);
    start..end
}

/// Whether the URL parser resolves `segment` away (`.`, `..`, and their
/// `%2E` spellings, as the URL standard says).
fn is_dot_segment(segment: &str) -> bool {
    matches!(
        segment.to_ascii_lowercase().as_str(),
        "." | ".." | "%2e" | ".%2e" | "%2e." | "%2e%2e"
    )
}

/// Replaces every `${VAR}` in `value`, which is `used_in` the named
/// place, with the variable's value.
pub(super) fn expand_env(
    value: &str,
    used_in: &str,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<String, String> {
    let mut expanded = String::new();
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        let end = rest[start..]
            .find('}')
            .map(|end| start + end)
            .ok_or_else(|| format!("a value in {used_in} has an unclosed `${{`"))?;
        let name = &rest[start + 2..end];
        let secret = env(name)
            .filter(|secret| !secret.is_empty())
            .ok_or_else(|| {
                format!("environment variable `{name}` (used in {used_in}) is not set")
            })?;
        expanded.push_str(&rest[..start]);
        expanded.push_str(&secret);
        rest = &rest[end + 1..];
    }
    expanded.push_str(rest);
    Ok(expanded)
}

/// Appends `text` percent-encoded: everything but RFC 3986's unreserved
/// characters, so that a value stays within its path segment or query value.
fn percent_encode(text: &str, out: &mut String) {
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn config(url: &str) -> HttpToolConfig {
        HttpToolConfig {
            name: "lookup".into(),
            description: "d".into(),
            parameters: json!({"type": "object", "required": ["id"],
                               "properties": {"id": {"type": "string"}}}),
            access: Access::Read,
            method: HttpMethod::Get,
            url: url.into(),
            headers: BTreeMap::new(),
            forward_headers: Vec::new(),
            timeout_secs: None,
        }
    }

    #[test]
    fn arguments_fill_the_template_encoded_and_the_rest_is_left() {
        let tool = HttpTool::new(config("http://h/items/{id}/x?v=1"), |_| None).unwrap();
        let (url, rest) = tool
            .url(
                json!({"id": "a/../b c", "extra": 1})
                    .as_object()
                    .unwrap()
                    .clone(),
            )
            .unwrap();
        assert_eq!(url, "http://h/items/a%2F..%2Fb%20c/x?v=1");
        assert_eq!(Value::Object(rest), json!({"extra": 1}));
    }

    #[test]
    fn a_value_that_would_climb_out_of_its_path_segment_is_refused() {
        let url_for = |template: &str, id: &str| {
            HttpTool::new(config(template), |_| None)
                .unwrap()
                .url(json!({"id": id}).as_object().unwrap().clone())
                .map(|(url, _)| url)
        };
        for id in [".", ".."] {
            let Err(ToolError::InvalidArguments { message, .. }) =
                url_for("https://crm.example.com/customers/{id}/profile", id)
            else {
                panic!("`{id}` accepted");
            };
            assert!(message.contains("field `id`") && message.contains("another path"));
        }
        // Dots inside a segment, in a query value, or with more text are fine.
        for (template, id, url) in [
            ("http://h/c/{id}/p", "...", "http://h/c/.../p"),
            ("http://h/c/{id}.json", "..", "http://h/c/...json"),
            ("http://h/c?q={id}", "..", "http://h/c?q=.."),
            ("http://h/c/v{id}", "..", "http://h/c/v.."),
        ] {
            assert_eq!(url_for(template, id).unwrap(), url);
        }
        // What reqwest would send for the refused case: the parser resolves
        // `..`, which is why it never gets that far.
        let resolved = reqwest::Url::parse("https://crm.example.com/customers/../profile").unwrap();
        assert_eq!(resolved.path(), "/profile");
    }

    #[test]
    fn bad_declarations_are_refused() {
        let refused = |url: &str| {
            HttpTool::new(config(url), |_| None)
                .unwrap_err()
                .to_string()
        };
        assert!(refused("http://{id}.example.com/x").contains("host"));
        assert!(refused("ftp://h/{id}").contains("http(s)"));
        assert!(refused("http://h/{other}").contains("not a required parameter"));
        assert!(refused("http://h/{id").contains("unclosed"));
        assert!(refused("http://h/a/../{id}").contains("`..` segment"));
        assert!(refused("http://h/a/%2E/{id}").contains("`..` segment"));
        assert!(refused("http://h/c/{id}?x={id}").contains("twice"));
        let mut no_time = config("http://h/{id}");
        no_time.timeout_secs = Some(0);
        let error = HttpTool::new(no_time, |_| None).unwrap_err().to_string();
        assert!(error.contains("timeout_secs"), "{error}");
        let mut missing_secret = config("http://h/{id}");
        missing_secret
            .headers
            .insert("Authorization".into(), "Bearer ${TOKEN}".into());
        let error = HttpTool::new(missing_secret, |_| None)
            .unwrap_err()
            .to_string();
        assert!(error.contains("`TOKEN`"), "{error}");
    }

    #[test]
    fn forwarded_headers_must_be_headers_of_a_request_and_said_once() {
        let refused = |forward: &[&str], headers: &[&str]| {
            let mut config = config("http://h/{id}");
            config.forward_headers = forward.iter().map(|name| name.to_string()).collect();
            for name in headers {
                config.headers.insert(name.to_string(), "fixed".into());
            }
            HttpTool::new(config, |_| None).unwrap_err().to_string()
        };
        assert!(refused(&["X User"], &[]).contains("forward_headers: `X User`"));
        assert!(refused(&["Content-Length"], &[]).contains("cannot come from another"));
        assert!(refused(&["X-User-Id", "x-user-id"], &[]).contains("twice"));
        let both = refused(&["X-Tenant"], &["x-tenant"]);
        assert!(
            both.contains("both in headers and in forward_headers"),
            "{both}"
        );
    }

    #[test]
    fn forwarded_headers_attached_first_are_kept_over_later_ones() {
        let (user, tenant) = (
            HeaderName::from_static("x-user-id"),
            HeaderName::from_static("x-tenant"),
        );
        let mut attached = Forwarded::default();
        attached.append(user.clone(), HeaderValue::from_static("checked"));
        let mut request = HeaderMap::new();
        request.insert(&user, HeaderValue::from_static("claimed"));
        request.insert(&tenant, HeaderValue::from_static("t1"));
        let merged = attached.or(&Forwarded::from_request(&request, [&user, &tenant]));
        assert_eq!(merged.get_all(&user).collect::<Vec<_>>(), ["checked"]);
        assert_eq!(merged.get_all(&tenant).collect::<Vec<_>>(), ["t1"]);
    }

    #[test]
    fn a_call_carries_the_forwarded_headers_its_run_has_and_fails_without_them() {
        let mut config = config("http://h/{id}");
        config.forward_headers = vec!["X-User-Id".into()];
        config.headers.insert("X-Api".into(), "fixed".into());
        let tool = HttpTool::new(config, |_| None).unwrap();
        let user = HeaderName::from_static("x-user-id");

        let mut request = HeaderMap::new();
        request.insert(&user, HeaderValue::from_static("u1001"));
        request.insert("cookie", HeaderValue::from_static("session=secret"));
        let mut context = ToolContext::default();
        context.insert(Forwarded::from_request(&request, [&user]));
        let headers = tool.headers_for(&context).unwrap();
        assert_eq!(headers["x-user-id"], "u1001");
        assert!(headers["x-user-id"].is_sensitive());
        assert_eq!(headers["x-api"], "fixed");
        assert!(!headers.contains_key("cookie"), "only what is named goes");

        for context in [ToolContext::default(), {
            let mut context = ToolContext::default();
            context.insert(Forwarded::from_request(&HeaderMap::new(), [&user]));
            context
        }] {
            let Err(ToolError::NotPermitted { reason, .. }) = tool.headers_for(&context) else {
                panic!("called without the header it forwards");
            };
            assert!(reason.contains("`x-user-id` header"), "{reason}");
        }
    }

    #[test]
    fn only_declared_arguments_are_sent_and_none_goes_into_the_url_empty() {
        let tool = HttpTool::new(config("http://h/c/{id}/p"), |_| None).unwrap();
        assert_eq!(tool.spec.parameters["additionalProperties"], false);
        let Err(ToolError::InvalidArguments { message, .. }) =
            tool.url(json!({"id": ""}).as_object().unwrap().clone())
        else {
            panic!("an empty path value was accepted");
        };
        assert!(message.contains("field `id` is empty"), "{message}");
        let mut tools = crate::tools::ToolRegistry::new();
        tools.register(std::sync::Arc::new(tool)).unwrap();
        let error = tools
            .get("lookup")
            .unwrap()
            .validate(&json!({"id": "1", "status": "closed"}))
            .unwrap_err()
            .to_string();
        assert!(error.contains("status"), "{error}");

        // A schema that allows more keeps them, to send.
        let mut open = config("http://h/c/{id}");
        open.parameters["additionalProperties"] = json!(true);
        let tool = HttpTool::new(open, |_| None).unwrap();
        assert_eq!(tool.spec.parameters["additionalProperties"], true);
    }

    #[test]
    fn secrets_come_from_the_environment_and_stay_out_of_debug() {
        let mut with_secret = config("http://h/{id}");
        with_secret
            .headers
            .insert("Authorization".into(), "Bearer ${TOKEN}".into());
        let tool = HttpTool::new(with_secret, |name| {
            (name == "TOKEN").then(|| "s3cret".to_owned())
        })
        .unwrap();
        assert_eq!(tool.headers["authorization"], "Bearer s3cret");
        assert!(!format!("{tool:?}").contains("s3cret"));
    }
}
