//! A Blob cell's bytes over HTTP: its ETag, `Range` (one range, 206),
//! `If-None-Match` (304) and HEAD, read in bounded steps bound to the
//! table version the request's target names.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Router};
use futures::StreamExt;

use super::api::{BlobQuery, target};
use super::error::{ApiResult, ErrorBody};
use super::{Actor, QueryParams, Shared};
use crate::blob_range::{clamp, steps};
use crate::error::{OmniError, Result};
use crate::{Blob, BlobCell};

pub fn routes() -> Router<Shared> {
    Router::new().route("/graphs/{id}/blob", get(blob).head(blob))
}

/// What a `Range` header asks of a value of `len` bytes: `None` for the
/// whole value (no header, or a form this server does not narrow: several
/// ranges, another unit), else the one range, or not satisfiable.
pub fn requested_range(h: Option<&str>, len: u64) -> Option<Result<std::ops::Range<u64>>> {
    let spec = h?.trim().strip_prefix("bytes=")?;
    if spec.contains(',') {
        return None;
    }
    let (a, b) = spec.split_once('-')?;
    let (a, b) = (a.trim(), b.trim());
    let unsatisfiable = |start: u64, end: u64| OmniError::BlobRangeNotSatisfiable {
        start,
        end,
        length: len,
    };
    Some(match (a.is_empty(), b.is_empty()) {
        // The last `n` bytes.
        (true, false) => {
            let n: u64 = b.parse().ok()?;
            if n == 0 || len == 0 {
                Err(unsatisfiable(len, len))
            } else {
                Ok(len - n.min(len)..len)
            }
        }
        (false, _) => {
            let start: u64 = a.parse().ok()?;
            let end_incl: Option<u64> = if b.is_empty() {
                None
            } else {
                Some(b.parse().ok()?)
            };
            match end_incl {
                Some(e) if e < start => return None,
                _ if start >= len => Err(unsatisfiable(start, end_incl.map_or(len, |e| e + 1))),
                Some(e) => clamp(start, Some(e - start + 1), len),
                None => clamp(start, None, len),
            }
        }
        (true, true) => return None,
    })
}

/// Does `If-None-Match` name this ETag (or `*`)?
fn matches_etag(h: Option<&str>, etag: &str) -> bool {
    h.is_some_and(|v| {
        v.split(',')
            .map(|t| t.trim().trim_start_matches("W/"))
            .any(|t| t == "*" || t == etag)
    })
}

#[utoipa::path(get, path = "/graphs/{id}/blob",
    params(("id" = String, Path, description = "The graph"), BlobQuery),
    responses((status = 200, content_type = "application/octet-stream", description = "The bytes, with ETag"),
              (status = 206, description = "The asked range, with Content-Range"),
              (status = 304, description = "If-None-Match named the ETag"),
              (status = 404, body = ErrorBody), (status = 416, body = ErrorBody)))]
pub async fn blob(
    State(s): State<Shared>,
    Path(id): Path<String>,
    Extension(actor): Extension<Actor>,
    method: Method,
    headers: HeaderMap,
    QueryParams(q): QueryParams<BlobQuery>,
) -> ApiResult<Response> {
    let g = s.graph(&id, &actor)?;
    let at = target(q.branch.as_deref(), q.snapshot.as_deref(), None)?;
    let cell = BlobCell::new(&q.type_name, &q.id, &q.property);
    let (length, etag, reader) = match g.read_blob_at(&at, &cell).await? {
        Blob::Managed {
            length,
            etag,
            reader,
        } => (length, etag, reader),
        // The server serves the graph's own bytes: a client fetches an
        // external object from its store, with the store's own rights.
        Blob::External { uri, .. } => {
            return Err(OmniError::BadRequest(format!(
                "{cell} is an external reference to {uri}: the graph holds no bytes for it"
            ))
            .into());
        }
    };
    let etag_value = HeaderValue::from_str(&etag).map_err(|_| OmniError::BlobIntegrity {
        reason: format!("ETag {etag:?}"),
    })?;
    let header_str = |name| {
        headers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
    };
    let mut out = HeaderMap::new();
    out.insert(header::ETAG, etag_value);
    out.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    if matches_etag(header_str(header::IF_NONE_MATCH), &etag) {
        return Ok((StatusCode::NOT_MODIFIED, out).into_response());
    }
    let (status, range) = match requested_range(header_str(header::RANGE), length) {
        None => (StatusCode::OK, 0..length),
        Some(Ok(r)) => (StatusCode::PARTIAL_CONTENT, r),
        Some(Err(e)) => {
            let mut resp = super::error::ApiError::from(e).into_response();
            if let Ok(v) = HeaderValue::from_str(&format!("bytes */{length}")) {
                resp.headers_mut().insert(header::CONTENT_RANGE, v);
            }
            return Ok(resp);
        }
    };
    if status == StatusCode::PARTIAL_CONTENT {
        let v = format!(
            "bytes {}-{}/{length}",
            range.start,
            range.end.saturating_sub(1)
        );
        if let Ok(v) = HeaderValue::from_str(&v) {
            out.insert(header::CONTENT_RANGE, v);
        }
    }
    out.insert(
        header::CONTENT_LENGTH,
        HeaderValue::from(range.end - range.start),
    );
    out.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    if method == Method::HEAD {
        return Ok((status, out).into_response());
    }
    let reader = Arc::new(reader);
    let body = futures::stream::iter(steps(range)).then(move |step| {
        let reader = reader.clone();
        async move { reader.read_range(step).await.map_err(std::io::Error::other) }
    });
    Ok((status, out, Body::from_stream(body)).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_headers_name_one_range_or_the_whole_value() {
        let r = |h: &str| requested_range(Some(h), 10).map(|r| r.map_err(|e| e.kind()));
        assert_eq!(r("bytes=0-3"), Some(Ok(0..4)));
        assert_eq!(r("bytes=4-"), Some(Ok(4..10)));
        assert_eq!(r("bytes=8-100"), Some(Ok(8..10)));
        assert_eq!(r("bytes=-3"), Some(Ok(7..10)));
        assert_eq!(r("bytes=-30"), Some(Ok(0..10)));
        assert_eq!(r("bytes=10-"), Some(Err("BlobRangeNotSatisfiable")));
        assert_eq!(r("bytes=12-20"), Some(Err("BlobRangeNotSatisfiable")));
        assert_eq!(r("bytes=-0"), Some(Err("BlobRangeNotSatisfiable")));
        assert_eq!(r("bytes=0-1,4-5"), None);
        assert_eq!(r("bytes=5-2"), None);
        assert_eq!(r("items=0-1"), None);
        assert_eq!(requested_range(None, 10).map(|r| r.is_ok()), None);
    }

    #[test]
    fn if_none_match_takes_lists_weak_tags_and_star() {
        assert!(matches_etag(Some("\"a\", \"b\""), "\"b\""));
        assert!(matches_etag(Some("W/\"b\""), "\"b\""));
        assert!(matches_etag(Some("*"), "\"b\""));
        assert!(!matches_etag(Some("\"c\""), "\"b\""));
        assert!(!matches_etag(None, "\"b\""));
    }
}
