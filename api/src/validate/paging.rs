//! `limit` (1 to 100, default 20) and `offset` (0 to 2^63-1, default 0): the paging of every list
//! (predictions, models), with the offsets of the neighbouring pages.

use serde::Deserialize;

use super::{
    field::{Field, Read},
    query::QueryInt,
};
use crate::problem::FieldError;

/// The default page size.
pub const DEFAULT_LIMIT: u32 = 20;
/// The largest page size.
pub const MAX_LIMIT: u32 = 100;
/// The largest offset: MongoDB's `skip` is a signed 64-bit integer.
pub const MAX_OFFSET: u64 = i64::MAX as u64;

/// `limit` and `offset` as sent.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PagingParams {
    /// Page size (default 20).
    #[param(value_type = Option<u32>, minimum = 1, maximum = 100)]
    limit: Option<Field<QueryInt<1, { MAX_LIMIT as i64 }>>>,
    /// Matches to skip (default 0).
    #[param(value_type = Option<u64>, minimum = 0, maximum = 9223372036854775807_u64)]
    offset: Option<Field<QueryInt<0, { i64::MAX }>>>,
}
impl super::query::QueryParams for PagingParams {}

/// A page of a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Paging {
    /// Page size.
    pub limit: u32,
    /// Matches to skip.
    pub offset: u64,
}

impl Default for Paging {
    fn default() -> Self {
        Self { limit: DEFAULT_LIMIT, offset: 0 }
    }
}

/// A query of `limit` and `offset` alone.
impl super::FromQuery for Paging {
    type Sent = PagingParams;

    fn check(sent: PagingParams) -> Result<Self, Vec<FieldError>> {
        let mut errors = Vec::new();
        let paging = Self::read(sent, &mut errors);
        if errors.is_empty() { Ok(paging) } else { Err(errors) }
    }
}

impl Paging {
    /// The page `sent` asks for, adding an error for each bad parameter (a list reads its own
    /// filter first).
    pub fn read(sent: PagingParams, errors: &mut Vec<FieldError>) -> Self {
        let limit = sent.limit.optional("limit", errors).and_then(|n| u32::try_from(n.0).ok());
        let offset = sent.offset.optional("offset", errors).and_then(|n| u64::try_from(n.0).ok());
        Self { limit: limit.unwrap_or(DEFAULT_LIMIT), offset: offset.unwrap_or(0) }
    }

    /// The URLs of the next and previous pages of the list at `url` (no query), given the
    /// number of matches: `url?limit=L&offset=O`, `None` where there is no such page.
    pub fn links(&self, total: u64, url: &str) -> (Option<String>, Option<String>) {
        let link = |offset: u64| format!("{url}?limit={}&offset={offset}", self.limit);
        let (next, previous) = self.neighbours(total);
        (next.map(link), previous.map(link))
    }

    /// The offsets of the next and previous pages, given the number of matches.
    pub fn neighbours(&self, total: u64) -> (Option<u64>, Option<u64>) {
        let next = self.offset + u64::from(self.limit);
        let next = (next < total).then_some(next);
        let previous = (self.offset > 0).then(|| self.offset.saturating_sub(u64::from(self.limit)));
        (next, previous)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::FromQuery;

    fn parse(q: &str) -> (Paging, Vec<String>) {
        match Paging::from_query(Some(q)) {
            Ok(paging) => (paging, Vec::new()),
            Err(errors) => (Paging::default(), errors.into_iter().map(|e| e.field).collect()),
        }
    }

    #[test]
    fn links_name_the_neighbouring_pages_only_where_they_exist() {
        let page = Paging { limit: 10, offset: 10 };
        assert_eq!(
            page.links(25, "http://h/v1/files"),
            (Some("http://h/v1/files?limit=10&offset=20".into()), Some("http://h/v1/files?limit=10&offset=0".into()))
        );
        assert_eq!(Paging { limit: 10, offset: 0 }.links(10, "u"), (None, None));
    }

    #[test]
    fn limits_hold_on_both_sides() {
        assert_eq!(parse("").0, Paging::default());
        assert_eq!(parse("limit=1").0.limit, 1);
        assert_eq!(parse("limit=100").0.limit, 100);
        assert_eq!(parse("limit=0").1, vec!["limit"]);
        assert_eq!(parse("limit=101").1, vec!["limit"]);
        assert_eq!(parse("offset=0").0.offset, 0);
        assert_eq!(parse("offset=-1").1, vec!["offset"]);
        assert_eq!(parse("offset=9223372036854775807").0.offset, MAX_OFFSET);
        assert_eq!(parse("offset=9223372036854775808").1, vec!["offset"], "beyond what MongoDB can skip");
        assert_eq!(parse("limit=5&limit=7").0.limit, 5, "the first occurrence counts");
    }

    #[test]
    fn neighbours_exist_only_where_there_are_pages() {
        let q = Paging { limit: 10, offset: 0 };
        assert_eq!(q.neighbours(25), (Some(10), None));
        let q = Paging { offset: 20, ..q };
        assert_eq!(q.neighbours(25), (None, Some(10)));
        let q = Paging { offset: 5, ..q };
        assert_eq!(q.neighbours(25), (Some(15), Some(0)));
        assert_eq!(q.neighbours(0), (None, Some(0)));
    }
}
