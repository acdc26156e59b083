//! A test's private database and NATS prefix, an account with a signing secret, and helpers
//! to publish status events and start notifiers.

use std::{collections::HashMap, time::Duration};

use common::{
    bus::Bus,
    config::Env,
    crypto::MasterKey,
    domain::{ApiSurface, NewPrediction, Prediction, PredictionId, WebhookEvent, WebhookSecret, WebhookUrl},
    links::Links,
    messages::{Announcement, PredictionChanged},
    store::{Account, Store, webhook_attempts::WebhookAttempt},
};
use serde_json::json;
use testkit::{TestContext, eventually};
use tokio_util::sync::CancellationToken;

pub struct Fixture {
    pub store: Store,
    pub bus: Bus,
    pub vars: HashMap<String, String>,
    pub account: Account,
    pub secret: WebhookSecret,
    pub master: MasterKey,
    shutdown: CancellationToken,
}

impl Fixture {
    pub async fn new(extra: &[(&str, &str)]) -> Self {
        let ctx = TestContext::new();
        let mut settings = vec![
            ("NOTIFIER_ALLOW_PRIVATE_TARGETS", "true"),
            ("NOTIFIER_RETRY_SCHEDULE", "0.2,0.2,0.2"),
            ("NOTIFIER_SHUTDOWN_GRACE_SECONDS", "1"),
            ("NOTIFIER_SECRET_CACHE_SECONDS", "0.1"),
        ];
        settings.extend_from_slice(extra);
        let vars = ctx.env_vars(&settings);
        let store = ctx.store().await;
        store.ensure_indexes().await.expect("indexes");
        let master = MasterKey::from_base64(&ctx.master_key).expect("master key");
        let (account, secret) = Account::new("test", &master);
        store.accounts().insert(&account).await.expect("account");
        let bus = ctx.bus().await;
        Self { store, bus, vars, account, secret, master, shutdown: CancellationToken::new() }
    }

    pub fn start_notifier(&self) {
        self.start_stoppable_notifier();
    }

    /// Starts a notifier; returns what stops it and its task.
    pub fn start_stoppable_notifier(&self) -> (CancellationToken, tokio::task::JoinHandle<()>) {
        let config =
            notifier::config::NotifierConfig::from_env(&Env::from_fn(|k| self.vars.get(k).cloned())).expect("config");
        let token = self.shutdown.child_token();
        let stop = token.clone();
        let task = tokio::spawn(async move { notifier::run(config, token).await.expect("notifier runs") });
        (stop, task)
    }

    /// A prediction of this account with its webhook at `url`.
    pub fn prediction(&self, url: &str, filter: Option<Vec<WebhookEvent>>) -> Prediction {
        Prediction::new_starting(NewPrediction {
            account_id: self.account.id.clone(),
            model: "demo/echo".parse().expect("model"),
            version: "v".into(),
            capability: "text-generation".into(),
            input: json!({"prompt": "x"}),
            model_input: json!({"prompt": "x"}),
            webhook: Some(WebhookUrl::parse(url).expect("url")),
            webhook_events_filter: filter,
            surface: ApiSurface::Canonical,
        })
    }

    /// A prediction of another account, `account`, with its webhook at `url` (all events).
    pub fn prediction_of(&self, account: &Account, url: &str) -> Prediction {
        let mut p = self.prediction(url, None);
        p.account_id = account.id.clone();
        p
    }

    /// Another account, with a signing secret of its own.
    pub async fn another_account(&self, name: &str) -> Account {
        let (account, _) = Account::new(name, &self.master);
        self.store.accounts().insert(&account).await.expect("account");
        account
    }

    /// Publishes `event` for `p` as it stands, with its sequence set to `seq`, as the writer of
    /// the change announces it.
    pub async fn publish(&self, p: &Prediction, event: WebhookEvent, seq: i64) {
        self.announce(p, event, seq, Announcement::First).await;
    }

    /// Publishes `event` for `p` with its sequence set to `seq`, announced as `announcement`.
    pub async fn announce(&self, p: &Prediction, event: WebhookEvent, seq: i64, announcement: Announcement) {
        let mut p = p.clone();
        p.seq = seq;
        let links = Links::new("http://api.test", self.master.clone());
        self.bus.publish_event(PredictionChanged::of(&p, event, &links), announcement).await.expect("publish event");
    }

    pub async fn attempts_until(
        &self,
        id: &PredictionId,
        limit: Duration,
        done: impl Fn(&[WebhookAttempt]) -> bool,
    ) -> Vec<WebhookAttempt> {
        eventually(limit, || async {
            let attempts = self.store.webhook_attempts().for_prediction(id).await.ok()?;
            done(&attempts).then_some(attempts)
        })
        .await
        .unwrap_or_else(|| panic!("the attempts for {id} did not reach the expected state within {limit:?}"))
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}
