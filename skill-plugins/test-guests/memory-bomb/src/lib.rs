//! Hostile guest: its steps allocate memory until the host's memory limit stops
//! them (the allocation fails and the instance traps).

use skillhost_skill_sdk::{Outcome, Skill, Value, json};

fn skill() -> Skill {
    Skill::new("memoryBomb")
        .description("Test guest: its steps grow memory without bound.")
        .instructions("Test guest; never loaded by a real host.")
        .parameters(json!({ "type": "object" }))
}

fn run(_: Value) -> Result<Outcome, String> {
    let mut hoard = Vec::new();
    loop {
        // 1 MiB at a time, written so the pages are really used; black_box keeps
        // the optimizer from dropping the allocations.
        hoard.push(std::hint::black_box(vec![1u8; 1 << 20]));
    }
}

skillhost_skill_sdk::export_skill!(skill, steps: run);
