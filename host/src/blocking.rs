//! Work moved off the async executor, onto Tokio's blocking thread pool.

use std::any::Any;

/// A panic's payload, as [`std::panic::catch_unwind`] gives it.
pub(crate) type Panic = Box<dyn Any + Send>;

/// Runs `work` on the blocking thread pool and gives its result, or the
/// payload of its panic.
///
/// The pool drops work it has not started only as its runtime shuts down.
/// The task waiting for it then never resumes, and goes with the runtime
/// having acted on nothing: a skill file's sync records no refusal, a tool
/// call no failure, that only the shutdown caused.
pub(crate) async fn off_executor<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Panic> {
    match tokio::task::spawn_blocking(work).await {
        Ok(done) => Ok(done),
        Err(error) => match error.try_into_panic() {
            Ok(panic) => Err(panic),
            Err(_cancelled) => std::future::pending().await,
        },
    }
}

/// What a panic said, when its payload is a message.
pub(crate) fn panic_message(panic: &Panic) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("no message")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panic_comes_back_with_its_message() {
        let panic = off_executor(|| panic!("bad bytes")).await.unwrap_err();
        assert_eq!(panic_message(&panic), "bad bytes");
        assert_eq!(off_executor(|| 7).await.unwrap(), 7);
    }

    /// At shutdown the pool cancels the work it has not started: the tasks
    /// waiting for it are dropped, never resumed with an error. The waiters
    /// race the workers' own shutdown, so the race is run many times.
    #[test]
    fn work_cancelled_by_the_shutdown_never_resumes_its_waiters() {
        let (resumed, told) = std::sync::mpsc::channel();
        for _ in 0..50 {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .max_blocking_threads(1)
                .build()
                .unwrap();
            let (started, running) = std::sync::mpsc::channel();
            runtime.spawn(async move {
                // Holds the only blocking thread while the runtime goes.
                let _busy = tokio::task::spawn_blocking(move || {
                    started.send(()).unwrap();
                    std::thread::sleep(std::time::Duration::from_millis(5));
                });
            });
            for _ in 0..20 {
                let resumed = resumed.clone();
                runtime.spawn(async move {
                    let queued = off_executor(|| ()).await;
                    resumed.send(queued.is_ok()).unwrap();
                });
            }
            running.recv().unwrap();
            drop(runtime);
        }
        drop(resumed);
        let cancelled = told.iter().filter(|ran| !ran).count();
        assert_eq!(cancelled, 0, "waiters were resumed with the cancellation");
    }
}
