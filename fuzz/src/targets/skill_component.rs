//! Any bytes loaded as a skill component (signatures aside): compilation,
//! linking, the manifest and instructions read from a sandboxed instance,
//! the manifest's rules, and — when it loads and has steps — one run of the
//! steps against the demo shop. Seed with `skills/` and `tests/fixtures/`:
//! mutated data segments give the host hostile manifests.

use std::sync::LazyLock;

use crate::Sandbox;
use serde_json::json;

static SANDBOX: LazyLock<Sandbox> = LazyLock::new(Sandbox::default);

/// One input.
pub fn run(bytes: &[u8]) {
    let sandbox = &*SANDBOX;
    let Ok(skill) = sandbox.load(bytes.to_vec()) else {
        return;
    };
    if skill.manifest().has_steps {
        let input = json!({ "orderId": "88231", "reason": "fuzz" });
        let _ = sandbox
            .executor
            .block_on(skill.run(&input, sandbox.tools.clone()));
    }
}
