//! `Idempotency-Key` on create (of a prediction or a training): the same key of the same
//! account within 24 hours returns the first request's prediction (or training) (201, with `Idempotent-Replayed: true`) and never creates a
//! second job. The key is claimed with one atomic insert before the prediction is stored
//! (see [`crate::store::idempotency`]). A replay that arrives while the first request is
//! still storing its prediction waits for it briefly, then answers 409.

use std::time::Duration;

use crate::problem::{Problem, ProblemKind};
use axum::{
    Json,
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use common::domain::{AccountId, ApiSurface, Prediction, PredictionId};
use serde::Serialize;

use crate::{error::ApiError, state::AppState};

/// How long a replay waits for the first request's prediction to be stored, between reads,
/// and what it leaves of its deadline to answer.
const REPLAY_WAIT: Duration = Duration::from_secs(2);
const REPLAY_PAUSE: Duration = Duration::from_millis(100);
const ANSWER_MARGIN: Duration = Duration::from_millis(300);

/// The answer to a repeated key: the first prediction as it stands now, shown on `surface`.
pub async fn replay(
    state: &AppState,
    account: &AccountId,
    first: &PredictionId,
    surface: ApiSurface,
) -> Result<Response, ApiError> {
    replay_as(state, account, first, |p| {
        let view = p.view(&state.links, surface);
        let location = view.urls.get.clone();
        (view, location)
    })
    .await
}

/// [`replay`] of a job shown by `show` (its view and its URL): a training's create answers
/// the training.
pub async fn replay_as<V: Serialize>(
    state: &AppState,
    account: &AccountId,
    first: &PredictionId,
    show: impl Fn(&Prediction) -> (V, String),
) -> Result<Response, ApiError> {
    // The first request's prediction is waited for up to 2 s, within this request's deadline
    // (a 409 in time, not a 503 after it).
    let wait = common::deadline::remaining().unwrap_or(REPLAY_WAIT).saturating_sub(ANSWER_MARGIN).min(REPLAY_WAIT);
    let tries = (wait.as_millis() / REPLAY_PAUSE.as_millis()).max(1);
    for _ in 0..tries {
        if let Some(p) = state.store.predictions().get_for_account(first, account).await? {
            let p = crate::ops::owned::whole(state, p).await?;
            let (view, location) = show(&p);
            let mut response = (StatusCode::CREATED, Json(&view)).into_response();
            response.headers_mut().insert("idempotent-replayed", HeaderValue::from_static("true"));
            if let Ok(location) = HeaderValue::from_str(&location) {
                response.headers_mut().insert(header::LOCATION, location);
            }
            return Ok(response);
        }
        tokio::time::sleep(REPLAY_PAUSE).await;
    }
    Err(ApiError::Problem(Problem::new(
        ProblemKind::Conflict,
        "A request with this Idempotency-Key is still in progress; retry shortly.",
    )))
}
