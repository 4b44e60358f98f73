//! Hostile guest: its steps panic. The instance traps; the host must report a
//! failure for this invocation and keep serving.

use skillhost_skill_sdk::{Outcome, Skill, Value, json};

fn skill() -> Skill {
    Skill::new("panicker")
        .description("Test guest: its steps panic.")
        .instructions("Test guest; never loaded by a real host.")
        .parameters(json!({ "type": "object" }))
}

fn run(_: Value) -> Result<Outcome, String> {
    panic!("panicker: deliberate panic in run")
}

skillhost_skill_sdk::export_skill!(skill, steps: run);
