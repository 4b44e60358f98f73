//! Issue 4's figures, in one run:
//!
//! (a) the host's share of one main-agent round — mask, function list and
//!     the request body the client sends, serialized; LLM time excluded —
//!     with 1,000 skills (real packed components) and 10,000 tools, next to
//!     a naive baseline that rebuilds (copies and serializes) every
//!     definition each round;
//! (b) tokens of the main agent's function list on article 003's catalog
//!     size (30 tools, 8 skills, 20 tools absorbed), flat vs progressive,
//!     counted with real tokenizers (`tiktoken-rs`, cl100k_base and
//!     o200k_base, BPE data bundled in the crate);
//! (c) LLM calls per refund with deterministic steps vs the sub-agent,
//!     against the scripted OpenAI-compatible server of the tests, in
//!     process on loopback.
//!
//! Run: `cargo bench --bench agent` (`BENCH_ITERATIONS`, default 1,000,
//! sets the samples of (a)).

#[allow(dead_code)] // Shared with the integration tests; the bench uses part of it.
#[path = "../../tests/support/scripted_llm.rs"]
mod scripted_llm;

use std::collections::BTreeSet;
use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::{Value, json};
use tempfile::TempDir;
use tiktoken_rs::CoreBPE;

use skillhost::agent::catalog::{Catalog, DisclosureConfig, LoadSkillMode};
use skillhost::agent::llm::{
    AssistantMessage, ChatRequest, LlmClient, LlmConfig, Message, ToolCall, ToolDefinition,
};
use skillhost::agent::{
    Agent, AgentConfig, AgentEvent, DEFAULT_SYSTEM_PROMPT, Decision, Transcript,
};
use skillhost::runtime::{Runtime, RuntimeConfig};
use skillhost::scope::{SkillScope, ToolScope};
use skillhost::skills::pack::{DeclarativeSkill, Format};
use skillhost::skills::signature::SignaturePolicy;
use skillhost::skills::{SkillRegistry, SkillSnapshot};
use skillhost::tools::demo::{self, DemoDb};
use skillhost::tools::{Access, Tool, ToolContext, ToolError, ToolRegistry, ToolSpec};

use scripted_llm::{ScriptedLlm, Step};

/// A tool that is only a spec: catalogs never run it.
struct SpecOnly(ToolSpec);

#[async_trait]
impl Tool for SpecOnly {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }

    async fn invoke(&self, _context: &ToolContext, _arguments: Value) -> Result<Value, ToolError> {
        Ok(Value::Null)
    }
}

/// A string parameter in the demo tools' style.
fn param(description: &str, max_length: u32) -> Value {
    json!({ "type": "string", "description": description, "maxLength": max_length })
}

fn spec(name: &str, description: &str, params: &[(&str, Value)], access: Access) -> ToolSpec {
    let properties: serde_json::Map<String, Value> = params
        .iter()
        .map(|(name, schema)| ((*name).to_owned(), schema.clone()))
        .collect();
    let required: Vec<&str> = params.iter().map(|(name, _)| *name).collect();
    ToolSpec {
        name: name.to_owned(),
        description: description.to_owned(),
        parameters: json!({
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": false,
        }),
        access,
    }
}

/// A YAML skill file for `skillhost pack`; JSON strings and objects are
/// YAML flow scalars and mappings, so values are written as JSON.
fn skill_yaml(
    name: &str,
    description: &str,
    tools: &[&str],
    unlocks: &[&str],
    parameters: &Value,
    instructions: &str,
) -> String {
    let quoted = |text: &str| Value::String(text.to_owned()).to_string();
    format!(
        "name: {name}\ndescription: {}\ntools: {}\nunlocks: {}\nparameters: {parameters}\ninstructions: {}\n",
        quoted(description),
        json!(tools),
        json!(unlocks),
        quoted(instructions),
    )
}

/// Packs `yamls` into components in a fresh directory and loads them
/// (unsigned: signatures are not what this measures). Panics on any load
/// failure, so a broken setup cannot produce figures.
async fn load_packed(
    yamls: &[String],
    tools: Arc<ToolRegistry>,
) -> (Arc<SkillSnapshot>, SkillRegistry, TempDir) {
    let dir = tempfile::tempdir().expect("a temporary skills directory");
    for (index, yaml) in yamls.iter().enumerate() {
        let skill = DeclarativeSkill::parse(yaml, Format::Yaml, Path::new("bench.yaml"))
            .unwrap_or_else(|e| panic!("{e}\n{yaml}"));
        let component = skill.to_component().expect("packing a skill");
        std::fs::write(dir.path().join(format!("{index:04}.wasm")), component)
            .expect("writing a component");
    }
    let runtime = Runtime::new(RuntimeConfig::default()).expect("runtime");
    let registry =
        SkillRegistry::load_dir(runtime, tools, SignaturePolicy::AllowUnsigned, dir.path())
            .await
            .expect("loading the skills directory");
    let snapshot = registry.snapshot();
    let failures: Vec<_> = snapshot.failures().collect();
    assert!(failures.is_empty(), "skills failed to load: {failures:?}");
    assert_eq!(snapshot.len(), yamls.len());
    (snapshot, registry, dir)
}

fn percentile(times: &mut [Duration], pct: usize) -> Duration {
    times.sort();
    times[(times.len() * pct / 100).min(times.len() - 1)]
}

struct Timing {
    p50: Duration,
    p99: Duration,
}

/// Times `round` `iterations` times after a tenth as many warm-up calls.
fn time(iterations: usize, mut round: impl FnMut() -> usize) -> Timing {
    for _ in 0..iterations / 10 {
        black_box(round());
    }
    let mut times: Vec<Duration> = (0..iterations)
        .map(|_| {
            let started = Instant::now();
            black_box(round());
            started.elapsed()
        })
        .collect();
    Timing {
        p50: percentile(&mut times, 50),
        p99: percentile(&mut times, 99),
    }
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

// ---------------------------------------------------------------------------
// (a) Host cost of one round: 1,000 skills, 10,000 tools.

const SKILLS: usize = 1_000;
const TOOLS: usize = 10_000;
/// Each skill absorbs its own ten tools; every tenth also unlocks its first.
const TOOLS_PER_SKILL: usize = TOOLS / SKILLS;
const KEEP_PUBLIC: usize = 20;

fn synthetic_tool(index: usize) -> ToolSpec {
    let area = ["orders", "billing", "shipping", "catalog", "accounts"][index % 5];
    spec(
        &format!("{area}_op_{index:05}"),
        &format!(
            "Operation {index} of the {area} service: reads or updates one {area} record by id and \
             returns its fields, status, owner and last change time. Rejected with the reason when \
             the record does not exist or is not in a state that allows it."
        ),
        &[
            ("id", param("The record's id, e.g. \"88231\".", 32)),
            (
                "note",
                param("Why the operation is made, in the customer's words.", 500),
            ),
        ],
        if index.is_multiple_of(5) {
            Access::Write
        } else {
            Access::Read
        },
    )
}

fn synthetic_skill(index: usize, tools: &[ToolSpec]) -> String {
    let own: Vec<&str> = tools[index * TOOLS_PER_SKILL..(index + 1) * TOOLS_PER_SKILL]
        .iter()
        .map(|tool| tool.name.as_str())
        .collect();
    let unlocks = if index.is_multiple_of(10) {
        &own[..1]
    } else {
        &[][..]
    };
    skill_yaml(
        &format!("skill_{index:04}"),
        &format!(
            "Procedure {index}: handles one kind of customer request end to end — checks the \
             records involved, applies the shop's rules and makes the change when allowed. Use it \
             instead of calling its tools one by one."
        ),
        &own,
        unlocks,
        &json!({
            "type": "object",
            "properties": {
                "request": {"type": "string", "description": "What the customer asked for, in their words"},
                "orderId": {"type": "string", "description": "The order concerned, if the customer named one"},
            },
            "required": ["request"],
            "additionalProperties": false,
        }),
        "Check the records first, then act only when the shop's rules allow it.",
    )
}

/// A conversation mid-run: one skill loaded, one tool called.
fn transcript() -> Transcript {
    let load = ToolCall::new("call_1", "load_skill", r#"{"skill":"skill_0000"}"#);
    let query = ToolCall::new(
        "call_2",
        "orders_op_00000",
        r#"{"id":"88231","note":"cancel it"}"#,
    );
    Transcript::from_messages([
        Message::system(DEFAULT_SYSTEM_PROMPT),
        Message::user("Please cancel my order 88231, I ordered the wrong model."),
        Message::from(AssistantMessage {
            content: None,
            tool_calls: vec![load],
        }),
        Message::tool(
            "call_1",
            "load_skill",
            json!({
                "loaded_skill": "skill_0000",
                "unlocks": ["orders_op_00000"],
                "instructions": "Check the records first, then act only when the shop's rules allow it.",
            })
            .to_string(),
        ),
        Message::from(AssistantMessage {
            content: None,
            tool_calls: vec![query],
        }),
        Message::tool(
            "call_2",
            "orders_op_00000",
            r#"{"id":"88231","status":"paid","owner":"u1001","updatedAt":"2026-06-29 14:00:00"}"#,
        ),
    ])
}

/// The round as the agent's loop does it: loaded skills from the
/// transcript, this round's function list, the request, its body.
fn round(catalog: &Catalog, transcript: &Transcript, client: &LlmClient) -> usize {
    let functions = catalog.functions(&transcript.loaded_skills());
    let request = ChatRequest::new(transcript.messages()).with_tools(functions.definitions);
    client.request_body(&request).expect("a request body").len()
}

/// The naive round: the same list and request, but every definition
/// rebuilt from its name, description and schema — copied and serialized
/// again — as a host that builds its function list from scratch each round
/// would, instead of sharing the catalog's definitions, serialized once.
fn naive_round(catalog: &Catalog, transcript: &Transcript, client: &LlmClient) -> usize {
    let functions = catalog.functions(&transcript.loaded_skills());
    let rebuilt = functions
        .definitions
        .iter()
        .map(|shared| {
            let function = shared.definition();
            Arc::new(ToolDefinition::function(
                &function.name,
                &function.description,
                function.parameters.clone(),
            ))
        })
        .collect();
    let request = ChatRequest::new(transcript.messages()).with_tools(rebuilt);
    client.request_body(&request).expect("a request body").len()
}

struct RoundFigures {
    label: &'static str,
    functions: usize,
    body_bytes: usize,
    mask: Timing,
    ours: Timing,
    naive: Timing,
}

async fn round_cost(iterations: usize) -> Vec<RoundFigures> {
    let specs: Vec<ToolSpec> = (0..TOOLS).map(synthetic_tool).collect();
    let mut tools = ToolRegistry::new();
    for spec in &specs {
        tools
            .register(Arc::new(SpecOnly(spec.clone())))
            .expect("registering a synthetic tool");
    }
    let yamls: Vec<String> = (0..SKILLS).map(|i| synthetic_skill(i, &specs)).collect();
    let started = Instant::now();
    let (snapshot, registry, _dir) = load_packed(&yamls, Arc::new(tools)).await;
    eprintln!(
        "(a) packed and loaded {SKILLS} skill components in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let tools = registry.tools().clone();
    let transcript = transcript();
    let client = LlmClient::new(LlmConfig::new("http://127.0.0.1:9/v1", "bench-model"))
        .expect("a client (never connected)");
    let keep_public: BTreeSet<String> = (0..KEEP_PUBLIC)
        .map(|i| specs[i * TOOLS_PER_SKILL + 1].name.clone())
        .collect();
    let configs = [
        (
            "progressive (20 tools kept public)",
            DisclosureConfig {
                keep_public,
                ..DisclosureConfig::default()
            },
            iterations,
        ),
        (
            "flat (no disclosure)",
            DisclosureConfig {
                progressive_disclosure: false,
                ..DisclosureConfig::default()
            },
            (iterations / 10).max(20),
        ),
    ];
    let mut figures = Vec::new();
    for (label, config, iterations) in configs {
        let catalog = Catalog::new(
            &tools,
            &snapshot,
            &SkillScope::all(),
            &ToolScope::all(),
            &config,
        );
        let functions = catalog.functions(&transcript.loaded_skills());
        let mask = time(iterations, || {
            catalog
                .functions(&transcript.loaded_skills())
                .definitions
                .len()
        });
        let ours = time(iterations, || round(&catalog, &transcript, &client));
        let naive = time(iterations, || naive_round(&catalog, &transcript, &client));
        figures.push(RoundFigures {
            label,
            functions: functions.definitions.len(),
            body_bytes: round(&catalog, &transcript, &client),
            mask,
            ours,
            naive,
        });
    }
    figures
}

// ---------------------------------------------------------------------------
// (b) Tokens of the function list: 30 tools, 8 skills, 20 absorbed.

/// Eight tools beyond the 22 demo tools, written like them.
fn extra_tools() -> Vec<ToolSpec> {
    let order = || param("The order number, e.g. \"88231\".", 32);
    vec![
        spec(
            "book_repair",
            "Book a repair visit or a mail-in repair for one of the customer's devices under \
             warranty. Returns the repair id and the pickup or visit window. Changes data.",
            &[
                ("device", param("Device id, nickname or product name.", 100)),
                (
                    "problem",
                    param("What is wrong, in the customer's words.", 500),
                ),
            ],
            Access::Write,
        ),
        spec(
            "query_repair",
            "Look up a repair by its id or by device: status (booked, picked_up, repairing, \
             returned), the diagnosis and the expected return date. Read-only.",
            &[(
                "repair_id",
                param("The repair id, e.g. \"RP20260629001\".", 32),
            )],
            Access::Read,
        ),
        spec(
            "query_invoice",
            "The invoice of an order: title, tax number, amount and whether it has been issued. \
             Read-only.",
            &[("order_id", order())],
            Access::Read,
        ),
        spec(
            "request_invoice",
            "Request a VAT invoice for a delivered order, for a person or a company (with its \
             tax number). Issued within 3 business days. Changes data.",
            &[
                ("order_id", order()),
                (
                    "title",
                    param("The invoice title: a person's or a company's name.", 100),
                ),
            ],
            Access::Write,
        ),
        spec(
            "query_points",
            "The customer's loyalty points: balance, points expiring this month and the last 10 \
             changes. Read-only.",
            &[],
            Access::Read,
        ),
        spec(
            "redeem_points",
            "Redeem loyalty points for a coupon from the points catalogue; rejected when the \
             balance is too low. Changes data.",
            &[(
                "reward",
                param("The reward's id from the points catalogue.", 32),
            )],
            Access::Write,
        ),
        spec(
            "query_store_hours",
            "Opening hours, address and phone number of the shop's offline stores in a city. \
             Read-only.",
            &[("city", param("The city, e.g. \"Shenzhen\".", 50))],
            Access::Read,
        ),
        spec(
            "update_profile",
            "Update the customer's nickname, phone number or default delivery address. Changes \
             data.",
            &[
                (
                    "field",
                    param("Which field: nickname, phone or address.", 20),
                ),
                ("value", param("The new value.", 300)),
            ],
            Access::Write,
        ),
    ]
}

/// The eight skills' tools: 20 distinct tools absorbed, no unlocks
/// (article 003's setup; masking is a separate mechanism).
const TOKEN_SKILLS: [(&str, &[&str]); 8] = [
    ("processRefund", &["queryOrder", "applyRefund"]),
    ("inquireOrderStatus", &["queryOrder", "queryLogistics"]),
    (
        "order-lookup",
        &["queryOrder", "queryLogistics", "query_logistics"],
    ),
    (
        "order_change",
        &["query_order", "cancel_order", "change_address"],
    ),
    (
        "after_sale_apply",
        &["query_order", "apply_after_sale", "query_after_sale"],
    ),
    (
        "fault_diagnosis",
        &[
            "query_order",
            "diagnose_device",
            "search_knowledge",
            "book_repair",
            "query_repair",
        ],
    ),
    (
        "iot_bundle",
        &["search_product", "search_knowledge", "list_devices"],
    ),
    (
        "order_checkout",
        &[
            "query_cart",
            "search_product",
            "update_cart_item",
            "create_order",
            "pay_order",
            "query_coupons",
        ],
    ),
];

struct TokenFigures {
    label: &'static str,
    functions: usize,
    cl100k: usize,
    o200k: usize,
    estimate: usize,
}

/// The 8 skills carry the bundled skills' real descriptions, parameters
/// and instructions (and `order-lookup`, the SKILL.md fixture), with the
/// tool lists of [`TOKEN_SKILLS`].
async fn list_tokens(root: &Path, cl100k: &CoreBPE, o200k: &CoreBPE) -> Vec<TokenFigures> {
    let db = Arc::new(DemoDb::in_memory().expect("demo db"));
    let mut tools = ToolRegistry::new();
    demo::register_all(&mut tools, db).expect("demo tools");
    for spec in extra_tools() {
        tools
            .register(Arc::new(SpecOnly(spec)))
            .expect("registering an extra tool");
    }
    assert_eq!(tools.specs().count(), 30);
    let tools = Arc::new(tools);
    let runtime = Runtime::new(RuntimeConfig::default()).expect("runtime");
    let bundled = SkillRegistry::load_dir(
        runtime,
        tools.clone(),
        SignaturePolicy::AllowUnsigned,
        &root.join("skills"),
    )
    .await
    .expect("the bundled skills")
    .snapshot();
    let lookup =
        DeclarativeSkill::read(&root.join("tests/fixtures/declarative/order-lookup/SKILL.md"))
            .expect("the SKILL.md fixture");
    let yamls: Vec<String> = TOKEN_SKILLS
        .iter()
        .map(|(name, skill_tools)| {
            let (manifest, instructions) = match bundled.get(name) {
                Some(skill) => (
                    skill.component.manifest().clone(),
                    skill.component.instructions().to_owned(),
                ),
                None => (lookup.manifest().clone(), lookup.instructions().to_owned()),
            };
            assert_eq!(manifest.name.as_str(), *name);
            skill_yaml(
                name,
                &manifest.description,
                skill_tools,
                &[],
                &manifest.parameters,
                &instructions,
            )
        })
        .collect();
    let (snapshot, _registry, _dir) = load_packed(&yamls, tools.clone()).await;
    let configs = [
        (
            "flat: every tool + every skill",
            DisclosureConfig {
                progressive_disclosure: false,
                load_skill: LoadSkillMode::Never,
                ..DisclosureConfig::default()
            },
        ),
        (
            "progressive: absorbed tools hidden",
            DisclosureConfig {
                load_skill: LoadSkillMode::Never,
                ..DisclosureConfig::default()
            },
        ),
    ];
    configs
        .into_iter()
        .map(|(label, config)| {
            let functions = Catalog::new(
                &tools,
                &snapshot,
                &SkillScope::all(),
                &ToolScope::all(),
                &config,
            )
            .functions(&BTreeSet::new());
            // The `tools` array exactly as the request body carries it.
            let json = serde_json::to_string(&functions.definitions).expect("definitions");
            TokenFigures {
                label,
                functions: functions.definitions.len(),
                cl100k: cl100k.encode_ordinary(&json).len(),
                o200k: o200k.encode_ordinary(&json).len(),
                estimate: functions.tokens,
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------
// (c) LLM calls per refund.

const REFUND_REQUEST: &str = "my order 88231 robot vacuum is broken, refund it";

struct RefundFigures {
    label: &'static str,
    llm_calls: u32,
    main_rounds: u32,
    sent_tokens: usize,
    refunded: bool,
}

async fn refund(root: &Path, use_steps: bool, o200k: &CoreBPE) -> RefundFigures {
    let dir = tempfile::tempdir().expect("a skills directory");
    for name in ["processRefund", "inquireOrderStatus"] {
        let file = format!("{name}.wasm");
        std::fs::copy(root.join("skills").join(&file), dir.path().join(&file))
            .expect("copying a bundled skill");
    }
    let db = Arc::new(DemoDb::in_memory().expect("demo db"));
    let mut tools = ToolRegistry::new();
    for tool in demo::article_003_tools(db.clone()) {
        tools.register(tool).expect("a demo tool");
    }
    let runtime = Runtime::new(RuntimeConfig::default()).expect("runtime");
    let skills = SkillRegistry::load_dir(
        runtime,
        Arc::new(tools),
        SignaturePolicy::AllowUnsigned,
        dir.path(),
    )
    .await
    .expect("the refund skills");
    let call = Step::tool_call(
        "processRefund",
        json!({"orderId": "88231", "reason": "the robot vacuum is broken"}),
    );
    let script = if use_steps {
        vec![call, Step::text("Your refund RF20260629001 is on its way.")]
    } else {
        vec![
            call,
            Step::tool_call("queryOrder", json!({"orderId": "88231"})),
            Step::tool_call(
                "applyRefund",
                json!({"orderId": "88231", "reason": "the robot vacuum is broken"}),
            ),
            Step::text("Refund RF20260629001 submitted; 1-3 business days."),
            Step::text("Your refund RF20260629001 is on its way."),
        ]
    };
    let llm = ScriptedLlm::start(script).await;
    let config = AgentConfig {
        use_steps,
        disclosure: DisclosureConfig {
            keep_public: ["queryOrder", "searchKnowledge", "getCurrentTime"]
                .map(String::from)
                .into(),
            ..DisclosureConfig::default()
        },
        ..AgentConfig::default()
    };
    let agent = Agent::builder(Arc::new(skills))
        .llm(LlmClient::new(LlmConfig::new(llm.base_url(), "bench-model")).expect("a client"))
        .config(config)
        .build()
        .expect("the agent");
    let finished = agent
        .ask(REFUND_REQUEST)
        .expect("the run starts")
        .finish_with(|_| Decision::Approve)
        .await;
    let output = finished.result.expect("the refund run");
    assert_eq!(llm.remaining(), 0, "the script was not used up");
    assert!(
        finished
            .events
            .iter()
            .any(|event| matches!(event, AgentEvent::Answer { .. }))
    );
    let sent_tokens = llm
        .requests()
        .iter()
        .map(|request| {
            let sent =
                json!({"messages": request.body["messages"], "tools": request.body["tools"]});
            o200k.encode_ordinary(&sent.to_string()).len()
        })
        .sum();
    RefundFigures {
        label: if use_steps {
            "with deterministic steps"
        } else {
            "without (scoped sub-agent)"
        },
        llm_calls: output.stats.llm_calls,
        main_rounds: output.rounds,
        sent_tokens,
        refunded: db.refunds_for("88231").expect("refunds").len() == 1,
    }
}

fn main() {
    let iterations: usize = std::env::var("BENCH_ITERATIONS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo root");
    let executor = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let cl100k = tiktoken_rs::cl100k_base().expect("cl100k_base (bundled)");
    let o200k = tiktoken_rs::o200k_base().expect("o200k_base (bundled)");
    executor.block_on(async {
        let rounds = round_cost(iterations).await;
        let tokens = list_tokens(root, &cl100k, &o200k).await;
        let refunds = [
            refund(root, true, &o200k).await,
            refund(root, false, &o200k).await,
        ];

        println!();
        println!(
            "(a) host cost of one main-agent round: {SKILLS} skills (packed components), {TOOLS} tools; \
             mask + function list + request body serialized; LLM excluded; {iterations} samples (flat: a tenth)"
        );
        println!(
            "{:<36} {:>9} {:>10}  {:>17}  {:>17}  {:>17}  {:>8}",
            "catalog",
            "functions",
            "body",
            "mask+list p50/p99",
            "round p50/p99",
            "naive p50/p99",
            "naive/us"
        );
        for figure in &rounds {
            println!(
                "{:<36} {:>9} {:>8.0}KB  {:>7.3}/{:>6.3}ms  {:>7.3}/{:>6.3}ms  {:>7.3}/{:>6.3}ms  {:>7.2}x",
                figure.label,
                figure.functions,
                figure.body_bytes as f64 / 1024.0,
                ms(figure.mask.p50),
                ms(figure.mask.p99),
                ms(figure.ours.p50),
                ms(figure.ours.p99),
                ms(figure.naive.p50),
                ms(figure.naive.p99),
                figure.naive.p50.as_secs_f64() / figure.ours.p50.as_secs_f64(),
            );
        }

        println!();
        println!(
            "(b) tokens of the main agent's function list (the request's `tools` JSON): 30 tools, 8 skills, 20 tools absorbed"
        );
        println!(
            "{:<36} {:>9} {:>9} {:>9} {:>10}",
            "list", "functions", "cl100k", "o200k", "estimate"
        );
        for figure in &tokens {
            println!(
                "{:<36} {:>9} {:>9} {:>9} {:>10}",
                figure.label, figure.functions, figure.cl100k, figure.o200k, figure.estimate
            );
        }
        if let [flat, progressive] = tokens.as_slice() {
            println!(
                "{:<36} {:>9} {:>8.0}% {:>8.0}%   (article 003: 38 -> 18 functions, 3800 -> 1800 tokens, -53%)",
                "saved",
                flat.functions - progressive.functions,
                100.0 * (1.0 - progressive.cl100k as f64 / flat.cl100k as f64),
                100.0 * (1.0 - progressive.o200k as f64 / flat.o200k as f64),
            );
        }

        println!();
        println!(
            "(c) one refund (\"{REFUND_REQUEST}\") against a scripted OpenAI-compatible server on loopback"
        );
        println!(
            "{:<36} {:>9} {:>11} {:>22} {:>9}",
            "processRefund", "LLM calls", "main rounds", "tokens sent (o200k)", "refunded"
        );
        for figure in &refunds {
            println!(
                "{:<36} {:>9} {:>11} {:>22} {:>9}",
                figure.label, figure.llm_calls, figure.main_rounds, figure.sent_tokens, figure.refunded
            );
        }
    });
}
