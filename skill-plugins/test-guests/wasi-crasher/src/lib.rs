//! Fails as a guest built without the SDK does: it writes why to stderr,
//! as a wasm32-wasip2 program's panic or componentize-py's uncaught
//! exception does, and traps without logging anything. The trap the host
//! reports must carry those lines.

use skillhost_skill_sdk::{Outcome, Skill, Value, json};

mod bindings {
    wit_bindgen::generate!({ path: "../wasi-wit", world: "crasher", generate_all });
}

use bindings::wasi::cli::stderr;

fn skill() -> Skill {
    Skill::new("wasiCrasher")
        .description("Test guest: writes why it fails to stderr, then traps.")
        .instructions("Test guest; never loaded by a real host.")
        .parameters(json!({ "type": "object" }))
}

/// An uncaught Python exception as componentize-py prints it, after a line
/// of progress.
const WRITTEN: &[u8] = b"looking up the first order\n\
Traceback (most recent call last):\n  \
File \"app.py\", line 9, in run\n    \
order = orders[0]\n\
IndexError: list index out of range\n";

fn run(_: Value) -> Result<Outcome, String> {
    // A failed write changes nothing: the guest traps either way.
    let _ = stderr::get_stderr().blocking_write_and_flush(WRITTEN);
    core::arch::wasm32::unreachable()
}

skillhost_skill_sdk::export_skill!(skill, steps: run);
