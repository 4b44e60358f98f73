//! SIGHUP: `serve` and `mcp` read again what they were started from,
//! without the restart that would withdraw every run waiting for an answer
//! (or end an MCP client's session) — the trust store (a key added, rotated
//! or revoked) with the config file's key scopes, the tools of the MCP
//! servers (one at a url may not be able to say that theirs changed), the
//! skills directory (for changes hot reload did not report, or a host
//! running without it), and then what the command reads besides (serve:
//! its API keys file and the config file's API key skill scopes).

use skillhost::embed::SkillHost;
use skillhost::skills::ReloadOutcome;

use crate::cli::console;
use crate::cli::trust::Trust;

/// Listens for SIGHUP from now on; each one reads the trust store and the
/// key scopes again (`trust`; `None` under `--allow-unsigned`), lists the
/// MCP servers' tools again, rescans the skills directory, then calls
/// `also`.
pub(super) fn reload_on_hangup(
    host: SkillHost,
    trust: Option<Trust>,
    mut also: impl FnMut() + Send + 'static,
) -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangups = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            if let Some(trust) = &trust {
                trust.reload_with_scopes().await;
            }
            relist_mcp_tools(&host).await;
            rescan_skills(&host).await;
            also();
        }
    });
    Ok(())
}

/// Lists the MCP servers' tools again and says what came of it for the
/// skills; each server's change (or why it could not be listed) is logged.
async fn relist_mcp_tools(host: &SkillHost) {
    let events = host.relist_mcp_tools().await;
    if !events.is_empty() {
        console::say(&format!(
            "MCP servers' tools listed again: {} skill file(s) changed with them",
            events.len()
        ));
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
