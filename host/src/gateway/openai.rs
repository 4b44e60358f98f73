//! OpenAI's chat-completions wire format as the gateway speaks it: the
//! request it accepts, the completion and chunk objects it returns, and the
//! `skillhost` extension field they carry.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use serde_json::{Value, json};

use super::errors::ApiError;
use super::runs::{Compacted, Tally};
use crate::agent::llm::{AssistantMessage, FinishReason, Message, ToolCall, Usage};
use crate::agent::{PendingConfirmation, RunId};

/// `POST /v1/chat/completions`. Fields the host decides itself are accepted
/// and ignored: `model` (the host's configured model answers, and the
/// response names it), `tools` (the host offers its own functions),
/// `temperature`, `max_tokens` and other sampling settings, `user`. What
/// would ask for an answer the agent does not give is refused: a
/// `tool_choice` forcing a call (the client's tools are never called), a
/// `response_format` asking for JSON, `n` other than 1. `null` stands for
/// absent everywhere, as some clients send it.
#[derive(Debug, Deserialize)]
pub struct ChatCompletionRequest {
    pub messages: Vec<InboundMessage>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    /// Only 1 is supported.
    #[serde(default)]
    n: Option<u32>,
    /// Only `auto` and `none` (the host's functions are not the client's).
    #[serde(default)]
    tool_choice: Option<Value>,
    /// Only `{"type": "text"}`.
    #[serde(default)]
    response_format: Option<Value>,
}

/// `stream_options`.
#[derive(Debug, Default, Deserialize)]
pub struct StreamOptions {
    /// Send a last chunk with the response's token usage.
    #[serde(default)]
    include_usage: Option<bool>,
}

impl StreamOptions {
    /// Whether `options` ask for a usage chunk.
    pub fn include_usage(options: Option<&Self>) -> bool {
        options
            .and_then(|options| options.include_usage)
            .unwrap_or(false)
    }
}

/// One message as clients send it: `developer` counts as `system`, content
/// may be a string or an array of text parts.
#[derive(Debug, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum InboundMessage {
    System {
        content: Content,
    },
    Developer {
        content: Content,
    },
    User {
        content: Content,
    },
    Assistant {
        #[serde(default)]
        content: Option<Content>,
        /// `null` (as some clients send it) or absent: none.
        #[serde(default)]
        tool_calls: Option<Vec<ToolCall>>,
    },
    Tool {
        tool_call_id: String,
        content: Content,
    },
}

/// Message content: text, or parts of which only text is supported.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    Text {
        text: String,
    },
    /// Images, audio, files: refused with a message.
    #[serde(other)]
    Unsupported,
}

impl Content {
    /// The text, parts joined; `param` names the field for errors.
    fn into_text(self, param: &str) -> Result<String, ApiError> {
        match self {
            Self::Text(text) => Ok(text),
            Self::Parts(parts) => parts
                .into_iter()
                .enumerate()
                .map(|(i, part)| match part {
                    ContentPart::Text { text } => Ok(text),
                    ContentPart::Unsupported => Err(ApiError::bad_request(
                        "unsupported_content",
                        "only text content parts are supported",
                    )
                    .with_param(format!("{param}[{i}]"))),
                })
                .collect(),
        }
    }
}

impl ChatCompletionRequest {
    /// Whether the answer is to be streamed.
    pub fn streams(&self) -> bool {
        self.stream.unwrap_or(false)
    }

    /// Whether a streamed answer ends with a usage chunk.
    pub fn includes_usage(&self) -> bool {
        StreamOptions::include_usage(self.stream_options.as_ref())
    }

    /// Checks what the agent cannot take and converts the conversation. An
    /// assistant message's call whose arguments are not a JSON object is
    /// sent on with `{}`, as the agent sends its own (a model's server may
    /// refuse the history otherwise).
    pub fn into_messages(self) -> Result<Vec<Message>, ApiError> {
        if self.n.is_some_and(|n| n != 1) {
            return Err(
                ApiError::bad_request("unsupported_n", "only `n: 1` is supported").with_param("n"),
            );
        }
        if let Some(choice) = self
            .tool_choice
            .as_ref()
            .filter(|choice| forces_a_call(choice))
        {
            return Err(ApiError::bad_request(
                "unsupported_tool_choice",
                format!(
                    "`tool_choice` {choice} asks for a call of the client's tools, which this                      agent never makes (it calls the host's own functions and answers in text);                      only \"auto\" and \"none\" are accepted"
                ),
            )
            .with_param("tool_choice"));
        }
        if let Some(format) = self
            .response_format
            .as_ref()
            .filter(|format| !is_text(format))
        {
            return Err(ApiError::bad_request(
                "unsupported_response_format",
                format!(
                    "`response_format` {format} asks for structured output, which this agent                      does not produce: it answers in text (only {{\"type\": \"text\"}} is                      accepted)"
                ),
            )
            .with_param("response_format"));
        }
        if self.messages.is_empty() {
            return Err(
                ApiError::bad_request("no_messages", "`messages` is empty").with_param("messages")
            );
        }
        check_tool_replies(&self.messages)?;
        self.messages
            .into_iter()
            .enumerate()
            .map(|(i, message)| {
                let param = format!("messages[{i}].content");
                Ok(match message {
                    InboundMessage::System { content } | InboundMessage::Developer { content } => {
                        Message::system(content.into_text(&param)?)
                    }
                    InboundMessage::User { content } => Message::user(content.into_text(&param)?),
                    InboundMessage::Assistant {
                        content,
                        tool_calls,
                    } => Message::Assistant(
                        AssistantMessage {
                            content: content.map(|c| c.into_text(&param)).transpose()?,
                            tool_calls: tool_calls.unwrap_or_default(),
                        }
                        .replayable(),
                    ),
                    InboundMessage::Tool {
                        tool_call_id,
                        content,
                    } => Message::tool(tool_call_id, "", content.into_text(&param)?),
                })
            })
            .collect()
    }
}

/// Whether a `tool_choice` asks for a call: `"required"`, or a function
/// (or tool set) named.
fn forces_a_call(choice: &Value) -> bool {
    !matches!(choice.as_str(), Some("auto" | "none"))
}

/// Whether a `response_format` asks for plain text.
fn is_text(format: &Value) -> bool {
    format.get("type").and_then(Value::as_str) == Some("text")
}

/// Checks that every tool call of an assistant message is answered by a
/// `tool` message before the next other message, and that every `tool`
/// message answers such a call — as OpenAI's API requires. A model's server
/// refuses a conversation that breaks this; the client hears which message
/// to fix instead of a 502.
fn check_tool_replies(messages: &[InboundMessage]) -> Result<(), ApiError> {
    let unpaired = |i: usize, message: String| {
        ApiError::bad_request("unpaired_tool_message", message).with_param(format!("messages[{i}]"))
    };
    // The calls still waiting for their tool message, and where they were made.
    let mut waiting: Vec<&str> = Vec::new();
    let mut called_at = 0;
    for (i, message) in messages.iter().enumerate() {
        if let InboundMessage::Tool { tool_call_id, .. } = message {
            let Some(at) = waiting.iter().position(|id| id == tool_call_id) else {
                return Err(unpaired(
                    i,
                    format!(
                        "this tool message answers `{tool_call_id}`, which no earlier assistant \
                         message's tool_calls is still waiting for"
                    ),
                ));
            };
            waiting.swap_remove(at);
            continue;
        }
        if let Some(id) = waiting.first() {
            return Err(unpaired(
                called_at,
                format!(
                    "the tool call `{id}` of this assistant message has no tool message \
                     answering it before messages[{i}]"
                ),
            ));
        }
        if let InboundMessage::Assistant { tool_calls, .. } = message {
            waiting = tool_calls
                .iter()
                .flatten()
                .map(|call| call.id.as_str())
                .collect();
            called_at = i;
        }
    }
    match waiting.first() {
        Some(id) => Err(unpaired(
            called_at,
            format!(
                "the tool call `{id}` of this assistant message has no tool message answering it"
            ),
        )),
        None => Ok(()),
    }
}

/// What every completion and chunk of one run shares.
#[derive(Debug, Clone)]
pub struct CompletionMeta {
    /// `chatcmpl-` + the run id: the same for every response of a run.
    pub id: String,
    pub run: RunId,
    pub model: String,
    /// Unix seconds when the run started.
    pub created: u64,
}

impl CompletionMeta {
    /// For a run starting now.
    pub fn new(run: RunId, model: String) -> Self {
        Self::started_at(run, model, SystemTime::now())
    }

    /// For a run that `started` (before a restart, for a resumed one).
    pub fn started_at(run: RunId, model: String, started: SystemTime) -> Self {
        let created = started
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_secs());
        Self {
            id: format!("chatcmpl-{}", run.as_str().trim_start_matches("run_")),
            run,
            model,
            created,
        }
    }
}

/// Where a run stands, for the `skillhost` extension field.
pub enum Status<'a> {
    /// The run ended; why its final answer ended.
    Completed(&'a FinishReason),
    /// Waiting for a person; answer at `answer_path`.
    Pending {
        confirmation: &'a PendingConfirmation,
        answer_path: &'a str,
    },
}

impl Status<'_> {
    /// The completion's `finish_reason`: `length` or `content_filter` when
    /// the model's answer was cut short or withheld, else `stop` — a pending
    /// confirmation is not a tool call the client should execute; the
    /// extension field says what it is.
    fn finish_reason(&self) -> &'static str {
        match self {
            Self::Completed(FinishReason::Length) => "length",
            Self::Completed(FinishReason::ContentFilter) => "content_filter",
            Self::Completed(_) | Self::Pending { .. } => "stop",
        }
    }
}

/// The `skillhost` extension field of completions and final chunks:
/// `{"run", "status": "completed" | "pending_confirmation", "confirmation"?,
/// "compacted"?}`, the last when the main agent dropped older turns of the
/// conversation during this response.
pub fn extension(run: &RunId, status: &Status<'_>, compaction: &Compacted) -> Value {
    let mut extension = match status {
        Status::Completed(_) => json!({"run": run, "status": "completed"}),
        Status::Pending {
            confirmation,
            answer_path,
        } => json!({
            "run": run,
            "status": "pending_confirmation",
            "confirmation": confirmation_json(confirmation, answer_path),
        }),
    };
    if compaction.happened() {
        extension["compacted"] = json!(compaction);
    }
    extension
}

/// A pending confirmation with where and how to answer it.
pub fn confirmation_json(pending: &PendingConfirmation, answer_path: &str) -> Value {
    let mut value = serde_json::to_value(pending).expect("a confirmation serializes");
    value["answer"] = json!({
        "method": "POST",
        "path": answer_path,
        "body": {"decision": "approve | reject", "reason": "optional, for a rejection"},
    });
    value
}

/// The assistant text that stands for a pending confirmation, for clients
/// that show only `content`.
pub fn pending_text(pending: &PendingConfirmation, answer_path: &str) -> String {
    let approvers = pending
        .approvers
        .as_ref()
        .map(|names| {
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            format!(" Only these may approve it: {}.", names.join(", "))
        })
        .unwrap_or_default();
    format!(
        "Approval needed before I continue: {}. Approve or reject it with POST {answer_path} and \
         the body {{\"decision\": \"approve\"}} or {{\"decision\": \"reject\", \"reason\": \"...\"}}; \
         it expires {}.{approvers}",
        pending.summary,
        httpdate::fmt_http_date(pending.expires_at)
    )
}

/// A whole `chat.completion` object.
pub fn completion(
    meta: &CompletionMeta,
    content: &str,
    tally: &Tally,
    status: &Status<'_>,
) -> Value {
    json!({
        "id": meta.id,
        "object": "chat.completion",
        "created": meta.created,
        "model": meta.model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": content},
            "logprobs": null,
            "finish_reason": status.finish_reason(),
        }],
        "usage": tally.usage,
        "skillhost": extension(&meta.run, status, &tally.compaction),
    })
}

/// A `chat.completion.chunk` carrying `delta`.
pub fn chunk(meta: &CompletionMeta, delta: &Value) -> Value {
    json!({
        "id": meta.id,
        "object": "chat.completion.chunk",
        "created": meta.created,
        "model": meta.model,
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": null}],
    })
}

/// The last chunk with choices: empty delta, the finish reason, the
/// extension field.
pub fn final_chunk(meta: &CompletionMeta, status: &Status<'_>, compaction: &Compacted) -> Value {
    json!({
        "id": meta.id,
        "object": "chat.completion.chunk",
        "created": meta.created,
        "model": meta.model,
        "choices": [{"index": 0, "delta": {}, "logprobs": null, "finish_reason": status.finish_reason()}],
        "skillhost": extension(&meta.run, status, compaction),
    })
}

/// The usage chunk sent after the final one when
/// `stream_options.include_usage` is set: no choices, the usage.
pub fn usage_chunk(meta: &CompletionMeta, usage: Usage) -> Value {
    json!({
        "id": meta.id,
        "object": "chat.completion.chunk",
        "created": meta.created,
        "model": meta.model,
        "choices": [],
        "usage": usage,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::errors::parse_json;

    #[test]
    fn a_pending_confirmation_s_text_says_who_may_approve_it() {
        let mut pending = PendingConfirmation {
            id: crate::agent::ConfirmationId::random(),
            run: RunId::random(),
            requested_by: None,
            caller: crate::agent::Caller::Main,
            tool: "applyRefund".into(),
            arguments: json!({"orderId": "88231"}),
            summary: "applyRefund: orderId '88231'".into(),
            separate_approver: false,
            approvers: None,
            expires_at: SystemTime::UNIX_EPOCH,
        };
        let text = pending_text(&pending, "/v1/confirmations/cf_1");
        assert!(
            text.starts_with("Approval needed before I continue: applyRefund"),
            "{text}"
        );
        assert!(!text.contains("Only"), "{text}");
        pending.approvers = Some(["cfo".to_owned(), "finance-desk".to_owned()].into());
        let text = pending_text(&pending, "/v1/confirmations/cf_1");
        assert!(
            text.ends_with(" Only these may approve it: cfo, finance-desk."),
            "{text}"
        );
    }

    #[test]
    fn clients_messages_convert_with_parts_and_developer_role() {
        let request: ChatCompletionRequest = parse_json(
            br#"{"model":"x","temperature":0.2,"tools":[],"messages":[
                {"role":"developer","content":"be brief"},
                {"role":"user","content":[{"type":"text","text":"refund "},{"type":"text","text":"88231"}]},
                {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},
                {"role":"tool","tool_call_id":"c1","content":"ok"},
                {"role":"assistant","content":"done","tool_calls":null}
            ]}"#,
        )
        .unwrap();
        let messages = request.into_messages().unwrap();
        assert_eq!(messages.len(), 5);
        assert_eq!(messages[0], Message::system("be brief"));
        assert_eq!(messages[1], Message::user("refund 88231"));
        assert!(matches!(&messages[2], Message::Assistant(m) if m.tool_calls.len() == 1));
        assert_eq!(messages[3], Message::tool("c1", "", "ok"));
    }

    #[test]
    fn unsupported_requests_name_the_field() {
        let parse = |body: &str| {
            parse_json::<ChatCompletionRequest>(body.as_bytes())
                .and_then(ChatCompletionRequest::into_messages)
                .unwrap_err()
        };
        let image = parse(
            r#"{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}"#,
        );
        assert_eq!(image.code(), "unsupported_content");
        assert_eq!(image.body()["error"]["param"], "messages[0].content[0]");
        let role = parse(r#"{"messages":[{"role":"robot","content":"hi"}]}"#);
        assert_eq!(role.code(), "invalid_request");
        assert_eq!(role.body()["error"]["param"], "messages[0].role");
        assert_eq!(parse(r#"{"messages":[]}"#).code(), "no_messages");
        assert_eq!(
            parse(r#"{"n":2,"messages":[{"role":"user","content":"x"}]}"#).code(),
            "unsupported_n"
        );
    }

    #[test]
    fn tool_calls_and_tool_messages_must_pair_up() {
        let check = |messages: &str| {
            parse_json::<ChatCompletionRequest>(format!(r#"{{"messages":{messages}}}"#).as_bytes())
                .and_then(ChatCompletionRequest::into_messages)
                .map(|_| ())
                .map_err(|error| {
                    assert_eq!(error.code(), "unpaired_tool_message");
                    let body = error.body();
                    (
                        body["error"]["param"].as_str().unwrap().to_owned(),
                        body["error"]["message"].as_str().unwrap().to_owned(),
                    )
                })
        };
        let call = |id: &str| {
            format!(
                r#"{{"role":"assistant","tool_calls":[{{"id":"{id}","type":"function","function":{{"name":"f","arguments":"{{}}"}}}}]}}"#
            )
        };
        let reply = |id: &str| format!(r#"{{"role":"tool","tool_call_id":"{id}","content":"ok"}}"#);
        let user = r#"{"role":"user","content":"hi"}"#;

        let answered = format!("[{user},{},{},{user}]", call("c1"), reply("c1"));
        assert_eq!(check(&answered), Ok(()));
        let (param, message) = check(&format!("[{user},{},{user}]", call("c1"))).unwrap_err();
        assert_eq!(param, "messages[1]");
        assert!(
            message.contains("`c1`") && message.contains("messages[2]"),
            "{message}"
        );
        let (param, _) = check(&format!("[{user},{}]", call("c1"))).unwrap_err();
        assert_eq!(param, "messages[1]");
        let (param, message) = check(&format!("[{user},{}]", reply("c9"))).unwrap_err();
        assert_eq!(param, "messages[1]");
        assert!(message.contains("`c9`"), "{message}");
        let twice = format!("[{user},{},{},{}]", call("c1"), reply("c1"), reply("c1"));
        assert_eq!(check(&twice).unwrap_err().0, "messages[3]");
    }
}
