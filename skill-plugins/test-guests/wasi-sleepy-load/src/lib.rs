//! Sleeps ten minutes in WASI whenever it is described, so loading it must
//! be stopped by the execution-time limit, not wait for it.

use skillhost_skill_sdk::{Skill, json};

mod bindings {
    wit_bindgen::generate!({ path: "../wasi-wit", world: "sleepy-load", generate_all });
}

use bindings::wasi::clocks::monotonic_clock;

const TEN_MINUTES_NANOS: u64 = 600 * 1_000_000_000;

fn skill() -> Skill {
    monotonic_clock::subscribe_duration(TEN_MINUTES_NANOS).block();
    Skill::new("wasiSleepyLoad")
        .description("Test guest: never finishes describing itself.")
        .instructions("Test guest; never loaded by a real host.")
        .parameters(json!({ "type": "object" }))
}

skillhost_skill_sdk::export_skill!(skill);
