//! The database's clock, as the times a prediction is billed by are read: when it started and
//! when it ended are written by different machines (the runner that starts it; the runner
//! that finishes it, the api that cancels it or the reconciler that fails it), and a second of
//! skew between two of them was a second billed or lost. Each process measures how far its
//! own clock is from the MongoDB server's (`hello` answers with the server's `localTime`),
//! and stamps those times as the server's clock reads them: one clock for every machine.
//!
//! The offset is the server's time minus the midpoint of the round trip, so it is off by at
//! most half a round trip (a millisecond on a LAN); it is measured again every
//! [`MEASURE_EVERY`], so a clock that drifts, or a new primary after an election, is caught up
//! with. Until it is first measured, or where a server does not say its time, the offset is 0:
//! the process's own clock, as before.

use std::{
    sync::{
        Arc,
        atomic::{AtomicI64, Ordering},
    },
    time::Duration,
};

use bson::{DateTime, doc};
use mongodb::Database;
use tokio_util::sync::CancellationToken;

use super::StoreError;

/// How often the offset is measured again.
pub const MEASURE_EVERY: Duration = Duration::from_secs(60);

/// The server's clock as this process reads it: its own plus the measured offset.
#[derive(Clone, Debug, Default)]
pub struct ServerClock {
    offset_millis: Arc<AtomicI64>,
}

/// The server's clock minus ours, from a round trip sent at `sent`, answered at `received`
/// (both ours) and stamped `server` by the server: the server stamps its answer about midway.
pub fn offset_of(sent: i64, received: i64, server: i64) -> i64 {
    server - (sent + (received - sent) / 2)
}

impl ServerClock {
    /// Now, by the server's clock.
    pub fn now(&self) -> DateTime {
        DateTime::from_millis(DateTime::now().timestamp_millis() + self.offset_millis())
    }

    /// The server's clock minus this process's, in milliseconds, as last measured.
    pub fn offset_millis(&self) -> i64 {
        self.offset_millis.load(Ordering::Relaxed)
    }

    /// Measures the offset once on `db`'s server; the offset, or `None` when the server does
    /// not say its time (the offset is then left as it was).
    pub async fn measure(&self, db: &Database) -> Result<Option<i64>, StoreError> {
        let sent = DateTime::now().timestamp_millis();
        let reply = db.run_command(doc! { "hello": 1 }).await?;
        let received = DateTime::now().timestamp_millis();
        let Ok(server) = reply.get_datetime("localTime") else {
            return Ok(None);
        };
        let offset = offset_of(sent, received, server.timestamp_millis());
        self.offset_millis.store(offset, Ordering::Relaxed);
        Ok(Some(offset))
    }

    /// Measures the offset now and every [`MEASURE_EVERY`] until `shutdown`.
    pub async fn keep_measuring(self, db: Database, shutdown: CancellationToken) {
        let mut said = false;
        loop {
            match self.measure(&db).await {
                Ok(Some(offset)) if offset.abs() >= 1000 && !said => {
                    tracing::warn!(
                        offset_ms = offset,
                        "this machine's clock is a second or more off the database's; billed times follow the database's"
                    );
                    said = true;
                }
                Ok(_) => {}
                Err(e) => tracing::debug!(error = %e, "the database's clock not measured; the last offset stands"),
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(MEASURE_EVERY) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offset_is_the_servers_stamp_against_the_middle_of_the_round_trip() {
        // Sent at 1,000 and answered at 1,040 by our clock; the server stamped 6,020: it is
        // 5 s ahead of us.
        assert_eq!(offset_of(1_000, 1_040, 6_020), 5_000);
        assert_eq!(offset_of(1_000, 1_000, 400), -600, "behind us");
        let clock = ServerClock::default();
        clock.offset_millis.store(5_000, Ordering::Relaxed);
        let ahead = clock.now().timestamp_millis() - DateTime::now().timestamp_millis();
        assert!((4_990..=5_010).contains(&ahead), "{ahead}");
    }
}
