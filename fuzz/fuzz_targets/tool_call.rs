//! Any JSON as the arguments of any demo tool, through the registry: the
//! arguments are checked against the tool's schema, and what passes reaches
//! the demo shop's SQL. Errors are answers; a panic is a bug.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use skillhost::tools::ToolRegistry;
use skillhost_fuzz::{demo_tools, executor};

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

fuzz_target!(|input: (u8, &[u8])| {
    let (which, arguments) = input;
    let Ok(arguments) = serde_json::from_slice::<Value>(arguments) else {
        return;
    };
    let shop = &*SHOP;
    let name = &shop.names[usize::from(which) % shop.names.len()];
    let _ = shop.executor.block_on(shop.tools.call(name, arguments));
});
