//! `skillhost keygen`, `skillhost sign` and `skillhost verify`.

use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use serde_json::json;

use skillhost::skills::MAX_SKILL_FILE_BYTES;
use skillhost::skills::signature::{
    Fingerprint, KeyError, KeyScope, PublicKey, SignError, SignatureError, SigningKey, Tamper,
    TrustStore,
};

use super::console;

/// The trust store of the default (demo) configuration: only the keys in
/// `keys/trusted/`, relative to the working directory (the repository root
/// in the demo), which holds the demo key that signs the bundled skills.
pub const DEFAULT_TRUST: &str = "keys/trusted";

/// The demo key's public half, `keys/trusted/demo.pub`. Its secret half is
/// committed next to it, so a host that trusts it trusts anyone.
const DEMO_PUBLIC_KEY: &[u8] = include_bytes!("../../../keys/trusted/demo.pub");

/// The demo key's fingerprint when `store` trusts it.
pub(super) fn trusted_demo_key(store: &TrustStore) -> Option<Fingerprint> {
    let demo = PublicKey::parse(DEMO_PUBLIC_KEY).expect("the bundled demo key parses");
    store
        .keys()
        .iter()
        .find(|trusted| *trusted.key() == demo)
        .map(|trusted| trusted.fingerprint())
}

/// The trusted keys' files and directories (through a link, its target's
/// too) that others than this user and root may change: writable by their
/// group or other users, or owned by another user. Whoever can change one
/// can make the host trust their key.
pub(super) fn open_to_others(store: &TrustStore) -> Vec<(PathBuf, Exposure)> {
    use std::os::unix::fs::MetadataExt;
    // The process's own directory belongs to the user it runs as (Linux).
    let me = fs::metadata("/proc/self").map(|process| process.uid()).ok();
    let mut open = Vec::new();
    for trusted in store.keys() {
        let file = trusted.source().to_owned();
        let linked = fs::symlink_metadata(&file).is_ok_and(|meta| meta.is_symlink());
        let target = linked.then(|| fs::canonicalize(&file).ok()).flatten();
        for file in [Some(file), target].into_iter().flatten() {
            let dir = match file.parent() {
                Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
                _ => PathBuf::from("."),
            };
            for path in [file, dir] {
                let Ok(meta) = fs::metadata(&path) else {
                    continue;
                };
                let exposure = if meta.mode() & 0o022 != 0 {
                    Exposure::Writable
                } else if me.is_some_and(|me| meta.uid() != me) && meta.uid() != 0 {
                    Exposure::Owner(meta.uid())
                } else {
                    continue;
                };
                if !open.iter().any(|(known, _)| *known == path) {
                    open.push((path, exposure));
                }
            }
        }
    }
    open
}

/// How others may change a trusted key's file or directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Exposure {
    /// Its group or other users may write it.
    Writable,
    /// Another user (this uid) owns it.
    Owner(u32),
}

impl std::fmt::Display for Exposure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Writable => {
                f.write_str("may be written by its group or other users (chmod go-w)")
            }
            Self::Owner(uid) => write!(f, "belongs to another user (uid {uid})"),
        }
    }
}

/// `skillhost keygen`.
#[derive(Debug, clap::Args)]
pub struct KeygenArgs {
    /// Path prefix of the key pair: writes <PREFIX>.key (the secret key,
    /// readable by its owner only) and <PREFIX>.pub. Existing files are
    /// never overwritten.
    #[arg(long, value_name = "PREFIX")]
    out: PathBuf,
    /// Print the result as JSON: secret_key, public_key, fingerprint.
    #[arg(long)]
    json: bool,
}

/// `skillhost sign`.
#[derive(Debug, clap::Args)]
pub struct SignArgs {
    /// The component (or core module) to sign.
    input: PathBuf,
    /// Secret key file: as written by `skillhost keygen` or `wasmsign2
    /// keygen`, or DER, PEM, or an unencrypted OpenSSH Ed25519 key.
    #[arg(long, value_name = "FILE")]
    key: PathBuf,
    /// Write the signed file here. Default: replace the input atomically
    /// (a temporary file in the same directory, then a rename; through a
    /// symlink, the file it points to).
    #[arg(long, value_name = "FILE", conflicts_with = "detached")]
    out: Option<PathBuf>,
    /// Write a detached signature to this file instead, leaving the input
    /// unchanged. An existing signature file is extended (multi-signature).
    /// For other verifiers: the host loads only skills that carry their
    /// signature embedded.
    #[arg(long, value_name = "SIG")]
    detached: Option<PathBuf>,
    /// Print the result as JSON: file (the input), signed_file (where the
    /// signed component was written, or null), detached (the signature
    /// file, or null), signer (the key's fingerprint), already_signed
    /// (the key had signed this content before: signing again changed
    /// nothing).
    #[arg(long)]
    json: bool,
}

/// `skillhost verify`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// The component (or core module) to verify.
    file: PathBuf,
    #[command(flatten)]
    trust: TrustArgs,
    /// Verify against this detached signature instead of the embedded one
    /// (the host itself loads only skills with an embedded signature).
    #[arg(long, value_name = "SIG")]
    detached: Option<PathBuf>,
    /// Print the result as JSON: file, valid, signer (the first trusted
    /// key that signed it, or the key whose signature no longer matches
    /// the content), signers, error and reason (why it is not valid),
    /// key_ids (the keys its signatures name, when no trusted key's
    /// signature verifies); null where it does not apply.
    #[arg(long)]
    json: bool,
}

/// Which public keys to trust. Flatten it into any command that verifies
/// skills.
#[derive(Debug, Clone, clap::Args)]
pub struct TrustArgs {
    /// Trusted public keys: a directory of public key files or a single key
    /// file; repeat for several. The default trusts the demo key only.
    #[arg(
        long = "trust",
        value_name = "DIR|KEY",
        env = "SKILLHOST_TRUST",
        default_value = DEFAULT_TRUST
    )]
    paths: Vec<PathBuf>,
}

/// What some keys may sign, by key (`[[trust.scopes]]`).
pub type KeyScopes = Vec<(Fingerprint, KeyScope)>;

impl TrustArgs {
    /// [`TrustArgs::store`] with `scopes` applied; warns of a scope whose
    /// key the store does not hold (it applies once the key is trusted).
    pub fn scoped_store(&self, scopes: &KeyScopes) -> anyhow::Result<TrustStore> {
        let mut store = self.store()?;
        for (key, scope) in scopes {
            if !store
                .keys()
                .iter()
                .any(|trusted| trusted.fingerprint() == *key)
            {
                console::warn(&format!(
                    "[[trust.scopes]] limits key {key}, which is not among the keys trusted: the \
                     scope applies once it is"
                ));
            }
            store = store.with_scope(*key, scope.clone());
        }
        Ok(store)
    }

    /// The key files and directories given.
    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    /// Loads the trust store; no keys at all is an error.
    /// Warns of each key file that repeats another's key (deleting one would
    /// not revoke it) and of each key file or directory others may change.
    pub fn store(&self) -> anyhow::Result<TrustStore> {
        let store = TrustStore::load(&self.paths).with_context(|| {
            let note = super::settings_note("--trust or SKILLHOST_TRUST", &self.paths);
            format!("loading the trust store ({note})")
        })?;
        for duplicate in store.duplicates() {
            console::warn(&format!(
                "{} holds the same key as {}: the key stays trusted until both are deleted",
                duplicate.source.display(),
                duplicate.first.display()
            ));
        }
        for (path, exposure) in open_to_others(&store) {
            console::warn(&format!(
                "{} {exposure}: whoever can change it can add a key skills are trusted with",
                path.display()
            ));
        }
        Ok(store)
    }
}

pub fn keygen(args: &KeygenArgs) -> anyhow::Result<ExitCode> {
    // `--out keys/` would write the hidden `keys/.key` and `keys/.pub`,
    // which a trust directory skips.
    let named = !args.out.as_os_str().to_string_lossy().ends_with('/')
        && args
            .out
            .file_name()
            .is_some_and(|name| !name.to_string_lossy().starts_with('.'));
    if !named || args.out.is_dir() {
        anyhow::bail!(
            "--out {} names {}: it is a path prefix ending in the key's name, e.g. --out \
             keys/release writes keys/release.key and keys/release.pub",
            args.out.display(),
            if named { "a directory" } else { "no key" }
        );
    }
    let secret_path = with_suffix(&args.out, "key");
    let public_path = with_suffix(&args.out, "pub");
    for path in [&secret_path, &public_path] {
        if fs::symlink_metadata(path).is_ok() {
            return Err(KeyError::Exists { path: path.clone() }.into());
        }
    }
    let key = SigningKey::generate();
    write_new(&secret_path, &key.to_bytes(), true)?;
    if let Err(error) = write_new(&public_path, &key.public_key().to_bytes(), false) {
        // Do not leave half a key pair behind; the secret file is ours.
        let _ = fs::remove_file(&secret_path);
        return Err(error);
    }
    let fingerprint = key.public_key().fingerprint();
    if args.json {
        let written = json!({
            "secret_key": secret_path,
            "public_key": public_path,
            "fingerprint": fingerprint,
        });
        println!("{}", serde_json::to_string_pretty(&written)?);
    } else {
        println!("secret key: {} (keep it secret)", secret_path.display());
        println!("public key: {}", public_path.display());
        println!("fingerprint: {fingerprint}");
    }
    Ok(ExitCode::SUCCESS)
}

pub fn sign(args: &SignArgs) -> anyhow::Result<ExitCode> {
    let key = SigningKey::load(&args.key)?;
    let wasm = read(&args.input)?;
    let fingerprint = key.public_key().fingerprint();
    let signing = || format!("signing {}", args.input.display());
    // Signing again with a key that signed this very content changes
    // nothing, so a build script may re-sign what it already signed.
    let (signed_file, already_signed, done) = if let Some(signature_path) = &args.detached {
        let existing = match fs::metadata(signature_path) {
            Err(error) if error.kind() == io::ErrorKind::NotFound => None,
            _ => Some(read(signature_path)?),
        };
        let already_signed = match key.sign_detached(&wasm, existing.as_deref()) {
            Ok(signature) => {
                write_atomic(signature_path, &signature)?;
                false
            }
            Err(SignError::AlreadySigned(_)) => true,
            Err(error) => return Err(error).with_context(signing),
        };
        let done = format!(
            "{}: detached signature by key {fingerprint} {} {}",
            args.input.display(),
            if already_signed {
                "already in"
            } else {
                "written to"
            },
            signature_path.display()
        );
        (None, already_signed, done)
    } else {
        let out = args.out.as_ref().unwrap_or(&args.input);
        let (signed, already_signed) = match key.sign(&wasm) {
            Ok(signed) => (signed, false),
            Err(SignError::AlreadySigned(_)) => (wasm, true),
            Err(error) => return Err(error).with_context(signing),
        };
        let done = if already_signed && out == &args.input {
            format!(
                "{}: already signed by key {fingerprint}; unchanged",
                out.display()
            )
        } else {
            write_atomic(out, &signed)?;
            format!("{}: signed by key {fingerprint}", out.display())
        };
        (Some(out), already_signed, done)
    };
    if args.json {
        let signed = json!({
            "file": args.input,
            "signed_file": signed_file,
            "detached": args.detached,
            "signer": fingerprint,
            "already_signed": already_signed,
        });
        println!("{}", serde_json::to_string_pretty(&signed)?);
    } else {
        println!("{done}");
    }
    Ok(ExitCode::SUCCESS)
}

pub fn verify(args: &VerifyArgs) -> anyhow::Result<ExitCode> {
    let store = args.trust.store()?;
    let wasm = read(&args.file)?;
    let result = match &args.detached {
        Some(signature_path) => store.verify_detached(&wasm, &read(signature_path)?),
        None => store.verify(&wasm),
    };
    if args.json {
        let (signer, signers, error, key_ids) = match &result {
            Ok(verified) => (Some(verified.signer), Some(&verified.signers), None, None),
            Err(error) => match error {
                // Its signature does not verify: the key it names is a claim.
                SignatureError::Tampered {
                    signer,
                    how: Tamper::Signature,
                } => (None, None, Some(error), Some(vec![signer.to_string()])),
                SignatureError::Tampered { signer, .. } => (Some(*signer), None, Some(error), None),
                SignatureError::UnknownKey { key_ids } => {
                    (None, None, Some(error), Some(key_ids.clone()))
                }
                _ => (None, None, Some(error), None),
            },
        };
        println!(
            "{}",
            json!({
                "file": args.file,
                "valid": result.is_ok(),
                "signer": signer,
                "signers": signers,
                "error": error.map(SignatureError::kind),
                "reason": error.map(ToString::to_string),
                "key_ids": key_ids,
            })
        );
    } else {
        let file = args.file.display();
        match &result {
            Ok(verified) => {
                println!("valid: {file}");
                for signer in &verified.signers {
                    println!(
                        "  signed by trusted key {signer} ({})",
                        source_of(&store, *signer)
                    );
                }
            }
            Err(error) => println!("invalid: {file}: {error}"),
        }
    }
    Ok(if result.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Where the trusted key `signer` came from.
fn source_of(store: &TrustStore, signer: Fingerprint) -> String {
    store
        .keys()
        .iter()
        .find(|key| key.fingerprint() == signer)
        .map(|key| key.source().display().to_string())
        .unwrap_or_default()
}

/// Reads the component at `path`: a regular file of at most the size a
/// skill file may have (so `/dev/zero` or a stray huge file is refused,
/// not read until memory runs out).
pub(super) fn read(path: &Path) -> anyhow::Result<Vec<u8>> {
    let reading = || format!("reading {}", path.display());
    let file = fs::File::open(path).with_context(reading)?;
    let meta = file.metadata().with_context(reading)?;
    anyhow::ensure!(meta.is_file(), "{} is not a regular file", path.display());
    anyhow::ensure!(
        meta.len() <= MAX_SKILL_FILE_BYTES,
        "{} has {} bytes, more than the {} MiB a skill file may have",
        path.display(),
        meta.len(),
        MAX_SKILL_FILE_BYTES >> 20
    );
    let mut bytes = Vec::new();
    file.take(MAX_SKILL_FILE_BYTES)
        .read_to_end(&mut bytes)
        .with_context(reading)?;
    Ok(bytes)
}

/// `prefix` with `.extension` appended (not replacing an existing one:
/// `keys/demo.v2` gives `keys/demo.v2.key`).
fn with_suffix(prefix: &Path, extension: &str) -> PathBuf {
    let mut name = prefix.as_os_str().to_owned();
    name.push(".");
    name.push(extension);
    PathBuf::from(name)
}

/// Creates `path`, failing if it exists. A `secret` file is readable by its
/// owner only (on Unix).
fn write_new(path: &Path, bytes: &[u8], secret: bool) -> anyhow::Result<()> {
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    if secret {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = secret;
    let mut file = options.open(path).map_err(|error| {
        if error.kind() == io::ErrorKind::AlreadyExists {
            anyhow::Error::from(KeyError::Exists {
                path: path.to_owned(),
            })
        } else {
            anyhow::Error::from(error).context(format!("creating {}", path.display()))
        }
    })?;
    let written = file.write_all(bytes).and_then(|()| file.sync_all());
    if written.is_err() {
        // Created above: a partial file would only make the next try say
        // it already exists.
        drop(file);
        let _ = fs::remove_file(path);
    }
    written.with_context(|| format!("writing {}", path.display()))
}

/// Replaces `path` with `bytes` atomically: readers (and the skills
/// watcher) see the old file or the new one, never a partial write. The
/// temporary file is hidden and ends in `.tmp`, so it is never taken for a
/// skill; an existing file's permissions are kept. Through a symlink, the
/// file it points to is replaced and the link kept (a skills directory of
/// links into a store stays one).
pub(super) fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let resolved = fs::canonicalize(path);
    let path = resolved.as_deref().unwrap_or(path);
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .with_context(|| format!("{} is not a file path", path.display()))?;
    let temp = dir.join(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| -> io::Result<()> {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)?;
        file.write_all(bytes)?;
        if let Ok(existing) = fs::metadata(path) {
            file.set_permissions(existing.permissions())?;
        }
        file.sync_all()?;
        fs::rename(&temp, path)?;
        // The rename itself survives a crash once the directory is synced.
        fs::File::open(dir)?.sync_all()
    })();
    if let Err(error) = result {
        let _ = fs::remove_file(&temp);
        return Err(error).with_context(|| format!("writing {}", path.display()));
    }
    Ok(())
}
