//! Operator commands: `api admin bootstrap --account NAME` creates the account (or reuses the
//! one with that name) and issues a new key with scopes `read`, `write` and `admin`;
//! `api admin set-concurrency --account NAME --max-concurrency N` (or `--unlimited`) caps how many
//! of the account's predictions run at once.

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

/// Sets (`Some`) or lifts (`None`) the concurrency cap of the account `name`: how many of its
/// predictions may run at once over every runner. Runners apply it within a few seconds.
pub async fn set_max_concurrency(config: &ApiConfig, name: &str, max: Option<u32>) -> anyhow::Result<Account> {
    if max == Some(0) {
        bail!("--max-concurrency must be at least 1 (lift the cap with --unlimited)");
    }
    let common = &config.common;
    let store =
        Store::connect(&common.mongodb_uri, &common.mongodb_database, "api-admin", common.command_monitoring).await?;
    let Some(account) = store.accounts().find_by_name(name.trim()).await? else {
        bail!("no account is named {:?}", name.trim());
    };
    store.accounts().set_max_concurrency(&account.id, max).await?;
    Ok(Account { max_concurrency: max, ..account })
}
