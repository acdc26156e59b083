//! Usage reports, shared by `GET /v1/usage`, the console's Usage page and `api admin usage`:
//! the running totals of [`common::store::usage`] for a range, added up per bucket (hour or
//! day) and per the groups asked, as JSON or CSV. Nothing here reads predictions.

use std::collections::BTreeMap;

use bson::DateTime as BsonDateTime;
use chrono::{DateTime, Utc};
use common::{
    domain::{AccountId, Micros},
    store::{
        Store, StoreError,
        usage::{UsageGroup, UsageTotal},
    },
};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::validate::usage_query::{GroupKey, UsageQuery};

/// How many predictions ended each way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Counts {
    /// Succeeded.
    pub succeeded: i64,
    /// Failed.
    pub failed: i64,
    /// Canceled.
    pub canceled: i64,
}

/// Sums of one group (or of everything).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Sums {
    count: Counts,
    predict_time: f64,
    total_time: f64,
    cost: Micros,
}

impl Sums {
    fn add(&mut self, t: &UsageTotal) {
        self.count.succeeded += t.succeeded;
        self.count.failed += t.failed;
        self.count.canceled += t.canceled;
        self.predict_time += t.predict_time;
        self.total_time += t.total_time;
        self.cost += t.cost;
    }
}

/// The value of `key` in `group` (null when it has none).
fn group_value(group: &UsageGroup, key: GroupKey) -> Option<String> {
    match key {
        GroupKey::Model => Some(group.model.clone()),
        GroupKey::Deployment => group.deployment.clone(),
        GroupKey::Hardware => group.hardware.clone(),
        GroupKey::ApiKey => group.api_key.clone(),
        GroupKey::Kind => Some(group.kind.clone()),
    }
}

/// A usage report: per bucket, per group, the sums; and the totals.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageReport {
    query: UsageQuery,
    /// Bucket start -> group values (in `group_by` order) -> sums.
    buckets: BTreeMap<DateTime<Utc>, BTreeMap<Vec<Option<String>>, Sums>>,
    totals: Sums,
}

/// The report of `account` (every account when `None`) for `query`.
pub async fn report(store: &Store, account: Option<&AccountId>, query: &UsageQuery) -> Result<UsageReport, StoreError> {
    let from = BsonDateTime::from_millis(query.start.timestamp_millis());
    let until = BsonDateTime::from_millis(query.end.timestamp_millis());
    let totals = store.usage_totals().between(account, from, until).await?;
    Ok(UsageReport::of(query.clone(), &totals))
}

/// The report of the caller's `account` for `query`: `GET /v1/usage` and the console's page.
pub async fn of_account(
    state: &crate::state::AppState,
    account: &AccountId,
    query: &UsageQuery,
) -> Result<UsageReport, crate::error::ApiError> {
    Ok(report(&state.store, Some(account), query).await?)
}

fn round(seconds: f64) -> f64 {
    (seconds * 1000.0).round() / 1000.0
}

impl UsageReport {
    /// Adds up `totals` (of any writers) for `query`.
    pub fn of(query: UsageQuery, totals: &[UsageTotal]) -> Self {
        let mut buckets: BTreeMap<DateTime<Utc>, BTreeMap<Vec<Option<String>>, Sums>> = BTreeMap::new();
        let mut all = Sums::default();
        for total in totals {
            let Some(hour) = DateTime::<Utc>::from_timestamp_millis(total.hour.timestamp_millis()) else { continue };
            let key: Vec<Option<String>> = query.group_by.iter().map(|k| group_value(&total.group, *k)).collect();
            buckets.entry(query.bucket.floor(hour)).or_default().entry(key).or_default().add(total);
            all.add(total);
        }
        Self { query, buckets, totals: all }
    }

    /// The totals of every bucket and group.
    pub fn counts(&self) -> Counts {
        self.totals.count
    }

    fn sums_json(sums: &Sums) -> Map<String, Value> {
        let mut out = Map::new();
        out.insert("count".into(), serde_json::to_value(sums.count).unwrap_or_default());
        out.insert("predict_time".into(), round(sums.predict_time).into());
        out.insert("total_time".into(), round(sums.total_time).into());
        out.insert("cost".into(), sums.cost.dollars().into());
        out
    }

    /// The body of `GET /v1/usage`.
    pub fn json(&self) -> Value {
        let length = self.query.bucket.length();
        let results: Vec<Value> = self
            .buckets
            .iter()
            .map(|(start, groups)| {
                let groups: Vec<Value> = groups
                    .iter()
                    .map(|(values, sums)| {
                        let mut group = Map::new();
                        for (key, value) in self.query.group_by.iter().zip(values) {
                            group.insert(key.as_str().into(), value.clone().map_or(Value::Null, Value::String));
                        }
                        group.extend(Self::sums_json(sums));
                        Value::Object(group)
                    })
                    .collect();
                serde_json::json!({"start": start, "end": *start + length, "groups": groups})
            })
            .collect();
        serde_json::json!({
            "start": self.query.start,
            "end": self.query.end,
            "bucket": self.query.bucket.as_str(),
            "group_by": self.query.group_by.iter().map(|k| k.as_str()).collect::<Vec<_>>(),
            "results": results,
            "totals": Value::Object(Self::sums_json(&self.totals)),
        })
    }

    /// The same as CSV: a header, then one row per bucket and group.
    pub fn csv(&self) -> String {
        let keys: Vec<&str> = self.query.group_by.iter().map(|k| k.as_str()).collect();
        let mut out = format!(
            "bucket_start,bucket_end,{},succeeded,failed,canceled,predict_time,total_time,cost\n",
            keys.join(",")
        );
        let length = self.query.bucket.length();
        for (start, groups) in &self.buckets {
            for (values, sums) in groups {
                let cells: Vec<String> = values.iter().map(|v| csv_cell(v.as_deref().unwrap_or(""))).collect();
                out.push_str(&format!(
                    "{},{},{},{},{},{},{},{},{}\n",
                    start.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                    (*start + length).to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                    cells.join(","),
                    sums.count.succeeded,
                    sums.count.failed,
                    sums.count.canceled,
                    round(sums.predict_time),
                    round(sums.total_time),
                    sums.cost.dollars(),
                ));
            }
        }
        out
    }
}

/// A CSV cell: quoted when it holds a comma, a quote or a line break.
fn csv_cell(value: &str) -> String {
    if value.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", value.replace('"', "\"\""))
    } else {
        value.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use common::store::usage::UsageGroup;

    use super::*;
    use crate::validate::usage_query::parse;

    fn total(hour: &str, model: &str, key: Option<&str>, ok: i64, failed: i64, predict: f64) -> UsageTotal {
        let at = DateTime::parse_from_rfc3339(hour).expect("time");
        UsageTotal {
            id: format!("w|{hour}|{model}"),
            account_id: AccountId::generate(),
            hour: BsonDateTime::from_millis(at.timestamp_millis()),
            group: UsageGroup {
                model: model.into(),
                deployment: None,
                hardware: None,
                api_key: key.map(str::to_owned),
                kind: "prediction".into(),
            },
            succeeded: ok,
            failed,
            canceled: 0,
            predict_time: predict,
            total_time: predict * 2.0,
            cost: Micros((predict * 1000.0) as i64),
            last_seq: 1,
        }
    }

    #[test]
    fn hours_add_up_into_days_and_groups_across_writers() {
        let now = DateTime::parse_from_rfc3339("2026-11-26T12:00:00Z").expect("t").with_timezone(&Utc);
        let query = parse(Some("start=2026-11-25T00:00:00Z&end=2026-11-26T12:00:00Z"), now).expect("valid");
        let totals = [
            total("2026-11-25T03:00:00Z", "demo/echo", None, 2, 1, 1.5),
            total("2026-11-25T17:00:00Z", "demo/echo", Some("k1"), 1, 0, 0.25),
            total("2026-11-26T01:00:00Z", "demo/fail", None, 0, 2, 0.0),
        ];
        let report = UsageReport::of(query, &totals);
        let body = report.json();
        assert_eq!(body["results"].as_array().expect("buckets").len(), 2);
        assert_eq!(body["results"][0]["start"], "2026-11-25T00:00:00Z");
        assert_eq!(
            body["results"][0]["groups"][0],
            serde_json::json!({
                "model": "demo/echo", "count": {"succeeded": 3, "failed": 1, "canceled": 0},
                "predict_time": 1.75, "total_time": 3.5, "cost": "0.00175",
            })
        );
        assert_eq!(body["totals"]["count"], serde_json::json!({"succeeded": 3, "failed": 3, "canceled": 0}));
        let csv = report.csv();
        assert_eq!(
            csv.lines().next(),
            Some("bucket_start,bucket_end,model,succeeded,failed,canceled,predict_time,total_time,cost")
        );
        assert!(csv.contains("2026-11-26T00:00:00Z,2026-11-27T00:00:00Z,demo/fail,0,2,0,0,0,0.00\n"), "{csv}");
        assert_eq!(body["totals"]["cost"], "0.00175", "the groups' costs add up exactly");
    }

    #[test]
    fn a_cell_with_a_comma_is_quoted() {
        assert_eq!(csv_cell("a,b"), "\"a,b\"");
        assert_eq!(csv_cell("plain"), "plain");
    }
}
