//! [`skillhost_fuzz::targets::gateway_request`] under libFuzzer.
#![no_main]

libfuzzer_sys::fuzz_target!(|input: &[u8]| {
    skillhost_fuzz::targets::gateway_request::run(input);
});
