//! The OpenAPI 3.1 description served at `GET /openapi.json`, generated from the handlers'
//! `#[utoipa::path]` annotations and the response types themselves.
//!
//! Error responses are added here rather than on each handler, from `ERRORS`: which problem
//! statuses each operation can answer. Every authenticated operation can also answer 401, 403,
//! 429, 500 and 503. All of them carry the `ProblemBody` schema as `application/problem+json`.
//!
//! The Replicate-compatible surface is described by a copy of every `/v1` operation under
//! `/replicate/v1` (operation ids suffixed `Replicate`), as the router mounts it
//! ([`crate::replicate`]); `error` is documented as either shape.

use std::sync::OnceLock;

use axum::Json;
use common::problem::{FieldError, FieldErrorCode, ProblemBody};
use utoipa::{
    Modify, OpenApi,
    openapi::{
        ContentBuilder, Ref, ResponseBuilder, Server,
        security::{HttpAuthScheme, HttpBuilder, SecurityScheme},
    },
};

use crate::routes;

/// The problem statuses of each operation beyond those of every authenticated one.
const ERRORS: &[(&str, &str, &[u16])] = &[
    ("post", "/v1/models/{owner}/{model}/predictions", &[400, 404, 413]),
    ("post", "/v1/predictions", &[400, 404, 413]),
    ("get", "/v1/models", &[400]),
    ("get", "/v1/models/{owner}/{name}", &[404]),
    ("get", "/v1/models/{owner}/{name}/versions", &[404]),
    ("get", "/v1/models/{owner}/{name}/versions/{id}", &[404]),
    ("get", "/v1/predictions", &[400]),
    ("get", "/v1/predictions/{id}", &[404]),
    ("post", "/v1/predictions/{id}/cancel", &[400, 404]),
    ("get", "/v1/predictions/{id}/stream", &[404]),
    ("get", "/v1/files", &[400]),
    ("post", "/v1/files", &[400, 413]),
    ("get", "/v1/files/{id}", &[404]),
    ("delete", "/v1/files/{id}", &[404]),
    ("get", "/v1/files/{id}/download", &[400, 404, 416]),
    ("post", "/v1/account/api-keys", &[400, 413]),
    ("get", "/v1/account/api-keys/{id}", &[404]),
    ("get", "/v1/account/api-keys", &[400]),
    ("patch", "/v1/account/api-keys/{id}", &[400, 404, 413]),
    ("get", "/v1/predictions/{id}/webhook-deliveries", &[404]),
    ("post", "/v1/predictions/{id}/webhook-deliveries/{webhook_id}/resend", &[404, 409]),
    ("get", "/v1/account/webhooks/secret", &[]),
    ("get", "/v1/account", &[404]),
    ("get", "/v1/hardware", &[]),
    ("post", "/v1/deployments", &[400, 409, 413]),
    ("get", "/v1/deployments", &[400]),
    ("get", "/v1/deployments/{owner}/{name}", &[404]),
    ("patch", "/v1/deployments/{owner}/{name}", &[400, 404, 409, 413]),
    ("delete", "/v1/deployments/{owner}/{name}", &[404]),
    ("post", "/v1/deployments/{owner}/{name}/predictions", &[400, 404, 413]),
    ("post", "/v1/account/webhooks/secret/rotate", &[400, 413]),
];

/// What every authenticated operation may answer.
const AUTHENTICATED: &[u16] = &[401, 403, 429, 500, 503];

fn describe(status: u16) -> &'static str {
    match status {
        400 => "Validation error: `errors[]` names each failing field",
        401 => "Missing, malformed, unknown, inactive or expired key (`AUTH_INVALID_TOKEN`)",
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
    paths(
        routes::predictions::create,
        routes::predictions::create_by_version,
        routes::predictions::list,
        routes::predictions::get,
        routes::predictions::cancel,
        routes::stream::stream,
        routes::models::list,
        routes::models::get,
        routes::models::versions,
        routes::models::version,
        routes::files::create,
        routes::files::list,
        routes::files::get,
        routes::files::delete,
        routes::files::download,
        routes::api_keys::create,
        routes::api_keys::list,
        routes::api_keys::get,
        routes::api_keys::update,
        routes::webhook_deliveries::list,
        routes::webhook_deliveries::resend,
        routes::webhook_secret::get,
        routes::webhook_secret::rotate,
        routes::account::get,
        routes::hardware::list,
        routes::deployments::create,
        routes::deployments::list,
        routes::deployments::get,
        routes::deployments::update,
        routes::deployments::delete,
        routes::deployments::predict,
        routes::health::ready,
        routes::health::health,
    ),
    components(schemas(ProblemBody, FieldError, FieldErrorCode)),
    modifiers(&Security, &ProblemResponses, &ReplicateSurface),
    tags(
        (name = "predictions", description = "Create, read, list and cancel predictions"),
        (name = "models", description = "Registered models and their versions"),
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

struct ProblemResponses;

/// The operation of `item` for `method` (lowercase).
fn operation_mut<'a>(
    item: &'a mut utoipa::openapi::PathItem,
    method: &str,
) -> Option<&'a mut utoipa::openapi::path::Operation> {
    match method {
        "get" => item.get.as_mut(),
        "patch" => item.patch.as_mut(),
        "delete" => item.delete.as_mut(),
        _ => item.post.as_mut(),
    }
}

impl Modify for ProblemResponses {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        for (method, path, extra) in ERRORS {
            let Some(item) = openapi.paths.paths.get_mut(*path) else { continue };
            let Some(operation) = operation_mut(item, method) else { continue };
            for status in extra.iter().chain(AUTHENTICATED) {
                let response = ResponseBuilder::new()
                    .description(describe(*status))
                    .content(
                        common::problem::PROBLEM_CONTENT_TYPE,
                        ContentBuilder::new().schema(Some(Ref::from_schema_name("ProblemBody"))).build(),
                    )
                    .build();
                operation.responses.responses.insert(status.to_string(), response.into());
            }
        }
    }
}

struct ReplicateSurface;

impl Modify for ReplicateSurface {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let canonical: Vec<_> = openapi
            .paths
            .paths
            .iter()
            .filter(|(path, _)| path.starts_with("/v1/"))
            .map(|(p, i)| (p.clone(), i.clone()))
            .collect();
        for (path, mut item) in canonical {
            for operation in [&mut item.get, &mut item.post, &mut item.patch, &mut item.delete].into_iter().flatten() {
                operation.operation_id = operation.operation_id.take().map(|id| format!("{id}Replicate"));
                operation.tags = Some(vec!["replicate".into()]);
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
}

/// The document, built once.
pub fn document() -> &'static utoipa::openapi::OpenApi {
    static DOC: OnceLock<utoipa::openapi::OpenApi> = OnceLock::new();
    DOC.get_or_init(ApiDoc::openapi)
}

/// `GET /openapi.json`: the document with this deployment's base URL as its server.
pub fn serve(base_url: &str) -> Json<utoipa::openapi::OpenApi> {
    let mut doc = document().clone();
    doc.servers = Some(vec![Server::new(base_url)]);
    Json(doc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_operation_exists_and_gets_its_problems_on_both_surfaces() {
        let doc = document();
        assert_eq!(serde_json::to_value(doc).expect("json")["openapi"], "3.1.0");
        for (method, path, extra) in ERRORS {
            let replicate = format!("/replicate{path}");
            for path in [*path, replicate.as_str()] {
                let mut item = doc.paths.paths.get(path).unwrap_or_else(|| panic!("{path} is documented")).clone();
                let op = operation_mut(&mut item, method).unwrap_or_else(|| panic!("{method} {path} is documented"));
                for status in extra.iter().chain(AUTHENTICATED) {
                    assert!(op.responses.responses.contains_key(&status.to_string()), "{method} {path} {status}");
                }
            }
        }
    }

    #[test]
    fn operation_ids_are_unique() {
        let doc = serde_json::to_value(document()).expect("json");
        let mut ids: Vec<String> = doc["paths"]
            .as_object()
            .expect("paths")
            .values()
            .flat_map(|item| item.as_object().expect("item").values())
            .filter_map(|op| op["operationId"].as_str().map(str::to_owned))
            .collect();
        let count = ids.len();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), count);
        assert!(ids.contains(&"getModelReplicate".to_owned()));
    }
}
