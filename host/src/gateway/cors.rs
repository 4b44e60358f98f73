//! Cross-origin access for web pages ([`GatewayConfig::cors_origins`]).
//!
//! [`GatewayConfig::cors_origins`]: super::GatewayConfig::cors_origins

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use axum::http::{HeaderName, HeaderValue, Method};
use tower_http::cors::{AllowHeaders, AllowOrigin, CorsLayer};

use super::mcp_sessions::SESSION_HEADER;

/// A web origin, `scheme://host[:port]`, as browsers send it in `Origin`.
/// Deserializes from its text, refused as [`FromStr`] refuses it.
#[derive(Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "String")]
pub struct CorsOrigin(HeaderValue);

impl TryFrom<String> for CorsOrigin {
    type Error = InvalidOrigin;

    fn try_from(text: String) -> Result<Self, InvalidOrigin> {
        text.parse()
    }
}

impl CorsOrigin {
    /// The origin as browsers write it (`https://chat.example.com`).
    pub fn as_str(&self) -> &str {
        // Built from an ASCII serialization, so always valid text.
        self.0.to_str().unwrap_or_default()
    }
}

impl fmt::Debug for CorsOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for CorsOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a text is no [`CorsOrigin`].
#[derive(Debug, thiserror::Error)]
#[error(
    "`{text}` is not a web origin: {reason}; write it as a browser sends it, e.g. https://chat.example.com or http://localhost:3000"
)]
pub struct InvalidOrigin {
    text: String,
    reason: &'static str,
}

impl FromStr for CorsOrigin {
    type Err = InvalidOrigin;

    /// Takes `scheme://host[:port]` (a trailing `/` is fine), written as
    /// browsers write it: lowercase host, no default port.
    fn from_str(text: &str) -> Result<Self, InvalidOrigin> {
        let invalid = |reason| InvalidOrigin {
            text: crate::text::clip(text, 200),
            reason,
        };
        if text.trim() == "*" {
            return Err(invalid(
                "any origin is not allowed: a page on any site could then drive this gateway \
                 from its visitors' browsers, approvals included",
            ));
        }
        let url = reqwest::Url::parse(text.trim()).map_err(|_| invalid("not a URL"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(invalid("only http and https pages have an origin"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(invalid("an origin has no user name or password"));
        }
        if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
            return Err(invalid("an origin has no path, query or fragment"));
        }
        let origin = url.origin().ascii_serialization();
        HeaderValue::from_str(&origin)
            .map(Self)
            .map_err(|_| invalid("not a header value"))
    }
}

/// Answers the preflights of `origins` and names them in the responses to
/// their requests; pages elsewhere get no CORS headers, so browsers keep
/// them from reading any response.
pub(super) fn layer(origins: &[CorsOrigin]) -> CorsLayer {
    CorsLayer::new()
        .allow_origin(AllowOrigin::list(
            origins.iter().map(|origin| origin.0.clone()),
        ))
        .allow_methods([Method::GET, Method::POST, Method::DELETE])
        // A browser-based MCP client reads its session's id; any page, the
        // id of a request to report.
        .expose_headers([
            HeaderName::from_static(SESSION_HEADER),
            HeaderName::from_static(super::REQUEST_ID_HEADER),
        ])
        // OpenAI's SDKs add headers of their own (`x-stainless-*`); only
        // the listed origins get this far.
        .allow_headers(AllowHeaders::mirror_request())
        .max_age(Duration::from_secs(600))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_taken_as_browsers_write_them_and_anything_else_is_refused() {
        for (text, origin) in [
            ("https://chat.example.com", "https://chat.example.com"),
            ("https://Chat.Example.com/", "https://chat.example.com"),
            ("http://localhost:3000", "http://localhost:3000"),
            ("https://chat.example.com:443", "https://chat.example.com"),
        ] {
            assert_eq!(text.parse::<CorsOrigin>().unwrap().as_str(), origin);
        }
        for (text, says) in [
            ("*", "any origin"),
            ("chat.example.com", "not a URL"),
            ("ftp://files.example.com", "only http and https"),
            ("https://chat.example.com/app", "no path"),
            ("https://user:pw@chat.example.com", "no user name"),
        ] {
            let error = text.parse::<CorsOrigin>().unwrap_err().to_string();
            assert!(error.contains(says) && error.contains(text), "{error}");
        }
    }
}
