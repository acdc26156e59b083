//! The account's lists that the routes and the console both show, one read each: its
//! deployments, API keys and files, a page at a time (`offset`, at most `limit`), newest
//! first, with how many there are in all.

use common::{
    domain::AccountId,
    store::{FileRecord, deployments::DeploymentRecord},
};

use crate::{
    error::ApiError,
    state::AppState,
    store::{ApiCollections, ApiKeyRecord},
};

/// A page of `account`'s deployments, and how many it has.
pub async fn deployments(
    state: &AppState,
    account: &AccountId,
    offset: u64,
    limit: u32,
) -> Result<(Vec<DeploymentRecord>, u64), ApiError> {
    Ok(state.store.deployments().list(account, offset, i64::from(limit)).await?)
}

/// A page of `account`'s API keys, and how many it has.
pub async fn api_keys(
    state: &AppState,
    account: &AccountId,
    offset: u64,
    limit: u32,
) -> Result<(Vec<ApiKeyRecord>, u64), ApiError> {
    Ok(state.store.api_keys().list_for_account(account, offset, i64::from(limit)).await?)
}

/// A page of `account`'s files (uploads and file outputs), and how many it has.
pub async fn files(
    state: &AppState,
    account: &AccountId,
    offset: u64,
    limit: u32,
) -> Result<(Vec<FileRecord>, u64), ApiError> {
    Ok(state.files.list(account, offset, limit).await?)
}
