//! Checking a binary's signatures against a [`TrustStore`].

use sha2::{Digest, Sha256};
use wasmsign2::{SignatureData, WSError};

use super::keys::{Fingerprint, PublicKey, TrustStore};
use super::layout::{self, PREAMBLE_LEN};
use super::{SignatureError, Tamper};

/// The only hash function the format defines (SHA-256).
const HASH_SHA256: u8 = 0x01;
/// What an Ed25519 signature in the format signs, before the hashes:
/// `"wasmsig"`, then the specification version, content type and hash
/// function (tool-conventions *Signatures*; wasmsign2 builds the same bytes).
const SIGNED_MESSAGE_PREFIX: &[u8] = b"wasmsig\x01\x01\x01";

/// A binary that passed verification.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Verified {
    /// The first trusted key (in trust-store order) with a valid signature.
    pub signer: Fingerprint,
    /// Every trusted key with a valid signature, in trust-store order.
    pub signers: Vec<Fingerprint>,
}

impl TrustStore {
    /// Verifies the signature embedded in `bytes`, a core module or a
    /// component, before anything else looks at it.
    ///
    /// Call this on the raw bytes read from disk, and compile exactly those
    /// bytes afterwards (not the file again): verification happens before
    /// compilation and must cover what is compiled.
    ///
    /// Accepted when a trusted key made a signature over exactly the content
    /// of the file: every byte after the signature section. (The format does
    /// not sign the 8-byte preamble; only the core-module and the component
    /// preambles are accepted.) The errors say which case applies:
    /// [`SignatureError::Unsigned`], [`SignatureError::UnknownKey`],
    /// [`SignatureError::Tampered`], [`SignatureError::Truncated`],
    /// [`SignatureError::Malformed`] or [`SignatureError::MalformedSignature`].
    ///
    /// Cost: one SHA-256 pass over the file and one Ed25519 check per
    /// signature (at most 32) and trusted key; for large components call it
    /// where blocking is fine (e.g. with the compilation, off the async
    /// runtime).
    pub fn verify(&self, bytes: &[u8]) -> Result<Verified, SignatureError> {
        let layout = layout::scan(bytes)?;
        let Some(signature) = layout.signature else {
            return Err(SignatureError::Unsigned);
        };
        self.check(&bytes[signature], &bytes[layout.content_start..])
    }

    /// Verifies `bytes` against a detached signature (the payload a
    /// signature section would hold, as `skillhost sign --detached` and
    /// `wasmsign2 sign -S` write it). The signed content is every byte after
    /// the 8-byte preamble.
    pub fn verify_detached(
        &self,
        bytes: &[u8],
        signature: &[u8],
    ) -> Result<Verified, SignatureError> {
        layout::scan(bytes)?;
        self.check(signature, &bytes[PREAMBLE_LEN..])
    }

    fn check(&self, signature: &[u8], content: &[u8]) -> Result<Verified, SignatureError> {
        let data = parse_signature_data(signature)?;
        let digest = Sha256::digest(content);

        // A signed hash set vouches for the whole content only through its
        // *last* hash. Earlier hashes belong to prefixes ending at a
        // `signature_delimiter` (partial verification); matching one of them
        // would accept a file cut short at a delimiter, so they are ignored.
        let mut signers: Vec<Fingerprint> = Vec::new();
        let mut tampered: Option<(Fingerprint, Tamper)> = None;
        let mut key_ids: Vec<String> = Vec::new();
        for set in &data.signed_hashes_set {
            let mut message = SIGNED_MESSAGE_PREFIX.to_vec();
            for hash in &set.hashes {
                message.extend_from_slice(hash);
            }
            let covers_content = set.hashes.last().is_some_and(|last| *last == digest[..]);
            for signature in &set.signatures {
                let key_id = signature.key_id.as_deref();
                if let Some(id) = key_id {
                    key_ids.push(hex::encode(id));
                }
                for trusted in self.keys() {
                    let key = trusted.key();
                    match judge(key, key_id, &message, &signature.signature, covers_content) {
                        Judgement::Valid => signers.push(key.fingerprint()),
                        Judgement::Tampered(how) => {
                            tampered.get_or_insert((key.fingerprint(), how));
                        }
                        Judgement::NotThisKey => {}
                    }
                }
            }
        }

        // Report in trust-store order (the store holds each key once).
        let signers_in_order: Vec<Fingerprint> = self
            .keys()
            .iter()
            .map(|trusted| trusted.fingerprint())
            .filter(|fingerprint| signers.contains(fingerprint))
            .collect();
        if let Some(&signer) = signers_in_order.first() {
            return Ok(Verified {
                signer,
                signers: signers_in_order,
            });
        }
        if let Some((signer, how)) = tampered {
            return Err(SignatureError::Tampered { signer, how });
        }
        key_ids.sort();
        key_ids.dedup();
        Err(SignatureError::UnknownKey { key_ids })
    }
}

/// The wasmsign2 key ids (hex, sorted, each once) of the signatures
/// embedded in `bytes`, read without judging them: who claims to have
/// signed, for display before or without a trust store. Fails as
/// [`TrustStore::verify`] does on a file that is unsigned or whose
/// signature section cannot be read.
pub fn embedded_key_ids(bytes: &[u8]) -> Result<Vec<String>, SignatureError> {
    let layout = layout::scan(bytes)?;
    let signature = layout.signature.ok_or(SignatureError::Unsigned)?;
    let data = parse_signature_data(&bytes[signature])?;
    let mut key_ids: Vec<String> = data
        .signed_hashes_set
        .iter()
        .flat_map(|set| &set.signatures)
        .filter_map(|signature| signature.key_id.as_deref().map(hex::encode))
        .collect();
    key_ids.sort();
    key_ids.dedup();
    Ok(key_ids)
}

/// What one signature says about one trusted key.
enum Judgement {
    /// The key signed exactly this content.
    Valid,
    /// The key signed this file, but the file changed since.
    Tampered(Tamper),
    /// Nothing connects this signature to this key.
    NotThisKey,
}

fn judge(
    key: &PublicKey,
    key_id: Option<&[u8]>,
    message: &[u8],
    signature: &[u8],
    covers_content: bool,
) -> Judgement {
    // A signature naming another key is not this key's, as wasmsign2 sees
    // it; a signature with no key id may be anyone's.
    let id_matches = key_id.is_none_or(|id| id == key.key_id());
    let verifies = key.verifies(message, signature);
    match (verifies, id_matches, covers_content) {
        (true, true, true) => Judgement::Valid,
        (true, true, false) => Judgement::Tampered(Tamper::Content),
        // The key id is not covered by the Ed25519 signature, so an altered
        // one leaves a signature that still verifies under its real key.
        (true, false, _) => Judgement::Tampered(Tamper::KeyId),
        (false, true, _) if key_id.is_some() => Judgement::Tampered(Tamper::Signature),
        (false, _, _) => Judgement::NotThisKey,
    }
}

fn parse_signature_data(signature: &[u8]) -> Result<SignatureData, SignatureError> {
    layout::check_signature_fields(signature)?;
    let data = SignatureData::deserialize(signature).map_err(|error| {
        let why = match error {
            WSError::IOError(_) | WSError::Eof => "it ends in the middle of a field".to_string(),
            WSError::ParseError => "unsupported version, content type or encoding".to_string(),
            other => other.to_string(),
        };
        SignatureError::MalformedSignature(format!("the signature section cannot be parsed: {why}"))
    })?;
    if data.hash_function != HASH_SHA256 {
        return Err(SignatureError::MalformedSignature(format!(
            "the signature section uses hash function 0x{:02x}; only SHA-256 (0x01) is defined",
            data.hash_function
        )));
    }
    if data
        .signed_hashes_set
        .iter()
        .all(|set| set.signatures.is_empty())
    {
        return Err(SignatureError::MalformedSignature(
            "the signature section holds no Ed25519 signature".into(),
        ));
    }
    Ok(data)
}
