//! The MCP servers a host takes tools from ([`SkillHostBuilder::mcp_server`](super::SkillHostBuilder::mcp_server)),
//! followed while it runs: when a server's tools may have changed — it said
//! so, or it restarted — or [`SkillHost::relist_mcp_tools`](super::SkillHost::relist_mcp_tools)
//! asks, its tools are listed again and the difference put in place
//! ([`SkillRegistry::update_tools`]): skills that name a new tool load,
//! skills whose tool went are unloaded, runs under way keep theirs. The
//! servers themselves can be replaced
//! ([`SkillHost::replace_mcp_servers`](super::SkillHost::replace_mcp_servers)):
//! a server added is connected and its tools put in place, a server taken
//! out is followed no more and its tools go.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::events::{Observers, ToolsChange};
use super::{AbortOnDrop, ReplaceServersError};
use crate::skills::{ReloadEvent, SkillRegistry};
use crate::tools::mcp::{McpConnection, McpServerConfig};
use crate::tools::{RegisterError, Tool, ToolRegistry};

/// The shortest time between two relists of one server that follow its
/// changes. A server that forgets every session would otherwise be
/// relisted without end: each relist renews the session, and each renewal
/// asks for a relist.
const RELIST_INTERVAL: Duration = Duration::from_secs(1);

/// The servers of one host.
pub(super) struct McpServers {
    shared: Arc<Shared>,
    /// The servers now, in the order configured, each with the task that
    /// follows it (aborted when the server is taken out, or with the host).
    servers: Mutex<Vec<Followed>>,
    /// Held through [`McpServers::replace`], so that each replacement starts
    /// from the servers the one before left.
    replacing: tokio::sync::Mutex<()>,
}

/// What relisting a server needs, shared with the tasks that follow them.
struct Shared {
    skills: Arc<SkillRegistry>,
    /// Told of each change.
    observers: Arc<Observers>,
    /// Held while a server is relisted, and while the servers are replaced:
    /// what the servers list is put in place in the order it was listed,
    /// and a server taken out is relisted no more.
    relisting: tokio::sync::Mutex<()>,
}

/// One server, connected.
struct Server {
    connection: McpConnection,
    /// The names of the tools taken from it now.
    taken: Mutex<Vec<String>>,
    /// Set, under the relisting lock, when the server is taken out.
    retired: AtomicBool,
}

/// A server and the task that follows its changes.
struct Followed {
    server: Arc<Server>,
    _following: AbortOnDrop,
}

impl McpServers {
    /// The servers `connected`, with the tools taken from each at start
    /// (registered in `skills`' tools), each followed from now on. Call
    /// inside a Tokio runtime.
    pub(super) fn new(
        skills: Arc<SkillRegistry>,
        observers: Arc<Observers>,
        connected: Vec<(McpConnection, Vec<Arc<dyn Tool>>)>,
    ) -> Self {
        let shared = Arc::new(Shared {
            skills,
            observers,
            relisting: tokio::sync::Mutex::new(()),
        });
        let servers = connected
            .into_iter()
            .map(|(connection, tools)| shared.follow(connection, &tools))
            .collect();
        Self {
            shared,
            servers: Mutex::new(servers),
            replacing: tokio::sync::Mutex::new(()),
        }
    }

    fn servers(&self) -> MutexGuard<'_, Vec<Followed>> {
        self.servers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The servers now.
    fn current(&self) -> Vec<Arc<Server>> {
        let servers = self.servers();
        servers
            .iter()
            .map(|followed| followed.server.clone())
            .collect()
    }

    /// The server each tool taken from one comes from, by tool name.
    pub(super) fn servers_of_tools(&self) -> BTreeMap<String, String> {
        self.current()
            .iter()
            .flat_map(|server| {
                let name = server.connection.server().to_owned();
                let taken = server.taken().clone();
                taken.into_iter().map(move |tool| (tool, name.clone()))
            })
            .collect()
    }

    /// Lists every server's tools again, one after another, and puts the
    /// changes in place; what that did to the skills.
    pub(super) async fn relist_all(&self) -> Vec<ReloadEvent> {
        let mut events = Vec::new();
        for server in self.current() {
            events.extend(self.shared.relist(&server).await);
        }
        events
    }

    /// Replaces the servers with those `configs` declare, connecting the
    /// ones not connected already (a server whose declaration changed is
    /// connected anew), `${VAR}`s read through `env`: the tools of the
    /// servers taken out go, those of the servers added come, in one
    /// change of the tools, told to the observers when a tool's spec
    /// changed. A server that cannot be connected, or a tool taking another
    /// tool's name, changes nothing.
    pub(super) async fn replace(
        &self,
        configs: &[McpServerConfig],
        env: impl Fn(&str) -> Option<String> + Copy,
    ) -> Result<(ToolsChange, Vec<ReloadEvent>), ReplaceServersError> {
        let mut names: Vec<&str> = configs.iter().map(|config| config.name.as_str()).collect();
        names.sort_unstable();
        if let Some(twice) = names.windows(2).find(|pair| pair[0] == pair[1]) {
            return Err(ReplaceServersError::NameTwice(twice[0].to_owned()));
        }
        let _replacing = self.replacing.lock().await;
        let before = self.current();
        let connected = |config: &McpServerConfig| {
            let mut servers = before.iter();
            servers
                .find(|server| server.connection.config() == config)
                .cloned()
        };
        let new: Vec<McpServerConfig> = configs
            .iter()
            .filter(|config| connected(config).is_none())
            .cloned()
            .collect();
        let mut opened = McpConnection::open_all(&new, env).await?.into_iter();
        let _relisting = self.shared.relisting.lock().await;
        let leaving: Vec<&Arc<Server>> = before
            .iter()
            .filter(|server| !configs.contains(server.connection.config()))
            .collect();
        let mut told = None;
        let updated = self.shared.skills.update_tools(|current| {
            let mut next = ToolRegistry::clone(current);
            for server in &leaving {
                for taken in server.taken().iter() {
                    next.remove(taken);
                }
            }
            for tool in opened.as_slice().iter().flat_map(|(_, tools)| tools) {
                next.register(tool.clone())?;
            }
            let change = ToolsChange::between(None, current, &next);
            if !change.is_empty() {
                self.shared.observers.tools(&change);
            }
            told = Some(change);
            Ok::<_, RegisterError>(Some(next))
        });
        let reloads = updated.await?;
        for server in &leaving {
            server.retired.store(true, Ordering::Relaxed);
        }
        let mut servers = self.servers();
        let mut kept: Vec<Followed> = std::mem::take(&mut *servers);
        for config in configs {
            let followed = match kept
                .iter()
                .position(|followed| followed.server.connection.config() == config)
            {
                Some(index) => kept.swap_remove(index),
                None => {
                    let (connection, tools) = opened.next().expect("one opened per new server");
                    self.shared.follow(connection, &tools)
                }
            };
            servers.push(followed);
        }
        // What is left of `kept` is the servers taken out: dropping them
        // ends their following.
        drop(kept);
        let told = told.expect("the change ran: it returned tools");
        Ok((told, reloads))
    }
}

impl Shared {
    /// `connection` with the tools taken from it, followed by a task from
    /// now on.
    fn follow(self: &Arc<Self>, connection: McpConnection, tools: &[Arc<dyn Tool>]) -> Followed {
        let server = Arc::new(Server {
            connection,
            taken: Mutex::new(names(tools)),
            retired: AtomicBool::new(false),
        });
        let following = tokio::spawn(self.clone().keep_following(server.clone()));
        Followed {
            server,
            _following: AbortOnDrop(following),
        }
    }

    /// Relists `server` each time its tools may have changed, at most once
    /// per [`RELIST_INTERVAL`], for ever: run it as a task, aborted when the
    /// server is taken out or with the host. A change told meanwhile waits
    /// its turn.
    async fn keep_following(self: Arc<Self>, server: Arc<Server>) {
        loop {
            server.connection.changed().await;
            self.relist(&server).await;
            tokio::time::sleep(RELIST_INTERVAL).await;
        }
    }

    /// Lists `server`'s tools again and, when they differ from those taken
    /// before, replaces them in the host's tools. A server taken out is not
    /// relisted; one that cannot be listed, or that now lists a tool
    /// another tool's name has, keeps the tools taken before; the log says
    /// why.
    async fn relist(&self, server: &Server) -> Vec<ReloadEvent> {
        let _relisting = self.relisting.lock().await;
        if server.retired.load(Ordering::Relaxed) {
            return Vec::new();
        }
        let name = server.connection.server();
        let tools = match server.connection.relist().await {
            Ok(tools) => tools,
            Err(error) => {
                tracing::warn!("{error}; the tools taken from it stay as they were");
                return Vec::new();
            }
        };
        let now = names(&tools);
        let updated = self.skills.update_tools(|current| {
            let mut next = ToolRegistry::clone(current);
            for taken in server.taken().iter() {
                next.remove(taken);
            }
            for tool in tools {
                next.register(tool)?;
            }
            let change = ToolsChange::between(Some(name.to_owned()), current, &next);
            if change.is_empty() {
                tracing::debug!(server = name, "MCP server's tools listed again: no change");
                return Ok(None);
            }
            self.observers.tools(&change);
            *server.taken() = now;
            Ok(Some(next))
        });
        updated.await.unwrap_or_else(|error: RegisterError| {
            tracing::warn!(
                server = name,
                "MCP server's tools changed, but {error}; the tools taken from it stay as they were"
            );
            Vec::new()
        })
    }
}

impl Server {
    fn taken(&self) -> MutexGuard<'_, Vec<String>> {
        self.taken.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The names of `tools`.
fn names(tools: &[Arc<dyn Tool>]) -> Vec<String> {
    tools.iter().map(|tool| tool.spec().name.clone()).collect()
}
