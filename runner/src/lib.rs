//! The runner: takes jobs from JetStream, runs models, and records every change.
//!
//! - [`config`]: what to serve and how much at once.
//! - [`models`]: the [`models::Model`] trait and the built-in models.
//! - [`registry`]: registers the served models in MongoDB so the api accepts them;
//!   [`presence`]: this runner's pool and versions, live while it runs.
//! - [`consumer`]: takes the jobs of every served model; [`lanes`]: one durable consumer per
//!   model and account; [`doorbell`]: which lanes have work; [`scheduler`]: which job starts next (no idle slot while work waits,
//!   fair share between models and between the accounts of a model).
//! - [`execute`]: one job through the status machine: `starting → processing → terminal`;
//!   [`group_update`]: its changes, several per `update` command under load;
//!   [`lane_marks`]: how far each queue lane has moved, written a few times a second.
//! - [`progress`]: logs and output while a model runs, written at most every 500 ms, on the
//!   ticks of one [`flush_clock`].
//! - [`cancel`]: the cancel broadcast, which aborts a prediction running here;
//!   [`holder_answers`]: whether a prediction runs here, asked before another runner takes
//!   over a job delivered again.
//! - [`reconcile`]: repairs predictions whose job was lost or that passed their deadline.
//! - [`deployment_floors`]: the instances a deployment's `min_instances` keeps running of a
//!   Cog project this runner starts itself.
//! - [`retention`]: removes the data of predictions that ended long enough ago.
//! - [`metrics`]: what `/metrics` shows (jobs in flight and pending, run and write times).
//!
//! Also here:
//! - [`price_board`]: the price of this runner's hardware pool.
//! - [`run_figures`]: what this runner runs of each model now, and how long its last runs took.
#![forbid(unsafe_code)]

pub mod cancel;
pub mod config;
pub mod consumer;
pub mod deployment_floors;
pub mod doorbell;
pub mod execute;
pub mod flush_clock;
pub mod group_update;
pub mod holder_answers;
pub mod lane_marks;
pub mod lanes;
pub mod metrics;
pub mod models;
pub mod presence;
pub mod price_board;
pub mod progress;
pub mod reconcile;
pub mod registry;
pub mod retention;
pub mod run_figures;
pub mod scheduler;

use std::sync::Arc;

use anyhow::Context;
use common::links::Links;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::{
    config::RunnerConfig,
    execute::Executor,
    models::cog::{CogContext, CogModel, callbacks::Callbacks, uploads::Uploads},
};

/// How long the background tasks (reconciler, sweeps, floors) have to stop after the
/// consumer is done: they stop at the shutdown signal and need only finish a step.
const BACKGROUND_STOP: std::time::Duration = std::time::Duration::from_secs(5);

/// Runs until `shutdown` fires: registers the models, then consumes their jobs.
pub async fn run(config: RunnerConfig, shutdown: CancellationToken) -> anyhow::Result<()> {
    let common = &config.common;
    let (store, bus) = common::connect::connect(common, "runner").await?;
    // Jobs' start and end times are stamped by the database's clock (common::store::clock).
    store.keep_clock(shutdown.clone());

    let mut available = models::builtin::all_with_versions(&config.versions);
    let mut trainers: Vec<Arc<dyn models::Model>> = Vec::new();
    // The model servers this runner starts itself, reported with its presence.
    let mut instances = Vec::new();
    // The projects it starts itself, whose kept instances follow the deployments.
    let mut projects = Vec::new();
    let files = common::files::Files::open(&store, &common.files).await.context("opening the file store")?;
    let links = Links::new(common.public_base_url.clone(), common.master_key.clone());
    let metrics = metrics::RunnerMetrics::new();
    if !config.cog.is_empty() || !config.cog_train.is_empty() {
        let uploads = Uploads::new(files.clone(), links.clone(), config.max_output_file_bytes, metrics.clone());
        let callbacks =
            Callbacks::serve(config.cog_callback_bind, config.cog_callback_url.clone(), uploads, shutdown.clone())
                .await?;
        let http = reqwest::Client::builder().timeout(std::time::Duration::from_secs(30)).build()?;
        let context = CogContext {
            http,
            callbacks,
            sync_allowed: config.cog_sync,
            python: config.cog_python.clone(),
            metrics: metrics.clone(),
            shutdown: shutdown.clone(),
        };
        for target in &config.cog {
            let model = CogModel::connect(target, &context)
                .await
                .with_context(|| format!("connecting to the Cog server of {}", target.model))?;
            instances.extend(model.instances().iter().flat_map(|i| i.members().to_vec()));
            if let Some(supervised) = model.instances() {
                projects.push((target.model.clone(), supervised));
            }
            available.push(Arc::new(model));
        }
        for target in &config.cog_train {
            let trainer = CogModel::connect_trainer(target, &context)
                .await
                .with_context(|| format!("connecting to the Cog trainer of {}", target.model))?;
            instances.extend(trainer.instances().iter().flat_map(|i| i.members().to_vec()));
            trainers.push(Arc::new(trainer));
        }
    }
    let served = registry::select(&config.models, available);
    // A runner of trainings only (a Kubernetes trainer pod) serves no predictor.
    anyhow::ensure!(!served.is_empty() || !trainers.is_empty(), "no model matches the selection {:?}", config.models);
    let mut versions = registry::register_as(&store, &served, &config.versions, config.versions_are_latest).await?;
    let trained_alone = registry::register_trainers(&store, &trainers, &versions, &config.versions).await?;
    versions.extend(trained_alone);
    let supervised: Vec<deployment_floors::Supervised> = projects
        .into_iter()
        .filter_map(|(model, instances)| {
            let version = versions.iter().find(|s| s.model == model)?.version.clone();
            Some(deployment_floors::Supervised { model, version, instances })
        })
        .collect();
    let store_for_sweeper = store.clone();
    let store_for_consumer = store.clone();
    // The loops beside the consumer, waited for on shutdown like the jobs.
    let background = TaskTracker::new();
    let prices =
        price_board::PriceBoard::start(&store, &bus, config.hardware.clone(), &background, shutdown.clone()).await?;
    let runner_id = presence::runner_id();
    let executor = Arc::new(
        Executor::new(store.clone(), bus.clone(), files.clone(), links, common.deadlines)
            .with_runner_id(runner_id.clone())
            .with_limits(config.limits)
            .with_prices(prices)
            .with_metrics(metrics),
    );
    // Answering for the predictions it holds from before the first job is taken until the
    // last has ended.
    let answering = holder_answers::serve(&bus, &runner_id, executor.clone()).await?;
    let record = presence::record(runner_id, config.hardware.clone(), versions.clone());
    presence::announce(store.runners(), record, executor.run_figures(), instances, shutdown.clone()).await?;
    if let Some(bind) = config.metrics_bind {
        let (counts, metrics) = (store.command_counts().clone(), executor.metrics().clone());
        let render = move || format!("{}{}", metrics.render(), counts.openmetrics());
        let readiness = common::connect::readiness(common, "runner", &bus).await?;
        common::telemetry::serve_operations(bind, render, readiness, shutdown.clone()).await?;
    }
    cancel::listen(&bus, executor.clone(), &background, shutdown.clone()).await?;
    background.spawn(deployment_floors::keep(store.clone(), supervised, config.hardware.clone(), shutdown.clone()));
    let reconciler = reconcile::Reconciler::new(store, bus.clone(), executor.clone(), config.reconcile_interval);
    background.spawn(reconciler.run(shutdown.clone()));
    let sweeper = retention::Sweeper::new(store_for_sweeper, files, config.retention, config.retention_sweep_interval)
        .with_usage(executor.usage().clone());
    background.spawn(sweeper.run(shutdown.clone()));

    let consumed = consumer::consume(
        &config,
        &bus,
        consumer::Runs { models: served, trainers },
        &versions,
        executor,
        &store_for_consumer,
        shutdown,
    )
    .await;
    drop(answering);
    background.close();
    // They stop at `shutdown`; the grace was the running predictions', not theirs again, so a
    // pod's stop stays within its grace plus a fixed overhead (docs/kubernetes.md).
    if tokio::time::timeout(BACKGROUND_STOP, background.wait()).await.is_err() {
        tracing::warn!(?BACKGROUND_STOP, "the reconciler or the retention sweep did not stop in time");
    }
    consumed
}
