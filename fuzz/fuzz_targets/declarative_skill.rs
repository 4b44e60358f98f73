//! [`skillhost_fuzz::targets::declarative_skill`] under libFuzzer.
#![no_main]

libfuzzer_sys::fuzz_target!(|input: (bool, &str)| {
    skillhost_fuzz::targets::declarative_skill::run(input);
});
