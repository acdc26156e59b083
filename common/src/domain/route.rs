//! Where a job may run: the version of its model, and the hardware pool when a deployment
//! names one. A route is part of the job's subject on the jobs stream (see
//! [`crate::subjects`]), so runners take only the jobs of the versions and the pool they serve:
//! routing happens in JetStream's subject filters, never in a process's memory.

use serde::{Deserialize, Serialize};

/// A hardware pool's name: 1 to 32 characters of `a-z`, `0-9` and `-`, starting with a
/// letter; `any` (a job for any pool) and `train` (a training's job, see [`TRAINER_POOL`]) are
/// reserved.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Pool(String);

/// The pool every runner declares unless told otherwise.
pub const DEFAULT_POOL: &str = "cpu";
/// The subject token of a job any pool may run.
pub const ANY_POOL: &str = "any";
/// The subject token of a training's job: the runners that serve a trainer of its model at
/// its version take it, whatever their pool (`RUNNER_COG_TRAIN`).
pub const TRAINER_POOL: &str = "train";

/// Why a pool name is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a hardware pool is 1 to 32 characters of a-z, 0-9 and '-', starting with a letter, and not 'any' or 'train'")]
pub struct InvalidPool;

impl Pool {
    /// Parses a pool name.
    pub fn parse(text: &str) -> Result<Self, InvalidPool> {
        let ok = (1..=32).contains(&text.len())
            && text.starts_with(|c: char| c.is_ascii_lowercase())
            && text.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && text != ANY_POOL
            && text != TRAINER_POOL;
        ok.then(|| Self(text.to_owned())).ok_or(InvalidPool)
    }

    /// The pool of a job subject: a pool's name, or [`TRAINER_POOL`].
    pub fn from_token(token: &str) -> Result<Self, InvalidPool> {
        if token == TRAINER_POOL { Ok(Self::trainers()) } else { Self::parse(token) }
    }

    /// The trainers of a model ([`TRAINER_POOL`]): where a training's job goes.
    pub fn trainers() -> Self {
        Self(TRAINER_POOL.to_owned())
    }

    /// Whether this is [`Self::trainers`].
    pub fn is_trainers(&self) -> bool {
        self.0 == TRAINER_POOL
    }

    /// The default pool, `cpu`.
    pub fn default_pool() -> Self {
        Self(DEFAULT_POOL.to_owned())
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Pool {
    type Error = InvalidPool;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<Pool> for String {
    fn from(value: Pool) -> Self {
        value.0
    }
}

impl std::fmt::Display for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Whether `text` can be a version id: 1 to 64 characters of `a-z`, `A-Z`, `0-9` (a digest's
/// hex, or an operator's name such as `v2`), so it is one subject token.
pub fn is_version_id(text: &str) -> bool {
    (1..=64).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// Where one job may run.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Route {
    /// The model version that must run it.
    pub version: String,
    /// The pool whose runners may run it (`None`: any).
    pub pool: Option<Pool>,
}

impl Route {
    /// The route of a job of `kind` on `version`, pinned to `hardware` if given: a training
    /// runs on the trainers' pool, a prediction on its hardware's (any when none).
    pub fn of_job(kind: super::JobKind, version: String, hardware: Option<Pool>) -> Self {
        let pool = match kind {
            super::JobKind::Prediction => hardware,
            super::JobKind::Training => Some(Pool::trainers()),
        };
        Self { version, pool }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_names_are_subject_tokens_and_any_is_reserved() {
        for good in ["cpu", "gpu-a100", "t4", "a"] {
            assert!(Pool::parse(good).is_ok(), "{good}");
        }
        for bad in ["", "any", "train", "GPU", "1gpu", "gpu.a100", "gpu_a", "-x", &"a".repeat(33)] {
            assert!(Pool::parse(bad).is_err(), "{bad:?}");
        }
        assert!(serde_json::from_str::<Pool>("\"any\"").is_err());
    }

    #[test]
    fn the_trainers_token_is_a_pool_of_subjects_only() {
        assert!(Pool::from_token("train").is_ok_and(|p| p.is_trainers()));
        assert!(Pool::from_token("gpu").is_ok_and(|p| !p.is_trainers()));
        assert!(Pool::from_token("any").is_err());
    }

    #[test]
    fn version_ids_are_one_token() {
        assert!(is_version_id("v2") && is_version_id(&"a".repeat(64)));
        assert!(!is_version_id("") && !is_version_id("sha256:abc") && !is_version_id(&"a".repeat(65)));
    }
}
