//! Logs and spans: skill invocations, tool calls, agent rounds and LLM
//! calls as JSON lines with their fields, and write tools' arguments never
//! in clear.
//!
//! Each test runs its body on a current-thread runtime under a JSON
//! subscriber set as that thread's default (the JSON configuration of the
//! binary's `init_tracing`), so it captures what its own body logs and
//! nothing from the tests running beside it.

use std::io;
use std::process::Command;
use std::sync::{Arc, LazyLock, Mutex};

use serde_json::{Map, Value, json};
use tracing::Dispatch;
use tracing::subscriber::NoSubscriber;
use tracing_subscriber::fmt::format::FmtSpan;

use skillhost::agent::{Agent, AgentConfig, AgentError, AgentEvent, Decision, RunOptions};
use skillhost::embed::SkillHost;
use skillhost::gateway::{Gateway, GatewayConfig};
use skillhost::runtime::{InvokeError, Limit, Limits, RunOutcome, SkillComponent};
use skillhost::skills::signature::SignaturePolicy;
use skillhost::tools::demo::{DemoDb, article_003_tools};
use skillhost::trace_context::TraceContext;

use crate::agent_common::Shop;
use crate::agent_masking;
use crate::runtime::chatty_guest;
use crate::support::environment::host_settings;
use crate::support::fixtures::{DemoHost, fixture, repo_root, skill_file};
use crate::support::hand_written::{CALL_TOOL, HandWritten, data};
use crate::support::scripted_llm::{ScriptedLlm, Step};

/// A refund reason no log may contain: `applyRefund` is a write tool.
const SECRET_REASON: &str = "reason-that-must-stay-out-of-logs-4417";

/// What a subscriber wrote, shared with the writers it hands out.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The captured log: its text, and its lines as JSON.
struct Log {
    text: String,
    lines: Vec<Value>,
}

impl Log {
    /// Parses every line; panics on one that is not a JSON object.
    fn parse(text: String) -> Self {
        let lines = text
            .lines()
            .map(|line| {
                let value: Value = serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("a log line that is not JSON ({e}): {line}"));
                assert!(value.is_object(), "{line}");
                value
            })
            .collect();
        Self { text, lines }
    }

    /// The lines on which spans named `name` closed, in that order.
    fn close_lines(&self, name: &str) -> impl Iterator<Item = &Value> {
        self.lines.iter().filter(move |line| {
            line["fields"]["message"] == "close" && line["span"]["name"] == name
        })
    }

    /// The spans named `name` as they closed, with every field recorded,
    /// in the order they closed.
    fn closed(&self, name: &str) -> Vec<&Map<String, Value>> {
        self.close_lines(name)
            .map(|line| line["span"].as_object().expect("a span object"))
            .collect()
    }

    /// The line on which the call of `tool` closed.
    fn tool_call_closed(&self, tool: &str) -> &Value {
        self.close_lines("tool_call")
            .find(|line| line["span"]["tool"] == tool)
            .unwrap_or_else(|| panic!("no tool_call span of {tool}: {}", self.text))
    }

    /// The lines whose event fields include `fields`.
    fn events_with(&self, fields: &Value) -> Vec<&Value> {
        let wanted = fields.as_object().expect("fields as an object");
        self.lines
            .iter()
            .filter(|line| {
                wanted
                    .iter()
                    .all(|(key, value)| &line["fields"][key] == value)
            })
            .collect()
    }
}

/// A dispatcher that lives as long as the test process and enables nothing.
///
/// While only one dispatcher exists, tracing-core caches a callsite's
/// interest from the subscriber of whichever thread reaches it first: a
/// callsite first reached by a test running beside ours (no subscriber)
/// would stay disabled for ours too. With two, every live subscriber is
/// asked, and each event then goes to its own thread's.
static SECOND_DISPATCHER: LazyLock<Dispatch> = LazyLock::new(|| Dispatch::new(NoSubscriber::new()));

/// Runs `body` on a fresh current-thread runtime under a JSON subscriber
/// (debug and up from skillhost) and returns its output and the log.
fn capture<F: Future>(body: impl FnOnce() -> F) -> (F::Output, Log) {
    LazyLock::force(&SECOND_DISPATCHER);
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter("skillhost=debug")
        .with_span_events(FmtSpan::CLOSE)
        .with_writer(move || writer.clone())
        .json()
        .with_current_span(true)
        .with_span_list(true)
        .finish();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime");
    let output = {
        let _default = tracing::subscriber::set_default(subscriber);
        runtime.block_on(body())
    };
    let text = String::from_utf8(captured.0.lock().unwrap().clone()).expect("UTF-8 logs");
    (output, Log::parse(text))
}

/// processRefund through the runtime on the demo tools: a delivered order,
/// refunded with [`SECRET_REASON`].
fn logged_refund() -> (SkillComponent, Arc<DemoDb>, Log) {
    let host = DemoHost::new();
    let (skill, log) = capture(|| async {
        let skill = host.load(&skill_file("processRefund")).await;
        let input = json!({ "orderId": "88231", "reason": SECRET_REASON });
        let report = skill.run(&input, host.tools.clone()).await.unwrap();
        assert!(matches!(report.outcome, RunOutcome::Done(_)), "{report:?}");
        skill
    });
    (skill, host.db, log)
}

/// The names of `spans` (a line's `spans` list, outermost first).
fn span_names(spans: &Value) -> Vec<&str> {
    spans
        .as_array()
        .expect("a span list")
        .iter()
        .map(|span| span["name"].as_str().expect("a span name"))
        .collect()
}

#[test]
fn a_skill_invocation_logs_its_span_and_the_tool_calls_of_the_skill() {
    let (skill, _, log) = logged_refund();

    let invocations = log.closed("skill_invocation");
    assert_eq!(invocations.len(), 1, "{}", log.text);
    let invocation = invocations[0];
    assert_eq!(invocation["skill"], "processRefund");
    assert_eq!(invocation["version"], skill.manifest().version.to_string());
    assert_eq!(invocation["digest"], skill.digest());
    assert_eq!(invocation["outcome"], "done");
    assert!(
        invocation["duration_ms"].as_f64().unwrap() > 0.0,
        "{invocation:?}"
    );
    assert!(!invocation.contains_key("limit"), "no limit was hit");
    // Exported, nothing is marked as an error.
    assert!(!invocation.contains_key("otel.status_code"));

    let calls = log.closed("tool_call");
    let tools: Vec<_> = calls.iter().map(|call| &call["tool"]).collect();
    assert_eq!(tools, ["queryOrder", "applyRefund"]);
    for (call, access) in calls.iter().zip(["read", "write"]) {
        assert_eq!(call["caller"], "skill:processRefund", "{call:?}");
        assert_eq!(call["access"], access, "{call:?}");
        assert_eq!(call["outcome"], "ok", "{call:?}");
        assert_eq!(call["refused"], false, "{call:?}");
        assert!(call["latency_ms"].is_f64(), "{call:?}");
        assert!(!call.contains_key("otel.status_code"), "{call:?}");
    }
}

#[test]
fn write_tool_arguments_never_reach_the_log_and_read_tool_arguments_do_at_debug() {
    let (_, db, log) = logged_refund();
    // The reason did reach the write tool...
    let refunds = db.refunds_for("88231").unwrap();
    assert_eq!(refunds[0].reason, SECRET_REASON);
    // ...and nowhere in the log.
    assert!(!log.text.contains(SECRET_REASON), "{}", log.text);

    let arguments = |tool: &str| -> String {
        let events = log.events_with(&json!({ "message": "tool call arguments" }));
        let event = events
            .iter()
            .find(|line| line["span"]["tool"] == tool)
            .unwrap_or_else(|| panic!("no arguments logged for {tool}: {}", log.text));
        assert_eq!(event["level"], "DEBUG");
        event["fields"]["arguments"].as_str().unwrap().to_owned()
    };
    assert_eq!(arguments("queryOrder"), r#"{"orderId":"88231"}"#);
    let redacted = arguments("applyRefund");
    assert!(
        redacted.starts_with("<redacted: ")
            && redacted.contains("bytes; keys: ")
            && redacted.contains("reason"),
        "{redacted}"
    );
}

#[test]
fn json_lines_carry_the_fields_of_the_spans_they_happened_in() {
    let (skill, _, log) = logged_refund();
    let events = log.events_with(&json!({ "message": "tool call arguments" }));
    let inside_query = events
        .iter()
        .find(|line| line["span"]["tool"] == "queryOrder")
        .expect("the arguments of queryOrder");
    assert_eq!(inside_query["span"]["name"], "tool_call");
    assert_eq!(inside_query["span"]["caller"], "skill:processRefund");
    let spans = &inside_query["spans"];
    assert_eq!(span_names(spans), ["skill_invocation", "tool_call"]);
    assert_eq!(spans[0]["skill"], "processRefund");
    assert_eq!(spans[0]["digest"], skill.digest());
}

#[test]
fn a_call_to_an_undeclared_tool_is_logged_as_refused_and_never_dispatched() {
    let host = DemoHost::new();
    let ((), log) = capture(|| async {
        let skill = host.load(&fixture("undeclared-caller")).await;
        let report = skill.run(&json!({}), host.tools.clone()).await.unwrap();
        assert_eq!(report.tool_calls[0].tool, "applyRefund");
        assert!(report.tool_calls[0].error.is_some());
    });
    let refusals = log.events_with(&json!({ "refused": true }));
    assert_eq!(refusals.len(), 1, "{}", log.text);
    let refusal = &refusals[0];
    assert_eq!(refusal["level"], "WARN");
    assert_eq!(refusal["fields"]["tool"], "applyRefund");
    assert_eq!(refusal["fields"]["skill"], "undeclaredCaller");
    assert_eq!(refusal["fields"]["caller"], "skill:undeclaredCaller");
    assert_eq!(refusal["fields"]["outcome"], "not_permitted");
    assert_eq!(span_names(&refusal["spans"]), ["skill_invocation"]);
    // Refused before dispatch: no tool call span, arguments never logged.
    assert!(log.closed("tool_call").is_empty(), "{}", log.text);
    assert!(!log.text.contains("undeclared call"), "{}", log.text);
}

/// A skill declaring `queryOrder` (a read tool) whose steps call it with a
/// 512 KiB key the schema does not allow, starting with a line break and a
/// line of the guest's own.
fn forged_key_caller() -> Vec<u8> {
    const ARGUMENTS_AT: u32 = 1 << 20;
    const NAME_AT: u32 = 0x1f_0000;
    const RESULT_AT: u32 = 0x1f_0100;
    const KEY_FILL: u32 = 512 << 10;
    let opening = br#"{"orderId":"88231","\nINFO forged line"#;
    let fill_at = ARGUMENTS_AT + opening.len() as u32;
    let closing = br#"":1}"#;
    let length = opening.len() as u32 + KEY_FILL + closing.len() as u32;
    let steps = format!(
        r#"(func $steps
            (memory.fill (i32.const {fill_at}) (i32.const 0x78) (i32.const {KEY_FILL}))
            (call $call-tool (i32.const {NAME_AT}) (i32.const 10)
              (i32.const {ARGUMENTS_AT}) (i32.const {length}) (i32.const {RESULT_AT})))
          {}
          {}
          {}"#,
        data(ARGUMENTS_AT, opening),
        data(fill_at + KEY_FILL, closing),
        data(NAME_AT, b"queryOrder"),
    );
    HandWritten {
        name: "forgedKeyCaller",
        tools: &["queryOrder"],
        memory: "40",
        steps: &steps,
        ..CALL_TOOL
    }
    .build()
}

/// Regression: a schema violation quotes the guest's text (the unexpected
/// key), and a read tool's refusal logged it at warn whole and raw: a guest
/// could write a line of 1 MiB, and lines of its own, past the cut and the
/// escaping its log lines get. The invocation's record kept it whole too.
#[test]
fn a_refused_read_call_logs_the_guests_text_escaped_and_cut() {
    let host = DemoHost::new();
    let (report, log) = capture(|| async {
        let skill = SkillComponent::load(&host.runtime, forged_key_caller(), &host.tools)
            .await
            .unwrap();
        skill.run(&json!({}), host.tools.clone()).await.unwrap()
    });
    let recorded = report.tool_calls[0].error.as_deref().expect("refused");
    let refusals = log.events_with(&json!({ "message": "tool call refused" }));
    assert_eq!(refusals.len(), 1, "{}", log.text);
    assert_eq!(refusals[0]["fields"]["outcome"], "invalid_arguments");
    // Exported, the call's span is marked as an error.
    assert_eq!(log.closed("tool_call")[0]["otel.status_code"], "error");
    let logged = refusals[0]["fields"]["error"].as_str().unwrap();
    let arguments = log.events_with(&json!({ "message": "tool call arguments" }));
    let arguments = arguments[0]["fields"]["arguments"].as_str().unwrap();
    for text in [recorded, logged, arguments] {
        assert!(text.len() < 8 << 10, "{} bytes kept", text.len());
        assert!(text.contains("bytes cut"), "{text}");
        assert!(
            text.contains("\\nINFO forged line") && !text.contains('\n'),
            "{text}"
        );
    }
}

/// Output past the 64 KiB captured of a stream is dropped, and said so once.
#[test]
fn output_past_the_capture_is_dropped_with_one_notice() {
    let host = DemoHost::new();
    let (report, log) = capture(|| async {
        let skill = SkillComponent::load(&host.runtime, chatty_guest(), &host.tools)
            .await
            .unwrap();
        skill.run(&json!({}), host.tools.clone()).await.unwrap()
    });
    assert_eq!(report.outcome, RunOutcome::Done(json!({"ok": true})));
    let notices = log.events_with(&json!({ "message": "output truncated" }));
    assert_eq!(notices.len(), 1, "{}", log.text);
    assert_eq!(notices[0]["level"], "WARN");
    assert_eq!(notices[0]["fields"]["skill"], "chatty");
    assert_eq!(notices[0]["fields"]["stream"], "stdout");
    // 40 lines of 4 KiB written, 16 kept.
    assert_eq!(notices[0]["fields"]["kept_bytes"], 16 * 4096);
    assert_eq!(notices[0]["fields"]["dropped_bytes"], 24 * 4096);
}

#[test]
fn a_limit_hit_is_the_outcome_of_the_invocation_span_and_a_warning() {
    let host = DemoHost::new();
    let (error, log) = capture(|| async {
        let skill = host.load(&fixture("memory-bomb")).await;
        let limits = Limits {
            memory_bytes: 16 << 20,
            ..Limits::default()
        };
        skill
            .run_with_limits(&json!({}), host.tools.clone(), limits)
            .await
            .unwrap_err()
    });
    assert!(
        matches!(
            error,
            InvokeError::LimitExceeded {
                limit: Limit::Memory,
                ..
            }
        ),
        "{error}"
    );
    let invocations = log.closed("skill_invocation");
    assert_eq!(invocations.len(), 1, "{}", log.text);
    assert_eq!(invocations[0]["outcome"], "limit_exceeded");
    assert_eq!(invocations[0]["limit"], "memory");
    assert_eq!(invocations[0]["otel.status_code"], "error");
    let warnings = log.events_with(&json!({ "message": "skill invocation hit a limit" }));
    assert_eq!(warnings.len(), 1, "{}", log.text);
    assert_eq!(warnings[0]["level"], "WARN");
    assert_eq!(warnings[0]["span"]["skill"], invocations[0]["skill"]);
}

#[test]
fn agent_rounds_record_the_functions_offered_and_masked_and_their_calls() {
    let ((run_id, llm), log) = capture(|| async {
        let shop = agent_masking::shop().await;
        let llm = ScriptedLlm::start(vec![
            Step::tool_call("load_skill", json!({"skill": "order_change"})).usage(900, 20),
            Step::tool_call("query_order", json!({"order_id": "88239"})).usage(1000, 15),
            Step::text("Order 88239 can be cancelled. Shall I?").usage(1100, 12),
        ])
        .await;
        let run = shop
            .agent(&llm, agent_masking::config())
            .ask("cancel my order 88239")
            .unwrap();
        let run_id = run.id.to_string();
        run.finish_with(|_| Decision::Leave).await.result.unwrap();
        (run_id, llm)
    });

    // Round 1 masks all six unlock tools; loading order_change unlocks two.
    let rounds: Vec<_> = log
        .closed("agent_round")
        .iter()
        .map(|round| {
            assert_eq!(round["caller"], "agent");
            (
                round["round"].clone(),
                round["functions"].clone(),
                round["masked"].clone(),
            )
        })
        .collect();
    let request_sizes: Vec<_> = llm
        .requests()
        .iter()
        .map(|r| r.tool_names().len())
        .collect();
    assert_eq!(request_sizes, [11, 13, 13]);
    assert_eq!(
        rounds,
        [
            (json!(1), json!(11), json!(6)),
            (json!(2), json!(13), json!(4)),
            (json!(3), json!(13), json!(4)),
        ]
    );

    let llm_calls = log.closed("llm_call");
    let prompt_tokens: Vec<_> = llm_calls
        .iter()
        .map(|call| &call["prompt_tokens"])
        .collect();
    assert_eq!(prompt_tokens, [900, 1000, 1100]);
    for call in &llm_calls {
        assert_eq!(call["model"], "test-model");
        assert_eq!(call["outcome"], "ok");
        assert!(call["completion_tokens"].is_u64() && call["latency_ms"].is_u64());
    }

    // The agent's own call, inside its round.
    let calls = log.closed("tool_call");
    assert_eq!(calls.len(), 1, "load_skill is not a tool: {calls:?}");
    assert_eq!(calls[0]["tool"], "query_order");
    assert_eq!(calls[0]["caller"], "agent");
    assert_eq!(calls[0]["outcome"], "ok");
    // Inside its round, inside the run.
    let close = log.tool_call_closed("query_order");
    assert_eq!(span_names(&close["spans"]), ["run", "agent_round"]);
    assert_eq!(close["spans"][0]["run_id"], run_id.as_str());
    assert_eq!(close["spans"][1]["round"], 2);
}

#[test]
fn a_confirmed_write_inside_a_skill_is_logged_with_its_confirmation_and_without_its_arguments() {
    let (refunds, log) = capture(|| async {
        let shop = Shop::new(article_003_tools, &["processRefund", "inquireOrderStatus"]).await;
        let llm = ScriptedLlm::start(vec![
            Step::tool_call(
                "processRefund",
                json!({"orderId": "88231", "reason": SECRET_REASON}),
            ),
            Step::text("Refunded."),
        ])
        .await;
        let agent = shop.agent(&llm, AgentConfig::default());
        let run = agent.ask("refund 88231").unwrap();
        // Approved on behalf of someone, as the gateway answers with a key.
        let confirmations = agent.confirmations().clone();
        run.finish_with(|pending| {
            confirmations
                .answer(
                    pending.id.as_str(),
                    Decision::Approve,
                    Some("support-desk".into()),
                )
                .unwrap();
            Decision::Leave
        })
        .await
        .result
        .unwrap();
        shop.db.refunds_for("88231").unwrap()
    });
    assert_eq!(refunds[0].reason, SECRET_REASON);
    assert!(!log.text.contains(SECRET_REASON), "{}", log.text);

    let close = log.tool_call_closed("applyRefund");
    let call = &close["span"];
    assert_eq!(call["caller"], "skill:processRefund");
    assert_eq!(call["confirmation"], "approved");
    assert_eq!(call["confirmed_by"], "support-desk");
    assert_eq!(call["outcome"], "ok");
    // The write waited and ran between two attempts of the steps, outside
    // the sandbox: the first ended suspended at it, the second replayed the
    // calls before it and finished. A close line lists the spans it closed
    // inside.
    assert_eq!(span_names(&close["spans"]), ["run", "agent_round"]);
    let attempts: Vec<_> = log
        .closed("skill_invocation")
        .iter()
        .map(|attempt| attempt["outcome"].clone())
        .collect();
    assert_eq!(attempts, ["suspended", "done"]);
}

/// A run's lines sit in its `run` span, which names whom the run acts for
/// and the trace it is part of, inside the span it was started in.
#[test]
fn a_runs_logs_carry_the_span_it_was_started_in() {
    let (run_id, log) = capture(|| async {
        let shop = Shop::new(article_003_tools, &["inquireOrderStatus"]).await;
        let agent = Agent::builder(shop.skills.clone()).build().unwrap();
        // An embedder's request span (its target passes the capture's
        // filter); the run is a task of its own, started inside it.
        let request = tracing::info_span!(target: "skillhost::embedder", "request", request_id = 7);
        let run = request.in_scope(|| {
            agent
                .start_skill_with(
                    "inquireOrderStatus",
                    json!({"orderId": "88231"}),
                    RunOptions::new().on_behalf_of("support-desk").trace(
                        TraceContext::parse(&format!("00-{TRACE}-00f067aa0ba902b7-01"), None)
                            .unwrap(),
                    ),
                )
                .unwrap()
        });
        let run_id = run.id.to_string();
        run.result().await.unwrap();
        run_id
    });
    let close = log.tool_call_closed("queryOrder");
    let spans = &close["spans"];
    assert_eq!(span_names(spans)[..2], ["request", "run"], "{close:#}");
    assert_eq!(spans[0]["request_id"], 7);
    assert_eq!(spans[1]["run_id"], run_id.as_str());
    assert_eq!(spans[1]["requested_by"], "support-desk");
    assert_eq!(spans[1]["trace_id"], TRACE);
    // The run's span closes saying how it ended and how long it took.
    let runs = log.closed("run");
    assert_eq!(runs.len(), 1, "{}", log.text);
    assert_eq!(runs[0]["outcome"], "ok");
    assert!(
        runs[0]["duration_ms"].as_f64().unwrap() > 0.0,
        "{:?}",
        runs[0]
    );
}

/// Each gateway request has an id, the one its `X-Request-Id` gives or a
/// fresh one, answered in the same header: the lines of the run it starts
/// sit in its `request` span, so a client's report of a response finds its
/// log lines; with a `traceparent`, the span has its trace id too. A
/// malformed id is not taken.
#[test]
fn a_gateway_requests_id_comes_back_and_its_runs_log_under_it() {
    let (answered, log) = capture(|| async {
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(
            skill_file("inquireOrderStatus"),
            dir.path().join("inquireOrderStatus.wasm"),
        )
        .unwrap();
        let db = Arc::new(DemoDb::in_memory().unwrap());
        let host = SkillHost::builder(dir.path(), SignaturePolicy::AllowUnsigned)
            .register_tools(|tools| {
                article_003_tools(db)
                    .into_iter()
                    .try_for_each(|tool| tools.register(tool))
            })
            .build()
            .await
            .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let router = Gateway::new(host, GatewayConfig::default()).router();
        tokio::spawn(async move { axum::serve(listener, router).await });
        let http = reqwest::Client::new();
        let mut answered = Vec::new();
        for given in [Some("lb-7f3a/2"), None, Some(&*"x".repeat(129))] {
            let mut request = http
                .post(format!("{base}/v1/skills/inquireOrderStatus/invoke"))
                .json(&json!({"orderId": "88231"}));
            if let Some(given) = given {
                request = request
                    .header("x-request-id", given)
                    .header("traceparent", format!("00-{TRACE}-00f067aa0ba902b7-01"));
            }
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 200);
            answered.push(
                response.headers()["x-request-id"]
                    .to_str()
                    .unwrap()
                    .to_owned(),
            );
        }
        answered
    });
    assert_eq!(answered[0], "lb-7f3a/2");
    for made in &answered[1..] {
        assert!(made.starts_with("req_") && made.len() == 36, "{made}");
    }
    assert_ne!(answered[1], answered[2]);
    let calls: Vec<&Value> = log.close_lines("tool_call").collect();
    assert_eq!(calls.len(), 6, "two a request: {}", log.text);
    for (request, calls) in answered.iter().zip(calls.chunks(2)) {
        for call in calls {
            let spans = &call["spans"];
            assert_eq!(span_names(spans)[..2], ["request", "run"], "{call:#}");
            assert_eq!(spans[0]["request_id"], request.as_str());
        }
    }
    let traced = |calls: &[&Value]| calls[0]["spans"][0].get("trace_id").cloned();
    assert_eq!(traced(&calls[..2]), Some(json!(TRACE)));
    assert_eq!(traced(&calls[2..4]), None, "no traceparent, no trace id");
}

/// A W3C trace id, as a `traceparent` carries it.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

/// A run stopped while it waits for a confirmation closes its span as
/// `aborted`; one that fails names its error's kind.
#[test]
fn a_run_span_says_how_a_run_ended_when_it_did_not_answer() {
    let ((), log) = capture(|| async {
        let shop = Shop::new(article_003_tools, &["processRefund"]).await;
        let agent = Agent::builder(shop.skills.clone()).build().unwrap();
        let mut run = agent
            .start_skill(
                "processRefund",
                json!({"orderId": "88231", "reason": "broken"}),
            )
            .unwrap();
        while !matches!(
            run.events.recv().await,
            Some(AgentEvent::ConfirmationPending(_))
        ) {}
        run.abort();
        assert!(matches!(run.result().await, Err(AgentError::Aborted(_))));
        // The LLM server refuses the request: no retry helps.
        let llm = ScriptedLlm::start(vec![Step::error(400, "unsupported model")]).await;
        let failed = shop
            .agent(&llm, AgentConfig::default())
            .ask("where is my order?");
        let error = failed.unwrap().result().await;
        assert!(matches!(error, Err(AgentError::Llm { .. })), "{error:?}");
    });
    let outcomes: Vec<_> = log
        .closed("run")
        .iter()
        .map(|run| run["outcome"].clone())
        .collect();
    assert_eq!(outcomes, ["aborted", "llm"], "{}", log.text);
}

/// `skillhost <args> run processRefund --yes` on the bundled skills with a
/// fresh database; the machine's own settings ([`host_settings`]) are
/// cleared, then `env` set.
fn run_refund(args: &[&str], env: &[(&str, &str)]) -> (String, String) {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    let input = json!({ "orderId": "88231", "reason": SECRET_REASON }).to_string();
    let mut command = Command::new(env!("CARGO_BIN_EXE_skillhost"));
    command
        .args(args)
        .args(["run", "processRefund", "--yes", "--input", &input, "--db"])
        .arg(dir.join("shop.db"))
        .arg("--skills")
        .arg(repo_root().join("skills"))
        .arg("--trust")
        .arg(repo_root().join("keys/trusted"))
        .current_dir(dir);
    for name in host_settings() {
        command.env_remove(name);
    }
    command.envs(env.iter().copied());
    let output = command.output().expect("running skillhost");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    (stdout, stderr)
}

/// How the lines `run` shows on stderr for the person approving a write
/// begin (host/src/cli/trace.rs, host/src/cli/agent.rs), each with whether
/// it shows the write's arguments, which that person approves.
const RUN_SHOWS: [(&str, bool); 7] = [
    ("      skill processRefund called queryOrder(", false),
    // The confirmation asked for, and later its resolution.
    ("      confirmation cf_", false),
    ("          arguments: ", true),
    ("          summary:   ", true),
    ("          expires:   ", false),
    ("      approved (--yes)", false),
    // The write, once approved.
    ("      skill processRefund called applyRefund(", true),
];

#[test]
fn the_binary_writes_json_log_lines_when_asked_by_flag_or_environment() {
    let by_flag = run_refund(&["--log-format", "json", "-v"], &[]);
    let by_env = run_refund(
        &[],
        &[("SKILLHOST_LOG_FORMAT", "json"), ("SKILLHOST_LOG", "info")],
    );
    for (stdout, stderr) in [by_flag, by_env] {
        let result: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(result["refunded"], true, "{stdout}");
        // `run` shows the calls and the approval as text, for the person
        // approving; every other line is a log line, in JSON. The write's
        // arguments are shown to that person, and nowhere else.
        let mut log = String::new();
        for line in stderr.lines() {
            let shows_arguments = if line.starts_with('{') {
                log.push_str(line);
                log.push('\n');
                false
            } else {
                let (_, shows_arguments) = RUN_SHOWS
                    .iter()
                    .find(|(start, _)| line.starts_with(start))
                    .unwrap_or_else(|| {
                        panic!("neither a JSON log line nor `run`'s own: {line:?}\n{stderr}")
                    });
                *shows_arguments
            };
            assert!(
                shows_arguments || !line.contains(SECRET_REASON),
                "the write's argument is shown in {line:?}\n{stderr}"
            );
        }
        // The person approving sees what they approve.
        let summary = format!("summary:   applyRefund: orderId '88231', reason '{SECRET_REASON}'");
        assert!(stderr.contains(&summary), "{stderr}");
        let log = Log::parse(log);
        // The steps stop at the write, which is approved, then run again.
        let attempts: Vec<_> = log
            .closed("skill_invocation")
            .iter()
            .map(|invocation| invocation["outcome"].clone())
            .collect();
        assert_eq!(attempts, ["suspended", "done"], "{stderr}");
        let tools: Vec<_> = log
            .closed("tool_call")
            .iter()
            .map(|call| call["tool"].clone())
            .collect();
        assert_eq!(tools, ["queryOrder", "applyRefund"]);
        assert!(!log.text.contains(SECRET_REASON), "{stderr}");
    }
}
