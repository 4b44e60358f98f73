//! Hot-reload figures.
//!
//! - **Reload latency**: from the new file being renamed into place to the
//!   new version answering (`registry.get` polled every millisecond until it
//!   returns the new component, which is then run and must answer with its
//!   version), over 50 swaps of the small `versioned` test guest through the
//!   real watcher. Cases: new content on every swap (each one verified and
//!   compiled: a deployment) with no cache at all (every function compiled,
//!   as for a skill whose code is all new), with the in-memory function
//!   cache (the default: only functions not compiled before are), and with
//!   the function and module caches; then two contents alternating with the
//!   module cache (each one compiled once: a rollback). Beside them, the
//!   floor measured in the same run: `SkillComponent::load` alone (compile,
//!   link, read the manifest) of the same bytes, with no cache.
//!   Each new content differs from the last in a custom section, so its code
//!   is unchanged: a real new version also changes a few functions, which
//!   the function cache then compiles (tens of microseconds to milliseconds
//!   each).
//! - **Startup with 100 skills**: `SkillRegistry::load_dir` over 100 signed
//!   components with distinct names, with no cache at all, with an empty
//!   module cache (cold: compile and fill it) and with the filled one
//!   (warm). Two sets: 100 packed declarative skills (instruction-only, tiny)
//!   and 100 copies of `processRefund` (a real Rust guest) each renamed in
//!   place. The function cache is on in the cold and warm columns; since
//!   the copies share their code, a cold start compiles it once.
//!
//! Run: `cargo bench --bench reload` (about a minute; `BENCH_SWAPS` and
//! `BENCH_SKILLS` change the counts).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use skillhost::runtime::{RunOutcome, Runtime, RuntimeConfig, SkillComponent};
use skillhost::skills::pack::{DeclarativeSkill, Format};
use skillhost::skills::signature::{SignaturePolicy, SigningKey, TrustStore};
use skillhost::skills::{SkillRegistry, watch};
use skillhost::tools::ToolRegistry;
use skillhost::tools::demo::{self, DemoDb};

/// How long one reload may take before the bench gives up.
const PATIENCE: Duration = Duration::from_secs(30);

fn count(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

struct Demo {
    root: PathBuf,
    key: SigningKey,
    policy: SignaturePolicy,
    tools: Arc<ToolRegistry>,
}

impl Demo {
    fn new() -> Self {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("repo root")
            .to_owned();
        let key = SigningKey::load(&root.join("keys/demo-signing.key")).expect("demo key");
        let store = TrustStore::load(&[root.join("keys/trusted")]).expect("trust store");
        let db = Arc::new(DemoDb::in_memory().expect("demo db"));
        let mut tools = ToolRegistry::new();
        demo::register_all(&mut tools, db).expect("demo tools");
        Self {
            root,
            key,
            policy: SignaturePolicy::Require(store),
            tools: Arc::new(tools),
        }
    }

    fn read(&self, path: &str) -> Vec<u8> {
        std::fs::read(self.root.join(path)).unwrap_or_else(|e| panic!("reading {path}: {e}"))
    }

    fn sign(&self, bytes: &[u8]) -> Vec<u8> {
        self.key.sign(bytes).expect("signing")
    }

    fn runtime(&self, caches: Caches) -> Runtime {
        let defaults = RuntimeConfig::default();
        let (cache_dir, function_cache_bytes) = match caches {
            Caches::None => (None, 0),
            Caches::Functions => (None, defaults.function_cache_bytes),
            Caches::FunctionsAndModules(dir) => {
                (Some(dir.to_owned()), defaults.function_cache_bytes)
            }
        };
        Runtime::new(RuntimeConfig {
            cache_dir,
            function_cache_bytes,
            ..defaults
        })
        .expect("runtime")
    }
}

/// Which compilation caches a runtime has.
#[derive(Clone, Copy)]
enum Caches<'a> {
    None,
    /// The in-memory function cache (the default).
    Functions,
    /// Both, the module cache in this directory.
    FunctionsAndModules(&'a Path),
}

/// `wasm` with a custom section `name` holding `payload` appended.
fn with_custom_section(wasm: &[u8], name: &str, payload: &[u8]) -> Vec<u8> {
    fn leb128(out: &mut Vec<u8>, mut n: usize) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let mut body = Vec::new();
    leb128(&mut body, name.len());
    body.extend_from_slice(name.as_bytes());
    body.extend_from_slice(payload);
    let mut out = wasm.to_vec();
    out.push(0);
    leb128(&mut out, body.len());
    out.extend(body);
    out
}

/// `wasm` with every occurrence of `from` replaced by `to` (same length).
fn replaced(wasm: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let mut out = wasm.to_vec();
    let mut found = 0;
    let mut at = 0;
    while let Some(offset) = out[at..].windows(from.len()).position(|w| w == from) {
        out[at + offset..at + offset + to.len()].copy_from_slice(to);
        at += offset + to.len();
        found += 1;
    }
    assert!(found > 0, "{:?} not found", String::from_utf8_lossy(from));
    out
}

/// Percentile `p` (0..=1) of sorted `times`, nearest rank.
fn percentile(times: &[Duration], p: f64) -> Duration {
    let rank = (p * times.len() as f64).ceil() as usize;
    times[rank.clamp(1, times.len()) - 1]
}

fn ms(duration: Duration) -> String {
    format!("{:.1} ms", duration.as_secs_f64() * 1e3)
}

fn answer(value: &Value) -> &str {
    value["version"].as_str().expect("a version")
}

/// Swaps `contents[1..]` (signed `versioned` components) into a watched
/// directory one after the other and measures each reload.
async fn reload_latency(demo: &Demo, contents: &[Vec<u8>], caches: Caches<'_>) -> Vec<Duration> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("versioned.wasm");
    std::fs::write(&path, &contents[0]).expect("writing");
    let registry = SkillRegistry::load_dir(
        demo.runtime(caches),
        demo.tools.clone(),
        demo.policy.clone(),
        dir.path(),
    )
    .await
    .expect("loading");
    let registry = Arc::new(registry);
    let _watching = watch(registry.clone(), dir.path()).expect("watching");
    // Let the watcher's first sync of the directory pass.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut times = Vec::new();
    for content in &contents[1..] {
        let digest = skillhost::runtime::digest_of(content);
        let temporary = dir.path().join(".versioned.wasm.tmp");
        std::fs::write(&temporary, content).expect("writing");
        let started = Instant::now();
        std::fs::rename(&temporary, &path).expect("renaming");
        let skill = loop {
            let skill = registry.get("versioned").expect("loaded");
            if skill.digest() == digest {
                break skill;
            }
            assert!(started.elapsed() < PATIENCE, "no reload in {PATIENCE:?}");
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        let report = skill
            .run(&json!({}), demo.tools.clone())
            .await
            .expect("a run");
        times.push(started.elapsed());
        let RunOutcome::Done(value) = report.outcome else {
            panic!("handover")
        };
        assert_eq!(answer(&value), skill.manifest().version.to_string());
    }
    times.sort();
    times
}

/// `SkillComponent::load` (compile, link, read the manifest) of each of
/// `contents` on a runtime without a cache: the floor of a reload.
async fn load_alone(demo: &Demo, contents: &[Vec<u8>]) -> Vec<Duration> {
    let runtime = demo.runtime(Caches::None);
    let mut times = Vec::new();
    for content in contents {
        let started = Instant::now();
        SkillComponent::load(&runtime, content.clone(), &demo.tools)
            .await
            .expect("loading");
        times.push(started.elapsed());
    }
    times.sort();
    times
}

/// The time `load_dir` takes over `dir` on a fresh runtime; checks that
/// all `expected` skills loaded.
async fn startup(demo: &Demo, dir: &Path, caches: Caches<'_>, expected: usize) -> Duration {
    let runtime = demo.runtime(caches);
    let started = Instant::now();
    let registry = SkillRegistry::load_dir(runtime, demo.tools.clone(), demo.policy.clone(), dir)
        .await
        .expect("loading");
    let elapsed = started.elapsed();
    let snapshot = registry.snapshot();
    if let Some(failure) = snapshot.failures().next() {
        panic!("{}: {}", failure.path.display(), failure.reason);
    }
    assert_eq!(snapshot.len(), expected);
    elapsed
}

struct StartupRow {
    label: String,
    size: usize,
    uncached: Duration,
    cold: Duration,
    warm: Duration,
}

/// Writes `files` into a directory and measures startup without a cache,
/// with an empty one and with the filled one (median of three warm starts).
async fn startup_row(demo: &Demo, label: String, files: Vec<Vec<u8>>) -> StartupRow {
    let dir = tempfile::tempdir().expect("tempdir");
    let size = files.iter().map(Vec::len).sum::<usize>() / files.len();
    let n = files.len();
    for (i, bytes) in files.into_iter().enumerate() {
        std::fs::write(dir.path().join(format!("skill-{i:03}.wasm")), bytes).expect("writing");
    }
    let uncached = startup(demo, dir.path(), Caches::None, n).await;
    let cache = tempfile::tempdir().expect("tempdir");
    let caches = Caches::FunctionsAndModules(cache.path());
    let cold = startup(demo, dir.path(), caches, n).await;
    let mut warm = Vec::new();
    for _ in 0..3 {
        warm.push(startup(demo, dir.path(), caches, n).await);
    }
    warm.sort();
    StartupRow {
        label,
        size,
        uncached,
        cold,
        warm: warm[1],
    }
}

fn main() {
    let swaps = count("BENCH_SWAPS", 50);
    let skills = count("BENCH_SKILLS", 100);
    let executor = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let demo = Demo::new();
    executor.block_on(async {
        // Reload latency.
        let versions = [
            demo.read("tests/fixtures/versioned-1.wasm"),
            demo.read("tests/fixtures/versioned-2.wasm"),
        ];
        let fresh: Vec<Vec<u8>> = (0..=swaps)
            .map(|i| {
                let nonce = with_custom_section(&versions[i % 2], "bench-nonce", &i.to_le_bytes());
                demo.sign(&nonce)
            })
            .collect();
        let alternating: Vec<Vec<u8>> = (0..=swaps).map(|i| versions[i % 2].clone()).collect();
        let floor = load_alone(&demo, &fresh[1..]).await;
        let uncached = reload_latency(&demo, &fresh, Caches::None).await;
        let deploy = reload_latency(&demo, &fresh, Caches::Functions).await;
        let cache = tempfile::tempdir().expect("tempdir");
        let both = Caches::FunctionsAndModules(cache.path());
        let deploy_cached = reload_latency(&demo, &fresh, both).await;
        let cache = tempfile::tempdir().expect("tempdir");
        let both = Caches::FunctionsAndModules(cache.path());
        let rollback = reload_latency(&demo, &alternating, both).await;
        println!(
            "reload latency: rename into place -> new version answering, {swaps} swaps of \
             `versioned` ({} KB), debounce {} ms",
            versions[0].len() / 1024,
            skillhost::skills::watcher::DEBOUNCE.as_millis()
        );
        println!("  {:<44} {:>9} {:>9} {:>9}", "case", "p50", "p99", "max");
        for (label, times) in [
            ("floor: SkillComponent::load alone, no cache", &floor),
            ("new content each swap, no cache", &uncached),
            ("new content, function cache (default)", &deploy),
            ("new content, function + module cache", &deploy_cached),
            ("two contents alternating, both caches", &rollback),
        ] {
            println!(
                "  {label:<44} {:>9} {:>9} {:>9}",
                ms(percentile(times, 0.5)),
                ms(percentile(times, 0.99)),
                ms(*times.last().expect("samples"))
            );
        }
        println!("  targets: p50 <= 50 ms, p99 <= 200 ms");

        // Startup with many skills.
        let declarative: Vec<Vec<u8>> = (0..skills)
            .map(|i| {
                let yaml = format!(
                    "name: skill_{i:03}\ndescription: Looks up order {i} for the user.\n\
                     tools: [queryOrder]\nparameters: {{type: object}}\n\
                     instructions: Use queryOrder to look up order {i} and report its status.\n"
                );
                let skill = DeclarativeSkill::parse(&yaml, Format::Yaml, Path::new("skill.yaml"))
                    .expect("parsing");
                demo.sign(&skill.to_component().expect("packing"))
            })
            .collect();
        let refund = demo.read("skills/processRefund.wasm");
        let refunds: Vec<Vec<u8>> = (0..skills)
            .map(|i| {
                let name = format!("processR{i:05}");
                demo.sign(&replaced(&refund, b"processRefund", name.as_bytes()))
            })
            .collect();
        let rows = [
            startup_row(&demo, "declarative (packed YAML)".into(), declarative).await,
            startup_row(&demo, "processRefund copies (Rust guest)".into(), refunds).await,
        ];
        println!();
        println!(
            "startup: load_dir of {skills} signed skills (verify, compile, link, manifest), {} cores",
            std::thread::available_parallelism().map_or(1, usize::from)
        );
        println!(
            "  {:<36} {:>8} {:>10} {:>10} {:>10} {:>10}",
            "skills", "size", "no caches", "cold", "warm", "cold/warm"
        );
        for row in &rows {
            println!(
                "  {:<36} {:>5} KB {:>10} {:>10} {:>10} {:>9.1}x",
                row.label,
                row.size / 1024,
                ms(row.uncached),
                ms(row.cold),
                ms(row.warm),
                row.cold.as_secs_f64() / row.warm.as_secs_f64()
            );
        }
    });
}
