//! The query of `GET /v1/usage`: `start` and `end` (RFC 3339; by default the last 30 days up
//! to now), `bucket` (`hour` or `day`, default `day`; buckets aligned to UTC) and `group_by` (a
//! comma list of `model`, `deployment`, `hardware`, `api_key`, `kind`; default `model`).
//! Totals are kept per hour, so `start` is taken back to the start of its bucket and `end` on
//! to the end of its bucket. Any range is answered (the work is bounded by the totals stored,
//! not by the range: empty buckets are left out); one that ends before it starts is empty.

use chrono::{DateTime, Duration, DurationRound, Utc};
use serde::Deserialize;
use serde_json::Value;

use super::{
    field::{Faults, Field, FieldValue, Read},
    query::{self, QueryParams, Timestamp},
};
use crate::problem::FieldError;

/// The parameters as sent.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct UsageParams {
    /// The start of the range (RFC 3339); default 30 days before `end`.
    #[param(value_type = Option<String>, format = DateTime)]
    start: Option<Field<Timestamp>>,
    /// The end of the range (RFC 3339); default now.
    #[param(value_type = Option<String>, format = DateTime)]
    end: Option<Field<Timestamp>>,
    /// `hour` or `day` (default `day`).
    #[param(value_type = Option<String>, pattern = "^(hour|day)$")]
    bucket: Option<Field<Bucket>>,
    /// A comma list of `model`, `deployment`, `hardware`, `api_key`, `kind` (default `model`).
    #[param(
        value_type = Option<String>,
        pattern = "^(model|deployment|hardware|api_key|kind)(,(model|deployment|hardware|api_key|kind))*$"
    )]
    group_by: Option<Field<GroupBy>>,
}
impl QueryParams for UsageParams {}

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

impl FieldValue for Bucket {
    fn from_value(value: Value) -> Result<Self, Faults> {
        match value.as_str() {
            Some("hour") => Ok(Self::Hour),
            Some("day") => Ok(Self::Day),
            _ => Err(Faults::new("Must be hour or day.")),
        }
    }
}

/// The group keys of a comma list, in the order named, without repeats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupBy(Vec<GroupKey>);

impl FieldValue for GroupBy {
    fn from_value(value: Value) -> Result<Self, Faults> {
        let mut keys = Vec::new();
        for name in value.as_str().unwrap_or_default().split(',').map(str::trim) {
            match GroupKey::parse(name) {
                Some(key) if !keys.contains(&key) => keys.push(key),
                Some(_) => {}
                None => {
                    return Err(Faults::new(format!(
                        "Unknown group {name:?}: use a comma list of model, deployment, hardware, api_key, kind."
                    )));
                }
            }
        }
        Ok(Self(keys))
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

/// Parses the raw query string as of `now`; on failure returns every field error.
pub fn parse(query: Option<&str>, now: DateTime<Utc>) -> Result<UsageQuery, Vec<FieldError>> {
    UsageParams::read(&query::object(query)).and_then(|sent| UsageQuery::at(sent, now))
}

impl UsageQuery {
    /// The query `sent` asks for as of `now`, its range aligned to its buckets; on failure,
    /// every bad parameter.
    fn at(sent: UsageParams, now: DateTime<Utc>) -> Result<Self, Vec<FieldError>> {
        let mut errors = Vec::new();
        let bucket = sent.bucket.optional("bucket", &mut errors).unwrap_or(Bucket::Day);
        let group_by = sent.group_by.optional("group_by", &mut errors).map_or_else(|| vec![GroupKey::Model], |g| g.0);
        let end = sent.end.optional("end", &mut errors).map_or(now, |t| t.0);
        let start = sent.start.optional("start", &mut errors).map_or(end - Duration::days(30), |t| t.0);
        if !errors.is_empty() {
            return Err(errors);
        }
        if start >= end {
            return Ok(Self { start: end, end, bucket, group_by });
        }
        let (start, last) = (bucket.floor(start), bucket.floor(end));
        let end = if last == end { end } else { last + bucket.length() };
        Ok(Self { start, end, bucket, group_by })
    }
}

/// The query as of now.
impl super::FromQuery for UsageQuery {
    type Sent = UsageParams;

    fn check(sent: UsageParams) -> Result<Self, Vec<FieldError>> {
        Self::at(sent, Utc::now())
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
