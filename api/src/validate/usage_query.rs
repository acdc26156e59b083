//! The query of `GET /v1/usage`: `start` and `end` (RFC 3339; by default the last 30 days up
//! to now), `bucket` (`hour` or `day`, default `day`; buckets aligned to UTC) and `group_by` (a
//! comma list of `model`, `deployment`, `hardware`, `api_key`, `kind`; default `model`).
//! Totals are kept per hour, so `start` is taken back to the start of its bucket and `end` on
//! to the end of its bucket. Any range is answered (the work is bounded by the totals stored,
//! not by the range: empty buckets are left out); one that ends before it starts is empty.

use chrono::{DateTime, Duration, DurationRound, Utc};

use super::paging::QueryPairs;
use crate::problem::FieldError;

/// The parameters as the OpenAPI description shows them; [`parse`] reads them.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct UsageParams {
    /// The start of the range (RFC 3339); default 30 days before `end`.
    #[param(format = DateTime)]
    start: Option<String>,
    /// The end of the range (RFC 3339); default now.
    #[param(format = DateTime)]
    end: Option<String>,
    /// `hour` or `day` (default `day`).
    #[param(pattern = "^(hour|day)$")]
    bucket: Option<String>,
    /// A comma list of `model`, `deployment`, `hardware`, `api_key`, `kind` (default `model`).
    #[param(pattern = "^(model|deployment|hardware|api_key|kind)(,(model|deployment|hardware|api_key|kind))*$")]
    group_by: Option<String>,
}

/// The size of a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bucket {
    /// An hour.
    Hour,
    /// A day (UTC).
    Day,
}

impl Bucket {
    /// Its name in the query and the body.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Hour => "hour",
            Self::Day => "day",
        }
    }

    /// Its length.
    pub fn length(self) -> Duration {
        match self {
            Self::Hour => Duration::hours(1),
            Self::Day => Duration::days(1),
        }
    }

    /// The start of the bucket `at` falls in.
    pub fn floor(self, at: DateTime<Utc>) -> DateTime<Utc> {
        at.duration_trunc(self.length()).unwrap_or(at)
    }
}

/// What usage may be grouped by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum GroupKey {
    /// The model, `owner/name`.
    Model,
    /// The deployment, `owner/name` (null when none).
    Deployment,
    /// The hardware pool (null when any).
    Hardware,
    /// The id of the API key that created the prediction.
    ApiKey,
    /// `prediction` or `training`.
    Kind,
}

impl GroupKey {
    /// Its name in the query, the body and the CSV header.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Model => "model",
            Self::Deployment => "deployment",
            Self::Hardware => "hardware",
            Self::ApiKey => "api_key",
            Self::Kind => "kind",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        [Self::Model, Self::Deployment, Self::Hardware, Self::ApiKey, Self::Kind].into_iter().find(|k| k.as_str() == s)
    }
}

/// A well-formed usage query, its range aligned to its buckets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageQuery {
    /// The start of the first bucket.
    pub start: DateTime<Utc>,
    /// The end of the last bucket.
    pub end: DateTime<Utc>,
    /// The bucket size.
    pub bucket: Bucket,
    /// The group keys, in the order asked, without repeats.
    pub group_by: Vec<GroupKey>,
}

fn time(query: &QueryPairs, name: &str, errors: &mut Vec<FieldError>) -> Option<DateTime<Utc>> {
    let raw = query.first(name)?;
    match DateTime::parse_from_rfc3339(raw) {
        Ok(t) => Some(t.with_timezone(&Utc)),
        Err(_) => {
            errors.push(FieldError::invalid(name, "Must be an RFC 3339 time, like 2026-11-01T00:00:00Z."));
            None
        }
    }
}

/// Parses the raw query string as of `now`; on failure returns every field error.
pub fn parse(query: Option<&str>, now: DateTime<Utc>) -> Result<UsageQuery, Vec<FieldError>> {
    let query = QueryPairs::parse(query);
    let mut errors = Vec::new();
    let bucket = match query.first("bucket") {
        None | Some("day") => Bucket::Day,
        Some("hour") => Bucket::Hour,
        Some(_) => {
            errors.push(FieldError::invalid("bucket", "Must be hour or day."));
            Bucket::Day
        }
    };
    let mut group_by = Vec::new();
    for name in query.first("group_by").unwrap_or("model").split(',').map(str::trim) {
        match GroupKey::parse(name) {
            Some(key) if !group_by.contains(&key) => group_by.push(key),
            Some(_) => {}
            None => {
                errors.push(FieldError::invalid(
                    "group_by",
                    format!("Unknown group {name:?}: use a comma list of model, deployment, hardware, api_key, kind."),
                ));
                break;
            }
        }
    }
    let end = time(&query, "end", &mut errors).unwrap_or(now);
    let start = time(&query, "start", &mut errors).unwrap_or(end - Duration::days(30));
    if !errors.is_empty() {
        return Err(errors);
    }
    if start >= end {
        return Ok(UsageQuery { start: end, end, bucket, group_by });
    }
    let (start, last) = (bucket.floor(start), bucket.floor(end));
    let end = if last == end { end } else { last + bucket.length() };
    Ok(UsageQuery { start, end, bucket, group_by })
}

/// The query as of now.
impl super::FromQuery for UsageQuery {
    fn from_query(query: Option<&str>) -> Result<Self, Vec<FieldError>> {
        parse(query, Utc::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).expect("time").with_timezone(&Utc)
    }

    #[test]
    fn defaults_are_the_last_30_days_by_day_and_model_aligned_to_utc_days() {
        let q = parse(None, at("2026-11-26T10:30:00Z")).expect("valid");
        assert_eq!(q.bucket, Bucket::Day);
        assert_eq!(q.group_by, vec![GroupKey::Model]);
        assert_eq!(q.start, at("2026-10-27T00:00:00Z"));
        assert_eq!(q.end, at("2026-11-27T00:00:00Z"));
    }

    #[test]
    fn hours_and_several_groups_are_read_in_the_order_asked() {
        let q = parse(
            Some("start=2026-11-26T01:10:00Z&end=2026-11-26T03:00:00Z&bucket=hour&group_by=kind,model,kind"),
            at("2026-11-26T10:00:00Z"),
        )
        .expect("valid");
        assert_eq!((q.start, q.end), (at("2026-11-26T01:00:00Z"), at("2026-11-26T03:00:00Z")));
        assert_eq!(q.group_by, vec![GroupKey::Kind, GroupKey::Model]);
    }

    #[test]
    fn any_well_formed_range_is_answered_and_one_that_ends_before_it_starts_is_empty() {
        let now = at("2026-11-26T10:00:00Z");
        let long = parse(Some("start=2000-01-01T00:00:00Z"), now).expect("a long range is answered");
        assert_eq!(long.start, at("2000-01-01T00:00:00Z"));
        let inverted = parse(Some("start=2026-11-27T00:00:00Z"), now).expect("answered");
        assert_eq!((inverted.start, inverted.end), (now, now), "an empty range");
    }

    #[test]
    fn every_bad_parameter_is_named() {
        let now = at("2026-11-26T10:00:00Z");
        let fields =
            |q: &str| parse(Some(q), now).expect_err("invalid").into_iter().map(|e| e.field).collect::<Vec<_>>();
        assert_eq!(fields("bucket=week"), vec!["bucket"]);
        assert_eq!(fields("group_by=model,color"), vec!["group_by"]);
        assert_eq!(fields("start=yesterday"), vec!["start"]);
        assert_eq!(fields("end=2026-13-01T00:00:00Z"), vec!["end"]);
        assert_eq!(fields("bucket=week&group_by=x"), vec!["bucket", "group_by"]);
    }
}
