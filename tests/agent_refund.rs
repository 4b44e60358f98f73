//! Article 003: skills as functions run by the scoped sub-agent executor,
//! with progressive disclosure, and confirmations of write tools.
//!
//! Setup: the article's five tools and its two skills, `processRefund` and
//! `inquireOrderStatus`; keep-public `queryOrder`, `searchKnowledge`,
//! `getCurrentTime`, so `applyRefund` and `queryLogistics` are absorbed.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use skillhost::agent::catalog::DisclosureConfig;
use skillhost::agent::{
    Agent, AgentConfig, AgentEvent, CallOutcome, Caller, ConfirmationPolicy, Decision, Declined,
    Resolution, RunId, RunOptions, SkillPath,
};
use skillhost::tools::demo::{article_000_tools, article_003_tools};
use skillhost::tools::{Access, Tool, ToolContext, ToolError, ToolSpec};

use crate::agent_common::{
    REFUND_REQUEST, Shop, approve_the_write, ask_deciding, calls_of, confirmations, executed,
    refund_call, refund_input, refusal, resolutions, rounds_of, skill, skill_outcomes, tool_result,
    tools_called, until_confirmation,
};
use crate::support::fixtures::{fixture, skill_file};
use crate::support::scripted_llm::{ScriptedLlm, Step};

async fn shop() -> Shop {
    Shop::new(article_003_tools, &["processRefund", "inquireOrderStatus"]).await
}

/// Article 003's disclosure: skills as functions, three tools kept public.
fn config() -> AgentConfig {
    AgentConfig {
        disclosure: DisclosureConfig {
            keep_public: ["queryOrder", "searchKnowledge", "getCurrentTime"]
                .map(String::from)
                .into(),
            ..DisclosureConfig::default()
        },
        ..AgentConfig::default()
    }
}

/// The shop, a model scripted with `steps`, and an agent on both with `config`.
async fn shop_and_agent(steps: Vec<Step>, config: AgentConfig) -> (Shop, ScriptedLlm, Agent) {
    let shop = shop().await;
    let llm = ScriptedLlm::start(steps).await;
    let agent = shop.agent(&llm, config);
    (shop, llm, agent)
}

fn sorted(mut names: Vec<String>) -> Vec<String> {
    names.sort();
    names
}

#[tokio::test]
async fn refund_with_steps_takes_two_main_rounds_and_waits_for_approval_inside_the_skill() {
    let (shop, llm, agent) = shop_and_agent(
        vec![
            refund_call(),
            Step::text(
                "Your refund RF20260629001 for the S10 Pro is on its way (1-3 business days).",
            ),
        ],
        config(),
    )
    .await;
    let processing = Caller::Skill(skill("processRefund"));
    let mut run = agent.ask(REFUND_REQUEST).unwrap();
    let mut events = Vec::new();
    while let Some(event) = run.events.recv().await {
        if let AgentEvent::ConfirmationPending(pending) = &event {
            // The steps are suspended at applyRefund; nothing is written yet.
            assert_eq!(pending.caller, processing);
            assert_eq!(pending.tool, "applyRefund");
            assert_eq!(pending.arguments, refund_input());
            assert_eq!(
                pending.summary,
                "applyRefund: orderId '88231', reason 'the robot vacuum is broken'"
            );
            assert!(shop.db.refunds_for("88231").unwrap().is_empty());
            let approved = agent.confirmations().approve(pending.id.as_str()).unwrap();
            assert_eq!(approved.arguments, pending.arguments);
        }
        events.push(event);
    }
    let output = run.result().await.unwrap();

    // 2 main rounds, 2 LLM calls: the steps need none.
    let requests = llm.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(output.rounds, 2);
    assert_eq!(output.stats.llm_calls, 2);
    // Progressive disclosure: 5 functions, applyRefund and queryLogistics absorbed.
    assert_eq!(
        sorted(requests[0].tool_names()),
        [
            "getCurrentTime",
            "inquireOrderStatus",
            "processRefund",
            "queryOrder",
            "searchKnowledge"
        ]
    );
    assert_eq!(
        rounds_of(&events, &Caller::Main),
        [requests[0].tool_names(), requests[1].tool_names()]
    );
    // The skill ran its steps in its scope: queryOrder then applyRefund.
    assert!(events.iter().any(|event| matches!(
        event,
        AgentEvent::SkillStarted { skill: name, path: SkillPath::Steps, .. } if name.as_str() == "processRefund"
    )));
    assert_eq!(
        tools_called(&events, &processing),
        ["queryOrder", "applyRefund"]
    );
    assert_eq!(
        shop.skills.get("processRefund").unwrap().manifest().tools,
        ["queryOrder", "applyRefund"]
    );
    assert_eq!(resolutions(&events), [Resolution::Approved { by: None }]);
    // The refund is written.
    let refunds = shop.db.refunds_for("88231").unwrap();
    assert_eq!(refunds.len(), 1);
    assert_eq!(refunds[0].refund_id, "RF20260629001");
    // The main agent saw one tool message: the skill's final result.
    let roles: Vec<_> = requests[1]
        .messages()
        .iter()
        .map(|message| message["role"].clone())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool"]);
    let result: Value =
        serde_json::from_str(&tool_result(requests[1].messages(), "call_1_0")).unwrap();
    assert_eq!(result["refunded"], true);
    assert_eq!(result["refundId"], "RF20260629001");
    assert!(
        calls_of(&events, &Caller::Main).is_empty(),
        "the skill call is reported as a skill run"
    );
    assert!(matches!(events.last(), Some(AgentEvent::Answer { text }) if *text == output.answer));
}

#[tokio::test]
async fn refund_through_the_sub_agent_takes_five_llm_calls_instead_of_two() {
    let (shop, llm, agent) = shop_and_agent(
        vec![
        refund_call(),
        Step::tool_call("queryOrder", json!({"orderId": "88231"}))
            .streamed(true)
            .fragments(3),
        Step::tool_call(
            "applyRefund",
            refund_input(),
        )
        .streamed(true)
        .fragments(4),
        Step::text(
            "Refund RF20260629001 submitted for the Bit S10 Pro robot vacuum; 1-3 business days.",
        )
        .streamed(true)
        .fragments(5),
        Step::text("Your refund RF20260629001 is on its way."),
        ],
        // Forced down the LLM-driven path; this test approves writes by configuration.
        AgentConfig {
            use_steps: false,
            confirmation: ConfirmationPolicy::default().auto_approve("applyRefund"),
            ..config()
        },
    )
    .await;
    let finished = ask_deciding(&agent, REFUND_REQUEST, Decision::Leave).await;
    let output = finished.result.unwrap();

    // LLM calls per refund: 2 with steps (above), 5 without.
    assert_eq!(output.stats.llm_calls, 5);
    assert_eq!(output.rounds, 2);
    let requests = llm.requests();
    assert_eq!(requests.len(), 5);
    let processing = Caller::Skill(skill("processRefund"));
    // The sub-agent's scope: exactly the skill's tools, its instructions, its input.
    let scope = rounds_of(&finished.events, &processing);
    assert_eq!(
        scope,
        vec![vec!["queryOrder".to_owned(), "applyRefund".to_owned()]; 3]
    );
    assert_eq!(requests[1].tool_names(), ["queryOrder", "applyRefund"]);
    let sub_messages = requests[1].messages();
    let instructions = shop
        .skills
        .get("processRefund")
        .unwrap()
        .instructions()
        .to_owned();
    assert_eq!(
        sub_messages[0],
        json!({"role": "system", "content": instructions})
    );
    assert_eq!(sub_messages[1]["role"], "user");
    let input: Value = serde_json::from_str(sub_messages[1]["content"].as_str().unwrap()).unwrap();
    assert_eq!(input, refund_input());
    assert!(finished.events.iter().any(|event| matches!(
        event,
        AgentEvent::SkillStarted {
            path: SkillPath::Llm,
            ..
        }
    )));
    assert_eq!(
        tools_called(&finished.events, &processing),
        ["queryOrder", "applyRefund"]
    );
    assert!(confirmations(&finished.events).is_empty(), "auto-approved");
    assert_eq!(shop.db.refunds_for("88231").unwrap().len(), 1);
    // The main agent's second round sees the sub-agent's final text only.
    assert_eq!(
        tool_result(requests[4].messages(), "call_1_0"),
        "Refund RF20260629001 submitted for the Bit S10 Pro robot vacuum; 1-3 business days."
    );
    assert_eq!(requests[4].messages().len(), 4);
}

#[tokio::test]
async fn order_inquiry_runs_its_steps_without_confirmation() {
    let (_shop, llm, agent) = shop_and_agent(
        vec![
            Step::tool_call("inquireOrderStatus", json!({"orderId": "88231"})),
            Step::text(
                "Order 88231 (S10 Pro) was delivered: SF1234567890, signed for by the recipient.",
            ),
        ],
        config(),
    )
    .await;
    let finished = agent
        .ask("where is my order 88231?")
        .unwrap()
        .finish_with(|pending| panic!("reads need no approval: {pending:?}"))
        .await;
    let output = finished.result.unwrap();
    assert_eq!(output.rounds, 2);
    assert_eq!(llm.requests().len(), 2);
    let inquiring = Caller::Skill(skill("inquireOrderStatus"));
    assert_eq!(
        tools_called(&finished.events, &inquiring),
        ["queryOrder", "queryLogistics"]
    );
    let result = tool_result(llm.requests()[1].messages(), "call_1_0");
    assert!(result.contains("SF1234567890"), "{result}");
    assert!(matches!(
        skill_outcomes(&finished.events).first(),
        Some(CallOutcome::Done { .. })
    ));
}

#[tokio::test]
async fn an_absorbed_tool_is_refused_and_never_executed() {
    let (shop, _llm, agent) = shop_and_agent(
        vec![
            Step::tool_call(
                "applyRefund",
                json!({"orderId": "88231", "reason": "broken"}),
            ),
            Step::text("Let me use the refund procedure."),
        ],
        config(),
    )
    .await;
    let finished = ask_deciding(&agent, REFUND_REQUEST, Decision::Approve).await;
    finished.result.unwrap();
    let calls = calls_of(&finished.events, &Caller::Main);
    assert_eq!(calls.len(), 1);
    let reason = refusal(&calls[0].2);
    assert!(reason.contains("call the skill instead"), "{reason}");
    assert!(confirmations(&finished.events).is_empty());
    assert!(shop.db.refunds_for("88231").unwrap().is_empty());
}

#[tokio::test]
async fn a_sub_agent_call_outside_the_skill_scope_is_refused() {
    let (shop, llm, agent) = shop_and_agent(
        vec![
            Step::tool_call("inquireOrderStatus", json!({"orderId": "88231"})),
            // The sub-agent reaches for a write it does not declare.
            Step::tool_call(
                "applyRefund",
                json!({"orderId": "88231", "reason": "broken"}),
            ),
            Step::text("Order 88231 is delivered; I cannot refund it from here."),
            Step::text("Order 88231 was delivered."),
        ],
        AgentConfig {
            use_steps: false,
            ..config()
        },
    )
    .await;
    let finished = ask_deciding(&agent, "where is 88231?", Decision::Approve).await;
    finished.result.unwrap();
    let inquiring = Caller::Skill(skill("inquireOrderStatus"));
    assert_eq!(
        llm.requests()[1].tool_names(),
        ["queryOrder", "queryLogistics"]
    );
    let calls = calls_of(&finished.events, &inquiring);
    assert_eq!(calls.len(), 1);
    let reason = refusal(&calls[0].2);
    assert!(
        reason.contains("not available to skill inquireOrderStatus")
            && reason.contains("queryOrder, queryLogistics"),
        "{reason}"
    );
    assert!(tool_result(llm.requests()[2].messages(), "call_2_0").contains("not available"));
    assert!(
        confirmations(&finished.events).is_empty(),
        "never reached execution"
    );
    assert!(shop.db.refunds_for("88231").unwrap().is_empty());
}

#[tokio::test]
async fn a_rejection_inside_the_skill_steps_is_reported_and_writes_nothing() {
    let (shop, llm, agent) = shop_and_agent(
        vec![
            refund_call(),
            Step::text("The refund was not submitted, as you declined it."),
        ],
        config(),
    )
    .await;
    let finished = ask_deciding(&agent, REFUND_REQUEST, Decision::Reject(None)).await;
    finished.result.unwrap();
    assert_eq!(
        resolutions(&finished.events),
        [Resolution::Declined(Declined::Rejected {
            reason: None,
            by: None
        })]
    );
    // The guest got a `declined` tool error and said so in its result; the
    // host says so after it in its own words.
    let content = tool_result(llm.requests()[1].messages(), "call_1_0");
    let (result, note) = content.split_once(HOST_NOTE).expect(&content);
    let result: Value = serde_json::from_str(result.trim_end()).unwrap();
    assert_eq!(result["refunded"], false);
    assert!(
        result["message"].as_str().unwrap().contains("declined"),
        "{result}"
    );
    assert!(
        note.starts_with("the user declined `applyRefund`; it was not executed"),
        "{note}"
    );
    assert!(shop.db.refunds_for("88231").unwrap().is_empty());
}

/// How the host's note on calls declined inside a skill starts.
const HOST_NOTE: &str = "[from the host: while this skill ran, ";

/// A skill's sub-agent that tells the main model the refund went through
/// after the person declined it: the main model reads the host's note too.
#[tokio::test]
async fn what_a_person_declined_inside_a_skill_reaches_the_main_model_whatever_the_skill_says() {
    let (shop, llm, agent) = shop_and_agent(
        vec![
            refund_call(),
            Step::tool_call("applyRefund", refund_input()),
            Step::text("Refund RF20260629001 submitted; it arrives in 1-3 business days."),
            Step::text("Your refund was not submitted, as you declined it."),
        ],
        AgentConfig {
            use_steps: false,
            ..config()
        },
    )
    .await;
    let decision = Decision::Reject(Some("I will keep it".into()));
    let finished = ask_deciding(&agent, REFUND_REQUEST, decision).await;
    finished.result.unwrap();
    let content = tool_result(llm.requests()[3].messages(), "call_1_0");
    let (said, note) = content.split_once(HOST_NOTE).expect(&content);
    assert!(said.starts_with("Refund RF20260629001 submitted"), "{said}");
    assert!(
        note.starts_with(
            "the user declined `applyRefund` (their reason: I will keep it); it was not executed"
        ),
        "{note}"
    );
    assert!(shop.db.refunds_for("88231").unwrap().is_empty());
}

#[tokio::test]
async fn an_unanswered_confirmation_expires_as_a_rejection() {
    // applyRefund offered directly (no disclosure), with a short expiry.
    let mut config = config();
    config.disclosure.progressive_disclosure = false;
    config.confirmation.expiry = Duration::from_millis(200);
    let (shop, llm, agent) = shop_and_agent(
        vec![
            Step::tool_call(
                "applyRefund",
                json!({"orderId": "88231", "reason": "broken"}),
            ),
            Step::respond_with(|body| {
                let content =
                    body["messages"].as_array().unwrap().last().unwrap()["content"].clone();
                assert!(content.as_str().unwrap().contains("expired"), "{content}");
                Step::text("The refund request timed out; nothing was done.")
            }),
        ],
        config,
    )
    .await;
    let finished = ask_deciding(&agent, REFUND_REQUEST, Decision::Leave).await;
    finished.result.unwrap();
    let pending = confirmations(&finished.events);
    assert_eq!(pending.len(), 1);
    assert_eq!(
        resolutions(&finished.events),
        [Resolution::Declined(Declined::Expired {
            after: Duration::from_millis(200)
        })]
    );
    assert!(agent.confirmations().pending().is_empty());
    assert!(
        agent
            .confirmations()
            .approve(pending[0].id.as_str())
            .is_err(),
        "too late"
    );
    assert!(shop.db.refunds_for("88231").unwrap().is_empty());
    assert_eq!(llm.remaining(), 0);
}

#[tokio::test]
async fn malformed_and_unknown_calls_are_reported_back_to_the_model() {
    let (_shop, llm, agent) = shop_and_agent(
        vec![
            Step::raw_tool_call("queryOrder", r#"{"orderId": "88231""#),
            Step::tool_calls([
                ("queryOrder", json!({"orderId": 88231})),
                ("deleteEverything", json!({})),
            ]),
            Step::tool_call("processRefund", json!({"orderId": "88231"})),
            Step::text("Sorry, could you confirm the order number?"),
        ],
        config(),
    )
    .await;
    let finished = ask_deciding(&agent, REFUND_REQUEST, Decision::Approve).await;
    assert_eq!(finished.result.unwrap().rounds, 4);
    let requests = llm.requests();
    let not_json = tool_result(requests[1].messages(), "call_1_0");
    assert!(not_json.contains("not valid JSON"), "{not_json}");
    // Sent back as `{}`: servers refuse a history holding broken arguments.
    let replayed = requests[1]
        .messages()
        .iter()
        .find(|message| message["role"] == "assistant")
        .expect("the model's turn");
    assert_eq!(
        replayed["tool_calls"][0]["function"]["arguments"], "{}",
        "{replayed}"
    );
    let invalid = tool_result(requests[2].messages(), "call_2_0");
    assert!(
        invalid.contains("invalid arguments for `queryOrder`"),
        "{invalid}"
    );
    let unknown = tool_result(requests[2].messages(), "call_2_1");
    assert!(
        unknown.contains("no function named `deleteEverything`"),
        "{unknown}"
    );
    let bad_input = tool_result(requests[3].messages(), "call_3_0");
    assert!(
        bad_input.contains("reason"),
        "the skill's schema names the missing field: {bad_input}"
    );
    let outcomes: Vec<_> = calls_of(&finished.events, &Caller::Main)
        .into_iter()
        .map(|(_, _, outcome)| matches!(outcome, CallOutcome::Refused { .. }))
        .collect();
    assert_eq!(outcomes, [true, true, true, true], "none was executed");
    assert!(
        !finished
            .events
            .iter()
            .any(|event| matches!(event, AgentEvent::SkillStarted { .. }))
    );
}

#[tokio::test]
async fn identical_calls_are_refused_then_stop_the_run() {
    let query = || Step::tool_call("queryOrder", json!({"orderId": "88231"}));
    let (_shop, llm, agent) =
        shop_and_agent(vec![query(), query(), query(), query()], config()).await;
    let finished = ask_deciding(&agent, "status of 88231?", Decision::Leave).await;
    let error = finished.result.unwrap_err();
    assert!(
        matches!(&error, skillhost::agent::AgentError::RepeatedCall { function, times: 4, .. } if function == "queryOrder"),
        "{error}"
    );
    let outcomes = executed(&finished.events, &Caller::Main);
    assert_eq!(
        outcomes,
        [true, true, false],
        "the third is refused, the fourth stops the run"
    );
    let told = tool_result(llm.requests()[3].messages(), "call_3_0");
    assert!(told.contains("already called `queryOrder`"), "{told}");
}

#[tokio::test]
async fn a_call_whose_result_compaction_evicted_is_not_a_repeat() {
    let query = || Step::tool_call("queryOrder", json!({"orderId": "88231"}));
    let steps = vec![
        query(),
        query(),
        query(),
        query(),
        Step::text("It is delivered."),
    ];
    // So small that each round evicts every turn but the latest: the model
    // never sees an earlier result of the call it makes again.
    let tight = AgentConfig {
        context_budget: 1,
        ..config()
    };
    let (_shop, _llm, agent) = shop_and_agent(steps, tight).await;
    let finished = ask_deciding(&agent, "status of 88231?", Decision::Leave).await;
    assert_eq!(finished.result.unwrap().answer, "It is delivered.");
    let outcomes = executed(&finished.events, &Caller::Main);
    assert_eq!(
        outcomes,
        [true, true, true, true],
        "none is refused as a repeat"
    );
}

#[tokio::test]
async fn the_last_round_must_answer_and_its_calls_are_not_executed() {
    // A sub-agent that keeps calling: rounds 1-4 look orders up, round 5
    // would write the refund, with no round left to tell anyone.
    let mut steps = vec![Step::tool_call(
        "processRefund",
        json!({"orderId": "88231", "reason": "broken"}),
    )];
    steps.extend(
        (1..=4).map(|n| Step::tool_call("queryOrder", json!({"orderId": format!("8823{n}")}))),
    );
    steps.push(Step::tool_call(
        "applyRefund",
        json!({"orderId": "88231", "reason": "broken"}),
    ));
    steps.push(Step::text("The refund could not be completed."));
    let llm_only = AgentConfig {
        use_steps: false,
        ..config()
    };
    let (shop, llm, agent) = shop_and_agent(steps, llm_only).await;
    let finished = ask_deciding(&agent, REFUND_REQUEST, Decision::Approve).await;
    finished.result.expect("the main agent answers");
    let requests = llm.requests();
    // The sub-agent's rounds 1-4 may call; its round 5 is asked for text.
    let choices: Vec<&Value> = requests[1..=5]
        .iter()
        .map(|request| &request.body["tool_choice"])
        .collect();
    assert_eq!(
        choices,
        [
            &Value::Null,
            &Value::Null,
            &Value::Null,
            &Value::Null,
            &json!("none")
        ]
    );
    // Its functions are still listed, as the history holds calls of them.
    assert!(!requests[5].tool_names().is_empty());
    // The write of the last round did not run, and nobody was asked.
    let sub_agent = Caller::Skill(skill("processRefund"));
    let (tool, _, outcome) = calls_of(&finished.events, &sub_agent).pop().unwrap();
    assert_eq!(tool, "applyRefund");
    assert!(
        refusal(&outcome).contains("last of 5 rounds"),
        "{outcome:?}"
    );
    assert!(confirmations(&finished.events).is_empty());
    assert!(shop.db.refunds_for("88231").unwrap().is_empty());
    // The main agent heard the skill gave up.
    assert!(matches!(
        &skill_outcomes(&finished.events)[0],
        CallOutcome::Failed { error } if error.contains("5 rounds")
    ));
}

#[tokio::test]
async fn calls_past_the_answers_limit_and_repeated_writes_are_not_executed() {
    let lookups =
        ["88231", "99001", "88239", "88240"].map(|id| ("queryOrder", json!({"orderId": id})));
    let refund = || {
        (
            "applyRefund",
            json!({"orderId": "88231", "reason": "broken"}),
        )
    };
    let steps = vec![
        // Four lookups, one more than an answer may run.
        Step::tool_calls(lookups),
        // The same refund twice in one answer.
        Step::tool_calls([refund(), refund()]),
        Step::text("Refunded once."),
    ];
    let mut public = config();
    public.max_calls_per_answer = 3;
    public.disclosure.keep_public.insert("applyRefund".into());
    let (shop, llm, agent) = shop_and_agent(steps, public).await;
    let finished = ask_deciding(&agent, REFUND_REQUEST, Decision::Approve).await;
    assert_eq!(finished.result.unwrap().answer, "Refunded once.");
    let calls = calls_of(&finished.events, &Caller::Main);
    let outcomes: Vec<(&str, &str)> = calls
        .iter()
        .map(|(tool, _, outcome)| (tool.as_str(), outcome.status()))
        .collect();
    assert_eq!(
        outcomes,
        [
            ("queryOrder", "done"),
            ("queryOrder", "done"),
            ("queryOrder", "done"),
            ("queryOrder", "refused"),
            ("applyRefund", "done"),
            ("applyRefund", "failed"),
        ]
    );
    let told = tool_result(llm.requests()[1].messages(), "call_1_3");
    assert!(told.contains("at most 3 calls of one answer"), "{told}");
    let told = tool_result(llm.requests()[2].messages(), "call_2_1");
    assert!(
        told.contains("the write that just ran, with the same arguments"),
        "{told}"
    );
    // One refund, and one person asked once.
    assert_eq!(shop.db.refunds_for("88231").unwrap().len(), 1);
    assert_eq!(confirmations(&finished.events).len(), 1);
}

#[tokio::test]
async fn only_the_repeat_of_the_last_write_is_refused() {
    let quantity = |n: u32| {
        (
            "update_cart_item",
            json!({"product_id": "P1007", "quantity": n}),
        )
    };
    let steps = vec![
        // Set back and forth: each call changes the cart.
        Step::tool_calls([quantity(3), quantity(2), quantity(3)]),
        // The same call twice: the second would change nothing.
        Step::tool_calls([quantity(5), quantity(5)]),
        Step::text("Your cart has 5."),
    ];
    let shop = Shop::new(article_000_tools, &[]).await;
    let llm = ScriptedLlm::start(steps).await;
    let agent = shop.agent(&llm, AgentConfig::default());
    let finished = ask_deciding(&agent, "5 filters please", Decision::Approve).await;
    assert_eq!(finished.result.unwrap().answer, "Your cart has 5.");
    let ran = executed(&finished.events, &Caller::Main);
    assert_eq!(ran, [true, true, true, true, false]);
    // Nobody was asked to approve the repeat.
    assert_eq!(confirmations(&finished.events).len(), 4);
}

/// A search tool whose every answer is a page far larger than the
/// context budget.
struct WholePage;

#[async_trait::async_trait]
impl Tool for WholePage {
    fn spec(&self) -> &ToolSpec {
        static SPEC: std::sync::LazyLock<ToolSpec> = std::sync::LazyLock::new(|| ToolSpec {
            name: "searchEverything".into(),
            description: "Searches everything.".into(),
            parameters: json!({"type": "object"}),
            access: Access::Read,
        });
        &SPEC
    }

    async fn invoke(&self, _context: &ToolContext, _arguments: Value) -> Result<Value, ToolError> {
        Ok(json!({"page": "lorem ipsum ".repeat(50_000)}))
    }
}

#[tokio::test]
async fn a_result_too_large_for_the_context_is_cut_before_the_model_reads_it() {
    let shop = Shop::new(|_| vec![Arc::new(WholePage) as Arc<dyn Tool>], &[]).await;
    let llm = ScriptedLlm::start(vec![
        Step::tool_call("searchEverything", json!({})),
        Step::text("Nothing relevant."),
    ])
    .await;
    let agent = shop.agent(&llm, AgentConfig::default());
    let finished = ask_deciding(&agent, "search for my order", Decision::Leave).await;
    assert_eq!(finished.result.unwrap().answer, "Nothing relevant.");
    let told = tool_result(llm.requests()[1].messages(), "call_1_0");
    // A quarter of the default 32,000-token budget, of ASCII text.
    assert_eq!(
        told.find('…'),
        Some(8_000 * 4),
        "{}",
        &told[told.len() - 200..]
    );
    assert!(
        told.ends_with("the rest is not shown]"),
        "{}",
        &told[told.len() - 200..]
    );
    // The event keeps the whole result for whoever watches the run.
    let (_, _, outcome) = calls_of(&finished.events, &Caller::Main).pop().unwrap();
    let CallOutcome::Done { result } = outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(result["page"].as_str().unwrap().len(), 600_000);
}

#[tokio::test]
async fn an_llm_failure_ends_the_run_with_a_typed_error() {
    let failures = (0..4)
        .map(|_| Step::error(500, "upstream exploded"))
        .collect();
    let (_shop, llm, agent) = shop_and_agent(failures, config()).await;
    let error = agent
        .ask(REFUND_REQUEST)
        .unwrap()
        .result()
        .await
        .unwrap_err();
    match error {
        skillhost::agent::AgentError::Llm { caller, cause } => {
            assert_eq!(caller, Caller::Main);
            assert!(cause.to_string().contains("upstream exploded"), "{cause}");
        }
        other => panic!("expected an LLM error, got {other}"),
    }
    assert_eq!(llm.requests().len(), 4, "1 attempt + 3 retries");
}

#[tokio::test]
async fn without_an_llm_only_deterministic_skills_run() {
    let shop = shop().await;
    let agent = Agent::builder(shop.skills.clone())
        .config(AgentConfig {
            confirmation: ConfirmationPolicy::never(),
            ..config()
        })
        .build()
        .unwrap();
    assert!(matches!(
        agent.ask(REFUND_REQUEST),
        Err(skillhost::agent::AgentError::NotConfigured)
    ));
    let input = json!({"orderId": "88231", "reason": "broken"});
    let finished = agent
        .start_skill("processRefund", input)
        .unwrap()
        .finish_with(|_| Decision::Leave)
        .await;
    let output = finished.result.unwrap();
    assert_eq!(output.stats.llm_calls, 0);
    let CallOutcome::Done { result } = output.outcome else {
        panic!("{:?}", output.outcome)
    };
    assert_eq!(result["refundId"], "RF20260629001");
    assert_eq!(
        tools_called(&finished.events, &Caller::Skill(skill("processRefund"))),
        ["queryOrder", "applyRefund"]
    );
    // A skill whose path needs the model cannot run.
    let llm_only = AgentConfig {
        use_steps: false,
        ..config()
    };
    let agent = Agent::builder(shop.skills.clone())
        .config(llm_only)
        .build()
        .unwrap();
    let error = agent
        .start_skill("inquireOrderStatus", json!({"orderId": "88231"}))
        .unwrap()
        .result()
        .await
        .unwrap_err();
    assert!(
        matches!(error, skillhost::agent::AgentError::NotConfigured),
        "{error}"
    );
    assert!(matches!(
        agent.start_skill("nope", json!({})).err(),
        Some(skillhost::agent::AgentError::UnknownSkill(name)) if name == "nope"
    ));
}

/// A write waiting for a person holds no wasm instance: with a pool of one,
/// another skill's steps run meanwhile. Once approved, the steps go on from
/// where they stopped, and every call is made (and reported) once.
#[tokio::test]
async fn a_write_waiting_for_approval_holds_no_instance() {
    let files = [
        skill_file("processRefund"),
        skill_file("inquireOrderStatus"),
    ];
    let shop = Shop::with_instances(article_003_tools, &files, 1).await;
    let agent = Agent::builder(shop.skills.clone())
        .config(config())
        .build()
        .unwrap();
    let input = json!({"orderId": "88231", "reason": "broken"});
    let mut refund = agent.start_skill("processRefund", input).unwrap();
    let (mut events, pending) = until_confirmation(&mut refund).await;
    assert_eq!(pending.tool, "applyRefund");
    assert_eq!(shop.skills.runtime().instance_slots().in_use, 0);
    let inquiry = agent
        .start_skill("inquireOrderStatus", json!({"orderId": "88231"}))
        .unwrap()
        .result();
    let inquiry = tokio::time::timeout(Duration::from_secs(30), inquiry)
        .await
        .expect("the other skill ran while the write waited")
        .unwrap();
    assert!(
        matches!(inquiry.outcome, CallOutcome::Done { .. }),
        "{:?}",
        inquiry.outcome
    );
    assert!(shop.db.refunds_for("88231").unwrap().is_empty());

    agent.confirmations().approve(pending.id.as_str()).unwrap();
    while let Some(event) = refund.events.recv().await {
        events.push(event);
    }
    let CallOutcome::Done { result } = refund.result().await.unwrap().outcome else {
        panic!("the refund did not finish");
    };
    assert_eq!(result["refunded"], true);
    assert_eq!(result["refundId"], "RF20260629001");
    assert_eq!(result["product"], "Bit S10 Pro robot vacuum");
    assert_eq!(
        tools_called(&events, &Caller::Skill(skill("processRefund"))),
        ["queryOrder", "applyRefund"]
    );
    assert_eq!(shop.db.refunds_for("88231").unwrap().len(), 1);
}

/// Regression: a WASI guest whose write carries random bytes and the time
/// (an idempotency key, a timestamp) made a different call when its steps
/// ran again after the approval, and was told the approved call was "not
/// executed" although it had run. Every attempt of an invocation now reads
/// the same random bytes and the first attempt's clock readings.
#[tokio::test]
async fn steps_run_again_after_an_approval_read_the_same_wasi_random_bytes_and_time() {
    let shop = Shop::with_files(article_003_tools, &[fixture("wasi-replay")]).await;
    let agent = Agent::builder(shop.skills.clone())
        .config(config())
        .build()
        .unwrap();
    let (pending, result) =
        approve_the_write(&agent, "wasiReplay", json!({"orderId": "88231"})).await;
    let approved_reason = pending.arguments["reason"].as_str().unwrap();
    assert!(approved_reason.starts_with("request "), "{approved_reason}");
    assert_eq!(result["refundError"], Value::Null, "{result}");
    assert_eq!(result["refund"]["refundId"], "RF20260629001");
    assert_eq!(result["reason"], approved_reason);
    let refunds = shop.db.refunds_for("88231").unwrap();
    assert_eq!(refunds.len(), 1);
    assert_eq!(refunds[0].reason, approved_reason);
}

#[tokio::test]
async fn a_skill_that_traps_fails_alone_and_the_run_goes_on() {
    let shop = Shop::with_files(
        article_003_tools,
        &[skill_file("processRefund"), fixture("panicker")],
    )
    .await;
    let llm = ScriptedLlm::start(vec![
        Step::tool_call("panicker", json!({})),
        refund_call(),
        Step::text("Your refund RF20260629001 is on its way."),
    ])
    .await;
    let agent = shop.agent(
        &llm,
        AgentConfig {
            confirmation: ConfirmationPolicy::never(),
            ..config()
        },
    );
    let finished = ask_deciding(&agent, REFUND_REQUEST, Decision::Leave).await;
    assert_eq!(finished.result.unwrap().rounds, 3);
    let outcomes = skill_outcomes(&finished.events);
    assert!(
        matches!(&outcomes[0], CallOutcome::Failed { error } if error.contains("panicker")),
        "{outcomes:?}"
    );
    assert!(
        matches!(&outcomes[1], CallOutcome::Done { .. }),
        "{outcomes:?}"
    );
    let told = tool_result(llm.requests()[1].messages(), "call_1_0");
    assert!(told.starts_with(r#"{"error":"#), "{told}");
    assert_eq!(shop.db.refunds_for("88231").unwrap().len(), 1);
}

/// Who a run acts for, as an embedder attaches it.
#[derive(Debug, Clone, PartialEq)]
struct Customer(&'static str);

/// What one call was handed: the tool, the customer, the run.
type Handed = (String, Option<Customer>, Option<RunId>);

/// A tool that records what each call was handed, then runs `inner`.
struct Recording {
    inner: Arc<dyn Tool>,
    handed: Arc<Mutex<Vec<Handed>>>,
}

#[async_trait::async_trait]
impl Tool for Recording {
    fn spec(&self) -> &ToolSpec {
        self.inner.spec()
    }

    async fn invoke(&self, context: &ToolContext, arguments: Value) -> Result<Value, ToolError> {
        self.handed.lock().unwrap().push((
            self.spec().name.clone(),
            context.get::<Customer>().cloned(),
            context.get::<RunId>().cloned(),
        ));
        self.inner.invoke(context, arguments).await
    }
}

#[tokio::test]
async fn every_tool_a_run_calls_is_handed_what_its_embedder_attached() {
    let handed = Arc::new(Mutex::new(Vec::new()));
    let recorded = handed.clone();
    let shop = Shop::new(
        move |db| {
            article_003_tools(db)
                .into_iter()
                .map(|inner| {
                    let handed = recorded.clone();
                    Arc::new(Recording { inner, handed }) as Arc<dyn Tool>
                })
                .collect()
        },
        &["inquireOrderStatus"],
    )
    .await;
    let agent = Agent::builder(shop.skills.clone()).build().unwrap();
    let order = json!({"orderId": "88231"});

    // Inside the sandbox, the steps' calls carry it; the guest never sees it.
    let options = RunOptions::new().with(Customer("u1001"));
    let run = agent
        .start_skill_with("inquireOrderStatus", order.clone(), options)
        .unwrap();
    let id = run.id.clone();
    run.result().await.unwrap();
    let customer = Some(Customer("u1001"));
    assert_eq!(
        *handed.lock().unwrap(),
        [
            ("queryOrder".to_owned(), customer.clone(), Some(id.clone())),
            ("queryLogistics".to_owned(), customer, Some(id)),
        ]
    );

    // A run given nothing hands its calls only its id.
    handed.lock().unwrap().clear();
    let run = agent.start_skill("inquireOrderStatus", order).unwrap();
    let id = run.id.clone();
    run.result().await.unwrap();
    let calls = handed.lock().unwrap().clone();
    assert!(
        calls
            .iter()
            .all(|(_, customer, run)| customer.is_none() && run.as_ref() == Some(&id)),
        "{calls:?}"
    );
}

/// A tool that says when it is called, and runs only once the test lets it.
struct Held {
    inner: Arc<dyn Tool>,
    called: Arc<tokio::sync::Notify>,
    gate: Arc<tokio::sync::Semaphore>,
}

#[async_trait::async_trait]
impl Tool for Held {
    fn spec(&self) -> &ToolSpec {
        self.inner.spec()
    }

    async fn invoke(&self, context: &ToolContext, arguments: Value) -> Result<Value, ToolError> {
        self.called.notify_one();
        let _pass = self.gate.acquire().await.expect("the gate stays open");
        self.inner.invoke(context, arguments).await
    }
}

#[tokio::test]
async fn a_run_is_at_work_from_its_approval_to_its_end_and_not_while_it_waits() {
    use futures::FutureExt as _;

    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let called = Arc::new(tokio::sync::Notify::new());
    let (held, reached) = (gate.clone(), called.clone());
    let shop = Shop::new(
        move |db| {
            article_003_tools(db)
                .into_iter()
                .map(|inner| match inner.spec().name.as_str() {
                    "applyRefund" => Arc::new(Held {
                        inner,
                        called: reached.clone(),
                        gate: held.clone(),
                    }) as Arc<dyn Tool>,
                    _ => inner,
                })
                .collect()
        },
        &["processRefund"],
    )
    .await;
    let agent = Agent::builder(shop.skills.clone()).build().unwrap();
    assert!(agent.idle().now_or_never().is_some(), "no run yet");

    let mut run = agent.start_skill("processRefund", refund_input()).unwrap();
    assert_eq!(agent.runs_at_work(), 1, "counted from its start");
    let pending = loop {
        match run.events.recv().await.expect("the run waits for approval") {
            AgentEvent::ConfirmationPending(pending) => break pending,
            _ => continue,
        }
    };
    // Waiting for a person, it does not hold a shutdown up.
    assert_eq!(agent.runs_at_work(), 0);
    assert!(agent.idle().now_or_never().is_some());

    // Approved, it is at work again before its task has even woken.
    agent.confirmations().approve(pending.id.as_str()).unwrap();
    assert_eq!(agent.runs_at_work(), 1);
    let mut idle = Box::pin(agent.idle());
    assert!((&mut idle).now_or_never().is_none());

    // It stays at work while the approved call runs, and is idle once it ends.
    called.notified().await;
    assert!((&mut idle).now_or_never().is_none());
    gate.add_permits(1);
    idle.await;
    assert!(run.has_ended());
    let output = run.result().await.unwrap();
    assert!(
        matches!(output.outcome, CallOutcome::Done { .. }),
        "{output:?}"
    );
    assert_eq!(shop.db.refunds_for("88231").unwrap().len(), 1);
}
