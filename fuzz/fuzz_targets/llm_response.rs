//! [`skillhost_fuzz::targets::llm_response`] under libFuzzer.
#![no_main]

libfuzzer_sys::fuzz_target!(|input: &[u8]| skillhost_fuzz::targets::llm_response::run(input));
