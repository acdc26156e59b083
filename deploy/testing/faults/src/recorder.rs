//! The webhook receiver of a fault run (on the one receiver of every suite, `receiver`): it
//! records every delivery (prediction, event,
//! `webhook-id`, when, what it answered) and checks each Standard Webhooks signature against
//! the account's secrets. It can misbehave on purpose, on the first attempt of every event:
//! hang past the notifier's timeout, or answer 503 with `Retry-After`.
//!
//! After [`Recorder::rotated`], a delivery that arrives later than [`ROTATION_SLACK`] and is
//! not signed with the new secret counts as signed with an old one: the contract says the new
//! secret signs from the moment the rotation answers.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use common::domain::WebhookSecret;
use http::HeaderMap;
use receiver::Answer;
use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How long after a rotation answers a delivery signed before it may still arrive (it was on
/// the wire already).
pub const ROTATION_SLACK: Duration = Duration::from_millis(250);

/// How the receiver treats the first attempt of each event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behaviour {
    /// Answers 204 at once.
    Healthy,
    /// Holds the first attempt this long (past the notifier's timeout), then answers 503.
    HangFirst(Duration),
    /// Answers the first attempt 503 with `Retry-After` of this many seconds.
    UnavailableFirst(u64),
}

/// One delivery as it arrived.
#[derive(Clone, Debug)]
pub struct Delivery {
    /// The prediction's id.
    pub prediction: String,
    /// `webhook-event`.
    pub event: String,
    /// `webhook-id`.
    pub webhook_id: String,
    /// When it arrived.
    pub at: Instant,
    /// Whether it was answered 2xx (accepted).
    pub accepted: bool,
}

#[derive(Default)]
struct Log {
    deliveries: Vec<Delivery>,
    first_attempt: HashMap<String, Instant>,
    bad_signatures: usize,
    old_signatures: usize,
    early_retries: usize,
}

struct Keys {
    secrets: Vec<WebhookSecret>,
    rotated: Option<(WebhookSecret, Instant)>,
}

/// The receiver's shared state.
#[derive(Clone)]
pub struct Recorder {
    keys: Arc<Mutex<Keys>>,
    log: Arc<Mutex<Log>>,
    _serving: receiver::Receiver,
    /// The URL to give as a prediction's `webhook`.
    pub url: String,
}

/// What the recorder saw, summed up.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tally {
    /// Deliveries whose signature verified under no known secret.
    pub bad_signatures: usize,
    /// Deliveries after a rotation not signed with the new secret.
    pub old_signatures: usize,
    /// Retries that came sooner than the `Retry-After` they were given.
    pub early_retries: usize,
    /// How long the last delivery is ago.
    pub quiet_for: Duration,
}

impl Recorder {
    /// Serves on a free loopback port (the one receiver of every suite) until `stop`,
    /// verifying with `secret`.
    pub async fn start(secret: WebhookSecret, behaviour: Behaviour, stop: CancellationToken) -> anyhow::Result<Self> {
        let keys = Arc::new(Mutex::new(Keys { secrets: vec![secret], rotated: None }));
        let log: Arc<Mutex<Log>> = Arc::default();
        let (keys_seen, log_kept) = (keys.clone(), log.clone());
        let decide: receiver::Decide =
            Arc::new(move |headers, body, arrived| receive(&keys_seen, &log_kept, behaviour, headers, body, arrived));
        let serving = receiver::Receiver::deciding(decide, stop).await;
        Ok(Self { keys, log, url: serving.url(), _serving: serving })
    }

    /// The account's secret was rotated to `secret` just now.
    pub fn rotated(&self, secret: WebhookSecret) {
        let mut keys = lock(&self.keys);
        keys.secrets.push(secret.clone());
        keys.rotated = Some((secret, Instant::now()));
    }

    /// Every delivery so far.
    pub fn deliveries(&self) -> Vec<Delivery> {
        lock(&self.log).deliveries.clone()
    }

    /// The counts so far.
    pub fn tally(&self) -> Tally {
        let log = lock(&self.log);
        Tally {
            bad_signatures: log.bad_signatures,
            old_signatures: log.old_signatures,
            early_retries: log.early_retries,
            quiet_for: log.deliveries.last().map_or(Duration::MAX, |d| d.at.elapsed()),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// How a delivery's signature checks out.
#[derive(Debug, PartialEq)]
enum Signed {
    Current,
    Old,
    Bad,
}

fn check_signature(keys: &Keys, id: &str, timestamp: &str, body: &[u8], header: &str, arrived: Instant) -> Signed {
    let Ok(ts) = timestamp.parse() else { return Signed::Bad };
    let verifies = |s: &WebhookSecret| common::signing::verify(s, id, ts, body, header);
    match &keys.rotated {
        Some((new, _)) if verifies(new) => Signed::Current,
        Some((_, at)) if arrived > *at + ROTATION_SLACK && keys.secrets.iter().any(verifies) => Signed::Old,
        _ if keys.secrets.iter().any(verifies) => Signed::Current,
        _ => Signed::Bad,
    }
}

/// Checks a delivery, records it, and answers it as `behaviour` says.
fn receive(
    keys: &Mutex<Keys>,
    log: &Mutex<Log>,
    behaviour: Behaviour,
    headers: &HeaderMap,
    body: &[u8],
    arrived: Instant,
) -> Answer {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let webhook_id = header("webhook-id");
    let signed = check_signature(
        &lock(keys),
        &webhook_id,
        &header("webhook-timestamp"),
        body,
        &header("webhook-signature"),
        arrived,
    );
    let mut log = lock(log);
    match signed {
        Signed::Bad => log.bad_signatures += 1,
        Signed::Old => log.old_signatures += 1,
        Signed::Current => {}
    }
    let first = match log.first_attempt.get(&webhook_id) {
        Some(at) => {
            if let Behaviour::UnavailableFirst(seconds) = behaviour
                && arrived.duration_since(*at) < Duration::from_secs(seconds)
            {
                log.early_retries += 1;
            }
            false
        }
        None => {
            log.first_attempt.insert(webhook_id.clone(), arrived);
            true
        }
    };
    let answer = match (behaviour, first) {
        (Behaviour::HangFirst(hang), true) => Answer::Hang(hang),
        (Behaviour::UnavailableFirst(seconds), true) => Answer::RetryAfter(503, seconds),
        _ if signed == Signed::Bad => Answer::Status(401),
        _ => Answer::Status(204),
    };
    let prediction: Value = serde_json::from_slice(body).unwrap_or_default();
    log.deliveries.push(Delivery {
        prediction: prediction["id"].as_str().unwrap_or_default().to_owned(),
        event: header("webhook-event"),
        webhook_id,
        at: arrived,
        accepted: answer == Answer::Status(204),
    });
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signed_with(secret: &WebhookSecret, body: &[u8]) -> (String, String) {
        let ts = chrono::Utc::now().timestamp();
        (ts.to_string(), common::signing::signature_header(&[secret], "msg_1", ts, body))
    }

    #[test]
    fn after_a_rotation_only_the_new_secret_counts_as_current() {
        let (old, new) = (WebhookSecret::generate(), WebhookSecret::generate());
        let mut keys = Keys { secrets: vec![old.clone()], rotated: None };
        let (ts, by_old) = signed_with(&old, b"{}");
        let now = Instant::now();
        assert_eq!(check_signature(&keys, "msg_1", &ts, b"{}", &by_old, now), Signed::Current);
        keys.secrets.push(new.clone());
        keys.rotated = Some((new.clone(), now));
        assert_eq!(check_signature(&keys, "msg_1", &ts, b"{}", &by_old, now), Signed::Current, "still on the wire");
        let later = now + ROTATION_SLACK * 2;
        assert_eq!(check_signature(&keys, "msg_1", &ts, b"{}", &by_old, later), Signed::Old);
        let (ts, by_new) = signed_with(&new, b"{}");
        assert_eq!(check_signature(&keys, "msg_1", &ts, b"{}", &by_new, later), Signed::Current);
        let (ts, by_stranger) = signed_with(&WebhookSecret::generate(), b"{}");
        assert_eq!(check_signature(&keys, "msg_1", &ts, b"{}", &by_stranger, later), Signed::Bad);
        assert_eq!(check_signature(&keys, "msg_1", &ts, b"{tampered}", &by_new, later), Signed::Bad);
    }
}
