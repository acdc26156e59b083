//! The `predictions` collection. The api inserts `starting` predictions; after that every
//! change is a conditional update on the current status (see [`Predictions::transition`]),
//! which also increments `seq`, so concurrent writers can never move a prediction backwards,
//! out of a terminal state, or both to the same place.

use bson::{Bson, Document, doc};
use futures::TryStreamExt;
use mongodb::{Collection, Database, options::ReturnDocument};

use super::{
    StoreError,
    group_commit::{Batching, GroupCommit},
};
use crate::domain::{AccountId, JobKind, ModelRef, Prediction, PredictionId, PredictionStatus};

/// Which of an account's jobs a list shows: of one kind, and optionally in one status and
/// created at or after one time and before another, as Replicate reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobFilter {
    /// Predictions or trainings.
    pub kind: JobKind,
    /// Only those in this status.
    pub status: Option<PredictionStatus>,
    /// Only those created at or after this time.
    pub created_after: Option<bson::DateTime>,
    /// Only those created before this time.
    pub created_before: Option<bson::DateTime>,
}

impl JobFilter {
    /// Every job of `kind`.
    pub fn of(kind: JobKind) -> Self {
        Self { kind, status: None, created_after: None, created_before: None }
    }
}

/// One conditional update of a single document.
#[derive(Debug, Clone)]
pub struct ConditionalUpdate {
    /// The document and the state it must be in.
    pub filter: Document,
    /// The update operators to apply (`$set`, `$inc`, ...).
    pub update: Document,
    /// A filter that matches the document only once this update has applied: read when the
    /// count of a batch leaves open which of its statements matched.
    pub applied: Document,
}

/// Typed access to the `predictions` collection.
#[derive(Clone, Debug)]
pub struct Predictions {
    coll: Collection<Prediction>,
}

fn statuses(list: &[PredictionStatus]) -> Bson {
    Bson::Array(list.iter().map(|s| Bson::String(s.as_str().to_owned())).collect())
}

impl Predictions {
    pub(super) fn new(db: &Database) -> Self {
        Self { coll: db.collection("predictions") }
    }

    /// The collection itself, for a writer that sends its own commands (the runner's group
    /// update of [`ConditionalUpdate`]s).
    pub fn collection(&self) -> &Collection<Prediction> {
        &self.coll
    }

    /// A writer that stores new predictions several per `insert_many` under load (see
    /// [`GroupCommit`]); each caller still waits for its own prediction to be stored.
    pub fn group_commit(&self, batching: Batching) -> GroupCommit<Prediction> {
        GroupCommit::start(self.coll.clone(), batching)
    }

    /// Stores a new prediction.
    pub async fn insert(&self, prediction: &Prediction) -> Result<(), StoreError> {
        self.coll.insert_one(prediction).await.map(|_| ())
    }

    /// Every prediction with secret inputs, one batch at a time (a master-key rotation walks
    /// them; no index serves it: the whole collection is read once).
    pub async fn with_sealed_inputs(&self) -> Result<mongodb::Cursor<Prediction>, StoreError> {
        self.coll.find(doc! { "sealed_inputs": { "$exists": true } }).await
    }

    /// Replaces prediction `id`'s sealed inputs (a master-key rotation; they are written once,
    /// at the create, and never change otherwise).
    pub async fn replace_sealed_inputs(
        &self,
        id: &PredictionId,
        sealed: &std::collections::BTreeMap<String, String>,
    ) -> Result<bool, StoreError> {
        let update = doc! { "$set": { "sealed_inputs": bson::to_bson(sealed)? } };
        Ok(self.coll.update_one(doc! { "_id": id.as_str() }, update).await?.matched_count == 1)
    }

    /// A prediction by id, whoever owns it (services only; never for a client's request).
    pub async fn get(&self, id: &PredictionId) -> Result<Option<Prediction>, StoreError> {
        self.coll.find_one(doc! { "_id": id.as_str() }).max_time(super::read_limit()).await
    }

    /// A prediction by id as the primary has it now ([`super::settling_read`]): to settle a
    /// write whose outcome is unknown, never for an ordinary read.
    pub async fn get_settled(&self, id: &PredictionId) -> Result<Option<Prediction>, StoreError> {
        self.coll.find_one(doc! { "_id": id.as_str() }).with_options(super::settling_read()).await
    }

    /// A prediction by id, only if `account` owns it: another account's prediction is
    /// indistinguishable from a missing one.
    pub async fn get_for_account(
        &self,
        id: &PredictionId,
        account: &AccountId,
    ) -> Result<Option<Prediction>, StoreError> {
        Ok(self.get(id).await?.filter(|p| &p.account_id == account))
    }

    /// Moves a prediction to `to` (setting `changes` as well) if its current status may move
    /// there; returns the prediction after the change, or `None` if it was not in such a status.
    pub async fn transition(
        &self,
        id: &PredictionId,
        to: PredictionStatus,
        mut changes: Document,
    ) -> Result<Option<Prediction>, StoreError> {
        changes.insert("status", to.as_str());
        let filter = doc! { "_id": id.as_str(), "status": { "$in": statuses(&to.predecessors()) } };
        self.update_where(filter, changes).await
    }

    /// Moves a prediction from exactly `from` to `to` (setting `changes` as well); returns it
    /// after the change, or `None` if it was no longer in `from`. For changes computed from
    /// the state the caller read (e.g. metrics at cancel).
    pub async fn transition_from(
        &self,
        id: &PredictionId,
        from: PredictionStatus,
        to: PredictionStatus,
        mut changes: Document,
    ) -> Result<Option<Prediction>, StoreError> {
        if !from.can_become(to) {
            return Ok(None);
        }
        changes.insert("status", to.as_str());
        self.update_where(doc! { "_id": id.as_str(), "status": from.as_str() }, changes).await
    }

    /// Moves a prediction from `from` to `to` (setting `changes`) only if it is still at
    /// change `seq`, so nothing changed it since the caller's copy; returns whether it did.
    /// Nothing is read back: the caller applies the same change to its copy, which saves the
    /// returned document's transfer and decoding.
    pub async fn transition_at_seq(
        &self,
        id: &PredictionId,
        from: PredictionStatus,
        seq: i64,
        to: PredictionStatus,
        changes: Document,
    ) -> Result<bool, StoreError> {
        let Some(change) = Self::change_at_seq(id, from, seq, to, changes) else {
            return Ok(false);
        };
        let updated = self.coll.update_one(change.filter, change.update).await?;
        Ok(updated.matched_count == 1)
    }

    /// The change of [`Self::transition_at_seq`] as a statement for the runner's group update (a
    /// runner's state changes, several per command under load); `None` when `from` may never
    /// become `to`. It has applied if the prediction is now `to` at change `seq + 1` with the
    /// change's timestamps (`started_at`, `completed_at`: a competing change of the same
    /// prediction from the same `seq`, by another runner given the same job, carries its own).
    pub fn change_at_seq(
        id: &PredictionId,
        from: PredictionStatus,
        seq: i64,
        to: PredictionStatus,
        mut changes: Document,
    ) -> Option<ConditionalUpdate> {
        if !from.can_become(to) {
            return None;
        }
        changes.insert("status", to.as_str());
        let mut applied = doc! { "_id": id.as_str(), "status": to.as_str(), "seq": seq + 1 };
        for (field, value) in &changes {
            if matches!(value, Bson::DateTime(_)) {
                applied.insert(field.clone(), value.clone());
            }
        }
        Some(ConditionalUpdate {
            filter: doc! { "_id": id.as_str(), "status": from.as_str(), "seq": seq },
            update: doc! { "$set": changes, "$inc": { "seq": 1 } },
            applied,
        })
    }

    /// One page of an account's predictions or trainings (`kind`), newest first, and the
    /// number of all matches. (`kind` is stored for trainings only: a prediction's is `null`.)
    pub async fn list_for_account(
        &self,
        account: &AccountId,
        which: &JobFilter,
        offset: u64,
        limit: i64,
    ) -> Result<(Vec<Prediction>, u64), StoreError> {
        let kind = match which.kind {
            JobKind::Prediction => Bson::Null,
            JobKind::Training => bson::to_bson(&JobKind::Training)?,
        };
        let mut filter = doc! { "account_id": account.as_str(), "kind": kind };
        if let Some(s) = which.status {
            filter.insert("status", s.as_str());
        }
        let mut created = doc! {};
        if let Some(after) = which.created_after {
            created.insert("$gte", after);
        }
        if let Some(before) = which.created_before {
            created.insert("$lt", before);
        }
        if !created.is_empty() {
            filter.insert("created_at", created);
        }
        super::page(&self.coll, filter, doc! { "created_at": -1, "_id": -1 }, offset, limit).await
    }

    /// A training into `destination` that has not ended, if any (read on the primary: a model's
    /// delete must not miss one a lagging majority read has not seen yet).
    pub async fn trainings_into(&self, destination: &ModelRef) -> Result<Option<PredictionId>, StoreError> {
        #[derive(serde::Deserialize)]
        struct Id {
            #[serde(rename = "_id")]
            id: PredictionId,
        }
        let open = [PredictionStatus::Starting.as_str(), PredictionStatus::Processing.as_str()];
        let filter = doc! { "destination": destination.to_string(), "status": { "$in": open.to_vec() } };
        let found = self
            .coll
            .clone_with_type::<Id>()
            .find_one(filter)
            .with_options(super::settling_read())
            .projection(doc! { "_id": 1 })
            .await?;
        Ok(found.map(|f| f.id))
    }

    /// The current status of a prediction (reads the status alone).
    pub async fn status(&self, id: &PredictionId) -> Result<Option<PredictionStatus>, StoreError> {
        #[derive(serde::Deserialize)]
        struct Status {
            status: PredictionStatus,
        }
        let found = self
            .coll
            .clone_with_type::<Status>()
            .find_one(doc! { "_id": id.as_str() })
            .projection(doc! { "status": 1, "_id": 0 })
            .await?;
        Ok(found.map(|s| s.status))
    }

    /// How many predictions of `model` the account has made (a model's `run_count`).
    pub async fn count_of_model(&self, account: &AccountId, model: &ModelRef) -> Result<u64, StoreError> {
        super::count(&self.coll, doc! { "account_id": account.as_str(), "model": model.to_string() }).await
    }

    /// Predictions of `model` not yet ended (waiting or running) that came by its own route or
    /// a pinned version, not by a deployment, counted per version: each version that has any,
    /// with how many. What the model's own pods are scaled on (their sum), and the pods of an
    /// older version kept for the predictions pinned to it (its count).
    pub async fn pending_of_model_route_by_version(&self, model: &ModelRef) -> Result<Vec<(String, u64)>, StoreError> {
        let open = statuses(&[PredictionStatus::Starting, PredictionStatus::Processing]);
        let filter = doc! {
            "model": model.to_string(), "status": { "$in": open }, "deployment": null, "kind": { "$ne": "training" },
        };
        let versions = self.coll.distinct("version", filter.clone()).max_time(super::read_limit()).await?;
        let mut counted = Vec::with_capacity(versions.len());
        for version in versions.iter().filter_map(bson::Bson::as_str) {
            let mut of_version = filter.clone();
            of_version.insert("version", version);
            counted.push((version.to_owned(), super::count(&self.coll, of_version).await?));
        }
        counted.sort();
        Ok(counted)
    }

    /// Trainings of `model` not yet ended (waiting or running): what its trainer pods are
    /// scaled on.
    pub async fn count_pending_trainings_of_model(&self, model: &ModelRef) -> Result<u64, StoreError> {
        let open = statuses(&[PredictionStatus::Starting, PredictionStatus::Processing]);
        super::count(&self.coll, doc! { "model": model.to_string(), "status": { "$in": open }, "kind": "training" })
            .await
    }

    /// Predictions of the deployment `owner/name` not yet ended (waiting or running).
    pub async fn count_pending_of_deployment(&self, deployment: &str) -> Result<u64, StoreError> {
        let open = statuses(&[PredictionStatus::Starting, PredictionStatus::Processing]);
        self.coll
            .count_documents(doc! { "deployment": deployment, "status": { "$in": open } })
            .max_time(super::read_limit())
            .await
    }

    /// Predictions not yet ended whose deadline passed before `before` (at most `limit`).
    pub async fn overdue(&self, before: bson::DateTime, limit: i64) -> Result<Vec<Prediction>, StoreError> {
        let open = statuses(&[PredictionStatus::Starting, PredictionStatus::Processing]);
        self.coll
            .find(doc! { "status": { "$in": open }, "deadline_at": { "$lt": before } })
            .limit(limit)
            .await?
            .try_collect()
            .await
    }

    /// Predictions still `starting` that were created before `before`, oldest first, after
    /// `from` (the last one a previous page ended with), at most `limit`.
    pub async fn starting_since_before(
        &self,
        before: bson::DateTime,
        from: Option<&PageMark>,
        limit: i64,
    ) -> Result<Vec<Prediction>, StoreError> {
        let filter = doc! { "status": PredictionStatus::Starting.as_str(), "created_at": { "$lt": before } };
        self.page_after(filter, "created_at", from, limit).await
    }

    /// Predictions `processing` that were created before `before`, oldest first, after
    /// `from`, at most `limit`: the reconciler looks among them for predictions whose job is
    /// gone with their runner (those it gave a new job already, `requeued_at`, are passed
    /// over there: the index serving the scan does not hold that field).
    pub async fn processing_since_before(
        &self,
        before: bson::DateTime,
        from: Option<&PageMark>,
        limit: i64,
    ) -> Result<Vec<Prediction>, StoreError> {
        let filter = doc! {
            "status": PredictionStatus::Processing.as_str(),
            "created_at": { "$lt": before },
        };
        self.page_after(filter, "created_at", from, limit).await
    }

    /// Marks `p`, still `processing` as read (at its `seq`), as stranded: its job is gone and
    /// its runner too, so it is given a new job, once. The job's sequence is cleared, so that
    /// job's delivery takes it over from the runner that held it (as a redelivery does); the
    /// mark (`requeued_at`) keeps the reconciler from doing so again. Returns whether `p` was
    /// still so.
    pub async fn mark_stranded(&self, p: &Prediction, at: bson::DateTime) -> Result<bool, StoreError> {
        let filter = doc! {
            "_id": p.id.as_str(),
            "status": PredictionStatus::Processing.as_str(),
            "seq": p.seq,
            "requeued_at": { "$exists": false },
        };
        let update = doc! { "$set": { "requeued_at": at }, "$unset": { "job_seq": "" }, "$inc": { "seq": 1 } };
        Ok(self.coll.update_one(filter, update).await?.modified_count == 1)
    }

    /// Takes back the mark of [`Self::mark_stranded`] when the new job could not be published,
    /// so the next pass tries again.
    pub async fn unmark_stranded(&self, id: &PredictionId) -> Result<(), StoreError> {
        let filter = doc! { "_id": id.as_str(), "status": PredictionStatus::Processing.as_str(), "job_seq": null };
        self.coll.update_one(filter, doc! { "$unset": { "requeued_at": "" }, "$inc": { "seq": 1 } }).await?;
        Ok(())
    }

    /// The lanes and tickets of `account`'s predictions of `model` still waiting (`starting`)
    /// that took a ticket: what a lane's recount checks its counters against.
    pub async fn waiting_tickets(
        &self,
        account: &crate::domain::AccountId,
        model: &crate::domain::ModelRef,
    ) -> Result<Vec<(crate::lane::Lane, i64)>, StoreError> {
        /// What of a waiting prediction names its lane and ticket.
        #[derive(serde::Deserialize)]
        struct Waiting {
            account_id: crate::domain::AccountId,
            model: crate::domain::ModelRef,
            version: String,
            #[serde(default)]
            hardware: Option<crate::domain::Pool>,
            #[serde(default)]
            kind: crate::domain::JobKind,
            #[serde(default)]
            priority: crate::domain::Priority,
            queue_ticket: Option<i64>,
        }
        let filter = doc! {
            "account_id": account.as_str(),
            "model": model.to_string(),
            "status": PredictionStatus::Starting.as_str(),
        };
        let projection = doc! { "account_id": 1, "model": 1, "version": 1, "hardware": 1, "kind": 1, "priority": 1, "queue_ticket": 1 };
        let found: Vec<Waiting> = self
            .coll
            .clone_with_type::<Waiting>()
            .find(filter)
            .projection(projection)
            .max_time(super::read_limit())
            .await?
            .try_collect()
            .await?;
        Ok(found
            .into_iter()
            .filter_map(|w| {
                let route = crate::domain::Route::of_job(w.kind, w.version, w.hardware);
                Some((crate::lane::Lane::new(&w.model, &route, &w.account_id, w.priority), w.queue_ticket?))
            })
            .collect())
    }

    /// Up to `limit` predictions matching `filter`, in `(field, _id)` order, after `from` (the
    /// last one a previous page ended with): a page of a walk that repeats ([`PageMark`]).
    async fn page_after(
        &self,
        filter: bson::Document,
        field: &str,
        from: Option<&PageMark>,
        limit: i64,
    ) -> Result<Vec<Prediction>, StoreError> {
        self.coll
            .find(after_mark(filter, field, from))
            .sort(doc! { field: 1, "_id": 1 })
            .limit(limit)
            .await?
            .try_collect()
            .await
    }

    /// Predictions canceled between `after` and `before`, oldest first, after `from` (the last
    /// one a previous page ended with), at most `limit`.
    pub async fn canceled_between(
        &self,
        after: bson::DateTime,
        before: bson::DateTime,
        from: Option<&PageMark>,
        limit: i64,
    ) -> Result<Vec<Prediction>, StoreError> {
        let filter = doc! {
            "status": PredictionStatus::Canceled.as_str(),
            "completed_at": { "$gt": after, "$lt": before },
        };
        self.page_after(filter, "completed_at", from, limit).await
    }

    /// Ended predictions whose data is still kept, completed before `before`, oldest first,
    /// after `from` (the last one a previous page ended with), at most `limit`.
    pub async fn data_expired(
        &self,
        before: bson::DateTime,
        from: Option<&PageMark>,
        limit: i64,
    ) -> Result<Vec<Prediction>, StoreError> {
        let filter = doc! { "data_removed": false, "completed_at": { "$lt": before } };
        self.page_after(filter, "completed_at", from, limit).await
    }

    /// Whether a prediction that has not ended names file `file` in its input.
    pub async fn file_in_use(&self, file: &crate::domain::FileId) -> Result<bool, StoreError> {
        let filter = doc! { "input_files": file.as_str(), "status": { "$in": ["starting", "processing"] } };
        let ids = self.coll.clone_with_type::<bson::Document>();
        Ok(ids.find_one(filter).projection(doc! { "_id": 1 }).await?.is_some())
    }

    /// Removes a prediction's input, output and logs and sets `data_removed`; returns whether
    /// it did (false if another sweeper already had).
    pub async fn remove_data(&self, id: &PredictionId) -> Result<bool, StoreError> {
        let update = doc! {
            "$set": { "input": {}, "model_input": {}, "output": null, "logs": "", "data_removed": true },
            "$unset": { "spilled": "" },
            "$inc": { "seq": 1 },
        };
        let result = self.coll.update_one(doc! { "_id": id.as_str(), "data_removed": false }, update).await?;
        Ok(result.modified_count == 1)
    }

    /// Sets `changes` (logs, output) on a prediction that is still `processing`; returns it
    /// after the change, or `None` if it has left `processing` meanwhile.
    pub async fn update_while_processing(
        &self,
        id: &PredictionId,
        changes: Document,
    ) -> Result<Option<Prediction>, StoreError> {
        let filter = doc! { "_id": id.as_str(), "status": PredictionStatus::Processing.as_str() };
        self.update_where(filter, changes).await
    }

    /// Sets `changes` (the logs of a model's boot it waits for) on a prediction that is still
    /// `starting`; whether it was.
    pub async fn update_while_starting(&self, id: &PredictionId, changes: Document) -> Result<bool, StoreError> {
        let filter = doc! { "_id": id.as_str(), "status": PredictionStatus::Starting.as_str() };
        let result = self.coll.update_one(filter, doc! { "$set": changes, "$inc": { "seq": 1 } }).await?;
        Ok(result.matched_count == 1)
    }

    /// Hands prediction `id`, `processing` under job `job_seq` (or under no recorded job) and
    /// held by runner `from` (`None`: by no recorded runner), to runner `to`; returns it after
    /// the change, or `None` when it is no longer so (another runner took it over first, or
    /// it ended). What makes a takeover happen once.
    pub async fn hand_over(
        &self,
        id: &PredictionId,
        job_seq: i64,
        from: Option<&str>,
        to: &str,
    ) -> Result<Option<Prediction>, StoreError> {
        let held_by = from.map_or(bson::Bson::Null, |f| bson::Bson::String(f.to_owned()));
        let filter = doc! {
            "_id": id.as_str(),
            "status": PredictionStatus::Processing.as_str(),
            "job_seq": { "$in": [bson::Bson::Null, job_seq] },
            "held_by": held_by,
        };
        self.update_where(filter, doc! { "job_seq": job_seq, "held_by": to }).await
    }

    async fn update_where(&self, filter: Document, changes: Document) -> Result<Option<Prediction>, StoreError> {
        self.coll
            .find_one_and_update(filter, doc! { "$set": changes, "$inc": { "seq": 1 } })
            .return_document(ReturnDocument::After)
            .await
    }
}

/// Where a page of a scan in `(time, _id)` order ended: the next page starts after it, so a
/// scan that repeats (the reconciler's) walks the whole set instead of reading its first page
/// again and again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageMark {
    /// The time field's value of the last prediction read.
    pub at: bson::DateTime,
    /// Its id.
    pub id: String,
}

impl PageMark {
    /// The mark a page of at most `limit` leaves for the next: after its last prediction (`at`
    /// its time field), or none when the page was not full (the walk is over).
    pub fn after_page(
        page: &[Prediction],
        limit: i64,
        at: impl Fn(&Prediction) -> Option<bson::DateTime>,
    ) -> Option<Self> {
        if page.len() < usize::try_from(limit).unwrap_or(usize::MAX) {
            return None;
        }
        let last = page.last()?;
        Some(Self { at: at(last)?, id: last.id.to_string() })
    }
}

/// `filter`, limited to what comes after `from` in `(field, _id)` order.
fn after_mark(filter: bson::Document, field: &str, from: Option<&PageMark>) -> bson::Document {
    let Some(mark) = from else { return filter };
    doc! { "$and": [filter, { "$or": [
        { field: { "$gt": mark.at } },
        { field: mark.at, "_id": { "$gt": mark.id.as_str() } },
    ] }] }
}

/// Usage marks ([`crate::usage`]).
impl Predictions {
    /// Claims the usage of the ended predictions `ids` for `writer` as its batch `seq`, those
    /// whose usage is pending and that no writer claimed; how many it claimed.
    pub async fn claim_usage(&self, ids: &[&PredictionId], writer: &str, seq: i64) -> Result<u64, StoreError> {
        let ids: Vec<&str> = ids.iter().map(|id| id.as_str()).collect();
        let filter = doc! { "_id": { "$in": ids }, "usage.pending": true, "usage.writer": { "$exists": false } };
        let update = doc! { "$set": { "usage.writer": writer, "usage.seq": seq } };
        Ok(self.coll.update_many(filter, update).await?.modified_count)
    }

    /// The predictions whose usage is pending under `writer`'s batch `seq`.
    pub async fn usage_pending_of(&self, writer: &str, seq: i64) -> Result<Vec<Prediction>, StoreError> {
        let filter = doc! { "usage.pending": true, "usage.writer": writer, "usage.seq": seq };
        self.coll.find(filter).await?.try_collect().await
    }

    /// Marks the usage of predictions `ids` counted.
    pub async fn usage_counted(&self, ids: &[&PredictionId]) -> Result<(), StoreError> {
        let ids: Vec<&str> = ids.iter().map(|id| id.as_str()).collect();
        let update = doc! { "$set": { "usage.pending": false } };
        self.coll.update_many(doc! { "_id": { "$in": ids } }, update).await.map(drop)
    }

    /// Up to `limit` predictions that ended before `before` whose usage is still pending (their
    /// writer died, or is far behind), oldest first, after `from` (the last one a previous page
    /// ended with).
    pub async fn usage_pending_before(
        &self,
        before: bson::DateTime,
        from: Option<&PageMark>,
        limit: i64,
    ) -> Result<Vec<Prediction>, StoreError> {
        let filter = doc! { "usage.pending": true, "completed_at": { "$lt": before } };
        self.page_after(filter, "completed_at", from, limit).await
    }

    /// When the oldest prediction whose usage is still pending ended, if any is (the index
    /// on `usage.pending` and `completed_at` finds it).
    pub async fn oldest_usage_pending(&self) -> Result<Option<bson::DateTime>, StoreError> {
        let ended = self.coll.clone_with_type::<bson::Document>();
        let oldest = ended
            .find_one(doc! { "usage.pending": true })
            .sort(doc! { "completed_at": 1 })
            .projection(doc! { "completed_at": 1 })
            .await?;
        Ok(oldest.and_then(|d| d.get_datetime("completed_at").ok().copied()))
    }
}
