//! What became of the runs that waited for a person: `GET /v1/runs/{id}`.
//!
//! A run the gateway parks leaves its requester's sight. A person answers
//! its confirmation elsewhere (a separate approver, an embedder's code), and
//! the request that answered gets the run's result, or nobody does when the
//! parking drives the run on by itself. The ledger keeps each such run's
//! latest state, so that whoever holds the run's id can look up how it
//! ended: the refund id, the answer, or why it failed. A run that never
//! waited answered its own request, and is not kept.
//!
//! A run's record is its requester's: it is shown to the [`Principal`] the
//! run acts for and to the admin key, and to anyone only when the run acts
//! for nobody (an open gateway). A confirmation is for whoever may answer
//! it, so `GET /v1/confirmations/{id}` shows it to every API key; what the
//! run then did, its result, is not theirs.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde_json::{Value, json};

use crate::agent::{
    AgentError, CallOutcome, ConfirmationStatus, Confirmations, PendingConfirmation, RunId,
    RunOutput, SkillOutput,
};
use crate::recent::{KeptFor, Recent};

use super::chat::answer_path;
use super::errors::{ApiError, ApiPath, ErrorType};
use super::keys::AdminKey;
use super::openai::confirmation_json;
use super::{AppState, Mount, Principal};

/// `GET /v1/runs/{id}`: where a run that waited for a person stands. `status`
/// is `pending_confirmation` (with the confirmation and how to answer it),
/// `running` (its confirmation was answered, or expired, and it goes on;
/// `last_resolution` says how), `done` (with an invocation's `result` or a
/// chat's `answer` and `finish_reason`) or `failed` (with `error`, as the
/// API reports errors); `updated_at` is when it got there. How a requester
/// learns what a run did after a separate approver resumed it. 404 for a
/// run that never waited, that was last recorded too long ago (see
/// [`RUNS_KEPT`]), or that acts for another principal than the request's
/// (see the module docs): the same answer, so that an id says nothing of
/// another's runs.
pub async fn run_status(
    State(state): State<Arc<AppState>>,
    ApiPath(id): ApiPath<String>,
    mount: Mount,
    principal: Option<Extension<Principal>>,
    admin: Option<Extension<AdminKey>>,
) -> Result<Json<Value>, ApiError> {
    let reader = Reader {
        principal: principal
            .as_ref()
            .map(|Extension(Principal(name))| name.as_str()),
        admin: admin.is_some(),
    };
    let Some((run_state, at)) = state.ledger.get(&id, &reader) else {
        return Err(ApiError::not_found(
            "run_not_found",
            format!(
                "no run `{id}` is known here: only runs that waited for a confirmation are kept, \
                 for {} minutes after their last change (the latest {RUNS_KEPT}), and not across \
                 a restart",
                RUNS_KEPT_FOR.as_secs() / 60
            ),
        ));
    };
    let confirmations = state.host.confirmations();
    Ok(Json(status_body(
        &id,
        run_state,
        at,
        confirmations,
        |pending| confirmation_json(pending, &answer_path(&mount, pending)),
    )))
}

/// How many run states the ledger keeps, and for how long: as long as
/// resolved confirmations are kept
/// ([`RESOLUTIONS_KEPT_FOR`](crate::agent::RESOLUTIONS_KEPT_FOR)), for four
/// times as many runs (a run is recorded as it waits and as it ends).
pub const RUNS_KEPT: usize = 4096;
/// See [`RUNS_KEPT`].
pub const RUNS_KEPT_FOR: Duration = crate::agent::RESOLUTIONS_KEPT_FOR;
/// The most bytes of arguments and results the kept states hold together;
/// older ones go first, the latest always stays.
pub const RUNS_KEPT_BYTES: usize = 32 << 20;

/// Where a run stood when it was last recorded.
#[derive(Debug, Clone)]
pub enum RunState {
    /// It waits for this confirmation, or ran on once that was answered.
    Waiting(PendingConfirmation),
    /// It ended with these fields of its response (`result` of an
    /// invocation, `answer` of a chat).
    Done(Value),
    /// It failed, or was aborted: the error as the API reports it.
    Failed(ApiError),
    /// Its host stopped after a write of it was approved: the error, and
    /// the approval with what the call returned, if it did.
    Interrupted { error: ApiError, approval: Value },
}

/// What a run's result is in the ledger.
pub trait Ledgered: Sized {
    fn state(result: &Result<Self, AgentError>) -> RunState;
}

impl Ledgered for SkillOutput {
    fn state(result: &Result<Self, AgentError>) -> RunState {
        match result {
            Ok(SkillOutput {
                outcome: CallOutcome::Done { result },
                ..
            }) => RunState::Done(json!({ "result": result })),
            Ok(SkillOutput { outcome, .. }) => RunState::Failed(skill_failed(outcome)),
            Err(error) => RunState::Failed(error.into()),
        }
    }
}

impl Ledgered for RunOutput {
    fn state(result: &Result<Self, AgentError>) -> RunState {
        match result {
            Ok(output) => RunState::Done(json!({
                "answer": output.answer,
                "finish_reason": output.finish_reason,
            })),
            Err(error) => RunState::Failed(error.into()),
        }
    }
}

/// The error of an invocation whose skill ran and failed, as the invoke
/// route answers it.
pub fn skill_failed(outcome: &CallOutcome) -> ApiError {
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        ErrorType::SkillError,
        "skill_failed",
        outcome.error_text().unwrap_or_default(),
    )
}

struct Entry {
    run: RunId,
    /// The principal the run acts for, if any: whose record it is.
    owner: Option<String>,
    state: RunState,
}

/// Who asks for a run's record.
#[derive(Debug, Clone, Copy, Default)]
pub struct Reader<'a> {
    /// The request's [`Principal`], if it has one.
    pub principal: Option<&'a str>,
    /// Whether it presented the admin key, which may read every record.
    pub admin: bool,
}

impl Reader<'_> {
    fn may_read(&self, owner: Option<&str>) -> bool {
        self.admin || owner.is_none() || owner == self.principal
    }
}

/// The latest states of the runs that waited, within [`RUNS_KEPT`],
/// [`RUNS_KEPT_FOR`] and [`RUNS_KEPT_BYTES`].
pub struct RunLedger {
    entries: Mutex<Recent<Entry>>,
}

impl Default for RunLedger {
    fn default() -> Self {
        Self {
            entries: Mutex::new(Recent::new(KeptFor {
                count: RUNS_KEPT,
                age: RUNS_KEPT_FOR,
                bytes: RUNS_KEPT_BYTES,
            })),
        }
    }
}

impl RunLedger {
    /// Records that `run`, which acts for `owner`, is now in `state`.
    pub fn record(&self, run: &RunId, owner: Option<&str>, state: RunState) {
        let bytes = match &state {
            RunState::Waiting(pending) => json_bytes(&pending.arguments),
            RunState::Done(fields) => json_bytes(fields),
            RunState::Failed(error) => json_bytes(error),
            RunState::Interrupted { error, approval } => json_bytes(error) + json_bytes(approval),
        };
        let entry = Entry {
            run: run.clone(),
            owner: owner.map(str::to_owned),
            state,
        };
        self.lock().push(entry, SystemTime::now(), bytes);
    }

    /// Records how `run`, which acts for `owner`, ended.
    pub fn ended<T: Ledgered>(
        &self,
        run: &RunId,
        owner: Option<&str>,
        result: &Result<T, AgentError>,
    ) {
        self.record(run, owner, T::state(result));
    }

    /// `run`'s latest state and when it was recorded, if it waited lately
    /// and `reader` may read its record.
    pub fn get(&self, run: &str, reader: &Reader) -> Option<(RunState, SystemTime)> {
        self.lock()
            .latest(|entry| entry.run.as_str() == run)
            .filter(|(entry, _)| reader.may_read(entry.owner.as_deref()))
            .map(|(entry, at)| (entry.state.clone(), at))
    }

    fn lock(&self) -> MutexGuard<'_, Recent<Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn json_bytes(value: &impl serde::Serialize) -> usize {
    serde_json::to_vec(value).map_or(0, |bytes| bytes.len())
}

/// `GET /v1/runs/{id}`'s body for a run in `state` since `at`: `status`
/// `pending_confirmation` (with the confirmation, whose `answer` is at
/// `answer_path`), `running` (its confirmation was answered and it goes
/// on), `done` (with its `result` or `answer`) or `failed` (with `error`).
pub fn status_body(
    run: &str,
    state: RunState,
    at: SystemTime,
    confirmations: &Confirmations,
    confirmation_json: impl FnOnce(&PendingConfirmation) -> Value,
) -> Value {
    let mut body = json!({
        "object": "run",
        "id": run,
        "updated_at": httpdate::fmt_http_date(at),
    });
    match state {
        RunState::Waiting(pending) => match confirmations.status(pending.id.as_str()) {
            Some(ConfirmationStatus::Pending(pending)) => {
                body["status"] = "pending_confirmation".into();
                body["confirmation"] = confirmation_json(&pending);
            }
            // Answered (or expired, or withdrawn) since: the run goes on
            // from it, and is recorded again when it ends or waits.
            resolved => {
                body["status"] = "running".into();
                if let Some(ConfirmationStatus::Resolved(resolved)) = resolved {
                    body["last_resolution"] = json!({
                        "confirmation": resolved.confirmation.id,
                        "resolution": resolved.resolution,
                    });
                }
            }
        },
        RunState::Done(fields) => {
            body["status"] = "done".into();
            if let (Value::Object(body), Value::Object(fields)) = (&mut body, fields) {
                body.extend(fields);
            }
        }
        RunState::Failed(error) => {
            body["status"] = "failed".into();
            body["error"] = json!(error);
        }
        RunState::Interrupted { error, approval } => {
            body["status"] = "failed".into();
            body["error"] = json!(error);
            body["interrupted"] = approval;
        }
    }
    body
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use serde_json::{Value, json};

    use super::{Reader, RunLedger, RunState, status_body};
    use crate::agent::{AgentError, Caller, ConfirmationPolicy, Confirmations, RunId};

    /// `run`'s body as the route shows it, confirmations shown by id.
    fn shown(ledger: &RunLedger, run: &RunId, confirmations: &Confirmations) -> Value {
        let (state, at) = ledger
            .get(run.as_str(), &Reader::default())
            .expect("on record");
        status_body(run.as_str(), state, at, confirmations, |pending| {
            json!(pending.id)
        })
    }

    #[test]
    fn a_run_is_shown_waiting_then_running_then_done() {
        let (ledger, confirmations) = (RunLedger::default(), Confirmations::default());
        let run = RunId::random();
        let _ticket = confirmations.open(
            run.clone(),
            None,
            Caller::Main,
            "applyRefund",
            json!({"orderId": "88231"}),
            &ConfirmationPolicy::default(),
        );
        let pending = confirmations.pending().remove(0);
        ledger.record(&run, None, RunState::Waiting(pending.clone()));
        let waiting = shown(&ledger, &run, &confirmations);
        assert_eq!(waiting["status"], "pending_confirmation");
        assert_eq!(waiting["confirmation"], json!(pending.id));

        confirmations.approve(pending.id.as_str()).unwrap();
        let running = shown(&ledger, &run, &confirmations);
        assert_eq!(running["status"], "running");
        assert_eq!(
            running["last_resolution"],
            json!({"confirmation": pending.id, "resolution": {"decision": "approved"}})
        );

        let done = RunState::Done(json!({"result": {"refunded": true}}));
        ledger.record(&run, None, done);
        let done = shown(&ledger, &run, &confirmations);
        assert_eq!(
            (
                &done["object"],
                &done["id"],
                &done["status"],
                &done["result"]
            ),
            (
                &json!("run"),
                &json!(run),
                &json!("done"),
                &json!({"refunded": true})
            )
        );
        let unknown = RunId::random();
        assert!(ledger.get(unknown.as_str(), &Reader::default()).is_none());
    }

    #[test]
    fn a_failed_run_shows_the_error_as_the_api_reports_it() {
        let ledger = RunLedger::default();
        let run = RunId::random();
        let aborted: Result<crate::agent::RunOutput, _> =
            Err(AgentError::Aborted("the host shut down".into()));
        ledger.ended(&run, None, &aborted);
        let (state, at) = ledger.get(run.as_str(), &Reader::default()).unwrap();
        assert!(at <= SystemTime::now());
        let failed = status_body(run.as_str(), state, at, &Confirmations::default(), |_| {
            Value::Null
        });
        assert_eq!(failed["status"], "failed");
        assert_eq!(failed["error"]["code"], "run_aborted");
        assert!(
            failed["error"]["message"]
                .as_str()
                .unwrap()
                .contains("the host shut down")
        );
    }

    #[test]
    fn a_run_s_record_is_read_by_whom_it_acts_for_and_the_admin() {
        let ledger = RunLedger::default();
        let (desk, open) = (RunId::random(), RunId::random());
        ledger.record(&desk, Some("desk"), RunState::Done(json!({})));
        ledger.record(&open, None, RunState::Done(json!({})));
        let reader = |principal, admin| Reader { principal, admin };
        let shown = |run: &RunId, reader: Reader| ledger.get(run.as_str(), &reader).is_some();
        assert!(shown(&desk, reader(Some("desk"), false)));
        assert!(!shown(&desk, reader(Some("billing"), false)));
        assert!(!shown(&desk, reader(None, false)));
        assert!(shown(&desk, reader(Some("admin"), true)));
        // A run that acts for nobody is anyone's to read.
        assert!(shown(&open, reader(Some("billing"), false)));
        assert!(shown(&open, reader(None, false)));
    }
}
