//! Liveness and readiness. `/health` answers 200 while the process serves; `/ready` answers
//! 200 only when MongoDB and NATS both answer (within 2 s), else 503 `{"status":"not_ready"}`,
//! so a load balancer stops sending traffic to a replica that cannot do its work.

use std::time::Duration;

use axum::{Json, extract::State, http::StatusCode, response::IntoResponse};
use serde::Serialize;

use crate::state::AppState;

const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// The readiness answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Readiness {
    /// `ready` or `not_ready`.
    pub status: &'static str,
    /// The release version, when ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<&'static str>,
}

/// The liveness answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Liveness {
    /// Always `ok`.
    pub status: &'static str,
}

/// `GET /ready`
#[utoipa::path(
    get,
    path = "/ready",
    operation_id = "ready",
    tag = "operations",
    responses(
        (status = 200, description = "MongoDB and NATS answer", body = Readiness),
        (status = 503, description = "MongoDB or NATS does not answer; `{\"status\":\"not_ready\"}`", body = Readiness)
    )
)]
pub async fn ready(State(state): State<AppState>) -> impl IntoResponse {
    // The ping runs in its own task: a timed-out ping left to finish, not dropped halfway
    // (see `crate::run_to_completion` for what dropping a driver operation costs).
    let store = state.store.clone();
    let ping = tokio::spawn(async move { store.ping().await.map_err(|e| e.to_string()) });
    let (db, bus) = tokio::join!(tokio::time::timeout(CHECK_TIMEOUT, ping), state.bus.ping());
    let db = db.map(|joined| joined.map_err(|e| e.to_string()).and_then(|r| r));
    let db_ok = matches!(db, Ok(Ok(())));
    if db_ok && bus.is_ok() {
        return (StatusCode::OK, Json(Readiness { status: "ready", version: Some(common::VERSION) }));
    }
    let db_error = match db {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e),
        Err(_) => Some("no answer within 2 s".to_owned()),
    };
    tracing::warn!(mongodb = ?db_error, nats = ?bus.err().map(|e| e.to_string()), "not ready");
    (StatusCode::SERVICE_UNAVAILABLE, Json(Readiness { status: "not_ready", version: None }))
}

/// `GET /health`
#[utoipa::path(get, path = "/health", operation_id = "health", tag = "operations", responses((status = 200, description = "The process serves", body = Liveness)))]
pub async fn health() -> Json<Liveness> {
    Json(Liveness { status: "ok" })
}
