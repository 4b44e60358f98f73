//! Signing and verification over real core modules and components.

use std::path::Path;

use wasmsign2::reexports::ct_codecs::{Base64, Encoder};

use super::*;

/// A component with a core module that has code, data and a custom
/// section, plus a top-level custom section. The markers make each region
/// easy to find in the binary.
const COMPONENT: &str = r#"
(component
  (core module $m
    (memory 1)
    (data (i32.const 0) "DATA-REGION-MARKER")
    (func (export "answer") (result i32)
      i32.const 0x1234567)
    (@custom "module-note" "INNER-CUSTOM-MARKER"))
  (core instance (instantiate $m))
  (@custom "skill-note" "TOP-CUSTOM-MARKER"))
"#;

/// A core module with the same kinds of regions.
const CORE_MODULE: &str = r#"
(module
  (memory 1)
  (data (i32.const 0) "DATA-REGION-MARKER")
  (func (export "answer") (result i32)
    i32.const 0x1234567)
  (@custom "module-note" "INNER-CUSTOM-MARKER"))
"#;

fn component() -> Vec<u8> {
    wat::parse_str(COMPONENT).unwrap()
}

fn core_module() -> Vec<u8> {
    wat::parse_str(CORE_MODULE).unwrap()
}

fn store(keys: &[&SigningKey]) -> TrustStore {
    TrustStore::new(
        keys.iter()
            .map(|key| TrustedKey::new(key.public_key().clone(), "test")),
    )
    .unwrap()
}

/// Where `needle` starts in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> usize {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
        .unwrap_or_else(|| panic!("{:?} not found", String::from_utf8_lossy(needle)))
}

/// `bytes` with the byte at `at` flipped.
fn flipped(bytes: &[u8], at: usize) -> Vec<u8> {
    let mut out = bytes.to_vec();
    out[at] ^= 0x01;
    out
}

/// The range of the signature section (id, size, name and payload) of a
/// file signed once by `skillhost sign`.
fn signature_section(signed: &[u8]) -> std::ops::Range<usize> {
    let layout = layout::scan(signed).unwrap();
    assert!(layout.signature.is_some());
    layout::PREAMBLE_LEN..layout.content_start
}

#[test]
fn the_fixture_is_a_component() {
    let bytes = component();
    assert_eq!(&bytes[..8], b"\0asm\x0d\x00\x01\x00");
    assert_eq!(&core_module()[..8], b"\0asm\x01\x00\x00\x00");
}

#[test]
fn sign_verify_round_trip_on_a_component() {
    let key = SigningKey::generate();
    let signed = key.sign(&component()).unwrap();
    let verified = store(&[&key]).verify(&signed).unwrap();
    assert_eq!(verified.signer, key.public_key().fingerprint());
    assert_eq!(verified.signers, vec![key.public_key().fingerprint()]);
}

#[test]
fn signing_keeps_the_component_valid_and_its_content_intact() {
    let original = component();
    let signed = SigningKey::generate().sign(&original).unwrap();
    let section = signature_section(&signed);
    // The signature section is inserted first; everything else is unchanged.
    assert_eq!(&signed[..8], &original[..8]);
    assert_eq!(&signed[section.end..], &original[8..]);
    // The signature section is a custom section: the component still compiles.
    let engine = wasmtime::Engine::default();
    wasmtime::component::Component::new(&engine, &signed).expect("the signed component compiles");
}

#[test]
fn unsigned_is_refused_as_unsigned() {
    let key = SigningKey::generate();
    assert_eq!(
        store(&[&key]).verify(&component()),
        Err(SignatureError::Unsigned)
    );
    assert_eq!(
        store(&[&key]).verify(&core_module()),
        Err(SignatureError::Unsigned)
    );
}

#[test]
fn wrong_key_is_refused_as_unknown_key_with_its_key_id() {
    let signer = SigningKey::generate();
    let trusted = SigningKey::generate();
    let signed = signer.sign(&component()).unwrap();
    let error = store(&[&trusted]).verify(&signed).unwrap_err();
    assert_eq!(
        error,
        SignatureError::UnknownKey {
            key_ids: vec![hex::encode(signer.public_key().key_id())]
        }
    );
    assert!(error.to_string().contains("unknown key"), "{error}");
}

#[test]
fn either_of_two_trusted_keys_verifies() {
    let old = SigningKey::generate();
    let new = SigningKey::generate();
    let trust = store(&[&old, &new]);
    for key in [&old, &new] {
        let signed = key.sign(&component()).unwrap();
        assert_eq!(
            trust.verify(&signed).unwrap().signer,
            key.public_key().fingerprint()
        );
    }
}

#[test]
fn signing_twice_makes_a_multi_signature_each_key_verifies() {
    let first = SigningKey::generate();
    let second = SigningKey::generate();
    let once = first.sign(&component()).unwrap();
    let twice = second.sign(&once).unwrap();
    assert_eq!(
        store(&[&first]).verify(&twice).unwrap().signer,
        first.public_key().fingerprint()
    );
    assert_eq!(
        store(&[&second]).verify(&twice).unwrap().signer,
        second.public_key().fingerprint()
    );
    let both = store(&[&first, &second]).verify(&twice).unwrap();
    assert_eq!(
        both.signers,
        vec![
            first.public_key().fingerprint(),
            second.public_key().fingerprint()
        ]
    );
}

#[test]
fn signing_again_with_the_same_key_is_refused() {
    let key = SigningKey::generate();
    let once = key.sign(&component()).unwrap();
    assert!(
        matches!(key.sign(&once), Err(SignError::AlreadySigned(fp)) if fp == key.public_key().fingerprint())
    );
}

#[test]
fn resigning_changed_content_drops_the_stale_signature() {
    // v1 signed, then changed (a section appended) and signed again: the
    // signature over v1 must not travel with v2, or v1 could be replayed
    // under v2's signature section.
    let key = SigningKey::generate();
    let v1 = key.sign(&component()).unwrap();
    let mut changed = v1.clone();
    changed.extend_from_slice(&[0x00, 0x04, 0x03, b'n', b'e', b'w']); // custom section "new"
    let v2 = key.sign(&changed).unwrap();
    let trust = store(&[&key]);
    trust.verify(&v2).unwrap();
    let v2_section = signature_section(&v2);
    let mut replay = v2[..v2_section.end].to_vec();
    replay.extend_from_slice(&v1[signature_section(&v1).end..]);
    assert!(matches!(
        trust.verify(&replay),
        Err(SignatureError::Tampered {
            how: Tamper::Content,
            ..
        })
    ));
}

#[test]
fn tampering_with_the_header_is_refused() {
    let key = SigningKey::generate();
    let signed = key.sign(&component()).unwrap();
    for at in 0..8 {
        let error = store(&[&key]).verify(&flipped(&signed, at)).unwrap_err();
        assert!(
            matches!(error, SignatureError::Malformed(_)),
            "byte {at}: {error}"
        );
    }
}

#[test]
fn tampering_with_the_signature_section_is_refused() {
    let key = SigningKey::generate();
    let signed = key.sign(&component()).unwrap();
    let trust = store(&[&key]);
    let section = signature_section(&signed);
    // The section ends with the Ed25519 signature (64 bytes); the key id
    // comes before it. Flip one byte of each and check the reason.
    let signature_byte = section.end - 1;
    let error = trust.verify(&flipped(&signed, signature_byte)).unwrap_err();
    assert!(
        matches!(
            error,
            SignatureError::Tampered {
                how: Tamper::Signature,
                ..
            }
        ),
        "{error}"
    );
    let key_id = find(&signed[section.clone()], key.public_key().key_id()) + section.start;
    let error = trust.verify(&flipped(&signed, key_id)).unwrap_err();
    assert!(
        matches!(
            error,
            SignatureError::Tampered {
                how: Tamper::KeyId,
                ..
            }
        ),
        "{error}"
    );
    // Every byte of the section: refused, and never as anything but a
    // signature problem of this file.
    for at in section {
        let error = trust.verify(&flipped(&signed, at)).unwrap_err();
        assert!(
            matches!(
                error,
                SignatureError::Tampered { .. }
                    | SignatureError::MalformedSignature(_)
                    | SignatureError::Malformed(_)
                    | SignatureError::Truncated(_)
                    // Changing the section's id or name leaves a file whose
                    // first section is not a signature section.
                    | SignatureError::Unsigned
            ),
            "byte {at}: {error}"
        );
    }
}

#[test]
fn tampering_with_code_data_and_custom_sections_is_refused_as_tampered() {
    let key = SigningKey::generate();
    let trust = store(&[&key]);
    for original in [component(), core_module()] {
        let signed = key.sign(&original).unwrap();
        let regions = [
            // `i32.const 0x1234567` is 0x41 then this LEB128.
            ("code", find(&signed, &[0x41, 0xe7, 0x8a, 0x8d, 0x09]) + 2),
            ("data", find(&signed, b"DATA-REGION-MARKER") + 3),
            ("custom", find(&signed, b"INNER-CUSTOM-MARKER") + 3),
        ];
        for (region, at) in regions {
            let error = trust.verify(&flipped(&signed, at)).unwrap_err();
            assert_eq!(
                error,
                SignatureError::Tampered {
                    signer: key.public_key().fingerprint(),
                    how: Tamper::Content,
                },
                "{region} at {at}"
            );
        }
    }
    let signed = key.sign(&component()).unwrap();
    let at = find(&signed, b"TOP-CUSTOM-MARKER");
    assert!(matches!(
        trust.verify(&flipped(&signed, at)),
        Err(SignatureError::Tampered {
            how: Tamper::Content,
            ..
        })
    ));
}

#[test]
fn no_single_byte_change_anywhere_is_accepted() {
    let key = SigningKey::generate();
    let trust = store(&[&key]);
    for original in [component(), core_module()] {
        let signed = key.sign(&original).unwrap();
        trust.verify(&signed).unwrap();
        for at in 0..signed.len() {
            for mask in [0x01, 0x80, 0xff] {
                let mut changed = signed.clone();
                changed[at] ^= mask;
                assert!(
                    trust.verify(&changed).is_err(),
                    "accepted with byte {at} ^ {mask:#x}"
                );
            }
        }
    }
}

#[test]
fn truncated_files_are_refused() {
    let key = SigningKey::generate();
    let trust = store(&[&key]);
    let signed = key.sign(&component()).unwrap();
    for len in 0..signed.len() {
        let error = trust.verify(&signed[..len]).unwrap_err();
        assert!(
            matches!(
                error,
                SignatureError::Truncated(_)
                    | SignatureError::Malformed(_)
                    | SignatureError::Unsigned
                    | SignatureError::Tampered { .. }
            ),
            "length {len}: {error}"
        );
    }
    // Cut in the middle of the data: the last section runs past the end.
    let cut = find(&signed, b"DATA-REGION-MARKER") + 5;
    assert!(matches!(
        trust.verify(&signed[..cut]),
        Err(SignatureError::Truncated(_))
    ));
    assert!(matches!(
        trust.verify(&signed[..4]),
        Err(SignatureError::Truncated(_))
    ));
    // Cut at a section boundary: framing is intact, the digest is not.
    // (The custom section "skill-note" starts with its id, size and name
    // length, one byte each here.)
    let cut = find(&signed, b"skill-note") - 3;
    assert_eq!(signed[cut], 0);
    assert!(matches!(
        trust.verify(&signed[..cut]),
        Err(SignatureError::Tampered {
            how: Tamper::Content,
            ..
        })
    ));
}

#[test]
fn not_webassembly_is_malformed() {
    let key = SigningKey::generate();
    let error = store(&[&key]).verify(b"#!/bin/sh\necho hi\n").unwrap_err();
    assert!(matches!(error, SignatureError::Malformed(_)), "{error}");
    assert!(matches!(
        key.sign(b"not wasm at all"),
        Err(SignError::Unreadable(SignatureError::Malformed(_)))
    ));
}

#[test]
fn a_signature_section_that_is_not_first_is_malformed() {
    let key = SigningKey::generate();
    let signed = key.sign(&component()).unwrap();
    let section = signature_section(&signed);
    // Move the signature section to the end.
    let mut moved = signed[..8].to_vec();
    moved.extend_from_slice(&signed[section.end..]);
    moved.extend_from_slice(&signed[section]);
    let error = store(&[&key]).verify(&moved).unwrap_err();
    assert!(
        matches!(error, SignatureError::MalformedSignature(_)),
        "{error}"
    );
}

#[test]
fn a_signature_of_another_algorithm_is_a_malformed_signature_of_a_readable_file() {
    let key = SigningKey::generate();
    let mut signed = key.sign(&component()).unwrap();
    let section = signature_section(&signed);
    let key_id = key.public_key().key_id();
    let algorithm = find(&signed[section.clone()], key_id) + section.start + key_id.len();
    signed[algorithm] = 0x02;
    let error = store(&[&key]).verify(&signed).unwrap_err();
    let SignatureError::MalformedSignature(reason) = &error else {
        panic!("{error:?}");
    };
    assert!(reason.contains("not Ed25519"), "{reason}");
    assert_eq!(error.kind(), "malformed");
}

#[test]
fn detached_round_trip() {
    let key = SigningKey::generate();
    let second = SigningKey::generate();
    let wasm = component();
    let signature = key.sign_detached(&wasm, None).unwrap();
    let trust = store(&[&key]);
    assert_eq!(
        trust.verify_detached(&wasm, &signature).unwrap().signer,
        key.public_key().fingerprint()
    );
    // Without the signature the file is unsigned.
    assert_eq!(trust.verify(&wasm), Err(SignatureError::Unsigned));
    // A changed file does not match the detached signature.
    let at = find(&wasm, b"DATA-REGION-MARKER");
    assert!(matches!(
        trust.verify_detached(&flipped(&wasm, at), &signature),
        Err(SignatureError::Tampered {
            how: Tamper::Content,
            ..
        })
    ));
    // Extending the detached signature: both keys verify.
    let both = second.sign_detached(&wasm, Some(&signature)).unwrap();
    for signer in [&key, &second] {
        store(&[signer]).verify_detached(&wasm, &both).unwrap();
    }
    // An embedded-signed file cannot take a detached signature.
    let embedded = key.sign(&wasm).unwrap();
    assert!(matches!(
        second.sign_detached(&embedded, None),
        Err(SignError::EmbeddedSignature)
    ));
}

#[test]
fn interoperates_with_wasmsign2_on_core_modules_and_components() {
    let key = SigningKey::generate();
    let trust = store(&[&key]);
    let wasmsign2_key = &key.public_key().inner;
    for original in [core_module(), component()] {
        // Ours → wasmsign2's verifiers (single key and key set).
        let signed = key.sign(&original).unwrap();
        wasmsign2_key
            .verify(&mut signed.as_slice(), None)
            .expect("wasmsign2 verifies what skillhost signed");
        let mut set = wasmsign2::PublicKeySet::empty();
        set.insert(wasmsign2_key.clone()).unwrap();
        assert_eq!(set.verify(&mut signed.as_slice(), None).unwrap().len(), 1);
        let detached = key.sign_detached(&original, None).unwrap();
        wasmsign2_key
            .verify(&mut original.as_slice(), Some(&detached))
            .expect("wasmsign2 verifies skillhost's detached signature");

        // wasmsign2's signers → ours: the simple `sign` (no key id) and
        // `sign_multi` with a key id, embedded and detached.
        let module = wasmsign2::Module::deserialize(&mut original.as_slice()).unwrap();
        let simple = key.secret.sign(module.clone(), None).unwrap();
        trust.verify(&serialize(&simple)).unwrap();
        let key_id = key.public_key().key_id().to_vec();
        let (multi, _) = key
            .secret
            .sign_multi(module.clone(), Some(&key_id), false, false)
            .unwrap();
        trust.verify(&serialize(&multi)).unwrap();
        let (unchanged, detached) = key
            .secret
            .sign_multi(module.clone(), None, true, false)
            .unwrap();
        trust
            .verify_detached(&serialize(&unchanged), &detached)
            .unwrap();

        // wasmsign2's partial signatures (delimiters between the standard
        // and the custom sections) verify as a whole. The file cut at the
        // first delimiter does not, although wasmsign2's own `verify`
        // accepts it (it matches any prefix hash of the signed set).
        let split = module
            .split(|section| matches!(section, wasmsign2::Section::Standard(_)))
            .unwrap();
        let (split_signed, _) = key.secret.sign_multi(split, None, false, false).unwrap();
        trust.verify(&serialize(&split_signed)).unwrap();
        let delimiter = split_signed
            .sections
            .iter()
            .position(wasmsign2::Section::is_signature_delimiter)
            .unwrap();
        assert!(delimiter + 1 < split_signed.sections.len(), "fixture shape");
        let cut = serialize(&wasmsign2::Module {
            header: split_signed.header,
            sections: split_signed.sections[..=delimiter].to_vec(),
        });
        wasmsign2_key
            .verify(&mut cut.as_slice(), None)
            .expect("wasmsign2 accepts the cut file");
        assert!(matches!(
            trust.verify(&cut),
            Err(SignatureError::Tampered {
                how: Tamper::Content,
                ..
            })
        ));
    }
}

fn serialize(module: &wasmsign2::Module) -> Vec<u8> {
    let mut out = Vec::new();
    module.serialize(&mut out).unwrap();
    out
}

#[test]
fn key_formats_all_give_the_same_fingerprint() {
    let key = SigningKey::generate();
    let public = key.public_key();
    let inner = &public.inner;
    let raw: [u8; 32] = *inner.pk;
    let mut ssh_blob = Vec::new();
    for field in [b"ssh-ed25519".as_slice(), raw.as_slice()] {
        ssh_blob.extend_from_slice(&(field.len() as u32).to_be_bytes());
        ssh_blob.extend_from_slice(field);
    }
    let openssh = format!(
        "ssh-ed25519 {} someone@example\n",
        Base64::encode_to_string(&ssh_blob).unwrap()
    );
    for encoded in [
        public.to_bytes(),
        inner.to_der(),
        inner.to_pem().into_bytes(),
        openssh.into_bytes(),
    ] {
        let parsed = PublicKey::parse(&encoded).unwrap();
        assert_eq!(parsed.fingerprint(), public.fingerprint());
        assert_eq!(parsed.key_id(), public.key_id());
    }
    assert_eq!(public.fingerprint(), Fingerprint::of(&raw));
    // The fingerprint is the key id its signatures carry.
    assert_eq!(
        public.fingerprint().to_string(),
        hex::encode(public.key_id())
    );
    // Secret keys round-trip through the raw format and keep their identity.
    let reloaded = SigningKey::parse(&key.to_bytes()).unwrap();
    assert_eq!(reloaded.public_key().fingerprint(), public.fingerprint());
    // A public key is not a secret key and the other way round.
    assert!(SigningKey::parse(&public.to_bytes()).is_err());
    assert!(PublicKey::parse(&key.to_bytes()).is_err());
    // A corrupted secret key (public half changed) is refused.
    let mut corrupted = key.to_bytes();
    *corrupted.last_mut().unwrap() ^= 1;
    assert!(SigningKey::parse(&corrupted).is_err());
}

#[test]
fn an_empty_trust_store_is_an_error() {
    assert!(matches!(
        TrustStore::new(Vec::new()),
        Err(KeyError::NoTrustedKeys { .. })
    ));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(".gitkeep"), "").unwrap();
    let error = TrustStore::load(&[dir.path()]).unwrap_err();
    assert!(matches!(error, KeyError::NoTrustedKeys { .. }), "{error}");
    assert!(error.to_string().contains("no trusted keys"), "{error}");
}

#[test]
fn trust_store_loads_directories_and_files() {
    let dir = tempfile::tempdir().unwrap();
    let trusted = dir.path().join("trusted");
    std::fs::create_dir(&trusted).unwrap();
    let a = SigningKey::generate();
    let b = SigningKey::generate();
    let c = SigningKey::generate();
    std::fs::write(trusted.join("a.pub"), a.public_key().to_bytes()).unwrap();
    std::fs::write(trusted.join("b.pem"), b.public_key().inner.to_pem()).unwrap();
    std::fs::write(trusted.join(".hidden"), "ignored").unwrap();
    let c_file = dir.path().join("c.pub");
    std::fs::write(&c_file, c.public_key().to_bytes()).unwrap();
    // The same key again through its file: kept once.
    let a_again = trusted.join("a.pub");

    let store =
        TrustStore::load(&[trusted.as_path(), c_file.as_path(), a_again.as_path()]).unwrap();
    let fingerprints: Vec<_> = store.keys().iter().map(TrustedKey::fingerprint).collect();
    assert_eq!(
        fingerprints,
        vec![
            a.public_key().fingerprint(),
            b.public_key().fingerprint(),
            c.public_key().fingerprint()
        ]
    );
    assert_eq!(store.keys()[1].source(), trusted.join("b.pem"));
    assert_eq!(
        store.duplicates(),
        [DuplicateKey {
            source: a_again.clone(),
            first: trusted.join("a.pub"),
        }]
    );
    for key in [&a, &b, &c] {
        store.verify(&key.sign(&component()).unwrap()).unwrap();
    }

    // A stray file in the directory is an error naming it, not skipped; so
    // is a key renamed to stop trusting it, and a non-key named as one.
    std::fs::write(trusted.join("README"), "keys").unwrap();
    let error = TrustStore::load(&[&trusted]).unwrap_err();
    assert!(
        matches!(&error, KeyError::NotAKeyName { path } if path.ends_with("README")),
        "{error}"
    );
    std::fs::remove_file(trusted.join("README")).unwrap();
    std::fs::rename(trusted.join("a.pub"), trusted.join("a.pub.disabled")).unwrap();
    let error = TrustStore::load(&[&trusted]).unwrap_err();
    assert!(error.to_string().contains("delete its file"), "{error}");
    std::fs::rename(trusted.join("a.pub.disabled"), trusted.join("a.pub")).unwrap();
    std::fs::write(trusted.join("notes.pub"), "keys").unwrap();
    let error = TrustStore::load(&[&trusted]).unwrap_err();
    assert!(
        matches!(&error, KeyError::Invalid { path, .. } if path.ends_with("notes.pub")),
        "{error}"
    );
    std::fs::remove_file(trusted.join("notes.pub")).unwrap();
    // Only regular files are read: a device would never end.
    assert!(matches!(
        TrustStore::load(&[Path::new("/dev/zero")]),
        Err(KeyError::NotAKeyFile { .. })
    ));
    std::fs::create_dir(trusted.join("old")).unwrap();
    assert!(matches!(
        TrustStore::load(&[&trusted]),
        Err(KeyError::NotAKeyFile { .. })
    ));
    assert!(matches!(
        TrustStore::load(&[dir.path().join("missing")]),
        Err(KeyError::Io { .. })
    ));
}

#[test]
fn require_policy_refuses_and_allow_unsigned_lets_through() {
    let key = SigningKey::generate();
    let path = Path::new("skills/test.wasm");
    let require = SignaturePolicy::Require(store(&[&key]));
    assert_eq!(
        require.check(path, &component()),
        Err(SignatureError::Unsigned)
    );
    let signed = key.sign(&component()).unwrap();
    assert!(matches!(
        require.check(path, &signed),
        Ok(Verification::Verified(_))
    ));
    assert_eq!(
        SignaturePolicy::AllowUnsigned.check(path, b"anything"),
        Ok(Verification::Unverified)
    );
}

#[test]
fn error_kinds_are_stable() {
    assert_eq!(SignatureError::Unsigned.kind(), "unsigned");
    assert_eq!(
        SignatureError::UnknownKey { key_ids: vec![] }.kind(),
        "unknown_key"
    );
    assert_eq!(SignatureError::Truncated(String::new()).kind(), "truncated");
    assert_eq!(SignatureError::Malformed(String::new()).kind(), "malformed");
}

#[test]
fn framing_errors_say_which() {
    let key = SigningKey::generate();
    let trust = store(&[&key]);
    let preamble = b"\0asm\x0d\x00\x01\x00".to_vec();
    let with = |tail: &[u8]| [preamble.as_slice(), tail].concat();
    let cases: [(&str, Vec<u8>, &str); 5] = [
        (
            "size longer than a u32",
            with(&[0x00, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00]),
            "malformed",
        ),
        (
            "size overflowing a u32",
            with(&[0x00, 0xff, 0xff, 0xff, 0xff, 0x7f]),
            "malformed",
        ),
        ("file ends inside a size", with(&[0x00, 0x80]), "truncated"),
        (
            "name longer than its section",
            with(&[0x00, 0x02, 0x05, b'a']),
            "malformed",
        ),
        (
            "name not UTF-8",
            with(&[0x00, 0x02, 0x01, 0xff]),
            "malformed",
        ),
    ];
    for (case, bytes, kind) in cases {
        let error = trust.verify(&bytes).unwrap_err();
        assert_eq!(error.kind(), kind, "{case}: {error}");
    }
    // A signature section whose set declares 4 GiB in a few bytes is
    // refused before anything allocates that much.
    let mut bomb = vec![0x00, 0x13, 0x09];
    bomb.extend_from_slice(b"signature");
    bomb.extend_from_slice(&[0x01, 0x01, 0x01, 0x01, 0xff, 0xff, 0xff, 0xff, 0x0f]);
    let error = trust.verify(&with(&bomb)).unwrap_err();
    assert_eq!(error.kind(), "malformed", "{error}");
    assert!(error.to_string().contains("4294967295 bytes"), "{error}");
    // A well-framed file with an unknown version is malformed, not unsigned.
    let error = trust.verify(b"\0asm\x02\x00\x00\x00").unwrap_err();
    assert_eq!(error.kind(), "malformed", "{error}");
}

/// `signed` with its signature section's payload replaced by `data`.
fn with_signature_data(signed: &[u8], data: &wasmsign2::SignatureData) -> Vec<u8> {
    with_signature_bytes(signed, &data.serialize().unwrap())
}

/// `signed` with its signature section's payload (after the name) replaced
/// by `data`.
fn with_signature_bytes(signed: &[u8], data: &[u8]) -> Vec<u8> {
    fn leb(mut value: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (value & 0x7f) as u8;
            value >>= 7;
            if value == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let mut payload = Vec::new();
    leb(layout::SIGNATURE_SECTION.len(), &mut payload);
    payload.extend_from_slice(layout::SIGNATURE_SECTION.as_bytes());
    payload.extend_from_slice(data);
    let mut out = signed[..layout::PREAMBLE_LEN].to_vec();
    out.push(0x00);
    leb(payload.len(), &mut out);
    out.extend_from_slice(&payload);
    out.extend_from_slice(&signed[signature_section(signed).end..]);
    out
}

#[test]
fn signatures_are_bounded_in_number_and_key_ids_in_length() {
    let key = SigningKey::generate();
    let trust = store(&[&key]);
    let signed = key.sign(&component()).unwrap();
    let payload = layout::scan(&signed).unwrap().signature.unwrap();
    let data = wasmsign2::SignatureData::deserialize(&signed[payload]).unwrap();
    let copies = |count: u32| {
        let mut data = data.clone();
        let set = &mut data.signed_hashes_set[0];
        set.signatures = vec![set.signatures[0].clone(); count as usize];
        data
    };
    let most = with_signature_data(&signed, &copies(layout::MAX_SIGNATURES));
    trust.verify(&most).expect("as many signatures as allowed");
    let error = trust
        .verify(&with_signature_data(
            &signed,
            &copies(layout::MAX_SIGNATURES + 1),
        ))
        .unwrap_err();
    assert_eq!(error.kind(), "malformed", "{error}");
    assert!(
        error.to_string().contains("more than 32 signatures"),
        "{error}"
    );

    let mut long_id = data.clone();
    long_id.signed_hashes_set[0].signatures[0].key_id = Some(vec![0xab; 65]);
    let error = trust
        .verify(&with_signature_data(&signed, &long_id))
        .unwrap_err();
    assert_eq!(error.kind(), "malformed", "{error}");
    assert!(error.to_string().contains("65 bytes long"), "{error}");
}

/// wasmsign2 reads past neither: bytes after a section's last field, and
/// signatures of an algorithm it does not know, which it skips. Accepted,
/// a signed file could carry unsigned bytes and have many digests.
#[test]
fn bytes_past_the_signature_fields_and_other_algorithms_are_malformed() {
    let key = SigningKey::generate();
    let trust = store(&[&key]);
    let signed = key.sign(&component()).unwrap();
    let payload = layout::scan(&signed).unwrap().signature.unwrap();
    let mut padded = signed[payload.clone()].to_vec();
    padded.extend_from_slice(b"HIDDEN PAYLOAD");
    let error = trust
        .verify(&with_signature_bytes(&signed, &padded))
        .unwrap_err();
    assert_eq!(error.kind(), "malformed", "{error}");
    assert!(
        error.to_string().contains("14 bytes past its last field"),
        "{error}"
    );

    let mut data = wasmsign2::SignatureData::deserialize(&signed[payload]).unwrap();
    let mut other = data.signed_hashes_set[0].signatures[0].clone();
    other.alg_id = 0x02;
    data.signed_hashes_set[0].signatures.push(other);
    let error = trust
        .verify(&with_signature_data(&signed, &data))
        .unwrap_err();
    assert_eq!(error.kind(), "malformed", "{error}");
    assert!(error.to_string().contains("algorithm is 0x02"), "{error}");
}

/// A trust store is not kept secret: a secret key in it is an error,
/// whatever file it is in, and so is a file of several keys, of which
/// wasmsign2 would read only the first.
#[test]
fn secret_keys_and_files_of_several_keys_are_refused_in_the_trust_store() {
    let dir = tempfile::tempdir().unwrap();
    let key = SigningKey::generate();
    let other = SigningKey::generate();
    let public_pem = key.public_key().inner.to_pem();
    let cases = [
        (
            "pair.pem",
            format!("{}{public_pem}", key.secret.to_pem()).into_bytes(),
            "holds a secret key",
        ),
        ("demo.key", key.to_bytes(), "holds a secret key"),
        (
            "two.pem",
            format!("{}{public_pem}", other.public_key().inner.to_pem()).into_bytes(),
            "holds 2 keys",
        ),
    ];
    for (name, content, says) in cases {
        let trusted = dir.path().join(name.replace('.', "-"));
        std::fs::create_dir(&trusted).unwrap();
        std::fs::write(trusted.join(name), content).unwrap();
        let error = TrustStore::load(&[&trusted]).unwrap_err();
        assert!(
            matches!(&error, KeyError::Invalid { path, .. } if path.ends_with(name)),
            "{name}: {error}"
        );
        assert!(error.to_string().contains(says), "{name}: {error}");
    }
}

/// A signature made with another key but naming a trusted one is not said
/// to be that key's: it only claims it.
#[test]
fn a_signature_naming_a_trusted_key_it_was_not_made_with_only_claims_it() {
    let trusted = SigningKey::generate();
    let forger = SigningKey::generate();
    let signed = forger.sign(&component()).unwrap();
    let payload = layout::scan(&signed).unwrap().signature.unwrap();
    let mut data = wasmsign2::SignatureData::deserialize(&signed[payload]).unwrap();
    data.signed_hashes_set[0].signatures[0].key_id = Some(trusted.public_key().key_id().to_vec());
    let error = store(&[&trusted])
        .verify(&with_signature_data(&signed, &data))
        .unwrap_err();
    assert_eq!(
        error,
        SignatureError::Tampered {
            signer: trusted.public_key().fingerprint(),
            how: Tamper::Signature
        }
    );
    let message = error.to_string();
    assert!(
        message.contains("claims trusted key") && !message.contains("signed by"),
        "{message}"
    );
}
