//! In-progress acks for every message a service holds, sent by one task per [`Heartbeat`].
//!
//! A held message must tell JetStream it is still being worked on before its ack wait runs
//! out, or another replica gets it in the middle of the work. Almost every message is settled
//! within milliseconds, long before its first in-progress ack is due, so a task and a timer per
//! message (as before: spawned, polled, aborted, about 2 % of the runner's and the notifier's
//! CPU for five messages per prediction) bought nothing for most of them. Here holding a
//! message is an entry in a map, and one task wakes every quarter interval and acks the
//! messages whose beat is due.
//!
//! Invariant: a message held for `every` gets its first in-progress ack within `every` plus a
//! quarter of it, and one about every `every` after that, until it leaves the map (settled, or
//! dropped). The task stops on its first wake after the last [`Heartbeat`] handle is gone.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, Weak,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use async_nats::{
    Client, Subject,
    jetstream::{AckKind, Message},
};
use bytes::Bytes;
use tokio::time::Instant;

/// The shortest interval between two in-progress acks of one message.
const MIN_EVERY: Duration = Duration::from_millis(100);

/// Sends the in-progress acks of the messages held through it. Cheap to clone.
#[derive(Clone)]
pub struct Heartbeat {
    beats: Arc<Beats>,
}

struct Beats {
    every: Duration,
    next_id: AtomicU64,
    held: Mutex<HashMap<u64, Held>>,
}

/// What an in-progress ack needs of a held message: where to send it (its reply subject, a
/// shared buffer) and the connection (not the whole message, whose headers are a map).
struct Held {
    client: Client,
    reply: Subject,
    due: Instant,
}

/// One message's place in its [`Heartbeat`]: its acks stop when this is dropped.
pub(super) struct Beating {
    beats: Arc<Beats>,
    id: u64,
}

impl Heartbeat {
    /// Starts the task that acks held messages about every `every` (at least 100 ms).
    pub fn start(every: Duration) -> Self {
        let every = every.max(MIN_EVERY);
        let beats = Arc::new(Beats { every, next_id: AtomicU64::new(0), held: Mutex::new(HashMap::new()) });
        tokio::spawn(beat(Arc::downgrade(&beats), every / 4));
        Self { beats }
    }

    /// Holds `message` until the returned [`Beating`] is dropped (a message without a reply
    /// subject is not a JetStream delivery and gets no acks).
    pub(super) fn hold(&self, message: &Message) -> Beating {
        let id = self.beats.next_id.fetch_add(1, Ordering::Relaxed);
        if let Some(reply) = &message.reply {
            let held =
                Held { client: message.context.client(), reply: reply.clone(), due: Instant::now() + self.beats.every };
            self.beats.lock().insert(id, held);
        }
        Beating { beats: self.beats.clone(), id }
    }

    /// How many messages are held through it.
    pub fn held(&self) -> usize {
        self.beats.lock().len()
    }
}

impl Beats {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Held>> {
        self.held.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Where the acks due at `now` go, each then due again one interval later.
    fn due(&self, now: Instant) -> Vec<(Client, Subject)> {
        let mut held = self.lock();
        held.values_mut()
            .filter(|h| h.due <= now)
            .map(|h| {
                h.due = now + self.every;
                (h.client.clone(), h.reply.clone())
            })
            .collect()
    }
}

impl Drop for Beating {
    fn drop(&mut self) {
        self.beats.lock().remove(&self.id);
    }
}

/// The task: every `tick`, the due in-progress acks, until the beats are gone.
async fn beat(beats: Weak<Beats>, tick: Duration) {
    loop {
        tokio::time::sleep(tick).await;
        let Some(due) = beats.upgrade().map(|b| b.due(Instant::now())) else {
            return;
        };
        for (client, reply) in due {
            if let Err(e) = client.publish(reply, Bytes::from(AckKind::Progress)).await {
                tracing::warn!(error = %e, "in-progress ack not sent; the message may be redelivered");
            }
        }
    }
}
