//! MCP's Streamable HTTP transport: each message a POST to the server's
//! endpoint, answered with JSON or an event stream; the session is the
//! `Mcp-Session-Id` header `initialize` set. The server's messages of its
//! own come in those streams, and in the stream a GET opens for the
//! session ([`Transport::listen`]) when the server offers one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde_json::{Value, json};
use tokio::sync::Notify;

use super::{Failure, Request, SessionState, server_message};
use crate::tools::http::{MAX_RESPONSE_BYTES, read_limited, snippet};

/// How long one GET stream is read before it is opened again: reqwest's
/// timeout is the whole response's, and a connection gone silently would
/// otherwise be waited on for ever.
const LISTENING_SPAN: Duration = Duration::from_secs(300);

/// The longest wait before a GET stream that broke is opened again; the
/// wait doubles from a second while streams cannot be opened or end at once.
const MAX_LISTEN_RETRY: Duration = Duration::from_secs(60);

/// How long a GET stream lasts to be taken for one that works: one that
/// ends after it is opened again at once; one that ends sooner, a second
/// later at the soonest (a server that closes each stream at once is not
/// asked again at once).
const STEADY_STREAM: Duration = Duration::from_secs(10);

/// A server reached over HTTP.
#[derive(Clone)]
pub(super) struct Transport {
    pub(super) server: String,
    pub(super) url: String,
    pub(super) http: reqwest::Client,
    /// The configured headers, secrets in them: sent with every message.
    pub(super) headers: HeaderMap,
    /// Told when the server says its tools changed.
    pub(super) changed: Arc<Notify>,
}

/// How a GET stream ended.
enum Listened {
    /// The server offers none (`405`, or another refusal), or no longer
    /// knows the session (`404`: the next call opens a new one, which is
    /// listened to in turn).
    Refused,
    /// It lasted [`STEADY_STREAM`], and ended: at [`LISTENING_SPAN`], or
    /// as the server closed it.
    Ended,
    /// It could not be opened (`opened` false), or ended sooner; `heard`
    /// whether a message came meanwhile.
    Broke { opened: bool, heard: bool },
}

impl Transport {
    fn request(&self, state: Option<&SessionState>, extra: &HeaderMap) -> reqwest::RequestBuilder {
        let mut request = self
            .http
            .post(&self.url)
            .headers(self.headers.clone())
            .headers(extra.clone())
            .header(ACCEPT, "application/json, text/event-stream");
        if let Some(state) = state {
            request = with_session(request, state);
        }
        request
    }

    /// Listens to the stream of the server's own messages the session
    /// `state` may have (a GET), for as long as the returned task runs:
    /// opened again when it ends, until the server refuses it. Each stream
    /// opened after the first tells the session the tools may have changed:
    /// what the server said while no stream was open is not missed.
    pub(super) fn listen(&self, state: SessionState) -> tokio::task::JoinHandle<()> {
        let transport = self.clone();
        tokio::spawn(async move {
            let mut retry = Duration::from_secs(1);
            let mut opened_before = false;
            loop {
                match transport.listen_once(&state, opened_before).await {
                    Listened::Refused => return,
                    Listened::Ended => {
                        (opened_before, retry) = (true, Duration::from_secs(1));
                        continue;
                    }
                    Listened::Broke { opened, heard } => {
                        opened_before |= opened;
                        if heard {
                            retry = Duration::from_secs(1);
                        }
                    }
                }
                tokio::time::sleep(retry).await;
                retry = (retry * 2).min(MAX_LISTEN_RETRY);
            }
        })
    }

    /// Reads one GET stream of the session `state` to its end, taking in
    /// each message of the server's; tells the session once it is open
    /// when `relist`.
    async fn listen_once(&self, state: &SessionState, relist: bool) -> Listened {
        let request = self
            .http
            .get(&self.url)
            .headers(self.headers.clone())
            .header(ACCEPT, "text/event-stream")
            .timeout(LISTENING_SPAN);
        let response = match with_session(request, state).send().await {
            Ok(response) if response.status().is_success() && is_event_stream(&response) => {
                response
            }
            Ok(response) => {
                let status = response.status();
                tracing::debug!(server = %self.server, %status, "MCP server offers no stream of its own messages");
                return Listened::Refused;
            }
            Err(error) => {
                let error = crate::text::error_chain(&error.without_url());
                tracing::debug!(server = %self.server, %error, "MCP server's stream of its own messages not opened");
                return Listened::Broke {
                    opened: false,
                    heard: false,
                };
            }
        };
        if relist {
            self.changed.notify_one();
        }
        let opened = Instant::now();
        let mut events = EventReader::default();
        let mut body = response.bytes_stream();
        let mut heard = false;
        while let Some(Ok(chunk)) = body.next().await {
            for data in events.push(&chunk) {
                heard = true;
                self.take_message(&data, state);
            }
            // An event without its end bounds nothing else: cut it short.
            if events.pending() > MAX_RESPONSE_BYTES {
                break;
            }
        }
        if opened.elapsed() >= STEADY_STREAM {
            Listened::Ended
        } else {
            Listened::Broke {
                opened: true,
                heard,
            }
        }
    }

    /// Takes in a message the server sent of its own accord in the session
    /// `state`, replying to a request of its own apart.
    fn take_message(&self, data: &str, state: &SessionState) {
        let Ok(message) = serde_json::from_str::<Value>(data) else {
            return;
        };
        if message.get("method").is_none() {
            return;
        }
        let Some(reply) = server_message(&self.server, &message, &self.changed) else {
            return;
        };
        let request = self.request(Some(state), &HeaderMap::new()).json(&reply);
        tokio::spawn(async move {
            // Best effort: a server that wanted the reply asks again.
            let _ = request.send().await;
        });
    }

    pub(super) async fn notify(&self, method: &str, state: &SessionState) -> Result<(), String> {
        let response = self
            .request(Some(state), &HeaderMap::new())
            .json(&json!({"jsonrpc": "2.0", "method": method}))
            .send()
            .await
            .map_err(|e| format!("{method}: {}", crate::text::error_chain(&e.without_url())))?;
        let status = response.status();
        if status.is_success() {
            Ok(())
        } else {
            let body = read_limited(response).await.unwrap_or_default();
            Err(format!(
                "{method}: the server answered {status}: {}",
                snippet(&body)
            ))
        }
    }

    /// Sends `request`; the message answering it and the session id the
    /// answer set.
    pub(super) async fn exchange(
        &self,
        request: &Request<'_>,
        state: Option<&SessionState>,
        extra: &HeaderMap,
    ) -> Result<(Value, Option<HeaderValue>), Failure> {
        let id = request.id;
        let response = self
            .request(state, extra)
            .json(request)
            .send()
            .await
            .map_err(|e| Failure::Other(crate::text::error_chain(&e.without_url())))?;
        let status = response.status();
        if status == StatusCode::NOT_FOUND && state.is_some_and(|state| state.id.is_some()) {
            return Err(Failure::SessionGone(
                "the server no longer knows the session".into(),
            ));
        }
        let session_id = response.headers().get("mcp-session-id").cloned();
        let is_stream = is_event_stream(&response);
        if !status.is_success() {
            let body = read_limited(response).await.unwrap_or_default();
            return Err(Failure::Other(format!(
                "the server answered {status}: {}",
                snippet(&body)
            )));
        }
        let answer = if is_stream {
            self.answer_in_stream(response, id, state).await?
        } else {
            let body = read_limited(response).await.map_err(Failure::Other)?;
            serde_json::from_str(&body)
                .map_err(|e| Failure::Other(format!("the answer is not JSON: {e}")))?
        };
        Ok((answer, session_id))
    }
}

/// Whether `response` is an event stream.
fn is_event_stream(response: &reqwest::Response) -> bool {
    response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("text/event-stream"))
}

/// `request` in the session `state`: its protocol revision and id.
fn with_session(
    mut request: reqwest::RequestBuilder,
    state: &SessionState,
) -> reqwest::RequestBuilder {
    request = request.header("mcp-protocol-version", state.protocol.clone());
    if let Some(id) = &state.id {
        request = request.header("mcp-session-id", id.clone());
    }
    request
}

/// `url` as errors show it: without a password or query, where a
/// credential could be.
pub(super) fn shown_url(url: &str) -> String {
    let Ok(mut url) = reqwest::Url::parse(url) else {
        return url.to_owned();
    };
    url.set_query(None);
    // Only fails for URLs that cannot have credentials.
    let _ = url.set_password(None);
    url.to_string()
}

impl Transport {
    /// Reads an event stream until the message answering request `id`,
    /// taking in the server's own messages met before it (in the session
    /// `state`, when there is one).
    async fn answer_in_stream(
        &self,
        response: reqwest::Response,
        id: u64,
        state: Option<&SessionState>,
    ) -> Result<Value, Failure> {
        let mut events = EventReader::default();
        let mut read = 0;
        let mut body = response.bytes_stream();
        while let Some(chunk) = body.next().await {
            let chunk =
                chunk.map_err(|e| Failure::Other(format!("reading the stream failed: {e}")))?;
            read += chunk.len();
            if read > MAX_RESPONSE_BYTES {
                return Err(Failure::Other(format!(
                    "the stream passed {MAX_RESPONSE_BYTES} bytes without the answer"
                )));
            }
            for data in events.push(&chunk) {
                if let Some(answer) = answer_to(&data, id) {
                    return Ok(answer);
                }
                if let Some(state) = state {
                    self.take_message(&data, state);
                }
            }
        }
        match events.finish() {
            Some(data) => answer_to(&data, id),
            None => None,
        }
        .ok_or_else(|| Failure::Other("the stream ended without the answer".into()))
    }
}

/// The event's message, when it answers request `id` (a stream may also
/// carry the server's notifications and requests).
fn answer_to(data: &str, id: u64) -> Option<Value> {
    let message: Value = serde_json::from_str(data).ok()?;
    (message.get("id") == Some(&json!(id))
        && (message.get("result").is_some() || message.get("error").is_some()))
    .then_some(message)
}

/// Splits server-sent events into their data, across chunk boundaries:
/// `data:` lines joined by newlines, an event ending at a blank line.
#[derive(Debug, Default)]
struct EventReader {
    line: Vec<u8>,
    data: Option<String>,
}

impl EventReader {
    /// The data of each event `bytes` completes.
    fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        let mut events = Vec::new();
        for &byte in bytes {
            if byte == b'\n' {
                let line = std::mem::take(&mut self.line);
                events.extend(self.end_line(&line));
            } else {
                self.line.push(byte);
            }
        }
        events
    }

    /// Bytes held of an event not yet ended.
    fn pending(&self) -> usize {
        self.line.len() + self.data.as_ref().map_or(0, String::len)
    }

    /// The last event, when the stream ended without its blank line.
    fn finish(mut self) -> Option<String> {
        let line = std::mem::take(&mut self.line);
        self.end_line(&line).or(self.data)
    }

    /// Takes one line in; the event's data when the line (blank) ends it.
    fn end_line(&mut self, line: &[u8]) -> Option<String> {
        let line = String::from_utf8_lossy(line);
        let line = line.trim_end_matches('\r');
        if line.is_empty() {
            return self.data.take();
        }
        if let Some(value) = line.strip_prefix("data:") {
            let value = value.strip_prefix(' ').unwrap_or(value);
            match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_split_across_chunks_and_lines_joined() {
        let mut reader = EventReader::default();
        assert!(reader.push(b"event: message\r\nda").is_empty());
        assert_eq!(
            reader.push(b"ta: {\"a\":\r\ndata: 1}\r\n\r\n: comment\n"),
            ["{\"a\":\n1}"]
        );
        assert!(reader.push(b"data: last").is_empty());
        assert_eq!(reader.finish().as_deref(), Some("last"));
        let mut reader = EventReader::default();
        assert!(reader.push(b"data: 1\n").is_empty());
        assert_eq!(reader.finish().as_deref(), Some("1"));
    }

    #[test]
    fn errors_show_the_url_without_its_password_or_query() {
        assert_eq!(
            shown_url("https://bot:s3cret@mcp.example.com/mcp?key=s3cret"),
            "https://bot@mcp.example.com/mcp"
        );
    }

    #[test]
    fn a_stream_answer_is_the_message_with_the_request_id_and_a_result() {
        assert_eq!(
            answer_to(r#"{"jsonrpc":"2.0","method":"notifications/progress"}"#, 3),
            None
        );
        assert_eq!(answer_to(r#"{"id":2,"result":{}}"#, 3), None);
        assert_eq!(
            answer_to(r#"{"id":3,"method":"sampling/createMessage"}"#, 3),
            None
        );
        assert_eq!(
            answer_to(r#"{"id":3,"result":{"x":1}}"#, 3),
            Some(json!({"id":3,"result":{"x":1}}))
        );
    }
}
