//! `skillhost ask`: the main agent, once, from the terminal.
//!
//! The trace (rounds, calls — inside skills too —, confirmations) goes to
//! stderr and the answer to stdout, so `skillhost ask ... --yes > answer.txt`
//! keeps only the answer. With `--json` every event is a JSON line on
//! stdout instead.

use std::process::ExitCode;

use serde_json::json;

use skillhost::agent::llm::Message;

use super::agent::{AgentArgs, Input, LLM_HELP, follow};
use super::trace::{Trace, print_summary};

/// `skillhost ask`.
#[derive(Debug, clap::Args)]
#[command(after_help = LLM_HELP)]
pub struct AskArgs {
    /// What to ask, e.g. "my order 88231 robot vacuum is broken, refund it".
    message: String,
    /// Print the run's events as JSON lines on stdout, then `finished`, or
    /// `failed` with the error (the confirmation prompt, if any, still goes
    /// to stderr).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    pub(super) agent: AgentArgs,
}

pub async fn ask(args: &AskArgs) -> anyhow::Result<ExitCode> {
    let agent = args.agent.agent().await?;
    let run = agent.start_with(
        vec![Message::user(&args.message)],
        args.agent.forward.run_options(),
    )?;
    let mut trace = Trace::default();
    let followed = follow(
        &agent,
        run,
        &args.agent.approval.answerer(),
        &mut Input::stdin(),
        |event| {
            if args.json {
                println!("{}", json!(event));
            } else {
                trace.print(event);
            }
        },
    )
    .await;
    let output = match followed {
        Ok(output) => output,
        Err(error) => {
            // A script reading the events learns the run ended, and why.
            if args.json {
                let failed = json!({"event": "failed", "error": super::describe(&error)});
                println!("{failed}");
            }
            return Err(error);
        }
    };
    if args.json {
        let done = json!({
            "event": "finished",
            "rounds": output.rounds,
            "llm_calls": output.stats.llm_calls,
            "usage": output.stats.usage,
        });
        println!("{done}");
    } else {
        print_summary(&output);
    }
    Ok(ExitCode::SUCCESS)
}
