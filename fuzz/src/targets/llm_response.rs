//! Any answer of an OpenAI-compatible server, over real HTTP on loopback, to
//! the LLM client: a JSON completion or an SSE stream (text deltas, tool-call
//! fragments, usage, errors), under any status. A faulty model is an
//! `LlmError`, never a panic.

use std::sync::{Arc, LazyLock, Mutex};

use crate::{executor, llm_at, serve_on_loopback};
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use skillhost::agent::llm::{ChatRequest, LlmClient, Message};
use tokio::sync::mpsc;

/// What the server answers to the next request.
#[derive(Default)]
struct Answer {
    status: u16,
    streaming: bool,
    body: Vec<u8>,
}

struct Model {
    executor: tokio::runtime::Runtime,
    answer: Arc<Mutex<Answer>>,
    client: LlmClient,
}

async fn complete(State(answer): State<Arc<Mutex<Answer>>>) -> Response {
    let answer = answer.lock().expect("the answer");
    let status = StatusCode::from_u16(answer.status).expect("a status");
    let content_type = if answer.streaming {
        "text/event-stream"
    } else {
        "application/json"
    };
    (
        status,
        [(header::CONTENT_TYPE, content_type)],
        answer.body.clone(),
    )
        .into_response()
}

static MODEL: LazyLock<Model> = LazyLock::new(|| {
    let executor = executor();
    let answer = Arc::new(Mutex::new(Answer::default()));
    let router = Router::new()
        .route("/v1/chat/completions", post(complete))
        .with_state(answer.clone());
    let address = executor.block_on(serve_on_loopback(router));
    let client = LlmClient::new(llm_at(address)).expect("an LLM client");
    Model {
        executor,
        answer,
        client,
    }
});

const STATUSES: [u16; 8] = [200, 200, 200, 200, 400, 401, 429, 500];

/// One input.
pub fn run(input: &[u8]) {
    let Some((&shape, body)) = input.split_first() else {
        return;
    };
    let model = &*MODEL;
    let streaming = shape & 1 == 1;
    *model.answer.lock().expect("the answer") = Answer {
        status: STATUSES[usize::from(shape >> 1) % STATUSES.len()],
        streaming,
        body: body.to_vec(),
    };
    let (deltas, mut received) = mpsc::unbounded_channel();
    let request = ChatRequest::new(vec![Message::user("refund order 88231")])
        .with_stream(streaming)
        .with_deltas(deltas);
    let answer = model.executor.block_on(model.client.chat(&request));
    if let Ok(answer) = answer
        && streaming
    {
        // Text deltas are forwarded as they arrive; the answer holds them all.
        let mut forwarded = String::new();
        while let Ok(delta) = received.try_recv() {
            forwarded.push_str(&delta);
        }
        assert_eq!(answer.message.content.as_deref().unwrap_or(""), forwarded);
    }
}
