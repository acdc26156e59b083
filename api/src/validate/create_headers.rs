//! The headers of a create (of a prediction or a training), each read once at the door
//! ([`crate::http::extract`]):
//!
//! - `Prefer: wait` (`wait`, or `wait=N` with N from 1 to 60 seconds; default 60): hold the
//!   response until the prediction ends ([`crate::ops::wait`]).
//! - `Idempotency-Key` (1 to 255 visible ASCII characters): the first job of the key answers
//!   every repeat ([`crate::ops::idempotency`]).
//! - `Cancel-After`: a prediction's deadline is `PREDICTION_DEADLINE_SECONDS` after creation
//!   (30 minutes by default), a training's `TRAINING_DEADLINE_SECONDS` (24 hours), or sooner
//!   with this header. It takes seconds (`90`) or a duration in the style Replicate's clients
//!   send (`90s`, `5m`, `1h30m`, `500ms`); a value beyond the deployment's limit leaves the
//!   limit in force ([`Prediction::set_deadline_asked`]). A job that reaches the service's
//!   limit fails (`PREDICTION_TIMEOUT`); one that reaches the client's sooner deadline is
//!   canceled, and aborted if it had not started ([`common::domain::deadline`]).
//!
//! [`Prediction::set_deadline_asked`]: common::domain::Prediction::set_deadline_asked

use std::time::Duration;

use crate::problem::FieldError;
use axum::http::HeaderMap;

use crate::error::ApiError;

/// Parses `90`, `90s`, `1.5m`, `1h30m`, `500ms` into a positive duration.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    if let Ok(secs) = text.parse::<u64>() {
        return (secs > 0).then(|| Duration::from_secs(secs));
    }
    let mut total = 0.0_f64;
    let mut rest = text;
    while !rest.is_empty() {
        let number_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_len);
        let value: f64 = number.parse().ok()?;
        let unit_len = after.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        total += value
            * match unit {
                "ms" => 0.001,
                "s" => 1.0,
                "m" => 60.0,
                "h" => 3600.0,
                _ => return None,
            };
        rest = next;
    }
    (total > 0.0).then(|| Duration::try_from_secs_f64(total).ok()).flatten()
}

/// The deadline `Cancel-After` asks for, if any.
pub fn cancel_after(headers: &HeaderMap) -> Result<Option<Duration>, ApiError> {
    let Some(value) = headers.get("cancel-after") else { return Ok(None) };
    let requested = value.to_str().ok().and_then(parse_duration).ok_or_else(|| {
        ApiError::validation(
            "The Cancel-After header is not a duration.",
            vec![FieldError::invalid("Cancel-After", "Must be a positive duration: seconds, or e.g. 90s, 5m, 1h30m.")],
        )
    })?;
    Ok(Some(requested))
}

/// The longest and default wait.
pub const MAX_WAIT_SECS: u64 = 60;

/// The wait a request asks for with `Prefer`, if any.
pub fn prefer_wait(headers: &HeaderMap) -> Result<Option<Duration>, ApiError> {
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

/// The longest key accepted.
pub const MAX_KEY_LEN: usize = 255;

/// The request's key, if any: 1 to 255 visible ASCII characters.
pub fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn seconds_and_go_style_durations_parse() {
        assert_eq!(parse_duration("90"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("90s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("5m"), Some(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5m"), Some(Duration::from_secs(90)));
    }

    #[test]
    fn zero_negative_and_unknown_units_are_refused() {
        for bad in ["0", "0s", "-5", "5d", "soon", "", "m5"] {
            assert_eq!(parse_duration(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_header_reads_as_the_duration_asked_for() {
        let asked = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert("cancel-after", HeaderValue::from_str(v).expect("header"));
            cancel_after(&h)
        };
        assert_eq!(asked("60").ok(), Some(Some(Duration::from_secs(60))));
        assert_eq!(asked("2h").ok(), Some(Some(Duration::from_secs(7200))), "capped by the job, not here");
        assert!(asked("never").is_err());
        assert_eq!(cancel_after(&HeaderMap::new()).ok(), Some(None));
    }

    fn prefer(v: &str) -> Result<Option<Duration>, ApiError> {
        let mut h = HeaderMap::new();
        h.insert("prefer", HeaderValue::from_str(v).expect("header"));
        prefer_wait(&h)
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
        assert_eq!(prefer_wait(&HeaderMap::new()).ok().flatten(), None);
    }

    fn with(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("idempotency-key", HeaderValue::from_str(v).expect("header"));
        h
    }

    #[test]
    fn keys_of_one_to_255_visible_characters_are_accepted() {
        assert_eq!(idempotency_key(&with("order-42")).ok().flatten().as_deref(), Some("order-42"));
        assert!(idempotency_key(&with(&"k".repeat(255))).is_ok());
        assert!(idempotency_key(&with(&"k".repeat(256))).is_err());
        assert!(idempotency_key(&with("has space")).is_err());
        assert_eq!(idempotency_key(&HeaderMap::new()).ok().flatten(), None);
    }
}
