//! Files of this service named in a prediction's input (a `format: uri` value that is one of
//! its file URLs, on either surface): each must be a file of the caller's account that has not
//! expired, checked when the prediction is created, so a run never starts on a file the caller
//! could not read. The prediction records them (`input_files`) and the retention sweep keeps
//! them until it ends.

use crate::problem::FieldError;
use common::domain::{AccountId, FileId};

use crate::{error::ApiError, ops::owned::owned_file, state::AppState};

/// The files `uri_values` (field path, value) name, each checked to be `account`'s; every
/// failing field at once.
pub async fn check(
    state: &AppState,
    account: &AccountId,
    uri_values: &[(String, String)],
) -> Result<Vec<FileId>, ApiError> {
    let mut files = Vec::new();
    let mut errors = Vec::new();
    for (path, value) in uri_values {
        let Some(id) = state.links.file_named_by(value) else { continue };
        match owned_file(state, account, id.as_str()).await {
            Ok(_) => files.push(id),
            Err(ApiError::Problem(_)) => errors.push(FieldError::invalid(
                path,
                format!("No file {id} in this account: it does not exist, has expired or was deleted."),
            )),
            Err(e) => return Err(e),
        }
    }
    if !errors.is_empty() {
        return Err(ApiError::validation("The input names files that cannot be used; see errors.", errors));
    }
    files.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    files.dedup();
    Ok(files)
}
