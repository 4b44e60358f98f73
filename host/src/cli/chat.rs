//! `skillhost chat`: a conversation with the main agent on the terminal.
//!
//! Each line read is a user turn; the whole conversation so far is sent
//! with it, as the agent returned it (skills it loaded stay loaded). The
//! answer streams to stdout as the model generates it; the prompt, each
//! round's calls and the confirmations go to stderr, as with `ask`.

use std::io::Write as _;
use std::process::ExitCode;

use skillhost::agent::llm::Message;
use skillhost::agent::{AgentEvent, Caller};

use super::agent::{AgentArgs, Input, LLM_HELP, follow};
use super::trace::{Trace, print_summary};

/// Lines that end the session, besides the end of input.
const EXIT_WORDS: [&str; 2] = ["exit", "quit"];

/// `skillhost chat`.
#[derive(Debug, clap::Args)]
#[command(after_help = format!(
    "Type a message after `you> `; `exit`, `quit` or the end of input (Ctrl-D) ends the \
     session. Lines can be piped in too: `printf 'hello\\nexit\\n' | skillhost chat`.\n\n{LLM_HELP}"
))]
pub struct ChatArgs {
    #[command(flatten)]
    pub(super) agent: AgentArgs,
}

pub async fn chat(args: &ChatArgs) -> anyhow::Result<ExitCode> {
    let agent = args.agent.agent().await?;
    let answerer = args.agent.approval.answerer();
    let options = args.agent.forward.run_options().streaming();
    let mut input = Input::stdin();
    eprintln!("chatting with the main agent; `exit`, `quit` or Ctrl-D ends the session");
    let mut conversation: Vec<Message> = Vec::new();
    // One trace for the session: a turn lists only the functions that changed.
    let mut trace = Trace::default();
    while let Some(line) = input.read_line("you> ").await? {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if EXIT_WORDS.contains(&line) {
            break;
        }
        conversation.push(Message::user(line));
        let run = agent.start_with(conversation.clone(), options.clone())?;
        let mut view = StreamView {
            trace: &mut trace,
            mid_line: false,
            round_streamed: false,
        };
        let result = follow(&agent, run, &answerer, &mut input, |event| {
            view.show(event);
        })
        .await;
        view.end_line();
        match result {
            Ok(output) => {
                print_summary(&output);
                conversation = output.messages;
            }
            Err(error) => {
                // The session goes on without the failed turn.
                conversation.pop();
                eprintln!("error: {}", super::describe(&error));
                eprintln!("(that message was not answered and is left out of the conversation)");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Shows one turn: the main agent's text as it streams in, on stdout after
/// an `agent> ` label, and the trace lines of `ask` between.
struct StreamView<'t> {
    /// The session's trace, which outlives the turn.
    trace: &'t mut Trace,
    /// Streamed text ends without a newline so far.
    mid_line: bool,
    /// The current main round streamed text: it is labelled, and its
    /// answer, if it is the last round, already shown.
    round_streamed: bool,
}

impl StreamView<'_> {
    fn show(&mut self, event: &AgentEvent) {
        match event {
            AgentEvent::TextDelta {
                caller: Caller::Main,
                text,
            } => {
                if !self.round_streamed {
                    eprint!("agent> ");
                }
                print!("{text}");
                // Each piece as it arrives, not when a line is complete.
                let _ = std::io::stdout().flush();
                self.mid_line = !text.ends_with('\n');
                self.round_streamed = true;
            }
            // A skill's sub-agent's text is its result, shown with its call;
            // usage is summed at the end.
            AgentEvent::TextDelta { .. } | AgentEvent::Usage { .. } => {}
            AgentEvent::Answer { text } => {
                if !self.round_streamed {
                    // The server answered without streaming.
                    eprint!("agent> ");
                    println!("{text}");
                }
                self.end_line();
            }
            other => {
                self.end_line();
                if let AgentEvent::RoundStarted {
                    caller: Caller::Main,
                    ..
                } = other
                {
                    self.round_streamed = false;
                }
                self.trace.print(other);
            }
        }
    }

    /// Ends streamed text with a newline before anything else is shown.
    fn end_line(&mut self) {
        if self.mid_line {
            println!();
            self.mid_line = false;
        }
    }
}
