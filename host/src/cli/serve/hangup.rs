//! SIGHUP: `serve` reads again what it was started from, without the
//! restart that would withdraw every run waiting for an answer — the trust
//! store (a key added, rotated or revoked), the skills directory (for
//! changes hot reload did not report, or a gateway serving without it) and
//! the API keys file, when there is one.

use std::path::PathBuf;

use skillhost::embed::SkillHost;
use skillhost::gateway::Gateway;
use skillhost::skills::ReloadOutcome;

use super::keys;
use crate::cli::console;
use crate::cli::trust::Trust;

/// Listens for SIGHUP from now on; each one reads the trust store again
/// (`trust`; `None` under `--allow-unsigned`), rescans the skills
/// directory, then reads `keys_file` again (with `given`, the `--api-key`
/// keys, first as at the start).
pub(super) fn reload_on_hangup(
    gateway: Gateway,
    trust: Option<Trust>,
    given: Vec<String>,
    keys_file: Option<PathBuf>,
) -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangups = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            if let Some(trust) = &trust {
                trust.reload().await;
            }
            rescan_skills(gateway.host()).await;
            if let Some(file) = &keys_file {
                keys::reload(&gateway, &given, file);
            }
        }
    });
    Ok(())
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
