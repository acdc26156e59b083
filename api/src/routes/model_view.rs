//! A model as clients see it ([`ModelView`]), for a registered model ([`model_view`]) or an
//! account's own ([`owned_view`]): what the model routes, search and collections answer.

use common::{
    domain::{AccountId, ApiSurface, ModelRef},
    store::{ModelLinks, OwnedModel, Visibility},
};
use serde::Serialize;
use serde_json::Value;

use crate::{
    error::ApiError,
    http::page::{Listed, Page},
    ops::{self, owned::VisibleModel},
    routes::model_versions::{self, VersionView},
    state::{AppState, model_catalog::RegisteredModel},
};

/// A model.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ModelView {
    /// This model on the API.
    pub url: String,
    /// The owner.
    pub owner: String,
    /// The name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// `public` (every account may see it) or `private` (its account only).
    pub visibility: String,
    /// Its code, as its owner gave it (`null` for a registered model).
    pub github_url: Option<String>,
    /// Its paper, as its owner gave it.
    pub paper_url: Option<String>,
    /// Its license, as its owner gave it.
    pub license_url: Option<String>,
    /// An image that shows it, as its owner gave it.
    pub cover_image_url: Option<String>,
    /// Not recorded: `null`.
    #[schema(value_type = Option<Object>)]
    pub default_example: Option<Value>,
    /// How many predictions of it the caller's account has made.
    pub run_count: u64,
    /// The version that runs; `null` for an account's model that has none yet.
    pub latest_version: Option<VersionView>,
}

impl ModelView {
    /// `model` as `surface` shows it; what the registry does not record is `null`.
    pub(crate) fn new(
        state: &AppState,
        surface: ApiSurface,
        model: &ModelRef,
        description: String,
        visibility: Visibility,
        run_count: u64,
        latest_version: Option<VersionView>,
    ) -> Self {
        Self {
            url: format!("{}/models/{model}", state.links.api(surface)),
            owner: model.owner().to_owned(),
            name: model.name().to_owned(),
            description,
            visibility: visibility.as_str().to_owned(),
            github_url: None,
            paper_url: None,
            license_url: None,
            cover_image_url: None,
            default_example: None,
            run_count,
            latest_version,
        }
    }
}

impl ModelView {
    /// This view with the links its owner gave.
    pub(crate) fn with_links(self, links: ModelLinks) -> Self {
        let ModelLinks { github_url, paper_url, license_url, cover_image_url } = links;
        Self { github_url, paper_url, license_url, cover_image_url, ..self }
    }
}

/// A page of the list, as [`Page`] builds it.
pub type ModelPage = Page<ModelView>;

impl Listed for ModelView {
    const PAGE: &'static str = "ModelPage";
    const DESCRIPTION: &'static str = "A page of models, by address.";
    const RESULTS: &'static str = "The models.";
    const TOTAL_COUNT: Option<&'static str> = None;
}

pub(crate) async fn model_view(
    state: &AppState,
    surface: ApiSurface,
    account: &AccountId,
    model: &RegisteredModel,
) -> Result<ModelView, ApiError> {
    let record = &model.record;
    let run_count = ops::models::run_count(state, account, &record.model).await?;
    let latest = ops::models::current_version(state, model).await?;
    let description = registered_description(model);
    let latest = Some(model_versions::version_view(&latest)?);
    Ok(ModelView::new(state, surface, &record.model, description, Visibility::Public, run_count, latest))
}

/// What a registered model says of itself: its view's description, and what search matches.
pub(crate) fn registered_description(model: &RegisteredModel) -> String {
    format!("A {} model served by this deployment.", model.record.capability)
}

/// An account's own model as clients see it: its newest recorded version, if any.
pub(crate) async fn owned_view(
    state: &AppState,
    surface: ApiSurface,
    account: &AccountId,
    owned: &OwnedModel,
) -> Result<ModelView, ApiError> {
    let run_count = ops::models::run_count(state, account, &owned.model).await?;
    let latest = ops::lists::versions(state, &owned.model).await?.into_iter().next();
    let description = owned.description.clone().unwrap_or_default();
    let latest = latest.as_ref().map(model_versions::version_view).transpose()?;
    let view = ModelView::new(state, surface, &owned.model, description, owned.visibility, run_count, latest);
    Ok(view.with_links(owned.links.clone()))
}

/// A model's view, whichever kind it is.
pub(crate) async fn visible_view(
    state: &AppState,
    surface: ApiSurface,
    account: &AccountId,
    model: VisibleModel,
) -> Result<ModelView, ApiError> {
    match model {
        VisibleModel::Registered(model) => model_view(state, surface, account, &model).await,
        VisibleModel::Owned(model) => owned_view(state, surface, account, &model).await,
    }
}
