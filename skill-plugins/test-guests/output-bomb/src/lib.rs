//! Hostile guest: its steps return a huge result (64 MiB by default, or
//! `{"bytes": n}`; with `"fail": true`, a failure of that size), which the
//! host's output limit must refuse.

use serde::Deserialize;
use skillhost_skill_sdk::{Outcome, Skill, json};

/// Large enough to exceed any sane output limit.
const DEFAULT_BYTES: usize = 64 << 20;

fn skill() -> Skill {
    Skill::new("outputBomb")
        .description("Test guest: its steps return a result of `bytes` bytes (default 64 MiB).")
        .instructions("Test guest; never loaded by a real host.")
        .parameters(json!({
            "type": "object",
            "properties": {
                "bytes": { "type": "integer", "minimum": 2 },
                "fail": { "type": "boolean" },
            },
            "additionalProperties": false,
        }))
}

#[derive(Deserialize)]
struct Input {
    #[serde(default = "default_bytes")]
    bytes: usize,
    #[serde(default)]
    fail: bool,
}

fn default_bytes() -> usize {
    DEFAULT_BYTES
}

fn run(input: Input) -> Result<Outcome, String> {
    // A JSON string of exactly `bytes` bytes ("xxx…"), built in one allocation
    // so that guest memory stays close to the output size.
    let length = input.bytes.max(2);
    let mut text = vec![b'x'; length];
    text[0] = b'"';
    text[length - 1] = b'"';
    let text = String::from_utf8(text).map_err(|e| e.to_string())?;
    if input.fail {
        return Err(text);
    }
    Ok(Outcome::Done(text))
}

skillhost_skill_sdk::export_skill!(skill, steps: run);
