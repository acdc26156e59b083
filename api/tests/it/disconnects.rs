//! Clients that go away mid-request: their handlers run to completion, so abandoned database
//! operations cannot clog the MongoDB driver's connection pool for the clients that stay.

use std::time::Duration;

use futures::{StreamExt, stream};
use serde_json::json;

use crate::harness::{JsonBody, Options, System};

#[tokio::test]
async fn a_burst_of_disconnecting_clients_does_not_stall_the_next_request() {
    let env = vec![("DEFAULT_RATE_LIMIT_RPM", "1000000".to_owned())];
    let system = System::start_with(Options { runner: false, notifier: false, env }).await;
    system.register_models_only().await;
    let created = system.post_json("/v1/models/demo/echo/predictions", &json!({"input": {"prompt": "x"}})).await;
    assert_eq!(created.status(), 201);
    let id = created.json_body().await["id"].as_str().expect("id").to_owned();
    // Far more requests in flight than the driver's pool has connections (10), all abandoned
    // at once when the client gives up.
    let url = system.url(&format!("/v1/predictions/{id}"));
    let http = reqwest::Client::new();
    let mut requests =
        stream::iter(0..).map(|_| http.get(&url).bearer_auth(&system.admin_key).send()).buffer_unordered(200);
    let give_up = tokio::time::Instant::now() + Duration::from_secs(1);
    while let Some(answer) = requests.next().await {
        assert_eq!(answer.expect("answered").status(), 200);
        if tokio::time::Instant::now() >= give_up {
            break;
        }
    }
    drop(requests);
    let next = tokio::time::timeout(Duration::from_secs(5), system.get(&format!("/v1/predictions/{id}")))
        .await
        .expect("the next request is answered within 5 s, not after abandoned requests drain");
    assert_eq!(next.status(), 200);
}
