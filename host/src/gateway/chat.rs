//! `POST /v1/chat/completions`, and `POST` and `GET /v1/confirmations/{id}`.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::errors::{ApiError, ApiJson, ApiPath, ErrorType};
use super::openai::{self, ChatCompletionRequest, CompletionMeta, Status, StreamOptions};
use super::runs::{ChatRun, OwnedRun, Parked, Progress, park};
use super::skills::finish_invocation;
use super::{AppState, Mount, Principal, RunStart};
use crate::agent::{
    self, AgentEvent, Caller, ConfirmError, ConfirmationStatus, PendingConfirmation,
    RESOLUTIONS_KEPT, RESOLUTIONS_KEPT_FOR, RunOutput,
};

/// OpenAI chat completions with the agent behind them: one run over the
/// request's messages, answered as one completion, or as SSE chunks with
/// `stream: true` — until the run ends or waits for a confirmation (see the
/// module docs of [`super`]). `503` when no LLM is configured.
pub async fn chat_completions(
    State(state): State<Arc<AppState>>,
    mount: Mount,
    RunStart(options): RunStart,
    ApiJson(request): ApiJson<ChatCompletionRequest>,
) -> Result<Response, ApiError> {
    let stream = request.streams();
    let include_usage = request.includes_usage();
    let messages = request.into_messages()?;
    let model = match state.host.llm() {
        Ok(llm) => llm.config().model.clone(),
        Err(why) => {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorType::ServiceUnavailableError,
                "llm_not_configured",
                why.to_string(),
            ));
        }
    };
    let options = if stream { options.streaming() } else { options };
    let handle = state.host.chat_with(messages, options)?;
    let chat = ChatRun {
        meta: CompletionMeta::new(handle.id.clone(), model),
        run: OwnedRun::new(handle, state.ledger.clone()),
    };
    if stream {
        stream_chat(state, chat, mount, include_usage).await
    } else {
        complete_chat(&state, chat, &mount).await
    }
}

/// The body of `POST /v1/confirmations/{id}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Answer {
    decision: Decision,
    /// Told to the model (or the skill) on a rejection.
    #[serde(default)]
    reason: Option<String>,
    /// Stream the rest of a chat run as SSE chunks.
    #[serde(default)]
    stream: Option<bool>,
    /// As in a chat request: `include_usage` ends the stream with the
    /// usage of this response.
    #[serde(default)]
    stream_options: Option<StreamOptions>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Decision {
    Approve,
    Reject,
}

/// Answers a confirmation. A run this gateway parked is driven on: the
/// response is the run's next completion (chat) or invocation result
/// (invoke) — its end, or its next pending confirmation. A confirmation of a
/// run started elsewhere (an embedder's own code) is answered with
/// `{"id", "decision", "by"?, "confirmation"}`. The answer is given on
/// behalf of the request's [`Principal`], when it has one.
pub async fn answer_confirmation(
    State(state): State<Arc<AppState>>,
    ApiPath(id): ApiPath<String>,
    mount: Mount,
    principal: Option<Extension<Principal>>,
    ApiJson(answer): ApiJson<Answer>,
) -> Result<Response, ApiError> {
    let by = principal.map(|Extension(Principal(name))| name);
    let decision = match answer.decision {
        Decision::Approve => agent::Decision::Approve,
        Decision::Reject => agent::Decision::Reject(answer.reason.clone()),
    };
    // Answered elsewhere in the meantime: the parking drives its run on.
    let (confirmation, parked) = state
        .parking
        .answer(&id, || state.host.answer(&id, decision, by.clone()))
        .map_err(|error| refused_answer(&error))?;
    match parked.map(Parked::answered) {
        Some(Parked::Chat(mut chat)) => {
            // A response of its own: its usage is what the run uses from here.
            chat.run.begin_response();
            if answer.stream.unwrap_or(false) {
                let include_usage = StreamOptions::include_usage(answer.stream_options.as_ref());
                stream_chat(state, chat, mount, include_usage).await
            } else {
                complete_chat(&state, chat, &mount).await
            }
        }
        Some(Parked::Invoke(invoke)) => finish_invocation(&state, invoke, &mount).await,
        None => {
            let mut answered = json!({
                "id": id,
                "decision": match answer.decision {
                    Decision::Approve => "approved",
                    Decision::Reject => "rejected",
                },
                "confirmation": confirmation,
            });
            if let Some(by) = by {
                answered["by"] = by.into();
            }
            Ok(Json(answered).into_response())
        }
    }
}

/// Why an answer was refused: a confirmation answered already (a second
/// click, another approver first) is a `409` saying how it ended, an
/// unknown one the `404`.
fn refused_answer(error: &ConfirmError) -> ApiError {
    match error {
        ConfirmError::NotPending(_) => {
            ApiError::not_found("confirmation_not_found", error.to_string())
        }
        ConfirmError::Resolved { .. } => ApiError::new(
            StatusCode::CONFLICT,
            ErrorType::InvalidRequestError,
            "confirmation_resolved",
            error.to_string(),
        ),
        ConfirmError::SameApprover { .. } => ApiError::new(
            StatusCode::FORBIDDEN,
            ErrorType::PermissionError,
            "separate_approver_required",
            error.to_string(),
        ),
        ConfirmError::NotAnApprover { .. } => ApiError::new(
            StatusCode::FORBIDDEN,
            ErrorType::PermissionError,
            "approver_required",
            error.to_string(),
        ),
    }
}

/// `GET /v1/confirmations/{id}`: where a confirmation is. `pending`, with
/// what waits and how to answer it; or `resolved`, with the decision, who
/// gave it and when: how a requester learns the outcome of a write that a
/// separate approver answered. Resolutions are remembered for an hour, the
/// latest 1024 of them and 16 MiB of their arguments.
pub async fn confirmation_status(
    State(state): State<Arc<AppState>>,
    ApiPath(id): ApiPath<String>,
    mount: Mount,
) -> Result<Json<Value>, ApiError> {
    match state.host.confirmations().status(&id) {
        Some(ConfirmationStatus::Pending(pending)) => Ok(Json(json!({
            "status": "pending",
            "confirmation": openai::confirmation_json(&pending, &answer_path(&mount, &pending)),
        }))),
        Some(ConfirmationStatus::Resolved(resolved)) => {
            let mut body = serde_json::to_value(&resolved).expect("a resolution serializes");
            body["status"] = "resolved".into();
            Ok(Json(body))
        }
        None => Err(ApiError::not_found(
            "confirmation_not_found",
            format!(
                "no confirmation `{id}` is known: it never was, or it was resolved more than {} \
                 minutes or {RESOLUTIONS_KEPT} resolutions ago (fewer when their arguments are \
                 large), or before the host restarted",
                RESOLUTIONS_KEPT_FOR.as_secs() / 60
            ),
        )),
    }
}

/// Where to answer `pending`.
pub fn answer_path(mount: &Mount, pending: &PendingConfirmation) -> String {
    format!("{}/v1/confirmations/{}", mount.prefix(), pending.id)
}

/// Drives a chat run to its end or its next confirmation and answers with
/// one completion.
pub(super) async fn complete_chat(
    state: &AppState,
    chat: ChatRun,
    mount: &Mount,
) -> Result<Response, ApiError> {
    let ChatRun { mut run, mut meta } = chat;
    loop {
        match run.settle().await {
            Progress::Finished { result, tally } => {
                let output = result?;
                return Ok(Json(openai::completion(
                    &meta,
                    &output.answer,
                    &tally,
                    &Status::Completed(&output.finish_reason),
                ))
                .into_response());
            }
            Progress::Pending {
                run: waiting,
                pending,
            } => {
                let path = answer_path(mount, &pending);
                let status = Status::Pending {
                    confirmation: &pending,
                    answer_path: &path,
                };
                let body = openai::completion(
                    &meta,
                    &openai::pending_text(&pending, &path),
                    waiting.tally(),
                    &status,
                );
                match park(state, &pending, ChatRun { run: waiting, meta })? {
                    // Answered already: it goes on, and so does this request.
                    Some(answered) => (run, meta) = (answered.run, answered.meta),
                    None => return Ok(Json(body).into_response()),
                }
            }
        }
    }
}

/// What a streamed run's task hands its response.
enum Streamed {
    Chunk(Value),
    /// The run failed, or ran out of time; nothing follows.
    Failed(ApiError),
}

impl Streamed {
    fn into_event(self) -> Event {
        let data = match self {
            Self::Chunk(chunk) => chunk,
            Self::Failed(error) => error.body(),
        };
        Event::default().data(data.to_string())
    }
}

/// Streams a chat run as SSE chunks in OpenAI's format, until it ends or
/// waits for a confirmation; the run is driven by a task of its own that
/// stops (and aborts the run) when the client goes away or the request
/// timeout passes.
///
/// The response starts once the model has answered ([`ChunkWriter`]): a
/// run that fails before (the model's server refused the conversation, its
/// key or quota, a timeout) is answered with the error's own status, which
/// clients' SDKs raise as such (a rate limit, a bad request) and routers
/// fall back on. A failure after it can only be an error chunk.
async fn stream_chat(
    state: Arc<AppState>,
    chat: ChatRun,
    mount: Mount,
    include_usage: bool,
) -> Result<Response, ApiError> {
    // Unbounded like the run's own events: the run never waits for the
    // client, and a run's chunks are bounded by its rounds.
    let (sender, mut receiver) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let timeout = state.config.request_timeout;
        let writer = ChunkWriter::new(chat.meta.clone(), sender.clone());
        let drive = writer.drive(&state, chat, &mount, include_usage);
        tokio::select! {
            () = drive => {}
            () = sender.closed() => tracing::debug!("streaming client went away; run aborted"),
            () = tokio::time::sleep(timeout) => {
                let _ = sender.send(Streamed::Failed(super::timeout_error(timeout)));
            }
        }
    });
    // The task sends before it ends, unless it panicked.
    let first = match receiver.recv().await {
        Some(Streamed::Chunk(chunk)) => chunk,
        Some(Streamed::Failed(error)) => return Err(error),
        None => return Err(ApiError::internal()),
    };
    let rest = futures::stream::unfold(receiver, |mut receiver| async move {
        Some((receiver.recv().await?, receiver))
    });
    let chunks = futures::stream::once(async { Streamed::Chunk(first) })
        .chain(rest)
        .map(|streamed| Ok::<_, Infallible>(streamed.into_event()));
    let done = futures::stream::once(async { Ok(Event::default().data("[DONE]")) });
    // Comments while the run works in silence (tools, sub-agents), so that
    // proxies do not take the stream for idle and cut it.
    Ok(Sse::new(chunks.chain(done))
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// Turns a run's events into chunks. The first, the assistant's role, is
/// held back until the model has answered — any event but a round's start
/// or a compaction, which come before its call — or the run reached its
/// end or a confirmation, so that an error before it has no chunk ahead of
/// it.
struct ChunkWriter {
    meta: CompletionMeta,
    sender: mpsc::UnboundedSender<Streamed>,
    /// The role chunk has been sent.
    started: bool,
    /// Text of the main agent's rounds so far has been sent.
    sent_text: bool,
    /// The main agent started a new round since text was last sent.
    new_round: bool,
    /// The current round's text, to fall back on if a server sent none.
    round_text: String,
}

impl ChunkWriter {
    fn new(meta: CompletionMeta, sender: mpsc::UnboundedSender<Streamed>) -> Self {
        Self {
            meta,
            sender,
            started: false,
            sent_text: false,
            new_round: false,
            round_text: String::new(),
        }
    }

    /// Queues a chunk, after the role chunk if it is the first. A client
    /// gone away is noticed by `stream_chat`, which then stops the run.
    fn send(&mut self, chunk: Value) {
        self.start();
        let _ = self.sender.send(Streamed::Chunk(chunk));
    }

    /// Sends the role chunk, once.
    fn start(&mut self) {
        if !self.started {
            self.started = true;
            let role = openai::chunk(&self.meta, &json!({"role": "assistant", "content": ""}));
            let _ = self.sender.send(Streamed::Chunk(role));
        }
    }

    /// Ends the stream with `error`: the response's status if nothing was
    /// sent yet, else an error chunk.
    fn fail(&self, error: ApiError) {
        let _ = self.sender.send(Streamed::Failed(error));
    }

    /// Sends `text` as content, separated from an earlier round's text.
    fn text(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        let separator = if self.sent_text && self.new_round {
            "\n\n"
        } else {
            ""
        };
        self.new_round = false;
        self.sent_text = true;
        self.round_text.push_str(text);
        self.send(openai::chunk(
            &self.meta,
            &json!({"content": format!("{separator}{text}")}),
        ));
    }

    fn observe(&mut self, event: &AgentEvent) {
        if !matches!(
            event,
            AgentEvent::RoundStarted { .. } | AgentEvent::Compacted { .. }
        ) {
            self.start();
        }
        match event {
            AgentEvent::RoundStarted {
                caller: Caller::Main,
                ..
            } => {
                self.new_round = true;
                self.round_text.clear();
            }
            AgentEvent::TextDelta {
                caller: Caller::Main,
                text,
            } => self.text(text),
            _ => {}
        }
    }

    async fn drive(mut self, state: &AppState, chat: ChatRun, mount: &Mount, include_usage: bool) {
        let mut chat = chat;
        let usage = loop {
            match chat.run.advance(|event| self.observe(event)).await {
                Progress::Finished {
                    result:
                        Ok(RunOutput {
                            answer,
                            finish_reason,
                            ..
                        }),
                    tally,
                } => {
                    if self.round_text.is_empty() {
                        self.text(&answer);
                    }
                    let status = Status::Completed(&finish_reason);
                    self.send(openai::final_chunk(&self.meta, &status, &tally.compaction));
                    break tally.usage;
                }
                Progress::Finished {
                    result: Err(error), ..
                } => {
                    self.fail(ApiError::from(error));
                    return;
                }
                Progress::Pending { run, pending } => {
                    let tally = run.tally().clone();
                    let waiting = ChatRun {
                        run,
                        meta: chat.meta,
                    };
                    // Parked before the client hears of it, so that an
                    // answer sent at once finds the run.
                    match park(state, &pending, waiting) {
                        Err(error) => {
                            self.fail(error);
                            return;
                        }
                        // Answered already: the stream goes on with the run.
                        Ok(Some(answered)) => chat = answered,
                        Ok(None) => {
                            let path = answer_path(mount, &pending);
                            self.new_round = true;
                            self.text(&openai::pending_text(&pending, &path));
                            self.send(openai::final_chunk(
                                &self.meta,
                                &Status::Pending {
                                    confirmation: &pending,
                                    answer_path: &path,
                                },
                                &tally.compaction,
                            ));
                            break tally.usage;
                        }
                    }
                }
            }
        };
        if include_usage {
            self.send(openai::usage_chunk(&self.meta, usage));
        }
    }
}
