//! `skillhost run` and `skillhost skills`.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};

use skillhost::agent::{Agent, AgentConfig, AgentEvent, CallOutcome, RunOptions};
use skillhost::skills::SkillRegistry;

use super::agent::{Answerer, Input, follow};
use super::trace::Trace;

/// `--input`: the JSON text itself, `@FILE` for a file's, or `-` for
/// standard input's (none of which is JSON). Parsed before anything loads,
/// so a typo costs no wait.
pub fn skill_input(given: &str) -> Result<Value, String> {
    let (source, text) = if given == "-" {
        let text = std::io::read_to_string(std::io::stdin())
            .map_err(|error| format!("reading standard input: {error}"))?;
        ("standard input".to_owned(), text)
    } else if let Some(path) = given.strip_prefix('@') {
        let text =
            std::fs::read_to_string(path).map_err(|error| format!("reading {path}: {error}"))?;
        (path.to_owned(), text)
    } else {
        ("it".to_owned(), given.to_owned())
    };
    serde_json::from_str(&text).map_err(|error| format!("{source} is not valid JSON: {error}"))
}

/// `skillhost run`: the skill's deterministic steps, as the agent would
/// run them — with the config file's confirmation policy, each write that
/// needs approval answered by `answerer`, its tool context from `options` —
/// without a model: steps that hand over to the sub-agent end the command
/// with the note.
pub async fn run(
    skills: SkillRegistry,
    agent: AgentConfig,
    name: &str,
    input: Value,
    options: RunOptions,
    json: bool,
    answerer: &Answerer,
) -> anyhow::Result<ExitCode> {
    let snapshot = skills.snapshot();
    let Some(skill) = snapshot.get(name) else {
        anyhow::bail!("{}", snapshot.not_loaded(name));
    };
    if !skill.component.manifest().has_steps {
        anyhow::bail!(
            "skill `{name}` has no deterministic steps: its sub-agent runs it with a model; \
             ask the agent instead (`skillhost ask` or `skillhost chat`, with a model configured)"
        );
    }
    let agent = Agent::builder(Arc::new(skills)).config(agent).build()?;
    let started = Instant::now();
    let handle = agent.start_skill_with(name, input, options)?;
    let mut trace = Trace::default();
    let mut calls = Vec::new();
    let mut handover = None;
    let output = follow(&agent, handle, answerer, &mut Input::stdin(), |event| {
        match event {
            AgentEvent::ToolCalled { tool, outcome, .. } => {
                calls.push(json!({ "tool": tool, "error": outcome.error_text() }));
            }
            AgentEvent::SkillHandover { note, .. } => handover = Some(note.clone()),
            _ => {}
        }
        // The steps' calls and confirmations; not the agent's framing of
        // the skill call, which `run` makes itself. With --json, still what
        // a confirmation asks (on stderr): no one approves what they cannot
        // see.
        let shown = match event {
            AgentEvent::SkillStarted { .. } | AgentEvent::SkillFinished { .. } => false,
            AgentEvent::ConfirmationPending(_) | AgentEvent::ConfirmationResolved { .. } => true,
            _ => !json,
        };
        if shown {
            trace.print(event);
        }
    })
    .await;
    let elapsed = started.elapsed();
    // Without a model the sub-agent cannot take over: the run then fails,
    // and the note is what `run` has to show.
    let ended = match (output, handover) {
        (_, Some(note)) => Ended::Handover(note),
        (Ok(output), None) => match output.outcome {
            CallOutcome::Done { result } => Ended::Done(result),
            failed => Ended::Failed(failed.error_text().unwrap_or_default()),
        },
        (Err(error), None) => return Err(error),
    };
    let code = ended.exit_code();
    if json {
        let kind = ended.kind();
        let result = match ended {
            Ended::Done(result) => result,
            Ended::Handover(text) | Ended::Failed(text) => Value::String(text),
        };
        let report = json!({
            "skill": name,
            "outcome": kind,
            "result": result,
            "tool_calls": calls,
            "elapsed_us": u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX),
        });
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(code);
    }
    match ended {
        Ended::Done(result) => println!("{}", serde_json::to_string_pretty(&result)?),
        Ended::Handover(note) => {
            eprintln!("the steps handed over to the LLM-driven path, which `run` does not start:");
            println!("{note}");
        }
        Ended::Failed(error) => eprintln!("error: {error}"),
    }
    Ok(code)
}

/// How a `run` ended: its output, and its exit code — the same with
/// `--json` or without.
enum Ended {
    /// The steps' result: exit 0.
    Done(Value),
    /// The steps handed over to the sub-agent, with a note: exit 2.
    Handover(String),
    /// The skill failed, saying why: exit 1.
    Failed(String),
}

impl Ended {
    fn kind(&self) -> &'static str {
        match self {
            Self::Done(_) => "done",
            Self::Handover(_) => "handover",
            Self::Failed(_) => "failed",
        }
    }

    fn exit_code(&self) -> ExitCode {
        match self {
            Self::Done(_) => ExitCode::SUCCESS,
            Self::Handover(_) => ExitCode::from(2),
            Self::Failed(_) => ExitCode::FAILURE,
        }
    }
}

pub fn list(skills: &SkillRegistry, json: bool) -> anyhow::Result<ExitCode> {
    let snapshot = skills.snapshot();
    if json {
        let loaded: Vec<_> = snapshot
            .skills()
            .map(|skill| {
                let manifest = skill.component.manifest();
                json!({
                    "name": manifest.name,
                    "version": manifest.version.to_string(),
                    "digest": skill.component.digest(),
                    "path": skill.path,
                    "tools": manifest.tools,
                    "unlocks": manifest.unlocks,
                    "steps": manifest.has_steps,
                    "signer": skill.signer,
                    "limits": skill.component.limits(),
                })
            })
            .collect();
        let failed: Vec<_> = snapshot.failures().collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({ "skills": loaded, "failed": failed }))?
        );
        return Ok(ExitCode::SUCCESS);
    }
    let mut rows = vec![
        [
            "NAME", "VERSION", "DIGEST", "SIGNER", "STEPS", "TOOLS", "UNLOCKS",
        ]
        .map(String::from),
    ];
    for skill in snapshot.skills() {
        let manifest = skill.component.manifest();
        rows.push([
            manifest.name.to_string(),
            manifest.version.to_string(),
            // `sha256:` and the first 12 hex digits, as container tools shorten ids.
            skill.component.digest()[..19].to_owned(),
            skill
                .signer
                .map_or_else(|| "unverified".to_owned(), |key| key.to_string()),
            if manifest.has_steps { "yes" } else { "no" }.to_owned(),
            manifest.tools.join(","),
            manifest.unlocks.join(","),
        ]);
    }
    print_table(&rows);
    // Every skill runs under the [sandbox] limits unless the config file
    // gives it its own: only those are worth a line.
    let shared = skills.runtime().config().limits;
    for skill in snapshot.skills() {
        let limits = skill.component.limits();
        if limits != shared {
            println!("{} has limits of its own: {limits}", skill.component.name());
        }
    }
    for failure in snapshot.failures() {
        println!("FAILED {}: {}", failure.path.display(), failure.reason);
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints rows as left-aligned columns, each as wide as its widest cell.
fn print_table<const N: usize>(rows: &[[String; N]]) {
    let mut widths = [0; N];
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        println!("{}", line.join("  ").trim_end());
    }
}
