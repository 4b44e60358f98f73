//! How a run of the main agent is shown on the terminal (`ask`, `chat`):
//! each round with the functions offered, each call (inside skills too)
//! with its outcome, each confirmation; the answer on stdout, the rest on
//! stderr.

use std::fmt::Write as _;

use serde_json::Value;

use skillhost::agent::{
    AgentEvent, CallOutcome, Caller, Declined, Resolution, RunOutput, SkillPath,
};

/// Characters of a result or argument list shown on one trace line.
const SHOWN_CHARS: usize = 160;

/// Prints one event of the trace: the answer to stdout, the rest to stderr.
/// A skill's events are indented under the call that started it.
pub fn print_event(event: &AgentEvent) {
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

/// The run's totals, on stderr.
pub fn print_summary(output: &RunOutput) {
    let usage = output.stats.usage;
    eprintln!(
        "done: {} main round(s), {} LLM call(s), {} tokens ({} prompt, {} completion)",
        output.rounds,
        output.stats.llm_calls,
        usage.total_tokens,
        usage.prompt_tokens,
        usage.completion_tokens
    );
}
