//! `skillhost tools`: the tools a skill may call or unlock, where each
//! comes from, and whether a call of it waits for a person.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use serde_json::json;

use skillhost::text::clip;
use skillhost::tools::demo::{self, DemoDb};
use skillhost::tools::mcp::McpConnection;
use skillhost::tools::{Access, Tool, ToolRegistry, ToolSpec};

use super::config::ConfigFile;

/// `skillhost tools`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "A skill's manifest names its tools by these names: `tools`, the ones its steps and \
    sub-agent call; `unlocks`, the ones load_skill shows the main agent. Each MCP server is asked for \
    its tools, as serve asks it at start; HTTP tools are listed as declared, their service not reached."
)]
pub struct ToolsArgs {
    /// A config file whose HTTP tools ([[tools]]) and MCP servers
    /// ([[mcp_servers]]) are listed beside the demo shop's, under its
    /// confirmation policy.
    #[arg(long, value_name = "FILE", env = "SKILLHOST_CONFIG")]
    config: Option<PathBuf>,
    /// Print a JSON array: [{name, access, approval, source, server?,
    /// description, parameters}], `source` being demo, http or mcp.
    #[arg(long)]
    json: bool,
}

/// Where a tool comes from.
enum Source {
    Demo,
    Http,
    Mcp(String),
}

impl Source {
    fn kind(&self) -> &'static str {
        match self {
            Self::Demo => "demo",
            Self::Http => "http",
            Self::Mcp(_) => "mcp",
        }
    }

    fn shown(&self) -> String {
        match self {
            Self::Demo => "demo shop".to_owned(),
            Self::Http => "HTTP tool".to_owned(),
            Self::Mcp(server) => format!("MCP {server}"),
        }
    }
}

/// Characters of a description's first line the listing shows at most.
const SHOWN_DESCRIPTION: usize = 72;

pub async fn tools(args: &ToolsArgs) -> anyhow::Result<ExitCode> {
    let file = ConfigFile::load_or_default(args.config.as_deref())?;
    let policy = file.agent_config(None).confirmation;
    // Registered as a host registers them: a name two sources give is the
    // error the host would stop with.
    let mut registered = ToolRegistry::new();
    demo::register_all(&mut registered, Arc::new(DemoDb::in_memory()?))?;
    let mut listed: Vec<(Source, ToolSpec)> = registered
        .specs()
        .map(|spec| (Source::Demo, spec.clone()))
        .collect();
    let mut declared: Vec<(Source, Arc<dyn Tool>)> = file
        .http_tool_stand_ins("only listed")
        .into_iter()
        .map(|tool| (Source::Http, tool))
        .collect();
    let env = |name: &str| std::env::var(name).ok();
    for (server, tools) in McpConnection::open_all(&file.mcp_servers, env).await? {
        let source = || Source::Mcp(server.server().to_owned());
        declared.extend(tools.into_iter().map(|tool| (source(), tool)));
    }
    for (source, tool) in declared {
        listed.push((source, tool.spec().clone()));
        registered.register(tool).context("registering tools")?;
    }
    listed.sort_by(|(_, a), (_, b)| a.name.cmp(&b.name));
    if args.json {
        let tools: Vec<_> = listed
            .iter()
            .map(|(source, spec)| {
                let mut tool = json!({
                    "name": spec.name,
                    "access": spec.access,
                    "approval": policy.requires(spec),
                    "source": source.kind(),
                    "description": spec.description,
                    "parameters": spec.parameters,
                });
                if let Source::Mcp(server) = source {
                    tool["server"] = json!(server);
                }
                tool
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&tools)?);
        return Ok(ExitCode::SUCCESS);
    }
    let width = listed
        .iter()
        .map(|(_, spec)| spec.name.len())
        .max()
        .unwrap_or(0);
    println!(
        "{} tool(s); \"asks\": a call waits for a person's approval",
        listed.len()
    );
    for (source, spec) in &listed {
        let access = match spec.access {
            Access::Read => "read ",
            Access::Write => "write",
        };
        let approval = if policy.requires(spec) {
            "asks"
        } else {
            "    "
        };
        println!(
            "  {:width$}  {access}  {approval}  {:14}  {}",
            spec.name,
            source.shown(),
            clip(
                spec.description.lines().next().unwrap_or(""),
                SHOWN_DESCRIPTION
            ),
        );
    }
    Ok(ExitCode::SUCCESS)
}
