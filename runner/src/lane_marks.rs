//! The start marks of queue lanes (see [`common::store::queue_lanes`]), gathered: a runner
//! remembers the highest ticket it started in each lane and writes each lane's mark once per
//! [`START_MARK_INTERVAL`] (the contract's interval, which the api's estimates count on), not
//! once per start. A lane's mark is a maximum, so only the highest
//! ticket matters; a runner starting hundreds of predictions a second of one lane writes four
//! marks a second, where it wrote one per start (a write per prediction: 5.2 MongoDB writes
//! per prediction at 200/s instead of 4.2).
//!
//! What a waiting prediction sees: its place may lag the starts by up to the interval. A mark
//! lost to a write that failed or a runner that stopped is made up for by the lane's next one.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

#[cfg(doc)]
use common::store::queue_lanes::START_MARK_INTERVAL;
use common::{lane::Lane, store::QueueLanes};
use futures::future::join_all;
use tokio::sync::Notify;

/// The marks not yet written: the highest ticket started, per lane.
#[derive(Clone)]
pub struct LaneMarks {
    pending: Arc<Mutex<HashMap<Lane, i64>>>,
    /// Rung when a mark is noted, so the writer sleeps while there is none.
    noted: Arc<Notify>,
}

/// How often a writer with nothing to write checks whether its marks are still used.
const IDLE_CHECK: Duration = Duration::from_secs(5);

impl LaneMarks {
    /// Starts writing the marks of `lanes` every `interval` while there are some, until the
    /// last clone is dropped (the marks gathered by then are written first).
    pub fn start(lanes: QueueLanes, interval: Duration) -> Self {
        let pending: Arc<Mutex<HashMap<Lane, i64>>> = Arc::default();
        let noted = Arc::new(Notify::new());
        let (writer, heard) = (pending.clone(), noted.clone());
        tokio::spawn(async move {
            loop {
                let idle = writer.lock().unwrap_or_else(|p| p.into_inner()).is_empty();
                if idle && Arc::strong_count(&writer) > 1 {
                    // Nothing to write: asleep until a mark is noted (or, now and then, to see
                    // whether the marks are still used).
                    let _ = tokio::time::timeout(IDLE_CHECK, heard.notified()).await;
                    continue;
                }
                tokio::time::sleep(interval).await;
                let marks = std::mem::take(&mut *writer.lock().unwrap_or_else(|p| p.into_inner()));
                write(&lanes, marks).await;
                if Arc::strong_count(&writer) == 1 {
                    let marks = std::mem::take(&mut *writer.lock().unwrap_or_else(|p| p.into_inner()));
                    write(&lanes, marks).await;
                    return;
                }
            }
        });
        Self { pending, noted }
    }

    /// Notes that `ticket` of `lane` started.
    pub fn started(&self, lane: Lane, ticket: i64) {
        {
            let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            let highest = pending.entry(lane).or_insert(ticket);
            *highest = (*highest).max(ticket);
        }
        self.noted.notify_one();
    }
}

/// Writes each lane's mark, all at once.
async fn write(lanes: &QueueLanes, marks: HashMap<Lane, i64>) {
    join_all(marks.into_iter().map(|(lane, ticket)| async move {
        if let Err(e) = lanes.mark_started(&lane, ticket).await {
            tracing::debug!(error = %e, "a queue lane's start mark was not written");
        }
    }))
    .await;
}
