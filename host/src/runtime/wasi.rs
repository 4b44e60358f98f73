//! The WASI a guest gets: nothing to reach, and randomness and clocks that
//! repeat when an invocation runs again.
//!
//! Components from wasm32-wasip2, componentize-py or componentize-js import
//! WASI even when they never use it, so it is linked with an empty context
//! (no files, environment, arguments, stdin or network; stdout and stderr
//! captured into the log). What such a guest can still read is randomness
//! and time, and both may end up in a tool call's arguments (an idempotency
//! key, a timestamp). Steps suspended at a write that waits for approval run
//! again from the start and must make the same calls, so every attempt of
//! one invocation shares its [`WasiSources`]: the same random bytes, and the
//! clock readings the first attempt took, in order.

use std::cell::Cell;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::AsyncWrite;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxBuilder};

/// Captured stdout or stderr kept per stream. Beyond this the guest's writes
/// still succeed and what they carry is dropped (and counted): a guest
/// printing more than this is chatty, not hostile, and a failed write would
/// end it (Rust's `println!` panics, Python's `print` raises).
const CAPTURED_OUTPUT_BYTES: usize = 64 << 10;
/// What one write may carry, as wasmtime's own streams allow: the host
/// allocates that much for a guest's `write-zeroes`.
const WRITE_PERMIT_BYTES: usize = 64 << 10;
/// Random bytes one WASI call may ask for; a larger request traps. The host
/// allocates them before the guest's memory limit applies, so wasmtime's
/// 64 MiB default would let each invocation make the host allocate that.
/// Default: 1 MiB — keys and nonces are tens of bytes.
const RANDOM_BYTES_PER_CALL: u64 = 1 << 20;
/// WASI resources (streams, pollables) a guest may hold at once. Each is host
/// memory outside the guest's memory limit, and wasmtime's default of a
/// million would let one invocation hold hundreds of MiB of it. Default:
/// 10,000 — a WASI guest holds a handful; a guest creating more traps.
const RESOURCES: usize = 10_000;
/// Readings recorded per clock and invocation. A guest reading the clock in
/// a loop must not grow host memory without bound; an attempt that replays
/// past this many readings gets live ones (and may then make other calls).
const RECORDED_READINGS: usize = 4096;

/// The table of the resources WASI hands a guest (the store's, so every
/// store gets one). Allocates nothing until a guest that uses WASI creates
/// a resource.
pub(super) fn resource_table() -> ResourceTable {
    let mut table = ResourceTable::new();
    table.set_max_capacity(RESOURCES);
    table
}

/// A WASI context that grants nothing, built only for guests that use WASI.
pub(super) struct SandboxWasi {
    pub(super) ctx: WasiCtx,
    pub(super) stdout: CapturedOutput,
    pub(super) stderr: CapturedOutput,
}

impl SandboxWasi {
    pub(super) fn new(sources: &WasiSources) -> Self {
        let stdout = CapturedOutput::default();
        let stderr = CapturedOutput::default();
        let mut builder = WasiCtxBuilder::new();
        // Fail closed: every capability is off unless listed here. The
        // builder's defaults already grant no files, env, args or stdin; we
        // also turn off every socket and name lookup explicitly.
        builder
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .max_random_size(RANDOM_BYTES_PER_CALL);
        sources.install(&mut builder);
        Self {
            ctx: builder.build(),
            stdout,
            stderr,
        }
    }
}

/// A guest's stdout or stderr: the first [`CAPTURED_OUTPUT_BYTES`] kept,
/// the rest accepted and counted. Clones share what was written.
#[derive(Clone, Default)]
pub(super) struct CapturedOutput {
    written: Arc<Mutex<Captured>>,
}

/// What a guest wrote to one stream.
#[derive(Default)]
pub(super) struct Captured {
    /// The first [`CAPTURED_OUTPUT_BYTES`].
    pub(super) kept: Vec<u8>,
    /// How many bytes past those were dropped.
    pub(super) dropped: usize,
}

impl CapturedOutput {
    /// What was written so far, taken out of the stream.
    pub(super) fn take(&self) -> Captured {
        std::mem::take(&mut self.captured())
    }

    fn captured(&self) -> std::sync::MutexGuard<'_, Captured> {
        self.written.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_bytes(&self, bytes: &[u8]) {
        let mut captured = self.captured();
        let room = CAPTURED_OUTPUT_BYTES - captured.kept.len();
        let (kept, dropped) = bytes.split_at(bytes.len().min(room));
        captured.kept.extend_from_slice(kept);
        captured.dropped += dropped.len();
    }
}

#[async_trait::async_trait]
impl OutputStream for CapturedOutput {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.write_bytes(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(WRITE_PERMIT_BYTES)
    }
}

#[async_trait::async_trait]
impl Pollable for CapturedOutput {
    /// Always ready: a write never waits.
    async fn ready(&mut self) {}
}

/// `StdoutStream` asks for tokio's writer too (WASI 0.3 writes through it).
impl AsyncWrite for CapturedOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.write_bytes(bytes);
        Poll::Ready(Ok(bytes.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl IsTerminal for CapturedOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CapturedOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

/// Where a WASI guest's randomness and clocks come from during one
/// invocation: a 256-bit seed drawn from the host's CSPRNG (so the bytes are
/// as unpredictable as the host's own) and a record of the clock readings.
///
/// Cloning shares the record. Each attempt run with a clone reads the same
/// random bytes, and its first clock readings are those the first attempt
/// took, in order (up to 4096 per clock); past them the
/// clocks are live again (and recorded).
///
/// Serialized (for a run kept on disk while it waits for a person), it is
/// the seed and the readings so far: whoever reads it can tell the guest's
/// random bytes, so it is kept only where the host's own state is.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
#[serde(into = "SourcesRecord", try_from = "SourcesRecord")]
pub struct WasiSources {
    seed: [u8; 32],
    /// The monotonic clock's zero, shared so that it never goes back from
    /// one attempt to the next.
    origin: Instant,
    wall: Arc<Mutex<Vec<Duration>>>,
    monotonic: Arc<Mutex<Vec<u64>>>,
}

impl WasiSources {
    /// Sources for a new invocation.
    pub fn fresh() -> Self {
        let mut seed = [0; 32];
        rand::rng().fill_bytes(&mut seed);
        Self {
            seed,
            origin: Instant::now(),
            wall: Arc::default(),
            monotonic: Arc::default(),
        }
    }

    fn install(&self, builder: &mut WasiCtxBuilder) {
        let mut secure = StdRng::from_seed(self.seed);
        // The insecure generator and seed come from the secure stream, so
        // they too are the same on every attempt.
        let insecure = StdRng::from_rng(&mut secure);
        let insecure_seed = u128::from(secure.next_u64()) << 64 | u128::from(secure.next_u64());
        let origin = self.origin;
        builder
            .secure_random(secure)
            .insecure_random(insecure)
            .insecure_random_seed(insecure_seed)
            .wall_clock(Replayed::new(&self.wall, || {
                SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap_or_default()
            }))
            .monotonic_clock(Replayed::new(&self.monotonic, move || {
                u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
            }));
    }
}

/// [`WasiSources`] as written down.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SourcesRecord {
    /// 64 hex digits.
    seed: String,
    wall: Vec<Duration>,
    /// Nanoseconds since the monotonic clock's zero.
    monotonic: Vec<u64>,
}

impl From<WasiSources> for SourcesRecord {
    fn from(sources: WasiSources) -> Self {
        fn recorded<T: Clone>(readings: &Mutex<Vec<T>>) -> Vec<T> {
            readings
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        }
        Self {
            seed: hex::encode(sources.seed),
            wall: recorded(&sources.wall),
            monotonic: recorded(&sources.monotonic),
        }
    }
}

impl TryFrom<SourcesRecord> for WasiSources {
    type Error = String;

    fn try_from(record: SourcesRecord) -> Result<Self, String> {
        let mut seed = [0; 32];
        hex::decode_to_slice(&record.seed, &mut seed)
            .map_err(|error| format!("seed: {error} (64 hex digits expected)"))?;
        // The clock's zero is placed so that it reads on from the last
        // reading: it never goes back, here or in a later attempt.
        let elapsed = Duration::from_nanos(record.monotonic.iter().copied().max().unwrap_or(0));
        let now = Instant::now();
        Ok(Self {
            seed,
            origin: now.checked_sub(elapsed).unwrap_or(now),
            wall: Arc::new(Mutex::new(record.wall)),
            monotonic: Arc::new(Mutex::new(record.monotonic)),
        })
    }
}

/// Without the seed: the guest's random bytes are as secret as the host's.
impl fmt::Debug for WasiSources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WasiSources")
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

/// A clock whose first readings come from a shared record, then from the
/// live clock (recorded for later attempts, up to [`RECORDED_READINGS`]).
struct Replayed<T> {
    record: Arc<Mutex<Vec<T>>>,
    /// How many readings this attempt has taken.
    taken: Cell<usize>,
    live: Box<dyn Fn() -> T + Send>,
}

impl<T: Copy> Replayed<T> {
    fn new(record: &Arc<Mutex<Vec<T>>>, live: impl Fn() -> T + Send + 'static) -> Self {
        Self {
            record: record.clone(),
            taken: Cell::new(0),
            live: Box::new(live),
        }
    }

    fn read(&self) -> T {
        let mut record = self.record.lock().unwrap_or_else(PoisonError::into_inner);
        let taken = self.taken.replace(self.taken.get() + 1);
        match record.get(taken) {
            Some(&recorded) => recorded,
            None => {
                let reading = (self.live)();
                if record.len() < RECORDED_READINGS {
                    record.push(reading);
                }
                reading
            }
        }
    }
}

/// Both clocks read in nanoseconds.
const RESOLUTION_NANOS: u64 = 1;

impl HostWallClock for Replayed<Duration> {
    fn resolution(&self) -> Duration {
        Duration::from_nanos(RESOLUTION_NANOS)
    }

    fn now(&self) -> Duration {
        self.read()
    }
}

impl HostMonotonicClock for Replayed<u64> {
    fn resolution(&self) -> u64 {
        RESOLUTION_NANOS
    }

    fn now(&self) -> u64 {
        self.read()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_past_the_captured_output_succeed_and_are_counted() {
        let mut output = CapturedOutput::default();
        let line = Bytes::from(vec![b'x'; 4096]);
        for _ in 0..40 {
            assert_eq!(output.check_write().unwrap(), WRITE_PERMIT_BYTES);
            output.write(line.clone()).expect("the write succeeds");
        }
        let captured = output.take();
        assert_eq!(captured.kept.len(), CAPTURED_OUTPUT_BYTES);
        assert_eq!(captured.dropped, 40 * 4096 - CAPTURED_OUTPUT_BYTES);
    }

    /// A clock that advances by one at each reading, from `start`.
    fn ticking(start: u64) -> impl Fn() -> u64 + Send {
        let next = Mutex::new(start);
        move || {
            let mut next = next.lock().unwrap();
            *next += 1;
            *next
        }
    }

    #[test]
    fn written_down_and_read_back_the_sources_give_the_same_bytes_and_readings() {
        let sources = WasiSources::fresh();
        sources.monotonic.lock().unwrap().extend([5, 7_000_000]);
        sources
            .wall
            .lock()
            .unwrap()
            .push(Duration::from_secs(1_780_000_000));
        let text = serde_json::to_string(&sources).unwrap();
        let back: WasiSources = serde_json::from_str(&text).unwrap();
        assert_eq!(back.seed, sources.seed);
        assert_eq!(*back.monotonic.lock().unwrap(), [5, 7_000_000]);
        assert_eq!(
            *back.wall.lock().unwrap(),
            [Duration::from_secs(1_780_000_000)]
        );
        // The clock reads on from the last reading, never back.
        assert!(back.origin.elapsed() >= Duration::from_nanos(7_000_000));

        let short = text.replace(&hex::encode(sources.seed), "abcd");
        let error = serde_json::from_str::<WasiSources>(&short).err().unwrap();
        assert!(error.to_string().contains("seed"), "{error}");
    }

    #[test]
    fn a_later_attempt_reads_the_recorded_times_then_the_live_clock() {
        let record = Arc::default();
        let first = Replayed::new(&record, ticking(0));
        assert_eq!((first.now(), first.now()), (1, 2));

        let again = Replayed::new(&record, ticking(100));
        assert_eq!(
            (again.now(), again.now()),
            (1, 2),
            "the first attempt's readings"
        );
        assert_eq!(again.now(), 101, "live past the record");
        assert_eq!(*record.lock().unwrap(), [1, 2, 101]);
    }

    #[test]
    fn a_clock_read_in_a_loop_records_a_bounded_number_of_readings() {
        let record = Arc::default();
        let clock = Replayed::new(&record, ticking(0));
        for _ in 0..RECORDED_READINGS + 10 {
            clock.now();
        }
        assert_eq!(record.lock().unwrap().len(), RECORDED_READINGS);
        assert_eq!(clock.now(), RECORDED_READINGS as u64 + 11, "still live");
    }
}
