//! Any bytes where a signed skill file goes: the signature check against the
//! bundled trust store, and the key ids `skillhost inspect` shows. Seed with
//! `skills/`: mutations of real signed components reach the section parsers.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use skillhost::skills::signature::{TrustStore, embedded_key_ids};
use skillhost_fuzz::trust_store;

static TRUSTED: LazyLock<TrustStore> = LazyLock::new(trust_store);

fuzz_target!(|bytes: &[u8]| {
    let claimed = embedded_key_ids(bytes);
    if TRUSTED.verify(bytes).is_ok() {
        // A file that verifies names its signer among the key ids it carries.
        assert!(claimed.is_ok_and(|ids| !ids.is_empty()));
    }
});
