//! The message list of one loop, with what the host needs to know about
//! each entry: its estimated tokens and whether it is a loaded skill.
//!
//! Masking is a function of the transcript: the skills loaded this round
//! are those whose `load_skill` result is still an entry. A result is
//! recognized by its content (a tool message named `load_skill` whose JSON
//! has a `loaded_skill` field, the article's `ragent_loaded_skill` mark),
//! so a conversation handed back by a client keeps its loaded skills, and
//! compaction that evicts the entry revokes the skill's unlocks.

use std::collections::BTreeSet;
use std::ops::Range;

use serde_json::{Value, json};

use super::llm::Message;
use super::tokens;
use crate::skills::SkillName;
use crate::skills::manifest::LOAD_SKILL;

/// The field of a `load_skill` result that names the loaded skill.
const LOADED_SKILL: &str = "loaded_skill";

/// The content of a successful `load_skill` result: the skill's name (the
/// mark), the tools it unlocks and its instructions.
pub(super) fn load_result(skill: &SkillName, unlocks: &[String], instructions: &str) -> Value {
    json!({ LOADED_SKILL: skill, "unlocks": unlocks, "instructions": instructions })
}

/// The skill a message marks as loaded, if it is a `load_skill` result.
fn loaded_skill_of(message: &Message) -> Option<SkillName> {
    let Message::Tool { name, content, .. } = message else {
        return None;
    };
    if name != LOAD_SKILL {
        return None;
    }
    let content: Value = serde_json::from_str(content).ok()?;
    SkillName::new(content.get(LOADED_SKILL)?.as_str()?).ok()
}

#[derive(Debug, Clone)]
struct Entry {
    message: Message,
    loaded_skill: Option<SkillName>,
    tokens: usize,
}

impl Entry {
    fn new(message: Message) -> Self {
        Self {
            loaded_skill: loaded_skill_of(&message),
            tokens: tokens::message(&message),
            message,
        }
    }
}

/// What one compaction did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compaction {
    /// Messages removed.
    pub evicted_messages: usize,
    /// Skills no longer loaded: their load result was evicted.
    pub revoked: Vec<SkillName>,
    /// The function calls of the evicted turns whose arguments are JSON, by
    /// name and arguments: the model no longer sees their results, so
    /// making one again is no longer a repeat.
    pub evicted_calls: Vec<(String, Value)>,
    /// Estimated tokens of the messages before.
    pub tokens_before: usize,
    /// Estimated tokens of the messages after.
    pub tokens_after: usize,
}

/// The messages of one loop (the main agent's or a sub-agent's).
#[derive(Debug, Clone, Default)]
pub struct Transcript {
    entries: Vec<Entry>,
    tokens: usize,
}

impl Transcript {
    /// A transcript of `messages`, e.g. a conversation's history.
    pub fn from_messages(messages: impl IntoIterator<Item = Message>) -> Self {
        let mut transcript = Self::default();
        for message in messages {
            transcript.push(message);
        }
        transcript
    }

    /// Appends a message.
    pub fn push(&mut self, message: Message) {
        let entry = Entry::new(message);
        self.tokens += entry.tokens;
        self.entries.push(entry);
    }

    /// The messages to send, in order.
    pub fn messages(&self) -> Vec<Message> {
        self.entries
            .iter()
            .map(|entry| entry.message.clone())
            .collect()
    }

    /// The messages, consuming the transcript.
    pub fn into_messages(self) -> Vec<Message> {
        self.entries
            .into_iter()
            .map(|entry| entry.message)
            .collect()
    }

    /// The skills whose `load_skill` result is in the transcript.
    pub fn loaded_skills(&self) -> BTreeSet<SkillName> {
        self.entries
            .iter()
            .filter_map(|entry| entry.loaded_skill.clone())
            .collect()
    }

    /// Estimated tokens of the messages.
    pub fn tokens(&self) -> usize {
        self.tokens
    }

    /// Number of messages.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no messages.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Evicts the oldest turns while the messages plus `reserved` tokens
    /// (the round's function list) exceed `budget`. Returns what was done,
    /// or `None` when nothing had to go or nothing could.
    ///
    /// A turn is an assistant message with its tool calls and their results
    /// (never split, or the server would refuse the conversation), or any
    /// other single message. Never evicted: the system prompt (a leading
    /// system message), the latest user message, and the latest turn (the
    /// result the model is about to read). When only those are left, the
    /// transcript stays over budget.
    pub fn compact(&mut self, budget: usize, reserved: usize) -> Option<Compaction> {
        if self.tokens + reserved <= budget {
            return None;
        }
        let turns = self.turns();
        let system = matches!(
            self.entries.first().map(|entry| &entry.message),
            Some(Message::System { .. })
        )
        .then_some(0);
        let latest_user = self
            .entries
            .iter()
            .rposition(|entry| matches!(entry.message, Message::User { .. }));
        let keep = |turn: &Range<usize>| {
            [system, latest_user]
                .into_iter()
                .flatten()
                .any(|index| turn.contains(&index))
        };
        let loaded_before = self.loaded_skills();
        let tokens_before = self.tokens;
        let mut evict = vec![false; self.entries.len()];
        let mut tokens = self.tokens;
        let evictable = turns.split_last().map_or(&[][..], |(_, older)| older);
        for turn in evictable.iter().filter(|turn| !keep(turn)) {
            if tokens + reserved <= budget {
                break;
            }
            for index in turn.clone() {
                evict[index] = true;
                tokens -= self.entries[index].tokens;
            }
        }
        let evicted_messages = evict.iter().filter(|&&evicted| evicted).count();
        if evicted_messages == 0 {
            return None;
        }
        let evicted_calls = self
            .entries
            .iter()
            .zip(&evict)
            .filter(|(_, evicted)| **evicted)
            .filter_map(|(entry, _)| match &entry.message {
                Message::Assistant(message) => Some(&message.tool_calls),
                _ => None,
            })
            .flatten()
            .filter_map(|call| Some((call.name().to_owned(), call.parse_arguments().ok()?)))
            .collect();
        let mut evicted = evict.into_iter();
        self.entries
            .retain(|_| !evicted.next().expect("one flag per entry"));
        self.tokens = tokens;
        let loaded_after = self.loaded_skills();
        Some(Compaction {
            evicted_messages,
            revoked: loaded_before.difference(&loaded_after).cloned().collect(),
            evicted_calls,
            tokens_before,
            tokens_after: tokens,
        })
    }

    /// The transcript cut into turns, in order.
    fn turns(&self) -> Vec<Range<usize>> {
        let mut turns = Vec::new();
        let mut index = 0;
        while index < self.entries.len() {
            let start = index;
            index += 1;
            if let Message::Assistant(assistant) = &self.entries[start].message
                && !assistant.tool_calls.is_empty()
            {
                while index < self.entries.len()
                    && matches!(self.entries[index].message, Message::Tool { .. })
                {
                    index += 1;
                }
            }
            turns.push(start..index);
        }
        turns
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::llm::{AssistantMessage, ToolCall};

    fn skill(name: &str) -> SkillName {
        SkillName::new(name).unwrap()
    }

    fn call(id: &str, name: &str) -> Message {
        Message::Assistant(AssistantMessage {
            content: None,
            tool_calls: vec![ToolCall::new(id, name, "{}")],
        })
    }

    fn loaded(id: &str, name: &str, padding: usize) -> Message {
        let result = load_result(&skill(name), &[], &"x".repeat(padding));
        Message::tool(id, LOAD_SKILL, result.to_string())
    }

    #[test]
    fn load_results_mark_their_skill_and_nothing_else_does() {
        let transcript = Transcript::from_messages([
            Message::system("s"),
            Message::user("cancel 88239"),
            call("c1", LOAD_SKILL),
            loaded("c1", "order_change", 10),
            call("c2", "query_order"),
            // Not a load result, even though it mentions the field.
            Message::tool("c2", "query_order", r#"{"loaded_skill":"order_checkout"}"#),
            call("c3", LOAD_SKILL),
            Message::tool("c3", LOAD_SKILL, r#"{"error":"no skill named `x`"}"#),
        ]);
        assert_eq!(
            transcript.loaded_skills(),
            BTreeSet::from([skill("order_change")])
        );
    }

    #[test]
    fn compaction_evicts_whole_old_turns_and_revokes_their_skills() {
        let mut transcript = Transcript::from_messages([
            Message::system("s"),
            Message::user("cancel 88239"),
            call("c1", LOAD_SKILL),
            loaded("c1", "order_change", 4000),
            call("c2", "query_order"),
            Message::tool("c2", "query_order", "{}"),
        ]);
        let before = transcript.tokens();
        assert_eq!(transcript.compact(before, 0), None, "within budget");
        let compaction = transcript.compact(100, 0).unwrap();
        assert_eq!(compaction.evicted_messages, 2);
        assert_eq!(compaction.revoked, [skill("order_change")]);
        assert_eq!(
            compaction.evicted_calls,
            [(LOAD_SKILL.to_owned(), json!({}))]
        );
        assert_eq!(compaction.tokens_before, before);
        assert_eq!(compaction.tokens_after, transcript.tokens());
        assert!(transcript.loaded_skills().is_empty());
        let roles: Vec<_> = transcript
            .messages()
            .iter()
            .map(|message| serde_json::to_value(message).unwrap()["role"].clone())
            .collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool"]);
    }

    #[test]
    fn the_system_prompt_latest_user_message_and_latest_turn_stay() {
        let mut transcript = Transcript::from_messages([
            Message::system("s".repeat(1000)),
            Message::user("old question"),
            Message::from(AssistantMessage {
                content: Some("old answer".into()),
                tool_calls: vec![],
            }),
            Message::user("u".repeat(1000)),
            call("c1", LOAD_SKILL),
            loaded("c1", "order_change", 4000),
        ]);
        let compaction = transcript.compact(10, 0).unwrap();
        assert_eq!(
            compaction.evicted_messages, 2,
            "the old question and answer"
        );
        assert_eq!(transcript.len(), 4);
        assert!(compaction.revoked.is_empty());
        assert_eq!(transcript.compact(10, 0), None, "nothing else may go");
    }
}
