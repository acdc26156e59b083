//! A webhook receiver on loopback for end-to-end runs: it checks each delivery's Standard
//! Webhooks signature against the account's secret, answers 204, and records when the first
//! `completed` webhook (and the first other one) of each prediction arrived. Deliveries with a bad signature are
//! answered 401 and counted, so a run that signs wrongly cannot look fast.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use axum::{Router, body::Bytes, extract::State, http::HeaderMap, http::StatusCode, routing::post};
use common::domain::WebhookSecret;
use serde_json::Value;
use tokio::{net::TcpListener, time::Instant};
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
    secret: Arc<WebhookSecret>,
    arrivals: Arc<Mutex<Arrivals>>,
    /// The URL to give as a prediction's `webhook`.
    pub url: String,
}

impl Receiver {
    /// Serves on a free loopback port until `stop`.
    pub async fn start(secret: WebhookSecret, stop: CancellationToken) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let receiver = Self {
            secret: Arc::new(secret),
            arrivals: Arc::default(),
            url: format!("http://{}/hook", listener.local_addr()?),
        };
        let app = Router::new().route("/hook", post(receive)).with_state(receiver.clone());
        tokio::spawn(async move { axum::serve(listener, app).with_graceful_shutdown(stop.cancelled_owned()).await });
        Ok(receiver)
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

async fn receive(State(receiver): State<Receiver>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let arrived = Instant::now();
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let (id, timestamp, signature) = (header("webhook-id"), header("webhook-timestamp"), header("webhook-signature"));
    let verified =
        timestamp.parse().is_ok_and(|ts| common::signing::verify(&receiver.secret, id, ts, &body, signature));
    let mut arrivals = receiver.lock();
    if !verified {
        arrivals.bad_signatures += 1;
        return StatusCode::UNAUTHORIZED;
    }
    arrivals.verified += 1;
    let prediction: Value = serde_json::from_slice(&body).unwrap_or_default();
    if let Some(id) = prediction["id"].as_str() {
        let arrivals = match prediction["status"].as_str() {
            Some("succeeded" | "failed" | "canceled") => &mut arrivals.completed,
            _ => &mut arrivals.started,
        };
        arrivals.entry(id.to_owned()).or_insert(arrived);
    }
    StatusCode::NO_CONTENT
}
