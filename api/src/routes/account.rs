//! `GET /v1/account` (scope `read`): the account of the calling key, in the shape Replicate's
//! clients read (`accounts.current()`): `{type: "organization", username, name}`, where
//! `username` and `name` are the account's name (a deployment's `owner`); and its spending
//! (docs/spend.md): `monthly_budget` (the lower of the operator's and its own; `null` when it
//! has none) and `spent_this_month` (calendar month, UTC), decimal strings of US dollars.
//!
//! `PATCH /v1/account` (scope `admin`): `{"monthly_budget": "10.00"}` sets the account's own
//! budget, never above the operator's (403); `null` drops it.

use axum::{Json, extract::State};
use serde::Serialize;

use crate::{
    error::ApiError,
    http::{
        auth::{Admin, Authorized, Read},
        extract::Body,
    },
    ops,
    routes::openapi::problems,
    state::{AppState, account_limits::Standing},
    validate::account_changes::{AccountChanges, AccountChangesBody},
};

/// An account as Replicate names one (a release's `created_by`, and the first fields of
/// [`AccountView`]).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AccountName {
    /// Always `organization`: an account is shared by its keys.
    #[serde(rename = "type")]
    pub kind: String,
    /// The account's name.
    pub username: String,
    /// The account's name.
    pub name: String,
}

impl AccountName {
    /// The account named `name`.
    pub fn of(name: &str) -> Self {
        Self { kind: "organization".into(), username: name.to_owned(), name: name.to_owned() }
    }
}

/// The calling key's account.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AccountView {
    /// Its name, as Replicate shows it.
    #[serde(flatten)]
    pub account: AccountName,
    /// The monthly budget in force, US dollars (the lower of the operator's and the
    /// account's own); `null` when there is none. Once `spent_this_month` reaches it, creates
    /// are refused with 402 until the month ends.
    pub monthly_budget: Option<String>,
    /// What the account's jobs that ended this calendar month (UTC) cost, US dollars.
    pub spent_this_month: String,
}

impl AccountView {
    fn of(name: String, standing: &Standing) -> Self {
        Self {
            account: AccountName::of(&name),
            monthly_budget: standing.limits.monthly_budget().map(|b| b.dollars()),
            spent_this_month: standing.spent_this_month.dollars(),
        }
    }
}

/// `GET /v1/account`
#[utoipa::path(
    get,
    path = "/account",
    operation_id = "getAccount",
    tag = "account",
    responses((status = 200, description = "The calling key's account", body = AccountView), (status = 404, response = inline(problems::NotFound))),
    security(("bearer" = []))
)]
pub async fn get(State(state): State<AppState>, auth: Authorized<Read>) -> Result<Json<AccountView>, ApiError> {
    let id = &auth.caller.key.account_id;
    let account = ops::accounts::of_key(&state, id).await?;
    let standing = state.account_limits.fresh(id).await?;
    Ok(Json(AccountView::of(account.name, &standing)))
}

/// `PATCH /v1/account`
#[utoipa::path(
    patch,
    path = "/account",
    operation_id = "updateAccount",
    tag = "account",
    request_body(content = AccountChangesBody, content_type = "application/json"),
    responses((status = 200, description = "The account as changed", body = AccountView), (status = 400, response = inline(problems::BadRequest)), (status = 404, response = inline(problems::NotFound))),
    security(("bearer" = []))
)]
pub async fn update(
    State(state): State<AppState>,
    auth: Authorized<Admin>,
    Body(changes): Body<AccountChanges>,
) -> Result<Json<AccountView>, ApiError> {
    let id = &auth.caller.key.account_id;
    let account = ops::accounts::of_key(&state, id).await?;
    if let Some(budget) = changes.monthly_budget {
        if let (Some(asked), Some(operator)) = (budget, account.operator_budget)
            && asked > operator
        {
            return Err(ApiError::forbidden_because(format!(
                "The operator set this account's monthly budget at ${operator}; an account may only lower it (asked ${asked})."
            )));
        }
        ops::accounts::set_own_budget(&state, id, budget).await?;
        tracing::info!(budget = ?budget.map(|b| b.dollars()), "the account's own monthly budget changed");
    }
    let standing = state.account_limits.fresh(id).await?;
    Ok(Json(AccountView::of(account.name, &standing)))
}
