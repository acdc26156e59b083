//! Liveness and readiness. `/health` answers 200 while the process serves; `/ready` answers
//! 200 only when MongoDB and NATS both answer (within 2 s), else 503 `{"status":"not_ready"}`,
//! so a load balancer stops sending traffic to a replica that cannot do its work.

use std::time::Duration;

use axum::{Json, extract::State, http::StatusCode, response::IntoResponse};
use serde_json::json;

use crate::state::AppState;

const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// `GET /ready`
pub async fn ready(State(state): State<AppState>) -> impl IntoResponse {
    let (db, bus) = tokio::join!(tokio::time::timeout(CHECK_TIMEOUT, state.store.ping()), state.bus.ping());
    let db_ok = matches!(db, Ok(Ok(())));
    if db_ok && bus.is_ok() {
        return (StatusCode::OK, Json(json!({"status": "ready", "version": common::VERSION})));
    }
    let db_error = match db {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e.to_string()),
        Err(_) => Some("no answer within 2 s".to_owned()),
    };
    tracing::warn!(mongodb = ?db_error, nats = ?bus.err().map(|e| e.to_string()), "not ready");
    (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"status": "not_ready"})))
}

/// `GET /health`
pub async fn health() -> impl IntoResponse {
    Json(json!({"status": "ok"}))
}
