//! The webhook receiver of every test suite: the api's and the notifier's integration tests,
//! the bench and the fault suite. It listens on a free loopback port, records every delivery
//! (headers, body, when it came, what it was answered), and answers as the test says:
//!
//! - a fixed status, which the test may change ([`Receiver::answer`]);
//! - a script of answers for the first requests, then the fixed status ([`Receiver::scripted`]);
//! - any answer a test works out from the delivery itself ([`Receiver::deciding`]: a hang,
//!   `503` with `Retry-After`, `401` for a bad signature).
//!
//! What a suite reads from it (first arrivals, signatures under rotation, retries) it works
//! out from the recorded deliveries; [`Delivery::verifies`] checks a Standard Webhooks
//! signature.
#![forbid(unsafe_code)]

use std::{
    collections::VecDeque,
    net::SocketAddr,
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use axum::{
    Router,
    body::Bytes,
    extract::{DefaultBodyLimit, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    routing::post,
};
use common::domain::WebhookSecret;
use tokio::{net::TcpListener, time::Instant};
use tokio_util::sync::CancellationToken;

/// How to answer one delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// This status at once.
    Status(u16),
    /// This status with `Retry-After` of so many seconds.
    RetryAfter(u16, u64),
    /// Hold the request this long, then answer 503 (past a sender's timeout).
    Hang(Duration),
}

/// One delivery as it came.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// Its headers.
    pub headers: HeaderMap,
    /// Its body, exactly as sent.
    pub body: Bytes,
    /// When it came.
    pub at: Instant,
    /// The status it was answered.
    pub status: u16,
}

impl Delivery {
    /// A header's value (empty when absent).
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("a JSON payload")
    }

    /// Whether its Standard Webhooks signature verifies with `secret`.
    pub fn verifies(&self, secret: &WebhookSecret) -> bool {
        verifies(&self.headers, &self.body, secret)
    }

    /// Whether it was accepted (answered 2xx).
    pub fn accepted(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// For each event (by `webhook-id`) delivered more than once, the times between its
/// deliveries, in order: how its retries kept to a schedule.
pub fn retry_gaps(deliveries: &[Delivery]) -> Vec<Vec<Duration>> {
    let mut last: std::collections::HashMap<&str, Instant> = Default::default();
    let mut gaps: std::collections::HashMap<&str, Vec<Duration>> = Default::default();
    for d in deliveries {
        let id = d.header("webhook-id");
        if let Some(at) = last.insert(id, d.at) {
            gaps.entry(id).or_default().push(d.at.duration_since(at));
        }
    }
    gaps.into_values().collect()
}

/// Whether a delivery's headers and body carry a signature that verifies with `secret`.
pub fn verifies(headers: &HeaderMap, body: &[u8], secret: &WebhookSecret) -> bool {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default();
    header("webhook-timestamp")
        .parse()
        .is_ok_and(|ts| common::signing::verify(secret, header("webhook-id"), ts, body, header("webhook-signature")))
}

/// What decides an answer from the delivery (its headers and body) and when it came.
pub type Decide = Arc<dyn Fn(&HeaderMap, &[u8], Instant) -> Answer + Send + Sync>;

struct Shared {
    script: Mutex<VecDeque<Answer>>,
    fixed: Mutex<Answer>,
    decide: Option<Decide>,
    /// Whether deliveries are kept (a bench's long run keeps what it needs in `decide`).
    keep: bool,
    deliveries: Mutex<Vec<Delivery>>,
}

/// A running receiver; it serves until dropped with every clone, or until its stop token.
#[derive(Clone)]
pub struct Receiver {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Receiver {
    /// Answers every delivery 200.
    pub async fn start() -> Self {
        Self::answering(200).await
    }

    /// Answers every delivery `status` until [`Self::answer`] changes it.
    pub async fn answering(status: u16) -> Self {
        Self::serve(VecDeque::new(), Answer::Status(status), None, CancellationToken::new()).await
    }

    /// Answers the first deliveries as `script` says, then every one 200.
    pub async fn scripted(script: Vec<Answer>) -> Self {
        Self::serve(script.into(), Answer::Status(200), None, CancellationToken::new()).await
    }

    /// Answers every delivery `answer`.
    pub async fn always(answer: Answer) -> Self {
        Self::serve(VecDeque::new(), answer, None, CancellationToken::new()).await
    }

    /// Answers each delivery as `decide` works out, until `stop`.
    pub async fn deciding(decide: Decide, stop: CancellationToken) -> Self {
        Self::serve(VecDeque::new(), Answer::Status(200), Some(decide), stop).await
    }

    /// As [`Self::deciding`], keeping no delivery: `decide` keeps what the run needs (a
    /// benchmark's hundreds of thousands of webhooks are not held in memory).
    pub async fn deciding_only(decide: Decide, stop: CancellationToken) -> Self {
        Self::serve_keeping(VecDeque::new(), Answer::Status(200), Some(decide), stop, false).await
    }

    async fn serve(script: VecDeque<Answer>, fixed: Answer, decide: Option<Decide>, stop: CancellationToken) -> Self {
        Self::serve_keeping(script, fixed, decide, stop, true).await
    }

    async fn serve_keeping(
        script: VecDeque<Answer>,
        fixed: Answer,
        decide: Option<Decide>,
        stop: CancellationToken,
        keep: bool,
    ) -> Self {
        let shared = Arc::new(Shared {
            script: Mutex::new(script),
            fixed: Mutex::new(fixed),
            decide,
            keep,
            deliveries: Mutex::default(),
        });
        // Any body: a prediction's webhook carries its whole input and output.
        let app =
            Router::new().route("/hook", post(receive)).layer(DefaultBodyLimit::disable()).with_state(shared.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the webhook receiver");
        let addr = listener.local_addr().expect("the receiver's address");
        tokio::spawn(async move { axum::serve(listener, app).with_graceful_shutdown(stop.cancelled_owned()).await });
        Self { addr, shared }
    }

    /// Answers `status` from now on (after any script).
    pub fn answer(&self, status: u16) {
        *lock(&self.shared.fixed) = Answer::Status(status);
    }

    /// The URL to give as a `webhook`.
    pub fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Every delivery so far, in the order they came.
    pub fn deliveries(&self) -> Vec<Delivery> {
        lock(&self.shared.deliveries).clone()
    }

    /// The deliveries of one `webhook-event`.
    pub fn of_event(&self, event: &str) -> Vec<Delivery> {
        self.deliveries().into_iter().filter(|d| d.header("webhook-event") == event).collect()
    }

    /// Reads the deliveries without copying them.
    pub fn with_deliveries<T>(&self, read: impl FnOnce(&[Delivery]) -> T) -> T {
        read(&lock(&self.shared.deliveries))
    }
}

async fn receive(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let at = Instant::now();
    let answer = match &shared.decide {
        Some(decide) => decide(&headers, &body, at),
        None => lock(&shared.script).pop_front().unwrap_or(*lock(&shared.fixed)),
    };
    let status = match answer {
        Answer::Status(status) | Answer::RetryAfter(status, _) => status,
        Answer::Hang(_) => 503,
    };
    // Recorded as it comes, before a hang: a test sees what is being held.
    if shared.keep {
        let delivery = Delivery { headers, body, at, status };
        lock(&shared.deliveries).push(delivery);
    }
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
    match answer {
        Answer::Status(_) => code.into_response(),
        Answer::RetryAfter(_, seconds) => (code, [("retry-after", seconds.to_string())]).into_response(),
        Answer::Hang(hold) => {
            tokio::time::sleep(hold).await;
            code.into_response()
        }
    }
}
