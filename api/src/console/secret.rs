//! The webhook signing secret page (scope `admin`): the secret masked, a Reveal button, and a
//! Rotate form with the transition window in hours (the old secret keeps signing beside the
//! new one meanwhile; see [`crate::ops::signing_secret`]).

use askama::Template;
use axum::{
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
};
use bson::DateTime;
use common::{domain::Scope, store::accounts::SigningSecrets};

use super::{
    csrf::ConsoleAction,
    error::ConsoleError,
    page::{Chrome, html},
    session::Signed,
};
use crate::{ops::signing_secret, state::AppState, validate::field::FieldValue};

#[derive(Template)]
#[template(path = "secret.html")]
struct SecretPage {
    chrome: Chrome,
    masked: String,
    revealed: Option<String>,
    created: String,
    previous_expires: Option<String>,
    notice: Option<&'static str>,
    error: Option<String>,
}

fn page(
    signed: &Signed,
    secrets: &SigningSecrets,
    reveal: bool,
    notice: Option<&'static str>,
    error: Option<String>,
) -> SecretPage {
    let now = DateTime::now();
    SecretPage {
        chrome: signed.chrome("secret"),
        masked: secrets.current.masked(),
        revealed: reveal.then(|| secrets.current.expose().to_owned()),
        created: secrets.created_at.to_chrono().format("%Y-%m-%d %H:%M UTC").to_string(),
        previous_expires: secrets
            .previous
            .as_ref()
            .map(|(_, expires)| *expires)
            .filter(|expires| now < *expires)
            .map(|e| e.to_chrono().format("%Y-%m-%d %H:%M UTC").to_string()),
        notice,
        error,
    }
}

/// `GET /secret`
pub async fn show(State(state): State<AppState>, signed: Signed) -> Result<Response, ConsoleError> {
    signed.require(Scope::Admin)?;
    let secrets = signing_secret::current(&state, &signed.key.account_id).await?;
    Ok(html(&page(&signed, &secrets, false, None, None)))
}

/// `POST /secret/reveal`
pub async fn reveal(State(state): State<AppState>, action: ConsoleAction) -> Result<Response, ConsoleError> {
    action.signed.require(Scope::Admin)?;
    let secrets = signing_secret::current(&state, &action.signed.key.account_id).await?;
    Ok(html(&page(&action.signed, &secrets, true, None, None)))
}

/// `POST /secret/rotate`
pub async fn rotate(State(state): State<AppState>, action: ConsoleAction) -> Result<Response, ConsoleError> {
    action.signed.require(Scope::Admin)?;
    let account = &action.signed.key.account_id;
    let hours = action
        .field("transition_hours")
        .trim()
        .parse::<i64>()
        .ok()
        .and_then(|h| signing_secret::TransitionHours::from_value(h.into()).ok())
        .map(|h| h.0);
    let Some(hours) = hours else {
        let secrets = signing_secret::current(&state, account).await?;
        let error = Some("The transition must be a whole number of hours from 1 to 168.".to_owned());
        return Ok((StatusCode::BAD_REQUEST, html(&page(&action.signed, &secrets, false, None, error))).into_response());
    };
    let secrets = signing_secret::rotate(&state, account, hours).await?;
    let notice = Some(
        "Rotated. Webhooks are signed with the new secret from now on, and with the old one too until the transition ends.",
    );
    Ok(html(&page(&action.signed, &secrets, true, notice, None)))
}
