//! The api's ticket desk: each new prediction takes the next ticket of its queue lane
//! (`common::store::queue_lanes`) before it is stored.
//!
//! **Held blocks.** The requests of one lane that arrive while earlier ones are in flight share
//! one `$inc` (as [`super::GroupCommit`] batches inserts). That alone left one write per create
//! whenever creates come one at a time, as an open loop of 200 a second sends them: a
//! `findAndModify` per create, a fifth of the api's MongoDB writes. So a lane that took
//! [`MIN_BUSY`] or more tickets here in the last [`HOLD`] takes, with its next `$inc`, as many
//! more as it took then (at most [`MAX_BLOCK`]), and hands them out to the creates that follow
//! without a write, each in the create's own task (no trip through the desk's batch; creates in
//! flight together may so take their tickets in another order than they asked). A held block
//! is given back [`HOLD`] after it was taken, whatever of it is left: while those tickets are
//! still the lane's last ones its counter goes back over them (the common case: nobody took a
//! ticket of the lane after), else they are listed as skipped ([`QueueLanes::return_unused`]).
//! A quiet lane holds nothing and writes once per create, as before.
//!
//! What it costs the queue's figures, for at most [`HOLD`] after a block is taken:
//! - the tickets held and not yet handed out are in the lane's count of waiting as the store
//!   has it. This replica's queue places take its own out ([`TicketDesk::unused_of_model`]:
//!   its admission bound and positions count them right); what another replica holds still
//!   counts, at most that replica's demand of one [`HOLD`];
//! - with several api replicas, a ticket another replica took after this block stands behind
//!   the block's unused tickets, and the tickets of one lane are in the order they were taken
//!   from the lane, which is not quite the order of the creates across replicas.
//!
//! A replica that stops while holding a block leaves its rest counted as waiting until the
//! lane's next start moves past it (or the runners' recount of an idle lane sets it right),
//! as for any departure whose mark was lost.

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use common::{
    domain::{ModelRef, Prediction},
    lane::Lane,
    store::{
        Batching, GroupCommitError, QueueLanes,
        group_commit::{enqueue, run_writer},
    },
};
use futures::future::join_all;
use tokio::sync::{mpsc, oneshot};

/// How long a block of tickets is held before its rest is given back; also the window in
/// which a lane's demand is counted.
pub const HOLD: Duration = Duration::from_millis(250);
/// The most tickets held for one lane beyond those asked for.
pub const MAX_BLOCK: u64 = 64;
/// The tickets a lane must have taken in the last [`HOLD`] before more are held for it: a lane
/// that took one (a create a second, say) would hold a ticket only to give it back.
pub const MIN_BUSY: u64 = 2;
/// Past this many lanes known, the desk forgets those with nothing held and no recent demand.
const LANES_KEPT: usize = 4096;

/// Hands out tickets; see the module doc. Cheap to clone.
#[derive(Clone)]
pub struct TicketDesk {
    queue: mpsc::Sender<TicketRequest>,
    shelf: Arc<Shelf>,
}

/// A request for a ticket of a prediction's lane, with whom to tell.
struct TicketRequest {
    lane: Lane,
    done: oneshot::Sender<Result<i64, GroupCommitError>>,
}

/// The lanes' counters and what this replica holds of them.
struct Shelf {
    lanes: QueueLanes,
    held: Mutex<HashMap<Lane, Held>>,
}

/// What the desk holds of one lane, and how many tickets it took lately.
#[derive(Default)]
struct Held {
    /// Blocks taken from the lane and not yet handed out, oldest (lowest tickets) first.
    blocks: VecDeque<Block>,
    /// When the current demand window began (`None`: no ticket taken yet).
    window_start: Option<Instant>,
    /// Tickets handed out in the current window.
    this_window: u64,
    /// Tickets handed out in the window before, if it ended less than a window ago.
    last_window: u64,
}

/// Tickets `next..end` of a lane, taken at `taken_at`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Block {
    next: i64,
    end: i64,
    taken_at: Instant,
}

impl Held {
    /// Moves the demand window on to `now`.
    fn roll(&mut self, now: Instant) {
        let Some(start) = self.window_start else {
            self.window_start = Some(now);
            return;
        };
        let age = now.duration_since(start);
        if age >= HOLD {
            self.last_window = if age < 2 * HOLD { self.this_window } else { 0 };
            self.this_window = 0;
            self.window_start = Some(now);
        }
    }

    /// Up to `count` tickets from the blocks held, lowest first.
    fn hand_out(&mut self, count: usize) -> Vec<i64> {
        let mut tickets = Vec::with_capacity(count);
        while tickets.len() < count
            && let Some(block) = self.blocks.front_mut()
        {
            tickets.push(block.next);
            block.next += 1;
            if block.next == block.end {
                self.blocks.pop_front();
            }
        }
        tickets
    }

    /// The tickets held and not yet handed out.
    fn unused(&self) -> u64 {
        self.blocks.iter().map(|b| u64::try_from(b.end - b.next).unwrap_or(0)).sum()
    }

    /// How many tickets to hold beyond those a write takes for its requests.
    fn spare_wanted(&self) -> u64 {
        let demand = self.last_window.max(self.this_window);
        if demand >= MIN_BUSY { demand.min(MAX_BLOCK) } else { 0 }
    }

    /// Whether nothing is held and nothing was taken lately.
    fn idle(&self, now: Instant) -> bool {
        self.blocks.is_empty() && self.window_start.is_none_or(|start| now.duration_since(start) >= 2 * HOLD)
    }
}

impl TicketDesk {
    /// Starts the desk's task for `lanes` (needs a Tokio runtime).
    pub fn start(lanes: QueueLanes, batching: Batching) -> Self {
        let batching = batching.at_least_one();
        let (queue, receiver) = mpsc::channel(4 * batching.max_batch);
        let shelf = Arc::new(Shelf { lanes, held: Mutex::default() });
        let writer = shelf.clone();
        tokio::spawn(run_writer(batching, receiver, move |batch| {
            let shelf = writer.clone();
            async move { hand_out(&shelf, batch).await }
        }));
        Self { queue, shelf }
    }

    /// The tickets this desk holds and has not handed out, per lane of `model` (by
    /// [`Lane::store_key`]; lanes holding none are left out): taken from the lane's counter,
    /// so counted there as waiting, though no prediction has them.
    pub fn unused_of_model(&self, model: &ModelRef) -> HashMap<String, u64> {
        let held = self.shelf.held();
        held.iter()
            .filter(|(lane, _)| lane.model == *model)
            .map(|(lane, h)| (lane.store_key(), h.unused()))
            .filter(|(_, unused)| *unused > 0)
            .collect()
    }

    /// The next ticket of `prediction`'s lane.
    /// A lane holding a block answers at once, from it; otherwise the request joins the
    /// desk's next batch (one `$inc` per lane, see [`hand_out`]).
    pub async fn take(&self, prediction: &Prediction) -> Result<i64, GroupCommitError> {
        let lane = Lane::of(prediction);
        if let Some(ticket) = self.shelf.take_held(&lane, Instant::now()) {
            return Ok(ticket);
        }
        let (done, answer) = oneshot::channel();
        let request = TicketRequest { lane, done };
        enqueue(&self.queue, request).await.map_err(|_| GroupCommitError::Stopped)?;
        answer.await.map_err(|_| GroupCommitError::Stopped)?
    }
}

impl Shelf {
    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<Lane, Held>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// See [`next_held`].
    fn take_held(&self, lane: &Lane, now: Instant) -> Option<i64> {
        next_held(&mut self.held(), lane, now)
    }
}

/// The next ticket of a block held for `lane`, counted in its demand; `None` when the lane
/// holds none (a ticket of the lane then costs a trip through the desk's batch).
fn next_held(held: &mut HashMap<Lane, Held>, lane: &Lane, now: Instant) -> Option<i64> {
    let lane_held = held.get_mut(lane).filter(|h| !h.blocks.is_empty())?;
    lane_held.roll(now);
    let ticket = lane_held.hand_out(1).pop()?;
    lane_held.this_window += 1;
    Some(ticket)
}

/// Answers one batch of requests: from the blocks held where they reach, else with one `$inc`
/// per lane (taking a block more for a busy lane), each lane's requests in order.
async fn hand_out(shelf: &Arc<Shelf>, batch: Vec<TicketRequest>) {
    let mut by_lane: HashMap<Lane, Vec<TicketRequest>> = HashMap::new();
    for request in batch {
        by_lane.entry(request.lane.clone()).or_default().push(request);
    }
    join_all(by_lane.into_iter().map(|(lane, requests)| async move {
        let now = Instant::now();
        let (mut tickets, spare) = {
            let mut held = shelf.held();
            if held.len() > LANES_KEPT {
                held.retain(|_, h| !h.idle(now));
            }
            let lane_held = held.entry(lane.clone()).or_default();
            lane_held.roll(now);
            let tickets = lane_held.hand_out(requests.len());
            lane_held.this_window += tickets.len() as u64;
            (tickets, lane_held.spare_wanted())
        };
        let missing = (requests.len() - tickets.len()) as u64;
        let mut failed = None;
        if missing > 0 {
            match shelf.lanes.take(&lane, missing + spare).await {
                Ok(first) => {
                    let after = first + missing as i64;
                    tickets.extend(first..after);
                    let mut held = shelf.held();
                    let lane_held = held.entry(lane.clone()).or_default();
                    lane_held.this_window += missing;
                    if spare > 0 {
                        let block = Block { next: after, end: after + spare as i64, taken_at: now };
                        lane_held.blocks.push_back(block);
                        tokio::spawn(give_back_after_hold(shelf.clone(), lane.clone(), block));
                    }
                }
                Err(e) => failed = Some(Arc::new(e)),
            }
        }
        let mut tickets = tickets.into_iter();
        for request in requests {
            let answer = match (tickets.next(), &failed) {
                (Some(ticket), _) => Ok(ticket),
                (None, Some(e)) => Err(GroupCommitError::Write(e.clone())),
                (None, None) => Err(GroupCommitError::Stopped),
            };
            let _ = request.done.send(answer);
        }
    }))
    .await;
}

/// Gives back what is left of `block` of `lane` once it has been held for [`HOLD`].
async fn give_back_after_hold(shelf: Arc<Shelf>, lane: Lane, block: Block) {
    tokio::time::sleep_until((block.taken_at + HOLD).into()).await;
    let rest = {
        let mut held = shelf.held();
        let Some(lane_held) = held.get_mut(&lane) else { return };
        let at = lane_held.blocks.iter().position(|b| b.end == block.end && b.taken_at == block.taken_at);
        at.and_then(|at| lane_held.blocks.remove(at))
    };
    if let Some(rest) = rest
        && let Err(e) = shelf.lanes.return_unused(&lane, rest.next, rest.end).await
    {
        tracing::warn!(lane = %lane.store_key(), error = %e, "held tickets were not given back to their queue lane");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(blocks: &[(i64, i64)]) -> Held {
        let now = Instant::now();
        Held {
            blocks: blocks.iter().map(|&(next, end)| Block { next, end, taken_at: now }).collect(),
            ..Held::default()
        }
    }

    #[test]
    fn tickets_come_from_the_oldest_block_first_and_a_spent_block_is_dropped() {
        let mut h = held(&[(5, 7), (20, 22)]);
        assert_eq!(h.unused(), 4);
        assert_eq!(h.hand_out(3), vec![5, 6, 20]);
        assert_eq!(h.unused(), 1, "what is handed out is no longer held unused");
        assert_eq!(h.blocks.iter().map(|b| (b.next, b.end)).collect::<Vec<_>>(), vec![(21, 22)]);
        assert_eq!(h.hand_out(5), vec![21], "no more than is held");
        assert!(h.blocks.is_empty());
    }

    #[test]
    fn a_lane_holding_a_block_answers_from_it_and_counts_the_demand() {
        let now = Instant::now();
        let model = ModelRef::new("demo", "echo").expect("a model name");
        let route = common::domain::Route { version: "v1".into(), pool: None };
        let lane = Lane::new(&model, &route, &common::domain::AccountId::generate(), Default::default());
        let mut desk = HashMap::new();
        assert_eq!(next_held(&mut desk, &lane, now), None, "nothing held: the request goes to the batch");
        assert!(desk.is_empty(), "a lane holding nothing is not noted here");
        desk.insert(lane.clone(), held(&[(7, 9)]));
        assert_eq!(next_held(&mut desk, &lane, now), Some(7));
        assert_eq!(next_held(&mut desk, &lane, now), Some(8));
        assert_eq!(next_held(&mut desk, &lane, now), None, "the block is spent");
        assert_eq!(desk[&lane].this_window, 2, "tickets handed out at once count as demand");
    }

    #[test]
    fn a_lane_holds_spare_tickets_only_once_it_is_busy() {
        let start = Instant::now();
        let mut h = Held::default();
        h.roll(start);
        h.this_window = 1;
        assert_eq!(h.spare_wanted(), 0, "a create now and then takes its own ticket");
        h.this_window = MIN_BUSY;
        assert_eq!(h.spare_wanted(), MIN_BUSY);
        h.roll(start + HOLD);
        assert_eq!((h.last_window, h.this_window), (MIN_BUSY, 0), "the window before counts");
        assert_eq!(h.spare_wanted(), MIN_BUSY);
        h.this_window = 1_000;
        assert_eq!(h.spare_wanted(), MAX_BLOCK);
        h.roll(start + 4 * HOLD);
        h.this_window = 0;
        assert_eq!(h.spare_wanted(), 0, "a window that ended long ago is forgotten");
    }

    #[test]
    fn a_lane_with_nothing_held_and_no_recent_demand_is_idle() {
        let start = Instant::now();
        let mut h = held(&[(1, 2)]);
        h.roll(start);
        assert!(!h.idle(start + 3 * HOLD), "a held block keeps it");
        h.blocks.clear();
        assert!(!h.idle(start + HOLD), "recent demand keeps it");
        assert!(h.idle(start + 2 * HOLD));
    }
}
