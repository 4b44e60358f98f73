//! Works the SDK's allocator (`sdk/src/heap.rs`) through its paths and checks
//! that no block was corrupted: two buffers grown a chunk at a time in turn,
//! so neither stays the arena's last block and each growth moves one, past
//! the arena's end into dlmalloc when `bytes` is large; short-lived blocks
//! freed between growths; and a zeroed block taken where a dirty one was
//! given back.

use serde::Deserialize;
use skillhost_skill_sdk::{Outcome, Skill, json};

fn skill() -> Skill {
    Skill::new("heapChurn")
        .description("Test guest: grows two buffers to `bytes` each and checks them.")
        .instructions("Test guest; never loaded by a real host.")
        .parameters(json!({
            "type": "object",
            "properties": { "bytes": { "type": "integer", "minimum": 1 } },
            "required": ["bytes"],
            "additionalProperties": false,
        }))
}

#[derive(Deserialize)]
struct Input {
    bytes: usize,
}

/// Grown by this much at a time.
const CHUNK: usize = 1000;

/// What buffer `which` holds at `at`: a different pattern for each buffer.
fn expected(which: u8, at: usize) -> u8 {
    (at % 251) as u8 ^ which
}

fn run(input: Input) -> Result<Outcome, String> {
    let mut buffers = [Vec::new(), Vec::new()];
    while buffers[1].len() < input.bytes {
        for (which, buffer) in buffers.iter_mut().enumerate() {
            let grow_by = CHUNK.min(input.bytes - buffer.len());
            let start = buffer.len();
            buffer.extend((start..start + grow_by).map(|at| expected(which as u8, at)));
            // Freed at once: a block given back behind (or on top of) the buffers.
            drop(std::hint::black_box(vec![0xAAu8; 64]));
        }
    }
    for (which, buffer) in buffers.iter().enumerate() {
        if let Some(at) = (0..buffer.len()).find(|&at| buffer[at] != expected(which as u8, at)) {
            return Err(format!("buffer {which} is corrupt at byte {at}"));
        }
    }
    // A block freed dirty, then a zeroed one of the same size in its place.
    drop(std::hint::black_box(vec![0x55u8; 4096]));
    let zeroed = std::hint::black_box(vec![0u8; 4096]);
    let zeroed = zeroed.iter().all(|&byte| byte == 0);
    Ok(Outcome::done(json!({
        "lengths": [buffers[0].len(), buffers[1].len()],
        "intact": true,
        "zeroed": zeroed,
    })))
}

skillhost_skill_sdk::export_skill!(skill, steps: run);
