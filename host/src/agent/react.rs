//! The ReAct loop shared by the main agent and skills' sub-agents.
//!
//! Each round: fit the transcript to the context budget, compute the
//! function list (for the main agent, from the catalog and the skills loaded
//! in the transcript — never carried over from the previous round), call the
//! LLM, then execute the calls of its answer in order (at most
//! `max_calls_per_answer`), appending one result message per call. A
//! round whose answer has no calls ends the loop; the last round allowed
//! asks for such an answer, and its calls, if any, are not executed.
//!
//! Nothing the model writes makes the host fail: unparsable or invalid
//! arguments, unknown names, masked, absorbed and out-of-scope functions
//! are refused and reported back as the call's result, never executed.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use serde_json::Value;
use tracing::{Instrument, Span, field};

use super::AgentError;
use super::catalog::{Callable, Functions, Refusal};
use super::events::{AgentEvent, CallOutcome, Caller};
use super::llm::{ChatRequest, FinishReason, Message, ToolCall, ToolChoice};
use super::run::{Ask, RunContext};
use super::skill;
use super::tokens;
use super::transcript::{Transcript, load_result};
use crate::runtime::SkillComponent;
use crate::skills::SkillName;
use crate::skills::manifest::LOAD_SKILL;

/// What a loop may call, and how its calls run.
pub(super) trait Scope: Send + Sync {
    /// This round's function list.
    fn functions(&self, run: &RunContext, transcript: &Transcript) -> Functions;

    /// Executes one call whose arguments parsed, reports it, and returns
    /// the content of its result message. `loaded` are the skills loaded
    /// when the round's function list was computed: a call is checked
    /// against what its round offered, not against a `load_skill` earlier
    /// in the same answer, whose instructions the model has not read yet.
    async fn execute(
        &self,
        run: &Arc<RunContext>,
        caller: &Caller,
        call: Call,
        loaded: &BTreeSet<SkillName>,
    ) -> Result<String, AgentError>;
}

/// A call whose arguments parsed.
pub(super) struct Call {
    pub(super) name: String,
    pub(super) arguments: Value,
}

impl Call {
    /// Reports the call as refused (not executed) and returns what the
    /// model is told.
    fn refuse(self, run: &RunContext, caller: &Caller, reason: String) -> String {
        // Not the reason: it may quote the arguments.
        tracing::info!(
            function = self.name.as_str(),
            caller = %caller.tool_caller(),
            refused = true,
            "function call refused; the model is told why"
        );
        let outcome = CallOutcome::Refused { reason };
        let content = outcome.to_tool_content();
        run.report(caller, &self.name, self.arguments, outcome);
        content
    }
}

/// The main agent: the catalog's functions, masked per round from the
/// transcript; tools, skills and `load_skill`.
pub(super) struct MainScope;

impl Scope for MainScope {
    fn functions(&self, run: &RunContext, transcript: &Transcript) -> Functions {
        run.catalog.functions(&transcript.loaded_skills())
    }

    async fn execute(
        &self,
        run: &Arc<RunContext>,
        caller: &Caller,
        call: Call,
        loaded: &BTreeSet<SkillName>,
    ) -> Result<String, AgentError> {
        let outcome = match run.catalog.resolve(&call.name, loaded) {
            Err(refusal) => return Ok(call.refuse(run, caller, refusal.to_string())),
            Ok(Callable::Tool(tool)) => {
                let result = run
                    .call_tool_reported(caller, &tool, call.arguments, Ask::Anew)
                    .await;
                CallOutcome::of_tool(&tool, &result)
            }
            Ok(Callable::LoadSkill) => {
                let outcome = load_skill(run, &call.arguments);
                run.report(caller, &call.name, call.arguments, outcome.clone());
                outcome
            }
            Ok(Callable::Skill(skill)) => {
                // The catalog was built from this snapshot and scope, so the
                // skill is there; refusing keeps the host panic-free.
                let Some(loaded) = run.skill(skill.as_str()) else {
                    let refusal = Refusal::Unknown(call.name.clone());
                    return Ok(call.refuse(run, caller, refusal.to_string()));
                };
                let component = &loaded.component;
                if let Err(error) = component.validate_input(&call.arguments) {
                    return Ok(call.refuse(run, caller, error.to_string()));
                }
                // Calls of one answer run one after another, so whatever
                // was declined from here on was declined inside this skill.
                let mark = run.declined_count();
                let outcome = skill::invoke(run, loaded, call.arguments).await?;
                return Ok(skill::with_declines_noted(
                    outcome.to_tool_content(),
                    &run.declined_since(mark),
                ));
            }
        };
        Ok(outcome.to_tool_content())
    }
}

/// A skill's sub-agent: exactly the skill's declared tools.
pub(super) struct SkillScope<'a> {
    pub(super) skill: &'a SkillComponent,
    pub(super) functions: Functions,
}

impl Scope for SkillScope<'_> {
    fn functions(&self, _run: &RunContext, _transcript: &Transcript) -> Functions {
        self.functions.clone()
    }

    async fn execute(
        &self,
        run: &Arc<RunContext>,
        caller: &Caller,
        call: Call,
        _loaded: &BTreeSet<SkillName>,
    ) -> Result<String, AgentError> {
        if !self.functions.contains(&call.name) {
            let reason = format!(
                "`{}` is not available to skill {}: its tools are {}",
                call.name,
                self.skill.name(),
                self.skill.manifest().tools.join(", ")
            );
            return Ok(call.refuse(run, caller, reason));
        }
        let result = run
            .call_tool_reported(caller, &call.name, call.arguments, Ask::Anew)
            .await;
        Ok(CallOutcome::of_tool(&call.name, &result).to_tool_content())
    }
}

/// One ReAct loop.
pub(super) struct Loop<'a, S> {
    pub(super) run: &'a Arc<RunContext>,
    pub(super) caller: Caller,
    pub(super) scope: S,
    pub(super) max_rounds: u32,
}

/// How a loop ended.
pub(super) struct LoopEnd {
    /// The model's final text.
    pub(super) answer: String,
    /// Why the final text ended: [`FinishReason::Length`] or
    /// [`FinishReason::ContentFilter`] say it is cut short or withheld.
    pub(super) finish_reason: FinishReason,
    /// Rounds taken.
    pub(super) rounds: u32,
}

impl<S: Scope> Loop<'_, S> {
    /// Runs rounds until the model answers without calls.
    pub(super) async fn run(&self, transcript: &mut Transcript) -> Result<LoopEnd, AgentError> {
        let mut repeats = RepeatGuard::new(self.run.agent.config().max_identical_calls);
        for round in 1..=self.max_rounds {
            let span = tracing::info_span!(
                "agent_round",
                caller = %self.caller.tool_caller(),
                round,
                functions = field::Empty,
                masked = field::Empty,
            );
            let end = self
                .round(round, transcript, &mut repeats, &span)
                .instrument(span.clone())
                .await?;
            if let Some(end) = end {
                return Ok(end);
            }
        }
        Err(AgentError::RoundLimit {
            caller: self.caller.clone(),
            rounds: self.max_rounds,
        })
    }

    /// One round: the LLM call, then its calls in order. Returns the
    /// loop's end when the model made no calls.
    async fn round(
        &self,
        round: u32,
        transcript: &mut Transcript,
        repeats: &mut RepeatGuard,
        span: &Span,
    ) -> Result<Option<LoopEnd>, AgentError> {
        let functions = self.prepare_round(transcript, repeats);
        span.record("functions", functions.definitions.len());
        span.record("masked", functions.masked);
        self.run.emit(AgentEvent::RoundStarted {
            caller: self.caller.clone(),
            round,
            functions: functions.names(),
            tokens: transcript.tokens() + functions.tokens,
        });
        // The last round must answer: calls would be made with no round
        // left to read their results.
        let last = round == self.max_rounds;
        let choice = if last {
            ToolChoice::TextOnly
        } else {
            ToolChoice::Auto
        };
        let request = ChatRequest::new(transcript.messages())
            .with_tools(functions.definitions)
            .with_tool_choice(choice);
        let response = self.run.chat(&self.caller, request).await?;
        let calls = response.message.tool_calls.clone();
        let text = response.message.content.clone();
        // Before this answer's calls: the skills its function list was
        // computed from (after any compaction).
        let loaded = transcript.loaded_skills();
        transcript.push(Message::from(response.message.replayable()));
        if calls.is_empty() {
            let finish_reason = response.finish_reason.unwrap_or(FinishReason::Stop);
            if matches!(
                finish_reason,
                FinishReason::Length | FinishReason::ContentFilter
            ) {
                tracing::warn!(
                    finish_reason = finish_reason.as_str(),
                    "the model's answer is cut short (the server's finish reason)"
                );
            }
            return Ok(Some(LoopEnd {
                answer: text.unwrap_or_default(),
                finish_reason,
                rounds: round,
            }));
        }
        if last {
            for call in &calls {
                let reason = format!(
                    "not executed: this was the last of {} rounds, which must answer in text",
                    self.max_rounds
                );
                self.refuse(call, reason);
            }
            return Err(AgentError::RoundLimit {
                caller: self.caller.clone(),
                rounds: self.max_rounds,
            });
        }
        let most = self.run.agent.config().max_calls_per_answer as usize;
        for (index, call) in calls.iter().enumerate() {
            let content = if index < most {
                self.execute(call, &loaded, repeats).await?
            } else {
                let reason = format!(
                    "not executed: at most {most} calls of one answer run; make it in your \
                     next answer if it is still needed"
                );
                self.refuse(call, reason)
            };
            // A skill's instructions are the host's, and its mark must stay
            // whole JSON: only what tools and skills return is cut.
            let content = if call.name() == LOAD_SKILL {
                content
            } else {
                fit_result(
                    content,
                    result_tokens(self.run.agent.config().context_budget),
                )
            };
            transcript.push(Message::tool(&call.id, call.name(), content));
        }
        Ok(None)
    }

    /// Refuses `call` unexecuted, whatever its arguments; returns what the
    /// model is told.
    fn refuse(&self, call: &ToolCall, reason: String) -> String {
        let arguments = call
            .parse_arguments()
            .unwrap_or_else(|_| Value::String(call.function.arguments.clone()));
        let refused = Call {
            name: call.name().to_owned(),
            arguments,
        };
        refused.refuse(self.run, &self.caller, reason)
    }

    /// Compacts the transcript if it is over budget, and returns this
    /// round's function list (recomputed after compaction, which may have
    /// revoked unlocks). The evicted calls stop counting as made: their
    /// results are gone from the model's view.
    fn prepare_round(&self, transcript: &mut Transcript, repeats: &mut RepeatGuard) -> Functions {
        let functions = self.scope.functions(self.run, transcript);
        let budget = self.run.agent.config().context_budget;
        let Some(compaction) = transcript.compact(budget, functions.tokens) else {
            return functions;
        };
        for (name, arguments) in &compaction.evicted_calls {
            repeats.forget(name, arguments);
        }
        self.run.emit(AgentEvent::Compacted {
            caller: self.caller.clone(),
            evicted_messages: compaction.evicted_messages,
            revoked: compaction.revoked,
            tokens_before: compaction.tokens_before,
            tokens_after: compaction.tokens_after,
        });
        self.scope.functions(self.run, transcript)
    }

    /// Checks one call's arguments and repetition, then executes it in the
    /// scope. Returns the content of its result message.
    async fn execute(
        &self,
        call: &ToolCall,
        loaded: &BTreeSet<SkillName>,
        repeats: &mut RepeatGuard,
    ) -> Result<String, AgentError> {
        let call = match call.parse_arguments() {
            Ok(arguments) => Call {
                name: call.name().to_owned(),
                arguments,
            },
            Err(reason) => return Ok(self.refuse(call, reason)),
        };
        match repeats.record(&call.name, &call.arguments) {
            Repeat::First => {}
            Repeat::Refuse { earlier } => {
                let reason = format!(
                    "you already called `{}` with these same arguments {earlier} times; the \
                     result will not change. Use the earlier result, or answer the user.",
                    call.name
                );
                return Ok(call.refuse(self.run, &self.caller, reason));
            }
            Repeat::Stop { times } => {
                return Err(AgentError::RepeatedCall {
                    caller: self.caller.clone(),
                    function: call.name,
                    times,
                });
            }
        }
        self.scope
            .execute(self.run, &self.caller, call, loaded)
            .await
    }
}

/// The most tokens of one call's result the transcript keeps: a quarter of
/// the context budget, and at least enough for an ordinary result (a
/// budget that small evicts everything else instead).
fn result_tokens(context_budget: usize) -> usize {
    const ORDINARY_RESULT_TOKENS: usize = 1_000;
    (context_budget / 4).max(ORDINARY_RESULT_TOKENS)
}

/// A call's result as the transcript keeps it: at most `max_tokens`
/// (estimated, as [`tokens::estimate`] counts them), then a note saying it
/// was cut. Compaction never evicts the latest turn, so one large result (a
/// search service's whole page) would otherwise put every later round over
/// what the model's server accepts.
fn fit_result(content: String, max_tokens: usize) -> String {
    if tokens::estimate(&content) <= max_tokens {
        return content;
    }
    // In quarter tokens: an ASCII character is one, any other four.
    let room = max_tokens.saturating_mul(4);
    let mut used = 0;
    let cut = content
        .char_indices()
        .find(|(_, c)| {
            used += if c.is_ascii() { 1 } else { 4 };
            used > room
        })
        .map_or(content.len(), |(at, _)| at);
    format!(
        "{}…[cut: the result has {} bytes, more than this conversation has room for; the \
         rest is not shown]",
        &content[..cut],
        content.len()
    )
}

/// `load_skill(skill)`: the skill's instructions, marked as a loaded skill
/// (see [`super::transcript`]).
fn load_skill(run: &RunContext, arguments: &Value) -> CallOutcome {
    let requested = arguments.get("skill").and_then(Value::as_str);
    if let Some(loaded) = requested.and_then(|name| run.skill(name)) {
        let manifest = loaded.component.manifest();
        return CallOutcome::Done {
            result: load_result(
                &manifest.name,
                &manifest.unlocks,
                loaded.component.instructions(),
            ),
        };
    }
    let known: Vec<&str> = run
        .usable_skills()
        .map(|skill| skill.component.name().as_str())
        .collect();
    CallOutcome::Refused {
        reason: format!(
            "no skill named `{}`; the skills are: {}",
            requested.unwrap_or_default(),
            known.join(", ")
        ),
    }
}

/// Whether a call repeats earlier ones.
enum Repeat {
    /// Fewer identical calls than the limit so far: execute it.
    First,
    /// The limit is reached: tell the model instead of executing.
    Refuse { earlier: u32 },
    /// The model ignored that: stop the loop.
    Stop { times: u32 },
}

/// Counts identical calls (same name, same arguments up to key order) in
/// one loop.
struct RepeatGuard {
    limit: u32,
    seen: HashMap<(String, String), u32>,
}

impl RepeatGuard {
    fn new(limit: u32) -> Self {
        Self {
            // Below 2, a first call would already count as a repeat.
            limit: limit.max(2),
            seen: HashMap::new(),
        }
    }

    fn record(&mut self, name: &str, arguments: &Value) -> Repeat {
        let times = self.seen.entry(Self::key(name, arguments)).or_default();
        *times += 1;
        match (*times).cmp(&self.limit) {
            std::cmp::Ordering::Less => Repeat::First,
            std::cmp::Ordering::Equal => Repeat::Refuse {
                earlier: *times - 1,
            },
            std::cmp::Ordering::Greater => Repeat::Stop { times: *times },
        }
    }

    /// Stops counting one earlier call of `name` with `arguments`, if one is
    /// counted. (One of the conversation's history was never counted; its
    /// eviction may then uncount one of this loop's: one more identical
    /// call goes through, which the round limit still bounds.)
    fn forget(&mut self, name: &str, arguments: &Value) {
        let key = Self::key(name, arguments);
        if let Some(times) = self.seen.get_mut(&key) {
            *times -= 1;
            if *times == 0 {
                self.seen.remove(&key);
            }
        }
    }

    fn key(name: &str, arguments: &Value) -> (String, String) {
        // serde_json's maps keep keys sorted (no `preserve_order`), so the
        // text is the same whatever order the model wrote them in.
        (name.to_owned(), arguments.to_string())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_result_larger_than_its_share_of_the_context_is_cut_and_says_so() {
        let small = r#"{"status":"delivered"}"#.to_owned();
        assert_eq!(fit_result(small.clone(), 100), small);
        let large = format!("{{\"page\":\"{}\"}}", "x".repeat(10_000));
        let cut = fit_result(large.clone(), 100);
        assert!(cut.starts_with(&large[..400]) && !cut.starts_with(&large[..401]));
        assert!(
            cut.ends_with(
                "bytes, more than this conversation has room for; the rest is not shown]"
            )
        );
        assert!(cut.contains(&format!("the result has {} bytes", large.len())));
        // Characters past ASCII count as a token each, and are never split.
        let wide = "退款".repeat(100);
        assert!(fit_result(wide, 10).starts_with(&"退款".repeat(5)));
    }

    #[test]
    fn the_limit_th_identical_call_is_refused_and_the_next_stops() {
        let mut guard = RepeatGuard::new(3);
        let a = json!({"orderId": "88231", "x": {"b": 1, "a": 2}});
        let a_reordered = json!({"x": {"a": 2, "b": 1}, "orderId": "88231"});
        assert!(matches!(guard.record("queryOrder", &a), Repeat::First));
        assert!(matches!(
            guard.record("queryOrder", &a_reordered),
            Repeat::First
        ));
        assert!(matches!(
            guard.record("queryOrder", &json!({})),
            Repeat::First
        ));
        assert!(matches!(guard.record("other", &a), Repeat::First));
        assert!(matches!(
            guard.record("queryOrder", &a),
            Repeat::Refuse { earlier: 2 }
        ));
        assert!(matches!(
            guard.record("queryOrder", &a),
            Repeat::Stop { times: 4 }
        ));
    }
}
