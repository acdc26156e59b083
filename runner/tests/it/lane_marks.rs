//! Queue lanes' start marks: gathered per lane and written as the highest ticket started.

use std::time::Duration;

use common::{
    domain::{AccountId, ModelRef, Priority, Route},
    lane::Lane,
};
use runner::lane_marks::LaneMarks;
use testkit::eventually;

use crate::fixture::Fixture;

#[tokio::test]
async fn marks_of_one_lane_in_any_order_leave_its_highest_ticket_and_drop_the_skipped_below_it() {
    let fixture = Fixture::new(&[]).await;
    let lanes = fixture.store.queue_lanes();
    let model: ModelRef = "demo/echo".parse().expect("a model");
    let lane = Lane::new(&model, &Route { version: "v1".into(), pool: None }, &AccountId::generate(), Priority::Normal);
    let first = lanes.take(&lane, 10).await.expect("tickets");
    assert_eq!(first, 1);
    lanes.skipped(&lane, 3).await.expect("a skip");
    lanes.skipped(&lane, 8).await.expect("a skip");

    let marks = LaneMarks::start(lanes.clone(), Duration::from_millis(50));
    for ticket in [2, 6, 4, 5, 1] {
        marks.started(lane.clone(), ticket);
    }
    let state = eventually(Duration::from_secs(5), || async {
        lanes.get(&lane).await.expect("read").filter(|s| s.started_through > 0)
    })
    .await
    .expect("the mark is written");
    assert_eq!(state.started_through, 6, "the highest ticket started");
    assert_eq!(state.skipped, [8], "a skipped ticket the lane moved past is dropped");
    assert_eq!(state.waiting(), 3, "7, 9 and 10");
    assert_eq!(state.ahead_of(10), 2);
}
