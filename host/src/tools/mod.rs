//! Tools: the atomic operations skills and agents call.
//!
//! A [`Tool`] is a name, a description, a JSON Schema of its arguments, whether
//! it reads or writes, and an async implementation. The [`ToolRegistry`]
//! validates arguments against the schema before any tool runs, so a tool's
//! `invoke` only ever sees arguments that match its schema.

pub mod demo;
pub mod http;
pub mod mcp;
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
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
    pub access: Access,
}

/// Why a tool call failed. Mirrors the WIT `tool-error-kind`, so the runtime
/// can hand it to a guest unchanged. Serialized in the answers a run kept on
/// disk has been given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
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
    /// `spec().parameters`; the result is any JSON value. `context` holds
    /// what the embedder attached to the run making the call (who the end
    /// user is, say), which the arguments — written by a model or a skill
    /// — cannot change.
    async fn invoke(&self, context: &ToolContext, arguments: Value) -> Result<Value, ToolError>;
}

/// What a tool is told about a call besides its arguments: values by type,
/// attached by the embedder to the run that makes the call
/// ([`RunOptions::with`](crate::agent::RunOptions::with)), such as the end
/// user a gateway authenticated or their tenant, so that a tool can act for
/// them and only them. A call made by a run also carries its
/// [`RunId`](crate::agent::RunId). Empty for calls outside a run.
#[derive(Clone, Debug, Default)]
pub struct ToolContext(::http::Extensions);

impl ToolContext {
    /// A context with nothing in it.
    pub fn new() -> Self {
        Self::default()
    }

    /// This context with `value` in it, replacing any value of its type.
    #[must_use]
    pub fn with<T: Clone + Send + Sync + 'static>(mut self, value: T) -> Self {
        self.insert(value);
        self
    }

    /// Puts `value` in, returning the value of its type it replaces.
    pub fn insert<T: Clone + Send + Sync + 'static>(&mut self, value: T) -> Option<T> {
        self.0.insert(value)
    }

    /// The value of type `T`, if there is one.
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.0.get()
    }

    /// Whether nothing is in it.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
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

    async fn invoke(&self, _context: &ToolContext, _arguments: Value) -> Result<Value, ToolError> {
        Err(ToolError::NotPermitted {
            tool: self.spec.name.clone(),
            reason: self.reason.clone(),
        })
    }
}
