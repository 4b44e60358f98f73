//! The host embedded in an existing axum application.
//!
//! The application keeps its own routes (`/`, `/orders/{id}/status`, which
//! calls a skill through the host handle) and mounts the skillhost gateway
//! under `/ai`: OpenAI clients use the base URL `http://127.0.0.1:3000/ai/v1`.
//!
//! ```sh
//! # from the repository root (skills/ and keys/trusted/ are there)
//! cargo run --example embed_axum
//! curl localhost:3000/orders/88231/status
//! curl localhost:3000/ai/v1/skills
//! curl -X POST localhost:3000/ai/v1/skills/processRefund/invoke \
//!      -H 'content-type: application/json' -d '{"orderId":"88231","reason":"broken"}'
//! # set SKILLHOST_MODEL (and OPENAI_BASE_URL, OPENAI_API_KEY) for /ai/v1/chat/completions
//! ```

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

use skillhost::agent::CallOutcome;
use skillhost::embed::SkillHost;
use skillhost::gateway::{Gateway, GatewayConfig};
use skillhost::skills::signature::{SignaturePolicy, TrustStore};
use skillhost::tools::demo::DemoDb;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_env_filter("info").init();

    // One host for the whole application: signed skills only, the demo
    // shop's tools, the LLM from the environment (if any), hot reload on.
    let host = SkillHost::builder(
        "skills",
        SignaturePolicy::Require(TrustStore::load(&["keys/trusted"])?),
    )
    .demo_tools(Arc::new(DemoDb::in_memory()?))
    .llm_from_env()
    .keep_public(["queryOrder", "searchKnowledge", "getCurrentTime"])
    .build()
    .await?;

    let gateway = Gateway::new(host.clone(), GatewayConfig::default());
    let app = Router::new()
        .route("/", get(|| async { "the application's own home page" }))
        .route("/orders/{id}/status", get(order_status))
        .with_state(host)
        .nest("/ai", gateway.router());

    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = tokio::signal::ctrl_c().await;
            // Event streams would keep the graceful shutdown waiting.
            gateway.close_streams();
        })
        .await?;
    Ok(())
}

/// An application route that runs a read-only skill through the host.
async fn order_status(
    State(host): State<SkillHost>,
    Path(id): Path<String>,
) -> Result<Json<Value>, (StatusCode, String)> {
    let run = host
        .invoke("inquireOrderStatus", json!({ "orderId": id }))
        .map_err(|error| (StatusCode::BAD_REQUEST, error.to_string()))?;
    let output = run
        .result()
        .await
        .map_err(|error| (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()))?;
    match output.outcome {
        CallOutcome::Done { result } => Ok(Json(result)),
        other => Err((StatusCode::BAD_GATEWAY, other.to_tool_content())),
    }
}
