//! `POST /v1/skills/processRefund/invoke` under load: the real `skillhost
//! serve` (the skill in its sandbox) beside a plain axum route that makes the
//! same two tool calls natively, in one run (issue #5). Target: the sandboxed
//! route reaches ≥ 0.8× the native route's requests/s.
//!
//! Three processes on loopback:
//! - **sandboxed**: `skillhost serve`, the binary Cargo builds for this bench
//!   (bench profile: release with line tables, so `perf` can read it), over
//!   the bundled `skills/` and a scratch demo shop in a temporary directory
//!   (compiled code comes from `serve`'s default compilation cache).
//!   A config file auto-approves `applyRefund`, as `skillhost test` does, so
//!   the write runs instead of waiting for a person.
//! - **native**: this binary run again with `--native-server`: axum on the
//!   same tokio runtime as `serve` (multi-threaded, default settings), the
//!   same `ToolRegistry` of demo tools on a scratch shop of its own, and a
//!   handler that is processRefund's steps
//!   (`skill-plugins/skills/processRefund/src/lib.rs`) in Rust, answering the
//!   gateway's response shape.
//! - **load generator**: this process, N keep-alive HTTP/1.1 connections
//!   (hyper) driven from one thread.
//!
//! Every request sends `{"orderId":"88231","reason":"quality problem"}`. The
//! first request to each server refunds 88231 (the shop's one delivered
//! order); every later one, all measured ones included, takes the same path
//! on both servers: `queryOrder` → delivered, with its refund; `applyRefund`
//! → rejected "already has refund" → `200`, `"refunded": false`. Both routes
//! thus run the same two validated tool calls and SQLite reads (no writes),
//! and differ by the sandbox and the gateway around it. A response other
//! than `200` with that answer counts as an error and is printed; any error
//! fails the bench.
//!
//! After a warm-up, rounds alternate the order of the targets (sandboxed
//! first, then native first, ...) so that noise on the shared machine hits
//! both. Memory is the servers' VmRSS from `/proc/<pid>/status`: idle after
//! start, the peak sampled under load, and VmHWM at the end; beside it
//! RssAnon, the part that is the process's own (VmRSS also counts the file
//! pages of the binary's code it ran, shared and reclaimable page cache).
//!
//! On a 2-core machine the generator competes with the server for the CPU;
//! it uses one thread and does little per request (no JSON parsing), but the
//! absolute figures are lower than with a generator on its own machine. Read
//! the ratio.
//!
//! Run: `cargo bench --bench gateway`. Knobs (environment): `BENCH_CONNECTIONS`
//! (16), `BENCH_SECONDS` per target and round (5), `BENCH_ROUNDS` (3),
//! `BENCH_WARMUP_SECONDS` per target (2).
//!
//! Beside req/s it prints the CPU time each server used per request and the
//! load generator's CPU use (from `/proc/<pid>/stat`): when the generator
//! nears a whole core, or other work takes the CPUs, req/s stops telling the
//! servers apart, and CPU per request still does.
//!
//! The servers' pids are printed at the start, for `perf record -e cpu-clock
//! --call-graph dwarf -p <pid>` (the binaries have no frame pointers, so `-g`
//! alone gives broken stacks).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::{Request, StatusCode, header};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// The `skillhost` binary's allocator, so the figures are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const INVOKE_PATH: &str = "/v1/skills/processRefund/invoke";
const REQUEST_BODY: &[u8] = br#"{"orderId":"88231","reason":"quality problem"}"#;
/// What every measured answer contains (see the module docs for the path).
const EXPECTED: [&[u8]; 3] = [
    br#""status":"done""#,
    br#""refunded":false"#,
    b"already has refund",
];
/// The argument that turns this binary into the native server.
const NATIVE_SERVER: &str = "--native-server";
/// What a server prints on stderr, before its address, once it listens
/// (`skillhost serve` prints "skillhost serving on http://127.0.0.1:…").
const LISTENING: &str = "serving on http://";
/// How often a server's resident size is read while it is under load.
const MEMORY_SAMPLE_EVERY: Duration = Duration::from_millis(50);
/// Errors whose text is kept for the report, per target.
const ERRORS_SHOWN: usize = 5;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() == Some(NATIVE_SERVER) {
        let db = args
            .next()
            .context("--native-server needs the database path")?;
        return native::serve(Path::new(&db));
    }
    let settings = Settings::from_env()?;
    // One thread: the generator leaves as much CPU as it can to the servers.
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async {
            // Ctrl-C or a CI timeout's SIGTERM drops the bench, whose
            // servers are killed as they drop, instead of orphaning them.
            tokio::select! {
                result = bench(&settings) => result,
                signal = interrupted() => bail!("stopped by {signal}; the servers are stopped too"),
            }
        })
}

/// The name of the first SIGINT or SIGTERM this process receives.
async fn interrupted() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut interrupt), Ok(mut terminate)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = interrupt.recv() => "SIGINT",
        _ = terminate.recv() => "SIGTERM",
    }
}

struct Settings {
    connections: usize,
    measure: Duration,
    rounds: usize,
    warmup: Duration,
}

impl Settings {
    fn from_env() -> anyhow::Result<Self> {
        fn number(name: &str, default: u64) -> anyhow::Result<u64> {
            match std::env::var(name) {
                Ok(value) => value
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .with_context(|| format!("{name}={value}: expected a positive integer")),
                Err(_) => Ok(default),
            }
        }
        Ok(Self {
            connections: usize::try_from(number("BENCH_CONNECTIONS", 16)?)?,
            measure: Duration::from_secs(number("BENCH_SECONDS", 5)?),
            rounds: usize::try_from(number("BENCH_ROUNDS", 3)?)?,
            warmup: Duration::from_secs(number("BENCH_WARMUP_SECONDS", 2)?),
        })
    }
}

async fn bench(settings: &Settings) -> anyhow::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("the repository root")?;
    // Declared first, dropped last: the servers are gone before their files.
    let scratch = tempfile::tempdir()?;
    let config = scratch.path().join("bench.toml");
    std::fs::write(
        &config,
        "[confirmation]\nauto_approve = [\"applyRefund\"]\n",
    )?;

    let mut serve = Command::new(env!("CARGO_BIN_EXE_skillhost"));
    serve
        .current_dir(root) // keys/trusted/, the demo trust store
        .args(["serve", "--listen", "127.0.0.1:0", "--skills", "skills"])
        .arg("--db")
        .arg(scratch.path().join("gateway.db"))
        .arg("--config")
        .arg(&config)
        .env_remove("SKILLHOST_API_KEYS")
        .env_remove("SKILLHOST_ADMIN_KEY");
    let mut native = Command::new(std::env::current_exe()?);
    native
        .arg(NATIVE_SERVER)
        .arg(scratch.path().join("native.db"));
    let targets = [
        Server::start("sandboxed", "skillhost serve", serve)?,
        Server::start("native", "axum, tools called in Rust", native)?,
    ];

    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    println!(
        "processRefund over HTTP: {} keep-alive connections, {} round(s) of {:?} per target \
         after {:?} warm-up; {cpus} CPU(s) shared by the servers and the load generator \
         (1 thread of this process): read the ratio; load average {}",
        settings.connections,
        settings.rounds,
        settings.measure,
        settings.warmup,
        load_average()
    );
    for server in &targets {
        println!(
            "  {:<9} {} pid {} on {}",
            server.label, server.what, server.pid, server.address
        );
    }
    // Let start-up settle (the watcher's first scan, freed compile buffers)
    // before reading the idle size.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle = targets.each_ref().map(|server| server.memory());

    for server in &targets {
        let mut sender = connect(server.address).await?;
        let (status, body) = exchange(&mut sender).await?;
        if status != StatusCode::OK {
            bail!(
                "{}: the first request answered {status}: {}",
                server.label,
                String::from_utf8_lossy(&body)
            );
        }
        let warmup = load(server.address, settings.connections, settings.warmup).await;
        if let Some(error) = warmup.errors.first() {
            bail!(
                "{}: warm-up failed ({} errors), first: {error}",
                server.label,
                warmup.error_count
            );
        }
    }

    let mut runs = [Runs::default(), Runs::default()];
    for round in 0..settings.rounds {
        // Sandboxed first in even rounds, native first in odd ones.
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for index in order {
            let server = &targets[index];
            let cpu_before = [cpu_time(server.pid), cpu_time(std::process::id())];
            let (sample, peak_rss_kib) = tokio::join!(
                load(server.address, settings.connections, settings.measure),
                peak_rss(server.pid, Instant::now() + settings.measure),
            );
            let cpu_after = [cpu_time(server.pid), cpu_time(std::process::id())];
            runs[index].add(Phase {
                sample,
                peak_rss_kib,
                server_cpu: cpu_after[0].saturating_sub(cpu_before[0]),
                generator_cpu: cpu_after[1].saturating_sub(cpu_before[1]),
                duration: settings.measure,
            });
        }
        let [sandboxed, native] = runs.each_ref().map(|runs| runs.per_round[round]);
        println!(
            "round {}: sandboxed {sandboxed:>8.0} req/s, native {native:>8.0} req/s, ratio {:.2}",
            round + 1,
            sandboxed / native
        );
    }
    let end = targets.each_ref().map(|server| server.memory());

    println!();
    println!(
        "{:<10} {:>8} {:>10} {:>10} {:>7} {:>16} {:>14}",
        "route", "req/s", "p50", "p99", "errors", "server CPU/req", "generator CPU"
    );
    for (server, runs) in targets.iter().zip(&mut runs) {
        runs.latencies.sort_unstable();
        println!(
            "{:<10} {:>8.0} {:>8.2}ms {:>8.2}ms {:>7} {:>14.0}µs {:>7.0}% core",
            server.label,
            runs.throughput(),
            runs.percentile(50) as f64 / 1e3,
            runs.percentile(99) as f64 / 1e3,
            runs.error_count,
            runs.server_cpu_per_request().as_secs_f64() * 1e6,
            runs.generator_cpu.as_secs_f64() / runs.measured.as_secs_f64() * 100.0,
        );
    }
    let ratio = runs[0].throughput() / runs[1].throughput();
    println!(
        "ratio sandboxed/native: {ratio:.2} by req/s (target >= 0.80: {}); {:.2} by server CPU \
         per request (what req/s would show with the CPUs the servers' alone)",
        if ratio >= 0.8 { "met" } else { "MISSED" },
        runs[1].server_cpu_per_request().as_secs_f64()
            / runs[0].server_cpu_per_request().as_secs_f64()
    );

    println!();
    println!(
        "{:<10} {:>12} {:>18} {:>12} {:>14} {:>16}",
        "memory", "idle VmRSS", "under load (peak)", "VmHWM", "idle RssAnon", "RssAnon at end"
    );
    for (index, server) in targets.iter().enumerate() {
        println!(
            "{:<10} {:>12} {:>18} {:>12} {:>14} {:>16}",
            server.label,
            mib(idle[index].rss_kib),
            mib(runs[index].peak_rss_kib),
            mib(end[index].hwm_kib),
            mib(idle[index].anon_kib),
            mib(end[index].anon_kib)
        );
    }
    println!(
        "(RssAnon: the process's own memory; the rest of VmRSS is file pages, mostly the \
         binary's code, shared and reclaimable)"
    );
    println!("load average at the end: {}", load_average());

    let mut failed = false;
    for (server, runs) in targets.iter().zip(&runs) {
        for error in &runs.errors {
            failed = true;
            eprintln!("{} error: {error}", server.label);
        }
    }
    if failed {
        bail!("some requests did not answer 200 with the expected refusal");
    }
    Ok(())
}

/// One target's measured rounds together.
#[derive(Default)]
struct Runs {
    /// Microseconds per request, every round.
    latencies: Vec<u64>,
    per_round: Vec<f64>,
    measured: Duration,
    error_count: usize,
    errors: Vec<String>,
    peak_rss_kib: u64,
    server_cpu: Duration,
    generator_cpu: Duration,
}

/// One target's measured phase in one round.
struct Phase {
    sample: Sample,
    peak_rss_kib: u64,
    /// CPU time the server and this process used during the phase.
    server_cpu: Duration,
    generator_cpu: Duration,
    duration: Duration,
}

impl Runs {
    fn add(&mut self, phase: Phase) {
        let Phase {
            sample,
            peak_rss_kib,
            server_cpu,
            generator_cpu,
            duration,
        } = phase;
        self.per_round
            .push(sample.latencies.len() as f64 / duration.as_secs_f64());
        self.latencies.extend(sample.latencies);
        self.measured += duration;
        self.error_count += sample.error_count;
        self.errors.extend(sample.errors);
        self.errors.truncate(ERRORS_SHOWN);
        self.peak_rss_kib = self.peak_rss_kib.max(peak_rss_kib);
        self.server_cpu += server_cpu;
        self.generator_cpu += generator_cpu;
    }

    fn throughput(&self) -> f64 {
        self.latencies.len() as f64 / self.measured.as_secs_f64()
    }

    fn server_cpu_per_request(&self) -> Duration {
        self.server_cpu / u32::try_from(self.latencies.len().max(1)).unwrap_or(u32::MAX)
    }

    /// Of the sorted latencies, in microseconds.
    fn percentile(&self, percent: usize) -> u64 {
        self.latencies
            .get(self.latencies.len() * percent / 100)
            .copied()
            .unwrap_or_default()
    }
}

/// What the connections of one load phase saw.
#[derive(Default)]
struct Sample {
    /// Microseconds per expected answer completed within the phase.
    latencies: Vec<u64>,
    error_count: usize,
    errors: Vec<String>,
}

impl Sample {
    fn error(&mut self, error: String) {
        self.error_count += 1;
        if self.errors.len() < ERRORS_SHOWN {
            self.errors.push(error);
        }
    }
}

/// `connections` connections sending requests back to back for `duration`.
/// Requests still in flight at the end are not counted.
async fn load(address: SocketAddr, connections: usize, duration: Duration) -> Sample {
    let deadline = Instant::now() + duration;
    let tasks: Vec<_> = (0..connections)
        .map(|_| tokio::spawn(connection(address, deadline)))
        .collect();
    let mut total = Sample::default();
    for task in tasks {
        let sample = task.await.unwrap_or_else(|panic| {
            let mut sample = Sample::default();
            sample.error(format!("connection task failed: {panic}"));
            sample
        });
        total.latencies.extend(sample.latencies);
        total.error_count += sample.error_count;
        total.errors.extend(sample.errors);
    }
    total.errors.truncate(ERRORS_SHOWN);
    total
}

async fn connection(address: SocketAddr, deadline: Instant) -> Sample {
    let mut sample = Sample::default();
    let mut sender = None;
    while Instant::now() < deadline {
        let open = match sender.as_mut() {
            Some(open) => open,
            None => match connect(address).await {
                Ok(open) => sender.insert(open),
                Err(error) => {
                    sample.error(format!("connecting: {error:#}"));
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let started = Instant::now();
        let outcome = exchange(open).await;
        let finished = Instant::now();
        if finished > deadline {
            break;
        }
        match outcome {
            Ok((StatusCode::OK, body)) if EXPECTED.iter().all(|part| contains(&body, part)) => {
                let micros = (finished - started).as_micros();
                sample
                    .latencies
                    .push(u64::try_from(micros).unwrap_or(u64::MAX));
            }
            Ok((status, body)) => {
                sample.error(format!("{status}: {}", String::from_utf8_lossy(&body)));
            }
            Err(error) => {
                sample.error(format!("{error:#}"));
                sender = None;
            }
        }
    }
    sample
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

async fn connect(address: SocketAddr) -> anyhow::Result<SendRequest<Full<Bytes>>> {
    let stream = TcpStream::connect(address).await?;
    stream.set_nodelay(true)?;
    let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
    // Drives the connection; ends when `sender` is dropped or the peer closes.
    tokio::spawn(connection);
    Ok(sender)
}

/// One invocation request on an open connection: the status and the body.
async fn exchange(sender: &mut SendRequest<Full<Bytes>>) -> anyhow::Result<(StatusCode, Bytes)> {
    let request = Request::post(INVOKE_PATH)
        .header(header::HOST, "127.0.0.1")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from_static(REQUEST_BODY)))?;
    sender.ready().await?;
    let response = sender.send_request(request).await?;
    let status = response.status();
    let body = response.into_body().collect().await?.to_bytes();
    Ok((status, body))
}

/// A server process; killed when dropped.
struct Server {
    label: &'static str,
    what: &'static str,
    child: Child,
    pid: u32,
    address: SocketAddr,
}

impl Server {
    /// Starts `command` and waits for the [`LISTENING`] line it prints on
    /// stderr; the rest of its stderr is passed through.
    fn start(
        label: &'static str,
        what: &'static str,
        mut command: Command,
    ) -> anyhow::Result<Self> {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting the {label} server: {command:?}"))?;
        let pid = child.id();
        let mut lines = BufReader::new(child.stderr.take().context("stderr is piped")?).lines();
        let address = loop {
            let Some(line) = lines.next().transpose()? else {
                let status = child.wait()?;
                bail!("the {label} server exited ({status}) before it listened");
            };
            eprintln!("[{label}] {line}");
            if let Some((_, rest)) = line.split_once(LISTENING) {
                let address = rest.split(['/', ' ']).next().unwrap_or_default();
                break address
                    .parse()
                    .with_context(|| format!("the {label} server's address in {line:?}"))?;
            }
        };
        // Keep draining: a full pipe would block the server's logging.
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                eprintln!("[{label}] {line}");
            }
        });
        Ok(Self {
            label,
            what,
            child,
            pid,
            address,
        })
    }

    fn memory(&self) -> Memory {
        Memory::of(self.pid)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A process's resident size now and its peak, from `/proc/<pid>/status`
/// (0 where that cannot be read, e.g. off Linux).
struct Memory {
    rss_kib: u64,
    hwm_kib: u64,
    /// Of `rss_kib`, the anonymous pages: heap, stacks, guest memories.
    anon_kib: u64,
}

impl Memory {
    fn of(pid: u32) -> Self {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap_or_default()
        };
        Self {
            rss_kib: field("VmRSS:"),
            hwm_kib: field("VmHWM:"),
            anon_kib: field("RssAnon:"),
        }
    }
}

/// The largest VmRSS of `pid` seen until `until`.
async fn peak_rss(pid: u32, until: Instant) -> u64 {
    let mut peak = 0;
    while Instant::now() < until {
        peak = peak.max(Memory::of(pid).rss_kib);
        tokio::time::sleep(MEMORY_SAMPLE_EVERY).await;
    }
    peak
}

/// User plus system CPU time of `pid`, all threads, from `/proc/<pid>/stat`
/// (zero where that cannot be read).
fn cpu_time(pid: u32) -> Duration {
    /// The unit of those fields: USER_HZ, 100 on the Linux ABIs we run on.
    const TICK: Duration = Duration::from_millis(10);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name, which is in parentheses and may hold
    // spaces: state is field 3, utime 14, stime 15.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or_else(Vec::new, |(_, rest)| rest.split_whitespace().collect());
    let ticks = |field: usize| {
        fields
            .get(field - 3)
            .and_then(|value| value.parse::<u32>().ok())
    };
    match (ticks(14), ticks(15)) {
        (Some(user), Some(system)) => TICK * (user + system),
        _ => Duration::ZERO,
    }
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// The 1, 5 and 15 minute load averages, as `uptime` shows them.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(
        |_| "unknown".to_owned(),
        |text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        },
    )
}

/// The baseline: processRefund's steps as a plain axum route.
mod native {
    use super::*;

    use axum::extract::State;
    use axum::routing::post;
    use axum::{Json, Router};
    use serde::Deserialize;
    use serde_json::{Value, json};

    use skillhost::tools::demo::{self, DemoDb};
    use skillhost::tools::{ToolError, ToolRegistry};

    /// Serves the native route on a loopback port and prints the address on
    /// stderr, as `skillhost serve` does.
    pub fn serve(db: &Path) -> anyhow::Result<()> {
        // The runtime `skillhost`'s main builds: multi-threaded, defaults.
        tokio::runtime::Runtime::new()?.block_on(async {
            let mut tools = ToolRegistry::new();
            demo::register_all(&mut tools, Arc::new(DemoDb::open(db)?))?;
            let app = Router::new()
                .route(INVOKE_PATH, post(invoke))
                .with_state(Arc::new(tools));
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            eprintln!("native processRefund {LISTENING}{}", listener.local_addr()?);
            axum::serve(listener, app).await?;
            Ok(())
        })
    }

    /// The skill's parameters, checked the way Rust code checks them.
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct Input {
        order_id: String,
        reason: String,
    }

    static RUNS: AtomicU64 = AtomicU64::new(0);

    /// The gateway's invocation answer (`gateway/skills.rs`), field for
    /// field; there is no component, so no digest, and no LLM, so no usage.
    async fn invoke(
        State(tools): State<Arc<ToolRegistry>>,
        Json(input): Json<Input>,
    ) -> Result<Json<Value>, (StatusCode, String)> {
        let result = process_refund(&tools, input)
            .await
            .map_err(|error| (StatusCode::UNPROCESSABLE_ENTITY, error))?;
        Ok(Json(json!({
            "object": "skill.invocation",
            "run": format!("run_{:032x}", RUNS.fetch_add(1, Ordering::Relaxed)),
            "skill": "processRefund",
            "version": env!("CARGO_PKG_VERSION"),
            "digest": null,
            "status": "done",
            "result": result,
            "usage": {"completion_tokens": 0, "prompt_tokens": 0, "total_tokens": 0},
        })))
    }

    /// processRefund's steps, branch for branch, with the same tool
    /// arguments and answers as the guest.
    async fn process_refund(tools: &ToolRegistry, input: Input) -> Result<Value, String> {
        let Input { order_id, reason } = input;
        let order = match tools.call("queryOrder", json!({"orderId": order_id})).await {
            Ok(order) => order,
            Err(ToolError::Rejected(_) | ToolError::Failed(_)) => {
                return Ok(not_refunded(
                    &order_id,
                    &format!(
                        "Order {order_id} was not found; the order number may be wrong. Please check it and try again."
                    ),
                ));
            }
            Err(error) => return Err(format!("queryOrder failed: {error}")),
        };
        let product = order["product"].as_str().unwrap_or("the product");
        let status = order["status"].as_str().unwrap_or("unknown");
        if !status.eq_ignore_ascii_case("delivered") {
            return Ok(json!({
                "orderId": order_id,
                "product": product,
                "status": status,
                "refunded": false,
                "message": format!(
                    "Order {order_id} ({product}) is currently {}; a refund can be requested only after the order has been delivered.",
                    status.replace('_', " "),
                ),
            }));
        }
        let refund = match tools
            .call(
                "applyRefund",
                json!({"orderId": order_id, "reason": reason}),
            )
            .await
        {
            Ok(refund) if refund["success"] != false => refund,
            Ok(refund) => {
                let why = refund["message"].as_str().unwrap_or("no reason given");
                return Ok(not_refunded(
                    &order_id,
                    &format!(
                        "The refund for order {order_id} ({product}) was not accepted: {why}."
                    ),
                ));
            }
            Err(ToolError::Rejected(message)) => {
                return Ok(not_refunded(
                    &order_id,
                    &format!(
                        "The refund for order {order_id} ({product}) was not submitted: {message}."
                    ),
                ));
            }
            Err(error) => return Err(format!("applyRefund failed: {error}")),
        };
        let refund_id = refund["refundId"].as_str().unwrap_or("(not given)");
        let arrival = refund["estimatedArrival"]
            .as_str()
            .unwrap_or("a few business days");
        Ok(json!({
            "orderId": order_id,
            "product": product,
            "refunded": true,
            "refundId": refund_id,
            "estimatedArrival": arrival,
            "message": format!(
                "Refund for order {order_id} ({product}) submitted: refund id {refund_id}, expected to arrive in {arrival}."
            ),
        }))
    }

    fn not_refunded(order_id: &str, message: &str) -> Value {
        json!({"orderId": order_id, "refunded": false, "message": message})
    }
}
