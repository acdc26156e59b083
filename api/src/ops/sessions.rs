//! The console's sign-in sessions (`crate::store::console_sessions`): kept, found while live,
//! ended. The console alone uses them; they are here so that every handler reaches the store
//! through `ops`.

use bson::DateTime;

use crate::{
    error::ApiError,
    state::AppState,
    store::{ApiCollections, console_sessions::ConsoleSession},
};

/// Keeps `session`.
pub async fn keep(state: &AppState, session: &ConsoleSession) -> Result<(), ApiError> {
    Ok(state.store.console_sessions().insert(session).await?)
}

/// The session whose token hashes to `token_hash`, if it is live at `now`.
pub async fn live(state: &AppState, token_hash: &str, now: DateTime) -> Result<Option<ConsoleSession>, ApiError> {
    Ok(state.store.console_sessions().find_live(token_hash, now).await?)
}

/// Ends the session whose token hashes to `token_hash` (signing out).
pub async fn end(state: &AppState, token_hash: &str) -> Result<(), ApiError> {
    Ok(state.store.console_sessions().delete(token_hash).await?)
}
