//! Server-sent events: bytes → lines → an assembled [`ChatResponse`].
//!
//! [`LineDecoder`] splits the body into lines whatever the network chunking
//! (LF or CRLF endings). [`StreamAssembler`] reads `data:` lines as
//! `chat.completion.chunk` objects and assembles the assistant message: text
//! deltas are concatenated; tool-call fragments are merged by their `index`
//! (id and name in the first fragment, arguments as string pieces across
//! chunks); the usage chunk that `stream_options.include_usage` asks for
//! (empty `choices`) is recorded; `data: [DONE]` ends the stream.
//!
//! Each `data:` line is taken as one complete event instead of joining
//! multi-line `data:` fields until a blank line: OpenAI-compatible servers
//! always put one JSON object on one line, and some omit the blank separator
//! lines, which line-per-event handling tolerates.

use std::collections::HashMap;

use serde::de::IgnoredAny;

use super::types::{
    AssistantMessage, ChatResponse, FinishReason, ToolCall, Usage, WireChunk, WireToolCallDelta,
};
use super::{LlmError, MAX_RESPONSE_BYTES, api_error, snippet};

/// Longest line accepted. A server that sends more without a newline is
/// broken (a chunk is a few hundred bytes), and buffering it would only eat
/// memory. 8 MiB.
const MAX_LINE_BYTES: usize = 8 * 1024 * 1024;

/// Splits a byte stream into lines, across chunk boundaries.
#[derive(Debug, Default)]
pub(super) struct LineDecoder {
    pending: Vec<u8>,
}

impl LineDecoder {
    /// Adds bytes; returns the lines they complete, without line endings.
    pub(super) fn push(&mut self, bytes: &[u8]) -> Result<Vec<String>, LlmError> {
        let mut lines = Vec::new();
        let mut rest = bytes;
        while let Some(newline) = rest.iter().position(|&b| b == b'\n') {
            self.pending.extend_from_slice(&rest[..newline]);
            rest = &rest[newline + 1..];
            lines.push(self.take_line());
        }
        self.pending.extend_from_slice(rest);
        if self.pending.len() > MAX_LINE_BYTES {
            return Err(LlmError::MalformedResponse {
                reason: format!("a stream line exceeds {MAX_LINE_BYTES} bytes"),
                snippet: snippet(&String::from_utf8_lossy(&self.pending[..200])),
            });
        }
        Ok(lines)
    }

    /// The last line, if the body did not end with a newline.
    pub(super) fn finish(mut self) -> Option<String> {
        (!self.pending.is_empty()).then(|| self.take_line())
    }

    fn take_line(&mut self) -> String {
        if self.pending.last() == Some(&b'\r') {
            self.pending.pop();
        }
        let line = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        line
    }
}

/// A tool call being assembled from fragments.
#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// Assembles streamed chunks into one [`ChatResponse`].
#[derive(Debug, Default)]
pub(super) struct StreamAssembler {
    id: Option<String>,
    model: Option<String>,
    content: String,
    /// Calls in the order their first fragment arrived.
    calls: Vec<PartialCall>,
    /// The call each server index continues (a position in `calls`).
    by_index: HashMap<u32, usize>,
    finish_reason: Option<FinishReason>,
    usage: Option<Usage>,
    chunks: usize,
    /// A chunk carried the (first) choice: the server answered at all.
    has_choice: bool,
    done: bool,
    /// Memory the message holds so far (text, calls), bounded by
    /// [`MAX_RESPONSE_BYTES`] as a non-streaming body is.
    assembled_bytes: usize,
}

impl StreamAssembler {
    /// Feeds one line of the stream. Returns the content delta it carried,
    /// if any, for forwarding. Lines after `[DONE]` are ignored.
    ///
    /// Comments (`:keep-alive`), blank lines and non-`data` fields (`event:`,
    /// `id:`, `retry:`, or any garbage without a colon) are skipped as the
    /// SSE spec says. A `data:` line that is not a JSON chunk is an error:
    /// the stream is corrupt and the assembled message could be wrong.
    pub(super) fn feed_line(&mut self, line: &str) -> Result<Option<String>, LlmError> {
        if self.done {
            return Ok(None);
        }
        let Some(data) = line.strip_prefix("data:") else {
            return Ok(None);
        };
        let data = data.strip_prefix(' ').unwrap_or(data).trim_end();
        if data.is_empty() {
            return Ok(None);
        }
        if data == "[DONE]" {
            self.done = true;
            return Ok(None);
        }
        let chunk: WireChunk =
            serde_json::from_str(data).map_err(|e| LlmError::MalformedResponse {
                reason: format!("a stream chunk is not a valid chat.completion.chunk: {e}"),
                snippet: snippet(data),
            })?;
        self.apply(chunk)
    }

    /// Whether `data: [DONE]` was seen.
    pub(super) fn is_done(&self) -> bool {
        self.done
    }

    fn apply(&mut self, chunk: WireChunk) -> Result<Option<String>, LlmError> {
        if let Some(error) = chunk.error {
            return Err(api_error(&error));
        }
        self.chunks += 1;
        if self.id.is_none() {
            self.id = chunk.id;
        }
        if self.model.is_none() {
            self.model = chunk.model;
        }
        if let Some(usage) = chunk.usage {
            self.usage = Some(usage);
        }
        let mut delta_text = None;
        // Only the first choice is assembled; the client never asks for n > 1.
        for choice in chunk.choices.unwrap_or_default() {
            if choice.index != 0 {
                continue;
            }
            self.has_choice = true;
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason);
            }
            let Some(delta) = choice.delta else { continue };
            if let Some(text) = delta.content.filter(|text| !text.is_empty()) {
                self.content.push_str(&text);
                self.assembled_bytes += text.len();
                delta_text = Some(text);
            }
            for fragment in delta.tool_calls.unwrap_or_default() {
                self.merge(fragment);
            }
        }
        if self.assembled_bytes > MAX_RESPONSE_BYTES {
            return Err(LlmError::MalformedResponse {
                reason: format!("the streamed message exceeds {MAX_RESPONSE_BYTES} bytes"),
                snippet: snippet(&self.content),
            });
        }
        Ok(delta_text)
    }

    /// Merges a tool-call fragment into the call it continues, or opens a
    /// new call.
    ///
    /// A fragment continues the call with its `index`, unless it carries an
    /// id other than that call's: some servers (Ollama) number every call 0,
    /// and their calls must not run together into one. A fragment without
    /// an index (some servers send each call whole and unindexed) continues
    /// the last call unless it carries another id, or it names a function
    /// while the last call is already named and its arguments complete.
    fn merge(&mut self, fragment: WireToolCallDelta) {
        let id = fragment.id.filter(|id| !id.is_empty());
        let continued = match fragment.index {
            Some(index) => self
                .by_index
                .get(&index)
                .copied()
                .filter(|&at| same_id(&self.calls[at], id.as_ref()) != Some(false)),
            None => self.calls.len().checked_sub(1).filter(|&at| {
                let last = &self.calls[at];
                same_id(last, id.as_ref()).unwrap_or_else(|| {
                    let names_a_function = fragment
                        .function
                        .as_ref()
                        .and_then(|function| function.name.as_deref())
                        .is_some_and(|name| !name.is_empty());
                    let last_is_whole = !last.name.is_empty()
                        && serde_json::from_str::<IgnoredAny>(&last.arguments).is_ok();
                    !(names_a_function && last_is_whole)
                })
            }),
        };
        let at = continued.unwrap_or_else(|| {
            self.assembled_bytes += size_of::<PartialCall>();
            self.calls.push(PartialCall::default());
            self.calls.len() - 1
        });
        if let Some(index) = fragment.index {
            self.by_index.insert(index, at);
        }
        let call = &mut self.calls[at];
        if let Some(id) = id {
            self.assembled_bytes += id.len();
            call.id = id;
        }
        let Some(function) = fragment.function else {
            return;
        };
        if let Some(name) = function.name.filter(|name| !name.is_empty()) {
            // The name arrives whole in the first fragment; a server that
            // repeats it must not double it.
            if call.name.is_empty() {
                self.assembled_bytes += name.len();
                call.name = name;
            } else if call.name != name {
                self.assembled_bytes += name.len();
                call.name.push_str(&name);
            }
        }
        if let Some(arguments) = function.arguments {
            self.assembled_bytes += arguments.len();
            call.arguments.push_str(&arguments);
        }
    }

    /// The assembled response. A stream that ended without `[DONE]` is
    /// accepted when a finish reason was seen (some servers stop there);
    /// otherwise it was cut off and is an error.
    pub(super) fn finish(self) -> Result<ChatResponse, LlmError> {
        if !self.has_choice {
            return Err(LlmError::MalformedResponse {
                reason: format!(
                    "the stream ended after {} chunk(s) without a choice: no answer at all",
                    self.chunks
                ),
                snippet: String::new(),
            });
        }
        if !self.done && self.finish_reason.is_none() {
            return Err(LlmError::MalformedResponse {
                reason: format!(
                    "the stream ended after {} chunk(s) without a finish reason or [DONE]",
                    self.chunks
                ),
                snippet: snippet(&self.content),
            });
        }
        let tool_calls = self
            .calls
            .into_iter()
            .map(|call| ToolCall::new(call.id, call.name, call.arguments))
            .collect();
        Ok(ChatResponse {
            message: AssistantMessage {
                content: Some(self.content),
                tool_calls,
            },
            finish_reason: self.finish_reason,
            usage: self.usage,
            model: self.model,
            id: self.id,
        }
        .normalized())
    }
}

/// Whether a fragment carrying `id` continues `call` by their ids: `None`
/// when either has none yet.
fn same_id(call: &PartialCall, id: Option<&String>) -> Option<bool> {
    id.filter(|_| !call.id.is_empty()).map(|id| *id == call.id)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Feeds a whole SSE body, split into chunks of `chunk_size` bytes, and
    /// returns the forwarded deltas and the response.
    fn run(body: &str, chunk_size: usize) -> (Vec<String>, Result<ChatResponse, LlmError>) {
        let mut deltas = Vec::new();
        let response = run_into(body, chunk_size, &mut deltas);
        (deltas, response)
    }

    fn run_into(
        body: &str,
        chunk_size: usize,
        deltas: &mut Vec<String>,
    ) -> Result<ChatResponse, LlmError> {
        let mut decoder = LineDecoder::default();
        let mut assembler = StreamAssembler::default();
        for chunk in body.as_bytes().chunks(chunk_size) {
            for line in decoder.push(chunk)? {
                deltas.extend(assembler.feed_line(&line)?);
            }
        }
        if let Some(line) = decoder.finish() {
            deltas.extend(assembler.feed_line(&line)?);
        }
        assembler.finish()
    }

    fn sse(events: &[serde_json::Value]) -> String {
        let mut body: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
        body.push_str("data: [DONE]\n\n");
        body
    }

    fn tool_delta(
        index: u32,
        id: Option<&str>,
        name: Option<&str>,
        args: &str,
    ) -> serde_json::Value {
        let mut function = json!({"arguments": args});
        if let Some(name) = name {
            function["name"] = json!(name);
        }
        let mut call = json!({"index": index, "function": function});
        if let Some(id) = id {
            call["id"] = json!(id);
            call["type"] = json!("function");
        }
        json!({"id": "c1", "model": "m", "choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": null}]})
    }

    fn finish(reason: &str) -> serde_json::Value {
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
    }

    #[test]
    fn text_deltas_are_forwarded_and_concatenated_across_any_chunking() {
        let body = sse(&[
            json!({"id": "c1", "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
            json!({"choices": [{"index": 0, "delta": {"content": "Hel"}}]}),
            json!({"choices": [{"index": 0, "delta": {"content": "lo 世界"}}]}),
            finish("stop"),
        ]);
        for chunk_size in [1, 3, 7, body.len()] {
            let (deltas, response) = run(&body, chunk_size);
            let response = response.unwrap();
            assert_eq!(deltas, ["Hel", "lo 世界"], "chunk size {chunk_size}");
            assert_eq!(response.message.content.as_deref(), Some("Hello 世界"));
            assert_eq!(response.finish_reason, Some(FinishReason::Stop));
            assert_eq!(response.id.as_deref(), Some("c1"));
            assert_eq!(response.model.as_deref(), Some("m"));
            assert!(response.message.tool_calls.is_empty());
        }
    }

    #[test]
    fn tool_call_arguments_are_assembled_from_fragments() {
        let body = sse(&[
            tool_delta(0, Some("call_a"), Some("queryOrder"), ""),
            tool_delta(0, None, None, "{\"order"),
            tool_delta(0, None, None, "Id\": \"882"),
            tool_delta(0, None, None, "31\"}"),
            finish("tool_calls"),
        ]);
        let (deltas, response) = run(&body, 5);
        let response = response.unwrap();
        assert!(deltas.is_empty());
        assert_eq!(response.message.content, None);
        assert_eq!(response.finish_reason, Some(FinishReason::ToolCalls));
        assert_eq!(
            response.message.tool_calls,
            [ToolCall::new(
                "call_a",
                "queryOrder",
                r#"{"orderId": "88231"}"#
            )]
        );
        assert_eq!(
            response.message.tool_calls[0].parse_arguments(),
            Ok(json!({"orderId": "88231"}))
        );
    }

    #[test]
    fn tool_calls_are_kept_apart_by_index_and_by_id() {
        // Interleaved by index, as OpenAI streams parallel calls.
        let interleaved = sse(&[
            tool_delta(0, Some("a"), Some("queryOrder"), "{\"orderId\":"),
            tool_delta(1, Some("b"), Some("queryLogistics"), "{\"order"),
            tool_delta(0, None, None, "\"88231\"}"),
            tool_delta(1, None, None, "Id\":\"99001\"}"),
            finish("tool_calls"),
        ]);
        // Ollama streams every parallel call with index 0, each with its id.
        let numbered_alike = sse(&[
            tool_delta(0, Some("a"), Some("queryOrder"), "{\"orderId\":\"88231\"}"),
            tool_delta(0, Some("b"), Some("queryLogistics"), "{\"orderId\""),
            tool_delta(0, None, None, ":\"99001\"}"),
            finish("tool_calls"),
        ]);
        for body in [interleaved, numbered_alike] {
            assert_eq!(
                run(&body, 64).1.unwrap().message.tool_calls,
                [
                    ToolCall::new("a", "queryOrder", r#"{"orderId":"88231"}"#),
                    ToolCall::new("b", "queryLogistics", r#"{"orderId":"99001"}"#),
                ],
                "{body}"
            );
        }
    }

    #[test]
    fn unindexed_calls_without_ids_are_told_apart_by_a_new_name_after_complete_arguments() {
        let whole = |name: &str, args: &str| {
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"function": {"name": name, "arguments": args}}]}}]})
        };
        let body = sse(&[
            whole("queryOrder", "{\"orderId\":"),
            whole("queryOrder", "\"88231\"}"),
            whole("queryLogistics", "{}"),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 4294967295_u32, "function": {"name": "c", "arguments": "{}"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"id": "z", "function": {"name": "d", "arguments": "{}"}}]}}]}),
            finish("tool_calls"),
        ]);
        let response = run(&body, 64).1.unwrap();
        let calls: Vec<(&str, &str)> = response
            .message
            .tool_calls
            .iter()
            .map(|c| (c.name(), c.function.arguments.as_str()))
            .collect();
        assert_eq!(
            calls,
            [
                ("queryOrder", r#"{"orderId":"88231"}"#),
                ("queryLogistics", "{}"),
                ("c", "{}"),
                ("d", "{}"),
            ]
        );
    }

    #[test]
    fn unindexed_whole_calls_and_missing_ids_are_tolerated() {
        let body = sse(&[
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"id": "x1", "function": {"name": "a", "arguments": "{}"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"id": "x2", "function": {"name": "b", "arguments": "{}"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 2, "function": {"name": "c", "arguments": {"k": 1}}}]}}]}),
            finish("tool_calls"),
        ]);
        let response = run(&body, 64).1.unwrap();
        let calls: Vec<(&str, &str, &str)> = response
            .message
            .tool_calls
            .iter()
            .map(|c| (c.id.as_str(), c.name(), c.function.arguments.as_str()))
            .collect();
        assert_eq!(
            calls,
            [
                ("x1", "a", "{}"),
                ("x2", "b", "{}"),
                ("call_2", "c", r#"{"k":1}"#)
            ]
        );
    }

    #[test]
    fn the_usage_chunk_after_the_finish_chunk_is_recorded() {
        let body = sse(&[
            json!({"choices": [{"index": 0, "delta": {"content": "hi"}}]}),
            finish("stop"),
            json!({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15,
                   "prompt_tokens_details": {"cached_tokens": 0}}}),
        ]);
        let response = run(&body, 64).1.unwrap();
        assert_eq!(
            response.usage,
            Some(Usage {
                prompt_tokens: 12,
                completion_tokens: 3,
                total_tokens: 15
            })
        );
    }

    #[test]
    fn comments_crlf_other_fields_and_garbage_lines_are_skipped() {
        let body = ": keep-alive\r\n\r\nevent: message\r\nid: 7\r\nretry: 100\r\ngarbage without colon\r\n\
                    data:{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"}}]}\r\n\r\n\
                    data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\r\n\
                    data: [DONE]\r\n\r\ndata: this is after DONE and ignored\r\n";
        let (deltas, response) = run(body, 4);
        assert_eq!(deltas, ["ok"]);
        assert_eq!(response.unwrap().message.content.as_deref(), Some("ok"));
    }

    #[test]
    fn a_garbage_data_line_is_a_malformed_response() {
        let body = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"}}]}\n\ndata: {not json\n\n";
        let err = run(body, 64).1.unwrap_err();
        match err {
            LlmError::MalformedResponse { snippet, .. } => assert_eq!(snippet, "{not json"),
            other => panic!("expected MalformedResponse, got {other:?}"),
        }
    }

    #[test]
    fn an_error_event_in_the_stream_is_an_api_error() {
        let body =
            "data: {\"error\":{\"message\":\"model overloaded\",\"type\":\"server_error\"}}\n\n";
        let err = run(body, 64).1.unwrap_err();
        assert!(
            matches!(&err, LlmError::Api { message } if message == "model overloaded"),
            "{err:?}"
        );
    }

    #[test]
    fn a_cut_off_stream_is_an_error_but_a_missing_done_after_finish_is_not() {
        let cut = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"par\"}}]}\n\n";
        assert!(matches!(
            run(cut, 64).1,
            Err(LlmError::MalformedResponse { .. })
        ));
        assert!(matches!(
            run("", 64).1,
            Err(LlmError::MalformedResponse { .. })
        ));
        // [DONE] or usage alone: the server never answered.
        for empty in [
            "data: [DONE]\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":0,\"total_tokens\":1}}\n\ndata: [DONE]\n\n",
        ] {
            let error = run(empty, 64).1.unwrap_err();
            assert!(error.to_string().contains("without a choice"), "{error}");
        }
        let no_done = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}";
        assert_eq!(
            run(no_done, 64).1.unwrap().message.content.as_deref(),
            Some("ok")
        );
    }

    #[test]
    fn an_endless_line_is_refused() {
        let mut decoder = LineDecoder::default();
        let big = vec![b'x'; MAX_LINE_BYTES + 1];
        assert!(matches!(
            decoder.push(&big),
            Err(LlmError::MalformedResponse { .. })
        ));
    }

    #[test]
    fn a_message_past_the_response_limit_is_refused_whether_text_or_calls() {
        let piece = "x".repeat(1 << 20);
        let mut text = StreamAssembler::default();
        let mut calls = StreamAssembler::default();
        let text_chunk = json!({"choices": [{"index": 0, "delta": {"content": piece}}]});
        let text_line = format!("data: {text_chunk}");
        let mut refused = (None, None);
        for index in 0..(MAX_RESPONSE_BYTES >> 20) as u32 + 1 {
            if refused.0.is_none() {
                refused.0 = text.feed_line(&text_line).err();
            }
            if refused.1.is_none() {
                let line = format!("data: {}", tool_delta(index, Some("c"), Some("f"), &piece));
                refused.1 = calls.feed_line(&line).err();
            }
        }
        for error in [refused.0, refused.1] {
            let Some(LlmError::MalformedResponse { reason, .. }) = error else {
                panic!("accepted past the limit: {error:?}");
            };
            assert!(reason.contains("exceeds"), "{reason}");
        }
    }
}
