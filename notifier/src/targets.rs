//! Isolation between receivers: at most `NOTIFIER_PER_TARGET` deliveries in flight to one
//! target (`host:port`) from this replica. An event's first delivery to a target at its limit
//! waits at most [`SLOT_WAIT`] for a slot (a fast receiver frees one within milliseconds);
//! after that the event joins the target's own queue of waiting events ([`crate::backlog`])
//! and its message is acknowledged, so a slow or dead receiver holds at most its own share of
//! the global concurrency and never delays deliveries to other receivers for long.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use common::domain::WebhookUrl;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The longest a delivery waits for a slot at its target.
pub const SLOT_WAIT: Duration = Duration::from_millis(100);

/// Concurrency limits per target.
pub struct Targets {
    per_target: usize,
    limits: Mutex<HashMap<String, Arc<Semaphore>>>,
}

/// The target of a URL: `host:port` (a URL that does not parse is its own target; its
/// delivery is refused anyway).
pub fn target_of(url: &WebhookUrl) -> String {
    match url.url() {
        Ok(u) => format!("{}:{}", u.host_str().unwrap_or(""), u.port_or_known_default().unwrap_or(0)),
        Err(_) => url.as_str().to_owned(),
    }
}

impl Targets {
    /// At most `per_target` deliveries at once to each target.
    pub fn new(per_target: usize) -> Self {
        Self { per_target: per_target.max(1), limits: Mutex::new(HashMap::new()) }
    }

    /// A slot for a delivery to `url`'s target, waiting at most [`SLOT_WAIT`] for one.
    pub async fn acquire(&self, url: &WebhookUrl) -> Option<OwnedSemaphorePermit> {
        let semaphore = self.semaphore(&target_of(url));
        tokio::time::timeout(SLOT_WAIT, semaphore.acquire_owned()).await.ok()?.ok()
    }

    /// A slot at `target` (`host:port`), however long it takes (the caller bounds the wait).
    pub async fn wait_for(&self, target: &str) -> Option<OwnedSemaphorePermit> {
        self.semaphore(target).acquire_owned().await.ok()
    }

    /// A slot for a delivery to `url`'s target, unless it is at its limit.
    pub fn try_acquire(&self, url: &WebhookUrl) -> Option<OwnedSemaphorePermit> {
        self.semaphore(&target_of(url)).try_acquire_owned().ok()
    }

    fn semaphore(&self, target: &str) -> Arc<Semaphore> {
        let mut limits = self.limits.lock().unwrap_or_else(|p| p.into_inner());
        if limits.len() > 10_000 {
            let full = self.per_target;
            limits.retain(|_, s| s.available_permits() < full);
        }
        match limits.get(target) {
            Some(semaphore) => semaphore.clone(),
            None => {
                limits.entry(target.to_owned()).or_insert_with(|| Arc::new(Semaphore::new(self.per_target))).clone()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> WebhookUrl {
        WebhookUrl::parse(s).expect("url")
    }

    #[test]
    fn a_target_at_its_limit_refuses_while_others_still_accept() {
        let targets = Targets::new(2);
        let slow = url("http://127.0.0.1:9001/a");
        let a = targets.try_acquire(&slow);
        let b = targets.try_acquire(&url("http://127.0.0.1:9001/b"));
        assert!(a.is_some() && b.is_some());
        assert!(targets.try_acquire(&slow).is_none(), "same host and port share the limit");
        assert!(targets.try_acquire(&url("http://127.0.0.1:9002/")).is_some(), "another port is another target");
        drop(a);
        assert!(targets.try_acquire(&slow).is_some(), "a finished delivery frees its slot");
    }

    #[test]
    fn default_ports_count_as_the_same_target() {
        assert_eq!(target_of(&url("https://example.com/x")), target_of(&url("https://example.com:443/y")));
    }
}
