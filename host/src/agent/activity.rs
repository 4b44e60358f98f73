//! Which runs are at work: what a shutdown waits for ([`Agent::idle`]).
//!
//! A run is at work from its start to its end, except while it waits for a
//! person's answer. It waits from the moment its confirmation opens until
//! the moment the confirmation stops waiting — answered, expired or
//! withdrawn — both marked on the confirmation's side, so an answer puts
//! its run back to work before the run itself has woken: nothing can see
//! an approved run idle and stop the process under it.
//!
//! [`Agent::idle`]: super::Agent::idle

use std::sync::Arc;

use tokio::sync::watch;

/// The runs of one agent: how many are running, and how many of those
/// wait for an answer. Cheap to clone; clones share the counts.
#[derive(Clone)]
pub(crate) struct Activity(Arc<watch::Sender<Counts>>);

#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    runs: usize,
    waiting: usize,
}

impl Counts {
    fn at_work(self) -> usize {
        // A run waits on one confirmation at a time (its calls are made one
        // by one), so `waiting` never exceeds `runs`, except for
        // confirmations opened outside any run (unit tests).
        self.runs.saturating_sub(self.waiting)
    }
}

impl Default for Activity {
    fn default() -> Self {
        Self(Arc::new(watch::Sender::new(Counts::default())))
    }
}

impl Activity {
    /// Counts a run from now until the returned guard is dropped, with the
    /// run's task, however the task ends.
    pub(crate) fn run_started(&self) -> Running {
        self.0.send_modify(|counts| counts.runs += 1);
        Running(self.clone())
    }

    /// Counts a run as waiting for an answer until the returned guard is
    /// dropped, with its confirmation's slot.
    pub(crate) fn waiting(&self) -> Waiting {
        self.0.send_modify(|counts| counts.waiting += 1);
        Waiting(self.clone())
    }

    /// Runs at work now.
    pub(crate) fn at_work(&self) -> usize {
        self.0.borrow().at_work()
    }

    /// Resolves once no run is at work: at once if none is now.
    pub(crate) fn idle(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut counts = self.0.subscribe();
        async move {
            // The sender lives as long as `self`'s clones; should the last
            // go, no run is left to wait for either.
            let _ = counts.wait_for(|counts| counts.at_work() == 0).await;
        }
    }
}

/// One run, counted while its task lives ([`Activity::run_started`]).
pub(crate) struct Running(Activity);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.0.send_modify(|counts| counts.runs -= 1);
    }
}

/// One run waiting for an answer ([`Activity::waiting`]).
pub(crate) struct Waiting(Activity);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.0.send_modify(|counts| counts.waiting -= 1);
    }
}

#[cfg(test)]
mod tests {
    use futures::FutureExt as _;

    use super::*;

    #[test]
    fn a_run_is_at_work_until_it_ends_except_while_it_waits() {
        let activity = Activity::default();
        assert!(activity.idle().now_or_never().is_some(), "no run yet");

        let run = activity.run_started();
        assert_eq!(activity.at_work(), 1);
        let idle = activity.idle();
        let waiting = activity.waiting();
        assert_eq!(activity.at_work(), 0);
        assert!(
            idle.now_or_never().is_some(),
            "a waiting run is not at work"
        );

        drop(waiting);
        assert_eq!(activity.at_work(), 1);
        let mut idle = Box::pin(activity.idle());
        assert!((&mut idle).now_or_never().is_none());
        drop(run);
        assert!(idle.now_or_never().is_some(), "the run ended");
        assert_eq!(activity.at_work(), 0);
    }
}
