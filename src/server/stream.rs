//! The streamed routes: an NDJSON load read from the request body as the
//! loader parses it (never buffered whole), and an NDJSON export written
//! to the response as the export produces it. Both are bounded by a few
//! chunks in flight.

use std::io::Read;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Json, Router};
use futures::StreamExt;
use tokio::sync::mpsc;

use super::api::*;
use super::error::{ApiResult, ErrorBody};
use super::{Actor, JsonBody, QueryParams, Shared};
use crate::error::OmniError;
use crate::results::LineChunks;
use crate::{LoadMode, MAIN};

/// Body chunks in flight between the connection and the loader, and
/// export chunks between the export and the connection.
const CHUNKS_IN_FLIGHT: usize = 8;

pub fn routes() -> Router<Shared> {
    Router::new()
        .route("/graphs/{id}/load/ndjson", post(load))
        .route("/graphs/{id}/export", post(export))
        .route("/graphs/{id}/changes/baseline", post(baseline))
}

/// The request body as a blocking reader, for the loader's parser (which
/// runs on a blocking thread).
struct BodyReader {
    rx: mpsc::Receiver<std::io::Result<Bytes>>,
    current: Bytes,
}

impl Read for BodyReader {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                Some(chunk) => self.current = chunk?,
                None => return Ok(0),
            }
        }
        let n = out.len().min(self.current.len());
        out[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}

#[utoipa::path(post, path = "/graphs/{id}/load/ndjson",
    params(("id" = String, Path, description = "The graph"), LoadQuery),
    request_body(content = String, content_type = "application/x-ndjson",
                 description = "JSONL in the load format, streamed"),
    responses((status = 200, body = LoadResponse),
              (status = 400, body = ErrorBody, description = "Bad input, naming its line; nothing was written"),
              (status = 409, body = ErrorBody)))]
pub async fn load(
    State(s): State<Shared>,
    Path(id): Path<String>,
    Extension(actor): Extension<Actor>,
    QueryParams(q): QueryParams<LoadQuery>,
    body: Body,
) -> ApiResult<Json<LoadResponse>> {
    let g = s.graph(&id, &actor)?;
    let mode: LoadMode = q
        .mode
        .as_deref()
        .ok_or_else(|| OmniError::BadRequest("give ?mode=overwrite|append|merge".into()))?
        .parse()?;
    let branch = q.branch.unwrap_or_else(|| MAIN.to_string());
    let (tx, rx) = mpsc::channel(CHUNKS_IN_FLIGHT);
    let pump = tokio::spawn(async move {
        let mut chunks = body.into_data_stream();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(std::io::Error::other);
            let failed = chunk.is_err();
            if tx.send(chunk).await.is_err() || failed {
                break;
            }
        }
    });
    let reader = BodyReader {
        rx,
        current: Bytes::new(),
    };
    let r = g
        .load_from(&branch, q.from.as_deref(), reader, mode, |_| {})
        .await;
    pump.abort();
    let r = super::routes::counted(&s, &id, r)?;
    Ok(Json(LoadResponse {
        branch: r.branch,
        branch_created: r.branch_created,
        base_branch: q.from,
        mode: r.mode.as_str().to_string(),
        total_entities: r.nodes.values().chain(r.edges.values()).sum(),
        nodes: LoadedType::list(r.nodes),
        edges: LoadedType::list(r.edges),
        actor_id: actor.0.to_string(),
        commit: CommitRef {
            graph_commit_id: r.commit,
            graph_manifest_version: r.manifest_version,
        },
    }))
}

#[utoipa::path(post, path = "/graphs/{id}/export", request_body = ExportRequest,
    params(("id" = String, Path, description = "The graph")),
    responses((status = 200, content_type = "application/x-ndjson",
               description = "Nodes, then edges, one JSON object per line; a failure midway ends the connection without the body's end"),
              (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn export(
    State(s): State<Shared>,
    Path(id): Path<String>,
    Extension(actor): Extension<Actor>,
    JsonBody(req): JsonBody<ExportRequest>,
) -> ApiResult<Response> {
    let g = s.graph(&id, &actor)?;
    let at = target(req.branch.as_deref(), req.snapshot.as_deref(), None)?;
    // Resolved and checked now, so that a wrong branch, snapshot or type
    // is an error status rather than a cut stream; the export reads this
    // snapshot.
    let snap = g.resolve(&at).await?;
    if let Some(names) = &req.type_names {
        crate::results::check_types(snap.catalog(), names)?;
    }
    Ok(ndjson_export(g, snap, req.type_names).into_response())
}

#[utoipa::path(post, path = "/graphs/{id}/changes/baseline",
    params(("id" = String, Path, description = "The graph"), FeedQuery),
    responses((status = 200, content_type = "application/x-ndjson",
               description = "The branch at one head in the load format (the types the filter keeps); headers Omnigraph-Snapshot-Commit and Omnigraph-Cursor name that head and the cursor that resumes the feed right after it. A failure midway ends the connection without the body's end"),
              (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn baseline(
    State(s): State<Shared>,
    Path(id): Path<String>,
    Extension(actor): Extension<Actor>,
    QueryParams(q): QueryParams<FeedQuery>,
) -> ApiResult<Response> {
    let g = s.graph(&id, &actor)?;
    let (snap, only, b) = g.baseline_head(&q.request()?).await?;
    let header = |v: &str| {
        header::HeaderValue::from_str(v)
            .map_err(|_| OmniError::Storage(format!("{v:?} is no header value")))
    };
    let head = [
        (
            header::HeaderName::from_static("omnigraph-snapshot-commit"),
            header(&b.snapshot_commit_id)?,
        ),
        (
            header::HeaderName::from_static("omnigraph-cursor"),
            header(&b.cursor)?,
        ),
    ];
    Ok((head, ndjson_export(g, snap, only)).into_response())
}

/// `snap` (the types `only` names, or all) as an NDJSON response body,
/// written as the export produces it.
fn ndjson_export(
    g: crate::Omnigraph,
    snap: crate::Snapshot,
    only: Option<Vec<String>>,
) -> Response {
    let (tx, rx) = mpsc::channel::<std::io::Result<Bytes>>(CHUNKS_IN_FLIGHT);
    let rt = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let chunks = tx.clone();
        let mut w = LineChunks::new(move |chunk: Vec<u8>| {
            futures::executor::block_on(chunks.send(Ok(Bytes::from(chunk))))
                .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the client left"))
        });
        let done = rt.block_on(async {
            // The export flushes its last lines itself.
            g.export_snapshot(&snap, only.as_deref(), &mut w)
                .await
                .map(drop)
        });
        match done {
            Err(OmniError::Io(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            Err(e) => {
                tracing::error!(error = %e, "the export failed midway; the response is cut");
                let _ = futures::executor::block_on(tx.send(Err(std::io::Error::other(e))));
            }
            Ok(()) => {}
        }
    });
    let stream = tokio_stream_of(rx);
    (
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(stream),
    )
        .into_response()
}

/// The receiver as a stream of body chunks.
fn tokio_stream_of(
    rx: mpsc::Receiver<std::io::Result<Bytes>>,
) -> impl futures::Stream<Item = std::io::Result<Bytes>> {
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|c| (c, rx)) })
}
