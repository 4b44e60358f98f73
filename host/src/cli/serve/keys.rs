//! The gateway's keys as `serve` takes them: `--api-key` (named by
//! position) and `--api-keys-file` (named by their holders).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use skillhost::gateway::{ApiKey, Gateway};

use crate::cli::console;
use crate::cli::follow::{self, Following};
use crate::cli::hangup::reloaded;

/// Longest name a key may go by: it is shown in events and logs.
const MAX_NAME_CHARS: usize = 64;

/// `--api-key` and `--admin-key`: a blank key is refused. The gateway
/// ignores one (clients could not send it), so taking it would leave the
/// routes open while the operator believes them guarded, and keep the
/// warning about an open gateway from being shown.
pub(super) fn bearer_key(text: &str) -> Result<String, String> {
    if text.trim().is_empty() {
        return Err(
            "a key is empty or blank (an empty environment variable, or a stray \
                    comma in a list of keys?); to serve without keys, set none"
                .to_owned(),
        );
    }
    Ok(text.to_owned())
}

/// The API keys of `--api-key` and of the keys file, with the file's bytes
/// they were read from.
#[derive(Debug)]
pub(super) struct ApiKeys {
    pub keys: Vec<ApiKey>,
    /// What the watcher compares the file with, so that a change made
    /// before the watch began is not missed.
    pub file_bytes: Option<Vec<u8>>,
}

/// The API keys of `--api-key` (which go by `api-key-<n>`, so they come
/// first) and of the keys file. A key given twice is refused: who
/// presented it would be ambiguous.
pub(super) fn api_keys(given: &[String], file: Option<&Path>) -> anyhow::Result<ApiKeys> {
    let mut keys: Vec<ApiKey> = given.iter().map(|key| ApiKey::from(key.as_str())).collect();
    let Some(path) = file else {
        return Ok(ApiKeys {
            keys,
            file_bytes: None,
        });
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the API keys file {}", path.display()))?;
    warn_if_others_can_read(path);
    let named = parse_keys_file(&text)
        .with_context(|| format!("in the API keys file {}", path.display()))?;
    for (line, key) in &named {
        if given.iter().any(|given| given.trim() == key.key) {
            bail!(
                "in the API keys file {}: line {line}: the key of `{}` is also given with \
                 --api-key (SKILLHOST_API_KEYS); give each key once, so that the name of whoever \
                 presents it is certain",
                path.display(),
                key.name.as_deref().unwrap_or_default()
            );
        }
    }
    keys.extend(named.into_iter().map(|(_, key)| key));
    Ok(ApiKeys {
        keys,
        file_bytes: Some(text.into_bytes()),
    })
}

/// Reads the keys file again, for a key rotation without a restart: keys
/// that read and check replace the API keys, with `given` first as at the
/// start; a file that does not is reported, and the keys in force stay.
pub(super) fn reload(gateway: &Gateway, given: &[String], file: &Path) {
    let said = match api_keys(given, Some(file)) {
        Ok(ApiKeys { keys, .. }) => {
            gateway.set_api_keys(&keys);
            Ok(format!(
                "API keys reloaded from {}: {} key(s)",
                file.display(),
                keys.len()
            ))
        }
        Err(error) => Err(format!("{error:#}; the API keys in force stay")),
    };
    reloaded(gateway.host(), "api_keys", said);
}

/// Watches the directory of `file` and calls `on_change` (in `serve`,
/// [`reload`]) whenever its bytes differ from the last seen, starting from
/// `read`, the bytes the keys in force came from ([`follow::watch`]). Keep
/// the returned watcher: dropping it stops the watch.
pub(super) fn watch(
    file: PathBuf,
    read: Option<Vec<u8>>,
    on_change: impl Fn() + Send + 'static,
) -> anyhow::Result<Following> {
    let dir = follow::parent_dir(&file);
    follow::watch(
        "the API keys file",
        &[dir],
        read,
        move || std::fs::read(&file).ok(),
        move || {
            on_change();
            std::future::ready(())
        },
    )
}

/// The keys of a keys file with the line each is on: one `NAME KEY` per
/// line; blank lines and lines starting with `#` are skipped. Errors name
/// the line, never the key.
fn parse_keys_file(text: &str) -> anyhow::Result<Vec<(usize, ApiKey)>> {
    let mut keys = Vec::new();
    let mut names: HashMap<&str, usize> = HashMap::new();
    let mut secrets: HashMap<&str, usize> = HashMap::new();
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [name, key] = fields[..] else {
            bail!(
                "line {number}: expected `NAME KEY` (two fields), found {} field(s)",
                fields.len()
            );
        };
        check_name(name).with_context(|| format!("line {number}"))?;
        if let Some(first) = names.insert(name, number) {
            bail!("line {number}: the name `{name}` is also on line {first}");
        }
        if let Some(first) = secrets.insert(key, number) {
            bail!(
                "line {number}: the key of `{name}` is also on line {first}; give each key \
                 once, so that the name of whoever presents it is certain"
            );
        }
        keys.push((number, ApiKey::named(name, key)));
    }
    if keys.is_empty() {
        bail!("it holds no keys: the API routes would be open; to serve without keys, set none");
    }
    Ok(keys)
}

/// A name shows in events and logs as it is written: letters, digits and
/// `.`, `_`, `-`, `@` only, and none the gateway gives keys itself.
fn check_name(name: &str) -> anyhow::Result<()> {
    let positional = name
        .strip_prefix("api-key-")
        .is_some_and(|n| n.parse::<usize>().is_ok());
    if name == "admin" || positional {
        bail!(
            "the name `{name}` is what the gateway calls the admin key or an unnamed key; \
             choose another"
        );
    }
    if name.chars().count() > MAX_NAME_CHARS {
        bail!("the name `{name}` is longer than {MAX_NAME_CHARS} characters");
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@')))
    {
        bail!("the name `{name}` holds {bad:?}: a name is letters, digits and `.`, `_`, `-`, `@`");
    }
    Ok(())
}

#[cfg(unix)]
fn warn_if_others_can_read(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(metadata) = std::fs::metadata(path) else {
        return;
    };
    if metadata.permissions().mode() & 0o004 != 0 {
        console::warn(&format!(
            "{} can be read by every user of this machine; it holds API keys (chmod 600 it)",
            path.display()
        ));
    }
}

#[cfg(not(unix))]
fn warn_if_others_can_read(_path: &Path) {}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::sync::mpsc;

    use super::*;
    use crate::cli::follow::SETTLE;

    #[test]
    fn a_blank_key_is_refused_not_taken_for_a_guard() {
        assert_eq!(bearer_key("k-1").unwrap(), "k-1");
        for blank in ["", "  "] {
            let error = bearer_key(blank).unwrap_err();
            assert!(error.contains("empty or blank"), "{error}");
        }
    }

    #[test]
    fn a_keys_file_names_its_keys_and_skips_comments() {
        let keys = parse_keys_file(
            "# who   key\n\nsupport-desk  c2VjcmV0MQ==\n  billing@shop\tc2VjcmV0Mg==  \n",
        )
        .unwrap();
        assert_eq!(
            keys,
            [
                (3, ApiKey::named("support-desk", "c2VjcmV0MQ==")),
                (4, ApiKey::named("billing@shop", "c2VjcmV0Mg==")),
            ]
        );
    }

    #[test]
    fn a_bad_keys_file_is_refused_naming_the_line_not_the_key() {
        let cases = [
            (
                "support\n",
                "line 1: expected `NAME KEY` (two fields), found 1",
            ),
            (
                "a k1\nb k2 extra\n",
                "line 2: expected `NAME KEY` (two fields), found 3",
            ),
            ("a k1\na k2\n", "line 2: the name `a` is also on line 1"),
            ("a k1\n\nb k1\n", "line 3: the key of `b` is also on line 1"),
            ("sup/port k1\n", "the name `sup/port` holds '/'"),
            (
                "api-key-2 k1\n",
                "the name `api-key-2` is what the gateway calls",
            ),
            ("admin k1\n", "the name `admin` is what the gateway calls"),
            ("# nothing yet\n\n", "it holds no keys"),
        ];
        for (text, expected) in cases {
            let error = format!("{:#}", parse_keys_file(text).unwrap_err());
            assert!(error.contains(expected), "{text:?}: {error}");
            assert!(!error.contains("k1") && !error.contains("k2"), "{error}");
        }
        let long = format!("{} k1\n", "n".repeat(MAX_NAME_CHARS + 1));
        let error = format!("{:#}", parse_keys_file(&long).unwrap_err());
        assert!(error.contains("longer than 64 characters"), "{error}");
    }

    /// Calls of the watch's `on_change`, one message each.
    fn watching(file: &Path, read: &[u8]) -> (Following, mpsc::UnboundedReceiver<()>) {
        let (called, calls) = mpsc::unbounded_channel();
        let watcher = watch(file.to_owned(), Some(read.to_vec()), move || {
            let _ = called.send(());
        })
        .unwrap();
        (watcher, calls)
    }

    async fn next_call(calls: &mut mpsc::UnboundedReceiver<()>) -> bool {
        tokio::time::timeout(Duration::from_secs(10), calls.recv())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn the_watch_follows_a_change_and_not_an_unchanged_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("keys");
        std::fs::write(&file, "support s-1\n").unwrap();
        let (_watcher, mut calls) = watching(&file, b"support s-1\n");
        std::fs::read(&file).unwrap();
        tokio::time::sleep(SETTLE * 4).await;
        assert!(calls.try_recv().is_err(), "called with nothing changed");
        std::fs::write(&file, "support s-2\n").unwrap();
        assert!(next_call(&mut calls).await, "the change was not followed");
    }

    /// Regression: the watch began with the bytes it read itself, after the
    /// host had loaded its skills, so a rotation during the start was
    /// missed until the next change.
    #[tokio::test]
    async fn a_change_made_before_the_watch_began_is_followed() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("keys");
        std::fs::write(&file, "support s-2\n").unwrap();
        let (_watcher, mut calls) = watching(&file, b"support s-1\n");
        assert!(next_call(&mut calls).await, "the earlier change was missed");
    }

    #[test]
    fn keys_given_on_the_command_line_come_first_and_once() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("keys");
        std::fs::write(&file, "support s-1\n").unwrap();
        let keys = api_keys(&["k-1".to_owned()], Some(&file)).unwrap();
        assert_eq!(
            keys.keys,
            [ApiKey::from("k-1"), ApiKey::named("support", "s-1")]
        );
        assert_eq!(keys.file_bytes.as_deref(), Some(&b"support s-1\n"[..]));
        let error = format!("{:#}", api_keys(&["s-1".into()], Some(&file)).unwrap_err());
        assert!(
            error.contains("line 1: the key of `support` is also given with --api-key"),
            "{error}"
        );
        let missing = dir.path().join("absent");
        let error = format!("{:#}", api_keys(&[], Some(&missing)).unwrap_err());
        assert!(error.contains("reading the API keys file"), "{error}");
    }
}
