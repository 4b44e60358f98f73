//! `skillhost mcp`: the loaded skills as the tools of an MCP server on
//! standard input and output, so that an MCP client (an IDE's agent, a
//! desktop assistant) runs signed skills in the sandbox; the tools and
//! results are those of `skillhost::embed::mcp`, as at the gateway's
//! `/mcp`. Skill files and the trust store are watched (and read again at
//! SIGHUP, as `serve` does): the client is told
//! (`notifications/tools/list_changed`) when the list changes.
//!
//! Standard output carries the protocol only; logs and progress go to
//! standard error. A write the confirmation policy holds for approval is
//! approved with `--yes`; otherwise the client is asked to ask its user
//! (`elicitation/create`) when it says it can, and the write is rejected
//! when it cannot, or gives no answer before the confirmation expires.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use anyhow::Context;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use skillhost::agent::{
    AgentError, AgentEvent, CallOutcome, Decision, PendingConfirmation, RunHandle, RunOptions,
    SkillOutput,
};
use skillhost::embed::SkillHost;
use skillhost::embed::mcp::{self, Asked, INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, ToolsNews};
use skillhost::scope::SkillScope;
use skillhost::skills::SkillSnapshot;

use super::hangup::FollowedConfig;
use super::{HostArgs, console};

#[derive(Debug, clap::Args)]
pub struct McpArgs {
    /// Approve the writes the confirmation policy holds for approval;
    /// without it the client is asked to ask its user, when it can, and
    /// they are rejected otherwise (the skill is told).
    #[arg(long)]
    yes: bool,
    /// Do not watch the skills directory and the trust store.
    #[arg(long)]
    no_watch: bool,
    /// Serve only the skills these patterns name, comma-separated (`*`
    /// stands for any run of characters: `inquire*,processRefund`); the
    /// others are neither listed nor run [default: every skill loaded].
    #[arg(long, value_name = "PATTERNS", value_delimiter = ',')]
    only_skills: Option<Vec<String>>,
    #[command(flatten)]
    pub(super) host: HostArgs,
}

pub async fn mcp(args: &McpArgs) -> anyhow::Result<ExitCode> {
    let blank = |pattern: &String| pattern.trim().is_empty();
    if args.only_skills.iter().flatten().any(blank) {
        anyhow::bail!(
            "--only-skills: a skill name is blank (`*` stands for any run of characters: `order_*`)"
        );
    }
    let scope = SkillScope::of(args.only_skills.clone());
    let file = args.host.config_file()?;
    let settings = super::HostSettings::read(&args.host, &file, file.agent_config(None))?;
    super::serve::report_trust(&settings.policy);
    let super::Started {
        host,
        trust,
        trust_watch: _trust_watch,
    } = settings
        .start(&args.host, &file, !args.no_watch, None)
        .await?;
    // `[server]` is `serve`'s alone.
    let config =
        (args.host.config.clone()).map(|path| FollowedConfig::new(path, &file, None, &["server"]));
    super::hangup::reload_on_hangup(host.clone(), trust, config, |_| {})
        .context("listening for SIGHUP")?;
    super::report_skills(&host, !args.no_watch, &file);
    match host.llm() {
        Ok(llm) => console::say(&format!("LLM: {}", llm.config().model)),
        Err(why) => console::say(&format!("no LLM: skills without steps fail ({why})")),
    }
    say_what_is_served(&host, &scope);
    let (out, writer) = spawn_writer();
    let server = Server {
        host,
        approve: args.yes,
        scope,
        out,
        client: Arc::default(),
    };
    server.serve().await?;
    // The last answers are written before the process ends.
    drop(server);
    writer.await.context("writing standard output")?;
    Ok(ExitCode::SUCCESS)
}

/// Says which skills are served; warns when `scope` lets none of those
/// loaded through (a pattern misspelt): the client then sees no tool until
/// one that fits loads.
fn say_what_is_served(host: &SkillHost, scope: &SkillScope) {
    let Some(patterns) = scope.patterns() else {
        console::say("serving the skills as MCP tools on standard input and output");
        return;
    };
    let snapshot = host.snapshot();
    let served = served(&snapshot, scope).len();
    if served == 0 {
        console::warn(&format!(
            "--only-skills {} matches none of the {} skill(s) loaded: the client sees no tool until \
             a skill that matches loads",
            patterns.join(","),
            snapshot.len()
        ));
    }
    console::say(&format!(
        "serving {served} of the {} skill(s) loaded (--only-skills {}) as MCP tools on standard input \
         and output",
        snapshot.len(),
        patterns.join(",")
    ));
}

/// The names of the skills of `snapshot` that `scope` lets through.
fn served<'a>(snapshot: &'a SkillSnapshot, scope: &SkillScope) -> Vec<&'a str> {
    let names = snapshot
        .skills()
        .map(|skill| skill.component.name().as_str());
    names.filter(|name| scope.allows(name)).collect()
}

/// The messages to write, one a line, in order.
type Outbox = mpsc::UnboundedSender<Value>;

/// Writes each message given to it on standard output, one a line, until
/// every sender is gone.
fn spawn_writer() -> (Outbox, tokio::task::JoinHandle<()>) {
    let (out, mut messages) = mpsc::unbounded_channel::<Value>();
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(message) = messages.recv().await {
            let mut line = message.to_string().into_bytes();
            line.push(b'\n');
            if stdout.write_all(&line).await.is_err() || stdout.flush().await.is_err() {
                // The client is gone; the reader ends at its input's end.
                return;
            }
        }
    });
    (out, writer)
}

#[derive(Clone)]
struct Server {
    host: SkillHost,
    approve: bool,
    /// The skills served (`--only-skills`).
    scope: SkillScope,
    out: Outbox,
    client: Arc<Client>,
}

/// What the server knows of its client, and asks it.
#[derive(Default)]
struct Client {
    /// Whether it can ask its user (`elicitation` among its capabilities).
    elicits: AtomicBool,
    /// The server's requests it has not answered yet.
    asked: Asked,
}

impl Server {
    /// Answers each message on standard input until it ends; then waits
    /// for the calls still running.
    async fn serve(&self) -> anyhow::Result<()> {
        let mut stdin = BufReader::new(tokio::io::stdin());
        let mut line = Vec::new();
        let mut calls = tokio::task::JoinSet::new();
        let mut watching = None;
        loop {
            line.clear();
            let read = stdin.read_until(b'\n', &mut line).await;
            if read.context("reading standard input")? == 0 {
                break;
            }
            if line.trim_ascii().is_empty() {
                continue;
            }
            // Bytes, not text: a line that is not UTF-8 is an error answered,
            // not the end of the server.
            let message: Value = match serde_json::from_slice(&line) {
                Ok(message) => message,
                Err(error) => {
                    self.send_error(&Value::Null, PARSE_ERROR, &format!("not JSON: {error}"));
                    continue;
                }
            };
            let id = message.get("id").cloned();
            let Some(method) = message.get("method").and_then(Value::as_str) else {
                match id.as_ref().and_then(Value::as_u64) {
                    Some(id) => {
                        self.client.asked.answered(id, message);
                    }
                    None => self.send_error(&Value::Null, INVALID_REQUEST, "no method"),
                }
                continue;
            };
            let params = message.get("params").cloned().unwrap_or(json!({}));
            match (method, id) {
                ("notifications/initialized", None) if watching.is_none() => {
                    watching = Some(self.tell_of_reloads());
                }
                (_, None) => {}
                ("tools/call", Some(id)) => {
                    let server = self.clone();
                    calls.spawn(async move { server.answer_call(id, params).await });
                }
                (method, Some(id)) => {
                    if method == "initialize" {
                        let elicits = params.pointer("/capabilities/elicitation").is_some();
                        self.client.elicits.store(elicits, Ordering::Relaxed);
                    }
                    self.send(mcp::answer_request(
                        &self.host,
                        &self.scope,
                        &id,
                        method,
                        &params,
                        true,
                    ));
                }
            }
        }
        // The client is gone: nobody will answer what was asked.
        self.client.elicits.store(false, Ordering::Relaxed);
        self.client.asked.forget_all();
        calls.join_all().await;
        if let Some(watching) = watching {
            watching.abort();
            // Its outbox goes with it, so that the writer can end.
            let _ = watching.await;
        }
        Ok(())
    }

    /// Runs the skill a `tools/call` names and sends the answer.
    async fn answer_call(&self, id: Value, params: Value) {
        let name = params.get("name").and_then(Value::as_str).unwrap_or("");
        let arguments = params.get("arguments").cloned().unwrap_or(json!({}));
        let options =
            mcp::in_callers_trace(RunOptions::default().skills(self.scope.clone()), &params);
        let outcome = match self.host.invoke_with(name, arguments, options) {
            Ok(run) => self.follow(run).await,
            Err(AgentError::UnknownSkill(_) | AgentError::SkillNotPermitted { .. }) => {
                return self.send_error(&id, INVALID_PARAMS, &self.not_served(name));
            }
            Err(error) => Err(error),
        };
        let result = match outcome {
            Ok(outcome) => mcp::call_result(outcome),
            Err(error) => mcp::error_result(&error.to_string()),
        };
        self.send(mcp::answer(&id, result));
    }

    /// Why `name` is not one of the tools served: no skill of that name is
    /// loaded, or `--only-skills` leaves it out. Only the skills served are
    /// named.
    fn not_served(&self, name: &str) -> String {
        let snapshot = self.host.snapshot();
        if self.scope.is_all() {
            return snapshot.not_loaded(name);
        }
        format!(
            "`{name}` is not one of this server's tools (its tools: {})",
            served(&snapshot, &self.scope).join(", ")
        )
    }

    /// Follows a run to its end, answering its confirmations.
    async fn follow(&self, mut run: RunHandle<SkillOutput>) -> Result<CallOutcome, AgentError> {
        while let Some(event) = run.events.recv().await {
            if let AgentEvent::ConfirmationPending(pending) = event {
                let decision = self.decide(&pending).await;
                // A refused answer means it expired; the run says so.
                let _ = self.host.confirmations().answer_on_the_spot(
                    pending.id.as_str(),
                    decision,
                    None,
                );
            }
        }
        Ok(run.result().await?.outcome)
    }

    /// Approves with --yes; else asks the client's user, when it can.
    async fn decide(&self, pending: &PendingConfirmation) -> Decision {
        if self.approve {
            return Decision::Approve;
        }
        if pending.separate_approver || pending.approvers.is_some() {
            // Whoever the client's user is, this server cannot say: asking
            // would only lead to a refusal.
            return Decision::Reject(Some(
                "the confirmation policy names who may approve this write, and an MCP client's \
                 user cannot be named"
                    .into(),
            ));
        }
        if !self.client.elicits.load(Ordering::Relaxed) {
            return Decision::Reject(Some(
                "writes are rejected: this MCP server was started without --yes and its client \
                 cannot ask its user"
                    .into(),
            ));
        }
        let wait = pending
            .expires_at
            .duration_since(SystemTime::now())
            .unwrap_or_default();
        let (id, answer) = self.client.asked.ask();
        self.send(mcp::approval_question(id, pending));
        let Ok(Ok(answer)) = tokio::time::timeout(wait, answer).await else {
            self.client.asked.forget(id);
            return Decision::Reject(Some("the client's user gave no answer in time".into()));
        };
        mcp::approval_decision(&answer)
    }

    /// Tells the client whenever the skills change, from now on. Live
    /// events only: a client on standard streams never comes back for
    /// those it missed, so the host keeps none for it.
    fn tell_of_reloads(&self) -> tokio::task::JoinHandle<()> {
        let mut events = self.host.subscribe();
        let out = self.out.clone();
        tokio::spawn(async move {
            loop {
                match ToolsNews::of_live(&events.recv().await) {
                    ToolsNews::Changed => {
                        let _ = out.send(mcp::list_changed());
                    }
                    ToolsNews::Same => {}
                    ToolsNews::Ended => return,
                }
            }
        })
    }

    fn send(&self, message: Value) {
        // Fails only once the writer has stopped: the client is gone.
        let _ = self.out.send(message);
    }

    fn send_error(&self, id: &Value, code: i64, message: &str) {
        self.send(mcp::error_answer(id, code, message));
    }
}
