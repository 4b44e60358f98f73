//! The `skillhost` binary end to end: `ask` and `chat` against the
//! scripted LLM, `test` on bundled and packed skills, `run`, `skills`,
//! `inspect`, the `--json` outputs and the progress lines.
//!
//! Every command runs in a temporary working directory with its demo
//! database there (`--db`), the bundled skills and the demo trust store
//! named explicitly, and no LLM settings inherited from the environment.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use serde_json::{Value, json};
use std::time::Duration;
use tempfile::TempDir;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::process::Command;

use skillhost::runtime::digest_of;
use skillhost::skills::pack::{DeclarativeSkill, Format};
use skillhost::skills::signature::PublicKey;
use skillhost::tools::ToolRegistry;
use skillhost::tools::demo::DemoDb;
use skillhost::tools::mcp::{self, McpServerConfig};

use crate::agent_common::{REFUND_REQUEST, refund_call};
use crate::support::collector::{Collector, ExportedSpan};
use crate::support::crm::crm_service;
use crate::support::environment::host_settings;
use crate::support::fixtures::{fixture, repo_root, skill_file};
use crate::support::mcp::{McpServer, STDIO_SERVER, python};
use crate::support::scripted_llm::{Recorded, ScriptedLlm, Step};
use crate::support::signing::{signed_skill_calling, unsigned};

/// A scratch working directory for the binary.
pub(crate) struct Workdir {
    dir: TempDir,
}

impl Workdir {
    pub(crate) fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("a temporary directory"),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The demo database the commands of this directory use.
    fn db(&self) -> PathBuf {
        self.path("shop.db")
    }

    /// `program` in this directory, with no stdin and none of the
    /// machine's `SKILLHOST_*` and `OPENAI_*` settings ([`host_settings`]).
    fn program(&self, program: &str) -> Command {
        let mut command = Command::new(program);
        command.current_dir(self.dir.path()).stdin(Stdio::null());
        for name in host_settings() {
            command.env_remove(name);
        }
        command
    }

    /// `skillhost <args>` in this directory, with no LLM configured.
    fn command(&self, args: &[&str]) -> Command {
        let mut command = self.program(env!("CARGO_BIN_EXE_skillhost"));
        command.args(args);
        command
    }

    /// `skillhost <args> --skills <dir> --trust keys/trusted --db shop.db`.
    fn host_command(&self, args: &[&str], skills: &Path) -> Command {
        let mut command = self.command(args);
        command
            .arg("--skills")
            .arg(skills)
            .arg("--trust")
            .arg(repo_root().join("keys/trusted"))
            .arg("--db")
            .arg(self.db());
        command
    }

    /// [`Workdir::host_command`] reading `config` as its config file
    /// (`skillhost.toml` here, through `SKILLHOST_CONFIG`).
    fn configured_command(&self, config: &str, args: &[&str], skills: &Path) -> Command {
        std::fs::write(self.path("skillhost.toml"), config).unwrap();
        let mut command = self.host_command(args, skills);
        command.env("SKILLHOST_CONFIG", "skillhost.toml");
        command
    }

    /// A skills directory here holding `skill`, signed with the demo key,
    /// whose manifest names `tool`.
    fn skills_calling(&self, skill: &str, tool: &str) -> PathBuf {
        let skills = self.path("skills");
        std::fs::create_dir(&skills).unwrap();
        let file = signed_skill_calling(skill, tool);
        std::fs::write(skills.join(format!("{skill}.wasm")), file).unwrap();
        skills
    }

    /// `skillhost test <args> --skills <dir> --trust keys/trusted`, with no
    /// `--db`: the cases run on a scratch shop.
    pub(crate) fn test_command(&self, args: &[&str], skills: &Path) -> Command {
        let mut command = self.command(&[&["test"], args].concat());
        command
            .arg("--skills")
            .arg(skills)
            .arg("--trust")
            .arg(repo_root().join("keys/trusted"));
        command
    }

    /// The refunds of order 88231 in this directory's database.
    fn refunds_of_88231(&self) -> usize {
        DemoDb::open(self.db())
            .expect("the demo database the command wrote")
            .refunds_for("88231")
            .expect("reading refunds")
            .len()
    }
}

/// The bundled, signed skills.
fn bundled() -> PathBuf {
    repo_root().join("skills")
}

/// Asserts that `text` has `line` as one of its lines, whole.
fn assert_has_line(text: &str, line: &str) {
    assert!(
        text.lines().any(|shown| shown == line),
        "no `{line}` in:\n{text}"
    );
}

/// Points `command` at the scripted LLM.
fn with_llm<'a>(command: &'a mut Command, llm: &ScriptedLlm) -> &'a mut Command {
    command
        .env("OPENAI_BASE_URL", llm.base_url())
        .env("SKILLHOST_MODEL", "test-model")
}

async fn output(command: &mut Command) -> Output {
    command.output().await.expect("running skillhost")
}

/// Runs `command` with `input` piped to its stdin, then closed.
async fn output_with_stdin(command: &mut Command, input: &str) -> Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting skillhost");
    let mut stdin = child.stdin.take().expect("a piped stdin");
    stdin.write_all(input.as_bytes()).await.unwrap();
    drop(stdin);
    child.wait_with_output().await.unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Whether one line of `text` contains every one of `parts`, in order.
fn has_line(text: &str, parts: &[&str]) -> bool {
    text.lines().any(|line| {
        let mut rest = line;
        parts.iter().all(|part| match rest.find(part) {
            Some(at) => {
                rest = &rest[at + part.len()..];
                true
            }
            None => false,
        })
    })
}

/// Panics with the command's output unless it exited with `code`.
fn expect_code(output: &Output, code: i32) -> (String, String) {
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert_eq!(
        output.status.code(),
        Some(code),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    (stdout, stderr)
}

/// `skillhost ask <REFUND_REQUEST> <args>` on the bundled skills, with a
/// model that calls processRefund and then answers `answer`; the command
/// must succeed. Returns the model (to read its requests), stdout, stderr.
async fn ask_for_the_refund(
    work: &Workdir,
    args: &[&str],
    answer: &str,
) -> (ScriptedLlm, String, String) {
    let llm = ScriptedLlm::start(vec![refund_call(), Step::text(answer)]).await;
    let mut command = work.host_command(&[&["ask", REFUND_REQUEST], args].concat(), &bundled());
    let (stdout, stderr) = expect_code(&output(with_llm(&mut command, &llm)).await, 0);
    (llm, stdout, stderr)
}

/// Checks that stderr tells how to configure the missing LLM.
fn assert_says_how_to_configure_an_llm(stderr: &str) {
    for name in ["SKILLHOST_MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY"] {
        assert!(stderr.contains(name), "{name} not mentioned: {stderr}");
    }
    assert!(stderr.contains("no LLM configured"), "{stderr}");
}

/// The content of the tool message of the second main request: what the
/// skill told the main agent (before any note the host added on calls
/// declined inside it).
fn skill_result(llm: &ScriptedLlm) -> Value {
    let requests = llm.requests();
    let tool = requests[1]
        .messages()
        .iter()
        .find(|message| message["role"] == "tool")
        .expect("a tool message in the second request");
    let content = tool["content"].as_str().expect("text content");
    let result = content
        .split("\n\n[from the host: ")
        .next()
        .unwrap_or_default();
    serde_json::from_str(result).expect("the skill's JSON result")
}

#[tokio::test]
async fn ask_with_yes_prints_rounds_inner_calls_and_the_answer_and_writes_the_refund() {
    let work = Workdir::new();
    let (llm, stdout, stderr) = ask_for_the_refund(
        &work,
        &["--yes"],
        "Your refund for the S10 Pro is on its way.",
    )
    .await;

    assert_eq!(stdout.trim(), "Your refund for the S10 Pro is on its way.");
    // Each main round with the functions offered (count and names).
    let offered = llm.requests()[0].tool_names();
    assert!(
        stderr.contains(&format!(
            "round 1 (main agent): {} function(s) offered",
            offered.len()
        )),
        "{stderr}"
    );
    assert!(stderr.contains("processRefund, "), "{stderr}");
    assert!(stderr.contains("round 2 (main agent)"), "{stderr}");
    // The skill's steps and the calls inside it, with caller and outcome.
    assert!(
        stderr.contains("main agent called skill processRefund(")
            && stderr.contains("runs its deterministic steps"),
        "{stderr}"
    );
    assert!(
        stderr.contains("skill processRefund called queryOrder({\"orderId\":\"88231\"}) -> done"),
        "{stderr}"
    );
    assert!(
        has_line(
            &stderr,
            &["skill processRefund called applyRefund(", "-> done"]
        ),
        "{stderr}"
    );
    // The confirmation: id, tool, arguments, summary; approved by --yes.
    assert!(
        stderr.contains("confirmation cf_")
            && stderr.contains("skill processRefund wants to run applyRefund"),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "summary:   applyRefund: orderId '88231', reason 'the robot vacuum is broken'"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("approved (--yes)"), "{stderr}");
    assert!(
        stderr.contains("done: 2 main round(s), 2 LLM call(s)"),
        "{stderr}"
    );

    assert_eq!(skill_result(&llm)["refunded"], true);
    assert_eq!(work.refunds_of_88231(), 1);
    assert_eq!(llm.remaining(), 0);
}

#[tokio::test]
async fn ask_with_no_tells_the_model_and_writes_no_refund() {
    let work = Workdir::new();
    let (llm, stdout, stderr) =
        ask_for_the_refund(&work, &["--no"], "Understood: no refund was submitted.").await;

    assert_eq!(stdout.trim(), "Understood: no refund was submitted.");
    assert!(stderr.contains("rejected (--no)"), "{stderr}");
    assert!(
        has_line(
            &stderr,
            &["skill processRefund called applyRefund(", "-> declined"]
        ),
        "{stderr}"
    );
    // The skill's steps saw the refusal and told the main agent.
    let result = skill_result(&llm);
    assert_eq!(result["refunded"], false);
    assert!(
        result["message"]
            .as_str()
            .unwrap()
            .contains("not submitted"),
        "{result}"
    );
    assert_eq!(work.refunds_of_88231(), 0);
}

#[tokio::test]
async fn ask_asks_on_the_terminal_until_it_gets_y_or_n() {
    let work = Workdir::new();
    let llm = ScriptedLlm::start(vec![refund_call(), Step::text("Refund submitted.")]).await;
    let mut command = work.host_command(&["ask", REFUND_REQUEST], &bundled());
    let output = output_with_stdin(with_llm(&mut command, &llm), "maybe\ny\n").await;
    let (_, stderr) = expect_code(&output, 0);

    assert!(stderr.contains("approve applyRefund? [y/n]"), "{stderr}");
    assert!(stderr.contains("answer y or n"), "{stderr}");
    assert!(stderr.contains("): approved"), "{stderr}");
    assert_eq!(work.refunds_of_88231(), 1);
}

#[tokio::test]
async fn ask_with_json_prints_every_event_as_a_json_line() {
    let work = Workdir::new();
    let (_llm, stdout, _) = ask_for_the_refund(
        &work,
        &[
            "--yes",
            "--json",
            "--keep-public",
            "queryOrder,searchKnowledge,getCurrentTime",
        ],
        "Done.",
    )
    .await;

    let events: Vec<Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect();
    let kinds: Vec<&str> = events
        .iter()
        .map(|event| event["event"].as_str().unwrap())
        .collect();
    for kind in [
        "round_started",
        "skill_started",
        "tool_called",
        "confirmation_pending",
        "confirmation_resolved",
        "skill_finished",
        "answer",
    ] {
        assert!(kinds.contains(&kind), "no {kind} in {kinds:?}");
    }
    // Article 003's keep-public tools stay; the absorbed applyRefund does not.
    let offered = &events[0]["functions"];
    assert_eq!(events[0]["event"], "round_started");
    for tool in [
        "queryOrder",
        "searchKnowledge",
        "getCurrentTime",
        "processRefund",
    ] {
        assert!(
            offered.as_array().unwrap().contains(&json!(tool)),
            "{offered}"
        );
    }
    assert!(!offered.as_array().unwrap().contains(&json!("applyRefund")));
    let last = events.last().unwrap();
    assert_eq!(last["event"], "finished");
    assert_eq!(last["rounds"], 2);
    assert_eq!(last["llm_calls"], 2);
}

#[tokio::test]
async fn ask_with_json_ends_with_failed_and_the_error_when_the_run_fails() {
    let work = Workdir::new();
    let llm = ScriptedLlm::start(vec![Step::error(400, "the context is too long")]).await;
    let mut command = work.host_command(&["ask", REFUND_REQUEST, "--json"], &bundled());
    let (stdout, stderr) = expect_code(&output(with_llm(&mut command, &llm)).await, 1);
    let events: Vec<Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect();
    assert_eq!(events[0]["event"], "round_started", "{stdout}");
    let last = events.last().unwrap();
    assert_eq!(last["event"], "failed", "{stdout}");
    let error = last["error"].as_str().unwrap();
    assert!(error.contains("the context is too long"), "{error}");
    // The person at the terminal reads the same error.
    assert!(stderr.contains(&format!("error: {error}")), "{stderr}");
}

#[tokio::test]
async fn ask_without_an_llm_says_how_to_configure_one() {
    let work = Workdir::new();
    let out = output(&mut work.host_command(&["ask", "hello"], &bundled())).await;
    let (_, stderr) = expect_code(&out, 1);
    assert_says_how_to_configure_an_llm(&stderr);
}

/// `skillhost test` on the bundled skills, with no LLM: the deterministic
/// skills' cases pass, the instruction-only ones are skipped.
#[tokio::test]
async fn test_passes_deterministic_skills_and_skips_llm_skills_without_an_llm() {
    let work = Workdir::new();
    let mut command = work.test_command(&[], &bundled());
    let (stdout, _) = expect_code(&output(&mut command).await, 0);

    assert!(
        stdout.contains(
            "PASS processRefund › refund a delivered order (steps; called queryOrder, applyRefund"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("auto-approved: applyRefund"), "{stdout}");
    assert!(
        stdout.contains("PASS inquireOrderStatus › a shipped order with tracking"),
        "{stdout}"
    );
    for skill in [
        "after_sale_apply",
        "fault_diagnosis",
        "iot_bundle",
        "order_change",
        "order_checkout",
    ] {
        assert!(
            stdout
                .lines()
                .any(|line| line.starts_with(&format!("SKIP {skill} ›"))
                    && line.contains(": no LLM configured")),
            "{skill} not skipped: {stdout}"
        );
    }
    assert!(
        stdout.contains("cases: 2 passed, 0 failed, 5 skipped"),
        "{stdout}"
    );
    // Cases run on a scratch shop: nothing is written in the working directory.
    assert!(!work.db().exists() && !work.path("skillhost-demo.db").exists());
}

#[tokio::test]
async fn test_named_skills_only_and_unknown_names_are_errors() {
    let work = Workdir::new();
    let mut command = work.test_command(&["processRefund", "--json"], &bundled());
    let (stdout, _) = expect_code(&output(&mut command).await, 0);
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["passed"], 1);
    assert_eq!(report["skipped"], 0);
    let case = &report["cases"][0];
    assert_eq!(case["skill"], "processRefund");
    assert_eq!(case["verdict"], "passed");
    assert_eq!(case["path"], "steps");
    assert_eq!(case["tools_called"], json!(["queryOrder", "applyRefund"]));
    assert!(
        case["result"]
            .as_str()
            .unwrap()
            .contains("\"refunded\":true")
    );

    let mut command = work.test_command(&["noSuchSkill"], &bundled());
    let (_, stderr) = expect_code(&output(&mut command).await, 1);
    assert!(
        stderr.contains("no skill named `noSuchSkill` is loaded"),
        "{stderr}"
    );
}

/// A declarative skill packed and signed with the binary: one case whose
/// expectations its sub-agent does not meet, one whose it does.
const LOOKUP_SKILL: &str = r#"
name: orderLookup
description: Looks up one order of the Bit Select shop and reports its status.
tools: [queryOrder, queryLogistics]
parameters:
  type: object
  properties:
    orderId: { type: string, description: The order number }
  required: [orderId]
instructions: |
  Use queryOrder with the order number, then report the order's status in one sentence.
test_cases:
  - name: expects a refund it never makes
    input: { orderId: "88231" }
    expect_tools: [queryOrder, applyRefund]
    expect_contains: [RF2026, delivered]
  - name: reports the status
    input: { orderId: "88231" }
    expect_tools: [queryOrder]
    expect_contains: [delivered]
"#;

/// `skillhost new` writes a skill to start from: its name in it, the SDK
/// and the contract as the repository has them, and the commands that
/// build it; a SKILL.md one packs and loads with no toolchain. A taken
/// directory, or a name the host would refuse, is refused with nothing
/// written. (The Python and JavaScript ones are built as told, and their
/// cases run, in `interpreted_skills`.)
#[tokio::test]
async fn new_writes_a_skill_to_start_from_and_how_to_build_it() {
    let work = Workdir::new();
    let read = |path: PathBuf| std::fs::read_to_string(&path).unwrap();
    let new = |args: &[&str]| work.command(&[&["new"], args].concat());

    let (stdout, _) = expect_code(
        &output(&mut new(&["orderStatus", "--lang", "python"])).await,
        0,
    );
    assert_has_line(
        &stdout,
        "  componentize-py --wit-path orderStatus/wit --world skill componentize --python-path \
         orderStatus app --output orderStatus.wasm",
    );
    assert!(
        read(work.path("orderStatus/app.py"))
            .contains(r#"    "orderStatus",  # the function name"#)
    );
    assert_eq!(
        read(work.path("orderStatus/skillhost_skill.py")),
        read(repo_root().join("skill-plugins/python/skillhost_skill.py"))
    );
    assert_eq!(
        read(work.path("orderStatus/wit/skill.wit")),
        read(repo_root().join("wit/skill@0.1.0/skill.wit"))
    );

    let (stdout, _) = expect_code(
        &output(&mut new(&["orderStatusJs", "--lang", "js"])).await,
        0,
    );
    assert!(
        stdout.contains("--disable http fetch-event --out orderStatusJs.wasm"),
        "{stdout}"
    );
    assert!(read(work.path("orderStatusJs/app.js")).contains("  name: 'orderStatusJs',"));
    assert_eq!(
        read(work.path("orderStatusJs/skillhost_skill.js")),
        read(repo_root().join("skill-plugins/js/skillhost_skill.js"))
    );

    // Rust: the SDK beside it, its inherited settings written out, and its
    // bindings pointed at the contract beside them. (Built as told, packed
    // and its case run by skill-plugins/build-new-rust.sh, in CI.)
    let (stdout, _) = expect_code(
        &output(&mut new(&["orderStatusRs", "--lang", "rust"])).await,
        0,
    );
    for told in [
        "  rustup target add wasm32-unknown-unknown",
        "  cargo build --manifest-path orderStatusRs/Cargo.toml --release --target \
         wasm32-unknown-unknown",
        "  skillhost pack orderStatusRs/target/wasm32-unknown-unknown/release/skill.wasm --out \
         orderStatusRs.wasm",
    ] {
        assert_has_line(&stdout, told);
    }
    assert!(read(work.path("orderStatusRs/src/lib.rs")).contains(r#"Skill::new("orderStatusRs")"#));
    assert!(read(work.path("orderStatusRs/Cargo.toml")).contains(r#"name = "order-status-rs""#));
    assert_eq!(read(work.path("orderStatusRs/.gitignore")), "/target\n");
    let sdk = repo_root().join("skill-plugins/sdk/src");
    for file in std::fs::read_dir(&sdk).unwrap() {
        let name = file.unwrap().file_name();
        let (ours, theirs) = (
            read(work.path("orderStatusRs/sdk/src").join(&name)),
            read(sdk.join(&name)),
        );
        let repository_contract = r#"path: "../../wit/skill@0.1.0","#;
        assert_eq!(ours, theirs.replace(repository_contract, r#"path: "wit","#));
    }
    assert_eq!(
        read(work.path("orderStatusRs/sdk/wit/skill.wit")),
        read(repo_root().join("wit/skill@0.1.0/skill.wit"))
    );
    let sdk_manifest: toml::Table = read(work.path("orderStatusRs/sdk/Cargo.toml"))
        .parse()
        .unwrap();
    assert_eq!(sdk_manifest["package"]["edition"].as_str(), Some("2024"));
    assert_eq!(
        sdk_manifest["dependencies"]["wit-bindgen"]["version"].as_str(),
        Some("0.61")
    );
    assert!(!sdk_manifest.contains_key("lints"));
    let written = read(work.path("orderStatusRs/sdk/Cargo.toml"));
    assert!(!written.contains("workspace"), "{written}");
    assert!(read(work.path("orderStatusRs/sdk/src/lib.rs")).contains(r#"path: "wit","#));

    let (stdout, _) = expect_code(
        &output(&mut new(&["order-status", "--lang", "md"])).await,
        0,
    );
    assert_has_line(
        &stdout,
        "  skillhost pack order-status/SKILL.md --out order-status.wasm",
    );
    std::fs::create_dir(work.path("skills")).unwrap();
    let mut pack = work.command(&[
        "pack",
        "order-status/SKILL.md",
        "--out",
        "skills/order-status.wasm",
    ]);
    expect_code(&output(&mut pack).await, 0);
    let mut sign = work.command(&["sign", "skills/order-status.wasm", "--key"]);
    sign.arg(repo_root().join("keys/demo-signing.key"));
    expect_code(&output(&mut sign).await, 0);
    let mut skills = work.host_command(&["skills", "--json"], &work.path("skills"));
    let (stdout, _) = expect_code(&output(&mut skills).await, 0);
    let listed: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(listed["skills"][0]["name"], "order-status", "{listed:#}");
    assert_eq!(listed["failed"], json!([]), "{listed:#}");

    let (_, stderr) = expect_code(&output(&mut new(&["orderStatus", "--lang", "js"])).await, 1);
    assert!(stderr.contains("orderStatus already exists"), "{stderr}");
    let (_, stderr) = expect_code(&output(&mut new(&["9lives", "--lang", "python"])).await, 1);
    assert!(stderr.contains("`9lives` cannot name a skill"), "{stderr}");
    assert!(!work.path("9lives").exists());
}

/// `skillhost pack` makes a component of a core module that names the
/// skill world, as a Rust skill built against the guest SDK is, and checks
/// it as a host loads it; what is no such module is refused, saying why,
/// with nothing written.
#[tokio::test]
async fn pack_makes_a_component_of_a_core_module_and_refuses_what_is_not_one() {
    let work = Workdir::new();
    let skill =
        DeclarativeSkill::parse(LOOKUP_SKILL, Format::Yaml, Path::new("lookup.yaml")).unwrap();
    std::fs::write(work.path("lookup.wasm"), skill.to_module().unwrap()).unwrap();
    let mut pack = work.command(&["pack", "lookup.wasm", "--out", "orderLookup.wasm"]);
    let (stdout, _) = expect_code(&output(&mut pack).await, 0);
    assert!(
        stdout.starts_with("packed orderLookup 0.1.0 (instructions only) from lookup.wasm"),
        "{stdout}"
    );
    assert_eq!(
        std::fs::read(work.path("orderLookup.wasm")).unwrap(),
        skill.to_component().unwrap()
    );

    std::fs::write(work.path("text.wasm"), "not wasm").unwrap();
    std::fs::write(work.path("bare.wasm"), wat::parse_str("(module)").unwrap()).unwrap();
    for (file, why) in [
        ("text.wasm", "not a WebAssembly module"),
        ("bare.wasm", "the module names no world"),
        ("orderLookup.wasm", "already a component: sign it as it is"),
    ] {
        let mut pack = work.command(&["pack", file, "--out", "out.wasm"]);
        let (_, stderr) = expect_code(&output(&mut pack).await, 1);
        let said = format!("error: {file} cannot be made a skill component: {why}");
        assert!(stderr.starts_with(&said), "{stderr}");
        assert!(!work.path("out.wasm").exists());
    }
}

#[tokio::test]
async fn test_reports_which_expectation_failed_and_exits_non_zero() {
    let work = Workdir::new();
    let skills = work.path("skills");
    std::fs::create_dir(&skills).unwrap();
    let yaml = work.path("order-lookup.yaml");
    std::fs::write(&yaml, LOOKUP_SKILL).unwrap();
    let mut pack = work.command(&["pack"]);
    pack.arg(&yaml).arg("--out-dir").arg(&skills);
    expect_code(&output(&mut pack).await, 0);
    let component = skills.join("orderLookup.wasm");
    let mut sign = work.command(&["sign"]);
    sign.arg(&component)
        .arg("--key")
        .arg(repo_root().join("keys/demo-signing.key"));
    expect_code(&output(&mut sign).await, 0);

    let status = "Order 88231 (Bit S10 Pro robot vacuum) has been delivered.";
    let both_cases = || {
        vec![
            // Case 1: queries the order, answers without refunding.
            Step::tool_call("queryOrder", json!({"orderId": "88231"})),
            Step::text(status),
            // Case 2: the same, which is what that case expects.
            Step::tool_call("queryOrder", json!({"orderId": "88231"})),
            Step::text(status),
        ]
    };
    let llm = ScriptedLlm::start(both_cases()).await;
    let mut command = work.test_command(&["--json"], &skills);
    let (stdout, _) = expect_code(&output(with_llm(&mut command, &llm)).await, 1);

    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        (report["passed"].clone(), report["failed"].clone()),
        (json!(1), json!(1))
    );
    let failed = &report["cases"][0];
    assert_eq!(failed["case"], "expects a refund it never makes");
    assert_eq!(failed["verdict"], "failed");
    assert_eq!(failed["path"], "llm");
    assert_eq!(failed["llm_calls"], 2);
    assert_eq!(
        failed["failures"],
        json!([
            {"failure": "tool_not_called", "tool": "applyRefund", "called": ["queryOrder"]},
            {"failure": "text_missing", "text": "RF2026"},
        ])
    );
    assert_eq!(report["cases"][1]["verdict"], "passed");
    // The sub-agent ran on the skill's instructions and its declared tools.
    let requests = llm.requests();
    assert!(
        requests[0].messages()[0]["content"]
            .as_str()
            .unwrap()
            .starts_with("Use queryOrder with the order number")
    );
    assert_eq!(requests[0].tool_names(), ["queryOrder", "queryLogistics"]);

    // The same failure, readable.
    let llm = ScriptedLlm::start(both_cases()).await;
    let mut command = work.test_command(&[], &skills);
    let (stdout, _) = expect_code(&output(with_llm(&mut command, &llm)).await, 1);
    assert!(
        stdout.contains("FAIL orderLookup › expects a refund it never makes (LLM)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("expected tool `applyRefund` was not called (called: queryOrder)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("the result does not contain \"RF2026\""),
        "{stdout}"
    );
    assert!(
        stdout.contains("PASS orderLookup › reports the status (LLM"),
        "{stdout}"
    );
    assert!(
        stdout.contains("cases: 1 passed, 1 failed, 0 skipped"),
        "{stdout}"
    );
}

#[tokio::test]
async fn run_asks_before_the_refund_is_written_and_then_writes_it_in_the_db_file() {
    let work = Workdir::new();
    let refund = |extra: &[&str]| {
        let mut args = vec![
            "run",
            "processRefund",
            "--input",
            r#"{"orderId":"88231","reason":"broken"}"#,
        ];
        args.extend_from_slice(extra);
        work.host_command(&args, &bundled())
    };

    // Nobody answers (no stdin): the write is declined, nothing is written,
    // and the skill says why.
    let (stdout, stderr) = expect_code(&output(&mut refund(&[])).await, 0);
    assert!(
        stderr.contains("confirmation") && stderr.contains("approve applyRefund? [y/n]"),
        "{stderr}"
    );
    let result: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(result["refunded"], false, "{stdout}");
    assert!(
        result["message"]
            .as_str()
            .unwrap()
            .contains("a person declined `applyRefund`"),
        "{stdout}"
    );
    assert_eq!(work.refunds_of_88231(), 0);
    // --no declines without asking.
    let (_, stderr) = expect_code(&output(&mut refund(&["--no"])).await, 0);
    assert!(
        stderr.contains("rejected (--no)") && !stderr.contains("[y/n]"),
        "{stderr}"
    );
    assert_eq!(work.refunds_of_88231(), 0);

    // "y" at the prompt: the refund is written.
    let (stdout, stderr) = expect_code(&output_with_stdin(&mut refund(&[]), "y\n").await, 0);
    let result: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(result["refunded"], true, "{stdout}");
    // A new shop runs on the articles' clock, whatever the machine's date.
    assert_eq!(result["refundId"], "RF20260629001", "{stdout}");
    assert!(
        stderr.contains("called queryOrder(") && stderr.contains("called applyRefund("),
        "{stderr}"
    );
    assert_eq!(work.refunds_of_88231(), 1);

    // A config file whose policy needs no approval for writes: no prompt.
    std::fs::write(
        work.path("skillhost.toml"),
        "[confirmation]\nrequire_for_writes = false\n",
    )
    .unwrap();
    let (stdout, stderr) = expect_code(
        &output(&mut refund(&["--config", "skillhost.toml"])).await,
        0,
    );
    assert!(!stderr.contains("[y/n]"), "{stderr}");
    // The shop refuses a second refund of the same order.
    let result: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(result["refunded"], false, "{stdout}");
    assert_eq!(work.refunds_of_88231(), 1);
}

#[tokio::test]
async fn run_says_what_to_do_with_a_skill_it_cannot_run() {
    let work = Workdir::new();
    let run = |skill: &str| work.host_command(&["run", skill, "--yes"], &bundled());
    let (_, stderr) = expect_code(&output(&mut run("processrefund")).await, 1);
    assert!(stderr.contains("did you mean `processRefund`?"), "{stderr}");
    let (_, stderr) = expect_code(&output(&mut run("after_sale_apply")).await, 1);
    assert!(
        stderr.contains("no deterministic steps") && stderr.contains("skillhost ask"),
        "{stderr}"
    );
}

/// `run` takes `serve`'s config file: its `[sandbox]` limits apply.
#[tokio::test]
async fn run_applies_the_config_files_sandbox_limits() {
    let work = Workdir::new();
    std::fs::write(work.path("skillhost.toml"), "[sandbox]\ntool_calls = 1\n").unwrap();
    let mut command = work.host_command(
        &[
            "run",
            "processRefund",
            "--input",
            r#"{"orderId":"88231","reason":"broken"}"#,
            "--config",
            "skillhost.toml",
        ],
        &bundled(),
    );
    let (_, stderr) = expect_code(&output(&mut command).await, 1);
    assert!(
        stderr.contains("applyRefund failed: limit-exceeded")
            && stderr.contains("at most 1 tool calls"),
        "{stderr}"
    );
    assert_eq!(work.refunds_of_88231(), 0);

    std::fs::write(work.path("skillhost.toml"), "[sandbox]\ntool_call = 1\n").unwrap();
    let (_, stderr) = expect_code(&output(&mut command).await, 1);
    assert!(
        stderr.contains("in the config file skillhost.toml") && stderr.contains("tool_call"),
        "{stderr}"
    );
}

/// A sandbox too large for the machine, or for the pool's counters, stops
/// `run` and `serve` at start with the config keys that size it.
#[tokio::test]
async fn a_sandbox_too_large_to_start_names_the_keys_that_size_it() {
    let work = Workdir::new();
    for (instances, says) in [
        (2_000_000_000, "more than the pool can count"),
        (1_000_000, "could not be reserved"),
    ] {
        let config = format!("[sandbox]\nmax_instances = {instances}\n");
        std::fs::write(work.path("skillhost.toml"), config).unwrap();
        let run = [
            "run",
            "processRefund",
            "--input",
            r#"{"orderId":"88231","reason":"broken"}"#,
        ];
        let serve = ["serve", "--listen", "127.0.0.1:0"];
        for command in [&run[..], &serve[..]] {
            let args = [command, &["--config", "skillhost.toml"]].concat();
            let (_, stderr) =
                expect_code(&output(&mut work.host_command(&args, &bundled())).await, 1);
            assert!(
                stderr.contains("`[sandbox] max_instances`") && stderr.contains(says),
                "{command:?}: {stderr}"
            );
        }
    }
    assert_eq!(work.refunds_of_88231(), 0);
}

/// `ask` takes the LLM, the agent and the confirmation policy from the
/// config file too: here the write is approved by the file, not asked.
#[tokio::test]
async fn ask_reads_the_llm_and_confirmation_policy_from_the_config_file() {
    let work = Workdir::new();
    let llm = ScriptedLlm::start(vec![refund_call(), Step::text("Refunded.")]).await;
    let config = format!(
        "[llm]\nmodel = \"test-model\"\nbase_url = \"{}\"\n\n\
         [confirmation]\nauto_approve = [\"applyRefund\"]\n",
        llm.base_url()
    );
    let mut command = work.configured_command(&config, &["ask", REFUND_REQUEST], &bundled());
    let (stdout, stderr) = expect_code(&output(&mut command).await, 0);
    assert_eq!(stdout.trim(), "Refunded.", "{stderr}");
    assert_eq!(work.refunds_of_88231(), 1);
}

/// An approver no key of the gateway goes by could never answer: a
/// separate approver on a gateway without keys, or an approver's name no
/// key has (a typo, a key not yet added). `serve` says so at the start.
#[tokio::test]
async fn serve_warns_of_settings_naming_no_key_or_skill() {
    for (config, warning) in [
        (
            "[confirmation]\nseparate_approver = true\n",
            "separate_approver is set but the gateway has no keys",
        ),
        (
            "[confirmation.tool_approvers]\napplyRefund = [\"finance-desk\"]\n",
            "names approvers that no key of this gateway goes by: finance-desk; the gateway has \
             no keys",
        ),
        (
            "[server.skill_scopes]\nsupport-desk = [\"inquireOrderStatus\"]\n",
            "[server.skill_scopes] names keys that no key of this gateway goes by: support-desk; \
             the gateway has no keys",
        ),
        (
            "[server.tool_scopes]\nsupport-desk = [\"queryOrder\"]\n",
            "[server.tool_scopes] names keys that no key of this gateway goes by: support-desk; \
             the gateway has no keys",
        ),
        (
            "[sandbox.skills.refundProcess]\ntool_calls = 1\n",
            "[sandbox.skills] sets limits for skills that are not loaded: refundProcess;",
        ),
    ] {
        let work = Workdir::new();
        let command =
            work.configured_command(config, &["serve", "--listen", "127.0.0.1:0"], &bundled());
        let Serving { started, .. } = serving(command).await;
        assert!(
            started.iter().any(|line| line.contains(warning)),
            "{config}: {started:#?}"
        );
    }
}

/// `[server]`'s connection limits reach the gateway: with room for one
/// connection, a client that holds it without a request keeps the next
/// waiting until the header deadline closes it.
#[tokio::test]
async fn serve_takes_its_connection_limits_from_the_config_file() {
    use tokio::io::AsyncReadExt;
    let work = Workdir::new();
    let command = work.configured_command(
        "[server]\nheader_timeout_secs = 1\nmax_connections = 1\n",
        &["serve", "--listen", "127.0.0.1:0"],
        &bundled(),
    );
    // Bound, so that the server lives (killed when dropped) and can log.
    let Serving {
        child: _serve,
        base,
        stderr: _stderr,
        ..
    } = serving(command).await;
    let address = base.trim_start_matches("http://");
    let mut holding = tokio::net::TcpStream::connect(address).await.unwrap();
    let answered = tokio::time::timeout(
        Duration::from_secs(30),
        reqwest::get(format!("{base}/healthz")),
    )
    .await
    .expect("the next client was never served")
    .unwrap();
    assert_eq!(answered.status(), reqwest::StatusCode::OK);
    // It was served once the first had been closed, not beside it.
    let mut received = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), holding.read_to_end(&mut received))
        .await
        .expect("the connection holding the only slot is still open")
        .unwrap();
    assert!(received.is_empty());
}

/// `--yes` cannot stand in for a separate approver, nor for one of the
/// approvers the policy names (it approves on behalf of nobody): the write
/// is declined at once, saying why, instead of waiting for the
/// confirmation to expire.
#[tokio::test]
async fn yes_declines_a_write_it_may_not_approve() {
    for (config, why) in [
        (
            "separate_approver = true",
            "needs approval by someone other than the requester",
        ),
        (
            "approvers = [\"finance-desk\"]",
            "may be approved only by `finance-desk`",
        ),
    ] {
        let work = Workdir::new();
        let mut command = work.configured_command(
            &format!("[confirmation]\n{config}\n"),
            &[
                "run",
                "processRefund",
                "--yes",
                "--input",
                r#"{"orderId":"88231","reason":"broken"}"#,
            ],
            &bundled(),
        );
        let (stdout, stderr) = expect_code(&output(&mut command).await, 0);
        assert!(stdout.contains(why), "{config}: {stdout}\n{stderr}");
        assert_eq!(work.refunds_of_88231(), 0, "{config}");
    }
}

/// `[sandbox.skills.NAME]` sets one skill's limits over `[sandbox]`'s:
/// with one tool call, processRefund's second (the refund) is refused and
/// nothing is written, while inquireOrderStatus makes both of its calls. A
/// name no loaded skill has is warned of.
#[tokio::test]
async fn a_skills_own_limits_from_the_config_file_apply_to_it_alone() {
    let work = Workdir::new();
    let config = "[sandbox]\ntool_calls = 8\n[sandbox.skills.processRefund]\ntool_calls = 1\n\
                  [sandbox.skills.inquireOrderstatus]\ntool_calls = 1\n";
    let run = |skill: &str, input: &str| {
        work.configured_command(
            config,
            &["run", skill, "--yes", "--input", input],
            &bundled(),
        )
    };
    let mut refund = run("processRefund", r#"{"orderId":"88231","reason":"broken"}"#);
    let (stdout, stderr) = expect_code(&output(&mut refund).await, 1);
    assert!(
        stderr.contains("applyRefund failed") && stderr.contains("at most 1 tool calls"),
        "{stdout}\n{stderr}"
    );
    assert_eq!(work.refunds_of_88231(), 0);
    let mut inquire = run("inquireOrderStatus", r#"{"orderId":"88231"}"#);
    let (stdout, stderr) = expect_code(&output(&mut inquire).await, 0);
    assert!(stdout.contains("SF1234567890"), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("sets limits for skills that are not loaded: inquireOrderstatus;"),
        "{stderr}"
    );
    // What each skill got, as `skills --json` shows it.
    let mut skills = work.configured_command(config, &["skills", "--json"], &bundled());
    let (stdout, _) = expect_code(&output(&mut skills).await, 0);
    let listing: Value = serde_json::from_str(&stdout).unwrap();
    let tool_calls = |name: &str| {
        let skills = listing["skills"].as_array().unwrap();
        let skill = skills.iter().find(|skill| skill["name"] == name).unwrap();
        skill["limits"]["tool_calls"].clone()
    };
    assert_eq!(tool_calls("processRefund"), 1);
    assert_eq!(tool_calls("inquireOrderStatus"), 8);
    // And as the table shows it: a line for the skill with limits of its own only.
    let mut skills = work.configured_command(config, &["skills"], &bundled());
    let (stdout, _) = expect_code(&output(&mut skills).await, 0);
    let own: Vec<&str> = stdout
        .lines()
        .filter(|line| line.contains("of its own"))
        .collect();
    assert_eq!(
        own,
        [
            "processRefund has limits of its own: 2000 ms, 64 MiB memory, 1 tool calls, \
          1048576 output bytes, 256 log lines"
        ],
        "{stdout}"
    );
}

#[tokio::test]
async fn a_confirmation_exception_naming_no_tool_is_refused_not_ignored() {
    let work = Workdir::new();
    // Meant to make the read ask; misspelt, it would have run unattended.
    let mut command = work.configured_command(
        "[confirmation]\nalways_ask = [\"queryorder\"]\n",
        &[
            "run",
            "processRefund",
            "--input",
            r#"{"orderId":"88231","reason":"broken"}"#,
        ],
        &bundled(),
    );
    let (stdout, stderr) = expect_code(&output(&mut command).await, 1);
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.contains("always_ask names `queryorder`")
            && stderr.contains("did you mean `queryOrder`?"),
        "{stderr}"
    );
    assert_eq!(work.refunds_of_88231(), 0);
}

#[tokio::test]
async fn run_of_a_failing_skill_exits_1_and_says_why_in_text_and_in_json() {
    let work = Workdir::new();
    let skills = work.path("skills");
    std::fs::create_dir(&skills).unwrap();
    std::fs::copy(fixture("panicker"), skills.join("panicker.wasm")).unwrap();
    let run = |json: bool| {
        let mut args = vec!["run", "panicker", "--input", "{}"];
        if json {
            args.push("--json");
        }
        work.host_command(&args, &skills)
    };
    let (stdout, stderr) = expect_code(&output(&mut run(false)).await, 1);
    assert!(stdout.is_empty(), "{stdout}");
    assert!(stderr.contains("trapped"), "{stderr}");
    let (stdout, _) = expect_code(&output(&mut run(true)).await, 1);
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["outcome"], "failed", "{report:#}");
    assert!(
        report["result"].as_str().unwrap().contains("trapped"),
        "{report:#}"
    );
}

#[tokio::test]
async fn run_reads_its_input_from_a_file_or_standard_input() {
    let work = Workdir::new();
    let order = work.path("order.json");
    std::fs::write(&order, r#"{"orderId": "88231"}"#).unwrap();
    let from_file = format!("@{}", order.display());
    let inquire = |input: &str| {
        work.host_command(&["run", "inquireOrderStatus", "--input", input], &bundled())
    };
    let said = "Order 88231 (Bit S10 Pro robot vacuum) is delivered";
    let (stdout, _) = expect_code(&output(&mut inquire(&from_file)).await, 0);
    assert!(stdout.contains(said), "{stdout}");
    let piped = output_with_stdin(&mut inquire("-"), r#"{"orderId": "88231"}"#).await;
    let (stdout, _) = expect_code(&piped, 0);
    assert!(stdout.contains(said), "{stdout}");

    // Refused before any skill loads, naming where the text came from.
    std::fs::write(&order, r#"{"orderId": "88231""#).unwrap();
    let (stdout, stderr) = expect_code(&output(&mut inquire(&from_file)).await, 2);
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.contains(&format!("{} is not valid JSON", order.display())),
        "{stderr}"
    );
    let missing = format!("@{}", work.path("absent.json").display());
    let (_, stderr) = expect_code(&output(&mut inquire(&missing)).await, 2);
    assert!(
        stderr.contains("reading ") && stderr.contains("absent.json"),
        "{stderr}"
    );
}

#[tokio::test]
async fn run_with_bad_input_names_the_field_and_exits_non_zero() {
    let work = Workdir::new();
    for (input, field) in [
        (r#"{"orderId":"88231"}"#, "field `reason`: missing"),
        (r#"{"orderId":88231,"reason":"broken"}"#, "field `orderId`"),
    ] {
        let mut command =
            work.host_command(&["run", "processRefund", "--input", input], &bundled());
        let (stdout, stderr) = expect_code(&output(&mut command).await, 1);
        assert!(stdout.is_empty(), "{stdout}");
        assert!(
            stderr.starts_with("error: ") && stderr.contains(field),
            "{input}: {stderr}"
        );
    }
    assert_eq!(work.refunds_of_88231(), 0);
}

#[tokio::test]
async fn started_elsewhere_it_names_the_setting_and_directory_to_fix() {
    // An empty working directory: neither keys/trusted nor skills/ is there.
    let work = Workdir::new();
    let here = work.path("").canonicalize().unwrap();
    let (_, stderr) = expect_code(&output(&mut work.command(&["skills"])).await, 1);
    assert!(
        stderr.starts_with("error: loading the trust store (--trust or SKILLHOST_TRUST;")
            && stderr.contains(&format!("working directory {}", here.display()))
            && stderr.contains("keys/trusted"),
        "{stderr}"
    );
    let trusted = repo_root().join("keys/trusted");
    for command in ["skills", "serve", "test"] {
        let mut command = work.command(&[command, "--db", "shop.db", "--trust"]);
        command.arg(&trusted);
        let (_, stderr) = expect_code(&output(&mut command).await, 1);
        assert_eq!(
            stderr.trim_end(),
            format!(
                "error: no skills directory at skills (--skills or SKILLHOST_SKILLS; \
                 working directory {})",
                here.display()
            )
        );
    }
    // A command that stops at its settings leaves no database behind.
    assert!(!work.path("shop.db").exists() && !work.path("skillhost-demo.db").exists());
}

/// A `skillhost serve` that has announced where it listens.
struct Serving {
    child: tokio::process::Child,
    /// The base URL it announced.
    base: String,
    /// The lines of its stderr up to the announcement, which is the last.
    started: Vec<String>,
    /// The rest of its stderr.
    stderr: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStderr>>,
}

impl Serving {
    /// Writes `config` as the config file in `work`, sends SIGHUP, and
    /// waits for serve to say `said`.
    async fn read_again(&mut self, work: &Workdir, config: &str, said: &str) {
        std::fs::write(work.path("skillhost.toml"), config).unwrap();
        send_signal(&self.child, "-HUP").await;
        said_next(&mut self.stderr, said).await;
    }
}

/// Starts `command` (a `skillhost serve` on port 0) and waits for it to
/// announce its address.
async fn serving(mut command: Command) -> Serving {
    use tokio::io::AsyncBufReadExt;
    let mut child = command
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("starting skillhost serve");
    let mut stderr = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let mut started = Vec::new();
    let announced = async {
        loop {
            let Some(line) = stderr.next_line().await.unwrap() else {
                panic!("serve ended before it announced its address: {started:#?}");
            };
            started.push(line.clone());
            if let Some(rest) = said(&line).strip_prefix("skillhost serving on ") {
                return rest.split_whitespace().next().unwrap().to_owned();
            }
        }
    };
    let base = tokio::time::timeout(Duration::from_secs(30), announced)
        .await
        .expect("serve did not announce its address within 30 s");
    Serving {
        child,
        base,
        started,
        stderr,
    }
}

/// What a line of serve's stderr says: the line, or with JSON logs the
/// message of its event.
fn said(line: &str) -> String {
    match serde_json::from_str::<Value>(line) {
        Ok(event) => event["fields"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        Err(_) => line.to_owned(),
    }
}

/// How a serve told to stop ended, and the rest of what it said. Its
/// stderr is read to the end first: a serve saying more than a pipe holds
/// would otherwise never end.
async fn ended(
    serve: &mut tokio::process::Child,
    stderr: &mut tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStderr>>,
) -> (std::process::ExitStatus, String) {
    let ending = async {
        let mut said = String::new();
        while let Ok(Some(line)) = stderr.next_line().await {
            said.push_str(&line);
            said.push('\n');
        }
        (serve.wait().await.unwrap(), said)
    };
    tokio::time::timeout(Duration::from_secs(40), ending)
        .await
        .expect("serve did not end within 40 s")
}

/// Sends SIGTERM to `child`.
async fn terminate(child: &tokio::process::Child) {
    send_signal(child, "-TERM").await;
}

/// Sends `signal` (`-HUP`) to `child`.
async fn send_signal(child: &tokio::process::Child, signal: &str) {
    let pid = child.id().expect("still running").to_string();
    let status = Command::new("kill")
        .args([signal, &pid])
        .status()
        .await
        .unwrap();
    assert!(status.success());
}

/// Reads serve's stderr up to the first line that contains `text`.
async fn said_next(
    stderr: &mut tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStderr>>,
    text: &str,
) -> String {
    let found = async {
        loop {
            let line = stderr.next_line().await.unwrap().expect("serve says more");
            if line.contains(text) {
                return line;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), found)
        .await
        .unwrap_or_else(|_| panic!("serve did not say {text:?} within 30 s"))
}

#[tokio::test]
async fn serve_exits_0_when_requests_finish_and_1_when_the_grace_cuts_them() {
    let work = Workdir::new();
    // Nothing at work, only a run waiting for an answer: a clean exit,
    // saying which call goes unanswered.
    let Serving {
        child: mut serve,
        base,
        mut stderr,
        ..
    } = serving(work.host_command(&["serve", "--listen", "127.0.0.1:0"], &bundled())).await;
    let parked = reqwest::Client::new()
        .post(format!("{base}/v1/skills/processRefund/invoke"))
        .json(&json!({"orderId": "88231", "reason": "broken"}))
        .send()
        .await
        .unwrap();
    assert_eq!(parked.status(), reqwest::StatusCode::ACCEPTED);
    terminate(&serve).await;
    let (status, said) = ended(&mut serve, &mut stderr).await;
    assert_eq!(status.code(), Some(0), "{said}");
    assert!(
        said.contains(
            "1 confirmation(s) still waiting are withdrawn with their runs: applyRefund: orderId \
             '88231', reason 'broken'"
        ),
        "{said}"
    );

    // A chat whose model takes longer than the grace.
    let llm = ScriptedLlm::start(vec![Step::text("late").delay(Duration::from_secs(30))]).await;
    let mut command = work.host_command(
        &["serve", "--listen", "127.0.0.1:0", "--shutdown-grace", "1"],
        &bundled(),
    );
    with_llm(&mut command, &llm);
    let Serving {
        child: mut serve,
        base,
        mut stderr,
        ..
    } = serving(command).await;
    let chat = tokio::spawn(
        reqwest::Client::new()
            .post(format!("{base}/v1/chat/completions"))
            .json(&json!({"messages": [{"role": "user", "content": "hi"}]}))
            .send(),
    );
    llm.asked(1).await;
    terminate(&serve).await;
    let (status, said) = ended(&mut serve, &mut stderr).await;
    assert_eq!(status.code(), Some(1), "{said}");
    assert!(said.contains("did not finish within 1s"), "{said}");
    chat.abort();
}

/// `serve --check` starts what serve would, says what it would serve, and
/// exits: it binds nothing (the address is taken here) and creates no
/// runs directory.
#[tokio::test]
async fn serve_check_says_what_would_serve_and_exits_without_serving() {
    let work = Workdir::new();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let mut check = work.host_command(
        &[
            "serve",
            "--check",
            "--listen",
            &address,
            "--runs-dir",
            "runs",
        ],
        &bundled(),
    );
    let (stdout, stderr) = expect_code(&output(&mut check).await, 0);
    assert!(stdout.is_empty(), "{stdout}");
    // The warning: the demo key is trusted.
    assert_has_line(
        &stderr,
        &format!(
            "check passed, 1 warning(s) above: serve would start with 7 skill(s) and 22 tool(s), \
             on http://{address}"
        ),
    );
    assert!(!work.path("runs").exists());
}

/// What serve would start without (a skill file that does not load, a runs
/// directory it would refuse) fails the check, naming it; a setting that
/// stops serve's start stops the check the same way.
#[tokio::test]
async fn serve_check_fails_naming_what_serve_would_refuse() {
    use std::os::unix::fs::PermissionsExt;
    let work = Workdir::new();
    let skills = work.path("skills");
    std::fs::create_dir(&skills).unwrap();
    let refund = std::fs::read(skill_file("processRefund")).unwrap();
    std::fs::write(skills.join("processRefund.wasm"), &refund).unwrap();
    std::fs::write(skills.join("truncated.wasm"), &refund[..1000]).unwrap();
    let mut check = work.host_command(&["serve", "--check"], &skills);
    let (_, stderr) = expect_code(&output(&mut check).await, 1);
    let verdict = stderr.lines().last().unwrap();
    assert!(
        verdict.starts_with("error: check failed, 2 warning(s) above: ")
            && verdict.ends_with("truncated.wasm did not load"),
        "{stderr}"
    );

    let runs = work.path("runs");
    std::fs::create_dir(&runs).unwrap();
    std::fs::set_permissions(&runs, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut check = work.host_command(&["serve", "--check", "--runs-dir", "runs"], &bundled());
    let (_, stderr) = expect_code(&output(&mut check).await, 1);
    assert!(
        stderr.contains("check failed") && stderr.contains("runs directory runs: its mode is 755"),
        "{stderr}"
    );

    let mut check = work.configured_command(
        "[sandbox]\nmemory_mib = \"lots\"\n",
        &["serve", "--check"],
        &bundled(),
    );
    let (_, stderr) = expect_code(&output(&mut check).await, 1);
    assert!(
        stderr.contains("memory_mib") && !stderr.contains("check passed"),
        "{stderr}"
    );
}

/// With `--runs-dir`, a skill invocation waiting for an approval outlives
/// its process: the next `serve` on the directory holds it again under the
/// same confirmation id, the approval runs the write once, and the run's
/// record tells its requester the result.
#[tokio::test]
async fn a_run_waiting_for_approval_is_kept_across_a_restart() {
    use std::os::unix::fs::PermissionsExt;
    let work = Workdir::new();
    let serve = || {
        serving(work.host_command(
            &["serve", "--listen", "127.0.0.1:0", "--runs-dir", "runs"],
            &bundled(),
        ))
    };
    let http = reqwest::Client::new();
    let Serving {
        child: mut first,
        base,
        mut stderr,
        ..
    } = serve().await;
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let accepted: Value = http
        .post(format!("{base}/v1/skills/processRefund/invoke"))
        .header("traceparent", format!("00-{trace}-00f067aa0ba902b7-01"))
        .json(&json!({"orderId": "88231", "reason": "broken"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(accepted["status"], "pending_confirmation", "{accepted:#}");
    let (run, confirmation) = (&accepted["run"], &accepted["confirmation"]["id"]);
    let kept = work
        .path("runs")
        .join(format!("{}.json", run.as_str().unwrap()));
    assert!(kept.exists(), "the waiting run is not on disk");
    let mode = std::fs::metadata(work.path("runs"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);

    terminate(&first).await;
    let (status, said) = ended(&mut first, &mut stderr).await;
    assert_eq!(status.code(), Some(0), "{said}");
    assert!(
        said.contains("1 run(s) waiting for an answer are kept in runs and wait again at the next start: applyRefund: orderId '88231', reason 'broken'")
            && !said.contains("withdrawn"),
        "{said}"
    );
    assert_eq!(work.refunds_of_88231(), 0);
    // What the directory keeps, listed while no serve runs.
    let listed = output(&mut work.command(&["runs", "--runs-dir", "runs"])).await;
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    assert!(
        has_line(
            &text(&listed.stdout),
            &[
                run.as_str().unwrap(),
                "applyRefund: orderId '88231', reason 'broken'",
                "waiting, expires",
                "skill processRefund",
                confirmation.as_str().unwrap(),
                &format!("trace {trace}"),
            ]
        ),
        "{}",
        text(&listed.stdout)
    );
    let listed = output(&mut work.command(&["runs", "--runs-dir", "runs", "--json"])).await;
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed["runs"][0]["run"], *run, "{listed:#}");
    assert_eq!(listed["runs"][0]["state"], "waiting");
    assert_eq!(listed["runs"][0]["kind"], "skill");
    assert_eq!(listed["runs"][0]["confirmation"], *confirmation);
    assert_eq!(listed["runs"][0]["trace_id"], trace);
    assert_eq!(listed["unreadable"], json!([]));
    // A check before the restart lists the run, and leaves it as it is.
    let kept_before = std::fs::read(&kept).unwrap();
    let checked =
        output(&mut work.host_command(&["serve", "--check", "--runs-dir", "runs"], &bundled()))
            .await;
    let (_, said) = expect_code(&checked, 0);
    assert_has_line(&said, "1 run(s) kept in runs would be resumed");
    assert_eq!(std::fs::read(&kept).unwrap(), kept_before);

    let Serving {
        child: _second,
        base,
        stderr: _stderr,
        ..
    } = serve().await;
    let get = |path: String| {
        let request = http.get(format!("{base}{path}")).send();
        async move {
            let response = request.await.unwrap();
            response.json::<Value>().await.unwrap()
        }
    };
    let waiting = get("/v1/confirmations".to_owned()).await;
    assert_eq!(waiting["data"][0]["id"], *confirmation, "{waiting:#}");
    assert_eq!(waiting["data"][0]["run"], *run);
    let answer = http
        .post(format!(
            "{base}/v1/confirmations/{}",
            confirmation.as_str().unwrap()
        ))
        .json(&json!({"decision": "approve"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), reqwest::StatusCode::OK);
    let done: Value = answer.json().await.unwrap();
    assert_eq!(done["status"], "done", "{done:#}");
    assert_eq!(done["run"], *run);
    assert!(done["result"]["refundId"].is_string(), "{done:#}");
    assert_eq!(work.refunds_of_88231(), 1);
    assert!(!kept.exists(), "an answered run is still on disk");
    let record = get(format!("/v1/runs/{}", run.as_str().unwrap())).await;
    assert_eq!(record["status"], "done", "{record:#}");
}

/// A chat waiting for the approval of a write, with `--runs-dir`, outlives
/// its `serve`: the next one holds the confirmation again, and the
/// approval's answer is the conversation's completion, the model asked
/// only for what comes after the write.
#[tokio::test]
async fn a_chat_waiting_for_approval_is_kept_across_a_restart() {
    let work = Workdir::new();
    let llm = ScriptedLlm::start(vec![
        Step::tool_call(
            "processRefund",
            json!({"orderId": "88231", "reason": "broken"}),
        ),
        Step::text("Refunded."),
    ])
    .await;
    let serve = || {
        let mut command = work.host_command(
            &["serve", "--listen", "127.0.0.1:0", "--runs-dir", "runs"],
            &bundled(),
        );
        with_llm(&mut command, &llm);
        serving(command)
    };
    let http = reqwest::Client::new();
    let Serving {
        child: mut first,
        base,
        mut stderr,
        ..
    } = serve().await;
    let pending: Value = http
        .post(format!("{base}/v1/chat/completions"))
        .json(
            &json!({"messages": [{"role": "user", "content": "refund order 88231, it is broken"}]}),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        pending["skillhost"]["status"], "pending_confirmation",
        "{pending:#}"
    );
    let confirmation = pending["skillhost"]["confirmation"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    terminate(&first).await;
    let (status, said) = ended(&mut first, &mut stderr).await;
    assert_eq!(status.code(), Some(0), "{said}");
    assert!(
        said.contains("1 run(s) waiting for an answer are kept in runs"),
        "{said}"
    );
    // `created` is in seconds: the next serve starts in another one.
    tokio::time::sleep(Duration::from_millis(1100)).await;

    let Serving {
        child: _second,
        base,
        started,
        ..
    } = serve().await;
    let done: Value = http
        .post(format!("{base}/v1/confirmations/{confirmation}"))
        .json(&json!({"decision": "approve"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        done["skillhost"]["status"], "completed",
        "{done:#} {started:#?}"
    );
    assert_eq!(done["choices"][0]["message"]["content"], "Refunded.");
    // The same completion as the one the first serve began.
    assert_eq!(
        (&done["id"], &done["created"]),
        (&pending["id"], &pending["created"])
    );
    assert_eq!(work.refunds_of_88231(), 1);
    assert_eq!(
        llm.requests().len(),
        2,
        "the model is asked once per answer"
    );
}

/// An exit that cuts a run short after its write was approved and ran
/// says so: the run's record stays for the next start to tell of.
#[tokio::test]
async fn serve_cut_short_names_the_runs_stopped_after_an_approved_call() {
    let work = Workdir::new();
    let llm = ScriptedLlm::start(vec![
        refund_call(),
        Step::text("Refunded.").delay(Duration::from_secs(30)),
    ])
    .await;
    let mut command = work.host_command(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--runs-dir",
            "runs",
            "--shutdown-grace",
            "1",
        ],
        &bundled(),
    );
    with_llm(&mut command, &llm);
    let Serving {
        child: mut serve,
        base,
        mut stderr,
        ..
    } = serving(command).await;
    let http = reqwest::Client::new();
    let pending: Value = http
        .post(format!("{base}/v1/chat/completions"))
        .json(&json!({"messages": [{"role": "user", "content": REFUND_REQUEST}]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let confirmation = pending["skillhost"]["confirmation"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no confirmation: {pending:#}"))
        .to_owned();
    // The answer waits for the model, which is slow.
    let answer = tokio::spawn(
        http.post(format!("{base}/v1/confirmations/{confirmation}"))
            .json(&json!({"decision": "approve"}))
            .send(),
    );
    llm.asked(2).await;
    assert_eq!(work.refunds_of_88231(), 1);

    terminate(&serve).await;
    let (status, said) = ended(&mut serve, &mut stderr).await;
    assert_eq!(status.code(), Some(1), "{said}");
    assert!(
        said.contains(
            "1 run(s) are cut short after their call was approved: applyRefund: orderId '88231', \
             reason 'the robot vacuum is broken' (it returned); the next start tells their \
             requesters, and `skillhost runs --runs-dir runs` lists them"
        ),
        "{said}"
    );
    answer.abort();
}

/// `serve` takes the config file's MCP servers' tools: the agent behind
/// the chat endpoint calls one; a server it cannot reach stops the start.
#[tokio::test]
async fn serve_offers_the_tools_of_the_config_files_mcp_servers() {
    let mcp = McpServer::default();
    let url = mcp.start().await;
    let work = Workdir::new();
    let declare = |url: &str| {
        format!(
            "[[mcp_servers]]\nname = \"crm\"\nurl = \"{url}\"\n\
             tools = [\"lookupCustomer\"]\nread = [\"lookupCustomer\"]\n"
        )
    };
    let llm = ScriptedLlm::start(vec![
        Step::tool_call("lookupCustomer", json!({"id": "u1001"})),
        Step::text("Li Lei is a gold member."),
    ])
    .await;
    let mut command = work.configured_command(
        &declare(&url),
        &["serve", "--listen", "127.0.0.1:0"],
        &bundled(),
    );
    with_llm(&mut command, &llm);
    let Serving {
        child: _serve,
        base,
        stderr: _stderr,
        ..
    } = serving(command).await;
    let answer: Value = reqwest::Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .json(&json!({"messages": [{"role": "user", "content": "who is u1001?"}]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let said = &answer["choices"][0]["message"]["content"];
    assert_eq!(said, "Li Lei is a gold member.", "{answer}");
    assert_eq!(
        mcp.calls(),
        [("lookupCustomer".to_owned(), json!({"id": "u1001"}))]
    );

    let gone = "http://127.0.0.1:9/mcp";
    let mut command = work.configured_command(
        &declare(gone),
        &["serve", "--listen", "127.0.0.1:0"],
        &bundled(),
    );
    let (_, stderr) = expect_code(&output(&mut command).await, 1);
    assert!(
        stderr.contains(&format!("MCP server `crm` ({gone}): initialize: ")),
        "{stderr}"
    );
}

#[tokio::test]
async fn serve_with_json_logs_writes_nothing_but_json_lines_from_start_to_shutdown() {
    let work = Workdir::new();
    // A skills directory with a file that does not load: its warning too.
    let skills = work.path("skills");
    std::fs::create_dir(&skills).unwrap();
    std::fs::copy(
        skill_file("processRefund"),
        skills.join("processRefund.wasm"),
    )
    .unwrap();
    std::fs::write(skills.join("broken.wasm"), b"not a component").unwrap();
    let command = work.host_command(
        &["--log-format", "json", "serve", "--listen", "127.0.0.1:0"],
        &skills,
    );
    let Serving {
        child: mut serve,
        base,
        started,
        mut stderr,
    } = serving(command).await;
    let health: Value = reqwest::get(format!("{base}/healthz"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["status"], "degraded", "{health}");
    terminate(&serve).await;
    let (status, rest) = ended(&mut serve, &mut stderr).await;
    assert_eq!(status.code(), Some(0), "{rest}");
    let mut lines = started;
    lines.extend(rest.lines().map(str::to_owned));
    let events: Vec<Value> = lines
        .iter()
        .map(|line| {
            serde_json::from_str(line)
                .unwrap_or_else(|_| panic!("a line of serve's stderr is not JSON: {line:?}"))
        })
        .collect();
    // What serve tells its operator, in order, as events of its own target.
    let mut told: Vec<(&str, String)> = events
        .iter()
        .filter(|event| event["target"] == "skillhost::console")
        .map(|event| {
            let level = event["level"].as_str().unwrap();
            (level, said(&event.to_string()))
        })
        .collect();
    // A checkout made with a umask letting the group write has one more.
    told.retain(|(_, message)| !message.contains("may be written by its group"));
    let expected = [
        ("INFO", "trusting key "),
        ("WARN", "key "),
        (
            "INFO",
            "loaded 1 skill(s), watching for changes: processRefund",
        ),
        (
            "WARN",
            &format!("{} did not load: ", skills.join("broken.wasm").display()),
        ),
        ("INFO", "no LLM: chat completions answer 503"),
        ("INFO", "skillhost serving on http://"),
        (
            "INFO",
            "shutting down: letting in-flight requests and runs finish",
        ),
    ];
    assert_eq!(told.len(), expected.len(), "{told:#?}");
    for ((level, message), (expected_level, start)) in told.iter().zip(expected) {
        assert!(
            *level == expected_level && message.starts_with(start),
            "expected {expected_level} {start:?}…, got {level} {message:?}"
        );
    }
}

#[tokio::test]
async fn serve_with_a_relative_skills_directory_follows_replacements_and_deletions() {
    // `--skills skills`, as the README's main command has it by default.
    let work = Workdir::new();
    let skills = work.path("skills");
    std::fs::create_dir(&skills).unwrap();
    for name in ["processRefund", "inquireOrderStatus"] {
        std::fs::copy(skill_file(name), skills.join(format!("{name}.wasm"))).unwrap();
    }
    std::fs::copy(fixture("versioned-1"), skills.join("versioned.wasm")).unwrap();
    let Serving {
        child: mut serve,
        base,
        ..
    } = serving(work.host_command(&["serve", "--listen", "127.0.0.1:0"], Path::new("skills")))
        .await;
    let get = |path: &str| {
        let url = format!("{base}{path}");
        async move {
            reqwest::get(url)
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    };
    let until = async |path: &str, ready: &dyn Fn(&Value) -> bool| {
        for _ in 0..400 {
            let body = get(path).await;
            if ready(&body) {
                return body;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{path} never got ready: {:#}", get(path).await);
    };
    assert_eq!(get("/healthz").await["skills"], 3);

    // A new version renamed into place replaces the old one...
    let staged = skills.join(".versioned.wasm.tmp");
    std::fs::copy(fixture("versioned-2"), &staged).unwrap();
    std::fs::rename(&staged, skills.join("versioned.wasm")).unwrap();
    let versioned = until("/v1/skills/versioned", &|skill| skill["version"] == "2.0.0").await;
    assert_eq!(versioned["last_error"], Value::Null);
    // ... and a deleted file's skill is unloaded.
    std::fs::remove_file(skills.join("processRefund.wasm")).unwrap();
    let health = until("/healthz", &|health| health["skills"] == 2).await;
    assert_eq!(health["status"], "ok", "{health:#}");
    let listing = get("/v1/skills").await;
    assert_eq!(listing["failures"], json!([]));
    serve.kill().await.unwrap();
}

#[tokio::test]
async fn skills_json_lists_the_seven_bundled_skills_with_their_signer() {
    let work = Workdir::new();
    let mut command = work.host_command(&["skills", "--json"], &bundled());
    let (stdout, _) = expect_code(&output(&mut command).await, 0);
    let listing: Value = serde_json::from_str(&stdout).unwrap();
    let skills = listing["skills"].as_array().unwrap();
    let names: Vec<&str> = skills
        .iter()
        .map(|skill| skill["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "after_sale_apply",
            "fault_diagnosis",
            "inquireOrderStatus",
            "iot_bundle",
            "order_change",
            "order_checkout",
            "processRefund"
        ]
    );
    for skill in skills {
        assert!(
            skill["signer"].as_str().is_some_and(|key| !key.is_empty()),
            "{skill}"
        );
    }
    assert_eq!(listing["failed"], json!([]));
}

#[tokio::test]
async fn chat_streams_answers_keeps_the_conversation_and_asks_to_confirm_writes() {
    let work = Workdir::new();
    let llm = ScriptedLlm::start(vec![
        refund_call(),
        Step::text("Your refund for the S10 Pro is on its way.").fragments(4),
        Step::text("You're welcome, happy to help.").fragments(3),
    ])
    .await;
    let mut command = work.host_command(&["chat"], &bundled());
    let input = format!("{REFUND_REQUEST}\ny\nthanks!\n");
    let output = output_with_stdin(with_llm(&mut command, &llm), &input).await;
    let (stdout, stderr) = expect_code(&output, 0);

    // Only the answers are on stdout, one a line, streamed piece by piece.
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        [
            "Your refund for the S10 Pro is on its way.",
            "You're welcome, happy to help."
        ]
    );
    let requests = llm.requests();
    assert_eq!(requests.len(), 3);
    assert!(
        requests
            .iter()
            .all(|request| request.body["stream"] == true),
        "every call streams"
    );
    // The prompt, the calls of the round as `ask` shows them, the question.
    assert!(
        stderr.contains(&format!("you> {REFUND_REQUEST}")),
        "{stderr}"
    );
    assert!(
        stderr.contains("main agent called skill processRefund("),
        "{stderr}"
    );
    assert!(
        stderr.contains("skill processRefund called queryOrder({\"orderId\":\"88231\"}) -> done"),
        "{stderr}"
    );
    assert!(stderr.contains("approve applyRefund? [y/n] y"), "{stderr}");
    assert!(stderr.contains("): approved"), "{stderr}");
    assert!(stderr.contains("agent> "), "{stderr}");
    assert!(stderr.contains("you> thanks!"), "{stderr}");
    assert_eq!(work.refunds_of_88231(), 1);
    // The functions are listed in the first round; later rounds, the next
    // turn's included, say only what changed.
    let rounds: Vec<&str> = stderr
        .lines()
        .filter(|line| line.starts_with("round "))
        .collect();
    assert_eq!(rounds.len(), 3, "{stderr}");
    assert!(rounds[0].contains("processRefund, "), "{stderr}");
    assert!(
        rounds[1..]
            .iter()
            .all(|round| round.ends_with("tokens (unchanged)")),
        "{stderr}"
    );

    // The second turn carries the first: question, skill call, answer.
    let second: Vec<(&str, &str)> = requests[2]
        .messages()
        .iter()
        .map(|message| {
            (
                message["role"].as_str().unwrap(),
                message["content"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(second[0].0, "system");
    assert_eq!(second[1], ("user", REFUND_REQUEST));
    assert!(second.iter().any(|(role, _)| *role == "tool"), "{second:?}");
    assert_eq!(
        second[second.len() - 2],
        ("assistant", "Your refund for the S10 Pro is on its way.")
    );
    assert_eq!(second[second.len() - 1], ("user", "thanks!"));
}

#[tokio::test]
async fn chat_ends_on_exit_and_without_an_llm_says_how_to_configure_one() {
    let work = Workdir::new();
    let llm = ScriptedLlm::start(vec![Step::text("Hello!")]).await;
    let mut command = work.host_command(&["chat"], &bundled());
    let output = output_with_stdin(with_llm(&mut command, &llm), "hi\n\nquit\nnever sent\n").await;
    let (stdout, _) = expect_code(&output, 0);
    assert_eq!(stdout.trim(), "Hello!");
    assert_eq!(llm.requests().len(), 1, "nothing is sent after `quit`");

    let output = output_with_stdin(&mut work.host_command(&["chat"], &bundled()), "hi\n").await;
    let (_, stderr) = expect_code(&output, 1);
    assert_says_how_to_configure_an_llm(&stderr);
}

/// The demo key that signed the bundled skills.
fn demo_key() -> PublicKey {
    PublicKey::load(&repo_root().join("keys/trusted/demo.pub")).expect("the demo public key")
}

/// `skillhost inspect <file> --json`, with its exit code.
async fn inspect_json(work: &Workdir, file: &Path) -> (i32, Value) {
    let mut command = work.command(&["inspect", "--json", "--trust"]);
    command.arg(repo_root().join("keys/trusted")).arg(file);
    let out = output(&mut command).await;
    let report = serde_json::from_str(&text(&out.stdout))
        .unwrap_or_else(|error| panic!("{error}: {}", text(&out.stdout)));
    (out.status.code().expect("an exit code"), report)
}

#[tokio::test]
async fn inspect_shows_the_manifest_exports_signer_and_digest_of_a_bundled_skill() {
    let work = Workdir::new();
    let file = skill_file("processRefund");
    let bytes = std::fs::read(&file).unwrap();
    let key = demo_key();

    let (code, report) = inspect_json(&work, &file).await;
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["digest"], digest_of(&bytes));
    assert_eq!(report["size"], bytes.len());
    assert_eq!(report["error"], Value::Null);
    let signature = &report["signature"];
    assert_eq!(signature["signed"], true);
    assert_eq!(signature["status"], "trusted");
    assert_eq!(signature["signers"], json!([key.fingerprint()]));
    assert_eq!(signature["key_ids"], json!([hex::encode(key.key_id())]));
    let manifest = &report["manifest"];
    assert_eq!(manifest["name"], "processRefund");
    assert_eq!(manifest["version"], "0.1.0");
    assert_eq!(manifest["tools"], json!(["queryOrder", "applyRefund"]));
    assert_eq!(manifest["unlocks"], json!([]));
    assert_eq!(manifest["steps"], true);
    assert_eq!(manifest["test_cases"], 1);
    assert_eq!(
        manifest["parameters"]["required"],
        json!(["orderId", "reason"])
    );
    assert_eq!(
        report["exports"],
        json!([
            {"name": "manifest", "kind": "function"},
            {"name": "instructions", "kind": "function"},
            {"name": "run", "kind": "function"},
        ])
    );
    assert!(
        report["imports"]
            .as_array()
            .unwrap()
            .contains(&json!({"name": "skillhost:skill/host@0.1.0", "kind": "instance"})),
        "{}",
        report["imports"]
    );

    // The same, readable.
    let mut command = work.command(&["inspect", "--trust"]);
    command.arg(repo_root().join("keys/trusted")).arg(&file);
    let (stdout, _) = expect_code(&output(&mut command).await, 0);
    for line in [
        format!("digest:      {}", digest_of(&bytes)),
        format!("trust:       trusted: key {}", key.fingerprint()),
        format!("signature:   signed (by key {})", key.fingerprint()),
        "  name:         processRefund".to_owned(),
        "  tools:        queryOrder, applyRefund".to_owned(),
        "  steps:        yes".to_owned(),
        "  test cases:   1".to_owned(),
    ] {
        assert_has_line(&stdout, &line);
    }
    assert!(
        stdout
            .lines()
            .any(|line| line.starts_with("  run") && line.ends_with("function")),
        "{stdout}"
    );
}

/// The limits an invocation of the skill would run under: the config
/// file's `[sandbox]`, and the skill's own table over it.
#[tokio::test]
async fn inspect_shows_the_limits_the_config_file_gives_the_skill() {
    let work = Workdir::new();
    let config = work.path("skillhost.toml");
    std::fs::write(
        &config,
        "[sandbox]\nmemory_mib = 16\n\
         [sandbox.skills.processRefund]\nexecution_time_ms = 5000\ntool_calls = 4\n",
    )
    .unwrap();
    let inspect = |json: bool| {
        let mut command = work.command(&["inspect", "--config"]);
        command.arg(&config).arg(skill_file("processRefund"));
        if json {
            command.arg("--json");
        }
        command
    };
    let (stdout, _) = expect_code(&output(&mut inspect(true)).await, 0);
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        report["manifest"]["limits"],
        json!({
            "execution_time_ms": 5000,
            "memory_bytes": 16 << 20,
            "tool_calls": 4,
            "output_bytes": 1 << 20,
            "log_lines": 256,
        })
    );
    let (stdout, _) = expect_code(&output(&mut inspect(false)).await, 0);
    let line = "  limits:       5000 ms, 16 MiB memory, 4 tool calls, 1048576 output bytes, \
                256 log lines";
    assert_has_line(&stdout, line);
}

#[tokio::test]
async fn inspect_resolves_a_skill_naming_an_http_tool_of_the_config_file() {
    let work = Workdir::new();
    let yaml = work.path("customer-care.yaml");
    std::fs::write(
        &yaml,
        "name: customerCare\ndescription: Answers a customer using the CRM.\n\
         tools: [lookupCustomer, queryOrder]\n\
         parameters: {type: object}\n\
         instructions: Look the customer up, then answer.\n",
    )
    .unwrap();
    expect_code(&output(work.command(&["pack"]).arg(&yaml)).await, 0);
    let inspect = |config: bool| {
        let mut command = work.command(&["inspect", "--trust"]);
        command
            .arg(repo_root().join("keys/trusted"))
            .arg(work.path("customerCare.wasm"));
        if config {
            command
                .arg("--config")
                .arg(repo_root().join("skillhost.example.toml"));
        }
        command
    };
    // Not a tool of this host without its config file...
    let (_, stderr) = expect_code(&output(&mut inspect(false)).await, 1);
    assert!(stderr.contains("lookupCustomer"), "{stderr}");
    // ...and one with it, though its secret (CRM_TOKEN) is not set.
    let (stdout, stderr) = expect_code(&output(&mut inspect(true)).await, 0);
    assert!(stdout.contains("lookupCustomer"), "{stdout}\n{stderr}");
}

/// An MCP server of the config file: `ask` offers its tools to the model
/// and calls them, the write only once approved; `inspect` resolves a skill
/// naming one of them, asking the server what its tools are and calling
/// none.
#[tokio::test]
async fn the_tools_of_an_mcp_server_of_the_config_file_are_offered_and_called() {
    let mcp = McpServer::default();
    let url = mcp.start().await;
    let work = Workdir::new();
    let config = work.path("skillhost.toml");
    std::fs::write(
        &config,
        format!(
            "[[mcp_servers]]\nname = \"crm\"\nurl = \"{url}\"\n\
             tools = [\"lookupCustomer\", \"updateCustomer\"]\nread = [\"lookupCustomer\"]\n\
             forward_headers = [\"X-User-Id\"]\n"
        ),
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let llm = ScriptedLlm::start(vec![
        Step::tool_call("lookupCustomer", json!({"id": "u1001"})),
        Step::tool_call(
            "updateCustomer",
            json!({"id": "u1001", "level": "platinum"}),
        ),
        Step::text("done"),
    ])
    .await;
    let mut ask = work.host_command(
        &[
            "ask",
            "make u1001 platinum",
            "--config",
            config,
            "--yes",
            "--header",
            "X-User-Id: agent-7",
        ],
        &bundled(),
    );
    let (stdout, stderr) = expect_code(&output(with_llm(&mut ask, &llm)).await, 0);
    let requests = llm.requests();
    let offered = requests[0].tool_names();
    assert!(
        offered.contains(&"lookupCustomer".to_owned())
            && offered.contains(&"updateCustomer".to_owned()),
        "{offered:?}"
    );
    let looked_up = requests[1].messages().last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(looked_up.contains("Li Lei"), "{looked_up}");
    // The header goes to the MCP server's tools, so no warning of it.
    assert!(!stderr.contains("forwards it"), "{stderr}");
    let users: Vec<_> = mcp
        .received()
        .into_iter()
        .filter(|received| received.method == "tools/call")
        .map(|received| received.user)
        .collect();
    assert_eq!(
        users,
        [Some("agent-7".to_owned()), Some("agent-7".to_owned())]
    );
    // Only the write asked.
    assert_eq!(
        stderr.matches("approved (--yes)").count(),
        1,
        "{stdout}\n{stderr}"
    );
    assert_eq!(
        mcp.calls(),
        [
            ("lookupCustomer".to_owned(), json!({"id": "u1001"})),
            (
                "updateCustomer".to_owned(),
                json!({"id": "u1001", "level": "platinum"})
            ),
        ]
    );

    let yaml = work.path("customer-care.yaml");
    std::fs::write(
        &yaml,
        "name: customerCare\ndescription: Answers a customer using the CRM.\n\
         tools: [lookupCustomer]\nparameters: {type: object}\n\
         instructions: Look the customer up, then answer.\n",
    )
    .unwrap();
    expect_code(&output(work.command(&["pack"]).arg(&yaml)).await, 0);
    let mut inspect = work.command(&["inspect", "--config", config]);
    inspect.arg(work.path("customerCare.wasm"));
    let (stdout, stderr) = expect_code(&output(&mut inspect).await, 0);
    assert!(
        stdout.contains("tools:        lookupCustomer"),
        "{stdout}\n{stderr}"
    );
    assert_eq!(mcp.calls().len(), 2);
}

/// The client's side of `skillhost mcp`'s standard streams.
struct McpPeer {
    stdin: tokio::process::ChildStdin,
    stdout: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl McpPeer {
    /// Starts `command` with its standard input and output piped, killed
    /// when the child is dropped. Its stderr, which no test reads, goes to
    /// nothing: a pipe left unread would stop it once full.
    fn start(command: Command) -> (tokio::process::Child, Self) {
        Self::start_logging(command, Stdio::null())
    }

    /// [`McpPeer::start`], its stderr (the logs) going to `stderr`.
    fn start_logging(mut command: Command, stderr: Stdio) -> (tokio::process::Child, Self) {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let peer = Self {
            stdin: child.stdin.take().unwrap(),
            stdout: tokio::io::BufReader::new(child.stdout.take().unwrap()).lines(),
        };
        (child, peer)
    }

    /// Sends `message`; the answer, when it is a request.
    async fn exchange(&mut self, message: Value) -> Value {
        let line = format!("{message}\n");
        self.stdin.write_all(line.as_bytes()).await.unwrap();
        if message.get("id").is_none() {
            return Value::Null;
        }
        self.next().await
    }

    /// The next message the server writes.
    async fn next(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(60), self.stdout.next_line())
            .await
            .expect("the server wrote nothing for a minute")
            .unwrap()
            .expect("the server closed its output");
        serde_json::from_str(&line).unwrap()
    }
}

/// `skillhost mcp` on its standard streams, as an MCP client drives it:
/// each skill a tool, a call an invocation (writes approved with --yes),
/// bad input an error result naming the field, a line that is not JSON an
/// error answered, and a skill file added
/// while it runs a `tools/list_changed` and a new tool.
#[tokio::test]
async fn mcp_serves_the_skills_as_tools_and_tells_the_client_when_they_change() {
    let work = Workdir::new();
    let skills = work.path("skills");
    std::fs::create_dir(&skills).unwrap();
    for name in ["processRefund", "inquireOrderStatus"] {
        std::fs::copy(skill_file(name), skills.join(format!("{name}.wasm"))).unwrap();
    }
    let (mut child, mut peer) = McpPeer::start(work.host_command(&["mcp", "--yes"], &skills));
    let request = |id: u64, method: &str, params: Value| json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});

    let initialized = peer
        .exchange(request(
            1,
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "test", "version": "1"}}),
        ))
        .await;
    assert_eq!(initialized["result"]["protocolVersion"], "2025-06-18");
    assert_eq!(
        initialized["result"]["capabilities"]["tools"]["listChanged"],
        true
    );
    peer.exchange(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    let tool_names = |listed: &Value| -> Vec<String> {
        listed["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|tool| tool["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let listed = peer.exchange(request(2, "tools/list", json!({}))).await;
    assert_eq!(tool_names(&listed), ["inquireOrderStatus", "processRefund"]);
    assert_eq!(
        listed["result"]["tools"][1]["inputSchema"]["required"],
        json!(["orderId", "reason"])
    );
    // processRefund may write (applyRefund); inquireOrderStatus only reads.
    let read_only = |index: usize| &listed["result"]["tools"][index]["annotations"]["readOnlyHint"];
    assert_eq!((read_only(0), read_only(1)), (&json!(true), &json!(false)));

    let refund = json!({"name": "processRefund",
                        "arguments": {"orderId": "88231", "reason": "broken"}});
    let refunded = peer.exchange(request(3, "tools/call", refund)).await;
    assert_eq!(
        refunded["result"]["structuredContent"]["refunded"], true,
        "{refunded}"
    );
    assert_eq!(work.refunds_of_88231(), 1);
    let wrong = json!({"name": "processRefund", "arguments": {"orderId": 88231}});
    let refused = peer.exchange(request(4, "tools/call", wrong)).await;
    assert_eq!(refused["result"]["isError"], true);
    let text = refused["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("field `orderId`"), "{text}");
    let unknown = peer
        .exchange(request(5, "tools/call", json!({"name": "processRefnd"})))
        .await;
    assert_eq!(unknown["error"]["code"], -32602);
    // Neither JSON nor text: an error answered, and the server goes on.
    peer.stdin.write_all(b"\xff{\n").await.unwrap();
    assert_eq!(peer.next().await["error"]["code"], -32700);

    std::fs::copy(skill_file("order_change"), skills.join("order_change.wasm")).unwrap();
    assert_eq!(
        peer.next().await["method"],
        "notifications/tools/list_changed"
    );
    let listed = peer.exchange(request(6, "tools/list", json!({}))).await;
    assert!(tool_names(&listed).contains(&"order_change".to_owned()));

    drop(peer);
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());
}

/// The trust store is followed as the skills are: a key taken out unloads
/// what it alone signed, and the client is told the list changed.
#[tokio::test]
async fn mcp_follows_its_trust_directory_when_it_changes() {
    let work = Workdir::new();
    let alice = AliceTrusted::set_up(&work).await;
    let command = alice.command(&work, &["mcp"]);
    let (_child, mut peer) = McpPeer::start(command);
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "test", "version": "1"}}});
    peer.exchange(initialize).await;
    peer.exchange(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let listed = peer.exchange(list.clone()).await;
    assert_eq!(
        listed["result"]["tools"].as_array().unwrap().len(),
        2,
        "{listed}"
    );

    std::fs::remove_file(&alice.alice_pub).unwrap();
    assert_eq!(
        peer.next().await["method"],
        "notifications/tools/list_changed"
    );
    let listed = peer.exchange(list).await;
    let tools = listed["result"]["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1, "{listed}");
    assert_eq!(tools[0]["name"], "processRefund");
}

/// A key's scope changed in the config file takes effect at SIGHUP: the
/// refund its scope kept out loads, without a restart.
#[tokio::test]
async fn serve_reads_the_key_scopes_again_at_sighup() {
    let work = Workdir::new();
    let scoped = r#"
[[trust.scopes]]
key = "1aa1e92e86658033a90ecf0b"
tools = ["queryOrder", "queryLogistics"]
"#;
    let command = work.configured_command(
        scoped,
        &["serve", "--listen", "127.0.0.1:0", "--no-watch"],
        &bundled(),
    );
    let Serving {
        child: serve,
        base,
        mut stderr,
        ..
    } = serving(command).await;
    let http = reqwest::Client::new();
    let loaded = || async {
        let listing: Value = http
            .get(format!("{base}/v1/skills/processRefund"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        listing["name"] == "processRefund"
    };
    assert!(!loaded().await, "a skill outside its key's scope loaded");

    // A scope that does not check keeps the one in force.
    std::fs::write(
        work.path("skillhost.toml"),
        "[[trust.scopes]]
key = \"nope\"\n",
    )
    .unwrap();
    send_signal(&serve, "-HUP").await;
    said_next(&mut stderr, "the key scopes in force stay").await;
    assert!(!loaded().await);

    std::fs::write(work.path("skillhost.toml"), "").unwrap();
    send_signal(&serve, "-HUP").await;
    said_next(
        &mut stderr,
        "key scopes read again from skillhost.toml: 0 key(s) scoped",
    )
    .await;
    said_next(&mut stderr, "trust store read again").await;
    assert!(
        loaded().await,
        "the skill its scope no longer keeps out did not load"
    );
}

/// An API key's skill scope changed in the config file takes effect at
/// SIGHUP: the skill it kept from the key is listed for it then; a file that
/// does not check keeps the scopes in force.
#[tokio::test]
async fn serve_reads_the_api_keys_skill_scopes_again_at_sighup() {
    let work = Workdir::new();
    let mut command = work.configured_command(
        "[server.skill_scopes]\napi-key-1 = [\"inquire*\"]\n",
        &["serve", "--listen", "127.0.0.1:0", "--no-watch"],
        &bundled(),
    );
    command.env("SKILLHOST_API_KEYS", "k-desk");
    let mut serve = serving(command).await;
    let http = reqwest::Client::new();
    let url = format!("{}/v1/skills/processRefund", serve.base);
    let refund_shown = || async {
        let request = http.get(&url).bearer_auth("k-desk");
        request.send().await.unwrap().status()
    };
    assert_eq!(refund_shown().await, reqwest::StatusCode::FORBIDDEN);

    let blank = "[server.skill_scopes]\napi-key-1 = [\" \"]\n";
    serve
        .read_again(&work, blank, "the scopes in force stay")
        .await;
    assert_eq!(refund_shown().await, reqwest::StatusCode::FORBIDDEN);

    serve
        .read_again(
            &work,
            "[server.skill_scopes]\napi-key-1 = [\"inquire*\", \"process*\"]\n",
            "API keys' scopes read again from skillhost.toml: 1 key(s) scoped",
        )
        .await;
    assert_eq!(refund_shown().await, reqwest::StatusCode::OK);
}

/// `requests_per_minute` in the config file: a key past its rate is
/// answered 429 with `Retry-After`, the admin routes are not counted, and a
/// rate changed in the file takes effect at SIGHUP (a bad one keeps the
/// rates in force), refilling only the buckets whose rate changed.
#[tokio::test]
async fn serve_holds_each_key_to_its_rate_and_reads_the_rates_again_at_sighup() {
    let work = Workdir::new();
    let mut command = work.configured_command(
        "[server]\nrequests_per_minute = 2\n",
        &["serve", "--listen", "127.0.0.1:0", "--no-watch"],
        &bundled(),
    );
    command.env("SKILLHOST_API_KEYS", "k-desk,k-batch");
    command.env("SKILLHOST_ADMIN_KEY", "k-admin");
    let mut serve = serving(command).await;
    let base = serve.base.clone();
    let http = reqwest::Client::new();
    let list = |key: &'static str| {
        let request = http.get(format!("{base}/v1/skills")).bearer_auth(key);
        async move { request.send().await.unwrap() }
    };
    for _ in 0..2 {
        assert_eq!(list("k-desk").await.status(), reqwest::StatusCode::OK);
    }
    let refused = list("k-desk").await;
    assert_eq!(refused.status(), reqwest::StatusCode::TOO_MANY_REQUESTS);
    let wait: u64 = refused.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((29..=30).contains(&wait), "Retry-After: {wait}");
    assert!(refused.headers().get("x-should-retry").is_none());
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "rate_limited");
    assert_eq!(body["error"]["type"], "rate_limit_error");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("the key `api-key-1` may make 2 requests a minute; try again in"),
        "{message}"
    );
    // Each key its own bucket; the admin routes count against none.
    assert_eq!(list("k-batch").await.status(), reqwest::StatusCode::OK);
    for _ in 0..3 {
        let metrics = http
            .get(format!("{base}/metrics"))
            .bearer_auth("k-admin")
            .send()
            .await
            .unwrap();
        assert_eq!(metrics.status(), reqwest::StatusCode::OK);
    }

    let blank = "[server.key_requests_per_minute]\n\" \" = 5\n";
    serve
        .read_again(&work, blank, "the rates in force stay")
        .await;
    assert_eq!(
        list("k-desk").await.status(),
        reqwest::StatusCode::TOO_MANY_REQUESTS
    );

    serve
        .read_again(
            &work,
            "[server]\nrequests_per_minute = 2\n[server.key_requests_per_minute]\napi-key-1 = 600\n",
            "API keys' request rates read again from skillhost.toml: 2 requests a minute per key, \
             api-key-1 600",
        )
        .await;
    for _ in 0..5 {
        assert_eq!(list("k-desk").await.status(), reqwest::StatusCode::OK);
    }
    // The other key's rate stayed, and so did its bucket: one of its two
    // requests is left, not a fresh minute's worth.
    assert_eq!(list("k-batch").await.status(), reqwest::StatusCode::OK);
    assert_eq!(
        list("k-batch").await.status(),
        reqwest::StatusCode::TOO_MANY_REQUESTS
    );
}

/// A `tools/call` whose `params._meta` names a W3C trace (MCP's SEP-414)
/// runs in it: the run's log lines name its trace id.
#[tokio::test]
async fn mcp_runs_a_call_in_the_trace_its_meta_names() {
    let work = Workdir::new();
    let log = work.path("mcp.log");
    let (_child, mut peer) = McpPeer::start_logging(
        work.host_command(&["--log-format", "json", "-v", "mcp"], &bundled()),
        std::fs::File::create(&log).unwrap().into(),
    );
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "inquireOrderStatus", "arguments": {"orderId": "88231"},
        "_meta": {"traceparent": format!("00-{trace}-00f067aa0ba902b7-01")}}});
    let answer = peer.exchange(call).await;
    assert_eq!(answer["result"].get("isError"), None, "{answer}");
    // The run's span closes after the answer is sent: wait for its line.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let run_closed = loop {
        let logged = std::fs::read_to_string(&log).unwrap();
        let closed = logged
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .find(|line| line["span"]["name"] == "run" && line["fields"]["message"] == "close");
        if let Some(closed) = closed {
            break closed;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no run span closed: {logged}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(run_closed["span"]["trace_id"], trace, "{run_closed}");
}

/// `skillhost mcp --only-skills` serves only the skills its patterns name: the
/// others are not listed, and a call of one is refused as not one of the
/// server's tools, naming those it has; a blank pattern stops the start.
#[tokio::test]
async fn mcp_serves_only_the_skills_its_patterns_name() {
    let work = Workdir::new();
    let (_child, mut peer) = McpPeer::start(work.host_command(
        &["mcp", "--only-skills", "inquire*,order_change"],
        &bundled(),
    ));
    let request = |id: u64, method: &str, params: Value| json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let listed = peer.exchange(request(1, "tools/list", json!({}))).await;
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["inquireOrderStatus", "order_change"]);

    let refund = json!({"name": "processRefund",
                        "arguments": {"orderId": "88231", "reason": "broken"}});
    let refused = peer.exchange(request(2, "tools/call", refund)).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert_eq!(
        refused["error"]["message"],
        "`processRefund` is not one of this server's tools (its tools: inquireOrderStatus, \
         order_change)"
    );
    assert_eq!(work.refunds_of_88231(), 0);
    let inquiry = json!({"name": "inquireOrderStatus", "arguments": {"orderId": "88231"}});
    let answered = peer.exchange(request(3, "tools/call", inquiry)).await;
    assert_eq!(
        answered["result"]["structuredContent"]["found"], true,
        "{answered}"
    );

    let blank =
        output(&mut work.host_command(&["mcp", "--only-skills", "inquire*,"], &bundled())).await;
    let (_, stderr) = expect_code(&blank, 1);
    assert!(
        stderr.contains("--only-skills: a skill name is blank"),
        "{stderr}"
    );
}

/// `[agent]` changed in the config file takes effect at SIGHUP: the next
/// conversation gets the new system prompt, and the functions its
/// `keep_public` keeps offered.
#[tokio::test]
async fn serve_reads_the_agent_settings_again_at_sighup() {
    let work = Workdir::new();
    let llm = ScriptedLlm::start(vec![Step::text("One."), Step::text("Two.")]).await;
    let agent = |prompt: &str, public: &str| {
        format!("[agent]\nsystem_prompt = \"{prompt}\"\nkeep_public = [{public}]\n")
    };
    let mut command = work.configured_command(
        &agent("First prompt.", ""),
        &["serve", "--listen", "127.0.0.1:0", "--no-watch"],
        &bundled(),
    );
    with_llm(&mut command, &llm);
    let Serving {
        child: serve,
        base,
        mut stderr,
        ..
    } = serving(command).await;
    let chat = async || {
        let response = reqwest::Client::new()
            .post(format!("{base}/v1/chat/completions"))
            .json(&json!({"model": "test-model", "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), reqwest::StatusCode::OK);
    };
    chat().await;
    std::fs::write(
        work.path("skillhost.toml"),
        agent("Second prompt.", "\"queryOrder\""),
    )
    .unwrap();
    send_signal(&serve, "-HUP").await;
    said_next(&mut stderr, "[agent] and [confirmation] read again").await;
    chat().await;

    let requests = llm.requests();
    let system = |index: usize| requests[index].body["messages"][0]["content"].clone();
    assert_eq!(
        (system(0), system(1)),
        (json!("First prompt."), json!("Second prompt."))
    );
    let offered = |index: usize| {
        requests[index]
            .tool_names()
            .contains(&"queryOrder".to_owned())
    };
    assert_eq!((offered(0), offered(1)), (false, true));
}

/// `[sandbox]` limits changed in the config file take effect at SIGHUP, for
/// the invocations that start after; a memory limit changed is said to wait
/// for a restart, and the other limits take effect without it.
#[tokio::test]
async fn serve_reads_the_sandbox_limits_again_at_sighup() {
    let work = Workdir::new();
    let command = work.configured_command(
        "[sandbox.skills.inquireOrderStatus]\noutput_bytes = 16\n",
        &["serve", "--listen", "127.0.0.1:0", "--no-watch"],
        &bundled(),
    );
    let Serving {
        child: serve,
        base,
        mut stderr,
        ..
    } = serving(command).await;
    let inquire = async || {
        let response = reqwest::Client::new()
            .post(format!("{base}/v1/skills/inquireOrderStatus/invoke"))
            .json(&json!({"orderId": "88231"}))
            .send()
            .await
            .unwrap();
        let status = response.status();
        (status, response.json::<Value>().await.unwrap())
    };
    let limits = async || {
        let response = reqwest::get(format!("{base}/v1/skills/inquireOrderStatus")).await;
        let skill: Value = response.unwrap().json().await.unwrap();
        skill["limits"].clone()
    };
    let (status, body) = inquire().await;
    assert_eq!(status, reqwest::StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("hit its output-size limit"),
        "{body}"
    );
    assert_eq!(limits().await["output_bytes"], 16);

    // processRefund's table sets a memory limit of its own; the other
    // table's skill inherits the default's.
    std::fs::write(
        work.path("skillhost.toml"),
        "[sandbox]\nmemory_mib = 32\n\n[sandbox.skills.inquireOrderStatus]\ntool_calls = 4\n\n\
         [sandbox.skills.processRefund]\nmemory_mib = 48\n",
    )
    .unwrap();
    send_signal(&serve, "-HUP").await;
    said_next(&mut stderr, "[sandbox] limits read again from").await;
    let said = said_next(&mut stderr, "takes effect only at a restart").await;
    assert!(
        said.contains(
            ": [sandbox] memory_mib, [sandbox.skills.processRefund] memory_mib changed since the \
             start"
        ),
        "{said}"
    );
    let (status, body) = inquire().await;
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    let in_force = limits().await;
    assert_eq!(
        (&in_force["output_bytes"], &in_force["tool_calls"]),
        (&json!(1 << 20), &json!(4))
    );
    assert_eq!(
        in_force["memory_bytes"],
        64 << 20,
        "memory waits for a restart"
    );

    // Limits that do not check keep those in force.
    std::fs::write(
        work.path("skillhost.toml"),
        "[sandbox]\nexecution_time_ms = 0\n",
    )
    .unwrap();
    send_signal(&serve, "-HUP").await;
    let said = said_next(&mut stderr, "the limits in force stay").await;
    assert!(said.contains("execution_time_ms"), "{said}");
    assert_eq!(limits().await["tool_calls"], 4);
}

/// `[llm]` changed in the config file takes effect at SIGHUP: the next
/// conversation goes to the model it names, `/v1/models` names it; a URL
/// that does not parse keeps the LLM in force; with no model, there is no
/// LLM and chat answers 503.
#[tokio::test]
async fn serve_reads_its_llm_again_at_sighup() {
    let work = Workdir::new();
    let (first, second) = (
        ScriptedLlm::start(vec![Step::text("One.")]).await,
        ScriptedLlm::start(vec![Step::text("Two.")]).await,
    );
    let llm =
        |model: &str, url: &str| format!("[llm]\nmodel = \"{model}\"\nbase_url = \"{url}\"\n");
    let command = work.configured_command(
        &llm("model-a", &first.base_url()),
        &["serve", "--listen", "127.0.0.1:0", "--no-watch"],
        &bundled(),
    );
    let Serving {
        child: serve,
        base,
        mut stderr,
        ..
    } = serving(command).await;
    let http = reqwest::Client::new();
    let chat = async || {
        let body = json!({"messages": [{"role": "user", "content": "hi"}]});
        let response = http
            .post(format!("{base}/v1/chat/completions"))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = response.status();
        (status, response.json::<Value>().await.unwrap())
    };
    let model = async || -> Value {
        let response = http.get(format!("{base}/v1/models")).send().await.unwrap();
        let models: Value = response.json().await.unwrap();
        models["data"][0]["id"].clone()
    };
    assert_eq!(chat().await.0, reqwest::StatusCode::OK);
    assert_eq!(model().await, "model-a");

    let reconfigure = async |config: String| {
        std::fs::write(work.path("skillhost.toml"), config).unwrap();
        send_signal(&serve, "-HUP").await;
    };
    reconfigure(llm("model-b", "not a url")).await;
    said_next(&mut stderr, "the LLM in force stays").await;
    reconfigure(llm("model-b", &second.base_url())).await;
    let said = said_next(&mut stderr, "[llm] read again from skillhost.toml").await;
    assert!(said.contains("model-b at"), "{said}");
    let (status, answered) = chat().await;
    assert_eq!(status, reqwest::StatusCode::OK);
    assert_eq!(answered["choices"][0]["message"]["content"], "Two.");
    assert_eq!(model().await, "model-b");
    assert_eq!((first.requests().len(), second.requests().len()), (1, 1));
    assert_eq!(second.requests()[0].body["model"], "model-b");

    reconfigure(String::new()).await;
    said_next(&mut stderr, "no LLM now").await;
    assert_eq!(chat().await.0, reqwest::StatusCode::SERVICE_UNAVAILABLE);
}

/// The confirmation policy changed in the config file takes effect at
/// SIGHUP, for the confirmations pending too: an approver taken off the list
/// can no longer approve the write waiting, the one put on it can. A policy
/// naming a tool that does not exist keeps the one in force; one naming an
/// approver no key goes by is warned of.
#[tokio::test]
async fn serve_reads_the_confirmation_policy_again_at_sighup() {
    let work = Workdir::new();
    let approvers =
        |name: &str| format!("[confirmation.tool_approvers]\napplyRefund = [\"{name}\"]\n");
    let mut command = work.configured_command(
        &approvers("api-key-2"),
        &["serve", "--listen", "127.0.0.1:0", "--no-watch"],
        &bundled(),
    );
    command.env("SKILLHOST_API_KEYS", "k-one,k-two");
    let Serving {
        child: serve,
        base,
        mut stderr,
        ..
    } = serving(command).await;
    let http = reqwest::Client::new();
    let post = async |key: &str, path: &str, body: Value| {
        let response = http
            .post(format!("{base}{path}"))
            .bearer_auth(key)
            .json(&body)
            .send()
            .await
            .unwrap();
        (response.status(), response.json::<Value>().await.unwrap())
    };
    let input = json!({"orderId": "88231", "reason": "broken"});
    let (status, pending) = post("k-one", "/v1/skills/processRefund/invoke", input).await;
    assert_eq!(status, reqwest::StatusCode::ACCEPTED, "{pending:#}");
    assert_eq!(pending["confirmation"]["approvers"], json!(["api-key-2"]));
    let answer = pending["confirmation"]["answer"]["path"].as_str().unwrap();

    std::fs::write(
        work.path("skillhost.toml"),
        "[confirmation]\nauto_approve = [\"noSuchTool\"]\n",
    )
    .unwrap();
    send_signal(&serve, "-HUP").await;
    let said = said_next(&mut stderr, "the agent's settings in force stay").await;
    assert!(said.contains("noSuchTool"), "{said}");

    // An approver no key goes by is warned of, as at the start.
    std::fs::write(work.path("skillhost.toml"), approvers("api-key-7")).unwrap();
    send_signal(&serve, "-HUP").await;
    said_next(&mut stderr, "[agent] and [confirmation] read again").await;
    let said = said_next(&mut stderr, "no key of this gateway goes by").await;
    assert!(
        said.contains("api-key-7; its keys go by api-key-1, api-key-2"),
        "{said}"
    );

    std::fs::write(work.path("skillhost.toml"), approvers("api-key-1")).unwrap();
    send_signal(&serve, "-HUP").await;
    said_next(
        &mut stderr,
        "[agent] and [confirmation] read again from skillhost.toml",
    )
    .await;
    let approve = json!({"decision": "approve"});
    let (status, refused) = post("k-two", answer, approve.clone()).await;
    assert_eq!(status, reqwest::StatusCode::FORBIDDEN, "{refused:#}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("may be approved only by `api-key-1`"),
        "{message}"
    );
    let (status, done) = post("k-one", answer, approve).await;
    assert_eq!(status, reqwest::StatusCode::OK, "{done:#}");
    assert_eq!(done["result"]["refunded"], true, "{done:#}");
}

/// SIGHUP makes `skillhost mcp` read its skills directory again (here
/// unwatched): a file added meanwhile becomes a tool, the client is told,
/// and the session goes on.
#[tokio::test]
async fn mcp_reads_its_skills_again_at_sighup() {
    let work = Workdir::new();
    let skills = work.path("skills");
    std::fs::create_dir(&skills).unwrap();
    std::fs::copy(
        skill_file("processRefund"),
        skills.join("processRefund.wasm"),
    )
    .unwrap();
    let (child, mut peer) = McpPeer::start(work.host_command(&["mcp", "--no-watch"], &skills));
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "test", "version": "1"}}});
    peer.exchange(initialize).await;
    peer.exchange(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;

    std::fs::copy(skill_file("order_change"), skills.join("order_change.wasm")).unwrap();
    send_signal(&child, "-HUP").await;
    assert_eq!(
        peer.next().await["method"],
        "notifications/tools/list_changed"
    );
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let listed = peer.exchange(list).await;
    let tools = listed["result"]["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 2, "{listed}");
}

/// Without --yes, a client that can ask its user (`elicitation`) is asked
/// to approve the write; its user's yes lets the refund through. Unless
/// the policy names who may approve: then nobody is asked.
#[tokio::test]
async fn mcp_asks_the_clients_user_to_approve_a_write() {
    let work = Workdir::new();
    let (_child, mut peer) = McpPeer::start(work.host_command(&["mcp"], &bundled()));
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {"elicitation": {}},
                   "clientInfo": {"name": "test", "version": "1"}}});
    peer.exchange(initialize.clone()).await;
    let refund = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "processRefund",
                   "arguments": {"orderId": "88231", "reason": "broken"}}});
    let asked = peer.exchange(refund).await;
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    let question = asked["params"]["message"].as_str().unwrap();
    assert!(question.contains("applyRefund"), "{question}");
    assert_eq!(work.refunds_of_88231(), 0);
    let yes = json!({"jsonrpc": "2.0", "id": asked["id"],
                     "result": {"action": "accept", "content": {"approve": true}}});
    // The answer carries an id too: what comes next is the call's result.
    let refunded = peer.exchange(yes).await;
    assert_eq!(refunded["id"], 2);
    assert_eq!(
        refunded["result"]["structuredContent"]["refunded"], true,
        "{refunded}"
    );
    assert_eq!(work.refunds_of_88231(), 1);

    // A policy that names who may approve: no user of a client can be
    // named, so the write is rejected without asking.
    let fresh = Workdir::new();
    let config = fresh.path("skillhost.toml");
    std::fs::write(&config, "[confirmation]\nseparate_approver = true\n").unwrap();
    let mut strict = fresh.host_command(&["mcp"], &bundled());
    strict.arg("--config").arg(&config);
    let (_child, mut peer) = McpPeer::start(strict);
    peer.exchange(initialize).await;
    let refund = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "processRefund",
                   "arguments": {"orderId": "88231", "reason": "broken"}}});
    let rejected = peer.exchange(refund).await;
    assert_eq!(rejected["id"], 3, "asked: {rejected}");
    let message = rejected["result"]["structuredContent"]["message"]
        .as_str()
        .unwrap();
    assert!(message.contains("cannot be named"), "{message}");
    assert_eq!(fresh.refunds_of_88231(), 0);
}

/// One skillhost taking another's skills as MCP tools: the client of
/// `[[mcp_servers]]` starts `skillhost mcp`, which, without --yes,
/// rejects the write the skill would make.
#[tokio::test]
async fn an_mcp_server_started_without_yes_rejects_the_writes_of_its_skills() {
    let work = Workdir::new();
    let server = work.host_command(&["mcp"], &bundled());
    let std = server.as_std();
    let config = McpServerConfig {
        name: "skills".into(),
        command: Some(std.get_program().to_str().unwrap().to_owned()),
        args: std
            .get_args()
            .map(|arg| arg.to_str().unwrap().to_owned())
            .collect(),
        tools: Some(vec!["processRefund".into()]),
        ..McpServerConfig::default()
    };
    let mut registry = ToolRegistry::new();
    for tool in mcp::connect(&config, |_| None).await.unwrap() {
        registry.register(tool).unwrap();
    }
    let result = registry
        .call(
            "processRefund",
            json!({"orderId": "88231", "reason": "broken"}),
        )
        .await
        .unwrap();
    assert_eq!(result["refunded"], false, "{result}");
    let message = result["message"].as_str().unwrap();
    assert!(message.contains("started without --yes"), "{message}");
    assert_eq!(work.refunds_of_88231(), 0);
}

/// A server of the config file started as a command: `ask` starts it with
/// the file's args and env (a secret read from the host's environment),
/// and its tool's answer reaches the model.
#[tokio::test]
async fn an_mcp_server_the_config_file_starts_as_a_command_serves_its_tools() {
    let work = Workdir::new();
    let log = work.path("received");
    let config = work.path("skillhost.toml");
    std::fs::write(
        &config,
        format!(
            "[[mcp_servers]]\nname = \"crm\"\ncommand = {:?}\nargs = [{:?}, {:?}]\n\
             env = {{ CRM_REGION = \"${{CRM_REGION_FOR_TEST}}\" }}\n\
             tools = [\"lookupCustomer\"]\nread = [\"lookupCustomer\"]\n",
            python(),
            STDIO_SERVER,
            log.to_str().unwrap()
        ),
    )
    .unwrap();
    let llm = ScriptedLlm::start(vec![
        Step::tool_call("lookupCustomer", json!({"id": "u1001"})),
        Step::text("done"),
    ])
    .await;
    let mut ask = work.host_command(
        &[
            "ask",
            "where is u1001?",
            "--config",
            config.to_str().unwrap(),
        ],
        &bundled(),
    );
    ask.env("CRM_REGION_FOR_TEST", "east");
    let (stdout, stderr) = expect_code(&output(with_llm(&mut ask, &llm)).await, 0);
    let requests = llm.requests();
    assert!(
        requests[0]
            .tool_names()
            .contains(&"lookupCustomer".to_owned()),
        "{stdout}\n{stderr}"
    );
    let answer = requests[1].messages().last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        answer.contains("Li Lei") && answer.contains("east"),
        "{answer}"
    );
    // A read: no approval asked.
    assert!(!stderr.contains("approv"), "{stderr}");
    let received = std::fs::read_to_string(&log).unwrap();
    assert_eq!(received.matches("tools/call lookupCustomer").count(), 1);
}

/// `tools` lists what a manifest may name: the demo shop's tools and the
/// config file's HTTP tools and MCP servers' (the server asked), each with
/// its access and whether a call waits for approval under the file's policy.
#[tokio::test]
async fn tools_lists_every_tool_a_skill_may_name_with_its_source_and_approval() {
    let work = Workdir::new();
    let log = work.path("received");
    let config = work.path("skillhost.toml");
    std::fs::write(
        &config,
        format!(
            "[[tools]]\nname = \"whoAmI\"\ndescription = \"Who the CRM sees.\"\n\
             access = \"read\"\nurl = \"http://127.0.0.1:9/api/whoami\"\n\
             headers = {{ Authorization = \"Bearer ${{CRM_TOKEN_NOT_SET}}\" }}\n\
             parameters = {{ type = \"object\" }}\n\n\
             [[mcp_servers]]\nname = \"crm\"\ncommand = {:?}\nargs = [{:?}, {:?}]\n\
             tools = [\"lookupCustomer\", \"offer\"]\nread = [\"lookupCustomer\"]\n\n\
             [confirmation]\nalways_ask = [\"queryOrder\"]\n",
            python(),
            STDIO_SERVER,
            log.to_str().unwrap()
        ),
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let (listing, _) = expect_code(
        &output(&mut work.command(&["tools", "--config", config])).await,
        0,
    );
    let line = |name: &str| {
        listing
            .lines()
            .find(|line| line.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no {name} in:\n{listing}"))
            .split_whitespace()
            .take(4)
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert!(listing.starts_with("25 tool(s)"), "{listing}");
    assert_eq!(line("lookupCustomer"), "lookupCustomer read MCP crm");
    assert_eq!(line("offer"), "offer write asks MCP");
    assert_eq!(line("whoAmI"), "whoAmI read HTTP tool");
    assert_eq!(line("queryOrder"), "queryOrder read asks demo");
    assert_eq!(line("applyRefund"), "applyRefund write asks demo");

    let (json, _) = expect_code(
        &output(&mut work.command(&["tools", "--config", config, "--json"])).await,
        0,
    );
    let tools: Vec<Value> = serde_json::from_str(&json).unwrap();
    let lookup = tools
        .iter()
        .find(|tool| tool["name"] == "lookupCustomer")
        .unwrap();
    assert_eq!(
        (
            &lookup["source"],
            &lookup["server"],
            &lookup["access"],
            &lookup["approval"]
        ),
        (&json!("mcp"), &json!("crm"), &json!("read"), &json!(false))
    );
    assert_eq!(lookup["parameters"]["required"], json!(["id"]));
}

/// An HTTP tool of the CRM stand-in, in the config file of a workdir.
struct CrmTool {
    name: &'static str,
    config: PathBuf,
}

impl CrmTool {
    /// The read tool `name` on the CRM's `path` (its `extra` TOML lines
    /// added), as `skillhost.toml` of `work`.
    async fn at(work: &Workdir, name: &'static str, path: &str, extra: &str) -> Self {
        let crm = crm_service().await;
        let config = work.path("skillhost.toml");
        std::fs::write(
            &config,
            format!(
                "[[tools]]\nname = \"{name}\"\ndescription = \"What the CRM sees.\"\n\
                 access = \"read\"\nurl = \"{crm}{path}\"\nparameters = {{ type = \"object\" }}\n\
                 {extra}\n"
            ),
        )
        .unwrap();
        Self { name, config }
    }

    /// `ask`, `set` as it starts, its model calling the tool and then
    /// answering: the model's requests and what `ask` said on stderr.
    async fn ask(&self, work: &Workdir, set: impl FnOnce(&mut Command)) -> (Vec<Recorded>, String) {
        let llm = ScriptedLlm::start(vec![
            Step::tool_call(self.name, json!({})),
            Step::text("done"),
        ])
        .await;
        let config = self.config.to_str().unwrap();
        let mut command =
            work.host_command(&["ask", "what do you see?", "--config", config], &bundled());
        set(&mut command);
        let (_, stderr) = expect_code(&output(with_llm(&mut command, &llm)).await, 0);
        (llm.requests(), stderr)
    }

    /// What the model was told the tool returned.
    fn told(requests: &[Recorded]) -> String {
        requests[1].messages().last().unwrap()["content"]
            .as_str()
            .unwrap()
            .to_owned()
    }
}

/// `ask`, `chat` and `run` act for the user `--header` names, as `serve`
/// acts for the one a request names.
#[tokio::test]
async fn ask_acts_for_the_user_its_header_option_names() {
    let work = Workdir::new();
    let tool = CrmTool::at(
        &work,
        "whoAmI",
        "/api/whoami",
        "forward_headers = [\"X-User-Id\"]",
    )
    .await;
    let ask = async |headers: &[&str]| {
        let (requests, stderr) = tool
            .ask(&work, |command| {
                for header in headers {
                    command.arg("--header").arg(header);
                }
            })
            .await;
        (CrmTool::told(&requests), stderr)
    };

    let (seen, stderr) = ask(&["X-User-Id: agent-7", "X-Tenant: shop-1"]).await;
    let seen: Value = serde_json::from_str(&seen).unwrap();
    assert_eq!(seen, json!({"authorization": null, "userId": "agent-7"}));
    // The header no tool forwards is named, not silently dropped.
    assert!(
        stderr.contains("--header x-tenant: no HTTP or MCP tool of the config file forwards it"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("x-user-id: no HTTP or MCP tool"),
        "{stderr}"
    );

    // Without it the call fails unsent, and the model is told why.
    let (refused, _) = ask(&[]).await;
    assert!(
        refused.contains("`x-user-id` header") && refused.contains("started without one"),
        "{refused}"
    );

    let (_, stderr) = expect_code(
        &output(&mut work.command(&["ask", "hi", "--header", "X-User-Id agent-7"])).await,
        2,
    );
    assert!(stderr.contains("expected 'Name: value'"), "{stderr}");
}

/// `ask` (as `chat` and `run`) runs in the trace its environment names, as
/// a traced job hands it to the commands it starts (OpenTelemetry's
/// `TRACEPARENT` and `TRACESTATE`): the model and the tools see it. A
/// malformed one is named, and sends nothing.
#[tokio::test]
async fn ask_runs_in_the_trace_its_environment_names() {
    let work = Workdir::new();
    let tool = CrmTool::at(&work, "traceSeen", "/api/trace", "").await;
    let ask = async |traceparent: &str| {
        let (requests, stderr) = tool
            .ask(&work, |command| {
                command
                    .env("TRACEPARENT", traceparent)
                    .env("TRACESTATE", "shop=7");
            })
            .await;
        let sent: Vec<_> = requests
            .iter()
            .map(|request| request.header("traceparent").map(str::to_owned))
            .collect();
        let seen: Value = serde_json::from_str(&CrmTool::told(&requests)).unwrap();
        (sent, seen, stderr)
    };

    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let (sent, seen, stderr) = ask(traceparent).await;
    assert_eq!(
        sent,
        [Some(traceparent.to_owned()), Some(traceparent.to_owned())]
    );
    assert_eq!(
        seen,
        json!({"traceparent": traceparent, "tracestate": "shop=7"})
    );
    assert!(!stderr.contains("TRACEPARENT"), "{stderr}");

    let (sent, seen, stderr) = ask("00-not-a-trace").await;
    assert_eq!(sent, [None, None]);
    assert_eq!(seen, json!({"traceparent": null, "tracestate": null}));
    assert!(
        stderr.contains("TRACEPARENT: not a W3C traceparent")
            && stderr.contains("\"00-not-a-trace\"; the run goes on in no trace"),
        "{stderr}"
    );
}

/// With OpenTelemetry's OTLP variables set, the host exports its spans: a
/// run started in a trace hangs from the caller's span, and each LLM and
/// tool call goes out from inside the host's span of it, so that the
/// services' spans hang from that.
#[tokio::test]
async fn ask_exports_its_spans_and_calls_out_from_inside_them() {
    let collector = Collector::start().await;
    let work = Workdir::new();
    let tool = CrmTool::at(&work, "traceSeen", "/api/trace", "").await;
    let (trace, caller) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let (requests, stderr) = tool
        .ask(&work, |command| {
            command
                .env("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.endpoint)
                .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
                .env("TRACEPARENT", format!("00-{trace}-{caller}-01"))
                .env("TRACESTATE", "shop=7");
        })
        .await;
    // Dropped at exit, the exporter has sent everything.
    let spans = collector.spans();
    let named = |name: &str| -> Vec<&ExportedSpan> {
        spans.iter().filter(|span| span.name == name).collect()
    };
    assert!(
        spans
            .iter()
            .all(|span| span.trace_id == trace && span.service == "skillhost"),
        "{spans:#?}\n{stderr}"
    );
    let [run] = named("run")[..] else {
        panic!("not one run span: {spans:#?}");
    };
    assert_eq!(run.parent_span_id, caller);
    // One tree: every other span hangs from one exported.
    for span in &spans {
        assert!(
            span.span_id == run.span_id
                || spans
                    .iter()
                    .any(|parent| parent.span_id == span.parent_span_id),
            "{span:?} hangs from no exported span"
        );
    }
    // The model's two calls, each from its own llm_call span, named as
    // OpenTelemetry's GenAI conventions name them.
    let llm_calls: Vec<String> = named("chat test-model")
        .iter()
        .inspect(|span| assert_eq!(span.kind, 3, "a client span"))
        .map(|span| format!("00-{trace}-{}-01", span.span_id))
        .collect();
    assert_eq!(llm_calls.len(), 2, "{spans:#?}");
    for request in &requests {
        let sent = request.header("traceparent").unwrap().to_owned();
        assert!(llm_calls.contains(&sent), "{sent} is no llm_call span's");
    }
    // The tool's call, from its tool_call span.
    let [tool_call] = named("execute_tool traceSeen")[..] else {
        panic!("not one tool_call span: {spans:#?}");
    };
    assert_eq!(tool_call.attribute("tool"), Some("traceSeen"));
    let seen: Value = serde_json::from_str(&CrmTool::told(&requests)).unwrap();
    assert_eq!(
        seen,
        json!({
            "traceparent": format!("00-{trace}-{}-01", tool_call.span_id),
            "tracestate": "shop=7"
        })
    );
}

/// `serve` exports its spans too, the last of them as it stops: a
/// request's span hangs from its caller's, the request's run from it.
#[tokio::test]
async fn serve_exports_a_requests_spans_under_its_callers() {
    let collector = Collector::start().await;
    let work = Workdir::new();
    let mut command = work.host_command(
        &["serve", "--listen", "127.0.0.1:0", "--no-watch"],
        &bundled(),
    );
    command
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.endpoint)
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json");
    let Serving {
        mut child,
        base,
        mut stderr,
        ..
    } = serving(command).await;
    let (trace, caller) = ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
    let invoked = reqwest::Client::new()
        .post(format!("{base}/v1/skills/inquireOrderStatus/invoke"))
        .header("traceparent", format!("00-{trace}-{caller}-01"))
        .json(&json!({"orderId": "88231"}))
        .send()
        .await
        .unwrap();
    assert_eq!(invoked.status(), reqwest::StatusCode::OK);
    terminate(&child).await;
    let (status, said) = ended(&mut child, &mut stderr).await;
    assert_eq!(status.code(), Some(0), "{said}");

    let spans = collector.spans();
    let one = |name: &str| {
        let named: Vec<&ExportedSpan> = spans.iter().filter(|span| span.name == name).collect();
        assert_eq!(named.len(), 1, "{name}: {spans:#?}");
        named[0]
    };
    // Named for its route, as OpenTelemetry's HTTP conventions say.
    let (request, run, invocation) = (
        one("POST /v1/skills/{name}/invoke"),
        one("run"),
        one("skill_invocation"),
    );
    assert_eq!(request.kind, 2, "a server span");
    assert_eq!(request.trace_id, trace);
    assert_eq!(request.parent_span_id, caller);
    assert_eq!(run.parent_span_id, request.span_id);
    assert_eq!(invocation.parent_span_id, run.span_id);
    assert_eq!(invocation.attribute("skill"), Some("inquireOrderStatus"));
}

/// A span export that cannot work is told on stderr, and the command runs
/// on without it: a collector that refuses, an endpoint that is no URL, a
/// protocol this build does not send.
#[tokio::test]
async fn a_span_export_that_cannot_work_is_told_and_the_command_runs_on() {
    let work = Workdir::new();
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    for (endpoint, protocol, told) in [
        (
            &*closed,
            "http/protobuf",
            format!("exporting spans to {closed}: "),
        ),
        (
            "localhost:4318",
            "http/protobuf",
            "OTLP endpoint `localhost:4318`: not an http(s) URL".to_owned(),
        ),
        (
            &*closed,
            "grpc",
            "OTLP protocol `grpc`: this build sends spans over http/protobuf or http/json only"
                .to_owned(),
        ),
    ] {
        let mut command = work.host_command(
            &[
                "run",
                "inquireOrderStatus",
                "--input",
                r#"{"orderId":"88231"}"#,
            ],
            &bundled(),
        );
        command
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
            .env("OTEL_EXPORTER_OTLP_PROTOCOL", protocol);
        let (stdout, stderr) = expect_code(&output(&mut command).await, 0);
        assert!(stdout.contains("SF1234567890"), "{stdout}");
        assert!(stderr.contains(&told), "{told}: {stderr}");
    }
    // With JSON logs, the warning is a log event like the others.
    let mut command = work.host_command(&["--log-format", "json", "skills"], &bundled());
    command.env("OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4318");
    let (_, stderr) = expect_code(&output(&mut command).await, 0);
    let warning = stderr
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|event| {
            event["fields"]["message"]
                .as_str()
                .is_some_and(|message| message.starts_with("OTLP endpoint `localhost:4318`"))
        })
        .unwrap_or_else(|| panic!("no JSON warning: {stderr}"));
    assert_eq!(warning["level"], "WARN");
}

/// What a file says of itself reaches the terminal with its control
/// characters escaped: a description cannot draw a `trust:` line of its own.
#[tokio::test]
async fn inspect_escapes_what_the_file_says_so_it_cannot_forge_the_verdict() {
    let work = Workdir::new();
    let yaml = work.path("forger.yaml");
    std::fs::write(
        &yaml,
        "name: forger\n\
         description: \"Looks orders up.\\n\\e[2K\\rtrust:       trusted: key 1aa1e92e\"\n\
         tools: [queryOrder]\n\
         parameters: {type: object}\n\
         instructions: Look the order up.\n",
    )
    .unwrap();
    expect_code(&output(work.command(&["pack"]).arg(&yaml)).await, 0);
    let mut inspect = work.command(&["inspect", "--trust"]);
    inspect
        .arg(repo_root().join("keys/trusted"))
        .arg(work.path("forger.wasm"));
    let out = output(&mut inspect).await;
    let stdout = text(&out.stdout);
    assert!(!stdout.contains(['\u{1b}', '\r']), "{stdout:?}");
    let verdicts: Vec<&str> = stdout
        .lines()
        .filter(|line| line.starts_with("trust:"))
        .collect();
    assert_eq!(verdicts.len(), 1, "{stdout}");
    assert!(verdicts[0].contains("NOT trusted"), "{stdout}");
    assert!(
        stdout.contains("description:  Looks orders up."),
        "{stdout}"
    );
}

#[tokio::test]
async fn inspect_reads_unsigned_and_tampered_files_and_says_why_they_are_not_trusted() {
    let work = Workdir::new();
    let yaml = work.path("order-lookup.yaml");
    std::fs::write(&yaml, LOOKUP_SKILL).unwrap();
    let mut pack = work.command(&["pack"]);
    pack.arg(&yaml);
    expect_code(&output(&mut pack).await, 0);
    // Packed again: the file there is kept unless --force says otherwise.
    let packed = std::fs::read(work.path("orderLookup.wasm")).unwrap();
    std::fs::write(work.path("orderLookup.wasm"), b"a signed skill").unwrap();
    let (_, stderr) = expect_code(&output(&mut pack).await, 1);
    assert!(
        stderr.contains("already exists") && stderr.contains("--force"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read(work.path("orderLookup.wasm")).unwrap(),
        b"a signed skill"
    );
    pack.arg("--force");
    expect_code(&output(&mut pack).await, 0);
    assert_eq!(
        std::fs::read(work.path("orderLookup.wasm")).unwrap(),
        packed
    );

    let (code, report) = inspect_json(&work, &work.path("orderLookup.wasm")).await;
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["signature"]["signed"], false);
    assert_eq!(report["signature"]["status"], "unsigned");
    assert_eq!(report["manifest"]["name"], "orderLookup");
    assert_eq!(report["manifest"]["steps"], false);
    assert_eq!(report["manifest"]["test_cases"], 2);

    // A device is refused unread, not read until memory runs out.
    let mut device = work.command(&["inspect", "/dev/zero"]);
    let (_, stderr) = expect_code(&output(&mut device).await, 1);
    assert!(stderr.contains("not a regular file"), "{stderr}");

    // A signed file with a custom section appended: still a component,
    // no longer what the key signed.
    let mut bytes = std::fs::read(skill_file("processRefund")).unwrap();
    bytes.extend_from_slice(&[0x00, 0x05, 0x04, b'n', b'o', b't', b'e']);
    let tampered = work.path("tampered.wasm");
    std::fs::write(&tampered, &bytes).unwrap();
    let (code, report) = inspect_json(&work, &tampered).await;
    assert_eq!(code, 0, "{report}");
    let signature = &report["signature"];
    assert_eq!(signature["status"], "tampered");
    assert_eq!(signature["signers"], json!([]));
    assert!(
        signature["reason"]
            .as_str()
            .unwrap()
            .contains(&demo_key().fingerprint().to_string()),
        "{signature}"
    );
    assert_eq!(report["digest"], digest_of(&bytes));
    assert_eq!(report["manifest"]["name"], "processRefund");
}

#[tokio::test]
async fn inspect_of_what_is_not_a_skill_names_the_problem_and_shows_what_it_read() {
    let work = Workdir::new();
    let cases = [
        (
            "notes.txt",
            b"just some text".to_vec(),
            "not_a_component",
            "not a WebAssembly file",
        ),
        (
            "core.wasm",
            wat::parse_str("(module)").unwrap(),
            "not_a_component",
            "a core WebAssembly module, not a component",
        ),
        (
            "foreign.wasm",
            wat::parse_str(r#"(component (import "evil:net/socket" (instance)))"#).unwrap(),
            "link",
            "component does not fit the skill world",
        ),
    ];
    for (name, bytes, kind, reason) in cases {
        let file = work.path(name);
        std::fs::write(&file, &bytes).unwrap();
        let (code, report) = inspect_json(&work, &file).await;
        assert_eq!(code, 1, "{report}");
        assert_eq!(report["error"]["kind"], kind, "{report}");
        assert!(
            report["error"]["reason"].as_str().unwrap().contains(reason),
            "{report}"
        );
        // What needs only the bytes is there all the same.
        assert_eq!(report["digest"], digest_of(&bytes));
        assert_eq!(report["size"], bytes.len());
        assert_eq!(report["signature"]["signed"], false);
        assert_eq!(report["manifest"], Value::Null);

        let mut command = work.command(&["inspect"]);
        command.arg(&file);
        let (stdout, stderr) = expect_code(&output(&mut command).await, 1);
        assert!(
            stderr.starts_with(&format!("error: {}: ", file.display())) && stderr.contains(reason),
            "{stderr}"
        );
        assert!(stdout.contains(&digest_of(&bytes)), "{stdout}");
    }
    // A compiled component lists its imports even when it cannot link.
    let (_, report) = inspect_json(&work, &work.path("foreign.wasm")).await;
    assert_eq!(
        report["imports"],
        json!([{"name": "evil:net/socket", "kind": "instance"}])
    );
}

#[tokio::test]
async fn keygen_pack_sign_verify_and_run_print_json_for_scripts() {
    let work = Workdir::new();
    let json_of = |out: &Output| -> Value {
        let (stdout, stderr) = expect_code(out, 0);
        // Progress lines are for terminals only.
        assert!(stderr.is_empty(), "{stderr}");
        serde_json::from_str(&stdout).unwrap_or_else(|error| panic!("{error}: {stdout}"))
    };

    let mut keygen = work.command(&["keygen", "--json", "--out"]);
    keygen.arg(work.path("author"));
    let keys = json_of(&output(&mut keygen).await);
    let public = PublicKey::load(&work.path("author.pub")).unwrap();
    assert_eq!(keys["fingerprint"], json!(public.fingerprint()));
    assert_eq!(keys["secret_key"], json!(work.path("author.key")));
    assert_eq!(keys["public_key"], json!(work.path("author.pub")));

    let yaml = work.path("order-lookup.yaml");
    std::fs::write(&yaml, LOOKUP_SKILL).unwrap();
    let mut pack = work.command(&["pack", "--json"]);
    pack.arg(&yaml);
    let packed = json_of(&output(&mut pack).await);
    let component = work.path("orderLookup.wasm");
    let bytes = std::fs::read(&component).unwrap();
    assert_eq!(packed["name"], "orderLookup");
    assert_eq!(packed["version"], "0.1.0");
    assert_eq!(packed["out"], json!(component));
    assert_eq!(packed["size"], bytes.len());
    assert_eq!(packed["digest"], digest_of(&bytes));
    assert_eq!(packed["signed"], false);

    let signed_path = work.path("signed.wasm");
    let mut sign = work.command(&["sign", "--json", "--key"]);
    sign.arg(work.path("author.key"))
        .arg("--out")
        .arg(&signed_path)
        .arg(&component);
    let signed = json_of(&output(&mut sign).await);
    assert_eq!(signed["file"], json!(component));
    assert_eq!(signed["signed_file"], json!(signed_path));
    assert_eq!(signed["detached"], Value::Null);
    assert_eq!(signed["signer"], keys["fingerprint"]);

    let mut verify = work.command(&["verify", "--json", "--trust"]);
    verify.arg(work.path("author.pub")).arg(&signed_path);
    let verified = json_of(&output(&mut verify).await);
    assert_eq!(verified["valid"], true);
    assert_eq!(verified["signer"], keys["fingerprint"]);

    // Signed in place through a link, the file linked to is signed and the
    // link stays one.
    let link = work.path("linked.wasm");
    std::os::unix::fs::symlink(&component, &link).unwrap();
    let mut sign = work.command(&["sign", "--key"]);
    sign.arg(work.path("author.key")).arg(&link);
    expect_code(&output(&mut sign).await, 0);
    assert!(link.symlink_metadata().unwrap().file_type().is_symlink());
    let mut verify = work.command(&["verify", "--json", "--trust"]);
    verify.arg(work.path("author.pub")).arg(&component);
    assert_eq!(json_of(&output(&mut verify).await)["valid"], true);

    // A prefix naming no key (a directory) is refused, not written as the
    // hidden `.key` and `.pub` a trust directory skips.
    for out in [work.path("keys/"), work.path("")] {
        let mut keygen = work.command(&["keygen", "--out"]);
        keygen.arg(&out);
        let (_, stderr) = expect_code(&output(&mut keygen).await, 1);
        assert!(stderr.contains("it is a path prefix"), "{stderr}");
    }

    let mut run = work.host_command(
        &[
            "run",
            "processRefund",
            "--json",
            "--yes",
            "--input",
            r#"{"orderId":"88231","reason":"broken"}"#,
        ],
        &bundled(),
    );
    let (stdout, stderr) = expect_code(&output(&mut run).await, 0);
    // What is approved is shown, JSON or not, and so is that --yes did.
    assert!(
        stderr.contains("applyRefund: orderId '88231', reason 'broken'")
            && stderr.contains("approved (--yes)"),
        "{stderr}"
    );
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["skill"], "processRefund");
    assert_eq!(report["outcome"], "done");
    assert_eq!(report["result"]["refunded"], true);
    assert_eq!(
        report["tool_calls"],
        json!([
            {"tool": "queryOrder", "error": null},
            {"tool": "applyRefund", "error": null},
        ])
    );
}

/// A blank key would leave the routes open while the operator believes them
/// guarded (and silence the warning about an open gateway): refused.
#[tokio::test]
async fn serve_refuses_a_blank_key_instead_of_serving_unguarded() {
    let work = Workdir::new();
    for (variable, value) in [
        ("SKILLHOST_API_KEYS", ""),
        ("SKILLHOST_API_KEYS", "k-1,"),
        ("SKILLHOST_ADMIN_KEY", " "),
    ] {
        let mut serve = work.host_command(&["serve", "--listen", "127.0.0.1:0"], &bundled());
        serve.env(variable, value);
        let (_, stderr) = expect_code(&output(&mut serve).await, 2);
        assert!(
            stderr.contains("a key is empty or blank"),
            "{variable}={value:?}: {stderr}"
        );
    }
}

/// The status `GET /v1/skills` on `base` answers with `key`.
async fn skills_status(base: &str, key: &str) -> reqwest::StatusCode {
    reqwest::Client::new()
        .get(format!("{base}/v1/skills"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap()
        .status()
}

/// Named keys come from a file: they guard the API routes like
/// `--api-key`'s; a file others can read is warned of, a malformed one
/// refused naming the line and never the key. SIGHUP reads it again (here
/// the only way: `--no-watch`): a key rotates without a restart, and a bad
/// file leaves the keys as they were.
#[tokio::test]
async fn serve_takes_named_api_keys_from_a_file() {
    use std::os::unix::fs::PermissionsExt;
    let work = Workdir::new();
    let keys = work.path("api-keys");
    std::fs::write(&keys, "# holder  key\nsupport-desk k-support\n").unwrap();
    std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut command = work.host_command(
        &["serve", "--listen", "127.0.0.1:0", "--no-watch"],
        &bundled(),
    );
    command.env("SKILLHOST_API_KEYS_FILE", &keys);
    let Serving {
        child: serve,
        base,
        started,
        mut stderr,
    } = serving(command).await;
    assert!(
        started
            .iter()
            .any(|line| line.contains("can be read by every user of this machine")),
        "{started:#?}"
    );
    assert_eq!(skills_status(&base, "k-support").await, 200);
    assert_eq!(skills_status(&base, "k-other").await, 401);

    std::fs::write(&keys, "support-desk k-rotated\n").unwrap();
    send_signal(&serve, "-HUP").await;
    said_next(&mut stderr, "API keys reloaded").await;
    assert_eq!(skills_status(&base, "k-rotated").await, 200);
    assert_eq!(skills_status(&base, "k-support").await, 401);
    std::fs::write(&keys, "support-desk\n").unwrap();
    send_signal(&serve, "-HUP").await;
    let kept = said_next(&mut stderr, "the API keys in force stay").await;
    assert!(kept.contains("line 1: expected `NAME KEY`"), "{kept}");
    assert_eq!(skills_status(&base, "k-rotated").await, 200);
    drop(serve);

    std::fs::write(&keys, "support-desk k-support\nbilling k-support\n").unwrap();
    let mut serve = work.host_command(&["serve", "--listen", "127.0.0.1:0"], &bundled());
    serve.arg("--api-keys-file").arg(&keys);
    let (_, stderr) = expect_code(&output(&mut serve).await, 1);
    assert!(
        stderr.contains("line 2: the key of `billing` is also on line 1"),
        "{stderr}"
    );
    assert!(!stderr.contains("k-support"), "{stderr}");
}

/// A watched keys file is followed without a signal: replaced whole (as an
/// editor or a Secret update does), its keys take over; a bad version is
/// reported and the keys in force stay.
#[tokio::test]
async fn serve_follows_its_keys_file_when_it_changes() {
    let work = Workdir::new();
    let keys = work.path("api-keys");
    std::fs::write(&keys, "support-desk k-support\n").unwrap();
    let mut command = work.host_command(&["serve", "--listen", "127.0.0.1:0"], &bundled());
    command.arg("--api-keys-file").arg(&keys);
    let Serving {
        child: _serve,
        base,
        mut stderr,
        ..
    } = serving(command).await;
    assert_eq!(skills_status(&base, "k-support").await, 200);

    let replace = |text: &str| {
        let staged = work.path(".api-keys.new");
        std::fs::write(&staged, text).unwrap();
        std::fs::rename(&staged, &keys).unwrap();
    };
    replace("support-desk k-rotated\n");
    let reloaded = said_next(&mut stderr, "API keys reloaded").await;
    assert!(reloaded.contains("1 key(s)"), "{reloaded}");
    assert_eq!(skills_status(&base, "k-rotated").await, 200);
    assert_eq!(skills_status(&base, "k-support").await, 401);

    replace("support-desk\n");
    let kept = said_next(&mut stderr, "the API keys in force stay").await;
    assert!(kept.contains("line 1: expected `NAME KEY`"), "{kept}");
    assert_eq!(skills_status(&base, "k-rotated").await, 200);
}

/// SIGHUP rescans the skills directory, which a gateway serving without
/// hot reload has no other way to follow short of a restart: an added skill
/// serves, a bad file is refused and the skill it replaced keeps serving,
/// and a deleted one goes. Without a keys file, SIGHUP reads none (and, as
/// the default action would, does not end the gateway).
#[tokio::test]
async fn serve_rescans_the_skills_directory_at_sighup() {
    let work = Workdir::new();
    let skills = work.path("skills");
    std::fs::create_dir(&skills).unwrap();
    let install = |name: &str| {
        std::fs::copy(bundled().join(name), skills.join(name)).unwrap();
    };
    install("processRefund.wasm");
    let command = work.host_command(&["serve", "--listen", "127.0.0.1:0", "--no-watch"], &skills);
    let Serving {
        child: serve,
        base,
        mut stderr,
        ..
    } = serving(command).await;
    let http = reqwest::Client::new();
    let served = || async {
        let listing: Value = http
            .get(format!("{base}/v1/skills"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let mut names: Vec<String> = listing["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|skill| skill["name"].as_str().unwrap().to_owned())
            .collect();
        names.sort();
        names
    };
    let rescanned = "file(s) changed";

    install("inquireOrderStatus.wasm");
    send_signal(&serve, "-HUP").await;
    let said = said_next(&mut stderr, rescanned).await;
    assert!(
        said.contains("2 skill(s) loaded, 1 file(s) changed"),
        "{said}"
    );
    assert!(!said.contains("refused"), "{said}");
    assert_eq!(served().await, ["inquireOrderStatus", "processRefund"]);

    std::fs::write(skills.join("processRefund.wasm"), b"\0asm truncated").unwrap();
    std::fs::remove_file(skills.join("inquireOrderStatus.wasm")).unwrap();
    send_signal(&serve, "-HUP").await;
    let said = said_next(&mut stderr, rescanned).await;
    assert!(
        said.contains("1 skill(s) loaded, 1 file(s) changed, 1 refused"),
        "{said}"
    );
    assert_eq!(served().await, ["processRefund"]);
    assert!(
        !said.contains("API keys"),
        "no keys file, no keys read: {said}"
    );
}

/// The config file's entry of the test MCP server at `url` as `crm`,
/// taking its read tool customerReport.
fn crm_reports_at(url: &str) -> String {
    format!(
        "[[mcp_servers]]\nname = \"crm\"\nurl = \"{url}\"\n\
         tools = [\"customerReport\"]\nread = [\"customerReport\"]\n"
    )
}

/// `field` of the tool `name` as the gateway at `base` lists it in
/// `/v1/tools`; null when it lists no such tool.
async fn tool_field(base: &str, name: &str, field: &str) -> Value {
    let response = reqwest::get(format!("{base}/v1/tools")).await.unwrap();
    let tools: Value = response.json().await.unwrap();
    let mut tools = tools["data"].as_array().unwrap().iter();
    let found = tools.find(|tool| tool["name"] == name);
    found.map_or(Value::Null, |tool| tool[field].clone())
}

/// SIGHUP lists the tools of the config file's MCP servers again: a
/// server at a url cannot say that they changed. A skill calling a tool the
/// server no longer lists goes, saying which, and comes back with it.
#[tokio::test]
async fn serve_lists_its_mcp_servers_tools_again_at_sighup() {
    let server = McpServer::default();
    let url = server.start().await;
    let work = Workdir::new();
    let skills = work.skills_calling("reportDesk", "customerReport");
    let config = work.path("skillhost.toml");
    std::fs::write(&config, crm_reports_at(&url)).unwrap();
    let config = config.to_str().unwrap();
    let command = work.host_command(
        &["serve", "--listen", "127.0.0.1:0", "--config", config],
        &skills,
    );
    let Serving {
        child: serve,
        base,
        mut stderr,
        ..
    } = serving(command).await;
    let listing = async || -> Value {
        let response = reqwest::get(format!("{base}/v1/skills")).await.unwrap();
        response.json().await.unwrap()
    };
    assert_eq!(listing().await["data"][0]["name"], "reportDesk");
    let tools = async || -> Vec<(String, Value)> {
        let response = reqwest::get(format!("{base}/v1/tools")).await.unwrap();
        let tools: Value = response.json().await.unwrap();
        let tools = tools["data"].as_array().unwrap().iter();
        let names = tools.map(|tool| {
            (
                tool["name"].as_str().unwrap().to_owned(),
                tool["server"].clone(),
            )
        });
        names.filter(|(name, _)| name == "customerReport").collect()
    };
    assert_eq!(tools().await, [("customerReport".to_owned(), json!("crm"))]);

    server.offer("customerReport", false);
    send_signal(&serve, "-HUP").await;
    let said = said_next(&mut stderr, "MCP servers' tools listed again").await;
    assert!(said.contains("1 skill file(s) changed with them"), "{said}");
    let listed = listing().await;
    assert_eq!(listed["data"], json!([]), "{listed}");
    let reason = listed["failures"][0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("`customerReport`, which is not a registered tool"),
        "{reason}"
    );
    assert_eq!(tools().await, []);

    server.offer("customerReport", true);
    send_signal(&serve, "-HUP").await;
    said_next(&mut stderr, "MCP servers' tools listed again").await;
    assert_eq!(listing().await["data"][0]["name"], "reportDesk");
}

/// SIGHUP reads the config file's HTTP tools again: a tool added is offered
/// and the skill refused for lacking it loads; one changed is replaced; one
/// removed unloads the skill calling it. Tools that do not build or clash
/// with another's name keep those in force, and a setting that takes effect
/// only at a restart is said to wait for one.
#[tokio::test]
async fn serve_reads_its_http_tools_again_at_sighup() {
    let work = Workdir::new();
    let skills = work.skills_calling("whoDesk", "whoAmI");
    let http_tool = |name: &str, description: &str, header: &str| {
        format!(
            "[[tools]]\nname = \"{name}\"\ndescription = \"{description}\"\n\
             access = \"read\"\nurl = \"http://127.0.0.1:9/api/whoami\"\n\
             headers = {{ X-Team = \"{header}\" }}\nparameters = {{ type = \"object\" }}\n"
        )
    };
    let command = work.configured_command(
        "",
        &["serve", "--listen", "127.0.0.1:0", "--no-watch"],
        &skills,
    );
    let Serving {
        child: serve,
        base,
        mut stderr,
        ..
    } = serving(command).await;
    let loaded = async || -> Vec<Value> {
        let response = reqwest::get(format!("{base}/v1/skills")).await.unwrap();
        let listed: Value = response.json().await.unwrap();
        let names = listed["data"].as_array().unwrap().iter();
        names.map(|skill| skill["name"].clone()).collect()
    };
    let who_am_i = async || tool_field(&base, "whoAmI", "description").await;
    assert_eq!(loaded().await, Vec::<Value>::new());
    let reconfigure = async |config: String| {
        std::fs::write(work.path("skillhost.toml"), config).unwrap();
        send_signal(&serve, "-HUP").await;
    };

    reconfigure(http_tool("whoAmI", "Who the CRM sees.", "desk")).await;
    let said = said_next(&mut stderr, "HTTP tools read again from skillhost.toml").await;
    assert!(
        said.contains("added whoAmI; removed none; changed none; 1 skill file(s) changed"),
        "{said}"
    );
    assert_eq!(who_am_i().await, "Who the CRM sees.");
    assert_eq!(loaded().await, [json!("whoDesk")]);

    // A header's secret not set, or a name another tool has: no change.
    let unset = http_tool("whoAmI", "Who.", "${CRM_TOKEN_NOT_SET}");
    reconfigure(unset).await;
    said_next(&mut stderr, "the HTTP tools in force stay").await;
    reconfigure(http_tool("queryOrder", "Clashes.", "desk")).await;
    let said = said_next(&mut stderr, "the HTTP tools in force stay").await;
    assert!(
        said.contains("a tool named `queryOrder` is already registered"),
        "{said}"
    );
    assert_eq!(who_am_i().await, "Who the CRM sees.");

    let changed = http_tool("whoAmI", "Who the CRM sees now.", "desk");
    reconfigure(format!("{changed}\n[sandbox]\nmax_instances = 4\n")).await;
    let said = said_next(&mut stderr, "HTTP tools read again").await;
    assert!(said.contains("changed whoAmI; 0 skill file(s)"), "{said}");
    let said = said_next(&mut stderr, "takes effect only at a restart").await;
    assert!(said.contains("[sandbox] max_instances changed"), "{said}");
    assert_eq!(who_am_i().await, "Who the CRM sees now.");

    reconfigure(String::new()).await;
    let said = said_next(&mut stderr, "HTTP tools read again").await;
    assert!(said.contains("removed whoAmI;"), "{said}");
    assert_eq!(who_am_i().await, Value::Null);
    assert_eq!(loaded().await, Vec::<Value>::new());

    // Each reading that changed something is counted, so that an alert can
    // catch the ones that kept the old tools.
    let metrics = reqwest::get(format!("{base}/metrics")).await.unwrap();
    let metrics = metrics.text().await.unwrap();
    for line in [
        "skillhost_config_reloads_total{part=\"http_tools\",outcome=\"applied\"} 3",
        "skillhost_config_reloads_total{part=\"http_tools\",outcome=\"kept\"} 2",
    ] {
        assert_has_line(&metrics, line);
    }
}

/// SIGHUP reads the config file's MCP servers again: a server added is
/// connected and the skill refused for lacking its tool loads; one that
/// cannot be reached changes nothing; a server taken out takes its tools
/// and the skill calling them along.
#[tokio::test]
async fn serve_reads_its_mcp_servers_again_at_sighup() {
    let server = McpServer::default();
    let url = server.start().await;
    let work = Workdir::new();
    let skills = work.skills_calling("reportDesk", "customerReport");
    let command = work.configured_command(
        "",
        &["serve", "--listen", "127.0.0.1:0", "--no-watch"],
        &skills,
    );
    let Serving {
        child: serve,
        base,
        mut stderr,
        ..
    } = serving(command).await;
    let loaded = async || -> Value {
        let response = reqwest::get(format!("{base}/v1/skills")).await.unwrap();
        let listed: Value = response.json().await.unwrap();
        listed["data"].clone()
    };
    let report_server = async || tool_field(&base, "customerReport", "server").await;
    assert_eq!(loaded().await, json!([]));
    let reconfigure = async |config: String| {
        std::fs::write(work.path("skillhost.toml"), config).unwrap();
        send_signal(&serve, "-HUP").await;
    };

    reconfigure(crm_reports_at(&url)).await;
    let said = said_next(&mut stderr, "MCP servers read again from skillhost.toml").await;
    assert!(
        said.contains("added crm; removed none; changed none; 1 skill file(s) changed"),
        "{said}"
    );
    assert_eq!(report_server().await, "crm");
    assert_eq!(loaded().await[0]["name"], "reportDesk");

    let unreachable = "[[mcp_servers]]\nname = \"gone\"\nurl = \"http://127.0.0.1:9/mcp\"\n";
    reconfigure(format!("{}\n{unreachable}", crm_reports_at(&url))).await;
    let said = said_next(&mut stderr, "the MCP servers in force stay").await;
    assert!(said.contains("gone"), "{said}");
    assert_eq!(report_server().await, "crm");

    reconfigure(String::new()).await;
    let said = said_next(&mut stderr, "MCP servers read again").await;
    assert!(said.contains("removed crm;"), "{said}");
    assert_eq!(report_server().await, Value::Null);
    assert_eq!(loaded().await, json!([]));
}

/// A skills directory in `work` holding processRefund, signed with the demo
/// key, and inquireOrderStatus signed by Alice's key alone, which a trust
/// directory of its own holds.
struct AliceTrusted {
    skills: PathBuf,
    /// Trusted beside `keys/trusted`.
    trusted: PathBuf,
    /// Alice's public key in `trusted`; `work`'s `alice.pub` is a copy.
    alice_pub: PathBuf,
}

impl AliceTrusted {
    async fn set_up(work: &Workdir) -> Self {
        let mut keygen = work.command(&["keygen", "--out"]);
        keygen.arg(work.path("alice"));
        expect_code(&output(&mut keygen).await, 0);
        let trusted = work.path("trusted");
        std::fs::create_dir(&trusted).unwrap();
        let alice_pub = trusted.join("alice.pub");
        std::fs::copy(work.path("alice.pub"), &alice_pub).unwrap();
        let skills = work.path("skills");
        std::fs::create_dir(&skills).unwrap();
        let refund = "processRefund.wasm";
        std::fs::copy(bundled().join(refund), skills.join(refund)).unwrap();
        let inquire = skills.join("inquireOrderStatus.wasm");
        let bytes = unsigned(&bundled().join("inquireOrderStatus.wasm"));
        std::fs::write(&inquire, bytes).unwrap();
        let mut sign = work.command(&["sign", "--key"]);
        sign.arg(work.path("alice.key")).arg(&inquire);
        expect_code(&output(&mut sign).await, 0);
        Self {
            skills,
            trusted,
            alice_pub,
        }
    }

    /// `skillhost <args>` on these skills, trusting Alice's key beside the
    /// demo key.
    fn command(&self, work: &Workdir, args: &[&str]) -> Command {
        let mut command = work.host_command(args, &self.skills);
        command.arg("--trust").arg(&self.trusted);
        command
    }
}

/// `[[trust.scopes]]` limits what a key may sign: the demo key limited to
/// the shop's read tools signs no refund, and the listing says why.
#[tokio::test]
async fn a_key_scope_in_the_config_file_refuses_the_skills_outside_it() {
    let work = Workdir::new();
    let config = r#"
[[trust.scopes]]
key = "1aa1e92e86658033a90ecf0b"
tools = ["queryOrder", "queryLogistics"]
skills = ["processRefund", "inquire*"]
"#;
    let mut skills = work.configured_command(config, &["skills", "--json"], &bundled());
    let (stdout, _) = expect_code(&output(&mut skills).await, 0);
    let listing: Value = serde_json::from_str(&stdout).unwrap();
    let loaded: Vec<&str> = listing["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|skill| skill["name"].as_str().unwrap())
        .collect();
    assert_eq!(loaded, ["inquireOrderStatus"], "{stdout}");
    let failed = listing["failed"].as_array().unwrap();
    let refusal = |file: &str| {
        let failure = failed
            .iter()
            .find(|failure| failure["path"].as_str().unwrap().ends_with(file))
            .unwrap_or_else(|| panic!("{file} refused: {stdout}"));
        (
            failure["kind"].as_str().unwrap(),
            failure["reason"].as_str().unwrap(),
        )
    };
    let (kind, reason) = refusal("processRefund.wasm");
    assert_eq!(kind, "scope");
    assert!(reason.contains("it calls `applyRefund`"), "{reason}");
    let (kind, reason) = refusal("order_change.wasm");
    assert_eq!(kind, "scope");
    assert!(
        reason.contains("its name `order_change` matches none"),
        "{reason}"
    );
    // `inspect` says so of the file, as loading it would.
    let mut inspect = work.command(&["inspect", "--json", "--config", "skillhost.toml"]);
    inspect
        .arg("--trust")
        .arg(repo_root().join("keys/trusted"))
        .arg(skill_file("processRefund"));
    let (stdout, _) = expect_code(&output(&mut inspect).await, 0);
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["signature"]["status"], "out_of_scope", "{stdout}");
    let reason = report["signature"]["reason"].as_str().unwrap();
    assert!(reason.contains("it calls `applyRefund`"), "{reason}");

    let bad = "[[trust.scopes]]\nkey = \"demo\"\n";
    let mut skills = work.configured_command(bad, &["skills"], &bundled());
    let (_, stderr) = expect_code(&output(&mut skills).await, 1);
    assert!(
        stderr.contains("[[trust.scopes]] #1") && stderr.contains("not a key's fingerprint"),
        "{stderr}"
    );
}

/// A key taken out of the trust directory stops trusting what it signed at
/// the next SIGHUP, without a restart: its skill is unloaded though its file
/// stays. A trust directory that does not read changes nothing; the key put
/// back, the skill loads again.
#[tokio::test]
async fn serve_reads_its_trust_store_again_at_sighup() {
    let work = Workdir::new();
    let alice = AliceTrusted::set_up(&work).await;
    let command = alice.command(&work, &["serve", "--listen", "127.0.0.1:0", "--no-watch"]);
    let Serving {
        child: serve,
        base,
        mut stderr,
        ..
    } = serving(command).await;
    let http = reqwest::Client::new();
    let status = |name: &'static str| {
        let request = http.get(format!("{base}/v1/skills/{name}"));
        async move { request.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(status("inquireOrderStatus").await, 200);
    let reread = "trust store read again";

    std::fs::remove_file(&alice.alice_pub).unwrap();
    send_signal(&serve, "-HUP").await;
    let said = said_next(&mut stderr, reread).await;
    assert!(
        said.contains("1 key(s), 0 added, 1 taken out; 1 skill(s) unloaded"),
        "{said}"
    );
    assert_eq!(status("inquireOrderStatus").await, 404);
    assert_eq!(status("processRefund").await, 200);

    std::fs::write(alice.trusted.join("README"), "keys we trust").unwrap();
    send_signal(&serve, "-HUP").await;
    let kept = said_next(&mut stderr, "the keys trusted stay").await;
    assert!(kept.contains("README"), "{kept}");
    assert_eq!(status("processRefund").await, 200);

    std::fs::remove_file(alice.trusted.join("README")).unwrap();
    std::fs::copy(work.path("alice.pub"), &alice.alice_pub).unwrap();
    send_signal(&serve, "-HUP").await;
    let said = said_next(&mut stderr, reread).await;
    assert!(
        said.contains("1 added, 0 taken out; 0 skill(s) unloaded as no longer trusted, 1 loaded"),
        "{said}"
    );
    assert_eq!(status("inquireOrderStatus").await, 200);
}

/// Taking out the last trusted key revokes it too: nothing is trusted then,
/// rather than the last key staying trusted for want of another.
#[tokio::test]
async fn serve_trusts_nothing_once_every_key_is_taken_out() {
    let work = Workdir::new();
    let alice = AliceTrusted::set_up(&work).await;
    let mut command = work.command(&["serve", "--listen", "127.0.0.1:0", "--no-watch"]);
    command
        .arg("--skills")
        .arg(&alice.skills)
        .arg("--trust")
        .arg(&alice.trusted)
        .arg("--db")
        .arg(work.db());
    let Serving {
        child: serve,
        base,
        mut stderr,
        ..
    } = serving(command).await;
    let served = || async {
        let listing: Value = reqwest::get(format!("{base}/v1/skills"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        listing["data"].as_array().unwrap().len()
    };
    assert_eq!(served().await, 1, "inquireOrderStatus, signed by Alice");

    std::fs::remove_file(&alice.alice_pub).unwrap();
    send_signal(&serve, "-HUP").await;
    let warned = said_next(&mut stderr, "no key is trusted any more").await;
    assert!(warned.contains("every skill is refused"), "{warned}");
    let said = said_next(&mut stderr, "trust store read again").await;
    assert!(
        said.contains("0 key(s), 0 added, 1 taken out; 1 skill(s) unloaded"),
        "{said}"
    );
    assert_eq!(served().await, 0);
}

/// With hot reload, the trust directory is followed like the skills: a key
/// file deleted stops trusting what it signed without a signal, and put
/// back, trusts it again; a directory replaced whole is followed too.
#[tokio::test]
async fn serve_follows_its_trust_directory_when_it_changes() {
    let work = Workdir::new();
    let alice = AliceTrusted::set_up(&work).await;
    let command = alice.command(&work, &["serve", "--listen", "127.0.0.1:0"]);
    let Serving {
        child: _serve,
        base,
        mut stderr,
        ..
    } = serving(command).await;
    let status = || async {
        reqwest::get(format!("{base}/v1/skills/inquireOrderStatus"))
            .await
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(status().await, 200);

    std::fs::remove_file(&alice.alice_pub).unwrap();
    let said = said_next(&mut stderr, "trust store read again").await;
    assert!(said.contains("1 taken out; 1 skill(s) unloaded"), "{said}");
    assert_eq!(status().await, 404);

    std::fs::copy(work.path("alice.pub"), &alice.alice_pub).unwrap();
    let said = said_next(&mut stderr, "trust store read again").await;
    assert!(
        said.contains("1 added, 0 taken out; 0 skill(s) unloaded as no longer trusted, 1 loaded"),
        "{said}"
    );
    assert_eq!(status().await, 200);

    // The directory replaced whole, as a deployment does: what happens in
    // the new one is followed from then on.
    let next = work.path("trusted.new");
    std::fs::create_dir(&next).unwrap();
    std::fs::copy(work.path("alice.pub"), next.join("alice.pub")).unwrap();
    std::fs::rename(&alice.trusted, work.path("trusted.old")).unwrap();
    std::fs::rename(&next, &alice.trusted).unwrap();
    // The same keys: nothing to say. Past the watch's settling time, the
    // change below is one only a watch of the new directory sees.
    tokio::time::sleep(Duration::from_secs(1)).await;
    std::fs::remove_file(&alice.alice_pub).unwrap();
    let said = said_next(&mut stderr, "trust store read again").await;
    assert!(said.contains("1 taken out; 1 skill(s) unloaded"), "{said}");
    assert_eq!(status().await, 404);
}

/// A build script may sign what it built again: the same key over the same
/// content changes nothing and succeeds, embedded or detached.
#[tokio::test]
async fn signing_again_with_the_same_key_changes_nothing_and_succeeds() {
    let work = Workdir::new();
    let mut keygen = work.command(&["keygen", "--out"]);
    keygen.arg(work.path("author"));
    expect_code(&output(&mut keygen).await, 0);
    let key = work.path("author.key");
    let yaml = work.path("order-lookup.yaml");
    std::fs::write(&yaml, LOOKUP_SKILL).unwrap();
    let mut pack = work.command(&["pack"]);
    pack.arg(&yaml);
    expect_code(&output(&mut pack).await, 0);
    let component = work.path("orderLookup.wasm");
    let unsigned = std::fs::read(&component).unwrap();

    let signature = work.path("orderLookup.sig");
    for already_signed in [false, true] {
        let mut sign = work.command(&["sign", "--json", "--key"]);
        sign.arg(&key)
            .arg("--detached")
            .arg(&signature)
            .arg(&component);
        let (stdout, _) = expect_code(&output(&mut sign).await, 0);
        let report: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(report["already_signed"], already_signed, "{stdout}");
    }
    // A copy of the key trusted too is kept once and said, since deleting
    // one file would then not revoke the key.
    let copy_of_key = work.path("author-copy.pub");
    std::fs::copy(work.path("author.pub"), &copy_of_key).unwrap();
    let mut verify = work.command(&["verify", "--trust"]);
    verify
        .arg(work.path("author.pub"))
        .arg("--trust")
        .arg(&copy_of_key)
        .arg("--detached")
        .arg(&signature)
        .arg(&component);
    let (_, stderr) = expect_code(&output(&mut verify).await, 0);
    assert!(
        stderr.contains("author-copy.pub holds the same key as")
            && stderr.contains("until both are deleted"),
        "{stderr}"
    );
    assert_eq!(std::fs::read(&component).unwrap(), unsigned);

    let mut sign = work.command(&["sign", "--key"]);
    sign.arg(&key).arg(&component);
    let (stdout, _) = expect_code(&output(&mut sign).await, 0);
    assert!(stdout.contains(": signed by key"), "{stdout}");
    let signed = std::fs::read(&component).unwrap();
    let mut again = work.command(&["sign", "--key"]);
    again.arg(&key).arg(&component);
    let (stdout, _) = expect_code(&output(&mut again).await, 0);
    assert!(
        stdout.contains(": already signed by key") && stdout.contains("unchanged"),
        "{stdout}"
    );
    assert_eq!(std::fs::read(&component).unwrap(), signed);

    // To another file, that file gets the signed component as it is.
    let copy = work.path("copy.wasm");
    let mut sign = work.command(&["sign", "--json", "--key"]);
    sign.arg(&key).arg("--out").arg(&copy).arg(&component);
    let (stdout, _) = expect_code(&output(&mut sign).await, 0);
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["already_signed"], true, "{stdout}");
    assert_eq!(report["signed_file"], json!(copy));
    assert_eq!(std::fs::read(&copy).unwrap(), signed);
}

/// On a terminal, loading shows a progress line on stderr and clears it
/// before the listing (stdout and stderr share the terminal here).
#[tokio::test]
async fn skills_on_a_terminal_shows_loading_progress_and_clears_it() {
    let work = Workdir::new();
    let command_line = format!(
        "{} skills --skills {} --trust {} --db {}",
        env!("CARGO_BIN_EXE_skillhost"),
        bundled().display(),
        repo_root().join("keys/trusted").display(),
        work.db().display()
    );
    // util-linux `script` runs the command on a pseudo-terminal.
    let mut command = work.program("script");
    command.args([
        "--quiet",
        "--return",
        "--command",
        &command_line,
        "/dev/null",
    ]);
    let (screen, _) = expect_code(&output(&mut command).await, 0);
    let progress = screen.find("loading skills: ").expect("a progress line");
    assert!(screen[progress..].contains("/7"), "{screen:?}");
    let cleared = screen.rfind("\x1b[2K").expect("the line cleared");
    let listing = screen.find("NAME").expect("the listing");
    assert!(progress < cleared && cleared < listing, "{screen:?}");

    // Without a terminal: nothing.
    let out = output(&mut work.host_command(&["skills"], &bundled())).await;
    let (_, stderr) = expect_code(&out, 0);
    assert!(stderr.is_empty(), "{stderr}");
}
