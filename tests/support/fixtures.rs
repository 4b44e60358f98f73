//! Real components and a demo host to run them on.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use skillhost::runtime::{Runtime, RuntimeConfig, SkillComponent};
use skillhost::tools::ToolRegistry;
use skillhost::tools::demo::{self, DemoDb};

/// The repository root (the parent of `host/`).
pub fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ has a parent")
}

/// A bundled skill under `skills/`.
pub fn skill_file(name: &str) -> PathBuf {
    repo_root().join("skills").join(format!("{name}.wasm"))
}

/// A test guest built from `skill-plugins/test-guests/`.
pub fn fixture(name: &str) -> PathBuf {
    repo_root()
        .join("tests/fixtures")
        .join(format!("{name}.wasm"))
}

/// A runtime over the demo tools on a fresh in-memory database.
pub struct DemoHost {
    pub runtime: Runtime,
    pub db: Arc<DemoDb>,
    pub tools: Arc<ToolRegistry>,
}

impl DemoHost {
    pub fn new() -> Self {
        let config = RuntimeConfig {
            max_concurrent_instances: 64,
            ..RuntimeConfig::default()
        };
        let db = Arc::new(DemoDb::in_memory().expect("opening the demo database"));
        let mut tools = ToolRegistry::new();
        demo::register_all(&mut tools, db.clone()).expect("registering the demo tools");
        Self {
            runtime: Runtime::new(config).expect("creating the runtime"),
            db,
            tools: Arc::new(tools),
        }
    }

    pub async fn load(&self, path: &Path) -> SkillComponent {
        let bytes =
            std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        SkillComponent::load(&self.runtime, bytes, &self.tools)
            .await
            .unwrap_or_else(|e| panic!("loading {}: {e}", path.display()))
    }

    /// A seeded order that exists but is not delivered (shipped).
    pub fn undelivered_order(&self) -> String {
        "99001".to_owned()
    }
}
