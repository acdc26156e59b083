//! A scripted webhook receiver: answers each request as its script says (a status, or a hang),
//! then 200, and records every request with the time it arrived.

use std::{
    collections::VecDeque,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    Router,
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode},
    routing::post,
};
use tokio::{net::TcpListener, time::Instant};

/// How to answer one request.
#[derive(Debug, Clone, Copy)]
pub enum Answer {
    Status(u16),
    Hang(Duration),
}

#[derive(Debug, Clone)]
pub struct Received {
    pub headers: HeaderMap,
    pub body: Bytes,
    pub at: Instant,
}

impl Received {
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
    }
}

#[derive(Default)]
struct Shared {
    script: Mutex<VecDeque<Answer>>,
    always: Mutex<Option<Answer>>,
    received: Mutex<Vec<Received>>,
}

pub struct Receiver {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl Receiver {
    pub async fn start(script: Vec<Answer>) -> Self {
        let shared = Arc::new(Shared { script: Mutex::new(script.into()), ..Default::default() });
        let app = Router::new().route("/hook", post(answer)).with_state(shared.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { addr, shared }
    }

    /// A receiver that answers every request the same way.
    pub async fn always(answer: Answer) -> Self {
        let r = Self::start(vec![]).await;
        *r.shared.always.lock().expect("lock") = Some(answer);
        r
    }

    pub fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn received(&self) -> Vec<Received> {
        self.shared.received.lock().expect("lock").clone()
    }
}

async fn answer(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    shared.received.lock().expect("lock").push(Received { headers, body, at: Instant::now() });
    let next = shared.script.lock().expect("lock").pop_front().or(*shared.always.lock().expect("lock"));
    match next {
        Some(Answer::Status(code)) => StatusCode::from_u16(code).unwrap_or(StatusCode::OK),
        Some(Answer::Hang(d)) => {
            tokio::time::sleep(d).await;
            StatusCode::OK
        }
        None => StatusCode::OK,
    }
}
