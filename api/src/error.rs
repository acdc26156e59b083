//! The api's one error type and the rendering of every error response as problem+json.
//!
//! Handlers return [`ApiError`]. Its response carries the [`Problem`] in an extension; the
//! [`render_problems`] middleware, which knows the base URL and the request's ids, turns it into
//! the body. The same middleware gives a problem+json body to errors raised outside handlers
//! (unknown route, wrong method, body over the limit, a panic), so no error response is ever
//! plain text.

use crate::problem::{FieldError, PROBLEM_CONTENT_TYPE, Problem, ProblemKind};
use axum::{
    extract::{Request, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use common::{
    bus::BusError,
    files::{FileStoreError, FilesError},
    store::{GroupCommitError, StoreError},
};

/// The public base URL problem types are built from (`{base}/errors/<kind>`).
#[derive(Clone, Debug)]
pub struct BaseUrl(pub std::sync::Arc<str>);

/// An error a handler answers with.
#[derive(Debug)]
pub enum ApiError {
    /// An error the client can act on.
    Problem(Problem),
    /// A failure inside the service; logged with its cause chain, answered opaquely.
    Internal(anyhow::Error),
    /// 503 with `Retry-After`: the service will not take this on now (its queue is longer than
    /// it accepts); the client is told when to come back.
    Busy {
        /// What the client is told.
        detail: String,
        /// `Retry-After`, in seconds.
        retry_after: u32,
    },
}

impl ApiError {
    /// 403 with an explanation: the caller may not act on what it named.
    pub fn forbidden_because(detail: impl Into<String>) -> Self {
        Self::Problem(Problem::new(ProblemKind::Forbidden, detail))
    }

    /// 409 with an explanation: the request clashes with the resource's state.
    pub fn conflict(detail: impl Into<String>) -> Self {
        Self::Problem(Problem::new(ProblemKind::Conflict, detail))
    }

    /// 404 with an explanation.
    pub fn not_found(detail: impl Into<String>) -> Self {
        Self::Problem(Problem::new(ProblemKind::NotFound, detail))
    }

    /// 400 listing the failing fields.
    pub fn validation(detail: impl Into<String>, errors: Vec<FieldError>) -> Self {
        Self::Problem(Problem::validation(detail, errors))
    }

    /// 400 for a body with invalid fields, listing them (and naming them in the `detail`, the
    /// one text some clients show).
    pub fn invalid_fields(errors: Vec<FieldError>) -> Self {
        Self::validation(naming("The request has invalid fields", &errors), errors)
    }

    /// 400 for a query string with invalid parameters, listing them (and naming them in the
    /// `detail`).
    pub fn invalid_query(errors: Vec<FieldError>) -> Self {
        Self::validation(naming("The query has invalid parameters", &errors), errors)
    }

    /// 402: the account's monthly budget `budget` is spent (`spent` this month); creates are
    /// refused until `resets_at` or until the budget is raised.
    pub fn budget_exhausted(
        budget: common::domain::Micros,
        spent: common::domain::Micros,
        resets_at: chrono::DateTime<chrono::Utc>,
    ) -> Self {
        Self::Problem(Problem::new(
            ProblemKind::BudgetExhausted,
            format!(
                "This account's monthly budget of ${budget} is spent (${spent} this month); new predictions and trainings are refused until it resets at {} or is raised. Work already accepted runs to its end.",
                resets_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ),
        ))
    }

    /// 401, the same for every kind of bad key.
    pub fn unauthorized() -> Self {
        Self::Problem(Problem::new(
            ProblemKind::Unauthorized,
            "A valid API key is required: send it as 'Authorization: Bearer <key>'.",
        ))
    }

    /// 429: the key's rate limit is used up (the headers come from [`crate::state::ratelimit`]).
    pub fn rate_limited() -> Self {
        Self::Problem(Problem::new(ProblemKind::RateLimit, "Rate limit exceeded. Retry after 60 seconds."))
    }

    /// 503 with `Retry-After: retry_after` (seconds), saying `detail`.
    pub fn busy(detail: impl Into<String>, retry_after: u32) -> Self {
        Self::Busy { detail: detail.into(), retry_after: retry_after.max(1) }
    }

    /// 403 for a key without `scope`.
    pub fn forbidden(scope: common::domain::Scope) -> Self {
        Self::Problem(Problem::new(
            ProblemKind::Forbidden,
            format!("This API key lacks the '{scope}' scope this operation needs."),
        ))
    }
}

impl<E: Into<anyhow::Error>> From<E> for ApiError {
    fn from(e: E) -> Self {
        Self::Internal(e.into())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let problem = match self {
            Self::Problem(p) => p,
            Self::Busy { detail, retry_after } => return retry_later_in(detail, retry_after),
            Self::Internal(e) if read_timed_out(&e) => {
                // Under overload these come by the hundred a second: counted by
                // `http_requests_total{status="503"}`, logged only at debug.
                tracing::debug!(
                    error = format!("{e:#}"),
                    "a read ran past its time limit, or a write past its request's deadline; answered 503"
                );
                return retry_later(format!(
                    "The service is too busy to answer in time; retry in {RETRY_AFTER_SECONDS} seconds."
                ));
            }
            Self::Internal(e) if dependency_unreachable(&e) => {
                tracing::warn!(error = format!("{e:#}"), "a dependency is unreachable; answered 503");
                return retry_later(format!(
                    "The service cannot reach its database, message bus or file store right now; retry in {RETRY_AFTER_SECONDS} seconds."
                ));
            }
            Self::Internal(e) => {
                tracing::error!(error = format!("{e:#}"), "internal error");
                Problem::new(ProblemKind::Internal, "The service failed to handle this request; it has been logged.")
            }
        };
        let status = StatusCode::from_u16(problem.kind.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = status.into_response();
        response.extensions_mut().insert(problem);
        response
    }
}

/// How many failing fields a `detail` names before it says how many more there are.
const FIELDS_NAMED: usize = 3;

/// `lead`, then each failing field and what is wrong with it (the first [`FIELDS_NAMED`], then
/// how many more), e.g. `The request has invalid fields: input.words: This field is required;
/// input.repeat: Must be at most 5. See errors.` replicate-python shows only the `detail`.
pub fn naming(lead: &str, errors: &[FieldError]) -> String {
    let named: Vec<String> =
        errors.iter().take(FIELDS_NAMED).map(|e| format!("{}: {}", e.field, e.message.trim_end_matches('.'))).collect();
    let more = match errors.len().saturating_sub(FIELDS_NAMED) {
        0 => String::new(),
        n => format!("; and {n} more"),
    };
    if named.is_empty() {
        format!("{lead}; see errors.")
    } else {
        format!("{lead}: {}{more}. See errors.", named.join("; "))
    }
}

/// A 503 problem saying `detail`, with `Retry-After` [`RETRY_AFTER_SECONDS`].
fn retry_later(detail: String) -> Response {
    retry_later_in(detail, RETRY_AFTER_SECONDS)
}

/// A 503 problem saying `detail`, with `Retry-After: seconds`.
fn retry_later_in(detail: String, seconds: u32) -> Response {
    let mut response = StatusCode::SERVICE_UNAVAILABLE.into_response();
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    response.extensions_mut().insert(Problem::new(ProblemKind::Unavailable, detail));
    response
}

/// The `Retry-After` of a 503 answered while a dependency is unreachable or too busy.
pub const RETRY_AFTER_SECONDS: u32 = 5;

/// Whether a failure is a read MongoDB stopped at its time limit
/// ([`common::store::READ_TIME_LIMIT`], or the request's deadline), or a write dropped because
/// the request's deadline passed while it queued: the service is too busy, the client is told
/// to retry.
fn read_timed_out(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause.downcast_ref::<StoreError>().is_some_and(common::store::is_time_limit)
            || cause.downcast_ref::<GroupCommitError>().is_some_and(|g| matches!(g, GroupCommitError::Abandoned))
    })
}

/// Whether a failure comes from MongoDB, NATS or the file store being out of reach (a restart,
/// a partition):
/// the client is told to retry (503), not that the service is broken (500).
fn dependency_unreachable(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause.downcast_ref::<StoreError>().is_some_and(common::store::is_unreachable)
            || cause.downcast_ref::<GroupCommitError>().is_some_and(GroupCommitError::is_unavailable)
            || cause.downcast_ref::<FileStoreError>().is_some_and(|f| matches!(f, FileStoreError::Unavailable(_)))
            || cause
                .downcast_ref::<FilesError>()
                .is_some_and(|f| matches!(f, FilesError::Bytes(FileStoreError::Unavailable(_))))
            || cause
                .downcast_ref::<BusError>()
                .is_some_and(|b| matches!(b, BusError::Unreachable(_) | BusError::Connect { .. }))
    })
}

/// The trace id of a request: from a W3C `traceparent` header, else derived from the request id.
fn trace_id(headers: &HeaderMap, request_id: Option<&str>) -> Option<String> {
    let from_traceparent = headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .and_then(|tp| tp.split('-').nth(1))
        .filter(|id| id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(str::to_owned);
    from_traceparent.or_else(|| {
        let hex: String = request_id?.chars().filter(char::is_ascii_hexdigit).collect();
        (hex.len() == 32).then_some(hex)
    })
}

/// Renders every error response as problem+json (see the module doc).
pub async fn render_problems(State(base_url): State<BaseUrl>, request: Request, next: Next) -> Response {
    let request_id = request.headers().get("x-request-id").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let trace = trace_id(request.headers(), request_id.as_deref());
    let mut response = next.run(request).await;

    let status = response.status();
    let problem = match response.extensions_mut().remove::<Problem>() {
        Some(p) => p,
        None if status.is_client_error() || status.is_server_error() => {
            // A handler's own JSON (problem+json, or e.g. /ready's 503 body) and the console's
            // error pages are left alone; only bodies the framework made (none, or plain text)
            // are replaced.
            let handler_body = response
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|ct| ct.to_str().ok())
                .is_some_and(|ct| ct.contains("json") || ct.starts_with("text/html"));
            if handler_body {
                return response;
            }
            let kind = ProblemKind::from_status(status.as_u16());
            Problem::new(kind, default_detail(status))
        }
        None => return response,
    };
    let body = problem.body(&base_url.0, request_id.as_deref(), trace.as_deref());
    let json = serde_json::to_vec(&body).unwrap_or_default();
    let (mut parts, _) = response.into_parts();
    parts.status = StatusCode::from_u16(problem.kind.status()).unwrap_or(status);
    parts.headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_CONTENT_TYPE));
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, axum::body::Body::from(json))
}

fn default_detail(status: StatusCode) -> String {
    match status {
        StatusCode::NOT_FOUND => "No such route.".into(),
        StatusCode::METHOD_NOT_ALLOWED => "This route does not accept this method; see the Allow header.".into(),
        StatusCode::PAYLOAD_TOO_LARGE => "The request body is larger than the 1 MiB limit.".into(),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "The request body must be JSON (Content-Type: application/json).".into(),
        s => s.canonical_reason().unwrap_or("Error").to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_validation_detail_names_the_first_fields_and_counts_the_rest() {
        let errors = |n: usize| -> Vec<FieldError> {
            (0..n).map(|i| FieldError::invalid(format!("input.f{i}"), format!("Must be at most {i}."))).collect()
        };
        assert_eq!(
            naming("The request has invalid fields", &[FieldError::missing("input.words")]),
            "The request has invalid fields: input.words: This field is required. See errors."
        );
        assert_eq!(
            naming("The request has invalid fields", &errors(5)),
            "The request has invalid fields: input.f0: Must be at most 0; input.f1: Must be at most 1; \
             input.f2: Must be at most 2; and 2 more. See errors."
        );
        assert_eq!(naming("The query has invalid parameters", &[]), "The query has invalid parameters; see errors.");
    }

    #[test]
    fn an_unreachable_dependency_is_503_with_retry_after_and_other_failures_500() {
        let down = ApiError::from(BusError::Unreachable("connection refused".into())).into_response();
        assert_eq!(down.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(down.headers()[header::RETRY_AFTER], "5");
        assert_eq!(down.extensions().get::<Problem>().map(|p| p.kind), Some(ProblemKind::Unavailable));
        let stopping = ApiError::from(GroupCommitError::Stopped).into_response();
        assert_eq!(stopping.status(), StatusCode::SERVICE_UNAVAILABLE);
        let refused = GroupCommitError::Refused { code: 2, message: "bad".into() };
        assert_eq!(ApiError::from(refused).into_response().status(), StatusCode::INTERNAL_SERVER_ERROR);
        let broken = ApiError::from(anyhow::anyhow!("a bug")).into_response();
        assert_eq!(broken.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(broken.headers().get(header::RETRY_AFTER).is_none());
    }

    #[test]
    fn a_read_stopped_at_its_time_limit_is_503_with_retry_after() {
        let stopped: mongodb::error::CommandError = bson::from_document(
            bson::doc! { "code": 50, "codeName": "MaxTimeMSExpired", "errmsg": "operation exceeded time limit" },
        )
        .expect("a command error");
        let err = StoreError::from(mongodb::error::ErrorKind::Command(stopped));
        let response = ApiError::from(anyhow::Error::from(err)).into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[header::RETRY_AFTER], "5");
        let problem = response.extensions().get::<Problem>().expect("a problem");
        assert!(problem.detail.contains("too busy"), "{}", problem.detail);
    }

    #[test]
    fn the_trace_id_comes_from_traceparent_when_present() {
        let mut headers = HeaderMap::new();
        headers
            .insert("traceparent", HeaderValue::from_static("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
        assert_eq!(trace_id(&headers, Some("x")).as_deref(), Some("4bf92f3577b34da6a3ce929d0e0e4736"));
    }

    #[test]
    fn without_traceparent_the_trace_id_derives_from_a_uuid_request_id() {
        let id = "6f1c2c9e-8a1d-4c47-9f3e-2b1a0c9d8e7f";
        assert_eq!(trace_id(&HeaderMap::new(), Some(id)).as_deref(), Some("6f1c2c9e8a1d4c479f3e2b1a0c9d8e7f"));
        assert_eq!(trace_id(&HeaderMap::new(), Some("custom")), None);
    }
}
