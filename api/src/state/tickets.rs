//! The api's ticket desk: each new prediction takes the next ticket of its queue lane
//! (`common::store::queue_lanes`) before it is stored.

use std::{collections::HashMap, sync::Arc};

use common::{
    domain::Prediction,
    lane::Lane,
    store::{Batching, GroupCommitError, QueueLanes, group_commit::run_writer},
};
use futures::future::join_all;
use tokio::sync::{mpsc, oneshot};

/// Hands out tickets: the requests of one lane that arrive while earlier ones are in flight
/// share one `$inc` (as [`super::GroupCommit`] batches inserts), so a lane's document takes
/// one write per batch of creates, not one per create. Cheap to clone.
#[derive(Clone)]
pub struct TicketDesk {
    queue: mpsc::Sender<TicketRequest>,
}

/// A request for a ticket of a prediction's lane, with whom to tell.
struct TicketRequest {
    lane: Lane,
    done: oneshot::Sender<Result<i64, GroupCommitError>>,
}

impl TicketDesk {
    /// Starts the desk's task for `lanes` (needs a Tokio runtime).
    pub fn start(lanes: QueueLanes, batching: Batching) -> Self {
        let batching = batching.at_least_one();
        let (queue, receiver) = mpsc::channel(4 * batching.max_batch);
        tokio::spawn(run_writer(batching, receiver, move |batch| {
            let lanes = lanes.clone();
            async move { hand_out(&lanes, batch).await }
        }));
        Self { queue }
    }

    /// The next ticket of `prediction`'s lane.
    pub async fn take(&self, prediction: &Prediction) -> Result<i64, GroupCommitError> {
        let (done, answer) = oneshot::channel();
        let request = TicketRequest { lane: Lane::of(prediction), done };
        self.queue.send(request).await.map_err(|_| GroupCommitError::Stopped)?;
        answer.await.map_err(|_| GroupCommitError::Stopped)?
    }
}

/// Takes the tickets of one batch, one `$inc` per lane, and answers each request in order.
async fn hand_out(lanes: &QueueLanes, batch: Vec<TicketRequest>) {
    let mut by_lane: HashMap<Lane, Vec<TicketRequest>> = HashMap::new();
    for request in batch {
        by_lane.entry(request.lane.clone()).or_default().push(request);
    }
    join_all(by_lane.into_iter().map(|(lane, requests)| async move {
        match lanes.take(&lane, requests.len() as u64).await {
            Ok(ticket) => {
                for (n, request) in (0..).zip(requests) {
                    let _ = request.done.send(Ok(ticket + n));
                }
            }
            Err(e) => {
                let e = Arc::new(e);
                for request in requests {
                    let _ = request.done.send(Err(GroupCommitError::Write(e.clone())));
                }
            }
        }
    }))
    .await;
}
