//! The JSON routes: health, graphs, query, mutate (and its compare-and-
//! swap), snapshot, branches, merge, commits, changes, schema, metrics and
//! the OpenAPI document. Each handler reads its request, calls the shared
//! handle acting for the request's actor, and shapes the answer.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Extension, Json, Router};

use super::api::*;
use super::error::{ApiError, ApiResult, ErrorBody};
use super::{Actor, JsonBody, QueryParams, Shared};
use crate::error::OmniError;
use crate::query_name;
use crate::{MAIN, Target};

/// The media type of an Arrow IPC stream.
pub const ARROW_STREAM: &str = "application/vnd.apache.arrow.stream";
/// The compare-and-swap's header: the commit the branch head must be.
pub const IF_GRAPH_COMMIT: &str = "omnigraph-if-graph-commit";
/// With an Arrow result, what the JSON one says beside its rows: the
/// commit whose state the query read, its graph manifest version, its
/// branch, and the query's name.
pub const GRAPH_COMMIT_HEADER: &str = "omnigraph-graph-commit-id";
pub const MANIFEST_VERSION_HEADER: &str = "omnigraph-graph-manifest-version";
pub const BRANCH_HEADER: &str = "omnigraph-graph-branch";
pub const QUERY_NAME_HEADER: &str = "omnigraph-query-name";

pub fn routes() -> Router<Shared> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/openapi.json", get(openapi))
        .route("/metrics", get(metrics))
        .route("/graphs", get(graphs))
        .route("/graphs/{id}/query", post(query))
        .route("/graphs/{id}/mutate", post(mutate))
        .route("/graphs/{id}/mutate/if-graph-commit", post(mutate_if))
        .route("/graphs/{id}/snapshot", get(snapshot))
        .route("/graphs/{id}/branches", get(branches).post(branch_create))
        .route("/graphs/{id}/branches/merge", post(merge))
        .route("/graphs/{id}/branches/{branch}", delete(branch_delete))
        .route("/graphs/{id}/commits", get(commits))
        .route("/graphs/{id}/commits/{cid}", get(commit))
        .route("/graphs/{id}/commits/{cid}/changes", get(changes))
        .route("/graphs/{id}/schema", get(schema))
        .route("/graphs/{id}/schema/apply", post(schema_apply))
}

/// Count a write's outcome in the graph's metrics, and pass it on.
pub(super) fn counted<T>(s: &Shared, graph: &str, r: crate::Result<T>) -> ApiResult<T> {
    match &r {
        Ok(_) => s.metrics.write_committed(graph),
        Err(
            OmniError::Contended { .. }
            | OmniError::ReadSetChanged
            | OmniError::SchemaChanged { .. },
        ) => s.metrics.write_contended(graph),
        Err(_) => {}
    }
    r.map_err(ApiError::from)
}

#[utoipa::path(get, path = "/healthz", responses((status = 200, body = Health)))]
pub async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok",
        version: env!("CARGO_PKG_VERSION"),
    })
}

#[utoipa::path(get, path = "/openapi.json", responses((status = 200, description = "This API's OpenAPI 3.1 document")))]
pub async fn openapi() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        super::openapi::document(),
    )
        .into_response()
}

#[utoipa::path(get, path = "/metrics", responses((status = 200, description = "Prometheus text format")))]
pub async fn metrics(State(s): State<Shared>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        s.metrics.render(s.graphs.len(), &s.denials()),
    )
        .into_response()
}

#[utoipa::path(get, path = "/graphs", responses((status = 200, body = GraphList)))]
pub async fn graphs(State(s): State<Shared>) -> Json<GraphList> {
    Json(GraphList {
        graphs: s
            .graphs
            .keys()
            .map(|id| GraphEntry { id: id.clone() })
            .collect(),
    })
}

fn wants_arrow(h: &HeaderMap) -> bool {
    h.get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|m| m.trim().starts_with(ARROW_STREAM)))
}

#[utoipa::path(post, path = "/graphs/{id}/query", request_body = QueryRequest,
    params(("id" = String, Path, description = "The graph")),
    responses((status = 200, body = QueryResponse,
               description = "Rows as JSON, or with `Accept: application/vnd.apache.arrow.stream` an Arrow IPC stream"),
              (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn query(
    State(s): State<Shared>,
    Path(id): Path<String>,
    Extension(actor): Extension<Actor>,
    headers: HeaderMap,
    JsonBody(req): JsonBody<QueryRequest>,
) -> ApiResult<Response> {
    let g = s.graph(&id, &actor)?;
    let at = target(req.branch.as_deref(), req.snapshot.as_deref(), req.version)?;
    let name = query_name(&req.query, req.name)?;
    let params = req.params.unwrap_or(serde_json::Value::Null);
    let r = g.query(&at, &req.query, &name, &params).await?;
    if wants_arrow(&headers) {
        let body = crate::results::to_ipc(&r)?;
        let mut resp = ([(header::CONTENT_TYPE, ARROW_STREAM)], body).into_response();
        let h = resp.headers_mut();
        for (name, value) in [
            (GRAPH_COMMIT_HEADER, r.graph_commit_id.clone()),
            (MANIFEST_VERSION_HEADER, r.manifest_version.to_string()),
            (BRANCH_HEADER, r.branch.clone()),
            (QUERY_NAME_HEADER, name.clone()),
        ] {
            if let Ok(v) = HeaderValue::from_str(&value) {
                h.insert(name, v);
            }
        }
        return Ok(resp);
    }
    let rows = crate::results::ordered_rows(&r)?;
    Ok(Json(QueryResponse {
        query_name: name,
        target: ReadTarget::of(&at),
        columns: r.columns.clone(),
        row_count: rows.len(),
        rows,
        graph_commit_id: r.graph_commit_id.clone(),
    })
    .into_response())
}

async fn run_mutation(
    s: &Shared,
    id: &str,
    actor: &Actor,
    req: MutateRequest,
    expected_head: Option<&str>,
) -> ApiResult<Json<MutateResponse>> {
    let g = s.graph(id, actor)?;
    let branch = req.branch.unwrap_or_else(|| MAIN.to_string());
    let name = query_name(&req.query, req.name)?;
    let params = req.params.unwrap_or(serde_json::Value::Null);
    let r = g
        .mutate_if(&branch, &req.query, &name, &params, expected_head)
        .await;
    let r = counted(s, id, r)?;
    Ok(Json(MutateResponse {
        branch: r.branch,
        query_name: name,
        affected_nodes: r.nodes.values().sum(),
        affected_edges: r.edges.values().sum(),
        affected_nodes_by_type: r.nodes,
        affected_edges_by_type: r.edges,
        member: r.member,
        actor_id: actor.0.to_string(),
        commit: CommitRef {
            graph_commit_id: r.commit,
            graph_manifest_version: r.manifest_version,
        },
    }))
}

#[utoipa::path(post, path = "/graphs/{id}/mutate", request_body = MutateRequest,
    params(("id" = String, Path, description = "The graph")),
    responses((status = 200, body = MutateResponse), (status = 400, body = ErrorBody),
              (status = 409, body = ErrorBody), (status = 429, body = ErrorBody)))]
pub async fn mutate(
    State(s): State<Shared>,
    Path(id): Path<String>,
    Extension(actor): Extension<Actor>,
    JsonBody(req): JsonBody<MutateRequest>,
) -> ApiResult<Json<MutateResponse>> {
    run_mutation(&s, &id, &actor, req, None).await
}

#[utoipa::path(post, path = "/graphs/{id}/mutate/if-graph-commit", request_body = MutateRequest,
    params(("id" = String, Path, description = "The graph"),
           ("Omnigraph-If-Graph-Commit" = String, Header, description = "The commit the branch head must still be")),
    responses((status = 200, body = MutateResponse), (status = 409, body = ErrorBody,
               description = "The branch head is another commit (`PreconditionFailed`); nothing was written")))]
pub async fn mutate_if(
    State(s): State<Shared>,
    Path(id): Path<String>,
    Extension(actor): Extension<Actor>,
    headers: HeaderMap,
    JsonBody(req): JsonBody<MutateRequest>,
) -> ApiResult<Json<MutateResponse>> {
    let expected = headers
        .get(IF_GRAPH_COMMIT)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| {
            OmniError::BadRequest(
                "give the expected head commit in the Omnigraph-If-Graph-Commit header".into(),
            )
        })?
        .to_string();
    run_mutation(&s, &id, &actor, req, Some(&expected)).await
}

#[utoipa::path(get, path = "/graphs/{id}/snapshot",
    params(("id" = String, Path, description = "The graph"), SnapshotQuery),
    responses((status = 200, body = SnapshotResponse), (status = 404, body = ErrorBody)))]
pub async fn snapshot(
    State(s): State<Shared>,
    Path(id): Path<String>,
    Extension(actor): Extension<Actor>,
    QueryParams(q): QueryParams<SnapshotQuery>,
) -> ApiResult<Json<SnapshotResponse>> {
    let g = s.graph(&id, &actor)?;
    let at = target(q.branch.as_deref(), q.snapshot.as_deref(), q.version)?;
    let snap = g.snapshot(&at).await?;
    Ok(Json(SnapshotResponse {
        graph_branch: snap.branch,
        graph_manifest_version: snap.manifest_version,
        graph_commit_id: snap.head_commit,
        schema_id: snap.schema_id,
        datasets: snap
            .types
            .into_iter()
            .map(|t| DatasetInfo {
                type_name: t.name,
                kind: t.kind,
                version: t.table_version,
                rows: t.rows,
                fragments: t.fragments,
                lance_branch: t.lance_branch,
            })
            .collect(),
    }))
}

#[utoipa::path(get, path = "/graphs/{id}/branches",
    params(("id" = String, Path, description = "The graph")),
    responses((status = 200, body = BranchList)))]
pub async fn branches(
    State(s): State<Shared>,
    Path(id): Path<String>,
    Extension(actor): Extension<Actor>,
) -> ApiResult<Json<BranchList>> {
    let g = s.graph(&id, &actor)?;
    let list = g.branch_list().await?;
    Ok(Json(BranchList {
        branches: list.into_iter().map(BranchEntry::from).collect(),
    }))
}

#[utoipa::path(post, path = "/graphs/{id}/branches", request_body = CreateBranch,
    params(("id" = String, Path, description = "The graph")),
    responses((status = 200, body = BranchEntry), (status = 404, body = ErrorBody),
              (status = 409, body = ErrorBody, description = "The branch exists")))]
pub async fn branch_create(
    State(s): State<Shared>,
    Path(id): Path<String>,
    Extension(actor): Extension<Actor>,
    JsonBody(req): JsonBody<CreateBranch>,
) -> ApiResult<Json<BranchEntry>> {
    let g = s.graph(&id, &actor)?;
    let from = req.from.unwrap_or_else(|| MAIN.to_string());
    let r = g.branch_create(&req.name, &from).await;
    Ok(Json(counted(&s, &id, r)?.into()))
}

#[utoipa::path(delete, path = "/graphs/{id}/branches/{branch}",
    params(("id" = String, Path, description = "The graph"), ("branch" = String, Path)),
    responses((status = 200, body = Deleted), (status = 404, body = ErrorBody)))]
pub async fn branch_delete(
    State(s): State<Shared>,
    Path((id, branch)): Path<(String, String)>,
    Extension(actor): Extension<Actor>,
) -> ApiResult<Json<Deleted>> {
    let g = s.graph(&id, &actor)?;
    let r = g.branch_delete(&branch).await;
    counted(&s, &id, r)?;
    Ok(Json(Deleted { deleted: branch }))
}

#[utoipa::path(post, path = "/graphs/{id}/branches/merge", request_body = MergeRequest,
    params(("id" = String, Path, description = "The graph")),
    responses((status = 200, body = MergeResponse),
              (status = 409, body = ErrorBody, description = "Conflicts (`merge_conflicts` lists them); nothing was written")))]
pub async fn merge(
    State(s): State<Shared>,
    Path(id): Path<String>,
    Extension(actor): Extension<Actor>,
    JsonBody(req): JsonBody<MergeRequest>,
) -> ApiResult<Json<MergeResponse>> {
    let g = s.graph(&id, &actor)?;
    let target = req.target.unwrap_or_else(|| MAIN.to_string());
    let r = g.merge(&req.source, &target).await;
    let outcome = counted(&s, &id, r)?;
    Ok(Json(MergeResponse {
        source: req.source,
        target,
        outcome: outcome.name().to_string(),
        graph_commit_id: outcome.commit().to_string(),
    }))
}

#[utoipa::path(get, path = "/graphs/{id}/commits",
    params(("id" = String, Path, description = "The graph"), CommitsQuery),
    responses((status = 200, body = CommitList), (status = 404, body = ErrorBody)))]
pub async fn commits(
    State(s): State<Shared>,
    Path(id): Path<String>,
    Extension(actor): Extension<Actor>,
    QueryParams(q): QueryParams<CommitsQuery>,
) -> ApiResult<Json<CommitList>> {
    let g = s.graph(&id, &actor)?;
    let branch = q.branch.unwrap_or_else(|| MAIN.to_string());
    let list = g.commits(&branch, q.limit).await?;
    Ok(Json(CommitList {
        commits: list.into_iter().map(CommitEntry::from).collect(),
    }))
}

#[utoipa::path(get, path = "/graphs/{id}/commits/{cid}",
    params(("id" = String, Path, description = "The graph"), ("cid" = String, Path, description = "The commit")),
    responses((status = 200, body = CommitEntry), (status = 404, body = ErrorBody)))]
pub async fn commit(
    State(s): State<Shared>,
    Path((id, cid)): Path<(String, String)>,
    Extension(actor): Extension<Actor>,
) -> ApiResult<Json<CommitEntry>> {
    let g = s.graph(&id, &actor)?;
    Ok(Json(g.commit(&cid).await?.into()))
}

#[utoipa::path(get, path = "/graphs/{id}/commits/{cid}/changes",
    params(("id" = String, Path, description = "The graph"), ("cid" = String, Path, description = "The commit"),
           ChangesQuery),
    responses((status = 200, body = ChangeList), (status = 404, body = ErrorBody)))]
pub async fn changes(
    State(s): State<Shared>,
    Path((id, cid)): Path<(String, String)>,
    Extension(actor): Extension<Actor>,
    QueryParams(q): QueryParams<ChangesQuery>,
) -> ApiResult<Json<ChangeList>> {
    let g = s.graph(&id, &actor)?;
    let list = g.commit_changes(&cid, q.type_name.as_deref()).await?;
    Ok(Json(ChangeList {
        graph_commit_id: cid,
        changes: list
            .into_iter()
            .map(|c| Change {
                change: c.change.to_string(),
                type_name: c.type_name,
                id: c.id,
            })
            .collect(),
    }))
}

#[utoipa::path(get, path = "/graphs/{id}/schema",
    params(("id" = String, Path, description = "The graph")),
    responses((status = 200, body = SchemaResponse)))]
pub async fn schema(
    State(s): State<Shared>,
    Path(id): Path<String>,
    Extension(actor): Extension<Actor>,
) -> ApiResult<Json<SchemaResponse>> {
    let g = s.graph(&id, &actor)?;
    let snap = g.resolve(&Target::main()).await?;
    Ok(Json(SchemaResponse {
        schema_source: snap.schema.source.clone(),
        schema_id: snap.schema.id.clone(),
    }))
}

#[utoipa::path(post, path = "/graphs/{id}/schema/apply", request_body = SchemaApplyRequest,
    params(("id" = String, Path, description = "The graph")),
    responses((status = 200, body = SchemaApplyResponse), (status = 400, body = ErrorBody)))]
pub async fn schema_apply(
    State(s): State<Shared>,
    Path(id): Path<String>,
    Extension(actor): Extension<Actor>,
    JsonBody(req): JsonBody<SchemaApplyRequest>,
) -> ApiResult<Json<SchemaApplyResponse>> {
    let g = s.graph(&id, &actor)?;
    let r = g.apply_schema(&req.schema_source).await;
    let r = counted(&s, &id, r)?;
    Ok(Json(SchemaApplyResponse {
        changed: r.changed,
        graph_commit_id: r.commit,
        graph_manifest_version: r.manifest_version,
        schema_id: r.schema,
        steps: r
            .steps
            .iter()
            .map(serde_json::to_value)
            .collect::<Result<_, _>>()
            .map_err(OmniError::from)?,
    }))
}
