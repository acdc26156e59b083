//! A webhook receiver on loopback that records every delivery, answering 200 or, while told
//! to fail, another status.

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU16, Ordering},
    },
};

use axum::{
    Router,
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode},
    routing::post,
};
use tokio::net::TcpListener;

/// One delivery as received.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Delivery {
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("a JSON payload")
    }
}

/// A running receiver.
pub struct Receiver {
    addr: SocketAddr,
    shared: Shared,
}

#[derive(Clone)]
struct Shared {
    deliveries: Arc<Mutex<Vec<Delivery>>>,
    status: Arc<AtomicU16>,
}

impl Receiver {
    pub async fn start() -> Self {
        Self::answering(200).await
    }

    /// A receiver that answers every delivery with `status` until [`Self::answer`] changes it.
    pub async fn answering(status: u16) -> Self {
        let shared = Shared { deliveries: Arc::default(), status: Arc::new(AtomicU16::new(status)) };
        // Any body: a prediction's webhook carries its whole input and output.
        let app = Router::new()
            .route("/hook", post(record))
            .layer(axum::extract::DefaultBodyLimit::disable())
            .with_state(shared.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind receiver");
        let addr = listener.local_addr().expect("receiver address");
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { addr, shared }
    }

    /// Answers `status` from now on.
    pub fn answer(&self, status: u16) {
        self.shared.status.store(status, Ordering::SeqCst);
    }

    pub fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    pub fn deliveries(&self) -> Vec<Delivery> {
        self.shared.deliveries.lock().expect("lock").clone()
    }

    pub fn of_event(&self, event: &str) -> Vec<Delivery> {
        self.deliveries().into_iter().filter(|d| d.header("webhook-event") == event).collect()
    }
}

async fn record(State(shared): State<Shared>, headers: HeaderMap, body: Bytes) -> StatusCode {
    shared.deliveries.lock().expect("lock").push(Delivery { headers, body });
    StatusCode::from_u16(shared.status.load(Ordering::SeqCst)).unwrap_or(StatusCode::OK)
}
