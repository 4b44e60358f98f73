//! Token estimates for the context budget.
//!
//! The budget only has to be roughly right, every round, for thousands of
//! functions, so it is counted with an estimate instead of a tokenizer: BPE
//! tokenizers (cl100k, o200k, Qwen's) average about four characters of
//! English or JSON per token and about one token per CJK character. The
//! estimate counts ASCII characters as a quarter of a token and every other
//! character as a whole one, which errs on the high side for both.

use super::llm::{Message, ToolDefinition};

/// Tokens a chat template adds around each message (role markers,
/// separators); OpenAI documents 3 to 4.
const MESSAGE_OVERHEAD: usize = 4;

/// Estimated tokens of `text`.
pub fn estimate(text: &str) -> usize {
    let (ascii, other) = text.chars().fold((0usize, 0usize), |(ascii, other), c| {
        if c.is_ascii() {
            (ascii + 1, other)
        } else {
            (ascii, other + 1)
        }
    });
    ascii.div_ceil(4) + other
}

/// Estimated tokens of one message as sent: its text, its tool calls'
/// names and arguments, and the template's overhead.
pub fn message(message: &Message) -> usize {
    let text = match message {
        Message::System { content } | Message::User { content } => estimate(content),
        Message::Tool { name, content, .. } => estimate(name) + estimate(content),
        Message::Assistant(assistant) => {
            assistant.content.as_deref().map_or(0, estimate)
                + assistant
                    .tool_calls
                    .iter()
                    .map(|call| estimate(call.name()) + estimate(&call.function.arguments))
                    .sum::<usize>()
        }
    };
    text + MESSAGE_OVERHEAD
}

/// Estimated tokens of one function definition as sent (its JSON).
pub fn definition(definition: &ToolDefinition) -> usize {
    estimate(definition.json())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascii_counts_a_quarter_and_cjk_a_whole_token() {
        assert_eq!(estimate(""), 0);
        assert_eq!(estimate("abcd"), 1);
        assert_eq!(estimate("abcde"), 2);
        assert_eq!(estimate("退款"), 2);
        assert_eq!(estimate("refund 退款"), 2 + 2);
    }

    #[test]
    fn messages_carry_the_template_overhead() {
        assert_eq!(message(&Message::user("abcd")), 1 + MESSAGE_OVERHEAD);
    }
}
