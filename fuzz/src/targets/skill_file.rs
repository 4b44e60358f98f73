//! Any bytes where a signed skill file goes: the signature check against the
//! bundled trust store, and the key ids `skillhost inspect` shows. Seed with
//! `skills/`: mutations of real signed components reach the section parsers.

use std::sync::LazyLock;

use crate::trust_store;
use skillhost::skills::signature::{TrustStore, embedded_key_ids};

static TRUSTED: LazyLock<TrustStore> = LazyLock::new(trust_store);

/// One input.
pub fn run(bytes: &[u8]) {
    let claimed = embedded_key_ids(bytes);
    if TRUSTED.verify(bytes).is_ok() {
        // A file that verifies names its signer among the key ids it carries.
        assert!(claimed.is_ok_and(|ids| !ids.is_empty()));
    }
}
