//! Skills written in Python and JavaScript (skill-plugins/python, /js),
//! built by componentize-py and componentize-js into components that
//! bundle their interpreter: the SDKs' outcomes and errors, the sandbox's
//! limits around an interpreter, replay after an approval, and `skillhost
//! test` on them. Each language's faults guest answers the same inputs.
//!
//! Ignored by a plain `cargo test`: the components are built, not committed
//! (12 to 19 MB each). `skill-plugins/build-interpreted.sh`, then
//! `cargo test --test integration -- --ignored` runs them (CI does).

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use skillhost::agent::{Agent, AgentConfig};
use skillhost::runtime::{InvokeError, Limit, Limits, RunOutcome, RunReport, SkillComponent};
use skillhost::tools::demo::article_003_tools;

use crate::agent_common::{Shop, approve_the_write};
use crate::cli::Workdir;
use crate::support::fixtures::{DemoHost, repo_root};

/// A guest that goes wrong as its input asks, in one language.
struct Faults {
    /// Its file under `fixtures/`, and its skill's name.
    file: &'static str,
    skill: &'static str,
    /// The run's error when the steps raise `Error("the steps gave up")`.
    raised: &'static str,
    /// How the stderr a trap tells begins when `run` throws past the SDK.
    uncaught: &'static str,
}

const LANGUAGES: [Faults; 2] = [
    Faults {
        file: "fixtures/py-faults.wasm",
        skill: "pyFaults",
        raised: "ValueError: the steps gave up",
        uncaught: "Traceback (most recent call last):",
    },
    Faults {
        file: "fixtures/js-faults.wasm",
        skill: "jsFaults",
        raised: "Error: the steps gave up",
        uncaught: "expected a string, received [object]",
    },
];

/// A component `skill-plugins/build-interpreted.sh` wrote:
/// `skills/<name>.wasm` or `fixtures/<name>.wasm`.
fn built(file: &str) -> PathBuf {
    let path = repo_root()
        .join("skill-plugins/target/interpreted")
        .join(file);
    assert!(
        path.is_file(),
        "{} is missing: run skill-plugins/build-interpreted.sh first",
        path.display()
    );
    path
}

/// Runs `skill` on `input`, under limits that leave the interpreter time
/// to spare on a loaded machine.
async fn fault(
    host: &DemoHost,
    skill: &SkillComponent,
    input: Value,
) -> Result<RunReport, InvokeError> {
    let limits = Limits {
        execution_time: Duration::from_secs(30),
        ..Limits::default()
    };
    skill
        .run_with_limits(&input, host.tools.clone(), limits)
        .await
}

/// The tools `report`'s steps called, in order.
fn called(report: &RunReport) -> Vec<&str> {
    report
        .tool_calls
        .iter()
        .map(|call| call.tool.as_str())
        .collect()
}

#[tokio::test]
#[ignore = "needs skill-plugins/build-interpreted.sh (components bundling an interpreter)"]
async fn a_python_skill_reads_back_and_its_steps_call_its_tools() {
    let host = DemoHost::new();
    let skill = host.load(&built("skills/checkoutQuote.wasm")).await;
    let manifest = skill.manifest();
    assert_eq!(manifest.name.as_str(), "checkoutQuote");
    assert_eq!(manifest.version.to_string(), "0.1.0");
    assert_eq!(manifest.tools, ["query_cart", "query_coupons"]);
    assert!(manifest.has_steps);
    assert_eq!(manifest.parameters["type"], "object");
    assert_eq!(manifest.test_cases.len(), 1);
    assert!(
        skill.instructions().contains("query_coupons"),
        "read at build time"
    );

    let report = skill.run(&json!({}), host.tools.clone()).await.unwrap();
    assert_eq!(called(&report), ["query_cart", "query_coupons"]);
    let RunOutcome::Done(quote) = report.outcome else {
        panic!("expected a final result")
    };
    // The seeded cart: CNY 1377.00, which reaches C001 (CNY 100 off over 1000).
    assert_eq!(quote["subtotal"], 1377.0);
    assert_eq!(quote["coupon"]["coupon_id"], "C001");
    assert_eq!(quote["to_pay"], 1277.0);
}

#[tokio::test]
#[ignore = "needs skill-plugins/build-interpreted.sh (components bundling an interpreter)"]
async fn a_javascript_skill_reads_back_and_its_steps_call_its_tools() {
    let host = DemoHost::new();
    let skill = host.load(&built("skills/deviceCheckup.wasm")).await;
    let manifest = skill.manifest();
    assert_eq!(manifest.name.as_str(), "deviceCheckup");
    assert_eq!(manifest.tools, ["list_devices", "diagnose_device"]);
    assert!(manifest.has_steps);
    assert_eq!(manifest.test_cases.len(), 1);
    assert!(skill.instructions().contains("diagnose_device"));

    let report = skill.run(&json!({}), host.tools.clone()).await.unwrap();
    // The seeded devices: the plug is offline, the vacuum reports E05.
    assert_eq!(
        called(&report),
        ["list_devices", "diagnose_device", "diagnose_device"]
    );
    let RunOutcome::Done(checkup) = report.outcome else {
        panic!("expected a final result")
    };
    assert_eq!(checkup["devices_checked"], 2);
    assert_eq!(checkup["attention"][0]["nickname"], "Bedroom plug");
    let vacuum = &checkup["attention"][1];
    assert_eq!(
        vacuum["findings"][0],
        "Living room vacuum reports error E05: main brush blocked"
    );
    let cause = vacuum["likely_causes"][0]["cause"].as_str().unwrap();
    assert!(cause.starts_with("Error E05"), "{cause}");
}

#[tokio::test]
#[ignore = "needs skill-plugins/build-interpreted.sh (components bundling an interpreter)"]
async fn exceptions_and_tool_errors_reach_the_caller_as_errors_in_either_language() {
    let host = DemoHost::new();
    for language in LANGUAGES {
        let skill = host.load(&built(language.file)).await;
        let run = |input| fault(&host, &skill, input);

        let raised = run(json!({"fault": "raise"})).await.unwrap_err();
        assert!(
            matches!(&raised, InvokeError::Failed { message, .. } if message == language.raised),
            "an exception is the run's error, not a trap: {raised:?}"
        );

        let undeclared = run(json!({"fault": "undeclared"})).await.unwrap_err();
        assert!(
            matches!(&undeclared, InvokeError::Failed { message, .. }
                if message.starts_with("ToolError: cancel_order (not-permitted): ")),
            "{undeclared:?}"
        );
        let paid = host.db.order_status("88239").unwrap();
        assert_eq!(paid.unwrap().as_str(), "paid", "cancel_order never ran");

        let caught = run(json!({"fault": "caught", "orderId": "12345"}));
        let RunOutcome::Done(caught) = caught.await.unwrap().outcome else {
            panic!("{}: expected a final result", language.skill)
        };
        assert_eq!(
            caught,
            json!({"tool": "queryOrder", "kind": "rejected", "message": "order 12345 not found"})
        );

        let unserializable = run(json!({"fault": "unserializable"})).await.unwrap_err();
        assert!(
            matches!(&unserializable, InvokeError::Failed { message, .. } if message.starts_with("TypeError: ")),
            "a result that is not JSON is an error, not a trap: {unserializable:?}"
        );

        let handed = run(json!({"fault": "handover"})).await.unwrap();
        assert!(
            matches!(&handed.outcome, RunOutcome::Handover(note) if note == "the customer must choose"),
            "{:?}",
            handed.outcome
        );

        // Past the SDK, the interpreter writes why to stderr and traps.
        let uncaught = run(json!({"fault": "uncaught"})).await.unwrap_err();
        assert!(
            matches!(&uncaught, InvokeError::Trap { message, .. }
                if message.contains(&format!("the last it wrote to stderr: {}", language.uncaught))),
            "{uncaught:?}"
        );
        let printed = run(json!({"fault": "print"})).await.unwrap();
        assert_eq!(printed.outcome, RunOutcome::Done(json!({"printed": true})));
    }
}

#[tokio::test]
#[ignore = "needs skill-plugins/build-interpreted.sh (components bundling an interpreter)"]
async fn an_interpreter_is_stopped_by_its_limits_and_the_host_carries_on() {
    let host = DemoHost::new();
    for language in LANGUAGES {
        let skill = host.load(&built(language.file)).await;
        let short = Limits {
            execution_time: Duration::from_millis(300),
            ..Limits::default()
        };
        let looped = skill
            .run_with_limits(&json!({"fault": "loop"}), host.tools.clone(), short)
            .await
            .unwrap_err();
        assert!(
            matches!(
                looped,
                InvokeError::LimitExceeded {
                    limit: Limit::ExecutionTime,
                    ..
                }
            ),
            "{looped:?}"
        );

        let hoarded = fault(&host, &skill, json!({"fault": "hoard"}))
            .await
            .unwrap_err();
        assert!(
            matches!(
                hoarded,
                InvokeError::LimitExceeded {
                    limit: Limit::Memory,
                    ..
                }
            ),
            "{hoarded:?}"
        );

        let again = fault(
            &host,
            &skill,
            json!({"fault": "caught", "orderId": "88231"}),
        );
        let again = again.await.unwrap();
        assert_eq!(again.outcome, RunOutcome::Done(json!({"found": true})));
    }
}

/// The interpreter's random bytes and clock, like a Rust guest's, are read
/// again as they were when the steps run again after a write's approval:
/// the call made is the call approved.
#[tokio::test]
#[ignore = "needs skill-plugins/build-interpreted.sh (components bundling an interpreter)"]
async fn an_interpreted_skills_write_runs_as_approved_when_its_steps_run_again() {
    for language in LANGUAGES {
        let shop = Shop::with_files(article_003_tools, &[built(language.file)]).await;
        let agent = Agent::builder(shop.skills.clone())
            .config(AgentConfig::default())
            .build()
            .unwrap();
        let input = json!({"fault": "refund", "orderId": "88231"});
        let (pending, result) = approve_the_write(&agent, language.skill, input).await;
        let approved_reason = pending.arguments["reason"].as_str().unwrap();
        assert!(approved_reason.starts_with("request "), "{approved_reason}");
        assert_eq!(result["reason"], approved_reason);
        assert_eq!(result["refund"]["refundId"], "RF20260629001");
        let refunds = shop.db.refunds_for("88231").unwrap();
        assert_eq!(refunds.len(), 1);
        assert_eq!(refunds[0].reason, approved_reason);
    }
}

/// `skillhost test --json` on the directory of the built `file`, which
/// must pass: its report.
async fn cases_beside(file: &str) -> Value {
    let dir = built(file).parent().unwrap().to_owned();
    let output = Workdir::new()
        .test_command(&["--json"], &dir)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(&stdout).unwrap()
}

#[tokio::test]
#[ignore = "needs skill-plugins/build-interpreted.sh (components bundling an interpreter)"]
async fn skillhost_test_verifies_interpreted_skills_signatures_and_passes_their_cases() {
    let report = cases_beside("skills/checkoutQuote.wasm").await;
    assert_eq!(report["passed"], 2, "{report:#}");
    assert_eq!(report["failed"], 0, "{report:#}");
    assert_eq!(report["load_failures"], json!([]), "{report:#}");
}

/// The skills `skillhost new` writes build as it tells (build-interpreted.sh
/// runs its commands), and their test cases pass.
#[tokio::test]
#[ignore = "needs skill-plugins/build-interpreted.sh (components bundling an interpreter)"]
async fn skills_from_skillhost_new_build_as_told_and_pass_their_cases() {
    let report = cases_beside("scaffolds/newPython.wasm").await;
    assert_eq!(report["passed"], 2, "{report:#}");
}
