//! Command-line interface: argument parsing and one module per command group.

mod ask;
mod pack;
mod serve;
mod sign;
mod skills;
mod test;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};

use skillhost::runtime::{Runtime, RuntimeConfig};
use skillhost::skills::SkillRegistry;
use skillhost::skills::signature::SignaturePolicy;
use skillhost::tools::ToolRegistry;
use skillhost::tools::demo::{self, DemoDb};

#[derive(Debug, Parser)]
#[command(
    name = "skillhost",
    version,
    about = "Host for LLM-agent skills shipped as signed WebAssembly components"
)]
pub struct Cli {
    /// Log more: -v for info, -vv for debug (or set SKILLHOST_LOG).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    #[command(subcommand)]
    command: Command,
}

/// Where skills and the demo database live; shared by every command that
/// loads skills.
#[derive(Debug, clap::Args)]
struct HostArgs {
    /// Directory of skill components (*.wasm).
    #[arg(long, default_value = "skills", env = "SKILLHOST_SKILLS")]
    skills: PathBuf,
    /// SQLite file of the demo shop; created and seeded when missing.
    #[arg(long, default_value = "skillhost-demo.db", env = "SKILLHOST_DB")]
    db: PathBuf,
    #[command(flatten)]
    trust: sign::TrustArgs,
    /// DEVELOPMENT ONLY: load skills without verifying their signatures.
    /// Every such load logs a warning.
    #[arg(long)]
    allow_unsigned: bool,
    /// Compilation cache: compiled skills are kept here, keyed by their
    /// content, so a restart does not compile unchanged skills again.
    /// [default: $XDG_CACHE_HOME/skillhost, else ~/.cache/skillhost]
    #[arg(long, env = "SKILLHOST_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    /// Use no compilation cache: compile every skill at start.
    #[arg(long, conflicts_with = "cache_dir")]
    no_cache: bool,
}

impl HostArgs {
    fn signature_policy(&self) -> anyhow::Result<SignaturePolicy> {
        if self.allow_unsigned {
            eprintln!(
                "WARNING: --allow-unsigned: skill signatures are NOT verified; never use this outside development"
            );
            return Ok(SignaturePolicy::AllowUnsigned);
        }
        Ok(SignaturePolicy::Require(self.trust.store()?))
    }

    /// The runtime these arguments ask for: the library's defaults plus the
    /// compilation cache (none when no cache directory can be found).
    fn runtime_config(&self) -> RuntimeConfig {
        let cache_dir = if self.no_cache {
            None
        } else {
            self.cache_dir.clone().or_else(default_cache_dir)
        };
        RuntimeConfig {
            cache_dir,
            ..RuntimeConfig::default()
        }
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
    /// Run a skill's deterministic steps against the demo tools and print the result.
    Run {
        /// The skill's name, e.g. processRefund.
        skill: String,
        /// The skill's input as JSON, e.g. '{"orderId":"88231","reason":"broken"}'.
        #[arg(long, default_value = "{}")]
        input: String,
        /// Print the whole report (result, tool calls, timing) as JSON.
        #[arg(long)]
        json: bool,
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
    /// component; sign it with `skillhost sign` before loading it in a host
    /// that requires signatures.
    Pack(pack::PackArgs),
    /// Ask the main agent once: prints each round (functions offered, calls
    /// made, inside skills too) and the answer; asks y/n for write tools.
    Ask(ask::AskArgs),
    /// Run the test cases skills carry in their manifests and report
    /// pass/fail per case (write tools auto-approved on a scratch shop).
    Test(test::TestArgs),
}

pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Run {
            skill,
            input,
            json,
            host,
        } => {
            let loaded = LoadedHost::load(&host).await?;
            skills::run(&loaded, &skill, &input, json).await
        }
        Command::Skills { json, host } => {
            let loaded = LoadedHost::load(&host).await?;
            skills::list(&loaded.skills, json)
        }
        Command::Serve(args) => serve::serve(&args).await,
        Command::Keygen(args) => sign::keygen(&args),
        Command::Sign(args) => sign::sign(&args),
        Command::Verify(args) => sign::verify(&args),
        Command::Pack(args) => pack::pack(&args),
        Command::Ask(args) => ask::ask(&args).await,
        Command::Test(args) => test::test(&args).await,
    }
}

/// The skills of a directory over the demo tools.
struct LoadedHost {
    skills: SkillRegistry,
    tools: Arc<ToolRegistry>,
}

impl LoadedHost {
    async fn load(args: &HostArgs) -> anyhow::Result<Self> {
        let db = Arc::new(DemoDb::open(&args.db)?);
        let mut tools = ToolRegistry::new();
        demo::register_all(&mut tools, db)?;
        let tools = Arc::new(tools);
        let policy = args.signature_policy()?;
        let runtime = Runtime::new(args.runtime_config())?;
        let skills = SkillRegistry::load_dir(runtime, tools.clone(), policy, &args.skills).await?;
        Ok(Self { skills, tools })
    }
}

pub fn init_tracing(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("SKILLHOST_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn command_line_definition_is_consistent() {
        super::Cli::command().debug_assert();
    }
}
