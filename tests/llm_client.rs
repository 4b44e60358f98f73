//! The LLM client against the scripted OpenAI-compatible server.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use skillhost::agent::llm::{
    ChatRequest, ChatResponse, ConfigError, FinishReason, LlmClient, LlmConfig, LlmError, Message,
    ToolDefinition, Usage, UsageTotals,
};

use crate::support::scripted_llm::{ScriptedLlm, Step};

const KEY: &str = "sk-test";

/// A client for `llm` with fast backoff, so retry tests take milliseconds,
/// and an API key.
fn client(llm: &ScriptedLlm) -> LlmClient {
    LlmClient::new(LlmConfig {
        api_key: Some(KEY.into()),
        ..llm.config()
    })
    .unwrap()
}

fn tools() -> Vec<Arc<ToolDefinition>> {
    let order = json!({"type": "object", "properties": {"orderId": {"type": "string"}}, "required": ["orderId"]});
    vec![
        Arc::new(ToolDefinition::function(
            "queryOrder",
            "Looks up an order.",
            order.clone(),
        )),
        Arc::new(ToolDefinition::function(
            "applyRefund",
            "Refunds a delivered order.",
            order,
        )),
    ]
}

fn ask(text: &str) -> ChatRequest {
    ChatRequest::new(vec![
        Message::system("You are Bit Select's support agent."),
        Message::user(text),
    ])
    .with_tools(tools())
}

/// `(name, parsed arguments)` of each tool call.
fn calls(response: &ChatResponse) -> Vec<(String, Value)> {
    response
        .message
        .tool_calls
        .iter()
        .map(|call| (call.name().to_owned(), call.parse_arguments().unwrap()))
        .collect()
}

#[tokio::test]
async fn non_streaming_text() {
    let llm = ScriptedLlm::start(vec![Step::text("Order 88231 was delivered.")]).await;
    let response = client(&llm).chat(&ask("where is 88231?")).await.unwrap();

    assert_eq!(
        response.message.content.as_deref(),
        Some("Order 88231 was delivered.")
    );
    assert!(response.message.tool_calls.is_empty());
    assert_eq!(response.finish_reason, Some(FinishReason::Stop));
    assert_eq!(response.model.as_deref(), Some("test-model"));

    let request = &llm.requests()[0];
    assert_eq!(request.body["model"], "test-model");
    assert_eq!(request.body["stream"], false);
    assert!(request.body.get("stream_options").is_none());
    assert_eq!(request.tool_names(), ["queryOrder", "applyRefund"]);
    assert_eq!(
        request.messages(),
        [
            json!({"role": "system", "content": "You are Bit Select's support agent."}),
            json!({"role": "user", "content": "where is 88231?"}),
        ]
    );
    assert_eq!(llm.remaining(), 0);
}

#[tokio::test]
async fn streaming_text_forwards_each_delta() {
    let text = "Your S10 Pro was signed for by the recipient.";
    let llm = ScriptedLlm::start(vec![Step::text(text).fragments(5)]).await;
    let (sender, mut receiver) = mpsc::unbounded_channel();
    let request = ask("where is my vacuum?")
        .with_stream(true)
        .with_deltas(sender);

    let response = client(&llm).chat(&request).await.unwrap();
    drop(request);

    let mut deltas = Vec::new();
    while let Some(delta) = receiver.recv().await {
        deltas.push(delta);
    }
    assert_eq!(deltas.len(), 5, "{deltas:?}");
    assert_eq!(deltas.concat(), text);
    assert_eq!(response.message.content.as_deref(), Some(text));
    assert_eq!(response.finish_reason, Some(FinishReason::Stop));
    let body = &llm.requests()[0].body;
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
}

#[tokio::test]
async fn non_streaming_text_is_forwarded_as_one_delta() {
    let llm = ScriptedLlm::start(vec![Step::text("hello")]).await;
    let (sender, mut receiver) = mpsc::unbounded_channel();
    client(&llm)
        .chat(&ask("hi").with_deltas(sender))
        .await
        .unwrap();
    assert_eq!(receiver.recv().await.as_deref(), Some("hello"));
}

#[tokio::test]
async fn streamed_tool_call_arguments_arrive_in_fragments() {
    let llm = ScriptedLlm::start(vec![
        Step::tool_call("queryOrder", json!({"orderId": "88231"})).fragments(6),
    ])
    .await;
    let response = client(&llm)
        .chat(&ask("refund 88231").with_stream(true))
        .await
        .unwrap();

    assert_eq!(response.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(response.message.content, None);
    assert_eq!(
        calls(&response),
        [("queryOrder".to_owned(), json!({"orderId": "88231"}))]
    );
    assert_eq!(response.message.tool_calls[0].id, "call_1_0");
}

#[tokio::test]
async fn two_tool_calls_in_one_response_streamed_or_not() {
    for stream in [false, true] {
        let llm = ScriptedLlm::start(vec![
            Step::tool_calls([
                ("queryOrder", json!({"orderId": "88231"})),
                ("queryOrder", json!({"orderId": "99001"})),
            ])
            .fragments(3),
        ])
        .await;
        let response = client(&llm)
            .chat(&ask("status of 88231 and 99001?").with_stream(stream))
            .await
            .unwrap();
        assert_eq!(
            calls(&response),
            [
                ("queryOrder".to_owned(), json!({"orderId": "88231"})),
                ("queryOrder".to_owned(), json!({"orderId": "99001"})),
            ],
            "stream: {stream}"
        );
        let ids: Vec<&str> = response
            .message
            .tool_calls
            .iter()
            .map(|c| c.id.as_str())
            .collect();
        assert_eq!(ids, ["call_1_0", "call_1_1"], "stream: {stream}");
    }
}

#[tokio::test]
async fn rate_limited_then_success_honours_retry_after() {
    let llm = ScriptedLlm::start(vec![
        Step::error(429, "Rate limit reached").header("retry-after", "1"),
        Step::text("ok"),
    ])
    .await;
    let started = Instant::now();
    let response = client(&llm).chat(&ask("hi")).await.unwrap();

    assert_eq!(response.message.content.as_deref(), Some("ok"));
    assert_eq!(llm.requests().len(), 2);
    // The backoff is 1 ms, so only the honoured Retry-After explains a wait
    // this long (a lower bound: sleeps never end early).
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_retry_after_beyond_the_cap_is_shortened() {
    let llm = ScriptedLlm::start(vec![
        Step::error(503, "overloaded").header("retry-after", "3600"),
        Step::text("ok"),
    ])
    .await;
    let client = LlmClient::new(LlmConfig {
        max_retry_after: Duration::from_millis(20),
        ..client(&llm).config().clone()
    })
    .unwrap();
    let response = tokio::time::timeout(Duration::from_secs(30), client.chat(&ask("hi")))
        .await
        .expect("the capped wait, not an hour")
        .unwrap();
    assert_eq!(response.message.content.as_deref(), Some("ok"));
}

#[tokio::test]
async fn server_errors_on_every_attempt_exhaust_the_retries() {
    let llm = ScriptedLlm::start((0..4).map(|_| Step::error(500, "boom")).collect()).await;
    let client = client(&llm);
    assert_eq!(client.config().max_retries, 3);

    let err = client.chat(&ask("hi")).await.unwrap_err();
    match err {
        LlmError::RetriesExhausted { attempts: 4, last } => {
            assert!(
                matches!(*last, LlmError::Http { status: 500, ref message } if message == "boom"),
                "{last:?}"
            );
        }
        other => panic!("expected RetriesExhausted after 4 attempts, got {other:?}"),
    }
    assert_eq!(llm.requests().len(), 4);
    assert_eq!(client.usage(), UsageTotals::default());
}

#[tokio::test]
async fn a_bad_request_fails_at_once_with_the_servers_message() {
    let llm = ScriptedLlm::start(vec![
        Step::error(400, "Invalid schema for function 'queryOrder'"),
        Step::text("never served"),
    ])
    .await;
    let err = client(&llm).chat(&ask("hi")).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::Http { status: 400, message } if message == "Invalid schema for function 'queryOrder'"),
        "{err:?}"
    );
    assert!(err.to_string().contains("Invalid schema"), "{err}");
    assert_eq!(llm.requests().len(), 1);
    assert_eq!(llm.remaining(), 1);
}

#[tokio::test]
async fn malformed_bodies_are_malformed_responses() {
    let llm = ScriptedLlm::start(vec![
        Step::raw(200, "application/json", r#"{"choices": [{"message": "#),
        Step::raw(200, "text/event-stream", "data: {\"choices\": oops}\n\n"),
    ])
    .await;
    let client = client(&llm);
    for stream in [false, true] {
        let err = client
            .chat(&ask("hi").with_stream(stream))
            .await
            .unwrap_err();
        assert!(
            matches!(err, LlmError::MalformedResponse { .. }),
            "stream {stream}: {err:?}"
        );
    }
    // Malformed answers are not retried.
    assert_eq!(llm.requests().len(), 2);
}

#[tokio::test]
async fn arguments_that_are_not_json_are_kept_for_the_model_to_be_told() {
    let broken = r#"{"orderId": 88231,"#;
    for stream in [false, true] {
        let llm = ScriptedLlm::start(vec![
            Step::raw_tool_call("applyRefund", broken).fragments(2),
        ])
        .await;
        let response = client(&llm)
            .chat(&ask("refund 88231").with_stream(stream))
            .await
            .expect("bad arguments are not an error of the call");
        let call = &response.message.tool_calls[0];
        assert_eq!(call.name(), "applyRefund");
        assert_eq!(call.function.arguments, broken);
        let problem = call.parse_arguments().unwrap_err();
        assert!(
            problem.contains("applyRefund") && problem.contains("not valid JSON"),
            "{problem}"
        );
    }
}

#[tokio::test]
async fn usage_is_returned_per_call_and_summed_per_client() {
    let llm = ScriptedLlm::start(vec![
        Step::text("a").usage(100, 20),
        Step::text("b").usage(50, 5),
    ])
    .await;
    let client = client(&llm);

    let first = client.chat(&ask("one")).await.unwrap();
    let second = client
        .clone()
        .chat(&ask("two").with_stream(true))
        .await
        .unwrap();

    assert_eq!(
        first.usage,
        Some(Usage {
            prompt_tokens: 100,
            completion_tokens: 20,
            total_tokens: 120
        })
    );
    assert_eq!(second.usage.map(|u| u.total_tokens), Some(55));
    assert_eq!(
        client.usage(),
        UsageTotals {
            calls: 2,
            prompt_tokens: 150,
            completion_tokens: 25,
            total_tokens: 175
        }
    );
}

#[tokio::test]
async fn the_api_key_is_sent_as_a_bearer_token_and_only_when_set() {
    let llm = ScriptedLlm::start(vec![Step::text("a"), Step::text("b")]).await;
    client(&llm).chat(&ask("hi")).await.unwrap();
    LlmClient::new(LlmConfig::new(llm.base_url(), "m"))
        .unwrap()
        .chat(&ask("hi"))
        .await
        .unwrap();

    let requests = llm.requests();
    assert_eq!(requests[0].header("authorization"), Some("Bearer sk-test"));
    assert_eq!(requests[1].header("authorization"), None);
}

#[tokio::test]
async fn a_server_that_ignores_the_stream_flag_is_understood() {
    let llm = ScriptedLlm::start(vec![
        Step::text("json anyway").streamed(false),
        Step::text("sse anyway").streamed(true).fragments(2),
    ])
    .await;
    let client = client(&llm);
    let first = client.chat(&ask("hi").with_stream(true)).await.unwrap();
    let second = client.chat(&ask("hi").with_stream(false)).await.unwrap();
    assert_eq!(first.message.content.as_deref(), Some("json anyway"));
    assert_eq!(second.message.content.as_deref(), Some("sse anyway"));
}

#[tokio::test]
async fn a_scripted_step_can_decide_from_the_request() {
    let llm = ScriptedLlm::start(vec![Step::respond_with(|request| {
        let offered = request["tools"].as_array().map_or(0, Vec::len);
        Step::text(format!("{offered} tools offered"))
    })])
    .await;
    let response = client(&llm).chat(&ask("hi")).await.unwrap();
    assert_eq!(response.message.content.as_deref(), Some("2 tools offered"));
}

#[tokio::test]
async fn a_call_beyond_the_script_fails_loudly() {
    let llm = ScriptedLlm::start(vec![]).await;
    let client = LlmClient::new(LlmConfig {
        max_retries: 0,
        ..client(&llm).config().clone()
    })
    .unwrap();
    let err = client.chat(&ask("hi")).await.unwrap_err();
    assert!(err.to_string().contains("script exhausted"), "{err}");
}

#[tokio::test]
async fn a_slow_server_times_out_without_retrying() {
    // The server does not answer while the test runs.
    let (_held, gate) = oneshot::channel();
    let llm = ScriptedLlm::start(vec![Step::text("late").held_until(gate)]).await;
    let client = LlmClient::new(LlmConfig {
        request_timeout: Duration::from_secs(2),
        ..client(&llm).config().clone()
    })
    .unwrap();
    let err = client.chat(&ask("hi")).await.unwrap_err();
    // A failure that was retried ends in `RetriesExhausted`.
    assert!(matches!(err, LlmError::Timeout { .. }), "{err:?}");
    // The one attempt may time out before the server has recorded it.
    assert!(llm.requests().len() <= 1, "{:?}", llm.requests());
}

#[tokio::test]
async fn an_unreachable_server_is_retried_then_reported() {
    // A port that was free a moment ago: nothing listens on it.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let client = LlmClient::new(LlmConfig {
        max_retries: 1,
        backoff_base: Duration::from_millis(1),
        ..LlmConfig::new(format!("http://127.0.0.1:{port}/v1"), "m")
    })
    .unwrap();
    let err = client.chat(&ask("hi")).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::RetriesExhausted { attempts: 2, last } if matches!(**last, LlmError::Connect(_))),
        "{err:?}"
    );
    // The message says what failed, not where the model is: it may reach
    // the gateway's clients.
    let message = err.to_string();
    assert!(message.contains("Connection refused"), "{message}");
    assert!(!message.contains(&port.to_string()), "{message}");
}

#[tokio::test]
async fn a_connection_closed_before_the_answer_is_retried() {
    use tokio::io::AsyncReadExt;
    use tokio::net::{TcpListener, TcpStream};

    let llm = ScriptedLlm::start(vec![Step::text("Hello.")]).await;
    let upstream = llm
        .base_url()
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        // The first connection is closed once its request has arrived, as
        // a load balancer closes an idle kept-alive one; the next ones
        // reach the server.
        let (mut first, _) = listener.accept().await.unwrap();
        let mut request = vec![0; 64 << 10];
        let _ = first.read(&mut request).await;
        drop(first);
        loop {
            let (mut client, _) = listener.accept().await.unwrap();
            let upstream = upstream.clone();
            tokio::spawn(async move {
                let mut server = TcpStream::connect(upstream).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
            });
        }
    });
    let client = LlmClient::new(LlmConfig {
        backoff_base: Duration::from_millis(1),
        ..LlmConfig::new(format!("http://127.0.0.1:{port}/v1"), "m")
    })
    .unwrap();
    let response = client.chat(&ask("hi")).await.unwrap();
    assert_eq!(response.message.content.as_deref(), Some("Hello."));
    assert_eq!(llm.requests().len(), 1);
}

#[test]
fn no_model_is_a_typed_not_configured_state() {
    let err = LlmConfig::from_lookup(|_| None).unwrap_err();
    assert!(matches!(err, ConfigError::NotConfigured { .. }));
    let err = LlmError::from(err);
    assert!(err.to_string().contains("SKILLHOST_MODEL"), "{err}");
}
