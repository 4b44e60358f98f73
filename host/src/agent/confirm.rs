//! Pending confirmations of write tools, shared by every run of an agent.
//!
//! A run that reaches a call needing approval opens a confirmation here and
//! waits at the call site — in the main loop or in a sub-agent. Deterministic
//! steps do not wait inside `call-tool`: their invocation is suspended (its
//! instance given back to the pool), the call waits here, and the steps run
//! again with the calls answered so far replayed (`agent::skill`). Whoever
//! watches the run sees
//! [`AgentEvent::ConfirmationPending`](super::AgentEvent::ConfirmationPending)
//! and answers by id with [`Confirmations::approve`] or
//! [`Confirmations::reject`] (or [`Confirmations::answer`], which records
//! who answered), possibly from another task or another HTTP
//! request: the run outlives the request that started it.
//!
//! The arguments stay with the run; an answer carries only the id, so the
//! approver cannot change what runs. A confirmation nobody answers expires
//! after [`ConfirmationPolicy::expiry`](super::ConfirmationPolicy::expiry)
//! and counts as a rejection. A run that is dropped withdraws its
//! confirmations.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwapOption;
use serde::{Serialize, Serializer};
use serde_json::Value;
use tokio::sync::{oneshot, watch};

use super::ConfirmationPolicy;
use super::activity::{Activity, Waiting};
use super::events::{Caller, Declined, Resolution};
pub use super::ids::ConfirmationId;
use super::ids::RunId;
use super::kept::{InterruptedRun, KeptConfirmation};
use crate::recent::{KeptFor, Recent};
use crate::text::clip;

/// A call waiting for a person's approval.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct PendingConfirmation {
    /// What to answer with.
    pub id: ConfirmationId,
    /// The run that waits.
    pub run: RunId,
    /// Who the run acts for, when it was started on someone's behalf
    /// ([`RunOptions::on_behalf_of`](super::RunOptions::on_behalf_of)).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<String>,
    /// Who made the call: the main agent or a skill.
    pub caller: Caller,
    /// The tool to run.
    pub tool: String,
    /// The arguments it will run with, exactly (already validated).
    pub arguments: Value,
    /// One line for a person, e.g. `applyRefund: orderId '88231', reason 'broken'`.
    pub summary: String,
    /// Whether only someone other than [`Self::requested_by`] may approve
    /// it ([`ConfirmationPolicy::separate_approver`](super::ConfirmationPolicy::separate_approver)).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub separate_approver: bool,
    /// Who alone may approve it, when the policy says
    /// ([`ConfirmationPolicy::approvers_of`](super::ConfirmationPolicy::approvers_of));
    /// absent, anyone may.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approvers: Option<BTreeSet<String>>,
    /// When it expires unanswered (an HTTP date when serialized).
    #[serde(serialize_with = "http_date")]
    pub expires_at: SystemTime,
}

impl PendingConfirmation {
    /// Who may approve it, as `policy` says.
    fn hold_to(&mut self, policy: &ConfirmationPolicy) {
        self.separate_approver = policy.separate_approver;
        self.approvers = policy.approvers_of(&self.tool).cloned();
    }
}

/// A confirmation that no longer waits, and how it ended
/// ([`Confirmations::status`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct ResolvedConfirmation {
    /// The confirmation as it was shown.
    pub confirmation: PendingConfirmation,
    /// Approved, rejected, expired or withdrawn, and by whom.
    pub resolution: Resolution,
    /// When it stopped waiting (an HTTP date when serialized).
    #[serde(serialize_with = "http_date")]
    pub resolved_at: SystemTime,
    /// Approved, but its host stopped while the call ran, so the call may
    /// or may not have run: why, as the run's requester is told
    /// ([`InterruptedRun`](super::InterruptedRun)). Known only to a host
    /// that keeps runs ([`AgentBuilder::keep_runs`](super::AgentBuilder::keep_runs)).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<String>,
}

impl ResolvedConfirmation {
    /// For a person: `approved by `supervisor`, Sun, 06 Dec 2026 19:00:00
    /// GMT`, and why the outcome of an approved call is unknown, when it
    /// is.
    pub fn describe(&self) -> String {
        let by = self
            .resolution
            .by()
            .map(|by| format!(" by `{by}`"))
            .unwrap_or_default();
        let mut text = format!(
            "{}{by}, {}",
            self.resolution.decision(),
            httpdate::fmt_http_date(self.resolved_at)
        );
        if let Some(why) = &self.interrupted {
            text.push_str("; ");
            text.push_str(why);
        }
        text
    }
}

/// Where a confirmation is ([`Confirmations::status`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ConfirmationStatus {
    /// It waits for an answer.
    Pending(PendingConfirmation),
    /// It stopped waiting, lately.
    Resolved(ResolvedConfirmation),
}

/// How many resolved confirmations [`Confirmations::status`] remembers,
/// and for how long: enough for a requester to look up the outcome (a
/// separate approver answered it elsewhere), bounded whatever the traffic.
pub const RESOLUTIONS_KEPT: usize = 1024;
/// See [`RESOLUTIONS_KEPT`].
pub const RESOLUTIONS_KEPT_FOR: Duration = Duration::from_secs(3600);
/// The most argument bytes the remembered resolutions hold together (a
/// model's arguments can be megabytes): older ones go first, the latest
/// always stays.
pub const RESOLUTIONS_KEPT_BYTES: usize = 16 << 20;

/// The latest resolutions, within [`RESOLUTIONS_KEPT`] and the rest, each
/// sized by its arguments.
struct Resolved(Recent<ResolvedConfirmation>);

impl Default for Resolved {
    fn default() -> Self {
        Self(Recent::new(KeptFor {
            count: RESOLUTIONS_KEPT,
            age: RESOLUTIONS_KEPT_FOR,
            bytes: RESOLUTIONS_KEPT_BYTES,
        }))
    }
}

/// Why an answer was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfirmError {
    /// No confirmation with this id is waiting.
    #[error(
        "no pending confirmation `{0}`: it is unknown, already answered, expired, or withdrawn \
         when its run ended (a restart of the host ends every run it does not keep on disk)"
    )]
    NotPending(String),
    /// The confirmation no longer waits, lately: answered already (a
    /// second click, another approver first), expired, or withdrawn.
    /// `how` says which, by whom and when ([`ResolvedConfirmation::describe`]).
    #[error("confirmation `{id}` no longer waits: {how}")]
    Resolved { id: String, how: String },
    /// The confirmation needs an approver other than the principal its run
    /// acts for, and this approval was on behalf of that principal (or of
    /// nobody). It stays pending.
    #[error(
        "confirmation `{id}` needs approval by someone other than {}: this approval is on \
         behalf of {}; it is still pending",
        requested_by.as_deref().map_or("the requester".into(), |name| format!("`{name}`, who requested the run")),
        by.as_deref().map_or("nobody named".into(), |name| format!("`{name}`"))
    )]
    SameApprover {
        id: String,
        requested_by: Option<String>,
        by: Option<String>,
    },
    /// Only the policy's approvers may approve the confirmation
    /// ([`ConfirmationPolicy::approvers_of`](super::ConfirmationPolicy::approvers_of)),
    /// and this approval was on behalf of someone else (or of nobody). It
    /// stays pending.
    #[error(
        "confirmation `{id}` ({tool}) may be approved only by {}: this approval is on behalf \
         of {}; it is still pending",
        list_of_names(approvers),
        by.as_deref().map_or("nobody named".into(), |name| format!("`{name}`"))
    )]
    NotAnApprover {
        id: String,
        tool: String,
        by: Option<String>,
        approvers: Vec<String>,
    },
}

/// The names quoted and joined for a sentence (`a`, `b` or `c`); `nobody`
/// for none.
fn list_of_names(names: &[String]) -> String {
    let quoted: Vec<String> = names.iter().map(|name| format!("`{name}`")).collect();
    match quoted.split_last() {
        None => "nobody".to_owned(),
        Some((last, [])) => last.clone(),
        Some((last, others)) => format!("{} or {last}", others.join(", ")),
    }
}

/// What to do with a pending confirmation ([`Confirmations::answer`],
/// [`RunHandle::finish_with`](super::RunHandle::finish_with)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Approve it: the call runs with the arguments shown.
    Approve,
    /// Reject it, with an optional reason for the model.
    Reject(Option<String>),
    /// Leave it pending: someone else answers, or it expires.
    Leave,
}

/// A person's answer, as the waiting run receives it.
enum Answer {
    Approve {
        by: Option<String>,
    },
    Reject {
        reason: Option<String>,
        by: Option<String>,
    },
}

impl Answer {
    fn resolution(&self) -> Resolution {
        match self {
            Self::Approve { by } => Resolution::Approved { by: by.clone() },
            Self::Reject { reason, by } => Resolution::Declined(Declined::Rejected {
                reason: reason.clone(),
                by: by.clone(),
            }),
        }
    }
}

struct Slot {
    pending: PendingConfirmation,
    /// The size of its arguments as JSON, measured before it was stored.
    argument_bytes: usize,
    answer: oneshot::Sender<Answer>,
    /// Set when an answer removes the slot; dropped with it however it
    /// goes (see [`ConfirmationWatch`]).
    answered: watch::Sender<bool>,
    /// Counts the run as waiting while the slot stays: it is back at work
    /// the moment an answer (or its expiry, or its end) removes the slot.
    _waiting: Waiting,
}

/// The pending confirmations of all runs of one agent. Cheap to clone;
/// clones share the same confirmations.
#[derive(Clone, Default)]
pub struct Confirmations {
    slots: Arc<Mutex<HashMap<ConfirmationId, Slot>>>,
    /// The policy last put in force by [`Self::hold_to`], if any: a
    /// confirmation opened after it takes who may approve from it, not from
    /// the policy its run read. Set and read with `slots` locked, so one
    /// opened by a run that read the policy just before a new one came in
    /// is held to the new one, whichever of the two takes the lock first.
    held_to: Arc<ArcSwapOption<ConfirmationPolicy>>,
    /// The latest to stop waiting; locked after `slots` whenever both are.
    resolved: Arc<Mutex<Resolved>>,
    /// The runs these confirmations belong to, and which of them wait.
    activity: Activity,
}

/// Whether `by` may approve `pending`: someone other than the requester
/// when a separate approver is needed, and one of the approvers when the
/// policy names them. Either way, an approval on behalf of nobody is not.
fn may_approve(pending: &PendingConfirmation, by: Option<&str>) -> Result<(), ConfirmError> {
    let id = pending.id.as_str();
    if pending.separate_approver && (by.is_none() || by == pending.requested_by.as_deref()) {
        return Err(ConfirmError::SameApprover {
            id: id.to_owned(),
            requested_by: pending.requested_by.clone(),
            by: by.map(str::to_owned),
        });
    }
    match &pending.approvers {
        Some(approvers) if !by.is_some_and(|by| approvers.contains(by)) => {
            Err(ConfirmError::NotAnApprover {
                id: id.to_owned(),
                tool: pending.tool.clone(),
                by: by.map(str::to_owned),
                approvers: approvers.iter().cloned().collect(),
            })
        }
        _ => Ok(()),
    }
}

impl Confirmations {
    /// Approves `id`: the call runs with the arguments shown. Returns what
    /// was approved. To record who approved, use [`Confirmations::answer`].
    pub fn approve(&self, id: &str) -> Result<PendingConfirmation, ConfirmError> {
        self.answer(id, Decision::Approve, None)
    }

    /// Rejects `id`: the call does not run and the model is told, with
    /// `reason` if given.
    pub fn reject(
        &self,
        id: &str,
        reason: Option<String>,
    ) -> Result<PendingConfirmation, ConfirmError> {
        self.answer(id, Decision::Reject(reason), None)
    }

    /// Answers `id` on behalf of `by` (a user's id, an API key's name):
    /// the [`Resolution`] the run's events and logs carry names them.
    /// Returns what was answered (with [`Decision::Leave`], what waits).
    pub fn answer(
        &self,
        id: &str,
        decision: Decision,
        by: Option<String>,
    ) -> Result<PendingConfirmation, ConfirmError> {
        let answer = match decision {
            Decision::Approve => Answer::Approve { by },
            Decision::Reject(reason) => Answer::Reject { reason, by },
            Decision::Leave => return self.get(id).ok_or_else(|| self.not_pending(id)),
        };
        let mut slots = self.lock();
        if let (Answer::Approve { by }, Some(slot)) = (&answer, slots.get(id)) {
            may_approve(&slot.pending, by.as_deref())?;
        }
        let Slot {
            pending,
            argument_bytes,
            answer: to,
            answered,
            ..
        } = slots.remove(id).ok_or_else(|| self.not_pending(id))?;
        // Sent before the lock is let go: an expiry that finds the slot
        // gone then always finds the answer (see `Ticket::resolution`), so
        // an answer reported accepted is the one the call gets.
        let resolution = answer.resolution();
        let sent = to.send(answer);
        if sent.is_ok() {
            answered.send_replace(true);
            self.record(pending.clone(), argument_bytes, resolution);
        } else {
            self.record(pending.clone(), argument_bytes, Resolution::Withdrawn);
        }
        drop(slots);
        // A closed receiver means the run is gone: nothing was approved.
        sent.map_err(|_| self.not_pending(id))?;
        Ok(pending)
    }

    /// Answers `id` for a caller that decides on the spot with no one else
    /// to ask (a script, `--yes`): an approval refused because the
    /// confirmation needs a separate approver, or one of the policy's
    /// approvers, becomes a rejection that says so, instead of leaving the
    /// run waiting until the confirmation expires. Fails only when `id` is
    /// no longer pending.
    pub fn answer_on_the_spot(
        &self,
        id: &str,
        decision: Decision,
        by: Option<String>,
    ) -> Result<PendingConfirmation, ConfirmError> {
        match self.answer(id, decision, by.clone()) {
            Err(
                refused @ (ConfirmError::SameApprover { .. } | ConfirmError::NotAnApprover { .. }),
            ) => self.answer(id, Decision::Reject(Some(refused.to_string())), by),
            answered => answered,
        }
    }

    /// Where the confirmation `id` is: waiting, or how it ended when that
    /// was lately (among the last [`RESOLUTIONS_KEPT`], within
    /// [`RESOLUTIONS_KEPT_FOR`] and [`RESOLUTIONS_KEPT_BYTES`]). `None`:
    /// unknown, or resolved long ago.
    pub fn status(&self, id: &str) -> Option<ConfirmationStatus> {
        let slots = self.lock();
        if let Some(slot) = slots.get(id) {
            return Some(ConfirmationStatus::Pending(slot.pending.clone()));
        }
        self.lock_resolved()
            .0
            .latest(|resolved| resolved.confirmation.id.as_str() == id)
            .map(|(resolved, _)| resolved.clone())
            .map(ConfirmationStatus::Resolved)
    }

    /// The confirmation `id`, if it is waiting.
    pub fn get(&self, id: &str) -> Option<PendingConfirmation> {
        self.lock().get(id).map(|slot| slot.pending.clone())
    }

    /// A watch on the confirmation `id`, if it is waiting: it tells when the
    /// confirmation stops waiting, and whether an answer ended it.
    pub fn watch(&self, id: &str) -> Option<ConfirmationWatch> {
        self.lock()
            .get(id)
            .map(|slot| ConfirmationWatch(slot.answered.subscribe()))
    }

    /// Every waiting confirmation, soonest to expire first.
    pub fn pending(&self) -> Vec<PendingConfirmation> {
        let mut pending: Vec<_> = self
            .lock()
            .values()
            .map(|slot| slot.pending.clone())
            .collect();
        pending.sort_by_key(|pending| pending.expires_at);
        pending
    }

    /// Holds the confirmations pending to `policy`, put in force meanwhile:
    /// who may approve each is what it says now. An approver taken off the
    /// list can no longer approve what waits; their expiry stays.
    pub(super) fn hold_to(&self, policy: &ConfirmationPolicy) {
        let mut slots = self.lock();
        self.held_to.store(Some(Arc::new(policy.clone())));
        for slot in slots.values_mut() {
            slot.pending.hold_to(policy);
        }
    }

    /// Opens a confirmation for a call; the returned ticket waits for the
    /// answer.
    pub(crate) fn open(
        &self,
        run: RunId,
        requested_by: Option<String>,
        caller: Caller,
        tool: &str,
        arguments: Value,
        policy: &ConfirmationPolicy,
    ) -> Ticket {
        let expiry = policy.expiry.min(MAX_EXPIRY);
        let pending = PendingConfirmation {
            id: ConfirmationId::random(),
            run,
            requested_by,
            caller,
            tool: tool.to_owned(),
            summary: summarize(tool, &arguments),
            arguments,
            separate_approver: policy.separate_approver,
            approvers: policy.approvers_of(tool).cloned(),
            expires_at: SystemTime::now() + expiry,
        };
        self.insert(pending, expiry)
    }

    /// Opens again the confirmation a kept run waited on when its host
    /// stopped: the same id, call and expiry; who may approve it is what
    /// `policy` says now. One that expired meanwhile is not opened: it is
    /// on record as expired, and that is the resolution returned.
    pub(super) fn reopen(
        &self,
        kept: &KeptConfirmation,
        run: RunId,
        requested_by: Option<String>,
        caller: Caller,
        policy: &ConfirmationPolicy,
    ) -> Result<Ticket, Resolution> {
        let expiry = kept
            .expires_at
            .duration_since(SystemTime::now())
            .unwrap_or_default()
            .min(MAX_EXPIRY);
        let pending = kept.shown(run, requested_by, caller, policy);
        if expiry.is_zero() {
            let expired = Resolution::Declined(Declined::Expired {
                after: policy.expiry.min(MAX_EXPIRY),
            });
            let argument_bytes = pending.arguments.to_string().len();
            let _slots = self.lock();
            self.record(pending, argument_bytes, expired.clone());
            return Err(expired);
        }
        Ok(self.insert(pending, expiry))
    }

    /// Holds `pending` until it is answered, or `expiry` from now.
    fn insert(&self, mut pending: PendingConfirmation, expiry: Duration) -> Ticket {
        let (answer, receiver) = oneshot::channel();
        let argument_bytes = pending.arguments.to_string().len();
        let mut slots = self.lock();
        if let Some(policy) = &*self.held_to.load() {
            pending.hold_to(policy);
        }
        slots.insert(
            pending.id.clone(),
            Slot {
                pending: pending.clone(),
                argument_bytes,
                answer,
                answered: watch::Sender::new(false),
                _waiting: self.activity.waiting(),
            },
        );
        Ticket {
            store: self.clone(),
            pending,
            receiver,
            expiry,
        }
    }

    /// The runs of the agent these confirmations belong to.
    /// Withdraws the confirmation `id`, as the end of its run does: for a
    /// holder that will not let the run wait (a gateway at its cap on
    /// waiting runs), so that nobody sees it pending while the run stops.
    pub(crate) fn withdraw(&self, id: &ConfirmationId) {
        let mut slots = self.lock();
        if let Some(slot) = slots.remove(id) {
            self.record(slot.pending, slot.argument_bytes, Resolution::Withdrawn);
        }
    }

    pub(crate) fn activity(&self) -> &Activity {
        &self.activity
    }

    /// Why `id`, not waiting, cannot be answered: how it ended, when that
    /// is remembered.
    fn not_pending(&self, id: &str) -> ConfirmError {
        match self
            .lock_resolved()
            .0
            .latest(|resolved| resolved.confirmation.id.as_str() == id)
        {
            Some((resolved, _)) => ConfirmError::Resolved {
                id: id.to_owned(),
                how: resolved.describe(),
            },
            None => ConfirmError::NotPending(id.to_owned()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<ConfirmationId, Slot>> {
        // The map is consistent after every statement; a panic elsewhere
        // cannot leave it half-updated.
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_resolved(&self) -> MutexGuard<'_, Resolved> {
        self.resolved.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Remembers how `confirmation` ended, for [`Self::status`]. Called as
    /// its slot is removed, with `slots` still locked, so that a lookup
    /// finds it either waiting or resolved.
    fn record(
        &self,
        confirmation: PendingConfirmation,
        argument_bytes: usize,
        resolution: Resolution,
    ) {
        let resolved = ResolvedConfirmation {
            confirmation,
            resolution,
            resolved_at: SystemTime::now(),
            interrupted: None,
        };
        self.remember(resolved, argument_bytes);
    }

    /// Remembers, for [`Self::status`], `confirmation`, whose approval a
    /// stop of the host that ran it cut short (`interrupted`). Without it
    /// the approver, looking it up in this host, would find no trace of the
    /// answer they gave.
    pub(super) fn remember_interrupted(
        &self,
        confirmation: PendingConfirmation,
        interrupted: &InterruptedRun,
    ) {
        let argument_bytes = confirmation.arguments.to_string().len();
        let resolved = ResolvedConfirmation {
            confirmation,
            resolution: Resolution::Approved {
                by: interrupted.approved_by.clone(),
            },
            resolved_at: interrupted.approved_at,
            interrupted: Some(interrupted.to_string()),
        };
        self.remember(resolved, argument_bytes);
    }

    fn remember(&self, resolved: ResolvedConfirmation, argument_bytes: usize) {
        // Kept for its while from when this host learned of it.
        self.lock_resolved()
            .0
            .push(resolved, SystemTime::now(), argument_bytes);
    }
}

/// Tells when one confirmation stops waiting ([`Confirmations::watch`]).
pub struct ConfirmationWatch(watch::Receiver<bool>);

impl ConfirmationWatch {
    /// Waits until the confirmation no longer waits, wherever it was
    /// answered; `true` when an answer (approval or rejection) ended it,
    /// `false` when it expired or its run withdrew it.
    pub async fn answered(mut self) -> bool {
        // The sender goes with the slot: `true` is set before an answer
        // drops it, and `wait_for` looks at the last value before it fails.
        self.0.wait_for(|answered| *answered).await.is_ok()
    }
}

/// A run's claim on one open confirmation. Dropping it withdraws the
/// confirmation.
pub(crate) struct Ticket {
    store: Confirmations,
    pending: PendingConfirmation,
    receiver: oneshot::Receiver<Answer>,
    expiry: Duration,
}

impl Ticket {
    /// The confirmation as shown to the person.
    pub(super) fn pending(&self) -> &PendingConfirmation {
        &self.pending
    }

    /// Waits for the answer, or the expiry.
    pub(super) async fn resolution(mut self) -> Resolution {
        let answer = match tokio::time::timeout(self.expiry, &mut self.receiver).await {
            Ok(answer) => answer.ok(),
            // Withdraw it; an answer that arrived in the meantime still counts.
            Err(_elapsed) => {
                let mut slots = self.store.lock();
                match slots.remove(&self.pending.id) {
                    Some(slot) => {
                        let expired = Declined::Expired { after: self.expiry };
                        self.store.record(
                            slot.pending,
                            slot.argument_bytes,
                            Resolution::Declined(expired),
                        );
                        None
                    }
                    None => self.receiver.try_recv().ok(),
                }
            }
        };
        match answer {
            Some(Answer::Approve { by }) => Resolution::Approved { by },
            Some(Answer::Reject { reason, by }) => {
                Resolution::Declined(Declined::Rejected { reason, by })
            }
            // Unanswered (or the store dropped the slot): never runs.
            None => Resolution::Declined(Declined::Expired { after: self.expiry }),
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.store.withdraw(&self.pending.id);
    }
}

/// The longest a confirmation waits, whatever the policy says: its expiry
/// time must be a date HTTP can carry (before the year 10000).
pub const MAX_EXPIRY: Duration = Duration::from_secs(30 * 24 * 3600);

/// Characters of one argument value shown in a summary.
const SUMMARY_VALUE_CHARS: usize = 80;

/// One line for a person: `tool: field 'text', count 2`. What the model
/// wrote cannot make it say something else: see [`shown`].
pub(super) fn summarize(tool: &str, arguments: &Value) -> String {
    let fields = match arguments {
        Value::Object(fields) if fields.is_empty() => return tool.to_owned(),
        Value::Object(fields) => fields,
        other => return format!("{tool}: {}", shown(&other.to_string(), false)),
    };
    let parts: Vec<String> = fields
        .iter()
        .map(|(name, value)| {
            let value = match value {
                Value::String(text) => format!("'{}'", shown(text, true)),
                other => shown(&other.to_string(), false),
            };
            format!("{} {value}", shown(name, false))
        })
        .collect();
    format!("{tool}: {}", parts.join(", "))
}

/// `text` as a summary shows it: at most [`SUMMARY_VALUE_CHARS`] characters
/// and `…`; control characters and those that reorder or hide text
/// (bidirectional overrides, zero-width ones) written out, so that it can
/// neither start a line of its own nor show other words than it holds;
/// `quoted`: `'` and `\` escaped too, so that a value cannot seem to end
/// early (`'Road 1', orderId '88231'` inside one value).
fn shown(text: &str, quoted: bool) -> String {
    let mut shown = String::with_capacity(text.len().min(SUMMARY_VALUE_CHARS * 4));
    for c in clip(text, SUMMARY_VALUE_CHARS).chars() {
        let reorders = matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        if c.is_control() || reorders {
            shown.extend(c.escape_unicode());
        } else if quoted && matches!(c, '\'' | '\\') {
            shown.push('\\');
            shown.push(c);
        } else {
            shown.push(c);
        }
    }
    shown
}

pub(super) fn http_date<S: Serializer>(
    time: &SystemTime,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&httpdate::fmt_http_date(*time))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn open(store: &Confirmations, expiry: Duration) -> Ticket {
        open_for(store, None, expiry, false)
    }

    fn open_for(
        store: &Confirmations,
        requested_by: Option<&str>,
        expiry: Duration,
        separate_approver: bool,
    ) -> Ticket {
        store.open(
            RunId::random(),
            requested_by.map(str::to_owned),
            Caller::Main,
            "applyRefund",
            json!({"orderId": "88231", "reason": "broken"}),
            &ConfirmationPolicy {
                expiry,
                separate_approver,
                ..ConfirmationPolicy::default()
            },
        )
    }

    #[test]
    fn summaries_are_one_readable_line() {
        assert_eq!(
            summarize(
                "applyRefund",
                &json!({"orderId": "88231", "reason": "broken"})
            ),
            "applyRefund: orderId '88231', reason 'broken'"
        );
        assert_eq!(summarize("pay_order", &json!({})), "pay_order");
        assert_eq!(
            summarize("update_cart_item", &json!({"quantity": 2})),
            "update_cart_item: quantity 2"
        );
        assert!(summarize("t", &json!({"a": "x".repeat(200)})).ends_with("…'"));
    }

    #[test]
    fn a_summary_shows_what_the_arguments_hold_and_nothing_else() {
        // A value that would read as two fields.
        assert_eq!(
            summarize(
                "change_address",
                &json!({"address": "Road 1', orderId '88231", "orderId": "99001"})
            ),
            r"change_address: address 'Road 1\', orderId \'88231', orderId '99001'"
        );
        // Lines of its own, text shown reversed, a key with a newline.
        assert_eq!(
            summarize(
                "t",
                &json!({"a": "x\n  approve: yes", "b": "\u{202e}kcab", "c\nd": 1})
            ),
            r"t: a 'x\u{a}  approve: yes', b '\u{202e}kcab', c\u{a}d 1"
        );
    }

    #[tokio::test]
    async fn approve_resolves_once_and_removes_the_confirmation() {
        let store = Confirmations::default();
        let ticket = open(&store, Duration::from_secs(60));
        let id = ticket.pending().id.clone();
        assert_eq!(store.pending().len(), 1);
        let approved = store.approve(id.as_str()).unwrap();
        assert_eq!(approved.arguments["orderId"], "88231");
        assert_eq!(ticket.resolution().await, Resolution::Approved { by: None });
        assert!(store.pending().is_empty());
        // Answered again: how it ended.
        let Err(ConfirmError::Resolved { how, .. }) = store.approve(id.as_str()) else {
            panic!("a second approval was not told the first");
        };
        assert!(
            how.starts_with("approved, ") && how.ends_with(" GMT"),
            "{how}"
        );
        let unknown = store.approve("cf_unknown");
        assert_eq!(unknown, Err(ConfirmError::NotPending("cf_unknown".into())));
    }

    fn resolution_of(store: &Confirmations, id: &str) -> Resolution {
        match store.status(id) {
            Some(ConfirmationStatus::Resolved(resolved)) => {
                assert_eq!(resolved.confirmation.id.as_str(), id);
                resolved.resolution
            }
            other => panic!("{id} is not resolved: {other:?}"),
        }
    }

    #[tokio::test]
    async fn the_status_tells_how_a_confirmation_ended_however_it_did() {
        let store = Confirmations::default();
        assert_eq!(store.status("cf_unknown"), None);

        let ticket = open(&store, Duration::from_secs(60));
        let id = ticket.pending().id.to_string();
        assert!(matches!(
            store.status(&id),
            Some(ConfirmationStatus::Pending(_))
        ));
        store
            .answer(&id, Decision::Approve, Some("supervisor".into()))
            .unwrap();
        // Known as resolved from the moment the answer is accepted, before
        // the run has taken it.
        let approved = Resolution::Approved {
            by: Some("supervisor".into()),
        };
        assert_eq!(resolution_of(&store, &id), approved);
        assert_eq!(ticket.resolution().await, approved);
        assert_eq!(resolution_of(&store, &id), approved);

        let ticket = open(&store, Duration::from_secs(60));
        let id = ticket.pending().id.to_string();
        store.reject(&id, Some("wrong order".into())).unwrap();
        assert_eq!(
            resolution_of(&store, &id),
            Resolution::Declined(Declined::Rejected {
                reason: Some("wrong order".into()),
                by: None
            })
        );

        let ticket = open(&store, Duration::from_millis(10));
        let id = ticket.pending().id.to_string();
        ticket.resolution().await;
        assert_eq!(
            resolution_of(&store, &id),
            Resolution::Declined(Declined::Expired {
                after: Duration::from_millis(10)
            })
        );

        let ticket = open(&store, Duration::from_secs(60));
        let id = ticket.pending().id.to_string();
        drop(ticket);
        assert_eq!(resolution_of(&store, &id), Resolution::Withdrawn);
    }

    #[test]
    fn large_arguments_make_room_by_pushing_older_resolutions_out() {
        let store = Confirmations::default();
        let large = |store: &Confirmations| {
            // Four fit: their JSON is a few bytes more than the note.
            let arguments = json!({"note": "x".repeat(RESOLUTIONS_KEPT_BYTES / 4 - 64)});
            let ticket = store.open(
                RunId::random(),
                None,
                Caller::Main,
                "submit_ticket",
                arguments,
                &ConfirmationPolicy::default(),
            );
            ticket.pending().id.to_string()
        };
        let ids: Vec<String> = (0..5).map(|_| large(&store)).collect();
        assert_eq!(store.status(&ids[0]), None, "pushed out by the bytes kept");
        for id in &ids[1..] {
            assert_eq!(resolution_of(&store, id), Resolution::Withdrawn);
        }
    }

    #[test]
    fn only_the_latest_resolutions_are_remembered() {
        let store = Confirmations::default();
        let ids: Vec<String> = (0..=RESOLUTIONS_KEPT)
            .map(|_| {
                open(&store, Duration::from_secs(60))
                    .pending()
                    .id
                    .to_string()
            })
            .collect();
        assert_eq!(store.status(&ids[0]), None, "the oldest is forgotten");
        assert_eq!(resolution_of(&store, &ids[1]), Resolution::Withdrawn);
        assert_eq!(
            resolution_of(&store, &ids[RESOLUTIONS_KEPT]),
            Resolution::Withdrawn
        );
    }

    #[tokio::test]
    async fn a_separate_approver_is_someone_the_run_does_not_act_for() {
        let store = Confirmations::default();
        let ticket = open_for(&store, Some("desk"), Duration::from_secs(60), true);
        let id = ticket.pending().id.as_str();
        for by in [Some("desk"), None] {
            let refused = store.answer(id, Decision::Approve, by.map(str::to_owned));
            assert_eq!(
                refused,
                Err(ConfirmError::SameApprover {
                    id: id.to_owned(),
                    requested_by: Some("desk".into()),
                    by: by.map(str::to_owned),
                })
            );
        }
        assert_eq!(
            store
                .answer(id, Decision::Approve, Some("desk".into()))
                .unwrap_err()
                .to_string(),
            format!(
                "confirmation `{id}` needs approval by someone other than `desk`, who requested \
                 the run: this approval is on behalf of `desk`; it is still pending"
            )
        );
        approve_the_one_pending(&store, ticket, "supervisor").await;

        // The requester may still say no; a run acting for nobody needs a
        // named approver.
        let ticket = open_for(&store, Some("desk"), Duration::from_secs(60), true);
        store
            .answer(
                ticket.pending().id.as_str(),
                Decision::Reject(None),
                Some("desk".into()),
            )
            .unwrap();
        let anonymous = open_for(&store, None, Duration::from_secs(60), true);
        let id = anonymous.pending().id.as_str();
        assert!(store.approve(id).is_err());
        store
            .answer(id, Decision::Approve, Some("desk".into()))
            .unwrap();

        // A caller with no one else to ask declines instead of leaving the
        // run to wait for the expiry.
        let ticket = open_for(&store, None, Duration::from_secs(60), true);
        let reason = declined_on_the_spot(&store, ticket).await;
        assert!(
            reason.contains("needs approval by someone other than the requester"),
            "{reason}"
        );
    }

    /// Approves `ticket`'s confirmation, the one left pending after refused
    /// approvals, on behalf of `by`, and checks that its call gets that.
    #[tokio::test]
    async fn confirmations_pending_are_held_to_a_policy_put_in_force() {
        let store = Confirmations::default();
        let ticket = open_for(&store, Some("desk"), Duration::from_secs(60), false);
        let id = ticket.pending().id.clone();
        store.hold_to(&ConfirmationPolicy::default().tool_approvers("applyRefund", ["finance"]));
        let pending = &store.pending()[0];
        assert_eq!(
            pending.approvers,
            Some(BTreeSet::from(["finance".to_owned()]))
        );
        assert_eq!(
            pending.expires_at,
            ticket.pending().expires_at,
            "its expiry stays"
        );
        let refused = store.answer(id.as_str(), Decision::Approve, Some("desk".into()));
        assert!(
            matches!(refused, Err(ConfirmError::NotAnApprover { .. })),
            "{refused:?}"
        );
        approve_the_one_pending(&store, ticket, "finance").await;
    }

    /// Regression: a run that read the policy just before a new one came
    /// in opened its confirmation after the new one was put in force, and
    /// kept the approvers of the policy it read.
    #[tokio::test]
    async fn a_confirmation_opened_under_a_policy_just_replaced_is_held_to_the_new_one() {
        let store = Confirmations::default();
        store.hold_to(&ConfirmationPolicy::default().tool_approvers("applyRefund", ["finance"]));
        // The run's policy: the one in force when it read it.
        let ticket = open_for(&store, Some("desk"), Duration::from_secs(60), false);
        let finance = Some(BTreeSet::from(["finance".to_owned()]));
        assert_eq!(ticket.pending().approvers, finance);
        assert_eq!(store.pending()[0].approvers, finance);
        approve_the_one_pending(&store, ticket, "finance").await;
    }

    async fn approve_the_one_pending(store: &Confirmations, ticket: Ticket, by: &str) {
        assert_eq!(
            store.pending().len(),
            1,
            "a refused approval leaves it pending"
        );
        store
            .answer(
                ticket.pending().id.as_str(),
                Decision::Approve,
                Some(by.into()),
            )
            .unwrap();
        assert_eq!(
            ticket.resolution().await,
            Resolution::Approved {
                by: Some(by.into())
            }
        );
    }

    /// Approves `ticket`'s confirmation on the spot, on behalf of nobody, and
    /// returns the reason of the rejection that approval became.
    async fn declined_on_the_spot(store: &Confirmations, ticket: Ticket) -> String {
        store
            .answer_on_the_spot(ticket.pending().id.as_str(), Decision::Approve, None)
            .unwrap();
        let Resolution::Declined(Declined::Rejected {
            reason: Some(reason),
            by: None,
        }) = ticket.resolution().await
        else {
            panic!("declined with a reason");
        };
        reason
    }

    /// Opens a confirmation of `tool` under `policy`, for a run acting for
    /// `desk`.
    fn open_under(store: &Confirmations, tool: &str, policy: &ConfirmationPolicy) -> Ticket {
        store.open(
            RunId::random(),
            Some("desk".into()),
            Caller::Main,
            tool,
            json!({"orderId": "88231"}),
            policy,
        )
    }

    #[tokio::test]
    async fn only_the_policys_approvers_may_approve_and_anyone_may_reject() {
        let store = Confirmations::default();
        let policy = ConfirmationPolicy::default()
            .approvers(["supervisor"])
            .tool_approvers("applyRefund", ["finance", "cfo"]);

        let refund = open_under(&store, "applyRefund", &policy);
        let id = refund.pending().id.as_str();
        assert_eq!(
            refund.pending().approvers,
            Some(["cfo".to_owned(), "finance".to_owned()].into())
        );
        for by in [Some("desk"), Some("supervisor"), None] {
            let refused = store.answer(id, Decision::Approve, by.map(str::to_owned));
            assert_eq!(
                refused,
                Err(ConfirmError::NotAnApprover {
                    id: id.to_owned(),
                    tool: "applyRefund".into(),
                    by: by.map(str::to_owned),
                    approvers: vec!["cfo".into(), "finance".into()],
                }),
                "{by:?}"
            );
        }
        assert_eq!(
            store
                .answer(id, Decision::Approve, Some("desk".into()))
                .unwrap_err()
                .to_string(),
            format!(
                "confirmation `{id}` (applyRefund) may be approved only by `cfo` or `finance`: \
                 this approval is on behalf of `desk`; it is still pending"
            )
        );
        approve_the_one_pending(&store, refund, "finance").await;

        // A tool without approvers of its own takes the policy's; the
        // requester may still say no.
        let address = open_under(&store, "change_address", &policy);
        let id = address.pending().id.as_str();
        assert_eq!(
            address.pending().approvers,
            Some(["supervisor".to_owned()].into())
        );
        assert!(
            store
                .answer(id, Decision::Approve, Some("finance".into()))
                .is_err()
        );
        store
            .answer(id, Decision::Reject(None), Some("desk".into()))
            .unwrap();

        // Without approvers, anyone may approve.
        let open = open_under(&store, "applyRefund", &ConfirmationPolicy::default());
        assert_eq!(open.pending().approvers, None);
        store.approve(open.pending().id.as_str()).unwrap();

        // A caller deciding on the spot declines, saying who may approve.
        let ticket = open_under(&store, "applyRefund", &policy);
        let reason = declined_on_the_spot(&store, ticket).await;
        assert!(
            reason.contains("may be approved only by `cfo` or `finance`"),
            "{reason}"
        );
    }

    #[tokio::test]
    async fn reject_carries_the_reason() {
        let store = Confirmations::default();
        let ticket = open(&store, Duration::from_secs(60));
        store
            .reject(ticket.pending().id.as_str(), Some("wrong order".into()))
            .unwrap();
        assert_eq!(
            ticket.resolution().await,
            Resolution::Declined(Declined::Rejected {
                reason: Some("wrong order".into()),
                by: None,
            })
        );
    }

    #[tokio::test]
    async fn an_answer_on_behalf_of_someone_names_them() {
        let store = Confirmations::default();
        let approved = open(&store, Duration::from_secs(60));
        store
            .answer(
                approved.pending().id.as_str(),
                Decision::Approve,
                Some("support".into()),
            )
            .unwrap();
        assert_eq!(
            approved.resolution().await,
            Resolution::Approved {
                by: Some("support".into())
            }
        );
        let rejected = open(&store, Duration::from_secs(60));
        store
            .answer(
                rejected.pending().id.as_str(),
                Decision::Reject(None),
                Some("billing".into()),
            )
            .unwrap();
        assert_eq!(
            rejected.resolution().await,
            Resolution::Declined(Declined::Rejected {
                reason: None,
                by: Some("billing".into()),
            })
        );
    }

    #[tokio::test]
    async fn unanswered_confirmations_expire_and_cannot_be_answered_late() {
        let store = Confirmations::default();
        let ticket = open(&store, Duration::from_millis(20));
        let id = ticket.pending().id.clone();
        assert_eq!(
            ticket.resolution().await,
            Resolution::Declined(Declined::Expired {
                after: Duration::from_millis(20)
            })
        );
        assert!(store.approve(id.as_str()).is_err());
    }

    #[test]
    fn an_expiry_past_what_http_dates_carry_is_cut_to_the_longest_wait() {
        let store = Confirmations::default();
        let ticket = open(&store, Duration::MAX);
        assert_eq!(ticket.expiry, MAX_EXPIRY);
        let json = serde_json::to_value(ticket.pending()).unwrap();
        assert!(json["expires_at"].is_string(), "{json}");
    }

    #[tokio::test]
    async fn a_watch_tells_an_answer_from_an_expiry_or_a_withdrawal() {
        let store = Confirmations::default();
        let approved = open(&store, Duration::from_secs(60));
        let watch = store.watch(approved.pending().id.as_str()).unwrap();
        store.approve(approved.pending().id.as_str()).unwrap();
        assert!(watch.answered().await);
        assert!(store.watch(approved.pending().id.as_str()).is_none());

        let expiring = open(&store, Duration::from_millis(20));
        let watch = store.watch(expiring.pending().id.as_str()).unwrap();
        expiring.resolution().await;
        assert!(!watch.answered().await);

        let withdrawn = open(&store, Duration::from_secs(60));
        let watch = store.watch(withdrawn.pending().id.as_str()).unwrap();
        drop(withdrawn);
        assert!(!watch.answered().await);
    }

    #[test]
    fn a_dropped_run_withdraws_its_confirmation() {
        let store = Confirmations::default();
        let ticket = open(&store, Duration::from_secs(60));
        let id = ticket.pending().id.clone();
        drop(ticket);
        assert!(store.get(id.as_str()).is_none());
    }
}
