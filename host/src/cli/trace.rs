//! How a run of the main agent is shown on the terminal (`ask`, `chat`):
//! each round with the functions offered, each call (inside skills too)
//! with its outcome, each confirmation; the answer on stdout, the rest on
//! stderr.

use std::collections::HashMap;
use std::fmt::Write as _;

use serde_json::Value;

use skillhost::agent::{
    AgentEvent, CallOutcome, Caller, Declined, Resolution, RunOutput, SkillPath,
};
use skillhost::text;

/// Characters of a result or argument list shown on one trace line.
const SHOWN_CHARS: usize = 160;

/// Prints the events of one or more runs (a `chat` session's turns).
#[derive(Default)]
pub struct Trace {
    /// The functions each caller was offered in its latest round: a later
    /// round shows only what changed, so the list is read once.
    offered: HashMap<Caller, Vec<String>>,
}

impl Trace {
    /// Prints one event: the answer to stdout, the rest to stderr. A
    /// skill's events are indented under the call that started it.
    pub fn print(&mut self, event: &AgentEvent) {
        match event {
            AgentEvent::RoundStarted {
                caller,
                round,
                functions,
                tokens,
            } => {
                let previous = self.offered.insert(caller.clone(), functions.clone());
                eprintln!(
                    "{}round {round} ({caller}): {} function(s) offered, ~{tokens} tokens{}",
                    indent(caller),
                    functions.len(),
                    offered_change(previous.as_deref(), functions)
                );
            }
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
                    Resolution::Declined(Declined::Expired { after }) => {
                        format!("expired after {after:?}")
                    }
                    other => other.decision().to_owned(),
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
            // An event this trace has no words for yet, as the JSON of `--json`.
            other => {
                let json = serde_json::to_string(other).unwrap_or_default();
                eprintln!("event: {}", clip(&json));
            }
        }
    }
}

/// The functions of a round: all of them the first time, then what was
/// added (`+`) and taken away (`-`) since the caller's previous round.
fn offered_change(previous: Option<&[String]>, functions: &[String]) -> String {
    let Some(previous) = previous else {
        return format!(": {}", functions.join(", "));
    };
    let added: Vec<&str> = functions
        .iter()
        .filter(|name| !previous.contains(name))
        .map(String::as_str)
        .collect();
    let removed: Vec<&str> = previous
        .iter()
        .filter(|name| !functions.contains(name))
        .map(String::as_str)
        .collect();
    let mut change = Vec::new();
    if !added.is_empty() {
        change.push(format!("+{}", added.join(", +")));
    }
    if !removed.is_empty() {
        change.push(format!("-{}", removed.join(", -")));
    }
    if change.is_empty() {
        " (unchanged)".to_owned()
    } else {
        format!(": {}", change.join(", "))
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
    format!("{}: {}", outcome.status(), clip(&outcome.to_tool_content()))
}

fn compact(value: &Value) -> String {
    match value {
        Value::Object(_) | Value::Array(_) => value.to_string(),
        // Arguments that were not JSON arrive as their raw text.
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// `text` on one line, at most [`SHOWN_CHARS`] characters, its other
/// control characters escaped: what a model or a tool said cannot move the
/// terminal's cursor or forge a line of the trace.
fn clip(text: &str) -> String {
    let line = text.replace('\n', " ");
    let line = text::escaped(&line, text::OUTSIDE_TEXT_BYTES);
    text::clip(&line, SHOWN_CHARS)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn names(names: &[&str]) -> Vec<String> {
        names.iter().map(|name| (*name).to_owned()).collect()
    }

    #[test]
    fn a_round_lists_its_functions_once_then_what_changed() {
        let first = names(&["queryOrder", "load_skill"]);
        assert_eq!(offered_change(None, &first), ": queryOrder, load_skill");
        assert_eq!(offered_change(Some(&first), &first), " (unchanged)");
        let unlocked = names(&["queryOrder", "cancel_order", "change_address"]);
        assert_eq!(
            offered_change(Some(&first), &unlocked),
            ": +cancel_order, +change_address, -load_skill"
        );
    }
}
