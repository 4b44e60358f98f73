//! The HTTP side: one call, its retries, and the two ways to read an answer.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use futures::StreamExt;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap};
use serde::Serialize;
use tokio::sync::mpsc;
use tracing::{Instrument, field};

use super::config::{ConfigError, LlmConfig};
use super::sse::{LineDecoder, StreamAssembler};
use super::types::{
    AssistantMessage, ChatRequest, ChatResponse, StreamOptions, ToolChoice, WireCompletion,
    WireRequest,
};
use super::{LlmError, MAX_RESPONSE_BYTES, api_error, error_body_message, retry, snippet};
use crate::text::error_chain;
use crate::trace_context::TraceContext;

/// Bytes of an error response read for its message; the rest is dropped.
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// Tokens and calls summed over every successful call of a client (and its
/// clones).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct UsageTotals {
    /// Calls that returned a response.
    pub calls: u64,
    /// Sum of `prompt_tokens`.
    pub prompt_tokens: u64,
    /// Sum of `completion_tokens`.
    pub completion_tokens: u64,
    /// Sum of `total_tokens`.
    pub total_tokens: u64,
}

#[derive(Debug, Default)]
struct UsageCounters {
    calls: AtomicU64,
    prompt_tokens: AtomicU64,
    completion_tokens: AtomicU64,
    total_tokens: AtomicU64,
}

impl UsageCounters {
    fn record(&self, response: &ChatResponse) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if let Some(usage) = response.usage {
            self.prompt_tokens
                .fetch_add(usage.prompt_tokens, Ordering::Relaxed);
            self.completion_tokens
                .fetch_add(usage.completion_tokens, Ordering::Relaxed);
            self.total_tokens
                .fetch_add(usage.total_tokens, Ordering::Relaxed);
        }
    }

    fn snapshot(&self) -> UsageTotals {
        UsageTotals {
            calls: self.calls.load(Ordering::Relaxed),
            prompt_tokens: self.prompt_tokens.load(Ordering::Relaxed),
            completion_tokens: self.completion_tokens.load(Ordering::Relaxed),
            total_tokens: self.total_tokens.load(Ordering::Relaxed),
        }
    }
}

/// A client for one OpenAI-compatible server and model.
///
/// Cheap to clone; clones share the connection pool and the usage totals.
#[derive(Debug, Clone)]
pub struct LlmClient {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: LlmConfig,
    endpoint: reqwest::Url,
    http: reqwest::Client,
    usage: UsageCounters,
}

/// How one attempt failed.
enum Failure {
    /// Worth another attempt, after `wait` if the server asked for one.
    Retry {
        error: LlmError,
        wait: Option<Duration>,
    },
    /// Final.
    Fatal(LlmError),
}

impl From<LlmError> for Failure {
    fn from(error: LlmError) -> Self {
        Self::Fatal(error)
    }
}

impl LlmClient {
    /// A client for `config`. Fails when the base URL is unusable.
    pub fn new(config: LlmConfig) -> Result<Self, LlmError> {
        let endpoint = config.endpoint()?;
        let http = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .timeout(config.request_timeout)
            .user_agent(concat!("skillhost/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ConfigError::Invalid {
                field: "http client",
                reason: error_chain(&e),
            })?;
        Ok(Self {
            inner: Arc::new(Inner {
                config,
                endpoint,
                http,
                usage: UsageCounters::default(),
            }),
        })
    }

    /// A client configured from the environment ([`LlmConfig::from_env`]).
    /// "No LLM configured" is `LlmError::Config(ConfigError::NotConfigured)`.
    pub fn from_env() -> Result<Self, LlmError> {
        Self::new(LlmConfig::from_env()?)
    }

    /// The configuration this client was built with.
    pub fn config(&self) -> &LlmConfig {
        &self.inner.config
    }

    /// Tokens and calls so far, summed over this client and its clones.
    pub fn usage(&self) -> UsageTotals {
        self.inner.usage.snapshot()
    }

    /// Sends `request` and returns the assembled answer.
    ///
    /// Streams when `request.stream` (or else the config's `stream`) says
    /// so; both paths return the same [`ChatResponse`]. The response's
    /// content type decides how it is read (`text/event-stream` or
    /// `application/json`), so a server that ignores `stream` is still
    /// understood. 429, 5xx and connection failures are retried up to
    /// `max_retries` times (then [`LlmError::RetriesExhausted`]); a stream
    /// that fails once it has started is not retried, since its deltas have
    /// already been forwarded.
    ///
    /// Emits a `llm_call` span with the model, attempts, latency, tokens,
    /// finish reason and outcome (`ok` or `error`).
    pub async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let config = &self.inner.config;
        let stream = request.stream.unwrap_or(config.stream);
        // Exported, named as OpenTelemetry's GenAI conventions name a call.
        let span = tracing::info_span!(
            "llm_call",
            otel.name = %format_args!("chat {}", config.model),
            model = %config.model,
            stream,
            messages = request.messages.len(),
            tools = request.tools.len(),
            attempts = field::Empty,
            latency_ms = field::Empty,
            prompt_tokens = field::Empty,
            completion_tokens = field::Empty,
            total_tokens = field::Empty,
            finish_reason = field::Empty,
            outcome = field::Empty,
            otel.kind = "client",
            otel.status_code = field::Empty,
        );
        let started = Instant::now();
        let result = self
            .call_with_retries(request, stream, &span)
            .instrument(span.clone())
            .await;
        let latency_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        span.record("latency_ms", latency_ms);
        span.in_scope(|| match &result {
            Ok(response) => {
                span.record("outcome", "ok");
                self.inner.usage.record(response);
                if let Some(usage) = response.usage {
                    span.record("prompt_tokens", usage.prompt_tokens);
                    span.record("completion_tokens", usage.completion_tokens);
                    span.record("total_tokens", usage.total_tokens);
                }
                if let Some(reason) = &response.finish_reason {
                    span.record("finish_reason", reason.as_str());
                }
                tracing::debug!(
                    latency_ms,
                    tool_calls = response.message.tool_calls.len(),
                    "LLM call succeeded"
                );
            }
            Err(error) => {
                span.record("outcome", "error");
                span.record("otel.status_code", "error");
                tracing::warn!(latency_ms, %error, "LLM call failed");
            }
        });
        result
    }

    /// The JSON body [`LlmClient::chat`] sends for `request`, byte for byte
    /// (model from the config, streaming as `request.stream` or the config
    /// says). Building it is the host's share of a round's cost.
    pub fn request_body(&self, request: &ChatRequest) -> Result<Bytes, LlmError> {
        let config = &self.inner.config;
        let stream = request.stream.unwrap_or(config.stream);
        let wire = WireRequest {
            model: &config.model,
            messages: &request.messages,
            tools: &request.tools,
            tool_choice: (request.tool_choice == ToolChoice::TextOnly && !request.tools.is_empty())
                .then_some("none"),
            temperature: request.temperature,
            stream,
            stream_options: stream.then_some(StreamOptions {
                include_usage: true,
            }),
        };
        let body = serde_json::to_vec(&wire).map_err(|e| ConfigError::Invalid {
            field: "request",
            reason: e.to_string(),
        })?;
        Ok(Bytes::from(body))
    }

    async fn call_with_retries(
        &self,
        request: &ChatRequest,
        stream: bool,
        span: &tracing::Span,
    ) -> Result<ChatResponse, LlmError> {
        let config = &self.inner.config;
        // Serialized once; each attempt sends the same bytes.
        let body = self.request_body(request)?;
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            span.record("attempts", attempts);
            let (error, wait) = match self.attempt(body.clone(), stream, request).await {
                Ok(response) => return Ok(response),
                Err(Failure::Fatal(error)) => return Err(error),
                Err(Failure::Retry { error, wait }) => (error, wait),
            };
            let retry = attempts - 1;
            if retry >= config.max_retries {
                return Err(LlmError::RetriesExhausted {
                    attempts,
                    last: Box::new(error),
                });
            }
            let wait = match wait {
                Some(requested) => requested.min(config.max_retry_after),
                None => retry::backoff(retry, config.backoff_base, config.backoff_max),
            };
            tracing::warn!(
                attempt = attempts,
                wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                %error,
                "LLM call failed; retrying"
            );
            tokio::time::sleep(wait).await;
        }
    }

    /// One HTTP exchange of `request`, serialized as `body`.
    async fn attempt(
        &self,
        body: Bytes,
        stream: bool,
        request: &ChatRequest,
    ) -> Result<ChatResponse, Failure> {
        let inner = &self.inner;
        let accept = if stream {
            "text/event-stream"
        } else {
            "application/json"
        };
        let mut headers = HeaderMap::new();
        if let Some(trace) = TraceContext::to_send(request.trace.as_ref()) {
            trace.add_to_headers(&mut headers);
        }
        let mut builder = inner
            .http
            .post(inner.endpoint.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, accept)
            .headers(headers)
            .body(body);
        if let Some(key) = &inner.config.api_key {
            builder = builder.bearer_auth(key);
        }
        let mut response = builder.send().await.map_err(|e| self.send_failure(e))?;
        let deltas = request.deltas.as_ref();

        let status = response.status();
        if !status.is_success() {
            let wait = retry::requested_wait(response.headers(), SystemTime::now());
            // The status is the error; a body that cannot be read only costs
            // the message.
            let body = read_body(&mut response, MAX_ERROR_BODY_BYTES)
                .await
                .map(|(bytes, _)| String::from_utf8_lossy(&bytes).into_owned())
                .unwrap_or_default();
            let message = error_body_message(&body).unwrap_or_else(|| {
                status
                    .canonical_reason()
                    .unwrap_or("no reason given")
                    .to_owned()
            });
            let error = LlmError::Http {
                status: status.as_u16(),
                message,
            };
            return Err(if retry::is_retryable_status(status) {
                Failure::Retry { error, wait }
            } else {
                Failure::Fatal(error)
            });
        }

        // The content type decides how to read, not what was asked: some
        // servers ignore `stream`, either way.
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .map(|value| value.trim_start().to_ascii_lowercase())
            .unwrap_or_default();
        let is_sse = if content_type.starts_with("text/event-stream") {
            true
        } else if content_type.starts_with("application/json") {
            false
        } else {
            stream
        };
        if is_sse {
            return Ok(self.read_stream(response, deltas).await?);
        }
        let (bytes, truncated) = read_body(&mut response, MAX_RESPONSE_BYTES)
            .await
            .map_err(|e| self.read_failure(e))?;
        let text = String::from_utf8_lossy(&bytes);
        if truncated {
            return Err(LlmError::MalformedResponse {
                reason: format!("the response body exceeds {MAX_RESPONSE_BYTES} bytes"),
                snippet: snippet(&text),
            }
            .into());
        }
        let parsed = parse_completion(&text)?;
        if let (Some(sender), Some(content)) = (deltas, &parsed.message.content) {
            // A closed receiver means nobody is watching; not an error.
            let _ = sender.send(content.clone());
        }
        Ok(parsed)
    }

    /// Reads an SSE body to the end (or `[DONE]`), forwarding content deltas.
    async fn read_stream(
        &self,
        response: reqwest::Response,
        deltas: Option<&mpsc::UnboundedSender<String>>,
    ) -> Result<ChatResponse, LlmError> {
        let mut decoder = LineDecoder::default();
        let mut assembler = StreamAssembler::default();
        let feed = |line: &str, assembler: &mut StreamAssembler| -> Result<(), LlmError> {
            if let (Some(text), Some(sender)) = (assembler.feed_line(line)?, deltas) {
                // A closed receiver means nobody is watching; not an error.
                let _ = sender.send(text);
            }
            Ok(())
        };
        let mut body = response.bytes_stream();
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| self.read_failure(e))?;
            for line in decoder.push(&chunk)? {
                feed(&line, &mut assembler)?;
            }
            if assembler.is_done() {
                return assembler.finish();
            }
        }
        if let Some(line) = decoder.finish() {
            feed(&line, &mut assembler)?;
        }
        assembler.finish()
    }

    /// Classifies a failure to send a request or receive its headers.
    /// Connection failures are retried — a refused connection, or a
    /// kept-alive one the server or a load balancer closed before answering;
    /// a timeout is not (the whole `request_timeout` is already spent).
    fn send_failure(&self, error: reqwest::Error) -> Failure {
        let retry = |error| Failure::Retry { error, wait: None };
        // The URL is the configured one; messages reach the gateway's
        // clients, who need not learn where the model is.
        let error = error.without_url();
        if error.is_timeout() {
            Failure::Fatal(self.read_failure(error))
        } else if error.is_connect() {
            retry(LlmError::Connect(error_chain(&error)))
        } else if error.is_request() {
            retry(LlmError::Transport(error_chain(&error)))
        } else {
            Failure::Fatal(self.read_failure(error))
        }
    }

    /// Classifies a failure while a response is being read.
    fn read_failure(&self, error: reqwest::Error) -> LlmError {
        if error.is_timeout() {
            LlmError::Timeout {
                after: self.inner.config.request_timeout,
            }
        } else {
            LlmError::Transport(error_chain(&error.without_url()))
        }
    }
}

/// Reads at most `limit` bytes of the body; the flag says whether more was
/// left unread.
async fn read_body(
    response: &mut reqwest::Response,
    limit: usize,
) -> Result<(Vec<u8>, bool), reqwest::Error> {
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        let room = limit - bytes.len();
        if chunk.len() > room {
            bytes.extend_from_slice(&chunk[..room]);
            return Ok((bytes, true));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok((bytes, false))
}

/// Parses a non-streaming `chat.completion` body.
fn parse_completion(text: &str) -> Result<ChatResponse, LlmError> {
    let malformed = |reason: String| LlmError::MalformedResponse {
        reason,
        snippet: snippet(text),
    };
    let wire: WireCompletion = serde_json::from_str(text)
        .map_err(|e| malformed(format!("not a chat.completion object: {e}")))?;
    if let Some(error) = wire.error {
        return Err(api_error(&error));
    }
    let choices = wire.choices.unwrap_or_default();
    // The client never asks for n > 1; take choice 0, or the only one.
    let choice = match choices.iter().position(|choice| choice.index == 0) {
        Some(position) => choices.into_iter().nth(position),
        None => choices.into_iter().next(),
    }
    .ok_or_else(|| malformed("the response has no choices".to_owned()))?;
    Ok(ChatResponse {
        message: AssistantMessage {
            content: choice.message.content,
            tool_calls: choice.message.tool_calls.unwrap_or_default(),
        },
        finish_reason: choice.finish_reason,
        usage: wire.usage,
        model: wire.model,
        id: wire.id,
    }
    .normalized())
}

#[cfg(test)]
mod tests {
    use super::super::types::{FinishReason, Usage};
    use super::*;

    #[test]
    fn a_completion_with_extra_fields_and_null_content_parses() {
        let body = r#"{"id":"x","object":"chat.completion","created":1,"model":"qwen-plus",
            "system_fingerprint":"fp","choices":[{"index":0,"logprobs":null,"finish_reason":"tool_calls",
            "message":{"role":"assistant","content":null,"reasoning_content":"hmm","tool_calls":[
              {"id":"call_1","type":"function","function":{"name":"queryOrder","arguments":"{\"orderId\":\"88231\"}"}},
              {"type":"function","function":{"name":"queryLogistics","arguments":"{}"}}]}}],
            "usage":{"prompt_tokens":5,"completion_tokens":2}}"#;
        let response = parse_completion(body).unwrap();
        assert_eq!(response.message.content, None);
        assert_eq!(response.finish_reason, Some(FinishReason::ToolCalls));
        let ids: Vec<&str> = response
            .message
            .tool_calls
            .iter()
            .map(|c| c.id.as_str())
            .collect();
        assert_eq!(ids, ["call_1", "call_1_"]);
        assert_eq!(
            response.usage,
            Some(Usage {
                prompt_tokens: 5,
                completion_tokens: 2,
                total_tokens: 7
            })
        );
    }

    #[test]
    fn bad_completions_are_typed_errors() {
        assert!(matches!(
            parse_completion("{\"choices\": ["),
            Err(LlmError::MalformedResponse { .. })
        ));
        assert!(matches!(
            parse_completion("{\"choices\": []}"),
            Err(LlmError::MalformedResponse { .. })
        ));
        assert!(matches!(
            parse_completion("{\"choices\": 3}"),
            Err(LlmError::MalformedResponse { .. })
        ));
        assert!(matches!(
            parse_completion(r#"{"error": {"message": "quota"}}"#),
            Err(LlmError::Api { message }) if message == "quota"
        ));
    }
}
