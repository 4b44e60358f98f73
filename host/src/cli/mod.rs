//! Command-line interface: argument parsing and one module per command group.

mod agent;
mod ask;
mod chat;
mod config;
mod console;
mod follow;
mod hangup;
mod inspect;
mod mcp;
mod new;
mod pack;
mod progress;
mod runs;
mod serve;
mod sign;
mod skills;
mod telemetry;
mod test;
mod tools;
mod trace;
mod trust;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use tracing_subscriber::Layer;
use tracing_subscriber::fmt::format::FmtSpan;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use config::ConfigFile;
use follow::Following;
use sign::KeyScopes;
use trust::Trust;

use anyhow::Context;
use skillhost::agent::AgentConfig;
use skillhost::embed::SkillHost;
use skillhost::runtime::{Runtime, RuntimeConfig};
use skillhost::skills::signature::SignaturePolicy;
use skillhost::skills::{SkillRegistry, SkillSnapshot};
use skillhost::tools::demo::{self, DemoDb};
use skillhost::tools::{Tool, ToolRegistry};

#[derive(Debug, Parser)]
#[command(
    name = "skillhost",
    version,
    about = "Host for LLM-agent skills shipped as signed WebAssembly components",
    after_help = "Spans (requests, runs, skill invocations, tool and LLM calls) are exported to an \
    OpenTelemetry collector over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT (or \
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set; OpenTelemetry's other OTEL_* variables apply. \
    run, ask and chat run in the W3C trace TRACEPARENT and TRACESTATE name."
)]
pub struct Cli {
    /// Log more: -v for info, -vv for debug (or set SKILLHOST_LOG).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// How log lines are written to stderr: `json` is one JSON object a
    /// line, with the fields of the spans it happened in (skill, tool,
    /// round). Else `[server] log_format` in the `--config` file.
    /// [default: text]
    #[arg(long, value_enum, global = true, env = "SKILLHOST_LOG_FORMAT")]
    pub log_format: Option<LogFormat>,
    #[command(subcommand)]
    command: Command,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object a line.
    Json,
}

/// Where skills and the demo database live; shared by every command that
/// loads skills.
#[derive(Debug, clap::Args)]
struct HostArgs {
    /// Directory of skill components (*.wasm).
    #[arg(long, default_value = "skills", env = "SKILLHOST_SKILLS")]
    skills: PathBuf,
    /// SQLite file of the demo shop; created and seeded when missing. The
    /// shop's clock, kept in it, starts at the articles' 2026-06-29 14:00
    /// (UTC+08:00) and runs on in real time.
    #[arg(long, default_value = "skillhost-demo.db", env = "SKILLHOST_DB")]
    db: PathBuf,
    #[command(flatten)]
    trust: sign::TrustArgs,
    /// DEVELOPMENT ONLY: load skills without verifying their signatures.
    /// Every such load logs a warning.
    #[arg(long)]
    allow_unsigned: bool,
    /// Compilation cache: compiled skills are kept here, keyed by their
    /// content, so a restart does not compile unchanged skills again. It
    /// must be this user's own, writable by no one else (compiled code runs
    /// from it unchecked). [default: $XDG_CACHE_HOME/skillhost, else
    /// ~/.cache/skillhost]
    #[arg(long, env = "SKILLHOST_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    /// Use no compilation cache: compile every skill at start.
    #[arg(long, conflicts_with = "cache_dir")]
    no_cache: bool,
    /// A TOML config file (see skillhost.example.toml): sandbox limits, HTTP
    /// tools, agent, confirmation and LLM settings, and for `serve` the
    /// gateway's. Other commands read it too, so a skill runs as `serve`
    /// runs it.
    #[arg(long, value_name = "FILE", env = "SKILLHOST_CONFIG")]
    config: Option<PathBuf>,
}

impl HostArgs {
    /// `--skills`, checked before anything loads, so that a command started
    /// from another directory says which setting to fix.
    fn skills_dir(&self) -> anyhow::Result<&Path> {
        if !self.skills.is_dir() {
            anyhow::bail!(
                "no skills directory at {} ({})",
                self.skills.display(),
                settings_note("--skills or SKILLHOST_SKILLS", [&self.skills])
            );
        }
        Ok(&self.skills)
    }

    /// `--trust` with `scopes` (the config file's `[[trust.scopes]]`),
    /// unless `--allow-unsigned`.
    fn signature_policy(&self, scopes: &KeyScopes) -> anyhow::Result<SignaturePolicy> {
        if self.allow_unsigned {
            console::warn(
                "--allow-unsigned: skill signatures are NOT verified; never use this outside \
                 development",
            );
            return Ok(SignaturePolicy::AllowUnsigned);
        }
        Ok(SignaturePolicy::Require(self.trust.scoped_store(scopes)?))
    }

    /// The runtime these arguments and `file` ask for: the library's
    /// defaults, the compilation cache (none when no cache directory can be
    /// found), and the file's `[sandbox]` over them.
    fn runtime_config(&self, file: &ConfigFile) -> anyhow::Result<RuntimeConfig> {
        let cache_dir = if self.no_cache {
            None
        } else {
            self.cache_dir.clone().or_else(default_cache_dir)
        };
        file.runtime_config(RuntimeConfig {
            cache_dir,
            ..RuntimeConfig::default()
        })
    }
}

/// `$XDG_CACHE_HOME/skillhost`, else `$HOME/.cache/skillhost` (the XDG
/// default); `None` when neither variable names an absolute directory.
fn default_cache_dir() -> Option<PathBuf> {
    let absolute = |var| {
        std::env::var_os(var)
            .map(PathBuf::from)
            .filter(|dir| dir.is_absolute())
    };
    absolute("XDG_CACHE_HOME")
        .or_else(|| absolute("HOME").map(|home| home.join(".cache")))
        .map(|cache| cache.join("skillhost"))
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a skill's deterministic steps against the demo tools (and the config file's HTTP
    /// tools) and print the result; a write tool waits for your y/n (--yes/--no for scripts)
    /// unless the config file's confirmation policy says otherwise.
    Run {
        /// The skill's name, e.g. processRefund.
        skill: String,
        /// The skill's input as JSON, e.g. '{"orderId":"88231","reason":"broken"}';
        /// @FILE reads it from a file, - from standard input (then answer
        /// writes with --yes or --no: stdin is spent).
        #[arg(long, default_value = "{}", value_parser = skills::skill_input)]
        input: serde_json::Value,
        /// Print the whole report (result, tool calls, timing) as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        approval: agent::ApprovalArgs,
        #[command(flatten)]
        forward: agent::ForwardArgs,
        #[command(flatten)]
        host: HostArgs,
    },
    /// List loaded skills, and files that failed to load with the reason.
    Skills {
        /// Print as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        host: HostArgs,
    },
    /// Serve the HTTP gateway: an OpenAI-compatible chat endpoint with the
    /// agent behind it, the skills API, events and metrics; hot reload on.
    Serve(serve::ServeArgs),
    /// Generate an Ed25519 key pair for signing skills: <PREFIX>.key and <PREFIX>.pub.
    Keygen(sign::KeygenArgs),
    /// Sign a skill component (embedded signature, in place by default).
    Sign(sign::SignArgs),
    /// Verify a skill component's signature against the trusted keys; exits non-zero when invalid.
    Verify(sign::VerifyArgs),
    /// Pack a declarative skill (YAML or SKILL.md) into an instruction-only
    /// component, or a core module built against the Rust guest SDK into a
    /// skill component; sign it with `skillhost sign` before loading it in
    /// a host that requires signatures.
    Pack(pack::PackArgs),
    /// Start a skill: a directory with a working skill in Rust, Python,
    /// JavaScript or a SKILL.md, the SDK and the contract beside it, and
    /// the commands that build it.
    New(new::NewArgs),
    /// Ask the main agent once: prints each round (functions offered, calls
    /// made, inside skills too) and the answer; asks y/n for write tools.
    Ask(ask::AskArgs),
    /// Chat with the main agent: the answer streams as it is generated,
    /// each round's calls are shown, the conversation is kept across turns.
    Chat(chat::ChatArgs),
    /// Show what one skill file is: manifest, component imports and
    /// exports, signature and trust, digest and size.
    Inspect(inspect::InspectArgs),
    /// Run the test cases skills carry in their manifests and report
    /// pass/fail per case (write tools auto-approved on a scratch shop).
    Test(test::TestArgs),
    /// Serve the skills as the tools of an MCP server on standard input and
    /// output, for an MCP client (an IDE's agent); hot reload on, the client
    /// told when the list changes; a write is approved with --yes, else the
    /// client's user is asked when the client can ask, else it is rejected.
    Mcp(mcp::McpArgs),
    /// List the runs a runs directory keeps (serve's --runs-dir): those
    /// waiting for an approval, resumed at the next start, and those whose
    /// approved call a stop interrupted.
    Runs(runs::RunsArgs),
    /// List the tools a skill may call or unlock — the demo shop's, the
    /// config file's HTTP tools and its MCP servers' (each server asked) —
    /// with whether each reads or writes and whether a call waits for
    /// approval.
    Tools(tools::ToolsArgs),
}

pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Run {
            skill,
            input,
            json,
            approval,
            forward,
            host,
        } => {
            let file = host.config_file()?;
            forward.warn_unforwarded(&file);
            let loaded = load_skills(&host, &file).await?;
            let agent = file.agent_config(None);
            let options = forward.run_options();
            skills::run(
                loaded,
                agent,
                &skill,
                input,
                options,
                json,
                &approval.answerer(),
            )
            .await
        }
        Command::Skills { json, host } => {
            let loaded = load_skills(&host, &host.config_file()?).await?;
            skills::list(&loaded, json)
        }
        Command::Serve(args) => serve::serve(&args).await,
        Command::Keygen(args) => sign::keygen(&args),
        Command::Sign(args) => sign::sign(&args),
        Command::Verify(args) => sign::verify(&args),
        Command::Pack(args) => pack::pack(&args).await,
        Command::New(args) => new::new(&args),
        Command::Ask(args) => ask::ask(&args).await,
        Command::Chat(args) => chat::chat(&args).await,
        Command::Inspect(args) => inspect::inspect(&args).await,
        Command::Test(args) => test::test(&args).await,
        Command::Mcp(args) => mcp::mcp(&args).await,
        Command::Runs(args) => runs::runs(&args),
        Command::Tools(args) => tools::tools(&args).await,
    }
}

/// The skills of `--skills` over the demo tools on `--db` and the config
/// file's HTTP tools, in its sandbox.
async fn load_skills(args: &HostArgs, file: &ConfigFile) -> anyhow::Result<SkillRegistry> {
    // Settings first, so that a mistake in them creates no database.
    let policy = args.signature_policy(&file.key_scopes()?)?;
    let skills_dir = args.skills_dir()?;
    let runtime = Runtime::new(args.runtime_config(file)?).map_err(config::name_sandbox_keys)?;
    let http_tools = file.http_tools()?;
    let mcp_tools = file.mcp_tools().await?;
    let db = Arc::new(DemoDb::open(&args.db)?);
    let mut tools = ToolRegistry::new();
    demo::register_all(&mut tools, db)?;
    for tool in http_tools.into_iter().chain(mcp_tools) {
        tools.register(tool)?;
    }
    let skills = SkillRegistry::load_dir_with_progress(
        runtime,
        Arc::new(tools),
        policy,
        skills_dir,
        progress::loading_skills(),
    )
    .await?;
    warn_of_limits_for_absent_skills(file, &skills.snapshot());
    Ok(skills)
}

/// The settings of a long-running host (`serve`, `mcp`), read and checked
/// before it starts: a mistake in them is reported without waiting on an
/// MCP server.
struct HostSettings {
    skills_dir: PathBuf,
    policy: SignaturePolicy,
    runtime: RuntimeConfig,
    http_tools: Vec<Arc<dyn Tool>>,
    agent: AgentConfig,
    /// The config file's `[[trust.scopes]]`, and what the trust store was
    /// read from, taken before it was read (a change made meanwhile is
    /// then followed); `None` under `--allow-unsigned`.
    trust: Option<(KeyScopes, trust::Contents)>,
}

/// A long-running host as [`HostSettings::start`] started it.
struct Started {
    host: SkillHost,
    /// Its trust store, to read again; `None` under `--allow-unsigned`.
    trust: Option<Trust>,
    /// The watch of the trust store's files, with hot reload. Hold it while
    /// serving: dropping it ends the watch.
    trust_watch: Option<Following>,
}

impl HostSettings {
    fn read(args: &HostArgs, file: &ConfigFile, agent: AgentConfig) -> anyhow::Result<Self> {
        let scopes = file.key_scopes()?;
        let seen = (!args.allow_unsigned).then(|| trust::contents(args.trust.paths()));
        Ok(Self {
            http_tools: file.http_tools()?,
            skills_dir: args.skills_dir()?.to_owned(),
            policy: args.signature_policy(&scopes)?,
            runtime: args.runtime_config(file)?,
            agent,
            trust: seen.map(|seen| (scopes, seen)),
        })
    }

    /// The host over the demo shop on `--db` and the file's HTTP and MCP
    /// tools, with the file's LLM, watching the skills and the trust store
    /// when `hot_reload`.
    async fn start(
        self,
        args: &HostArgs,
        file: &ConfigFile,
        hot_reload: bool,
        runs_dir: Option<&Path>,
    ) -> anyhow::Result<Started> {
        let env = |name: &str| std::env::var(name).ok();
        let db = Arc::new(DemoDb::open(&args.db)?);
        let http_tools = self.http_tools;
        let mut host = SkillHost::builder(self.skills_dir, self.policy);
        if let Some(dir) = runs_dir {
            host = host.keep_runs(dir);
        }
        for server in &file.mcp_servers {
            host = host.mcp_server(server.clone());
        }
        let host = host
            .runtime_config(self.runtime)
            .demo_tools(db)
            .register_tools(|tools| {
                http_tools
                    .into_iter()
                    .try_for_each(|tool| tools.register(tool))
            })
            .agent_config(self.agent)
            .llm_from_lookup(file.llm_lookup(env))
            .hot_reload(hot_reload)
            .on_load_progress(progress::loading_skills())
            .build()
            .await
            .context("starting the host")
            .map_err(config::name_sandbox_keys)?;
        let (trust, trust_watch) = match self.trust {
            None => (None, None),
            Some((scopes, seen)) => {
                let trust = Trust::new(host.clone(), args.trust.clone(), scopes);
                let watch = if hot_reload {
                    Some(trust.watch(seen)?)
                } else {
                    None
                };
                (Some(trust), watch)
            }
        };
        Ok(Started {
            host,
            trust,
            trust_watch,
        })
    }
}

/// Says which skills `host` loaded, and warns of the files that did not
/// load: `serve` and `mcp` keep running without them.
fn report_skills(host: &SkillHost, hot_reload: bool, file: &ConfigFile) {
    let snapshot = host.snapshot();
    let names: Vec<&str> = snapshot
        .skills()
        .map(|skill| skill.component.name().as_str())
        .collect();
    let watching = if hot_reload {
        ", watching for changes"
    } else {
        ""
    };
    console::say(&format!(
        "loaded {} skill(s){watching}: {}",
        names.len(),
        names.join(", ")
    ));
    for failure in snapshot.failures() {
        console::warn(&format!(
            "{} did not load: {}",
            failure.path.display(),
            failure.reason
        ));
    }
    warn_of_limits_for_absent_skills(file, &snapshot);
}

/// Warns of the skills `[sandbox.skills]` sets limits for that are not
/// among `loaded`: a misspelt name would leave its skill on the defaults.
pub(super) fn warn_of_limits_for_absent_skills(file: &ConfigFile, loaded: &SkillSnapshot) {
    let absent: Vec<&str> = file
        .skills_with_limits()
        .filter(|name| loaded.get(name).is_none())
        .collect();
    if !absent.is_empty() {
        console::warn(&format!(
            "[sandbox.skills] sets limits for skills that are not loaded: {}; they apply once a \
             skill of that name loads, and until then to nothing (a misspelt name?)",
            absent.join(", ")
        ));
    }
}

/// Where a setting of `paths` comes from, for an error about them: the
/// option and variable, and the working directory when a path is relative.
fn settings_note<'a>(setting: &str, paths: impl IntoIterator<Item = &'a PathBuf>) -> String {
    let relative = paths.into_iter().any(|path| path.is_relative());
    match std::env::current_dir() {
        Ok(dir) if relative => format!("{setting}; working directory {}", dir.display()),
        _ => setting.to_owned(),
    }
}

/// The config file's HTTP and MCP tools as stand-ins, never called: for
/// work that must not reach a real service (test cases, inspecting a file).
/// The MCP servers are asked what their tools are, nothing more.
struct StandIns(Vec<Arc<dyn Tool>>);

impl StandIns {
    async fn of(file: &ConfigFile, command: &str) -> anyhow::Result<Self> {
        let why =
            format!("`skillhost {command}` does not call the config file's HTTP or MCP tools");
        let mcp = file.mcp_tool_stand_ins(&why).await?;
        Ok(Self(
            file.http_tool_stand_ins(&why)
                .into_iter()
                .chain(mcp)
                .collect(),
        ))
    }

    /// Every demo tool on a fresh, seeded in-memory shop, and the stand-ins.
    fn with_fresh_shop(&self) -> anyhow::Result<Arc<ToolRegistry>> {
        let db = Arc::new(DemoDb::in_memory()?);
        let mut tools = ToolRegistry::new();
        demo::register_all(&mut tools, db)?;
        for tool in &self.0 {
            tools.register(Arc::clone(tool))?;
        }
        Ok(Arc::new(tools))
    }
}

/// Reports the error that ended the command, as the log format asks.
pub fn report_error(error: &anyhow::Error) {
    console::error(&describe(error));
}

/// `error` and its causes as one line, `outer: cause: …`, for a person. A
/// cause whose message the previous one already ends with is left out: many
/// errors (ours, io, SQLite, wasmtime's) both quote their cause and return
/// it as `source()`, and `{:#}` would print it twice.
fn describe(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let message = cause.to_string();
        if line.ends_with(&message) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&message);
    }
    line
}

/// Logs to stderr at the level `-v` or `SKILLHOST_LOG` asks for, in the
/// format `--log-format`, `SKILLHOST_LOG_FORMAT` or (for every command that
/// runs a host: `run`, `skills`, `test`, `ask`, `chat`, `serve`) the
/// `--config` file's `[server] log_format` asks for. A span (skill
/// invocation, tool call, agent round, LLM call) is written when it closes,
/// with every field it recorded.
///
/// With OpenTelemetry's OTLP variables set, the spans are exported too
/// ([`telemetry`]), whatever the log level: hold what this returns until
/// the command is done, since dropping it sends the last of them.
pub fn init_tracing(cli: &Cli) -> Option<telemetry::SpanExport> {
    let format = log_format(cli);
    console::use_json(format == LogFormat::Json);
    let asked = std::env::var("SKILLHOST_LOG").ok();
    let filter = tracing_subscriber::EnvFilter::try_new(log_filter(asked.as_deref(), cli.verbose))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(log_filter(None, cli.verbose)));
    let logs = tracing_subscriber::fmt::layer()
        .with_span_events(FmtSpan::CLOSE)
        // Colour codes only for a person reading a terminal, never in a file.
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let logs = match format {
        LogFormat::Text => logs.boxed(),
        LogFormat::Json => logs
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .boxed(),
    };
    // Each layer its own filter: the logs' level does not limit the export.
    // A span neither records is never made.
    let logs = logs.with_filter(filter);
    let (export, unexported) = match telemetry::SpanExport::from_env() {
        Ok(export) => (export, None),
        Err(why) => (None, Some(why)),
    };
    match &export {
        Some(export) => tracing_subscriber::registry()
            .with(logs)
            .with(export.layer())
            .init(),
        None => tracing_subscriber::registry().with(logs).init(),
    }
    // Told once the logs are set up: with JSON logs, a warning is an event.
    if let Some(why) = unexported {
        console::warn(&why);
    }
    export
}

/// The log filter: `SKILLHOST_LOG`'s, else the level `-v` asks for. The
/// console's events (`serve`'s announcements, the final error) are let
/// through at info unless the filter names their target: in text they are
/// plain lines no filter hides, and JSON logs must not lose them.
fn log_filter(asked: Option<&str>, verbose: u8) -> String {
    let filter = asked.unwrap_or(match verbose {
        0 => "warn",
        // notify reports its own housekeeping at info (a watch on a deleted
        // directory it could not remove): nothing an operator acts on.
        1 => "info,notify=warn",
        _ => "debug",
    });
    if filter.contains(console::TARGET) {
        filter.to_owned()
    } else {
        format!("{filter},{}=info", console::TARGET)
    }
}

/// The log format asked for: the flag (or its variable), else the config
/// file's, else text.
fn log_format(cli: &Cli) -> LogFormat {
    cli.log_format
        .or_else(|| {
            cli.command
                .host_args()
                .and_then(HostArgs::config_log_format)
        })
        .unwrap_or_default()
}

impl Command {
    /// The host settings of a command that runs a host.
    fn host_args(&self) -> Option<&HostArgs> {
        match self {
            Command::Run { host, .. } | Command::Skills { host, .. } => Some(host),
            Command::Serve(args) => Some(&args.host),
            Command::Ask(args) => Some(&args.agent.host),
            Command::Chat(args) => Some(&args.agent.host),
            Command::Test(args) => Some(&args.host),
            Command::Mcp(args) => Some(&args.host),
            Command::Keygen(_)
            | Command::Sign(_)
            | Command::Verify(_)
            | Command::Pack(_)
            | Command::New(_)
            | Command::Inspect(_)
            | Command::Runs(_)
            | Command::Tools(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::{Cli, LogFormat, describe, log_filter, log_format};

    #[test]
    fn command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_log_format_flag_wins_over_the_serve_config_file() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("skillhost.toml");
        std::fs::write(&config, "[server]\nlog_format = \"json\"\n").unwrap();
        let config = config.to_str().unwrap();
        let parse = |args: &[&str]| Cli::try_parse_from(args).unwrap();
        let from_file = parse(&["skillhost", "serve", "--config", config]);
        assert_eq!(log_format(&from_file), LogFormat::Json);
        let flag = parse(&[
            "skillhost",
            "--log-format",
            "text",
            "serve",
            "--config",
            config,
        ]);
        assert_eq!(log_format(&flag), LogFormat::Text);
        let elsewhere = parse(&["skillhost", "skills"]);
        assert_eq!(log_format(&elsewhere), LogFormat::Text);
    }

    #[test]
    fn the_console_is_heard_whatever_the_filter_unless_the_filter_names_it() {
        assert_eq!(log_filter(None, 0), "warn,skillhost::console=info");
        assert_eq!(
            log_filter(None, 1),
            "info,notify=warn,skillhost::console=info"
        );
        assert_eq!(
            log_filter(Some("error"), 2),
            "error,skillhost::console=info"
        );
        let silenced = "warn,skillhost::console=off";
        assert_eq!(log_filter(Some(silenced), 0), silenced);
    }

    #[test]
    fn the_demo_key_is_recognised_among_the_trusted_ones() {
        use skillhost::skills::signature::{SigningKey, TrustStore, TrustedKey};
        let own = SigningKey::generate().public_key().clone();
        let own_key = TrustedKey::new(own, "own.pub");
        let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let demo = TrustStore::load(&[repo.join("keys/trusted")]).unwrap();
        let with_demo =
            TrustStore::new([own_key.clone()].into_iter().chain(demo.keys().to_vec())).unwrap();
        assert_eq!(
            super::sign::trusted_demo_key(&with_demo),
            Some(demo.keys()[0].fingerprint())
        );
        let own_only = TrustStore::new([own_key]).unwrap();
        assert_eq!(super::sign::trusted_demo_key(&own_only), None);
    }

    #[test]
    fn trusted_keys_others_may_write_are_found() {
        use skillhost::skills::signature::{SigningKey, TrustStore};
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let trusted = dir.path().join("trusted");
        std::fs::create_dir(&trusted).unwrap();
        let key = trusted.join("own.pub");
        std::fs::write(&key, SigningKey::generate().public_key().to_bytes()).unwrap();
        let mode = |path: &std::path::Path, mode| {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        mode(&trusted, 0o755);
        mode(&key, 0o644);
        let store = TrustStore::load(&[&trusted]).unwrap();
        assert!(super::sign::open_to_others(&store).is_empty());
        mode(&trusted, 0o775);
        mode(&key, 0o666);
        let writable = super::sign::Exposure::Writable;
        assert_eq!(
            super::sign::open_to_others(&store),
            [(key.clone(), writable), (trusted.clone(), writable)]
        );
        // Through a link, the directory of the file it points to counts.
        mode(&trusted, 0o755);
        mode(&key, 0o644);
        let linked = dir.path().join("linked");
        std::fs::create_dir(&linked).unwrap();
        std::os::unix::fs::symlink(&key, linked.join("own.pub")).unwrap();
        let store = TrustStore::load(&[&linked]).unwrap();
        assert!(super::sign::open_to_others(&store).is_empty());
        mode(&trusted, 0o777);
        assert_eq!(
            super::sign::open_to_others(&store),
            [(trusted.canonicalize().unwrap(), writable)]
        );
    }

    #[test]
    fn a_cause_the_message_already_quotes_is_said_once() {
        let io = || std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        #[derive(Debug, thiserror::Error)]
        #[error("cannot read /x: {0}")]
        struct Quotes(#[source] std::io::Error);
        let error = anyhow::Error::new(Quotes(io())).context("starting the host");
        assert_eq!(
            describe(&error),
            "starting the host: cannot read /x: no such file"
        );
        let error = anyhow::Error::new(io()).context("reading /x");
        assert_eq!(describe(&error), "reading /x: no such file");
    }
}
