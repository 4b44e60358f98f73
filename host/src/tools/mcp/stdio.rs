//! MCP's stdio transport: the host starts the server as a child process
//! and writes JSON-RPC messages to its standard input, one a line; the
//! answers come back, one a line, on its standard output, and what it
//! writes on standard error goes to the log. The server may say at any
//! time that its tools changed; the session is told.
//!
//! The process gets only `PATH`, `HOME` and its configured `env`, and is
//! killed when the host no longer holds its tools. A process that has
//! ended is started again by the next call (a new session, as for a
//! forgotten HTTP session); a call it was running when it ended fails, and
//! is not sent again, since the tool may have acted.

use std::collections::{BTreeMap, HashMap};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::sync::{Notify, oneshot};

use super::{Failure, Request, server_message};
use crate::tools::http::{MAX_RESPONSE_BYTES, snippet};

/// The variables of the host's environment a server process inherits: to
/// find programs (`npx`, `uvx`) and their caches.
const INHERITED_ENV: [&str; 2] = ["PATH", "HOME"];

/// Bytes of one line of the server's standard error logged at most.
const MAX_LOG_LINE: usize = 4096;

/// How long the reader waits, once the server's output has closed, for
/// the last of its standard error: the reason it ended.
const LAST_WORDS_WAIT: Duration = Duration::from_millis(500);

/// How to start a server.
pub(super) struct Program {
    pub(super) server: String,
    pub(super) command: String,
    pub(super) args: Vec<String>,
    /// Its whole environment but [`INHERITED_ENV`], `${VAR}`s replaced.
    pub(super) env: BTreeMap<String, String>,
    /// How long a request may wait for its answer.
    pub(super) timeout: Duration,
}

/// A server run as a child process.
pub(super) struct Transport {
    program: Program,
    /// Told when the server says its tools changed.
    changed: Arc<Notify>,
    /// The process last started; replaced by [`Transport::start`].
    process: Mutex<Option<Arc<Process>>>,
}

/// One run of the server.
struct Process {
    pipes: Arc<Pipes>,
    /// Killed when dropped: when the tools, or a newer process, replace it.
    _child: Child,
}

/// What the process's reader shares with the requests.
struct Pipes {
    stdin: tokio::sync::Mutex<ChildStdin>,
    waiting: Mutex<Waiting>,
    changed: Arc<Notify>,
}

#[derive(Default)]
struct Waiting {
    /// The requests sent and not yet answered, by id.
    answers: HashMap<u64, oneshot::Sender<Result<Value, String>>>,
    /// Why the process's output ended, once it has.
    ended: Option<String>,
}

impl Transport {
    pub(super) fn new(program: Program, changed: Arc<Notify>) -> Self {
        Self {
            program,
            changed,
            process: Mutex::new(None),
        }
    }

    /// Starts the server, in place of the process before, if any.
    pub(super) fn start(&self) -> Result<(), String> {
        let program = &self.program;
        let mut command = tokio::process::Command::new(&program.command);
        command.args(&program.args).env_clear();
        for name in INHERITED_ENV {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
        let mut child = command
            .envs(&program.env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start it: {e}"))?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err("cannot start it: its standard streams are not piped".into());
        };
        let pipes = Arc::new(Pipes {
            stdin: tokio::sync::Mutex::new(stdin),
            waiting: Mutex::new(Waiting::default()),
            changed: Arc::clone(&self.changed),
        });
        let last_words = tokio::spawn(log_stderr(program.server.clone(), BufReader::new(stderr)));
        tokio::spawn(read_messages(
            program.server.clone(),
            Arc::clone(&pipes),
            BufReader::new(stdout),
            last_words,
        ));
        let process = Process {
            pipes,
            _child: child,
        };
        *self.process.lock().unwrap() = Some(Arc::new(process));
        Ok(())
    }

    /// Sends `request`; the message answering it.
    pub(super) async fn exchange(&self, request: &Request<'_>) -> Result<Value, Failure> {
        let process = self.process.lock().unwrap().clone();
        let Some(process) = process else {
            return Err(Failure::SessionGone(
                "the server process is not started".into(),
            ));
        };
        let (sender, answer) = oneshot::channel();
        {
            let mut waiting = process.pipes.waiting.lock().unwrap();
            if let Some(ended) = &waiting.ended {
                return Err(Failure::SessionGone(ended.clone()));
            }
            waiting.answers.insert(request.id, sender);
        }
        let line = serde_json::to_vec(request).map_err(|e| Failure::Other(e.to_string()))?;
        let timeout = self.program.timeout;
        let Ok(sent) = tokio::time::timeout(timeout, process.pipes.send(line)).await else {
            // Part of the line may be written: nothing after it would
            // read right. The next call starts the server again.
            let reason = format!(
                "the server process did not read its input for {} s",
                timeout.as_secs()
            );
            self.retire(&process, &reason);
            return Err(Failure::Other(reason));
        };
        if let Err(unread) = sent {
            // A line not written whole is no message: the server never saw
            // it. Its reader tells why the process ended.
            let ended = tokio::time::timeout(timeout, answer).await;
            let reason = match ended {
                Ok(Ok(Err(reason))) => reason,
                _ => unread,
            };
            return Err(Failure::SessionGone(reason));
        }
        match tokio::time::timeout(timeout, answer).await {
            Ok(Ok(answered)) => answered.map_err(Failure::Other),
            Ok(Err(_)) => Err(Failure::Other("the server process ended".into())),
            Err(_) => {
                process.pipes.forget(request.id);
                let cancel = json!({"requestId": request.id, "reason": "timed out"});
                let pipes = Arc::clone(&process.pipes);
                // Best effort, and apart: the caller learns of the timeout
                // either way, and a server that reads nothing holds the
                // notification, not the caller.
                tokio::spawn(async move {
                    let cancelled = pipes.notify("notifications/cancelled", cancel);
                    let _ = tokio::time::timeout(timeout, cancelled).await;
                });
                Err(Failure::Other(format!(
                    "no answer within {} s",
                    timeout.as_secs()
                )))
            }
        }
    }

    /// Ends `process`, failing what waits on it, and forgets it if it is
    /// still the current one: it is killed once nothing holds it.
    fn retire(&self, process: &Arc<Process>, reason: &str) {
        process.pipes.end(reason);
        let mut current = self.process.lock().unwrap();
        if current
            .as_ref()
            .is_some_and(|now| Arc::ptr_eq(now, process))
        {
            *current = None;
        }
    }

    /// Sends the notification `method`.
    pub(super) async fn notify(&self, method: &str) -> Result<(), String> {
        let process = self.process.lock().unwrap().clone();
        let process = process.ok_or("the server process is not started")?;
        process
            .pipes
            .notify(method, json!({}))
            .await
            .map_err(|reason| format!("{method}: {reason}"))
    }
}

impl Pipes {
    /// Writes `message` and its line end.
    async fn send(&self, mut message: Vec<u8>) -> Result<(), String> {
        message.push(b'\n');
        let mut stdin = self.stdin.lock().await;
        stdin
            .write_all(&message)
            .await
            .map_err(|e| format!("the server process does not read its input: {e}"))
    }

    async fn notify(&self, method: &str, params: Value) -> Result<(), String> {
        let message = json!({"jsonrpc": "2.0", "method": method, "params": params});
        self.send(message.to_string().into_bytes()).await
    }

    /// Stops waiting for the answer to `id`.
    fn forget(&self, id: u64) {
        self.waiting.lock().unwrap().answers.remove(&id);
    }

    /// Takes in one line of the server's output: an answer goes to its
    /// request; a message of the server's own is taken as
    /// [`server_message`] says, its reply returned.
    fn take_line(&self, server: &str, line: &[u8]) -> Option<Value> {
        let Ok(message) = serde_json::from_slice::<Value>(line) else {
            let text = String::from_utf8_lossy(line);
            tracing::warn!(server, line = %snippet(text.trim_end()), "MCP server wrote a line that is not JSON; ignored");
            return None;
        };
        if message.get("method").is_some() {
            return server_message(server, &message, &self.changed);
        }
        let id = message.get("id");
        let waiting = id
            .and_then(Value::as_u64)
            .and_then(|id| self.waiting.lock().unwrap().answers.remove(&id));
        match waiting {
            // The request may have timed out meanwhile.
            Some(request) => drop(request.send(Ok(message))),
            None => tracing::debug!(server, ?id, "MCP answer to no waiting request"),
        }
        None
    }

    /// Fails every waiting request, and each later one, with `reason`.
    fn end(&self, reason: &str) {
        let mut waiting = self.waiting.lock().unwrap();
        waiting.ended = Some(reason.to_owned());
        for (_, request) in waiting.answers.drain() {
            let _ = request.send(Err(reason.to_owned()));
        }
    }
}

/// Reads the server's output until it ends, then ends `pipes` saying why,
/// with the last line the server wrote on standard error.
async fn read_messages(
    server: String,
    pipes: Arc<Pipes>,
    mut stdout: impl AsyncBufRead + Unpin,
    last_words: tokio::task::JoinHandle<Option<String>>,
) {
    let mut line = Vec::new();
    let why = loop {
        line.clear();
        let limit = MAX_RESPONSE_BYTES as u64 + 1;
        match (&mut stdout).take(limit).read_until(b'\n', &mut line).await {
            Ok(0) => break "it closed its output".to_owned(),
            Err(e) => break format!("reading its output failed: {e}"),
            Ok(_) if line.len() > MAX_RESPONSE_BYTES => {
                break format!("it wrote a line over {MAX_RESPONSE_BYTES} bytes");
            }
            Ok(_) => {
                if let Some(reply) = pipes.take_line(&server, &line) {
                    // Written apart: a server blocked writing its output
                    // while its input is full would otherwise hold both.
                    let pipes = Arc::clone(&pipes);
                    tokio::spawn(async move {
                        // Should the input be closed, the reader learns it soon enough.
                        let _ = pipes.send(reply.to_string().into_bytes()).await;
                    });
                }
            }
        }
    };
    let last_words = tokio::time::timeout(LAST_WORDS_WAIT, last_words).await;
    let reason = match last_words {
        Ok(Ok(Some(last))) => format!("the server process ended ({why}); it last wrote: {last}"),
        _ => format!("the server process ended ({why})"),
    };
    tracing::warn!(server, "{reason}");
    pipes.end(&reason);
}

/// Logs each line the server writes on standard error; the last one.
async fn log_stderr(server: String, mut stderr: impl AsyncBufRead + Unpin) -> Option<String> {
    let mut last = None;
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut stderr)
            .take(MAX_LOG_LINE as u64)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) | Err(_) => return last,
            Ok(_) => {
                let text = String::from_utf8_lossy(&line).trim_end().to_owned();
                if !text.is_empty() {
                    tracing::info!(server, "MCP server: {text}");
                    last = Some(snippet(&text));
                }
            }
        }
    }
}
