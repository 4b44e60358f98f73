//! [`skillhost_fuzz::targets::skill_component`] under libFuzzer.
#![no_main]

libfuzzer_sys::fuzz_target!(|input: &[u8]| skillhost_fuzz::targets::skill_component::run(input));
