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

impl Parked {
    /// Lets the run go on by itself (see [`OwnedRun`]'s drop).
    pub fn detach(self) {
        match self {
            Self::Chat(chat) => chat.run.detach(),
            Self::Invoke(invoke) => invoke.run.detach(),
        }
    }
}

/// Parked runs by confirmation id.
#[derive(Default)]
pub struct Parking {
    runs: Mutex<HashMap<String, Parked>>,
}

impl Parking {
    /// Parks `run` until `pending` is answered. Runs whose confirmation is
    /// no longer pending (it expired, or was answered some other way) are
    /// let go first: they end on their own. This run is let go, too, once
    /// its confirmation has expired, even if nothing else is parked by then.
    pub fn park(
        self: &Arc<Self>,
        pending: &PendingConfirmation,
        run: Parked,
        confirmations: &Confirmations,
    ) {
        let mut runs = self.lock();
        let_go_of_stale(&mut runs, confirmations);
        runs.insert(pending.id.to_string(), run);
        drop(runs);
        let parking = Arc::downgrade(self);
        let confirmations = confirmations.clone();
        let expiry = pending
            .expires_at
            .duration_since(SystemTime::now())
            .unwrap_or_default();
        tokio::spawn(async move {
            tokio::time::sleep(expiry + EXPIRY_GRACE).await;
            if let Some(parking) = parking.upgrade() {
                let_go_of_stale(&mut parking.lock(), &confirmations);
            }
        });
    }

    /// Takes the run parked under `id`, if any.
    pub fn take(&self, id: &str) -> Option<Parked> {
        self.lock().remove(id)
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Parked>> {
        self.runs.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Time after a confirmation's expiry before its parked run is let go: the
/// run's own expiry timer declines the call first.
const EXPIRY_GRACE: Duration = Duration::from_secs(1);

/// Lets go of the runs whose confirmation is no longer pending.
fn let_go_of_stale(runs: &mut HashMap<String, Parked>, confirmations: &Confirmations) {
    let stale: Vec<String> = runs
        .keys()
        .filter(|id| confirmations.get(id).is_none())
        .cloned()
        .collect();
    for id in stale {
        if let Some(parked) = runs.remove(&id) {
            parked.detach();
        }
    }
}
