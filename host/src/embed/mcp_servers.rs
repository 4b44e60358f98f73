//! The MCP servers a host takes tools from ([`SkillHostBuilder::mcp_server`](super::SkillHostBuilder::mcp_server)),
//! followed while it runs: when a server's tools may have changed — it said
//! so, or it restarted — or [`SkillHost::relist_mcp_tools`](super::SkillHost::relist_mcp_tools)
//! asks, its tools are listed again and the difference put in place
//! ([`SkillRegistry::update_tools`]): skills that name a new tool load,
//! skills whose tool went are unloaded, runs under way keep theirs.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::events::{Observers, ToolsChange};
use crate::skills::{ReloadEvent, SkillRegistry};
use crate::tools::mcp::McpConnection;
use crate::tools::{RegisterError, Tool, ToolRegistry};

/// The shortest time between two relists of one server that follow its
/// changes. A server that forgets every session would otherwise be
/// relisted without end: each relist renews the session, and each renewal
/// asks for a relist.
const RELIST_INTERVAL: Duration = Duration::from_secs(1);

/// The servers of one host.
pub(super) struct McpServers {
    skills: Arc<SkillRegistry>,
    /// Told of each change.
    observers: Arc<Observers>,
    servers: Vec<McpConnection>,
    /// Held while a server is relisted, so that what the servers list is put
    /// in place in the order it was listed.
    relisting: tokio::sync::Mutex<()>,
    /// The names of the tools taken from each server now, by index.
    taken: Mutex<Vec<Vec<String>>>,
}

impl McpServers {
    /// The servers `connected`, with the tools taken from each at start
    /// (registered in `skills`' tools).
    pub(super) fn new(
        skills: Arc<SkillRegistry>,
        observers: Arc<Observers>,
        connected: Vec<(McpConnection, Vec<Arc<dyn Tool>>)>,
    ) -> Self {
        let (servers, taken) = connected
            .into_iter()
            .map(|(connection, tools)| (connection, names(&tools)))
            .unzip();
        Self {
            skills,
            observers,
            servers,
            relisting: tokio::sync::Mutex::new(()),
            taken: Mutex::new(taken),
        }
    }

    /// The server each tool taken from one comes from, by tool name.
    pub(super) fn servers_of_tools(&self) -> BTreeMap<String, String> {
        let taken = self.taken();
        let servers = self.servers.iter().zip(taken.iter());
        servers
            .flat_map(|(server, names)| {
                let server = server.server();
                names.iter().map(|name| (name.clone(), server.to_owned()))
            })
            .collect()
    }

    fn taken(&self) -> MutexGuard<'_, Vec<Vec<String>>> {
        self.taken.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many servers there are.
    pub(super) fn len(&self) -> usize {
        self.servers.len()
    }

    /// Relists server `index` each time its tools may have changed, at
    /// most once per [`RELIST_INTERVAL`], for ever: run it as a task,
    /// aborted with the host. A change told meanwhile waits its turn.
    pub(super) async fn follow(self: Arc<Self>, index: usize) {
        loop {
            self.servers[index].changed().await;
            self.relist(index).await;
            tokio::time::sleep(RELIST_INTERVAL).await;
        }
    }

    /// Lists every server's tools again, one after another, and puts the
    /// changes in place; what that did to the skills.
    pub(super) async fn relist_all(&self) -> Vec<ReloadEvent> {
        let mut events = Vec::new();
        for index in 0..self.servers.len() {
            events.extend(self.relist(index).await);
        }
        events
    }

    /// Lists server `index`'s tools again and, when they differ from those
    /// taken before, replaces them in the host's tools. A server that cannot be
    /// listed, or that now lists a tool another tool's name has, keeps the
    /// tools taken before; the log says why.
    async fn relist(&self, index: usize) -> Vec<ReloadEvent> {
        let _relisting = self.relisting.lock().await;
        let server = &self.servers[index];
        let name = server.server();
        let tools = match server.relist().await {
            Ok(tools) => tools,
            Err(error) => {
                tracing::warn!("{error}; the tools taken from it stay as they were");
                return Vec::new();
            }
        };
        let now = names(&tools);
        let updated = self.skills.update_tools(|current| {
            let mut next = ToolRegistry::clone(current);
            for taken in &self.taken()[index] {
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
            self.taken()[index] = now;
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

/// The names of `tools`.
fn names(tools: &[Arc<dyn Tool>]) -> Vec<String> {
    tools.iter().map(|tool| tool.spec().name.clone()).collect()
}
