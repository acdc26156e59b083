//! Where a waiting prediction stands: the `queue` of `GET /predictions/{id}` while it is
//! `starting`.
//!
//! **Position** follows the scheduler's rules (see docs/queue.md): within a lane (a model, an
//! account and a priority level) jobs start in the order they were created; every waiting job
//! of a higher level starts first; the lanes of a model at one level take turns, one job each.
//! A prediction with `k` jobs ahead in its own lane starts on its lane's turn `k + 1`, after
//! at most `k` jobs of every other lane of its level, so its position is
//! `1 + k + H + Σ min(w, k)` over the other lanes' waiting counts `w` at its level, with `H`
//! the jobs waiting at higher levels. It is exact up to one job per other lane with work:
//! whether that lane's turn in the last round comes before or after it depends on where the
//! turn stands, which only the runners know. Aging is not foreseen: a lane of a lower level
//! that has waited past `PRIORITY_AGING_SECONDS` may still go first. Jobs of the same model
//! handed back by a runner that stopped rejoin their lane in stream order.
//!
//! **Estimate**: with work waiting every slot serving the model is busy, so the model's
//! running predictions count its slots; it starts after `(position - 1) / slots` whole rounds
//! of the model's average recent run time, plus half a run for the round it waits in. No
//! estimate without a finished run to average or a slot running.
//!
//! **Lanes** are a model's jobs of one route (version and pool) and one account, as the
//! runners take turns between them; the other lanes counted are those of the same route.
//!
//! **Cost**, whatever the length of the queue: one read of the prediction's lane (a document
//! by its id: its tickets and marks), and the model's lanes (one read) at most once every
//! [`MODEL_QUEUE_TTL`] per model and replica, fetched by one request while the others use the
//! last ones; only for a prediction that is `starting`. The running count and run times come
//! from the live runners' records ([`crate::state::model_catalog::LiveRunners`], read every 2 s for versions
//! anyway), which each runner rewrites within a second of a change: they may be 3 s old.
//! The place of a prediction stored before lanes had tickets is counted (a query that grows
//! with its lane's queue). `bench queue` measures a get with it beside one without.
//!
//! **Admission** (`API_MAX_QUEUE_SECONDS`, off by default): a create whose prediction would
//! wait longer than the bound to start is refused before anything is written
//! ([`QueuePlaces::admit`]). Its wait is its position as a new job of its lane (the same
//! rule as above, from the model's lanes as this replica last read them, less the tickets its
//! ticket desk holds unused ([`crate::state::tickets`]), plus the creates this replica
//! admitted to that lane since: a burst of creates that all find the same last reading is
//! refused past the bound, not admitted whole) over the rate at which the model's jobs have
//! been starting (the lanes' start marks, sampled at each read of the lanes over the last
//! [`RATE_WINDOW`]). A model whose rate is not known (nothing started
//! lately, no runner yet, or fewer than [`RATE_MIN_SPAN`] of readings) is never refused: its
//! predictions wait for a runner, within their deadline. The marks trail the starts by up to
//! 250 ms ([`START_MARK_INTERVAL`]): the wait counts half of that as already started.

use std::{
    collections::{HashMap, VecDeque},
    sync::Arc,
    time::{Duration, Instant},
};

use bson::DateTime;
use chrono::Utc;
use common::{
    cache::TtlCache,
    domain::{ModelRef, Prediction, PredictionStatus},
    lane::Lane,
    store::{
        LaneCounters, Predictions, QueueFigures, QueueLanes, StoreError, queue_lanes::START_MARK_INTERVAL,
        runners::ModelRuns,
    },
    views::QueuePlace,
};
use tokio::sync::Mutex;

use crate::{
    error::ApiError,
    state::{model_catalog::LiveRunners, tickets::TicketDesk},
};

/// How long a model's lanes are reused: the other lanes' counts may be this old; the
/// prediction's own place in its lane is always read.
pub const MODEL_QUEUE_TTL: std::time::Duration = std::time::Duration::from_secs(1);
/// How long the lanes are reused for admission, which needs them fresher.
pub const ADMISSION_TTL: std::time::Duration = std::time::Duration::from_millis(200);
/// How far back the start rate of a model is measured.
pub const RATE_WINDOW: std::time::Duration = std::time::Duration::from_secs(5);
/// The shortest span of samples a start rate is read from. The rate is how fast jobs started,
/// which is how fast they can start only while some wait: over a short span after a model
/// wakes it reads the first creates' trickle (and starts not yet marked), and a steady load
/// far below what the runners start was refused at the bound. Half a second was that short
/// on a one-core machine; two seconds of readings hold the model's steady rate.
const RATE_MIN_SPAN: std::time::Duration = std::time::Duration::from_secs(2);

/// 1 + the jobs that start before a prediction with `figures` (see the module doc).
pub fn position(figures: &QueueFigures) -> u64 {
    let k = figures.ahead_in_lane;
    1 + k + figures.higher_levels + figures.other_lanes.iter().map(|w| (*w).min(k)).sum::<u64>()
}

/// Seconds until a prediction at `position` starts, if they can be estimated.
pub fn seconds_to_start(position: u64, figures: &QueueFigures) -> Option<f64> {
    if figures.running == 0 || figures.recent_run_seconds.is_empty() {
        return None;
    }
    let average = figures.recent_run_seconds.iter().sum::<f64>() / figures.recent_run_seconds.len() as f64;
    let rounds = ((position - 1) / figures.running) as f64;
    Some((rounds + 0.5) * average)
}

/// Waiting predictions' places, with each model's lanes reused for [`MODEL_QUEUE_TTL`] by
/// this replica.
pub struct QueuePlaces {
    predictions: Predictions,
    lanes: QueueLanes,
    live: Arc<LiveRunners>,
    /// This replica's ticket desk: what it holds unused is taken out of the lanes read.
    desk: TicketDesk,
    models: TtlCache<ModelRef, Arc<Vec<LaneCounters>>>,
    /// Per model, the jobs started through its lanes at each read: `(when, Σ started_through)`.
    starts: std::sync::Mutex<HashMap<ModelRef, StartSamples>>,
    /// Per lane (its store key), the creates admitted since its model's lanes were last read.
    admitted: std::sync::Mutex<HashMap<String, u64>>,
    /// Held while a model's lanes are read: one read at a time refreshes them, and the
    /// requests that find it under way use the lanes read before (a refresh per request when
    /// the cache expired was a burst of identical reads each second under load).
    refreshing: Mutex<()>,
}

impl QueuePlaces {
    /// Places read from `predictions` and `lanes`, with what `live` runners run, less what
    /// `desk` holds unused.
    pub fn new(predictions: Predictions, lanes: QueueLanes, live: Arc<LiveRunners>, desk: TicketDesk) -> Self {
        Self {
            predictions,
            lanes,
            live,
            desk,
            models: TtlCache::new(ADMISSION_TTL, 10_000),
            starts: std::sync::Mutex::default(),
            admitted: std::sync::Mutex::default(),
            refreshing: Mutex::new(()),
        }
    }

    /// Admits a new prediction like `p` unless it would wait longer than `bound` to start:
    /// then `Err` with that wait. Its wait is its position as a new job of its lane over the
    /// model's start rate (see the module doc); one admitted counts as waiting in its lane
    /// until the lanes are read again. A model whose start rate is not known admits everything.
    pub async fn admit(&self, p: &Prediction, bound: Duration) -> Result<Result<(), Duration>, ApiError> {
        let lanes = self.model_lanes(&p.model, ADMISSION_TTL).await?;
        let Some(rate) = self.start_rate(&p.model) else { return Ok(Ok(())) };
        let lane = Lane::of(p);
        let key = lane.store_key();
        let mut admitted = self.admitted.lock().unwrap_or_else(|p| p.into_inner());
        let since_read = admitted.get(&key).copied().unwrap_or(0);
        let ahead = lanes.iter().find(|l| l.id == key).map_or(0, LaneCounters::waiting) + since_read;
        let figures = figures_of(&lane, ahead, &lanes, None);
        // The marks trail the starts by half their interval on average: as many jobs as start
        // meanwhile are counted waiting that have started.
        let lag = START_MARK_INTERVAL.as_secs_f64() / 2.0;
        let wait = Duration::from_secs_f64(((position(&figures) - 1) as f64 / rate - lag).max(0.0));
        if wait > bound {
            return Ok(Err(wait));
        }
        *admitted.entry(key).or_default() += 1;
        Ok(Ok(()))
    }

    /// The jobs of `model` started per second over the last [`RATE_WINDOW`], if known and not 0.
    fn start_rate(&self, model: &ModelRef) -> Option<f64> {
        let starts = self.starts.lock().unwrap_or_else(|p| p.into_inner());
        starts.get(model)?.rate()
    }

    /// The queue place of `p` if it is waiting; `None` otherwise.
    pub async fn place(&self, p: &Prediction) -> Result<Option<QueuePlace>, ApiError> {
        if p.status != PredictionStatus::Starting {
            return Ok(None);
        }
        let lanes = self.model_lanes(&p.model, MODEL_QUEUE_TTL).await?;
        let live = self.live.snapshot().await?;
        let runs = live.runs.get(&p.model);
        let lane = Lane::of(p);
        let ahead = match p.queue_ticket {
            Some(ticket) => self.lanes.get(&lane).await?.map_or(0, |state| state.ahead_of(ticket)),
            None => self.predictions.ahead_in_lane(p).await?,
        };
        let figures = figures_of(&lane, ahead, &lanes, runs);
        let position = position(&figures);
        let estimated_start_at = seconds_to_start(position, &figures).map(|s| {
            let at = DateTime::now().to_chrono() + chrono::Duration::milliseconds((s * 1000.0) as i64);
            at.max(Utc::now())
        });
        Ok(Some(QueuePlace { position, estimated_start_at }))
    }

    /// The lanes of `model`, at most `ttl` old, or older while another request reads them.
    async fn model_lanes(&self, model: &ModelRef, ttl: Duration) -> Result<Arc<Vec<LaneCounters>>, StoreError> {
        if let Some(lanes) = self.models.get_within(model, ttl) {
            return Ok(lanes);
        }
        let _reading = match (self.refreshing.try_lock(), self.models.get_stale(model)) {
            (Ok(guard), _) => guard,
            (Err(_), Some(last)) => return Ok(last),
            (Err(_), None) => self.refreshing.lock().await,
        };
        if let Some(lanes) = self.models.get_within(model, ttl) {
            return Ok(lanes);
        }
        let mut read = self.lanes.of_model(model).await?;
        less_unused(&mut read, &self.desk.unused_of_model(model));
        let lanes = Arc::new(read);
        let started = lanes.iter().map(|l| l.started_through).sum::<i64>();
        let mut starts = self.starts.lock().unwrap_or_else(|p| p.into_inner());
        starts.entry(model.clone()).or_default().add(Instant::now(), started);
        drop(starts);
        self.models.insert(model.clone(), lanes.clone());
        // What this replica admitted is in the lanes just read (or about to be, as a write
        // in flight lands): counted from them from now on.
        let prefix = format!("{model}|");
        self.admitted.lock().unwrap_or_else(|p| p.into_inner()).retain(|key, _| !key.starts_with(&prefix));
        Ok(lanes)
    }
}

/// Takes out of `lanes` the tickets this replica's desk took and holds `unused` (by lane key):
/// no prediction has them, so they do not wait. They are the lane's last tickets unless
/// another replica took some since; either way the count of waiting drops by as many.
fn less_unused(lanes: &mut [LaneCounters], unused: &HashMap<String, u64>) {
    for lane in lanes {
        if let Some(held) = unused.get(&lane.id) {
            let held = i64::try_from(*held).unwrap_or(i64::MAX);
            lane.taken = lane.taken.saturating_sub(held).max(lane.started_through);
        }
    }
}

/// The figures of a job of `lane` with `ahead` of its own lane before it: the waiting counts of
/// the model's other `lanes` it takes turns with or ranks below, and what the model's live
/// runners run of it (`runs`, if known).
fn figures_of(lane: &Lane, ahead: u64, lanes: &[LaneCounters], runs: Option<&ModelRuns>) -> QueueFigures {
    QueueFigures {
        ahead_in_lane: ahead,
        other_lanes: lanes.iter().filter(|l| lane.shares_turns_with(l)).map(LaneCounters::waiting).collect(),
        higher_levels: lanes.iter().filter(|l| lane.ranks_below(l)).map(LaneCounters::waiting).sum(),
        running: runs.map_or(0, |r| r.running),
        recent_run_seconds: runs.map(|r| r.recent_run_seconds.clone()).unwrap_or_default(),
    }
}

/// A model's start marks as read: `(when, Σ started_through)`, the last [`RATE_WINDOW`].
#[derive(Default)]
struct StartSamples(VecDeque<(Instant, i64)>);

impl StartSamples {
    /// Adds a reading; a total below the last (a lane gone) starts the samples again.
    fn add(&mut self, at: Instant, started: i64) {
        if self.0.back().is_some_and(|(_, last)| started < *last) {
            self.0.clear();
        }
        self.0.push_back((at, started));
        while self.0.front().is_some_and(|(first, _)| at.duration_since(*first) > RATE_WINDOW) {
            self.0.pop_front();
        }
    }

    /// Starts per second between the oldest and the newest reading, if they are far enough
    /// apart and some job started.
    fn rate(&self) -> Option<f64> {
        let ((from, first), (to, last)) = (self.0.front()?, self.0.back()?);
        let span = to.duration_since(*from);
        (span >= RATE_MIN_SPAN && last > first).then(|| (last - first) as f64 / span.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(ahead: u64, others: &[u64], running: u64, recent: &[f64]) -> QueueFigures {
        QueueFigures {
            ahead_in_lane: ahead,
            other_lanes: others.to_vec(),
            higher_levels: 0,
            running,
            recent_run_seconds: recent.to_vec(),
        }
    }

    #[test]
    fn tickets_the_desk_holds_unused_do_not_wait() {
        let lane = |id: &str, taken, started_through, skipped: Vec<i64>| LaneCounters {
            id: id.to_owned(),
            taken,
            started_through,
            skipped,
            ..LaneCounters::default()
        };
        // Lane a: 10 taken, 4 started, ticket 6 left, 3 held unused here: 2 wait.
        // Lane b: 3 unused held, 1 started since the read (held more than waits): none waits.
        let mut lanes = vec![lane("a", 10, 4, vec![6]), lane("b", 5, 3, vec![]), lane("c", 8, 2, vec![])];
        let unused = HashMap::from([("a".to_owned(), 3), ("b".to_owned(), 3)]);
        less_unused(&mut lanes, &unused);
        let waiting: Vec<u64> = lanes.iter().map(LaneCounters::waiting).collect();
        assert_eq!(waiting, vec![2, 0, 6], "a lane the desk holds nothing of is as read");
    }

    #[test]
    fn the_first_of_an_empty_queue_starts_next() {
        assert_eq!(position(&figures(0, &[], 0, &[])), 1);
        assert_eq!(position(&figures(0, &[5, 3], 4, &[])), 1, "the other lanes wait for their turns");
    }

    #[test]
    fn other_lanes_go_ahead_once_per_turn_while_they_have_work() {
        // 3 ahead in its own lane: a lane of 10 gets 3 turns first, a lane of 1 one.
        assert_eq!(position(&figures(3, &[10, 1], 2, &[])), 1 + 3 + 3 + 1);
        assert_eq!(position(&figures(9, &[], 0, &[])), 10);
    }

    #[test]
    fn every_job_waiting_at_a_higher_level_goes_first() {
        let f = QueueFigures { higher_levels: 7, ..figures(3, &[10, 1], 2, &[]) };
        assert_eq!(position(&f), 1 + 3 + 7 + 3 + 1);
    }

    #[test]
    fn the_estimate_counts_whole_rounds_of_the_average_run() {
        let f = figures(0, &[], 2, &[1.0, 3.0]);
        assert_eq!(seconds_to_start(1, &f), Some(1.0), "half a run on a busy slot");
        assert_eq!(seconds_to_start(3, &f), Some(3.0), "one round of two slots, then half a run");
        assert_eq!(seconds_to_start(3, &figures(0, &[], 0, &[1.0])), None, "nothing running");
        assert_eq!(seconds_to_start(3, &figures(0, &[], 2, &[])), None, "no finished run");
    }

    #[test]
    fn the_start_rate_is_read_over_the_window_and_only_when_jobs_started() {
        let t = Instant::now();
        let mut samples = StartSamples::default();
        samples.add(t, 100);
        assert_eq!(samples.rate(), None, "one reading");
        samples.add(t + Duration::from_millis(1_900), 300);
        assert_eq!(samples.rate(), None, "too short a span");
        samples.add(t + Duration::from_secs(2), 2_100);
        assert_eq!(samples.rate(), Some(1_000.0));
        samples.add(t + Duration::from_secs(8), 2_100);
        assert_eq!(samples.rate(), None, "nothing started within the window");
        samples.add(t + Duration::from_secs(9), 1_000);
        assert_eq!(samples.0.len(), 1, "a lower total starts again");
    }
}
