//! Runs the gateway holds between requests.
//!
//! A request drives its run until the run ends or waits for a person. A run
//! that waits is *parked* under its confirmation's id, and the request that
//! answers that confirmation (`POST /v1/confirmations/{id}`) takes it back
//! and drives it on. A run nobody holds any more — its request timed out,
//! its streaming client went away — is aborted, so it spends no more tokens
//! and withdraws its confirmations.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use crate::agent::llm::Usage;
use crate::agent::{AgentError, AgentEvent, Confirmations, PendingConfirmation, RunHandle, RunId};
use crate::skills::SkillVersion;

use axum::http::StatusCode;

use super::AppState;
use super::errors::{ApiError, ErrorType};
use super::openai::CompletionMeta;

/// A run the gateway drives; aborted when dropped while it still runs.
pub struct OwnedRun<T: Send + 'static> {
    handle: Option<RunHandle<T>>,
    /// Tokens of the run so far, from its usage events.
    usage: Usage,
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
        }
    }

    /// The run's id, while the run is held.
    pub fn id(&self) -> Option<&RunId> {
        self.handle.as_ref().map(|handle| &handle.id)
    }

    /// Tokens of the run so far.
    pub fn usage(&self) -> Usage {
        self.usage
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

    /// Lets the run go on without anyone holding it: it ends on its own.
    fn detach(mut self) {
        self.handle.take();
    }
}

impl<T: Send + 'static> Drop for OwnedRun<T> {
    fn drop(&mut self) {
        if let Some(handle) = &self.handle {
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

/// A run the parking can let go of.
pub trait Detach: Send + 'static {
    /// Lets the run go on by itself, held by no one.
    fn detach(self);
}

impl Detach for Parked {
    /// See [`OwnedRun`]'s drop: a detached run is not aborted.
    fn detach(self) {
        match self {
            Self::Chat(chat) => chat.run.detach(),
            Self::Invoke(invoke) => invoke.run.detach(),
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

/// Parked runs by confirmation id, at most `capacity`
/// ([`GatewayConfig::max_parked_runs`](super::GatewayConfig::max_parked_runs)).
pub struct Parking<R = Parked> {
    runs: Mutex<HashMap<String, R>>,
    capacity: usize,
}

impl<R: Detach> Parking<R> {
    pub fn new(capacity: usize) -> Self {
        Self {
            runs: Mutex::default(),
            capacity,
        }
    }

    /// Parks `run` until `pending` is answered. When the parking is full,
    /// `run` is dropped: aborted, its confirmation withdrawn. When `pending`
    /// is no longer waiting, `run` is handed back. A parked run is let go
    /// (it ends on its own) once its confirmation is no longer pending after
    /// its expiry, if no answer took it first.
    pub fn park<Q: Into<R>>(
        self: &Arc<Self>,
        pending: &PendingConfirmation,
        run: Q,
        confirmations: &Confirmations,
    ) -> Result<(), NotParked<Q>> {
        let id = pending.id.to_string();
        {
            let mut runs = self.lock();
            // Under the lock `answer` answers in: an answer is either
            // before this check, or finds the run parked.
            if !confirmations.is_pending(&id) {
                return Err(NotParked::Answered(run));
            }
            if runs.len() >= self.capacity {
                return Err(NotParked::Full);
            }
            runs.insert(id.clone(), run.into());
        }
        let parking = Arc::downgrade(self);
        let confirmations = confirmations.clone();
        let expires_at = pending.expires_at;
        tokio::spawn(async move {
            loop {
                let left = expires_at
                    .duration_since(SystemTime::now())
                    .unwrap_or_default();
                tokio::time::sleep(left + EXPIRY_GRACE).await;
                let Some(parking) = parking.upgrade() else {
                    return;
                };
                let mut runs = parking.lock();
                // Still pending (the wall clock stepped): look again later.
                if !runs.contains_key(&id) || !confirmations.is_pending(&id) {
                    if let Some(parked) = runs.remove(&id) {
                        parked.detach();
                    }
                    return;
                }
            }
        });
        Ok(())
    }

    /// Answers the confirmation `id` with `answer` and takes the run parked
    /// under it, in one step: of two answers racing, the one that answers
    /// gets the run. When the confirmation can no longer be answered, a run
    /// still parked under it is let go.
    pub fn answer<T, E>(
        &self,
        id: &str,
        answer: impl FnOnce() -> Result<T, E>,
    ) -> Result<(T, Option<R>), E> {
        let (answered, parked) = {
            let mut runs = self.lock();
            (answer(), runs.remove(id))
        };
        match answered {
            Ok(answered) => Ok((answered, parked)),
            Err(error) => {
                if let Some(parked) = parked {
                    parked.detach();
                }
                Err(error)
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, R>> {
        self.runs.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Parks `run` on `pending` in the gateway's parking. `Ok(Some(run))` when
/// the confirmation was answered before the run could be parked (an
/// approver watching `/v1/events` can be that quick): the caller drives the
/// run on, as the answer's request would have. A 503 when the parking is
/// full: the refused run, dropped, is aborted and withdraws its
/// confirmation, so nothing is written.
pub fn park<Q: Into<Parked>>(
    state: &AppState,
    pending: &PendingConfirmation,
    run: Q,
) -> Result<Option<Q>, ApiError> {
    match state.parking.park(pending, run, state.host.confirmations()) {
        Ok(()) => Ok(None),
        Err(NotParked::Answered(run)) => Ok(Some(run)),
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

/// Time after a confirmation's expiry before its parked run is let go: the
/// run's own expiry timer declines the call first.
const EXPIRY_GRACE: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use serde_json::json;

    use super::*;
    use crate::agent::Caller;

    /// A run that records being let go.
    struct Run(Arc<AtomicBool>);

    impl Detach for Run {
        fn detach(self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    fn run() -> (Run, Arc<AtomicBool>) {
        let detached = Arc::new(AtomicBool::new(false));
        (Run(detached.clone()), detached)
    }

    /// Opens a confirmation; it waits for as long as the returned ticket
    /// lives.
    fn open(confirmations: &Confirmations) -> (impl Sized, PendingConfirmation) {
        let ticket = confirmations.open(
            RunId::random(),
            Caller::Main,
            "applyRefund",
            json!({"orderId": "88231"}),
            Duration::from_secs(60),
        );
        let pending = confirmations.pending().pop().expect("one confirmation");
        (ticket, pending)
    }

    #[tokio::test]
    async fn a_run_answered_before_it_is_parked_is_handed_back() {
        let confirmations = Confirmations::default();
        let parking = Arc::new(Parking::<Run>::new(4));
        let (_ticket, pending) = open(&confirmations);
        confirmations
            .approve(pending.id.as_str())
            .expect("approved");

        let (run, detached) = run();
        match parking.park(&pending, run, &confirmations) {
            Err(NotParked::Answered(_)) => {}
            Ok(()) => panic!("parked a run whose confirmation nobody can answer any more"),
            Err(NotParked::Full) => panic!("refused as full"),
        }
        assert!(!detached.load(Ordering::SeqCst));
        assert!(parking.lock().is_empty());
    }

    #[tokio::test]
    async fn the_answer_to_a_parked_run_takes_it_and_a_full_parking_refuses() {
        let confirmations = Confirmations::default();
        let parking = Arc::new(Parking::<Run>::new(1));
        let (_first_ticket, first) = open(&confirmations);
        let (_second_ticket, second) = open(&confirmations);

        assert!(parking.park(&first, run().0, &confirmations).is_ok());
        assert!(matches!(
            parking.park(&second, run().0, &confirmations),
            Err(NotParked::Full)
        ));
        let (approved, taken) = parking
            .answer(first.id.as_str(), || {
                confirmations.approve(first.id.as_str())
            })
            .expect("answered");
        assert_eq!(approved.id, first.id);
        assert!(taken.is_some());
        // Answered already: nothing to take, and the answer is refused.
        assert!(
            parking
                .answer(first.id.as_str(), || confirmations
                    .approve(first.id.as_str()))
                .is_err()
        );
    }
}
