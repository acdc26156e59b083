//! A prediction's deadline: `PREDICTION_DEADLINE_SECONDS` after creation (30 minutes by
//! default), or sooner with a `Cancel-After` header on create. The header takes seconds (`90`)
//! or a duration in the style Replicate's clients send (`90s`, `5m`, `1h30m`, `500ms`); a
//! value beyond the deployment's limit is capped at it. Runners fail a prediction that passes
//! its deadline with `error.code` `PREDICTION_TIMEOUT`.

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

/// How long a new prediction may take: the deployment's limit, or `Cancel-After` if sooner.
pub fn limit(headers: &HeaderMap, deployment_limit: Duration) -> Result<Duration, ApiError> {
    let Some(value) = headers.get("cancel-after") else { return Ok(deployment_limit) };
    let requested = value.to_str().ok().and_then(parse_duration).ok_or_else(|| {
        ApiError::validation(
            "The Cancel-After header is not a duration.",
            vec![FieldError::invalid("Cancel-After", "Must be a positive duration: seconds, or e.g. 90s, 5m, 1h30m.")],
        )
    })?;
    Ok(requested.min(deployment_limit))
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
    fn the_header_can_shorten_but_not_extend_the_deployment_limit() {
        let limit_of = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert("cancel-after", HeaderValue::from_str(v).expect("header"));
            limit(&h, Duration::from_secs(1800))
        };
        assert_eq!(limit_of("60").ok(), Some(Duration::from_secs(60)));
        assert_eq!(limit_of("2h").ok(), Some(Duration::from_secs(1800)));
        assert!(limit_of("never").is_err());
        assert_eq!(limit(&HeaderMap::new(), Duration::from_secs(1800)).ok(), Some(Duration::from_secs(1800)));
    }
}
