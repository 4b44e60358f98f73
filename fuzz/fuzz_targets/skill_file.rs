//! [`skillhost_fuzz::targets::skill_file`] under libFuzzer.
#![no_main]

libfuzzer_sys::fuzz_target!(|input: &[u8]| skillhost_fuzz::targets::skill_file::run(input));
