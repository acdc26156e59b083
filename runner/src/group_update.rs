//! Group commit of conditional updates: single-document updates, each with its own filter,
//! that arrive while earlier ones are in flight share one unordered `update` command, and each
//! caller still learns whether *its* update applied.
//!
//! The `update` command reports how many documents its statements matched (`n`) for the whole
//! command, not per statement. When every statement matched (the usual case: a runner's last
//! state change of a prediction nothing else moved) that settles each of them at once. When
//! fewer matched the batch is ambiguous, so each statement carries `applied`, a filter that
//! matches its document only once the update has applied; one read per statement of such a
//! batch settles it. A statement the server refused (a write error) answers its caller with
//! that error; a failed command answers every caller of its batch with it.
//!
//! Batching as in [`common::store::group_commit`] (whose writer loop this shares): with no linger and a
//! free write slot a lone update is written at once, so a quiet service pays no latency; under
//! load updates queue while the slots are busy and the next command carries them all, which
//! saves the driver's and the server's per-command work (one round trip instead of several).
//!
//! What real MongoDB holds a command to, and the driver does not do for `run_command`:
//! - **Size.** A command is one BSON document of at most 16 MiB, so a batch is cut into
//!   commands of at most [`COMMAND_BUDGET`] bytes of statements; a statement larger than that
//!   alone is refused here ([`TOO_LARGE`]), as the server would refuse it. Each statement is
//!   encoded once, measured by its bytes, and sent as they are (`run_raw_command`).
//! - **Retries.** The driver retries `update_one` across an election, never `run_command`. A
//!   command that fails because the primary stepped down or could not be reached
//!   ([`is_unreachable`]) is sent again, for up to [`RETRY_FOR`] (an election takes up to
//!   about 12 s); so is one whose `writeErrors` carry such a code (a statement the stepping
//!   down primary did not write), while any other code there refuses its statement alone.
//!   A command whose reply was lost may have been applied, so after a retry a
//!   statement that did not match is settled by its `applied` filter: "matched nothing" no
//!   longer means "applied nothing".

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use bson::{Bson, Document, RawArrayBuf, RawDocumentBuf, doc};
use mongodb::{Collection, Database, options::WriteConcern};
use tokio::sync::{mpsc, oneshot};

use common::store::{
    Batching, ConditionalUpdate, RETRYABLE_WRITE_LABEL, StoreError, describe, group_commit::run_writer, integer,
    is_retryable_code, is_unreachable, primary_lost,
};

/// The most bytes of statements one `update` command carries: MongoDB's 16 MiB limit on a
/// command document, less room for the command's other fields (name, options, session,
/// cluster time).
pub const COMMAND_BUDGET: usize = 16 * 1024 * 1024 - 16 * 1024;
/// The error code of a document or command over MongoDB's size limit (`BSONObjectTooLarge`).
pub const TOO_LARGE: i32 = 10334;
/// The error code of a value the server cannot take (`BadValue`).
const BAD_VALUE: i32 = 2;
/// How long a command that could not reach a primary is tried again.
pub const RETRY_FOR: Duration = Duration::from_secs(30);

/// Why an update's fate is unknown or it was refused.
#[derive(Debug, Clone, thiserror::Error)]
pub enum GroupUpdateError {
    /// The server refused this statement; the others of its command were applied.
    #[error("the update was refused (code {code}): {message}")]
    Refused {
        /// The server's error code.
        code: i32,
        /// The server's message.
        message: String,
    },
    /// The command carrying this update failed, or its outcome could not be read.
    #[error("the update failed: {0}")]
    Write(Arc<StoreError>),
    /// The writer task has stopped (the process is shutting down).
    #[error("the group-update writer has stopped")]
    Stopped,
}

/// An update waiting to be written, with whom to tell.
struct Waiting {
    update: ConditionalUpdate,
    done: oneshot::Sender<Result<bool, GroupUpdateError>>,
}

/// Hands conditional updates to the writer task of one collection. Cheap to clone; the task
/// stops when the last clone is dropped, after writing what it was given.
#[derive(Clone)]
pub struct GroupUpdate {
    queue: mpsc::Sender<Waiting>,
}

impl GroupUpdate {
    /// Starts the writer task for `collection` (needs a Tokio runtime).
    pub fn start<T: Send + Sync>(collection: &Collection<T>, batching: Batching) -> Self {
        let batching = batching.at_least_one();
        let target = Target {
            database: collection.client().database(&collection.namespace().db),
            documents: collection.clone_with_type::<Document>(),
        };
        let (queue, receiver) = mpsc::channel(4 * batching.max_batch);
        tokio::spawn(run_writer(batching, receiver, move |batch| {
            let target = target.clone();
            async move { target.write(batch).await }
        }));
        Self { queue }
    }

    /// Applies `update` if its document matches its filter; returns whether it did.
    pub async fn apply(&self, update: ConditionalUpdate) -> Result<bool, GroupUpdateError> {
        let (done, answer) = oneshot::channel();
        common::store::group_commit::enqueue(&self.queue, Waiting { update, done })
            .await
            .map_err(|_| GroupUpdateError::Stopped)?;
        answer.await.map_err(|_| GroupUpdateError::Stopped)?
    }
}

/// Where a batch is written.
#[derive(Clone)]
struct Target {
    database: Database,
    documents: Collection<Document>,
}

impl Target {
    /// Writes one batch, in as many unordered `update` commands as its size needs, and
    /// answers each of its callers.
    async fn write(&self, batch: Vec<Waiting>) {
        for command in by_size(batch.into_iter().filter_map(Statement::encode).collect(), COMMAND_BUDGET) {
            match command {
                Command::Alone(statement) => {
                    let message = format!("the update is larger than a command may be ({COMMAND_BUDGET} bytes)");
                    let _ = statement.done.send(Err(GroupUpdateError::Refused { code: TOO_LARGE, message }));
                }
                Command::Batch(batch) => self.write_command(batch).await,
            }
        }
    }

    /// Writes one command's statements and answers each of their callers.
    async fn write_command(&self, batch: Vec<Statement>) {
        let count = batch.len();
        let (mut encoded, mut applied, mut answers) =
            (Vec::with_capacity(count), Vec::with_capacity(count), Vec::with_capacity(count));
        for Statement { statement, applied: filter, done } in batch {
            encoded.push(statement);
            applied.push(filter);
            answers.push(done);
        }
        let command = update_command(self.documents.name(), encoded, self.documents.write_concern());
        let outcomes = match self.send(&command, count).await {
            Ok((reply, retried)) => self.settle(applied, reply, retried).await,
            Err(e) => {
                tracing::warn!(error = describe(&e), updates = count, "group update failed");
                let e = Arc::new(e);
                vec![Err(GroupUpdateError::Write(e)); count]
            }
        };
        for (answer, outcome) in answers.into_iter().zip(outcomes) {
            let _ = answer.send(outcome);
        }
    }

    /// Sends `command` until it is answered, retrying while the primary cannot be reached (for
    /// up to [`RETRY_FOR`]); the reply, and whether it took more than one try.
    async fn send(&self, command: &RawDocumentBuf, count: usize) -> Result<(Reply, bool), StoreError> {
        let started = Instant::now();
        let mut pause = Duration::from_millis(50);
        let mut retried = false;
        loop {
            let reply = self.database.run_raw_command(command.clone()).await.and_then(|r| Reply::read(&r, count));
            match reply {
                Ok(reply) => return Ok((reply, retried)),
                Err(e) if is_unreachable(&e) && started.elapsed() + pause < RETRY_FOR => {
                    let error = describe(&e);
                    tracing::warn!(%error, updates = count, retry_in = ?pause, "group update not written; trying again");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(2));
                    retried = true;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Each statement's outcome from the command's reply; reads the `applied` filters when the
    /// count leaves it open. After a retry an earlier try may have applied a statement that
    /// the last one did not match, so no count of zero settles anything.
    async fn settle(&self, applied: Vec<Document>, reply: Reply, retried: bool) -> Vec<Result<bool, GroupUpdateError>> {
        let written = applied.len() - reply.refused.iter().filter(|r| r.is_some()).count();
        let ambiguous = reply.matched < written;
        let mut outcomes = Vec::with_capacity(applied.len());
        for (applied, refused) in applied.into_iter().zip(reply.refused) {
            outcomes.push(match refused {
                Some(refused) => Err(refused),
                None if !ambiguous => Ok(true),
                None if reply.matched == 0 && !retried => Ok(false),
                None => self.was_applied(applied).await,
            });
        }
        outcomes
    }

    /// Whether an update applied, read from its `applied` filter.
    async fn was_applied(&self, applied: Document) -> Result<bool, GroupUpdateError> {
        let found = self
            .documents
            .find_one(applied)
            .projection(doc! { "_id": 1 })
            .await
            .map_err(|e| GroupUpdateError::Write(Arc::new(e)))?;
        Ok(found.is_some())
    }
}

/// A waiting update as a command carries it: its `{q, u, multi}` statement, encoded once.
struct Statement {
    statement: RawDocumentBuf,
    applied: Document,
    done: oneshot::Sender<Result<bool, GroupUpdateError>>,
}

impl Statement {
    /// Encodes `waiting`'s statement; one that cannot be encoded (a key BSON does not allow)
    /// is refused to its caller here.
    fn encode(waiting: Waiting) -> Option<Self> {
        let Waiting { update, done } = waiting;
        let encoded = (|| -> Result<RawDocumentBuf, bson::raw::Error> {
            let mut statement = RawDocumentBuf::new();
            statement.append("q", RawDocumentBuf::from_document(&update.filter)?);
            statement.append("u", RawDocumentBuf::from_document(&update.update)?);
            statement.append("multi", false);
            Ok(statement)
        })();
        match encoded {
            Ok(statement) => Some(Self { statement, applied: update.applied, done }),
            Err(e) => {
                let message = format!("the update cannot be encoded: {e}");
                let _ = done.send(Err(GroupUpdateError::Refused { code: BAD_VALUE, message }));
                None
            }
        }
    }

    /// The bytes it adds to an `update` command: its document, and its array entry's type byte
    /// and index key (at most 8 digits and a NUL).
    fn size(&self) -> usize {
        self.statement.as_bytes().len() + 10
    }
}

/// One command's worth of a batch.
enum Command {
    /// Statements that fit one command together.
    Batch(Vec<Statement>),
    /// A statement larger than a command may be.
    Alone(Box<Statement>),
}

/// Cuts `batch` into commands of at most `budget` bytes of statements, in order.
fn by_size(batch: Vec<Statement>, budget: usize) -> Vec<Command> {
    let mut commands = Vec::new();
    let (mut current, mut bytes) = (Vec::new(), 0);
    for statement in batch {
        let size = statement.size();
        if size > budget {
            commands.push(Command::Alone(Box::new(statement)));
            continue;
        }
        if bytes + size > budget && !current.is_empty() {
            commands.push(Command::Batch(std::mem::take(&mut current)));
            bytes = 0;
        }
        bytes += size;
        current.push(statement);
    }
    if !current.is_empty() {
        commands.push(Command::Batch(current));
    }
    commands
}

/// The unordered `update` command of `statements` on `collection`. `run_raw_command` sends
/// only what it is given, so the write concern the driver would add to an `update_one` (from
/// the URI or the client's options) is added here.
fn update_command(collection: &str, statements: Vec<RawDocumentBuf>, concern: Option<&WriteConcern>) -> RawDocumentBuf {
    let mut command = RawDocumentBuf::new();
    command.append("update", collection);
    command.append("updates", statements.into_iter().collect::<RawArrayBuf>());
    command.append("ordered", false);
    if let Some(concern) = concern
        && let Ok(concern) = bson::to_document(concern)
        && !concern.is_empty()
        && let Ok(concern) = RawDocumentBuf::from_document(&concern)
    {
        command.append("writeConcern", concern);
    }
    command
}

/// What the `update` command answered.
#[derive(Debug)]
struct Reply {
    /// Documents matched by all statements together (`n`).
    matched: usize,
    /// Per statement, the server's refusal if there was one.
    refused: Vec<Option<GroupUpdateError>>,
}

impl Reply {
    /// Reads the reply to a command of `count` statements; a write concern error fails the
    /// whole command.
    fn read(reply: &Document, count: usize) -> Result<Self, StoreError> {
        if let Ok(concern) = reply.get_document("writeConcernError") {
            return Err(write_concern_error(concern, reply));
        }
        let matched = match reply.get("n") {
            Some(Bson::Int32(n)) => usize::try_from(*n).unwrap_or(0),
            Some(Bson::Int64(n)) => usize::try_from(*n).unwrap_or(0),
            Some(Bson::Double(n)) if *n >= 0.0 => *n as usize,
            _ => return Err(StoreError::custom(format!("an update reply without a count: {reply}"))),
        };
        let mut refused = vec![None; count];
        for error in reply.get_array("writeErrors").map(Vec::as_slice).unwrap_or_default() {
            let Bson::Document(error) = error else { continue };
            let index = integer(error.get("index")).and_then(|i| usize::try_from(i).ok());
            let code = integer(error.get("code")).and_then(|c| i32::try_from(c).ok()).unwrap_or_default();
            let message = error.get_str("errmsg").unwrap_or_default().to_owned();
            // A statement not written because the primary stepped down or shut down is not a
            // refusal: the whole command is sent again (what it applied does not match twice,
            // and is settled by reading).
            if is_retryable_code(code) {
                return Err(primary_lost(format!("write error {code}: {message}")));
            }
            if let Some(slot) = index.and_then(|i| refused.get_mut(i)) {
                *slot = Some(GroupUpdateError::Refused { code, message });
            }
        }
        Ok(Self { matched, refused })
    }
}

/// The error of a reply that carries a write concern error: retryable (as
/// [`is_unreachable`] tells) when its code is one of a primary stepping down or shutting
/// down, or the server labels it so.
fn write_concern_error(concern: &Document, reply: &Document) -> StoreError {
    let code = integer(concern.get("code")).and_then(|c| i32::try_from(c).ok()).unwrap_or_default();
    let labelled = reply
        .get_array("errorLabels")
        .is_ok_and(|labels| labels.iter().any(|l| l.as_str() == Some(RETRYABLE_WRITE_LABEL)));
    let message = format!("write concern error: {concern}");
    if labelled || is_retryable_code(code) { primary_lost(message) } else { StoreError::custom(message) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_carries_every_statement_and_the_collections_write_concern() {
        let statements = || (0..2).map(|n| statement(n * 10).statement).collect::<Vec<_>>();
        let plain = update_command("predictions", statements(), None).to_document().expect("a document");
        assert_eq!(plain.get_str("update").ok(), Some("predictions"));
        let updates = plain.get_array("updates").expect("updates");
        assert_eq!(updates.len(), 2);
        let first = updates[0].as_document().expect("a statement");
        assert_eq!(first.get_document("q").ok(), Some(&doc! { "_id": "a" }));
        assert_eq!(first.get_bool("multi").ok(), Some(false));
        assert_eq!(plain.get_bool("ordered").ok(), Some(false));
        assert!(!plain.contains_key("writeConcern"), "the server's default, as for update_one");

        let majority = update_command("predictions", statements(), Some(&WriteConcern::majority()));
        let majority = majority.to_document().expect("a document");
        let concern = majority.get_document("writeConcern").expect("a write concern");
        assert_eq!(concern.get_str("w").ok(), Some("majority"));
    }

    #[test]
    fn a_reply_counts_its_matches_whatever_the_width() {
        assert_eq!(Reply::read(&doc! { "n": 3, "ok": 1.0 }, 3).map(|r| r.matched).ok(), Some(3));
        assert_eq!(Reply::read(&doc! { "n": 2_i64, "ok": 1.0 }, 3).map(|r| r.matched).ok(), Some(2));
        assert!(Reply::read(&doc! { "ok": 1.0 }, 3).is_err(), "a reply without n settles nothing");
    }

    #[test]
    fn a_write_error_refuses_only_its_statement() {
        let reply = doc! { "n": 1, "writeErrors": [{ "index": 1, "code": 121, "errmsg": "validation" }] };
        let read = Reply::read(&reply, 3).expect("read");
        assert!(read.refused[0].is_none() && read.refused[2].is_none());
        assert!(matches!(&read.refused[1], Some(GroupUpdateError::Refused { code: 121, .. })), "{read:?}");
    }

    fn statement(bytes: usize) -> Statement {
        let update = ConditionalUpdate {
            filter: doc! { "_id": "a" },
            update: doc! { "$set": { "output": "x".repeat(bytes) } },
            applied: doc! {},
        };
        Statement::encode(Waiting { update, done: oneshot::channel().0 }).expect("encodes")
    }

    #[test]
    fn a_batch_is_cut_into_commands_within_the_budget_and_an_oversized_statement_goes_alone() {
        let sizes = [400, 400, 400, 5_000, 100];
        let commands = by_size(sizes.iter().map(|b| statement(*b)).collect(), 1_000);
        let shapes: Vec<String> = commands
            .iter()
            .map(|c| match c {
                Command::Batch(b) => format!("batch of {}", b.len()),
                Command::Alone(_) => "alone".into(),
            })
            .collect();
        assert_eq!(shapes, ["batch of 2", "alone", "batch of 2"]);
    }

    #[test]
    fn a_write_error_of_a_lost_primary_is_worth_a_retry_and_another_is_a_refusal() {
        let stepped_down = doc! { "n": 1, "writeErrors": [{ "index": 1, "code": 10107, "errmsg": "not primary" }] };
        assert!(Reply::read(&stepped_down, 2).is_err_and(|e| is_unreachable(&e)));
        let invalid = doc! { "n": 1, "writeErrors": [{ "index": 1, "code": 121, "errmsg": "validation" }] };
        let read = Reply::read(&invalid, 2).expect("a reply");
        assert!(matches!(&read.refused[1], Some(GroupUpdateError::Refused { code: 121, .. })), "{read:?}");
    }

    #[test]
    fn a_write_concern_error_of_a_lost_primary_is_worth_a_retry_and_another_is_not() {
        let lost = doc! { "n": 1, "writeConcernError": { "code": 91, "errmsg": "shutting down" } };
        assert!(Reply::read(&lost, 1).is_err_and(|e| is_unreachable(&e)));
        let labelled = doc! { "n": 1, "writeConcernError": { "code": 100, "errmsg": "x" }, "errorLabels": ["RetryableWriteError"] };
        assert!(Reply::read(&labelled, 1).is_err_and(|e| is_unreachable(&e)));
        let timeout =
            doc! { "n": 1, "writeConcernError": { "code": 64, "errmsg": "waiting for replication timed out" } };
        assert!(Reply::read(&timeout, 1).is_err_and(|e| !is_unreachable(&e)));
    }

    #[test]
    fn a_write_concern_error_fails_the_command() {
        let reply = doc! { "n": 2, "writeConcernError": { "code": 64, "errmsg": "waiting for replication timed out" } };
        assert!(Reply::read(&reply, 2).is_err());
    }
}
