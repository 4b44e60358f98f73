//! Per-invocation limits. Every default is set here and documented here.

use std::time::Duration;

use serde::ser::{Serialize, SerializeStruct, Serializer};

/// Bounds on one skill invocation (one fresh `Store`). Exceeding any of them
/// ends that invocation with [`super::InvokeError::LimitExceeded`] naming the
/// limit; the host and other invocations carry on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Guest execution time: wall time from the instance's creation, checked
    /// at epoch ticks (and, for guests that import WASI, by a watchdog that
    /// also stops one waiting inside WASI). Time spent inside tool calls does
    /// not count (a tool may wait on I/O); the guest's own computation and
    /// waits do.
    /// Default: 2 s — deterministic steps are glue code that should finish in
    /// microseconds; two seconds catches a runaway loop without cutting off a
    /// slow-but-honest guest such as an interpreted language runtime.
    pub execution_time: Duration,
    /// Linear memory the guest may grow to, summed over all its memories.
    /// Default: 64 MiB — enough for a Rust guest (which needs about 1 MiB) or
    /// an interpreted runtime's heap, small enough that hundreds of concurrent
    /// invocations fit in memory.
    pub memory_bytes: usize,
    /// Tool calls one invocation may make. The first call over the budget
    /// gets a `limit-exceeded` tool error so a guest can wind down; any call
    /// after that ends the invocation. Default: 32 — the articles' skills
    /// make two or three calls.
    pub tool_calls: u32,
    /// Size of the result a guest returns (and of each tool-call argument
    /// string it passes). Default: 1 MiB — a result goes into an LLM context,
    /// where even 1 MiB is far too much.
    pub output_bytes: usize,
    /// Log lines one invocation may write through `log` (and captured
    /// stdout/stderr); further lines are dropped with one notice. Default: 256.
    pub log_lines: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            execution_time: Duration::from_secs(2),
            memory_bytes: 64 << 20,
            tool_calls: 32,
            output_bytes: 1 << 20,
            log_lines: 256,
        }
    }
}

/// As the skills API and `skillhost skills --json` show them, in the config
/// file's terms where they are plain: `execution_time_ms`, `memory_bytes`,
/// `tool_calls`, `output_bytes`, `log_lines`.
impl Serialize for Limits {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let millis = u64::try_from(self.execution_time.as_millis()).unwrap_or(u64::MAX);
        let mut limits = serializer.serialize_struct("Limits", 5)?;
        limits.serialize_field("execution_time_ms", &millis)?;
        limits.serialize_field("memory_bytes", &self.memory_bytes)?;
        limits.serialize_field("tool_calls", &self.tool_calls)?;
        limits.serialize_field("output_bytes", &self.output_bytes)?;
        limits.serialize_field("log_lines", &self.log_lines)?;
        limits.end()
    }
}

/// One line for people: `2000 ms, 64 MiB memory, 32 tool calls, 1048576
/// output bytes, 256 log lines` (memory in bytes unless whole MiB).
impl std::fmt::Display for Limits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ms, ", self.execution_time.as_millis())?;
        if self.memory_bytes.is_multiple_of(1 << 20) {
            write!(f, "{} MiB memory", self.memory_bytes >> 20)?;
        } else {
            write!(f, "{} bytes memory", self.memory_bytes)?;
        }
        write!(
            f,
            ", {} tool calls, {} output bytes, {} log lines",
            self.tool_calls, self.output_bytes, self.log_lines
        )
    }
}

/// Which limit an invocation hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Limit {
    ExecutionTime,
    Memory,
    ToolCalls,
    Output,
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Limit::ExecutionTime => "execution-time",
            Limit::Memory => "memory",
            Limit::ToolCalls => "tool-call",
            Limit::Output => "output-size",
        })
    }
}

/// `bytes` in MiB for a message: `1.4 MiB`.
pub(super) fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}
