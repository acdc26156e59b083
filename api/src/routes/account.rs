//! `GET /v1/account` (scope `read`): the account of the calling key, in the shape Replicate's
//! clients read (`accounts.current()`): `{type: "organization", username, name}`, where
//! `username` and `name` are the account's name (a deployment's `owner`).

use axum::{Json, extract::State};
use serde::Serialize;

use crate::{
    error::ApiError,
    http::auth::{Authorized, Read},
    routes::openapi::problems,
    state::AppState,
};

/// The calling key's account.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AccountView {
    /// Always `organization`: an account is shared by its keys.
    #[serde(rename = "type")]
    pub kind: String,
    /// The account's name.
    pub username: String,
    /// The account's name.
    pub name: String,
}

/// `GET /v1/account`
#[utoipa::path(
    get,
    path = "/account",
    operation_id = "getAccount",
    tag = "account",
    responses((status = 200, description = "The calling key's account", body = AccountView), (status = 404, response = inline(problems::NotFound)), (status = 404, response = inline(problems::NotFound))),
    security(("bearer" = []))
)]
pub async fn get(State(state): State<AppState>, auth: Authorized<Read>) -> Result<Json<AccountView>, ApiError> {
    let account = state.store.accounts().get(&auth.caller.key.account_id).await?;
    let account = account.ok_or_else(|| ApiError::not_found("The key's account does not exist."))?;
    Ok(Json(AccountView { kind: "organization".into(), username: account.name.clone(), name: account.name }))
}
