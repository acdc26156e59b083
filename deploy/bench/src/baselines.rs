//! `bench baselines`: what the servers themselves sustain with the same clients the services
//! use, so every figure can be read as a ratio on a noisy machine: MongoDB `insert_one` of a
//! small document and of a whole `starting` prediction into the `predictions` collection with
//! its indexes (the one write an api create must make), `find_one` by `_id` per second, and
//! JetStream publishes (stored and acknowledged) per second, each at 1, 8, 32 and 128 in
//! flight, for `--seconds` each.

use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicI64, AtomicU64, Ordering},
    },
    time::Duration,
};

use async_nats::jetstream::stream::Config as StreamConfig;
use bson::doc;
use futures::future::try_join_all;
use serde_json::{Value, json};
use tokio::time::Instant;

use common::{
    domain::{AccountId, ModelRef},
    samples::starting_prediction,
};

use crate::setup::Setup;

/// Options of `bench baselines`.
#[derive(clap::Args)]
pub struct Options {
    /// Seconds per measurement.
    #[arg(long, default_value_t = 3)]
    seconds: u64,
}

/// Operations per second of `op` run `in_flight` at a time for `seconds`. Operations in flight
/// at the end are finished, not dropped: a dropped MongoDB operation costs its connection.
async fn rate<F, Fut>(seconds: u64, in_flight: usize, op: F) -> anyhow::Result<f64>
where
    F: Fn(u64) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    let next = AtomicU64::new(0);
    let worker = || async {
        while Instant::now() < deadline {
            op(next.fetch_add(1, Ordering::Relaxed)).await?;
        }
        anyhow::Ok(())
    };
    try_join_all((0..in_flight).map(|_| worker())).await?;
    Ok(next.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64())
}

/// The in-flight levels measured, the same as the api's client levels.
pub const LEVELS: [usize; 4] = [1, 8, 32, 128];

/// Raw operations per second by in-flight level.
pub struct Baselines {
    seconds: u64,
    /// MongoDB `insert_one` of a small document into a collection without indexes.
    pub insert: BTreeMap<usize, f64>,
    /// MongoDB `insert_one` of a `starting` prediction through the store, into the
    /// `predictions` collection with its indexes: the api's create without the api.
    pub insert_prediction: BTreeMap<usize, f64>,
    /// MongoDB `find_one` by `_id`.
    pub find: BTreeMap<usize, f64>,
    /// JetStream publish, stored and acknowledged.
    pub publish: BTreeMap<usize, f64>,
}

impl Baselines {
    /// The figures as JSON.
    pub fn json(&self) -> Value {
        let by_level = |m: &BTreeMap<usize, f64>| {
            m.iter().map(|(k, v)| (k.to_string(), json!(v.round()))).collect::<serde_json::Map<_, _>>()
        };
        json!({"seconds_each": self.seconds, "in_flight_levels": LEVELS,
               "mongodb_insert_per_second": by_level(&self.insert),
               "mongodb_insert_prediction_per_second": by_level(&self.insert_prediction),
               "mongodb_find_by_id_per_second": by_level(&self.find),
               "jetstream_publish_per_second": by_level(&self.publish)})
    }

    /// The figures as a table.
    pub fn table(&self) -> String {
        let mut table =
            format!("baselines ({} s each)\n| operation | in flight | per second |\n|---|---|---|\n", self.seconds);
        for (name, rates) in [
            ("MongoDB insert_one", &self.insert),
            ("MongoDB insert_one of a prediction (indexed collection)", &self.insert_prediction),
            ("MongoDB find_one by _id", &self.find),
            ("JetStream publish (acked)", &self.publish),
        ] {
            for (level, rate) in rates {
                table.push_str(&format!("| {name} | {level} | {rate:.0} |\n"));
            }
        }
        table
    }
}

/// Measures the baselines at every level of [`LEVELS`].
pub async fn measure(seconds: u64) -> anyhow::Result<Baselines> {
    let setup = Arc::new(Setup::new(&[]).await?);
    let coll = setup.store.database().collection::<bson::Document>("baseline");
    let next_id = Arc::new(AtomicI64::new(0));
    let insert = |_: u64| {
        let (coll, id) = (coll.clone(), next_id.fetch_add(1, Ordering::Relaxed));
        async move {
            coll.insert_one(doc! { "_id": id, "status": "starting", "input": { "prompt": "baseline" } }).await?;
            anyhow::Ok(())
        }
    };
    setup.store.ensure_indexes().await?;
    let predictions = setup.store.predictions();
    let account = AccountId::generate();
    let model: ModelRef = "demo/echo".parse()?;
    let insert_prediction = |_: u64| {
        let predictions = predictions.clone();
        let prediction = starting_prediction(account.clone(), model.clone(), json!({"prompt": "baseline"}));
        async move {
            predictions.insert(&prediction).await?;
            anyhow::Ok(())
        }
    };
    let find = |n: u64| {
        let coll = coll.clone();
        async move {
            coll.find_one(doc! { "_id": (n % 1000) as i64 }).await?;
            anyhow::Ok(())
        }
    };
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
    let mut baselines = Baselines {
        seconds,
        insert: BTreeMap::new(),
        insert_prediction: BTreeMap::new(),
        find: BTreeMap::new(),
        publish: BTreeMap::new(),
    };
    for level in LEVELS {
        baselines.insert.insert(level, rate(seconds, level, insert).await?);
        baselines.insert_prediction.insert(level, rate(seconds, level, insert_prediction).await?);
    }
    for level in LEVELS {
        baselines.find.insert(level, rate(seconds, level, find).await?);
        baselines.publish.insert(level, rate(seconds, level, publish).await?);
    }
    Ok(baselines)
}

/// `bench baselines`
pub async fn run(options: Options) -> anyhow::Result<Value> {
    let baselines = measure(options.seconds).await?;
    println!("{}", baselines.table().trim_end());
    Ok(json!({"scenario": "baselines", "baselines": baselines.json()}))
}
