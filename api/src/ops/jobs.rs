//! Lists of an account's jobs (predictions or trainings), shared by the API's lists and the
//! console's: one page of a list query, and a page of the console's lists.

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

/// The console's page of `account`'s jobs of `kind` that starts after `offset` of them, in
/// `status` if given: [`CONSOLE_PAGE`] jobs at most, and how many match in all.
pub async fn console_page(
    state: &AppState,
    account: &AccountId,
    kind: JobKind,
    status: Option<PredictionStatus>,
    offset: u64,
) -> Result<(Vec<Prediction>, u64), ApiError> {
    let query =
        ListPredictions { status, created_after: None, created_before: None, limit: CONSOLE_PAGE, offset, as_of: None };
    page(state, account, kind, &query).await
}
