//! The predictions pages: the list (`/`, newest first, a status filter, 20 a page) and one
//! prediction (`/predictions/{id}`, its `urls.web`), with the Cancel and Resend actions.
//!
//! The prediction page renders everything the API holds: status (`#status`), input, timings,
//! logs (`#logs`), output (`#output`: text, JSON, `<img>` for images, `<video>` for videos,
//! through the console's own file route so the session loads them), the error of a failed
//! prediction, and its webhook deliveries. While it runs, `/static/console.js` follows the
//! prediction's SSE stream (`urls.stream`, whose token opens it) and updates the page without
//! a reload; when the stream says `done`, it reloads once to show the final state.

use std::collections::HashMap;

use askama::Template;
use axum::{
    extract::{Path, Query, State},
    response::Response,
};
use bson::DateTime;
use common::{
    domain::{ApiSurface, JobKind, Prediction, PredictionStatus, Scope},
    store::webhook_attempts::{AttemptOutcome, WebhookAttempt},
};

use super::{
    csrf::ConsoleAction,
    error::ConsoleError,
    output::{FileView, OutputView, file_views, output_view},
    page::{Chrome, PageNumber, Pager, ago, html, see_other},
    session::Signed,
};
use crate::{ops, ops::cancel, ops::deliveries, ops::jobs, ops::owned::owned_prediction, state::AppState};

/// One row of the list.
struct Row {
    id: String,
    model: String,
    status: &'static str,
    created: String,
    age: String,
    duration: String,
}

#[derive(Template)]
#[template(path = "predictions.html")]
struct ListPage {
    chrome: Chrome,
    rows: Vec<Row>,
    statuses: Vec<&'static str>,
    status_filter: String,
    pager: Pager,
}

fn seconds_between(from: DateTime, to: DateTime) -> f64 {
    (to.timestamp_millis() - from.timestamp_millis()) as f64 / 1000.0
}

fn duration(p: &Prediction) -> String {
    match (p.started_at, p.completed_at) {
        (Some(s), Some(c)) => format!("{:.1} s", seconds_between(s, c)),
        (Some(s), None) => format!("{:.0} s so far", seconds_between(s, DateTime::now())),
        _ => "—".into(),
    }
}

/// A console list of jobs (the predictions, the trainings) as its query asks: `status`, and
/// `page` from 0 ([`jobs::console_page`]).
pub(super) struct JobList {
    /// The page's jobs, newest first.
    pub(super) jobs: Vec<Prediction>,
    /// The status asked for, if it is one.
    pub(super) status: Option<PredictionStatus>,
    /// The links to the newer and the older page, and the counts.
    pub(super) pager: Pager,
}

/// The list of the signed-in account's jobs of `kind` shown at `path`, as `query` asks.
pub(super) async fn job_list(
    state: &AppState,
    signed: &Signed,
    kind: JobKind,
    path: &str,
    query: &HashMap<String, String>,
) -> Result<JobList, ConsoleError> {
    let filter = query.get("status").map(String::as_str).unwrap_or_default();
    let status = PredictionStatus::ALL.into_iter().find(|s| s.as_str() == filter);
    let number = PageNumber::of(query);
    let (jobs, total) = jobs::console_page(state, &signed.key.account_id, kind, status, number.offset()).await?;
    let filtered = status.map_or(path.to_owned(), |s| format!("{path}?status={}", s.as_str()));
    let pager = number.pager(&filtered, jobs.len(), total);
    Ok(JobList { jobs, status, pager })
}

/// `GET /`
pub async fn list(
    State(state): State<AppState>,
    signed: Signed,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ConsoleError> {
    let listed = job_list(&state, &signed, JobKind::Prediction, "/", &query).await?;
    let now = DateTime::now();
    let rows: Vec<Row> = listed
        .jobs
        .iter()
        .map(|p| Row {
            id: p.id.to_string(),
            model: p.model.to_string(),
            status: p.status.as_str(),
            created: p.created_at.to_chrono().to_rfc3339(),
            age: ago(seconds_between(p.created_at, now) as i64),
            duration: duration(p),
        })
        .collect();
    let list = ListPage {
        chrome: signed.chrome("predictions"),
        rows,
        statuses: PredictionStatus::ALL.iter().map(|s| s.as_str()).collect(),
        status_filter: listed.status.map_or(String::new(), |s| s.as_str().to_owned()),
        pager: listed.pager,
    };
    Ok(html(&list))
}

/// One delivery attempt as the page shows it.
struct DeliveryRow {
    webhook_id: String,
    event: String,
    attempt: u32,
    status_code: String,
    latency_ms: u64,
    outcome: &'static str,
    error: String,
    resendable: bool,
}

impl DeliveryRow {
    fn of(a: &WebhookAttempt) -> Self {
        let outcome = match a.outcome {
            AttemptOutcome::Delivered => "delivered",
            AttemptOutcome::WillRetry => "will_retry",
            AttemptOutcome::Failed => "failed",
            AttemptOutcome::Refused => "refused",
        };
        Self {
            webhook_id: a.webhook_id.clone(),
            event: a.event.to_string(),
            attempt: a.attempt,
            status_code: a.status_code.map_or("—".into(), |c| c.to_string()),
            latency_ms: a.latency_ms,
            outcome,
            error: a.error.clone().unwrap_or_default(),
            resendable: matches!(a.outcome, AttemptOutcome::Failed | AttemptOutcome::Delivered),
        }
    }
}

/// Where a waiting prediction stands, as the page shows it.
struct QueueRow {
    position: u64,
    estimate: Option<String>,
}

#[derive(Template)]
#[template(path = "prediction.html")]
struct PredictionPage {
    chrome: Chrome,
    id: String,
    model: String,
    status: &'static str,
    running: bool,
    can_cancel: bool,
    can_write: bool,
    stream_url: String,
    error: Option<String>,
    output: OutputView,
    input_files: Vec<FileView>,
    queue: Option<QueueRow>,
    logs: String,
    input: String,
    created: String,
    started: String,
    completed: String,
    predict_time: String,
    total_time: String,
    has_webhook: bool,
    deliveries: Vec<DeliveryRow>,
}

/// A moment as the pages show it, `—` when there is none.
pub(super) fn time(t: Option<DateTime>) -> String {
    t.map_or("—".into(), |t| t.to_chrono().format("%Y-%m-%d %H:%M:%S%.3f UTC").to_string())
}

/// `GET /predictions/{id}`: another account's prediction is a 404 page.
pub async fn page(
    State(state): State<AppState>,
    signed: Signed,
    Path(id): Path<String>,
) -> Result<Response, ConsoleError> {
    let p = owned_prediction(&state, &signed.caller(), &id).await?;
    let output = output_view(&state, p.output.as_ref()).await?;
    let attempts = ops::lists::delivery_attempts(&state, &p.id).await?;
    let running = !p.status.is_terminal();
    let can_write = signed.key.has_scope(Scope::Write);
    let view = p.view(&state.links, ApiSurface::Canonical);
    let page = PredictionPage {
        chrome: signed.chrome("predictions"),
        id: p.id.to_string(),
        model: p.model.to_string(),
        status: p.status.as_str(),
        running,
        can_cancel: running && can_write,
        can_write,
        stream_url: view.urls.stream,
        error: p.error.as_ref().map(|e| e.message.clone()),
        output,
        input_files: file_views(&state, &p.input_files).await?,
        queue: state.queue_places.place(&p).await?.map(|q| QueueRow {
            position: q.position,
            estimate: q.estimated_start_at.map(|t| t.format("%H:%M:%S UTC").to_string()),
        }),
        logs: p.logs.clone(),
        input: serde_json::to_string_pretty(&p.input).unwrap_or_default(),
        created: time(Some(p.created_at)),
        started: time(p.started_at),
        completed: time(p.completed_at),
        predict_time: p.metrics.map_or("—".into(), |m| format!("{:.3} s", m.predict_time)),
        total_time: p.metrics.map_or("—".into(), |m| format!("{:.3} s", m.total_time)),
        has_webhook: p.webhook.is_some(),
        deliveries: attempts.iter().map(DeliveryRow::of).collect(),
    };
    Ok(html(&page))
}

fn back_to(id: &str) -> Response {
    see_other(&format!("/predictions/{id}"))
}

/// `POST /predictions/{id}/cancel` (scope `write`).
pub async fn cancel(
    State(state): State<AppState>,
    Path(id): Path<String>,
    action: ConsoleAction,
) -> Result<Response, ConsoleError> {
    action.signed.require(Scope::Write)?;
    cancel::cancel(&state, &action.signed.caller(), &id, JobKind::Prediction).await?;
    Ok(back_to(&id))
}

/// `POST /predictions/{id}/deliveries/{webhook_id}/resend` (scope `write`).
pub async fn resend(
    State(state): State<AppState>,
    Path((id, webhook_id)): Path<(String, String)>,
    action: ConsoleAction,
) -> Result<Response, ConsoleError> {
    action.signed.require(Scope::Write)?;
    deliveries::resend(&state, &action.signed.caller(), &id, &webhook_id).await?;
    Ok(back_to(&id))
}
