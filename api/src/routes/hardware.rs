//! `GET /v1/hardware` (scope `read`): the hardware pools live runners declare
//! (`RUNNER_HARDWARE`, `cpu` by default), as Replicate's clients read them
//! (`hardware.list()`): `[{name, sku}]`, the pool's name as both. A deployment names one of
//! them, and its predictions run only on runners of that pool. Each shows its
//! `price_per_second` (US dollars, a decimal string; `"0"` until the operator sets one with
//! `api admin set-price`).

use axum::{Json, extract::State};
use serde::Serialize;

use crate::{
    error::ApiError,
    http::auth::{Authorized, Read},
    ops,
    state::AppState,
};

/// A hardware pool.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct HardwareView {
    /// The pool's name.
    pub name: String,
    /// The pool's name, as a deployment's `hardware` names it.
    pub sku: String,
    /// What a second of a job on this pool costs, US dollars (a decimal string).
    pub price_per_second: String,
}

/// `GET /v1/hardware`
#[utoipa::path(
    get,
    path = "/hardware",
    operation_id = "listHardware",
    tag = "models",
    responses((status = 200, description = "The pools of live runners, by name", body = Vec<HardwareView>)),
    security(("bearer" = []))
)]
pub async fn list(State(state): State<AppState>, _auth: Authorized<Read>) -> Result<Json<Vec<HardwareView>>, ApiError> {
    let snapshot = state.models.live().snapshot().await?;
    let prices = ops::lists::prices(&state).await?;
    let pools = snapshot.pools.iter().map(|p| HardwareView {
        name: p.to_string(),
        sku: p.to_string(),
        price_per_second: prices.get(p).copied().unwrap_or_default().dollars(),
    });
    Ok(Json(pools.collect()))
}
