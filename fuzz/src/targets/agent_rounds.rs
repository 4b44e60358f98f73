//! The main agent and the skills' sub-agents driven by a model that calls
//! whatever the fuzz input says: functions offered or not, skills, tools a
//! skill has not unlocked yet, garbage names and arguments. The model is an
//! OpenAI-compatible server on loopback; every confirmation is rejected.
//! Whatever the model does:
//! - the main agent accepts only functions offered in that round;
//! - a skill's sub-agent or steps accept only tools its manifest declares;
//! - no write tool runs without a person's approval (none is given);
//! - the run ends with an answer or an error, never a panic.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use crate::{bundled_host, executor, llm_at, serve_on_loopback};
use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::routing::post;
use serde_json::{Value, json};
use skillhost::agent::llm::Message;
use skillhost::agent::{AgentEvent, CallOutcome, Caller, Decision};
use skillhost::embed::SkillHost;
use skillhost::tools::Access;

/// The model's choices for the current run: read a byte at a time; when
/// they run out, the model answers with text and the run ends.
#[derive(Default)]
struct Choices {
    bytes: Vec<u8>,
    next: usize,
}

impl Choices {
    fn take(&mut self) -> Option<u8> {
        let byte = self.bytes.get(self.next).copied();
        self.next += 1;
        byte
    }
}

/// Names the model may call besides those offered: every tool and skill the
/// host has, the agent's own function, and names nobody has.
const OTHER_NAMES: [&str; 8] = [
    "load_skill",
    "applyRefund",
    "cancel_order",
    "pay_order",
    "processRefund",
    "order_change",
    "",
    "no_such_tool",
];

/// Arguments the model may send, beside raw text from the input: some fit
/// the skills' parameters (so their sub-agents run), `load_skill`'s, or the
/// demo tools'.
fn arguments(choice: u8, offered: &[String], choices: &mut Choices) -> String {
    let skill = offered.get(usize::from(choice) % offered.len().max(1));
    match choice % 9 {
        0 => "{}".to_owned(),
        1 => json!({"orderId": "88231", "reason": "broken"}).to_string(),
        2 => json!({"orderId": "88240", "address": "1 Main St"}).to_string(),
        3 => json!({"order_id": "88240", "reason": "changed my mind"}).to_string(),
        4 => json!({"request": "cancel order 88240", "orderId": "88240"}).to_string(),
        5 => json!({"symptom": "it does not charge"}).to_string(),
        6 => json!({"name": skill.map_or("order_change", String::as_str)}).to_string(),
        7 => json!({"skill": skill.map_or("order_change", String::as_str)}).to_string(),
        _ => {
            let len = usize::from(choices.take().unwrap_or(0) % 32);
            (0..len)
                .map_while(|_| choices.take())
                .map(char::from)
                .collect()
        }
    }
}

/// One answer of the model to `request`.
fn answer(request: &Value, choices: &mut Choices) -> Value {
    let offered: Vec<String> = request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|tool| tool["function"]["name"].as_str().map(str::to_owned))
        .collect();
    let calls = match choices.take() {
        Some(shape) if shape % 4 != 0 => usize::from(shape % 3) + 1,
        _ => 0,
    };
    let mut tool_calls = Vec::new();
    for index in 0..calls {
        let (Some(name), Some(argument)) = (choices.take(), choices.take()) else {
            break;
        };
        let name = usize::from(name);
        let name = offered
            .get(name % (offered.len() + OTHER_NAMES.len()))
            .map_or(OTHER_NAMES[name % OTHER_NAMES.len()], String::as_str);
        tool_calls.push(json!({
            "id": format!("call_{index}"),
            "type": "function",
            "function": {"name": name, "arguments": arguments(argument, &offered, choices)},
        }));
    }
    let message = if tool_calls.is_empty() {
        json!({"role": "assistant", "content": "done"})
    } else {
        json!({"role": "assistant", "content": null, "tool_calls": tool_calls})
    };
    let finish = if tool_calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    json!({
        "id": "fuzz",
        "object": "chat.completion",
        "model": "fuzz",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
    })
}

async fn complete(
    State(choices): State<Arc<Mutex<Choices>>>,
    Json(request): Json<Value>,
) -> Json<Value> {
    Json(answer(&request, &mut choices.lock().expect("the choices")))
}

struct Agent {
    executor: tokio::runtime::Runtime,
    choices: Arc<Mutex<Choices>>,
    host: SkillHost,
    /// Each skill's declared tools.
    declared: HashMap<String, Vec<String>>,
}

static AGENT: LazyLock<Agent> = LazyLock::new(|| {
    let executor = executor();
    let choices = Arc::new(Mutex::new(Choices::default()));
    let router = Router::new()
        .route("/v1/chat/completions", post(complete))
        .with_state(choices.clone());
    let host = executor.block_on(async {
        let address = serve_on_loopback(router).await;
        bundled_host()
            .llm(llm_at(address))
            .keep_public(["queryOrder", "searchKnowledge", "getCurrentTime"])
            .build()
            .await
            .expect("the host")
    });
    let declared = host
        .snapshot()
        .skills()
        .map(|skill| {
            let manifest = skill.component.manifest();
            (manifest.name.to_string(), manifest.tools.clone())
        })
        .collect();
    Agent {
        executor,
        choices,
        host,
        declared,
    }
});

/// One input.
pub fn run(input: &[u8]) {
    let agent = &*AGENT;
    *agent.choices.lock().expect("the choices") = Choices {
        bytes: input.to_vec(),
        next: 0,
    };
    // Runs are tokio tasks: they start inside the executor.
    let _inside = agent.executor.enter();
    let run = agent
        .host
        .chat(vec![Message::user("my order 88231 is broken, refund it")])
        .expect("the agent has a model");
    let finished = agent
        .executor
        .block_on(run.finish_with(|_| Decision::Reject(Some("fuzz".into()))));
    let mut offered: HashMap<Caller, Vec<String>> = HashMap::new();
    for event in &finished.events {
        match event {
            AgentEvent::RoundStarted {
                caller, functions, ..
            } => {
                offered.insert(caller.clone(), functions.clone());
            }
            AgentEvent::ToolCalled {
                caller,
                tool,
                outcome,
                ..
            } => {
                if matches!(outcome, CallOutcome::Refused { .. }) {
                    continue;
                }
                // Accepted: it ran, failed in the tool, or asked for approval.
                match caller {
                    Caller::Main => assert!(
                        offered
                            .get(caller)
                            .is_some_and(|names| names.contains(tool)),
                        "the main agent accepted {tool}, not offered in its round"
                    ),
                    Caller::Skill(skill) => assert!(
                        agent.declared[skill.as_str()].contains(tool),
                        "{skill} accepted {tool}, which it does not declare"
                    ),
                }
                let access = agent.host.tools().get(tool).map(|tool| tool.spec().access);
                if access == Some(Access::Write) {
                    assert!(
                        !matches!(outcome, CallOutcome::Done { .. }),
                        "{tool} ran unapproved"
                    );
                }
            }
            AgentEvent::SkillStarted { skill, .. } => assert!(
                offered
                    .get(&Caller::Main)
                    .is_some_and(|names| names.iter().any(|name| name == skill.as_str())),
                "{skill} ran, not offered in the main agent's round"
            ),
            _ => {}
        }
    }
}
