//! The query of `GET /v1/predictions`: `status` (one of the five statuses), `limit` (1 to 100,
//! default 20) and `offset` (0 or more, default 0). Unknown parameters are ignored; a repeated
//! parameter counts once (the first).

use crate::problem::FieldError;
use common::domain::PredictionStatus;

use super::paging::{Paging, QueryPairs};

/// The status filter as the OpenAPI description shows it (beside
/// [`super::paging::PagingParams`]); [`parse`] reads it.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct StatusParams {
    /// Only predictions in this status.
    status: Option<PredictionStatus>,
}

/// A well-formed list query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListPredictions {
    /// Only predictions in this status.
    pub status: Option<PredictionStatus>,
    /// Page size.
    pub limit: u32,
    /// Matches to skip.
    pub offset: u64,
}

/// Parses the raw query string; on failure returns every field error.
pub fn parse(query: Option<&str>) -> Result<ListPredictions, Vec<FieldError>> {
    let query = QueryPairs::parse(query);
    let mut errors = Vec::new();
    let status = match query.first("status") {
        None => None,
        Some(s) => match s.parse() {
            Ok(status) => Some(status),
            Err(_) => {
                errors.push(FieldError::invalid(
                    "status",
                    "Must be one of starting, processing, succeeded, failed, canceled.",
                ));
                None
            }
        },
    };
    let Paging { limit, offset } = Paging::parse(&query, &mut errors);
    if errors.is_empty() { Ok(ListPredictions { status, limit, offset }) } else { Err(errors) }
}

impl super::FromQuery for ListPredictions {
    fn from_query(query: Option<&str>) -> Result<Self, Vec<FieldError>> {
        parse(query)
    }
}

impl ListPredictions {
    /// The page at `offset` with the same filter and size, as a query string.
    pub fn query_at(&self, offset: u64) -> String {
        let mut q = format!("limit={}&offset={offset}", self.limit);
        if let Some(s) = self.status {
            q.push_str(&format!("&status={s}"));
        }
        q
    }

    /// The offsets of the next and previous pages, given the number of matches.
    pub fn neighbours(&self, total: u64) -> (Option<u64>, Option<u64>) {
        Paging { limit: self.limit, offset: self.offset }.neighbours(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(q: &str) -> Vec<String> {
        parse(Some(q)).expect_err("invalid").into_iter().map(|e| e.field).collect()
    }

    #[test]
    fn defaults_apply_without_a_query() {
        assert_eq!(parse(None), Ok(ListPredictions { status: None, limit: 20, offset: 0 }));
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
        let q = ListPredictions { status: Some(PredictionStatus::Failed), limit: 5, offset: 0 };
        assert_eq!(q.query_at(5), "limit=5&offset=5&status=failed");
    }
}
