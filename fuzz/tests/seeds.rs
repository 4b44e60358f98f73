//! Every fuzz target on the committed seeds, decoded as libFuzzer's
//! `fuzz_target!` decodes them, on the stable toolchain: CI keeps the
//! targets and their seeds working between campaigns, which need nightly
//! and cargo-fuzz (README, "Fuzzing"). A target's assertion failing here is
//! the bug a campaign would report.

use std::path::{Path, PathBuf};

use arbitrary::{Arbitrary, Unstructured};
use serde_json::json;
use skillhost_fuzz::{repo, targets};

/// The contents of every file in the repository directories `dirs`, each
/// with its path; at least one per directory.
fn seeds(dirs: &[&str]) -> Vec<(PathBuf, Vec<u8>)> {
    let mut seeds = Vec::new();
    for dir in dirs {
        let mut files: Vec<PathBuf> = std::fs::read_dir(repo(dir))
            .unwrap_or_else(|e| panic!("reading {dir}: {e}"))
            .map(|entry| entry.expect("a directory entry").path())
            .filter(|path| path.is_file())
            .collect();
        assert!(!files.is_empty(), "no seeds in {dir}");
        files.sort();
        seeds.extend(files.into_iter().map(|path| {
            let bytes = std::fs::read(&path).expect("a readable seed");
            (path, bytes)
        }));
    }
    seeds
}

/// Runs `target` on `input` decoded as a typed `fuzz_target!` input and
/// returns what it returned; an input too short for the type is skipped, as
/// libFuzzer skips it (`None`).
fn typed<'a, T: Arbitrary<'a>, R>(input: &'a [u8], target: impl FnOnce(T) -> R) -> Option<R> {
    let input = T::arbitrary_take_rest(Unstructured::new(input)).ok()?;
    Some(target(input))
}

/// The file name of a seed.
fn name(path: &Path) -> &str {
    path.file_name().and_then(|name| name.to_str()).unwrap()
}

#[test]
fn skill_file() {
    for (_, bytes) in seeds(&["skills", "tests/fixtures"]) {
        targets::skill_file::run(&bytes);
    }
}

#[test]
fn skill_component() {
    // The hostile guests among the fixtures run into their limits.
    for (_, bytes) in seeds(&["skills", "tests/fixtures"]) {
        targets::skill_component::run(&bytes);
    }
}

#[test]
fn declarative_skill() {
    // A seed named `invalid-*` is refused; every other one reaches the
    // checks on the loaded component, so that the replay checks something.
    for (path, text) in seeds(&["fuzz/seeds/declarative_skill"]) {
        let checked = typed(&text, targets::declarative_skill::run);
        let valid = !name(&path).starts_with("invalid-");
        assert_eq!(checked, Some(valid), "{}", path.display());
    }
}

#[test]
fn tool_call() {
    // No seeds are committed: every demo tool (the first byte picks one) on
    // arguments that fit some tools and miss others.
    let arguments = [
        json!({}),
        json!({"orderId": "88231"}),
        json!({"orderId": "88231", "reason": "broken"}),
        json!({"order_id": "88240", "address": "1 Main St"}),
        json!({"orderId": 88231, "reason": null}),
        json!([1, "two", {"three": 3}]),
    ];
    for tool in 0..=u8::MAX {
        for arguments in &arguments {
            let mut input = vec![tool];
            input.extend(arguments.to_string().into_bytes());
            typed(&input, targets::tool_call::run);
        }
    }
}

#[test]
fn gateway_request() {
    // Every seed is a request the gateway answers.
    for (path, request) in seeds(&["fuzz/seeds/gateway_request"]) {
        let status = targets::gateway_request::run(&request);
        assert!(status.is_some(), "{} is no request", path.display());
    }
}

#[test]
fn llm_response() {
    for (_, answer) in seeds(&["fuzz/seeds/llm_response"]) {
        targets::llm_response::run(&answer);
    }
}

#[test]
fn agent_rounds() {
    // No seeds are committed: the model's choices from a fixed generator,
    // short runs and long ones.
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state.to_le_bytes()[0]
    };
    for len in [0, 1, 2, 4, 8, 16, 32, 64].into_iter().cycle().take(64) {
        let choices: Vec<u8> = (0..len).map(|_| next()).collect();
        targets::agent_rounds::run(&choices);
    }
}
