//! Ed25519 keys: fingerprints, public keys, signing keys, and the trust
//! store of public keys that skills must be signed with.
//!
//! Key files use the formats wasmsign2 reads, so keys move freely between
//! `skillhost` and the `wasmsign2` CLI: wasmsign2's raw encoding (a type byte
//! then the key: `0x01` + 32 bytes public, `0x81` + 64 bytes secret; what
//! `skillhost keygen` and `wasmsign2 keygen` write), DER, PEM, and OpenSSH
//! (`ssh-ed25519 AAAA…` public keys, unencrypted `openssh-key-v1` secret
//! keys).

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::KeyScope;

/// A short, stable identifier of an Ed25519 public key: wasmsign2's key id
/// for it (HMAC-SHA-256 of the raw 32-byte key under `"key_id"`, first 12
/// bytes), shown as 24 hex digits.
///
/// It is the id signatures made by the key carry, so a file signed by a key
/// the host does not trust names that key as `keygen`, `sign` and the trust
/// store listing do. The same key has the same fingerprint whatever file
/// format it was read from.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint([u8; 12]);

impl Fingerprint {
    /// The fingerprint of a raw 32-byte Ed25519 public key.
    pub fn of(raw_public_key: &[u8; 32]) -> Self {
        let key = wasmsign2::PublicKey {
            pk: ed25519_compact::PublicKey::new(*raw_public_key),
            key_id: None,
        }
        .attach_default_key_id();
        let mut id = [0u8; 12];
        id.copy_from_slice(key.key_id.as_deref().expect("a default key id is attached"));
        Self(id)
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

/// A fingerprint as it is shown: 24 hex digits.
impl std::str::FromStr for Fingerprint {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut id = [0u8; 12];
        hex::decode_to_slice(text, &mut id).map_err(|_| {
            format!(
                "`{text}` is not a key's fingerprint (24 hex digits, as `skillhost keygen` prints)"
            )
        })?;
        Ok(Self(id))
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({self})")
    }
}

impl serde::Serialize for Fingerprint {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Why bytes are not a usable Ed25519 key.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct InvalidKey(String);

impl InvalidKey {
    fn secret() -> Self {
        Self(
            "holds a secret key, where only public keys belong: move it out of the trust store \
             (and out of any place others can read), and put its public half here instead"
                .into(),
        )
    }
}

/// A failure to read, write or assemble keys.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The file system refused.
    #[error("{}: {error}", path.display())]
    Io {
        /// The file or directory concerned.
        path: PathBuf,
        /// What the operating system said.
        error: std::io::Error,
    },
    /// A file that should hold a key does not hold a usable one.
    #[error("{}: {error}", path.display())]
    Invalid {
        /// The offending file.
        path: PathBuf,
        /// What is wrong with its content.
        error: InvalidKey,
    },
    /// A key was to be read from something that is not a regular file (a
    /// directory, a device, a FIFO).
    #[error("{}: not a regular file; keys are read from regular files", path.display())]
    NotAKeyFile {
        /// The offending entry.
        path: PathBuf,
    },
    /// A trust-store directory holds a file not named as a public key.
    #[error(
        "{}: a trust directory holds public keys named *.{} and nothing else (to stop \
         trusting a key, delete its file: renamed, it would still be a key)",
        path.display(),
        PUBLIC_KEY_EXTENSIONS.join(", *.")
    )]
    NotAKeyName {
        /// The offending entry.
        path: PathBuf,
    },
    /// The trust store would be empty. An empty store is refused rather than
    /// treated as "trust nothing" or, worse, "trust everything".
    #[error(
        "no trusted keys (looked in: {}); refusing to build an empty trust store",
        list(sources)
    )]
    NoTrustedKeys {
        /// The directories and files that were searched.
        sources: Vec<PathBuf>,
    },
    /// Writing a key would replace an existing file.
    #[error("{} already exists; refusing to overwrite a key file", path.display())]
    Exists {
        /// The existing file.
        path: PathBuf,
    },
}

/// The names of public key files in a trust directory: `*.pub` (raw,
/// OpenSSH), `*.pem`, `*.der`.
const PUBLIC_KEY_EXTENSIONS: [&str; 3] = ["pub", "pem", "der"];
/// The largest key file read; the largest format (PEM, OpenSSH) takes a few
/// hundred bytes.
const MAX_KEY_FILE_BYTES: u64 = 64 << 10;

/// Reads the key file at `path` and parses it with `parse`; errors name the
/// file. Only a regular file of at most [`MAX_KEY_FILE_BYTES`] is read.
fn load_key_file<K>(
    path: &Path,
    parse: impl FnOnce(&[u8]) -> Result<K, InvalidKey>,
) -> Result<K, KeyError> {
    let io_error = |error| KeyError::Io {
        path: path.to_owned(),
        error,
    };
    // Opened without waiting for a FIFO's writer, so that one is refused
    // below rather than hanging the read.
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(io_error)?;
    if !file.metadata().map_err(io_error)?.is_file() {
        return Err(KeyError::NotAKeyFile {
            path: path.to_owned(),
        });
    }
    let mut data = Vec::new();
    file.take(MAX_KEY_FILE_BYTES + 1)
        .read_to_end(&mut data)
        .map_err(io_error)?;
    if data.len() as u64 > MAX_KEY_FILE_BYTES {
        return Err(KeyError::Invalid {
            path: path.to_owned(),
            error: InvalidKey(format!(
                "larger than {} KiB, far more than any key format takes",
                MAX_KEY_FILE_BYTES >> 10
            )),
        });
    }
    parse(&data).map_err(|error| KeyError::Invalid {
        path: path.to_owned(),
        error,
    })
}

fn list(paths: &[PathBuf]) -> String {
    if paths.is_empty() {
        return "nothing".into();
    }
    paths
        .iter()
        .map(|path| path.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// An Ed25519 public key that signatures can be checked against.
#[derive(Clone, PartialEq, Eq)]
pub struct PublicKey {
    /// wasmsign2's key, with its default key id attached (the id
    /// `wasmsign2 sign -K` and `skillhost sign` embed in signatures).
    pub(super) inner: wasmsign2::PublicKey,
    fingerprint: Fingerprint,
}

impl PublicKey {
    /// Parses a public key in any format wasmsign2 reads: raw (`0x01` +
    /// 32 bytes), DER, PEM, or one OpenSSH `ssh-ed25519` line.
    ///
    /// Refuses files holding a secret key, whatever else they hold (a
    /// trust store is not kept secret), files with several keys (wasmsign2
    /// would read the first and drop the rest; one key per file keeps the
    /// trust store's listing honest), and keys that are not a valid curve
    /// point or have a small order (such keys can never verify anything).
    pub fn parse(data: &[u8]) -> Result<Self, InvalidKey> {
        if SigningKey::parse(data).is_ok() {
            return Err(InvalidKey::secret());
        }
        if let Ok(text) = std::str::from_utf8(data) {
            if text.contains("PRIVATE KEY") || text.contains("openssh-key-v1") {
                return Err(InvalidKey::secret());
            }
            let keys = text
                .lines()
                .map(str::trim_start)
                .filter(|line| line.starts_with("ssh-") || line.starts_with("-----BEGIN "))
                .count();
            if keys > 1 {
                return Err(InvalidKey(format!(
                    "holds {keys} keys; put one key per file"
                )));
            }
        }
        let inner = wasmsign2::PublicKey::from_any(data).map_err(|_| {
            InvalidKey(
                "not an Ed25519 public key in a supported format \
                 (wasmsign2 raw, DER, PEM or OpenSSH ssh-ed25519)"
                    .into(),
            )
        })?;
        inner
            .pk
            .validate()
            .map_err(|error| InvalidKey(format!("not a usable Ed25519 public key: {error}")))?;
        Ok(Self::from_ed25519(inner.pk))
    }

    /// Reads and parses a public key file.
    pub fn load(path: &Path) -> Result<Self, KeyError> {
        load_key_file(path, Self::parse)
    }

    fn from_ed25519(pk: ed25519_compact::PublicKey) -> Self {
        let inner = wasmsign2::PublicKey { pk, key_id: None }.attach_default_key_id();
        let fingerprint = Fingerprint::of(&inner.pk);
        Self { inner, fingerprint }
    }

    /// This key's fingerprint.
    pub fn fingerprint(&self) -> Fingerprint {
        self.fingerprint
    }

    /// wasmsign2's key id for this key, what signatures made by it carry
    /// to say who made them: the bytes of its [`Fingerprint`].
    pub fn key_id(&self) -> &[u8] {
        self.inner.key_id.as_deref().unwrap_or_default()
    }

    /// The key in wasmsign2's raw encoding (`0x01` + 32 bytes), the format
    /// `skillhost keygen` writes to `<prefix>.pub`.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.inner.to_bytes()
    }

    /// Whether `signature` is a valid Ed25519 signature of `message` by this
    /// key.
    pub(super) fn verifies(&self, message: &[u8], signature: &[u8]) -> bool {
        ed25519_compact::Signature::from_slice(signature)
            .is_ok_and(|signature| self.inner.pk.verify(message, &signature).is_ok())
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({})", self.fingerprint)
    }
}

/// An Ed25519 secret key that signs skills.
#[derive(Clone)]
pub struct SigningKey {
    pub(super) secret: wasmsign2::SecretKey,
    public: PublicKey,
}

impl SigningKey {
    /// A fresh key pair from the operating system's random number generator.
    pub fn generate() -> Self {
        let pair = wasmsign2::KeyPair::generate();
        Self {
            secret: pair.sk,
            public: PublicKey::from_ed25519(pair.pk.pk),
        }
    }

    /// Parses a secret key in any format wasmsign2 reads: raw (`0x81` +
    /// 64 bytes), DER, PEM, or an unencrypted OpenSSH private key.
    ///
    /// The public half stored in the key must match the one derived from
    /// its seed; a corrupted key is refused rather than left to produce
    /// signatures nobody can verify.
    pub fn parse(data: &[u8]) -> Result<Self, InvalidKey> {
        let secret = wasmsign2::SecretKey::from_any(data).map_err(|_| {
            InvalidKey(
                "not an Ed25519 secret key in a supported format \
                 (wasmsign2 raw, DER, PEM or unencrypted OpenSSH)"
                    .into(),
            )
        })?;
        let public = secret.sk.public_key();
        secret.sk.validate_public_key(&public).map_err(|_| {
            InvalidKey("corrupted Ed25519 secret key: its two halves do not match".into())
        })?;
        Ok(Self {
            public: PublicKey::from_ed25519(public),
            secret,
        })
    }

    /// Reads and parses a secret key file.
    pub fn load(path: &Path) -> Result<Self, KeyError> {
        load_key_file(path, Self::parse)
    }

    /// The public half of this key.
    pub fn public_key(&self) -> &PublicKey {
        &self.public
    }

    /// The key in wasmsign2's raw encoding (`0x81` + 64 bytes), the format
    /// `skillhost keygen` writes to `<prefix>.key`. Keep it secret.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.secret.to_bytes()
    }
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the secret.
        write!(f, "SigningKey({})", self.public.fingerprint)
    }
}

/// A public key the host trusts, with where it came from.
#[derive(Debug, Clone)]
pub struct TrustedKey {
    key: PublicKey,
    source: PathBuf,
}

impl TrustedKey {
    /// Trusts `key`; `source` says where it came from (shown in listings
    /// and errors), normally its file.
    pub fn new(key: PublicKey, source: impl Into<PathBuf>) -> Self {
        Self {
            key,
            source: source.into(),
        }
    }

    /// The key.
    pub fn key(&self) -> &PublicKey {
        &self.key
    }

    /// The key's fingerprint.
    pub fn fingerprint(&self) -> Fingerprint {
        self.key.fingerprint
    }

    /// Where the key came from.
    pub fn source(&self) -> &Path {
        &self.source
    }
}

/// The set of public keys skills must be signed with; several at once so
/// that keys can be rotated (trust old and new, re-sign, drop the old).
///
/// Never empty when built from keys: construction fails with
/// [`KeyError::NoTrustedKeys`] rather than producing a store that trusts
/// nothing (or that a caller might mistake for "no checks"). The one store
/// that trusts nothing is asked for by name ([`TrustStore::trusting_nothing`]).
#[derive(Debug, Clone)]
pub struct TrustStore {
    keys: Vec<TrustedKey>,
    duplicates: Vec<DuplicateKey>,
    /// What a key may sign, for the keys limited to less than any skill.
    scopes: BTreeMap<Fingerprint, KeyScope>,
}

/// A key the store was given again, from another source, and kept once.
/// Deleting one of its files does not revoke it while the other remains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DuplicateKey {
    /// Where the key came from again.
    pub source: PathBuf,
    /// Where it came from first: the source the store reports.
    pub first: PathBuf,
}

impl TrustStore {
    /// A store that trusts no key: every file is refused. For a running
    /// host whose keys were all taken out of its trust directory, which
    /// must then stop trusting the last of them
    /// ([`SkillRegistry::replace_policy`](crate::skills::SkillRegistry::replace_policy));
    /// a host is never started with one.
    pub fn trusting_nothing() -> Self {
        Self {
            keys: Vec::new(),
            duplicates: Vec::new(),
            scopes: BTreeMap::new(),
        }
    }

    /// A store of exactly these keys, in this order (the order in which
    /// signers are reported). A key given twice is kept once, with its first
    /// source; [`Self::duplicates`] says which sources repeated one.
    pub fn new(keys: impl IntoIterator<Item = TrustedKey>) -> Result<Self, KeyError> {
        let mut unique: Vec<TrustedKey> = Vec::new();
        let mut duplicates = Vec::new();
        for key in keys {
            match unique.iter().find(|known| known.key == key.key) {
                Some(first) => duplicates.push(DuplicateKey {
                    source: key.source,
                    first: first.source.clone(),
                }),
                None => unique.push(key),
            }
        }
        if unique.is_empty() {
            return Err(KeyError::NoTrustedKeys {
                sources: Vec::new(),
            });
        }
        Ok(Self {
            keys: unique,
            duplicates,
            scopes: BTreeMap::new(),
        })
    }

    /// Loads the keys at `paths`: each is either a public key file or a
    /// directory of public key files.
    ///
    /// In a directory, every entry whose name does not start with `.` must be
    /// a regular file named `*.pub`, `*.pem` or `*.der` holding exactly one
    /// public key; anything else (a subdirectory, a secret key, a README, a
    /// key renamed to `*.pub.disabled` to revoke it) is an error, not
    /// skipped, so a misplaced file is noticed. Hidden entries (`.gitkeep`,
    /// editor swap files) are skipped. Entries are read in name order. Fails
    /// with [`KeyError::NoTrustedKeys`] when no key is found at all.
    pub fn load<P: AsRef<Path>>(paths: &[P]) -> Result<Self, KeyError> {
        let mut keys = Vec::new();
        for path in paths {
            let path = path.as_ref();
            let io_error = |error| KeyError::Io {
                path: path.to_owned(),
                error,
            };
            if fs::metadata(path).map_err(io_error)?.is_dir() {
                let mut entries = Vec::new();
                for entry in fs::read_dir(path).map_err(io_error)? {
                    let entry = entry.map_err(io_error)?;
                    if !entry.file_name().to_string_lossy().starts_with('.') {
                        entries.push(entry.path());
                    }
                }
                entries.sort();
                for entry in entries {
                    // `metadata` follows symlinks: a link to a key file is fine.
                    let is_file = fs::metadata(&entry)
                        .map_err(|error| KeyError::Io {
                            path: entry.clone(),
                            error,
                        })?
                        .is_file();
                    if !is_file {
                        return Err(KeyError::NotAKeyFile { path: entry });
                    }
                    let named_as_key = entry.extension().is_some_and(|extension| {
                        PUBLIC_KEY_EXTENSIONS
                            .iter()
                            .any(|known| extension == *known)
                    });
                    if !named_as_key {
                        // `keygen` writes `<name>.key` beside `<name>.pub`.
                        if SigningKey::load(&entry).is_ok() {
                            return Err(KeyError::Invalid {
                                path: entry,
                                error: InvalidKey::secret(),
                            });
                        }
                        return Err(KeyError::NotAKeyName { path: entry });
                    }
                    keys.push(TrustedKey::new(PublicKey::load(&entry)?, entry));
                }
            } else {
                keys.push(TrustedKey::new(PublicKey::load(path)?, path));
            }
        }
        Self::new(keys).map_err(|error| match error {
            KeyError::NoTrustedKeys { .. } => KeyError::NoTrustedKeys {
                sources: paths.iter().map(|path| path.as_ref().to_owned()).collect(),
            },
            other => other,
        })
    }

    /// The trusted keys, in order.
    pub fn keys(&self) -> &[TrustedKey] {
        &self.keys
    }

    /// The sources that gave a key already trusted from an earlier one, in
    /// the order given.
    pub fn duplicates(&self) -> &[DuplicateKey] {
        &self.duplicates
    }

    /// Limits what `key` may sign to `scope`, in place of any scope given
    /// before. A key of no scope signs any skill; a scope of a key the store
    /// does not hold is kept, and applies if the key is.
    pub fn with_scope(mut self, key: Fingerprint, scope: KeyScope) -> Self {
        self.scopes.insert(key, scope);
        self
    }

    /// What `key` may sign, when it is limited.
    pub fn scope_of(&self, key: &Fingerprint) -> Option<&KeyScope> {
        self.scopes.get(key)
    }
}
