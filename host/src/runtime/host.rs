//! What a guest can reach: the `host` interface and limits; WASI is in
//! [`super::wasi`].

use std::borrow::Cow;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::Value;
use wasmtime::component::ResourceTable;
use wasmtime::{Engine, ResourceLimiter, Store, UpdateDeadline, WasmBacktrace};
use wasmtime_wasi::{WasiCtxView, WasiView};

use super::EPOCH_TICK;
use super::bindings::skillhost::skill::{host, types};
use super::limits::{Limit, Limits};
use super::wasi::{self, SandboxWasi, WasiSources};
use crate::skills::SkillName;
use crate::text::{self, Escaped, OUTSIDE_TEXT_BYTES};
use crate::tools::{ToolCaller, ToolContext, ToolError, ToolRegistry};

/// Where a skill's permitted tool calls go. The runtime has already checked
/// the call against the manifest; implementations add what the embedding
/// needs (confirmations, tracing) and execute.
#[async_trait]
pub trait ToolDispatch: Send + Sync {
    async fn call_tool(
        &self,
        skill: &SkillName,
        tool: &str,
        arguments: Value,
    ) -> Result<Value, DispatchError>;

    /// Whether the guest is now repeating what an earlier attempt of the
    /// same invocation did (after a [`DispatchError::Suspend`]): its log
    /// lines are dropped meanwhile, since they were logged the first time.
    fn replaying(&self) -> bool {
        false
    }

    /// Where the invocation's WASI randomness and clocks come from, asked
    /// once, when the guest first uses WASI. An invocation that may run again
    /// after a [`DispatchError::Suspend`] returns the same (shared) sources
    /// on every attempt, so that the guest makes the same calls.
    fn wasi_sources(&self) -> WasiSources {
        WasiSources::fresh()
    }
}

#[async_trait]
impl ToolDispatch for ToolRegistry {
    async fn call_tool(
        &self,
        skill: &SkillName,
        tool: &str,
        arguments: Value,
    ) -> Result<Value, DispatchError> {
        let caller = ToolCaller::Skill(skill.as_str());
        Ok(self
            .call_as(caller, &ToolContext::new(), tool, arguments)
            .await?)
    }
}

/// Why a [`ToolDispatch`] gave a call no result.
#[derive(Debug)]
#[non_exhaustive]
pub enum DispatchError {
    /// The call failed; the guest is told why.
    Tool(ToolError),
    /// The call waits for something slow, such as a person's approval. The
    /// invocation ends as [`InvokeError::Suspended`] instead of holding its
    /// instance (and pool slot) meanwhile; the caller gets the call's answer
    /// outside the sandbox and runs the steps again.
    Suspend,
}

impl From<ToolError> for DispatchError {
    fn from(error: ToolError) -> Self {
        Self::Tool(error)
    }
}

/// How deterministic steps ended.
#[derive(Debug, Clone, PartialEq)]
pub enum RunOutcome {
    /// The final result.
    Done(Value),
    /// Continue on the LLM-driven path; the note says what is left.
    Handover(String),
}

/// One tool call a guest made, whether or not it was executed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCallRecord {
    pub tool: String,
    /// What the guest was told when the call failed, escaped and cut at
    /// 4 KiB (it may quote the guest's arguments); `None` on success.
    pub error: Option<String>,
}

/// The outcome of one invocation and what happened on the way.
#[derive(Debug, Clone)]
pub struct RunReport {
    pub outcome: RunOutcome,
    pub tool_calls: Vec<ToolCallRecord>,
    pub elapsed: Duration,
}

/// Why an invocation failed. The host is unaffected in every case.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InvokeError {
    #[error("skill `{skill}` hit its {limit} limit: {detail}")]
    LimitExceeded {
        skill: SkillName,
        limit: Limit,
        detail: String,
    },
    #[error("input for skill `{skill}` is invalid: {message}")]
    InvalidInput { skill: SkillName, message: String },
    #[error("skill `{skill}` has no deterministic steps")]
    NoSteps { skill: SkillName },
    #[error("skill `{skill}` reported an error: {message}")]
    Failed { skill: SkillName, message: String },
    #[error("skill `{skill}` returned a result that is not JSON: {message}")]
    MalformedResult { skill: SkillName, message: String },
    /// `message` says why: the trap (`wasm trap: wasm `unreachable`
    /// instruction executed`), and the last line the guest logged at error
    /// level before it, where a Rust guest's panic hook puts the panic (or,
    /// if it logged none, the last lines it wrote to stderr, where a guest
    /// built without the SDK puts its panic or uncaught exception).
    /// `backtrace` is wasmtime's, whose frames name functions the guest
    /// chose (escaped): for the log, not for the caller or a model.
    #[error("skill `{skill}` trapped: {message}")]
    Trap {
        skill: SkillName,
        message: String,
        backtrace: Option<String>,
    },
    /// The dispatcher suspended the invocation at a call of `tool`
    /// ([`DispatchError::Suspend`]); not a failure.
    #[error(
        "skill `{skill}` was suspended at its call of `{tool}`, which waits outside the sandbox"
    )]
    Suspended { skill: SkillName, tool: String },
}

/// Per-invocation state: the `T` of each `Store`.
pub struct HostState {
    skill: SkillName,
    /// The manifest's `tools`: the only names `call-tool` will dispatch.
    allowed_tools: Arc<[String]>,
    dispatch: Arc<dyn ToolDispatch>,
    limits: Limits,
    guest_clock: Arc<GuestClock>,
    memory_bytes: usize,
    log_lines: u32,
    /// The last line the guest logged at error level, escaped and cut:
    /// told with a trap, since it is usually the reason (a panic's message).
    last_error: Option<String>,
    /// The last lines the guest wrote to stderr, escaped and cut: told with
    /// a trap when it logged no error, since a guest built without the SDK
    /// writes its reason there (a wasm32-wasip2 program's panic message, an
    /// interpreter's uncaught exception) and then traps.
    stderr_tail: Option<String>,
    /// The limit that ended the invocation, if one did.
    limit_hit: Option<(Limit, String)>,
    /// The tool whose call suspended the invocation, if one did.
    suspended_at: Option<String>,
    tool_calls: Vec<ToolCallRecord>,
    wasi: Option<SandboxWasi>,
    table: ResourceTable,
}

/// What one call from the guest may copy to the host beyond the output
/// limit: a tool's name and the canonical ABI's framing.
const HOSTCALL_SLACK_BYTES: usize = 64 << 10;
/// The longest tool name (the function-name rule's); a longer name a guest
/// asks for is kept clipped, as no tool can have it.
const TOOL_NAME_BYTES: usize = 64;
/// The most of the end of stderr told with a trap, in whole lines: a Rust
/// panic's message or a Python traceback's innermost frames are a few
/// hundred bytes.
const STDERR_TAIL_BYTES: usize = 1 << 10;
/// Table elements a guest may grow to: a pointer each, so 8 MiB at most.
const TABLE_ELEMENTS: usize = 1 << 20;

impl HostState {
    pub(super) fn new(
        skill: SkillName,
        allowed_tools: Arc<[String]>,
        dispatch: Arc<dyn ToolDispatch>,
        limits: Limits,
    ) -> Self {
        Self {
            skill,
            allowed_tools,
            dispatch,
            limits,
            guest_clock: Arc::new(GuestClock::start()),
            memory_bytes: 0,
            log_lines: 0,
            last_error: None,
            stderr_tail: None,
            limit_hit: None,
            suspended_at: None,
            tool_calls: Vec::new(),
            wasi: None,
            table: wasi::resource_table(),
        }
    }

    pub(super) fn take_tool_calls(&mut self) -> Vec<ToolCallRecord> {
        std::mem::take(&mut self.tool_calls)
    }

    /// Whether the guest has asked for no tool call yet: nothing it did
    /// reached outside its store.
    pub(super) fn called_no_tool(&self) -> bool {
        self.tool_calls.is_empty() && self.suspended_at.is_none()
    }

    /// Records that `limit` ended the invocation and returns the trap.
    fn hit(&mut self, limit: Limit, detail: String) -> wasmtime::Error {
        let error = wasmtime::format_err!("{limit} limit exceeded: {detail}");
        self.limit_hit.get_or_insert((limit, detail));
        error
    }

    pub(super) fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Bytes of linear memory the guest has, all its memories together.
    pub(super) fn memory_bytes(&self) -> usize {
        self.memory_bytes
    }

    /// The invocation's guest time, for a watchdog beside the store.
    pub(super) fn guest_clock(&self) -> Arc<GuestClock> {
        self.guest_clock.clone()
    }

    /// Ends the invocation for its execution-time limit; `used` is the guest
    /// time it ran.
    pub(super) fn out_of_time(&mut self, used: Duration) -> wasmtime::Error {
        let detail = format!(
            "ran for {} ms, more than {} ms allowed",
            used.as_millis(),
            self.limits.execution_time.as_millis()
        );
        self.hit(Limit::ExecutionTime, detail)
    }

    /// Turns a trap into the error the caller sees: a suspension or a limit
    /// when the host ended the invocation for one, a trap otherwise.
    pub(super) fn classify_trap(&mut self, error: &wasmtime::Error) -> InvokeError {
        let skill = self.skill.clone();
        if let Some(tool) = self.suspended_at.take() {
            return InvokeError::Suspended { skill, tool };
        }
        match self.limit_hit.take() {
            Some((limit, detail)) => InvokeError::LimitExceeded {
                skill,
                limit,
                detail,
            },
            // wasmtime's own bound on what one call copies from the guest
            // (its error type is private, so known by its text). The root
            // cause is wasmtime's: the causes around it include the
            // backtrace, whose function names the guest chose.
            None if error
                .root_cause()
                .to_string()
                .contains("fuel allocated for hostcalls") =>
            {
                InvokeError::LimitExceeded {
                    skill,
                    limit: Limit::Output,
                    detail: format!(
                        "copied more than {} bytes to the host in one call",
                        hostcall_fuel(&self.limits)
                    ),
                }
            }
            None => {
                // The backtrace names functions the guest chose: written
                // through the cut, so never held whole.
                let backtrace = error.downcast_ref::<WasmBacktrace>().map(|backtrace| {
                    let mut escaped = Escaped::new(OUTSIDE_TEXT_BYTES);
                    let _ = write!(escaped, "{backtrace}");
                    escaped.finish()
                });
                // The causes but the backtrace, which wasmtime adds as the
                // outermost context.
                let mut message = Escaped::new(OUTSIDE_TEXT_BYTES);
                let causes = error.chain().skip(usize::from(backtrace.is_some()));
                for (at, cause) in causes.enumerate() {
                    if at > 0 {
                        message.push(": ");
                    }
                    let _ = write!(message, "{cause}");
                }
                if let Some(said) = self.last_error.take() {
                    message.push("; the last error it logged: ");
                    message.push(&said);
                } else if let Some(wrote) = self.stderr_tail.take() {
                    message.push("; the last it wrote to stderr: ");
                    message.push(&wrote);
                }
                InvokeError::Trap {
                    skill,
                    message: message.finish(),
                    backtrace,
                }
            }
        }
    }

    pub(super) fn output_too_large(&self, len: usize) -> Option<InvokeError> {
        (len > self.limits.output_bytes).then(|| InvokeError::LimitExceeded {
            skill: self.skill.clone(),
            limit: Limit::Output,
            detail: format!(
                "returned {len} bytes, more than {} allowed",
                self.limits.output_bytes
            ),
        })
    }

    fn log_line(&mut self, level: types::LogLevel, message: &str) {
        self.log_lines += 1;
        if self.log_lines > self.limits.log_lines {
            if self.log_lines == self.limits.log_lines + 1 {
                tracing::warn!(skill = %self.skill, "log line limit reached; further lines dropped");
            }
            return;
        }
        let message = text::escaped(message, OUTSIDE_TEXT_BYTES).into_owned();
        let skill = self.skill.as_str();
        match level {
            types::LogLevel::Trace => tracing::trace!(target: "skill", skill, "{message}"),
            types::LogLevel::Debug => tracing::debug!(target: "skill", skill, "{message}"),
            types::LogLevel::Info => tracing::info!(target: "skill", skill, "{message}"),
            types::LogLevel::Warn => tracing::warn!(target: "skill", skill, "{message}"),
            types::LogLevel::Error => tracing::error!(target: "skill", skill, "{message}"),
        }
    }

    /// Moves what the guest wrote to stdout and stderr into the log, with
    /// one notice for a stream written past what is captured of it. A
    /// suspended invocation's is dropped: the next attempt runs from the
    /// start and writes it again.
    pub(super) fn flush_captured_output(&mut self) {
        let Some(wasi) = self.wasi.take() else { return };
        if self.suspended_at.is_some() {
            return;
        }
        for (stream, level, output) in [
            ("stdout", types::LogLevel::Info, &wasi.stdout),
            ("stderr", types::LogLevel::Warn, &wasi.stderr),
        ] {
            let captured = output.take();
            let written = String::from_utf8_lossy(&captured.kept);
            if stream == "stderr" {
                self.stderr_tail = text::last_lines(&written, STDERR_TAIL_BYTES)
                    .map(|tail| text::escaped(tail, OUTSIDE_TEXT_BYTES).into_owned());
            }
            for line in written.lines() {
                self.log_line(level, line);
            }
            if captured.dropped > 0 {
                tracing::warn!(
                    skill = %self.skill, stream, kept_bytes = captured.kept.len(),
                    dropped_bytes = captured.dropped, "output truncated"
                );
            }
        }
    }

    async fn dispatch_tool(
        &mut self,
        name: String,
        arguments: String,
    ) -> wasmtime::Result<Result<String, types::ToolError>> {
        // Kept in records, logs and messages: never longer than a tool's,
        // and making no lines of its own. A tool's name is left as it is,
        // so the check against the manifest is unchanged.
        let name = match text::escaped(&name, TOOL_NAME_BYTES) {
            Cow::Borrowed(_) => name,
            shown => shown.into_owned(),
        };
        let calls_made = self.tool_calls.len() as u32;
        if calls_made > self.limits.tool_calls {
            return Err(self.hit(
                Limit::ToolCalls,
                format!("more than {} tool calls", self.limits.tool_calls),
            ));
        }
        let result = if calls_made == self.limits.tool_calls {
            Err(ToolError::LimitExceeded(format!(
                "this invocation may make at most {} tool calls",
                self.limits.tool_calls
            )))
        } else {
            match self.execute_tool(&name, &arguments).await {
                Ok(result) => Ok(result),
                Err(DispatchError::Tool(error)) => Err(error),
                Err(DispatchError::Suspend) => {
                    let trap = wasmtime::format_err!("suspended at a call of `{name}`");
                    self.suspended_at = Some(name);
                    return Err(trap);
                }
            }
        };
        self.tool_calls.push(ToolCallRecord {
            tool: name,
            error: result
                .as_ref()
                .err()
                .map(|error| text::escaped(&error.to_string(), OUTSIDE_TEXT_BYTES).into_owned()),
        });
        Ok(result.map_err(|error| types::ToolError {
            kind: tool_error_kind(&error),
            message: error.to_string(),
        }))
    }

    async fn execute_tool(&mut self, name: &str, arguments: &str) -> Result<String, DispatchError> {
        if !self.allowed_tools.iter().any(|tool| tool == name) {
            let caller = ToolCaller::Skill(self.skill.as_str());
            tracing::warn!(
                skill = %self.skill, tool = name, caller = %caller, refused = true,
                outcome = "not_permitted", "tool call refused: not declared in the skill's manifest"
            );
            return Err(ToolError::NotPermitted {
                tool: name.to_owned(),
                reason: format!(
                    "skill `{}` does not declare it in its manifest's tools",
                    self.skill
                ),
            }
            .into());
        }
        if arguments.len() > self.limits.output_bytes {
            return Err(ToolError::InvalidArguments {
                tool: name.to_owned(),
                message: format!(
                    "arguments are {} bytes, more than {} allowed",
                    arguments.len(),
                    self.limits.output_bytes
                ),
            }
            .into());
        }
        let arguments: Value =
            serde_json::from_str(arguments).map_err(|e| ToolError::InvalidArguments {
                tool: name.to_owned(),
                message: format!("arguments are not valid JSON: {e}"),
            })?;
        let _in_tool = self.guest_clock.in_tool();
        let result = self.dispatch.call_tool(&self.skill, name, arguments).await;
        result.map(|value| json_text(&value))
    }
}

/// `value` as compact JSON text. `serde_json::to_string` writes straight into
/// a buffer, where `Value`'s `Display` goes through `core::fmt` piece by
/// piece: this is on the hot path of every invocation and tool call.
pub(super) fn json_text(value: &Value) -> String {
    serde_json::to_string(value).expect("a JSON value always serializes")
}

fn tool_error_kind(error: &ToolError) -> types::ToolErrorKind {
    use types::ToolErrorKind as Kind;
    match error {
        ToolError::NotPermitted { .. } => Kind::NotPermitted,
        ToolError::UnknownTool(_) => Kind::UnknownTool,
        ToolError::InvalidArguments { .. } => Kind::InvalidArguments,
        ToolError::Rejected(_) => Kind::Rejected,
        ToolError::Declined(_) => Kind::Declined,
        ToolError::LimitExceeded(_) => Kind::LimitExceeded,
        ToolError::Failed(_) => Kind::Failed,
    }
}

/// The most one call from the guest may copy to the host: the output limit
/// and some slack.
fn hostcall_fuel(limits: &Limits) -> usize {
    limits.output_bytes.saturating_add(HOSTCALL_SLACK_BYTES)
}

impl host::Host for HostState {
    async fn call_tool(
        &mut self,
        name: String,
        arguments: String,
    ) -> wasmtime::Result<Result<String, types::ToolError>> {
        self.dispatch_tool(name, arguments).await
    }

    async fn log(&mut self, level: types::LogLevel, message: String) -> wasmtime::Result<()> {
        if matches!(level, types::LogLevel::Error) {
            self.last_error = Some(text::escaped(&message, OUTSIDE_TEXT_BYTES).into_owned());
        }
        if !self.dispatch.replaying() {
            self.log_line(level, &message);
        }
        Ok(())
    }
}

impl types::Host for HostState {}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        let wasi = self
            .wasi
            .get_or_insert_with(|| SandboxWasi::new(&self.dispatch.wasi_sources()));
        WasiCtxView {
            ctx: &mut wasi.ctx,
            table: &mut self.table,
        }
    }
}

impl ResourceLimiter for HostState {
    /// Counts a growth before wasmtime makes it. wasmtime says nothing when
    /// one succeeds, and `memory_grow_failed` does not say which failed (it
    /// is also called for growths never passed here), so a rollback there
    /// could count too little. Instead a growth wasmtime is sure to refuse,
    /// past the memory's own maximum, is refused here uncounted. One failing
    /// later (the system out of memory) stays counted: that errs on the side
    /// of the limit.
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if maximum.is_some_and(|maximum| desired > maximum) {
            return Ok(false);
        }
        // Called with `current == 0` when a memory is created, so the sum of
        // deltas is the guest's total across all its memories.
        let total = self.memory_bytes + (desired - current);
        if total > self.limits.memory_bytes {
            let detail = format!(
                "tried to grow linear memory to {total} bytes, more than {} allowed",
                self.limits.memory_bytes
            );
            return Err(self.hit(Limit::Memory, detail));
        }
        self.memory_bytes = total;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= TABLE_ELEMENTS)
    }
}

/// An invocation's guest time: wall time since it started, minus the time
/// inside tool calls (which the execution-time limit does not count). Shared
/// by the store's epoch callback and [`out_of_guest_time`].
#[derive(Debug)]
pub(super) struct GuestClock {
    started: Instant,
    tools: Mutex<ToolTime>,
}

#[derive(Debug, Default)]
struct ToolTime {
    finished: Duration,
    /// When the tool call under way began.
    current: Option<Instant>,
}

impl GuestClock {
    fn start() -> Self {
        Self {
            started: Instant::now(),
            tools: Mutex::default(),
        }
    }

    pub(super) fn used(&self) -> Duration {
        let tools = self.tools();
        let in_tools = tools.finished + tools.current.map_or(Duration::ZERO, |t| t.elapsed());
        self.started.elapsed().saturating_sub(in_tools)
    }

    /// Stops guest time until the returned guard is dropped (the call
    /// returns, or the invocation is dropped in the middle of it).
    fn in_tool(&self) -> impl Drop + '_ {
        struct InTool<'a>(&'a GuestClock);
        impl Drop for InTool<'_> {
            fn drop(&mut self) {
                let mut tools = self.0.tools();
                if let Some(began) = tools.current.take() {
                    tools.finished += began.elapsed();
                }
            }
        }
        self.tools().current = Some(Instant::now());
        InTool(self)
    }

    fn tools(&self) -> MutexGuard<'_, ToolTime> {
        self.tools.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Returns once `clock` has run `limit`. The epoch callback stops a guest
/// running wasm, but none runs while a guest waits inside WASI (a sleep on
/// a clock pollable): racing the invocation with this stops it there too.
/// Re-armed while the invocation is in a tool call, whose time is not the
/// guest's; never more often than the epoch ticks, so a guest with little
/// time left that calls a slow tool does not wake it every millisecond.
pub(super) async fn out_of_guest_time(clock: &GuestClock, limit: Duration) -> Duration {
    loop {
        let used = clock.used();
        match limit.checked_sub(used) {
            Some(left) if !left.is_zero() => tokio::time::sleep(left.max(EPOCH_TICK)).await,
            _ => return used,
        }
    }
}

/// A fresh store for one invocation, with its limits armed: the memory
/// limiter, and the execution-time limit — the epoch callback runs every tick
/// and ends the invocation once guest time (wall time minus time in tools)
/// exceeds the limit; otherwise it yields to the async executor so a busy
/// guest never starves other tasks on its thread.
pub(super) fn sandboxed_store(engine: &Engine, state: HostState) -> Store<HostState> {
    let fuel = hostcall_fuel(&state.limits);
    let mut store = Store::new(engine, state);
    store.limiter(|state| state);
    // Bounds what the host copies of one call's strings (a tool's name, a
    // log line) before it looks at them.
    store.set_hostcall_fuel(fuel);
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(|mut store| {
        let state = store.data_mut();
        let used = state.guest_clock.used();
        if used >= state.limits.execution_time {
            state.out_of_time(used);
            return Ok(UpdateDeadline::Interrupt);
        }
        Ok(UpdateDeadline::Yield(1))
    });
    store
}
