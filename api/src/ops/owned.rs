//! Reading one prediction (or training) or file on behalf of a caller: only the caller's own
//! account's exist for it. And a model as a caller may see it: any registered model, an
//! account's own model when it is public or the caller's.

use bson::DateTime;
use common::{
    domain::{AccountId, FileId, JobKind, Prediction, PredictionId},
    store::FileRecord,
};

use crate::{error::ApiError, http::auth::Caller, state::AppState};

/// The prediction `id` of the caller's account; 404 for a malformed id, a missing prediction
/// and another account's alike, so existence is never revealed.
pub async fn owned_prediction(state: &AppState, caller: &Caller, id: &str) -> Result<Prediction, ApiError> {
    let missing = || ApiError::not_found(format!("Prediction {id} not found."));
    let prediction_id = PredictionId::parse(id).map_err(|_| missing())?;
    let stored = state.store.predictions().get_for_account(&prediction_id, &caller.key.account_id).await?;
    whole(state, stored.ok_or_else(missing)?).await
}

/// `p` as read from the store, with the values it keeps in the file store read back (see
/// `common::files::payloads`): what every answer shows.
pub async fn whole(state: &AppState, p: Prediction) -> Result<Prediction, ApiError> {
    state.payloads.whole(p).await.map_err(|e| anyhow::Error::from(e).into())
}

/// The prediction (`kind` prediction) or training `id` of the caller's account; 404 as
/// [`owned_prediction`], and for a job of the other kind.
pub async fn owned_job(state: &AppState, caller: &Caller, id: &str, kind: JobKind) -> Result<Prediction, ApiError> {
    let job = owned_prediction(state, caller, id).await;
    match job {
        Ok(job) if job.kind == kind => Ok(job),
        Ok(_) | Err(ApiError::Problem(_)) => Err(ApiError::not_found(match kind {
            JobKind::Prediction => format!("Prediction {id} not found."),
            JobKind::Training => format!("Training {id} not found."),
        })),
        Err(e) => Err(e),
    }
}

/// File `id` of `account` if it exists and has not expired; 404 for a malformed id, a missing
/// or expired file, another account's and a prediction's payload (the services' own, shown
/// only inlined in its prediction) alike.
pub async fn owned_file(state: &AppState, account: &AccountId, id: &str) -> Result<FileRecord, ApiError> {
    let missing = || ApiError::not_found(format!("File {id} not found."));
    let file_id = FileId::parse(id).map_err(|_| missing())?;
    let record = state.files.get(&file_id).await.map_err(anyhow::Error::from)?;
    let shown =
        |r: &FileRecord| &r.account_id == account && !r.payload && r.expires_at.is_none_or(|t| t > DateTime::now());
    record.filter(shown).ok_or_else(missing)
}

/// A model the caller may see: registered (any account's), or owned by an account and
/// public or the caller's own.
pub enum VisibleModel {
    /// A model a runner registered.
    Registered(std::sync::Arc<crate::state::model_catalog::RegisteredModel>),
    /// An account's own model.
    Owned(Box<common::store::OwnedModel>),
}

/// The model `owner/name` as `account` may see it; 404 for a bad name, a missing model and
/// another account's private one alike.
pub async fn visible_model(
    state: &AppState,
    account: &AccountId,
    owner: &str,
    name: &str,
) -> Result<VisibleModel, ApiError> {
    let missing = || ApiError::not_found(format!("Model {owner}/{name} not found."));
    let model = common::domain::ModelRef::new(owner, name).map_err(|_| missing())?;
    if let Some(registered) = state.models.get(&model).await? {
        return Ok(VisibleModel::Registered(registered));
    }
    match state.store.owned_models().get(&model).await? {
        Some(owned) if owned.visible_to(account) => Ok(VisibleModel::Owned(Box::new(owned))),
        _ => Err(missing()),
    }
}

/// The page `paging` asks for of the models `account` may see: the registered models by
/// address, then the account's own and the public ones by address; and how many there are in
/// all (what the API's model list and the console's models page show).
pub async fn visible_models(
    state: &AppState,
    account: &AccountId,
    paging: crate::validate::paging::Paging,
) -> Result<(Vec<VisibleModel>, u64), ApiError> {
    let limit = i64::from(paging.limit);
    let (records, registered) = state.store.models().list(paging.offset, limit).await?;
    let mut models = Vec::with_capacity(records.len());
    for record in records {
        models.push(VisibleModel::Registered(crate::state::model_catalog::RegisteredModel::of(record)?));
    }
    let owned_offset = paging.offset.saturating_sub(registered);
    let room = limit - i64::try_from(models.len()).unwrap_or(limit);
    let (owned, owned_total) = state.store.owned_models().page_visible_to(account, owned_offset, room.max(1)).await?;
    let room = usize::try_from(room).unwrap_or(0);
    models.extend(owned.into_iter().take(room).map(|model| VisibleModel::Owned(Box::new(model))));
    Ok((models, registered + owned_total))
}
