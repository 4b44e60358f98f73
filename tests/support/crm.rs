//! A stand-in for a team's existing REST service, behind the HTTP tools
//! of the gateway's and the CLI's tests.

use axum::Router;
use axum::http::StatusCode;
use serde_json::{Value, json};

/// A stand-in for a team's existing REST service: a customer lookup that
/// needs a bearer token, ticket creation that echoes what it got, and who
/// and which trace a request says it is for.
pub async fn crm_service() -> String {
    use axum::extract::Path;
    use axum::http::HeaderMap;
    use axum::routing::{get, post};

    async fn customer(
        headers: HeaderMap,
        Path(id): Path<String>,
    ) -> (StatusCode, axum::Json<Value>) {
        if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some("Bearer s3cret") {
            return (
                StatusCode::UNAUTHORIZED,
                axum::Json(json!({"error": "bad token"})),
            );
        }
        match id.as_str() {
            "u1001" => (
                StatusCode::OK,
                axum::Json(json!({"id": "u1001", "name": "Li Lei", "level": "gold"})),
            ),
            other => (
                StatusCode::NOT_FOUND,
                axum::Json(json!({"error": format!("no customer {other}")})),
            ),
        }
    }
    async fn ticket(
        Path(id): Path<String>,
        axum::Json(body): axum::Json<Value>,
    ) -> axum::Json<Value> {
        axum::Json(json!({"ticket": "TK1", "customerId": id, "received": body}))
    }
    /// Who the request says it acts for.
    async fn whoami(headers: HeaderMap) -> axum::Json<Value> {
        let header = |name: &str| headers.get(name).map(|v| v.to_str().unwrap().to_owned());
        axum::Json(json!({"authorization": header("authorization"), "userId": header("x-user-id")}))
    }
    /// The trace the request says it is part of.
    async fn trace(headers: HeaderMap) -> axum::Json<Value> {
        let header = |name: &str| headers.get(name).map(|v| v.to_str().unwrap().to_owned());
        axum::Json(
            json!({"traceparent": header("traceparent"), "tracestate": header("tracestate")}),
        )
    }
    let app = Router::new()
        .route("/api/customers/{id}", get(customer))
        .route("/api/customers/{id}/tickets", post(ticket))
        .route("/api/whoami", get(whoami))
        .route("/api/trace", get(trace));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    base
}
