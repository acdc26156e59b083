//! The stand-in runs each connection's commands apart, as mongod does (a thread per
//! connection): a command that takes long holds its own connection and no other, and a
//! connection opened meanwhile is answered at once. The library's own server dealt its
//! connections over a few shared event loops, so one slow command held every connection of
//! its loop, new ones included (a restarted runner of the fault suite wrote nothing for 6 to
//! 9 s behind a neighbouring row's scans).
//!
//! The slow command is made with mongod's own test commands, which the stand-in takes as
//! mongod does: the `failCommand` failpoint with `blockConnection`, and `waitForFailPoint`
//! to know the command is being held.

use std::time::Duration;

use bson::{Document, doc};
use mongodb::{Client, options::ClientOptions};
use testkit::MongoStandin;

/// How long the slow command is held: far longer than opening a connection and answering a
/// ping take, even on a slow machine under load.
const HELD: Duration = Duration::from_secs(10);
/// Connections opened while it is held: more than the library's shared loops (twice the
/// cores), so under its server some would have landed on the held one's loop.
const OTHERS: usize = 8;

/// A client of its own (one connection at most), named `app`.
async fn client(uri: &str, app: &str) -> Client {
    let mut options = ClientOptions::parse(uri).await.expect("the stand-in's URI");
    options.app_name = Some(app.into());
    options.max_pool_size = Some(1);
    Client::with_options(options).expect("a client")
}

#[tokio::test]
async fn a_held_command_holds_its_own_connection_and_no_other() {
    let standin = MongoStandin::start_with(None, &[]);
    let admin = client(&standin.uri, "admin").await.database("admin");
    let held = HELD.as_millis();
    admin
        .run_command(doc! {
            "configureFailPoint": "failCommand",
            "mode": { "times": 1 },
            "data": { "failCommands": ["find"], "appName": "slow", "blockConnection": true, "blockTimeMS": i64::try_from(held).expect("milliseconds") },
        })
        .await
        .expect("the stand-in takes the failCommand failpoint");
    let slow = client(&standin.uri, "slow").await;
    let slow_find = tokio::spawn(async move {
        slow.database("connections").collection::<Document>("c").find_one(doc! {}).await.map(|_| ())
    });
    admin
        .run_command(doc! { "waitForFailPoint": "failCommand", "timesEntered": 1, "maxTimeMS": 60_000 })
        .await
        .expect("the slow find is held");

    for n in 0..OTHERS {
        let other = client(&standin.uri, &format!("other-{n}")).await;
        let database = other.database("connections");
        database.run_command(doc! { "ping": 1 }).await.expect("a ping on a new connection");
        database.collection::<Document>("c").find_one(doc! {}).await.expect("a find on a new connection");
        assert!(
            !slow_find.is_finished(),
            "connection {n} was answered only after the held command ended ({HELD:?}): it waited behind it"
        );
    }

    slow_find.await.expect("the slow find's task").expect("the held find runs once released");
}
