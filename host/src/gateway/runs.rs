//! Runs the gateway holds between requests.
//!
//! A request drives its run until the run ends or waits for a person. A run
//! that waits is *parked* under its confirmation's id, and the request that
//! answers that confirmation (`POST /v1/confirmations/{id}`) takes it back
//! and drives it on. A parked run whose confirmation is answered outside the
//! gateway (an embedder's [`SkillHost::approve`](crate::embed::SkillHost::approve))
//! is driven on by the parking itself, and parked again at its next
//! confirmation. A run nobody holds any more — its request timed out, its
//! streaming client went away, its confirmation expired while parked — is
//! aborted, so it spends no more tokens and withdraws its confirmations.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use crate::agent::llm::Usage;
use crate::agent::{
    AgentError, AgentEvent, Caller, ConfirmationWatch, Confirmations, PendingConfirmation,
    ResumedRun, RunHandle, RunId,
};
use crate::skills::{SkillName, SkillVersion};

use axum::http::StatusCode;
use serde_json::json;
use tokio::task::AbortHandle;

use super::errors::{ApiError, ErrorType};
use super::ledger::{Ledgered, RunLedger, RunState};
use super::openai::CompletionMeta;
use super::{AppState, Mount};

/// A run the gateway drives; aborted when dropped while it still runs,
/// unless a person's answer resumed it ([`Resumable::answered`]) and it has
/// not waited for another since ([`Resumable::waiting`]).
pub struct OwnedRun<T: Ledgered + Send + 'static> {
    handle: Option<RunHandle<T>>,
    /// Where the run is recorded as it waits for a person and, once it has
    /// waited, as it ends.
    ledger: Arc<RunLedger>,
    /// Set once the run has waited, so is in the ledger.
    on_record: Option<OnRecord>,
    /// What the response being written reports (see
    /// [`OwnedRun::begin_response`]), from the run's events.
    tally: Tally,
    abort_on_drop: bool,
}

/// A run in the ledger.
struct OnRecord {
    /// Whom the run acts for, as its confirmations say: whose record it is.
    owner: Option<String>,
}

/// What a response reports of its run beside the answer, counted from the
/// run's events since the response began: OpenAI's `usage` is per response.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    /// Tokens the LLM server counted.
    pub usage: Usage,
    /// What fitting the main agent's transcript into its context budget
    /// dropped.
    pub compaction: Compacted,
}

/// Older turns of the conversation the main agent dropped to fit its context
/// budget ([`AgentEvent::Compacted`]), summed over a response: a client that
/// sends the whole conversation each time learns that it no longer fits.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Compacted {
    /// Messages left out of the model's view.
    pub evicted_messages: usize,
    /// Skills whose load result was among them: their unlocked tools are
    /// hidden again until the skill is loaded anew.
    pub revoked: Vec<SkillName>,
}

impl Compacted {
    /// Whether anything was dropped.
    pub fn happened(&self) -> bool {
        self.evicted_messages > 0
    }
}

impl Tally {
    /// Counts `event` and shows it to `on_event`; returns the confirmation it
    /// announces, if it does.
    fn take(
        &mut self,
        event: AgentEvent,
        on_event: &mut impl FnMut(&AgentEvent),
    ) -> Option<PendingConfirmation> {
        match &event {
            AgentEvent::Usage { usage, .. } => self.usage.add(usage),
            AgentEvent::Compacted {
                caller: Caller::Main,
                evicted_messages,
                revoked,
                ..
            } => {
                let compaction = &mut self.compaction;
                compaction.evicted_messages += evicted_messages;
                for skill in revoked {
                    if !compaction.revoked.contains(skill) {
                        compaction.revoked.push(skill.clone());
                    }
                }
            }
            _ => {}
        }
        on_event(&event);
        match event {
            AgentEvent::ConfirmationPending(pending) => Some(pending),
            _ => None,
        }
    }
}

/// Where a run stands after [`OwnedRun::advance`] or [`OwnedRun::settle`].
pub enum Progress<T: Ledgered + Send + 'static> {
    /// The run ended.
    Finished {
        result: Result<T, AgentError>,
        tally: Tally,
    },
    /// The run waits for `pending` to be answered (boxed: it is most of
    /// the enum's size, and runs mostly finish).
    Pending {
        run: OwnedRun<T>,
        pending: Box<PendingConfirmation>,
    },
}

impl<T: Ledgered + Send + 'static> OwnedRun<T> {
    pub fn new(handle: RunHandle<T>, ledger: Arc<RunLedger>) -> Self {
        Self {
            handle: Some(handle),
            ledger,
            on_record: None,
            tally: Tally::default(),
            abort_on_drop: true,
        }
    }

    /// Whether the run is kept on disk while it waits ([`RunHandle::is_kept`]).
    pub fn is_kept(&self) -> bool {
        self.handle.as_ref().is_some_and(RunHandle::is_kept)
    }

    /// On record in the ledger from now, for `owner`, whether or not it
    /// waits: a run resumed from disk, whose requester looks it up by id.
    pub fn on_record(mut self, owner: Option<String>) -> Self {
        self.on_record = Some(OnRecord { owner });
        self
    }

    /// The run's id, while the run is held.
    pub fn id(&self) -> Option<&RunId> {
        self.handle.as_ref().map(|handle| &handle.id)
    }

    /// What the run did since the response being written began (or since
    /// the run started).
    pub fn tally(&self) -> &Tally {
        &self.tally
    }

    /// Counts from zero: a new response begins, which reports only what
    /// the run does from here.
    pub fn begin_response(&mut self) {
        self.tally = Tally::default();
    }

    /// Reads the run's events, showing each to `on_event`, until it waits
    /// for a person or ends.
    pub async fn advance(mut self, mut on_event: impl FnMut(&AgentEvent)) -> Progress<T> {
        while let Some(handle) = self.handle.as_mut() {
            let Some(event) = handle.events.recv().await else {
                break;
            };
            if let Some(pending) = self.tally.take(event, &mut on_event) {
                return self.waits(pending);
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
                if let Some(pending) = self.tally.take(event, &mut |_| {}) {
                    return self.waits(pending);
                }
            }
            if ended {
                break;
            }
            handle.settle().await;
        }
        self.finish().await
    }

    /// The confirmation the run waits on, as far as its queued events tell,
    /// without waiting for more (put on record as it is found); `None` when
    /// they tell none (it ended, or has not reached one yet).
    pub fn waiting_now(&mut self) -> Option<PendingConfirmation> {
        let handle = self.handle.as_mut()?;
        while let Ok(event) = handle.events.try_recv() {
            if let Some(pending) = self.tally.take(event, &mut |_| {}) {
                self.record_waiting(&pending);
                return Some(pending);
            }
        }
        None
    }

    /// The run waits for `pending`: recorded before whoever holds the run
    /// parks it, so before an answer can resume it and its end be recorded.
    fn waits(mut self, pending: PendingConfirmation) -> Progress<T> {
        self.record_waiting(&pending);
        Progress::Pending {
            run: self,
            pending: Box::new(pending),
        }
    }

    /// Puts the run on record as waiting for `pending`.
    fn record_waiting(&mut self, pending: &PendingConfirmation) {
        if let Some(handle) = &self.handle {
            let owner = pending.requested_by.clone();
            self.ledger.record(
                &handle.id,
                owner.as_deref(),
                RunState::Waiting(pending.clone()),
            );
            self.on_record = Some(OnRecord { owner });
        }
    }

    /// The run's result, once its events are read; recorded in the ledger
    /// when the run waited.
    async fn finish(mut self) -> Progress<T> {
        let tally = std::mem::take(&mut self.tally);
        let Some(handle) = self.handle.take() else {
            let result = Err(AgentError::Aborted("the run was already finished".into()));
            return Progress::Finished { result, tally };
        };
        let recorded = self
            .on_record
            .take()
            .map(|record| (handle.id.clone(), record));
        let result = handle.result().await;
        if let Some((id, record)) = recorded {
            self.ledger.ended(&id, record.owner.as_deref(), &result);
        }
        Progress::Finished { result, tally }
    }
}

impl<T: Ledgered + Send + 'static> Drop for OwnedRun<T> {
    fn drop(&mut self) {
        let Some(handle) = self.handle.take() else {
            return;
        };
        if self.abort_on_drop {
            handle.abort();
            if let Some(record) = &self.on_record {
                let aborted = AgentError::Aborted(
                    "nobody held the run any more: its request ended or timed out, or its \
                     confirmation expired while it waited"
                        .into(),
                );
                self.ledger
                    .ended::<T>(&handle.id, record.owner.as_deref(), &Err(aborted));
            }
        } else if let (Some(record), Ok(runtime)) =
            (self.on_record.take(), tokio::runtime::Handle::try_current())
        {
            // Answered, it goes on without its request: its end is still
            // recorded for whoever looks it up. Its events go to no one.
            let mut handle = handle;
            handle.events.close();
            let ledger = self.ledger.clone();
            runtime.spawn(async move {
                let id = handle.id.clone();
                ledger.ended(&id, record.owner.as_deref(), &handle.result().await);
            });
        }
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

/// Takes in a run an earlier process kept on disk and this host resumed
/// ([`SkillHost::take_resumed_runs`](crate::embed::SkillHost::take_resumed_runs)),
/// as the gateway is made: on record in the ledger from the start, for its
/// requester to look up (`GET /v1/runs/{id}`), and parked on its
/// confirmation before the gateway serves, so that the first
/// `POST /v1/confirmations/{id}` answers with what follows (the
/// invocation's result, the conversation's completion), whatever the
/// parking's limits ([`Parking::park_taken_in`]). A run that ended
/// meanwhile is driven to its end in the background; one interrupted while
/// its approved call ran is on record as failed (`run_interrupted`).
pub fn take_in(state: &Arc<AppState>, resumed: ResumedRun) {
    let id = resumed.id().clone();
    let waiting = match resumed {
        ResumedRun::Interrupted(interrupted) => {
            let error = ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                ErrorType::ServerError,
                "run_interrupted",
                interrupted.to_string(),
            );
            // What a client acts on: whether the write ran, and its result.
            let approval = json!(interrupted);
            let owner = interrupted.requested_by.as_deref();
            state
                .ledger
                .record(&id, owner, RunState::Interrupted { error, approval });
            return;
        }
        ResumedRun::Skill {
            skill,
            requested_by,
            run,
        } => {
            let mut run = OwnedRun::new(run, state.ledger.clone()).on_record(requested_by);
            let pending = run.waiting_now();
            park_again(state, pending, InvokeRun { run, skill })
        }
        ResumedRun::Chat {
            requested_by,
            started,
            run,
        } => {
            let model = state
                .host
                .llm()
                .map_or_else(|_| String::new(), |llm| llm.config().model.clone());
            let meta = CompletionMeta::started_at(id.clone(), model, started);
            let mut run = OwnedRun::new(run, state.ledger.clone()).on_record(requested_by);
            let pending = run.waiting_now();
            park_again(state, pending, ChatRun { run, meta })
        }
    };
    match waiting {
        None => tracing::info!(run = %id, "a kept run waits again"),
        // Ended, or answered already: on to its end (or next confirmation).
        Some(run) => {
            tokio::spawn(drive_taken_in(state.clone(), run));
        }
    }
}

/// Parks `run`, taken in, on `pending` ([`Parking::park_taken_in`]);
/// `Some(run)` when it waits for nothing (any more), to be driven on.
fn park_again<Q: Resumable>(
    state: &AppState,
    pending: Option<PendingConfirmation>,
    run: Q,
) -> Option<Parked> {
    let Some(pending) = pending else {
        return Some(run.into());
    };
    state
        .parking
        .park_taken_in(&pending, run.waiting(), state.host.confirmations())
        .err()
        .map(|run| run.answered().into())
}

/// Drives a run taken in ([`take_in`]) as the request that answers it
/// would: to its end, or to its next confirmation, where it is parked.
async fn drive_taken_in(state: Arc<AppState>, run: Parked) {
    let mount = Mount::root();
    let driven = match run.answered() {
        Parked::Invoke(invoke) => super::skills::drive_invocation(&state, invoke, &mount)
            .await
            .map(drop),
        Parked::Chat(chat) => super::chat::complete_chat(&state, chat, &mount)
            .await
            .map(drop),
    };
    if let Err(error) = driven {
        tracing::warn!(error = error.message(), "a kept run taken in failed");
    }
}

/// A run that a person's answer can resume.
pub trait Resumable: Into<Parked> + Sized {
    /// Whether dropping the run aborts it (see [`OwnedRun`]).
    fn abort_on_drop(&mut self, abort: bool);

    /// The run, resumed by an answer: it goes on to its end even if the
    /// request driving it goes away, so what a person approved (or
    /// rejected) is carried out whether or not their client stays.
    fn answered(mut self) -> Self {
        self.abort_on_drop(false);
        self
    }

    /// The run, waiting for an answer again: dropped, it is aborted, since
    /// nobody could take it back.
    fn waiting(mut self) -> Self {
        self.abort_on_drop(true);
        self
    }
}

impl Resumable for ChatRun {
    fn abort_on_drop(&mut self, abort: bool) {
        self.run.abort_on_drop = abort;
    }
}

impl Resumable for InvokeRun {
    fn abort_on_drop(&mut self, abort: bool) {
        self.run.abort_on_drop = abort;
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

/// A parked run the parking can drive on by itself, when its confirmation
/// is answered outside the gateway.
pub trait Resume: Send + Sized + 'static {
    /// Drives the run on, answered, to its end (`None`: its result goes to
    /// nobody; its events went to the host's observers) or to its next
    /// confirmation, where it waits again.
    fn resume(self) -> impl Future<Output = Option<(PendingConfirmation, Self)>> + Send;

    /// Drops the run as its parking goes: a run kept on disk
    /// ([`RunHandle::is_kept`]) is not aborted, so it stays on disk for the
    /// next start; any other is.
    fn let_go(self) {}
}

impl Resume for Parked {
    fn let_go(self) {
        match self {
            Self::Invoke(mut invoke) if invoke.run.is_kept() => invoke.abort_on_drop(false),
            Self::Chat(mut chat) if chat.run.is_kept() => chat.abort_on_drop(false),
            // Dropped: aborted.
            Self::Invoke(_) | Self::Chat(_) => {}
        }
    }

    async fn resume(self) -> Option<(PendingConfirmation, Self)> {
        match self.answered() {
            Self::Chat(ChatRun { run, meta }) => {
                let (pending, run) = next_confirmation(run).await?;
                Some((pending, ChatRun { run, meta }.waiting().into()))
            }
            Self::Invoke(InvokeRun { run, skill }) => {
                let (pending, run) = next_confirmation(run).await?;
                Some((pending, InvokeRun { run, skill }.waiting().into()))
            }
        }
    }
}

/// Drives `run` to its next confirmation, or to its end (`None`).
async fn next_confirmation<T: Ledgered + Send + 'static>(
    run: OwnedRun<T>,
) -> Option<(PendingConfirmation, OwnedRun<T>)> {
    let id = run.id().cloned();
    match run.settle().await {
        Progress::Pending { run, pending } => Some((*pending, run)),
        Progress::Finished { result, .. } => {
            if let (Some(run), Err(error)) = (id, result) {
                tracing::info!(%run, %error, "a run answered outside the gateway failed");
            }
            None
        }
    }
}

/// Why [`Parking::park`] did not park a run.
#[derive(Debug)]
pub enum NotParked<R> {
    /// The parking was full, or held as many runs of the run's principal as
    /// one may have; the run was dropped.
    Full(Cap),
    /// The run's confirmation was answered (or expired) before the run
    /// could be parked: nobody would take it back, so it is handed back to
    /// be driven on.
    Answered(R),
}

/// Which limit a refused run reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cap {
    /// [`ParkingLimits::total`].
    Total(usize),
    /// [`ParkingLimits::per_principal`], for the principal named.
    Principal { principal: String, limit: usize },
}

/// How many runs the parking holds.
#[derive(Debug, Clone, Copy)]
pub struct ParkingLimits {
    /// At most this many in all
    /// ([`GatewayConfig::max_parked_runs`](super::GatewayConfig::max_parked_runs)).
    pub total: usize,
    /// At most this many of one principal (a run's
    /// [`PendingConfirmation::requested_by`]), so that one client cannot
    /// fill the parking for all
    /// ([`GatewayConfig::max_parked_runs_per_principal`](super::GatewayConfig::max_parked_runs_per_principal)).
    pub per_principal: Option<usize>,
}

/// A parked run and the task that follows its confirmation (see
/// [`follow`]).
struct Entry<R> {
    run: R,
    follower: AbortHandle,
    /// Who the run acts for, counted in [`Table::per_principal`].
    principal: Option<String>,
}

/// The parked runs by confirmation id, and how many each principal has.
struct Table<R> {
    runs: HashMap<String, Entry<R>>,
    per_principal: HashMap<String, usize>,
}

impl<R> Table<R> {
    /// The limit parking one more run of `principal` would pass, if any.
    fn reached(&self, limits: ParkingLimits, principal: Option<&str>) -> Option<Cap> {
        if self.runs.len() >= limits.total {
            return Some(Cap::Total(limits.total));
        }
        let (principal, limit) = principal.zip(limits.per_principal)?;
        let parked = self.per_principal.get(principal).copied().unwrap_or(0);
        (parked >= limit).then(|| Cap::Principal {
            principal: principal.to_owned(),
            limit,
        })
    }

    fn insert(&mut self, id: String, entry: Entry<R>) {
        if let Some(principal) = &entry.principal {
            *self.per_principal.entry(principal.clone()).or_default() += 1;
        }
        self.runs.insert(id, entry);
    }

    fn take(&mut self, id: &str) -> Option<Entry<R>> {
        let entry = self.runs.remove(id)?;
        if let Some(principal) = &entry.principal
            && let Some(parked) = self.per_principal.get_mut(principal)
        {
            *parked -= 1;
            if *parked == 0 {
                self.per_principal.remove(principal);
            }
        }
        Some(entry)
    }
}

/// Parked runs by confirmation id, within [`ParkingLimits`]. A run dropped
/// here is aborted (see [`OwnedRun`]'s drop): no one could take it back, so
/// it spends no more tokens. When the parking itself goes (with its
/// gateway, at shutdown), a run kept on disk is let go instead
/// ([`Resume::let_go`]), to wait again at the next start.
pub struct Parking<R: Resume = Parked> {
    table: Mutex<Table<R>>,
    limits: ParkingLimits,
}

impl<R: Resume> Drop for Parking<R> {
    fn drop(&mut self) {
        let table = std::mem::take(&mut self.lock().runs);
        for (_, entry) in table {
            entry.follower.abort();
            entry.run.let_go();
        }
    }
}

impl<R: Resume> Parking<R> {
    pub fn new(limits: ParkingLimits) -> Self {
        Self {
            table: Mutex::new(Table {
                runs: HashMap::new(),
                per_principal: HashMap::new(),
            }),
            limits,
        }
    }

    /// Parks `run` until `pending` is answered. When the parking is full (in
    /// all, or for the run's principal), `run` is dropped: aborted, its
    /// confirmation withdrawn. When `pending`
    /// is no longer waiting, `run` is handed back. A parked run is taken out
    /// by the answer's request ([`Parking::answer`]); when the answer comes
    /// from outside the gateway, the parking drives the run on itself; when
    /// the confirmation expires or is withdrawn, the run is dropped.
    pub fn park<Q: Into<R>>(
        self: &Arc<Self>,
        pending: &PendingConfirmation,
        run: Q,
        confirmations: &Confirmations,
    ) -> Result<(), NotParked<Q>> {
        self.park_within(Some(self.limits), pending, run, confirmations)
    }

    /// Parks `run`, taken in from an earlier process ([`take_in`]), whatever
    /// the limits: it was admitted under them when it first waited, and a
    /// restart, or limits lowered meanwhile, must not lose a write waiting
    /// for a person. It counts toward them for the runs parked after it.
    /// `Err(run)` when `pending` is no longer waiting.
    pub fn park_taken_in<Q: Into<R>>(
        self: &Arc<Self>,
        pending: &PendingConfirmation,
        run: Q,
        confirmations: &Confirmations,
    ) -> Result<(), Q> {
        self.park_within(None, pending, run, confirmations)
            .map_err(|not_parked| match not_parked {
                NotParked::Answered(run) => run,
                NotParked::Full(_) => unreachable!("parked without limits"),
            })
    }

    /// [`Parking::park`] within `limits`, when there are any.
    fn park_within<Q: Into<R>>(
        self: &Arc<Self>,
        limits: Option<ParkingLimits>,
        pending: &PendingConfirmation,
        run: Q,
        confirmations: &Confirmations,
    ) -> Result<(), NotParked<Q>> {
        let id = pending.id.to_string();
        let mut table = self.lock();
        // Under the lock `answer` answers in: an answer is either before
        // this look, or finds the run parked.
        let Some(watch) = confirmations.watch(&id) else {
            return Err(NotParked::Answered(run));
        };
        if let Some(cap) =
            limits.and_then(|limits| table.reached(limits, pending.requested_by.as_deref()))
        {
            return Err(NotParked::Full(cap));
        }
        let follower = tokio::spawn(follow(
            Arc::downgrade(self),
            id.clone(),
            watch,
            confirmations.clone(),
        ))
        .abort_handle();
        table.insert(
            id,
            Entry {
                run: run.into(),
                follower,
                principal: pending.requested_by.clone(),
            },
        );
        Ok(())
    }

    /// Answers the confirmation `id` with `answer` and takes the run parked
    /// under it, in one step: of two answers racing, the one that answers
    /// gets the run.
    pub fn answer<T, E>(
        &self,
        id: &str,
        answer: impl FnOnce() -> Result<T, E>,
    ) -> Result<(T, Option<R>), E> {
        let mut table = self.lock();
        let answered = answer()?;
        let parked = table.take(id).map(|entry| {
            entry.follower.abort();
            entry.run
        });
        Ok((answered, parked))
    }

    /// Drives on `run`, answered outside the gateway, parking it again at
    /// each confirmation it reaches until one is left to wait.
    async fn drive_on(self: &Arc<Self>, mut run: R, confirmations: &Confirmations) {
        while let Some((pending, waiting)) = run.resume().await {
            match self.park(&pending, waiting, confirmations) {
                Ok(()) => return,
                Err(NotParked::Answered(answered)) => run = answered,
                Err(NotParked::Full(cap)) => {
                    tracing::warn!(
                        run = %pending.run,
                        confirmation = %pending.id,
                        "a run answered outside the gateway reached another confirmation with \
                         the parking full: {}; it was aborted",
                        cap.describe()
                    );
                    return;
                }
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table<R>> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Follows the confirmation `id` of a parked run until it stops waiting
/// without [`Parking::answer`] (which stops this first): answered outside
/// the gateway, the run is taken out and driven on; expired or withdrawn,
/// it is dropped (aborted: nobody can take it back).
async fn follow<R: Resume>(
    parking: Weak<Parking<R>>,
    id: String,
    watch: ConfirmationWatch,
    confirmations: Confirmations,
) {
    let answered = watch.answered().await;
    let Some(parking) = parking.upgrade() else {
        return;
    };
    // Taken out under the lock, dropped or driven outside it: aborting and
    // parking again take it.
    let Some(entry) = parking.lock().take(&id) else {
        return;
    };
    if answered {
        parking.drive_on(entry.run, &confirmations).await;
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
    match state
        .parking
        .park(pending, run.waiting(), state.host.confirmations())
    {
        Ok(()) => Ok(None),
        Err(NotParked::Answered(run)) => Ok(Some(run.answered())),
        Err(NotParked::Full(cap)) => {
            // Withdrawn now, not when the dropped run's task is next
            // polled: a client told 503 finds it gone.
            state.host.confirmations().withdraw(&pending.id);
            // The gateway is full for everyone (503), or this client has
            // as many runs waiting as one may (429).
            let (status, kind) = match cap {
                Cap::Total(_) => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    ErrorType::ServiceUnavailableError,
                ),
                Cap::Principal { .. } => (StatusCode::TOO_MANY_REQUESTS, ErrorType::RateLimitError),
            };
            Err(ApiError::new(
                status,
                kind,
                "too_many_pending_confirmations",
                format!(
                    "{}; answer some (GET /v1/confirmations lists them) or let them expire",
                    cap.describe()
                ),
            ))
        }
    }
}

impl Cap {
    /// The limit in words, for a refusal and the log.
    fn describe(&self) -> String {
        match self {
            Self::Total(limit) => format!(
                "the gateway already holds {limit} runs waiting for a person's answer (its \
                 max_parked_runs)"
            ),
            Self::Principal { principal, limit } => format!(
                "`{principal}` already has {limit} runs waiting for a person's answer (the \
                 gateway's max_parked_runs_per_principal)"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::agent::{Caller, ConfirmationPolicy};

    /// A run that records being dropped (which aborts a real one) and
    /// being resumed (after which it ends).
    struct Run {
        dropped: Arc<AtomicBool>,
        resumed: Arc<AtomicBool>,
    }

    impl Drop for Run {
        fn drop(&mut self) {
            self.dropped.store(true, Ordering::SeqCst);
        }
    }

    impl Resume for Run {
        async fn resume(self) -> Option<(PendingConfirmation, Self)> {
            self.resumed.store(true, Ordering::SeqCst);
            None
        }
    }

    fn run() -> (Run, Arc<AtomicBool>) {
        let (run, dropped, _) = watched_run();
        (run, dropped)
    }

    /// A run, whether it was dropped, whether it was resumed.
    fn watched_run() -> (Run, Arc<AtomicBool>, Arc<AtomicBool>) {
        let dropped = Arc::new(AtomicBool::new(false));
        let resumed = Arc::new(AtomicBool::new(false));
        let run = Run {
            dropped: dropped.clone(),
            resumed: resumed.clone(),
        };
        (run, dropped, resumed)
    }

    /// Waits (a few seconds at most) for `flag` to be set.
    async fn set(flag: &AtomicBool) -> bool {
        for _ in 0..100 {
            if flag.load(Ordering::SeqCst) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    fn limits(total: usize, per_principal: Option<usize>) -> ParkingLimits {
        ParkingLimits {
            total,
            per_principal,
        }
    }

    /// Opens a confirmation that expires after `expiry`; it waits for as
    /// long as the returned ticket lives.
    fn open(
        confirmations: &Confirmations,
        expiry: Duration,
    ) -> (impl Sized + use<>, PendingConfirmation) {
        open_for(confirmations, None, expiry)
    }

    /// Opens a confirmation of a run on behalf of `principal`.
    fn open_for(
        confirmations: &Confirmations,
        principal: Option<&str>,
        expiry: Duration,
    ) -> (impl Sized + use<>, PendingConfirmation) {
        let before = confirmations.pending();
        let ticket = confirmations.open(
            RunId::random(),
            principal.map(str::to_owned),
            Caller::Main,
            "applyRefund",
            json!({"orderId": "88231"}),
            &ConfirmationPolicy {
                expiry,
                ..ConfirmationPolicy::default()
            },
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
        let parking = Arc::new(Parking::<Run>::new(limits(4, None)));
        let (_ticket, pending) = open(&confirmations, MINUTE);
        confirmations
            .approve(pending.id.as_str())
            .expect("approved");

        let (run, dropped) = run();
        match parking.park(&pending, run, &confirmations) {
            Err(NotParked::Answered(run)) => drop(run),
            Ok(()) => panic!("parked a run whose confirmation nobody can answer any more"),
            Err(NotParked::Full(_)) => panic!("refused as full"),
        }
        assert!(
            dropped.load(Ordering::SeqCst),
            "handed back, then dropped here"
        );
        assert!(parking.lock().runs.is_empty());
    }

    #[tokio::test]
    async fn an_answer_takes_its_run_a_full_parking_refuses_and_expiry_drops_the_rest() {
        let confirmations = Confirmations::default();
        let parking = Arc::new(Parking::<Run>::new(limits(2, None)));
        let (_first_ticket, first) = open(&confirmations, MINUTE);
        let (second_ticket, second) = open(&confirmations, MINUTE);
        let (_third_ticket, third) = open(&confirmations, MINUTE);
        let (first_run, first_dropped) = run();
        let (second_run, second_dropped, second_resumed) = watched_run();
        let (third_run, third_dropped) = run();

        assert!(parking.park(&first, first_run, &confirmations).is_ok());
        assert!(parking.park(&second, second_run, &confirmations).is_ok());
        assert!(matches!(
            parking.park(&third, third_run, &confirmations),
            Err(NotParked::Full(Cap::Total(2)))
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

        // The second is withdrawn, as its expiry or its run's end does: its
        // run is dropped, not resumed.
        drop(second_ticket);
        assert!(set(&second_dropped).await, "an expired run is dropped");
        assert!(!second_resumed.load(Ordering::SeqCst));
        assert!(parking.lock().runs.is_empty());
        assert!(!first_dropped.load(Ordering::SeqCst));
        drop(taken);
    }

    #[tokio::test]
    async fn a_run_taken_in_waits_past_the_limits_and_counts_toward_them() {
        let confirmations = Confirmations::default();
        let parking = Arc::new(Parking::<Run>::new(limits(1, Some(1))));
        let (_held_ticket, held) = open_for(&confirmations, Some("web-app"), MINUTE);
        let (_kept_ticket, kept) = open_for(&confirmations, Some("web-app"), MINUTE);
        let (_new_ticket, new) = open_for(&confirmations, Some("support-desk"), MINUTE);
        let (held_run, _) = run();
        let (kept_run, kept_dropped) = run();
        let (new_run, _) = run();

        assert!(parking.park(&held, held_run, &confirmations).is_ok());
        assert!(
            parking
                .park_taken_in(&kept, kept_run, &confirmations)
                .is_ok()
        );
        assert!(!kept_dropped.load(Ordering::SeqCst));
        assert_eq!(parking.lock().per_principal["web-app"], 2);
        assert!(matches!(
            parking.park(&new, new_run, &confirmations),
            Err(NotParked::Full(Cap::Total(1)))
        ));
    }

    #[tokio::test]
    async fn one_principal_cannot_take_every_place_and_a_place_is_freed_by_an_answer() {
        let confirmations = Confirmations::default();
        let parking = Arc::new(Parking::<Run>::new(limits(4, Some(2))));
        let mut tickets = Vec::new();
        let mut park = |principal: Option<&str>| {
            let (ticket, pending) = open_for(&confirmations, principal, MINUTE);
            tickets.push(ticket);
            let (run, _) = run();
            let parked = parking.park(&pending, run, &confirmations);
            (
                pending,
                parked.err().map(|refused| match refused {
                    NotParked::Full(cap) => cap,
                    NotParked::Answered(_) => panic!("nobody answered"),
                }),
            )
        };
        let (first, refused) = park(Some("web-app"));
        assert_eq!(refused, None);
        assert_eq!(park(Some("web-app")).1, None);
        assert_eq!(
            park(Some("web-app")).1,
            Some(Cap::Principal {
                principal: "web-app".into(),
                limit: 2
            })
        );
        // Another client, and runs on nobody's behalf, still park.
        assert_eq!(park(Some("support-desk")).1, None);
        assert_eq!(park(None).1, None);
        assert_eq!(park(None).1, Some(Cap::Total(4)));

        // An answer frees its principal's place.
        let (_, taken) = parking
            .answer(first.id.as_str(), || {
                confirmations.approve(first.id.as_str())
            })
            .expect("answered");
        drop(taken);
        assert_eq!(park(Some("web-app")).1, None);
        assert_eq!(parking.lock().per_principal["web-app"], 2);
    }

    #[tokio::test]
    async fn a_run_answered_outside_the_gateway_is_taken_out_and_driven_on() {
        let confirmations = Confirmations::default();
        let parking = Arc::new(Parking::<Run>::new(limits(4, None)));
        let (_ticket, pending) = open(&confirmations, MINUTE);
        let (run, dropped, resumed) = watched_run();
        assert!(parking.park(&pending, run, &confirmations).is_ok());

        // An embedder's own answer, not the gateway's.
        confirmations
            .approve(pending.id.as_str())
            .expect("approved");
        assert!(set(&resumed).await, "the parking drives the run on");
        assert!(dropped.load(Ordering::SeqCst), "and lets it go at its end");
        assert!(parking.lock().runs.is_empty());
    }
}
