//! Skill signatures: Ed25519 signatures in the WebAssembly tool-conventions
//! *Signatures* format, the trust store, and the policy that decides whether
//! an unsigned skill may load.
//!
//! # Format
//!
//! Signatures are those of the `wasmsign2` crate and CLI: a custom section
//! named `signature`, first in the file, holding Ed25519 signatures over the
//! SHA-256 of everything after it (or, for a detached signature, over
//! everything after the 8-byte preamble). Files `skillhost sign` signs verify
//! with `wasmsign2 verify`, and files `wasmsign2 sign` signs verify here.
//! Core modules and components are both supported: they share the section
//! framing, and wasmsign2 (0.2.8) accepts both preambles.
//!
//! Verification here is stricter than wasmsign2's `PublicKey::verify` in
//! three documented ways, each refusing something wasmsign2 would accept:
//! a set of signed hashes vouches for the content only through its *last*
//! hash (wasmsign2 accepts any hash of the set, which lets a file cut short at
//! a `signature_delimiter` pass); a signature whose key id was altered is
//! refused as tampered; a `signature` section that is not the first section is
//! malformed.
//!
//! # Using it
//!
//! A loader reads the file, asks its [`SignaturePolicy`] about the bytes,
//! and compiles those same bytes only when the policy allows it:
//!
//! ```no_run
//! # use skillhost::skills::signature::{SignaturePolicy, TrustStore};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let policy = SignaturePolicy::Require(TrustStore::load(&["keys/trusted"])?);
//! let path = std::path::Path::new("skills/refund.wasm");
//! let bytes = std::fs::read(path)?;
//! let verification = policy.check(path, &bytes)?; // refuse the file on Err
//! // ... compile `bytes`, never the file read again ...
//! # let _ = verification; Ok(()) }
//! ```

mod keys;
mod layout;
mod scope;
mod sign;
mod verify;

use std::path::Path;

pub use keys::{
    DuplicateKey, Fingerprint, InvalidKey, KeyError, PublicKey, SigningKey, TrustStore, TrustedKey,
};
pub use scope::{KeyScope, NotAdmitted};
pub use sign::SignError;
pub use verify::{Verified, embedded_key_ids};

/// Why a file's signature is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignatureError {
    /// The file has no signature section.
    #[error("unsigned: the file has no signature section")]
    Unsigned,
    /// The file is signed, but by no trusted key.
    #[error(
        "signed by an unknown key: no signature is from a trusted key{}",
        describe_key_ids(key_ids)
    )]
    UnknownKey {
        /// wasmsign2 key ids (hex) the signatures carry — the signers'
        /// fingerprints; empty when they carry none.
        key_ids: Vec<String>,
    },
    /// A trusted key signed this file, but the file changed since — or,
    /// for [`Tamper::Signature`], a signature claims a trusted key and does
    /// not verify under it (altered, or forged with another key: the two
    /// cannot be told apart, so neither is said).
    #[error(
        "tampered: {}",
        match how {
            Tamper::Signature => format!(
                "a signature claims trusted key {signer}, but does not verify under it (the \
                 signature section was altered, or the signature made with another key)"
            ),
            how => format!("signed by trusted key {signer}, but {how}"),
        }
    )]
    Tampered {
        /// The trusted key whose signature no longer matches (for
        /// [`Tamper::Signature`], the key the signature claims).
        signer: Fingerprint,
        /// What no longer matches.
        how: Tamper,
    },
    /// The file ends early: a section runs past its end.
    #[error(
        "truncated: {0}; the file ends early, as an interrupted copy leaves it (write a \
         file under a temporary name, then rename it into place)"
    )]
    Truncated(String),
    /// The file cannot be parsed as WebAssembly.
    #[error("malformed: {0}")]
    Malformed(String),
    /// The file is WebAssembly, but its signature section cannot be parsed,
    /// or is not the first section.
    #[error("malformed signature: {0}")]
    MalformedSignature(String),
}

impl SignatureError {
    /// A stable one-word name of the case, for machine-readable output:
    /// `unsigned`, `unknown_key`, `tampered`, `truncated` or `malformed`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Unsigned => "unsigned",
            Self::UnknownKey { .. } => "unknown_key",
            Self::Tampered { .. } => "tampered",
            Self::Truncated(_) => "truncated",
            Self::Malformed(_) | Self::MalformedSignature(_) => "malformed",
        }
    }
}

fn describe_key_ids(key_ids: &[String]) -> String {
    if key_ids.is_empty() {
        " (the signatures name no key)".into()
    } else {
        format!(" (signed by key {})", key_ids.join(", "))
    }
}

/// What changed in a file a trusted key signed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Tamper {
    /// Bytes outside the signature section changed: the content's digest is
    /// not the one that was signed.
    #[error("the content changed since it was signed")]
    Content,
    /// The signature or the signed digests in the signature section changed
    /// (or the signature was made with another key than the one it names).
    #[error("the signature does not verify under the key it names")]
    Signature,
    /// The key id stored next to the signature changed.
    #[error("the key id in the signature section was altered")]
    KeyId,
}

/// Whether skills must be signed by a trusted key to load.
///
/// There is deliberately no `Default`: the safe choice,
/// [`SignaturePolicy::Require`], needs a trust store, and the other one must
/// be asked for by name.
#[derive(Debug, Clone)]
pub enum SignaturePolicy {
    /// Load only files signed by a key in the store. The normal mode.
    Require(TrustStore),
    /// Load files without checking signatures at all. For development only
    /// (`--allow-unsigned`): every load logs a warning naming the file.
    AllowUnsigned,
}

/// How a file passed [`SignaturePolicy::check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verification {
    /// A trusted key signed exactly these bytes.
    Verified(Verified),
    /// Nothing was checked ([`SignaturePolicy::AllowUnsigned`]).
    Unverified,
}

impl SignaturePolicy {
    /// Decides whether the skill file `path`, whose content is `bytes`, may
    /// load. Call it on the raw bytes before compiling them; `path` is only
    /// used for the warning [`SignaturePolicy::AllowUnsigned`] logs.
    pub fn check(&self, path: &Path, bytes: &[u8]) -> Result<Verification, SignatureError> {
        match self {
            Self::Require(store) => store.verify(bytes).map(Verification::Verified),
            Self::AllowUnsigned => {
                tracing::warn!(
                    file = %path.display(),
                    "LOADING SKILL WITHOUT SIGNATURE VERIFICATION (--allow-unsigned): {} may be \
                     unsigned or tampered; never use this outside development",
                    path.display()
                );
                Ok(Verification::Unverified)
            }
        }
    }

    /// The keys this policy trusts, in the store's order (none under
    /// [`SignaturePolicy::AllowUnsigned`], which checks nothing).
    pub fn trusted_keys(&self) -> Vec<Fingerprint> {
        match self {
            Self::Require(store) => store.keys().iter().map(TrustedKey::fingerprint).collect(),
            Self::AllowUnsigned => Vec::new(),
        }
    }

    /// Whether content loaded earlier, signed by `signer`, passes this
    /// policy for its signer alone: a key of the store (`None`, content
    /// loaded without a check, passes only
    /// [`SignaturePolicy::AllowUnsigned`]). For content whose bytes are no
    /// longer at hand, or code already running; a signer a new store no
    /// longer holds is not trusted, whatever other signatures the bytes
    /// carried.
    pub fn check_signer(&self, signer: Option<&Fingerprint>) -> Result<(), UntrustedSigner> {
        match (self, signer) {
            (Self::AllowUnsigned, _) => Ok(()),
            (Self::Require(store), Some(signer)) => store
                .keys()
                .iter()
                .any(|key| key.fingerprint() == *signer)
                .then_some(())
                .ok_or(UntrustedSigner::Key(*signer)),
            (Self::Require(_), None) => Err(UntrustedSigner::Unchecked),
        }
    }
}

/// Why content loaded earlier no longer passes a policy for its signer
/// ([`SignaturePolicy::check_signer`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UntrustedSigner {
    /// Its signer's key is not in the trust store.
    #[error("its signer, key {0}, is no longer trusted")]
    Key(Fingerprint),
    /// It was loaded under [`SignaturePolicy::AllowUnsigned`].
    #[error("it was loaded without a signature check, and signatures are now required")]
    Unchecked,
}

#[cfg(test)]
mod tests;
