//! The OpenAPI document of the HTTP API, derived from the handlers'
//! annotations and the request and response types they use.

use utoipa::OpenApi;

use super::{blob, feed, routes, stream};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Omnigraph",
        description = "A typed property-graph database on Lance, over HTTP. Every route but /healthz and /openapi.json takes `Authorization: Bearer <token>`."
    ),
    paths(
        routes::healthz,
        routes::openapi,
        routes::metrics,
        routes::graphs,
        routes::query,
        routes::mutate,
        routes::mutate_if,
        routes::snapshot,
        routes::branches,
        routes::branch_create,
        routes::branch_delete,
        routes::merge,
        routes::commits,
        routes::commit,
        routes::changes,
        routes::schema,
        routes::schema_apply,
        stream::load,
        stream::export,
        stream::baseline,
        feed::changes,
        blob::blob,
    )
)]
struct Api;

/// The document as JSON.
pub fn document() -> String {
    Api::openapi()
        .to_json()
        .expect("the OpenAPI document serialises")
}
