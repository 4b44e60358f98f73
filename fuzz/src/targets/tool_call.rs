//! Any JSON as the arguments of any demo tool, through the registry: the
//! arguments are checked against the tool's schema, and what passes reaches
//! the demo shop's SQL. Errors are answers; a panic is a bug.

use std::sync::LazyLock;

use crate::{demo_tools, executor};
use serde_json::Value;
use skillhost::tools::ToolRegistry;

struct Shop {
    executor: tokio::runtime::Runtime,
    tools: ToolRegistry,
    names: Vec<String>,
}

static SHOP: LazyLock<Shop> = LazyLock::new(|| {
    let tools = demo_tools();
    let names = tools.specs().map(|spec| spec.name.clone()).collect();
    Shop {
        executor: executor(),
        tools,
        names,
    }
});

/// One input.
pub fn run(input: (u8, &[u8])) {
    let (which, arguments) = input;
    let Ok(arguments) = serde_json::from_slice::<Value>(arguments) else {
        return;
    };
    let shop = &*SHOP;
    let name = &shop.names[usize::from(which) % shop.names.len()];
    let _ = shop.executor.block_on(shop.tools.call(name, arguments));
}
