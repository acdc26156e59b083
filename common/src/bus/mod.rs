//! NATS JetStream: the three streams and the publishing side of every message.
//!
//! - **Jobs** (`<P>_JOBS`, work-queue retention, `jobs.rs`): one message per prediction to
//!   run, on a subject of its lane; a republish within the duplicate window (2 min) is dropped
//!   by the server.
//! - **Events** (`<P>_EVENTS`, limits retention, kept 24 h): one message per stored change of a
//!   prediction, with `Nats-Msg-Id` = `<id>.<seq>.<event>`. The notifier reads them through its durable
//!   consumer; one prediction's events are read back by subject ([`prediction_events`]: the
//!   SSE stream and the resends).
//! - **Rate-limit counters** (`<P>_RATELIMIT`, `counters.rs`).
//! - **Broadcasts** (core NATS, not stored, `broadcasts.rs`): cancels, secret rotations and key
//!   deactivations.
//! - **Webhook resends** ([`resend`]): on the events stream, beside the predictions' events.
//!
//! Streams are created idempotently by every service at start, and again whenever a publish
//! finds its stream missing (a NATS restart loses the memory-stored rate-limit stream; an
//! operator may delete one): the publish is then retried once.
//!
//! Also here:
//! - [`heartbeat`]: in-progress acks for every message a service holds, sent by one task per `Heartbeat`.
//! - [`held`]: one JetStream message while a service acts on it.

mod broadcasts;
mod counters;
pub mod heartbeat;
pub mod held;
mod jobs;
pub mod prediction_events;
pub mod resend;

pub use jobs::EncodedJob;

use std::time::Duration;

use async_nats::{
    Client, ConnectOptions,
    connection::State,
    jetstream::{
        self,
        message::PublishMessage,
        stream::{Config as StreamConfig, RetentionPolicy, StorageType},
    },
};
use bytes::Bytes;
use futures::future::BoxFuture;

use crate::{
    domain::Prediction,
    messages::{ANNOUNCEMENT_HEADER, Announcement, PredictionChanged, StatusEvent},
    subjects::Subjects,
};

/// How long the server remembers message ids for de-duplication.
const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);
/// How long status events are kept.
const EVENTS_MAX_AGE: Duration = Duration::from_secs(24 * 3600);
/// What a message's headers may take of the server's `max_payload`.
const PAYLOAD_HEADER_ROOM: usize = 8 * 1024;
/// The longest pause between two attempts to reconnect. The client's default doubles up to
/// 4 s, so a NATS back after a 3 s restart was reached up to 2 s late (every service waited
/// that long to take or announce work again); at most half a second, a client reconnects
/// about twice a second to a server that is still down, which costs it nothing.
const RECONNECT_PAUSE: Duration = Duration::from_millis(500);
/// The bound on every request to NATS that a caller waits for.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a starting service waits for JetStream to take its streams (see
/// [`Bus::ensure_streams_at_start`]): a three-node cluster that has just started, or lost its
/// meta leader, elects one within seconds; past this the start fails and says why.
const STREAMS_AT_START: Duration = Duration::from_secs(60);

/// A messaging failure.
#[derive(Debug, thiserror::Error)]
pub enum BusError {
    /// Could not connect.
    #[error("cannot connect to NATS at {url}: {source}")]
    Connect {
        /// The address tried.
        url: String,
        /// Why.
        source: async_nats::Error,
    },
    /// A stream could not be created or read.
    #[error("JetStream stream {stream}: {source}")]
    Stream {
        /// The stream.
        stream: String,
        /// Why.
        source: async_nats::Error,
    },
    /// A publish was not acknowledged.
    #[error("publish to {subject} failed: {source}")]
    Publish {
        /// The subject.
        subject: String,
        /// Why.
        source: async_nats::Error,
    },
    /// The server does not answer.
    #[error("NATS is not reachable: {0}")]
    Unreachable(String),
    /// No stream takes messages on this subject (it was lost or deleted).
    #[error("no stream takes messages on {subject}")]
    StreamMissing {
        /// The subject.
        subject: String,
    },
}

/// The error of a publish whose ack failed: a missing stream is told apart.
fn publish_failed(subject: &str, e: async_nats::jetstream::context::PublishError) -> BusError {
    match e.kind() {
        async_nats::jetstream::context::PublishErrorKind::StreamNotFound => {
            BusError::StreamMissing { subject: subject.to_owned() }
        }
        _ => BusError::Publish { subject: subject.to_owned(), source: e.into() },
    }
}

/// A connection to NATS with JetStream.
#[derive(Clone, Debug)]
pub struct Bus {
    client: Client,
    js: jetstream::Context,
    subjects: Subjects,
    /// Held while the streams are recreated, so concurrent publishes that found them missing
    /// recreate them once.
    recreating: std::sync::Arc<tokio::sync::Mutex<()>>,
    /// Copies of each stream (`NATS_STREAM_REPLICAS`).
    replicas: usize,
    /// Consumers the jobs and events streams may hold (`NATS_MAX_CONSUMERS`).
    max_consumers: i32,
    /// How many times the connection was made (the first connect and every reconnect).
    connects: tokio::sync::watch::Receiver<u64>,
}

impl BusError {
    /// Whether a stream request failed only because JetStream cannot answer yet: it timed out
    /// (a cluster without a meta leader), nobody answered (JetStream not running yet), or
    /// JetStream said it is temporarily unavailable (503).
    pub fn is_jetstream_unready(&self) -> bool {
        use async_nats::jetstream::context::{
            CreateStreamError, CreateStreamErrorKind, RequestError, RequestErrorKind,
        };
        let Self::Stream { source, .. } = self else { return false };
        if let Some(e) = source.downcast_ref::<CreateStreamError>() {
            return match e.kind() {
                CreateStreamErrorKind::TimedOut | CreateStreamErrorKind::JetStreamUnavailable => true,
                CreateStreamErrorKind::JetStream(e) => e.code() == 503,
                _ => false,
            };
        }
        source
            .downcast_ref::<RequestError>()
            .is_some_and(|e| matches!(e.kind(), RequestErrorKind::TimedOut | RequestErrorKind::NoResponders))
    }
}

/// Whether a stream look-up failed because the server has no such stream.
fn is_stream_not_found(e: &async_nats::jetstream::context::GetStreamError) -> bool {
    matches!(
        e.kind(),
        async_nats::jetstream::context::GetStreamErrorKind::JetStream(js)
            if js.error_code() == async_nats::jetstream::ErrorCode::STREAM_NOT_FOUND
    )
}

/// The servers of `url`: one address or a comma-separated list.
fn server_list(url: &str) -> Result<Vec<async_nats::ServerAddr>, String> {
    let servers: Vec<async_nats::ServerAddr> = url
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().map_err(|e| format!("{s:?} is not a NATS server address: {e}")))
        .collect::<Result<_, _>>()?;
    if servers.is_empty() {
        return Err("no NATS server given".into());
    }
    Ok(servers)
}

impl Bus {
    /// Connects as `name` to `url`, one server or a comma-separated list of them (the
    /// servers of one cluster, as NATS clients conventionally take them). The client
    /// reconnects by itself after a connection loss, to any server of the cluster.
    pub async fn connect(url: &str, subjects: Subjects, name: &str) -> Result<Self, BusError> {
        let fail = |e: async_nats::Error| BusError::Connect { url: url.to_owned(), source: e };
        let servers = server_list(url).map_err(|e| fail(e.into()))?;
        let (connected, connects) = tokio::sync::watch::channel(0_u64);
        let connected = std::sync::Arc::new(connected);
        let client = ConnectOptions::new()
            .name(name)
            .event_callback(move |event| {
                let connected = connected.clone();
                async move {
                    if matches!(event, async_nats::Event::Connected) {
                        connected.send_modify(|n| *n += 1);
                    }
                }
            })
            .connection_timeout(REQUEST_TIMEOUT)
            .request_timeout(Some(REQUEST_TIMEOUT))
            .reconnect_delay_callback(reconnect_pause)
            .connect(servers)
            .await
            .map_err(|e| fail(e.into()))?;
        let js = jetstream::new(client.clone());
        Ok(Self {
            client,
            js,
            subjects,
            recreating: Default::default(),
            replicas: 1,
            max_consumers: crate::config::DEFAULT_MAX_CONSUMERS,
            connects,
        })
    }

    /// Streams created with `replicas` copies (3 on a three-node cluster, so losing a node
    /// loses nothing and stalls nothing; 1 on a single server).
    pub fn with_stream_replicas(mut self, replicas: usize) -> Self {
        self.replicas = replicas.max(1);
        self
    }

    /// The jobs and events streams hold up to `max` consumers each (see
    /// [`crate::config::DEFAULT_MAX_CONSUMERS`]).
    pub fn with_max_consumers(mut self, max: i32) -> Self {
        self.max_consumers = max.max(1);
        self
    }

    /// Creates the three streams (jobs, events, rate-limit counters), or updates them to this configuration.
    pub async fn ensure_streams(&self) -> Result<(), BusError> {
        let jobs = StreamConfig {
            name: self.subjects.jobs_stream(),
            subjects: vec![self.subjects.all_jobs()],
            retention: RetentionPolicy::WorkQueue,
            storage: StorageType::File,
            duplicate_window: DUPLICATE_WINDOW,
            num_replicas: self.replicas,
            max_consumers: self.max_consumers,
            ..Default::default()
        };
        let events = StreamConfig {
            name: self.subjects.events_stream(),
            subjects: vec![self.subjects.all_events()],
            retention: RetentionPolicy::Limits,
            storage: StorageType::File,
            duplicate_window: DUPLICATE_WINDOW,
            max_age: EVENTS_MAX_AGE,
            num_replicas: self.replicas,
            max_consumers: self.max_consumers,
            ..Default::default()
        };
        let rate_limits = StreamConfig {
            name: self.subjects.rate_limit_stream(),
            subjects: vec![self.subjects.all_rate_limits()],
            retention: RetentionPolicy::Limits,
            storage: StorageType::Memory,
            max_age: Duration::from_secs(180),
            // A lost answer's increment is sent again under its id within this window.
            duplicate_window: DUPLICATE_WINDOW,
            allow_message_counter: true,
            num_replicas: self.replicas,
            ..Default::default()
        };
        for config in [jobs, events, rate_limits] {
            let stream = config.name.clone();
            let fail = |e: async_nats::Error| BusError::Stream { stream: stream.clone(), source: e };
            if let Err(e) = self.js.create_or_update_stream(config.clone()).await {
                // A server before 2.12 cannot change an existing stream's consumer limit: the
                // stream keeps its own (unlimited before 2.15), and the rest is updated.
                let Ok(mut existing) = self.js.get_stream(&stream).await else { return Err(fail(e.into())) };
                let kept = existing.info().await.map_err(|e| fail(e.into()))?.config.max_consumers;
                if kept == config.max_consumers {
                    return Err(fail(e.into()));
                }
                tracing::warn!(%stream, kept, wanted = config.max_consumers, error = %e, "the stream's consumer limit was not changed");
                self.js
                    .create_or_update_stream(StreamConfig { max_consumers: kept, ..config })
                    .await
                    .map_err(|e| fail(e.into()))?;
            }
        }
        Ok(())
    }

    /// [`Self::ensure_streams`] as a service starts: while JetStream cannot answer yet (a
    /// cluster still electing its leaders times stream requests out; a server still starting
    /// answers that JetStream is unavailable), it is asked again, with pauses doubling from
    /// 250 ms to 4 s, for up to [`STREAMS_AT_START`], so the service waits for it rather than
    /// exiting at the first timeout. Any other error fails at once.
    pub async fn ensure_streams_at_start(&self) -> Result<(), BusError> {
        let deadline = tokio::time::Instant::now() + STREAMS_AT_START;
        let mut pause = Duration::from_millis(250);
        loop {
            match self.ensure_streams().await {
                Err(e) if e.is_jetstream_unready() && tokio::time::Instant::now() + pause < deadline => {
                    tracing::warn!(error = %e, retry_in_ms = pause.as_millis() as u64, "JetStream cannot take the streams yet; asking again");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(4));
                }
                other => return other,
            }
        }
    }

    /// Recreates the streams after a publish found one missing (once, however many publishes
    /// found it so at the same time).
    ///
    /// Boxed, as is [`Self::remade_after`]: stream creation is a large future, and every
    /// publish would otherwise carry its size (11 KB) for a path it almost never takes.
    fn recreate_streams(&self) -> BoxFuture<'_, Result<(), BusError>> {
        Box::pin(async move {
            let _once = self.recreating.lock().await;
            tracing::warn!("a stream was missing; creating the streams again");
            self.ensure_streams().await
        })
    }

    /// Whether the events stream holds `prediction`'s `completed` event (its last event).
    pub async fn completed_event_exists(&self, prediction: &Prediction) -> Result<bool, BusError> {
        let stream = self.subjects.events_stream();
        let fail = |e: async_nats::Error| BusError::Stream { stream: stream.clone(), source: e };
        let handle = self.js.get_stream_no_info(&stream).await.map_err(|e| fail(e.into()))?;
        match handle.get_last_raw_message_by_subject(&self.subjects.events(&prediction.id)).await {
            Ok(message) => Ok(serde_json::from_slice::<StatusEvent>(&message.payload)
                .ok()
                .and_then(StatusEvent::prediction_change)
                .is_some_and(|change| change.event == crate::domain::WebhookEvent::Completed)),
            Err(e) if e.kind() == async_nats::jetstream::stream::LastRawMessageErrorKind::NoMessageFound => Ok(false),
            Err(e) => Err(fail(e.into())),
        }
    }

    /// Publishes a status event, saying who announces it, and waits for the stream to store it.
    /// A change without its prediction, or whose prediction does not fit the server's message
    /// limit, goes by reference (see [`PredictionChanged::encode_within`]).
    pub async fn publish_event(&self, change: PredictionChanged, announcement: Announcement) -> Result<(), BusError> {
        let id = change.message_id();
        let subject = self.subjects.events(&change.prediction_id);
        let payload = change.encode_within(StatusEvent::PredictionChangedV1, self.payload_limit());
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(ANNOUNCEMENT_HEADER, announcement.as_str());
        self.publish_stored(subject, id, Bytes::from(payload), headers).await
    }

    /// The most bytes of payload a message of ours may carry: the server's `max_payload`
    /// (which counts headers too) less room for our headers (message id, trace context).
    fn payload_limit(&self) -> usize {
        self.client.server_info().max_payload.saturating_sub(PAYLOAD_HEADER_ROOM)
    }

    async fn publish_stored(
        &self,
        subject: String,
        msg_id: String,
        payload: Bytes,
        headers: async_nats::HeaderMap,
    ) -> Result<(), BusError> {
        match self.send_stored(subject.clone(), msg_id.clone(), payload.clone(), headers.clone()).await?.await {
            Err(e) if self.remade_after(&e).await => self.send_stored(subject, msg_id, payload, headers).await?.await,
            result => result,
        }
    }

    /// After a failed publish: whether a stream was missing and has been made again (then the
    /// publish is worth one more try). A publish to a subject that core-NATS subscribers also
    /// hear (the runners' doorbells) times out rather than failing with "no stream", so a
    /// failure other than a missing stream has the streams looked up as well.
    fn remade_after<'a>(&'a self, error: &'a BusError) -> BoxFuture<'a, bool> {
        Box::pin(self.remade_after_unboxed(error))
    }

    async fn remade_after_unboxed(&self, error: &BusError) -> bool {
        let missing = match error {
            BusError::StreamMissing { .. } => true,
            BusError::Publish { .. } => {
                let streams = [self.subjects.jobs_stream(), self.subjects.events_stream()];
                let mut any = false;
                for stream in &streams {
                    any |= self.stream_missing(stream).await;
                }
                any
            }
            _ => false,
        };
        missing && self.recreate_streams().await.is_ok()
    }

    /// Sends a message to a stream (`Nats-Msg-Id` = `msg_id`, `headers` and the current trace
    /// context) and returns the future that resolves once the stream has stored it.
    async fn send_stored(
        &self,
        subject: String,
        msg_id: String,
        payload: Bytes,
        mut headers: async_nats::HeaderMap,
    ) -> Result<impl Future<Output = Result<(), BusError>> + Send + 'static, BusError> {
        crate::trace_context::inject_nats(&mut headers);
        let message = PublishMessage::build().payload(payload).message_id(msg_id).headers(headers);
        let ack = self
            .js
            .send_publish(subject.clone(), message)
            .await
            .map_err(|e| BusError::Publish { subject: subject.clone(), source: e.into() })?;
        Ok(async move {
            ack.await.map_err(|e| publish_failed(&subject, e))?;
            Ok(())
        })
    }

    /// Whether the server says `stream` does not exist (not merely that it did not answer).
    async fn stream_missing(&self, stream: &str) -> bool {
        self.js.get_stream(stream).await.err().is_some_and(|e| is_stream_not_found(&e))
    }

    /// Whether the connection to NATS is up now (no I/O: the client's own state).
    pub fn is_connected(&self) -> bool {
        self.client.connection_state() == State::Connected
    }

    /// Answers when the connection is up and JetStream answers for every stream of this
    /// deployment (on a cluster, a stream whose nodes are lost stops answering). A stream that
    /// is lost (the memory-stored rate-limit stream after a NATS restart) is made again. Each
    /// request is bounded by the client's request timeout; the caller bounds the whole
    /// ([`crate::readiness`]).
    pub async fn ping(&self) -> Result<(), BusError> {
        if !self.is_connected() {
            return Err(BusError::Unreachable("not connected".into()));
        }
        let streams = [self.subjects.jobs_stream(), self.subjects.events_stream(), self.subjects.rate_limit_stream()];
        for stream in &streams {
            match self.js.get_stream(stream).await {
                Ok(_) => {}
                Err(e) if is_stream_not_found(&e) => self.recreate_streams().await?,
                Err(e) => return Err(BusError::Unreachable(format!("stream {stream}: {e}"))),
            }
        }
        Ok(())
    }

    /// A second connection to the same servers, for the same streams, named `name`: what
    /// [`crate::readiness`] checks on, so a check never waits behind the work's traffic.
    pub async fn probe(&self, url: &str, name: &str) -> Result<Self, BusError> {
        let mut probe = Self::connect(url, self.subjects.clone(), name).await?;
        (probe.replicas, probe.max_consumers) = (self.replicas, self.max_consumers);
        Ok(probe)
    }

    /// The key-value bucket of capped accounts' running slots (created, or updated to this
    /// configuration): a slot not refreshed for `lease` ages out, and the server then writes a
    /// delete marker that watchers see, so a slot held by a process that died frees itself.
    pub async fn account_slots(&self, lease: Duration) -> Result<jetstream::kv::Store, BusError> {
        let bucket = self.subjects.account_slots_bucket();
        let config = jetstream::kv::Config {
            bucket: bucket.clone(),
            description: "running slots of accounts with a concurrency cap".into(),
            history: 1,
            max_age: lease,
            limit_markers: Some(lease.max(Duration::from_secs(1))),
            storage: StorageType::File,
            num_replicas: self.replicas,
            ..Default::default()
        };
        self.js
            .create_or_update_key_value(config)
            .await
            .map_err(|e| BusError::Stream { stream: format!("KV_{bucket}"), source: e.into() })
    }

    /// Changes each time the connection is made again after a loss (the value counts the
    /// connects). Core-NATS messages sent while a service was away are lost to it; one that
    /// relies on them looks again at what is stored once this changes (the runner scans the
    /// jobs stream for lanes whose doorbells it missed).
    pub fn reconnects(&self) -> tokio::sync::watch::Receiver<u64> {
        let mut connects = self.connects.clone();
        connects.mark_unchanged();
        connects
    }

    /// The core NATS client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The JetStream context.
    pub fn jetstream(&self) -> &jetstream::Context {
        &self.js
    }

    /// The names of this deployment.
    pub fn subjects(&self) -> &Subjects {
        &self.subjects
    }
}

/// The pause before reconnect attempt `attempts`: none for the first, then doubling from 2 ms,
/// at most [`RECONNECT_PAUSE`].
fn reconnect_pause(attempts: usize) -> Duration {
    let doubled = 1_u64.checked_shl(u32::try_from(attempts).unwrap_or(u32::MAX).saturating_sub(1)).unwrap_or(u64::MAX);
    if attempts <= 1 { Duration::ZERO } else { Duration::from_millis(doubled).min(RECONNECT_PAUSE) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconnect_attempts_pause_longer_each_time_up_to_half_a_second() {
        let pauses: Vec<u128> = [1, 2, 3, 9, 10, 11, 100].map(|a| reconnect_pause(a).as_millis()).to_vec();
        assert_eq!(pauses, [0, 2, 4, 256, 500, 500, 500]);
    }

    #[test]
    fn a_server_list_is_one_address_or_several_separated_by_commas() {
        assert_eq!(server_list("nats://127.0.0.1:4222").map(|s| s.len()), Ok(1));
        assert_eq!(server_list("nats://a:4222, nats://b:4222,nats://c:4222").map(|s| s.len()), Ok(3));
        assert!(server_list("").is_err());
        assert!(server_list("nats://a:4222,http://[bad").is_err());
    }
}
