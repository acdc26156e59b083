//! `bench baselines`: what the servers themselves sustain with the same clients the services
//! use, so every figure can be read as a ratio on a noisy machine: MongoDB `insert_one` and
//! `find_one` by `_id` per second, and JetStream publishes (stored and acknowledged) per
//! second, each one at a time and 16 in flight, for `--seconds` each.

use std::{sync::Arc, time::Duration};

use async_nats::jetstream::stream::Config as StreamConfig;
use bson::doc;
use futures::{StreamExt, stream};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::setup::Setup;

/// Options of `bench baselines`.
#[derive(clap::Args)]
pub struct Options {
    /// Seconds per measurement.
    #[arg(long, default_value_t = 3)]
    seconds: u64,
}

/// Operations per second of `op` run `in_flight` at a time for `seconds`.
async fn rate<F, Fut>(seconds: u64, in_flight: usize, op: F) -> anyhow::Result<f64>
where
    F: Fn(u64) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let mut done = 0u64;
    let mut ops = stream::iter(0..).map(&op).buffer_unordered(in_flight);
    while let Some(r) = ops.next().await {
        r?;
        done += 1;
        if Instant::now() >= deadline {
            break;
        }
    }
    Ok(done as f64 / started.elapsed().as_secs_f64())
}

/// The baselines (separate from [`run`] so a future `bench standard` can reuse them).
pub async fn measure(seconds: u64) -> anyhow::Result<Value> {
    let setup = Arc::new(Setup::new(&[]).await?);
    let coll = setup.store.database().collection::<bson::Document>("baseline");
    let insert = |n: u64| {
        let coll = coll.clone();
        async move {
            coll.insert_one(doc! { "_id": n as i64, "status": "starting", "input": { "prompt": "baseline" } }).await?;
            anyhow::Ok(())
        }
    };
    let insert_1 = rate(seconds, 1, insert).await?;
    let offset = 10_000_000u64;
    let insert_16 = rate(seconds, 16, |n| insert(n + offset)).await?;
    let find = |n: u64| {
        let coll = coll.clone();
        async move {
            coll.find_one(doc! { "_id": (n % 1000) as i64 }).await?;
            anyhow::Ok(())
        }
    };
    let find_1 = rate(seconds, 1, find).await?;
    let find_16 = rate(seconds, 16, find).await?;

    let prefix = setup.vars.get("NATS_PREFIX").cloned().unwrap_or_default();
    let subject = format!("{prefix}.baseline");
    let js = setup.bus.jetstream().clone();
    js.create_or_update_stream(StreamConfig {
        name: format!("{}_BASELINE", prefix.to_uppercase()),
        subjects: vec![subject.clone()],
        ..Default::default()
    })
    .await?;
    let publish = |_: u64| {
        let (js, subject) = (js.clone(), subject.clone());
        async move {
            js.publish(subject, r#"{"kind":"baseline"}"#.into()).await?.await?;
            anyhow::Ok(())
        }
    };
    let publish_1 = rate(seconds, 1, publish).await?;
    let publish_16 = rate(seconds, 16, publish).await?;
    println!(
        "baselines ({seconds} s each)\n| operation | 1 at a time /s | 16 in flight /s |\n|---|---|---|\n\
         | MongoDB insert_one | {insert_1:.0} | {insert_16:.0} |\n| MongoDB find_one by _id | {find_1:.0} | {find_16:.0} |\n\
         | JetStream publish (acked) | {publish_1:.0} | {publish_16:.0} |"
    );
    Ok(json!({"scenario": "baselines", "seconds": seconds,
              "mongodb_insert_per_second": {"1": insert_1, "16": insert_16},
              "mongodb_find_by_id_per_second": {"1": find_1, "16": find_16},
              "jetstream_publish_per_second": {"1": publish_1, "16": publish_16}}))
}

/// `bench baselines`
pub async fn run(options: Options) -> anyhow::Result<Value> {
    measure(options.seconds).await
}
