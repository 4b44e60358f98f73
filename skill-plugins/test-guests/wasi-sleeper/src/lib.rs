//! Sleeps `millis` milliseconds in WASI (`subscribe-duration` + `block`),
//! then answers. No wasm runs while it waits, so the epoch deadline that
//! stops a spinning guest never fires there; the host must bound it anyway.
//! With `randomBytes`, first asks WASI for that many random bytes at once;
//! with `pollables`, first creates that many clock pollables and holds them.

use serde::Deserialize;
use skillhost_skill_sdk::{Outcome, Skill, json};

mod bindings {
    wit_bindgen::generate!({ path: "../wasi-wit", world: "sleeper", generate_all });
}

use bindings::wasi::clocks::monotonic_clock;
use bindings::wasi::random::random;

fn skill() -> Skill {
    Skill::new("wasiSleeper")
        .description("Test guest: sleeps in WASI for as long as it is asked.")
        .instructions("Test guest; never loaded by a real host.")
        .parameters(json!({
            "type": "object",
            "properties": {
                "millis": { "type": "integer", "minimum": 0 },
                "randomBytes": { "type": "integer", "minimum": 0 },
                "pollables": { "type": "integer", "minimum": 0 },
            },
            "required": ["millis"],
        }))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Input {
    millis: u64,
    #[serde(default)]
    random_bytes: u64,
    #[serde(default)]
    pollables: u32,
}

fn run(input: Input) -> Result<Outcome, String> {
    let random = random::get_random_bytes(input.random_bytes);
    let held: Vec<_> = (0..input.pollables)
        .map(|_| monotonic_clock::subscribe_duration(0))
        .collect();
    monotonic_clock::subscribe_duration(input.millis.saturating_mul(1_000_000)).block();
    Ok(Outcome::done(json!({
        "slept": input.millis,
        "randomBytes": random.len(),
        "pollables": held.len(),
    })))
}

skillhost_skill_sdk::export_skill!(skill, steps: run);
