//! [`skillhost_fuzz::targets::agent_rounds`] under libFuzzer.
#![no_main]

libfuzzer_sys::fuzz_target!(|input: &[u8]| skillhost_fuzz::targets::agent_rounds::run(input));
