//! MongoDB's answers lost under load, as in a failover: every service reaches MongoDB through a
//! [`MongoFaults`] proxy, and while the fault lasts every [`EVERY`]-th write (an insert, an
//! update, a delete, a find-and-modify, of any service and collection) is applied by the server
//! and its answer dropped with the connection, which is what a client sees when its primary
//! steps down right after a write; or (the other row) answered with a `writeConcernError` of
//! code 64, what a primary answers when the write applied but its wait for the majority timed
//! out (`wtimeoutMS`). Each create carries its own `Idempotency-Key`.
//!
//! What must hold ([`LostTally::failures`]), beside every row's checks (the usage equal to the
//! predictions run, nothing stuck, every `completed` webhook):
//! - no model ran twice: the runner's runs of `demo/sleep` equal the predictions;
//! - no key made two predictions: the account has one prediction per key sent;
//! - no key is stuck: a create that was not answered 201 is sent again with its key until it
//!   is (within [`SETTLE_KEYS`]), and a create that was answered 201 and sent again replays the
//!   same prediction.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use mongo_faults::{Fault, MongoFaults};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::load::{self, Answer, Attempt};

/// One write in this many loses its answer while the fault lasts.
pub const EVERY: usize = 4;
/// How long a create not answered 201 is sent again with its key before its key counts as
/// stuck (a claim whose prediction never appeared answers 409 for two minutes, then is taken
/// over: longer than this, so such a key is stuck here).
const SETTLE_KEYS: Duration = Duration::from_secs(60);

/// How long a document whose insert was unconfirmed is missing from majority reads.
const MAJORITY_LAG: Duration = Duration::from_secs(2);

const WRITES: [&str; 4] = ["insert", "update", "delete", "findAndModify"];

/// The proxy every service of the row goes through, and the switch of its fault.
pub struct LostReplies {
    proxy: MongoFaults,
    on: Arc<AtomicBool>,
}

impl LostReplies {
    /// A proxy to the server of `uri` giving every [`EVERY`]-th write `fault` once on, off
    /// for now; the URI the services get.
    pub async fn start(uri: &str, fault: Fault) -> anyhow::Result<(Self, String)> {
        let proxy = MongoFaults::start(mongo_faults::host_port(uri).to_owned()).await?;
        let on = Arc::new(AtomicBool::new(false));
        let (switch, writes) = (on.clone(), Arc::new(AtomicUsize::new(0)));
        let lags = matches!(fault, Fault::Unconfirmed);
        proxy.inject(usize::MAX, fault, move |c| {
            switch.load(Ordering::SeqCst)
                && WRITES.contains(&c.name.as_str())
                && writes.fetch_add(1, Ordering::SeqCst) % EVERY == EVERY - 1
        });
        if lags {
            // What a majority read sees lags behind such a write: an inserted document is
            // missing from it for a while.
            proxy.lag_unconfirmed_inserts(MAJORITY_LAG);
        }
        let proxied = proxy.uri(uri);
        Ok((Self { proxy, on }, proxied))
    }

    /// Starts losing answers.
    pub fn begin(&self) {
        self.on.store(true, Ordering::SeqCst);
    }

    /// How many majority reads missed a document whose insert was unconfirmed.
    pub fn lagged(&self) -> usize {
        self.proxy.lagged()
    }

    /// Stops losing answers; how many were lost.
    pub fn end(&self) -> usize {
        self.on.store(false, Ordering::SeqCst);
        self.proxy.injected().len()
    }
}

/// What the row found.
#[derive(Clone, Debug, Default)]
pub struct LostTally {
    /// Answers lost (or unconfirmed).
    pub lost: usize,
    /// Majority reads that missed a document whose insert was unconfirmed.
    pub lagged: usize,
    /// Runs of the model the runner counted, by any outcome.
    pub runs: u64,
    /// Predictions and trainings of the account.
    pub predictions: usize,
    /// Keys the load sent (one create each).
    pub keys: usize,
    /// Predictions the account has (not trainings): one per key, none made twice.
    pub made: usize,
    /// Creates not answered 201 the first time.
    pub resent: usize,
    /// Of those, still not 201 after [`SETTLE_KEYS`].
    pub stuck_keys: usize,
    /// Creates answered 201 whose key, sent again, gave another prediction or none.
    pub not_replayed: usize,
    /// Each of those: its key, the prediction it was answered, and what sending it again got.
    pub not_replayed_keys: Vec<String>,
}

impl LostTally {
    /// Why the row fails, if it does.
    pub fn failures(&self) -> Vec<String> {
        let mut why = Vec::new();
        if self.lost == 0 {
            why.push("no write was faulted: the fault did nothing".into());
        }
        if self.runs != self.predictions as u64 {
            why.push(format!("the model ran {} times for {} predictions", self.runs, self.predictions));
        }
        if self.made != self.keys {
            why.push(format!("{} predictions for {} keys: a key made more than one", self.made, self.keys));
        }
        if self.stuck_keys > 0 {
            why.push(format!("{} keys stuck (no 201 within {} s)", self.stuck_keys, SETTLE_KEYS.as_secs()));
        }
        if self.not_replayed > 0 {
            why.push(format!(
                "{} keys sent again did not replay their prediction ({})",
                self.not_replayed,
                self.not_replayed_keys.join("; ")
            ));
        }
        why
    }

    /// The tally as JSON.
    pub fn json(&self) -> Value {
        json!({
            "answers_lost": self.lost, "majority_reads_lagged": self.lagged, "model_runs": self.runs, "predictions": self.predictions,
            "keys": self.keys, "made": self.made,
            "resent": self.resent, "stuck_keys": self.stuck_keys, "not_replayed": self.not_replayed,
            "not_replayed_keys": self.not_replayed_keys,
        })
    }
}

/// Sends again, with its key, each create of `attempts` not answered 201 until it is (or
/// [`SETTLE_KEYS`] passes), and each answered 201 once more (it must replay); returns the
/// tally's `resent`, `stuck_keys` and `not_replayed`.
pub async fn settle_keys(api: &str, key: &str, webhook: &str, attempts: &[Attempt]) -> anyhow::Result<LostTally> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build()?;
    let body = load::body(webhook);
    let send = |n: usize| {
        http.post(format!("{api}{}", load::LOAD_PATH))
            .bearer_auth(key)
            .header("idempotency-key", load::idempotency_key(n))
            .json(&body)
            .send()
    };
    let mut tally = LostTally { keys: attempts.len(), ..LostTally::default() };
    let deadline = Instant::now() + SETTLE_KEYS;
    for attempt in attempts {
        match &attempt.answer {
            Answer::Accepted(id) => {
                let got = match send(attempt.n).await {
                    Ok(r) if r.status() == 201 => match r.json::<Value>().await {
                        Ok(p) if p["id"] == json!(id) => None,
                        Ok(p) => Some(format!("201 with {}", p["id"])),
                        Err(e) => Some(format!("201 without a body ({e})")),
                    },
                    Ok(r) => Some(format!("{}", r.status())),
                    Err(e) => Some(format!("no answer ({e})")),
                };
                if let Some(got) = got {
                    tally.not_replayed += 1;
                    tally
                        .not_replayed_keys
                        .push(format!("{}: answered {id}, sent again {got}", load::idempotency_key(attempt.n)));
                }
            }
            _ => {
                tally.resent += 1;
                let mut made = false;
                while !made && Instant::now() < deadline {
                    made = send(attempt.n).await.is_ok_and(|r| r.status() == 201);
                    if !made {
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
                if !made {
                    tally.stuck_keys += 1;
                }
            }
        }
    }
    Ok(tally)
}

/// The runs of every model the runner at `metrics` counted, by any outcome.
pub async fn runs(metrics: &str) -> anyhow::Result<u64> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build()?;
    let text = http.get(metrics).send().await?.text().await?;
    Ok(text
        .lines()
        .filter(|line| line.starts_with("runner_model_run_duration_seconds_count{"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_run_a_second_prediction_of_a_key_a_stuck_key_a_key_that_does_not_replay_or_no_fault_fails_the_row() {
        let good = LostTally {
            lost: 12,
            lagged: 0,
            runs: 200,
            predictions: 200,
            keys: 200,
            made: 200,
            resent: 9,
            stuck_keys: 0,
            not_replayed: 0,
            not_replayed_keys: Vec::new(),
        };
        assert!(good.failures().is_empty());
        for bad in [
            LostTally { lost: 0, ..good.clone() },
            LostTally { runs: 201, ..good.clone() },
            LostTally { made: 201, runs: 201, predictions: 201, ..good.clone() },
            LostTally { stuck_keys: 1, ..good.clone() },
            LostTally { not_replayed: 1, ..good.clone() },
        ] {
            assert_eq!(bad.failures().len(), 1, "{bad:?}");
        }
    }
}
