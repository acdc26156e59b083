//! `Idempotency-Key` on create (of a prediction or a training): the same key of the same
//! account within 24 hours returns the first request's prediction (or training) (201, with `Idempotent-Replayed: true`) and never creates a
//! second job. The key is claimed with one atomic insert before the prediction is stored
//! (see [`common::store::idempotency`]). A replay that arrives while the first request is
//! still storing its prediction waits for it briefly, then answers 409.

use std::time::Duration;

use crate::problem::{FieldError, Problem, ProblemKind};
use axum::{
    Json,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use common::domain::{AccountId, ApiSurface, Prediction, PredictionId};
use serde::Serialize;

use crate::{error::ApiError, state::AppState};

/// The longest key accepted.
pub const MAX_KEY_LEN: usize = 255;

/// The request's key, if any: 1 to 255 visible ASCII characters.
pub fn key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get("idempotency-key") else { return Ok(None) };
    let text = value.to_str().unwrap_or("");
    if text.is_empty() || text.len() > MAX_KEY_LEN || !text.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(ApiError::validation(
            "The Idempotency-Key header is not acceptable.",
            vec![FieldError::invalid("Idempotency-Key", "Must be 1 to 255 visible ASCII characters.")],
        ));
    }
    Ok(Some(text.to_owned()))
}

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
    for _ in 0..20 {
        if let Some(p) = state.store.predictions().get_for_account(first, account).await? {
            let (view, location) = show(&p);
            let mut response = (StatusCode::CREATED, Json(&view)).into_response();
            response.headers_mut().insert("idempotent-replayed", HeaderValue::from_static("true"));
            if let Ok(location) = HeaderValue::from_str(&location) {
                response.headers_mut().insert(header::LOCATION, location);
            }
            return Ok(response);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(ApiError::Problem(Problem::new(
        ProblemKind::Conflict,
        "A request with this Idempotency-Key is still in progress; retry shortly.",
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("idempotency-key", HeaderValue::from_str(v).expect("header"));
        h
    }

    #[test]
    fn keys_of_one_to_255_visible_characters_are_accepted() {
        assert_eq!(key(&with("order-42")).ok().flatten().as_deref(), Some("order-42"));
        assert!(key(&with(&"k".repeat(255))).is_ok());
        assert!(key(&with(&"k".repeat(256))).is_err());
        assert!(key(&with("has space")).is_err());
        assert_eq!(key(&HeaderMap::new()).ok().flatten(), None);
    }
}
