//! A webhook receiver on loopback that records every delivery.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use axum::{Router, body::Bytes, extract::State, http::HeaderMap, routing::post};
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
    deliveries: Arc<Mutex<Vec<Delivery>>>,
}

impl Receiver {
    pub async fn start() -> Self {
        let deliveries = Arc::new(Mutex::new(Vec::new()));
        let app = Router::new().route("/hook", post(record)).with_state(deliveries.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind receiver");
        let addr = listener.local_addr().expect("receiver address");
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { addr, deliveries }
    }

    pub fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    pub fn deliveries(&self) -> Vec<Delivery> {
        self.deliveries.lock().expect("lock").clone()
    }

    pub fn of_event(&self, event: &str) -> Vec<Delivery> {
        self.deliveries().into_iter().filter(|d| d.header("webhook-event") == event).collect()
    }
}

async fn record(State(deliveries): State<Arc<Mutex<Vec<Delivery>>>>, headers: HeaderMap, body: Bytes) -> &'static str {
    deliveries.lock().expect("lock").push(Delivery { headers, body });
    "ok"
}
