//! Lists of an account's jobs (predictions or trainings), shared by the API's lists and the
//! console's: one page of a list query, and the console's pages by number.

use common::domain::{AccountId, JobKind, Prediction, PredictionStatus};

use crate::{error::ApiError, state::AppState, validate::list_predictions::ListPredictions};

/// The jobs of `kind` of `account` that `query` asks for (its filter and its page), newest
/// first, as stored (large values not read back), and how many match in all.
pub async fn page(
    state: &AppState,
    account: &AccountId,
    kind: JobKind,
    query: &ListPredictions,
) -> Result<(Vec<Prediction>, u64), ApiError> {
    let limit = i64::from(query.limit);
    Ok(state.store.predictions().list_for_account(account, &query.filter(kind), query.offset, limit).await?)
}

/// Jobs on one page of a console list.
pub const CONSOLE_PAGE: u32 = 20;

/// The console's page `number` (from 0) of `account`'s jobs of `kind`, in `status` if given:
/// its jobs, how many match in all, and the numbers of its neighbouring pages.
pub async fn console_page(
    state: &AppState,
    account: &AccountId,
    kind: JobKind,
    status: Option<PredictionStatus>,
    number: u64,
) -> Result<NumberedPage, ApiError> {
    let query = ListPredictions {
        status,
        created_after: None,
        created_before: None,
        limit: CONSOLE_PAGE,
        offset: number.saturating_mul(u64::from(CONSOLE_PAGE)),
        as_of: None,
    };
    let (jobs, total) = page(state, account, kind, &query).await?;
    let (next, previous) = query.neighbours(total);
    let number_of = |offset: u64| offset / u64::from(CONSOLE_PAGE);
    Ok(NumberedPage { jobs, total, previous: previous.map(number_of), next: next.map(number_of) })
}

/// A page of a console list.
pub struct NumberedPage {
    /// Its jobs, newest first.
    pub jobs: Vec<Prediction>,
    /// How many match in all.
    pub total: u64,
    /// The number of the newer page, if any.
    pub previous: Option<u64>,
    /// The number of the older page, if any.
    pub next: Option<u64>,
}
