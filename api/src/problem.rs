//! The problem+json error body (RFC 9457) that every HTTP error of the service uses.
//!
//! A [`Problem`] is built where the error is known (kind, detail, field errors); the api renders
//! it into a [`ProblemBody`] at the edge, where the base URL, request id and trace id are known.

use serde::{Deserialize, Serialize};

/// The media type of every error response.
pub const PROBLEM_CONTENT_TYPE: &str = "application/problem+json";

/// The kinds of error the API answers with, each with its status, type, title and code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProblemKind {
    /// 400: the request is not acceptable as sent.
    Validation,
    /// 401: missing, malformed, unknown, inactive or expired key.
    Unauthorized,
    /// 402: the account's monthly budget is spent; creates are refused until it resets or is
    /// raised.
    BudgetExhausted,
    /// 403: the key lacks the scope the route needs.
    Forbidden,
    /// 404: no such resource (or not the caller's).
    NotFound,
    /// 405: the route exists but not with this method.
    MethodNotAllowed,
    /// 409: the request conflicts with one still in progress.
    Conflict,
    /// 413: the body is over the size limit.
    PayloadTooLarge,
    /// 416: the requested byte range lies outside the file.
    RangeNotSatisfiable,
    /// 429: the key's rate limit is used up.
    RateLimit,
    /// 500: something failed inside; details are in the logs, not the response.
    Internal,
    /// 503: a dependency is down.
    Unavailable,
}

impl ProblemKind {
    /// The HTTP status.
    pub fn status(self) -> u16 {
        match self {
            Self::Validation => 400,
            Self::Unauthorized => 401,
            Self::BudgetExhausted => 402,
            Self::Forbidden => 403,
            Self::NotFound => 404,
            Self::MethodNotAllowed => 405,
            Self::Conflict => 409,
            Self::PayloadTooLarge => 413,
            Self::RangeNotSatisfiable => 416,
            Self::RateLimit => 429,
            Self::Internal => 500,
            Self::Unavailable => 503,
        }
    }

    /// The `<kind>` in `type` = `{base_url}/errors/<kind>`.
    pub fn slug(self) -> &'static str {
        match self {
            Self::Validation => "validation-error",
            Self::Unauthorized => "unauthorized",
            Self::BudgetExhausted => "budget-exhausted",
            Self::Forbidden => "forbidden",
            Self::NotFound => "not-found",
            Self::MethodNotAllowed => "method-not-allowed",
            Self::Conflict => "conflict",
            Self::PayloadTooLarge => "payload-too-large",
            Self::RangeNotSatisfiable => "range-not-satisfiable",
            Self::RateLimit => "rate-limit",
            Self::Internal => "internal",
            Self::Unavailable => "service-unavailable",
        }
    }

    /// The short title.
    pub fn title(self) -> &'static str {
        match self {
            Self::Validation => "Validation Error",
            Self::Unauthorized => "Unauthorized",
            Self::BudgetExhausted => "Budget Exhausted",
            Self::Forbidden => "Forbidden",
            Self::NotFound => "Not Found",
            Self::MethodNotAllowed => "Method Not Allowed",
            Self::Conflict => "Conflict",
            Self::PayloadTooLarge => "Payload Too Large",
            Self::RangeNotSatisfiable => "Range Not Satisfiable",
            Self::RateLimit => "Rate Limit Exceeded",
            Self::Internal => "Internal Server Error",
            Self::Unavailable => "Service Unavailable",
        }
    }

    /// The machine-readable code.
    pub fn code(self) -> &'static str {
        match self {
            Self::Validation => "VALIDATION_INVALID_ARGUMENT",
            Self::Unauthorized => "AUTH_INVALID_TOKEN",
            Self::BudgetExhausted => "BUDGET_EXHAUSTED",
            Self::Forbidden => "AUTH_INSUFFICIENT_SCOPE",
            Self::NotFound => "RESOURCE_NOT_FOUND",
            Self::MethodNotAllowed => "METHOD_NOT_ALLOWED",
            Self::Conflict => "CONFLICT",
            Self::PayloadTooLarge => "PAYLOAD_TOO_LARGE",
            Self::RangeNotSatisfiable => "RANGE_NOT_SATISFIABLE",
            Self::RateLimit => "RATE_LIMIT_EXCEEDED",
            Self::Internal => "INTERNAL",
            Self::Unavailable => "SERVICE_UNAVAILABLE",
        }
    }

    /// The kind that answers a bare HTTP status (for errors raised below the handlers).
    pub fn from_status(status: u16) -> Self {
        match status {
            400 | 411 | 415 | 422 => Self::Validation,
            401 => Self::Unauthorized,
            402 => Self::BudgetExhausted,
            403 => Self::Forbidden,
            404 => Self::NotFound,
            405 => Self::MethodNotAllowed,
            409 => Self::Conflict,
            413 => Self::PayloadTooLarge,
            416 => Self::RangeNotSatisfiable,
            429 => Self::RateLimit,
            502..=504 => Self::Unavailable,
            _ => Self::Internal,
        }
    }
}

/// The code of one item of `errors[]`.
#[derive(utoipa::ToSchema, Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FieldErrorCode {
    /// A required field is absent.
    #[serde(rename = "VALIDATION_MISSING_FIELD")]
    MissingField,
    /// A field is present but not acceptable.
    #[serde(rename = "VALIDATION_INVALID_ARGUMENT")]
    InvalidArgument,
}

/// One item of `errors[]`: which field, and what is wrong with it.
#[derive(utoipa::ToSchema, Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldError {
    /// A path such as `input.prompt` or `webhook_events_filter[1]`.
    pub field: String,
    /// The item code.
    pub code: FieldErrorCode,
    /// What is wrong, for people.
    pub message: String,
}

impl FieldError {
    /// A required field is absent.
    pub fn missing(field: impl Into<String>) -> Self {
        Self { field: field.into(), code: FieldErrorCode::MissingField, message: "This field is required.".into() }
    }

    /// A field is present but not acceptable.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { field: field.into(), code: FieldErrorCode::InvalidArgument, message: message.into() }
    }
}

/// An error to answer with, before rendering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The kind of error.
    pub kind: ProblemKind,
    /// The explanation.
    pub detail: String,
    /// Field errors (validation errors only).
    pub errors: Vec<FieldError>,
}

/// The rendered body.
#[derive(utoipa::ToSchema, Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProblemBody {
    /// `{base_url}/errors/<kind>`.
    #[serde(rename = "type")]
    pub type_uri: String,
    /// The short title.
    pub title: String,
    /// The HTTP status.
    pub status: u16,
    /// The explanation.
    pub detail: String,
    /// The machine-readable code.
    pub code: String,
    /// Field errors, on validation errors only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errors: Option<Vec<FieldError>>,
    /// The trace this request belongs to, on validation errors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// The request id (also the `X-Request-Id` header), on validation errors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

impl Problem {
    /// A problem of `kind` with an explanation.
    pub fn new(kind: ProblemKind, detail: impl Into<String>) -> Self {
        Self { kind, detail: detail.into(), errors: Vec::new() }
    }

    /// A validation error listing every failing field.
    pub fn validation(detail: impl Into<String>, errors: Vec<FieldError>) -> Self {
        Self { kind: ProblemKind::Validation, detail: detail.into(), errors }
    }

    /// The body, with the request's ids attached to validation errors.
    pub fn body(&self, base_url: &str, request_id: Option<&str>, trace_id: Option<&str>) -> ProblemBody {
        let validation = self.kind == ProblemKind::Validation;
        ProblemBody {
            type_uri: format!("{base_url}/errors/{}", self.kind.slug()),
            title: self.kind.title().to_owned(),
            status: self.kind.status(),
            detail: self.detail.clone(),
            code: self.kind.code().to_owned(),
            errors: validation.then(|| self.errors.clone()),
            trace_id: trace_id.filter(|_| validation).map(str::to_owned),
            request_id: request_id.filter(|_| validation).map(str::to_owned),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interface_error_table_holds() {
        let table = [
            (ProblemKind::Validation, 400, "validation-error", "Validation Error", "VALIDATION_INVALID_ARGUMENT"),
            (ProblemKind::Unauthorized, 401, "unauthorized", "Unauthorized", "AUTH_INVALID_TOKEN"),
            (ProblemKind::NotFound, 404, "not-found", "Not Found", "RESOURCE_NOT_FOUND"),
            (ProblemKind::RateLimit, 429, "rate-limit", "Rate Limit Exceeded", "RATE_LIMIT_EXCEEDED"),
            (ProblemKind::Internal, 500, "internal", "Internal Server Error", "INTERNAL"),
            (ProblemKind::Forbidden, 403, "forbidden", "Forbidden", "AUTH_INSUFFICIENT_SCOPE"),
        ];
        for (kind, status, slug, title, code) in table {
            assert_eq!((kind.status(), kind.slug(), kind.title(), kind.code()), (status, slug, title, code));
        }
    }

    #[test]
    fn a_validation_body_carries_items_and_request_ids() {
        let p = Problem::validation("bad input", vec![FieldError::missing("input.prompt")]);
        let body = serde_json::to_value(p.body("http://h", Some("req-1"), Some("trace-1"))).expect("json");
        assert_eq!(body["type"], "http://h/errors/validation-error");
        assert_eq!(body["errors"][0]["field"], "input.prompt");
        assert_eq!(body["errors"][0]["code"], "VALIDATION_MISSING_FIELD");
        assert_eq!(body["request_id"], "req-1");
        assert_eq!(body["trace_id"], "trace-1");
    }

    #[test]
    fn other_bodies_carry_no_errors_member() {
        let p = Problem::new(ProblemKind::NotFound, "no such prediction");
        let body = serde_json::to_value(p.body("http://h", Some("req-1"), None)).expect("json");
        assert!(body.get("errors").is_none());
        assert!(body.get("request_id").is_none());
        assert_eq!(body["status"], 404);
    }
}
