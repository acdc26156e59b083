//! Operator commands: `api admin bootstrap --account NAME` creates the account (or reuses the
//! one with that name) and issues a new key with scopes `read`, `write` and `admin`;
//! `api admin set-concurrency --account NAME --max-concurrency N` (or `--unlimited`) caps how many
//! of the account's predictions run at once; `api admin set-priority --account NAME
//! --max-priority high|normal|low` sets the highest priority its predictions may ask for;
//! `api admin usage [--account NAME] [--since TIME]
//! [--csv]` prints every account's usage (or one's) by day and model;
//! `api admin set-price --hardware POOL --per-second DOLLARS` sets a hardware pool's price
//! (jobs that start after it pay it); `api admin set-budget --account NAME --monthly DOLLARS`
//! (or `none`) sets an account's monthly budget; `api admin rotate-master-key` seals every
//! stored secret again under `MASTER_KEY`, taking what `MASTER_KEY_PREVIOUS` sealed
//! ([`rotate_master_key`]).

use anyhow::{Context, bail};
use common::{
    domain::{ApiKeyValue, Micros, Scope, WebhookSecret},
    store::{Account, Store},
};

use crate::store::ApiCollections;
use crate::{config::ApiConfig, ops::accounts};

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
    let store = connect(config).await?;
    store.indexes_at_start().await.context("checking MongoDB's indexes")?;
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

/// `api admin migrate`: builds this release's indexes, drops the ones it retires, and records
/// its index set (run once per release, before its services: docs/operations.md).
pub async fn migrate(config: &ApiConfig) -> anyhow::Result<()> {
    let store = connect(config).await?;
    store.migrate().await.context("migrating MongoDB's indexes")?;
    Ok(())
}

/// What a master-key rotation sealed again, and what neither key opens.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Rotation {
    /// Accounts whose webhook signing secrets (current, previous) moved to the new key.
    pub signing_secrets: u64,
    /// API keys whose value moved to the new key.
    pub api_keys: u64,
    /// Predictions whose secret inputs moved to the new key.
    pub secret_inputs: u64,
    /// The records whose sealed values neither key opens (`accounts/…`, `api_keys/…`,
    /// `predictions/…`): lost already, and named so that nobody drops a key believing otherwise.
    pub unreadable: Vec<String>,
}

/// How often an account's secrets are read again when a signing-secret rotation changed them
/// between the read and the write.
const RESEAL_ATTEMPTS: usize = 3;

/// `api admin rotate-master-key`: with `MASTER_KEY` the new key and `MASTER_KEY_PREVIOUS` the
/// old one (every service already running with both: docs/operations.md), seals every stored
/// secret that the old key sealed again under the new one: the accounts' signing secrets, the
/// API keys' values and the predictions' secret inputs. Each write is conditional on the value
/// it read, so a concurrent signing-secret rotation is read again, not overwritten. Running
/// it twice changes nothing the second time; once it reports nothing unreadable, the old key
/// can be dropped.
pub async fn rotate_master_key(config: &ApiConfig) -> anyhow::Result<Rotation> {
    use futures::TryStreamExt;
    let master = &config.common.master_key;
    if !master.has_previous() {
        bail!("set MASTER_KEY to the new key and MASTER_KEY_PREVIOUS to the key being rotated out");
    }
    let store = connect(config).await?;
    let mut done = Rotation::default();

    let accounts = store.accounts();
    let mut every = accounts.every().await?;
    while let Some(mut account) = every.try_next().await? {
        for attempt in 1..=RESEAL_ATTEMPTS {
            let Ok(resealed) = account.resealed_secrets(master) else {
                done.unreadable.push(format!("accounts/{}", account.id));
                break;
            };
            let Some(resealed) = resealed else { break };
            if accounts.replace_secrets(&account.id, &account.webhook_secret.current, &resealed).await? {
                done.signing_secrets += 1;
                break;
            }
            account = match accounts.get(&account.id).await? {
                Some(now) if attempt < RESEAL_ATTEMPTS => now,
                _ => bail!("account {}'s signing secrets kept changing during the rotation: run it again", account.id),
            };
        }
    }

    let keys = store.api_keys();
    let mut every = keys.every().await?;
    while let Some(key) = every.try_next().await? {
        match key.resealed(master) {
            Err(_) => done.unreadable.push(format!("api_keys/{}", key.id)),
            Ok(None) => {}
            Ok(Some(sealed)) => {
                // Only a rotation rewrites a key's sealed value: a miss is another rotation's.
                if keys.replace_sealed(&key.id, &key.key_sealed, &sealed).await? {
                    done.api_keys += 1;
                }
            }
        }
    }

    let predictions = store.predictions();
    let mut every = predictions.with_sealed_inputs().await?;
    while let Some(prediction) = every.try_next().await? {
        match prediction.resealed_inputs(master) {
            Err(_) => done.unreadable.push(format!("predictions/{}", prediction.id)),
            Ok(None) => {}
            Ok(Some(sealed)) => {
                if predictions.replace_sealed_inputs(&prediction.id, &sealed).await? {
                    done.secret_inputs += 1;
                }
            }
        }
    }
    Ok(done)
}

/// The database, as the admin commands reach it.
async fn connect(config: &ApiConfig) -> anyhow::Result<Store> {
    let common = &config.common;
    Ok(Store::connect(&common.mongodb_uri, &common.mongodb_database, "api-admin", common.command_monitoring).await?)
}

/// The database and the account `name` (an error when there is none).
async fn account_named(config: &ApiConfig, name: &str) -> anyhow::Result<(Store, Account)> {
    let store = connect(config).await?;
    let Some(account) = store.accounts().find_by_name(name.trim()).await? else {
        bail!("no account is named {:?}", name.trim());
    };
    Ok((store, account))
}

/// Sets (`Some`) or lifts (`None`) the concurrency cap of the account `name`: how many of its
/// predictions may run at once over every runner. Runners apply it within a few seconds.
pub async fn set_max_concurrency(config: &ApiConfig, name: &str, max: Option<u32>) -> anyhow::Result<Account> {
    if max == Some(0) {
        bail!("--max-concurrency must be at least 1 (lift the cap with --unlimited)");
    }
    let (store, account) = account_named(config, name).await?;
    store.accounts().set_max_concurrency(&account.id, max).await?;
    Ok(Account { max_concurrency: max, ..account })
}

/// Sets the highest priority the account `name`'s predictions may ask for; api replicas apply
/// it within a few seconds.
pub async fn set_max_priority(
    config: &ApiConfig,
    name: &str,
    max: common::domain::Priority,
) -> anyhow::Result<Account> {
    let (store, account) = account_named(config, name).await?;
    store.accounts().set_max_priority(&account.id, max).await?;
    Ok(Account { max_priority: Some(max), ..account })
}

/// Sets the price per second of the hardware pool `hardware` to `per_second` (US dollars, a
/// decimal string) and tells the runners; the pool must be one a live runner declares, or one
/// priced before. Returns the price set.
pub async fn set_price(config: &ApiConfig, hardware: &str, per_second: &str) -> anyhow::Result<common::domain::Price> {
    let pool =
        common::domain::Pool::parse(hardware.trim()).map_err(|e| anyhow::anyhow!("--hardware {hardware:?}: {e}"))?;
    let price = common::domain::Price::parse_dollars(per_second).map_err(|e| anyhow::anyhow!("--per-second: {e}"))?;
    let store = connect(config).await?;
    let prices = store.prices();
    let priced = prices.all().await?;
    let live = store.runners().live(bson::DateTime::now()).await?;
    let mut known: Vec<String> =
        live.iter().map(|r| r.pool.to_string()).chain(priced.keys().map(ToString::to_string)).collect();
    known.sort();
    known.dedup();
    if !known.contains(&pool.to_string()) {
        bail!(
            "unknown hardware pool {:?}: no live runner declares it (known pools: {})",
            pool.as_str(),
            if known.is_empty() { "none".to_owned() } else { known.join(", ") }
        );
    }
    prices.set(&pool, price).await?;
    let common = &config.common;
    let told = async {
        let bus = common::bus::Bus::connect(&common.nats_url, common.subjects.clone(), "api-admin").await?;
        bus.publish_price_set(&pool, price).await
    };
    if let Err(e) = told.await {
        eprintln!(
            "warning: the runners were not told ({e}); they read the price again within {} s",
            common::store::prices::REREAD.as_secs()
        );
    }
    Ok(price)
}

/// Sets (`Some`) or removes (`None`) the operator's monthly budget of the account `name`;
/// api replicas apply it within a few seconds.
pub async fn set_budget(config: &ApiConfig, name: &str, monthly: &str) -> anyhow::Result<(Account, Option<Micros>)> {
    let budget = match monthly.trim() {
        "none" => None,
        text => Some(Micros::parse_dollars(text).map_err(|e| anyhow::anyhow!("--monthly (or none): {e}"))?),
    };
    let (store, account) = account_named(config, name).await?;
    store.accounts().set_operator_budget(&account.id, budget).await?;
    Ok((account, budget))
}

/// Writes the collection `slug` (made, or replaced whole): `name`, `description`, and `models`
/// (`owner/name` each, in order; a model that does not exist yet is kept, and shown once it
/// does).
pub async fn put_collection(
    config: &ApiConfig,
    slug: &str,
    name: &str,
    description: &str,
    models: &[String],
) -> anyhow::Result<crate::store::collections::ModelCollection> {
    if !crate::store::collections::is_valid_slug(slug) {
        bail!("--slug must be 1 to 64 of a-z, 0-9 and '-', starting with a letter or digit, not {slug:?}");
    }
    if name.trim().is_empty() {
        bail!("--name must not be empty");
    }
    let models = models
        .iter()
        .map(|m| m.trim().parse::<common::domain::ModelRef>().map_err(|e| anyhow::anyhow!("--models: {m:?}: {e}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let collection = crate::store::collections::ModelCollection {
        slug: slug.to_owned(),
        name: name.trim().to_owned(),
        description: description.trim().to_owned(),
        models,
        updated_at: bson::DateTime::now(),
    };
    connect(config).await?.collections().put(&collection).await?;
    Ok(collection)
}

/// Deletes the collection `slug`; an error when there is none.
pub async fn delete_collection(config: &ApiConfig, slug: &str) -> anyhow::Result<()> {
    if !connect(config).await?.collections().delete(slug).await? {
        bail!("no collection has the slug {slug:?}");
    }
    Ok(())
}

/// Every account's usage (or that of the account `name`) since `since` (RFC 3339; 30 days ago
/// by default), by day and model: a table for people, or CSV with an `account` column first.
pub async fn usage(config: &ApiConfig, name: Option<&str>, since: Option<&str>, csv: bool) -> anyhow::Result<String> {
    let store = connect(config).await?;
    let account = match name.map(str::trim) {
        None => None,
        Some(name) => match store.accounts().find_by_name(name).await? {
            Some(account) => Some(account),
            None => bail!("no account is named {name:?}"),
        },
    };
    let query =
        since.map(|s| format!("start={}", url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>()));
    let query = crate::validate::usage_query::parse(query.as_deref(), chrono::Utc::now()).map_err(|errors| {
        let fields: Vec<String> = errors.into_iter().map(|e| format!("{}: {}", e.field, e.message)).collect();
        anyhow::anyhow!("--since: {}", fields.join("; "))
    })?;
    let from = bson::DateTime::from_millis(query.start.timestamp_millis());
    let until = bson::DateTime::from_millis(query.end.timestamp_millis());
    let totals = store.usage_totals().between(account.as_ref().map(|a| &a.id), from, until).await?;
    let mut by_account: std::collections::BTreeMap<String, Vec<common::store::usage::UsageTotal>> = Default::default();
    for total in totals {
        by_account.entry(total.account_id.to_string()).or_default().push(total);
    }
    let mut out = String::new();
    if csv {
        out.push_str("account,bucket_start,bucket_end,model,succeeded,failed,canceled,predict_time,total_time,cost\n");
    }
    for (id, totals) in by_account {
        let parsed = common::domain::AccountId::parse(&id).ok();
        let name = match parsed {
            Some(id) => store.accounts().get(&id).await?.map_or(id.to_string(), |a| a.name),
            None => id,
        };
        let report = crate::ops::usage::UsageReport::of(query.clone(), &totals);
        for line in report.csv().lines().skip(1) {
            if csv {
                out.push_str(&format!("{name},{line}\n"));
            } else {
                let cells: Vec<&str> = line.split(',').collect();
                out.push_str(&format!("{name:<20} {}\n", cells.join("  ")));
            }
        }
    }
    if !csv && out.is_empty() {
        out.push_str("no usage in the range\n");
    } else if !csv {
        out.insert_str(
            0,
            &format!(
                "{:<20} {}\n",
                "account", "day start  day end  model  succeeded  failed  canceled  predict_time  total_time"
            ),
        );
    }
    Ok(out)
}

/// The Kubernetes kit of the models declared in the kit file at `kit`, for the records in the
/// JSON file `records` (offline), or else for what the store holds now.
pub async fn render_kubernetes(
    config: Option<&ApiConfig>,
    kit: &std::path::Path,
    records: Option<&std::path::Path>,
) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(kit).with_context(|| format!("reading {}", kit.display()))?;
    let kit = crate::kubernetes::Kit::parse(&text).with_context(|| format!("in {}", kit.display()))?;
    let records = match (records, config) {
        (Some(path), _) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            serde_json::from_str(&text).with_context(|| format!("{} is not a records file", path.display()))?
        }
        (None, Some(config)) => crate::kubernetes::Records::read(&connect(config).await?, &kit).await?,
        (None, None) => bail!("without --records the store is read: its settings are needed"),
    };
    Ok(crate::kubernetes::render(&kit, &records)?)
}
