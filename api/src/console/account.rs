//! The account page (scope `read`): the account the signed-in key belongs to, its name and id,
//! and its concurrency cap (how many of its predictions may run at once over every runner, set
//! by the operator with `api admin set-concurrency`).

use askama::Template;
use axum::{extract::State, response::Response};
use common::domain::Scope;

use super::{
    error::ConsoleError,
    page::{Chrome, html},
    session::Signed,
};
use crate::state::AppState;

#[derive(Template)]
#[template(path = "account.html")]
struct AccountPage {
    chrome: Chrome,
    name: String,
    id: String,
    created: String,
    max_concurrency: Option<u32>,
}

/// `GET /account`
pub async fn show(State(state): State<AppState>, signed: Signed) -> Result<Response, ConsoleError> {
    signed.require(Scope::Read)?;
    let account = crate::ops::accounts::of_key(&state, &signed.key.account_id).await?;
    Ok(html(&AccountPage {
        chrome: signed.chrome("account"),
        name: account.name,
        id: account.id.to_string(),
        created: account.created_at.to_chrono().format("%Y-%m-%d %H:%M UTC").to_string(),
        max_concurrency: account.max_concurrency,
    }))
}
