//! `bench baselines`: what the servers themselves sustain with the same clients the services
//! use, so every figure can be read as a ratio on a noisy machine: MongoDB `insert_one` of a
//! small document and of a whole `starting` prediction into the `predictions` collection with
//! its indexes (the one write an api create must make), `find_one` by `_id`, `findAndModify`
//! returning a whole prediction (what each of the runner's state changes costs), and JetStream
//! publishes (stored and acknowledged), each per second at 1, 8, 32 and 128 in flight, for
//! `--seconds` each.
//!
//! Each figure comes with the CPU the load tool's own client spent per operation (user and
//! kernel, from `/proc/self/stat`): the least a service pays for the same call, so a service's
//! CPU per prediction can be set against the calls it must make. The calls a prediction
//! requires are also priced made alone, [`PACED_RATE`] a second ([`crate::measure::paced`]), the way
//! the end-to-end phase at that rate makes them.

use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicI64, Ordering},
    },
};

use anyhow::Context;
use async_nats::jetstream::stream::Config as StreamConfig;
use bson::doc;
use mongodb::options::ReturnDocument;
use serde_json::{Value, json};

use common::{
    domain::{AccountId, ModelRef, Prediction},
    samples::starting_prediction,
    store::Predictions,
};

use harness::{setup::Setup, stats};

use crate::measure::{
    paced::{PACED_RATE, paced},
    rate::{Measured, rate},
};

/// Options of `bench baselines`.
#[derive(clap::Args)]
pub struct Options {
    /// Seconds per measurement.
    #[arg(long, default_value_t = 3)]
    seconds: u64,
}

/// The in-flight level the CPU floor is priced at (the cost batches run 8 at a time).
pub const FLOOR_LEVEL: usize = 8;
/// How many times each figure at [`FLOOR_LEVEL`] is measured; the median is kept. One 2 s
/// sample of each moved the floor between 247 and 325 µs over four standard runs.
const FLOOR_SAMPLES: usize = 3;

/// As [`rate`], measured [`FLOOR_SAMPLES`] times at [`FLOOR_LEVEL`] (the median of each
/// figure kept), once at the other levels.
async fn rate_steadied<F, Fut>(seconds: u64, in_flight: usize, op: F) -> anyhow::Result<Measured>
where
    F: Fn(u64) -> Fut + Copy,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    if in_flight != FLOOR_LEVEL {
        return rate(seconds, in_flight, op).await;
    }
    let mut samples = Vec::with_capacity(FLOOR_SAMPLES);
    for _ in 0..FLOOR_SAMPLES {
        samples.push(rate(seconds, in_flight, op).await?);
    }
    Ok(median(&samples))
}

/// The median of each figure of `samples` (not empty).
fn median(samples: &[Measured]) -> Measured {
    let middle =
        |figure: fn(&Measured) -> f64| stats::median(samples.iter().map(figure)).expect("samples are not empty");
    Measured { per_second: middle(|m| m.per_second), client_cpu_us: middle(|m| m.client_cpu_us) }
}

/// Raw inserts of new `starting` demo/echo predictions through the store, as the api's create
/// writes them (one account for all).
pub struct PredictionInserts {
    predictions: Predictions,
    account: AccountId,
    model: ModelRef,
}

impl PredictionInserts {
    /// Inserts into `predictions`.
    pub fn new(predictions: Predictions) -> anyhow::Result<Self> {
        Ok(Self { predictions, account: AccountId::generate(), model: "demo/echo".parse()? })
    }

    /// A new `starting` prediction, not stored.
    pub fn sample(&self) -> Prediction {
        starting_prediction(self.account.clone(), self.model.clone(), json!({"prompt": "baseline"}))
    }

    /// Inserts one new prediction.
    pub fn one(&self) -> impl Future<Output = anyhow::Result<()>> + 'static {
        let (predictions, prediction) = (self.predictions.clone(), self.sample());
        async move {
            predictions.insert(&prediction).await?;
            anyhow::Ok(())
        }
    }
}

/// Predictions the `findAndModify` baseline cycles through.
const FIND_AND_MODIFY_DOCUMENTS: usize = 1000;

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
    /// MongoDB `findAndModify` by `_id` returning the whole prediction after the change.
    pub find_and_modify: BTreeMap<usize, f64>,
    /// MongoDB conditional `update_one` of a prediction (`_id` and `seq`), nothing returned.
    pub update: BTreeMap<usize, f64>,
    /// JetStream publish, stored and acknowledged.
    pub publish: BTreeMap<usize, f64>,
    /// The load tool's CPU microseconds per operation, by operation (the JSON names) and level.
    pub client_cpu_us: BTreeMap<&'static str, BTreeMap<usize, f64>>,
    /// The same for the operations a prediction requires, each made alone, [`PACED_RATE`]
    /// a second.
    pub paced_client_cpu_us: BTreeMap<&'static str, f64>,
}

/// Seconds each operation is paced for: 600 calls at 200/s.
const PACED_SECONDS: u64 = 3;

/// The operations, as (JSON name, table name).
const OPERATIONS: [(&str, &str); 6] = [
    ("mongodb_insert", "MongoDB insert_one"),
    ("mongodb_insert_prediction", "MongoDB insert_one of a prediction (indexed collection)"),
    ("mongodb_find_by_id", "MongoDB find_one by _id"),
    ("mongodb_find_and_modify_prediction", "MongoDB findAndModify of a prediction, returning it"),
    ("mongodb_update_prediction", "MongoDB conditional update_one of a prediction, nothing returned"),
    ("jetstream_publish", "JetStream publish (acked)"),
];

impl Baselines {
    /// No figures yet, each to be measured for `seconds`.
    pub fn empty(seconds: u64) -> Self {
        Self {
            seconds,
            insert: BTreeMap::new(),
            insert_prediction: BTreeMap::new(),
            find: BTreeMap::new(),
            find_and_modify: BTreeMap::new(),
            update: BTreeMap::new(),
            publish: BTreeMap::new(),
            client_cpu_us: BTreeMap::new(),
            paced_client_cpu_us: BTreeMap::new(),
        }
    }

    /// The figures as JSON.
    pub fn json(&self) -> Value {
        let by_level = |m: &BTreeMap<usize, f64>| {
            m.iter().map(|(k, v)| (k.to_string(), json!(v.round()))).collect::<serde_json::Map<_, _>>()
        };
        let mut figures = json!({"seconds_each": self.seconds, "in_flight_levels": LEVELS});
        for ((key, _), rates) in OPERATIONS.iter().zip(self.rates()) {
            figures[format!("{key}_per_second")] = Value::Object(by_level(rates));
            if let Some(cpu) = self.client_cpu_us.get(key) {
                figures[format!("{key}_client_cpu_us")] = Value::Object(by_level(cpu));
            }
        }
        if !self.paced_client_cpu_us.is_empty() {
            let cpu: serde_json::Map<_, _> =
                self.paced_client_cpu_us.iter().map(|(k, v)| (k.to_string(), json!(v.round()))).collect();
            figures["paced"] = json!({"per_second": PACED_RATE, "alone": true, "client_cpu_us": cpu});
        }
        figures
    }

    /// The rates in the order of [`OPERATIONS`].
    fn rates(&self) -> [&BTreeMap<usize, f64>; 6] {
        [&self.insert, &self.insert_prediction, &self.find, &self.find_and_modify, &self.update, &self.publish]
    }

    /// The load tool's CPU per `operation` (a JSON name) at `level` in flight.
    pub fn client_cpu_us(&self, operation: &str, level: usize) -> Option<f64> {
        self.client_cpu_us.get(operation)?.get(&level).copied()
    }

    /// The load tool's CPU per `operation` made alone, [`PACED_RATE`] a second.
    pub fn paced_client_cpu_us(&self, operation: &str) -> Option<f64> {
        self.paced_client_cpu_us.get(operation).copied()
    }

    /// The figures as a table.
    pub fn table(&self) -> String {
        let mut table = format!(
            "baselines ({} s each)\n| operation | in flight | per second | load tool CPU per operation |\n|---|---|---|---|\n",
            self.seconds
        );
        for ((key, name), rates) in OPERATIONS.iter().zip(self.rates()) {
            for (level, rate) in rates {
                let cpu = self.client_cpu_us(key, *level).map_or("-".into(), |us| format!("{us:.0} µs"));
                table.push_str(&format!("| {name} | {level} | {rate:.0} | {cpu} |\n"));
            }
            if let Some(us) = self.paced_client_cpu_us(key) {
                table.push_str(&format!("| {name} | alone, {PACED_RATE}/s | {PACED_RATE} | {us:.0} µs |\n"));
            }
        }
        table
    }

    /// Records `measured` for `operation` (a JSON name) at `level`.
    pub fn record(&mut self, operation: &'static str, level: usize, measured: Measured) {
        let rates = match operation {
            "mongodb_insert" => &mut self.insert,
            "mongodb_insert_prediction" => &mut self.insert_prediction,
            "mongodb_find_by_id" => &mut self.find,
            "mongodb_find_and_modify_prediction" => &mut self.find_and_modify,
            "mongodb_update_prediction" => &mut self.update,
            _ => &mut self.publish,
        };
        rates.insert(level, measured.per_second);
        self.client_cpu_us.entry(operation).or_default().insert(level, measured.client_cpu_us);
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
    let prediction_inserts = PredictionInserts::new(setup.store.predictions())?;
    let insert_prediction = |_: u64| prediction_inserts.one();
    // The runner's state change: a findAndModify by `_id` that returns the whole prediction.
    // A collection of its own, so the stand-in's scans do not depend on the other baselines.
    let changed = setup.store.database().collection::<Prediction>("baseline_predictions");
    let fixtures: Vec<Prediction> = (0..FIND_AND_MODIFY_DOCUMENTS).map(|_| prediction_inserts.sample()).collect();
    changed.insert_many(&fixtures).await?;
    let ids: Arc<Vec<String>> = Arc::new(fixtures.iter().map(|p| p.id.as_str().to_owned()).collect());
    let find_and_modify = |n: u64| {
        let (changed, ids) = (changed.clone(), ids.clone());
        async move {
            let id = &ids[n as usize % ids.len()];
            changed
                .find_one_and_update(doc! { "_id": id }, doc! { "$inc": { "seq": 1 } })
                .return_document(ReturnDocument::After)
                .await?
                .context("a baseline prediction is missing")?;
            anyhow::Ok(())
        }
    };
    // The same change as a conditional update that returns nothing (a runner's state change
    // when it holds the prediction already): `_id` and the status it must be in.
    let update = |n: u64| {
        let (changed, ids) = (changed.clone(), ids.clone());
        async move {
            let id = &ids[n as usize % ids.len()];
            let updated =
                changed.update_one(doc! { "_id": id, "status": "starting" }, doc! { "$inc": { "seq": 1 } }).await?;
            anyhow::ensure!(updated.matched_count == 1, "a baseline prediction is missing");
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
    let mut baselines = Baselines::empty(seconds);
    for level in LEVELS {
        baselines.record("mongodb_insert", level, rate(seconds, level, insert).await?);
        baselines.record("mongodb_insert_prediction", level, rate_steadied(seconds, level, insert_prediction).await?);
    }
    for level in LEVELS {
        baselines.record("mongodb_find_by_id", level, rate(seconds, level, find).await?);
        let find_and_modify = rate_steadied(seconds, level, find_and_modify).await?;
        baselines.record("mongodb_find_and_modify_prediction", level, find_and_modify);
        baselines.record("mongodb_update_prediction", level, rate_steadied(seconds, level, update).await?);
        baselines.record("jetstream_publish", level, rate_steadied(seconds, level, publish).await?);
    }
    let alone = |measured: Measured| measured.client_cpu_us;
    let paced_cpu = &mut baselines.paced_client_cpu_us;
    paced_cpu.insert("mongodb_insert_prediction", alone(paced(PACED_SECONDS, PACED_RATE, insert_prediction).await?));
    paced_cpu
        .insert("mongodb_find_and_modify_prediction", alone(paced(PACED_SECONDS, PACED_RATE, find_and_modify).await?));
    paced_cpu.insert("mongodb_update_prediction", alone(paced(PACED_SECONDS, PACED_RATE, update).await?));
    paced_cpu.insert("jetstream_publish", alone(paced(PACED_SECONDS, PACED_RATE, publish).await?));
    Ok(baselines)
}

/// `bench baselines`
pub async fn run(options: Options) -> anyhow::Result<Value> {
    let baselines = measure(options.seconds).await?;
    println!("{}", baselines.table().trim_end());
    Ok(json!({"scenario": "baselines", "baselines": baselines.json()}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_figures_keep_the_median_of_their_samples() {
        let sample = |per_second, client_cpu_us| Measured { per_second, client_cpu_us };
        let kept = median(&[sample(900.0, 41.0), sample(1000.0, 64.0), sample(1100.0, 45.0)]);
        assert_eq!((kept.per_second, kept.client_cpu_us), (1000.0, 45.0), "each figure on its own");
    }

    #[test]
    fn each_operation_keeps_its_rate_and_client_cpu() {
        let mut baselines = Baselines::empty(2);
        baselines.record("mongodb_find_and_modify_prediction", 8, Measured { per_second: 7000.0, client_cpu_us: 80.0 });
        baselines.record("jetstream_publish", 8, Measured { per_second: 25000.0, client_cpu_us: 17.0 });
        assert_eq!(baselines.find_and_modify.get(&8), Some(&7000.0));
        assert_eq!(baselines.publish.get(&8), Some(&25000.0));
        assert!(baselines.insert.is_empty());
        assert_eq!(baselines.client_cpu_us("mongodb_find_and_modify_prediction", 8), Some(80.0));
        assert_eq!(baselines.client_cpu_us("jetstream_publish", 1), None);
        assert!(baselines.json().get("paced").is_none(), "nothing paced yet");
        baselines.paced_client_cpu_us.insert("jetstream_publish", 41.0);
        assert_eq!(baselines.paced_client_cpu_us("jetstream_publish"), Some(41.0));
        let json = baselines.json();
        assert_eq!(json["mongodb_find_and_modify_prediction_client_cpu_us"]["8"], 80.0);
        assert_eq!(json["paced"]["client_cpu_us"]["jetstream_publish"], 41.0);
        let table = baselines.table();
        assert!(table.contains("| MongoDB findAndModify of a prediction, returning it | 8 | 7000 | 80 µs |"));
        assert!(table.contains("| JetStream publish (acked) | alone, 200/s | 200 | 41 µs |"));
    }
}
