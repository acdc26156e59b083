//! `Prefer: wait` (`wait`, or `wait=N` with N from 1 to 60 seconds; default 60) on create:
//! the response is held until the prediction reaches a terminal status or the time is up.
//!
//! The handler subscribes to the prediction's status-event subject *before* it publishes the
//! job, so even an instant completion cannot be missed; the `completed` event carries the
//! prediction as `GET` shows it, which becomes the response (an event too large to carry it
//! names it, and the response is read from MongoDB). When the time is up, the prediction is
//! read once more and returned as it stands.

use std::time::Duration;

use crate::problem::FieldError;
use async_nats::Subscriber;
use axum::http::HeaderMap;
use common::{domain::PredictionView, messages::StatusEvent};
use futures::StreamExt;

use crate::error::ApiError;

/// The longest and default wait.
pub const MAX_WAIT_SECS: u64 = 60;

/// The wait a request asks for with `Prefer`, if any.
pub fn requested(headers: &HeaderMap) -> Result<Option<Duration>, ApiError> {
    let bad = || {
        ApiError::validation(
            "The Prefer header asks for an impossible wait.",
            vec![FieldError::invalid("Prefer", "wait must be 'wait' or 'wait=N' with N from 1 to 60 seconds.")],
        )
    };
    for value in headers.get_all("prefer") {
        let text = value.to_str().map_err(|_| bad())?;
        for token in text.split([',', ';']).map(str::trim) {
            let (name, arg) = token.split_once('=').map_or((token, None), |(n, a)| (n.trim(), Some(a.trim())));
            if !name.eq_ignore_ascii_case("wait") {
                continue;
            }
            let secs = match arg {
                None => MAX_WAIT_SECS,
                Some(n) => n
                    .trim_matches('"')
                    .parse::<u64>()
                    .ok()
                    .filter(|s| (1..=MAX_WAIT_SECS).contains(s))
                    .ok_or_else(bad)?,
            };
            return Ok(Some(Duration::from_secs(secs)));
        }
    }
    Ok(None)
}

/// How a prediction that ended within the wait is shown.
pub enum Ended {
    /// As its `completed` event carries it.
    Shown(Box<PredictionView>),
    /// As stored: its event was too large to carry it.
    Stored,
}

/// The prediction's end, if its `completed` event arrives within `limit`.
pub async fn completion(mut events: Subscriber, limit: Duration) -> Option<Ended> {
    let wait = async {
        while let Some(message) = events.next().await {
            if let Some(change) =
                serde_json::from_slice::<StatusEvent>(&message.payload).ok().and_then(StatusEvent::prediction_change)
                && change.event == common::domain::WebhookEvent::Completed
            {
                return Some(change.prediction.map_or(Ended::Stored, |view| Ended::Shown(Box::new(view))));
            }
        }
        None
    };
    tokio::time::timeout(limit, wait).await.ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn prefer(v: &str) -> Result<Option<Duration>, ApiError> {
        let mut h = HeaderMap::new();
        h.insert("prefer", HeaderValue::from_str(v).expect("header"));
        requested(&h)
    }

    #[test]
    fn wait_alone_means_sixty_seconds_and_bounds_hold() {
        assert_eq!(prefer("wait").ok().flatten(), Some(Duration::from_secs(60)));
        assert_eq!(prefer("wait=1").ok().flatten(), Some(Duration::from_secs(1)));
        assert_eq!(prefer("respond-async, wait=60").ok().flatten(), Some(Duration::from_secs(60)));
        assert!(prefer("wait=0").is_err());
        assert!(prefer("wait=61").is_err());
        assert!(prefer("wait=soon").is_err());
    }

    #[test]
    fn other_preferences_ask_for_no_wait() {
        assert_eq!(prefer("respond-async").ok().flatten(), None);
        assert_eq!(requested(&HeaderMap::new()).ok().flatten(), None);
    }
}
