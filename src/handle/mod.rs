//! `Omnigraph`, the async service handle: cheap to clone, `Send + Sync`, used
//! by many tasks at once. Every write runs through the protocol actors; reads
//! resolve one snapshot and use it to the end. This file opens, closes and
//! runs writes through the actors; the verbs live by concern beside it
//! (reads, writes, branches and history, schema evolution, upkeep).

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::Arc;

use serde::Serialize;

use crate::compiler::blob_policy::BlobPolicy;
use crate::compiler::catalog::Catalog;
use crate::compiler::query::plans::Plans;
use crate::compiler::query::{check, mutation, parser};
use crate::compiler::schema;
use crate::error::{OmniError, Result};
use crate::exec::blob::{self, Blob, BlobCell};
use crate::exec::cache::{DEFAULT_LIMIT, RuntimeCache};
use crate::exec::embed::EmbedConfig;
use crate::exec::export;
use crate::exec::params;
use crate::exec::run::{self, QueryResult};
use crate::policy::{Action, Policy};
use crate::storage::external;
use crate::storage::index_files::{self, GcReport};
use crate::storage::manifest::{CommitRecord, MAIN, validate_branch_name};
use crate::storage::requests::{Counters, Latency, Requests, StorageSession, counted_session_with};
use crate::storage::retention::{self, CleanupReport, RetentionPolicy};
use crate::storage::substrate::{LanceSubstrate, Pinned, PrepareWork};
use crate::storage::{GraphStorage, Snapshot, Target};
use crate::util::ulid::new_ulid;
use crate::write::arrow_input::{self, Rows, TableInput};
use crate::write::compact::{COMPACT_AT_FRAGMENTS, CompactWork};
use crate::write::load::{LoadMode, LoadWork, prepare_input};
use crate::write::merge::{self, MergeOutcome, MergeWork, changes::EntityChange};
use crate::write::mutate::{self, MutationResult, MutationWork};
use crate::write::optimize;
use crate::write::schema_apply::{self, PlannedStep, SchemaApplyWork, SchemaPlan};
pub use feed::{
    Baseline, ChangeBlock, ChangePage, ChangeRequest, DEFAULT_PAGE_COMMITS, FeedChange,
    Start as ChangeStart,
};
use omnigraph_actors::host::Host;
use omnigraph_actors::{Bugs, OpId, OpKind, Outcome, RecoveryReport};

mod access;
mod branches;
mod evolution;
mod feed;
mod group;
mod reads;
mod upkeep;
mod writes;

pub use branches::BranchInfo;
pub use evolution::SchemaCommit;
pub use group::CommitHold;
pub use reads::{SnapshotInfo, TableInfo, TableLocation};
pub use upkeep::OptimizeReport;
pub use writes::LoadReport;

/// OpenOptions when opening or creating a graph.
#[derive(Clone, Debug)]
pub struct OpenOptions {
    /// Who acts: recorded as the author of every commit this handle makes
    /// (none: the user's name) and the actor a policy decides for (none:
    /// every call is refused while a policy is in force).
    pub actor: Option<String>,
    /// Who may do what (docs/policy.md): checked at the head of every
    /// verb; none, no check.
    pub policy: Option<Arc<Policy>>,
    /// Share a storage session with other handles (needed to reopen a
    /// `memory://` graph).
    pub session: Option<StorageSession>,
    /// How long a write waits for a gate another process holds before it
    /// fails `Contended` (default 60 s; `OMNIGRAPH_GATE_WAIT_MS` sets it).
    pub gate_wait: std::time::Duration,
    /// On object storage, how long this process's liveness lease lasts
    /// unrenewed: a process that stops renewing (killed, paused, cut off)
    /// is taken over after this plus a clock-skew margin (default 10 s;
    /// `OMNIGRAPH_LEASE_MS` sets it).
    pub lease: std::time::Duration,
    /// On object storage, how long a gate's lease is kept after this
    /// handle's last write under it, so that its next write takes the gate
    /// without a request; another process waits up to this much more for
    /// the gate (default 250 ms; `OMNIGRAPH_LOCK_LINGER_MS` sets it, 0 turns
    /// it off).
    pub lock_linger: std::time::Duration,
    /// How a text query of `nearest` is embedded (default: from the
    /// `OMNIGRAPH_EMBED_*` variables).
    pub embed: EmbedConfig,
    /// A delay added to every request this handle's own session sends to
    /// an object store, to measure round trips (default none;
    /// `OMNIGRAPH_S3_DELAY_MS` and `OMNIGRAPH_S3_MAX_CONCURRENT` set it).
    pub latency: Latency,
    /// Halt this handle's storage at a crash point from the start, so that
    /// recovery at open can be interrupted too (tests only).
    #[cfg(feature = "fault-injection")]
    pub crash_at: Option<crate::storage::substrate::CrashPoint>,
}

impl Default for OpenOptions {
    fn default() -> Self {
        let gate_wait_ms = std::env::var("OMNIGRAPH_GATE_WAIT_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(omnigraph_actors::limits::GATE_WAIT_LIMIT_MS);
        Self {
            actor: None,
            policy: None,
            session: None,
            gate_wait: std::time::Duration::from_millis(gate_wait_ms),
            lease: crate::storage::locks::lease_time(),
            lock_linger: crate::storage::locks::lock_linger(),
            embed: EmbedConfig::from_env(),
            latency: Latency::from_env(),
            #[cfg(feature = "fault-injection")]
            crash_at: None,
        }
    }
}

impl OpenOptions {
    /// The author commits record: the actor, else the user's name.
    pub fn recorded_actor(&self) -> String {
        self.actor.clone().unwrap_or_else(default_actor)
    }
}

/// The author of commits when no actor is named: the user's name.
pub fn default_actor() -> String {
    std::env::var("USER").unwrap_or_else(|_| "omnigraph".into())
}

/// The write side of a handle: absent on a read-only one.
struct Writes {
    substrate: Arc<LanceSubstrate>,
    host: Host,
}

struct Inner {
    graph: Arc<GraphStorage>,
    /// The object-store requests of this handle's own session.
    requests: Arc<Counters>,
    cache: RuntimeCache,
    /// Read queries parsed and checked, for the ones after them.
    plans: Plans,
    embed: EmbedConfig,
    writes: Option<Writes>,
    recovery: RecoveryReport,
    /// Mutations waiting to commit together.
    groups: group::Groups,
    /// The actor the handle was opened for.
    actor: Option<Arc<str>>,
    /// The policy in force (a server swaps it when told to reload).
    policy: parking_lot::RwLock<Option<Arc<Policy>>>,
    /// Calls the policy refused, by action.
    denials: access::Denials,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(w) = &self.writes {
            w.host.stop_all_now();
            // Storage tasks may outlive the actors for a moment; the locks
            // must not: other processes may now resolve this one's intents.
            w.substrate.locks().release_all();
        }
    }
}

/// The handle's Lance session: the caller's, or a new one that counts its
/// object-store requests.
fn session_of(opts: &OpenOptions) -> (StorageSession, Arc<Counters>) {
    match &opts.session {
        Some(s) => (s.clone(), Arc::new(Counters::default())),
        None => counted_session_with(opts.latency),
    }
}

#[derive(Clone)]
pub struct Omnigraph {
    inner: Arc<Inner>,
    /// The actor this handle's writes record instead of the one it was
    /// opened with (see [`Omnigraph::acting_as`]).
    actor: Option<Arc<str>>,
}

fn outcome_to_result(outcome: Outcome, detail: Option<OmniError>) -> Result<(Option<String>, u64)> {
    match outcome {
        Outcome::Committed { commit, version } => Ok((commit.map(|c| c.0), version)),
        Outcome::Rejected => {
            Err(detail.unwrap_or_else(|| OmniError::BadRequest("the write was rejected".into())))
        }
        Outcome::ReadSetChanged => Err(OmniError::ReadSetChanged),
        Outcome::Contended {
            attempts,
            waited_for,
        } => Err(OmniError::Contended {
            attempts,
            waited_for,
        }),
        Outcome::RecoveryRequired { op } => Err(OmniError::RecoveryRequired { operation_id: op.0 }),
        Outcome::BranchNotFound(b) => Err(OmniError::NotFound(format!("branch '{b}'"))),
        Outcome::BranchExists(b) => Err(OmniError::AlreadyExists(format!("branch '{b}'"))),
        Outcome::StorageFailed(e) => Err(OmniError::Storage(e)),
        Outcome::Refused(e) => Err(OmniError::BadRequest(e)),
    }
}

impl Omnigraph {
    /// Create a graph at `uri` with the given schema source.
    pub async fn init(uri: &str, schema_source: &str) -> Result<Self> {
        Self::init_with(uri, schema_source, OpenOptions::default()).await
    }

    pub async fn init_with(uri: &str, schema_source: &str, opts: OpenOptions) -> Result<Self> {
        let schema_source = &schema_apply::normalise(schema_source);
        let catalog = schema::compile(schema_source)?;
        let (session, requests) = session_of(&opts);
        let graph =
            GraphStorage::init(session, uri, schema_source, catalog, &opts.recorded_actor())
                .await?;
        Self::start(graph, requests, opts).await
    }

    /// Open an existing graph for reads and writes; recovery resolves the
    /// interrupted writes of processes that are gone before this returns
    /// (a live process's write in flight is left to it).
    pub async fn open(uri: &str) -> Result<Self> {
        Self::open_with(uri, OpenOptions::default()).await
    }

    /// Open an existing graph for reads only: nothing is written, no lock is
    /// taken and no intent is resolved; every read sees the last published
    /// state, which is always consistent. Writes fail with `ReadOnly`.
    pub async fn open_read_only(uri: &str) -> Result<Self> {
        Self::open_read_only_with(uri, OpenOptions::default()).await
    }

    pub async fn open_read_only_with(uri: &str, opts: OpenOptions) -> Result<Self> {
        let (session, requests) = session_of(&opts);
        let graph = Arc::new(GraphStorage::open(session, uri).await?);
        Ok(Self {
            inner: Arc::new(Inner {
                graph,
                requests,
                cache: RuntimeCache::new(DEFAULT_LIMIT),
                plans: Plans::default(),
                embed: opts.embed,
                writes: None,
                recovery: RecoveryReport::default(),
                groups: Default::default(),
                actor: opts.actor.map(Into::into),
                policy: parking_lot::RwLock::new(opts.policy),
                denials: Default::default(),
            }),
            actor: None,
        })
    }

    /// The same graph (its caches, actors and locks shared) whose writes
    /// record `actor` as their author: a server acts for each caller on
    /// one open handle.
    pub fn acting_as(&self, actor: &str) -> Self {
        Self {
            inner: self.inner.clone(),
            actor: Some(actor.into()),
        }
    }

    /// Whether this handle was opened with `open_read_only`.
    pub fn is_read_only(&self) -> bool {
        self.inner.writes.is_none()
    }

    fn writes(&self, what: &str) -> Result<&Writes> {
        self.inner.writes.as_ref().ok_or_else(|| {
            OmniError::ReadOnly(format!("{what} needs a handle opened with Omnigraph::open"))
        })
    }

    pub async fn open_with(uri: &str, opts: OpenOptions) -> Result<Self> {
        let (session, requests) = session_of(&opts);
        let graph = GraphStorage::open(session, uri).await?;
        Self::start(graph, requests, opts).await
    }

    async fn start(
        graph: GraphStorage,
        requests: Arc<Counters>,
        opts: OpenOptions,
    ) -> Result<Self> {
        let graph = Arc::new(graph);
        let substrate = Arc::new(
            LanceSubstrate::new(
                graph.clone(),
                opts.recorded_actor(),
                opts.gate_wait,
                opts.lease,
                opts.lock_linger,
            )
            .await?,
        );
        #[cfg(feature = "fault-injection")]
        if let Some(point) = opts.crash_at {
            substrate.crash_at(point);
        }
        let host = Host::start(substrate.clone(), Bugs::default()).await;
        let recovery = host
            .ready(OpId(format!("open-{}", new_ulid())))
            .await
            .ok_or_else(|| OmniError::Storage("recovery did not finish".into()))?;
        if let Some(op) = recovery.unresolved.first() {
            host.shutdown().await;
            substrate.locks().close().await;
            return Err(OmniError::RecoveryRequired {
                operation_id: op.0.clone(),
            });
        }
        Ok(Self {
            inner: Arc::new(Inner {
                graph,
                requests,
                cache: RuntimeCache::new(DEFAULT_LIMIT),
                plans: Plans::default(),
                embed: opts.embed,
                writes: Some(Writes { substrate, host }),
                recovery,
                groups: Default::default(),
                actor: opts.actor.map(Into::into),
                policy: parking_lot::RwLock::new(opts.policy),
                denials: Default::default(),
            }),
            actor: None,
        })
    }

    /// The object-store requests (on `s3://`) this handle has sent so far,
    /// by kind. A handle given a session of its own counts nothing.
    pub fn requests(&self) -> Requests {
        self.inner.requests.read()
    }

    /// Finish with the graph: stop the actors and give back every
    /// cross-process lock and lease at once. A handle that is only dropped
    /// releases its file locks too, but its leases on object storage lapse
    /// (other processes wait out the lease time before taking them over).
    pub async fn close(self) {
        if let Some(w) = &self.inner.writes {
            w.host.shutdown().await;
            let ((), ()) = futures::join!(
                w.substrate.locks().close(),
                crate::storage::background::settle()
            );
        }
    }

    pub fn uri(&self) -> &str {
        self.inner.graph.store.uri()
    }

    /// What recovery did when this handle opened the graph.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.inner.recovery
    }

    /// The owner this handle's writes carry in their sidecars and leases
    /// (a fresh one per open); `None` on a read-only handle.
    pub fn owner(&self) -> Option<&str> {
        self.inner
            .writes
            .as_ref()
            .map(|w| w.substrate.locks().incarnation())
    }

    #[cfg(feature = "fault-injection")]
    pub fn substrate(&self) -> &Arc<LanceSubstrate> {
        &self
            .writes("fault injection")
            .expect("a read-write handle")
            .substrate
    }

    async fn run(
        &self,
        kind: OpKind,
        label: &str,
        work: Option<Arc<dyn PrepareWork>>,
    ) -> Result<(Option<String>, u64, serde_json::Value)> {
        let w = self.writes(label)?;
        let op = OpId(new_ulid());
        w.substrate
            .register(&op, label, work, self.actor.as_deref());
        // In the caller's span (a server request's), so that its id leads
        // to the operation id every protocol step logs.
        tracing::info!(operation_id = %op.0, label, "write started");
        let outcome = w.host.run(op.clone(), kind).await;
        tracing::info!(operation_id = %op.0, outcome = ?outcome, "write ended");
        let ctx = w.substrate.finish(&op);
        // A write that failed because this process lost its lease says so,
        // whatever step noticed first.
        if matches!(
            outcome,
            Outcome::RecoveryRequired { .. }
                | Outcome::StorageFailed(_)
                | Outcome::Contended { .. }
        ) && let Err(reason) = w.substrate.locks().valid()
        {
            // A lease that lapsed because storage stopped answering is an
            // outage, not a stall: say so, with the store's own error.
            return Err(match w.substrate.locks().renewal_failure() {
                Some(cause) => OmniError::Storage(format!(
                    "the object store stopped answering ({cause}), so {reason}"
                )),
                None => OmniError::LeaseLost { reason },
            });
        }
        if let (Outcome::RecoveryRequired { op }, Some(OmniError::Storage(cause))) =
            (&outcome, &ctx.error)
        {
            return Err(OmniError::Storage(format!(
                "{cause} (the write is left to recovery: operation {})",
                op.0
            )));
        }
        let (commit, version) = outcome_to_result(outcome, ctx.error)?;
        Ok((commit, version, ctx.summary))
    }
}
