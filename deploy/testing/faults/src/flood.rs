//! Overload for a fault run, for the length of the fault, of one of two kinds:
//! - [`run`]: more clients than the api works on at once, each reading a page of the
//!   account's predictions back to back. Past its in-flight bound the api must answer at once
//!   with 503 and `Retry-After` (and never anything else).
//! - [`creates`]: creates of the steady load's model at twice the rate its runner starts them,
//!   against an api with a bound on the queue (`API_MAX_QUEUE_SECONDS`). Past the bound the api
//!   must refuse at once with 503 and `Retry-After`; every create it accepts is run and
//!   announced (each asks for a `completed` webhook, so the scenario's drain follows it like
//!   the steady load's).
//!
//! Either way the steady load's accepted predictions are all run and announced as in any
//! scenario.

use std::{sync::Arc, time::Duration};

use serde_json::{Value, json};
use tokio::{task::JoinSet, time::Instant};

use crate::load::{self, Answer, Attempt};

/// What the flood's requests got.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FloodTally {
    /// Requests sent.
    pub requests: usize,
    /// Answered 200 (a read) or 201 (a create accepted).
    pub served: usize,
    /// Answered 503 (shed).
    pub shed: usize,
    /// Of those, without `Retry-After`.
    pub shed_without_retry_after: usize,
    /// Anything else: another status, or no answer.
    pub other: usize,
}

impl FloodTally {
    /// The tally of a flood of creates: 201 served, 503 shed.
    pub fn of_creates(attempts: &[Attempt]) -> Self {
        let mut tally = Self { requests: attempts.len(), ..Self::default() };
        for attempt in attempts {
            match attempt.answer {
                Answer::Accepted(_) => tally.served += 1,
                Answer::Status(503) => {
                    tally.shed += 1;
                    tally.shed_without_retry_after += usize::from(!attempt.retry_after);
                }
                Answer::Status(_) | Answer::Unanswered => tally.other += 1,
            }
        }
        tally
    }

    /// The tally as JSON.
    pub fn json(&self) -> Value {
        json!({
            "requests": self.requests, "served": self.served, "shed": self.shed,
            "shed_without_retry_after": self.shed_without_retry_after, "other": self.other,
        })
    }

    /// Why the flood fails its scenario, if it does.
    pub fn failures(&self) -> Vec<String> {
        let mut why = Vec::new();
        if self.shed == 0 {
            why.push("the flood was never shed: no overload".to_owned());
        }
        if self.served == 0 {
            why.push("no request of the flood was served".to_owned());
        }
        if self.shed_without_retry_after > 0 {
            why.push(format!("{} 503s without Retry-After", self.shed_without_retry_after));
        }
        if self.other > 0 {
            why.push(format!("{} flood answers neither 2xx nor 503", self.other));
        }
        why
    }
}

/// `clients` clients list the account's predictions back to back on `api` for `length`.
pub async fn run(api: &str, key: &str, clients: usize, length: Duration) -> anyhow::Result<FloodTally> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build()?;
    let until = Instant::now() + length;
    let mut tasks = JoinSet::new();
    for _ in 0..clients {
        let (http, url, key) = (http.clone(), format!("{api}/v1/predictions?limit=100"), key.to_owned());
        tasks.spawn(async move {
            let mut tally = FloodTally::default();
            while Instant::now() < until {
                tally.requests += 1;
                match http.get(&url).bearer_auth(&key).send().await {
                    Ok(r) if r.status().as_u16() == 200 => {
                        let _ = r.bytes().await;
                        tally.served += 1;
                    }
                    Ok(r) if r.status().as_u16() == 503 => {
                        tally.shed += 1;
                        tally.shed_without_retry_after += usize::from(!r.headers().contains_key("retry-after"));
                    }
                    Ok(_) | Err(_) => tally.other += 1,
                }
            }
            tally
        });
    }
    sum(tasks).await
}

/// `rate` creates a second of `demo/sleep` (`seconds` long, a `completed` webhook to
/// `webhook`) on `api` for `length` seconds, sent as the steady load sends its own
/// ([`load::run_with`]).
pub async fn creates(
    api: &str,
    key: &str,
    webhook: &str,
    (rate, seconds): (u64, f64),
    length: u64,
) -> anyhow::Result<FloodTally> {
    let body = json!({"input": {"seconds": seconds}, "webhook": webhook, "webhook_events_filter": ["completed"]});
    let target: load::Target = Arc::new(move |_| ("/v1/models/demo/sleep/predictions".to_owned(), body.clone()));
    let attempts = load::run_with(&[api.to_owned()], key, rate, length, target).await?;
    Ok(FloodTally::of_creates(&attempts))
}

async fn sum(mut tasks: JoinSet<FloodTally>) -> anyhow::Result<FloodTally> {
    let mut all = FloodTally::default();
    while let Some(one) = tasks.join_next().await {
        let one = one?;
        all.requests += one.requests;
        all.served += one.served;
        all.shed += one.shed;
        all.shed_without_retry_after += one.shed_without_retry_after;
        all.other += one.other;
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_passes_only_if_it_was_shed_served_and_every_shed_said_when_to_come_back() {
        let good = FloodTally { requests: 10, served: 4, shed: 6, ..FloodTally::default() };
        assert!(good.failures().is_empty());
        assert_eq!(FloodTally { shed: 0, ..good.clone() }.failures(), ["the flood was never shed: no overload"]);
        assert_eq!(
            FloodTally { shed_without_retry_after: 2, ..good.clone() }.failures(),
            ["2 503s without Retry-After"]
        );
        assert_eq!(FloodTally { other: 1, ..good }.failures(), ["1 flood answers neither 2xx nor 503"]);
    }

    #[test]
    fn a_flood_of_creates_counts_201_as_served_and_503_as_shed_with_or_without_retry_after() {
        let attempt = |answer: Answer, retry_after: bool| Attempt {
            at: Instant::now(),
            answer,
            create: Duration::from_millis(1),
            get: None,
            asked_priority: None,
            shown_priority: None,
            retry_after,
            n: 0,
        };
        let attempts = [
            attempt(Answer::Accepted("a".into()), false),
            attempt(Answer::Status(503), true),
            attempt(Answer::Status(503), false),
            attempt(Answer::Status(500), false),
            attempt(Answer::Unanswered, false),
        ];
        assert_eq!(
            FloodTally::of_creates(&attempts),
            FloodTally { requests: 5, served: 1, shed: 2, shed_without_retry_after: 1, other: 2 }
        );
    }
}
