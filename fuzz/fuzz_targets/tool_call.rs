//! [`skillhost_fuzz::targets::tool_call`] under libFuzzer.
#![no_main]

libfuzzer_sys::fuzz_target!(|input: (u8, &[u8])| skillhost_fuzz::targets::tool_call::run(input));
