//! Any JSON as the arguments of any demo tool, through the registry: the
//! arguments are checked against the tool's schema, and what passes reaches
//! the demo shop's SQL. Errors are answers; a panic is a bug.
#![no_main]

use std::sync::{Arc, LazyLock};

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use skillhost::tools::ToolRegistry;
use skillhost::tools::demo::{self, DemoDb};

struct Shop {
    executor: tokio::runtime::Runtime,
    tools: ToolRegistry,
    names: Vec<String>,
}

static SHOP: LazyLock<Shop> = LazyLock::new(|| {
    let mut tools = ToolRegistry::new();
    let db = Arc::new(DemoDb::in_memory().expect("the demo shop"));
    demo::register_all(&mut tools, db).expect("the demo tools");
    let names = tools.specs().map(|spec| spec.name.clone()).collect();
    Shop {
        executor: tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime"),
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
