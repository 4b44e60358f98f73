//! What a command tells whoever reads its stderr besides the log: `serve`'s
//! announcements (what loaded, where it listens, shutting down) and
//! warnings. Plain lines with text logs; log events with JSON logs, so that
//! a log pipeline reads nothing but JSON.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The target of the events, always enabled by the default filter.
pub(super) const TARGET: &str = "skillhost::console";

static JSON: AtomicBool = AtomicBool::new(false);

/// Warnings given so far, for a summary (`serve --check`).
static WARNINGS: AtomicUsize = AtomicUsize::new(0);

/// Called once the log format is known.
pub(super) fn use_json(json: bool) {
    JSON.store(json, Ordering::Relaxed);
}

/// A line of information.
pub(super) fn say(message: &str) {
    if JSON.load(Ordering::Relaxed) {
        tracing::info!(target: TARGET, "{message}");
    } else {
        eprintln!("{message}");
    }
}

/// A warning: `WARNING: ` before it in text, a warn-level event in JSON.
pub(super) fn warn(message: &str) {
    WARNINGS.fetch_add(1, Ordering::Relaxed);
    if JSON.load(Ordering::Relaxed) {
        tracing::warn!(target: TARGET, "{message}");
    } else {
        eprintln!("WARNING: {message}");
    }
}

/// The error that ended the command: `error: ` before it in text, an
/// error-level event in JSON.
pub(super) fn error(message: &str) {
    if JSON.load(Ordering::Relaxed) {
        tracing::error!(target: TARGET, "{message}");
    } else {
        eprintln!("error: {message}");
    }
}

/// How many warnings this process has given.
pub(super) fn warnings() -> usize {
    WARNINGS.load(Ordering::Relaxed)
}
