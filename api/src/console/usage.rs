//! The Usage page (`/usage`, scope `read`): the account's predictions of the last 30 days by day
//! and model, as a stacked bar chart (drawn here as SVG: no script, nothing fetched) and a
//! table with their cost; what the account spent this month and, when it has a monthly budget,
//! a bar of it with a banner past 80 % and at 100 % (creates refused); and `/usage.csv`, the
//! same as `GET /v1/usage` answers with `Accept: text/csv`.

use std::collections::BTreeMap;

use askama::Template;
use axum::{
    extract::State,
    http::{HeaderValue, header},
    response::{IntoResponse, Response},
};
use common::domain::Scope;
use serde_json::Value;

use super::{
    error::ConsoleError,
    page::{Chrome, html},
    session::Signed,
};
use crate::{ops::usage, state::AppState, validate::usage_query};

/// Colours of the models' bars, in turn.
const PALETTE: [&str; 8] = ["#2563eb", "#16a34a", "#d97706", "#dc2626", "#7c3aed", "#0891b2", "#db2777", "#65a30d"];
/// The chart's drawing area, in SVG units.
const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 200.0;

/// A bar segment of the chart.
struct Segment {
    x: String,
    y: String,
    width: String,
    height: String,
    colour: &'static str,
    title: String,
}

/// A model in the legend.
struct Legend {
    model: String,
    colour: &'static str,
}

/// A row of the table.
struct Row {
    day: String,
    model: String,
    succeeded: i64,
    failed: i64,
    canceled: i64,
    predict_time: String,
    cost: String,
}

/// The account's monthly budget as the page shows it.
struct BudgetBar {
    budget: String,
    spent: String,
    /// Spent as a share of the budget, 0 to 100 (the bar).
    percent: u32,
    /// `warn` past 80 %, `exhausted` at 100 %, else empty.
    level: &'static str,
    resets_at: String,
}

#[derive(Template)]
#[template(path = "usage.html")]
struct UsagePage {
    chrome: Chrome,
    segments: Vec<Segment>,
    legend: Vec<Legend>,
    rows: Vec<Row>,
    most: i64,
    spent_this_month: String,
    budget: Option<BudgetBar>,
}

/// The report of the signed-in account for the last 30 days, by day and model.
async fn last_30_days(state: &AppState, signed: &Signed) -> Result<usage::UsageReport, ConsoleError> {
    let query = usage_query::parse(None, chrono::Utc::now())
        .map_err(|_| anyhow::anyhow!("the default usage query is valid"))?;
    Ok(usage::of_account(state, &signed.key.account_id, &query).await?)
}

fn count(group: &Value) -> i64 {
    ["succeeded", "failed", "canceled"].iter().map(|s| group["count"][s].as_i64().unwrap_or(0)).sum()
}

/// `GET /usage`
pub async fn show(State(state): State<AppState>, signed: Signed) -> Result<Response, ConsoleError> {
    signed.require(Scope::Read)?;
    let body = last_30_days(&state, &signed).await?.json();
    let days = body["results"].as_array().cloned().unwrap_or_default();
    let mut colours: BTreeMap<String, &'static str> = BTreeMap::new();
    let mut rows = Vec::new();
    let mut most = 1;
    for day in &days {
        let groups = day["groups"].as_array().cloned().unwrap_or_default();
        most = most.max(groups.iter().map(count).sum());
        for g in &groups {
            let model = g["model"].as_str().unwrap_or_default().to_owned();
            let next = PALETTE[colours.len() % PALETTE.len()];
            colours.entry(model.clone()).or_insert(next);
            rows.push(Row {
                day: day["start"].as_str().unwrap_or_default().get(..10).unwrap_or_default().to_owned(),
                model,
                succeeded: g["count"]["succeeded"].as_i64().unwrap_or(0),
                failed: g["count"]["failed"].as_i64().unwrap_or(0),
                canceled: g["count"]["canceled"].as_i64().unwrap_or(0),
                predict_time: format!("{:.1} s", g["predict_time"].as_f64().unwrap_or(0.0)),
                cost: format!("${}", g["cost"].as_str().unwrap_or("0.00")),
            });
        }
    }
    // One bar per day of the 30, stacked by model.
    let slot = WIDTH / 31.0;
    let first = chrono::Utc::now().date_naive() - chrono::Days::new(30);
    let mut segments = Vec::new();
    for day in &days {
        let Some(date) =
            day["start"].as_str().and_then(|s| s.get(..10)).and_then(|d| d.parse::<chrono::NaiveDate>().ok())
        else {
            continue;
        };
        let index = (date - first).num_days().clamp(0, 30) as f64;
        let mut top = HEIGHT;
        for g in day["groups"].as_array().into_iter().flatten() {
            let model = g["model"].as_str().unwrap_or_default();
            let height = count(g) as f64 / most as f64 * HEIGHT;
            top -= height;
            segments.push(Segment {
                x: format!("{:.1}", index * slot + slot * 0.15),
                y: format!("{top:.1}"),
                width: format!("{:.1}", slot * 0.7),
                height: format!("{height:.1}"),
                colour: colours.get(model).copied().unwrap_or(PALETTE[0]),
                title: format!("{date} {model}: {}", count(g)),
            });
        }
    }
    let legend = colours.into_iter().map(|(model, colour)| Legend { model, colour }).collect();
    let standing = state.account_limits.fresh(&signed.key.account_id).await?;
    let spent = standing.spent_this_month;
    let budget = standing.limits.monthly_budget().map(|budget| {
        let percent =
            if budget.0 <= 0 { 100 } else { (i128::from(spent.0) * 100 / i128::from(budget.0)).clamp(0, 100) as u32 };
        BudgetBar {
            budget: budget.dollars(),
            spent: spent.dollars(),
            percent,
            level: if spent >= budget {
                "exhausted"
            } else if percent >= 80 {
                "warn"
            } else {
                ""
            },
            resets_at: standing.resets_at.format("%Y-%m-%d %H:%M UTC").to_string(),
        }
    });
    let page = UsagePage {
        chrome: signed.chrome("usage"),
        segments,
        legend,
        rows,
        most,
        spent_this_month: spent.dollars(),
        budget,
    };
    Ok(html(&page))
}

/// `GET /usage.csv`
pub async fn csv(State(state): State<AppState>, signed: Signed) -> Result<Response, ConsoleError> {
    signed.require(Scope::Read)?;
    let report = last_30_days(&state, &signed).await?;
    let headers = [
        (header::CONTENT_TYPE, HeaderValue::from_static("text/csv; charset=utf-8")),
        (header::CONTENT_DISPOSITION, HeaderValue::from_static("attachment; filename=\"usage.csv\"")),
    ];
    Ok((headers, report.csv()).into_response())
}
