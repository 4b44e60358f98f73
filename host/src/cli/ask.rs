//! `skillhost ask`: the main agent, once, from the terminal.
//!
//! The trace (rounds, calls — inside skills too —, confirmations) goes to
//! stderr and the answer to stdout, so `skillhost ask ... --yes > answer.txt`
//! keeps only the answer. With `--json` every event is a JSON line on
//! stdout instead.

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader, Lines, Stdin};

use skillhost::agent::catalog::DisclosureConfig;
use skillhost::agent::llm::{LlmClient, LlmConfig};
use skillhost::agent::{
    Agent, AgentConfig, AgentEvent, CallOutcome, Caller, Declined, PendingConfirmation, Resolution,
    SkillPath,
};

use super::{HostArgs, LoadedHost};

/// Characters of a result or argument list shown on one trace line.
const SHOWN_CHARS: usize = 160;

/// `skillhost ask`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "The LLM is any OpenAI-compatible chat-completions server: set \
    SKILLHOST_MODEL (the model name), OPENAI_BASE_URL (the API root, default \
    https://api.openai.com/v1; e.g. http://localhost:11434/v1 for Ollama) and OPENAI_API_KEY \
    (when the server needs a key).\n\nA write tool waits for your approval: the run prints the \
    confirmation's id, tool, arguments and summary and asks y/n on the terminal. --yes or --no \
    answer every confirmation without asking, for scripts."
)]
pub struct AskArgs {
    /// What to ask, e.g. "my order 88231 robot vacuum is broken, refund it".
    message: String,
    /// Approve every pending confirmation without asking.
    #[arg(long, conflicts_with = "no")]
    yes: bool,
    /// Reject every pending confirmation without asking; the model is told.
    #[arg(long)]
    no: bool,
    /// Print the run's events as JSON lines on stdout (the confirmation
    /// prompt, if any, still goes to stderr).
    #[arg(long)]
    json: bool,
    /// Tools the main agent keeps seeing even when skills absorb them,
    /// comma-separated (article 003: queryOrder,searchKnowledge,getCurrentTime).
    #[arg(
        long,
        value_name = "TOOL",
        env = "SKILLHOST_KEEP_PUBLIC",
        value_delimiter = ','
    )]
    keep_public: Vec<String>,
    #[command(flatten)]
    host: HostArgs,
}

/// How pending confirmations are answered.
enum Answerer {
    Approve,
    Reject,
    /// Ask on the terminal, reading answers from stdin.
    Prompt(Lines<BufReader<Stdin>>),
}

impl Answerer {
    /// Answers `pending`: `true` approves.
    async fn decide(&mut self, pending: &PendingConfirmation) -> anyhow::Result<bool> {
        let lines = match self {
            Self::Approve => {
                eprintln!("      approved (--yes)");
                return Ok(true);
            }
            Self::Reject => {
                eprintln!("      rejected (--no)");
                return Ok(false);
            }
            Self::Prompt(lines) => lines,
        };
        loop {
            eprint!("      approve {}? [y/n] ", pending.tool);
            let Some(line) = lines.next_line().await.context("reading the answer")? else {
                eprintln!();
                eprintln!("      no answer (end of input): rejected");
                return Ok(false);
            };
            if !std::io::stdin().is_terminal() {
                // Piped answers are not echoed by a terminal: show them.
                eprintln!("{line}");
            }
            match line.trim().to_ascii_lowercase().as_str() {
                "y" | "yes" => return Ok(true),
                "n" | "no" => return Ok(false),
                _ => eprintln!("      answer y or n"),
            }
        }
    }
}

pub async fn ask(args: &AskArgs) -> anyhow::Result<ExitCode> {
    // Checked before loading skills: without a model there is nothing to do.
    let llm = LlmClient::new(LlmConfig::from_env()?)?;
    let loaded = LoadedHost::load(&args.host).await?;
    let config = AgentConfig {
        disclosure: DisclosureConfig {
            keep_public: args.keep_public.iter().cloned().collect(),
            ..DisclosureConfig::default()
        },
        ..AgentConfig::default()
    };
    let agent = Agent::builder(Arc::new(loaded.skills))
        .llm(llm)
        .config(config)
        .build();
    let mut answerer = if args.yes {
        Answerer::Approve
    } else if args.no {
        Answerer::Reject
    } else {
        Answerer::Prompt(BufReader::new(tokio::io::stdin()).lines())
    };
    let mut run = agent.ask(&args.message)?;
    while let Some(event) = run.events.recv().await {
        if args.json {
            println!("{}", serde_json::to_string(&event)?);
        } else {
            print_event(&event);
        }
        if let AgentEvent::ConfirmationPending(pending) = &event {
            let id = pending.id.as_str();
            // A refused answer means the confirmation is gone (expired); the
            // run reports that itself.
            let _ = if answerer.decide(pending).await? {
                agent.confirmations().approve(id).map(drop)
            } else {
                agent.confirmations().reject(id, None).map(drop)
            };
        }
    }
    let output = run.result().await?;
    let usage = output.stats.usage;
    if args.json {
        let done = json!({
            "event": "finished",
            "rounds": output.rounds,
            "llm_calls": output.stats.llm_calls,
            "usage": usage,
        });
        println!("{done}");
    } else {
        eprintln!(
            "done: {} main round(s), {} LLM call(s), {} tokens ({} prompt, {} completion)",
            output.rounds,
            output.stats.llm_calls,
            usage.total_tokens,
            usage.prompt_tokens,
            usage.completion_tokens
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints one event of the trace: the answer to stdout, the rest to stderr.
/// A skill's events are indented under the call that started it.
fn print_event(event: &AgentEvent) {
    match event {
        AgentEvent::RoundStarted {
            caller,
            round,
            functions,
            tokens,
        } => eprintln!(
            "{}round {round} ({caller}): {} function(s) offered, ~{tokens} tokens: {}",
            indent(caller),
            functions.len(),
            functions.join(", ")
        ),
        AgentEvent::ToolCalled {
            caller,
            tool,
            arguments,
            outcome,
        } => eprintln!(
            "{}  {caller} called {tool}({}) -> {}",
            indent(caller),
            clip(&compact(arguments)),
            describe(outcome)
        ),
        AgentEvent::SkillStarted { skill, input, path } => {
            let how = match path {
                SkillPath::Steps => "its deterministic steps",
                SkillPath::Llm => "its scoped sub-agent",
            };
            eprintln!(
                "  main agent called skill {skill}({}): runs {how}",
                clip(&compact(input))
            );
        }
        AgentEvent::SkillHandover { skill, note } => eprintln!(
            "      skill {skill}: the steps handed over to the sub-agent: {}",
            clip(note)
        ),
        AgentEvent::SkillFinished { skill, outcome } => {
            eprintln!("  skill {skill} -> {}", describe(outcome));
        }
        AgentEvent::ConfirmationPending(pending) => {
            let mut text = format!(
                "{}  confirmation {} pending: {} wants to run {}\n",
                indent(&pending.caller),
                pending.id,
                pending.caller,
                pending.tool
            );
            let pad = format!("{}      ", indent(&pending.caller));
            let _ = writeln!(text, "{pad}arguments: {}", compact(&pending.arguments));
            let _ = writeln!(text, "{pad}summary:   {}", pending.summary);
            let _ = write!(
                text,
                "{pad}expires:   {}",
                httpdate::fmt_http_date(pending.expires_at)
            );
            eprintln!("{text}");
        }
        AgentEvent::ConfirmationResolved {
            id,
            tool,
            resolution,
        } => {
            let how = match resolution {
                Resolution::Approved => "approved".to_owned(),
                Resolution::Declined(Declined::Rejected { .. }) => "rejected".to_owned(),
                Resolution::Declined(Declined::Expired { after }) => {
                    format!("expired after {after:?}")
                }
            };
            eprintln!("      confirmation {id} ({tool}): {how}");
        }
        AgentEvent::Compacted {
            caller,
            evicted_messages,
            revoked,
            tokens_before,
            tokens_after,
        } => {
            let revoked = if revoked.is_empty() {
                String::new()
            } else {
                let names: Vec<String> = revoked.iter().map(ToString::to_string).collect();
                format!("; unlocks revoked: {}", names.join(", "))
            };
            eprintln!(
                "{}compacted ({caller}): {evicted_messages} message(s) evicted, ~{tokens_before} -> ~{tokens_after} tokens{revoked}",
                indent(caller)
            );
        }
        // Not streamed here; the usage is summed at the end.
        AgentEvent::Usage { .. } | AgentEvent::TextDelta { .. } => {}
        AgentEvent::Answer { text } => {
            eprintln!("answer:");
            println!("{text}");
        }
    }
}

/// Skills' events sit under the main agent's call that ran them.
fn indent(caller: &Caller) -> &'static str {
    match caller {
        Caller::Main => "",
        Caller::Skill(_) => "    ",
    }
}

/// A call's outcome in a few words and the start of its result.
fn describe(outcome: &CallOutcome) -> String {
    let status = match outcome {
        CallOutcome::Done { .. } => "done",
        CallOutcome::Failed { .. } => "failed",
        CallOutcome::Refused { .. } => "refused",
        CallOutcome::Declined { .. } => "declined",
    };
    format!("{status}: {}", clip(&outcome.to_tool_content()))
}

fn compact(value: &Value) -> String {
    match value {
        Value::Object(_) | Value::Array(_) => value.to_string(),
        // Arguments that were not JSON arrive as their raw text.
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// `text` on one line, at most [`SHOWN_CHARS`] characters.
fn clip(text: &str) -> String {
    let line = text.replace('\n', " ");
    match line.char_indices().nth(SHOWN_CHARS) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line,
    }
}
