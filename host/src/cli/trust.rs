//! The trust store of a long-running command as it changes: `serve` and
//! `mcp` read it again, with hot reload, whenever the files of `--trust`
//! change, and at SIGHUP with the config file's `[[trust.scopes]]`, so
//! that a key added, rotated, revoked or given another scope takes effect
//! without a restart.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::Mutex;

use skillhost::embed::SkillHost;
use skillhost::skills::ReloadOutcome;
use skillhost::skills::signature::{KeyError, SignaturePolicy, TrustStore};

use super::config::ConfigFile;
use super::console;
use super::follow::{self, Following};
use super::hangup::reloaded;
use super::serve::report_trust;
use super::sign::{KeyScopes, TrustArgs};

/// The trust store of `--trust`, read again as a whole, one reading at a
/// time: the last one read is the one in force.
#[derive(Clone)]
pub(crate) struct Trust {
    host: SkillHost,
    args: TrustArgs,
    /// The config file's `[[trust.scopes]]`, as last read.
    scopes: Arc<std::sync::Mutex<KeyScopes>>,
    reading: Arc<Mutex<()>>,
}

/// What the trust store is read from, as it was at one moment: each path's
/// bytes, or a directory's entries (hidden ones aside, as the store skips
/// them) with theirs. Two that differ mean the store may have changed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Contents(Vec<(PathBuf, Option<Vec<u8>>)>);

impl Trust {
    pub(crate) fn new(host: SkillHost, args: TrustArgs, scopes: KeyScopes) -> Self {
        Self {
            host,
            args,
            scopes: Arc::new(std::sync::Mutex::new(scopes)),
            reading: Arc::default(),
        }
    }

    /// Takes the key scopes of `file` (the config file read again; `None`
    /// when there is none or it did not read: the scopes in force stay),
    /// then reads the trust store again ([`Trust::reload`]). Scopes that do
    /// not check keep those in force, saying why.
    pub(crate) async fn reload_with_scopes(&self, file: Option<&ConfigFile>) {
        if let Some(file) = file {
            match file.key_scopes() {
                Ok(scopes) => {
                    let mut held = self.scopes();
                    if *held != scopes {
                        let said = format!(
                            "key scopes read again from {}: {} key(s) scoped",
                            file.path().display(),
                            scopes.len()
                        );
                        *held = scopes;
                        reloaded(&self.host, "key_scopes", Ok(said));
                    }
                }
                Err(error) => {
                    let why = format!("{error:#}; the key scopes in force stay");
                    reloaded(&self.host, "key_scopes", Err(why));
                }
            }
        }
        self.reload().await;
    }

    fn scopes(&self) -> std::sync::MutexGuard<'_, KeyScopes> {
        self.scopes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Reads the trust store again and holds the skills to it at once
    /// ([`SkillHost::replace_signature_policy`]): a skill whose key was
    /// taken out is unloaded, one refused for a key now trusted loads. With
    /// every key taken out, no key is trusted: revoking the last key must
    /// work too. A store that does not read (a stray file, a path gone)
    /// changes nothing.
    pub(crate) async fn reload(&self) {
        let _reading = self.reading.lock().await;
        let scoped = self.args.scoped_store(&self.scopes());
        let store = match scoped {
            Ok(store) => store,
            Err(error) => match error.downcast_ref() {
                Some(KeyError::NoTrustedKeys { sources }) => {
                    let sources: Vec<String> = sources
                        .iter()
                        .map(|path| path.display().to_string())
                        .collect();
                    console::warn(&format!(
                        "no key is trusted any more (none in {}): every skill is refused until a \
                         key is trusted again",
                        sources.join(", ")
                    ));
                    TrustStore::trusting_nothing()
                }
                _ => {
                    let why = format!("{error:#}; the keys trusted stay");
                    return reloaded(&self.host, "trust_store", Err(why));
                }
            },
        };
        let policy = SignaturePolicy::Require(store);
        let replaced = self.host.replace_signature_policy(policy.clone()).await;
        let trust = &replaced.trust;
        if !trust.added.is_empty() || !trust.removed.is_empty() {
            report_trust(&policy);
        }
        let count = |wanted: fn(&ReloadOutcome) -> bool| {
            let reloads = replaced.reloads.iter();
            reloads.filter(|event| wanted(&event.outcome)).count()
        };
        let said = format!(
            "trust store read again: {} key(s), {} added, {} taken out; {} skill(s) unloaded as \
             no longer trusted, {} loaded",
            trust.keys.len(),
            trust.added.len(),
            trust.removed.len(),
            count(|outcome| matches!(outcome, ReloadOutcome::Untrusted { .. })),
            count(|outcome| matches!(outcome, ReloadOutcome::Loaded)),
        );
        reloaded(&self.host, "trust_store", Ok(said));
    }

    /// Follows the files of `--trust`: reads the store again whenever what
    /// they hold differs from `seen` (taken before the store in force was
    /// read). Keep the returned watcher: dropping it stops the watch.
    pub(crate) fn watch(&self, seen: Contents) -> anyhow::Result<Following> {
        let paths = self.args.paths().to_vec();
        let dirs: Vec<PathBuf> = paths
            .iter()
            .map(|path| {
                if path.is_dir() {
                    path.clone()
                } else {
                    follow::parent_dir(path)
                }
            })
            .collect();
        let trust = self.clone();
        follow::watch(
            "the trust store",
            &dirs,
            seen,
            move || contents(&paths),
            move || {
                let trust = trust.clone();
                async move { trust.reload().await }
            },
        )
    }
}

/// What the trust store at `paths` is read from now.
pub(crate) fn contents(paths: &[PathBuf]) -> Contents {
    let mut read = Vec::new();
    for path in paths {
        match std::fs::read_dir(path) {
            Ok(entries) => {
                let mut entries: Vec<PathBuf> = entries
                    .flatten()
                    .filter(|entry| !entry.file_name().to_string_lossy().starts_with('.'))
                    .map(|entry| entry.path())
                    .collect();
                entries.sort();
                read.push((path.clone(), None));
                read.extend(entries.into_iter().map(|entry| {
                    let bytes = std::fs::read(&entry).ok();
                    (entry, bytes)
                }));
            }
            Err(_) => read.push((path.clone(), std::fs::read(path).ok())),
        }
    }
    Contents(read)
}
