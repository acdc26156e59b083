//! The integration-test harness: every test gets MongoDB and NATS, and its own database name
//! and NATS prefix, so tests run in parallel without sharing state.
//!
//! Where the servers come from, decided once per test binary:
//! 1. `MONGODB_URI` / `NATS_URL` when set (CI and `deploy/local/test` set them);
//! 2. else containers (`mongo:7`, `nats:2 -js`) through testcontainers when a Docker engine
//!    answers;
//! 3. else the local stand-ins (mongo-java-server, nats-server from PyPI), installed by
//!    `deploy/local/install` and stopped when the test process exits.
//!
//! An S3-compatible store, for the tests that put files there ([`TestContext::s3_env`]):
//! `S3_ENDPOINT` with `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` when set, else S3Proxy
//! (the stand-in that `deploy/local/up` also starts), started on first use. Each test gets a
//! bucket of its own. `TEST_FILES_STORE=s3` makes every test's files go there
//! ([`TestContext::files_env`]): the test command runs the file tests once per store.
//!
//! Also here:
//! - [`cog`]: a Cog model server.
//! - [`ports`]: free loopback ports for servers a test starts, below the ephemeral range.
//! - [`proxy`]: a TCP proxy a test can cut, to take a server away from a service without stopping the shared
//!   server.
//! - [`standins`]: the local stand-ins, started as child processes of the test binary.
//! - [`telemetry`]: the tests' telemetry.

pub mod cog;
mod containers;
pub mod ports;
pub mod proxy;
mod standins;
pub mod telemetry;

pub use ports::{free_addr, free_port};
pub use standins::{MongoStandin, installed, nats_server};

use std::{collections::HashMap, sync::OnceLock};

use common::{
    bus::Bus,
    config::{CommonConfig, Env},
    crypto::MasterKey,
    domain::ids::random_base32,
    store::{Store, commands::Monitoring},
};

/// Where the servers of this test run are.
#[derive(Debug)]
pub struct Infra {
    /// MongoDB connection string.
    pub mongodb_uri: String,
    /// NATS address.
    pub nats_url: String,
}

static INFRA: OnceLock<Infra> = OnceLock::new();

/// Where the S3-compatible store of this test run is.
#[derive(Debug)]
pub struct S3Infra {
    /// Its endpoint.
    pub endpoint: String,
    /// The access key id.
    pub access_key_id: String,
    /// The secret access key.
    pub secret_access_key: String,
}

static S3: OnceLock<S3Infra> = OnceLock::new();

/// The S3-compatible store, started on first use.
pub fn s3() -> &'static S3Infra {
    S3.get_or_init(|| {
        let from_env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        match from_env("S3_ENDPOINT") {
            Some(endpoint) => S3Infra {
                endpoint,
                access_key_id: from_env("AWS_ACCESS_KEY_ID").expect("AWS_ACCESS_KEY_ID beside S3_ENDPOINT"),
                secret_access_key: from_env("AWS_SECRET_ACCESS_KEY").expect("AWS_SECRET_ACCESS_KEY beside S3_ENDPOINT"),
            },
            None => S3Infra {
                endpoint: standins::s3(),
                access_key_id: "local-identity".into(),
                secret_access_key: "local-credential".into(),
            },
        }
    })
}

/// The servers, started on first use.
pub fn infra() -> &'static Infra {
    INFRA.get_or_init(|| {
        let from_env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let docker = containers::docker_available();
        let mongodb_uri =
            from_env("MONGODB_URI").unwrap_or_else(|| if docker { containers::mongo() } else { standins::mongo() });
        let nats_url =
            from_env("NATS_URL").unwrap_or_else(|| if docker { containers::nats() } else { standins::nats_server() });
        Infra { mongodb_uri, nats_url }
    })
}

/// One test's private slice of the servers.
#[derive(Debug, Clone)]
pub struct TestContext {
    /// Its own database.
    pub database: String,
    /// Its own NATS prefix (streams, subjects, consumers).
    pub prefix: String,
    /// A master key for this test.
    pub master_key: String,
    /// MongoDB connection string.
    pub mongodb_uri: String,
    /// NATS address.
    pub nats_url: String,
}

impl Default for TestContext {
    fn default() -> Self {
        Self::new()
    }
}

impl TestContext {
    /// A fresh context with unique names.
    pub fn new() -> Self {
        crate::telemetry::init_for_tests();
        let infra = infra();
        let unique = random_base32(12);
        Self {
            database: format!("test_{unique}"),
            prefix: format!("t{unique}"),
            master_key: MasterKey::generate_base64(),
            mongodb_uri: infra.mongodb_uri.clone(),
            nats_url: infra.nats_url.clone(),
        }
    }

    /// The environment a service of this test reads its configuration from, plus `extra`.
    pub fn env_vars(&self, extra: &[(&str, &str)]) -> HashMap<String, String> {
        let mut vars: HashMap<String, String> = [
            ("MONGODB_URI", self.mongodb_uri.as_str()),
            ("MONGODB_DATABASE", self.database.as_str()),
            ("NATS_URL", self.nats_url.as_str()),
            ("NATS_PREFIX", self.prefix.as_str()),
            ("MASTER_KEY", self.master_key.as_str()),
            // Tests read the command counts (and pay for them).
            ("MONGODB_COMMAND_METRICS", "true"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        vars.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        vars
    }

    /// Settings that put this test's new files in a bucket of its own on the S3 store.
    pub fn s3_env(&self) -> Vec<(&'static str, String)> {
        let s3 = s3();
        vec![
            ("FILES_STORE", "s3".into()),
            ("S3_BUCKET", format!("t-{}", self.prefix.to_lowercase())),
            ("S3_ENDPOINT", s3.endpoint.clone()),
            ("S3_REGION", "us-east-1".into()),
            ("S3_FORCE_PATH_STYLE", "true".into()),
            // S3Proxy joins a multipart upload's parts by copying them: files of declared
            // length go in one request, as `deploy/local/up` has them.
            ("S3_SINGLE_PUT_MAX_BYTES", common::files::s3::SINGLE_PUT_LIMIT.to_string()),
            ("AWS_ACCESS_KEY_ID", s3.access_key_id.clone()),
            ("AWS_SECRET_ACCESS_KEY", s3.secret_access_key.clone()),
        ]
    }

    /// The file store of this run's tests: [`Self::s3_env`] when `TEST_FILES_STORE=s3`, else
    /// nothing (GridFS, the default).
    pub fn files_env(&self) -> Vec<(&'static str, String)> {
        match std::env::var("TEST_FILES_STORE").as_deref() {
            Ok("s3") => self.s3_env(),
            Ok("gridfs") | Ok("") | Err(_) => Vec::new(),
            Ok(other) => panic!("TEST_FILES_STORE={other}: use gridfs or s3"),
        }
    }

    /// The shared configuration of this test's services.
    pub fn common_config(&self, extra: &[(&str, &str)]) -> CommonConfig {
        let vars = self.env_vars(extra);
        CommonConfig::from_env(&Env::from_fn(|k| vars.get(k).cloned())).expect("test configuration is valid")
    }

    /// A store on this test's database.
    pub async fn store(&self) -> Store {
        Store::connect(&self.mongodb_uri, &self.database, "testkit", Monitoring::Counted)
            .await
            .expect("connect to MongoDB")
    }

    /// A store on this test's database whose client names itself after this test (its
    /// `appName`), so that a failpoint set with [`Self::fail_commands`] fails its commands and
    /// no other test's.
    pub async fn named_store(&self) -> Store {
        Store::connect(&self.mongodb_uri, &self.database, &self.prefix, Monitoring::Counted)
            .await
            .expect("connect to MongoDB")
    }

    /// Fails the next `times` commands named in `commands` of this test's named clients, as
    /// `data` says (`errorCode`, `closeConnection`, `writeConcernError`, `errorLabels`): the
    /// `failCommand` failpoint of mongod's test commands (`enableTestCommands=1`, which the
    /// test container and the stand-in both take).
    pub async fn fail_commands(&self, store: &Store, commands: &[&str], mut data: bson::Document, times: i32) {
        data.insert("failCommands", commands.iter().map(|c| bson::Bson::from(*c)).collect::<Vec<_>>());
        data.insert("appName", self.prefix.as_str());
        let admin = store.database().client().database("admin");
        let command = bson::doc! { "configureFailPoint": "failCommand", "mode": { "times": times }, "data": data };
        admin.run_command(command).await.expect("the server takes the failCommand failpoint");
    }

    /// A bus under this test's prefix, with the streams created.
    pub async fn bus(&self) -> Bus {
        let cfg = self.common_config(&[]);
        let bus = Bus::connect(&self.nats_url, cfg.subjects, "testkit").await.expect("connect to NATS");
        bus.ensure_streams().await.expect("create streams");
        bus
    }
}

/// `host:port` of a `scheme://host:port[/...]` URL.
pub fn host_port(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    rest.split(['/', '?', ',']).next().unwrap_or(rest).to_owned()
}

/// Polls `check` every 50 ms until it returns `Some`, for at most `limit`.
pub async fn eventually<T, F, Fut>(limit: std::time::Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(v) = check().await {
            return Some(v);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::host_port;

    #[test]
    fn host_port_strips_scheme_credentials_and_path() {
        assert_eq!(host_port("mongodb://127.0.0.1:27017"), "127.0.0.1:27017");
        assert_eq!(host_port("mongodb://u:p@db:1/x?y=1"), "db:1");
        assert_eq!(host_port("nats://127.0.0.1:4222"), "127.0.0.1:4222");
    }
}
