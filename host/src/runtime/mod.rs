//! The sandboxed component runtime.
//!
//! One [`Runtime`] owns the wasmtime `Engine` (component model, async, pooling
//! allocator, epoch interruption) and a `Linker` built once. Each loaded skill
//! is a [`SkillComponent`] holding an `InstancePre`; each invocation gets a
//! fresh `Store` with its own [`Limits`].

pub mod bindings;
mod component;
mod host;
mod limits;

use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::Linker;
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

pub use component::{LoadError, SkillComponent, digest_of};
pub use host::{InvokeError, RunOutcome, RunReport, ToolCallRecord, ToolDispatch};
pub use limits::{Limit, Limits};

use host::HostState;

/// How often the epoch advances. Execution-time limits are enforced at this
/// granularity. Default: 10 ms, as Spin does — fine enough for limits of a
/// second or more, coarse enough that the ticker thread costs nothing.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Memory and table bytes per pool slot kept mapped between instances.
/// Default: 4 MiB — covers a Rust guest's stack and heap (about 1.1 MiB).
const KEEP_RESIDENT_BYTES: usize = 4 << 20;

/// Engine-wide settings, fixed when the [`Runtime`] is created.
#[derive(Debug, Clone, Copy)]
pub struct RuntimeConfig {
    /// Limits applied to each invocation unless a caller passes others.
    /// `limits.memory_bytes` is also the size of each pooled memory slot, so
    /// no invocation can be given more.
    pub limits: Limits,
    /// Component instances that can be live at once (the pool's size).
    /// Default: 128. Each slot reserves address space, not memory.
    pub max_concurrent_instances: u32,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            limits: Limits::default(),
            max_concurrent_instances: 128,
        }
    }
}

/// The shared sandbox: engine, linker and epoch ticker. Cheap to clone.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<RuntimeInner>,
}

struct RuntimeInner {
    engine: Engine,
    linker: Linker<HostState>,
    config: RuntimeConfig,
}

impl Runtime {
    pub fn new(config: RuntimeConfig) -> anyhow::Result<Self> {
        let engine = Engine::new(&engine_config(&config))?;
        let mut linker = Linker::new(&engine);
        // Guests from wasm32-wasip2, componentize-py and componentize-js
        // import WASI even when they never use it. Linking it with an empty
        // context (see `host::empty_wasi_ctx`) lets them run while granting
        // nothing: no files, env, args, network or inherited stdio.
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        bindings::Skill::add_to_linker::<_, wasmtime::component::HasSelf<_>>(
            &mut linker,
            |state| state,
        )?;
        spawn_epoch_ticker(&engine);
        Ok(Self {
            inner: Arc::new(RuntimeInner {
                engine,
                linker,
                config,
            }),
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    pub fn config(&self) -> &RuntimeConfig {
        &self.inner.config
    }

    pub(crate) fn linker(&self) -> &Linker<HostState> {
        &self.inner.linker
    }
}

fn engine_config(config: &RuntimeConfig) -> Config {
    let mut pool = PoolingAllocationConfig::new();
    let instances = config.max_concurrent_instances;
    pool.total_component_instances(instances)
        // Interpreted-language components carry several core instances,
        // memories and tables; Rust guests carry one or two of each.
        .total_core_instances(instances * 4)
        .total_memories(instances * 2)
        .total_tables(instances * 4)
        .total_stacks(instances)
        .max_memory_size(config.limits.memory_bytes)
        // Reset the pages a guest dirtied in place instead of unmapping the
        // slot: the next instantiation then takes no page faults on them.
        // With PAGEMAP_SCAN (Linux 6.7+) only dirty pages are touched.
        .linear_memory_keep_resident(KEEP_RESIDENT_BYTES)
        .table_keep_resident(KEEP_RESIDENT_BYTES)
        .pagemap_scan(wasmtime::Enabled::Auto);
    let mut wasm = Config::new();
    wasm.wasm_component_model(true)
        .epoch_interruption(true)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    wasm
}

/// Advances the engine's epoch every [`EPOCH_TICK`] until the engine is
/// dropped.
fn spawn_epoch_ticker(engine: &Engine) {
    let engine = engine.weak();
    std::thread::Builder::new()
        .name("skillhost-epoch".into())
        .spawn(move || {
            while let Some(engine) = engine.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(EPOCH_TICK);
            }
        })
        .expect("spawning the epoch ticker thread");
}
