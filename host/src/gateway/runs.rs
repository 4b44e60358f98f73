//! Runs the gateway holds between requests.
//!
//! A request drives its run until the run ends or waits for a person. A run
//! that waits is *parked* under its confirmation's id, and the request that
//! answers that confirmation (`POST /v1/confirmations/{id}`) takes it back
//! and drives it on. A run nobody holds any more — its request timed out,
//! its streaming client went away — is aborted, so it spends no more tokens
//! and withdraws its confirmations.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, SystemTime};

use crate::agent::llm::Usage;
use crate::agent::{AgentError, AgentEvent, Confirmations, PendingConfirmation, RunHandle, RunId};
use crate::skills::SkillVersion;

use axum::http::StatusCode;
use tokio::task::AbortHandle;

use super::AppState;
use super::errors::{ApiError, ErrorType};
use super::openai::CompletionMeta;

/// A run the gateway drives; aborted when dropped while it still runs,
/// unless a person's answer resumed it ([`OwnedRun::outlive_its_request`]).
pub struct OwnedRun<T: Send + 'static> {
    handle: Option<RunHandle<T>>,
    /// Tokens of the run so far (see [`OwnedRun::usage`]), from its usage
    /// events.
    usage: Usage,
    abort_on_drop: bool,
}

/// Where a run stands after [`OwnedRun::advance`] or [`OwnedRun::settle`].
pub enum Progress<T: Send + 'static> {
    /// The run ended.
    Finished {
        result: Result<T, AgentError>,
        usage: Usage,
    },
    /// The run waits for `pending` to be answered.
    Pending {
        run: OwnedRun<T>,
        pending: PendingConfirmation,
    },
}

impl<T: Send + 'static> OwnedRun<T> {
    pub fn new(handle: RunHandle<T>) -> Self {
        Self {
            handle: Some(handle),
            usage: Usage::default(),
            abort_on_drop: true,
        }
    }

    /// The run's id, while the run is held.
    pub fn id(&self) -> Option<&RunId> {
        self.handle.as_ref().map(|handle| &handle.id)
    }

    /// Tokens of the run so far, or since [`Self::count_usage_afresh`].
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// Counts the run's tokens from zero: a new response begins, which
    /// reports only what it used (OpenAI's `usage` is per response).
    pub fn count_usage_afresh(&mut self) {
        self.usage = Usage::default();
    }

    /// Reads the run's events, showing each to `on_event`, until it waits
    /// for a person or ends.
    pub async fn advance(mut self, mut on_event: impl FnMut(&AgentEvent)) -> Progress<T> {
        while let Some(handle) = self.handle.as_mut() {
            let Some(event) = handle.events.recv().await else {
                break;
            };
            if let Some(pending) = take(&mut self.usage, event, &mut on_event) {
                return Progress::Pending { run: self, pending };
            }
        }
        self.finish().await
    }

    /// Like [`OwnedRun::advance`] with nothing to show: sleeps through the
    /// run's events and wakes only when it waits for a person or ends
    /// ([`RunHandle::settle`]), which spares a wake-up per event.
    pub async fn settle(mut self) -> Progress<T> {
        while let Some(handle) = self.handle.as_mut() {
            // Looked at before reading: every event of an ended run is
            // queued by the time it is marked ended.
            let ended = handle.has_ended();
            while let Ok(event) = handle.events.try_recv() {
                if let Some(pending) = take(&mut self.usage, event, &mut |_| {}) {
                    return Progress::Pending { run: self, pending };
                }
            }
            if ended {
                break;
            }
            handle.settle().await;
        }
        self.finish().await
    }

    /// The run's result, once its events are read.
    async fn finish(mut self) -> Progress<T> {
        let usage = self.usage;
        let result = match self.handle.take() {
            Some(handle) => handle.result().await,
            None => Err(AgentError::Aborted("the run was already finished".into())),
        };
        Progress::Finished { result, usage }
    }

    /// Lets the run go on to its end even if the request driving it goes
    /// away: what a person approved (or rejected) is carried out whether or
    /// not their client stays to read the result.
    fn outlive_its_request(&mut self) {
        self.abort_on_drop = false;
    }
}

impl<T: Send + 'static> Drop for OwnedRun<T> {
    fn drop(&mut self) {
        if let Some(handle) = &self.handle
            && self.abort_on_drop
        {
            handle.abort();
        }
    }
}

/// Adds `event`'s tokens to `usage` and shows it to `on_event`; returns the
/// confirmation it announces, if it does.
fn take(
    usage: &mut Usage,
    event: AgentEvent,
    on_event: &mut impl FnMut(&AgentEvent),
) -> Option<PendingConfirmation> {
    if let AgentEvent::Usage { usage: used, .. } = &event {
        usage.add(used);
    }
    on_event(&event);
    match event {
        AgentEvent::ConfirmationPending(pending) => Some(pending),
        _ => None,
    }
}

/// A chat run and what its completions carry.
pub struct ChatRun {
    pub run: OwnedRun<crate::agent::RunOutput>,
    pub meta: CompletionMeta,
}

/// A direct skill invocation and the version it runs.
pub struct InvokeRun {
    pub run: OwnedRun<crate::agent::SkillOutput>,
    pub skill: SkillVersion,
}

/// A run waiting for a person.
pub enum Parked {
    Chat(ChatRun),
    Invoke(InvokeRun),
}

impl From<ChatRun> for Parked {
    fn from(chat: ChatRun) -> Self {
        Self::Chat(chat)
    }
}

impl From<InvokeRun> for Parked {
    fn from(invoke: InvokeRun) -> Self {
        Self::Invoke(invoke)
    }
}

/// A run that a person's answer can resume.
pub trait Resumable: Into<Parked> {
    /// The run, resumed by an answer: it goes on to its end even if the
    /// request driving it goes away.
    fn answered(self) -> Self;
}

impl Resumable for ChatRun {
    fn answered(mut self) -> Self {
        self.run.outlive_its_request();
        self
    }
}

impl Resumable for InvokeRun {
    fn answered(mut self) -> Self {
        self.run.outlive_its_request();
        self
    }
}

impl Parked {
    /// See [`Resumable::answered`].
    pub fn answered(self) -> Self {
        match self {
            Self::Chat(chat) => Self::Chat(chat.answered()),
            Self::Invoke(invoke) => Self::Invoke(invoke.answered()),
        }
    }
}

/// Why [`Parking::park`] did not park a run.
#[derive(Debug)]
pub enum NotParked<R> {
    /// The parking was full; the run was dropped.
    Full,
    /// The run's confirmation was answered (or expired) before the run
    /// could be parked: nobody would take it back, so it is handed back to
    /// be driven on.
    Answered(R),
}

/// A parked run and the timer that drops it once its confirmation expired.
struct Entry<R> {
    run: R,
    expiry: AbortHandle,
}

/// Parked runs by confirmation id, at most `capacity`
/// ([`GatewayConfig::max_parked_runs`](super::GatewayConfig::max_parked_runs)).
/// A run dropped here is aborted (see [`OwnedRun`]'s drop): no one could
/// take it back, so it spends no more tokens.
pub struct Parking<R = Parked> {
    runs: Mutex<HashMap<String, Entry<R>>>,
    capacity: usize,
}

impl<R: Send + 'static> Parking<R> {
    pub fn new(capacity: usize) -> Self {
        Self {
            runs: Mutex::default(),
            capacity,
        }
    }

    /// Parks `run` until `pending` is answered. When the parking is full,
    /// `run` is dropped: aborted, its confirmation withdrawn. When `pending`
    /// is no longer waiting, `run` is handed back. A parked run that no
    /// answer took is dropped once its confirmation expired.
    pub fn park<Q: Into<R>>(
        self: &Arc<Self>,
        pending: &PendingConfirmation,
        run: Q,
        confirmations: &Confirmations,
    ) -> Result<(), NotParked<Q>> {
        let id = pending.id.to_string();
        let mut runs = self.lock();
        // Under the lock `answer` answers in: an answer is either before
        // this check, or finds the run parked.
        if !confirmations.is_pending(&id) {
            return Err(NotParked::Answered(run));
        }
        if runs.len() >= self.capacity {
            return Err(NotParked::Full);
        }
        let expiry = tokio::spawn(drop_when_expired(
            Arc::downgrade(self),
            id.clone(),
            pending.expires_at,
            confirmations.clone(),
        ))
        .abort_handle();
        runs.insert(
            id,
            Entry {
                run: run.into(),
                expiry,
            },
        );
        Ok(())
    }

    /// Answers the confirmation `id` with `answer` and takes the run parked
    /// under it, in one step: of two answers racing, the one that answers
    /// gets the run. When the confirmation can no longer be answered, a run
    /// parked under it stays until its expiry timer drops it (it may be
    /// carrying out an answer given through the library meanwhile).
    pub fn answer<T, E>(
        &self,
        id: &str,
        answer: impl FnOnce() -> Result<T, E>,
    ) -> Result<(T, Option<R>), E> {
        let mut runs = self.lock();
        let answered = answer()?;
        let parked = runs.remove(id).map(|entry| {
            entry.expiry.abort();
            entry.run
        });
        Ok((answered, parked))
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Entry<R>>> {
        self.runs.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Drops the run parked under `id` once its confirmation has expired (looking
/// again later if the wall clock stepped back), unless an answer took it.
async fn drop_when_expired<R: Send + 'static>(
    parking: Weak<Parking<R>>,
    id: String,
    expires_at: SystemTime,
    confirmations: Confirmations,
) {
    loop {
        let left = expires_at
            .duration_since(SystemTime::now())
            .unwrap_or_default();
        tokio::time::sleep(left + EXPIRY_GRACE).await;
        let Some(parking) = parking.upgrade() else {
            return;
        };
        if !confirmations.is_pending(&id) {
            // Dropped outside the lock: aborting takes other locks.
            let expired = parking.lock().remove(&id);
            drop(expired);
            return;
        }
    }
}

/// Parks `run` on `pending` in the gateway's parking. `Ok(Some(run))` when
/// the confirmation was answered before the run could be parked (an
/// approver watching `/v1/events` can be that quick): the caller drives the
/// run on, as the answer's request would have, and the run, answered, goes
/// on to its end even if the caller's request goes away. A 503 when the parking is
/// full: the refused run, dropped, is aborted and withdraws its
/// confirmation, so nothing is written.
pub fn park<Q: Resumable>(
    state: &AppState,
    pending: &PendingConfirmation,
    run: Q,
) -> Result<Option<Q>, ApiError> {
    match state.parking.park(pending, run, state.host.confirmations()) {
        Ok(()) => Ok(None),
        Err(NotParked::Answered(run)) => Ok(Some(run.answered())),
        Err(NotParked::Full) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorType::ServiceUnavailableError,
            "too_many_pending_confirmations",
            format!(
                "the gateway already holds {} runs waiting for a person's answer (its \
                 max_parked_runs); answer some (GET /v1/confirmations lists them) or let \
                 them expire",
                state.parking.capacity
            ),
        )),
    }
}

/// Time after a confirmation's expiry before its parked run is dropped: the
/// run's own expiry timer declines the call first.
const EXPIRY_GRACE: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use serde_json::json;

    use super::*;
    use crate::agent::Caller;

    /// A run that records being dropped (which aborts a real one).
    struct Run(Arc<AtomicBool>);

    impl Drop for Run {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    fn run() -> (Run, Arc<AtomicBool>) {
        let dropped = Arc::new(AtomicBool::new(false));
        (Run(dropped.clone()), dropped)
    }

    /// Opens a confirmation that expires after `expiry`; it waits for as
    /// long as the returned ticket lives.
    fn open(confirmations: &Confirmations, expiry: Duration) -> (impl Sized, PendingConfirmation) {
        let before = confirmations.pending();
        let ticket = confirmations.open(
            RunId::random(),
            Caller::Main,
            "applyRefund",
            json!({"orderId": "88231"}),
            expiry,
        );
        let pending = confirmations
            .pending()
            .into_iter()
            .find(|pending| !before.contains(pending))
            .expect("the confirmation");
        (ticket, pending)
    }

    const MINUTE: Duration = Duration::from_secs(60);

    #[tokio::test]
    async fn a_run_answered_before_it_is_parked_is_handed_back() {
        let confirmations = Confirmations::default();
        let parking = Arc::new(Parking::<Run>::new(4));
        let (_ticket, pending) = open(&confirmations, MINUTE);
        confirmations
            .approve(pending.id.as_str())
            .expect("approved");

        let (run, dropped) = run();
        match parking.park(&pending, run, &confirmations) {
            Err(NotParked::Answered(run)) => drop(run),
            Ok(()) => panic!("parked a run whose confirmation nobody can answer any more"),
            Err(NotParked::Full) => panic!("refused as full"),
        }
        assert!(
            dropped.load(Ordering::SeqCst),
            "handed back, then dropped here"
        );
        assert!(parking.lock().is_empty());
    }

    #[tokio::test]
    async fn an_answer_takes_its_run_a_full_parking_refuses_and_expiry_drops_the_rest() {
        let confirmations = Confirmations::default();
        let parking = Arc::new(Parking::<Run>::new(2));
        let (_first_ticket, first) = open(&confirmations, MINUTE);
        // Expires at once; its run is dropped after the grace.
        let (second_ticket, second) = open(&confirmations, Duration::ZERO);
        let (_third_ticket, third) = open(&confirmations, MINUTE);
        let (first_run, first_dropped) = run();
        let (second_run, second_dropped) = run();
        let (third_run, third_dropped) = run();

        assert!(parking.park(&first, first_run, &confirmations).is_ok());
        assert!(parking.park(&second, second_run, &confirmations).is_ok());
        assert!(matches!(
            parking.park(&third, third_run, &confirmations),
            Err(NotParked::Full)
        ));
        assert!(third_dropped.load(Ordering::SeqCst), "refused, so aborted");

        let (approved, taken) = parking
            .answer(first.id.as_str(), || {
                confirmations.approve(first.id.as_str())
            })
            .expect("answered");
        assert_eq!(approved.id, first.id);
        let taken = taken.expect("the parked run");
        // Answered already: refused, nothing to take.
        assert!(
            parking
                .answer(first.id.as_str(), || confirmations
                    .approve(first.id.as_str()))
                .is_err()
        );

        // The second expired unanswered (its run's own timer withdraws it):
        // past the grace, its run is dropped; the taken one's timer was
        // stopped with the answer.
        drop(second_ticket);
        tokio::time::sleep(EXPIRY_GRACE + Duration::from_millis(200)).await;
        assert!(second_dropped.load(Ordering::SeqCst));
        assert!(parking.lock().is_empty());
        assert!(!first_dropped.load(Ordering::SeqCst));
        drop(taken);
    }
}
