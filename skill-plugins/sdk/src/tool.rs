//! Calling the host's tools with serde values.

use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::bindings::skillhost::skill::{host, types};

/// Calls the tool `name` with `args` serialized as a JSON object and
/// deserializes its result into `O`.
///
/// Only tools declared in the manifest's `tools` run; every call counts against
/// the invocation's tool-call budget.
///
/// ```ignore
/// #[derive(Serialize)]
/// #[serde(rename_all = "camelCase")]
/// struct QueryOrder<'a> { order_id: &'a str }
///
/// let order: Order = call_tool("queryOrder", &QueryOrder { order_id: "88231" })?;
/// ```
pub fn call_tool<A, O>(name: &str, args: &A) -> Result<O, ToolError>
where
    A: Serialize + ?Sized,
    O: DeserializeOwned,
{
    let args = serde_json::to_string(args).map_err(|e| ToolError {
        kind: ToolErrorKind::InvalidArguments,
        message: format!("arguments for {name} do not serialize: {e}"),
    })?;
    let result = host::call_tool(name, &args).map_err(ToolError::from)?;
    serde_json::from_str(&result).map_err(|e| ToolError {
        kind: ToolErrorKind::InvalidResult,
        message: format!("result of {name} does not match the expected type: {e}"),
    })
}

/// Calls the tool `name` with a JSON value (e.g. built with
/// [`json!`](crate::json)) and returns its result as a JSON value.
pub fn call_tool_json(name: &str, args: &Value) -> Result<Value, ToolError> {
    call_tool(name, args)
}

/// Why a tool call failed. A guest-visible error, never a trap.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolError {
    /// The class of failure.
    pub kind: ToolErrorKind,
    /// Human-readable detail; names the offending field where there is one.
    pub message: String,
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.as_str(), self.message)
    }
}

impl std::error::Error for ToolError {}

/// The class of a [`ToolError`]; serializes as the WIT name (`not-permitted`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ToolErrorKind {
    /// The tool is not in the manifest's `tools`; it was not executed.
    NotPermitted,
    /// No tool of that name is registered.
    UnknownTool,
    /// The arguments are not valid JSON or do not match the tool's schema.
    InvalidArguments,
    /// The tool ran and refused the request (a business rule said no).
    Rejected,
    /// A person declined to approve this write.
    Declined,
    /// The invocation's tool-call budget is spent.
    LimitExceeded,
    /// The tool failed for a reason outside the request (I/O, a bug).
    Failed,
    /// The tool succeeded but its result did not deserialize into the type
    /// the skill asked for. Raised by the SDK, not the host.
    InvalidResult,
}

impl ToolErrorKind {
    /// The WIT name of the kind, e.g. `not-permitted`.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolErrorKind::NotPermitted => "not-permitted",
            ToolErrorKind::UnknownTool => "unknown-tool",
            ToolErrorKind::InvalidArguments => "invalid-arguments",
            ToolErrorKind::Rejected => "rejected",
            ToolErrorKind::Declined => "declined",
            ToolErrorKind::LimitExceeded => "limit-exceeded",
            ToolErrorKind::Failed => "failed",
            ToolErrorKind::InvalidResult => "invalid-result",
        }
    }
}

impl From<types::ToolError> for ToolError {
    fn from(error: types::ToolError) -> Self {
        let kind = match error.kind {
            types::ToolErrorKind::NotPermitted => ToolErrorKind::NotPermitted,
            types::ToolErrorKind::UnknownTool => ToolErrorKind::UnknownTool,
            types::ToolErrorKind::InvalidArguments => ToolErrorKind::InvalidArguments,
            types::ToolErrorKind::Rejected => ToolErrorKind::Rejected,
            types::ToolErrorKind::Declined => ToolErrorKind::Declined,
            types::ToolErrorKind::LimitExceeded => ToolErrorKind::LimitExceeded,
            types::ToolErrorKind::Failed => ToolErrorKind::Failed,
        };
        ToolError {
            kind,
            message: error.message,
        }
    }
}
