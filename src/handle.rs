//! `Omnigraph`, the async service handle: cheap to clone, `Send + Sync`, used
//! by many tasks at once. Every write runs through the protocol actors; reads
//! resolve one snapshot and use it to the end.

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
use crate::storage::external;
use crate::storage::index_files::{self, GcReport};
use crate::storage::manifest::{CommitRecord, MAIN, validate_branch_name};
use crate::storage::requests::{Counters, Requests, StorageSession, counted_session};
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
use omnigraph_actors::host::Host;
use omnigraph_actors::{Bugs, OpId, OpKind, Outcome, RecoveryReport};

/// A schema apply's result.
#[derive(Clone, Debug, Serialize)]
pub struct SchemaCommit {
    /// The commit on `main` (`None`: the schema was already this one).
    pub commit: Option<String>,
    pub manifest_version: u64,
    /// The accepted schema's identity now.
    pub schema: String,
    pub changed: bool,
    pub steps: Vec<PlannedStep>,
}

/// How many times a mutation is checked against the accepted schema when
/// schema applies keep landing between its check and its prepare.
const MUTATION_COMPILES: u32 = 2;

/// Options when opening or creating a graph.
#[derive(Clone, Debug)]
pub struct Options {
    /// Recorded as the actor of every commit this handle makes.
    pub actor: String,
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
    /// How a text query of `nearest` is embedded (default: from the
    /// `OMNIGRAPH_EMBED_*` variables).
    pub embed: EmbedConfig,
    /// Halt this handle's storage at a crash point from the start, so that
    /// recovery at open can be interrupted too (tests only).
    #[cfg(feature = "fault-injection")]
    pub crash_at: Option<crate::storage::substrate::CrashPoint>,
}

impl Default for Options {
    fn default() -> Self {
        let gate_wait_ms = std::env::var("OMNIGRAPH_GATE_WAIT_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(omnigraph_actors::limits::GATE_WAIT_LIMIT_MS);
        Self {
            actor: std::env::var("USER").unwrap_or_else(|_| "omnigraph".into()),
            session: None,
            gate_wait: std::time::Duration::from_millis(gate_wait_ms),
            lease: crate::storage::locks::lease_time(),
            embed: EmbedConfig::from_env(),
            #[cfg(feature = "fault-injection")]
            crash_at: None,
        }
    }
}

/// What a load did.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LoadReport {
    pub branch: String,
    pub branch_created: bool,
    pub mode: LoadMode,
    pub nodes: BTreeMap<String, usize>,
    pub edges: BTreeMap<String, usize>,
    pub commit: String,
    pub manifest_version: u64,
}

/// What an optimize did: the indexes it built, and its commit (none when
/// every declared index was already current).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct OptimizeReport {
    pub branch: String,
    pub commit: Option<String>,
    pub manifest_version: u64,
    /// One record per index built: `type`, `property`, `kind` (`btree`,
    /// `text` or `vector`), `rows`, and for a search index its `file`
    /// (relative to the graph).
    pub indexes: Vec<serde_json::Value>,
}

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct BranchInfo {
    pub name: String,
    pub head: String,
    pub parent: Option<String>,
    /// Graph manifest version at which the branch last changed.
    pub updated_at: u64,
}

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct TableInfo {
    pub name: String,
    pub kind: String,
    pub rows: usize,
    /// Lance fragments (files) holding the rows.
    pub fragments: usize,
    pub table_version: u64,
    /// The Lance branch holding this state (`null`: Lance's main line).
    pub lance_branch: Option<String>,
}

/// A table's dataset as one graph version names it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct TableLocation {
    pub uri: String,
    /// The Lance branch (`None`: Lance's main line).
    pub lance_branch: Option<String>,
    pub version: u64,
}

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct SnapshotInfo {
    pub branch: String,
    pub manifest_version: u64,
    pub head_commit: String,
    /// The identity of the schema this graph version accepts.
    pub schema_id: String,
    pub types: Vec<TableInfo>,
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
fn session_of(opts: &Options) -> (StorageSession, Arc<Counters>) {
    match &opts.session {
        Some(s) => (s.clone(), Arc::new(Counters::default())),
        None => counted_session(),
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
        Self::init_with(uri, schema_source, Options::default()).await
    }

    pub async fn init_with(uri: &str, schema_source: &str, opts: Options) -> Result<Self> {
        let schema_source = &schema_apply::normalise(schema_source);
        let catalog = schema::compile(schema_source)?;
        let (session, requests) = session_of(&opts);
        let graph = GraphStorage::init(session, uri, schema_source, catalog, &opts.actor).await?;
        Self::start(graph, requests, opts).await
    }

    /// Open an existing graph for reads and writes; recovery resolves the
    /// interrupted writes of processes that are gone before this returns
    /// (a live process's write in flight is left to it).
    pub async fn open(uri: &str) -> Result<Self> {
        Self::open_with(uri, Options::default()).await
    }

    /// Open an existing graph for reads only: nothing is written, no lock is
    /// taken and no intent is resolved; every read sees the last published
    /// state, which is always consistent. Writes fail with `ReadOnly`.
    pub async fn open_read_only(uri: &str) -> Result<Self> {
        Self::open_read_only_with(uri, Options::default()).await
    }

    pub async fn open_read_only_with(uri: &str, opts: Options) -> Result<Self> {
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

    pub async fn open_with(uri: &str, opts: Options) -> Result<Self> {
        let (session, requests) = session_of(&opts);
        let graph = GraphStorage::open(session, uri).await?;
        Self::start(graph, requests, opts).await
    }

    async fn start(graph: GraphStorage, requests: Arc<Counters>, opts: Options) -> Result<Self> {
        let graph = Arc::new(graph);
        let substrate = Arc::new(
            LanceSubstrate::new(
                graph.clone(),
                opts.actor.clone(),
                opts.gate_wait,
                opts.lease,
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
            w.substrate.locks().close().await;
        }
    }

    /// The catalog of the schema the graph accepts now.
    pub async fn catalog(&self) -> Result<Arc<Catalog>> {
        Ok(self.inner.graph.current_schema().await?.catalog.clone())
    }

    /// What applying schema `source` would do: each step and the rows it
    /// reads or writes, after checking every new rule on every branch's
    /// rows. Nothing is written. A change the data cannot follow is the
    /// error the apply would give.
    pub async fn plan_schema(&self, source: &str) -> Result<SchemaPlan> {
        Ok(schema_apply::plan(&self.inner.graph, source).await?.3)
    }

    /// Make `source` the graph's schema, for every branch, as one commit
    /// on `main`. It waits for every write in flight (the schema gate is
    /// exclusive) and fails `SchemaChanged` if another apply lands first.
    pub async fn apply_schema(&self, source: &str) -> Result<SchemaCommit> {
        self.writes("apply a schema")?;
        // Planned here without reading rows (bad input fails before any
        // gate); the rows are checked once, under the gates.
        let (latest, from, evo) = schema_apply::evolution(&self.inner.graph, source).await?;
        let unchanged = |version| SchemaCommit {
            commit: None,
            manifest_version: version,
            schema: from.id.clone(),
            changed: false,
            steps: Vec::new(),
        };
        if evo.is_empty() {
            return Ok(unchanged(latest.version));
        }
        let work = Arc::new(Pinned {
            schema: from.id.clone(),
            work: Arc::new(SchemaApplyWork {
                source: source.to_string(),
            }),
        });
        match self
            .run(OpKind::ApplySchema, "schema_apply", Some(work))
            .await
        {
            Ok((commit, version, summary)) => Ok(SchemaCommit {
                commit,
                manifest_version: version,
                schema: summary["schema"]["to"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                changed: true,
                steps: serde_json::from_value(summary["plan"]["steps"].clone())?,
            }),
            Err(OmniError::AlreadyCurrent) => Ok(unchanged(latest.version)),
            Err(e) => Err(e),
        }
    }

    /// The accepted schema's source now, or at a target's graph version.
    pub async fn schema_source(&self, target: Option<&Target>) -> Result<String> {
        let schema = match target {
            Some(t) => self.resolve(t).await?.schema,
            None => self.inner.graph.current_schema().await?,
        };
        Ok(schema.source.clone())
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
        let (commit, version) = outcome_to_result(outcome, ctx.error)?;
        Ok((commit, version, ctx.summary))
    }

    /// Load JSONL text into `branch` as one commit.
    pub async fn load(&self, branch: &str, jsonl: &str, mode: LoadMode) -> Result<LoadReport> {
        let bytes = jsonl.as_bytes().to_vec();
        self.load_from(branch, None, std::io::Cursor::new(bytes), mode, |_| {})
            .await
    }

    /// Load from any reader. With `from`, a missing `branch` is first created
    /// from that branch. `progress` hears how many input bytes were read.
    pub async fn load_from<R, P>(
        &self,
        branch: &str,
        from: Option<&str>,
        input: R,
        mode: LoadMode,
        progress: P,
    ) -> Result<LoadReport>
    where
        R: Read + Send + 'static,
        P: Fn(u64) + Send + Sync + 'static,
    {
        self.load_prepared(branch, from, move |catalog: &Catalog| {
            prepare_input(catalog, input, mode, &progress)
        })
        .await
    }

    /// Load Arrow tables (one per type, in order) into `branch` as one
    /// commit, checked by the same rules as a file's lines; an error names
    /// the table's row instead of a line.
    pub async fn load_tables<P>(
        &self,
        branch: &str,
        from: Option<&str>,
        tables: Vec<TableInput>,
        mode: LoadMode,
        progress: P,
    ) -> Result<LoadReport>
    where
        P: Fn(u64) + Send + Sync + 'static,
    {
        let rows = Rows::default();
        let seen = rows.clone();
        self.load_prepared(branch, from, move |catalog: &Catalog| {
            let parsed = arrow_input::parse(catalog, tables, &seen, &progress)?;
            Ok(Arc::new(LoadWork::new(parsed, mode)?))
        })
        .await
        .map_err(|e| rows.restate(e))
    }

    /// The load `prepare` makes from the accepted catalog (off the async
    /// threads), as one commit on `branch`; with `from`, a missing `branch`
    /// is first created from that branch.
    async fn load_prepared<F>(
        &self,
        branch: &str,
        from: Option<&str>,
        prepare: F,
    ) -> Result<LoadReport>
    where
        F: FnOnce(&Catalog) -> Result<Arc<LoadWork>> + Send + 'static,
    {
        self.writes("load")?;
        let mut branch_created = false;
        if let Some(from) = from {
            let exists = self
                .inner
                .graph
                .manifests
                .refresh()
                .await?
                .branches
                .contains_key(branch);
            if !exists {
                match self.branch_create(branch, from).await {
                    Ok(_) => branch_created = true,
                    Err(OmniError::AlreadyExists(_)) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        // The input is read once, so a schema apply between the parse and
        // the prepare fails the load (`SchemaChanged`) rather than retrying.
        let schema = self.inner.graph.current_schema().await?;
        let catalog = schema.catalog.clone();
        let work = tokio::task::spawn_blocking(move || prepare(&catalog))
            .await
            .map_err(|e| OmniError::Storage(format!("the load task failed: {e}")))??;
        let mode = work.mode();
        let (nodes, edges) = work.counts();
        let work = Arc::new(Pinned {
            schema: schema.id.clone(),
            work,
        });
        let (commit, version, _) = self
            .run(
                OpKind::Write {
                    branch: branch.to_string(),
                },
                "load",
                Some(work),
            )
            .await?;
        self.compact_if_fragmented(branch).await;
        Ok(LoadReport {
            branch: branch.to_string(),
            branch_created,
            mode,
            nodes,
            edges,
            commit: commit.unwrap_or_default(),
            manifest_version: version,
        })
    }

    /// Compact the branch's own tables that have grown many small fragments.
    /// The write that called this is already durable, so a failure here is
    /// only logged.
    async fn compact_if_fragmented(&self, branch: &str) {
        let types = match self.fragmented_tables(branch).await {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(branch, error = %e, "could not check fragmentation");
                return;
            }
        };
        if types.is_empty() {
            return;
        }
        tracing::info!(branch, ?types, "compacting");
        let work = Arc::new(CompactWork { types });
        if let Err(e) = self
            .run(
                OpKind::Write {
                    branch: branch.to_string(),
                },
                "compact",
                Some(work),
            )
            .await
        {
            tracing::warn!(branch, error = %e, "compaction did not run");
        }
    }

    async fn fragmented_tables(&self, branch: &str) -> Result<Vec<String>> {
        let snap = self.resolve(&Target::Branch(branch.to_string())).await?;
        let mut out = Vec::new();
        for t in &snap.catalog().types {
            let r = snap.table(t)?;
            if r.lance_branch != snap.record.line(branch, &t.table_key()) {
                continue;
            }
            if self.inner.graph.read_table(&snap, t).await?.fragments() >= COMPACT_AT_FRAGMENTS {
                out.push(t.name.clone());
            }
        }
        Ok(out)
    }

    pub async fn branch_create(&self, name: &str, from: &str) -> Result<BranchInfo> {
        let latest = self.inner.graph.manifests.refresh().await?;
        validate_branch_name(name, latest.branches.keys())?;
        if !latest.branches.contains_key(from) {
            return Err(OmniError::NotFound(format!("branch '{from}'")));
        }
        self.run(
            OpKind::CreateBranch {
                name: name.to_string(),
                from: from.to_string(),
            },
            "create_branch",
            None,
        )
        .await?;
        self.branch_list()
            .await?
            .into_iter()
            .find(|b| b.name == name)
            .ok_or_else(|| OmniError::NotFound(format!("branch '{name}'")))
    }

    pub async fn branch_list(&self) -> Result<Vec<BranchInfo>> {
        let latest = self.inner.graph.manifests.refresh().await?;
        Ok(latest
            .branches
            .iter()
            .map(|(name, r)| BranchInfo {
                name: name.clone(),
                head: r.head.clone(),
                parent: r.parent.clone(),
                updated_at: r.updated_at,
            })
            .collect())
    }

    pub async fn branch_delete(&self, name: &str) -> Result<()> {
        if name == MAIN {
            return Err(OmniError::BadRequest(
                "the main branch cannot be deleted".into(),
            ));
        }
        let latest = self.inner.graph.manifests.refresh().await?;
        if !latest.branches.contains_key(name) {
            return Err(OmniError::NotFound(format!("branch '{name}'")));
        }
        self.run(
            OpKind::DeleteBranch {
                name: name.to_string(),
            },
            "delete_branch",
            None,
        )
        .await?;
        Ok(())
    }

    /// Remove the index files no version of any table records: those of
    /// optimizes that crashed or lost a race, and of deleted branches' forks.
    /// A file whose writing process may still record it stays (another
    /// process while it lives, this one while a write of its own runs);
    /// with `dry_run`, nothing is removed and the report lists what would
    /// be. Not a write: it changes nothing any version reads.
    pub async fn gc(&self, dry_run: bool) -> Result<GcReport> {
        let w = self.writes("gc")?;
        index_files::collect(&w.substrate, dry_run).await
    }

    /// Remove the graph versions `policy` does not keep, the table versions
    /// only they name, and the files no kept version references (those of
    /// crashed writes once their writers are gone). Always kept: every
    /// branch head and what its lazy forks share, the bases of unresolved
    /// intents, and whatever a live writer in any process may still commit.
    /// Safe beside writers, readers and other cleanups in other processes;
    /// one killed anywhere leaves a graph that reads and writes, and the
    /// next finishes the job. A read of a removed version is
    /// `VersionExpired`; the commit history stays listable.
    pub async fn cleanup(&self, policy: RetentionPolicy) -> Result<CleanupReport> {
        let w = self.writes("cleanup")?;
        retention::cleanup(&w.substrate, &policy).await
    }

    /// Build or refresh every declared search index of `branch` in one
    /// commit (none when all are current). Loads and mutations never build
    /// indexes; searches cover the rows an index does not, flat.
    pub async fn optimize(&self, branch: &str) -> Result<OptimizeReport> {
        // Whether anything is stale is decided under the write's gates: with
        // nothing to build it writes nothing (not even a sidecar).
        let ran = self
            .run(
                OpKind::Write {
                    branch: branch.to_string(),
                },
                "optimize",
                Some(Arc::new(optimize::OptimizeWork)),
            )
            .await;
        let (commit, manifest_version, summary) = match ran {
            Err(OmniError::AlreadyCurrent) => {
                let snap = self.resolve(&Target::Branch(branch.to_string())).await?;
                (
                    None,
                    snap.manifest.version,
                    serde_json::json!({ "indexes": [] }),
                )
            }
            other => other?,
        };
        Ok(OptimizeReport {
            branch: branch.to_string(),
            commit,
            manifest_version,
            indexes: summary["indexes"].as_array().cloned().unwrap_or_default(),
        })
    }

    /// Resolve a target to one snapshot (for reads that span several calls).
    pub async fn resolve(&self, target: &Target) -> Result<Snapshot> {
        self.inner.graph.snapshot(target).await
    }

    /// Read one Blob cell as `target` sees it. A managed value's reader is
    /// bound to that exact table version: it keeps reading the same bytes
    /// after the branch moves on. An external value is returned as its
    /// reference, without touching the object. A null cell is `NotFound`.
    pub async fn read_blob_at(&self, target: &Target, cell: &BlobCell) -> Result<Blob> {
        blob::read(&self.inner.graph, target, cell).await
    }

    /// The graph's external-blob policy: the URI bases a Blob cell may
    /// reference (none until one is allowed; `file://` only when named).
    pub async fn external_blob_policy(&self) -> Result<BlobPolicy> {
        Ok(external::read_policy(&self.inner.graph.store).await?.1)
    }

    /// Allow external Blob references under `base` from now on.
    pub async fn allow_external_blobs(&self, base: &str) -> Result<BlobPolicy> {
        self.writes("allow external blobs")?;
        external::update_policy(&self.inner.graph.store, |p| {
            p.with_allowed(base).map_err(OmniError::BadRequest)
        })
        .await
    }

    /// Stop allowing new external Blob references under `base` (cells that
    /// already hold one keep it).
    pub async fn revoke_external_blobs(&self, base: &str) -> Result<BlobPolicy> {
        self.writes("revoke external blobs")?;
        external::update_policy(&self.inner.graph.store, |p| {
            p.without(base).map_err(OmniError::BadRequest)
        })
        .await
    }

    pub async fn snapshot(&self, target: &Target) -> Result<SnapshotInfo> {
        let snap = self.resolve(target).await?;
        let mut types = Vec::new();
        for t in &snap.catalog().types {
            let r = snap.table(t)?;
            let table = self.inner.graph.read_table(&snap, t).await?;
            types.push(TableInfo {
                name: t.name.clone(),
                kind: if t.is_edge() { "edge" } else { "node" }.into(),
                rows: table.rows().await?,
                fragments: table.fragments(),
                table_version: r.version,
                lance_branch: r.lance_branch.clone(),
            });
        }
        Ok(SnapshotInfo {
            branch: snap.branch.clone(),
            manifest_version: snap.manifest.version,
            head_commit: snap.record.head.clone(),
            schema_id: snap.schema.id.clone(),
            types,
        })
    }

    /// Where type `type_name`'s table is at `target`: its dataset's URI,
    /// Lance branch and version, for tools that read Lance directly.
    pub async fn table_location(&self, target: &Target, type_name: &str) -> Result<TableLocation> {
        let snap = self.resolve(target).await?;
        let t = snap
            .catalog()
            .get(type_name)
            .ok_or_else(|| OmniError::NotFound(format!("type {type_name:?}")))?;
        let r = snap.table(t)?;
        Ok(TableLocation {
            uri: self.inner.graph.tables.uri(&r.dir),
            lance_branch: r.lance_branch.clone(),
            version: r.version,
        })
    }

    /// Merge branch `source` into `target` as one write: nothing to do
    /// (`UpToDate`), the target becomes the source (`FastForward`), or a
    /// three-way merge commit (`Merged`). The source is pinned at its head
    /// now; a later advance of it is not merged. Any conflict writes nothing
    /// and is `MergeConflicts`, listing them all.
    pub async fn merge(&self, source: &str, target: &str) -> Result<MergeOutcome> {
        self.writes("merge")?;
        if source == target {
            return Err(OmniError::BadRequest(format!(
                "branch '{source}' cannot be merged into itself"
            )));
        }
        let latest = self.inner.graph.manifests.refresh().await?;
        for b in [source, target] {
            if !latest.branches.contains_key(b) {
                return Err(OmniError::NotFound(format!("branch '{b}'")));
            }
        }
        // The source as the manifest just read has it (no second read).
        let pinned = self
            .resolve(&Target::Version {
                version: latest.version,
                branch: source.to_string(),
            })
            .await?;
        let source_head = pinned.record.head.clone();
        let ran = self
            .run(
                OpKind::Write {
                    branch: target.to_string(),
                },
                "merge",
                Some(Arc::new(MergeWork { source: pinned })),
            )
            .await;
        match ran {
            Err(OmniError::AlreadyCurrent) => {
                let snap = self.resolve(&Target::Branch(target.to_string())).await?;
                Ok(MergeOutcome::UpToDate {
                    commit: snap.record.head,
                })
            }
            Err(e) => Err(e),
            Ok((commit, _, summary)) => {
                if summary["fast_forward"].as_bool() == Some(true) {
                    Ok(MergeOutcome::FastForward {
                        commit: source_head,
                    })
                } else {
                    Ok(MergeOutcome::Merged {
                        commit: commit.unwrap_or_default(),
                    })
                }
            }
        }
    }

    /// One commit's record (`NotFound` for an id no published version carries).
    pub async fn commit(&self, id: &str) -> Result<CommitRecord> {
        self.inner
            .graph
            .manifests
            .commit(id)
            .await?
            .ok_or_else(|| OmniError::NotFound(format!("commit {id}")))
    }

    /// The entities commit `id` inserted, updated or deleted on its branch
    /// (a merge commit: on the target), optionally of one type only.
    pub async fn changes(&self, id: &str, type_name: Option<&str>) -> Result<Vec<EntityChange>> {
        let rec = self.commit(id).await?;
        merge::changes::commit_changes(&self.inner.graph, &rec, type_name).await
    }

    /// The commits reachable from a branch head, newest first.
    pub async fn commits(&self, branch: &str, limit: Option<usize>) -> Result<Vec<CommitRecord>> {
        let snap = self.resolve(&Target::Branch(branch.to_string())).await?;
        let mut out = Vec::new();
        let mut next = Some(snap.record.head.clone());
        while let Some(id) = next {
            if limit.is_some_and(|l| out.len() >= l) {
                break;
            }
            let rec = self
                .inner
                .graph
                .manifests
                .commit(&id)
                .await?
                .ok_or_else(|| OmniError::Storage(format!("commit {id} is missing its record")))?;
            next = rec.parents.first().cloned();
            out.push(rec);
        }
        Ok(out)
    }

    /// Run the mutation `name` from `source` on `branch` as one commit.
    pub async fn mutate(
        &self,
        branch: &str,
        source: &str,
        name: &str,
        params: &serde_json::Value,
    ) -> Result<MutationResult> {
        self.mutate_if(branch, source, name, params, None).await
    }

    /// A conditional mutation: it runs only if the branch head is still
    /// `expected_head`; otherwise `PreconditionFailed` and nothing is written
    /// (never retried internally).
    pub async fn mutate_if(
        &self,
        branch: &str,
        source: &str,
        name: &str,
        params: &serde_json::Value,
        expected_head: Option<&str>,
    ) -> Result<MutationResult> {
        self.writes("mutate")?;
        let file = parser::parse(source)?;
        let decl = check::find(&file, name)?;
        // A schema apply between the check and the prepare: check again
        // against the schema it made (once; the text is still at hand).
        let mut attempt = 0;
        let (commit, version, summary) = loop {
            attempt += 1;
            let schema = self.inner.graph.current_schema().await?;
            let plan = mutation::check(&schema.catalog, decl)?;
            let values = params::bind(&plan.name, &plan.params, params)?;
            let work = Arc::new(Pinned {
                schema: schema.id.clone(),
                work: Arc::new(MutationWork::new(
                    plan,
                    values,
                    expected_head.map(str::to_string),
                )),
            });
            let kind = OpKind::Write {
                branch: branch.to_string(),
            };
            match self.run(kind, "mutation", Some(work)).await {
                Err(OmniError::SchemaChanged { .. }) if attempt < MUTATION_COMPILES => continue,
                other => break other?,
            }
        };
        let (nodes, edges) = mutate::counts(&summary);
        self.compact_if_fragmented(branch).await;
        Ok(MutationResult {
            branch: branch.to_string(),
            commit: commit.unwrap_or_default(),
            manifest_version: version,
            nodes,
            edges,
        })
    }

    /// Run the read query `name` from `source` (a `.gq` text) against one
    /// snapshot of `target`, with parameters given as a JSON object.
    pub async fn query(
        &self,
        target: &Target,
        source: &str,
        name: &str,
        params: &serde_json::Value,
    ) -> Result<QueryResult> {
        let (snap, plan) = self.planned(target, source, name).await?;
        let values = params::bind_params(&plan, params)?;
        run::run(&self.ctx(&snap, &values), &plan).await
    }

    /// The snapshot `target` names and the plan of query `name` of `source`
    /// against it (the past type-checks against the schema it accepted).
    /// The text is parsed before the target is resolved, so a bad text is
    /// reported as such whatever the target.
    async fn planned(
        &self,
        target: &Target,
        source: &str,
        name: &str,
    ) -> Result<(Snapshot, Arc<crate::compiler::query::ir::Plan>)> {
        let parsed = self.inner.plans.parsed(source, name)?;
        let snap = self.resolve(target).await?;
        let plan = parsed.plan(&snap.schema.id, snap.catalog())?;
        Ok((snap, plan))
    }

    /// A read of one snapshot with bound parameters.
    fn ctx<'a>(
        &'a self,
        snap: &'a Snapshot,
        params: &'a BTreeMap<String, crate::compiler::value::Value<'static>>,
    ) -> run::Ctx<'a> {
        run::Ctx {
            g: &self.inner.graph,
            snap,
            cache: &self.inner.cache,
            params,
            now_ms: chrono::Utc::now().timestamp_millis(),
            embed: &self.inner.embed,
            search: Default::default(),
            point: Default::default(),
            graphs: Default::default(),
            reads: Default::default(),
            profile: None,
        }
    }

    /// The steps `query` would run, with what each would read (pushed
    /// filters, indexes, where each traversal's adjacency comes from),
    /// without running them.
    pub async fn explain(
        &self,
        target: &Target,
        source: &str,
        name: &str,
        params: &serde_json::Value,
    ) -> Result<Vec<crate::exec::explain::PlanStep>> {
        self.explained(target, source, name, params, false)
            .await
            .map(|(_, steps)| steps)
    }

    /// Run `query`, measuring each step: the result, and the steps with the
    /// rows each produced and the time it took.
    pub async fn query_profiled(
        &self,
        target: &Target,
        source: &str,
        name: &str,
        params: &serde_json::Value,
    ) -> Result<(QueryResult, Vec<crate::exec::explain::PlanStep>)> {
        let (r, steps) = self.explained(target, source, name, params, true).await?;
        Ok((r.expect("a profiled run has a result"), steps))
    }

    async fn explained(
        &self,
        target: &Target,
        source: &str,
        name: &str,
        params: &serde_json::Value,
        run: bool,
    ) -> Result<(Option<QueryResult>, Vec<crate::exec::explain::PlanStep>)> {
        let (snap, plan) = self.planned(target, source, name).await?;
        let values = params::bind_params(&plan, params)?;
        let profile = crate::exec::explain::Profile::default();
        let mut ctx = self.ctx(&snap, &values);
        if !run {
            return Ok((None, ctx.explain(&plan, None).await?));
        }
        ctx.profile = Some(&profile);
        // The plan as it stood before the run (the run caches what it
        // read, which would change what a later look says).
        let before = ctx.explain(&plan, None).await?;
        let started = std::time::Instant::now();
        let result = run::run(&ctx, &plan).await?;
        let total = started.elapsed().as_secs_f64() * 1000.0;
        let mut steps = ctx.explain(&plan, Some(&profile)).await?;
        for (s, b) in steps.iter_mut().zip(before) {
            (s.detail, s.uses) = (b.detail, b.uses);
        }
        let ops: f64 = steps
            .iter()
            .filter(|s| s.depth == 0)
            .filter_map(|s| s.ms)
            .sum();
        if let Some(last) = steps.last_mut() {
            last.rows = Some(result.num_rows());
            last.ms = Some((total - ops).max(0.0));
            last.uses = ctx.reads_made();
        }
        Ok((Some(result), steps))
    }

    /// The same as [`Self::query`] on `branch` as of graph manifest version `version`.
    pub async fn run_query_at(
        &self,
        version: u64,
        branch: &str,
        source: &str,
        name: &str,
        params: &serde_json::Value,
    ) -> Result<QueryResult> {
        let target = Target::Version {
            version,
            branch: branch.to_string(),
        };
        self.query(&target, source, name, params).await
    }

    /// What the runtime cache of graph indexes and columns has done.
    pub fn cache_stats(&self) -> serde_json::Value {
        let mut v = self.inner.cache.stats.snapshot();
        v["bytes"] = serde_json::json!(self.inner.cache.used_bytes());
        v
    }

    /// Write the target's nodes, then edges, as JSONL that loads back into an
    /// identical graph. Returns the number of lines written.
    pub async fn export(
        &self,
        target: &Target,
        out: &mut (dyn std::io::Write + Send),
    ) -> Result<usize> {
        let snap = self.resolve(target).await?;
        self.export_snapshot(&snap, None, out).await
    }

    /// [`Self::export`] of a snapshot already resolved, of the types `only`
    /// names (an unknown one is refused before anything is written).
    pub async fn export_snapshot(
        &self,
        snap: &Snapshot,
        only: Option<&[String]>,
        out: &mut (dyn std::io::Write + Send),
    ) -> Result<usize> {
        // Boxed: Lance's scan futures nest deep enough that a caller's own
        // async fn could otherwise overflow the compiler's layout query depth.
        Box::pin(export::export(&self.inner.graph, snap, only, out)).await
    }
}
