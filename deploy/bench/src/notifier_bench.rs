//! The notifier scenario. One notifier (in this process, sharing its CPU with the receiver
//! and the publisher) delivers `completed` events to a receiver on loopback that answers 204
//! at once:
//!
//! 1. throughput: `--events` events published as fast as JetStream takes them; deliveries per
//!    second = events / time from the first publish to the last delivery received;
//! 2. latency: an open loop of `--rate` events per second for `--seconds`; each sample is the
//!    time from the start of the event's publish (a runner's status event) to its webhook
//!    arriving at the receiver, so it includes storing the event in JetStream.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::Context;
use axum::{Router, extract::State, http::HeaderMap, http::StatusCode, routing::post};
use common::{
    domain::{ApiSurface, NewPrediction, Prediction, WebhookEvent, WebhookUrl},
    links::Links,
    messages::{Announcement, PredictionChanged},
    store::Account,
};
use serde_json::{Value, json};
use tokio::{net::TcpListener, sync::Notify, time::Instant};
use tokio_util::sync::CancellationToken;

use crate::{
    setup::Setup,
    stats::{Samples, ms},
};

/// The scenario's options.
#[derive(clap::Args)]
pub struct Options {
    /// Events in the throughput run.
    #[arg(long, default_value_t = 2000)]
    events: usize,
    /// Offered events per second in the latency run.
    #[arg(long, default_value_t = 100)]
    rate: u64,
    /// Seconds of the latency run.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
}

/// What the scenario measured.
pub struct Report {
    events: usize,
    throughput_secs: f64,
    rate: u64,
    seconds: u64,
    latency: Samples,
}

impl Report {
    fn deliveries_per_second(&self) -> f64 {
        self.events as f64 / self.throughput_secs
    }

    /// A readable table.
    pub fn table(&self) -> String {
        format!(
            "notifier, one process, receiver on loopback\n\
             | measure | value |\n|---|---|\n\
             | deliveries/s ({} events, as fast as published) | {:.0} |\n\
             | event→webhook p50 at {}/s for {} s | {} ms |\n\
             | event→webhook p95 | {} ms |\n\
             | event→webhook p99 | {} ms |\n\
             | latency samples | {} |",
            self.events,
            self.deliveries_per_second(),
            self.rate,
            self.seconds,
            ms(self.latency.percentile(50.0)),
            ms(self.latency.percentile(95.0)),
            ms(self.latency.percentile(99.0)),
            self.latency.len(),
        )
    }

    /// The results as JSON.
    pub fn json(&self) -> Value {
        json!({
            "scenario": "notifier",
            "throughput": {"events": self.events, "seconds": self.throughput_secs, "deliveries_per_second": self.deliveries_per_second()},
            "latency": {
                "offered_per_second": self.rate, "seconds": self.seconds, "samples": self.latency.len(),
                "p50_ms": ms(self.latency.percentile(50.0)), "p95_ms": ms(self.latency.percentile(95.0)),
                "p99_ms": ms(self.latency.percentile(99.0)),
            },
        })
    }
}

/// Arrival times by `webhook-id`.
#[derive(Default)]
struct Arrivals {
    at: Mutex<HashMap<String, Instant>>,
    arrived: Notify,
}

async fn receive(State(arrivals): State<Arc<Arrivals>>, headers: HeaderMap) -> StatusCode {
    let now = Instant::now();
    if let Some(id) = headers.get("webhook-id").and_then(|v| v.to_str().ok()) {
        arrivals.at.lock().unwrap_or_else(|p| p.into_inner()).insert(id.to_owned(), now);
        arrivals.arrived.notify_waiters();
    }
    StatusCode::NO_CONTENT
}

impl Arrivals {
    fn count(&self) -> usize {
        self.at.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    async fn wait_for(&self, n: usize, limit: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + limit;
        while self.count() < n {
            let notified = self.arrived.notified();
            if self.count() >= n {
                break;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "only {} of {n} webhooks arrived within {limit:?}",
                self.count()
            );
            let _ = tokio::time::timeout(Duration::from_millis(100), notified).await;
        }
        Ok(())
    }
}

/// Runs the scenario.
pub async fn run(options: Options) -> anyhow::Result<Report> {
    let setup = Setup::new(&[("NOTIFIER_ALLOW_PRIVATE_TARGETS", "true")]).await?;
    let (store, bus) = (&setup.store, setup.bus.clone());
    let (account, _) = Account::new("bench", &setup.common.master_key);
    store.accounts().insert(&account).await?;

    let arrivals = Arc::new(Arrivals::default());
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let url = WebhookUrl::parse(&format!("http://{}/hook", listener.local_addr()?))?;
    let app = Router::new().route("/hook", post(receive)).with_state(arrivals.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let shutdown = CancellationToken::new();
    let config = notifier::config::NotifierConfig::from_env(&setup.env())?;
    tokio::spawn(notifier::run(config, shutdown.clone()));

    let links = Links::new("http://bench.local", setup.common.master_key.clone());
    let event = |url: &WebhookUrl| {
        let p = Prediction::new_starting(NewPrediction {
            account_id: account.id.clone(),
            model: "demo/echo".parse().expect("a valid model"),
            version: "v".into(),
            capability: "text-generation".into(),
            input: json!({"prompt": "bench"}),
            model_input: json!({"prompt": "bench"}),
            webhook: Some(url.clone()),
            webhook_events_filter: None,
            surface: ApiSurface::Canonical,
        });
        PredictionChanged::of(&p, WebhookEvent::Completed, &links)
    };

    // Warm up connections and caches.
    for _ in 0..50 {
        bus.publish_event(event(&url), Announcement::First).await?;
    }
    arrivals.wait_for(50, Duration::from_secs(60)).await.context("warm-up")?;

    // 1. Throughput.
    let before = arrivals.count();
    let started = Instant::now();
    let publishers: Vec<_> = (0..8)
        .map(|i| {
            let (bus, url) = (bus.clone(), url.clone());
            let events: Vec<_> = (0..options.events).filter(|n| n % 8 == i).map(|_| event(&url)).collect();
            tokio::spawn(async move {
                for e in events {
                    bus.publish_event(e, Announcement::First).await?;
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for p in publishers {
        p.await??;
    }
    arrivals.wait_for(before + options.events, Duration::from_secs(120)).await.context("throughput run")?;
    let throughput_secs = started.elapsed().as_secs_f64();

    // 2. Latency at a fixed offered rate.
    let sent: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let before = arrivals.count();
    let total = (options.rate * options.seconds) as usize;
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / options.rate.max(1) as f64));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    for _ in 0..total {
        tick.tick().await;
        let e = event(&url);
        sent.lock().unwrap_or_else(|p| p.into_inner()).insert(e.message_id(), Instant::now());
        let bus = bus.clone();
        tokio::spawn(async move {
            if let Err(err) = bus.publish_event(e, Announcement::First).await {
                tracing::warn!(error = %err, "publish failed");
            }
        });
    }
    arrivals.wait_for(before + total, Duration::from_secs(120)).await.context("latency run")?;
    let latency = {
        let sent = sent.lock().unwrap_or_else(|p| p.into_inner());
        let at = arrivals.at.lock().unwrap_or_else(|p| p.into_inner());
        Samples::new(sent.iter().filter_map(|(id, start)| at.get(id).map(|end| *end - *start)).collect())
    };
    shutdown.cancel();
    Ok(Report { events: options.events, throughput_secs, rate: options.rate, seconds: options.seconds, latency })
}
