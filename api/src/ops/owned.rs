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

/// Prediction `id` of any account, whole: for a caller whose right to it was proved
/// otherwise (its creator, a stream token).
pub async fn by_id(state: &AppState, id: &PredictionId) -> Result<Option<Prediction>, ApiError> {
    match state.store.predictions().get(id).await? {
        Some(stored) => Ok(Some(whole(state, stored).await?)),
        None => Ok(None),
    }
}

/// Prediction `id` of any account with its output read back from the file store where it is
/// kept there, its input not: what a stream shows (a model's every token of a large prompt
/// would otherwise read the prompt again).
pub async fn with_output(state: &AppState, id: &PredictionId) -> anyhow::Result<Option<Prediction>> {
    let Some(mut p) = state.store.predictions().get(id).await? else { return Ok(None) };
    state.payloads.fill_output(&mut p).await?;
    Ok(Some(p))
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

/// The page `paging` asks for of the models `account` may see, in `order`; and how many there
/// are in all. It orders the keys of every visible model (its address and times, read
/// without the rest) and then reads the page's models whole; ties go by address, and models
/// without a version come last by their latest version's time, whichever the direction.
pub async fn sorted_visible_models(
    state: &AppState,
    account: &AccountId,
    paging: crate::validate::paging::Paging,
    order: crate::validate::search_query::ModelOrder,
) -> Result<(Vec<VisibleModel>, u64), ApiError> {
    use crate::validate::search_query::{ModelSort, SortDirection};
    let registered = state.store.models().addresses().await?;
    let owned = state.store.owned_models().created_visible_to(account).await?;
    let every: Vec<common::domain::ModelRef> =
        registered.iter().map(|(m, _)| m.clone()).chain(owned.iter().map(|(m, _)| m.clone())).collect();
    let versions = state.store.model_versions().created_of(&every).await?;
    fn times_of<'a>(
        versions: &'a [(String, common::domain::ModelRef, DateTime)],
        model: &'a common::domain::ModelRef,
    ) -> impl Iterator<Item = &'a (String, common::domain::ModelRef, DateTime)> {
        versions.iter().filter(move |(_, m, _)| m == model)
    }
    // (sort key, address, registered?) of every visible model.
    let mut keys: Vec<(Option<DateTime>, common::domain::ModelRef, bool)> = Vec::with_capacity(every.len());
    for (model, current) in &registered {
        let key = match order.by {
            // A registered model was created when its first version was seen.
            ModelSort::ModelCreatedAt => times_of(&versions, model).map(|(_, _, t)| *t).min(),
            ModelSort::LatestVersionCreatedAt => {
                times_of(&versions, model).find(|(id, _, _)| id == current).map(|(_, _, t)| *t)
            }
        };
        keys.push((key, model.clone(), true));
    }
    for (model, created) in &owned {
        let key = match order.by {
            ModelSort::ModelCreatedAt => Some(*created),
            ModelSort::LatestVersionCreatedAt => times_of(&versions, model).map(|(_, _, t)| *t).max(),
        };
        keys.push((key, model.clone(), false));
    }
    keys.sort_by(|a, b| {
        let by_time = match (a.0, b.0, order.direction) {
            (Some(x), Some(y), SortDirection::Asc) => x.cmp(&y),
            (Some(x), Some(y), SortDirection::Desc) => y.cmp(&x),
            (x, y, _) => y.is_some().cmp(&x.is_some()),
        };
        by_time.then_with(|| a.1.to_string().cmp(&b.1.to_string()))
    });
    let total = keys.len() as u64;
    let start = usize::try_from(paging.offset).unwrap_or(usize::MAX);
    let mut models = Vec::new();
    for (_, model, is_registered) in keys.into_iter().skip(start).take(paging.limit as usize) {
        if is_registered {
            if let Some(registered) = state.models.get(&model).await? {
                models.push(VisibleModel::Registered(registered));
            }
        } else if let Some(found) = state.store.owned_models().get(&model).await? {
            models.push(VisibleModel::Owned(Box::new(found)));
        }
    }
    Ok((models, total))
}
