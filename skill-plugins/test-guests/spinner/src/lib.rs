//! Hostile guest: its steps never return. Only the host's CPU limit (epoch
//! interruption) ends the invocation.

use skillhost_skill_sdk::{Outcome, Skill, Value, json};

fn skill() -> Skill {
    Skill::new("spinner")
        .description("Test guest: its steps loop forever.")
        .instructions("Test guest; never loaded by a real host.")
        .parameters(json!({ "type": "object" }))
}

fn run(_: Value) -> Result<Outcome, String> {
    let mut spins: u64 = 0;
    loop {
        // black_box keeps the loop a real computation the optimizer cannot remove.
        spins = std::hint::black_box(spins.wrapping_add(1));
    }
}

skillhost_skill_sdk::export_skill!(skill, steps: run);
