//! Warm invocation of `processRefund` against the floor, in one run.
//!
//! Floor: `processRefund` itself instantiated from its `InstancePre` in a
//! fresh sandboxed store, which is then dropped (its memory reset for the
//! next instance) — the fixed cost of every invocation of that skill. The
//! skill world has no export that does nothing, so none is called. Beside
//! it, the `noop` test guest's whole `run` (instantiate, validate `{}`, call
//! an export that returns at once, parse its result): the cheapest complete
//! invocation, and an upper bound of the floor with an export called.
//! Measured: `processRefund`'s steps (two tool calls, argument validation,
//! JSON both ways) with tools that return fixed JSON from memory, so that no
//! database time hides the runtime's. Below it, the host's share of those
//! steps measured natively, without wasm: the two calls' argument texts
//! parsed, validated and dispatched, their results serialized — what the
//! runtime does per `call-tool` besides crossing the boundary; the rest of
//! the steps' time above the floor is the guest's own code and the
//! crossings. Then the same steps as an embedder (and the gateway's invoke
//! route) runs them, through `SkillHost::invoke` on a host with the same
//! fixed tools: what the agent layer adds (the run task and its context,
//! events, metrics, the confirmation policy's check). `inquireOrderStatus`
//! (two read calls) on the SQLite demo tools is printed as the end-to-end
//! figure; beside it, when `skill-plugins/build-interpreted.sh` has built
//! them, the Python `checkoutQuote` (two reads on the same tools) and the
//! JavaScript `deviceCheckup` (three), each instantiating its interpreter's
//! snapshot (a hundredth of the samples: each takes milliseconds).
//!
//! Run: `cargo bench --bench invoke` (set `BENCH_ITERATIONS` to change the
//! sample count).
//!
//! Profiling the guest's side: build the plugin unstripped
//! (`CARGO_PROFILE_RELEASE_STRIP=false`, the `debian` toolchain command of
//! `skill-plugins/build.sh`, into a scratch `CARGO_TARGET_DIR`), wrap it with
//! `skill-plugins/componentize`, sign it with `skillhost sign` and put it in
//! place of `skills/processRefund.wasm` for the session, turn on
//! `Config::profiler(ProfilingStrategy::PerfMap)` in
//! `runtime::engine_config` for the session, and record with
//! `perf record -e cpu-clock -g` (this machine's perf has no hardware
//! counters): the guest's functions then appear by name as `[JIT]` frames.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::{Value, json};

use skillhost::agent::ConfirmationPolicy;
use skillhost::embed::SkillHost;
use skillhost::runtime::{Runtime, RuntimeConfig, SkillComponent, ToolDispatch};
use skillhost::skills::SkillName;
use skillhost::skills::signature::{SignaturePolicy, TrustStore};
use skillhost::tools::demo::{self, DemoDb};
use skillhost::tools::{Tool, ToolContext, ToolError, ToolRegistry, ToolSpec};

/// The `skillhost` binary's allocator, so the figures are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A demo tool's spec with a canned answer: the host's work without SQLite.
struct FixedTool {
    spec: ToolSpec,
    response: Value,
}

#[async_trait]
impl Tool for FixedTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn invoke(&self, _context: &ToolContext, _arguments: Value) -> Result<Value, ToolError> {
        Ok(self.response.clone())
    }
}

fn fixed_tools(demo: &ToolRegistry) -> ToolRegistry {
    let responses = [
        (
            "queryOrder",
            json!({"orderId": "88231", "product": "Bit S10 Pro robot vacuum", "amount": 2999.0,
                   "status": "delivered", "trackingNo": "SF1234567890", "createdAt": "2026-06-18"}),
        ),
        (
            "applyRefund",
            json!({"success": true, "refundId": "RF20260629001", "orderId": "88231",
                   "amount": 2999.0, "estimatedArrival": "1-3 business days"}),
        ),
    ];
    let mut registry = ToolRegistry::new();
    for (name, response) in responses {
        let spec = demo.get(name).expect("demo tool exists").spec().clone();
        registry
            .register(Arc::new(FixedTool { spec, response }))
            .expect("registering a fixed tool");
    }
    registry
}

struct Sample {
    label: &'static str,
    p50: Duration,
    p99: Duration,
}

/// Times `invoke` over `iterations` samples after a tenth as many warm-ups.
async fn measure<F, Fut>(label: &'static str, iterations: usize, mut invoke: F) -> Sample
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    for _ in 0..iterations / 10 {
        invoke().await;
    }
    let mut times = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let started = Instant::now();
        invoke().await;
        times.push(started.elapsed());
    }
    times.sort();
    Sample {
        label,
        p50: times[iterations / 2],
        p99: times[iterations * 99 / 100],
    }
}

/// Runs `skill`'s steps on `input`, which must succeed.
async fn run(skill: &SkillComponent, input: &Value, tools: &Arc<dyn ToolDispatch>) {
    skill.run(input, tools.clone()).await.expect("invocation");
}

/// The host's work for `processRefund`'s two tool calls as the runtime does
/// it per `call-tool`: parse the guest's argument text, validate and
/// dispatch, serialize the result for the guest.
async fn host_tool_path(tools: &Arc<dyn ToolDispatch>, skill: &SkillName) {
    const CALLS: [(&str, &str); 2] = [
        ("queryOrder", r#"{"orderId":"88231"}"#),
        (
            "applyRefund",
            r#"{"orderId":"88231","reason":"the robot vacuum is broken"}"#,
        ),
    ];
    for (tool, arguments) in CALLS {
        let arguments: Value = serde_json::from_str(arguments).expect("JSON arguments");
        let result = tools
            .call_tool(skill, tool, arguments)
            .await
            .expect("tool call");
        std::hint::black_box(serde_json::to_string(&result).expect("JSON result"));
    }
}

async fn load(runtime: &Runtime, tools: &ToolRegistry, path: &Path) -> SkillComponent {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    SkillComponent::load(runtime, bytes, tools)
        .await
        .unwrap_or_else(|e| panic!("loading {}: {e}", path.display()))
}

fn main() {
    let iterations: usize = std::env::var("BENCH_ITERATIONS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20_000);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo root");
    // One worker thread, as a gateway request handler would run it.
    let executor = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    executor.block_on(async {
        let runtime = Runtime::new(RuntimeConfig::default()).expect("runtime");
        let db = Arc::new(DemoDb::in_memory().expect("demo db"));
        let mut demo_tools = ToolRegistry::new();
        demo::register_all(&mut demo_tools, db).expect("demo tools");
        let demo_tools = Arc::new(demo_tools);
        let fixed: Arc<dyn ToolDispatch> = Arc::new(fixed_tools(&demo_tools));

        let noop = load(
            &runtime,
            &demo_tools,
            &root.join("tests/fixtures/noop.wasm"),
        )
        .await;
        let refund = load(
            &runtime,
            &demo_tools,
            &root.join("skills/processRefund.wasm"),
        )
        .await;
        let input = json!({"orderId": "88231", "reason": "the robot vacuum is broken"});

        let floor = measure(
            "floor: processRefund instantiated, store dropped",
            iterations,
            || async { refund.instantiate_only().await.expect("instantiation") },
        )
        .await;
        let empty = json!({});
        let noop_run = measure(
            "noop guest: whole run of an empty export",
            iterations,
            || run(&noop, &empty, &fixed),
        )
        .await;
        let steps = measure(
            "processRefund steps, fixed in-memory tools",
            iterations,
            || run(&refund, &input, &fixed),
        )
        .await;
        // A skills directory of processRefund alone, verified as `serve`
        // verifies it; the fixed applyRefund runs unattended, as it does
        // in the gateway bench.
        let skills = tempfile::tempdir().expect("temporary skills directory");
        std::fs::copy(
            root.join("skills/processRefund.wasm"),
            skills.path().join("processRefund.wasm"),
        )
        .expect("copying processRefund");
        let trusted = TrustStore::load(&[root.join("keys/trusted")]).expect("demo trust store");
        let host = SkillHost::builder(skills.path(), SignaturePolicy::Require(trusted))
            .tools(fixed_tools(&demo_tools))
            .confirmation_policy(ConfirmationPolicy::never())
            .hot_reload(false)
            .build()
            .await
            .expect("skill host");
        let through_host = measure(
            "processRefund via SkillHost::invoke, same tools",
            iterations,
            || async {
                let run = host
                    .invoke("processRefund", input.clone())
                    .expect("started");
                run.result().await.expect("invocation");
            },
        )
        .await;
        let skill = refund.name().clone();
        let host_share = measure(
            "  of which host tool path (native, no wasm)",
            iterations,
            || host_tool_path(&fixed, &skill),
        )
        .await;
        // A refund writes once and is then refused, so the end-to-end
        // figure uses the other two-call skill, whose calls only read.
        let inquire = load(
            &runtime,
            &demo_tools,
            &root.join("skills/inquireOrderStatus.wasm"),
        )
        .await;
        let demo_dispatch: Arc<dyn ToolDispatch> = demo_tools.clone();
        let order = json!({"orderId": "88231"});
        let end_to_end = measure(
            "inquireOrderStatus steps, SQLite demo tools",
            iterations,
            || run(&inquire, &order, &demo_dispatch),
        )
        .await;

        let mut interpreted = Vec::new();
        let mut not_built = Vec::new();
        for (label, file) in [
            (
                "checkoutQuote (Python) steps, SQLite demo tools",
                "checkoutQuote.wasm",
            ),
            (
                "deviceCheckup (JavaScript) steps, SQLite demo tools",
                "deviceCheckup.wasm",
            ),
        ] {
            let path = root
                .join("skill-plugins/target/interpreted/skills")
                .join(file);
            if !path.exists() {
                not_built.push(file);
                continue;
            }
            let skill = load(&runtime, &demo_tools, &path).await;
            let samples = (iterations / 100).max(10);
            interpreted.push(measure(label, samples, || run(&skill, &empty, &demo_dispatch)).await);
        }

        println!("warm invocation, {iterations} samples each");
        println!("{:<52} {:>10} {:>10} {:>8}", "", "p50", "p99", "p50/floor");
        let samples = [
            &floor,
            &noop_run,
            &steps,
            &host_share,
            &through_host,
            &end_to_end,
        ];
        for sample in samples.into_iter().chain(&interpreted) {
            println!(
                "{:<52} {:>8.1}µs {:>8.1}µs {:>8.2}x",
                sample.label,
                sample.p50.as_secs_f64() * 1e6,
                sample.p99.as_secs_f64() * 1e6,
                sample.p50.as_secs_f64() / floor.p50.as_secs_f64()
            );
        }
        if !not_built.is_empty() {
            println!(
                "not built (skill-plugins/build-interpreted.sh): {}",
                not_built.join(", ")
            );
        }
    });
}
