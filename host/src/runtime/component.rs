//! A compiled skill, ready to instantiate: manifest read, `InstancePre` cached.

use std::borrow::Borrow;
use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;
use sha2::{Digest, Sha256};
use tracing::{Instrument, Span, field};
use wasmtime::component::Component;
use wasmtime::{PoolConcurrencyLimitError, Store};

use super::Runtime;
use super::bindings::{Skill, SkillPre, skillhost::skill::types};
use super::host::{
    HostState, InvokeError, RunOutcome, RunReport, ToolDispatch, json_text, out_of_guest_time,
    sandboxed_store,
};
use super::limits::{Limits, mib};
use crate::blocking::{off_executor, panic_message};
use crate::skills::manifest::RawManifest;
use crate::skills::{Manifest, ManifestError, SkillName};
use crate::tools::ToolRegistry;

/// Why a component could not be loaded as a skill.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    #[error("not a valid WebAssembly component: {0}")]
    Compile(String),
    /// The component's memories start larger than the sandbox lets an
    /// invocation of it have ([`Limits::memory_bytes`]): than any skill may
    /// have, refused when compiled; than this skill may have
    /// ([`Runtime::limits_for`]), once its manifest names it.
    #[error(
        "the component's memory starts at {}, more than the {} the sandbox allows an \
         invocation (its memory limit)",
        mib(*needs), mib(*allowed as u64)
    )]
    MemoryLimit { needs: u64, allowed: usize },
    #[error("component does not fit the skill world: {0}")]
    Link(String),
    #[error("reading the manifest failed: {0}")]
    Describe(String),
    #[error("invalid manifest: {0}")]
    Manifest(#[from] ManifestError),
    #[error("instructions-only skill `{0}` has empty instructions")]
    EmptyInstructions(SkillName),
}

/// One loaded version of a skill. Cloning is cheap; invocations share the
/// compiled code and each get their own `Store`.
#[derive(Clone)]
pub struct SkillComponent {
    inner: Arc<SkillInner>,
}

struct SkillInner {
    manifest: Manifest,
    instructions: String,
    /// `sha256:<hex>` of the component's bytes as loaded.
    digest: String,
    input_validator: jsonschema::Validator,
    allowed_tools: Arc<[String]>,
    pre: SkillPre<HostState>,
    /// Whether the guest can wait inside WASI, where the epoch deadline
    /// cannot stop it (see [`within_guest_time`]).
    imports_wasi: bool,
    runtime: Runtime,
}

/// `sha256:<hex>` of `bytes`: how skills are identified across the host.
pub fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

impl SkillComponent {
    /// Hashes and compiles `bytes` (off the async executor), links the
    /// component against the host, reads its manifest and instructions in a
    /// sandboxed instance, and checks the manifest against `tools`.
    ///
    /// It checks no signature: verify `bytes` first
    /// ([`SignaturePolicy::check`](crate::skills::signature::SignaturePolicy::check)),
    /// as the skill registry does, unless they come from where you trust.
    pub async fn load(
        runtime: &Runtime,
        bytes: Vec<u8>,
        tools: &ToolRegistry,
    ) -> Result<Self, LoadError> {
        Self::load_with(runtime, bytes, |_| tools).await
    }

    /// Links a component already compiled (by [`compile`], or from the
    /// compilation cache) whose bytes' digest ([`digest_of`]) the caller
    /// knows: a caller that hashed the bytes already does not hash them
    /// again.
    pub async fn from_component(
        runtime: &Runtime,
        component: &Component,
        digest: String,
        tools: &ToolRegistry,
    ) -> Result<Self, LoadError> {
        Self::from_component_with(runtime, component, digest, |_| tools).await
    }

    /// Like [`Self::load`], for a component whose tools are not known yet
    /// (`skillhost pack` checks a skill before any host loads it): its
    /// manifest is resolved against the tools `tools_for` gives for it,
    /// such as stand-ins for those it names.
    pub async fn load_with<T: Borrow<ToolRegistry>>(
        runtime: &Runtime,
        bytes: Vec<u8>,
        tools_for: impl FnOnce(&RawManifest) -> T,
    ) -> Result<Self, LoadError> {
        let compile = compiler(runtime);
        let (digest, component) =
            compile_off_executor(move || Ok((digest_of(&bytes), compile(&bytes)?))).await?;
        Self::from_component_with(runtime, &component, digest, tools_for).await
    }

    async fn from_component_with<T: Borrow<ToolRegistry>>(
        runtime: &Runtime,
        component: &Component,
        digest: String,
        tools_for: impl FnOnce(&RawManifest) -> T,
    ) -> Result<Self, LoadError> {
        let instance_pre = runtime
            .linker()
            .instantiate_pre(component)
            .map_err(|e| LoadError::Link(format!("{e:#}")))?;
        let pre = SkillPre::new(instance_pre).map_err(|e| LoadError::Link(format!("{e:#}")))?;
        let imports_wasi = component
            .component_type()
            .imports(runtime.engine())
            .any(|(name, _)| name.starts_with("wasi:"));
        let description = describe(runtime, &pre, imports_wasi).await?;
        let tools = tools_for(&description.manifest);
        let (manifest, input_validator) = Manifest::resolve(description.manifest, tools.borrow())?;
        let instructions = description.instructions;
        if !manifest.has_steps && instructions.trim().is_empty() {
            return Err(LoadError::EmptyInstructions(manifest.name));
        }
        let limits = runtime.limits_for(&manifest.name);
        if description.initial_memory > limits.memory_bytes {
            return Err(LoadError::MemoryLimit {
                needs: description.initial_memory as u64,
                allowed: limits.memory_bytes,
            });
        }
        let allowed_tools = manifest.tools.clone().into();
        Ok(Self {
            inner: Arc::new(SkillInner {
                manifest,
                instructions,
                digest,
                input_validator,
                allowed_tools,
                pre,
                imports_wasi,
                runtime: runtime.clone(),
            }),
        })
    }

    pub fn manifest(&self) -> &Manifest {
        &self.inner.manifest
    }

    pub fn name(&self) -> &SkillName {
        &self.inner.manifest.name
    }

    pub fn instructions(&self) -> &str {
        &self.inner.instructions
    }

    pub fn digest(&self) -> &str {
        &self.inner.digest
    }

    /// The limits of each invocation of this skill starting now
    /// ([`Runtime::limits_for`] its name).
    pub fn limits(&self) -> Limits {
        self.inner.runtime.limits_for(self.name())
    }

    /// Checks `input` against the manifest's parameters schema.
    pub fn validate_input(&self, input: &Value) -> Result<(), InvokeError> {
        crate::schema::check(&self.inner.input_validator, input).map_err(|message| {
            InvokeError::InvalidInput {
                skill: self.name().clone(),
                message,
            }
        })
    }

    /// Runs the skill's deterministic steps on `input` in a fresh store with
    /// its limits ([`Self::limits`]).
    pub async fn run(
        &self,
        input: &Value,
        dispatch: Arc<dyn ToolDispatch>,
    ) -> Result<RunReport, InvokeError> {
        self.run_with_limits(input, dispatch, self.limits()).await
    }

    /// Like [`Self::run`], with explicit limits.
    ///
    /// Runs in a `skill_invocation` span: `skill`, `version`, `digest`, then
    /// `outcome` (`done`, `handover` or the error's kind), `limit` (the one
    /// hit, if any) and `duration_ms`. A trap or a limit hit is also a
    /// warning.
    pub async fn run_with_limits(
        &self,
        input: &Value,
        dispatch: Arc<dyn ToolDispatch>,
        limits: Limits,
    ) -> Result<RunReport, InvokeError> {
        self.traced(async {
            self.ensure_steps()?;
            self.validate_input(input)?;
            self.invoke(input, dispatch, limits).await
        })
        .await
    }

    /// Like [`Self::run`], on an input the caller has checked with
    /// [`Self::validate_input`] already: the agent refuses an invalid input
    /// before it starts a run, then may run the steps several times (once
    /// more after each approval).
    pub(crate) async fn run_validated(
        &self,
        input: &Value,
        dispatch: Arc<dyn ToolDispatch>,
    ) -> Result<RunReport, InvokeError> {
        let limits = self.limits();
        self.traced(async {
            self.ensure_steps()?;
            self.invoke(input, dispatch, limits).await
        })
        .await
    }

    fn ensure_steps(&self) -> Result<(), InvokeError> {
        if self.manifest().has_steps {
            Ok(())
        } else {
            Err(InvokeError::NoSteps {
                skill: self.name().clone(),
            })
        }
    }

    /// Runs `invocation` in this skill's `skill_invocation` span (see
    /// [`Self::run_with_limits`]) and records how it ended.
    async fn traced(
        &self,
        invocation: impl Future<Output = Result<RunReport, InvokeError>>,
    ) -> Result<RunReport, InvokeError> {
        let manifest = self.manifest();
        let span = tracing::info_span!(
            "skill_invocation",
            skill = %manifest.name,
            version = %manifest.version,
            digest = self.digest(),
            outcome = field::Empty,
            limit = field::Empty,
            duration_ms = field::Empty,
            otel.status_code = field::Empty,
        );
        // Not even the clock is read when the span is disabled.
        let started = (!span.is_disabled()).then(Instant::now);
        let result = invocation.instrument(span.clone()).await;
        if let Some(started) = started {
            span.record("duration_ms", started.elapsed().as_secs_f64() * 1e3);
        }
        span.in_scope(|| record_outcome(&span, &result));
        result
    }

    /// Instantiates the skill in a fresh sandboxed store and drops it,
    /// calling nothing: the fixed cost of every invocation, which the invoke
    /// benchmark measures as its floor. Not for serving.
    #[doc(hidden)]
    pub async fn instantiate_only(&self) -> Result<(), InvokeError> {
        let runtime = &self.inner.runtime;
        let limits = self.limits();
        let _slot = runtime.instance_slot().await;
        let (mut store, instance) =
            instantiate_in_pool(runtime, &self.inner.pre, self.inner.imports_wasi, || {
                self.store(Arc::new(ToolRegistry::new()), limits)
            })
            .await;
        match instance {
            Ok(_) => Ok(()),
            Err(trap) => Err(store.data_mut().classify_trap(&trap)),
        }
    }

    /// A fresh sandboxed store for one instance of this skill.
    fn store(&self, dispatch: Arc<dyn ToolDispatch>, limits: Limits) -> Store<HostState> {
        let state = HostState::new(
            self.name().clone(),
            self.inner.allowed_tools.clone(),
            dispatch,
            limits,
        );
        sandboxed_store(self.inner.runtime.engine(), state)
    }

    /// The invocation itself, of a skill with steps on a valid input.
    async fn invoke(
        &self,
        input: &Value,
        dispatch: Arc<dyn ToolDispatch>,
        limits: Limits,
    ) -> Result<RunReport, InvokeError> {
        let skill = self.name().clone();
        let runtime = &self.inner.runtime;
        // Declared before the store, so dropped after it.
        let _slot = runtime.instance_slot().await;
        let started = Instant::now();
        let input = json_text(input);
        let imports_wasi = self.inner.imports_wasi;
        let (mut store, instance) =
            instantiate_in_pool(runtime, &self.inner.pre, imports_wasi, || {
                self.store(dispatch.clone(), limits)
            })
            .await;
        let result = match instance {
            Ok(instance) => {
                within_guest_time(&mut store, imports_wasi, async |store| {
                    instance.call_run(store, &input).await
                })
                .await
            }
            Err(trap) => Err(trap),
        };
        let state = store.data_mut();
        state.flush_captured_output();
        let outcome = match result {
            Err(trap) => return Err(state.classify_trap(&trap)),
            Ok(Err(message)) => {
                return Err(state
                    .output_too_large(message.len())
                    .unwrap_or(InvokeError::Failed { skill, message }));
            }
            Ok(Ok(outcome)) => outcome,
        };
        let outcome = match outcome {
            types::RunOutcome::Done(text) => {
                if let Some(error) = state.output_too_large(text.len()) {
                    return Err(error);
                }
                let value =
                    serde_json::from_str(&text).map_err(|e| InvokeError::MalformedResult {
                        skill,
                        message: e.to_string(),
                    })?;
                RunOutcome::Done(value)
            }
            types::RunOutcome::Handover(note) => {
                if let Some(error) = state.output_too_large(note.len()) {
                    return Err(error);
                }
                RunOutcome::Handover(note)
            }
        };
        Ok(RunReport {
            outcome,
            tool_calls: state.take_tool_calls(),
            elapsed: started.elapsed(),
        })
    }
}

/// Records how an invocation ended on its span; warns on a trap or a limit.
fn record_outcome(span: &Span, result: &Result<RunReport, InvokeError>) {
    let error = match result {
        Ok(report) => {
            let outcome = match report.outcome {
                RunOutcome::Done(_) => "done",
                RunOutcome::Handover(_) => "handover",
            };
            span.record("outcome", outcome);
            return;
        }
        Err(error) => error,
    };
    let outcome = match error {
        InvokeError::LimitExceeded { .. } => "limit_exceeded",
        InvokeError::InvalidInput { .. } => "invalid_input",
        InvokeError::NoSteps { .. } => "no_steps",
        InvokeError::Failed { .. } => "failed",
        InvokeError::MalformedResult { .. } => "malformed_result",
        InvokeError::Trap { .. } => "trap",
        InvokeError::Suspended { .. } => "suspended",
    };
    span.record("outcome", outcome);
    // Waiting for a person's answer is how a write goes, not a failure.
    if !matches!(error, InvokeError::Suspended { .. }) {
        span.record("otel.status_code", "error");
    }
    match error {
        InvokeError::LimitExceeded { limit, .. } => {
            span.record("limit", field::display(limit));
            tracing::warn!(%error, "skill invocation hit a limit");
        }
        InvokeError::Trap { backtrace, .. } => {
            let backtrace = backtrace.as_deref().unwrap_or("none");
            tracing::warn!(%error, %backtrace, "skill invocation trapped");
        }
        // The other errors' messages may quote the input or the guest's
        // own text; the outcome says enough.
        _ => {}
    }
}

/// Compiles `bytes` into a component off the async executor.
pub async fn compile(runtime: &Runtime, bytes: Vec<u8>) -> Result<Component, LoadError> {
    let compile = compiler(runtime);
    compile_off_executor(move || compile(&bytes)).await
}

/// Compiles bytes for `runtime`'s engine, blocking the calling thread.
fn compiler(runtime: &Runtime) -> impl Fn(&[u8]) -> Result<Component, LoadError> + Send + 'static {
    let engine = runtime.engine().clone();
    let memory_limit = runtime.config().widest_limits().memory_bytes;
    move |bytes| {
        Component::new(&engine, bytes).map_err(|error| {
            // wasmtime refuses a memory larger than the pool's slots as a
            // compile error, in its allocator's terms; say it in ours.
            match largest_initial_memory(bytes) {
                Some(needs) if needs > memory_limit as u64 => LoadError::MemoryLimit {
                    needs,
                    allowed: memory_limit,
                },
                _ => LoadError::Compile(format!("{error:#}")),
            }
        })
    }
}

/// Runs `work` (a compile, with the hash of the bytes for `load`) on the
/// blocking thread pool; should it panic, that is a compile error.
async fn compile_off_executor<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, LoadError> + Send + 'static,
) -> Result<T, LoadError> {
    off_executor(work).await.map_err(|panic| {
        LoadError::Compile(format!("the compiler panicked: {}", panic_message(&panic)))
    })?
}

/// The initial size in bytes of the largest memory any core module of the
/// component declares; `None` when it declares none or cannot be parsed.
fn largest_initial_memory(bytes: &[u8]) -> Option<u64> {
    let mut largest = None;
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        let Ok(wasmparser::Payload::MemorySection(memories)) = payload else {
            continue;
        };
        for memory in memories.into_iter().flatten() {
            let page = 1u64 << memory.page_size_log2.unwrap_or(16);
            largest = largest.max(Some(memory.initial.saturating_mul(page)));
        }
    }
    largest
}

/// Instantiates `pre` in a fresh store from `new_store` and returns that
/// store with the instance. The pool's totals of core instances, memories
/// and tables are shared by all instances (see
/// [`RuntimeConfig::max_concurrent_instances`]): when other instances hold
/// what this one needs, instantiation fails before the guest could reach
/// outside its store. The store is then dropped and instantiation tried
/// again on a new one when another instance has ended.
///
/// [`RuntimeConfig::max_concurrent_instances`]: super::RuntimeConfig::max_concurrent_instances
async fn instantiate_in_pool(
    runtime: &Runtime,
    pre: &SkillPre<HostState>,
    imports_wasi: bool,
    mut new_store: impl FnMut() -> Store<HostState>,
) -> (Store<HostState>, wasmtime::Result<Skill>) {
    loop {
        // Taken before the attempt, so that an instance ending during it
        // is not missed.
        let released = runtime.slot_released();
        let mut store = new_store();
        let instance = within_guest_time(&mut store, imports_wasi, async |store| {
            pre.instantiate_async(store).await
        })
        .await;
        match &instance {
            Err(error)
                if error.is::<PoolConcurrencyLimitError>() && store.data().called_no_tool() =>
            {
                drop(store);
                runtime.wait_for_room(released).await;
            }
            _ => return (store, instance),
        }
    }
}

/// Runs `call` on `store`. For a guest that imports WASI (`imports_wasi`),
/// which can wait inside a WASI call where no wasm runs for the epoch
/// callback to stop it, the call races the execution-time limit on the
/// store's guest clock and is dropped when it is reached.
async fn within_guest_time<T>(
    store: &mut Store<HostState>,
    imports_wasi: bool,
    call: impl AsyncFnOnce(&mut Store<HostState>) -> wasmtime::Result<T>,
) -> wasmtime::Result<T> {
    if !imports_wasi {
        return call(store).await;
    }
    let clock = store.data().guest_clock();
    let limit = store.data().limits().execution_time;
    let used = tokio::select! {
        biased;
        result = call(store) => return result,
        used = out_of_guest_time(&clock, limit) => used,
    };
    Err(store.data_mut().out_of_time(used))
}

/// What a component says of itself, read by [`describe`].
struct Description {
    manifest: types::Manifest,
    instructions: String,
    /// Bytes of linear memory its instance started with, all memories
    /// together.
    initial_memory: usize,
}

/// Reads the manifest and instructions from a fresh, sandboxed instance,
/// within the widest limits any skill has (its own are known once the
/// manifest names it). A guest that traps, loops or sleeps here is refused
/// like any other bad component.
async fn describe(
    runtime: &Runtime,
    pre: &SkillPre<HostState>,
    imports_wasi: bool,
) -> Result<Description, LoadError> {
    // Named in the guest's log lines until its manifest names it.
    let placeholder = SkillName::new("loading").expect("a valid name");
    let limits = runtime.config().widest_limits();
    let new_store = || {
        let state = HostState::new(
            placeholder.clone(),
            Arc::from([]),
            Arc::new(ToolRegistry::new()),
            limits,
        );
        sandboxed_store(runtime.engine(), state)
    };
    let _slot = runtime.instance_slot().await;
    let (mut store, instance) = instantiate_in_pool(runtime, pre, imports_wasi, new_store).await;
    let initial_memory = store.data().memory_bytes();
    let result = match instance {
        Ok(instance) => {
            within_guest_time(&mut store, imports_wasi, async |store| {
                let manifest = instance.call_manifest(&mut *store).await?;
                let instructions = instance.call_instructions(store).await?;
                Ok((manifest, instructions))
            })
            .await
        }
        Err(trap) => Err(trap),
    };
    store.data_mut().flush_captured_output();
    let (manifest, instructions) =
        result.map_err(|trap| describe_failed(store.data_mut().classify_trap(&trap)))?;
    let size = manifest.parameters.len() + manifest.description.len() + instructions.len();
    if let Some(error) = store.data().output_too_large(size) {
        return Err(describe_failed(error));
    }
    Ok(Description {
        manifest,
        instructions,
        initial_memory,
    })
}

/// Why reading a manifest failed, without the placeholder name the store
/// carried (the skill has no name until its manifest is read).
fn describe_failed(error: InvokeError) -> LoadError {
    LoadError::Describe(match error {
        InvokeError::LimitExceeded { limit, detail, .. } => {
            format!("the guest hit its {limit} limit: {detail}")
        }
        InvokeError::Trap { message, .. } => format!("the guest trapped: {message}"),
        other => other.to_string(),
    })
}
