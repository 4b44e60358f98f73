//! The outer structure of a WebAssembly binary, read without trusting it.
//!
//! Before any cryptography, the file is walked section by section: the
//! 8-byte preamble, then `id, size, payload` for every top-level section.
//! Core modules and components share this framing; only the preamble's
//! version/layer field differs. Nothing inside a section is interpreted except
//! custom-section names, which say where the signature section is.
//!
//! The walk is what lets verification say *why* a file is refused: a size
//! running past the end of the file is [`SignatureError::Truncated`], an
//! impossible encoding is [`SignatureError::Malformed`], and one inside the
//! signature section [`SignatureError::MalformedSignature`].

use std::ops::Range;

use super::SignatureError;

/// `\0asm`, the first four bytes of every WebAssembly binary.
const MAGIC: [u8; 4] = *b"\0asm";
/// Version 1 of the core module binary format.
const CORE_MODULE_VERSION: [u8; 4] = [0x01, 0x00, 0x00, 0x00];
/// The component-model preamble: version 0x0d, layer 1.
const COMPONENT_VERSION: [u8; 4] = [0x0d, 0x00, 0x01, 0x00];
/// Length of the preamble (magic + version/layer).
pub(super) const PREAMBLE_LEN: usize = 8;
/// Name of the custom section holding embedded signatures (tool-conventions
/// *Signatures*; wasmsign2's `SIGNATURE_SECTION_HEADER_NAME`, not exported).
pub(super) const SIGNATURE_SECTION: &str = "signature";

/// Where the parts of a well-framed binary are.
#[derive(Debug, Clone)]
pub(super) struct Layout {
    /// The payload of the embedded signature section (after its name), when
    /// the first section is one.
    pub signature: Option<Range<usize>>,
    /// Where the signed content starts: right after the embedded signature
    /// section, or right after the preamble when there is none.
    pub content_start: usize,
}

/// Walks the top-level sections of `bytes`.
///
/// A `signature` custom section is only meaningful as the very first section
/// (tool-conventions *Signatures*); one anywhere else is refused as
/// malformed rather than silently treated as ordinary content.
pub(super) fn scan(bytes: &[u8]) -> Result<Layout, SignatureError> {
    let magic_len = bytes.len().min(MAGIC.len());
    if bytes[..magic_len] != MAGIC[..magic_len] {
        return Err(SignatureError::Malformed(
            "not a WebAssembly binary (the file does not start with `\\0asm`)".into(),
        ));
    }
    if bytes.len() < PREAMBLE_LEN {
        return Err(SignatureError::Truncated(format!(
            "the file is {} bytes long, shorter than the 8-byte WebAssembly preamble",
            bytes.len()
        )));
    }
    // Both kinds are framed alike. The preamble itself is not covered by the
    // signature (the format hashes the sections only), so only these two
    // values are accepted.
    let version = &bytes[4..PREAMBLE_LEN];
    if version != CORE_MODULE_VERSION && version != COMPONENT_VERSION {
        return Err(SignatureError::Malformed(format!(
            "unsupported WebAssembly version/layer {version:02x?} (expected a core module \
             {CORE_MODULE_VERSION:02x?} or a component {COMPONENT_VERSION:02x?})"
        )));
    }

    let mut layout = Layout {
        signature: None,
        content_start: PREAMBLE_LEN,
    };
    let mut pos = PREAMBLE_LEN;
    let mut index = 0usize;
    while pos < bytes.len() {
        let start = pos;
        let id = bytes[pos];
        pos += 1;
        if id >= 0x80 {
            // wasmsign2 reads section ids as 7-bit values; so does every
            // section id the core and component formats define.
            return Err(SignatureError::Malformed(format!(
                "section {index} at offset {start} has the invalid id 0x{id:02x}"
            )));
        }
        let size = read_u32(bytes, &mut pos, || {
            format!("the size of section {index} (id {id}) at offset {start}")
        })? as usize;
        let remaining = bytes.len() - pos;
        if size > remaining {
            return Err(SignatureError::Truncated(format!(
                "section {index} (id {id}) at offset {start} declares {size} bytes \
                 but only {remaining} remain"
            )));
        }
        let payload = pos..pos + size;
        pos = payload.end;
        if id == 0 {
            let (name, data) = custom_section(&bytes[payload.clone()], payload.start, index)?;
            if name == SIGNATURE_SECTION {
                if index != 0 {
                    return Err(SignatureError::MalformedSignature(format!(
                        "a `{SIGNATURE_SECTION}` section appears at offset {start}, but \
                         signatures are only valid as the first section"
                    )));
                }
                layout.signature = Some(data);
                layout.content_start = pos;
            }
        }
        index += 1;
    }
    Ok(layout)
}

/// Splits a custom section's payload into its name and the range of its data
/// (absolute offsets). `offset` is where `payload` starts in the file.
fn custom_section(
    payload: &[u8],
    offset: usize,
    index: usize,
) -> Result<(&str, Range<usize>), SignatureError> {
    let mut pos = 0;
    let name_len = read_u32(payload, &mut pos, || {
        format!("the name length of custom section {index}")
    })
    .map_err(|error| match error {
        // The section's own size is known, so running out here means the
        // name does not fit its section: bad encoding, not a short file.
        SignatureError::Truncated(reason) => SignatureError::Malformed(reason),
        other => other,
    })? as usize;
    let Some(name) = payload.get(pos..pos + name_len) else {
        return Err(SignatureError::Malformed(format!(
            "the name of custom section {index} runs past the end of its section"
        )));
    };
    let name = std::str::from_utf8(name).map_err(|_| {
        SignatureError::Malformed(format!(
            "the name of custom section {index} is not valid UTF-8"
        ))
    })?;
    Ok((name, offset + pos + name_len..offset + payload.len()))
}

/// The most signatures a section may hold. Verification checks each against
/// every trusted key; a file signed by a few keys needs a few.
pub(super) const MAX_SIGNATURES: u32 = 32;
/// The longest key id a signature may name (wasmsign2's are 12 bytes). Key
/// ids are shown in errors, which are kept and broadcast.
const MAX_KEY_ID_BYTES: usize = 64;

/// Checks every length-prefixed field of a signature section's data against
/// the bytes that remain. wasmsign2's parser allocates a field's declared
/// length before reading it: a few bytes of section could make it allocate
/// 4 GiB. The fields (tool-conventions *Signatures*): version, content type
/// and hash function, a byte each; a count of signed-hash sets, each a
/// length-prefixed count of 32-byte hashes and a count of length-prefixed
/// signatures, each a length-prefixed key id, an algorithm byte and a
/// length-prefixed signature. Also bounds what costs more than its bytes:
/// the number of signatures ([`MAX_SIGNATURES`]) and the length of key ids.
///
/// Every field must end where its length says, and every signature be
/// Ed25519: wasmsign2 ignores bytes past a field's end and skips
/// signatures of other algorithms, so a signed file could otherwise carry
/// unsigned bytes, and many digests verify as the same signed code.
pub(super) fn check_signature_fields(data: &[u8]) -> Result<(), SignatureError> {
    let mut section = Fields {
        bytes: data,
        pos: 0,
    };
    section.skip(3, "its version, content type and hash function")?;
    let mut signatures = 0u32;
    for _ in 0..section.count("its number of signed-hash sets")? {
        let mut set = section.nested("a signed-hash set")?;
        let hashes = set.count("a set's number of hashes")? as usize;
        set.skip(hashes.saturating_mul(32), "a set's hashes")?;
        for _ in 0..set.count("a set's number of signatures")? {
            signatures += 1;
            if signatures > MAX_SIGNATURES {
                return Err(SignatureError::MalformedSignature(format!(
                    "the signature section holds more than {MAX_SIGNATURES} signatures"
                )));
            }
            let mut signature = set.nested("a signature")?;
            let key_id = signature.nested("a signature's key id")?;
            if key_id.bytes.len() > MAX_KEY_ID_BYTES {
                return Err(SignatureError::MalformedSignature(format!(
                    "a signature's key id is {} bytes long, more than {MAX_KEY_ID_BYTES}",
                    key_id.bytes.len()
                )));
            }
            let algorithm = signature.skip(1, "a signature's algorithm")?[0];
            if algorithm != ED25519_ALGORITHM {
                return Err(SignatureError::MalformedSignature(format!(
                    "a signature's algorithm is 0x{algorithm:02x}, not Ed25519 \
                     (0x{ED25519_ALGORITHM:02x}), the only one verified"
                )));
            }
            signature.nested("a signature's bytes")?;
            signature.end("a signature")?;
        }
        set.end("a signed-hash set")?;
    }
    section.end("data")
}

/// The algorithm byte of an Ed25519 signature (wasmsign2's `ED25519_PK_ID`,
/// not exported).
const ED25519_ALGORITHM: u8 = 0x01;

/// A signature section's fields being read ([`check_signature_fields`]).
struct Fields<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Fields<'a> {
    fn count(&mut self, what: &str) -> Result<u32, SignatureError> {
        read_u32(self.bytes, &mut self.pos, || {
            format!("the signature section's {what}")
        })
        .map_err(|error| match error {
            // The section's size is known: a field running out of it is
            // bad encoding, not a short file.
            SignatureError::Truncated(reason) | SignatureError::Malformed(reason) => {
                SignatureError::MalformedSignature(reason)
            }
            other => other,
        })
    }

    fn skip(&mut self, len: usize, what: &str) -> Result<&'a [u8], SignatureError> {
        let remaining = self.bytes.len() - self.pos;
        if len > remaining {
            return Err(SignatureError::MalformedSignature(format!(
                "the signature section's {what} takes {len} bytes, but only {remaining} remain"
            )));
        }
        let field = &self.bytes[self.pos..self.pos + len];
        self.pos += len;
        Ok(field)
    }

    /// Checks that the field was read to its end.
    fn end(&self, what: &str) -> Result<(), SignatureError> {
        match self.bytes.len() - self.pos {
            0 => Ok(()),
            extra => Err(SignatureError::MalformedSignature(format!(
                "the signature section's {what} has {extra} bytes past its last field"
            ))),
        }
    }

    /// A length-prefixed field, to be read in turn.
    fn nested(&mut self, what: &str) -> Result<Fields<'a>, SignatureError> {
        let len = self.count(&format!("length of {what}"))? as usize;
        let bytes = self.skip(len, what)?;
        Ok(Fields { bytes, pos: 0 })
    }
}

/// Reads an unsigned LEB128 `u32` at `*pos`, advancing it. `what` names the
/// field for the error message.
fn read_u32(
    bytes: &[u8],
    pos: &mut usize,
    what: impl Fn() -> String,
) -> Result<u32, SignatureError> {
    let malformed =
        || SignatureError::Malformed(format!("{} is not a valid 32-bit LEB128 number", what()));
    let mut value: u32 = 0;
    for shift in (0..35).step_by(7) {
        let Some(&byte) = bytes.get(*pos) else {
            return Err(SignatureError::Truncated(format!(
                "the file ends inside {}",
                what()
            )));
        };
        *pos += 1;
        // The fifth byte may only carry the top 4 bits of a u32.
        if shift == 28 && byte & 0x70 != 0 {
            return Err(malformed());
        }
        value |= u32::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    // A sixth byte would be needed: longer than any u32.
    Err(malformed())
}
