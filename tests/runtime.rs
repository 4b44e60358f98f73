//! The sandboxed runtime on real components: the bundled skills and hostile
//! test guests from `skill-plugins/test-guests`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};

use skillhost::runtime::{
    DispatchError, InvokeError, Limit, Limits, LoadError, RunOutcome, Runtime, RuntimeConfig,
    SkillComponent, ToolDispatch,
};
use skillhost::skills::SkillName;
use skillhost::tools::ToolRegistry;

use crate::support::fixtures::{DemoHost, fixture, skill_file};
use crate::support::hand_written::{BARE, HandWritten, STDOUT};

/// Records every call that reaches dispatch, then forwards it to the demo tools.
struct Recorder {
    host: Arc<DemoHost>,
    calls: Mutex<Vec<String>>,
}

#[async_trait]
impl ToolDispatch for Recorder {
    async fn call_tool(
        &self,
        skill: &SkillName,
        tool: &str,
        arguments: Value,
    ) -> Result<Value, DispatchError> {
        self.calls.lock().unwrap().push(tool.to_owned());
        self.host.tools.call_tool(skill, tool, arguments).await
    }
}

fn recorder(host: &Arc<DemoHost>) -> Arc<Recorder> {
    Arc::new(Recorder {
        host: host.clone(),
        calls: Mutex::new(Vec::new()),
    })
}

/// Limits whose execution time runs out quickly, for the tests of that
/// limit: a guest that does not stop by itself.
fn short_limits() -> Limits {
    Limits {
        execution_time: Duration::from_millis(300),
        ..Limits::default()
    }
}

/// Limits with time to spare on a loaded machine, for runs that must finish
/// or be stopped by another limit: time running out first would fail them.
fn ample_time() -> Limits {
    Limits {
        execution_time: Duration::from_secs(30),
        ..Limits::default()
    }
}

#[tokio::test]
async fn process_refund_manifest_and_instructions_read_back() {
    let host = DemoHost::new();
    let skill = host.load(&skill_file("processRefund")).await;
    let manifest = skill.manifest();
    assert_eq!(manifest.name.as_str(), "processRefund");
    assert_eq!(manifest.tools, ["queryOrder", "applyRefund"]);
    assert!(manifest.unlocks.is_empty());
    assert!(manifest.has_steps);
    assert_eq!(manifest.parameters["type"], "object");
    assert_eq!(
        manifest.parameters["required"],
        json!(["orderId", "reason"])
    );
    assert!(skill.instructions().contains("applyRefund"));
    assert!(skill.digest().starts_with("sha256:"));
}

#[tokio::test]
async fn instruction_only_skill_declares_its_unlocks() {
    let host = DemoHost::new();
    let skill = host.load(&skill_file("order_change")).await;
    let manifest = skill.manifest();
    assert!(!manifest.has_steps);
    assert_eq!(manifest.unlocks, ["cancel_order", "change_address"]);
    assert!(!skill.instructions().trim().is_empty());
    let error = skill.run(&json!({}), host.tools.clone()).await.unwrap_err();
    assert!(matches!(error, InvokeError::NoSteps { .. }), "{error}");
}

#[tokio::test]
async fn process_refund_on_a_delivered_order_writes_the_refund() {
    let host = DemoHost::new();
    let skill = host.load(&skill_file("processRefund")).await;
    let input = json!({ "orderId": "88231", "reason": "the robot vacuum is broken" });
    let report = skill.run(&input, host.tools.clone()).await.unwrap();
    let RunOutcome::Done(result) = report.outcome else {
        panic!("expected a final result, got {:?}", report.outcome)
    };
    let refunds = host.db.refunds_for("88231").unwrap();
    assert_eq!(refunds.len(), 1, "one refund row for 88231");
    let text = result.to_string();
    assert!(
        text.contains(&refunds[0].refund_id),
        "result names the refund id: {text}"
    );
    assert!(text.contains("S10 Pro"), "result names the product: {text}");
    let tools: Vec<_> = report.tool_calls.iter().map(|c| c.tool.as_str()).collect();
    assert_eq!(tools, ["queryOrder", "applyRefund"]);
}

#[tokio::test]
async fn process_refund_on_an_undelivered_order_writes_nothing() {
    let host = DemoHost::new();
    let skill = host.load(&skill_file("processRefund")).await;
    let order = host.undelivered_order();
    let input = json!({ "orderId": order, "reason": "changed my mind" });
    let report = skill.run(&input, host.tools.clone()).await.unwrap();
    let RunOutcome::Done(result) = report.outcome else {
        panic!("expected a final result")
    };
    assert!(host.db.refunds_for(&order).unwrap().is_empty());
    let text = result.to_string().to_lowercase();
    assert!(
        text.contains("deliver"),
        "result explains refunds need delivery: {text}"
    );
    let tools: Vec<_> = report.tool_calls.iter().map(|c| c.tool.as_str()).collect();
    assert_eq!(tools, ["queryOrder"], "applyRefund is never attempted");
}

#[tokio::test]
async fn process_refund_on_an_unknown_order_says_the_number_may_be_wrong() {
    let host = DemoHost::new();
    let skill = host.load(&skill_file("processRefund")).await;
    let input = json!({ "orderId": "12345", "reason": "broken" });
    let report = skill.run(&input, host.tools.clone()).await.unwrap();
    let RunOutcome::Done(result) = report.outcome else {
        panic!("expected a final result")
    };
    assert!(
        result.to_string().to_lowercase().contains("wrong"),
        "{result}"
    );
}

#[tokio::test]
async fn inquire_order_status_follows_the_tracking_number() {
    let host = DemoHost::new();
    let skill = host.load(&skill_file("inquireOrderStatus")).await;
    let report = skill
        .run(&json!({ "orderId": "88231" }), host.tools.clone())
        .await
        .unwrap();
    let tools: Vec<_> = report.tool_calls.iter().map(|c| c.tool.as_str()).collect();
    assert_eq!(tools, ["queryOrder", "queryLogistics"]);
    let RunOutcome::Done(result) = report.outcome else {
        panic!("expected a final result")
    };
    assert!(result.to_string().contains("SF1234567890"), "{result}");
}

#[tokio::test]
async fn skill_input_is_validated_against_its_schema() {
    let host = DemoHost::new();
    let skill = host.load(&skill_file("processRefund")).await;
    let error = skill
        .run(&json!({ "orderId": 88231 }), host.tools.clone())
        .await
        .unwrap_err();
    assert!(matches!(error, InvokeError::InvalidInput { .. }), "{error}");
    assert!(
        error.to_string().contains("orderId") || error.to_string().contains("reason"),
        "{error}"
    );
}

#[tokio::test]
async fn undeclared_tool_is_refused_and_never_runs() {
    let host = Arc::new(DemoHost::new());
    let skill = host.load(&fixture("undeclared-caller")).await;
    let dispatch = recorder(&host);
    let report = skill.run(&json!({}), dispatch.clone()).await.unwrap();
    assert!(
        dispatch.calls.lock().unwrap().is_empty(),
        "dispatch never saw the call"
    );
    assert!(host.db.refunds_for("88231").unwrap().is_empty());
    let RunOutcome::Done(result) = report.outcome else {
        panic!("expected a final result")
    };
    let text = result.to_string();
    assert!(
        text.contains("not-permitted")
            || text.contains("NotPermitted")
            || text.contains("not permitted"),
        "the guest saw a not-permitted error: {text}"
    );
}

#[tokio::test]
async fn an_undeclared_tool_with_a_huge_name_is_refused_with_the_name_clipped() {
    let host = Arc::new(DemoHost::new());
    let skill = host.load(&fixture("undeclared-caller")).await;
    let report = skill
        .run(&json!({"nameBytes": 512 << 10}), recorder(&host))
        .await
        .unwrap();
    let RunOutcome::Done(result) = report.outcome else {
        panic!("expected a final result")
    };
    let told = result["error"]["message"].as_str().unwrap();
    assert!(told.contains("bytes cut") && told.len() < 1024, "{told}");
    assert!(
        report.tool_calls[0].tool.len() < 128,
        "the record keeps it clipped"
    );

    // Past what one call may copy to the host: the output limit stops it
    // before the host holds the name.
    let error = skill
        .run(&json!({"nameBytes": 2 << 20}), recorder(&host))
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            InvokeError::LimitExceeded {
                limit: Limit::Output,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("in one call"), "{error}");
}

/// Runs a hostile guest, checks which limit stopped it, then checks the
/// same runtime still serves a normal invocation.
async fn assert_stopped_by(
    guest: &str,
    input: Value,
    limits: Limits,
    expected: Option<Limit>,
) -> InvokeError {
    let host = DemoHost::new();
    let hostile = host.load(&fixture(guest)).await;
    let error = hostile
        .run_with_limits(&input, host.tools.clone(), limits)
        .await
        .expect_err("a hostile guest must not succeed");
    match (expected, &error) {
        (Some(limit), InvokeError::LimitExceeded { limit: hit, .. }) => {
            assert_eq!(*hit, limit, "{error}")
        }
        (None, InvokeError::Trap { .. }) => {}
        _ => panic!("{guest}: unexpected error {error:?}"),
    }
    let refund = host.load(&skill_file("processRefund")).await;
    let input = json!({ "orderId": "88231", "reason": "broken" });
    let report = refund
        .run(&input, host.tools.clone())
        .await
        .expect("host still serves");
    assert!(matches!(report.outcome, RunOutcome::Done(_)));
    error
}

#[tokio::test]
async fn panicking_guest_traps_and_the_host_carries_on() {
    let error = assert_stopped_by("panicker", json!({}), Limits::default(), None).await;
    // The panic's message, which the SDK's hook logs before the trap: what
    // a caller (or a model) needs, where the backtrace's frames are not.
    assert_eq!(
        error.to_string(),
        "skill `panicker` trapped: wasm trap: wasm `unreachable` instruction executed; the last \
         error it logged: skill panicked at test-guests/panicker/src/lib.rs:14:5:\\npanicker: \
         deliberate panic in run"
    );
}

/// Regression: a guest built without the SDK (a wasm32-wasip2 program, an
/// interpreted skill's raw bindings) logs nothing before it traps; what it
/// wrote to stderr, the reason, reached only the host's log at warn.
#[tokio::test]
async fn trap_of_a_guest_that_logged_no_error_tells_the_last_it_wrote_to_stderr() {
    let error = assert_stopped_by("wasi-crasher", json!({}), Limits::default(), None).await;
    assert_eq!(
        error.to_string(),
        "skill `wasiCrasher` trapped: wasm trap: wasm `unreachable` instruction executed; the \
         last it wrote to stderr: looking up the first order\\nTraceback (most recent call \
         last):\\n  File \"app.py\", line 9, in run\\n    order = orders[0]\\nIndexError: list \
         index out of range"
    );
}

#[tokio::test]
async fn infinite_loop_is_stopped_by_the_execution_time_limit() {
    let error = assert_stopped_by(
        "spinner",
        json!({}),
        short_limits(),
        Some(Limit::ExecutionTime),
    )
    .await;
    assert!(error.to_string().contains("execution-time"), "{error}");
}

/// Regression: a guest waiting inside WASI (a sleep on a clock pollable)
/// runs no wasm, so the epoch deadline never stopped it: it kept its
/// instance slot for as long as it asked to sleep.
#[tokio::test]
async fn a_guest_sleeping_in_wasi_is_stopped_by_the_execution_time_limit() {
    let ten_minutes = json!({ "millis": 600_000 });
    let stopped = assert_stopped_by(
        "wasi-sleeper",
        ten_minutes,
        short_limits(),
        Some(Limit::ExecutionTime),
    );
    let error = tokio::time::timeout(Duration::from_secs(60), stopped)
        .await
        .expect("stopped by its limit, not at the end of its sleep");
    assert!(error.to_string().contains("execution-time"), "{error}");

    let host = DemoHost::new();
    let within = json!({ "millis": 5 });
    assert_eq!(
        sleeper_result(&host, within, ample_time()).await,
        json!({ "slept": 5, "randomBytes": 0, "pollables": 0 })
    );
    assert_eq!(host.runtime.instance_slots().in_use, 0);
}

/// What `wasi-sleeper` answers to `input`, which it must finish.
async fn sleeper_result(host: &DemoHost, input: Value, limits: Limits) -> Value {
    let sleeper = host.load(&fixture("wasi-sleeper")).await;
    let report = sleeper
        .run_with_limits(&input, host.tools.clone(), limits)
        .await
        .expect("wasi-sleeper finishes");
    let RunOutcome::Done(result) = report.outcome else {
        panic!("no result: {:?}", report.outcome);
    };
    result
}

/// Every WASI resource a guest holds (a pollable, a stream) is host memory
/// outside its memory limit: a guest holding more than the sandbox allows
/// traps; one holding a few is served.
#[tokio::test]
async fn a_guest_hoarding_wasi_resources_traps() {
    let few = json!({ "millis": 0, "pollables": 100 });
    let result = sleeper_result(&DemoHost::new(), few, Limits::default()).await;
    assert_eq!(result["pollables"], 100);

    let hoard = json!({ "millis": 0, "pollables": 200_000 });
    let error = assert_stopped_by("wasi-sleeper", hoard, Limits::default(), None).await;
    assert!(error.to_string().contains("resource table"), "{error}");
}

/// The execution time of the guest that waits on [`SlowTools`].
const SLOW_TOOL_LIMIT: Duration = Duration::from_secs(3);

/// How long each call to [`SlowTools`] takes: longer than the whole
/// [`SLOW_TOOL_LIMIT`], so that the guest would be out of time were the
/// wait counted as its own, while the guest's own work (instantiation, a
/// few calls) has the whole limit.
const SLOW_TOOL_PAUSE: Duration = Duration::from_secs(4);

/// Forwards to the demo tools after [`SLOW_TOOL_PAUSE`].
struct SlowTools(Arc<DemoHost>);

#[async_trait]
impl ToolDispatch for SlowTools {
    async fn call_tool(
        &self,
        skill: &SkillName,
        tool: &str,
        arguments: Value,
    ) -> Result<Value, DispatchError> {
        tokio::time::sleep(SLOW_TOOL_PAUSE).await;
        self.0.tools.call_tool(skill, tool, arguments).await
    }
}

/// The watchdog of a guest that imports WASI counts guest time as the epoch
/// callback does: a tool call slower than the whole limit is not the
/// guest's time, and does not stop it.
#[tokio::test]
async fn a_wasi_guest_waiting_on_a_slow_tool_is_not_out_of_time() {
    let host = Arc::new(DemoHost::new());
    let guest = host.load(&fixture("wasi-replay")).await;
    let slow: Arc<dyn ToolDispatch> = Arc::new(SlowTools(host.clone()));
    let limits = Limits {
        execution_time: SLOW_TOOL_LIMIT,
        ..Limits::default()
    };
    let report = guest
        .run_with_limits(&json!({ "orderId": "88231" }), slow, limits)
        .await
        .expect("tool calls each slower than the whole limit");
    let RunOutcome::Done(result) = report.outcome else {
        panic!("no result: {:?}", report.outcome);
    };
    assert_eq!(result["refund"]["success"], true, "{result}");
    assert_eq!(report.tool_calls.len(), 2, "{:?}", report.tool_calls);
}

/// Same while the host reads the manifest: loading such a file is refused
/// at the limit instead of holding an instance slot for the whole sleep.
#[tokio::test]
async fn a_guest_sleeping_in_wasi_while_described_is_refused_at_load() {
    let runtime = Runtime::new(RuntimeConfig {
        limits: short_limits(),
        ..RuntimeConfig::default()
    })
    .unwrap();
    let bytes = std::fs::read(fixture("wasi-sleepy-load")).unwrap();
    let no_tools = ToolRegistry::new();
    let load = SkillComponent::load(&runtime, bytes, &no_tools);
    let Err(error) = tokio::time::timeout(Duration::from_secs(60), load)
        .await
        .expect("refused at its limit, not at the end of its sleep")
    else {
        panic!("a guest that never finishes describing itself was loaded");
    };
    assert!(matches!(error, LoadError::Describe(_)), "{error}");
    assert!(error.to_string().contains("execution-time"), "{error}");
    assert_eq!(runtime.instance_slots().in_use, 0);
}

/// WASI hands out random bytes the host allocates before the guest's memory
/// limit applies: a request larger than a call may have traps with the
/// limit named, and allocates nothing; a key-sized request is served.
#[tokio::test]
async fn a_guest_asking_wasi_for_too_many_random_bytes_traps() {
    let key = json!({ "millis": 0, "randomBytes": 32 });
    assert_eq!(
        sleeper_result(&DemoHost::new(), key, Limits::default()).await,
        json!({ "slept": 0, "randomBytes": 32, "pollables": 0 })
    );

    let hoard = json!({ "millis": 0, "randomBytes": 32 << 20 });
    let error = assert_stopped_by("wasi-sleeper", hoard, ample_time(), None).await;
    assert!(error.to_string().contains("exceeds limit"), "{error}");
}

#[tokio::test]
async fn memory_bomb_is_stopped_by_the_memory_limit() {
    let limits = Limits {
        memory_bytes: 16 << 20,
        ..ample_time()
    };
    let error = assert_stopped_by("memory-bomb", json!({}), limits, Some(Limit::Memory)).await;
    assert!(error.to_string().contains("memory"), "{error}");
}

/// The SDK's allocator: blocks grown, moved and freed inside its arena and
/// past its end (in dlmalloc) keep their bytes, and a zeroed block taken
/// where a dirty one was given back is zero.
#[tokio::test]
async fn guest_heap_blocks_keep_their_bytes_inside_and_past_the_arena() {
    let host = DemoHost::new();
    let skill = host.load(&fixture("heap-churn")).await;
    // The arena is 256 KiB: the first size stays inside it, the second
    // (two buffers of 1 MiB) runs past it.
    for bytes in [10_000, 1 << 20] {
        let input = json!({ "bytes": bytes });
        let report = skill
            .run_with_limits(&input, host.tools.clone(), ample_time())
            .await
            .unwrap_or_else(|e| panic!("{bytes} bytes: {e}"));
        let expected = json!({ "lengths": [bytes, bytes], "intact": true, "zeroed": true });
        assert_eq!(report.outcome, RunOutcome::Done(expected), "{bytes} bytes");
    }
}

#[tokio::test]
async fn call_storm_is_stopped_by_the_tool_call_limit() {
    let limits = Limits {
        tool_calls: 8,
        ..ample_time()
    };
    let error = assert_stopped_by("call-storm", json!({}), limits, Some(Limit::ToolCalls)).await;
    assert!(error.to_string().contains("tool-call"), "{error}");
}

#[tokio::test]
async fn oversized_result_is_stopped_by_the_output_limit() {
    let limits = Limits {
        output_bytes: 64 << 10,
        ..ample_time()
    };
    let input = json!({ "bytes": 1 << 20 });
    assert_stopped_by("output-bomb", input, limits, Some(Limit::Output)).await;
}

#[tokio::test]
async fn an_oversized_failure_is_stopped_by_the_output_limit_too() {
    let limits = Limits {
        output_bytes: 64 << 10,
        ..ample_time()
    };
    let input = json!({ "bytes": 1 << 20, "fail": true });
    assert_stopped_by("output-bomb", input, limits, Some(Limit::Output)).await;
}

#[tokio::test]
async fn many_invocations_run_concurrently_on_one_component() {
    let host = DemoHost::new();
    let skill = host.load(&skill_file("inquireOrderStatus")).await;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..32 {
        let skill = skill.clone();
        let tools = host.tools.clone();
        tasks.spawn(async move { skill.run(&json!({ "orderId": "88231" }), tools).await });
    }
    while let Some(result) = tasks.join_next().await {
        assert!(matches!(
            result.unwrap().unwrap().outcome,
            RunOutcome::Done(_)
        ));
    }
}

/// WASI is linked with an empty context: a guest that imports filesystem,
/// environment and sockets loads and runs, and finds nothing to reach.
#[tokio::test]
async fn wasi_guest_runs_with_nothing_granted() {
    let host = DemoHost::new();
    let prober = host.load(&fixture("wasi-prober")).await;
    let report = prober.run(&json!({}), host.tools.clone()).await.unwrap();
    let RunOutcome::Done(result) = report.outcome else {
        panic!("expected a final result")
    };
    assert_eq!(
        result["preopened_directories"],
        json!([]),
        "no files: {result}"
    );
    assert_eq!(result["environment"], json!([]), "no environment: {result}");
    assert_eq!(result["arguments"], json!([]), "no arguments: {result}");
    let tcp = result["tcp"].as_str().unwrap();
    assert!(tcp.contains("refused"), "no network: {tcp}");
    assert_eq!(
        result["stdout_written"], true,
        "stdout is captured, not refused: {result}"
    );
}

/// A component importing an interface the host does not provide at all is
/// refused at load, and the error names the import.
#[tokio::test]
async fn component_with_an_unknown_import_is_refused_naming_it() {
    let host = DemoHost::new();
    let component = wat::parse_str(
        r#"(component
            (import "wasi:http/outgoing-handler@0.2.0" (instance (export "handle" (func))))
        )"#,
    )
    .unwrap();
    let error = SkillComponent::load(&host.runtime, component, &host.tools)
        .await
        .err()
        .expect("an unknown import is refused");
    assert!(
        error.to_string().contains("wasi:http/outgoing-handler"),
        "{error}"
    );
}

/// Holds every tool call until `open` is released, then forwards it.
struct Gate {
    host: Arc<DemoHost>,
    open: tokio::sync::Semaphore,
    waiting: tokio::sync::Notify,
    arrived: AtomicUsize,
}

impl Gate {
    /// A gate, closed, in front of `host`'s tools.
    fn closed(host: &Arc<DemoHost>) -> Arc<Self> {
        Arc::new(Self {
            host: host.clone(),
            open: tokio::sync::Semaphore::new(0),
            waiting: tokio::sync::Notify::new(),
            arrived: AtomicUsize::new(0),
        })
    }

    /// Returns once `calls` tool calls are held at the gate.
    async fn holding(&self, calls: usize) {
        while self.arrived.load(Ordering::SeqCst) < calls {
            self.waiting.notified().await;
        }
    }
}

/// A demo host whose instance pool has `slots` slots.
fn host_with_slots(slots: u32) -> Arc<DemoHost> {
    let mut host = DemoHost::new();
    host.runtime = Runtime::new(RuntimeConfig {
        max_concurrent_instances: slots,
        ..Default::default()
    })
    .unwrap();
    Arc::new(host)
}

#[async_trait]
impl ToolDispatch for Gate {
    async fn call_tool(
        &self,
        skill: &SkillName,
        tool: &str,
        arguments: Value,
    ) -> Result<Value, DispatchError> {
        self.arrived.fetch_add(1, Ordering::SeqCst);
        self.waiting.notify_one();
        let _pass = self.open.acquire().await.expect("the gate stays");
        self.host.tools.call_tool(skill, tool, arguments).await
    }
}

/// More invocations than the instance pool holds (a slow tool keeps each
/// one's instance alive): the extra ones wait for a slot instead of failing,
/// and a skill can still be loaded meanwhile.
#[tokio::test]
async fn invocations_beyond_the_pool_wait_for_a_slot() {
    let host = host_with_slots(2);
    let skill = host.load(&skill_file("inquireOrderStatus")).await;
    let gate = Gate::closed(&host);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..6 {
        let (skill, gate) = (skill.clone(), gate.clone());
        let dispatch: Arc<dyn ToolDispatch> = gate;
        tasks.spawn(async move { skill.run(&json!({ "orderId": "88231" }), dispatch).await });
    }
    // Both slots taken, each by an invocation parked in a tool call.
    gate.holding(2).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        gate.arrived.load(Ordering::SeqCst),
        2,
        "the others wait for a slot"
    );
    assert!(
        tasks.try_join_next().is_none(),
        "none failed for want of a slot"
    );
    let slots = host.runtime.instance_slots();
    assert_eq!((slots.total, slots.in_use, slots.waiting), (2, 2, 4));
    // Loading reads the manifest from an instance of its own: it waits too.
    let loading = {
        let host = host.clone();
        tokio::spawn(async move { host.load(&skill_file("processRefund")).await })
    };
    gate.open.add_permits(1000);
    while let Some(result) = tasks.join_next().await {
        let report = result.unwrap().expect("every invocation runs");
        assert!(matches!(report.outcome, RunOutcome::Done(_)));
    }
    assert_eq!(loading.await.unwrap().name().as_str(), "processRefund");
}

/// A memory limit below what a component's memory starts at refuses it at
/// load, and says so in those terms: the whole sandbox's, or the skill's own
/// (other skills on that runtime still load).
#[tokio::test]
async fn a_component_needing_more_memory_than_the_limit_is_refused_saying_so() {
    let one_mib = Limits {
        memory_bytes: 1 << 20,
        ..Limits::default()
    };
    let sandbox_wide = RuntimeConfig {
        limits: one_mib,
        ..Default::default()
    };
    let its_own = RuntimeConfig {
        skill_limits: [(SkillName::new("processRefund").unwrap(), one_mib)].into(),
        ..Default::default()
    };
    for (config, others_load) in [(sandbox_wide, false), (its_own, true)] {
        let mut host = DemoHost::new();
        host.runtime = Runtime::new(RuntimeConfig {
            max_concurrent_instances: 2,
            ..config
        })
        .unwrap();
        let bytes = std::fs::read(skill_file("processRefund")).unwrap();
        let error = SkillComponent::load(&host.runtime, bytes, &host.tools)
            .await
            .err()
            .expect("refused");
        let LoadError::MemoryLimit { needs, allowed } = error else {
            panic!("expected the memory limit, got {error}");
        };
        assert_eq!(allowed, 1 << 20);
        assert!(needs > 1 << 20, "{needs}");
        let message = error.to_string();
        assert!(
            message.contains("more than the 1.0 MiB the sandbox allows"),
            "{message}"
        );
        if others_load {
            let inquire = host.load(&skill_file("inquireOrderStatus")).await;
            assert_eq!(inquire.limits(), Limits::default());
        }
    }
}

/// Limits set for one skill by name replace the defaults for it alone: the
/// memory bomb may grow past the default (the pool's slots are sized for the
/// largest limit) up to its own, and stops there; the refund skill keeps the
/// defaults.
#[tokio::test]
async fn a_skills_own_limits_replace_the_defaults_for_it_alone() {
    let defaults = Limits {
        memory_bytes: 16 << 20,
        ..ample_time()
    };
    let bomb_limits = Limits {
        memory_bytes: 48 << 20,
        ..defaults
    };
    let mut host = DemoHost::new();
    host.runtime = Runtime::new(RuntimeConfig {
        limits: defaults,
        skill_limits: [(SkillName::new("memoryBomb").unwrap(), bomb_limits)].into(),
        max_concurrent_instances: 4,
        ..Default::default()
    })
    .unwrap();
    let bomb = host.load(&fixture("memory-bomb")).await;
    assert_eq!(bomb.limits(), bomb_limits);
    let error = bomb
        .run(&json!({}), host.tools.clone())
        .await
        .expect_err("the bomb is stopped");
    let InvokeError::LimitExceeded { limit, detail, .. } = &error else {
        panic!("expected the memory limit, got {error}");
    };
    assert_eq!(*limit, Limit::Memory);
    let grew_to: usize = detail
        .strip_prefix("tried to grow linear memory to ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|bytes| bytes.parse().ok())
        .unwrap_or_else(|| panic!("unexpected detail: {detail}"));
    assert!(
        grew_to > 16 << 20,
        "stopped at the default instead: {detail}"
    );
    assert!(
        detail.ends_with(&format!("more than {} allowed", 48 << 20)),
        "{detail}"
    );

    let refund = host.load(&skill_file("processRefund")).await;
    assert_eq!(refund.limits(), defaults);
    let input = json!({ "orderId": "88231", "reason": "broken" });
    let report = refund.run(&input, host.tools.clone()).await.unwrap();
    assert!(matches!(report.outcome, RunOutcome::Done(_)));
}

/// Limits replaced on a running runtime hold the invocations that start
/// after, of skills already loaded; new limits that would change a memory
/// limit (which sized the pool and decided what loads) change nothing.
#[tokio::test]
async fn limits_replaced_at_run_time_hold_the_next_invocations_but_memory_stays() {
    let host = DemoHost::new();
    let refund = host.load(&skill_file("processRefund")).await;
    let inquire = host.load(&skill_file("inquireOrderStatus")).await;
    let order = json!({ "orderId": "88231" });
    assert!(inquire.run(&order, host.tools.clone()).await.is_ok());

    let tight = Limits {
        output_bytes: 16,
        ..Limits::default()
    };
    let inquire_name = inquire.name().clone();
    host.runtime
        .replace_limits(Limits::default(), [(inquire_name.clone(), tight)].into())
        .unwrap();
    assert_eq!(inquire.limits(), tight);
    assert_eq!(refund.limits(), Limits::default());
    let error = inquire.run(&order, host.tools.clone()).await.unwrap_err();
    assert!(
        matches!(
            error,
            InvokeError::LimitExceeded {
                limit: Limit::Output,
                ..
            }
        ),
        "{error}"
    );

    let more_memory = Limits {
        memory_bytes: 128 << 20,
        ..Limits::default()
    };
    for (limits, skill_limits) in [
        (more_memory, [].into()),
        (
            Limits::default(),
            [(inquire_name.clone(), more_memory)].into(),
        ),
    ] {
        let refused = host.runtime.replace_limits(limits, skill_limits);
        let error = refused.expect_err("a memory limit is fixed");
        assert!(
            error.to_string().contains(
                "would change from 64.0 MiB to 128.0 MiB, which takes effect only at a restart"
            ),
            "{error}"
        );
        assert_eq!(inquire.limits(), tight, "nothing changed");
    }

    host.runtime
        .replace_limits(Limits::default(), [].into())
        .unwrap();
    assert_eq!(inquire.limits(), Limits::default());
    assert!(inquire.run(&order, host.tools.clone()).await.is_ok());
}

/// A skill answering `{"ok":true}` from `extra_memories` more core
/// instances than its own, each with a memory.
fn skill_with_extra_memories(name: &str, extra_memories: usize) -> Vec<u8> {
    HandWritten {
        name,
        extra_memories,
        ..BARE
    }
    .build()
}

/// A skill split over more core instances and memories than one slot brings
/// to the pool: its invocations and loads wait while others hold the pool's
/// shared totals, then run one after the other, instead of failing on the
/// pool's limit.
#[tokio::test]
async fn an_invocation_needing_more_than_a_slot_brings_waits_for_room_in_the_pool() {
    let host = host_with_slots(3);
    // The pool holds 6 memories; this skill needs all of them.
    let heavy_bytes = skill_with_extra_memories("manyMemories", 5);
    let heavy = SkillComponent::load(&host.runtime, heavy_bytes.clone(), &host.tools)
        .await
        .expect("a skill the pool can hold loads");
    let heavy_run = heavy.run(&json!({}), host.tools.clone()).await.unwrap();
    assert_eq!(heavy_run.outcome, RunOutcome::Done(json!({"ok": true})));

    // A Rust skill parked in a tool call holds a memory meanwhile.
    let light = host.load(&skill_file("inquireOrderStatus")).await;
    let gate = Gate::closed(&host);
    let parked = {
        let dispatch: Arc<dyn ToolDispatch> = gate.clone();
        tokio::spawn(async move { light.run(&json!({ "orderId": "88231" }), dispatch).await })
    };
    gate.holding(1).await;
    let waiting_run = {
        let (heavy, tools) = (heavy.clone(), host.tools.clone());
        tokio::spawn(async move { heavy.run(&json!({}), tools).await })
    };
    // Loading reads the manifest from an instance of its own: it waits too.
    let waiting_load = {
        let host = host.clone();
        tokio::spawn(
            async move { SkillComponent::load(&host.runtime, heavy_bytes, &host.tools).await },
        )
    };
    // The load compiles first: wait until both are waiting, however slow.
    tokio::time::timeout(Duration::from_secs(30), async {
        while host.runtime.instance_slots().waiting < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("both wait for room");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiting_run.is_finished() && !waiting_load.is_finished());
    let slots = host.runtime.instance_slots();
    assert_eq!((slots.in_use, slots.waiting), (3, 2));

    // Each takes all the memories in turn: the one woken second waits again.
    gate.open.add_permits(1000);
    parked
        .await
        .unwrap()
        .expect("the parked invocation finishes");
    let report = waiting_run.await.unwrap().expect("the waiting run runs");
    assert_eq!(report.outcome, RunOutcome::Done(json!({"ok": true})));
    let loaded = waiting_load.await.unwrap().expect("the waiting load loads");
    assert_eq!(loaded.name().as_str(), "manyMemories");
    assert_eq!(host.runtime.instance_slots().waiting, 0);
}

/// Why a skill with `extra` memories besides its own is refused at load by
/// a pool of `slots`.
async fn refused_with_memories(slots: u32, extra: usize) -> String {
    let host = host_with_slots(slots);
    SkillComponent::load(
        &host.runtime,
        skill_with_extra_memories("manyMemories", extra),
        &host.tools,
    )
    .await
    .err()
    .expect("refused")
    .to_string()
}

/// A component needing more memories than the whole pool holds could never
/// be instantiated: it is refused at load, naming what it needs, instead of
/// waiting forever.
#[tokio::test]
async fn a_component_needing_more_than_the_whole_pool_is_refused_at_load() {
    let message = refused_with_memories(2, 4).await;
    assert!(
        message.contains("5 Wasm linear memories") && message.contains("maximum of 4"),
        "{message}"
    );
}

/// However large the pool, one component may take only its share: one
/// needing more memories than that is refused at load, so that it can never
/// hold the whole pool while other skills wait.
#[tokio::test]
async fn a_component_needing_more_than_its_share_of_a_large_pool_is_refused_at_load() {
    let message = refused_with_memories(128, 8).await;
    assert!(
        message.contains("9 Wasm linear memories") && message.contains("maximum of 8"),
        "{message}"
    );
}

/// Regression: a trap's message carries wasmtime's backtrace, which names
/// the guest's functions as its name section chose. Their line breaks
/// reached the log raw, and a function named after wasmtime's hostcall-fuel
/// error made an ordinary trap report the output limit.
#[tokio::test]
async fn a_trap_in_a_function_named_like_a_host_error_is_a_trap_with_the_name_escaped() {
    let host = DemoHost::new();
    let bytes = HandWritten {
        steps: r#"
          (func $steps (call $"fuel allocated for hostcalls\nINFO forged line"))
          (func $"fuel allocated for hostcalls\nINFO forged line" unreachable)"#,
        ..BARE
    }
    .build();
    let skill = SkillComponent::load(&host.runtime, bytes, &host.tools)
        .await
        .unwrap();
    let error = skill
        .run_with_limits(&json!({}), host.tools.clone(), ample_time())
        .await
        .unwrap_err();
    let InvokeError::Trap {
        message, backtrace, ..
    } = &error
    else {
        panic!("expected a trap, got {error:?}");
    };
    assert_eq!(
        message,
        "wasm trap: wasm `unreachable` instruction executed"
    );
    let backtrace = backtrace.as_deref().expect("wasmtime's backtrace");
    assert!(
        backtrace.contains("fuel allocated for hostcalls\\nINFO forged line"),
        "the frame is named, escaped: {backtrace}"
    );
    assert!(!backtrace.contains('\n'), "{backtrace}");
}

/// A WASI guest writing 40 lines of 4 KiB to stdout, each with one
/// `blocking-write-and-flush`, trapping if one fails: as Rust's `println!`
/// panics and Python's `print` raises.
pub(crate) fn chatty_guest() -> Vec<u8> {
    HandWritten {
        name: "chatty",
        memory: "3",
        steps: r#"
          (func $steps (local $stdout i32) (local $written i32)
            (memory.fill (i32.const 0x10000) (i32.const 0x78) (i32.const 4095))
            (i32.store8 (i32.const 0x10fff) (i32.const 10))
            (local.set $stdout (call $get-stdout))
            (loop $lines
              (call $write (local.get $stdout) (i32.const 0x10000) (i32.const 4096)
                (i32.const 0x20000))
              (if (i32.load8_u (i32.const 0x20000)) (then unreachable))
              (local.set $written (i32.add (local.get $written) (i32.const 1)))
              (br_if $lines (i32.lt_u (local.get $written) (i32.const 40)))))"#,
        ..STDOUT
    }
    .build()
}

/// Regression: stdout was captured in a pipe whose writes failed once it
/// held 64 KiB, so an honest guest printing more trapped. Past the
/// capture, writes succeed and what they carry is dropped.
#[tokio::test]
async fn a_guest_printing_more_than_the_captured_output_runs_to_its_end() {
    let host = DemoHost::new();
    let skill = SkillComponent::load(&host.runtime, chatty_guest(), &host.tools)
        .await
        .unwrap();
    let report = skill
        .run_with_limits(&json!({}), host.tools.clone(), ample_time())
        .await
        .expect("the guest's writes succeed");
    assert_eq!(report.outcome, RunOutcome::Done(json!({"ok": true})));
}

/// Regression: the memory limiter counted a growth as soon as it allowed
/// it, even when wasmtime then refused it (past the memory's own maximum).
/// A guest whose `memory.grow` kept failing, as it should, climbed toward
/// the limit, and a later growth that fits trapped on it.
#[tokio::test]
async fn growth_refused_past_a_memorys_maximum_does_not_count_against_the_limit() {
    let host = DemoHost::new();
    let bytes = HandWritten {
        memory: "1 16",
        steps: r#"
          (func $steps (local $tries i32)
            (loop $refused
              (if (i32.ne (memory.grow (i32.const 100)) (i32.const -1)) (then unreachable))
              (local.set $tries (i32.add (local.get $tries) (i32.const 1)))
              (br_if $refused (i32.lt_u (local.get $tries) (i32.const 20))))
            (if (i32.ne (memory.grow (i32.const 1)) (i32.const 1)) (then unreachable)))"#,
        ..BARE
    }
    .build();
    let skill = SkillComponent::load(&host.runtime, bytes, &host.tools)
        .await
        .unwrap();
    // 20 refusals of 100 pages each: 125 MiB, twice the limit.
    let report = skill
        .run_with_limits(&json!({}), host.tools.clone(), ample_time())
        .await
        .expect("the last growth fits");
    assert_eq!(report.outcome, RunOutcome::Done(json!({"ok": true})));
}

/// Regression: the pool's totals were `max_concurrent_instances` times 32
/// (core instances), 2 and 4, multiplied unchecked: a huge value panicked
/// in a debug build and wrapped to a small pool in a release build.
#[test]
fn a_pool_too_large_to_count_is_refused_naming_the_setting() {
    let config = RuntimeConfig {
        max_concurrent_instances: u32::MAX,
        ..Default::default()
    };
    let error = Runtime::new(config).err().expect("refused");
    assert!(
        error.to_string().contains("max_concurrent_instances"),
        "{error}"
    );
}
