//! The change feed over HTTP: a poll that may wait (long-poll) for the
//! next commit when the consumer has caught up. The server keeps no
//! consumer state: the cursor is the caller's.

use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Extension, Json, Router};

use super::api::*;
use super::error::{ApiResult, ErrorBody};
use super::{Actor, QueryParams, Shared};

/// The longest a poll waits for a commit.
const MAX_WAIT_MS: u64 = 60_000;

/// How often a waiting poll looks for a commit.
const WAIT_POLL: Duration = Duration::from_millis(10);

pub fn routes() -> Router<Shared> {
    Router::new().route("/graphs/{id}/changes", get(changes))
}

#[utoipa::path(get, path = "/graphs/{id}/changes",
    params(("id" = String, Path, description = "The graph"), FeedQuery),
    responses((status = 200, body = FeedResponse),
              (status = 400, body = ErrorBody, description = "A bad filter, or CursorRejected"),
              (status = 404, body = ErrorBody),
              (status = 410, body = ErrorBody, description = "ChangeFeedGap: take a baseline")))]
pub async fn changes(
    State(s): State<Shared>,
    Path(id): Path<String>,
    Extension(actor): Extension<Actor>,
    QueryParams(q): QueryParams<FeedQuery>,
) -> ApiResult<Json<FeedResponse>> {
    let g = s.graph(&id, &actor)?;
    let mut req = q.request()?;
    let until = Instant::now() + Duration::from_millis(q.wait_ms.unwrap_or(0).min(MAX_WAIT_MS));
    loop {
        let page = g.changes(&req).await?;
        if !page.blocks.is_empty() || !page.caught_up || Instant::now() >= until {
            return Ok(Json(FeedResponse {
                blocks: page.blocks,
                cursor: page.cursor,
                caught_up: page.caught_up,
            }));
        }
        // Nothing yet: wait from where this poll stands (a `now` start
        // keeps the head it found).
        req.cursor = Some(page.cursor);
        tokio::time::sleep(WAIT_POLL).await;
    }
}
