//! Logging to the host, attributed to this skill and invocation.
//!
//! ```ignore
//! use skillhost_skill_sdk::log;
//!
//! log::info!("order {} is {}", order_id, status);
//! ```

use crate::bindings::skillhost::skill::{host, types};

/// Severity of a log message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Very detailed tracing.
    Trace,
    /// Detail useful when debugging a skill.
    Debug,
    /// Normal progress.
    Info,
    /// Something unexpected that the skill handled.
    Warn,
    /// A failure.
    Error,
}

/// Writes `message` to the host's log at `level`.
pub fn write(level: Level, message: &str) {
    let level = match level {
        Level::Trace => types::LogLevel::Trace,
        Level::Debug => types::LogLevel::Debug,
        Level::Info => types::LogLevel::Info,
        Level::Warn => types::LogLevel::Warn,
        Level::Error => types::LogLevel::Error,
    };
    host::log(level, message);
}

/// Logs a `format!`-style message at trace level.
#[macro_export]
macro_rules! trace {
    ($($arg:tt)*) => { $crate::log::write($crate::log::Level::Trace, &::std::format!($($arg)*)) };
}

/// Logs a `format!`-style message at debug level.
#[macro_export]
macro_rules! debug {
    ($($arg:tt)*) => { $crate::log::write($crate::log::Level::Debug, &::std::format!($($arg)*)) };
}

/// Logs a `format!`-style message at info level.
#[macro_export]
macro_rules! info {
    ($($arg:tt)*) => { $crate::log::write($crate::log::Level::Info, &::std::format!($($arg)*)) };
}

/// Logs a `format!`-style message at warn level.
#[macro_export]
macro_rules! warn {
    ($($arg:tt)*) => { $crate::log::write($crate::log::Level::Warn, &::std::format!($($arg)*)) };
}

/// Logs a `format!`-style message at error level.
#[macro_export]
macro_rules! error {
    ($($arg:tt)*) => { $crate::log::write($crate::log::Level::Error, &::std::format!($($arg)*)) };
}

// `#[macro_export]` puts the macros at the crate root; re-export them here so
// that `log::info!` reads like the `log` crate.
pub use crate::{debug, error, info, trace, warn};
