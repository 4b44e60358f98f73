//! Any bytes loaded as a skill component (signatures aside): compilation,
//! linking, the manifest and instructions read from a sandboxed instance,
//! the manifest's rules, and — when it loads and has steps — one run of the
//! steps against the demo shop. Seed with `skills/` and `tests/fixtures/`:
//! mutated data segments give the host hostile manifests.
#![no_main]

use std::sync::{Arc, LazyLock};

use libfuzzer_sys::fuzz_target;
use serde_json::json;
use skillhost::runtime::{Runtime, RuntimeConfig, SkillComponent};
use skillhost::tools::ToolRegistry;
use skillhost_fuzz::{demo_tools, executor};

struct Host {
    executor: tokio::runtime::Runtime,
    runtime: Runtime,
    tools: Arc<ToolRegistry>,
}

static HOST: LazyLock<Host> = LazyLock::new(|| Host {
    executor: executor(),
    runtime: Runtime::new(RuntimeConfig::default()).expect("the sandbox"),
    tools: Arc::new(demo_tools()),
});

fuzz_target!(|bytes: &[u8]| {
    let host = &*HOST;
    host.executor.block_on(async {
        let Ok(skill) = SkillComponent::load(&host.runtime, bytes.to_vec(), &host.tools).await
        else {
            return;
        };
        if skill.manifest().has_steps {
            let input = json!({ "orderId": "88231", "reason": "fuzz" });
            let _ = skill.run(&input, host.tools.clone()).await;
        }
    });
});
