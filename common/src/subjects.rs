//! Names on NATS: streams, subjects and durable consumers, all under one prefix so that several
//! deployments (or parallel tests) can share a server without seeing each other.
//!
//! | what | name (prefix `ps`) |
//! |---|---|
//! | jobs stream (work queue) | `PS_JOBS`, subjects `ps.jobs.<owner>.<model>.<version>.<pool, any or train>.<account id>[.<high or low>].<prediction id>` (no level token for `normal`; `train` for a training's job, which the model's trainers take) |
//! | status events stream | `PS_EVENTS`, subjects `ps.events.<prediction id>` |
//! | cancel broadcast (core NATS) | `ps.cancel.<prediction id>` |
//! | runner consumer of one model, version, pool, account and priority (a lane) | `ps_runner_<len(owner)>_<owner>_<model>_<version key>_<pool or any>_<account id>[_high or _low]` |
//! | notifier consumer | `ps_notifier` |
//! | rate-limit counters (counter stream) | `PS_RATELIMIT`, subjects `ps.ratelimit.<key id>.<minute>` |
//! | signing secret rotated (core NATS) | `ps.secrets.rotated` |
//! | hardware prices changed (core NATS) | `ps.prices.changed` |
//! | running slots of capped accounts (KV bucket) | `ps_account_slots`, keys `<account id>.<slot>` |
//!
//! An owner or model name's `.` (`flux-1.1-pro`) is written `~` in subjects and consumer names
//! ([`token`]): a `.` would split the token, and no name holds a `~`. A model whose consumers'
//! base `ps_runner_<len(owner)>_<owner>_<model>` would pass [`MAX_CONSUMER_BASE`] characters (names
//! past 64 characters) has `ps_runner_h<24 hex digits of the SHA-256 of owner/name>` instead.

use sha2::Digest;

use crate::domain::{
    AccountId, ModelRef, PredictionId, Priority, Route,
    route::{ANY_POOL, Pool},
};

/// A name as a subject token, or in a consumer name: each `.` written `~`.
pub fn token(name: &str) -> std::borrow::Cow<'_, str> {
    if name.contains('.') { std::borrow::Cow::Owned(name.replace('.', "~")) } else { std::borrow::Cow::Borrowed(name) }
}

/// The longest a model's consumer name may be before its digest stands for its names: a lane's
/// consumer adds about 80 characters to it, and a consumer's name is a file name on the
/// server's disk (255 at most).
pub const MAX_CONSUMER_BASE: usize = 150;

/// The subject token of a level: none for `normal`.
pub(crate) fn level_token(level: Priority) -> Option<&'static str> {
    match level {
        Priority::Normal => None,
        other => Some(other.as_str()),
    }
}

/// The names of one deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subjects {
    prefix: String,
}

/// The error of an unusable prefix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("NATS_PREFIX must be 1-32 characters of a-z, 0-9 and '_'")]
pub struct InvalidPrefix;

impl Subjects {
    /// Names under `prefix` (1-32 characters of `a-z`, `0-9`, `_`).
    pub fn new(prefix: &str) -> Result<Self, InvalidPrefix> {
        let ok = !prefix.is_empty()
            && prefix.len() <= 32
            && prefix.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        ok.then(|| Self { prefix: prefix.to_owned() }).ok_or(InvalidPrefix)
    }

    /// The work-queue stream of jobs.
    pub fn jobs_stream(&self) -> String {
        format!("{}_JOBS", self.prefix.to_uppercase())
    }

    /// Every job subject (the jobs stream's subjects).
    pub fn all_jobs(&self) -> String {
        format!("{}.jobs.>", self.prefix)
    }

    /// The subject of one prediction's job. The route takes it to runners of its version (and
    /// pool); the account gives each account its own lane (consumer), so one account's backlog
    /// cannot hold up another's jobs; a `high` or `low` level gives it a lane of that level
    /// (the runners start higher levels first); the id lets anyone ask the work queue whether
    /// that job is still waiting (the reconciler does).
    pub fn job(
        &self,
        model: &ModelRef,
        route: &Route,
        account: &AccountId,
        level: Priority,
        id: &PredictionId,
    ) -> String {
        let pool = route.pool.as_ref().map_or(ANY_POOL, Pool::as_str);
        let level = level_token(level).map(|t| format!("{t}.")).unwrap_or_default();
        format!(
            "{}.jobs.{}.{}.{}.{pool}.{account}.{level}{id}",
            self.prefix,
            token(model.owner()),
            token(model.name()),
            route.version
        )
    }

    /// Every job subject of one model, of every version and account (the runners' doorbell,
    /// and the filter that finds the lanes with jobs waiting).
    pub fn model_jobs(&self, model: &ModelRef) -> String {
        format!("{}.jobs.{}.{}.>", self.prefix, token(model.owner()), token(model.name()))
    }

    /// The base of the durable consumers of `model`'s lanes (see [`crate::lane::Lane::consumer`]).
    pub fn runner_consumer(&self, model: &ModelRef) -> String {
        // The owner's length makes the name unambiguous although '_' may occur in both parts.
        let (owner, name) = (token(model.owner()), token(model.name()));
        let named = format!("{}_runner_{}_{owner}_{name}", self.prefix, owner.len());
        if named.len() <= MAX_CONSUMER_BASE {
            return named;
        }
        // A long name (past 64 characters a part, since names may have 100): its digest, so a
        // lane's consumer, which adds a version, a pool and an account, stays a file name.
        let digest = crate::domain::api_key::hex(&sha2::Sha256::digest(model.to_string().as_bytes()));
        format!("{}_runner_h{}", self.prefix, &digest[..24])
    }

    /// The stream of status events.
    pub fn events_stream(&self) -> String {
        format!("{}_EVENTS", self.prefix.to_uppercase())
    }

    /// Every status event subject (the events stream's subjects).
    pub fn all_events(&self) -> String {
        format!("{}.events.>", self.prefix)
    }

    /// The subject of one prediction's status events.
    pub fn events(&self, id: &PredictionId) -> String {
        format!("{}.events.{id}", self.prefix)
    }

    /// The durable consumer that every notifier replica shares.
    pub fn notifier_consumer(&self) -> String {
        format!("{}_notifier", self.prefix)
    }

    /// The stream of rate-limit counters.
    pub fn rate_limit_stream(&self) -> String {
        format!("{}_RATELIMIT", self.prefix.to_uppercase())
    }

    /// Every rate-limit counter subject.
    pub fn all_rate_limits(&self) -> String {
        format!("{}.ratelimit.>", self.prefix)
    }

    /// A rate counter in one minute (minutes since the Unix epoch): `counter` is an API key's
    /// id (its requests) or another counter's name (failed console sign-ins of a client), one
    /// subject token.
    pub fn rate_limit(&self, counter: &str, minute: i64) -> String {
        format!("{}.ratelimit.{counter}.{minute}", self.prefix)
    }

    /// The core-NATS subject on which a cancel of one prediction is broadcast to runners.
    pub fn cancel(&self, id: &PredictionId) -> String {
        format!("{}.cancel.{id}", self.prefix)
    }

    /// The core-NATS subject on which a rotation of an account's signing secret is announced
    /// to every notifier.
    pub fn secret_rotations(&self) -> String {
        format!("{}.secrets.rotated", self.prefix)
    }

    /// The core-NATS subject on which a deactivated API key is announced to every api replica.
    pub fn key_deactivations(&self) -> String {
        format!("{}.keys.deactivated", self.prefix)
    }

    /// The core-NATS subject on which a change of the hardware prices is announced to every
    /// runner.
    pub fn prices_changed(&self) -> String {
        format!("{}.prices.changed", self.prefix)
    }

    /// The events-stream subject of webhook resends (inside [`Self::all_events`], outside
    /// every prediction's own [`Self::events`]).
    pub fn resends(&self, id: &PredictionId) -> String {
        format!("{}.events.resend.{id}", self.prefix)
    }

    /// The key-value bucket of the running slots of accounts with a concurrency cap (see the
    /// runner's `account_slots`).
    pub fn account_slots_bucket(&self) -> String {
        format!("{}_account_slots", self.prefix)
    }

    /// The core-NATS subject on which runner `runner_id` answers whether it still runs a
    /// prediction (a [`crate::messages::HolderQuery`]). Characters a subject token cannot hold
    /// (`.`, `*`, `>`, white space: a host name with dots, say) become `_`.
    pub fn runner_inquiries(&self, runner_id: &str) -> String {
        let token: String = runner_id
            .chars()
            .map(|c| if matches!(c, '.' | '*' | '>') || c.is_whitespace() { '_' } else { c })
            .collect();
        format!("{}.runners.{token}.holds", self.prefix)
    }

    /// Every cancel subject.
    pub fn all_cancels(&self) -> String {
        format!("{}.cancel.*", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_documented_table() {
        let s = Subjects::new("ps").expect("valid");
        let m: ModelRef = "demo/echo".parse().expect("valid");
        assert_eq!(s.jobs_stream(), "PS_JOBS");
        assert_eq!(s.account_slots_bucket(), "ps_account_slots");
        let id = PredictionId::parse("aaaaaaaaaaaaaaaaaaaaaaaaaa").expect("id");
        let account = AccountId::generate();
        let any = Route { version: "v1".into(), pool: None };
        let gpu = Route { version: "v1".into(), pool: Some(Pool::parse("gpu").expect("pool")) };
        let normal = Priority::Normal;
        assert_eq!(s.job(&m, &any, &account, normal, &id), format!("ps.jobs.demo.echo.v1.any.{account}.{id}"));
        assert_eq!(s.job(&m, &gpu, &account, normal, &id), format!("ps.jobs.demo.echo.v1.gpu.{account}.{id}"));
        assert_eq!(s.model_jobs(&m), "ps.jobs.demo.echo.>");
        assert_eq!(
            s.job(&m, &gpu, &account, Priority::High, &id),
            format!("ps.jobs.demo.echo.v1.gpu.{account}.high.{id}")
        );
        let train = Route { version: "v1".into(), pool: Some(Pool::trainers()) };
        assert_eq!(s.job(&m, &train, &account, normal, &id), format!("ps.jobs.demo.echo.v1.train.{account}.{id}"));
        assert_eq!(s.events_stream(), "PS_EVENTS");
    }

    #[test]
    fn consumer_names_of_different_models_never_collide() {
        let s = Subjects::new("ps").expect("valid");
        let a: ModelRef = "a_b/c".parse().expect("valid");
        let b: ModelRef = "a/b_c".parse().expect("valid");
        assert_ne!(s.runner_consumer(&a), s.runner_consumer(&b));
    }

    #[test]
    fn a_dotted_name_is_one_token_and_a_long_one_a_short_consumer() {
        let s = Subjects::new("ps").expect("valid");
        let dotted: ModelRef = "black-forest-labs/flux-1.1-pro".parse().expect("valid");
        let id = PredictionId::parse("aaaaaaaaaaaaaaaaaaaaaaaaaa").expect("id");
        let (account, any) = (AccountId::generate(), Route { version: "v1".into(), pool: None });
        let subject = s.job(&dotted, &any, &account, Priority::Normal, &id);
        assert_eq!(subject, format!("ps.jobs.black-forest-labs.flux-1~1-pro.v1.any.{account}.{id}"));
        assert_eq!(s.model_jobs(&dotted), "ps.jobs.black-forest-labs.flux-1~1-pro.>");
        let consumer = s.runner_consumer(&dotted);
        assert!(!consumer.contains('.'), "{consumer}");
        let undotted: ModelRef = "black-forest-labs/flux-1_1-pro".parse().expect("valid");
        assert_ne!(s.runner_consumer(&undotted), consumer, "'.' and '_' stay apart");
        let long: ModelRef = format!("{}/{}", "o".repeat(100), "n".repeat(100)).parse().expect("valid");
        let other: ModelRef = format!("{}/{}m", "o".repeat(100), "n".repeat(99)).parse().expect("valid");
        assert!(s.runner_consumer(&long).len() <= MAX_CONSUMER_BASE, "{}", s.runner_consumer(&long));
        assert_ne!(s.runner_consumer(&long), s.runner_consumer(&other));
        assert_eq!(s.runner_consumer(&"demo/echo".parse().expect("valid")), "ps_runner_4_demo_echo");
    }

    #[test]
    fn prefixes_with_nats_wildcards_or_dots_are_rejected() {
        for bad in ["", "a.b", "a*", "A", "a>b", &"x".repeat(33)] {
            assert!(Subjects::new(bad).is_err(), "{bad:?}");
        }
    }
}
