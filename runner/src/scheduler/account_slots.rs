//! Concurrency caps per account, counted on NATS, so every runner and replica counts the same
//! slots and a restart of any of them loses nothing.
//!
//! **A slot is a key.** An account capped at `n` (its `max_concurrency`, set with `api admin
//! set-concurrency`) has the slots `<account id>.0` … `<account id>.<n-1>` in the key-value
//! bucket [`Subjects::account_slots_bucket`](common::subjects::Subjects::account_slots_bucket).
//! The scheduler takes one before it fetches a job of the account (a KV `create`, which the
//! server refuses when the key exists: of two runners that try the same slot, one wins) and
//! frees it when the job ends (a delete that expects this runner's last revision). So the
//! account never has more than `n` jobs running, whatever runners race, and a job that waits
//! for a slot waits in its lane on JetStream: nothing is refused, nothing is lost, and the
//! lanes of other accounts keep taking the free runner slots.
//!
//! **A dead runner's slot frees itself; a cut-off one keeps it.** Held slots are rewritten
//! every quarter of the lease ([`lease_for`]: [`LEASE_FLOOR`], or two thirds of the runner's
//! ack wait if that is longer), and the bucket's entries age out after the lease: a runner
//! killed mid-job stops rewriting, its slots age out within the lease, and the server writes a
//! delete marker that every runner's watch sees. The lease outlasts a JetStream leader
//! election (of the bucket's stream, or the loss of a NATS node) and a runner starved of CPU
//! for a while, during which rewrites stop although the job runs on: a shorter lease would
//! let another job of the account start then, past its cap. A slot found aged out all the
//! same is taken again if it is still free.
//!
//! **Knowing which slot is free costs no round trip.** Each runner watches the bucket and keeps
//! a mirror of the taken slots; it tries only slots the mirror sees free (a lost race costs one
//! `create`, and marks the slot taken), and a lane of an account whose slots are all taken is
//! not picked at all until a slot frees, which wakes the scheduler. An account with no cap
//! costs one cache look-up per fetch.
//!
//! **Slots for the jobs announced.** The scheduler takes as many of a capped account's slots
//! as its lane's doorbells announced jobs not yet fetched (at least one), so few slots are
//! taken for jobs that are not there, while a backlog is still fetched in batches.
//!
//! **The cap** is read from MongoDB through a cache of [`CAP_TTL`]: a change applies within it.
//! An account counts as full while it holds at least its cap, so lowering a cap below what
//! runs lets the running jobs end and starts no new one until the account is under it.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard},
    time::{Duration, Instant},
};

use async_nats::jetstream::kv::{self, CreateErrorKind, Operation};
use bytes::Bytes;
use futures::StreamExt;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

use common::{cache::TtlCache, domain::AccountId, store::accounts::Accounts};

/// The shortest lease of a slot: longer than a NATS cluster takes to elect a new leader after
/// losing one (4 to 9 s of election timeout after the loss is noticed), twice over.
pub const LEASE_FLOOR: Duration = Duration::from_secs(20);

/// How long a slot lives without being rewritten, for runners whose jobs are redelivered after
/// `ack_wait`: [`LEASE_FLOOR`], or two thirds of the ack wait when that is longer (an ack wait
/// raised to ride out longer stalls keeps the slots through them too).
pub fn lease_for(ack_wait: std::time::Duration) -> std::time::Duration {
    (ack_wait * 2 / 3).max(LEASE_FLOOR)
}

/// How long a cap read from MongoDB is used before it is read again.
pub const CAP_TTL: Duration = Duration::from_secs(5);
/// How long an account whose slots could not be taken is passed over, unless a slot frees
/// first (a slot freed anywhere wakes the scheduler at once).
const BLOCKED_FOR: Duration = Duration::from_secs(1);
/// How long after the watch fails it is opened again.
const REWATCH: Duration = Duration::from_secs(1);

/// What a fetch of an account's jobs may take.
pub enum Claim {
    /// The account has no cap.
    Unlimited,
    /// The slots taken for it (none: the account is at its cap, or its cap could not be read).
    Capped(Vec<AccountSlot>),
}

/// One slot of a capped account, held while one of its jobs runs; freed on drop.
pub struct AccountSlot {
    key: String,
    keeper: mpsc::UnboundedSender<Keep>,
}

impl Drop for AccountSlot {
    fn drop(&mut self) {
        let _ = self.keeper.send(Keep::Free(std::mem::take(&mut self.key)));
    }
}

/// What the keeper task does with a slot.
enum Keep {
    /// Rewrite it every third of the lease, from this revision on.
    Hold(String, u64),
    /// Delete it.
    Free(String),
}

/// The slots taken in the bucket, as the watch last saw them.
#[derive(Default)]
struct Mirror {
    /// Per account: its taken slots, and when each was last written.
    taken: HashMap<AccountId, HashMap<u32, Instant>>,
    /// Accounts passed over until then (see [`BLOCKED_FOR`]).
    blocked: HashMap<AccountId, Instant>,
}

/// The account slots of one runner: claims, the mirror of the bucket, and the caps.
pub struct AccountSlots {
    kv: kv::Store,
    accounts: Accounts,
    caps: TtlCache<AccountId, Option<u32>>,
    mirror: Arc<Mutex<Mirror>>,
    lease: Duration,
    holder: Bytes,
    keeper: mpsc::UnboundedSender<Keep>,
}

impl AccountSlots {
    /// Slots in `kv` (whose entries age out after `lease`), caps read from `accounts`; a slot
    /// freed anywhere wakes `wake`. The watch stops with `shutdown`; the keeper, which frees
    /// slots, stops once every slot and this value are dropped (its handle is returned).
    pub fn start(
        kv: kv::Store,
        accounts: Accounts,
        lease: Duration,
        holder: &str,
        wake: Arc<Notify>,
        shutdown: CancellationToken,
    ) -> (Arc<Self>, tokio::task::JoinHandle<()>) {
        let mirror = Arc::new(Mutex::new(Mirror::default()));
        let (keeper, orders) = mpsc::unbounded_channel();
        let holder = Bytes::from(holder.to_owned());
        tokio::spawn(watch(kv.clone(), mirror.clone(), wake, shutdown));
        let kept = tokio::spawn(keep(kv.clone(), holder.clone(), lease, orders));
        let slots = Self { kv, accounts, caps: TtlCache::new(CAP_TTL, 100_000), mirror, lease, holder, keeper };
        (Arc::new(slots), kept)
    }

    fn mirror(&self) -> MutexGuard<'_, Mirror> {
        self.mirror.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `account` is known to be at its cap (or passed over for a moment): its lanes
    /// are not picked. An account whose cap is not cached yet is not full.
    pub fn is_full(&self, account: &AccountId) -> bool {
        let Some(Some(cap)) = self.caps.get(account) else { return false };
        let now = Instant::now();
        let mirror = self.mirror();
        if mirror.blocked.get(account).is_some_and(|until| now < *until) {
            return true;
        }
        mirror.taken.get(account).map_or(0, |slots| fresh(slots, now, self.lease).count()) >= cap as usize
    }

    /// Takes up to `most` slots of `account`, or none if it has no cap.
    pub async fn claim(&self, account: &AccountId, most: usize) -> Claim {
        let cap = match self.cap(account).await {
            Ok(None) => return Claim::Unlimited,
            Ok(Some(cap)) => cap,
            Err(e) => {
                tracing::warn!(%account, error = %e, "the account's concurrency cap could not be read; its jobs wait");
                self.block(account);
                return Claim::Capped(Vec::new());
            }
        };
        let mut taken = Vec::new();
        for slot in self.free_slots(account, cap, most) {
            let key = format!("{account}.{slot}");
            match self.kv.create(&key, self.holder.clone()).await {
                Ok(revision) => {
                    self.mark_taken(account, slot);
                    let _ = self.keeper.send(Keep::Hold(key.clone(), revision));
                    taken.push(AccountSlot { key, keeper: self.keeper.clone() });
                    if taken.len() >= most {
                        break;
                    }
                }
                Err(e) if e.kind() == CreateErrorKind::AlreadyExists => self.mark_taken(account, slot),
                Err(e) => {
                    tracing::warn!(%account, error = %e, "an account slot could not be taken");
                    break;
                }
            }
        }
        if taken.is_empty() {
            self.block(account);
        }
        Claim::Capped(taken)
    }

    /// The account's cap, cached.
    async fn cap(&self, account: &AccountId) -> Result<Option<u32>, common::store::StoreError> {
        self.caps.get_or_load(account, || self.accounts.max_concurrency(account)).await
    }

    /// The slots below `cap` the mirror sees free, if the account is under its cap, at most
    /// as many as it may still take.
    fn free_slots(&self, account: &AccountId, cap: u32, most: usize) -> Vec<u32> {
        let now = Instant::now();
        let mirror = self.mirror();
        let taken: Vec<u32> =
            mirror.taken.get(account).map(|s| fresh(s, now, self.lease).collect()).unwrap_or_default();
        let room = (cap as usize).saturating_sub(taken.len()).min(most);
        if room == 0 {
            return Vec::new();
        }
        (0..cap).filter(|slot| !taken.contains(slot)).collect()
    }

    fn mark_taken(&self, account: &AccountId, slot: u32) {
        self.mirror().taken.entry(account.clone()).or_default().insert(slot, Instant::now());
    }

    fn block(&self, account: &AccountId) {
        self.mirror().blocked.insert(account.clone(), Instant::now() + BLOCKED_FOR);
    }
}

/// The slots of one account written within the lease (and a second of grace): a slot older
/// than that has aged out on the server, whether or not its delete marker has arrived.
fn fresh(slots: &HashMap<u32, Instant>, now: Instant, lease: Duration) -> impl Iterator<Item = u32> + '_ {
    let limit = lease + Duration::from_secs(1);
    slots.iter().filter(move |(_, seen)| now.saturating_duration_since(**seen) < limit).map(|(slot, _)| *slot)
}

/// The account and slot of a key (`<account id>.<slot>`).
fn parse_key(key: &str) -> Option<(AccountId, u32)> {
    let (account, slot) = key.rsplit_once('.')?;
    Some((AccountId::parse(account).ok()?, slot.parse().ok()?))
}

/// Keeps the mirror of the bucket until `shutdown`: a slot written is taken, a slot deleted (or
/// aged out) is free and wakes the scheduler.
async fn watch(kv: kv::Store, mirror: Arc<Mutex<Mirror>>, wake: Arc<Notify>, shutdown: CancellationToken) {
    loop {
        let mut entries = match kv.watch_all().await {
            Ok(entries) => entries,
            Err(e) => {
                tracing::warn!(error = %e, "watching the account slots failed; trying again");
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(REWATCH) => continue,
                }
            }
        };
        loop {
            let entry = tokio::select! {
                () = shutdown.cancelled() => return,
                entry = entries.next() => entry,
            };
            let entry = match entry {
                Some(Ok(entry)) => entry,
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "the watch of the account slots broke; opening it again");
                    break;
                }
                None => break,
            };
            let Some((account, slot)) = parse_key(&entry.key) else { continue };
            let mut state = mirror.lock().unwrap_or_else(|p| p.into_inner());
            if entry.operation == Operation::Put {
                state.taken.entry(account).or_default().insert(slot, Instant::now());
            } else {
                if let Some(slots) = state.taken.get_mut(&account) {
                    slots.remove(&slot);
                }
                state.blocked.remove(&account);
                drop(state);
                wake.notify_one();
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(REWATCH) => {}
        }
    }
}

/// Rewrites every held slot each quarter of `lease` and deletes the freed ones, until every
/// sender is gone.
async fn keep(kv: kv::Store, holder: Bytes, lease: Duration, mut orders: mpsc::UnboundedReceiver<Keep>) {
    let mut held: HashMap<String, u64> = HashMap::new();
    let mut tick = tokio::time::interval(lease / 4);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            order = orders.recv() => match order {
                Some(Keep::Hold(key, revision)) => {
                    held.insert(key, revision);
                }
                Some(Keep::Free(key)) => {
                    if let Some(revision) = held.remove(&key)
                        && let Err(e) = kv.delete_expect_revision(&key, Some(revision)).await
                    {
                        tracing::warn!(slot = %key, error = %e, "an account slot was not freed; it ages out within the lease");
                    }
                }
                None => return,
            },
            _ = tick.tick() => {
                let mut lost = Vec::new();
                for (key, revision) in &mut held {
                    match kv.update(key, holder.clone(), *revision).await {
                        Ok(next) => *revision = next,
                        Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => lost.push(key.clone()),
                        Err(e) => tracing::warn!(slot = %key, error = %e, "an account slot was not refreshed"),
                    }
                }
                for key in lost {
                    // Taken again if no other job took it meanwhile (then the account runs
                    // past its cap until one of them ends).
                    match kv.create(&key, holder.clone()).await {
                        Ok(revision) => {
                            tracing::warn!(slot = %key, "an account slot aged out while its job ran (was NATS unreachable for the lease?); taken again");
                            held.insert(key, revision);
                        }
                        Err(e) if e.kind() == CreateErrorKind::AlreadyExists => {
                            tracing::error!(slot = %key, "an account slot aged out while its job ran and was taken by another job; the account runs past its cap until one ends");
                            held.remove(&key);
                        }
                        // NATS still unreachable: kept, and tried again at the next tick (its
                        // rewrite finds it gone again).
                        Err(e) => tracing::warn!(slot = %key, error = %e, "an account slot aged out while its job ran and could not be taken again yet"),
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_key_names_its_account_and_number() {
        let account = AccountId::generate();
        assert_eq!(parse_key(&format!("{account}.3")), Some((account.clone(), 3)));
        assert_eq!(parse_key(&format!("{account}.x")), None);
        assert_eq!(parse_key("acct_1.0"), None, "not an account id");
        assert_eq!(parse_key("nodot"), None);
    }

    #[test]
    fn a_slot_not_written_within_the_lease_counts_as_free() {
        let now = Instant::now();
        let lease = Duration::from_secs(6);
        let slots = HashMap::from([(0, now), (1, now - Duration::from_secs(8))]);
        let live: Vec<u32> = fresh(&slots, now, lease).collect();
        assert_eq!(live, vec![0]);
    }
}
