//! How an engine error (or a refused request) becomes an HTTP response:
//! one status per error kind, and a body `{"error", "code", "kind", ...}`
//! that never carries what a failure inside the server was.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::error::OmniError;

/// What a handler returns when it fails.
#[derive(Debug)]
pub enum ApiError {
    /// No bearer token, or one no actor has.
    Unauthorized(String),
    /// The engine's error, mapped by its kind.
    Engine(OmniError),
}

impl From<OmniError> for ApiError {
    fn from(e: OmniError) -> Self {
        Self::Engine(e)
    }
}

pub type ApiResult<T> = std::result::Result<T, ApiError>;

/// The error body of every route.
#[derive(Serialize, ToSchema)]
pub struct ErrorBody {
    /// What was wrong, for a person.
    pub error: String,
    /// `unauthorized`, `forbidden`, `bad_request`, `not_found`, `conflict`,
    /// `too_many_requests` or `internal`.
    pub code: &'static str,
    /// The engine's error kind (`Unauthorized` for a token problem).
    pub kind: &'static str,
    /// A merge's conflicts, as the CLI prints them.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub merge_conflicts: Option<serde_json::Value>,
    /// The key a write found taken: `{"type", "id"}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub key_conflict: Option<serde_json::Value>,
    /// Where in the input a data, parse or type error is: `{"line",
    /// "row", "column", "type", "property", "value", "first"}` (those known).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub at: Option<serde_json::Value>,
    /// An unsatisfiable range: `{"start", "end", "length"}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub blob_range: Option<serde_json::Value>,
}

/// The status and `code` of an engine error kind. Input errors (every kind
/// the CLI exits 2 for, and bad data) are the caller's to fix; a conflict
/// is theirs to resolve or retry; a failure of the server is `internal`.
pub fn status_of(e: &OmniError) -> (StatusCode, &'static str) {
    use OmniError::*;
    match e {
        NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
        PolicyDenied { .. } => (StatusCode::FORBIDDEN, "forbidden"),
        VersionExpired { .. } | ChangeFeedGap { .. } => (StatusCode::GONE, "not_found"),
        AlreadyExists(_)
        | KeyConflict { .. }
        | PreconditionFailed { .. }
        | MergeConflicts(_)
        | ReadSetChanged
        | SchemaChanged { .. }
        | BlobChanged { .. } => (StatusCode::CONFLICT, "conflict"),
        ResourceLimitExceeded { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "bad_request"),
        BlobRangeNotSatisfiable { .. } => (StatusCode::RANGE_NOT_SATISFIABLE, "bad_request"),
        Contended { .. } => (StatusCode::TOO_MANY_REQUESTS, "too_many_requests"),
        RecoveryRequired { .. } | LeaseLost { .. } => {
            (StatusCode::SERVICE_UNAVAILABLE, "too_many_requests")
        }
        Invalid { .. } | Embedding(_) => (StatusCode::BAD_REQUEST, "bad_request"),
        e if e.exit_code() == 2 => (StatusCode::BAD_REQUEST, "bad_request"),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
    }
}

/// How long a contended caller should wait before trying again, in
/// seconds (the engine already waited its own limit).
const RETRY_AFTER_S: &str = "1";

impl ApiError {
    fn parts(&self) -> (StatusCode, ErrorBody) {
        let e = match self {
            ApiError::Unauthorized(why) => {
                return (
                    StatusCode::UNAUTHORIZED,
                    body(why.clone(), "unauthorized", "Unauthorized"),
                );
            }
            ApiError::Engine(e) => e,
        };
        let (status, code) = status_of(e);
        if status == StatusCode::INTERNAL_SERVER_ERROR {
            // Storage paths and library messages stay in the server's log.
            tracing::error!(kind = e.kind(), error = %e, "request failed inside the server");
            return (
                status,
                body("the server failed; its log says why".into(), code, e.kind()),
            );
        }
        let mut b = body(e.to_string(), code, e.kind());
        match e {
            OmniError::MergeConflicts(c) => b.merge_conflicts = serde_json::to_value(c).ok(),
            OmniError::KeyConflict { type_name, id } => {
                b.key_conflict = Some(serde_json::json!({ "type": type_name, "id": id }))
            }
            OmniError::BlobRangeNotSatisfiable { start, end, length } => {
                b.blob_range =
                    Some(serde_json::json!({ "start": start, "end": end, "length": length }))
            }
            OmniError::Invalid { at, .. } => {
                let mut v = serde_json::Map::new();
                let mut put = |k: &str, x: Option<serde_json::Value>| {
                    if let Some(x) = x {
                        v.insert(k.into(), x);
                    }
                };
                put("line", at.line.map(Into::into));
                put("row", at.row.map(Into::into));
                put("type", at.type_name.clone().map(Into::into));
                put("property", at.property.clone().map(Into::into));
                put("value", at.value.clone().map(Into::into));
                put("first", at.first.map(Into::into));
                b.at = Some(v.into());
            }
            OmniError::Parse { line, column, .. } | OmniError::Type { line, column, .. } => {
                b.at = Some(serde_json::json!({ "line": line, "column": column }))
            }
            _ => {}
        }
        (status, b)
    }
}

fn body(error: String, code: &'static str, kind: &'static str) -> ErrorBody {
    ErrorBody {
        error,
        code,
        kind,
        merge_conflicts: None,
        key_conflict: None,
        at: None,
        blob_range: None,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, b) = self.parts();
        let mut r = (status, axum::Json(b)).into_response();
        let h = r.headers_mut();
        match status {
            StatusCode::UNAUTHORIZED => {
                h.insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"omnigraph\""),
                );
            }
            StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => {
                h.insert(header::RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_S));
            }
            _ => {}
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_the_status_the_api_promises() {
        let cases = [
            (OmniError::BadRequest("x".into()), 400),
            (OmniError::schema("x"), 400),
            (OmniError::ReadOnly("x".into()), 400),
            (OmniError::invalid(Default::default(), "x"), 400),
            (OmniError::NotFound("x".into()), 404),
            (
                OmniError::VersionExpired {
                    version: 3,
                    branch: "main".into(),
                    oldest_kept: Some(9),
                },
                410,
            ),
            (
                OmniError::PreconditionFailed {
                    expected: "a".into(),
                    actual: "b".into(),
                },
                409,
            ),
            (
                OmniError::BlobChanged {
                    uri: "s3://b/x".into(),
                    recorded: "ETag a".into(),
                    found: "ETag b".into(),
                },
                409,
            ),
            (
                OmniError::KeyConflict {
                    type_name: "P".into(),
                    id: "1".into(),
                },
                409,
            ),
            (OmniError::MergeConflicts(vec![]), 409),
            (
                OmniError::ResourceLimitExceeded {
                    what: "x".into(),
                    limit: "1".into(),
                },
                413,
            ),
            (
                OmniError::BlobRangeNotSatisfiable {
                    start: 5,
                    end: 6,
                    length: 1,
                },
                416,
            ),
            (
                OmniError::Contended {
                    attempts: 1,
                    waited_for: "g".into(),
                },
                429,
            ),
            (OmniError::Storage("/secret/path".into()), 500),
        ];
        for (e, want) in cases {
            assert_eq!(status_of(&e).0.as_u16(), want, "{e}");
        }
    }

    #[test]
    fn an_internal_failure_says_nothing_of_its_cause() {
        let (status, b) = ApiError::Engine(OmniError::Storage("/secret/path".into())).parts();
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(!b.error.contains("secret"), "{}", b.error);
        assert_eq!((b.code, b.kind), ("internal", "StorageError"));
    }

    #[test]
    fn a_key_conflict_names_the_key() {
        let (_, b) = ApiError::Engine(OmniError::KeyConflict {
            type_name: "Person".into(),
            id: "p1".into(),
        })
        .parts();
        assert_eq!(
            b.key_conflict,
            Some(serde_json::json!({"type": "Person", "id": "p1"}))
        );
    }
}
