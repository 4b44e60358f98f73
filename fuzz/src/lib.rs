//! The fuzz targets ([`targets`]) and what they share: an executor, the demo
//! shop's tools, a sandbox to load components in, the repository's bundled
//! skills and trust store, a loopback server.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use skillhost::agent::llm::LlmConfig;
use skillhost::embed::{SkillHost, SkillHostBuilder};
use skillhost::runtime::{Runtime, RuntimeConfig, SkillComponent};
use skillhost::skills::signature::{SignaturePolicy, TrustStore};
use skillhost::tools::ToolRegistry;
use skillhost::tools::demo::{self, DemoDb};

pub mod targets;

/// A path in the repository.
pub fn repo(path: &str) -> String {
    format!("{}/../{path}", env!("CARGO_MANIFEST_DIR"))
}

/// The executor a target blocks on for each input; runs it spawns go on its
/// one worker.
pub fn executor() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// The demo shop's tools on a fresh in-memory database.
pub fn demo_tools() -> ToolRegistry {
    let mut tools = ToolRegistry::new();
    let db = Arc::new(DemoDb::in_memory().expect("the demo shop"));
    demo::register_all(&mut tools, db).expect("the demo tools");
    tools
}

/// A sandbox with the default limits over the demo tools, for targets that
/// load components themselves.
pub struct Sandbox {
    pub executor: tokio::runtime::Runtime,
    pub runtime: Runtime,
    pub tools: Arc<ToolRegistry>,
}

impl Default for Sandbox {
    fn default() -> Self {
        Self {
            executor: executor(),
            runtime: Runtime::new(RuntimeConfig::default()).expect("the sandbox"),
            tools: Arc::new(demo_tools()),
        }
    }
}

impl Sandbox {
    /// Loads `bytes` as a skill component (signatures aside).
    pub fn load(&self, bytes: Vec<u8>) -> Result<SkillComponent, skillhost::runtime::LoadError> {
        self.executor
            .block_on(SkillComponent::load(&self.runtime, bytes, &self.tools))
    }
}

/// The repository's trust store (`keys/trusted`).
pub fn trust_store() -> TrustStore {
    TrustStore::load(&[repo("keys/trusted")]).expect("the repository's trust store")
}

/// A host of the bundled signed skills on a fresh demo shop, without hot
/// reload: each input meets the same skills.
pub fn bundled_host() -> SkillHostBuilder {
    SkillHost::builder(repo("skills"), SignaturePolicy::Require(trust_store()))
        .demo_tools(Arc::new(DemoDb::in_memory().expect("the demo shop")))
        .hot_reload(false)
}

/// Serves `router` on a free loopback port; call inside the executor.
pub async fn serve_on_loopback(router: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let address = listener.local_addr().expect("its address");
    tokio::spawn(async move { axum::serve(listener, router).await });
    address
}

/// An LLM at `address` that is asked once per call: a retried 429 or 5xx
/// would only wait.
pub fn llm_at(address: SocketAddr) -> LlmConfig {
    let mut config = LlmConfig::new(format!("http://{address}/v1"), "fuzz");
    config.max_retries = 0;
    config.request_timeout = Duration::from_secs(10);
    config
}
