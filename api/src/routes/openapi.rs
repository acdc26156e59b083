//! The OpenAPI 3.1 description served at `GET /openapi.json`. Each route declares its own
//! operation beside its handler (`#[utoipa::path]`, with the problems it answers from
//! [`problems`]), and the router collects them ([`crate::routes::document`]): nothing here
//! lists the routes. This module holds what the whole document shares: its title and tags,
//! the bearer scheme, the problem responses, and two rules applied to every operation
//! ([`complete`]):
//!
//! - every authenticated operation can also answer 401, 403, 429, 500 and 503 (the auth layer's,
//!   the rate limit's, the shed's and a dependency's answers, not any handler's);
//! - the Replicate-compatible surface is a copy of every `/v1` operation under `/replicate/v1`
//!   (operation ids suffixed `Replicate`), as the router mounts it ([`crate::replicate`]);
//!   `error` is documented as either shape.
//!
//! All problems carry the `ProblemBody` schema as `application/problem+json`.

use crate::problem::{FieldError, FieldErrorCode, ProblemBody};
use axum::Json;
use utoipa::{
    Modify, OpenApi,
    openapi::{
        ContentBuilder, Ref, ResponseBuilder, Server,
        security::{HttpAuthScheme, HttpBuilder, SecurityScheme},
    },
};

/// What every authenticated operation may answer.
const AUTHENTICATED: &[u16] = &[401, 403, 429, 500, 503];

fn describe(status: u16) -> &'static str {
    match status {
        400 => "Validation error: `errors[]` names each failing field",
        401 => "Missing, malformed, unknown, inactive or expired key (`AUTH_INVALID_TOKEN`)",
        402 => {
            "The account's monthly budget is spent (`BUDGET_EXHAUSTED`): the `detail` names the budget and when it resets"
        }
        403 => "The key lacks the scope this operation needs (`AUTH_INSUFFICIENT_SCOPE`)",
        404 => "No such resource in the caller's account (`RESOURCE_NOT_FOUND`)",
        409 => "The request conflicts with the resource's state (`CONFLICT`)",
        413 => "The body is over its limit: 1 MiB, or `API_MAX_FILE_BYTES` for an upload's file",
        416 => "The range asked for lies outside the file (`RANGE_NOT_SATISFIABLE`)",
        429 => "Rate limit exceeded; `Retry-After: 60` and `X-RateLimit-*` headers",
        503 => "MongoDB or NATS is out of reach for now (`SERVICE_UNAVAILABLE`); retry after `Retry-After` seconds",
        _ => "Internal error (`INTERNAL`)",
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Prediction service API",
        description = "Asynchronous generation jobs (predictions) on hosted models, with signed webhooks."
    ),
    components(schemas(
        ProblemBody,
        FieldError,
        FieldErrorCode,
        // The lists' `status` filter names it (a job's own status is a StatusView).
        common::domain::PredictionStatus,
        // The model list's `sort_by` and `sort_direction` name them.
        crate::validate::search_query::ModelSort,
        crate::validate::search_query::SortDirection
    )),
    modifiers(&Security),
    tags(
        (name = "predictions", description = "Create, read, list and cancel predictions"),
        (name = "models", description = "Registered models and their versions"),
        (name = "trainings", description = "Fine-tunes: train a version into a model of your account, then run the result"),
        (name = "deployments", description = "Deployments: a model version on a hardware pool, changed release by release"),
        (name = "files", description = "Uploaded files and file outputs: upload, list, read, delete, download"),
        (name = "account", description = "The caller's account (scope `read`), its API keys and webhook signing secret (scope `admin`)"),
        (name = "operations", description = "Readiness and liveness"),
    )
)]
struct ApiDoc;

struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("psk_ API key")
                    .description(Some("An API key of the account: `Authorization: Bearer psk_...`"))
                    .build(),
            ),
        );
    }
}

/// A problem+json response with `status`'s description.
fn problem_response(status: u16) -> utoipa::openapi::Response {
    ResponseBuilder::new()
        .description(describe(status))
        .content(
            crate::problem::PROBLEM_CONTENT_TYPE,
            ContentBuilder::new().schema(Some(Ref::from_schema_name("ProblemBody"))).build(),
        )
        .build()
}

/// The problems a handler names in its `responses(...)`, inlined:
/// `(status = 404, response = inline(problems::NotFound))`.
pub mod problems {
    macro_rules! problems {
        ($($name:ident = $status:literal),* $(,)?) => {$(
            #[doc = concat!("The problem+json answer of status ", stringify!($status), ".")]
            pub struct $name;

            impl<'r> utoipa::ToResponse<'r> for $name {
                fn response() -> (&'r str, utoipa::openapi::RefOr<utoipa::openapi::Response>) {
                    (stringify!($name), super::problem_response($status).into())
                }
            }
        )*};
    }

    problems!(
        BadRequest = 400,
        BudgetExhausted = 402,
        NotFound = 404,
        Conflict = 409,
        TooLarge = 413,
        RangeNotSatisfiable = 416
    );
}

/// Every operation of `item`.
fn operations(item: &mut utoipa::openapi::PathItem) -> impl Iterator<Item = &mut utoipa::openapi::path::Operation> {
    [&mut item.get, &mut item.post, &mut item.patch, &mut item.delete, &mut item.put].into_iter().flatten()
}

/// Adds [`AUTHENTICATED`] problems to every operation that takes a key.
fn authenticated_problems(openapi: &mut utoipa::openapi::OpenApi) {
    for item in openapi.paths.paths.values_mut() {
        for operation in operations(item) {
            if operation.security.as_ref().is_none_or(Vec::is_empty) {
                continue;
            }
            for status in AUTHENTICATED {
                operation.responses.responses.insert(status.to_string(), problem_response(*status).into());
            }
        }
    }
}

/// Copies every `/v1` operation under `/replicate/v1`.
fn replicate_surface(openapi: &mut utoipa::openapi::OpenApi) {
    let canonical: Vec<_> = openapi
        .paths
        .paths
        .iter()
        .filter(|(path, _)| path.starts_with("/v1/"))
        .map(|(p, i)| (p.clone(), i.clone()))
        .collect();
    for (path, mut item) in canonical {
        for operation in operations(&mut item) {
            operation.operation_id = operation.operation_id.take().map(|id| format!("{id}Replicate"));
            operation.tags = Some(vec!["replicate".into()]);
        }
        if path == "/v1/search" {
            replicate_search_answer(&mut item);
        }
        openapi.paths.paths.insert(format!("{}{}", crate::replicate::ROOT, &path["/v1".len()..]), item);
    }
    openapi.tags.get_or_insert_with(Vec::new).push(
        utoipa::openapi::tag::TagBuilder::new()
            .name("replicate")
            .description(Some(
                "The same operations in Replicate's shapes (`error` a string, links inside `/replicate/v1`)",
            ))
            .build(),
    );
}

/// `/replicate/v1/search` answers Replicate's shape (`ReplicateSearchResults`, which the search
/// route adds to the schemas).
fn replicate_search_answer(item: &mut utoipa::openapi::PathItem) {
    use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
    if let Some(get) = item.get.as_mut() {
        let content = ContentBuilder::new().schema(Some(Ref::from_schema_name("ReplicateSearchResults"))).build();
        let answer = ResponseBuilder::new()
            .description("The models that match, best first, with the collections that match: Replicate's shape")
            .content("application/json", content)
            .build();
        get.responses.responses.insert("200".into(), answer.into());
    }
}

/// What the document starts from before the routes add their operations: title, tags,
/// the bearer scheme, the problem schema.
pub fn base() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

/// The routes' document with the rules every operation shares (see the module doc).
pub fn complete(mut openapi: utoipa::openapi::OpenApi) -> utoipa::openapi::OpenApi {
    authenticated_problems(&mut openapi);
    replicate_surface(&mut openapi);
    openapi
}

/// `GET /openapi.json`: `doc` with this deployment's base URL as its server.
pub fn serve(doc: &utoipa::openapi::OpenApi, base_url: &str) -> Json<utoipa::openapi::OpenApi> {
    let mut doc = doc.clone();
    doc.servers = Some(vec![Server::new(base_url)]);
    Json(doc)
}
