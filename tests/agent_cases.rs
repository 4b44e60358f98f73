//! Skill test cases run through the library ([`run_case`]), as `skillhost
//! test` and the gateway run them.

use serde_json::json;

use skillhost::agent::Agent;
use skillhost::agent::cases::{CaseFailure, Verdict, run_case};
use skillhost::skills::manifest::TestCase;
use skillhost::tools::demo::{article_000_tools, article_003_tools};

use crate::agent_common::{Shop, skill};

#[tokio::test]
async fn a_deterministic_case_passes_without_an_llm_and_its_write_is_auto_approved() {
    let shop = Shop::new(article_003_tools, &["processRefund"]).await;
    let agent = Agent::builder(shop.skills.clone()).build().unwrap();
    let refund = shop.skills.get("processRefund").unwrap();
    let case = &refund.manifest().test_cases[0];

    let report = run_case(&agent, refund.name(), case).await;

    assert_eq!(report.verdict, Verdict::Passed, "{report:?}");
    assert_eq!(report.tools_called, ["queryOrder", "applyRefund"]);
    assert_eq!(report.auto_approved, ["applyRefund"]);
    assert_eq!(report.llm_calls, 0);
    assert!(report.result.unwrap().contains("RF20260629001"));
    assert_eq!(shop.db.refunds_for("88231").unwrap().len(), 1);
}

#[tokio::test]
async fn every_unmet_expectation_is_reported() {
    let shop = Shop::new(article_003_tools, &["processRefund"]).await;
    let agent = Agent::builder(shop.skills.clone()).build().unwrap();
    let case = TestCase {
        name: "refund an order that has only shipped".into(),
        input: json!({"orderId": "99001", "reason": "no longer wanted"}),
        expect_tools: vec!["queryOrder".into(), "applyRefund".into()],
        expect_contains: vec!["RF".into(), "99001".into()],
    };

    let report = run_case(&agent, &skill("processRefund"), &case).await;

    assert_eq!(
        report.verdict,
        Verdict::Failed {
            failures: vec![
                CaseFailure::ToolNotCalled {
                    tool: "applyRefund".into(),
                    called: vec!["queryOrder".into()],
                },
                CaseFailure::TextMissing { text: "RF".into() },
            ]
        }
    );
    let Verdict::Failed { failures } = &report.verdict else {
        unreachable!()
    };
    assert_eq!(
        failures[0].to_string(),
        "expected tool `applyRefund` was not called (called: queryOrder)"
    );
    assert!(shop.db.refunds_for("99001").unwrap().is_empty());
}

#[tokio::test]
async fn an_instruction_only_case_is_skipped_without_an_llm() {
    let shop = Shop::new(article_000_tools, &["order_change"]).await;
    let agent = Agent::builder(shop.skills.clone()).build().unwrap();
    let change = shop.skills.get("order_change").unwrap();

    let report = run_case(&agent, change.name(), &change.manifest().test_cases[0]).await;

    let Verdict::Skipped { reason } = &report.verdict else {
        panic!("not skipped: {report:?}");
    };
    assert!(reason.starts_with("no LLM configured"), "{reason}");
    assert!(report.tools_called.is_empty());
}
