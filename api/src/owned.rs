//! Reading one prediction on behalf of a caller: only the caller's own account's predictions
//! exist for it.

use common::domain::{Prediction, PredictionId};

use crate::{auth::Caller, error::ApiError, state::AppState};

/// The prediction `id` of the caller's account; 404 for a malformed id, a missing prediction
/// and another account's alike, so existence is never revealed.
pub async fn owned_prediction(state: &AppState, caller: &Caller, id: &str) -> Result<Prediction, ApiError> {
    let missing = || ApiError::not_found(format!("Prediction {id} not found."));
    let prediction_id = PredictionId::parse(id).map_err(|_| missing())?;
    state.store.predictions().get_for_account(&prediction_id, &caller.key.account_id).await?.ok_or_else(missing)
}
