//! What `skillhost ask` and `skillhost chat` share: the main agent built
//! from the command line, lines read from stdin, and a run followed to its
//! end with its write-tool confirmations answered.

use std::io::IsTerminal;
use std::sync::Arc;

use anyhow::Context;
use tokio::io::{AsyncBufReadExt, BufReader, Lines, Stdin};

use http::{HeaderName, HeaderValue};
use skillhost::agent::llm::LlmClient;
use skillhost::agent::{Agent, AgentEvent, Decision, PendingConfirmation, RunHandle, RunOptions};
use skillhost::tools::http::Forwarded;
use skillhost::trace_context::{TRACEPARENT_VAR, TraceContext};

use super::config::ConfigFile;
use super::{HostArgs, console, load_skills};

/// How the LLM is configured, for the commands' `--help`.
pub const LLM_HELP: &str = "The LLM is any OpenAI-compatible chat-completions server: set \
    SKILLHOST_MODEL (the model name), OPENAI_BASE_URL (the API root, default \
    https://api.openai.com/v1; e.g. http://localhost:11434/v1 for Ollama) and OPENAI_API_KEY \
    (when the server needs a key), or [llm] in the --config file.\n\nA write tool waits for \
    your approval: the run prints the confirmation's id, tool, arguments and summary and asks \
    y/n on the terminal. --yes or --no answer every confirmation without asking, for scripts.";

/// How write-tool confirmations are answered, for `run`, `ask` and `chat`.
#[derive(Debug, clap::Args)]
pub struct ApprovalArgs {
    /// Approve every pending confirmation without asking.
    #[arg(long, conflicts_with = "no")]
    yes: bool,
    /// Reject every pending confirmation without asking (the write does not
    /// run; the skill or the model is told).
    #[arg(long)]
    no: bool,
}

impl ApprovalArgs {
    /// How pending confirmations are answered: `--yes`, `--no`, or asked.
    pub fn answerer(&self) -> Answerer {
        if self.yes {
            Answerer::Approve
        } else if self.no {
            Answerer::Reject
        } else {
            Answerer::Ask
        }
    }
}

/// Who a run acts for, for `run`, `ask` and `chat`: the headers that
/// `serve` would take from each request, and the trace it is part of.
#[derive(Debug, clap::Args)]
pub struct ForwardArgs {
    /// A header the run carries for the config file's HTTP tools that
    /// forward it (their `forward_headers`), as 'Name: value', e.g.
    /// 'X-User-Id: u-1001'; repeatable. Under `serve` such headers come from
    /// each request; without one, such a tool refuses the call. The run's
    /// W3C trace comes from the environment's TRACEPARENT and TRACESTATE:
    /// the model and every HTTP and MCP tool get it.
    #[arg(long = "header", short = 'H', value_name = "NAME: VALUE", value_parser = parse_header)]
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl ForwardArgs {
    /// Warns of each `--header` that no HTTP or MCP tool of `file` forwards: it
    /// would go nowhere, most likely a misspelt name.
    pub fn warn_unforwarded(&self, file: &ConfigFile) {
        for (name, _) in &self.headers {
            let http = file.tools.iter().flat_map(|tool| &tool.forward_headers);
            let mcp = file
                .mcp_servers
                .iter()
                .flat_map(|server| &server.forward_headers);
            let forwarded = http
                .chain(mcp)
                .any(|listed| name.as_str().eq_ignore_ascii_case(listed));
            if !forwarded {
                console::warn(&format!(
                    "--header {name}: no HTTP or MCP tool of the config file forwards it (their \
                     forward_headers), so no call sends it"
                ));
            }
        }
    }

    /// How to start the run: its tool context carries the headers, and it
    /// runs in the trace the environment names, if any (`TRACEPARENT`,
    /// `TRACESTATE`), as a command a traced job starts.
    pub fn run_options(&self) -> RunOptions {
        let mut forwarded = Forwarded::default();
        for (name, value) in &self.headers {
            forwarded.append(name.clone(), value.clone());
        }
        let options = RunOptions::new().with(forwarded);
        match TraceContext::from_env() {
            Ok(Some(trace)) => options.trace(trace),
            Ok(None) => options,
            Err(invalid) => {
                console::warn(&format!(
                    "{TRACEPARENT_VAR}: {invalid}; the run goes on in no trace"
                ));
                options
            }
        }
    }
}

/// `Name: value`, as curl's `-H` takes it.
fn parse_header(text: &str) -> Result<(HeaderName, HeaderValue), String> {
    let Some((name, value)) = text.split_once(':') else {
        return Err("expected 'Name: value', e.g. 'X-User-Id: u-1001'".to_owned());
    };
    let name = name.trim();
    let name = HeaderName::try_from(name).map_err(|_| format!("`{name}` is not a header name"))?;
    let value = HeaderValue::try_from(value.trim())
        .map_err(|_| format!("the value of `{name}` is not a valid header value"))?;
    Ok((name, value))
}

/// The main agent's settings, for `ask` and `chat`.
#[derive(Debug, clap::Args)]
pub struct AgentArgs {
    #[command(flatten)]
    pub(super) approval: ApprovalArgs,
    #[command(flatten)]
    pub(super) forward: ForwardArgs,
    /// Tools the main agent keeps seeing even when skills absorb them,
    /// comma-separated; e.g. queryOrder,searchKnowledge,getCurrentTime, which
    /// the demo's skills would otherwise hide until one is loaded.
    #[arg(
        long,
        value_name = "TOOL",
        env = "SKILLHOST_KEEP_PUBLIC",
        value_delimiter = ','
    )]
    keep_public: Vec<String>,
    #[command(flatten)]
    pub(super) host: HostArgs,
}

impl AgentArgs {
    /// The main agent over the skills directory and the tools, with the LLM
    /// of the environment or the config file, and the file's agent and
    /// confirmation settings (`--keep-public` over its `keep_public`).
    /// Without an LLM it fails before loading any skill, saying how to
    /// configure one: there is nothing to do without.
    pub async fn agent(&self) -> anyhow::Result<Agent> {
        let file = self.host.config_file()?;
        self.forward.warn_unforwarded(&file);
        let llm = LlmClient::new(file.llm_config()?)?;
        let skills = load_skills(&self.host, &file).await?;
        let keep_public = (!self.keep_public.is_empty()).then(|| self.keep_public.clone());
        let config = file.agent_config(keep_public);
        Ok(Agent::builder(Arc::new(skills))
            .llm(llm)
            .config(config)
            .build()?)
    }
}

/// Lines typed, or piped, on stdin.
pub struct Input(Lines<BufReader<Stdin>>);

impl Input {
    pub fn stdin() -> Self {
        Self(BufReader::new(tokio::io::stdin()).lines())
    }

    /// Shows `prompt` on stderr and reads one line; `None` at the end of
    /// input.
    pub async fn read_line(&mut self, prompt: &str) -> anyhow::Result<Option<String>> {
        eprint!("{prompt}");
        let line = self.0.next_line().await.context("reading stdin")?;
        match &line {
            None => eprintln!(),
            // Piped lines are not echoed by a terminal: show them, so the
            // transcript on stderr reads as a conversation.
            Some(line) if !std::io::stdin().is_terminal() => eprintln!("{line}"),
            Some(_) => {}
        }
        Ok(line)
    }
}

/// How pending confirmations are answered.
pub enum Answerer {
    Approve,
    Reject,
    /// Ask y/n, reading the answer from stdin.
    Ask,
}

impl Answerer {
    /// Answers `pending`: `true` approves.
    async fn decide(
        &self,
        pending: &PendingConfirmation,
        input: &mut Input,
    ) -> anyhow::Result<bool> {
        match self {
            Self::Approve => {
                eprintln!("      approved (--yes)");
                return Ok(true);
            }
            Self::Reject => {
                eprintln!("      rejected (--no)");
                return Ok(false);
            }
            Self::Ask => {}
        }
        let prompt = format!("      approve {}? [y/n] ", pending.tool);
        loop {
            let Some(line) = input.read_line(&prompt).await? else {
                eprintln!("      no answer (end of input): rejected");
                return Ok(false);
            };
            match line.trim().to_ascii_lowercase().as_str() {
                "y" | "yes" => return Ok(true),
                "n" | "no" => return Ok(false),
                _ => eprintln!("      answer y or n"),
            }
        }
    }
}

/// Follows `run` to its end: hands each event to `show` as it happens and
/// answers each pending confirmation with `answerer`.
pub async fn follow<T: Send + 'static>(
    agent: &Agent,
    mut run: RunHandle<T>,
    answerer: &Answerer,
    input: &mut Input,
    mut show: impl FnMut(&AgentEvent),
) -> anyhow::Result<T> {
    while let Some(event) = run.events.recv().await {
        show(&event);
        if let AgentEvent::ConfirmationPending(pending) = &event {
            let id = pending.id.as_str();
            // A refused answer means the confirmation is gone (expired); the
            // run reports that itself.
            let decision = if answerer.decide(pending, input).await? {
                Decision::Approve
            } else {
                Decision::Reject(None)
            };
            let _ = agent.confirmations().answer_on_the_spot(id, decision, None);
        }
    }
    Ok(run.result().await?)
}

#[cfg(test)]
mod tests {
    use super::parse_header;

    #[test]
    fn a_header_option_is_a_name_and_a_value_around_a_colon() {
        let (name, value) = parse_header(" X-User-Id :  u-1001 ").unwrap();
        assert_eq!(
            (name.as_str(), value.to_str().unwrap()),
            ("x-user-id", "u-1001")
        );
        // Only the first colon separates: a value may hold more.
        let (_, value) = parse_header("X-Trace: a:b").unwrap();
        assert_eq!(value.to_str().unwrap(), "a:b");

        for (text, error) in [
            ("X-User-Id u-1001", "expected 'Name: value'"),
            ("X User: u-1001", "`X User` is not a header name"),
            (
                "X-User-Id: u\n1001",
                "the value of `x-user-id` is not a valid header value",
            ),
        ] {
            let refused = parse_header(text).unwrap_err();
            assert!(refused.contains(error), "{text:?}: {refused}");
        }
    }
}
