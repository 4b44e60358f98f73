//! Tools: the atomic operations skills and agents call.
//!
//! A [`Tool`] is a name, a description, a JSON Schema of its arguments, whether
//! it reads or writes, and an async implementation. The [`ToolRegistry`]
//! validates arguments against the schema before any tool runs, so a tool's
//! `invoke` only ever sees arguments that match its schema.

pub mod demo;
pub mod http;
mod registry;

#[cfg(test)]
pub(crate) use registry::test_tools;
pub use registry::{RegisterError, RegisteredTool, ToolCallSpan, ToolCaller, ToolRegistry};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Whether a tool only reads or changes state. Write tools can require a
/// person's approval before they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    Read,
    Write,
}

/// What an agent or skill author needs to know about a tool.
#[derive(Debug, Clone, Serialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
    pub access: Access,
}

/// Why a tool call failed. Mirrors the WIT `tool-error-kind`, so the runtime
/// can hand it to a guest unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    #[error("tool `{tool}` is not permitted here: {reason}")]
    NotPermitted { tool: String, reason: String },
    #[error("no tool named `{0}` is registered")]
    UnknownTool(String),
    #[error("invalid arguments for `{tool}`: {message}")]
    InvalidArguments { tool: String, message: String },
    /// The tool ran and said no (a business rule), e.g. a refund of an order
    /// that is not delivered.
    #[error("{0}")]
    Rejected(String),
    /// A person declined the call, or nobody answered its confirmation in
    /// time; the text says which, and the person's reason if they gave one.
    #[error("{0}")]
    Declined(String),
    #[error("limit exceeded: {0}")]
    LimitExceeded(String),
    #[error("tool failed: {0}")]
    Failed(String),
}

/// One atomic operation. Implementations are registered by the embedder.
#[async_trait]
pub trait Tool: Send + Sync {
    fn spec(&self) -> &ToolSpec;

    /// Runs the tool. `arguments` has already been validated against
    /// `spec().parameters`; the result is any JSON value.
    async fn invoke(&self, arguments: Value) -> Result<Value, ToolError>;
}

/// A tool that is declared and never executed: its spec lets skills that
/// name it load (to read their manifests, to run their test cases), and a
/// call is refused with `reason`.
pub struct StandIn {
    spec: ToolSpec,
    reason: String,
}

impl StandIn {
    pub fn new(spec: ToolSpec, reason: impl Into<String>) -> Self {
        Self {
            spec,
            reason: reason.into(),
        }
    }
}

#[async_trait]
impl Tool for StandIn {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn invoke(&self, _arguments: Value) -> Result<Value, ToolError> {
        Err(ToolError::NotPermitted {
            tool: self.spec.name.clone(),
            reason: self.reason.clone(),
        })
    }
}
