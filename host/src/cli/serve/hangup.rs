//! SIGHUP: `serve` reads again what it was started from, without the
//! restart that would withdraw every run waiting for an answer — the trust
//! store (a key added, rotated or revoked), the skills directory (for
//! changes hot reload did not report, or a gateway serving without it) and
//! the API keys file, when there is one.

use std::collections::BTreeSet;
use std::path::PathBuf;

use skillhost::embed::SkillHost;
use skillhost::gateway::Gateway;
use skillhost::skills::ReloadOutcome;
use skillhost::skills::signature::{Fingerprint, SignaturePolicy};

use super::{keys, report_trust};
use crate::cli::console;
use crate::cli::sign::TrustArgs;

/// Listens for SIGHUP from now on; each one reads the trust store of
/// `trust` again (`None` under `--allow-unsigned`), rescans the skills
/// directory, then reads `keys_file` again (with `given`, the `--api-key`
/// keys, first as at the start).
pub(super) fn reload_on_hangup(
    gateway: Gateway,
    trust: Option<TrustArgs>,
    given: Vec<String>,
    keys_file: Option<PathBuf>,
) -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangups = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            if let Some(trust) = &trust {
                reload_trust(gateway.host(), trust).await;
            }
            rescan_skills(gateway.host()).await;
            if let Some(file) = &keys_file {
                keys::reload(&gateway, &given, file);
            }
        }
    });
    Ok(())
}

/// Reads the trust store again and holds the skills to it at once: a skill
/// whose key was taken out is unloaded, one refused for a key now trusted
/// loads. A store that does not read (no key left, a stray file) changes
/// nothing.
async fn reload_trust(host: &SkillHost, trust: &TrustArgs) {
    let store = match trust.store() {
        Ok(store) => store,
        Err(error) => {
            console::warn(&format!("{error:#}; the keys trusted stay"));
            return;
        }
    };
    let policy = SignaturePolicy::Require(store);
    let (before, after) = (fingerprints(&host.skills().policy()), fingerprints(&policy));
    if before != after {
        report_trust(&policy);
    }
    let events = host.replace_signature_policy(policy).await;
    let count = |wanted: fn(&ReloadOutcome) -> bool| {
        events.iter().filter(|event| wanted(&event.outcome)).count()
    };
    console::say(&format!(
        "trust store read again: {} key(s), {} added, {} taken out; {} skill(s) unloaded as no \
         longer trusted, {} loaded",
        after.len(),
        after.difference(&before).count(),
        before.difference(&after).count(),
        count(|outcome| matches!(outcome, ReloadOutcome::Untrusted { .. })),
        count(|outcome| matches!(outcome, ReloadOutcome::Loaded)),
    ));
}

/// The keys `policy` trusts.
fn fingerprints(policy: &SignaturePolicy) -> BTreeSet<Fingerprint> {
    match policy {
        SignaturePolicy::Require(store) => {
            store.keys().iter().map(|key| key.fingerprint()).collect()
        }
        SignaturePolicy::AllowUnsigned => BTreeSet::new(),
    }
}

/// Rescans the skills directory and says what came of it; the files it
/// refused are logged one by one as they are met.
async fn rescan_skills(host: &SkillHost) {
    let events = match host.rescan_skills().await {
        Ok(events) => events,
        Err(error) => {
            console::warn(&format!("{error}; the skills loaded stay"));
            return;
        }
    };
    let count = |wanted: fn(&ReloadOutcome) -> bool| {
        events.iter().filter(|event| wanted(&event.outcome)).count()
    };
    let refused = count(|outcome| matches!(outcome, ReloadOutcome::Rejected { .. }));
    let changed = count(|outcome| !matches!(outcome, ReloadOutcome::Unchanged)) - refused;
    let refused = if refused > 0 {
        format!(", {refused} refused (the skills they held stay)")
    } else {
        String::new()
    };
    console::say(&format!(
        "skills directory {} read again: {} skill(s) loaded, {changed} file(s) changed{refused}",
        host.skills_dir().display(),
        host.snapshot().len(),
    ));
}
