//! The price of this runner's hardware pool (see `common::store::prices`), as it records it on
//! each job it starts: read when the runner starts, taken from the announcement the operator's
//! `api admin set-price` sends on NATS once the price is stored, and read again every
//! [`REREAD`] besides (a missed announcement only delays a price). A job's cost is reckoned
//! from the price it started at.

use std::sync::{
    Arc,
    atomic::{AtomicI64, Ordering},
};

use common::{
    bus::Bus,
    domain::{Pool, Price, StartedOn},
    messages::PriceMessage,
    store::{Store, prices::REREAD},
};
use futures::StreamExt;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

/// This runner's pool and its current price.
#[derive(Clone, Debug)]
pub struct PriceBoard {
    pool: Pool,
    price: Arc<AtomicI64>,
}

impl PriceBoard {
    /// A board that never changes (tests, and a runner built without the bus).
    pub fn fixed(pool: Pool, price: Price) -> Self {
        Self { pool, price: Arc::new(AtomicI64::new(price.0)) }
    }

    /// Reads `pool`'s price now and keeps it current until `shutdown`, in a task of
    /// `background`.
    pub async fn start(
        store: &Store,
        bus: &Bus,
        pool: Pool,
        background: &TaskTracker,
        shutdown: CancellationToken,
    ) -> anyhow::Result<Self> {
        let prices = store.prices();
        let board = Self::fixed(pool.clone(), prices.of(&pool).await?);
        let mut changes = bus.subscribe_prices_changed().await?;
        let kept = board.clone();
        background.spawn(async move {
            loop {
                // An announcement of this pool's price is taken as it is, with no read: the
                // jobs that start from then on pay it. Any other wakes a read.
                let announced = tokio::select! {
                    () = shutdown.cancelled() => return,
                    Some(message) = changes.next() => serde_json::from_slice::<PriceMessage>(&message.payload).ok(),
                    () = tokio::time::sleep(REREAD) => None,
                };
                let price = match announced {
                    Some(PriceMessage::PriceSetV1 { pool, price_nanos }) if pool == kept.pool => Ok(price_nanos),
                    Some(PriceMessage::PriceSetV1 { .. }) => continue,
                    None => prices.of(&kept.pool).await,
                };
                match price {
                    Ok(price) => kept.set(price),
                    Err(e) => tracing::warn!(error = %e, "reading the pool's price failed; keeping the last one"),
                }
            }
        });
        Ok(board)
    }

    fn set(&self, price: Price) {
        let before = self.price.swap(price.0, Ordering::Relaxed);
        if before != price.0 {
            tracing::info!(pool = %self.pool, price_per_second = %price, "hardware price changed");
        }
    }

    /// The pool and its price now, as a job starting now records them.
    pub fn started_on(&self) -> StartedOn {
        StartedOn { pool: self.pool.clone(), price: Price(self.price.load(Ordering::Relaxed)) }
    }
}
