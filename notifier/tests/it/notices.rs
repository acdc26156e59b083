//! Budget notices' claims: a round that extends its claim keeps the notice to itself however
//! long it takes, and a holder whose claim was taken over writes nothing.

use bson::DateTime;
use common::{
    domain::{AccountId, Micros, WebhookUrl},
    store::budget_notices::{BudgetNotice, NoticeTarget},
};

/// A due notice of a new account with three receivers, raised in the test's store.
fn notice(account: &AccountId) -> BudgetNotice {
    let targets = (1..=3)
        .map(|n| NoticeTarget {
            url: WebhookUrl::parse(&format!("https://receiver-{n}.example.com/hook")).expect("url"),
            delivered: false,
            given_up: false,
            attempts: 0,
        })
        .collect();
    BudgetNotice {
        id: BudgetNotice::id_of(account, "2026-12", 80),
        account_id: account.clone(),
        account: "claims".to_owned(),
        month: "2026-12".to_owned(),
        threshold: 80,
        monthly_budget: Micros::parse_dollars("10").expect("dollars"),
        spent: Micros::parse_dollars("8").expect("dollars"),
        created_at: DateTime::from_millis(0),
        targets,
        next_at: DateTime::from_millis(0),
        done: false,
        claimed_until: DateTime::from_millis(0),
    }
}

fn at(seconds: i64) -> DateTime {
    DateTime::from_millis(1_800_000_000_000 + seconds * 1000)
}

#[tokio::test]
async fn a_round_that_extends_its_claim_is_never_joined_and_a_stale_holder_writes_nothing() {
    let context = testkit::TestContext::new();
    let notices = context.store().await.budget_notices();
    let account = AccountId::generate();
    assert!(notices.raise(&notice(&account)).await.expect("raised"));

    // A round claims the notice for 120 s and, attempting its receivers one by one, extends
    // the claim before each: past its first lease, the notice is still its own.
    let mut held = notices.claim_due(at(0), at(120)).await.expect("claim").expect("due");
    held.targets[0].delivered = true;
    assert!(notices.extend(&mut held, at(200)).await.expect("extended"));
    assert!(
        notices.claim_due(at(130), at(250)).await.expect("claim").is_none(),
        "a round still under way is not claimed by another notifier"
    );
    held.targets[1].delivered = true;

    // Its holder dies: once the extended lease runs out, another claims it, and finds the
    // receivers delivered so far recorded by the extensions.
    let taken = notices.claim_due(at(201), at(321)).await.expect("claim").expect("due again");
    assert!(taken.targets[0].delivered, "recorded with the extension");
    assert!(!taken.targets[2].delivered);

    // The first holder's late writes change nothing.
    assert!(!notices.extend(&mut held, at(400)).await.expect("answered"), "a lost claim is not extended");
    held.done = true;
    assert!(!notices.settle(&held).await.expect("answered"), "a lost claim is not settled");
    let stored = notices.of_account(&account).await.expect("read");
    assert!(!stored[0].done, "the stale holder's settle wrote nothing");
    assert_eq!(stored[0].claimed_until, at(321), "the new holder's claim stands");
}
