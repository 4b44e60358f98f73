//! SIGHUP: `serve` and `mcp` read again what they were started from,
//! without the restart that would withdraw every run waiting for an answer
//! (or end an MCP client's session) — the config file (its HTTP tools, MCP
//! servers, agent settings, confirmation policy, LLM, key scopes and
//! sandbox limits but memory take effect; any other setting changed is
//! said to wait for a restart), the trust store (a key added, rotated or
//! revoked), the tools of the MCP servers (one at a url may not be able to
//! say that theirs changed), the skills directory (for changes hot reload
//! did not report, or a host running without it), and then what the
//! command reads besides (serve: its API keys file and the config file's
//! API key scopes).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use skillhost::agent::llm::ConfigError;
use skillhost::embed::SkillHost;
use skillhost::runtime::{Limits, RuntimeConfig};
use skillhost::skills::{ReloadOutcome, SkillName};
use skillhost::tools::ToolRegistry;
use skillhost::tools::http::HttpToolConfig;
use skillhost::tools::mcp::McpServerConfig;

use crate::cli::config::ConfigFile;
use crate::cli::console;
use crate::cli::trust::Trust;

/// The settings of the config file every long-running command reads again
/// at a SIGHUP, by dotted key: its HTTP tools and MCP servers, the agent's
/// settings, its confirmation policy and its LLM, its key scopes, and the
/// sandbox's limits (the memory limits but said to wait for a restart).
const FOLLOWED: [&str; 7] = [
    "tools",
    "mcp_servers",
    "agent",
    "confirmation",
    "llm",
    "trust.scopes",
    "sandbox",
];

/// Settings under those [`FOLLOWED`] that take effect only at a restart:
/// the size of the instance pool.
const RESTART_ONLY: [&str; 1] = ["sandbox.max_instances"];

/// The config file of a long-running command, as a SIGHUP reads it again.
pub(super) struct FollowedConfig {
    path: PathBuf,
    /// The file as read at the start: what the settings that take effect
    /// only at a restart are set to.
    started: toml::Table,
    /// The HTTP tools in place, as declared.
    http_tools: Vec<HttpToolConfig>,
    /// The MCP servers in place, as declared.
    mcp_servers: Vec<McpServerConfig>,
    /// `--keep-public` (or its variable), over the file's.
    keep_public: Option<Vec<String>>,
    /// The settings, by dotted key, the command also reads again at a
    /// SIGHUP, or never reads.
    also_followed: &'static [&'static str],
}

impl FollowedConfig {
    /// The file at `path`, read at the start as `file`, under the
    /// command's `keep_public`; the command also follows, or never reads,
    /// the settings `also_followed` names.
    pub(super) fn new(
        path: PathBuf,
        file: &ConfigFile,
        keep_public: Option<Vec<String>>,
        also_followed: &'static [&'static str],
    ) -> Self {
        Self {
            path,
            started: file.table().clone(),
            http_tools: file.tools.clone(),
            mcp_servers: file.mcp_servers.clone(),
            keep_public,
            also_followed,
        }
    }

    /// Reads the file again and puts in force in `host` what it follows
    /// (see [`FOLLOWED`]), each part on its own: a part that does not check
    /// keeps what is in force, saying why. Every other setting changed
    /// since the start is said to wait for a restart. A file that does not
    /// read or parse changes nothing (`None`), saying why.
    async fn read_again(&mut self, host: &SkillHost) -> Option<ConfigFile> {
        let file = match ConfigFile::load(&self.path) {
            Ok(file) => file,
            Err(error) => {
                let why = format!("{error:#}; the settings in force stay");
                reloaded(host, "config_file", Err(why));
                return None;
            }
        };
        self.replace_http_tools(host, &file).await;
        self.replace_mcp_servers(host, &file).await;
        // After the tools: the settings may name a tool just added.
        self.replace_agent_config(host, &file);
        self.replace_llm(host, &file);
        let memory_waiting = self.replace_limits(host, &file);
        let followed = FOLLOWED.iter().chain(self.also_followed);
        let followed: Vec<&str> = followed.copied().collect();
        let waiting: Vec<String> = file
            .changed_settings(&self.started)
            .into_iter()
            .filter(|(key, _)| {
                RESTART_ONLY.contains(&key.as_str())
                    || !followed
                        .iter()
                        .any(|followed| key == followed || key.starts_with(&format!("{followed}.")))
            })
            .map(|(_, shown)| shown)
            .chain(memory_waiting)
            .collect();
        if !waiting.is_empty() {
            console::warn(&format!(
                "{}: {} changed since the start, which takes effect only at a restart",
                self.path.display(),
                waiting.join(", ")
            ));
        }
        Some(file)
    }

    /// Puts `file`'s HTTP tools in place of those declared before, when
    /// they differ, and says what changed. Tools that do not build (a
    /// header's secret is not set) or clash with another tool's name leave
    /// the tools in force, saying why.
    async fn replace_http_tools(&mut self, host: &SkillHost, file: &ConfigFile) {
        if file.tools == self.http_tools {
            return;
        }
        let tools = match file.http_tools() {
            Ok(tools) => tools,
            Err(error) => {
                let why = format!("{error:#}; the HTTP tools in force stay");
                return reloaded(host, "http_tools", Err(why));
            }
        };
        let replaced = host.update_tools(|current| {
            let mut next = ToolRegistry::clone(current);
            for declared in &self.http_tools {
                next.remove(&declared.name);
            }
            tools.into_iter().try_for_each(|tool| next.register(tool))?;
            anyhow::Ok(next)
        });
        let reloads = match replaced.await {
            Ok(replaced) => replaced.reloads,
            Err(error) => {
                let why = format!(
                    "[[tools]] in {}: {error}; the HTTP tools in force stay",
                    self.path.display()
                );
                return reloaded(host, "http_tools", Err(why));
            }
        };
        let said = format!(
            "HTTP tools read again from {}: {}; {} skill file(s) changed with them",
            self.path.display(),
            changes(&self.http_tools, &file.tools, |tool| &tool.name),
            reloads.len(),
        );
        reloaded(host, "http_tools", Ok(said));
        self.http_tools.clone_from(&file.tools);
    }

    /// Replaces the MCP servers with `file`'s, when they differ, and says
    /// what changed. A server that cannot be connected, or a tool that
    /// clashes with another tool's name, leaves the servers in force,
    /// saying why.
    async fn replace_mcp_servers(&mut self, host: &SkillHost, file: &ConfigFile) {
        if file.mcp_servers == self.mcp_servers {
            return;
        }
        let said = match host.replace_mcp_servers(&file.mcp_servers).await {
            Ok(replaced) => {
                let said = format!(
                    "MCP servers read again from {}: {}; {} skill file(s) changed with them",
                    self.path.display(),
                    changes(&self.mcp_servers, &file.mcp_servers, |server| {
                        &server.name
                    }),
                    replaced.reloads.len(),
                );
                self.mcp_servers.clone_from(&file.mcp_servers);
                Ok(said)
            }
            Err(error) => Err(format!(
                "[[mcp_servers]] in {}: {error}; the MCP servers in force stay",
                self.path.display()
            )),
        };
        reloaded(host, "mcp_servers", said);
    }

    /// Puts `file`'s `[agent]` and `[confirmation]` in force when they
    /// differ from the settings in force, and says so. A policy naming a
    /// tool that is not registered leaves the settings in force, saying why.
    fn replace_agent_config(&self, host: &SkillHost, file: &ConfigFile) {
        let config = file.agent_config(self.keep_public.clone());
        if *host.agent().config() == config {
            return;
        }
        let said = match host.agent().replace_config(config) {
            Ok(()) => Ok(format!(
                "[agent] and [confirmation] read again from {}: in force for what runs do from \
                 now on, and for who may approve the confirmations pending",
                self.path.display()
            )),
            Err(error) => Err(format!(
                "[confirmation] in {}: {error}; the agent's settings in force stay",
                self.path.display()
            )),
        };
        reloaded(host, "agent", said);
    }

    /// Puts `file`'s `[sandbox]` limits in force for the invocations that
    /// start from now on, when they differ from those in force. A memory
    /// limit stays as it was (it sizes the instance pool): returned, each
    /// changed one as the file names it (`[sandbox] memory_mib`, or
    /// `[sandbox.skills.NAME] memory_mib` for a skill's own), to be said to
    /// wait for a restart. Limits that do not check keep those in force,
    /// saying why.
    fn replace_limits(&self, host: &SkillHost, file: &ConfigFile) -> Vec<String> {
        let asked = match file.runtime_config(RuntimeConfig::default()) {
            Ok(asked) => asked,
            Err(error) => {
                let why = format!(
                    "{}: {error:#}; the limits in force stay",
                    self.path.display()
                );
                reloaded(host, "sandbox", Err(why));
                return Vec::new();
            }
        };
        let in_force = host.skills().runtime().config();
        let mut memory_waiting = Vec::new();
        if asked.limits.memory_bytes != in_force.limits.memory_bytes {
            memory_waiting.push("[sandbox] memory_mib".to_owned());
        }
        let with_memory_in_force = |asked: Limits, in_force: Limits| Limits {
            memory_bytes: in_force.memory_bytes,
            ..asked
        };
        let limits = with_memory_in_force(asked.limits, in_force.limits);
        // A skill whose table went keeps its memory limit too.
        let named: BTreeSet<&SkillName> = asked
            .skill_limits
            .keys()
            .chain(in_force.skill_limits.keys())
            .collect();
        let skill_limits: BTreeMap<SkillName, Limits> = named
            .into_iter()
            .filter_map(|name| {
                let (own, own_in_force) = (asked.limits_for(name), in_force.limits_for(name));
                // Named only when its memory limit is its own, before or
                // after: else `[sandbox] memory_mib` says it.
                let inherited = own.memory_bytes == asked.limits.memory_bytes
                    && own_in_force.memory_bytes == in_force.limits.memory_bytes;
                if own.memory_bytes != own_in_force.memory_bytes && !inherited {
                    memory_waiting.push(format!("[sandbox.skills.{name}] memory_mib"));
                }
                let fixed = with_memory_in_force(own, own_in_force);
                let kept = asked.skill_limits.contains_key(name) || fixed != limits;
                kept.then(|| (name.clone(), fixed))
            })
            .collect();
        match host.replace_limits(limits, skill_limits) {
            Ok(None) => {}
            Ok(Some(_)) => {
                let said = format!(
                    "[sandbox] limits read again from {}: in force for the invocations that \
                     start from now on",
                    self.path.display()
                );
                reloaded(host, "sandbox", Ok(said));
                super::warn_of_limits_for_absent_skills(file, &host.snapshot());
            }
            Err(error) => {
                let why = format!(
                    "[sandbox] in {}: {error}; the limits in force stay",
                    self.path.display()
                );
                reloaded(host, "sandbox", Err(why));
            }
        }
        memory_waiting
    }

    /// Sets the LLM up again from `file`'s `[llm]` (the environment still
    /// over it) when that differs from the LLM in force, and says what is in
    /// force now. Settings that are there but wrong leave the LLM in force,
    /// saying why.
    fn replace_llm(&self, host: &SkillHost, file: &ConfigFile) {
        let in_force = host.llm().ok().map(|llm| llm.config().clone());
        match (file.llm_config(), in_force) {
            (Ok(now), Some(in_force)) if now == in_force => return,
            (Err(ConfigError::NotConfigured { .. }), None) => return,
            _ => {}
        }
        let lookup = file.llm_lookup(|name: &str| std::env::var(name).ok());
        if let Err(error) = host.replace_llm_from_lookup(lookup) {
            let why = format!(
                "[llm] in {}: {error}; the LLM in force stays",
                self.path.display()
            );
            return reloaded(host, "llm", Err(why));
        }
        match host.llm() {
            Ok(llm) => {
                let said = format!(
                    "[llm] read again from {}: {} at {}, for the calls to the model from now on",
                    self.path.display(),
                    llm.config().model,
                    llm.config().base_url
                );
                reloaded(host, "llm", Ok(said));
            }
            Err(why) => {
                // In force, though it takes chat away: said as a warning.
                host.metrics().record_config_reload("llm", true);
                console::warn(&format!(
                    "[llm] read again from {}: no LLM now, so chat answers 503 and skills \
                     without steps fail ({why})",
                    self.path.display()
                ));
            }
        }
    }
}

/// Says that `part` of the settings read again is in force now
/// (`Ok(message)`), or warns why what was in force stays (`Err(message)`),
/// and counts it in the host's metrics (`skillhost_config_reloads_total`).
pub(super) fn reloaded(host: &SkillHost, part: &'static str, said: Result<String, String>) {
    host.metrics().record_config_reload(part, said.is_ok());
    match said {
        Ok(message) => console::say(&message),
        Err(message) => console::warn(&message),
    }
}

/// What changed from `before` to `now`, declarations named by `name`:
/// `added a, b; removed none; changed c`.
fn changes<T: PartialEq>(before: &[T], now: &[T], name: impl Fn(&T) -> &String) -> String {
    let named = |among: &[T], item: &T| among.iter().any(|other| name(other) == name(item));
    let listed = |items: Vec<&T>| match items[..] {
        [] => "none".to_owned(),
        _ => items
            .iter()
            .map(|item| name(item).as_str())
            .collect::<Vec<_>>()
            .join(", "),
    };
    let added = now.iter().filter(|item| !named(before, item)).collect();
    let removed = before.iter().filter(|item| !named(now, item)).collect();
    let changed = now
        .iter()
        .filter(|item| named(before, item) && !before.contains(item))
        .collect();
    format!(
        "added {}; removed {}; changed {}",
        listed(added),
        listed(removed),
        listed(changed)
    )
}

/// Listens for SIGHUP from now on; each one reads the config file again
/// (`config`; `None` without one), the trust store and the key scopes
/// (`trust`; `None` under `--allow-unsigned`), lists the MCP servers' tools
/// again, rescans the skills directory, then calls `also` with the config
/// file as read (`None` when there is none or it did not read).
pub(super) fn reload_on_hangup(
    host: SkillHost,
    trust: Option<Trust>,
    mut config: Option<FollowedConfig>,
    mut also: impl FnMut(Option<&ConfigFile>) + Send + 'static,
) -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangups = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            let file = match &mut config {
                Some(config) => config.read_again(&host).await,
                None => None,
            };
            if let Some(trust) = &trust {
                trust.reload_with_scopes(file.as_ref()).await;
            }
            relist_mcp_tools(&host).await;
            rescan_skills(&host).await;
            also(file.as_ref());
        }
    });
    Ok(())
}

/// Lists the MCP servers' tools again and says what came of it for the
/// skills; each server's change (or why it could not be listed) is logged.
async fn relist_mcp_tools(host: &SkillHost) {
    let events = host.relist_mcp_tools().await;
    if !events.is_empty() {
        console::say(&format!(
            "MCP servers' tools listed again: {} skill file(s) changed with them",
            events.len()
        ));
    }
}

/// Rescans the skills directory and says what came of it; the files it
/// refused are logged one by one as they are met.
async fn rescan_skills(host: &SkillHost) {
    let events = match host.rescan_skills().await {
        Ok(events) => events,
        Err(error) => {
            console::warn(&format!("{error}; the skills loaded stay"));
            return;
        }
    };
    let count = |wanted: fn(&ReloadOutcome) -> bool| {
        events.iter().filter(|event| wanted(&event.outcome)).count()
    };
    let refused = count(|outcome| matches!(outcome, ReloadOutcome::Rejected { .. }));
    let changed = count(|outcome| !matches!(outcome, ReloadOutcome::Unchanged)) - refused;
    let refused = if refused > 0 {
        format!(", {refused} refused (the skills they held stay)")
    } else {
        String::new()
    };
    console::say(&format!(
        "skills directory {} read again: {} skill(s) loaded, {changed} file(s) changed{refused}",
        host.skills_dir().display(),
        host.snapshot().len(),
    ));
}
