//! `omnigraph serve`: the engine over HTTP. One read-write handle per graph,
//! shared by every request (its caches stay warm); bearer tokens name the
//! actor of every write; a bounded graceful stop closes every handle.
//!
//! [`routes`] holds the JSON handlers, [`stream`] the NDJSON load and
//! export, [`blob`] the blob bytes, [`api`] the bodies, [`error`] the
//! status of each error kind, [`auth`] the tokens, [`metrics`] the
//! Prometheus counters and [`openapi`] the document derived from the types.

pub mod api;
pub mod auth;
mod blob;
pub mod error;
mod feed;
pub mod metrics;
pub mod openapi;
mod routes;
mod stream;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{FromRequest, MatchedPath, Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use crate::error::{OmniError, Result};
use crate::policy::{Action, Policy};
use crate::{Omnigraph, OpenOptions};
use auth::Tokens;
use error::{ApiError, ApiResult};

/// The default limit of a JSON request body.
pub const DEFAULT_MAX_BODY_BYTES: usize = 32 << 20;
/// How long a stop waits for requests in flight before it drops them.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(30);
/// The response header naming the request, as the server's log does.
pub const REQUEST_ID_HEADER: &str = "omnigraph-request-id";

/// What a server serves.
pub struct Config {
    /// `(id, uri)` per graph, in the order given.
    pub graphs: Vec<(String, String)>,
    /// `None`: no authentication (every request acts as `default_actor`).
    pub tokens: Option<Tokens>,
    /// Who may do what (needs tokens: a policy decides for known actors).
    /// With tokens and none, every actor may only read (default-deny).
    pub policy: Option<Arc<Policy>>,
    pub max_body_bytes: usize,
}

/// What every request shares.
pub struct ServerState {
    graphs: BTreeMap<String, Omnigraph>,
    tokens: Option<Tokens>,
    /// The actor of writes when the server runs unauthenticated.
    default_actor: String,
    max_body_bytes: usize,
    pub metrics: metrics::Metrics,
}

pub type Shared = Arc<ServerState>;

/// The actor a request acts as (its token's, or the server's own).
#[derive(Clone)]
pub struct Actor(pub Arc<str>);

impl ServerState {
    /// Open every graph read-write (each id once).
    pub async fn open(config: Config) -> Result<Shared> {
        let default_actor = crate::default_actor();
        let policy = match (&config.tokens, config.policy) {
            (None, Some(p)) => {
                return Err(OmniError::BadRequest(format!(
                    "the policy {} needs tokens: without them no request names its actor (give --tokens FILE or OMNIGRAPH_TOKENS)",
                    p.source()
                )));
            }
            (Some(_), None) => Some(Arc::new(Policy::read_only())),
            (_, p) => p,
        };
        let mut graphs = BTreeMap::new();
        for (id, uri) in config.graphs {
            if id.is_empty() || id.contains('/') {
                return Err(OmniError::BadRequest(format!(
                    "graph id {id:?}: give a non-empty id without '/'"
                )));
            }
            if graphs.contains_key(&id) {
                return Err(OmniError::BadRequest(format!(
                    "graph id {id:?} is given twice"
                )));
            }
            let opts = OpenOptions {
                actor: Some(default_actor.clone()),
                policy: policy.clone(),
                ..Default::default()
            };
            let g = Omnigraph::open_with(&uri, opts).await?;
            graphs.insert(id, g);
        }
        if graphs.is_empty() {
            return Err(OmniError::BadRequest(
                "no graph to serve: give --graph ID=URI".into(),
            ));
        }
        Ok(Arc::new(Self {
            graphs,
            tokens: config.tokens,
            default_actor,
            max_body_bytes: config.max_body_bytes,
            metrics: Default::default(),
        }))
    }

    /// The graph `id`, acting for `actor`.
    fn graph(&self, id: &str, actor: &Actor) -> ApiResult<Omnigraph> {
        self.graphs
            .get(id)
            .map(|g| g.acting_as(&actor.0))
            .ok_or_else(|| OmniError::NotFound(format!("graph {id:?}")).into())
    }

    /// Put the policy in `path` in force for every graph from the next
    /// request on; a policy that does not load leaves the one in force
    /// (the error says why). A server with no tokens has no actors to
    /// decide for, and refuses.
    pub fn reload_policy(&self, path: &std::path::Path) -> Result<()> {
        let loaded = match self.tokens {
            None => Err(OmniError::BadRequest(
                "this server has no tokens: a policy cannot be put in force".into(),
            )),
            Some(_) => Policy::load(path).map(Arc::new),
        };
        self.metrics.policy_reload(loaded.is_ok());
        let p = loaded?;
        for g in self.graphs.values() {
            g.set_policy(Some(p.clone()));
        }
        Ok(())
    }

    /// Each graph's refused calls by action.
    pub fn denials(&self) -> Vec<(String, Action, u64)> {
        let mut out = Vec::new();
        for (id, g) in &self.graphs {
            for (a, n) in g.denials() {
                out.push((id.clone(), a, n));
            }
        }
        out
    }

    /// Close every handle (their actors stop, their locks are released).
    pub async fn close(&self) {
        for g in self.graphs.values() {
            g.clone().close().await;
        }
    }
}

/// Every route, behind authentication, metrics and tracing.
pub fn router(state: Shared) -> axum::Router {
    routes::routes()
        .merge(stream::routes())
        .merge(feed::routes())
        .merge(blob::routes())
        .fallback(|| async { ApiError::Engine(OmniError::NotFound("no such route".into())) })
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            authenticate,
        ))
        .layer(
            tower_http::trace::TraceLayer::new_for_http()
                .make_span_with(request_span)
                .on_response(
                    tower_http::trace::DefaultOnResponse::new().level(tracing::Level::INFO),
                ),
        )
        .layer(axum::middleware::from_fn_with_state(state.clone(), observe))
        .with_state(state)
}

/// Routes anyone may call: liveness and the API's description.
fn is_open_route(path: &str) -> bool {
    matches!(path, "/healthz" | "/openapi.json")
}

async fn authenticate(State(s): State<Shared>, mut req: Request, next: Next) -> Response {
    if is_open_route(req.uri().path()) {
        return next.run(req).await;
    }
    let actor = match &s.tokens {
        None => s.default_actor.as_str(),
        Some(tokens) => {
            let presented = req
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.split_once(' '))
                .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
                .map(|(_, t)| t.trim());
            let Some(presented) = presented else {
                return ApiError::Unauthorized(
                    "give a token: Authorization: Bearer <token>".into(),
                )
                .into_response();
            };
            match tokens.actor(presented) {
                Some(a) => a,
                None => {
                    return ApiError::Unauthorized("the token is not known".into()).into_response();
                }
            }
        }
    };
    req.extensions_mut().insert(Actor(actor.into()));
    next.run(req).await
}

/// The id a request is known by in the log and in its answer's
/// [`REQUEST_ID_HEADER`].
#[derive(Clone)]
struct RequestId(String);

/// Name, count and time every request (the outermost layer).
async fn observe(State(s): State<Shared>, mut req: Request, next: Next) -> Response {
    let route = route_of(&req).to_string();
    let method = req.method().to_string();
    let id = crate::util::ulid::new_ulid();
    req.extensions_mut().insert(RequestId(id.clone()));
    let started = Instant::now();
    let mut resp = next.run(req).await;
    s.metrics
        .request(&route, &method, resp.status().as_u16(), started.elapsed());
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert(REQUEST_ID_HEADER, v);
    }
    resp
}

/// The route's pattern (`/graphs/{id}/query`), never the path itself.
fn route_of(req: &Request) -> &str {
    req.extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", |p| p.as_str())
}

/// The span every request runs in: the engine's logs of its write (the
/// operation id included) are inside it.
fn request_span(req: &Request) -> tracing::Span {
    let id = req
        .extensions()
        .get::<RequestId>()
        .map_or("", |r| r.0.as_str());
    tracing::info_span!("request", id = %id, method = %req.method(), route = %route_of(req))
}

/// A JSON request body, read up to the server's limit (over it:
/// `ResourceLimitExceeded`, 413) and parsed strictly (a bad body or an
/// unknown field: `BadRequest`, naming it).
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned> FromRequest<Shared> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, s: &Shared) -> ApiResult<Self> {
        let bytes = read_body(req.into_body(), s.max_body_bytes).await?;
        serde_json::from_slice(&bytes)
            .map(JsonBody)
            .map_err(|e| OmniError::BadRequest(format!("the request body: {e}")).into())
    }
}

/// The whole body, refused as soon as it passes `limit` bytes.
async fn read_body(body: axum::body::Body, limit: usize) -> Result<Vec<u8>> {
    use futures::StreamExt;
    let over = || OmniError::ResourceLimitExceeded {
        what: "the request body".into(),
        limit: format!("{limit} bytes"),
    };
    let mut out = Vec::new();
    let mut chunks = body.into_data_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| {
            OmniError::BadRequest(format!("the request body could not be read: {e}"))
        })?;
        if out.len() + chunk.len() > limit {
            return Err(over());
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// URL query parameters, parsed strictly (a bad or unknown one:
/// `BadRequest`, naming it).
pub struct QueryParams<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> axum::extract::FromRequestParts<S> for QueryParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, _: &S) -> ApiResult<Self> {
        axum::extract::Query::try_from_uri(&parts.uri)
            .map(|q| QueryParams(q.0))
            .map_err(|e| {
                OmniError::BadRequest(format!("the query string: {}", e.body_text())).into()
            })
    }
}

/// Serve `state` on `listener` until `stop` resolves; then stop accepting,
/// let requests in flight finish for up to [`DRAIN_LIMIT`], and close
/// every handle.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Shared,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let (stopping_tx, mut stopping_rx) = tokio::sync::watch::channel(false);
    let app = router(state.clone());
    let server = axum::serve(listener, app).with_graceful_shutdown(async move {
        let _ = stopping_rx.wait_for(|s| *s).await;
    });
    let mut running = tokio::spawn(async move { server.await });
    let served = tokio::select! {
        r = &mut running => Some(r),
        () = stop => None,
    };
    let served = match served {
        Some(r) => r,
        None => {
            tracing::info!("stopping: requests in flight may finish");
            let _ = stopping_tx.send(true);
            match tokio::time::timeout(DRAIN_LIMIT, &mut running).await {
                Ok(r) => r,
                Err(_) => {
                    tracing::warn!(
                        limit_s = DRAIN_LIMIT.as_secs(),
                        "requests still in flight at the drain limit are dropped"
                    );
                    running.abort();
                    Ok(Ok(()))
                }
            }
        }
    };
    state.close().await;
    match served {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(OmniError::Io(e)),
        Err(e) => Err(OmniError::Storage(format!("the server task failed: {e}"))),
    }
}
