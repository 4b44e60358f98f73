//! The environment a spawned `skillhost` inherits.

use std::ffi::OsString;

/// The variables of this process's environment that configure `skillhost`
/// (`SKILLHOST_*`), its LLM (`OPENAI_*`), the trace it runs in
/// (`TRACEPARENT`, `TRACESTATE`) or its span export (`OTEL_*`), whichever
/// the binary reads now or will: a
/// test removes them all from a spawned binary's environment, so that the
/// machine's own settings never leak into it.
pub fn host_settings() -> Vec<OsString> {
    std::env::vars_os()
        .map(|(name, _)| name)
        .filter(|name| {
            let name = name.as_encoded_bytes();
            name.starts_with(b"SKILLHOST_")
                || name.starts_with(b"OPENAI_")
                || name.starts_with(b"OTEL_")
                || [&b"TRACEPARENT"[..], b"TRACESTATE"].contains(&name)
        })
        .collect()
}
