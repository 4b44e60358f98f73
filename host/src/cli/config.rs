//! The `--config FILE` file of every command that runs a host (`serve`,
//! `run`, `skills`, `ask`, `chat`, `test`): one TOML file for the gateway,
//! the sandbox, the agent, the LLM and HTTP tools, so that a skill runs
//! from the command line as `serve` would run it. `skillhost.example.toml`
//! at the repository root documents every key.
//!
//! Precedence, highest first: command-line flags, environment variables,
//! the file, the defaults. Where skills, keys and the demo database live
//! (`--skills`, `--trust`, `--db`, ...) is given as for every other command,
//! and secrets never sit in the file: API keys come from
//! `SKILLHOST_API_KEYS`, `SKILLHOST_API_KEYS_FILE` and
//! `SKILLHOST_ADMIN_KEY`, the LLM key from
//! `OPENAI_API_KEY` or the variable `[llm] api_key_env` names, header
//! secrets of HTTP tools from `${VAR}`s.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroU64, NonZeroUsize};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use reqwest::header::{AUTHORIZATION, HeaderName};
use serde::Deserialize;

use skillhost::agent::llm::{ConfigError, ENV_API_KEY, ENV_BASE_URL, ENV_MODEL, LlmConfig};
use skillhost::agent::{AgentConfig, ConfirmationPolicy, MAX_EXPIRY};
use skillhost::embed::BuildError;
use skillhost::gateway::{CorsOrigin, KeyScopes, MAX_HEADER_TIMEOUT, RateLimits};
use skillhost::runtime::{Limits, RuntimeConfig, RuntimeConfigError};
use skillhost::scope::{Scope, ScopeKind};
use skillhost::skills::SkillName;
use skillhost::skills::signature::{Fingerprint, KeyScope};
use skillhost::tools::http::{HttpTool, HttpToolConfig};
use skillhost::tools::mcp::{McpConnection, McpServerConfig};
use skillhost::tools::{StandIn, Tool, ToolSpec};

use crate::cli::{HostArgs, LogFormat};

/// The whole file. Every section and key is optional; unknown keys are
/// errors, so a typo never silently falls back to a default.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    #[serde(default)]
    pub server: ServerSection,
    #[serde(default)]
    agent: AgentSection,
    #[serde(default)]
    confirmation: ConfirmationSection,
    #[serde(default)]
    llm: LlmSection,
    #[serde(default)]
    sandbox: SandboxSection,
    /// HTTP endpoints exposed as tools.
    #[serde(default)]
    pub tools: Vec<HttpToolConfig>,
    /// MCP servers whose tools are exposed.
    #[serde(default)]
    pub mcp_servers: Vec<McpServerConfig>,
    #[serde(default)]
    trust: TrustSection,
    /// The file as TOML, to tell which settings a later reading changed.
    #[serde(skip)]
    table: toml::Table,
    /// Where it was read from; empty for the defaults.
    #[serde(skip)]
    path: PathBuf,
}

/// `[trust]`: what the keys of `--trust` may sign.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TrustSection {
    /// `[[trust.scopes]]`: one key's scope each; a key without one signs any
    /// skill.
    #[serde(default)]
    scopes: Vec<ScopeSettings>,
}

/// One key's scope, as `[[trust.scopes]]` sets it ([`KeyScope`]).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScopeSettings {
    /// The key's fingerprint, as `skillhost keygen` and `serve` print it.
    key: String,
    skills: Option<Vec<String>>,
    tools: Option<Vec<String>>,
}

/// `[server]`: the gateway.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSection {
    pub listen: Option<SocketAddr>,
    pub body_limit: Option<usize>,
    pub request_timeout_secs: Option<u64>,
    pub header_timeout_secs: Option<NonZeroU64>,
    pub max_connections: Option<NonZeroUsize>,
    pub shutdown_grace_secs: Option<u64>,
    /// `--runs-dir`: where runs waiting for a person are kept.
    pub runs_dir: Option<PathBuf>,
    pub max_parked_runs: Option<usize>,
    pub max_parked_runs_per_principal: Option<usize>,
    pub allowed_hosts: Option<Vec<String>>,
    pub cors_origins: Option<Vec<CorsOrigin>>,
    /// See [`ServerSection::forward_headers`].
    forward_headers: Option<Vec<String>>,
    /// See [`ServerSection::scopes`].
    skill_scopes: Option<BTreeMap<String, Vec<String>>>,
    /// See [`ServerSection::scopes`].
    tool_scopes: Option<BTreeMap<String, Vec<String>>>,
    /// See [`ServerSection::rate_limits`].
    requests_per_minute: Option<NonZeroU32>,
    /// See [`ServerSection::rate_limits`].
    key_requests_per_minute: Option<BTreeMap<String, NonZeroU32>>,
    pub hot_reload: Option<bool>,
    /// Read before logging starts, see [`HostArgs::config_log_format`].
    pub log_format: Option<LogFormat>,
}

impl ServerSection {
    /// `forward_headers` as header names. `Authorization` is refused when
    /// the gateway has keys (`with_keys`): it carries them.
    pub fn forward_headers(&self, with_keys: bool) -> anyhow::Result<Vec<HeaderName>> {
        let mut names = Vec::new();
        for name in self.forward_headers.iter().flatten() {
            let name = HeaderName::try_from(name.as_str())
                .with_context(|| format!("[server] forward_headers: `{name}`"))?;
            if name == AUTHORIZATION && with_keys {
                anyhow::bail!(
                    "[server] forward_headers names Authorization, which carries this gateway's \
                     API keys: HTTP tools would send them on. Forward the end user's identity in \
                     a header of its own"
                );
            }
            names.push(name);
        }
        Ok(names)
    }
}

impl ServerSection {
    /// `[server.skill_scopes]` and `[server.tool_scopes]`: the skills and
    /// the tools each API key, by name, may use
    /// ([`GatewayConfig::scopes`](skillhost::gateway::GatewayConfig::scopes)).
    /// A blank name or pattern is refused; an empty list is a key that may
    /// use none.
    pub fn scopes(&self) -> anyhow::Result<KeyScopes> {
        Ok(KeyScopes {
            skills: scopes_of("skill_scopes", &self.skill_scopes)?,
            tools: scopes_of("tool_scopes", &self.tool_scopes)?,
        })
    }
}

impl ServerSection {
    /// `requests_per_minute` and `[server.key_requests_per_minute]`: how
    /// many requests a minute each API key, and the keys named there, may
    /// make ([`GatewayConfig::rate_limits`](skillhost::gateway::GatewayConfig::rate_limits)).
    /// A blank key name is refused (zero is, by its type).
    pub fn rate_limits(&self) -> anyhow::Result<RateLimits> {
        let keys = self.key_requests_per_minute.clone().unwrap_or_default();
        anyhow::ensure!(
            keys.keys().all(|key| !key.trim().is_empty()),
            "[server.key_requests_per_minute]: a key name is blank"
        );
        Ok(RateLimits {
            per_key: self.requests_per_minute,
            keys,
        })
    }
}

/// The scopes of `[server.<table>]`.
fn scopes_of<K: ScopeKind>(
    table: &str,
    entries: &Option<BTreeMap<String, Vec<String>>>,
) -> anyhow::Result<BTreeMap<String, Scope<K>>> {
    let mut scopes = BTreeMap::new();
    for (key, patterns) in entries.iter().flatten() {
        anyhow::ensure!(
            !key.trim().is_empty(),
            "[server.{table}]: a key name is blank"
        );
        anyhow::ensure!(
            patterns.iter().all(|pattern| !pattern.trim().is_empty()),
            "[server.{table}] {key}: a {} name is blank (`*` stands for any run of characters: \
             `order_*`)",
            K::NOUN
        );
        scopes.insert(key.clone(), Scope::only(patterns.iter().cloned()));
    }
    Ok(scopes)
}

/// `[agent]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentSection {
    system_prompt: Option<String>,
    max_rounds: Option<u32>,
    keep_public: Option<Vec<String>>,
}

/// `[confirmation]`: which calls wait for a person.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfirmationSection {
    require_for_writes: Option<bool>,
    #[serde(default)]
    auto_approve: Vec<String>,
    #[serde(default)]
    always_ask: Vec<String>,
    expiry_secs: Option<u64>,
    separate_approver: Option<bool>,
    approvers: Option<Vec<String>>,
    #[serde(default)]
    tool_approvers: BTreeMap<String, Vec<String>>,
}

/// `[llm]`: under `SKILLHOST_MODEL`, `OPENAI_BASE_URL`, `OPENAI_API_KEY`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct LlmSection {
    model: Option<String>,
    base_url: Option<String>,
    /// The environment variable holding the key.
    api_key_env: Option<String>,
}

/// `[sandbox]`: the limits of each invocation of a skill's steps, and the
/// instance pool. Defaults: [`Limits::default`], [`RuntimeConfig::default`].
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SandboxSection {
    execution_time_ms: Option<u64>,
    memory_mib: Option<usize>,
    tool_calls: Option<u32>,
    output_bytes: Option<usize>,
    log_lines: Option<u32>,
    max_instances: Option<u32>,
    /// `[sandbox.skills.NAME]`: one skill's limits, over the ones above.
    #[serde(default)]
    skills: BTreeMap<String, LimitSettings>,
}

/// Limits as a table sets them, each over the one it stands in for.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitSettings {
    execution_time_ms: Option<u64>,
    memory_mib: Option<usize>,
    tool_calls: Option<u32>,
    output_bytes: Option<usize>,
    log_lines: Option<u32>,
}

impl LimitSettings {
    /// `defaults` with these settings over them. A zero time or memory is an
    /// error naming the key, in `table`.
    fn over(&self, defaults: Limits, table: &str) -> anyhow::Result<Limits> {
        let at_least_one = |key: &str, value: Option<u64>| match value {
            Some(0) => Err(anyhow::anyhow!(
                "{table} {key} must be at least 1: with 0 no invocation could run"
            )),
            _ => Ok(()),
        };
        at_least_one("execution_time_ms", self.execution_time_ms)?;
        at_least_one("memory_mib", self.memory_mib.map(|mib| mib as u64))?;
        let memory_bytes = match self.memory_mib {
            Some(mib) => mib
                .checked_mul(1 << 20)
                .with_context(|| format!("{table} memory_mib is too large"))?,
            None => defaults.memory_bytes,
        };
        Ok(Limits {
            execution_time: self
                .execution_time_ms
                .map_or(defaults.execution_time, Duration::from_millis),
            memory_bytes,
            tool_calls: self.tool_calls.unwrap_or(defaults.tool_calls),
            output_bytes: self.output_bytes.unwrap_or(defaults.output_bytes),
            log_lines: self.log_lines.unwrap_or(defaults.log_lines),
        })
    }
}

impl HostArgs {
    /// The `--config` file; every setting at its default without one.
    pub fn config_file(&self) -> anyhow::Result<ConfigFile> {
        ConfigFile::load_or_default(self.config.as_deref())
    }

    /// The config file's `[server] log_format`, read before logging starts.
    /// A file that cannot be read or parsed gives `None`: the command
    /// reports its error when it loads the file.
    pub fn config_log_format(&self) -> Option<LogFormat> {
        let path = self.config.as_ref()?;
        ConfigFile::load(path).ok()?.server.log_format
    }
}

impl ConfigFile {
    /// The scopes of `[[trust.scopes]]`, by key. A key that is not a
    /// fingerprint, or is given twice, is an error.
    pub fn key_scopes(&self) -> anyhow::Result<Vec<(Fingerprint, KeyScope)>> {
        let mut scopes: Vec<(Fingerprint, KeyScope)> = Vec::new();
        for (index, settings) in self.trust.scopes.iter().enumerate() {
            let at = || format!("[[trust.scopes]] #{}", index + 1);
            let key: Fingerprint = settings
                .key
                .parse()
                .map_err(anyhow::Error::msg)
                .with_context(at)?;
            if scopes.iter().any(|(scoped, _)| *scoped == key) {
                anyhow::bail!("{}: key {key} has a scope already; give each key one", at());
            }
            let scope = KeyScope {
                skills: settings.skills.clone(),
                tools: settings.tools.clone(),
            };
            scopes.push((key, scope));
        }
        Ok(scopes)
    }

    /// The file at `path`; every setting at its default without one.
    pub fn load_or_default(path: Option<&Path>) -> anyhow::Result<Self> {
        path.map_or_else(|| Ok(Self::default()), Self::load)
    }

    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the config file {}", path.display()))?;
        let mut file =
            Self::parse(&text).with_context(|| format!("in the config file {}", path.display()))?;
        file.path = path.to_owned();
        Ok(file)
    }

    /// Where the file was read from; empty for the defaults.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The settings that differ between this file and the one read as
    /// `before`, sorted, each by its dotted key
    /// (`sandbox.execution_time_ms`; a whole array of tables by its name:
    /// `tools`) and as the file writes it (`[sandbox] execution_time_ms`,
    /// `[[tools]]`).
    pub fn changed_settings(&self, before: &toml::Table) -> Vec<(String, String)> {
        let empty = toml::Table::new();
        let mut changed = Vec::new();
        let keys: BTreeSet<&String> = before.keys().chain(self.table.keys()).collect();
        for key in keys {
            let (then, now) = (before.get(key), self.table.get(key));
            if then == now {
                continue;
            }
            let (then, now) = (
                then.and_then(toml::Value::as_table),
                now.and_then(toml::Value::as_table),
            );
            if then.is_some() || now.is_some() {
                let (then, now) = (then.unwrap_or(&empty), now.unwrap_or(&empty));
                let inner: BTreeSet<&String> = then.keys().chain(now.keys()).collect();
                for inner in inner
                    .into_iter()
                    .filter(|inner| then.get(*inner) != now.get(*inner))
                {
                    changed.push((format!("{key}.{inner}"), format!("[{key}] {inner}")));
                }
            } else {
                changed.push((key.clone(), format!("[[{key}]]")));
            }
        }
        changed
    }

    /// The file as TOML.
    pub fn table(&self) -> &toml::Table {
        &self.table
    }

    fn parse(text: &str) -> anyhow::Result<Self> {
        // toml's errors carry the line, the column and the key at fault.
        let mut file: Self = toml::from_str(text)?;
        file.table = toml::from_str(text)?;
        let confirmation = &file.confirmation;
        let approver_lists = confirmation
            .approvers
            .iter()
            .map(|approvers| ("approvers".to_owned(), approvers))
            .chain(
                confirmation
                    .tool_approvers
                    .iter()
                    .map(|(tool, approvers)| (format!("tool_approvers.{tool}"), approvers)),
            );
        for (key, approvers) in approver_lists {
            anyhow::ensure!(
                !approvers.is_empty(),
                "[confirmation] {key} names nobody, so no call it covers could ever be \
                 approved; name who may approve, or leave the key out to let anyone"
            );
            if let Some(blank) = approvers.iter().find(|name| name.trim().is_empty()) {
                anyhow::bail!("[confirmation] {key} has a blank name ({blank:?})");
            }
        }
        if let Some(secs) = file.server.header_timeout_secs {
            let most = MAX_HEADER_TIMEOUT.as_secs();
            anyhow::ensure!(
                secs.get() <= most,
                "[server] header_timeout_secs = {secs} is longer than the {most} s a connection \
                 may wait for a request's headers"
            );
        }
        if let Some(secs) = file.confirmation.expiry_secs {
            let most = MAX_EXPIRY.as_secs();
            anyhow::ensure!(
                secs <= most,
                "[confirmation] expiry_secs = {secs} is longer than a confirmation may wait \
                 ({most} s, 30 days)"
            );
        }
        Ok(file)
    }

    /// The agent's settings: the file over the defaults, `keep_public` (from
    /// the command line or the environment) over the file.
    pub fn agent_config(&self, keep_public: Option<Vec<String>>) -> AgentConfig {
        let mut config = AgentConfig::default();
        if let Some(prompt) = &self.agent.system_prompt {
            config.system_prompt.clone_from(prompt);
        }
        if let Some(rounds) = self.agent.max_rounds {
            config.max_rounds = rounds;
        }
        if let Some(tools) = keep_public.or_else(|| self.agent.keep_public.clone()) {
            config.disclosure.keep_public = tools.into_iter().collect();
        }
        config.confirmation = self.confirmation_policy();
        config
    }

    /// The `[confirmation]` policy: the file over the defaults.
    pub fn confirmation_policy(&self) -> ConfirmationPolicy {
        let confirmation = &self.confirmation;
        let mut policy = ConfirmationPolicy::default();
        if let Some(writes) = confirmation.require_for_writes {
            policy.require_for_writes = writes;
        }
        if let Some(secs) = confirmation.expiry_secs {
            policy.expiry = Duration::from_secs(secs);
        }
        if let Some(separate) = confirmation.separate_approver {
            policy.separate_approver = separate;
        }
        if let Some(approvers) = &confirmation.approvers {
            policy = policy.approvers(approvers);
        }
        for (tool, approvers) in &confirmation.tool_approvers {
            policy = policy.tool_approvers(tool, approvers);
        }
        for tool in &confirmation.auto_approve {
            policy = policy.auto_approve(tool);
        }
        for tool in &confirmation.always_ask {
            policy = policy.always_ask(tool);
        }
        policy
    }

    /// `runtime` with the file's `[sandbox]` settings over it, and each
    /// `[sandbox.skills.NAME]` over those for that skill. A zero where
    /// nothing could run (time, memory, instances) is an error naming the
    /// key, and so is a name no skill could have.
    pub fn runtime_config(&self, runtime: RuntimeConfig) -> anyhow::Result<RuntimeConfig> {
        let sandbox = &self.sandbox;
        if sandbox.max_instances == Some(0) {
            anyhow::bail!("[sandbox] max_instances must be at least 1: with 0 no skill could run");
        }
        let limits = LimitSettings {
            execution_time_ms: sandbox.execution_time_ms,
            memory_mib: sandbox.memory_mib,
            tool_calls: sandbox.tool_calls,
            output_bytes: sandbox.output_bytes,
            log_lines: sandbox.log_lines,
        }
        .over(runtime.limits, "[sandbox]")?;
        let mut skill_limits = runtime.skill_limits;
        for (name, settings) in &sandbox.skills {
            let table = format!("[sandbox.skills.{name}]");
            let skill =
                SkillName::new(name).with_context(|| format!("{table} is not a skill's name"))?;
            skill_limits.insert(skill, settings.over(limits, &table)?);
        }
        Ok(RuntimeConfig {
            limits,
            skill_limits,
            max_concurrent_instances: sandbox
                .max_instances
                .unwrap_or(runtime.max_concurrent_instances),
            ..runtime
        })
    }

    /// The skills `[sandbox.skills]` names.
    pub fn skills_with_limits(&self) -> impl Iterator<Item = &str> {
        self.sandbox.skills.keys().map(String::as_str)
    }

    /// The file's HTTP tools, their header secrets read from the
    /// environment.
    pub fn http_tools(&self) -> anyhow::Result<Vec<Arc<dyn Tool>>> {
        let env = |name: &str| std::env::var(name).ok();
        Ok(self
            .tools
            .iter()
            .map(|tool| {
                HttpTool::new(tool.clone(), env).map(|tool| Arc::new(tool) as Arc<dyn Tool>)
            })
            .collect::<Result<_, _>>()?)
    }

    /// The file's HTTP tools as stand-ins that are never called: skills
    /// naming them load and their manifests resolve, with no service
    /// reached and no secret needed. A call is refused saying `why`.
    pub fn http_tool_stand_ins(&self, why: &str) -> Vec<Arc<dyn Tool>> {
        self.tools
            .iter()
            .map(|tool| {
                let spec = ToolSpec {
                    name: tool.name.clone(),
                    description: tool.description.clone(),
                    parameters: tool.parameters.clone(),
                    access: tool.access,
                };
                Arc::new(StandIn::new(spec, why)) as Arc<dyn Tool>
            })
            .collect()
    }

    /// The tools of the file's MCP servers, each server asked for them (at
    /// once), their header secrets read from the environment.
    pub async fn mcp_tools(&self) -> anyhow::Result<Vec<Arc<dyn Tool>>> {
        let env = |name: &str| std::env::var(name).ok();
        let connected = McpConnection::open_all(&self.mcp_servers, env).await?;
        Ok(connected.into_iter().flat_map(|(_, tools)| tools).collect())
    }

    /// The tools of the file's MCP servers as stand-ins that are never
    /// called: the servers are asked what their tools are, and a call is
    /// refused saying `why`.
    pub async fn mcp_tool_stand_ins(&self, why: &str) -> anyhow::Result<Vec<Arc<dyn Tool>>> {
        Ok(self
            .mcp_tools()
            .await?
            .into_iter()
            .map(|tool| Arc::new(StandIn::new(tool.spec().clone(), why)) as Arc<dyn Tool>)
            .collect())
    }

    /// The LLM as the process environment, then the file, configure it.
    pub fn llm_config(&self) -> Result<LlmConfig, ConfigError> {
        LlmConfig::from_lookup(self.llm_lookup(|name: &str| std::env::var(name).ok()))
    }

    /// The LLM's variables: the environment, then the file.
    pub fn llm_lookup<E: Fn(&str) -> Option<String>>(
        &self,
        env: E,
    ) -> impl Fn(&str) -> Option<String> + use<E> {
        let llm = self.llm.clone();
        move |name| {
            env(name)
                .filter(|value| !value.trim().is_empty())
                .or_else(|| match name {
                    ENV_MODEL => llm.model.clone(),
                    ENV_BASE_URL => llm.base_url.clone(),
                    ENV_API_KEY => llm.api_key_env.as_deref().and_then(&env),
                    _ => None,
                })
        }
    }
}

/// `error` with the config keys that size the sandbox named before it, when
/// it is the sandbox refusing its size (the library's message names its own
/// fields, not these keys).
pub fn name_sandbox_keys(error: anyhow::Error) -> anyhow::Error {
    let refused = |error: &anyhow::Error| error.is::<RuntimeConfigError>();
    let built = matches!(
        error.downcast_ref::<BuildError>(),
        Some(BuildError::Runtime(inner)) if refused(inner)
    );
    if built || refused(&error) {
        error.context("the sandbox is sized by `[sandbox] max_instances` and `memory_mib` in the --config file")
    } else {
        error
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    const EXAMPLE: &str = include_str!("../../../skillhost.example.toml");

    /// The example's commented-out block that starts at `heading`, up to
    /// the next blank line, uncommented.
    fn uncommented(heading: &str) -> String {
        EXAMPLE
            .lines()
            .skip_while(|line| *line != heading)
            .take_while(|line| !line.is_empty())
            .map(|line| format!("{}\n", line.strip_prefix("# ").unwrap_or(line)))
            .collect()
    }

    #[test]
    fn the_example_file_parses_and_says_what_it_shows() {
        let file = ConfigFile::parse(EXAMPLE).unwrap();
        assert_eq!(file.server.listen, Some("127.0.0.1:8080".parse().unwrap()));
        let agent = file.agent_config(None);
        assert!(agent.disclosure.keep_public.contains("queryOrder"));
        assert_eq!(file.tools.len(), 2);
        assert_eq!(file.server.log_format, Some(LogFormat::Text));
        assert_eq!(
            file.server.max_parked_runs,
            Some(skillhost::gateway::DEFAULT_MAX_PARKED_RUNS)
        );
        assert_eq!(file.server.max_parked_runs_per_principal, None);
        assert_eq!(
            file.server.header_timeout_secs.map(|secs| secs.get()),
            Some(skillhost::gateway::DEFAULT_HEADER_TIMEOUT.as_secs())
        );
        assert_eq!(
            file.server.max_connections,
            Some(skillhost::gateway::DEFAULT_MAX_CONNECTIONS)
        );
        // The example's secrets are environment variables, not values.
        assert!(!EXAMPLE.contains("sk-"));
    }

    /// The example's `[server.skill_scopes]` and `[server.tool_scopes]`,
    /// commented out there, read as they say; a blank name is an error.
    #[test]
    fn the_examples_scopes_read_once_uncommented() {
        let block = uncommented("# [server.skill_scopes]") + &uncommented("# [server.tool_scopes]");
        let scopes = ConfigFile::parse(&block).unwrap().server.scopes().unwrap();
        assert_eq!(Vec::from_iter(scopes.key_names()), ["support-desk"]);
        let skills = &scopes.skills["support-desk"];
        assert!(skills.allows("inquireOrderStatus") && skills.allows("order_change"));
        assert!(!skills.allows("processRefund"));
        let tools = &scopes.tools["support-desk"];
        assert!(tools.allows("query_member") && tools.allows("cancel_order"));
        assert!(!tools.allows("submit_ticket") && !tools.allows("change_address"));
        for (table, noun) in [("skill_scopes", "skill"), ("tool_scopes", "tool")] {
            let blank =
                ConfigFile::parse(&format!("[server.{table}]\ndesk = [\"order_*\", \" \"]\n"))
                    .unwrap();
            let error = blank.server.scopes().unwrap_err().to_string();
            assert!(
                error.contains(&format!("[server.{table}] desk: a {noun} name is blank")),
                "{error}"
            );
        }
    }

    /// The example's request rates, commented out there, read as they
    /// say; a blank key name or a zero rate is an error.
    #[test]
    fn the_examples_request_rates_read_once_uncommented() {
        let every = EXAMPLE
            .lines()
            .find_map(|line| line.strip_prefix("# requests_per_minute"))
            .unwrap();
        let block = format!(
            "[server]\nrequests_per_minute{every}\n{}",
            uncommented("# [server.key_requests_per_minute]")
        );
        let limits = ConfigFile::parse(&block)
            .unwrap()
            .server
            .rate_limits()
            .unwrap();
        assert_eq!(limits.per_key.map(NonZeroU32::get), Some(600));
        let keys = Vec::from_iter(
            limits
                .keys
                .iter()
                .map(|(name, rate)| (name.as_str(), rate.get())),
        );
        assert_eq!(keys, [("nightly-batch", 6000)]);
        let blank = ConfigFile::parse("[server.key_requests_per_minute]\n\" \" = 5\n").unwrap();
        let error = blank.server.rate_limits().unwrap_err().to_string();
        assert!(error.contains("a key name is blank"), "{error}");
        let zero = ConfigFile::parse("[server]\nrequests_per_minute = 0\n").unwrap_err();
        assert!(
            format!("{zero:#}").contains("requests_per_minute"),
            "{zero:#}"
        );
    }

    /// The example's `[[trust.scopes]]`, commented out there, reads as it
    /// says; a key given twice is an error.
    #[test]
    fn the_examples_key_scope_reads_once_uncommented() {
        let block = uncommented("# [[trust.scopes]]");
        let scopes = ConfigFile::parse(&block).unwrap().key_scopes().unwrap();
        let [(key, scope)] = scopes.as_slice() else {
            panic!("{block}");
        };
        assert_eq!(key.to_string(), "1aa1e92e86658033a90ecf0b");
        assert_eq!(scope.skills, Some(vec!["vendor_*".to_owned()]));
        assert_eq!(scope.tools.as_ref().map(Vec::len), Some(3));
        let twice = ConfigFile::parse(&format!("{block}{block}")).unwrap();
        let error = twice.key_scopes().unwrap_err().to_string();
        assert!(
            error.contains("#2: key 1aa1e92e86658033a90ecf0b has a scope already"),
            "{error}"
        );
    }

    /// The example's `[[mcp_servers]]`, one reached at a url and one
    /// started as a command, commented out there (there are no such
    /// servers), read as they say; a misspelt key is an
    /// error naming it.
    #[test]
    fn the_examples_mcp_server_reads_once_uncommented() {
        let block = uncommented("# [[mcp_servers]]");
        let file = ConfigFile::parse(&block).unwrap();
        let [server, started] = file.mcp_servers.as_slice() else {
            panic!("{block}");
        };
        assert_eq!(server.name, "crm");
        assert_eq!(server.read, ["lookupOrderNotes"]);
        assert_eq!(server.timeout_secs, Some(10));
        assert_eq!(server.forward_headers, ["X-User-Id"]);
        assert_eq!(started.command.as_deref(), Some("npx"));
        assert_eq!(started.args.len(), 3);
        assert_eq!(started.env["DOCS_TOKEN"], "${DOCS_TOKEN}");
        let error = ConfigFile::parse(&block.replace("read =", "reads =")).unwrap_err();
        assert!(
            error.to_string().contains("unknown field `reads`"),
            "{error}"
        );
    }

    #[test]
    fn changed_settings_are_named_as_the_file_writes_them() {
        let before = ConfigFile::parse(
            "[sandbox]\nexecution_time_ms = 100\n\n[[tools]]\nname = \"a\"\n\
             description = \"A.\"\naccess = \"read\"\nurl = \"http://localhost/a\"\n\
             parameters = { type = \"object\" }\n",
        )
        .unwrap();
        let same = ConfigFile::parse(
            "[[tools]]\nurl = \"http://localhost/a\"\nname = \"a\"\ndescription = \"A.\"\n\
             access = \"read\"\nparameters = { type = \"object\" }\n\
             [sandbox]\nexecution_time_ms = 100\n",
        )
        .unwrap();
        assert_eq!(same.changed_settings(before.table()), []);
        let after = ConfigFile::parse(
            "[sandbox]\nexecution_time_ms = 200\nmemory_mib = 32\n\n\
             [trust]\nscopes = []\n\n[llm]\nmodel = \"m\"\n",
        )
        .unwrap();
        let changed = after.changed_settings(before.table());
        let keys: Vec<(&str, &str)> = changed
            .iter()
            .map(|(key, shown)| (key.as_str(), shown.as_str()))
            .collect();
        assert_eq!(
            keys,
            [
                ("llm.model", "[llm] model"),
                ("sandbox.execution_time_ms", "[sandbox] execution_time_ms"),
                ("sandbox.memory_mib", "[sandbox] memory_mib"),
                ("tools", "[[tools]]"),
                ("trust.scopes", "[trust] scopes"),
            ]
        );
    }

    #[test]
    fn sandbox_settings_go_over_the_defaults_and_zeros_are_refused() {
        let file = ConfigFile::parse(
            "[sandbox]\nexecution_time_ms = 500\nmemory_mib = 16\nmax_instances = 4\n",
        )
        .unwrap();
        let config = file.runtime_config(RuntimeConfig::default()).unwrap();
        assert_eq!(config.limits.execution_time, Duration::from_millis(500));
        assert_eq!(config.limits.memory_bytes, 16 << 20);
        assert_eq!(config.max_concurrent_instances, 4);
        assert_eq!(config.limits.tool_calls, Limits::default().tool_calls);
        let example = ConfigFile::parse(EXAMPLE).unwrap();
        let config = example.runtime_config(RuntimeConfig::default()).unwrap();
        assert_eq!(
            config.limits,
            Limits::default(),
            "the example shows the defaults"
        );
        assert_eq!(
            config.max_concurrent_instances,
            RuntimeConfig::default().max_concurrent_instances
        );
        for key in ["execution_time_ms", "memory_mib", "max_instances"] {
            let file = ConfigFile::parse(&format!("[sandbox]\n{key} = 0\n")).unwrap();
            let error = file.runtime_config(RuntimeConfig::default()).unwrap_err();
            assert!(error.to_string().contains(key), "{error}");
        }
    }

    #[test]
    fn a_skills_own_limits_go_over_the_sandboxs_and_bad_ones_are_errors_naming_the_table() {
        let file = ConfigFile::parse(
            "[sandbox]\nexecution_time_ms = 500\ntool_calls = 8\n\
             [sandbox.skills.processRefund]\nmemory_mib = 128\ntool_calls = 2\n",
        )
        .unwrap();
        let config = file.runtime_config(RuntimeConfig::default()).unwrap();
        let refund = config.limits_for(&SkillName::new("processRefund").unwrap());
        assert_eq!(refund.memory_bytes, 128 << 20);
        assert_eq!(refund.tool_calls, 2);
        assert_eq!(
            refund.execution_time,
            Duration::from_millis(500),
            "what the skill's table leaves out comes from [sandbox]"
        );
        let other = config.limits_for(&SkillName::new("inquireOrderStatus").unwrap());
        assert_eq!(other, config.limits);
        assert_eq!(config.widest_limits().memory_bytes, 128 << 20);
        for (table, message) in [
            (
                "[sandbox.skills.processRefund]\nmemory_mib = 0\n",
                "[sandbox.skills.processRefund] memory_mib must be at least 1",
            ),
            (
                "[sandbox.skills.\"process refund\"]\ntool_calls = 1\n",
                "[sandbox.skills.process refund] is not a skill's name",
            ),
            (
                "[sandbox.skills.load_skill]\ntool_calls = 1\n",
                "is reserved by the host",
            ),
        ] {
            let file = ConfigFile::parse(table).unwrap();
            let error = file.runtime_config(RuntimeConfig::default()).unwrap_err();
            assert!(format!("{error:#}").contains(message), "{error:#}");
        }
        let error =
            ConfigFile::parse("[sandbox.skills.processRefund]\nmax_instances = 2\n").unwrap_err();
        assert!(error.to_string().contains("max_instances"), "{error}");
    }

    #[test]
    fn connection_limits_of_zero_or_a_header_timeout_past_an_hour_are_errors_naming_the_key() {
        for (text, words) in [
            ("max_connections = 0", "max_connections"),
            ("header_timeout_secs = 0", "header_timeout_secs"),
            (
                "header_timeout_secs = 3601",
                "header_timeout_secs = 3601 is longer",
            ),
        ] {
            let error = ConfigFile::parse(&format!("[server]\n{text}\n")).unwrap_err();
            assert!(format!("{error:#}").contains(words), "{error:#}");
        }
        let file = ConfigFile::parse("[server]\nheader_timeout_secs = 3600\n").unwrap();
        assert_eq!(file.server.header_timeout_secs.map(|s| s.get()), Some(3600));
    }

    #[test]
    fn a_confirmation_expiry_past_30_days_is_an_error_naming_the_key() {
        let error =
            ConfigFile::parse("[confirmation]\nexpiry_secs = 18446744073709551615\n").unwrap_err();
        assert!(error.to_string().contains("expiry_secs"), "{error}");
        let file = ConfigFile::parse("[confirmation]\nexpiry_secs = 2592000\n").unwrap();
        let policy = file.agent_config(None).confirmation;
        assert_eq!(policy.expiry, MAX_EXPIRY);
    }

    #[test]
    fn approvers_are_read_and_a_list_naming_nobody_is_an_error_naming_the_key() {
        let file = ConfigFile::parse(
            "[confirmation]\napprovers = [\"supervisor\"]\n\
             [confirmation.tool_approvers]\napplyRefund = [\"finance\", \"cfo\"]\n",
        )
        .unwrap();
        let policy = file.agent_config(None).confirmation;
        assert_eq!(
            policy.approvers_of("applyRefund"),
            Some(&["cfo".to_owned(), "finance".to_owned()].into())
        );
        assert_eq!(
            policy.approvers_of("cancel_order"),
            Some(&["supervisor".to_owned()].into())
        );
        for (text, key) in [
            ("approvers = []", "approvers names nobody"),
            (
                "tool_approvers = { applyRefund = [] }",
                "tool_approvers.applyRefund names nobody",
            ),
            ("approvers = [\" \"]", "approvers has a blank name"),
        ] {
            let error = ConfigFile::parse(&format!("[confirmation]\n{text}\n")).unwrap_err();
            assert!(error.to_string().contains(key), "{error}");
        }
        let example = ConfigFile::parse(EXAMPLE).unwrap().agent_config(None);
        assert_eq!(example.confirmation.approvers_of("applyRefund"), None);
    }

    #[test]
    fn forwarded_headers_are_header_names_and_never_the_gateways_key() {
        let server = |names: &str| {
            ConfigFile::parse(&format!("[server]\nforward_headers = {names}\n"))
                .unwrap()
                .server
        };
        let names = server(r#"["X-User-Id", "Authorization"]"#);
        assert_eq!(
            names.forward_headers(false).unwrap(),
            [HeaderName::from_static("x-user-id"), AUTHORIZATION]
        );
        let error = names.forward_headers(true).unwrap_err().to_string();
        assert!(error.contains("carries this gateway's API keys"), "{error}");
        let error = server(r#"["X User"]"#).forward_headers(false).unwrap_err();
        assert!(format!("{error:#}").contains("`X User`"), "{error:#}");
        assert!(
            ConfigFile::parse(EXAMPLE)
                .unwrap()
                .server
                .forward_headers(true)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn unknown_keys_are_errors_naming_the_key() {
        let error = ConfigFile::parse("[server]\nlisen = \"127.0.0.1:1\"\n").unwrap_err();
        let text = format!("{error:#}");
        assert!(text.contains("lisen") && text.contains("line 2"), "{text}");
    }

    #[test]
    fn a_log_format_other_than_text_or_json_is_an_error_naming_the_key() {
        let error = ConfigFile::parse("[server]\nlog_format = \"xml\"\n").unwrap_err();
        let text = format!("{error:#}");
        assert!(
            text.contains("log_format") && text.contains("json"),
            "{text}"
        );
    }

    #[test]
    fn the_environment_overrides_the_file() {
        let file = ConfigFile::parse(
            "[llm]\nmodel = \"file-model\"\nbase_url = \"http://file/v1\"\napi_key_env = \"MY_KEY\"\n",
        )
        .unwrap();
        let env: HashMap<&str, &str> = [(ENV_MODEL, "env-model"), ("MY_KEY", "k")].into();
        let lookup = file.llm_lookup(move |name| env.get(name).map(|v| (*v).to_owned()));
        assert_eq!(lookup(ENV_MODEL).as_deref(), Some("env-model"));
        assert_eq!(lookup(ENV_BASE_URL).as_deref(), Some("http://file/v1"));
        assert_eq!(lookup(ENV_API_KEY).as_deref(), Some("k"));
        let keep = file
            .agent_config(Some(vec!["a".into()]))
            .disclosure
            .keep_public;
        assert_eq!(keep.into_iter().collect::<Vec<_>>(), ["a"]);
    }
}
