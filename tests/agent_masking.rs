//! Article 000: `load_skill` and per-round masking, reproduced exactly
//! (BRIEF.md's table), revocation when compaction evicts the load result,
//! and the re-check of masked calls at execution.
//!
//! Setup: the article registers 17 functions — 14 business tools,
//! `search_knowledge`, `load_skill` and a memory tool (`flush_memory`). We
//! register the demo's article-000 tools minus `list_devices` (16, with
//! `search_knowledge`) plus `load_skill`: 17. Skills are offered through
//! `load_skill` only, as in the article.

use std::sync::Arc;

use serde_json::{Value, json};

use skillhost::agent::catalog::{DisclosureConfig, LoadSkillMode};
use skillhost::agent::llm::Message;
use skillhost::agent::{
    AgentConfig, AgentEvent, CallOutcome, Caller, Decision, Declined, Finished, Resolution,
    RunOptions, RunOutput,
};
use skillhost::scope::{SkillScope, ToolScope};
use skillhost::tools::Tool;
use skillhost::tools::demo::{DemoDb, OrderStatus, article_000_tools};

use crate::agent_common::{
    Shop, ask_deciding, calls_of, confirmations, refusal, resolutions, rounds_of, skill,
    tool_result,
};
use crate::support::scripted_llm::{ScriptedLlm, Step};

/// The article's five skills.
const SKILLS: [&str; 5] = [
    "order_change",
    "after_sale_apply",
    "order_checkout",
    "fault_diagnosis",
    "iot_bundle",
];

/// The six unlock tools, in the order of the unlock table.
const UNLOCK_TOOLS: [&str; 6] = [
    "cancel_order",
    "change_address",
    "apply_after_sale",
    "update_cart_item",
    "create_order",
    "pay_order",
];

/// The article's order to cancel: paid, not shipped.
const PAID_ORDER: &str = "88239";

fn shop_tools(db: Arc<DemoDb>) -> Vec<Arc<dyn Tool>> {
    article_000_tools(db)
        .into_iter()
        .filter(|tool| tool.spec().name != "list_devices")
        .collect()
}

/// The article's shop: its tools (but `list_devices`) and its five skills.
pub async fn shop() -> Shop {
    Shop::new(shop_tools, &SKILLS).await
}

/// Skills through `load_skill` only.
pub fn config() -> AgentConfig {
    AgentConfig {
        disclosure: DisclosureConfig {
            skill_functions: false,
            ..DisclosureConfig::default()
        },
        ..AgentConfig::default()
    }
}

/// For each unlock tool, whether it is in each list.
fn unlock_table(lists: &[Vec<String>]) -> Vec<(&'static str, Vec<bool>)> {
    UNLOCK_TOOLS
        .iter()
        .map(|tool| {
            let visible = lists
                .iter()
                .map(|list| list.iter().any(|name| name == tool))
                .collect();
            (*tool, visible)
        })
        .collect()
}

/// A run of `steps` on `request` with `options` (and the scripted model's
/// requests, left unanswered at a confirmation), the functions offered each
/// round, and the first round's `load_skill` definition.
async fn scoped_run(
    shop: &Shop,
    steps: Vec<Step>,
    request: &str,
    options: RunOptions,
) -> (Finished<RunOutput>, Vec<Vec<String>>, Value) {
    let llm = ScriptedLlm::start(steps).await;
    let finished = shop
        .agent(&llm, config())
        .start_with(vec![Message::user(request)], options)
        .unwrap()
        .finish_with(|_| Decision::Leave)
        .await;
    let requests = llm.requests();
    let lists = requests
        .iter()
        .map(|request| request.tool_names())
        .collect();
    let load_skill = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|tool| tool["function"]["name"] == "load_skill")
        .expect("load_skill is offered")["function"]
        .clone();
    (finished, lists, load_skill)
}

#[tokio::test]
async fn masking_table_of_article_000_is_reproduced() {
    let shop = shop().await;
    let llm = ScriptedLlm::start(vec![
        Step::tool_call("load_skill", json!({"skill": "order_change"})),
        Step::tool_call("query_order", json!({"order_id": PAID_ORDER})),
        Step::text(
            "Order 88239 is paid and not shipped, so it can be cancelled. Shall I cancel it?",
        ),
    ])
    .await;
    let agent = shop.agent(&llm, config());
    let finished = ask_deciding(&agent, "Please cancel my order 88239", Decision::Leave).await;
    let output = finished.result.unwrap();

    let requests = llm.requests();
    let lists: Vec<Vec<String>> = requests
        .iter()
        .map(|request| request.tool_names())
        .collect();
    assert_eq!(
        lists,
        rounds_of(&finished.events, &Caller::Main),
        "events show what was sent"
    );
    // | round | context holds                  | tools | cancel_order |
    // | 1     | the user's message only        | 11    | no           |
    // | 2     | + load_skill(order_change)     | 13    | yes          |
    // | 3     | + query_order result           | 13    | yes          |
    let counts: Vec<usize> = lists.iter().map(Vec::len).collect();
    assert_eq!(counts, [11, 13, 13]);
    assert_eq!(
        unlock_table(&lists),
        [
            ("cancel_order", vec![false, true, true]),
            ("change_address", vec![false, true, true]),
            ("apply_after_sale", vec![false, false, false]),
            ("update_cart_item", vec![false, false, false]),
            ("create_order", vec![false, false, false]),
            ("pay_order", vec![false, false, false]),
        ]
    );
    // The 11 of round 1: every registered tool but the six unlock tools, and load_skill.
    assert!(lists[0].iter().any(|name| name == "load_skill"));
    assert!(
        lists[0].iter().any(|name| name == "submit_ticket"),
        "a write no skill unlocks stays visible"
    );
    assert!(
        !lists[0].iter().any(|name| SKILLS.contains(&name.as_str())),
        "skills only via load_skill"
    );

    // The load result carries the instructions and the unlocks.
    let loaded = tool_result(requests[1].messages(), "call_1_0");
    let loaded: Value = serde_json::from_str(&loaded).unwrap();
    assert_eq!(loaded["loaded_skill"], "order_change");
    assert_eq!(loaded["unlocks"], json!(["cancel_order", "change_address"]));
    let instructions = shop
        .skills
        .get("order_change")
        .unwrap()
        .instructions()
        .to_owned();
    assert_eq!(loaded["instructions"], instructions.as_str());
    assert_eq!(output.rounds, 3);
    assert!(
        confirmations(&finished.events).is_empty(),
        "nothing was written"
    );
}

#[tokio::test]
async fn each_skill_unlocks_exactly_its_tools() {
    let shop = shop().await;
    let mut steps = Vec::new();
    for name in SKILLS {
        steps.push(Step::tool_call("load_skill", json!({ "skill": name })));
        steps.push(Step::text("Loaded."));
    }
    let llm = ScriptedLlm::start(steps).await;
    let agent = shop.agent(&llm, config());
    for _ in SKILLS {
        agent.ask("help").unwrap().result().await.unwrap();
    }
    let requests = llm.requests();
    // After loading each skill (rounds 2, 4, ...), which unlock tools are visible.
    let after_load: Vec<Vec<String>> = requests
        .iter()
        .skip(1)
        .step_by(2)
        .map(|request| request.tool_names())
        .collect();
    let visible: Vec<Vec<&str>> = after_load
        .iter()
        .map(|list| {
            UNLOCK_TOOLS
                .into_iter()
                .filter(|tool| list.iter().any(|name| name == tool))
                .collect()
        })
        .collect();
    assert_eq!(
        visible,
        [
            vec!["cancel_order", "change_address"],
            vec!["apply_after_sale"],
            vec!["update_cart_item", "create_order", "pay_order"],
            vec![],
            vec![],
        ]
    );
    let counts: Vec<usize> = after_load.iter().map(Vec::len).collect();
    assert_eq!(counts, [13, 12, 14, 11, 11]);
}

#[tokio::test]
async fn compaction_that_evicts_the_load_result_revokes_the_unlocks() {
    let shop = shop().await;
    let llm = ScriptedLlm::start(vec![
        Step::tool_call("load_skill", json!({"skill": "order_change"})),
        Step::tool_call("query_order", json!({"order_id": PAID_ORDER})),
        // The name is still in the model's memory: called anyway.
        Step::tool_call("cancel_order", json!({"order_id": PAID_ORDER})),
        Step::text("I need to load the order change manual first."),
    ])
    .await;
    // So small that every turn but the latest is evicted before each round.
    let agent = shop.agent(
        &llm,
        AgentConfig {
            context_budget: 1,
            ..config()
        },
    );
    let finished = ask_deciding(&agent, "Please cancel my order 88239", Decision::Approve).await;
    finished.result.unwrap();

    let requests = llm.requests();
    let counts: Vec<usize> = requests
        .iter()
        .map(|request| request.tool_names().len())
        .collect();
    // Round 2 still holds the load result (the latest turn is never evicted);
    // round 3 no longer does: 11 functions, cancel_order masked again.
    assert_eq!(counts, [11, 13, 11, 11]);
    assert!(
        !requests[2]
            .tool_names()
            .iter()
            .any(|name| name == "cancel_order")
    );
    let compactions: Vec<_> = finished
        .events
        .iter()
        .filter_map(|event| match event {
            AgentEvent::Compacted {
                revoked,
                evicted_messages,
                ..
            } => Some((revoked.clone(), *evicted_messages)),
            _ => None,
        })
        .collect();
    assert_eq!(compactions[0], (vec![skill("order_change")], 2));
    let roles: Vec<_> = requests[2]
        .messages()
        .iter()
        .map(|message| message["role"].clone())
        .collect();
    assert_eq!(
        roles,
        ["system", "user", "assistant", "tool"],
        "the load_skill turn is gone"
    );

    // The masked call was refused at execution, naming the skill to load, and not executed.
    let calls = calls_of(&finished.events, &Caller::Main);
    let (tool, _, outcome) = &calls[2];
    assert_eq!(tool, "cancel_order");
    let reason = refusal(outcome);
    assert!(
        reason.contains("load_skill") && reason.contains("order_change"),
        "{reason}"
    );
    assert!(
        confirmations(&finished.events).is_empty(),
        "a refused call asks nobody"
    );
    assert_eq!(
        shop.db.order_status(PAID_ORDER).unwrap(),
        Some(OrderStatus::Paid)
    );
    assert!(tool_result(requests[3].messages(), "call_3_0").contains("order_change"));
}

#[tokio::test]
async fn a_masked_tool_is_refused_until_its_skill_is_loaded_then_confirmed() {
    let shop = shop().await;
    let llm = ScriptedLlm::start(vec![
        Step::tool_call("cancel_order", json!({"order_id": PAID_ORDER})),
        Step::tool_call("load_skill", json!({"skill": "order_change"})),
        Step::tool_call(
            "cancel_order",
            json!({"order_id": PAID_ORDER, "reason": "ordered by mistake"}),
        ),
        Step::text("Order 88239 is cancelled; the full amount goes back to your card."),
    ])
    .await;
    let agent = shop.agent(&llm, config());
    let mut run = agent
        .ask("Please cancel my order 88239, I ordered it by mistake")
        .unwrap();
    let mut events = Vec::new();
    while let Some(event) = run.events.recv().await {
        if let AgentEvent::ConfirmationPending(pending) = &event {
            assert_eq!(pending.caller, Caller::Main);
            assert_eq!(pending.tool, "cancel_order");
            assert_eq!(
                pending.arguments,
                json!({"order_id": PAID_ORDER, "reason": "ordered by mistake"})
            );
            assert_eq!(
                pending.summary,
                "cancel_order: order_id '88239', reason 'ordered by mistake'"
            );
            assert_eq!(
                agent.confirmations().pending(),
                std::slice::from_ref(pending)
            );
            assert_eq!(
                shop.db.order_status(PAID_ORDER).unwrap(),
                Some(OrderStatus::Paid),
                "not before approval"
            );
            agent.confirmations().approve(pending.id.as_str()).unwrap();
        }
        events.push(event);
    }
    run.result().await.unwrap();

    let calls = calls_of(&events, &Caller::Main);
    let reason = refusal(&calls[0].2);
    assert!(
        reason.contains("locked") && reason.contains("order_change"),
        "{reason}"
    );
    assert!(
        matches!(calls[2].2, CallOutcome::Done { .. }),
        "{:?}",
        calls[2]
    );
    assert_eq!(resolutions(&events), [Resolution::Approved { by: None }]);
    assert_eq!(
        shop.db.order_status(PAID_ORDER).unwrap(),
        Some(OrderStatus::Cancelled)
    );
    assert!(agent.confirmations().pending().is_empty());
}

#[tokio::test]
async fn a_tool_called_in_the_same_answer_as_its_load_skill_waits_for_the_next_answer() {
    let shop = shop().await;
    let cancel = json!({"order_id": PAID_ORDER, "reason": "ordered by mistake"});
    let llm = ScriptedLlm::start(vec![
        // Before reading the procedure: the round offered no cancel_order.
        Step::tool_calls([
            ("load_skill", json!({"skill": "order_change"})),
            ("cancel_order", cancel.clone()),
        ]),
        Step::tool_call("cancel_order", cancel.clone()),
        Step::text("Order 88239 is cancelled."),
    ])
    .await;
    let agent = shop.agent(&llm, config());
    let finished = ask_deciding(&agent, "Cancel my order 88239", Decision::Approve).await;
    finished.result.unwrap();

    let calls = calls_of(&finished.events, &Caller::Main);
    assert_eq!(calls.len(), 3, "{calls:?}");
    let reason = refusal(&calls[1].2);
    assert!(
        reason.contains("locked") && reason.contains("after the one that loads it"),
        "{reason}"
    );
    // Only the call of the next answer asked and ran.
    assert_eq!(confirmations(&finished.events).len(), 1);
    assert!(matches!(calls[2].2, CallOutcome::Done { .. }), "{calls:?}");
    assert_eq!(
        shop.db.order_status(PAID_ORDER).unwrap(),
        Some(OrderStatus::Cancelled)
    );
}

#[tokio::test]
async fn without_load_skill_an_unlock_tool_is_refused_without_pointing_at_load_skill() {
    let shop = shop().await;
    let llm = ScriptedLlm::start(vec![
        Step::tool_call("cancel_order", json!({"order_id": PAID_ORDER})),
        Step::text("I cannot cancel orders here."),
    ])
    .await;
    let mut config = config();
    config.disclosure.load_skill = LoadSkillMode::Never;
    let agent = shop.agent(&llm, config);
    let finished = ask_deciding(&agent, "Cancel my order 88239", Decision::Approve).await;
    finished.result.unwrap();

    let calls = calls_of(&finished.events, &Caller::Main);
    let reason = refusal(&calls[0].2);
    assert!(reason.contains("not available"), "{reason}");
    assert!(!reason.contains("load_skill"), "{reason}");
    assert_eq!(
        shop.db.order_status(PAID_ORDER).unwrap(),
        Some(OrderStatus::Paid)
    );
}

#[tokio::test]
async fn a_rejected_write_is_told_to_the_model_and_changes_nothing() {
    let shop = shop().await;
    let llm = ScriptedLlm::start(vec![
        Step::tool_call("load_skill", json!({"skill": "order_change"})),
        Step::tool_call("cancel_order", json!({"order_id": PAID_ORDER})),
        Step::respond_with(|body| {
            let last = body["messages"].as_array().unwrap().last().unwrap().clone();
            assert_eq!(last["role"], "tool");
            let content = last["content"].as_str().unwrap();
            assert!(
                content.contains("the user declined `cancel_order`"),
                "{content}"
            );
            assert!(content.contains("keep it after all"), "{content}");
            Step::text("Understood: order 88239 stays as it is.")
        }),
    ])
    .await;
    let agent = shop.agent(&llm, config());
    let finished = ask_deciding(
        &agent,
        "Cancel my order 88239",
        Decision::Reject(Some("keep it after all".into())),
    )
    .await;
    assert_eq!(
        finished.result.unwrap().answer,
        "Understood: order 88239 stays as it is."
    );
    assert_eq!(
        resolutions(&finished.events),
        [Resolution::Declined(Declined::Rejected {
            reason: Some("keep it after all".into()),
            by: None,
        })]
    );
    assert_eq!(
        shop.db.order_status(PAID_ORDER).unwrap(),
        Some(OrderStatus::Paid)
    );
    assert_eq!(llm.remaining(), 0);
}

/// A run limited to some skills (an API key's scope) can load only those,
/// and the tools only other skills unlock are out of its reach: never
/// offered, refused when called, whatever it loads.
#[tokio::test]
async fn a_run_limited_to_some_skills_sees_and_unlocks_only_theirs() {
    let shop = shop().await;
    let (finished, lists, load_skill) = scoped_run(
        &shop,
        vec![
            Step::tool_call("load_skill", json!({"skill": "after_sale_apply"})),
            Step::tool_call("apply_after_sale", json!({"order_id": PAID_ORDER})),
            Step::tool_call("load_skill", json!({"skill": "order_change"})),
            Step::text("Order 88239 can be cancelled. Shall I?"),
        ],
        "Cancel order 88239",
        RunOptions::new().skills(SkillScope::only(["order_change"])),
    )
    .await;
    finished.result.unwrap();
    // Only order_change's unlocks, once it is loaded in the last round.
    assert_eq!(
        unlock_table(&lists),
        [
            ("cancel_order", vec![false, false, false, true]),
            ("change_address", vec![false, false, false, true]),
            ("apply_after_sale", vec![false, false, false, false]),
            ("update_cart_item", vec![false, false, false, false]),
            ("create_order", vec![false, false, false, false]),
            ("pay_order", vec![false, false, false, false]),
        ]
    );
    assert_eq!(
        load_skill["parameters"]["properties"]["skill"]["enum"],
        json!(["order_change"])
    );
    let description = load_skill["description"].as_str().unwrap();
    assert!(!description.contains("after_sale_apply"), "{description}");

    let calls = calls_of(&finished.events, &Caller::Main);
    let reason = refusal(&calls[0].2);
    assert!(
        reason.contains("no skill named `after_sale_apply`; the skills are: order_change"),
        "{reason}"
    );
    let reason = refusal(&calls[1].2);
    assert!(reason.contains("not available"), "{reason}");
    assert!(matches!(calls[2].2, CallOutcome::Done { .. }));
    assert_eq!(
        shop.db.order_status(PAID_ORDER).unwrap(),
        Some(OrderStatus::Paid)
    );
}

/// A run limited to some tools (an API key's tool scope) is offered only
/// those, also once a skill unlocking others is loaded; a call of another
/// is refused and never runs, and load_skill tells of the unlocks in scope
/// alone.
#[tokio::test]
async fn a_run_limited_to_some_tools_is_offered_and_calls_only_those() {
    let shop = shop().await;
    let scope = ToolScope::only(["query_*", "cancel_order"]);
    let (finished, lists, load_skill) = scoped_run(
        &shop,
        vec![
            Step::tool_call("load_skill", json!({"skill": "order_change"})),
            Step::tool_call(
                "change_address",
                json!({"order_id": PAID_ORDER, "address": "Hangzhou"}),
            ),
            Step::tool_call(
                "submit_ticket",
                json!({"subject": "address", "detail": "change it"}),
            ),
            Step::text("Order 88239 can be cancelled. Shall I?"),
        ],
        "Change the address of 88239",
        RunOptions::new().tools(scope.clone()),
    )
    .await;
    finished.result.unwrap();
    assert_eq!(
        unlock_table(&lists),
        [
            ("cancel_order", vec![false, true, true, true]),
            ("change_address", vec![false, false, false, false]),
            ("apply_after_sale", vec![false, false, false, false]),
            ("update_cart_item", vec![false, false, false, false]),
            ("create_order", vec![false, false, false, false]),
            ("pay_order", vec![false, false, false, false]),
        ]
    );
    for list in &lists {
        assert!(list.contains(&"query_order".to_owned()), "{list:?}");
        assert!(
            list.iter()
                .all(|name| name == "load_skill" || scope.allows(name)),
            "{list:?}"
        );
    }
    let description = load_skill["description"].as_str().unwrap();
    assert!(
        description.contains("(unlocks: cancel_order)"),
        "{description}"
    );
    assert!(!description.contains("change_address"), "{description}");

    let calls = calls_of(&finished.events, &Caller::Main);
    assert!(matches!(calls[0].2, CallOutcome::Done { .. }));
    for call in &calls[1..] {
        let reason = refusal(&call.2);
        assert!(reason.contains("not available"), "{}: {reason}", call.0);
    }
}
