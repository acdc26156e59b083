//! The query of `GET /v1/predictions` and `GET /v1/trainings`: `status` (one of the five
//! statuses), `created_after` and `created_before` (RFC 3339 date-times: created at or after
//! the one, before the other, as Replicate reads them), `limit` (1 to 100, default 20) and `offset` (0 or more,
//! default 0). Unknown parameters are ignored; a repeated parameter counts once (the first).

use chrono::{DateTime, SecondsFormat, Utc};
use common::{
    domain::{JobKind, PredictionStatus},
    store::JobFilter,
};
use serde::Deserialize;

use super::{
    field::{Field, Read},
    paging::{Paging, PagingParams},
    query::Timestamp,
};
use crate::problem::FieldError;

/// The filter of a list as sent (beside its [`PagingParams`]).
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StatusParams {
    /// Only predictions in this status.
    #[param(value_type = Option<PredictionStatus>)]
    status: Option<Field<PredictionStatus>>,
    /// Only those created at or after this time (RFC 3339, inclusive).
    #[param(value_type = Option<DateTime<Utc>>)]
    created_after: Option<Field<Timestamp>>,
    /// Only those created before this time (RFC 3339, exclusive).
    #[param(value_type = Option<DateTime<Utc>>)]
    created_before: Option<Field<Timestamp>>,
    /// A page of a list as it stood when its first page was read, as the `next` and
    /// `previous` links of `/replicate/v1` carry it (opaque: follow the links; it takes the
    /// place of `offset`).
    #[param(value_type = Option<String>, pattern = r"^[0-9]{1,18}\.[0-9]{1,15}$")]
    cursor: Option<Field<String>>,
}
impl super::query::QueryParams for StatusParams {}

/// A well-formed list query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListPredictions {
    /// Only predictions in this status.
    pub status: Option<PredictionStatus>,
    /// Only those created at or after this time.
    pub created_after: Option<DateTime<Utc>>,
    /// Only those created before this time.
    pub created_before: Option<DateTime<Utc>>,
    /// Page size.
    pub limit: u32,
    /// Matches to skip.
    pub offset: u64,
    /// The list as it stood then: only jobs created at or before it (a cursor's snapshot,
    /// so jobs created since do not move the pages).
    pub as_of: Option<DateTime<Utc>>,
}

/// A cursor: the offset of a page in a list as it stood at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// Matches to skip.
    pub offset: u64,
    /// The list's snapshot: jobs created at or before it.
    pub as_of: DateTime<Utc>,
}

impl Cursor {
    /// The cursor as a link carries it: `<offset>.<snapshot in Unix milliseconds>`, opaque to
    /// clients (they follow the links), and every value of its form one that reads back.
    pub fn encode(&self) -> String {
        format!("{}.{}", self.offset, self.as_of.timestamp_millis())
    }

    /// A cursor of [`Self::encode`]'s form (at most 18 and 15 digits), or `None`.
    pub fn decode(text: &str) -> Option<Self> {
        let (offset, millis) = text.trim().split_once('.')?;
        let digits = |s: &str, most: usize| !s.is_empty() && s.len() <= most && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(offset, 18) || !digits(millis, 15) {
            return None;
        }
        let offset = offset.parse::<u64>().ok()?;
        let as_of = DateTime::<Utc>::from_timestamp_millis(millis.parse().ok()?)?;
        Some(Self { offset, as_of })
    }
}

impl super::FromQuery for ListPredictions {
    type Sent = (StatusParams, PagingParams);

    fn check((filter, paging): Self::Sent) -> Result<Self, Vec<FieldError>> {
        let mut errors = Vec::new();
        let status = filter.status.optional("status", &mut errors);
        let created_after = filter.created_after.optional("created_after", &mut errors).map(|t| t.0);
        let created_before = filter.created_before.optional("created_before", &mut errors).map(|t| t.0);
        let cursor = filter.cursor.optional("cursor", &mut errors).and_then(|text| {
            let cursor = Cursor::decode(&text);
            if cursor.is_none() {
                errors.push(FieldError::invalid(
                    "cursor",
                    "Not a cursor of this list: follow a page's next or previous link.",
                ));
            }
            cursor
        });
        let Paging { limit, offset } = Paging::read(paging, &mut errors);
        let (offset, as_of) = cursor.map_or((offset, None), |c| (c.offset, Some(c.as_of)));
        if errors.is_empty() {
            Ok(ListPredictions { status, created_after, created_before, limit, offset, as_of })
        } else {
            Err(errors)
        }
    }
}

impl ListPredictions {
    /// The page at `offset` with the same filter and size, as a query string.
    pub fn query_at(&self, offset: u64) -> String {
        let mut q = format!("limit={}&offset={offset}", self.limit);
        if let Some(s) = self.status {
            q.push_str(&format!("&status={s}"));
        }
        for (name, at) in [("created_after", self.created_after), ("created_before", self.created_before)] {
            if let Some(at) = at {
                q.push_str(&format!("&{name}={}", at.to_rfc3339_opts(SecondsFormat::AutoSi, true)));
            }
        }
        q
    }

    /// The page at `offset` of the list as it stood at `as_of`, with the same filter and size,
    /// as a query string: what `/replicate/v1`'s links carry.
    pub fn cursor_query_at(&self, offset: u64, as_of: DateTime<Utc>) -> String {
        let mut q = format!("limit={}&cursor={}", self.limit, Cursor { offset, as_of }.encode());
        if let Some(s) = self.status {
            q.push_str(&format!("&status={s}"));
        }
        for (name, at) in [("created_after", self.created_after), ("created_before", self.created_before)] {
            if let Some(at) = at {
                let text = at.to_rfc3339_opts(SecondsFormat::AutoSi, true);
                q.push_str(&format!(
                    "&{name}={}",
                    url::form_urlencoded::byte_serialize(text.as_bytes()).collect::<String>()
                ));
            }
        }
        q
    }

    /// The jobs of `kind` this query shows: within its bounds, and created at or before its
    /// snapshot when it has one.
    pub fn filter(&self, kind: JobKind) -> JobFilter {
        let at = |t: DateTime<Utc>| bson::DateTime::from_millis(t.timestamp_millis());
        let snapshot_end = self.as_of.map(|t| bson::DateTime::from_millis(t.timestamp_millis().saturating_add(1)));
        let created_before = match (self.created_before.map(at), snapshot_end) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        JobFilter { kind, status: self.status, created_after: self.created_after.map(at), created_before }
    }

    /// The offsets of the next and previous pages, given the number of matches.
    pub fn neighbours(&self, total: u64) -> (Option<u64>, Option<u64>) {
        Paging { limit: self.limit, offset: self.offset }.neighbours(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::FromQuery;

    fn parse(query: Option<&str>) -> Result<ListPredictions, Vec<FieldError>> {
        ListPredictions::from_query(query)
    }

    fn fields(q: &str) -> Vec<String> {
        parse(Some(q)).expect_err("invalid").into_iter().map(|e| e.field).collect()
    }

    #[test]
    fn defaults_apply_without_a_query() {
        assert_eq!(
            parse(None),
            Ok(ListPredictions {
                status: None,
                created_after: None,
                created_before: None,
                limit: 20,
                offset: 0,
                as_of: None
            })
        );
    }

    #[test]
    fn limits_hold_on_both_sides() {
        assert_eq!(parse(Some("limit=1")).map(|q| q.limit), Ok(1));
        assert_eq!(fields("limit=101"), vec!["limit"]);
        assert_eq!(fields("offset=-1"), vec!["offset"]);
    }

    #[test]
    fn every_bad_parameter_is_reported() {
        assert_eq!(fields("status=done&limit=x&offset=1.5"), vec!["status", "limit", "offset"]);
        assert_eq!(parse(Some("status=canceled&other=1")).map(|q| q.status), Ok(Some(PredictionStatus::Canceled)));
    }

    #[test]
    fn links_keep_the_status_and_the_limit() {
        let q = ListPredictions {
            status: Some(PredictionStatus::Failed),
            created_after: None,
            created_before: None,
            limit: 5,
            offset: 0,
            as_of: None,
        };
        assert_eq!(q.query_at(5), "limit=5&offset=5&status=failed");
    }

    #[test]
    fn a_cursor_reads_back_as_its_offset_and_snapshot_and_a_bad_one_is_named() {
        let as_of = DateTime::<Utc>::from_timestamp_millis(1_800_000_000_123).expect("a time");
        let cursor = Cursor { offset: 40, as_of };
        assert_eq!(Cursor::decode(&cursor.encode()), Some(cursor));
        let q = parse(Some(&format!("limit=20&cursor={}", cursor.encode()))).expect("valid");
        assert_eq!((q.offset, q.as_of), (40, Some(as_of)));
        let bound = q.filter(JobKind::Prediction).created_before.expect("the snapshot bounds it");
        assert_eq!(bound.timestamp_millis(), 1_800_000_000_124, "created at or before the snapshot");
        assert_eq!(fields("cursor=nonsense"), vec!["cursor"]);
    }

    #[test]
    fn creation_bounds_are_rfc3339_kept_in_links_and_named_when_malformed() {
        let q = parse(Some("created_after=2026-11-27T09:30:00+01:00&created_before=2026-11-28T00:00:00.250Z"))
            .expect("valid");
        assert_eq!(q.created_after.map(|t| t.to_rfc3339()), Some("2026-11-27T08:30:00+00:00".to_owned()));
        assert_eq!(
            q.query_at(0),
            "limit=20&offset=0&created_after=2026-11-27T08:30:00Z&created_before=2026-11-28T00:00:00.250Z"
        );
        assert_eq!(
            fields("created_after=yesterday&created_before=2026-13-01T00:00:00Z"),
            vec!["created_after", "created_before"]
        );
    }
}
