//! The webhook receiver of end-to-end runs, on the one receiver of every suite (`receiver`):
//! it checks each delivery's Standard Webhooks signature against the account's secret,
//! answers 204, and records when the first `completed` webhook (and the first other one) of
//! each prediction arrived. Deliveries with a bad signature are answered 401 and counted, so a
//! run that signs wrongly cannot look fast. It keeps only those arrivals, not the deliveries:
//! a benchmark's hundreds of thousands of webhooks are not held in memory.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use common::domain::WebhookSecret;
use receiver::Answer;
use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// What arrived.
#[derive(Default)]
struct Arrivals {
    completed: HashMap<String, Instant>,
    started: HashMap<String, Instant>,
    verified: usize,
    bad_signatures: usize,
}

/// The receiver's shared state.
#[derive(Clone)]
pub struct Receiver {
    arrivals: Arc<Mutex<Arrivals>>,
    _serving: receiver::Receiver,
    /// The URL to give as a prediction's `webhook`.
    pub url: String,
}

impl Receiver {
    /// Serves on a free loopback port until `stop`.
    pub async fn start(secret: WebhookSecret, stop: CancellationToken) -> anyhow::Result<Self> {
        let arrivals: Arc<Mutex<Arrivals>> = Arc::default();
        let recording = arrivals.clone();
        let decide: receiver::Decide = Arc::new(move |headers, body, arrived| {
            let mut arrivals = recording.lock().unwrap_or_else(|e| e.into_inner());
            if !receiver::verifies(headers, body, &secret) {
                arrivals.bad_signatures += 1;
                return Answer::Status(401);
            }
            arrivals.verified += 1;
            let prediction: Value = serde_json::from_slice(body).unwrap_or_default();
            if let Some(id) = prediction["id"].as_str() {
                let first = match prediction["status"].as_str() {
                    Some("succeeded" | "failed" | "canceled") => &mut arrivals.completed,
                    _ => &mut arrivals.started,
                };
                first.entry(id.to_owned()).or_insert(arrived);
            }
            Answer::Status(204)
        });
        let serving = receiver::Receiver::deciding_only(decide, stop).await;
        Ok(Self { arrivals, url: serving.url(), _serving: serving })
    }

    /// When the `completed` webhook of prediction `id` arrived, if it has.
    pub fn completed_at(&self, id: &str) -> Option<Instant> {
        self.lock().completed.get(id).copied()
    }

    /// When the first webhook of prediction `id` that was not terminal (its `start`) arrived.
    pub fn started_at(&self, id: &str) -> Option<Instant> {
        self.lock().started.get(id).copied()
    }

    /// How many predictions' `completed` webhooks have arrived.
    pub fn completed_count(&self) -> usize {
        self.lock().completed.len()
    }

    /// Deliveries whose signature verified (every event, every copy).
    pub fn deliveries(&self) -> usize {
        self.lock().verified
    }

    /// Deliveries whose signature did not verify.
    pub fn bad_signatures(&self) -> usize {
        self.lock().bad_signatures
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Arrivals> {
        self.arrivals.lock().unwrap_or_else(|e| e.into_inner())
    }
}
