//! One delivery attempt: a POST of the exact payload bytes, signed with Standard Webhooks v1
//! headers (`webhook-id`, `webhook-timestamp`, `webhook-signature`) plus `webhook-event` and
//! `webhook-sequence`. Success is any 2xx within the timeout. Redirects are not followed, no
//! proxy is used, and the response body is never read.

use std::time::{Duration, Instant};

use common::{
    domain::{WebhookEvent, WebhookSecret, WebhookUrl},
    signing,
};
use reqwest::{
    Client,
    header::{CONTENT_TYPE, RETRY_AFTER},
    redirect::Policy,
};

use crate::{
    config::NotifierConfig,
    ssrf::{GuardedResolver, is_private_target, refused_literal},
};

/// What one webhook delivery sends.
pub struct Webhook<'a> {
    /// `webhook-id`: the same on every attempt of one event.
    pub id: &'a str,
    /// `webhook-event`.
    pub event: WebhookEvent,
    /// `webhook-sequence`: grows with each change of the prediction.
    pub seq: i64,
    /// The target.
    pub url: &'a WebhookUrl,
    /// The exact bytes sent and signed.
    pub body: &'a [u8],
}

/// What became of one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptResult {
    /// A 2xx answer.
    Delivered {
        /// The status.
        status: u16,
    },
    /// Any other answer.
    Rejected {
        /// The status.
        status: u16,
        /// The receiver's `Retry-After` in seconds, if it sent one.
        retry_after: Option<Duration>,
    },
    /// No answer: connection failure or timeout.
    Failed {
        /// What went wrong.
        error: String,
        /// Whether the timeout ran out (rather than the connection failing).
        timed_out: bool,
    },
    /// Not sent: the target is a private or reserved address.
    Refused {
        /// Why.
        reason: String,
    },
}

/// Sends webhooks.
pub struct Deliverer {
    client: Client,
    allow_private: bool,
}

impl Deliverer {
    /// An HTTP client bounded by the configured timeout, guarded against private targets.
    pub fn new(config: &NotifierConfig) -> anyhow::Result<Self> {
        let client = Client::builder()
            .dns_resolver(GuardedResolver::new(config.allow_private_targets))
            .redirect(Policy::none())
            .no_proxy()
            .connect_timeout(config.timeout.min(Duration::from_secs(5)))
            .timeout(config.timeout)
            .pool_idle_timeout(Duration::from_secs(30))
            .user_agent(concat!("prediction-service-webhooks/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Self { client, allow_private: config.allow_private_targets })
    }

    /// Sends one attempt signed with `secrets` (current first); returns what happened and how
    /// long it took.
    pub async fn send(&self, hook: &Webhook<'_>, secrets: &[&WebhookSecret]) -> (AttemptResult, Duration) {
        let started = Instant::now();
        let url = match hook.url.url() {
            Ok(url) => url,
            Err(e) => return (AttemptResult::Refused { reason: e.to_string() }, started.elapsed()),
        };
        if let Some(reason) = refused_literal(url, self.allow_private) {
            return (AttemptResult::Refused { reason }, started.elapsed());
        }
        let timestamp = chrono::Utc::now().timestamp();
        let signature = signing::signature_header(secrets, hook.id, timestamp, hook.body);
        let mut trace = reqwest::header::HeaderMap::new();
        common::trace_context::inject_http(&mut trace);
        let request = self
            .client
            .post(url.clone())
            .headers(trace)
            .header(CONTENT_TYPE, "application/json")
            .header("webhook-id", hook.id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .header("webhook-event", hook.event.as_str())
            .header("webhook-sequence", hook.seq.to_string())
            .body(hook.body.to_vec());
        let result = match request.send().await {
            Ok(response) if response.status().is_success() => {
                AttemptResult::Delivered { status: response.status().as_u16() }
            }
            Ok(response) => AttemptResult::Rejected {
                status: response.status().as_u16(),
                retry_after: response
                    .headers()
                    .get(RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .map(Duration::from_secs),
            },
            Err(e) if is_private_target(&e) => AttemptResult::Refused { reason: error_chain(&e) },
            Err(e) => AttemptResult::Failed { error: error_chain(&e), timed_out: e.is_timeout() },
        };
        (result, started.elapsed())
    }
}

fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use common::{config::Env, crypto::MasterKey};

    use super::*;

    #[tokio::test]
    async fn a_stored_url_that_does_not_parse_is_refused_not_sent() {
        let vars = HashMap::from([("MASTER_KEY".to_owned(), MasterKey::generate_base64())]);
        let config = NotifierConfig::from_env(&Env::from_fn(|k| vars.get(k).cloned())).expect("config");
        let url: WebhookUrl = serde_json::from_str(r#""http://exa mple.com/h""#).expect("decodes");
        let hook = Webhook { id: "msg_1", event: WebhookEvent::Completed, seq: 1, url: &url, body: b"{}" };
        let (result, _) = Deliverer::new(&config).expect("client").send(&hook, &[]).await;
        assert!(matches!(result, AttemptResult::Refused { .. }), "{result:?}");
    }
}
