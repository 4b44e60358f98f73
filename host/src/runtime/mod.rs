//! The sandboxed component runtime.
//!
//! One [`Runtime`] owns the wasmtime `Engine` (component model, async, pooling
//! allocator, epoch interruption) and a `Linker` built once. Each loaded skill
//! is a [`SkillComponent`] holding an `InstancePre`; each invocation gets a
//! fresh `Store` with its own [`Limits`].

pub mod bindings;
mod component;
mod function_cache;
mod host;
mod limits;
mod wasi;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use arc_swap::ArcSwap;
use tokio::sync::futures::Notified;
use tokio::sync::{Notify, Semaphore, SemaphorePermit};
use wasmtime::component::Linker;
use wasmtime::{
    Cache, CacheConfig, Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig,
};

pub use component::{LoadError, SkillComponent, compile, digest_of};
pub use host::{DispatchError, InvokeError, RunOutcome, RunReport, ToolCallRecord, ToolDispatch};
pub use limits::{Limit, Limits};
pub use wasi::WasiSources;

use crate::skills::SkillName;
use function_cache::FunctionCache;
use host::HostState;

/// How often the epoch advances. Execution-time limits are enforced at this
/// granularity. Default: 10 ms, as Spin does — fine enough for limits of a
/// second or more, coarse enough that the ticker thread costs nothing.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// What each instance slot brings to the pool's totals of core instances,
/// memories and tables, which all instances share (see
/// [`RuntimeConfig::max_concurrent_instances`]).
const CORE_INSTANCES_PER_SLOT: u32 = 32;
const MEMORIES_PER_SLOT: u32 = 2;
const TABLES_PER_SLOT: u32 = 4;

/// The most core instances, memories and tables one component may use,
/// when the pool holds that many: a componentize-py guest with NumPy has 34
/// core instances and a few memories and tables; a Rust guest one or two
/// of each. Caps what one instance can take of the totals all share, so
/// that in a pool of more than 4 slots one skill cannot hold all of any of
/// them while the others wait. In a smaller pool the caps reach the totals
/// (at 4 slots, 8 memories and 16 tables): one skill may take them all,
/// and the others wait until it ends.
const MAX_CORE_INSTANCES_PER_COMPONENT: u32 = 64;
const MAX_MEMORIES_PER_COMPONENT: u32 = 8;
const MAX_TABLES_PER_COMPONENT: u32 = 16;

/// Memory and table bytes per pool slot kept mapped between instances.
/// Default: 4 MiB — covers a Rust guest's stack and heap (about 1.1 MiB).
const KEEP_RESIDENT_BYTES: usize = 4 << 20;

/// Engine-wide settings, fixed when the [`Runtime`] is created.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Limits applied to each invocation unless a caller passes others.
    pub limits: Limits,
    /// Limits of particular skills, by name, in place of `limits` (whole:
    /// a field not meant to differ is copied from `limits`). A heavier
    /// skill may get more time or memory, an untrusted one less. A name no
    /// loaded skill has changes nothing until a skill of that name loads.
    /// Default: none. The largest `memory_bytes` of all these and `limits`
    /// is the size of each pooled memory slot, so no invocation can be
    /// given more (see [`RuntimeConfig::widest_limits`]).
    pub skill_limits: BTreeMap<SkillName, Limits>,
    /// Component instances that can be live at once (the pool's size).
    /// Default: 128. Each slot reserves address space, not memory. An
    /// invocation (or a load reading a manifest) that finds every slot in
    /// use — say, 128 invocations each waiting on a slow tool — waits for
    /// one, first come first served, instead of failing. (A call waiting
    /// for a person's approval holds none: see [`DispatchError::Suspend`].)
    /// Each slot also brings 32 core instances, 2 memories and 4 tables to
    /// the pool's totals, which all instances share: a Rust guest uses one or
    /// two of each, a componentize-py guest dozens of core instances. An
    /// invocation that finds the totals in use by others waits too. One
    /// component may use at most 64 core instances, 8 memories and 16
    /// tables (or the totals, if smaller); one that needs more is refused
    /// at load. So with more than 4 slots no component can hold all of a
    /// total; with 4 or fewer one may take every memory and table while the
    /// others wait. At least 1, and at most `u32::MAX / 32` (the totals are
    /// counted in 32 bits).
    pub max_concurrent_instances: u32,
    /// Directory of the compilation cache: wasmtime's own cache, keyed by the
    /// SHA-256 of the component's bytes together with the engine's settings
    /// and version, so a restart loads unchanged skills without compiling
    /// them again and a changed file (or another wasmtime) never hits a stale
    /// entry. Created when missing; a relative path is taken from the current
    /// directory. Default: `None`, no cache — every start compiles every
    /// skill. The `skillhost` command defaults to `$XDG_CACHE_HOME/skillhost`
    /// (`~/.cache/skillhost`).
    pub cache_dir: Option<PathBuf>,
    /// Memory for Cranelift's incremental cache of compiled functions (see
    /// `function_cache.rs`): a function compiled once, for any skill, is not
    /// compiled again while it stays in the cache, so reloading a changed
    /// skill compiles only the functions that changed. Default: 64 MiB — the
    /// seven bundled skills use about 1 MiB. `0` turns the cache off.
    pub function_cache_bytes: usize,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            limits: Limits::default(),
            skill_limits: BTreeMap::new(),
            max_concurrent_instances: 128,
            cache_dir: None,
            function_cache_bytes: 64 << 20,
        }
    }
}

impl RuntimeConfig {
    /// The limits of each invocation of the skill `name`: its
    /// [`RuntimeConfig::skill_limits`], else [`RuntimeConfig::limits`].
    pub fn limits_for(&self, name: &SkillName) -> Limits {
        self.skill_limits.get(name).copied().unwrap_or(self.limits)
    }

    /// The largest of each limit over `limits` and every skill's: the size
    /// of the pool's memory slots, and the bounds of reading a manifest,
    /// which runs before the skill's name (and so its limits) is known.
    pub fn widest_limits(&self) -> Limits {
        self.skill_limits
            .values()
            .fold(self.limits, |widest, limits| Limits {
                execution_time: widest.execution_time.max(limits.execution_time),
                memory_bytes: widest.memory_bytes.max(limits.memory_bytes),
                tool_calls: widest.tool_calls.max(limits.tool_calls),
                output_bytes: widest.output_bytes.max(limits.output_bytes),
                log_lines: widest.log_lines.max(limits.log_lines),
            })
    }
}

/// Why a [`RuntimeConfig`] makes no runtime.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeConfigError {
    /// With no slot, every invocation would wait forever.
    #[error("max_concurrent_instances must be at least 1")]
    NoInstanceSlots,
    #[error(
        "max_concurrent_instances is {0}, more than the pool can count: each slot brings \
         {CORE_INSTANCES_PER_SLOT} core instances to its totals, counted in 32 bits (at most \
         {max})",
        max = u32::MAX / CORE_INSTANCES_PER_SLOT
    )]
    TooManyInstanceSlots(u32),
    /// The pool reserves every slot's address space up front; the machine
    /// (or `ulimit -v`) may not have that much.
    #[error(
        "the instance pool could not be reserved ({instances} instances, each with up to \
         {memory_mib} MiB of linear memory); lower max_concurrent_instances or \
         the largest memory limit: {cause}"
    )]
    PoolNotReserved {
        /// [`RuntimeConfig::max_concurrent_instances`].
        instances: u32,
        /// The largest [`Limits::memory_bytes`] (the slot size), in MiB.
        memory_mib: usize,
        /// What wasmtime said.
        cause: String,
    },
}

/// Why [`Runtime::replace_limits`] changed nothing: the new limits change a
/// memory limit, which is fixed when the runtime is created.
#[derive(Debug, thiserror::Error)]
#[error(
    "the memory limit{of} would change from {} to {}, which takes effect only at a restart (it \
     sizes the instance pool)",
    limits::mib(*fixed as u64),
    limits::mib(*asked as u64),
    of = skill.as_ref().map(|skill| format!(" of skill `{skill}`")).unwrap_or_default()
)]
pub struct MemoryLimitFixed {
    /// The skill whose limit would change; `None` for the default.
    pub skill: Option<SkillName>,
    /// Bytes asked for, and the limit in force.
    pub asked: usize,
    pub fixed: usize,
}

/// The shared sandbox: engine, linker and epoch ticker. Cheap to clone.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<RuntimeInner>,
}

struct RuntimeInner {
    engine: Engine,
    linker: Linker<HostState>,
    /// Swapped whole when the limits change ([`Runtime::replace_limits`]);
    /// every other setting, and every memory limit, stays as created.
    config: ArcSwap<RuntimeConfig>,
    /// One permit per pooled instance slot: held from before a store is
    /// created until after it is dropped, so instantiation never finds the
    /// pool's instance slots full.
    slots: Semaphore,
    /// Told each time a slot is given back, after its store has returned its
    /// share of the pool's totals: what a store waiting for room in them
    /// waits for.
    released: Notify,
    /// Stores waiting for a slot, or for room in the pool's totals, now.
    waiting: AtomicUsize,
    /// The engine's compilation cache (a handle sharing its counters).
    cache: Option<Cache>,
}

/// The instance pool at one moment ([`Runtime::instance_slots`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InstanceSlots {
    /// Its size, [`RuntimeConfig::max_concurrent_instances`].
    pub total: usize,
    /// Slots held by a live store (an invocation, or a load reading a
    /// manifest).
    pub in_use: usize,
    /// Invocations and loads waiting for a slot, or for room in the pool's
    /// shared totals of core instances, memories and tables.
    pub waiting: usize,
}

/// Compilation-cache lookups since the [`Runtime`] was created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheStats {
    /// Components loaded from the cache without compiling.
    pub hits: usize,
    /// Components compiled and then written to the cache.
    pub misses: usize,
}

impl Runtime {
    /// Creates the engine and linker and starts the epoch ticker. Fails when
    /// the engine cannot be configured, e.g. when `config.cache_dir` cannot be
    /// created, or when `max_concurrent_instances` is out of range
    /// ([`RuntimeConfigError`]).
    pub fn new(config: RuntimeConfig) -> anyhow::Result<Self> {
        let mut engine_config = engine_config(&config)?;
        let cache = config.cache_dir.as_deref().map(open_cache).transpose()?;
        engine_config.cache(cache.clone());
        if config.function_cache_bytes > 0 {
            let functions = FunctionCache::new(config.function_cache_bytes);
            engine_config.enable_incremental_compilation(Arc::new(functions))?;
        }
        let engine =
            Engine::new(&engine_config).map_err(|error| RuntimeConfigError::PoolNotReserved {
                instances: config.max_concurrent_instances,
                memory_mib: config.widest_limits().memory_bytes >> 20,
                cause: format!("{error:#}"),
            })?;
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
                slots: Semaphore::new(config.max_concurrent_instances as usize),
                released: Notify::new(),
                waiting: AtomicUsize::new(0),
                config: ArcSwap::from_pointee(config),
                cache,
            }),
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// The settings in force: those the runtime was created with, and the
    /// limits last put in place ([`Self::replace_limits`]).
    pub fn config(&self) -> Arc<RuntimeConfig> {
        self.inner.config.load_full()
    }

    /// The limits of each invocation of the skill `name` now
    /// ([`RuntimeConfig::limits_for`]).
    pub fn limits_for(&self, name: &SkillName) -> Limits {
        self.inner.config.load().limits_for(name)
    }

    /// Puts `limits` and `skill_limits` in place of
    /// [`RuntimeConfig::limits`] and [`RuntimeConfig::skill_limits`], for
    /// every invocation that starts from now on (one under way keeps its
    /// own). Memory limits stay as created: they size the pool's slots and
    /// decided which skills could load, so new limits that change any
    /// skill's memory limit are refused and nothing changes. Returns the
    /// settings replaced.
    pub fn replace_limits(
        &self,
        limits: Limits,
        skill_limits: BTreeMap<SkillName, Limits>,
    ) -> Result<Arc<RuntimeConfig>, MemoryLimitFixed> {
        // Every config stored keeps the memory limits it was created with,
        // so concurrent calls check against the same ones; the last stored
        // wins.
        let current = self.inner.config.load();
        let next = RuntimeConfig {
            limits,
            skill_limits,
            ..RuntimeConfig::clone(&current)
        };
        if next.limits.memory_bytes != current.limits.memory_bytes {
            return Err(MemoryLimitFixed {
                skill: None,
                asked: next.limits.memory_bytes,
                fixed: current.limits.memory_bytes,
            });
        }
        let names = current.skill_limits.keys().chain(next.skill_limits.keys());
        for name in names {
            let (fixed, asked) = (current.limits_for(name), next.limits_for(name));
            if asked.memory_bytes != fixed.memory_bytes {
                return Err(MemoryLimitFixed {
                    skill: Some(name.clone()),
                    asked: asked.memory_bytes,
                    fixed: fixed.memory_bytes,
                });
            }
        }
        Ok(self.inner.config.swap(Arc::new(next)))
    }

    /// Hits and misses of the compilation cache so far; `None` when the
    /// runtime has no cache ([`RuntimeConfig::cache_dir`]).
    pub fn cache_stats(&self) -> Option<CacheStats> {
        self.inner.cache.as_ref().map(|cache| CacheStats {
            hits: cache.cache_hits(),
            misses: cache.cache_misses(),
        })
    }

    pub(crate) fn linker(&self) -> &Linker<HostState> {
        &self.inner.linker
    }

    /// One of the pool's instance slots, waiting while all are in use. Hold
    /// it from before the store is created until after it is dropped (the
    /// store's drop returns the slot to the pool).
    pub(crate) async fn instance_slot(&self) -> InstanceSlot<'_> {
        let slots = &self.inner.slots;
        let permit = match slots.try_acquire() {
            Ok(permit) => permit,
            Err(_) => {
                tracing::debug!(
                    slots = self.inner.config.load().max_concurrent_instances,
                    "every instance slot is in use; waiting for one"
                );
                let _waiting = self.count_waiting();
                slots
                    .acquire()
                    .await
                    .expect("the slot semaphore is never closed")
            }
        };
        InstanceSlot {
            _permit: permit,
            released: &self.inner.released,
        }
    }

    /// Waits until a slot is given back (and with it, its store's share of
    /// the pool's totals), counted as waiting meanwhile. Take `released`
    /// from [`Self::slot_released`] before the attempt that found no room,
    /// so that a slot given back in between is not missed.
    pub(crate) async fn wait_for_room(&self, released: Notified<'_>) {
        tracing::debug!(
            "the pool's core instances, memories or tables are in use by other instances; \
             waiting for one to end"
        );
        let _waiting = self.count_waiting();
        released.await;
    }

    /// Resolves at the next time a slot is given back.
    pub(crate) fn slot_released(&self) -> Notified<'_> {
        self.inner.released.notified()
    }

    /// Counts a wait for as long as the guard lives, however it ends (a
    /// caller may give up and drop it).
    fn count_waiting(&self) -> impl Drop + '_ {
        struct Waiting<'a>(&'a AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::Relaxed);
            }
        }
        self.inner.waiting.fetch_add(1, Ordering::Relaxed);
        Waiting(&self.inner.waiting)
    }

    /// How the instance pool is used right now.
    pub fn instance_slots(&self) -> InstanceSlots {
        let total = self.inner.config.load().max_concurrent_instances as usize;
        InstanceSlots {
            total,
            in_use: total - self.inner.slots.available_permits(),
            waiting: self.inner.waiting.load(Ordering::Relaxed),
        }
    }
}

/// A slot of the instance pool ([`Runtime::instance_slot`]). Giving it back
/// wakes the stores waiting for room in the pool's totals.
pub(crate) struct InstanceSlot<'a> {
    _permit: SemaphorePermit<'a>,
    released: &'a Notify,
}

impl Drop for InstanceSlot<'_> {
    fn drop(&mut self) {
        self.released.notify_waiters();
    }
}

fn engine_config(config: &RuntimeConfig) -> Result<Config, RuntimeConfigError> {
    let instances = config.max_concurrent_instances;
    if instances == 0 {
        return Err(RuntimeConfigError::NoInstanceSlots);
    }
    // Shared by all instances: a Rust guest uses one or two of each, a
    // componentize-py guest dozens of core instances (34 with NumPy). A core
    // instance costs only its metadata, allocated when used; a memory or
    // table slot reserves address space up front. A component needing more
    // than its share could never be instantiated: it is refused at load.
    let total = |per_slot: u32| {
        instances
            .checked_mul(per_slot)
            .ok_or(RuntimeConfigError::TooManyInstanceSlots(instances))
    };
    let core_instances = total(CORE_INSTANCES_PER_SLOT)?;
    let memories = total(MEMORIES_PER_SLOT)?;
    let tables = total(TABLES_PER_SLOT)?;
    let mut pool = PoolingAllocationConfig::new();
    pool.total_component_instances(instances)
        .total_core_instances(core_instances)
        .max_core_instances_per_component(core_instances.min(MAX_CORE_INSTANCES_PER_COMPONENT))
        .total_memories(memories)
        .max_memories_per_component(memories.min(MAX_MEMORIES_PER_COMPONENT))
        .total_tables(tables)
        .max_tables_per_component(tables.min(MAX_TABLES_PER_COMPONENT))
        .total_stacks(instances)
        .max_memory_size(config.widest_limits().memory_bytes)
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
    Ok(wasm)
}

/// Opens (creating it when missing) the compilation cache in `dir`, with
/// wasmtime's default limits: entries are zstd-compressed, and a background
/// worker trims the directory when it passes 65536 files or 512 MiB.
fn open_cache(dir: &std::path::Path) -> anyhow::Result<Cache> {
    // wasmtime requires an absolute path.
    let dir = std::path::absolute(dir)
        .with_context(|| format!("compilation cache directory {}", dir.display()))?;
    // A cache entry is native code the engine runs without checking it (its
    // key, the hash of a signed component, is public).
    crate::private_dir::ensure(&dir, 0o022, "compiled skills run from it unchecked")
        .with_context(|| format!("compilation cache directory {}", dir.display()))?;
    let mut cache = CacheConfig::new();
    cache.with_directory(dir.clone());
    Cache::new(cache)
        .map_err(anyhow::Error::from)
        .with_context(|| format!("compilation cache directory {}", dir.display()))
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
