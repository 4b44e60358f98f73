//! Typed request and response structures in OpenAI's chat-completions wire
//! format.
//!
//! Outgoing types serialize to exactly what OpenAI documents. Incoming types
//! are tolerant: unknown fields are ignored (servers add their own, e.g.
//! `system_fingerprint`, `reasoning_content`), `content: null` is accepted,
//! and missing optional fields take defaults.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::mpsc;

use crate::trace_context::TraceContext;

/// One message of a conversation, tagged by `role` on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum Message {
    /// Instructions for the model: `{"role":"system","content":...}`.
    System {
        /// The instructions.
        content: String,
    },
    /// What the person said: `{"role":"user","content":...}`.
    User {
        /// The person's text.
        content: String,
    },
    /// A model turn: text, tool calls, or both.
    Assistant(AssistantMessage),
    /// The result of one tool call, answering the call with the same id.
    Tool {
        /// The `id` of the [`ToolCall`] this message answers.
        tool_call_id: String,
        /// The called function's name. Not required by OpenAI, but some
        /// servers' chat templates (Qwen, several vLLM models) use it.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        name: String,
        /// The result, usually JSON text.
        content: String,
    },
}

impl Message {
    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::System {
            content: content.into(),
        }
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::User {
            content: content.into(),
        }
    }

    /// A tool-result message answering the call `tool_call_id` to `name`.
    pub fn tool(
        tool_call_id: impl Into<String>,
        name: impl Into<String>,
        content: impl Into<String>,
    ) -> Self {
        Self::Tool {
            tool_call_id: tool_call_id.into(),
            name: name.into(),
            content: content.into(),
        }
    }
}

impl From<AssistantMessage> for Message {
    fn from(message: AssistantMessage) -> Self {
        Self::Assistant(message)
    }
}

/// A model turn: `{"role":"assistant","content":...,"tool_calls":[...]}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AssistantMessage {
    /// The text, if any. `None` serializes as `"content": null`, the form
    /// every OpenAI-compatible server accepts next to `tool_calls`. In a
    /// [`ChatResponse`] an empty string is normalized to `None`.
    #[serde(default)]
    pub content: Option<String>,
    /// The functions the model wants called, in the model's order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
}

impl AssistantMessage {
    /// This message as it can be sent back to a server: arguments that do
    /// not parse as an object (cut off, malformed, or `""`) become `{}`.
    /// vLLM and Ollama refuse a request whose history holds them; the
    /// refusal of the call has already told the model what was wrong.
    pub fn replayable(mut self) -> Self {
        for call in &mut self.tool_calls {
            if let Ok(Value::Object(_)) = serde_json::from_str(&call.function.arguments) {
                continue;
            }
            call.function.arguments = "{}".to_owned();
        }
        self
    }
}

/// The only tool type OpenAI-compatible servers define: `"function"`.
/// Serialized as the `type` field of tool definitions and tool calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolType {
    /// `"function"`.
    #[default]
    Function,
}

/// One function call requested by the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The id the answering [`Message::Tool`] must carry. Servers that omit
    /// it get a synthesized `call_<n>` (see [`ChatResponse`]).
    #[serde(default)]
    pub id: String,
    /// Always `"function"`.
    #[serde(rename = "type", default)]
    pub kind: ToolType,
    /// Which function, with which arguments.
    pub function: FunctionCall,
}

impl ToolCall {
    /// A function call with raw (JSON text) arguments.
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        Self {
            id: id.into(),
            kind: ToolType::Function,
            function: FunctionCall {
                name: name.into(),
                arguments: arguments.into(),
            },
        }
    }

    /// The called function's name.
    pub fn name(&self) -> &str {
        &self.function.name
    }

    /// Parses the arguments the model wrote.
    ///
    /// Models sometimes write arguments that are not JSON; that is not an
    /// error of the LLM call, so the raw text stays on the [`ToolCall`] and
    /// this method's error message is meant to be reported back to the model.
    /// Empty (or all-whitespace) arguments mean "no arguments" and parse as
    /// `{}`: llama.cpp and some vLLM templates send `""` for parameterless
    /// functions. Anything but a JSON object is refused, since function
    /// arguments are always an object.
    pub fn parse_arguments(&self) -> Result<Value, String> {
        let raw = self.function.arguments.trim();
        if raw.is_empty() {
            return Ok(Value::Object(serde_json::Map::new()));
        }
        match serde_json::from_str::<Value>(raw) {
            Ok(value @ Value::Object(_)) => Ok(value),
            Ok(other) => Err(format!(
                "the arguments of `{}` must be a JSON object, got {}",
                self.function.name,
                json_kind(&other)
            )),
            Err(e) => Err(format!(
                "the arguments of `{}` are not valid JSON ({e}): {}",
                self.function.name,
                super::snippet(raw)
            )),
        }
    }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The function part of a [`ToolCall`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    /// The function's name, as the model wrote it (it may name no tool).
    #[serde(default)]
    pub name: String,
    /// The arguments as JSON text, exactly as the model wrote them; see
    /// [`ToolCall::parse_arguments`]. A server that sends an object instead
    /// of a string (Ollama's native format) has it re-serialized to text.
    #[serde(default, deserialize_with = "arguments_as_text")]
    pub arguments: String,
}

fn arguments_as_text<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    match Value::deserialize(deserializer)? {
        Value::String(text) => Ok(text),
        Value::Null => Ok(String::new()),
        other => serde_json::to_string(&other).map_err(de::Error::custom),
    }
}

/// A function the model may call:
/// `{"type":"function","function":{"name","description","parameters"}}`.
///
/// Immutable, and serialized once, when built: a request copies each
/// definition's JSON text instead of walking its schema again, so the
/// host's share of a round stays small however many functions it offers.
#[derive(Debug, Clone, Deserialize)]
#[serde(from = "WireToolDefinition<FunctionDefinition>")]
pub struct ToolDefinition {
    function: FunctionDefinition,
    /// The wire form of `function`, computed at construction.
    json: Box<RawValue>,
}

/// [`ToolDefinition`] as it is written on the wire.
#[derive(Serialize, Deserialize)]
struct WireToolDefinition<F> {
    /// Always `"function"`.
    #[serde(rename = "type", default)]
    kind: ToolType,
    function: F,
}

impl From<WireToolDefinition<FunctionDefinition>> for ToolDefinition {
    fn from(wire: WireToolDefinition<FunctionDefinition>) -> Self {
        Self::new(wire.function)
    }
}

impl ToolDefinition {
    /// A function definition. `parameters` is the JSON Schema of the
    /// arguments object.
    pub fn function(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: Value,
    ) -> Self {
        Self::new(FunctionDefinition {
            name: name.into(),
            description: description.into(),
            parameters,
        })
    }

    fn new(function: FunctionDefinition) -> Self {
        let wire = WireToolDefinition {
            kind: ToolType::Function,
            function: &function,
        };
        // Strings and a JSON value: serializing them cannot fail.
        let json = serde_json::value::to_raw_value(&wire)
            .expect("a function definition always serializes");
        Self { function, json }
    }

    /// The function's name.
    pub fn name(&self) -> &str {
        &self.function.name
    }

    /// The function's name, description and parameter schema.
    pub fn definition(&self) -> &FunctionDefinition {
        &self.function
    }

    /// The definition as sent: compact JSON text.
    pub fn json(&self) -> &str {
        self.json.get()
    }
}

impl PartialEq for ToolDefinition {
    fn eq(&self, other: &Self) -> bool {
        self.function == other.function
    }
}

impl Serialize for ToolDefinition {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.json.serialize(serializer)
    }
}

/// The `function` object of a [`ToolDefinition`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionDefinition {
    /// The name the model calls the function by.
    pub name: String,
    /// What the function does, for the model. Omitted when empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
}

/// Tokens counted by the server for one call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens of the request (messages and tool definitions).
    #[serde(default)]
    pub prompt_tokens: u64,
    /// Tokens the model generated.
    #[serde(default)]
    pub completion_tokens: u64,
    /// Their sum. Computed when a server leaves it out.
    #[serde(default)]
    pub total_tokens: u64,
}

impl Usage {
    /// Fills in `total_tokens` when the server left it at zero.
    pub(super) fn normalized(mut self) -> Self {
        if self.total_tokens == 0 {
            self.total_tokens = self.prompt_tokens.saturating_add(self.completion_tokens);
        }
        self
    }

    /// Adds `other`'s counts to these. Saturating: the counts come from the
    /// server, which may send anything.
    pub fn add(&mut self, other: &Usage) {
        self.prompt_tokens = self.prompt_tokens.saturating_add(other.prompt_tokens);
        self.completion_tokens = self
            .completion_tokens
            .saturating_add(other.completion_tokens);
        self.total_tokens = self.total_tokens.saturating_add(other.total_tokens);
    }
}

/// Why the model stopped generating.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum FinishReason {
    /// `"stop"`: a natural end or a stop sequence.
    Stop,
    /// `"length"`: the token limit was hit; the output is cut off.
    Length,
    /// `"tool_calls"`: the model wants tools called.
    ToolCalls,
    /// `"content_filter"`: the output was withheld by a filter.
    ContentFilter,
    /// Anything else a server reports (e.g. the legacy `"function_call"`).
    Other(String),
}

impl FinishReason {
    /// The wire form.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Stop => "stop",
            Self::Length => "length",
            Self::ToolCalls => "tool_calls",
            Self::ContentFilter => "content_filter",
            Self::Other(other) => other,
        }
    }
}

impl From<String> for FinishReason {
    fn from(value: String) -> Self {
        match value.as_str() {
            "stop" => Self::Stop,
            "length" => Self::Length,
            "tool_calls" => Self::ToolCalls,
            "content_filter" => Self::ContentFilter,
            _ => Self::Other(value),
        }
    }
}

impl From<FinishReason> for String {
    fn from(value: FinishReason) -> Self {
        value.as_str().to_owned()
    }
}

impl fmt::Display for FinishReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What to ask the model. The model name and the streaming default come from
/// the client's [`LlmConfig`](super::LlmConfig).
#[derive(Debug, Clone, Default)]
pub struct ChatRequest {
    /// The conversation so far.
    pub messages: Vec<Message>,
    /// The functions offered this round. Empty: none (the `tools` field is
    /// then omitted, as some servers reject an empty list). Shared, so that
    /// a round's list reuses the catalog's definitions instead of copying
    /// their schemas.
    pub tools: Vec<Arc<ToolDefinition>>,
    /// Whether the model may call [`Self::tools`].
    pub tool_choice: ToolChoice,
    /// Sampling temperature; `None` leaves the server's default.
    pub temperature: Option<f32>,
    /// Overrides [`LlmConfig::stream`](super::LlmConfig::stream) for this
    /// call.
    pub stream: Option<bool>,
    /// Receives the assistant's text as it arrives. When streaming, one
    /// message per content delta; when not, the whole text as one message
    /// once the response is in. Tool-call arguments are not forwarded. A
    /// closed receiver is ignored; the call still completes. Unbounded so
    /// that a caller who reads only after the call returns cannot deadlock
    /// it; the buffer is bounded by the size of one response.
    pub deltas: Option<mpsc::UnboundedSender<String>>,
    /// The distributed trace the call is part of: sent as the
    /// `traceparent` and `tracestate` headers.
    pub trace: Option<TraceContext>,
}

impl ChatRequest {
    /// A request with these messages, no tools and the config's defaults.
    pub fn new(messages: Vec<Message>) -> Self {
        Self {
            messages,
            ..Self::default()
        }
    }

    /// Offers these functions to the model.
    pub fn with_tools(mut self, tools: Vec<Arc<ToolDefinition>>) -> Self {
        self.tools = tools;
        self
    }

    /// Lets the model call the functions offered, or not.
    pub fn with_tool_choice(mut self, choice: ToolChoice) -> Self {
        self.tool_choice = choice;
        self
    }

    /// Streams (or not) regardless of the config's default.
    pub fn with_stream(mut self, stream: bool) -> Self {
        self.stream = Some(stream);
        self
    }

    /// Forwards content deltas to `sender` (see [`ChatRequest::deltas`]).
    pub fn with_deltas(mut self, sender: mpsc::UnboundedSender<String>) -> Self {
        self.deltas = Some(sender);
        self
    }

    /// Sends the call in the trace `context` (see [`ChatRequest::trace`]).
    pub fn with_trace(mut self, context: TraceContext) -> Self {
        self.trace = Some(context);
        self
    }
}

/// Whether the model may call the functions a request offers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ToolChoice {
    /// As the model decides: `tool_choice` is left out (the server's
    /// default, `auto`).
    #[default]
    Auto,
    /// The model must answer in text: `"none"`. The functions are still
    /// listed, so that a history holding calls of them stays valid.
    TextOnly,
}

/// The request body on the wire.
#[derive(Debug, Serialize)]
pub(super) struct WireRequest<'a> {
    pub model: &'a str,
    pub messages: &'a [Message],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub tools: &'a [Arc<ToolDefinition>],
    /// `"none"` or left out; never sent without tools, which servers refuse.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    pub stream: bool,
    /// Asks for a final chunk carrying token usage; only sent when streaming.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
}

/// `{"include_usage": true}`.
#[derive(Debug, Serialize)]
pub(super) struct StreamOptions {
    pub include_usage: bool,
}

/// The assembled answer of one call, the same whether it was streamed or not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    /// The model's turn, ready to be appended to the conversation. Tool calls
    /// the server sent without an id, or with an earlier call's, get a
    /// unique `call_<n>` (`n` = position).
    pub message: AssistantMessage,
    /// Why generation stopped; `None` if the server did not say.
    pub finish_reason: Option<FinishReason>,
    /// Tokens counted by the server; `None` if it sent none.
    pub usage: Option<Usage>,
    /// The model that answered, as the server reports it.
    pub model: Option<String>,
    /// The server's completion id.
    pub id: Option<String>,
}

impl ChatResponse {
    /// Normalizes what servers do differently: empty content becomes `None`,
    /// a tool call without an id, or with the id of an earlier call of the
    /// answer, gets one of its own (each result message answers one call by
    /// its id, and servers refuse a history where two share one), missing
    /// totals are computed.
    pub(super) fn normalized(mut self) -> Self {
        if self.message.content.as_deref() == Some("") {
            self.message.content = None;
        }
        let mut taken: HashSet<String> = self
            .message
            .tool_calls
            .iter()
            .map(|call| call.id.clone())
            .collect();
        let mut given = HashSet::new();
        for (n, call) in self.message.tool_calls.iter_mut().enumerate() {
            if call.id.is_empty() || given.contains(&call.id) {
                let mut id = format!("call_{n}");
                while taken.contains(&id) {
                    id.push('_');
                }
                taken.insert(id.clone());
                call.id = id;
            }
            given.insert(call.id.clone());
        }
        self.usage = self.usage.map(Usage::normalized);
        self
    }
}

/// A non-streaming response body (`chat.completion`).
#[derive(Debug, Deserialize)]
pub(super) struct WireCompletion {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub choices: Option<Vec<WireChoice>>,
    #[serde(default)]
    pub usage: Option<Usage>,
    /// Some proxies answer 200 with an error object.
    #[serde(default)]
    pub error: Option<Value>,
}

/// One choice of a non-streaming response.
#[derive(Debug, Deserialize)]
pub(super) struct WireChoice {
    #[serde(default)]
    pub index: u32,
    #[serde(default)]
    pub message: WireResponseMessage,
    #[serde(default)]
    pub finish_reason: Option<FinishReason>,
}

/// The message of a non-streaming choice; `tool_calls` may be `null`.
#[derive(Debug, Default, Deserialize)]
pub(super) struct WireResponseMessage {
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub tool_calls: Option<Vec<ToolCall>>,
}

/// One streamed chunk (`chat.completion.chunk`).
#[derive(Debug, Deserialize)]
pub(super) struct WireChunk {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub choices: Option<Vec<WireChunkChoice>>,
    #[serde(default)]
    pub usage: Option<Usage>,
    /// An error reported in the middle of a stream.
    #[serde(default)]
    pub error: Option<Value>,
}

/// One choice of a streamed chunk.
#[derive(Debug, Deserialize)]
pub(super) struct WireChunkChoice {
    #[serde(default)]
    pub index: u32,
    #[serde(default)]
    pub delta: Option<WireDelta>,
    #[serde(default)]
    pub finish_reason: Option<FinishReason>,
}

/// The delta of a streamed choice.
#[derive(Debug, Default, Deserialize)]
pub(super) struct WireDelta {
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub tool_calls: Option<Vec<WireToolCallDelta>>,
}

/// A fragment of a tool call: `id` and `name` in the first fragment of a
/// call, `arguments` as string pieces across chunks, all keyed by `index`.
#[derive(Debug, Deserialize)]
pub(super) struct WireToolCallDelta {
    #[serde(default)]
    pub index: Option<u32>,
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub function: Option<WireFunctionDelta>,
}

/// The function part of a tool-call fragment.
#[derive(Debug, Deserialize)]
pub(super) struct WireFunctionDelta {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default, deserialize_with = "optional_arguments_as_text")]
    pub arguments: Option<String>,
}

fn optional_arguments_as_text<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<String>, D::Error> {
    match Value::deserialize(deserializer)? {
        Value::Null => Ok(None),
        Value::String(text) => Ok(Some(text)),
        other => serde_json::to_string(&other)
            .map(Some)
            .map_err(de::Error::custom),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn messages_serialize_in_openai_wire_format() {
        let call = ToolCall::new("call_1", "queryOrder", r#"{"orderId":"88231"}"#);
        let messages = vec![
            Message::system("be brief"),
            Message::user("hi"),
            Message::from(AssistantMessage {
                content: None,
                tool_calls: vec![call],
            }),
            Message::tool("call_1", "queryOrder", r#"{"status":"delivered"}"#),
            Message::from(AssistantMessage {
                content: Some("done".into()),
                tool_calls: vec![],
            }),
        ];
        assert_eq!(
            serde_json::to_value(&messages).unwrap(),
            json!([
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "queryOrder", "arguments": "{\"orderId\":\"88231\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "call_1", "name": "queryOrder",
                 "content": "{\"status\":\"delivered\"}"},
                {"role": "assistant", "content": "done"}
            ])
        );
        let back: Vec<Message> =
            serde_json::from_value(serde_json::to_value(&messages).unwrap()).unwrap();
        assert_eq!(back, messages);
    }

    #[test]
    fn tool_definition_serializes_in_openai_wire_format() {
        let tool = ToolDefinition::function("getCurrentTime", "", json!({"type": "object"}));
        let wire = json!({"type": "function", "function": {"name": "getCurrentTime", "parameters": {"type": "object"}}});
        assert_eq!(serde_json::to_value(&tool).unwrap(), wire);
        // Serialized once, at construction; requests copy that text.
        let text = r#"{"type":"function","function":{"name":"getCurrentTime","parameters":{"type":"object"}}}"#;
        assert_eq!(tool.json(), text);
        assert_eq!(
            serde_json::to_string(&[Arc::new(tool.clone())]).unwrap(),
            format!("[{text}]")
        );
        let back: ToolDefinition = serde_json::from_value(wire).unwrap();
        assert_eq!(back, tool);
        assert_eq!(back.json(), tool.json());
    }

    #[test]
    fn request_omits_empty_tools_and_sends_stream_options_only_when_streaming() {
        let messages = [Message::user("hi")];
        let body = WireRequest {
            model: "m",
            messages: &messages,
            tools: &[],
            tool_choice: None,
            temperature: None,
            stream: false,
            stream_options: None,
        };
        assert_eq!(
            serde_json::to_value(&body).unwrap(),
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": false})
        );
    }

    #[test]
    fn each_call_of_an_answer_gets_an_id_of_its_own() {
        let call = |id: &str| ToolCall::new(id, "queryOrder", "{}");
        let response = ChatResponse {
            message: AssistantMessage {
                content: None,
                tool_calls: vec![call("c1"), call(""), call("c1"), call("call_1"), call("")],
            },
            finish_reason: None,
            usage: None,
            model: None,
            id: None,
        }
        .normalized();
        let ids: Vec<&str> = response
            .message
            .tool_calls
            .iter()
            .map(|call| call.id.as_str())
            .collect();
        // The server's ids stay where they are first; the others are new
        // and unlike any of the answer's.
        assert_eq!(ids, ["c1", "call_1_", "call_2", "call_1", "call_4"]);
    }

    #[test]
    fn arguments_sent_as_an_object_are_kept_as_text() {
        let call: ToolCall = serde_json::from_value(json!({
            "function": {"name": "f", "arguments": {"a": 1}}
        }))
        .unwrap();
        assert_eq!(call.function.arguments, r#"{"a":1}"#);
        assert_eq!(call.kind, ToolType::Function);
    }

    #[test]
    fn parse_arguments_reports_problems_instead_of_failing_the_call() {
        assert_eq!(
            ToolCall::new("c", "f", " ").parse_arguments(),
            Ok(json!({}))
        );
        assert_eq!(
            ToolCall::new("c", "f", r#"{"a":1}"#).parse_arguments(),
            Ok(json!({"a": 1}))
        );
        let err = ToolCall::new("c", "f", r#"{"a":"#)
            .parse_arguments()
            .unwrap_err();
        assert!(err.contains("not valid JSON"), "{err}");
        let err = ToolCall::new("c", "f", "[1]")
            .parse_arguments()
            .unwrap_err();
        assert!(err.contains("must be a JSON object, got an array"), "{err}");
    }

    #[test]
    fn finish_reason_round_trips_known_and_unknown_values() {
        let reasons: Vec<FinishReason> = serde_json::from_value(json!([
            "stop",
            "tool_calls",
            "length",
            "content_filter",
            "eos"
        ]))
        .unwrap();
        assert_eq!(
            reasons,
            vec![
                FinishReason::Stop,
                FinishReason::ToolCalls,
                FinishReason::Length,
                FinishReason::ContentFilter,
                FinishReason::Other("eos".into())
            ]
        );
        assert_eq!(
            serde_json::to_value(FinishReason::ToolCalls).unwrap(),
            json!("tool_calls")
        );
    }
}
