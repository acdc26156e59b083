//! A monthly budget crossed while the usage ledger's runner dies: the runner's pool is priced
//! at [`PRICE_PER_SECOND`] and the account `faults` given a budget of about
//! [`BUDGET_PREDICTIONS`] of the load's one-second predictions; once the ledger has counted
//! [`KILL_AT_PERCENT`] of it (the next batch is the one that crosses), the runner that counts
//! is killed with that batch in hand. The batch's costs come back only with the recovery
//! sweep ([`common::usage::RECOVER_AFTER`] later), so the api must learn of the crossing
//! from what the restarted runner counts next. The row's load lasts twice the suite's (the
//! crossing comes only once the killed runner is back and has run jobs again: 9 s in, in one
//! run, against the 10 s of the other rows' load).
//!
//! What must hold ([`BudgetTally::failures`]):
//! - the account is refused (402) once its spending reaches the budget, no later than
//!   [`REFUSAL_BOUND`] after the crossing (by the predictions' own `completed_at` and costs)
//!   or after the restarted runner's first prediction ended, whichever is later (see
//!   [`counting_from`]);
//! - nothing is accepted once the refusals begin: what is spent past the budget is only the
//!   work accepted before them (running or queued), which finishes;
//! - the usage's cost is the predictions' costs added up, to the micro-dollar, kill or not;
//! - both notices (80 % and 100 %) were raised, once each.

use std::time::Duration;

use anyhow::Context;
use bson::doc;
use chrono::{DateTime, Utc};
use common::domain::{AccountId, Micros, Pool, Price};
use futures::TryStreamExt;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::load::{Answer, Attempt};

/// The price of the runner's pool, in dollars a second: a one-second prediction costs about
/// 1,000 micro-dollars.
pub const PRICE_PER_SECOND: &str = "0.001";
/// The budget in one-second predictions at [`PRICE_PER_SECOND`]: under the suite's load (20 a
/// second) spending crosses it about two seconds in.
pub const BUDGET_PREDICTIONS: i64 = 40;
/// The share of the budget the ledger has counted when its runner is killed.
pub const KILL_AT_PERCENT: i64 = 80;
/// How soon after the crossing (or after the restarted runner's first prediction ended)
/// creates are refused: the api reads an account's spending at most 2 s old, and the ledger
/// counts what ended within 250 ms as one batch.
pub const REFUSAL_BOUND: Duration = Duration::from_secs(5);
/// Slack for creates sent just before the first refusal but answered after it.
const IN_FLIGHT_SLACK: Duration = Duration::from_secs(1);
/// The longest the suite waits for the ledger to reach [`KILL_AT_PERCENT`].
const KILL_WAIT: Duration = Duration::from_secs(30);

/// The budget set on the account.
pub fn budget() -> Micros {
    Micros(BUDGET_PREDICTIONS * 1_000)
}

/// Prices the runners' pool (and tells them) and sets the account's budget; returns the
/// account.
pub async fn prepare(setup: &harness::setup::Setup) -> anyhow::Result<AccountId> {
    let price = Price::parse_dollars(PRICE_PER_SECOND).map_err(|e| anyhow::anyhow!("{e}"))?;
    let pool = Pool::default_pool();
    setup.store.prices().set(&pool, price).await?;
    setup.bus.publish_price_set(&pool, price).await?;
    let account = setup.store.accounts().find_by_name("faults").await?.context("the account faults")?;
    setup.store.accounts().set_operator_budget(&account.id, Some(budget())).await?;
    Ok(account.id)
}

/// Waits until the account's counted spending reaches [`KILL_AT_PERCENT`] of the budget (or
/// [`KILL_WAIT`] passes): the moment to kill the ledger's runner.
pub async fn wait_for_the_crossing(store: &common::store::Store, account: &AccountId) -> anyhow::Result<()> {
    let (month, _) = common::budget::month_of(Utc::now());
    let deadline = Instant::now() + KILL_WAIT;
    let near = Micros(budget().0 * KILL_AT_PERCENT / 100);
    while Instant::now() < deadline {
        if store.usage_totals().spent_since(account, bson::DateTime::from_chrono(month)).await? >= near {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    anyhow::bail!("the account's spending did not reach {KILL_AT_PERCENT} % of its budget within {KILL_WAIT:?}")
}

/// What the budget row found.
#[derive(Clone, Debug, Default)]
pub struct BudgetTally {
    /// The budget, in micro-dollars.
    pub budget: Micros,
    /// The ended predictions' costs added up.
    pub spent: Micros,
    /// The usage's cost (`GET /v1/usage`).
    pub usage_cost: Micros,
    /// Creates refused with 402.
    pub refused: usize,
    /// Seconds from the crossing (or the runner's return) to the first 402, if both happened.
    pub refused_after_s: Option<f64>,
    /// Creates accepted after the refusals began.
    pub accepted_after_refusal: usize,
    /// Predictions accepted before the first refusal that ended after the crossing: the work in
    /// flight that may spend past the budget.
    pub in_flight_at_crossing: usize,
    /// The notices raised, by threshold.
    pub notices: Vec<u32>,
}

impl BudgetTally {
    /// Why the row fails, if it does.
    pub fn failures(&self) -> Vec<String> {
        let mut why = Vec::new();
        if self.refused == 0 {
            why.push(format!("never refused with 402 (spent {} of a budget of {})", self.spent, self.budget));
        }
        match self.refused_after_s {
            Some(late) if late > REFUSAL_BOUND.as_secs_f64() => {
                why.push(format!("refused {late:.1} s after the crossing, past {} s", REFUSAL_BOUND.as_secs()))
            }
            _ => {}
        }
        if self.accepted_after_refusal > 0 {
            why.push(format!("{} creates accepted after the refusals began", self.accepted_after_refusal));
        }
        if self.usage_cost != self.spent {
            why.push(format!("usage cost {} but the predictions cost {}", self.usage_cost, self.spent));
        }
        if self.notices != [80, 100] {
            why.push(format!("notices raised at {:?} %, not at 80 and 100", self.notices));
        }
        why
    }

    /// The tally as JSON.
    pub fn json(&self) -> Value {
        json!({
            "budget": self.budget.dollars(), "spent": self.spent.dollars(), "usage_cost": self.usage_cost.dollars(),
            "refused": self.refused, "refused_after_s": self.refused_after_s,
            "accepted_after_refusal": self.accepted_after_refusal,
            "in_flight_at_crossing": self.in_flight_at_crossing, "notices": self.notices,
        })
    }
}

/// One ended prediction: when it ended, and what it cost.
struct Ended {
    at: DateTime<Utc>,
    cost: Micros,
}

/// Tallies the row once everything ended: `attempts` are the load's creates (`anchor` maps
/// their instants to the wall clock), `back` when the killed runner was back.
pub async fn check(
    setup: &harness::setup::Setup,
    api: &str,
    key: &str,
    account: &AccountId,
    attempts: &[Attempt],
    anchor: (Instant, DateTime<Utc>),
    back: Option<DateTime<Utc>>,
) -> anyhow::Result<BudgetTally> {
    let ended = ended(setup, account).await?;
    let spent: Micros = ended.iter().map(|e| e.cost).sum();
    let budget = budget();
    let wall = |at: Instant| anchor.1 + chrono::TimeDelta::from_std(at.duration_since(anchor.0)).unwrap_or_default();
    let crossing = crossing(&ended, budget);
    let refusals: Vec<&Attempt> = attempts.iter().filter(|a| matches!(a.answer, Answer::Status(402))).collect();
    let first_refusal = refusals.iter().map(|a| a.at).min();
    let refused_after_s = match (crossing, first_refusal) {
        (Some(crossed), Some(refused)) => {
            let from = counting_from(&ended, crossed, back);
            Some((wall(refused) - from).num_milliseconds().max(0) as f64 / 1000.0)
        }
        _ => None,
    };
    let accepted = |a: &&Attempt| matches!(a.answer, Answer::Accepted(_));
    let accepted_after_refusal = first_refusal
        .map_or(0, |first| attempts.iter().filter(accepted).filter(|a| a.at > first + IN_FLIGHT_SLACK).count());
    let in_flight_at_crossing = crossing.map_or(0, |crossed| ended.iter().filter(|e| e.at > crossed).count());
    let mut notices: Vec<u32> =
        setup.store.budget_notices().of_account(account).await?.iter().map(|n| n.threshold).collect();
    notices.sort_unstable();
    Ok(BudgetTally {
        budget,
        spent,
        usage_cost: usage_cost(api, key).await?,
        refused: refusals.len(),
        refused_after_s,
        accepted_after_refusal,
        in_flight_at_crossing,
        notices,
    })
}

/// When the ended predictions' costs, added up in the order they ended, reached `budget`.
fn crossing(ended: &[Ended], budget: Micros) -> Option<DateTime<Utc>> {
    let mut sum = Micros::ZERO;
    ended.iter().find_map(|e| {
        sum += e.cost;
        (sum >= budget).then_some(e.at)
    })
}

/// From when the api can know of the crossing: the crossing itself, or, when the killed
/// runner came back after it, the first prediction that ended after its return. Until then
/// nothing new is counted: the batch the kill caught comes back only with the recovery sweep,
/// and the jobs the killed runner held are delivered again only once their ack wait has run
/// out (6 s), which may be the restarted runner's first work.
fn counting_from(ended: &[Ended], crossed: DateTime<Utc>, back: Option<DateTime<Utc>>) -> DateTime<Utc> {
    let Some(back) = back else { return crossed };
    let first_after = ended.iter().map(|e| e.at).find(|at| *at >= back).unwrap_or(back);
    crossed.max(first_after)
}

/// The account's ended predictions, in the order they ended.
async fn ended(setup: &harness::setup::Setup, account: &AccountId) -> anyhow::Result<Vec<Ended>> {
    let predictions = setup.store.database().collection::<bson::Document>("predictions");
    let filter = doc! { "account_id": account.as_str(), "completed_at": { "$ne": null } };
    let found: Vec<bson::Document> = predictions
        .find(filter)
        .projection(doc! { "completed_at": 1, "metrics.cost_micros": 1 })
        .await?
        .try_collect()
        .await?;
    let mut ended: Vec<Ended> = found
        .iter()
        .filter_map(|d| {
            let at = d.get_datetime("completed_at").ok()?.to_chrono();
            let cost = d.get_document("metrics").ok().and_then(|m| m.get_i64("cost_micros").ok()).unwrap_or(0);
            Some(Ended { at, cost: Micros(cost) })
        })
        .collect();
    ended.sort_by_key(|e| e.at);
    Ok(ended)
}

/// The account's usage cost this hour and the ones before (`GET /v1/usage`).
async fn usage_cost(api: &str, key: &str) -> anyhow::Result<Micros> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build()?;
    let body: Value = http
        .get(format!("{api}/v1/usage?bucket=hour"))
        .bearer_auth(key)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let cost = body["totals"]["cost"].as_str().context("the usage totals have no cost")?;
    Micros::parse_dollars(cost).map_err(|e| anyhow::anyhow!("the usage cost {cost:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(seconds: &[(i64, i64)]) -> Vec<Ended> {
        let start = Utc::now();
        seconds
            .iter()
            .map(|(s, cost)| Ended { at: start + chrono::TimeDelta::seconds(*s), cost: Micros(*cost) })
            .collect()
    }

    #[test]
    fn the_crossing_is_when_the_costs_in_order_reach_the_budget() {
        let ended = ended(&[(1, 400), (2, 400), (3, 400), (4, 400)]);
        assert_eq!(crossing(&ended, Micros(1_200)), Some(ended[2].at), "reaching it exactly crosses it");
        assert_eq!(crossing(&ended, Micros(1_201)), Some(ended[3].at));
        assert_eq!(crossing(&ended, Micros(1_601)), None);
    }

    #[test]
    fn the_api_is_timed_from_the_crossing_or_the_restarted_runners_first_end() {
        let ended = ended(&[(1, 400), (2, 400), (9, 400)]);
        let at = |s: i64| ended[0].at + chrono::TimeDelta::seconds(s - 1);
        assert_eq!(counting_from(&ended, at(2), None), at(2), "no kill: the crossing");
        assert_eq!(counting_from(&ended, at(2), Some(at(3))), at(9), "back at 3, nothing ended until 9");
        assert_eq!(counting_from(&ended, at(9), Some(at(3))), at(9), "crossed after the first end");
        assert_eq!(counting_from(&ended, at(2), Some(at(10))), at(10), "nothing ended after the return");
    }

    #[test]
    fn a_late_refusal_an_accept_after_it_a_cost_apart_or_a_missing_notice_fails_the_row() {
        let good = BudgetTally {
            budget: Micros(40_000),
            spent: Micros(52_000),
            usage_cost: Micros(52_000),
            refused: 100,
            refused_after_s: Some(2.5),
            accepted_after_refusal: 0,
            in_flight_at_crossing: 12,
            notices: vec![80, 100],
        };
        assert!(good.failures().is_empty(), "{:?}", good.failures());
        let cases = [
            BudgetTally { refused: 0, refused_after_s: None, ..good.clone() },
            BudgetTally { refused_after_s: Some(5.5), ..good.clone() },
            BudgetTally { accepted_after_refusal: 1, ..good.clone() },
            BudgetTally { usage_cost: Micros(51_999), ..good.clone() },
            BudgetTally { notices: vec![80], ..good.clone() },
        ];
        for bad in cases {
            assert_eq!(bad.failures().len(), 1, "{bad:?}");
        }
    }
}
