//! Adding signatures to binaries.

use sha2::{Digest, Sha256};
use wasmsign2::{CustomSection, Module, Section, SectionLike, SignatureData, WSError};

use super::keys::{Fingerprint, SigningKey};
use super::{SignatureError, layout};

/// A failure to sign.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SignError {
    /// The input is not a well-formed core module or component.
    #[error("cannot sign this file: {0}")]
    Unreadable(SignatureError),
    /// This key already signed exactly this content.
    #[error("already signed by key {0}")]
    AlreadySigned(Fingerprint),
    /// A detached signature was requested for a file that embeds one; the
    /// detached signature would cover the embedded one too.
    #[error(
        "the file already carries an embedded signature; a detached signature covers \
         files without one (sign it embedded instead, or strip the signature first)"
    )]
    EmbeddedSignature,
    /// Section sizes in the file use longer LEB128 encodings than needed.
    /// Signing re-encodes them minimally (as wasmsign2 does), so a detached
    /// signature would not match the file's own bytes.
    #[error(
        "the file encodes section sizes with padding; a detached signature would not match \
         its bytes (sign it embedded, which rewrites it canonically)"
    )]
    NonCanonical,
    /// The detached signature to extend cannot be used.
    #[error("the existing detached signature cannot be extended: {0}")]
    BadDetached(SignatureError),
    /// wasmsign2 refused for another reason.
    #[error("wasmsign2 cannot sign this file: {0}")]
    Wasmsign2(WSError),
}

impl SigningKey {
    /// Returns `wasm` (a core module or a component) with this key's
    /// signature embedded in its signature section, as the first section.
    ///
    /// Signatures already present over the same content are kept (the file
    /// becomes multi-signed: each key verifies it). Signatures over *other*
    /// content (the file changed since they were made) are dropped: left in
    /// place, they would let that older content pass as signed (a rollback).
    /// Sections are re-encoded with minimal sizes, as wasmsign2 does.
    pub fn sign(&self, wasm: &[u8]) -> Result<Vec<u8>, SignError> {
        layout::scan(wasm).map_err(SignError::Unreadable)?;
        let module = deserialize(wasm)?;
        let (signed, _) = self.add_signature(module)?;
        let mut out = Vec::with_capacity(wasm.len() + 128);
        signed.serialize(&mut out).map_err(SignError::Wasmsign2)?;
        Ok(out)
    }

    /// Returns a detached signature of `wasm` by this key: the payload a
    /// signature section would hold, in the format `wasmsign2 sign -S`
    /// writes. `existing`, a detached signature of the same file, is
    /// extended (multi-signature); its signatures over other content are
    /// dropped, as in [`SigningKey::sign`].
    ///
    /// `wasm` itself is not changed, so it must carry no embedded signature
    /// and must be canonically encoded.
    pub fn sign_detached(
        &self,
        wasm: &[u8],
        existing: Option<&[u8]>,
    ) -> Result<Vec<u8>, SignError> {
        if layout::scan(wasm)
            .map_err(SignError::Unreadable)?
            .signature
            .is_some()
        {
            return Err(SignError::EmbeddedSignature);
        }
        let mut module = deserialize(wasm)?;
        let mut canonical = Vec::with_capacity(wasm.len());
        module
            .serialize(&mut canonical)
            .map_err(SignError::Wasmsign2)?;
        if canonical != wasm {
            return Err(SignError::NonCanonical);
        }
        if let Some(existing) = existing {
            // Parse first: wasmsign2 would attach anything.
            layout::check_signature_fields(existing).map_err(SignError::BadDetached)?;
            SignatureData::deserialize(existing).map_err(|error| {
                SignError::BadDetached(SignatureError::MalformedSignature(error.to_string()))
            })?;
            module = module
                .attach_signature(existing)
                .map_err(SignError::Wasmsign2)?;
        }
        // Signing the module with the signature attached hashes the same
        // sections as the detached form and yields the new section payload.
        let (_, signature) = self.add_signature(module)?;
        Ok(signature)
    }

    /// Signs `module` (embedded), first dropping signed hash sets that do
    /// not cover its current content.
    fn add_signature(&self, mut module: Module) -> Result<(Module, Vec<u8>), SignError> {
        drop_stale_signatures(&mut module)?;
        let key_id = self.public_key().key_id().to_vec();
        self.secret
            .sign_multi(module, Some(&key_id), false, false)
            .map_err(|error| match error {
                WSError::DuplicateSignature => {
                    SignError::AlreadySigned(self.public_key().fingerprint())
                }
                other => SignError::Wasmsign2(other),
            })
    }
}

fn deserialize(wasm: &[u8]) -> Result<Module, SignError> {
    let mut reader = wasm;
    Module::deserialize(&mut reader).map_err(|error| {
        SignError::Unreadable(SignatureError::Malformed(format!(
            "wasmsign2 cannot parse it: {error}"
        )))
    })
}

/// Removes, from the signature section of `module` (if it has one), every
/// signed hash set whose final hash is not the digest of the module's
/// current content.
fn drop_stale_signatures(module: &mut Module) -> Result<(), SignError> {
    let Some(Section::Custom(header)) = module.sections.first() else {
        return Ok(());
    };
    if !header.is_signature_header() {
        return Ok(());
    }
    layout::check_signature_fields(header.payload()).map_err(SignError::Unreadable)?;
    let mut data = header.signature_data().map_err(|_| {
        SignError::Unreadable(SignatureError::MalformedSignature(
            "its signature section cannot be parsed".into(),
        ))
    })?;
    let mut hasher = Sha256::new();
    for section in &module.sections[1..] {
        let mut encoded = Vec::with_capacity(section.payload().len() + 16);
        section
            .serialize(&mut encoded)
            .map_err(SignError::Wasmsign2)?;
        hasher.update(&encoded);
    }
    let digest = hasher.finalize();
    let before = data.signed_hashes_set.len();
    data.signed_hashes_set
        .retain(|set| set.hashes.last().is_some_and(|last| *last == digest[..]));
    let dropped = before - data.signed_hashes_set.len();
    if dropped > 0 {
        tracing::warn!(
            dropped,
            "dropping signatures over earlier content of this file (it changed since they were made)"
        );
        let payload = data.serialize().map_err(SignError::Wasmsign2)?;
        module.sections[0] = Section::Custom(CustomSection::new(
            layout::SIGNATURE_SECTION.to_string(),
            payload,
        ));
    }
    Ok(())
}
