//! Liveness and readiness. `/health` answers 200 while the process serves; `/ready` answers
//! 200 only when MongoDB and NATS both answer (checked every 2 s on connections of the
//! check's own, answered from the last checks; MongoDB is forgiven for the 15 s an election may
//! take after it last answered), else 503 `{"status":"not_ready"}`, so a load balancer stops
//! sending traffic to a replica that cannot do its work (see [`common::readiness`], which the
//! runner and the notifier answer from too).

use axum::{Json, extract::State, http::StatusCode, response::IntoResponse};
use serde::Serialize;

use crate::state::AppState;

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
    match state.readiness.now() {
        Ok(()) => return (StatusCode::OK, Json(Readiness { status: "ready", version: Some(common::VERSION) })),
        Err(not_ready) => tracing::warn!(mongodb = ?not_ready.mongodb, nats = ?not_ready.nats, "not ready"),
    }
    (StatusCode::SERVICE_UNAVAILABLE, Json(Readiness { status: "not_ready", version: None }))
}

/// `GET /health`
#[utoipa::path(get, path = "/health", operation_id = "health", tag = "operations", responses((status = 200, description = "The process serves", body = Liveness)))]
pub async fn health() -> Json<Liveness> {
    Json(Liveness { status: "ok" })
}
