use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tracing::{Instrument, Span, field};

use super::{Access, Tool, ToolContext, ToolError, ToolSpec};
use crate::skills::manifest::{LOAD_SKILL, is_function_name};
use crate::text::{self, Escaped, OUTSIDE_TEXT_BYTES};

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

    /// Validates, then runs the tool in `context`.
    pub async fn call(&self, context: &ToolContext, arguments: Value) -> Result<Value, ToolError> {
        self.validate(&arguments)?;
        self.tool.invoke(context, arguments).await
    }
}

/// Every tool the host can execute, by name. Shared read-only
/// (`Arc<ToolRegistry>`); a change of tools is a new registry, cloned
/// cheaply from the old one, put in place whole
/// ([`SkillRegistry::update_tools`](crate::skills::SkillRegistry::update_tools)).
#[derive(Default, Clone)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<RegisteredTool>>,
}

/// Why a tool could not be registered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegisterError {
    #[error("a tool named `{0}` is already registered")]
    Duplicate(String),
    #[error(
        "tool name `{0}` cannot be a function name: use an ASCII letter, then letters, digits, \
         `_` or `-`, at most 64 bytes"
    )]
    InvalidName(String),
    #[error("tool name `{0}` is reserved for the agent's own function")]
    ReservedName(String),
    #[error("tool `{tool}` has an invalid parameter schema: {message}")]
    InvalidSchema { tool: String, message: String },
}

impl ToolRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Result<(), RegisterError> {
        let spec = tool.spec();
        if !is_function_name(&spec.name) {
            return Err(RegisterError::InvalidName(spec.name.clone()));
        }
        if spec.name == LOAD_SKILL {
            return Err(RegisterError::ReservedName(spec.name.clone()));
        }
        if self.tools.contains_key(&spec.name) {
            return Err(RegisterError::Duplicate(spec.name.clone()));
        }
        let validator = jsonschema::validator_for(&spec.parameters).map_err(|error| {
            RegisterError::InvalidSchema {
                tool: spec.name.clone(),
                message: error.to_string(),
            }
        })?;
        let name = spec.name.clone();
        self.tools
            .insert(name, Arc::new(RegisteredTool { tool, validator }));
        Ok(())
    }

    /// Takes the tool `name` out; whether it was registered.
    pub fn remove(&mut self, name: &str) -> bool {
        self.tools.remove(name).is_some()
    }

    pub fn get(&self, name: &str) -> Option<&RegisteredTool> {
        self.tools.get(name).map(Arc::as_ref)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.tools.contains_key(name)
    }

    pub fn specs(&self) -> impl Iterator<Item = &ToolSpec> {
        self.tools.values().map(|tool| tool.spec())
    }

    /// Looks up, validates and runs a tool for the embedding code itself
    /// (caller `host` in the logs), in an empty context.
    pub async fn call(&self, name: &str, arguments: Value) -> Result<Value, ToolError> {
        self.call_as(ToolCaller::Host, &ToolContext::new(), name, arguments)
            .await
    }

    /// Looks up, validates and runs a tool for `caller` in `context`, in a
    /// `tool_call` span.
    pub async fn call_as(
        &self,
        caller: ToolCaller<'_>,
        context: &ToolContext,
        name: &str,
        arguments: Value,
    ) -> Result<Value, ToolError> {
        let mut span = ToolCallSpan::open(caller, name);
        let result = match self.get(name) {
            None => Err(ToolError::UnknownTool(name.to_owned())),
            Some(tool) => {
                span.resolved(tool.spec(), &arguments);
                span.execute(tool, context, arguments).await
            }
        };
        span.finish(result.as_ref().map(drop));
        result
    }
}

/// Who asked for a tool call, as the logs name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolCaller<'a> {
    /// The main agent: `agent`.
    Agent,
    /// A skill's deterministic steps or its sub-agent: `skill:<name>`.
    Skill(&'a str),
    /// The embedding code, calling the registry directly: `host`.
    Host,
}

impl fmt::Display for ToolCaller<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Agent => f.write_str("agent"),
            Self::Skill(skill) => write!(f, "skill:{skill}"),
            Self::Host => f.write_str("host"),
        }
    }
}

/// The `tool_call` span of one call, from the name being asked for to the
/// outcome: fields `tool`, `caller`, `access`, `latency_ms` (the tool's own
/// run), `confirmation` (when a person was asked), `outcome` (`ok` or the
/// error kind) and `refused` (the host did not run it).
///
/// Arguments are logged at debug, in clear only for a read tool; a write
/// tool's as their size and keys. A write tool's error message may quote
/// its arguments, so only its kind is logged.
///
/// When the span is disabled nothing is formatted, allocated or timed.
pub struct ToolCallSpan<'a> {
    span: Span,
    caller: ToolCaller<'a>,
    tool: &'a str,
    access: Option<Access>,
    latency: Option<Duration>,
}

impl<'a> ToolCallSpan<'a> {
    /// Opens the span for a call of `tool` by `caller`.
    pub fn open(caller: ToolCaller<'a>, tool: &'a str) -> Self {
        // Exported, named as OpenTelemetry's GenAI conventions name a tool's.
        let span = tracing::info_span!(
            "tool_call",
            otel.name = %format_args!("execute_tool {tool}"),
            tool,
            caller = %caller,
            access = field::Empty,
            latency_ms = field::Empty,
            confirmation = field::Empty,
            confirmed_by = field::Empty,
            outcome = field::Empty,
            refused = field::Empty,
            otel.status_code = field::Empty,
        );
        Self {
            span,
            caller,
            tool,
            access: None,
            latency: None,
        }
    }

    /// The tool was found: records its access and logs the arguments.
    pub fn resolved(&mut self, spec: &ToolSpec, arguments: &Value) {
        self.access = Some(spec.access);
        self.span.record("access", access_name(spec.access));
        let arguments = LoggedArguments {
            access: spec.access,
            arguments,
        };
        self.span
            .in_scope(|| tracing::debug!(arguments = %arguments, "tool call arguments"));
    }

    /// Records whether the person asked approved the call, and who they
    /// were when their answer said.
    pub fn confirmed(&self, approved: bool, by: Option<&str>) {
        let answer = if approved { "approved" } else { "declined" };
        self.span.record("confirmation", answer);
        if let Some(by) = by {
            self.span.record("confirmed_by", by);
        }
    }

    /// Validates and runs `tool` in `context` inside the span, timing its
    /// run.
    pub async fn execute(
        &mut self,
        tool: &RegisteredTool,
        context: &ToolContext,
        arguments: Value,
    ) -> Result<Value, ToolError> {
        let started = (!self.span.is_disabled()).then(Instant::now);
        let result = tool
            .call(context, arguments)
            .instrument(self.span.clone())
            .await;
        self.latency = started.map(|started| started.elapsed());
        result
    }

    /// Records the outcome and closes the span. A refused or failed call
    /// is also a warning, with the tool and caller, whatever the level.
    pub fn finish(self, result: Result<(), &ToolError>) {
        if let Some(latency) = self.latency {
            self.span.record("latency_ms", latency.as_secs_f64() * 1e3);
        }
        let Err(error) = result else {
            self.span.record("outcome", "ok");
            self.span.record("refused", false);
            return;
        };
        let outcome = error_kind(error);
        let refused = matches!(
            error,
            ToolError::NotPermitted { .. }
                | ToolError::UnknownTool(_)
                | ToolError::InvalidArguments { .. }
        );
        self.span.record("outcome", outcome);
        self.span.record("refused", refused);
        if !refused && !matches!(error, ToolError::Failed(_) | ToolError::LimitExceeded(_)) {
            // Business rejections and declined confirmations are outcomes,
            // not problems of the host.
            return;
        }
        self.span.record("otel.status_code", "error");
        let (tool, caller) = (self.tool, self.caller);
        let message = if refused {
            "tool call refused"
        } else {
            "tool call failed"
        };
        self.span.in_scope(|| match self.access {
            Some(Access::Read) => {
                // A tool's message may quote what the caller sent.
                let error = error.to_string();
                let error = text::escaped(&error, OUTSIDE_TEXT_BYTES);
                tracing::warn!(tool, caller = %caller, refused, outcome, %error, "{message}");
            }
            _ => tracing::warn!(tool, caller = %caller, refused, outcome, "{message}"),
        });
    }
}

/// Tool arguments as the logs show them: in clear for a read tool; for a
/// write tool their size and top-level keys, never their values. Logged
/// before they are validated (a refused call's are what one looks for), so
/// what a caller wrote is escaped and cut at 4 KiB.
struct LoggedArguments<'a> {
    access: Access,
    arguments: &'a Value,
}

impl fmt::Display for LoggedArguments<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut shown = Escaped::new(OUTSIDE_TEXT_BYTES);
        if self.access == Access::Read {
            let _ = write!(shown, "{}", self.arguments);
            return f.write_str(&shown.finish());
        }
        let bytes = self.arguments.to_string().len();
        write!(f, "<redacted: {bytes} bytes")?;
        if let Value::Object(map) = self.arguments {
            for (at, key) in map.keys().enumerate() {
                shown.push(if at == 0 { "; keys: " } else { ", " });
                shown.push(key);
            }
        }
        f.write_str(&shown.finish())?;
        f.write_str(">")
    }
}

fn access_name(access: Access) -> &'static str {
    match access {
        Access::Read => "read",
        Access::Write => "write",
    }
}

/// The error's kind, as the WIT `tool-error-kind` spells it in snake case.
fn error_kind(error: &ToolError) -> &'static str {
    match error {
        ToolError::NotPermitted { .. } => "not_permitted",
        ToolError::UnknownTool(_) => "unknown_tool",
        ToolError::InvalidArguments { .. } => "invalid_arguments",
        ToolError::Rejected(_) => "rejected",
        ToolError::Declined(_) => "declined",
        ToolError::LimitExceeded(_) => "limit_exceeded",
        ToolError::Failed(_) => "failed",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn logged(access: Access, arguments: &Value) -> String {
        LoggedArguments { access, arguments }.to_string()
    }

    #[test]
    fn write_tool_arguments_are_logged_as_their_size_and_keys_only() {
        let arguments = json!({"orderId": "88231", "reason": "private words"});
        assert_eq!(
            logged(Access::Write, &arguments),
            "<redacted: 44 bytes; keys: orderId, reason>"
        );
        assert_eq!(
            logged(Access::Write, &json!("private words")),
            "<redacted: 15 bytes>"
        );
        assert_eq!(
            logged(Access::Read, &arguments),
            r#"{"orderId":"88231","reason":"private words"}"#
        );
    }

    /// Regression: a write tool's argument keys were logged whole and raw at
    /// debug, before the arguments were validated: a key with a line break
    /// wrote a line of the caller's own.
    #[test]
    fn write_tool_argument_keys_are_logged_escaped_and_cut() {
        let key = format!("\nINFO forged line{}", "x".repeat(1 << 20));
        let shown = logged(Access::Write, &json!({ key: 1, "reason": "private words" }));
        assert!(shown.len() < 2 * OUTSIDE_TEXT_BYTES, "{}", shown.len());
        assert!(shown.contains("keys: \\nINFO forged line"), "{shown}");
        assert!(
            !shown.contains('\n') && shown.ends_with(" bytes cut]>"),
            "{shown}"
        );
        assert!(!shown.contains("private words"));
    }

    fn named(name: &str) -> Arc<dyn Tool> {
        test_tools::named(name, Access::Read)
    }

    #[test]
    fn tool_names_must_be_function_names_and_not_the_agents_own() {
        let mut tools = ToolRegistry::new();
        for bad in ["my tool", "", "1st", "a.b", &"x".repeat(65)] {
            assert!(
                matches!(
                    tools.register(named(bad)),
                    Err(RegisterError::InvalidName(_))
                ),
                "`{bad}` accepted"
            );
        }
        assert!(matches!(
            tools.register(named("load_skill")),
            Err(RegisterError::ReservedName(_))
        ));
        tools.register(named("lookup-customer_2")).unwrap();
    }
}

/// Tools for other modules' unit tests.
#[cfg(test)]
pub(crate) mod test_tools {
    use super::*;

    struct Named(ToolSpec);

    #[async_trait::async_trait]
    impl Tool for Named {
        fn spec(&self) -> &ToolSpec {
            &self.0
        }

        async fn invoke(
            &self,
            _context: &ToolContext,
            _arguments: Value,
        ) -> Result<Value, ToolError> {
            Ok(Value::Null)
        }
    }

    /// A tool called `name` that takes any object and answers `null`.
    pub(crate) fn named(name: &str, access: Access) -> Arc<dyn Tool> {
        Arc::new(Named(ToolSpec {
            name: name.into(),
            description: "d".into(),
            parameters: serde_json::json!({"type": "object"}),
            access,
        }))
    }
}
