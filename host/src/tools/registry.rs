use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use super::{Tool, ToolError, ToolSpec};

/// A tool with its argument schema compiled once, at registration.
pub struct RegisteredTool {
    tool: Arc<dyn Tool>,
    validator: jsonschema::Validator,
}

impl RegisteredTool {
    pub fn spec(&self) -> &ToolSpec {
        self.tool.spec()
    }

    /// Checks `arguments` against the tool's schema. The error names the
    /// offending field by its JSON pointer.
    pub fn validate(&self, arguments: &Value) -> Result<(), ToolError> {
        crate::schema::check(&self.validator, arguments).map_err(|message| {
            ToolError::InvalidArguments {
                tool: self.spec().name.clone(),
                message,
            }
        })
    }

    /// Validates, then runs the tool.
    pub async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        self.validate(&arguments)?;
        self.tool.invoke(arguments).await
    }
}

/// Every tool the host can execute, by name. Built once and then shared
/// read-only (`Arc<ToolRegistry>`).
#[derive(Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, RegisteredTool>,
}

/// Why a tool could not be registered.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    #[error("a tool named `{0}` is already registered")]
    Duplicate(String),
    #[error("tool `{tool}` has an invalid parameter schema: {message}")]
    InvalidSchema { tool: String, message: String },
}

impl ToolRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Result<(), RegisterError> {
        let spec = tool.spec();
        if self.tools.contains_key(&spec.name) {
            return Err(RegisterError::Duplicate(spec.name.clone()));
        }
        let validator = jsonschema::validator_for(&spec.parameters).map_err(|error| {
            RegisterError::InvalidSchema {
                tool: spec.name.clone(),
                message: error.to_string(),
            }
        })?;
        self.tools
            .insert(spec.name.clone(), RegisteredTool { tool, validator });
        Ok(())
    }

    pub fn get(&self, name: &str) -> Option<&RegisteredTool> {
        self.tools.get(name)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.tools.contains_key(name)
    }

    pub fn specs(&self) -> impl Iterator<Item = &ToolSpec> {
        self.tools.values().map(RegisteredTool::spec)
    }

    /// Looks up, validates and runs a tool.
    pub async fn call(&self, name: &str, arguments: Value) -> Result<Value, ToolError> {
        let tool = self
            .get(name)
            .ok_or_else(|| ToolError::UnknownTool(name.to_owned()))?;
        tool.call(arguments).await
    }
}
