//! A queue lane: what runners take turns between, one model's jobs of one route (version and
//! pool), one account and one priority level. The one type of it everywhere: its jobs'
//! subjects and durable consumer on NATS ([`Lane::subject`], [`Lane::from_subject`],
//! [`Lane::consumer`]; the naming table is [`crate::subjects`]'s) and its ticket counters in
//! MongoDB ([`Lane::store_key`], [`crate::store::queue_lanes`]).

use sha2::{Digest, Sha256};

use crate::{
    domain::{
        AccountId, JobKind, ModelRef, Prediction, Priority, Route,
        route::{ANY_POOL, Pool},
    },
    subjects::{Subjects, level_token},
};

/// One lane (see the module's doc).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Lane {
    /// The model.
    pub model: ModelRef,
    /// The version (and pool) its jobs must run on.
    pub route: Route,
    /// The account.
    pub account: AccountId,
    /// The priority its jobs were created with.
    pub level: Priority,
}

impl Lane {
    /// The lane of `model`'s jobs on `route` of `account` at `level`.
    pub fn new(model: &ModelRef, route: &Route, account: &AccountId, level: Priority) -> Self {
        Self { model: model.clone(), route: route.clone(), account: account.clone(), level }
    }

    /// The lane `prediction` waits in.
    pub fn of(prediction: &Prediction) -> Self {
        Self::new(&prediction.model, &prediction.route(), &prediction.account_id, prediction.priority)
    }

    /// The same lane at `level`.
    pub fn at(self, level: Priority) -> Self {
        Self { level, ..self }
    }

    /// What its jobs are: trainings on the trainers' route, else predictions.
    pub fn kind(&self) -> JobKind {
        match self.route.pool.as_ref() {
            Some(pool) if pool.is_trainers() => JobKind::Training,
            _ => JobKind::Prediction,
        }
    }

    /// Its route as its counters store it: version and pool (`any` for none), `|` between.
    pub fn route_key(&self) -> String {
        format!("{}|{}", self.route.version, self.route.pool.as_ref().map_or(ANY_POOL, Pool::as_str))
    }

    /// The `_id` of its ticket counters in `queue_lanes`: model, route and account, `|`
    /// between, and the level after another `|` unless `normal` (so a `normal` lane keeps the
    /// counters of before levels).
    pub fn store_key(&self) -> String {
        let base = format!("{}|{}|{}", self.model, self.route_key(), self.account);
        match self.level {
            Priority::Normal => base,
            other => format!("{base}|{other}"),
        }
    }

    /// The job subjects of the lane: the filter of its consumer.
    pub fn subject(&self, subjects: &Subjects) -> String {
        let base = subjects.model_jobs(&self.model);
        let base = base.trim_end_matches(".>");
        let pool = self.route.pool.as_ref().map_or(ANY_POOL, Pool::as_str);
        let level = level_token(self.level).map(|t| format!("{t}.")).unwrap_or_default();
        format!("{base}.{}.{pool}.{}.{level}*", self.route.version, self.account)
    }

    /// The lane of a job subject of `model` (`None` for a subject of no known format).
    pub fn from_subject(subjects: &Subjects, model: &ModelRef, subject: &str) -> Option<Self> {
        let base = subjects.model_jobs(model);
        let rest = subject.strip_prefix(base.trim_end_matches('>'))?;
        let tokens: Vec<&str> = rest.split('.').collect();
        let routed = |version: &str, pool: &str, account: &str| {
            let pool = if pool == ANY_POOL { None } else { Some(Pool::from_token(pool).ok()?) };
            let route = Route { version: version.to_owned(), pool };
            Some(Self::new(model, &route, &AccountId::parse(account).ok()?, Priority::Normal))
        };
        match tokens.as_slice() {
            [version, pool, account, _id] => routed(version, pool, account),
            [version, pool, account, level, _id] => {
                // `normal` has no token: a subject naming it is of no known format.
                let level = [Priority::High, Priority::Low].into_iter().find(|l| l.as_str() == *level)?;
                Some(routed(version, pool, account)?.at(level))
            }
            _ => None,
        }
    }

    /// The durable consumer of the lane, which every runner serving it shares.
    pub fn consumer(&self, subjects: &Subjects) -> String {
        let base = subjects.runner_consumer(&self.model);
        // A version id may be 64 characters; its digest's first 12 keep the name short.
        let key = crate::domain::api_key::hex(&Sha256::digest(self.route.version.as_bytes()))[..12].to_owned();
        let pool = self.route.pool.as_ref().map_or(ANY_POOL, Pool::as_str);
        let level = level_token(self.level).map(|t| format!("_{t}")).unwrap_or_default();
        format!("{base}_{key}_{pool}_{}{level}", self.account)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::PredictionId;

    #[test]
    fn a_lanes_subjects_consumer_and_key_follow_the_documented_table() {
        let s = Subjects::new("ps").expect("valid");
        let m: ModelRef = "demo/echo".parse().expect("valid");
        let id = PredictionId::parse("aaaaaaaaaaaaaaaaaaaaaaaaaa").expect("id");
        let account = AccountId::generate();
        let any = Route { version: "v1".into(), pool: None };
        let gpu = Route { version: "v1".into(), pool: Some(Pool::parse("gpu").expect("pool")) };
        let normal = Priority::Normal;
        let routed = Lane::new(&m, &gpu, &account, normal);
        assert_eq!(routed.subject(&s), format!("ps.jobs.demo.echo.v1.gpu.{account}.*"));
        assert_eq!(Lane::from_subject(&s, &m, &s.job(&m, &gpu, &account, normal, &id)), Some(routed.clone()));
        let key = &crate::domain::api_key::hex(&Sha256::digest(b"v1"))[..12];
        assert_eq!(routed.consumer(&s), format!("ps_runner_4_demo_echo_{key}_gpu_{account}"));
        assert_eq!(routed.store_key(), format!("demo/echo|v1|gpu|{account}"));
        assert_eq!(Lane::new(&m, &any, &account, normal).store_key(), format!("demo/echo|v1|any|{account}"));
        // The levels above and below normal: a token before the id, a suffix on the consumer
        // and on the counters' key.
        let high = routed.clone().at(Priority::High);
        assert_eq!(high.subject(&s), format!("ps.jobs.demo.echo.v1.gpu.{account}.high.*"));
        assert_eq!(
            Lane::from_subject(&s, &m, &s.job(&m, &gpu, &account, Priority::Low, &id)),
            Some(routed.clone().at(Priority::Low))
        );
        assert_eq!(high.consumer(&s), format!("ps_runner_4_demo_echo_{key}_gpu_{account}_high"));
        assert_eq!(high.store_key(), format!("demo/echo|v1|gpu|{account}|high"));
        // A training's job: the trainers' token where the pool goes.
        let train = Route { version: "v1".into(), pool: Some(Pool::trainers()) };
        let training = Lane::from_subject(&s, &m, &s.job(&m, &train, &account, normal, &id)).expect("a lane");
        assert_eq!((training.clone(), training.kind()), (Lane::new(&m, &train, &account, normal), JobKind::Training));
        let normal_token = format!("ps.jobs.demo.echo.v1.gpu.{account}.normal.{id}");
        assert_eq!(Lane::from_subject(&s, &m, &normal_token), None, "normal has no token");
        // No other format: a subject without a route, or without an account, is of none.
        assert_eq!(Lane::from_subject(&s, &m, &format!("ps.jobs.demo.echo.{account}.{id}")), None);
        assert_eq!(Lane::from_subject(&s, &m, &format!("ps.jobs.demo.echo.{id}")), None);
        let sleep: ModelRef = "demo/sleep".parse().expect("valid");
        assert_eq!(Lane::from_subject(&s, &sleep, &s.job(&m, &any, &account, normal, &id)), None);
        assert_eq!(Lane::from_subject(&s, &m, "ps.jobs.demo.echo.a.b.c"), None, "no format of three tokens");
    }
}
