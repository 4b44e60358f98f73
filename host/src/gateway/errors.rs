//! Every error the gateway answers with, in OpenAI's shape:
//! `{"error": {"message", "type", "param", "code"}}`.
//!
//! Nothing a client sends produces a 5xx or a dropped connection: bad JSON,
//! a wrong content type, an oversized body, unknown routes and methods,
//! unknown skills and confirmations, and schema-invalid input all answer a
//! 4xx with a message that says what to fix, and `param` naming the field
//! when there is one. 5xx is kept for the host's own troubles (no LLM
//! configured, the LLM failing, a timeout, a bug).

use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, FromRequestParts, OriginalUri, Path, Request};
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::agent::AgentError;
use crate::agent::llm::LlmError;
use crate::runtime::InvokeError;

/// The `type` of an error body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorType {
    /// The request is wrong: fix it and retry.
    InvalidRequestError,
    /// No or a wrong API key.
    AuthenticationError,
    /// The key is valid but not for this route.
    PermissionError,
    /// The skill ran and failed.
    SkillError,
    /// The LLM server failed or the agent gave up.
    UpstreamError,
    /// The host cannot serve this now (e.g. no LLM is configured).
    ServiceUnavailableError,
    /// The request took longer than the gateway allows.
    TimeoutError,
    /// The client has as much under way as one client may (429).
    RateLimitError,
    /// A bug in the host.
    ServerError,
}

/// A gateway error response. `code` is a stable snake_case identifier
/// (`invalid_json`, `skill_not_found`, ...), also the label of
/// `skillhost_http_errors_total`.
#[derive(Debug, Clone, Serialize)]
pub struct ApiError {
    #[serde(skip)]
    status: StatusCode,
    message: String,
    #[serde(rename = "type")]
    kind: ErrorType,
    param: Option<String>,
    code: &'static str,
    /// Seconds after which the same request would be taken (a rate
    /// limit): sent as `Retry-After`, and OpenAI's SDKs may retry.
    #[serde(skip)]
    retry_after: Option<u64>,
}

/// The `code` of an error response, left in the response's extensions for
/// the metrics layer.
#[derive(Debug, Clone, Copy)]
pub struct ErrorCode(pub &'static str);

impl ApiError {
    pub fn new(
        status: StatusCode,
        kind: ErrorType,
        code: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Self {
            status,
            message: message.into(),
            kind,
            param: None,
            code,
            retry_after: None,
        }
    }

    /// A 400 `invalid_request_error`.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            ErrorType::InvalidRequestError,
            code,
            message,
        )
    }

    /// A 404 `invalid_request_error`.
    pub fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            ErrorType::InvalidRequestError,
            code,
            message,
        )
    }

    /// A 500 `server_error`: the host failed (a panic, logged where it
    /// happened).
    pub fn internal() -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorType::ServerError,
            "internal_error",
            "the host failed while handling this request; the failure is logged",
        )
    }

    /// Says that the same request is taken in `seconds` (`Retry-After`):
    /// it ran nothing, so a client may send it again then.
    pub fn with_retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    /// Names the request field at fault.
    pub fn with_param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into()).filter(|param: &String| !param.is_empty());
        self
    }

    pub fn status(&self) -> StatusCode {
        self.status
    }

    pub fn code(&self) -> &'static str {
        self.code
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    /// The error object as OpenAI streams it: `{"error": {...}}`.
    pub fn body(&self) -> serde_json::Value {
        serde_json::json!({ "error": self })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body())).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        // OpenAI's SDKs send a request again on a 5xx or a 429 unless told
        // not to. Here one comes from a run that may already have called
        // tools (a round limit, a timeout), or from what a retry does not
        // change soon (a client's runs waiting for people): sent again, a
        // whole run would run again. A request refused with a time to come
        // back ran nothing, and may.
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        } else if self.status.is_server_error() || self.status == StatusCode::TOO_MANY_REQUESTS {
            response
                .headers_mut()
                .insert("x-should-retry", HeaderValue::from_static("false"));
        }
        response.extensions_mut().insert(ErrorCode(self.code));
        response
    }
}

impl From<AgentError> for ApiError {
    fn from(error: AgentError) -> Self {
        Self::from(&error)
    }
}

impl From<&AgentError> for ApiError {
    fn from(error: &AgentError) -> Self {
        let message = error.to_string();
        match error {
            AgentError::NotConfigured => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorType::ServiceUnavailableError,
                "llm_not_configured",
                message,
            ),
            // The model's server refused the conversation the client sent
            // (too long for its context, a malformed history): the client's
            // to fix. Other refusals (a bad key, an unknown model) are ours.
            AgentError::Llm {
                cause:
                    LlmError::Http {
                        status: 400 | 413 | 422,
                        ..
                    },
                ..
            } => Self::bad_request("llm_refused_conversation", message),
            AgentError::Llm { cause, .. } => Self::upstream(cause, message),
            AgentError::RoundLimit { .. } => Self::new(
                StatusCode::BAD_GATEWAY,
                ErrorType::UpstreamError,
                "round_limit",
                message,
            ),
            AgentError::RepeatedCall { .. } => Self::new(
                StatusCode::BAD_GATEWAY,
                ErrorType::UpstreamError,
                "repeated_call",
                message,
            ),
            AgentError::NoUserMessage => {
                Self::bad_request("no_user_message", message).with_param("messages")
            }
            AgentError::UnknownSkill(_) => Self::not_found("skill_not_found", message),
            AgentError::SkillNotPermitted { .. } => Self::new(
                StatusCode::FORBIDDEN,
                ErrorType::PermissionError,
                "skill_not_permitted",
                message,
            )
            .with_param("name"),
            AgentError::InvalidInput(InvokeError::InvalidInput {
                message: detail, ..
            }) => Self::bad_request("invalid_input", message)
                .with_param(field_of(detail).unwrap_or_default()),
            AgentError::InvalidInput(_) => Self::bad_request("invalid_input", message),
            AgentError::Aborted(_) => Self::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                ErrorType::ServerError,
                "run_aborted",
                message,
            ),
        }
    }
}

impl ApiError {
    /// The model's server failed (after the client's retries, for what is
    /// worth retrying): told apart so that a client knows whether to come
    /// back later and an operator sees in `http_errors` what to fix.
    fn upstream(cause: &LlmError, message: String) -> Self {
        let last = match cause {
            LlmError::RetriesExhausted { last, .. } => last.as_ref(),
            cause => cause,
        };
        let (status, error_type, code) = match last {
            // Rate limited: the gateway is short of capacity for now.
            LlmError::Http { status: 429, .. } => (
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorType::ServiceUnavailableError,
                "llm_rate_limited",
            ),
            // The operator's key or model access, not the client's.
            LlmError::Http {
                status: 401 | 403, ..
            } => (
                StatusCode::BAD_GATEWAY,
                ErrorType::UpstreamError,
                "llm_key_refused",
            ),
            LlmError::Timeout { .. } => (
                StatusCode::GATEWAY_TIMEOUT,
                ErrorType::TimeoutError,
                "llm_timeout",
            ),
            LlmError::Connect(_) => (
                StatusCode::BAD_GATEWAY,
                ErrorType::UpstreamError,
                "llm_unreachable",
            ),
            _ => (
                StatusCode::BAD_GATEWAY,
                ErrorType::UpstreamError,
                "llm_error",
            ),
        };
        Self::new(status, error_type, code, message)
    }
}

/// The field the first schema violation names: `orderId` in
/// "field `orderId`: 88231 is not of type \"string\"; field `reason`: missing
/// (required)" (the form the host's schema checks use; nested fields are JSON
/// pointers without the leading `/`, e.g. `items/0/qty`).
fn field_of(message: &str) -> Option<&str> {
    message
        .strip_prefix("field `")?
        .split_once("`:")
        .map(|(field, _)| field)
}

/// A path parameter; one that cannot be read (not UTF-8 once
/// percent-decoded) is an OpenAI-style 400, not axum's plain-text one.
#[derive(Debug)]
pub struct ApiPath<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(value)| Self(value))
            .map_err(|rejection| ApiError::bad_request("invalid_path", rejection.body_text()))
    }
}

/// A JSON body, checked the gateway's way: `Content-Type: application/json`
/// (415 otherwise — which also keeps browsers from posting cross-site
/// without a CORS preflight), within the body limit (413), valid JSON (400
/// `invalid_json`) of the expected shape (400 `invalid_request`, with
/// `param` naming the field, e.g. `messages[0].role`).
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        if !is_json(request.headers().get(header::CONTENT_TYPE)) {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                ErrorType::InvalidRequestError,
                "unsupported_media_type",
                "the body must be JSON, sent with `Content-Type: application/json`",
            ));
        }
        let limit = request.extensions().get::<BodyLimit>().copied();
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(|rejection| body_error(&rejection, limit))?;
        parse_json(&bytes).map(ApiJson)
    }
}

fn is_json(content_type: Option<&HeaderValue>) -> bool {
    let Some(Ok(value)) = content_type.map(HeaderValue::to_str) else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or("").trim();
    essence.eq_ignore_ascii_case("application/json")
        || essence
            .rsplit_once('+')
            .is_some_and(|(_, suffix)| suffix.eq_ignore_ascii_case("json"))
}

/// The gateway's body limit in bytes, as a request extension, so that a
/// body over it is refused with the figure.
#[derive(Debug, Clone, Copy)]
pub(super) struct BodyLimit(pub(super) usize);

fn body_error(rejection: &BytesRejection, limit: Option<BodyLimit>) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        let limit = limit.map_or_else(String::new, |BodyLimit(bytes)| format!(" {bytes} bytes"));
        return ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            ErrorType::InvalidRequestError,
            "body_too_large",
            format!(
                "the request body is larger than the{limit} this gateway accepts (its body \
                 limit: `--body-limit` or `[server] body_limit` for `skillhost serve`)"
            ),
        );
    }
    ApiError::bad_request(
        "unreadable_body",
        format!(
            "the request body could not be read: {}",
            rejection.body_text()
        ),
    )
}

/// Parses `bytes` as one JSON value of type `T`, naming the field at fault.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value: T = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        let path = error.path().to_string();
        let error = error.into_inner();
        if error.is_data() {
            ApiError::bad_request(
                "invalid_request",
                if path == "." {
                    format!("invalid request: {error}")
                } else {
                    format!("invalid request: `{path}`: {error}")
                },
            )
            .with_param(if path == "." { String::new() } else { path })
        } else {
            ApiError::bad_request(
                "invalid_json",
                format!("the body is not valid JSON: {error}"),
            )
        }
    })?;
    deserializer.end().map_err(|error| {
        ApiError::bad_request(
            "invalid_json",
            format!("the body is not valid JSON: {error}"),
        )
    })?;
    Ok(value)
}

/// Unknown paths.
pub async fn not_found(method: Method, OriginalUri(uri): OriginalUri) -> ApiError {
    ApiError::not_found("not_found", format!("no route for {method} {}", uri.path()))
}

/// Known paths, wrong method.
pub async fn method_not_allowed(method: Method, OriginalUri(uri): OriginalUri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        ErrorType::InvalidRequestError,
        "method_not_allowed",
        format!("{method} is not allowed on {}", uri.path()),
    )
}

/// A panicking handler: a 500 with a body, never a dropped connection.
pub fn panic_response(_panic: Box<dyn std::any::Any + Send + 'static>) -> Response {
    ApiError::internal().into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_messages_name_their_field() {
        assert_eq!(
            field_of("field `orderId`: 88231 is not of type \"string\""),
            Some("orderId")
        );
        assert_eq!(field_of("field `a/0/b`: x"), Some("a/0/b"));
        assert_eq!(
            field_of("field `reason`: missing (required); field `orderId`: 1 is not of type"),
            Some("reason")
        );
        assert_eq!(field_of("\"orderId\" is a required property"), None);
    }

    #[test]
    fn json_content_types() {
        let is = |value: &'static str| is_json(Some(&HeaderValue::from_static(value)));
        assert!(is("application/json"));
        assert!(is("Application/JSON; charset=utf-8"));
        assert!(is("application/merge-patch+json"));
        assert!(!is("text/plain"));
        assert!(!is("application/x-www-form-urlencoded"));
        assert!(!is_json(None));
    }

    #[test]
    fn body_errors_name_the_field() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Body {
            items: Vec<Item>,
        }
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Item {
            n: u32,
        }
        let error = parse_json::<Body>(br#"{"items":[{"n":1},{"n":"x"}]}"#).unwrap_err();
        assert_eq!(error.code(), "invalid_request");
        assert_eq!(error.param.as_deref(), Some("items[1].n"));
        let error = parse_json::<Body>(b"{\"items\": [").unwrap_err();
        assert_eq!(error.code(), "invalid_json");
        let error = parse_json::<Body>(br#"{"items":[]} trailing"#).unwrap_err();
        assert_eq!(error.code(), "invalid_json");
    }
}
