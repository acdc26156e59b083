//! MongoDB storage: one module per collection that two or more services use, each naming the
//! service that writes it. A collection only one service uses is typed in that service's own
//! `store` module: the api's `api_keys`, `collections`, `console_sessions` and
//! `idempotency_keys`, the notifier's `webhook_retries` and `webhook_targets`. Their indexes
//! are here with the others', since the index set is one migration step ([`migrations`])
//! whichever service runs it.
//!
//! | collection | module | written by |
//! |---|---|---|
//! | `accounts` | [`accounts`] | api (admin bootstrap, secret rotation) |
//! | `predictions` | [`predictions`] | api (create, cancel of `starting`), runner (every later change) |
//! | `models` | [`models`] | runner (registration at start) |
//! | `model_versions` | [`model_versions`] | runner (registration at start) |
//! | `owned_models` | [`owned_models`] | api (an account's models: create, delete) |
//! | `deployments` | [`deployments`] | api (create, update, delete) |
//! | `runners` | [`runners`] | runner (its pool and versions, every few seconds while it lives) |
//! | `webhook_attempts` | [`webhook_attempts`] | notifier |
//! | `queue_lanes` | [`queue_lanes`] | api (tickets at create, cancel of `starting`), runner (starts, failures while waiting) |
//! | `dead_letters` | [`dead_letters`] | runner, notifier (undecodable messages) |
//! | `file_records` | [`files`] | api (uploads, deletes), runner (outputs, retention) |
//! | `usage_totals` | [`usage`] | api (cancels), runner (results, failures), through [`crate::usage`] |
//! | `unfinished_uploads` | [`unfinished_uploads`] | api, runner (through [`crate::files::Files`]) |
//! | `hardware_prices` | [`prices`] | api and runners (read), `api admin set-price` (write) |
//! | `budget_receivers`, `budget_notices` | [`budget_notices`] | api (receivers), usage ledgers (notices raised), notifier (delivered) |
//! | `files.files`, `files.chunks` (GridFS) | [`crate::files::gridfs`] | the same, through [`crate::files::Files`] |
//!
//! Only standard commands are used, so any MongoDB 6+ works. Every change of a prediction's
//! status is one conditional update (see [`predictions`]). New predictions and
//! webhook attempt records are inserted through [`group_commit`]: several per `insert_many`
//! under load, each caller still told whether its own document was stored; a runner's last
//! state change of a prediction goes through the runner's group update, several per `update`
//! command (the [`ConditionalUpdate`]s of [`predictions`]).
//!
//! Also here:
//! - [`clock`]: the database's clock, as the times a prediction is billed by are read.
//! - [`migrations`]: the index set as a step of its own.
//! - [`queue_figures`]: the queue as one waiting prediction sees it.

pub mod accounts;
pub mod budget_notices;
pub mod clock;
pub mod commands;
pub mod dead_letters;
pub mod deployments;
pub mod files;
pub mod group_commit;
pub mod migrations;
pub mod model_versions;
pub mod models;
pub mod owned_models;
pub mod predictions;
pub mod prices;
pub mod queue_figures;
pub mod queue_lanes;
pub mod runners;
pub mod unfinished_uploads;
pub mod usage;
pub mod webhook_attempts;

use std::time::Duration;

use bson::doc;
use mongodb::{
    Client, Database, IndexModel,
    error::{ErrorKind, WriteFailure},
    options::{
        Acknowledgment, ClientOptions, IndexOptions, ReadConcern, ReadPreference, SelectionCriteria, WriteConcern,
    },
};

pub use accounts::{Account, AccountLimits, Accounts};
pub use files::{FileRecord, FileRecords};
pub use group_commit::{Batching, GroupCommit, GroupCommitError};
pub use model_versions::{ModelVersionRecord, ModelVersions};
pub use models::{ModelRecord, Models};
pub use owned_models::{ModelLinks, OwnedModel, OwnedModels, Visibility};
pub use predictions::{ConditionalUpdate, JobFilter, Predictions};
pub use queue_figures::QueueFigures;
pub use queue_lanes::{LaneCounters, QueueLanes};
pub use unfinished_uploads::{UnfinishedUpload, UnfinishedUploads};
pub use webhook_attempts::{WebhookAttempt, WebhookAttempts};

/// A storage failure.
pub type StoreError = mongodb::error::Error;

/// One page of `coll`'s documents matching `filter` in `sort` order (`offset` skipped, at most
/// `limit`), and how many match in all: the two queries run at once, each within
/// [`READ_TIME_LIMIT`]. Every list of the API pages this way.
pub async fn page<T>(
    coll: &mongodb::Collection<T>,
    filter: bson::Document,
    sort: bson::Document,
    offset: u64,
    limit: i64,
) -> Result<(Vec<T>, u64), StoreError>
where
    T: serde::de::DeserializeOwned + Send + Sync,
{
    use futures::TryStreamExt;
    let documents = async {
        coll.find(filter.clone()).sort(sort).skip(offset).limit(limit).max_time(read_limit()).await?.try_collect().await
    };
    // A count of the whole collection is read from its metadata, not by scanning it.
    let total = async {
        match filter.is_empty() {
            true => coll.estimated_document_count().max_time(read_limit()).await,
            false => count(coll, filter.clone()).await,
        }
    };
    tokio::try_join!(documents, total)
}

/// How many documents of `coll` match `filter`, within [`read_limit`].
///
/// The `count` command, not the driver's `count_documents` (an `aggregate`): MongoDB serves
/// both from an index holding the filter's fields, but the local stand-in answers an
/// aggregate by decoding every document of the collection (2.9 s on a day's 22,000
/// predictions, growing with them) and a `count` from its indexes.
pub async fn count<T: Send + Sync>(coll: &mongodb::Collection<T>, filter: bson::Document) -> Result<u64, StoreError> {
    let namespace = coll.namespace();
    let limit_ms = i64::try_from(read_limit().as_millis()).unwrap_or(i64::MAX);
    let command = doc! { "count": &namespace.coll, "query": filter, "maxTimeMS": limit_ms };
    let reply = coll.client().database(&namespace.db).run_command(command).await?;
    let n = integer(reply.get("n")).and_then(|n| u64::try_from(n).ok());
    n.ok_or_else(|| StoreError::custom(format!("a count answered without a count: {reply}")))
}

/// An integer field of a document, whatever its BSON width.
pub fn integer(value: Option<&bson::Bson>) -> Option<i64> {
    match value? {
        bson::Bson::Int32(n) => Some(i64::from(*n)),
        bson::Bson::Int64(n) => Some(*n),
        _ => None,
    }
}

/// The longest a read made for an api request may run on the server (`maxTimeMS`): past it
/// MongoDB stops the read itself (`MaxTimeMSExpired`) and the request is answered 503 with
/// `Retry-After`, instead of the read holding a connection and the server's CPU for a client
/// that has long given up (a read is milliseconds; under overload it would only queue).
pub const READ_TIME_LIMIT: Duration = Duration::from_secs(5);

/// The `maxTimeMS` of a read: [`READ_TIME_LIMIT`], or what is left of the request's deadline
/// if less ([`crate::deadline`]; at least a millisecond, so a read past it fails at once on
/// the server as one past its time limit).
pub fn read_limit() -> Duration {
    match crate::deadline::remaining() {
        Some(left) => left.clamp(Duration::from_millis(1), READ_TIME_LIMIT),
        None => READ_TIME_LIMIT,
    }
}

/// The error code of a read stopped by its time limit (`MaxTimeMSExpired`).
const MAX_TIME_EXPIRED: i32 = 50;

/// Whether `err` is a read stopped by its time limit ([`READ_TIME_LIMIT`]).
pub fn is_time_limit(err: &StoreError) -> bool {
    matches!(err.kind.as_ref(), ErrorKind::Command(e) if e.code == MAX_TIME_EXPIRED)
}

/// The options of a read that settles a write whose outcome is unknown: the primary's own
/// data (`readConcern: local`, read preference `primary`). A write whose wait for the majority
/// timed out (`WriteConcernFailed`, code 64, [`is_unconfirmed`]) has applied on the primary,
/// and a majority read after it may not see it yet: deciding on that read would compensate
/// for a write that did happen. Used only to settle such a write, never for ordinary reads
/// (a `local` read may see a write that an election later rolls back).
pub fn settling_read() -> mongodb::options::FindOneOptions {
    mongodb::options::FindOneOptions::builder()
        .selection_criteria(SelectionCriteria::ReadPreference(ReadPreference::Primary))
        .read_concern(ReadConcern::local())
        .max_time(READ_TIME_LIMIT)
        .build()
}

/// The error code of a write whose wait for its write concern timed out (`wtimeoutMS`).
const WRITE_CONCERN_FAILED: i32 = 64;

/// Whether `err` is a write that applied on the primary but whose majority acknowledgment
/// timed out (code 64): applied, unconfirmed. Settle it by sending the same idempotent write
/// again, or by a [`settling_read`].
pub fn is_unconfirmed(err: &StoreError) -> bool {
    match err.kind.as_ref() {
        ErrorKind::Write(WriteFailure::WriteConcernError(e)) => e.code == WRITE_CONCERN_FAILED,
        ErrorKind::InsertMany(failure) => {
            failure.write_concern_error.as_ref().is_some_and(|e| e.code == WRITE_CONCERN_FAILED)
        }
        _ => false,
    }
}

/// The MongoDB error code of a unique-index violation.
const DUPLICATE_KEY: i32 = 11000;

/// Whether `err` is a unique-index violation.
pub fn is_duplicate_key(err: &StoreError) -> bool {
    match err.kind.as_ref() {
        ErrorKind::Write(WriteFailure::WriteError(e)) => e.code == DUPLICATE_KEY,
        ErrorKind::Command(e) => e.code == DUPLICATE_KEY,
        _ => false,
    }
}

/// The label MongoDB puts on an error that a retried write may get past.
pub const RETRYABLE_WRITE_LABEL: &str = "RetryableWriteError";

/// The codes of a primary that stepped down, is shutting down or cannot be reached (the
/// driver's list of retryable errors): `HostUnreachable` 6, `HostNotFound` 7, `NetworkTimeout`
/// 89, `ShutdownInProgress` 91, `PrimarySteppedDown` 189, `ExceededTimeLimit` 262,
/// `SocketException` 9001, `NotWritablePrimary` 10107, `InterruptedAtShutdown` 11600,
/// `InterruptedDueToReplStateChange` 11602, `NotPrimaryNoSecondaryOk` 13435,
/// `NotPrimaryOrSecondary` 13436.
pub fn is_retryable_code(code: i32) -> bool {
    matches!(code, 6 | 7 | 89 | 91 | 189 | 262 | 9001 | 10107 | 11600 | 11602 | 13435 | 13436)
}

/// A reply of a command the driver does not retry (`run_command`) that says the primary was
/// lost before the write was safe: worth sending again, as [`is_unreachable`] tells.
#[derive(Debug)]
struct PrimaryLost(String);

/// The error of a reply that says the primary was lost before the write was safe (a write
/// error or write concern error with a retryable code or label, in a command the driver does
/// not retry): [`is_unreachable`], and [`describe`]d by `message`.
pub fn primary_lost(message: String) -> StoreError {
    StoreError::custom(PrimaryLost(message))
}

/// What `err` says, with the server's message where the driver's text of a custom error would
/// hide it.
pub fn describe(err: &StoreError) -> String {
    match (err.get_custom::<PrimaryLost>(), err.get_custom::<String>()) {
        (Some(PrimaryLost(message)), _) | (None, Some(message)) => message.clone(),
        (None, None) => err.to_string(),
    }
}

/// Whether `err` means the database could not be reached (no server selected, a broken
/// connection, a pool cleared after a failure, a primary that stepped down or is shutting
/// down during an election, or an error the server marks as worth retrying): a condition that
/// passes, unlike a refused or malformed command.
pub fn is_unreachable(err: &StoreError) -> bool {
    let code = match err.kind.as_ref() {
        ErrorKind::Command(e) => Some(e.code),
        ErrorKind::Write(WriteFailure::WriteConcernError(e)) => Some(e.code),
        _ => None,
    };
    matches!(
        err.kind.as_ref(),
        ErrorKind::ServerSelection { .. } | ErrorKind::Io(_) | ErrorKind::ConnectionPoolCleared { .. }
    ) || code.is_some_and(is_retryable_code)
        || err.get_custom::<PrimaryLost>().is_some()
        || err.contains_label(RETRYABLE_WRITE_LABEL)
        || err.contains_label("TransientTransactionError")
}

/// Indexes earlier releases made that one of [`indexes`] replaces (it has their keys first,
/// and `_id` after, for a walk in pages): dropped at start, by their default names.
pub fn retired_indexes() -> Vec<(&'static str, &'static str)> {
    vec![
        ("predictions", "status_1_created_at_1"),
        ("predictions", "status_1_completed_at_1"),
        ("predictions", "data_removed_1_completed_at_1"),
        ("predictions", "usage.pending_1_completed_at_1"),
        ("webhook_attempts", "prediction_id_1_at_1"),
        ("model_versions", "model_1_created_at_-1"),
        ("owned_models", "account_id_1_visibility_1"),
        ("owned_models", "visibility_1_account_id_1"),
        ("queue_lanes", "touched_at_1"),
        ("usage_totals", "hour_1"),
    ]
}

/// Every index the services rely on, by collection. Each query a service makes has one to use
/// (the api's test `every_query_the_services_make_has_an_index_to_use` checks them all).
pub fn indexes() -> Vec<(&'static str, IndexModel)> {
    let unique = |keys| IndexModel::builder().keys(keys).options(IndexOptions::builder().unique(true).build()).build();
    let plain = |keys| IndexModel::builder().keys(keys).build();
    let with_destination = |keys| {
        let only = doc! { "destination": { "$exists": true } };
        IndexModel::builder()
            .keys(keys)
            .options(IndexOptions::builder().partial_filter_expression(only).build())
            .build()
    };
    let expiring = || {
        IndexModel::builder()
            .keys(doc! { "expires_at": 1 })
            .options(IndexOptions::builder().expire_after(Duration::ZERO).build())
            .build()
    };
    vec![
        ("api_keys", unique(doc! { "key_hash": 1 })),
        ("api_keys", plain(doc! { "account_id": 1 })),
        ("api_keys", plain(doc! { "account_id": 1, "created_at": -1, "_id": -1 })),
        ("accounts", unique(doc! { "name": 1 })),
        // Lists of an account's predictions or trainings, all or by status, newest first.
        ("predictions", plain(doc! { "account_id": 1, "kind": 1, "created_at": -1, "_id": -1 })),
        // The trainings into a model its delete looks for: trainings only (a prediction has no
        // destination, and the index holds only documents that have one), so the index costs
        // the predictions nothing.
        ("predictions", with_destination(doc! { "destination": 1, "status": 1 })),
        ("predictions", plain(doc! { "account_id": 1, "kind": 1, "status": 1, "created_at": -1, "_id": -1 })),
        // A model's run count for an account, and a waiting prediction's place in its lane.
        ("predictions", plain(doc! { "account_id": 1, "model": 1, "status": 1, "created_at": 1 })),
        // The reconciler (orphans, deadlines, recent cancels) and the retention sweep.
        ("predictions", plain(doc! { "status": 1, "created_at": 1, "_id": 1 })),
        ("predictions", plain(doc! { "status": 1, "deadline_at": 1 })),
        ("predictions", plain(doc! { "status": 1, "completed_at": 1, "_id": 1 })),
        ("predictions", plain(doc! { "data_removed": 1, "completed_at": 1, "_id": 1 })),
        ("predictions", plain(doc! { "input_files": 1 })),
        ("predictions", plain(doc! { "deployment": 1, "status": 1 })),
        // A model's waiting and running predictions of its own route (its pods' figure).
        ("predictions", plain(doc! { "model": 1, "status": 1, "deployment": 1 })),
        // A model's lanes (its queue's figures).
        ("queue_lanes", plain(doc! { "model": 1 })),
        // Lanes left idle, for their recount and removal.
        ("queue_lanes", plain(doc! { "touched_at": 1, "tended_at": 1 })),
        ("runners", plain(doc! { "seen_at": 1 })),
        ("deployments", plain(doc! { "account_id": 1, "created_at": -1, "_id": -1 })),
        // Whether a deployment runs a model (an owned model is not deleted while one does).
        ("deployments", plain(doc! { "current_release.model": 1 })),
        // The owned models an account may see, by address: its own `$or` the public ones (each
        // branch served by one of these, in `_id` order).
        ("owned_models", plain(doc! { "account_id": 1, "_id": 1 })),
        ("owned_models", plain(doc! { "visibility": 1, "_id": 1 })),
        ("idempotency_keys", expiring()),
        ("console_sessions", expiring()),
        ("webhook_attempts", plain(doc! { "webhook_id": 1 })),
        ("webhook_attempts", plain(doc! { "prediction_id": 1, "at": 1, "_id": 1 })),
        // A receiver's events waiting for a retry, next due first; the receiver due first.
        ("webhook_retries", plain(doc! { "target": 1, "due_at": 1 })),
        ("webhook_targets", plain(doc! { "due_at": 1, "leased_until": 1 })),
        ("model_versions", plain(doc! { "model": 1, "created_at": -1, "_id": 1 })),
        // Whether an expired file is a trained version's weights (then it is kept).
        ("model_versions", plain(doc! { "trained_from.weights": 1 })),
        // The listed files of an account, newest first: `payload` last, so a list walks the
        // account's files in order and leaves out predictions' payloads from the index alone.
        ("file_records", plain(doc! { "account_id": 1, "created_at": -1, "_id": -1, "payload": 1 })),
        ("file_records", plain(doc! { "expires_at": 1 })),
        ("file_records", plain(doc! { "prediction_id": 1 })),
        ("unfinished_uploads", plain(doc! { "started_at": 1 })),
        ("usage_totals", plain(doc! { "account_id": 1, "hour": 1 })),
        // The fold of settled hours looks for the totals not folded yet among old hours.
        ("usage_totals", plain(doc! { "hour": 1, "folded": 1 })),
        ("predictions", plain(doc! { "usage.pending": 1, "completed_at": 1, "_id": 1 })),
        ("budget_receivers", plain(doc! { "account_id": 1 })),
        // The notifier's claim of a due budget notice, and an account's notices.
        ("budget_notices", plain(doc! { "done": 1, "next_at": 1, "claimed_until": 1 })),
        ("budget_notices", plain(doc! { "account_id": 1 })),
        // GridFS (bucket `files`): the driver's own two, made here too (it makes them only on a
        // first upload into an empty bucket), and the output files of a prediction.
        ("files.files", plain(doc! { "filename": 1, "uploadDate": 1 })),
        ("files.files", plain(doc! { "metadata.prediction_id": 1 })),
        ("files.chunks", unique(doc! { "files_id": 1, "n": 1 })),
    ]
}

/// Whether creating an index failed because one with the same keys (or name) exists with
/// other options: `IndexOptionsConflict` (85) or `IndexKeySpecsConflict` (86).
fn is_index_conflict(err: &StoreError) -> bool {
    matches!(err.kind.as_ref(), ErrorKind::Command(e) if e.code == 85 || e.code == 86)
}

/// Whether `err` says the index or its collection does not exist (MongoDB's errors 27 and 26).
fn is_not_found(err: &StoreError) -> bool {
    matches!(err.kind.as_ref(), ErrorKind::Command(e) if e.code == 27 || e.code == 26)
}

/// How long connecting and selecting a server may take when the URI does not say.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The client options of a service: the URI's, with [`DEFAULT_TIMEOUT`] and `app_name` where it
/// names none, and reads from the primary always.
fn client_options(mut options: ClientOptions, app_name: &str) -> ClientOptions {
    options.app_name.get_or_insert_with(|| app_name.to_owned());
    options.connect_timeout.get_or_insert(DEFAULT_TIMEOUT);
    options.server_selection_timeout.get_or_insert(DEFAULT_TIMEOUT);
    options.selection_criteria = Some(SelectionCriteria::ReadPreference(ReadPreference::Primary));
    // A write acknowledged by the primary alone is rolled back if that primary loses an
    // election before a secondary has it: usage counts, claims and tickets would be lost or
    // handed out twice. So writes wait for a majority unless the URI names its own `w`.
    let concern = options.write_concern.get_or_insert_with(WriteConcern::default);
    if concern.w.is_none() {
        concern.w = Some(Acknowledgment::Majority);
    }
    if concern.w_timeout.is_none() {
        concern.w_timeout = Some(MAJORITY_TIMEOUT);
    }
    // And reads see only what a majority has, so nothing read can be rolled back, where
    // writes are majority (with `w: 1` a majority read may miss the write just made).
    if options.read_concern.is_none() && concern.w == Some(Acknowledgment::Majority) {
        options.read_concern = Some(ReadConcern::majority());
    }
    options
}

/// How long a write waits for a majority where the URI names no `wtimeoutMS`: past it the
/// write is answered with an error (it applied on the primary, and is settled like any write
/// whose outcome is unknown).
pub const MAJORITY_TIMEOUT: Duration = Duration::from_secs(10);

/// A connected database with typed access to each collection.
#[derive(Clone, Debug)]
pub struct Store {
    db: Database,
    commands: commands::CommandCounts,
    clock: clock::ServerClock,
}

impl Store {
    /// Connects (lazily: the driver connects on first use); counts its commands when
    /// `monitoring` asks for it.
    ///
    /// The URI's own settings stand: `connectTimeoutMS` and `serverSelectionTimeoutMS` default
    /// to [`DEFAULT_TIMEOUT`] (30 s, so a request rides out an election of a replica set,
    /// which takes up to about 12 s), and `appName` to `app_name`. Reads go to the primary
    /// whatever `readPreference` the URI names: every service reads what it has just written
    /// (a job's prediction, a status it conditions on), which a secondary may not have yet.
    pub async fn connect(
        uri: &str,
        database: &str,
        app_name: &str,
        monitoring: commands::Monitoring,
    ) -> Result<Self, StoreError> {
        let options = client_options(ClientOptions::parse(uri).await?, app_name);
        let mut options = options;
        let commands = commands::CommandCounts::default();
        if monitoring != commands::Monitoring::Off {
            options.command_event_handler = Some(commands.handler(monitoring == commands::Monitoring::Shapes));
        }
        let client = Client::with_options(options)?;
        Ok(Self { db: client.database(database), commands, clock: clock::ServerClock::default() })
    }

    /// A client of its own for readiness checks ([`crate::readiness`]): a pool of one
    /// connection that the work never uses, so a check never waits for a connection the work
    /// holds; its commands are not counted.
    pub async fn connect_probe(uri: &str, database: &str, app_name: &str) -> Result<Self, StoreError> {
        let mut options = client_options(ClientOptions::parse(uri).await?, app_name);
        (options.max_pool_size, options.min_pool_size) = (Some(1), Some(0));
        let client = Client::with_options(options)?;
        Ok(Self {
            db: client.database(database),
            commands: commands::CommandCounts::default(),
            clock: clock::ServerClock::default(),
        })
    }

    /// The server's clock as measured by this store's process ([`clock`]): what the times a
    /// prediction is billed by are stamped with.
    pub fn clock(&self) -> &clock::ServerClock {
        &self.clock
    }

    /// Measures the server's clock now and every minute until `shutdown` (see [`clock`]).
    pub fn keep_clock(&self, shutdown: tokio_util::sync::CancellationToken) {
        tokio::spawn(self.clock.clone().keep_measuring(self.db.clone(), shutdown));
    }

    /// Answers when the server answers a `ping`.
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.db.run_command(doc! { "ping": 1 }).await.map(|_| ())
    }

    /// Creates every index the collections rely on ([`indexes`]) and drops the retired ones;
    /// idempotent. Run as a step of its own ([`Store::migrate`], `api admin migrate`), or by
    /// a service that finds a new database ([`Store::indexes_at_start`]). An index that exists with the same keys but other options (MongoDB's
    /// errors 85 and 86: an operator made it, or an earlier release did) is kept as it is, with
    /// a warning, instead of stopping the service.
    pub async fn ensure_indexes(&self) -> Result<(), StoreError> {
        for (collection, index) in indexes() {
            let keys = index.keys.clone();
            match self.db.collection::<bson::Document>(collection).create_index(index).await {
                Ok(_) => {}
                Err(e) if is_index_conflict(&e) => {
                    tracing::warn!(collection, %keys, error = %e, "an index with these keys exists with other options; kept as it is");
                }
                Err(e) => return Err(e),
            }
        }
        for (collection, name) in retired_indexes() {
            match self.db.collection::<bson::Document>(collection).drop_index(name).await {
                Ok(()) => tracing::info!(collection, index = name, "dropped an index a newer one replaces"),
                // Never made (a new database), or dropped already by another replica.
                Err(e) if is_not_found(&e) => {}
                Err(e) => {
                    tracing::warn!(collection, index = name, error = %e, "an index a newer one replaces was not dropped")
                }
            }
        }
        Ok(())
    }

    /// The `predictions` collection.
    pub fn predictions(&self) -> Predictions {
        Predictions::new(&self.db)
    }

    /// The `queue_lanes` collection.
    pub fn queue_lanes(&self) -> QueueLanes {
        QueueLanes::new(&self.db)
    }

    /// The `owned_models` collection.
    pub fn owned_models(&self) -> OwnedModels {
        OwnedModels::new(&self.db)
    }

    /// The `accounts` collection.
    pub fn accounts(&self) -> Accounts {
        Accounts::new(&self.db)
    }

    /// The `models` collection.
    pub fn models(&self) -> Models {
        Models::new(&self.db)
    }

    /// The `model_versions` collection.
    pub fn model_versions(&self) -> ModelVersions {
        ModelVersions::new(&self.db)
    }

    /// The `deployments` collection.
    pub fn deployments(&self) -> deployments::Deployments {
        deployments::Deployments::new(&self.db)
    }

    /// The `runners` collection.
    pub fn runners(&self) -> runners::Runners {
        runners::Runners::new(&self.db)
    }

    /// The `dead_letters` collection.
    pub fn dead_letters(&self) -> dead_letters::DeadLetters {
        dead_letters::DeadLetters::new(&self.db)
    }

    /// The `budget_receivers` and `budget_notices` collections (notices of an account's budget).
    pub fn budget_notices(&self) -> budget_notices::BudgetNotices {
        budget_notices::BudgetNotices::new(&self.db)
    }

    /// The `hardware_prices` collection (each pool's price per second).
    pub fn prices(&self) -> prices::Prices {
        prices::Prices::new(&self.db)
    }

    /// The `usage_totals` collection (usage per account, hour and group).
    pub fn usage_totals(&self) -> usage::UsageTotals {
        usage::UsageTotals::new(&self.db)
    }

    /// The `unfinished_uploads` collection (files whose bytes are being written).
    pub fn unfinished_uploads(&self) -> UnfinishedUploads {
        UnfinishedUploads::new(&self.db)
    }

    /// The `file_records` collection (files' bytes: [`crate::files`]).
    pub fn file_records(&self) -> FileRecords {
        FileRecords::new(&self.db)
    }

    /// The `webhook_attempts` collection.
    pub fn webhook_attempts(&self) -> WebhookAttempts {
        WebhookAttempts::new(&self.db)
    }

    /// The MongoDB commands this store has sent (none counted unless it was connected with
    /// [`commands::Monitoring::Counted`]).
    pub fn command_counts(&self) -> &commands::CommandCounts {
        &self.commands
    }

    /// The database itself (tests and tools).
    pub fn database(&self) -> &Database {
        &self.db
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_uris_timeouts_and_name_stand_and_reads_go_to_the_primary_whatever_it_asks() {
        let uri = "mongodb://db.example:27017/?readPreference=secondaryPreferred&connectTimeoutMS=1234&appName=ops";
        let options = client_options(ClientOptions::parse(uri).await.expect("a valid URI"), "runner");
        assert_eq!(options.connect_timeout, Some(Duration::from_millis(1234)));
        assert_eq!(options.server_selection_timeout, Some(DEFAULT_TIMEOUT), "30 s where the URI says nothing");
        assert_eq!(options.app_name.as_deref(), Some("ops"));
        assert!(matches!(options.selection_criteria, Some(SelectionCriteria::ReadPreference(ReadPreference::Primary))));

        let plain = client_options(ClientOptions::parse("mongodb://db.example").await.expect("valid"), "runner");
        assert_eq!((plain.connect_timeout, plain.app_name.as_deref()), (Some(DEFAULT_TIMEOUT), Some("runner")));
    }

    #[tokio::test]
    async fn writes_wait_for_a_majority_and_reads_see_a_majoritys_unless_the_uri_says_otherwise() {
        let plain = client_options(ClientOptions::parse("mongodb://db.example").await.expect("valid"), "api");
        let concern = plain.write_concern.clone().expect("a write concern");
        assert_eq!((concern.w, concern.w_timeout), (Some(Acknowledgment::Majority), Some(MAJORITY_TIMEOUT)));
        assert_eq!(plain.read_concern, Some(ReadConcern::majority()));

        let uri = "mongodb://db.example/?w=1&wtimeoutMS=500";
        let own = client_options(ClientOptions::parse(uri).await.expect("valid"), "api");
        let concern = own.write_concern.clone().expect("a write concern");
        assert_eq!((concern.w, concern.w_timeout), (Some(Acknowledgment::Nodes(1)), Some(Duration::from_millis(500))));
        assert_eq!(own.read_concern, None, "w: 1 with majority reads would not read its own writes");

        let uri = "mongodb://db.example/?journal=true&readConcernLevel=local";
        let journaled = client_options(ClientOptions::parse(uri).await.expect("valid"), "api");
        let concern = journaled.write_concern.clone().expect("a write concern");
        assert_eq!((concern.w, concern.journal), (Some(Acknowledgment::Majority), Some(true)));
        assert_eq!(journaled.read_concern, Some(ReadConcern::local()));
    }
}
