//! Does nothing as fast as possible: the host's benchmarks measure their floor
//! (instantiation, boundary crossings, validation) with it.

use skillhost_skill_sdk::{Outcome, Skill, Value, json};

fn skill() -> Skill {
    Skill::new("noop")
        .description("Test guest: returns {} at once.")
        .instructions("Test guest; never loaded by a real host.")
        .parameters(json!({ "type": "object" }))
}

fn run(_: Value) -> Result<Outcome, String> {
    Ok(Outcome::Done("{}".to_owned()))
}

skillhost_skill_sdk::export_skill!(skill, steps: run);
