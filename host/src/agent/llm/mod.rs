//! A client for OpenAI-compatible chat completions with function calling, as
//! served by OpenAI, DashScope/Qwen, vLLM, Ollama and llama.cpp's server.
//!
//! - [`LlmConfig`] says where the server is and how patiently to talk to it
//!   (every default documented on its field); [`LlmConfig::from_env`] reads
//!   `OPENAI_BASE_URL`, `OPENAI_API_KEY` and `SKILLHOST_MODEL`, and "no LLM
//!   configured" is the typed [`ConfigError::NotConfigured`].
//! - [`LlmClient::chat`] sends a [`ChatRequest`] and returns one assembled
//!   [`ChatResponse`], streamed (SSE) or not. Content deltas can be observed
//!   as they arrive through [`ChatRequest::deltas`].
//! - 429, 5xx and connection failures (refused, or closed before the
//!   response's headers) are retried with deterministic exponential
//!   backoff, honouring `Retry-After`; everything else fails at once with a
//!   typed [`LlmError`]. Server input never causes a panic.
//! - Tool-call arguments stay raw text on the [`ToolCall`]: arguments that
//!   are not JSON are the model's mistake to be told about
//!   ([`ToolCall::parse_arguments`]), not a failure of the call.

mod client;
mod config;
mod retry;
mod sse;
mod types;

use std::time::Duration;

use serde_json::Value;

pub use client::{LlmClient, UsageTotals};
pub use config::{
    ConfigError, DEFAULT_BASE_URL, ENV_API_KEY, ENV_BASE_URL, ENV_MODEL, HOW_TO_CONFIGURE,
    LlmConfig,
};
pub use types::{
    AssistantMessage, ChatRequest, ChatResponse, FinishReason, FunctionCall, FunctionDefinition,
    Message, ToolCall, ToolChoice, ToolDefinition, ToolType, Usage,
};

/// Why an LLM call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LlmError {
    /// The configuration is missing or unusable (including "no LLM
    /// configured", [`ConfigError::NotConfigured`]).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The server answered with an error status. `message` is the `message`
    /// of an OpenAI error body when there is one, else a snippet of the body.
    #[error("the LLM server answered {status}: {message}")]
    Http {
        /// The HTTP status code.
        status: u16,
        /// What the server said.
        message: String,
    },
    /// The server answered with a success status but an error object, either
    /// as the whole body or as an event in the middle of a stream.
    #[error("the LLM server reported an error: {message}")]
    Api {
        /// What the server said.
        message: String,
    },
    /// No complete answer within [`LlmConfig::request_timeout`].
    #[error("the LLM call timed out after {after:?}")]
    Timeout {
        /// The timeout that expired.
        after: Duration,
    },
    /// The server could not be reached (refused, DNS, TLS, connect timeout).
    #[error("could not connect to the LLM server: {0}")]
    Connect(String),
    /// The connection failed after it was established, e.g. while a
    /// response was being read.
    #[error("the connection to the LLM server failed: {0}")]
    Transport(String),
    /// The response is not what the protocol says: bad JSON, no choices, a
    /// corrupt or cut-off stream.
    #[error("malformed LLM response: {reason} (body starts: {snippet:?})")]
    MalformedResponse {
        /// What is wrong.
        reason: String,
        /// The start of the offending text.
        snippet: String,
    },
    /// Every attempt failed with a retryable error.
    #[error("the LLM call failed after {attempts} attempt(s); last error: {last}")]
    RetriesExhausted {
        /// Attempts made (1 + [`LlmConfig::max_retries`]).
        attempts: u32,
        /// The error of the last attempt.
        last: Box<LlmError>,
    },
}

/// Largest response accepted: a non-streaming body, or the message a stream
/// assembles. 16 MiB, far above any real completion; more is a broken
/// server, not an answer.
const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// Characters of server text kept in error messages.
const SNIPPET_CHARS: usize = 200;

/// The start of `text`, at most [`SNIPPET_CHARS`] characters, for error
/// messages.
fn snippet(text: &str) -> String {
    crate::text::clip(text.trim(), SNIPPET_CHARS)
}

/// The message of an error object as servers send it: OpenAI's
/// `{"message": ...}` (inside `"error"`), a bare string (Ollama), or
/// FastAPI's `{"detail": ...}` (vLLM).
fn api_error_message(error: &Value) -> Option<String> {
    let text = match error {
        Value::String(text) => Some(text.clone()),
        Value::Object(map) => ["message", "detail", "error"]
            .iter()
            .find_map(|key| map.get(*key))
            .and_then(api_error_message),
        _ => None,
    };
    text.filter(|text| !text.trim().is_empty())
}

/// An error object sent with a success status, as an [`LlmError::Api`].
fn api_error(error: &Value) -> LlmError {
    LlmError::Api {
        message: api_error_message(error).unwrap_or_else(|| snippet(&error.to_string())),
    }
}

/// The message of an HTTP error body: an OpenAI-style error object when the
/// body is one, else a snippet of the body.
fn error_body_message(body: &str) -> Option<String> {
    match serde_json::from_str::<Value>(body) {
        Ok(value) => api_error_message(&value),
        Err(_) => Some(snippet(body)).filter(|text| !text.is_empty()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn error_messages_are_found_in_every_common_shape() {
        let openai = r#"{"error":{"message":"Invalid 'messages'","type":"invalid_request_error","param":null,"code":null}}"#;
        assert_eq!(
            error_body_message(openai).as_deref(),
            Some("Invalid 'messages'")
        );
        assert_eq!(
            error_body_message(r#"{"error":"model 'x' not found"}"#).as_deref(),
            Some("model 'x' not found")
        );
        assert_eq!(
            error_body_message(r#"{"detail":"Not Found"}"#).as_deref(),
            Some("Not Found")
        );
        assert_eq!(
            error_body_message("upstream timed out").as_deref(),
            Some("upstream timed out")
        );
        assert_eq!(error_body_message(""), None);
        assert_eq!(error_body_message(r#"{"unrelated":1}"#), None);
        assert_eq!(api_error_message(&json!({"message": " "})), None);
    }

    #[test]
    fn snippets_are_trimmed_and_cut() {
        assert_eq!(
            snippet(&"x".repeat(SNIPPET_CHARS + 10)).chars().count(),
            SNIPPET_CHARS + 1
        );
        assert_eq!(snippet("  short "), "short");
    }
}
