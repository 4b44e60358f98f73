//! The demo signing key, the trust store that trusts it, and files signed,
//! unsigned or tampered with for the tests that need them.

use std::path::Path;

use skillhost::skills::pack::{DeclarativeSkill, Format};
use skillhost::skills::signature::{SignaturePolicy, SigningKey, TrustStore};

use super::fixtures::repo_root;

/// The committed demo key every bundled skill and fixture is signed with.
pub fn demo_key() -> SigningKey {
    SigningKey::load(&repo_root().join("keys/demo-signing.key")).expect("loading the demo key")
}

/// `bytes` (a component or core module) signed with the demo key.
pub fn signed(bytes: &[u8]) -> Vec<u8> {
    demo_key().sign(bytes).expect("signing with the demo key")
}

/// The instruction-only skill `name` that calls `tool`, packed and signed
/// with the demo key.
pub fn signed_skill_calling(name: &str, tool: &str) -> Vec<u8> {
    let yaml = format!(
        "name: {name}\nversion: 1.0.0\ndescription: Calls {tool}.\ntools: [{tool}]\n\
         parameters: {{type: object}}\ninstructions: Call {tool}.\n"
    );
    let skill = DeclarativeSkill::parse(&yaml, Format::Yaml, Path::new("skill.yaml")).unwrap();
    signed(&skill.to_component().unwrap())
}

/// The policy of the default demo configuration: only files signed by a key
/// in `keys/trusted/` load.
pub fn demo_policy() -> SignaturePolicy {
    let store = TrustStore::load(&[repo_root().join("keys/trusted")]).expect("demo trust store");
    SignaturePolicy::Require(store)
}

/// The signed file at `path` with its signature section removed.
pub fn unsigned(path: &Path) -> Vec<u8> {
    let signed = std::fs::read(path).expect("reading a signed fixture");
    // The preamble, then the signature section first: id 0, size (LEB128).
    assert_eq!(signed[8], 0, "the first section is a custom section");
    let (mut size, mut at, mut shift) = (0usize, 9, 0);
    loop {
        let byte = signed[at];
        size |= usize::from(byte & 0x7f) << shift;
        at += 1;
        shift += 7;
        if byte & 0x80 == 0 {
            break;
        }
    }
    assert_eq!(
        &signed[at + 1..at + 10],
        b"signature",
        "a signature section"
    );
    [&signed[..8], &signed[at + size..]].concat()
}
