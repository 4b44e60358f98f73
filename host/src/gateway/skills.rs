//! `GET /v1/skills`, `GET /v1/skills/{name}`, `POST /v1/skills/{name}/invoke`.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::chat::answer_path;
use super::errors::{ApiError, ApiJson, ApiPath};
use super::ledger::skill_failed;
use super::openai::confirmation_json;
use super::runs::{InvokeRun, OwnedRun, Progress, park};
use super::{AppState, CallerSkills, Mount, RunStart};
use crate::agent::{AgentError, CallOutcome, PendingConfirmation, RunOptions, SkillOutput};
use crate::skills::{LoadedSkill, SkillSnapshot, SkillVersion};

/// Every loaded skill the caller may use, and every file whose latest
/// content failed to load — for a caller limited to some skills, only the
/// files of those skills (the others' names and reasons are the operator's
/// and their teams').
pub async fn list(
    State(state): State<Arc<AppState>>,
    CallerSkills(scope): CallerSkills,
) -> Json<Value> {
    let snapshot = state.host.snapshot();
    let usable = |skill: &&LoadedSkill| scope.allows(skill.component.name().as_str());
    let skills: Vec<Value> = snapshot
        .skills()
        .filter(usable)
        .map(|skill| describe(&snapshot, skill))
        .collect();
    let failures: Vec<Value> = snapshot
        .failures()
        .filter(|failure| {
            scope.is_all()
                || snapshot
                    .skills()
                    .filter(usable)
                    .any(|skill| skill.path == failure.path)
        })
        .map(|failure| {
            json!({
                "file": file_name(&failure.path),
                "reason": failure.reason,
            })
        })
        .collect();
    Json(json!({"object": "list", "data": skills, "failures": failures}))
}

/// One skill.
pub async fn get(
    State(state): State<Arc<AppState>>,
    CallerSkills(scope): CallerSkills,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<Value>, ApiError> {
    if !scope.allows(&name) {
        return Err(AgentError::SkillNotPermitted { skill: name, scope }.into());
    }
    let snapshot = state.host.snapshot();
    let skill = snapshot
        .get(&name)
        .ok_or_else(|| unknown_skill(&snapshot, &name))?;
    Ok(Json(describe(&snapshot, skill)))
}

/// Runs a skill on the JSON body as its input: its deterministic steps, or
/// its sub-agent (which needs an LLM). `200` with the result; `202` with the
/// pending confirmation when a write waits for approval (answer it at
/// `POST /v1/confirmations/{id}`, whose response is then this route's);
/// `400` naming the field when the input does not match the skill's
/// parameters; `404` for an unknown skill; `422` when the skill ran and
/// failed.
pub async fn invoke(
    State(state): State<Arc<AppState>>,
    ApiPath(name): ApiPath<String>,
    mount: Mount,
    RunStart(options): RunStart,
    ApiJson(input): ApiJson<Value>,
) -> Result<Response, ApiError> {
    let invocation = start_invocation(&state, &name, input, options)?;
    finish_invocation(&state, invocation, &mount).await
}

/// Starts the skill `name` on `input`, its run on record in the ledger.
pub fn start_invocation(
    state: &AppState,
    name: &str,
    input: Value,
    options: RunOptions,
) -> Result<InvokeRun, ApiError> {
    let run = match state.host.invoke_with(name, input, options) {
        Err(AgentError::UnknownSkill(_)) => {
            return Err(unknown_skill(&state.host.snapshot(), name));
        }
        started => started?,
    };
    // The version the run runs, from the skills it started on: a reload
    // since then does not change what it reports.
    let skill = run
        .skills()
        .get(name)
        .map(|loaded| SkillVersion::of(&loaded.component))
        .expect("a skill run starts only on skills that hold it");
    Ok(InvokeRun {
        run: OwnedRun::new(run, state.ledger.clone()),
        skill,
    })
}

/// Drives an invocation to its end or its next confirmation: `200` with
/// the result, `202` with the pending confirmation.
pub async fn finish_invocation(
    state: &AppState,
    invocation: InvokeRun,
    mount: &Mount,
) -> Result<Response, ApiError> {
    Ok(match drive_invocation(state, invocation, mount).await? {
        Invoked::Done(body) => Json(body).into_response(),
        Invoked::Pending { body, .. } => (StatusCode::ACCEPTED, Json(body)).into_response(),
    })
}

/// Where an invocation got to; each with the body the invoke route
/// answers.
pub enum Invoked {
    /// It finished with a result (`body.result`).
    Done(Value),
    /// It is parked until `pending` is answered at `answer_path`.
    Pending {
        body: Value,
        pending: Box<PendingConfirmation>,
        answer_path: String,
    },
}

/// Drives an invocation to its end or its next confirmation, parking it
/// there.
pub async fn drive_invocation(
    state: &AppState,
    invocation: InvokeRun,
    mount: &Mount,
) -> Result<Invoked, ApiError> {
    drive_invocation_asking(state, invocation, mount, &Nobody).await
}

/// Who answers the confirmations an invocation reaches, as it reaches
/// them.
pub trait OnTheSpot: Sync {
    /// Answers `pending` (`true`: the run goes on), or leaves it: the
    /// invocation is then parked on it.
    fn answer(&self, pending: &PendingConfirmation) -> impl Future<Output = bool> + Send;
}

/// Nobody: an invocation is parked on each confirmation.
pub struct Nobody;

impl OnTheSpot for Nobody {
    async fn answer(&self, _pending: &PendingConfirmation) -> bool {
        false
    }
}

/// Drives an invocation to its end, letting `answerer` answer each
/// confirmation it reaches; one it leaves is parked, and the invocation
/// is pending on it.
pub async fn drive_invocation_asking(
    state: &AppState,
    invocation: InvokeRun,
    mount: &Mount,
    answerer: &impl OnTheSpot,
) -> Result<Invoked, ApiError> {
    let InvokeRun { mut run, mut skill } = invocation;
    let run_id = run.id().cloned();
    let base = json!({
        "object": "skill.invocation",
        "run": run_id,
        "skill": skill.name,
        "version": skill.version,
        "digest": skill.digest,
    });
    loop {
        match run.settle().await {
            Progress::Finished { result, tally } => {
                let SkillOutput { outcome, .. } = result?;
                return match outcome {
                    CallOutcome::Done { result } => {
                        let mut body = base;
                        body["status"] = json!("done");
                        body["result"] = result;
                        body["usage"] = json!(tally.usage);
                        Ok(Invoked::Done(body))
                    }
                    failed => Err(skill_failed(&failed)),
                };
            }
            Progress::Pending {
                run: waiting,
                pending,
            } => {
                if answerer.answer(&pending).await {
                    run = waiting;
                    continue;
                }
                let invocation = InvokeRun {
                    run: waiting,
                    skill,
                };
                match park(state, &pending, invocation)? {
                    // Answered already: it goes on, and so does this request.
                    Some(answered) => (run, skill) = (answered.run, answered.skill),
                    None => {
                        let path = answer_path(mount, &pending);
                        let mut body = base;
                        body["status"] = json!("pending_confirmation");
                        body["confirmation"] = confirmation_json(&pending, &path);
                        return Ok(Invoked::Pending {
                            body,
                            pending,
                            answer_path: path,
                        });
                    }
                }
            }
        }
    }
}

fn unknown_skill(snapshot: &SkillSnapshot, name: &str) -> ApiError {
    ApiError::not_found("skill_not_found", snapshot.not_loaded(name)).with_param("name")
}

/// A skill as the API shows it. `status` is `loaded`, or `stale` when the
/// file's latest content failed to load and this (earlier) version still
/// serves; `last_error` says why.
fn describe(snapshot: &SkillSnapshot, skill: &LoadedSkill) -> Value {
    let manifest = skill.component.manifest();
    let failure = snapshot.failure_for(&skill.path);
    json!({
        "object": "skill",
        "name": manifest.name,
        "version": manifest.version.to_string(),
        "description": manifest.description,
        "digest": skill.component.digest(),
        "signer": skill.signer.map(|key| key.to_string()),
        "file": file_name(&skill.path),
        "status": if failure.is_some() { "stale" } else { "loaded" },
        "last_error": failure.map(|failure| &failure.reason),
        "manifest": manifest,
        "limits": skill.component.limits(),
    })
}

fn file_name(path: &std::path::Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |name| name.to_string_lossy().into_owned(),
    )
}
