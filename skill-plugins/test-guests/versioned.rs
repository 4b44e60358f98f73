// Shared by versioned-1 and versioned-2: one skill, `versioned`, built at two
// versions so that hot-reload tests can tell which version answered.

use skillhost_skill_sdk::{Outcome, Skill, Value, json};

fn skill() -> Skill {
    Skill::new("versioned")
        .description("Test guest: answers with its own version.")
        .instructions("Test guest; never loaded by a real host.")
        .parameters(json!({ "type": "object" }))
}

fn run(_: Value) -> Result<Outcome, String> {
    Ok(Outcome::done(json!({ "version": env!("CARGO_PKG_VERSION") })))
}

skillhost_skill_sdk::export_skill!(skill, steps: run);
