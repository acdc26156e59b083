//! A held message (`common::bus::held`, how the notifier and the runner hold theirs) is not
//! handed to anyone else while it is held, however long past its ack wait, and is settled
//! only by its holder.

use std::time::Duration;

use async_nats::jetstream::{
    AckKind,
    consumer::{AckPolicy, PullConsumer, pull},
    stream::Config as StreamConfig,
};
use common::bus::{heartbeat::Heartbeat, held::HeldMessage};
use futures::StreamExt;
use testkit::TestContext;

/// The message the consumer has ready now, if any (a fetch that does not wait).
async fn next(consumer: &PullConsumer) -> Option<async_nats::jetstream::Message> {
    consumer.fetch().max_messages(1).messages().await.expect("fetch").next().await.map(|m| m.expect("message"))
}

/// The next message, waiting up to 30 s for it: the stream hands a message just published to
/// its consumer a moment after the publish is acknowledged (a fetch that does not wait found
/// nothing on a busy machine).
async fn first(consumer: &PullConsumer) -> Option<async_nats::jetstream::Message> {
    let batch = consumer.batch().max_messages(1).expires(Duration::from_secs(30)).messages().await.expect("batch");
    batch.take(1).next().await.map(|m| m.expect("message"))
}

#[tokio::test]
async fn a_held_message_is_not_redelivered_past_its_ack_wait_and_leaves_when_settled() {
    let ctx = TestContext::new();
    let bus = ctx.bus().await;
    let store = ctx.store().await;
    let name = format!("{}_HELD", ctx.prefix.to_uppercase());
    let subject = format!("{}.held.one", ctx.prefix);
    let stream = bus
        .jetstream()
        .create_stream(StreamConfig { name, subjects: vec![subject.clone()], ..Default::default() })
        .await
        .expect("stream");
    let ack_wait = Duration::from_secs(1);
    let consumer: PullConsumer = stream
        .create_consumer(pull::Config {
            durable_name: Some("held".into()),
            ack_policy: AckPolicy::Explicit,
            ack_wait,
            ..Default::default()
        })
        .await
        .expect("consumer");
    bus.jetstream().publish(subject, "\"work\"".into()).await.expect("publish").await.expect("stored");

    let heartbeat = Heartbeat::start(ack_wait / 3);
    let message = first(&consumer).await.expect("the message");
    let held = HeldMessage::<String>::take(message, "test", &store.dead_letters(), &heartbeat).await.expect("decodes");
    assert_eq!(held.payload(), "work");
    tokio::time::sleep(ack_wait * 3).await;
    assert!(next(&consumer).await.is_none(), "held three ack waits long, and not handed out again");
    assert_eq!(heartbeat.held(), 1, "held through the heartbeat");
    held.settle(AckKind::Ack).await;
    assert_eq!(heartbeat.held(), 0, "settled: no more beats");
    tokio::time::sleep(ack_wait * 2).await;
    assert!(next(&consumer).await.is_none(), "acked: gone");
}
