//! Operator commands: `api admin bootstrap --account NAME` creates the account (or reuses the
//! one with that name) and issues a new key with scopes `read`, `write` and `admin`.

use anyhow::{Context, bail};
use common::{
    domain::{ApiKeyValue, Scope, WebhookSecret},
    store::{Account, Store},
};

use crate::{accounts, config::ApiConfig};

/// What bootstrap did.
pub struct Bootstrapped {
    /// The account.
    pub account: Account,
    /// Whether it was created now.
    pub created: bool,
    /// The new admin key (shown once).
    pub key: ApiKeyValue,
    /// The account's current webhook signing secret.
    pub secret: WebhookSecret,
}

/// Creates or reuses the account `name` and issues an admin key.
pub async fn bootstrap(config: &ApiConfig, name: &str) -> anyhow::Result<Bootstrapped> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 100 {
        bail!("the account name must be 1 to 100 characters");
    }
    let common = &config.common;
    let store =
        Store::connect(&common.mongodb_uri, &common.mongodb_database, "api-admin", common.command_monitoring).await?;
    store.ensure_indexes().await.context("creating MongoDB indexes")?;
    let (account, created) = accounts::ensure_account(&store, &common.master_key, name).await?;
    let secret = account
        .signing_secrets(&common.master_key)
        .context("the account's signing secret does not open with this MASTER_KEY")?
        .current;
    let (_, key) = accounts::issue_key(
        &store,
        &common.master_key,
        account.id.clone(),
        "bootstrap admin key".into(),
        vec![Scope::Read, Scope::Write, Scope::Admin],
        config.default_rate_limit_rpm,
        None,
    )
    .await?;
    Ok(Bootstrapped { account, created, key, secret })
}
