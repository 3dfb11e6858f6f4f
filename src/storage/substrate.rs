//! The Lance substrate: carries out the protocol actors' storage requests
//! against one graph. It also keeps the per-operation context a write needs
//! (what to prepare, what it staged, why it was rejected), so the protocol
//! itself only ever handles references.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use lance::Dataset;
use lance::dataset::transaction::Transaction;
use parking_lot::Mutex;
use tracing::{debug, warn};

use super::locks::ProcessLocks;
use super::manifest::{BranchRecord, ChangeNote, Claim, CommitRecord, MAIN, Manifest, TableRef};
use super::tables::{Table, TableChange};
use super::{GraphStorage, Snapshot, sidecar};
use crate::compiler::catalog::{Catalog, TypeDef};
use crate::error::{OmniError, Result};
use omnigraph_actors::host::Substrate;
use omnigraph_actors::*;

pub type BoxFut<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// How many times a publish re-reads the manifest after losing its
/// create-if-absent to another process (each loss means someone else
/// published; the expected-head check decides whether we still may).
const MAX_PUBLISH_CAS_ATTEMPTS: u32 = 64;

/// What a write does, run by the `Prepare` step against a snapshot. It may
/// read the snapshot and stage transactions; it must not publish anything.
pub trait PrepareWork: Send + Sync + 'static {
    fn prepare<'a>(&'a self, cx: &'a mut PrepareCx) -> BoxFut<'a, Result<Prepared>>;
}

/// A write compiled against one schema (a mutation's plan, a load's typed
/// batches): it prepares only over that schema. A schema apply between
/// its compile and its prepare makes it `SchemaChanged`, before it reads
/// or stages anything.
pub struct Pinned {
    pub schema: String,
    pub work: Arc<dyn PrepareWork>,
}

impl PrepareWork for Pinned {
    fn prepare<'a>(&'a self, cx: &'a mut PrepareCx) -> BoxFut<'a, Result<Prepared>> {
        Box::pin(async move {
            if cx.snapshot.schema.id != self.schema {
                return Err(OmniError::SchemaChanged {
                    compiled: self.schema.clone(),
                    accepted: cx.snapshot.schema.id.clone(),
                });
            }
            self.work.prepare(cx).await
        })
    }
}

/// Where one graph branch's table lives (see `physical`).
struct Physical {
    dir: String,
    lance_branch: Option<String>,
}

/// The result of a successful prepare.
pub struct Prepared {
    pub class: WriteClass,
    /// Recorded in the commit record and returned to the caller.
    pub summary: serde_json::Value,
    /// A merge's other side, published with the commit.
    pub merge: Option<MergeOf>,
    /// A schema apply's change, published with the commit.
    pub schema_change: Option<SchemaChange>,
}

struct StagedTable {
    /// The graph branch whose line it is staged on.
    branch: String,
    key: String,
    dir: String,
    lance_branch: Option<String>,
    base: Arc<Dataset>,
    txns: Vec<Transaction>,
    /// The rows its new fragments will hold, in order, when the write
    /// knows them (see `Tables::appended`).
    appended: Option<Arc<arrow_array::RecordBatch>>,
}

/// A gate lease's read, started ahead of taking it: the tags found free.
type LeaseRead = tokio::task::JoinHandle<Vec<(String, String)>>;

/// The view a [`PrepareWork`] gets: the snapshot it runs against, and the
/// means to stage one transaction per table it changes.
pub struct PrepareCx {
    pub graph: Arc<GraphStorage>,
    pub snapshot: Snapshot,
    /// This process's incarnation: files the write puts outside any table
    /// carry it, so that collection can ask whether their writer lives.
    pub writer: String,
    op: OpId,
    attempt: u32,
    staged: BTreeMap<String, StagedTable>,
    /// Reads of the gate leases the write will take, started as it finds
    /// its tables (beside their reads) and awaited when it is prepared.
    lease_reads: Mutex<Vec<LeaseRead>>,
    locks: Arc<ProcessLocks>,
}

impl PrepareCx {
    /// The catalog of the schema the snapshot's graph version accepted.
    pub fn catalog(&self) -> &Catalog {
        self.snapshot.catalog()
    }

    pub fn branch(&self) -> &str {
        &self.snapshot.branch
    }

    /// A table as the snapshot sees it (for reads and probes).
    pub async fn read(&self, t: &TypeDef) -> Result<Table> {
        self.graph.read_table(&self.snapshot, t).await
    }

    /// The dataset to stage a change to `t` against. On a branch that still
    /// shares the table with its parent this forks it first (invisible until
    /// published); the version returned is the base the commit must land on.
    pub async fn target(&self, t: &TypeDef) -> Result<Table> {
        self.target_on(&self.snapshot.branch, &self.snapshot.record, t)
            .await
    }

    /// [`Self::target`] on another branch of the same manifest version
    /// (a schema apply stages on every branch).
    pub async fn target_on(&self, branch: &str, rec: &BranchRecord, t: &TypeDef) -> Result<Table> {
        let key = t.table_key();
        let gate = Addr::Table(TableKey::new(branch.to_string(), key.clone()));
        self.lease_reads.lock().extend(self.locks.read_ahead(&gate));
        let r = rec.tables.get(&key).ok_or_else(|| {
            OmniError::Storage(format!("branch '{branch}' has no table for {}", t.name))
        })?;
        let own = rec.line(branch, &key);
        if r.lance_branch == own {
            return Ok(Table(self.graph.tables.open(r).await?));
        }
        let own = own.ok_or_else(|| {
            OmniError::Storage(format!(
                "{} on {branch} names another branch's table but the branch has no line to fork it onto",
                t.name
            ))
        })?;
        Ok(Table(self.graph.tables.ensure_fork(r, &own).await?))
    }

    /// Stage `txn` (built against `base` from [`Self::target`]) as this write's
    /// change to `t`. One transaction per table.
    pub fn stage(&mut self, t: &TypeDef, base: Table, change: TableChange) -> Result<()> {
        let (branch, rec) = (self.snapshot.branch.clone(), self.snapshot.record.clone());
        self.stage_on(&branch, &rec, t, base, change)
    }

    /// [`Self::stage`] on another branch (from [`Self::target_on`]).
    pub fn stage_on(
        &mut self,
        branch: &str,
        rec: &BranchRecord,
        t: &TypeDef,
        Table(base): Table,
        TableChange(mut txns): TableChange,
    ) -> Result<()> {
        let key = t.table_key();
        let slot = format!("{key}@{branch}");
        if self.staged.contains_key(&slot) {
            return Err(OmniError::Storage(format!(
                "{} staged twice on {branch} in one write",
                t.name
            )));
        }
        let dir = rec
            .tables
            .get(&key)
            .ok_or_else(|| {
                OmniError::Storage(format!("branch '{branch}' has no table for {}", t.name))
            })?
            .dir
            .clone();
        // The last transaction names the change; earlier steps are
        // `<name>.<step>` (recovery finds a chain by its name). Unique per
        // branch too: a schema apply changes one type on many lines.
        let name = if branch == self.snapshot.branch {
            format!("{}-{}-{}", self.op.0, self.attempt, t.id)
        } else {
            format!("{}-{}-{}-{branch}", self.op.0, self.attempt, t.id)
        };
        let last = txns.len() - 1;
        for (k, txn) in txns.iter_mut().enumerate() {
            txn.uuid = if k == last {
                name.clone()
            } else {
                format!("{name}.{k}")
            };
        }
        self.staged.insert(
            slot,
            StagedTable {
                branch: branch.to_string(),
                key,
                dir,
                lance_branch: rec.line(branch, &t.table_key()),
                base,
                txns,
                appended: None,
            },
        );
        Ok(())
    }

    /// Say which rows the change just staged for `t` on the snapshot's
    /// branch appends, in the order its new fragments hold them: the
    /// process keeps them with the version the commit makes, so that a
    /// read of that version's change needs no read of them. Only for a
    /// change that appends exactly these rows, in this order.
    pub fn staged_rows(&mut self, t: &TypeDef, rows: arrow_array::RecordBatch) {
        let slot = format!("{}@{}", t.table_key(), self.snapshot.branch);
        if rows.num_rows() <= crate::storage::tables::APPENDED_ROWS_MAX
            && let Some(s) = self.staged.get_mut(&slot)
        {
            s.appended = Some(Arc::new(rows));
        }
    }

    pub fn staged_tables(&self) -> usize {
        self.staged.len()
    }
}

/// Per-operation state kept beside the protocol.
#[derive(Default)]
pub struct OpCtx {
    work: Option<Arc<dyn PrepareWork>>,
    kind: String,
    /// The write's author, recorded in its commit.
    actor: String,
    staged: BTreeMap<String, StagedTable>,
    pub error: Option<OmniError>,
    pub summary: serde_json::Value,
}

/// Where the fault-injection hook stops the writer (tests and chaos only).
#[cfg(feature = "fault-injection")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashPoint {
    /// When the sidecar is about to be written (it is not): a lazy fork
    /// made during prepare exists, nothing else does.
    BeforeSidecarWrite,
    AfterSidecarWrite,
    /// After the n-th table commit (1-based) of the process has landed,
    /// and before any later one does: a write's table commits go out
    /// together, so the later ones wait for the n-th and then find the
    /// process halted.
    AfterTableCommit(u32),
    AfterPublish,
    /// After recovery restored a table, before it re-points the branch.
    AfterRestore,
}

/// The kind of a commit published by recovery for a write whose process is
/// gone (this process has no context for its operation).
const RECOVERED_KIND: &str = "recovered";

/// A table commit held between its lease check and the commit itself (a
/// process paused at that point): `reached` is notified once it is held,
/// and it goes on once `go` is notified. Whether it renews its lease
/// meanwhile is the test's choice.
#[cfg(feature = "fault-injection")]
#[derive(Clone)]
pub struct CommitHold {
    pub reached: Arc<tokio::sync::Notify>,
    pub go: Arc<tokio::sync::Notify>,
    pub renew: bool,
}

#[cfg(feature = "fault-injection")]
#[derive(Default)]
struct Faults {
    /// Stall this long (with the lease unrenewed) between the last lease
    /// check and the publish: a process paused at the worst moment.
    stall_before_publish: Option<std::time::Duration>,
    /// Hold the next table commit right after its lease check, with the
    /// lease unrenewed, until the test lets it go.
    hold_before_commit: Option<CommitHold>,
    crash_at: Option<CrashPoint>,
    commits: u32,
    halted: bool,
    /// Every write lingers this long after its sidecar is written and
    /// after each table commit (its lease renewed): a process whose
    /// commits are slow, so that a harness's kill lands inside one.
    dwell_inside_commit: Option<std::time::Duration>,
}

/// Point `rec` (branch `name`) at the source's version of each table in
/// `adopt`, and move the branch to a fresh line for it (`<name>-v<version>`,
/// unique per manifest version): its old line keeps the branch's past (or
/// holds a fork of the table it shared before, which must not be reused),
/// and the next write forks the adopted version onto the new one.
fn adopt(
    rec: &mut BranchRecord,
    name: &str,
    src: &BranchRecord,
    adopt: &[String],
    version: u64,
) -> Result<()> {
    for key in adopt {
        let theirs = src
            .tables
            .get(key)
            .ok_or_else(|| OmniError::Storage(format!("the merge source has no table {key}")))?
            .clone();
        if theirs.lance_branch != rec.line(name, key) {
            rec.lines.insert(key.clone(), format!("{name}-v{version}"));
        }
        rec.tables.insert(key.clone(), theirs);
    }
    Ok(())
}

/// A table line's identity in gate views: its folder (a table made again
/// by a schema apply has a new one) and its Lance branch.
fn line_id(dir: &str, lance_branch: Option<&str>) -> String {
    format!("{dir}@{}", lance_branch.unwrap_or(""))
}

/// A commit record written beside its write's sidecar.
struct EarlyRecord {
    commit: String,
    tag: String,
    version: u64,
}

pub struct LanceSubstrate {
    g: Arc<GraphStorage>,
    ops: Mutex<HashMap<OpId, OpCtx>>,
    /// Records of branches deleted by this process, for reclaiming storage.
    deleted: Mutex<HashMap<String, BranchRecord>>,
    actor: String,
    /// This process's cross-process gate locks and liveness lock.
    locks: Arc<ProcessLocks>,
    /// Dead owners whose intents this process has fenced.
    fenced: Mutex<std::collections::HashSet<String>>,
    /// Commit records written beside their write's sidecar, by operation:
    /// the commit, the record's entity tag and the graph version it names.
    /// The publish then waits for no record write of its own; it rewrites
    /// the record only when it lands on another version.
    early_records: Mutex<HashMap<OpId, EarlyRecord>>,
    /// How long a gate owner keeps a lock after its last lease (see
    /// `locks::LOCK_LINGER_MS`).
    linger: std::time::Duration,
    /// The sidecars listed while the process's liveness lease was written:
    /// the recovery scan's listing, taken by its first `ListSidecars`.
    listed_at_start: Mutex<Option<Vec<(Intent, String)>>>,
    #[cfg(feature = "fault-injection")]
    faults: Mutex<Faults>,
}

impl LanceSubstrate {
    pub async fn new(
        g: Arc<GraphStorage>,
        actor: String,
        gate_wait: std::time::Duration,
        lease: std::time::Duration,
        linger: std::time::Duration,
    ) -> Result<Self> {
        // The recovery scan's listing of sidecars goes out beside the
        // liveness lease (see `list_sidecars`).
        let (locks, listed) = futures::join!(
            ProcessLocks::with_lease(&g.store, crate::util::ulid::new_ulid(), lease),
            sidecar::list(&g.store)
        );
        let locks = locks?.with_wait_limit(gate_wait);
        Ok(Self {
            g,
            ops: Mutex::new(HashMap::new()),
            deleted: Mutex::new(HashMap::new()),
            actor,
            locks: Arc::new(locks),
            fenced: Mutex::new(Default::default()),
            early_records: Mutex::new(HashMap::new()),
            linger,
            listed_at_start: Mutex::new(listed.ok()),
            #[cfg(feature = "fault-injection")]
            faults: Mutex::new(Faults::default()),
        })
    }

    /// This process's locks: released when the handle closes, so other
    /// processes see its intents as its writer's to finish no longer.
    pub fn locks(&self) -> &ProcessLocks {
        &self.locks
    }

    pub fn graph(&self) -> &Arc<GraphStorage> {
        &self.g
    }

    pub fn register(
        &self,
        op: &OpId,
        kind: &str,
        work: Option<Arc<dyn PrepareWork>>,
        actor: Option<&str>,
    ) {
        self.ops.lock().insert(
            op.clone(),
            OpCtx {
                work,
                kind: kind.to_string(),
                actor: actor.unwrap_or(&self.actor).to_string(),
                ..Default::default()
            },
        );
    }

    /// Is any write of this process between its start and its end?
    pub fn writes_in_flight(&self) -> bool {
        !self.ops.lock().is_empty()
    }

    /// Take an operation's context once it has finished.
    pub fn finish(&self, op: &OpId) -> OpCtx {
        self.ops.lock().remove(op).unwrap_or_default()
    }

    /// A storage failure after a write's first effect: the write is left
    /// to recovery, and its caller hears the store's error (an outage is a
    /// storage error, whichever request met it first).
    fn note_outage(&self, op: &OpId, what: &str) {
        if let Some(c) = self.ops.lock().get_mut(op)
            && c.error.is_none()
        {
            c.error = Some(OmniError::Storage(what.to_string()));
        }
    }

    #[cfg(feature = "fault-injection")]
    pub fn crash_at(&self, point: CrashPoint) {
        let mut f = self.faults.lock();
        f.crash_at = Some(point);
        f.commits = 0;
    }

    /// Linger inside every commit from now on (see `Faults`).
    #[cfg(feature = "fault-injection")]
    pub fn dwell_inside_commit(&self, d: std::time::Duration) {
        self.faults.lock().dwell_inside_commit = Some(d);
    }

    /// Stall the next publish (tests of a lease taken over from a slow writer).
    #[cfg(feature = "fault-injection")]
    pub fn stall_before_publish(&self, d: std::time::Duration) {
        self.faults.lock().stall_before_publish = Some(d);
    }

    /// Hold the next table commit after its lease check (see [`CommitHold`]).
    #[cfg(feature = "fault-injection")]
    pub fn hold_before_commit(&self, renew: bool) -> CommitHold {
        let hold = CommitHold {
            reached: Arc::new(tokio::sync::Notify::new()),
            go: Arc::new(tokio::sync::Notify::new()),
            renew,
        };
        self.faults.lock().hold_before_commit = Some(hold.clone());
        hold
    }

    #[cfg(feature = "fault-injection")]
    async fn hold_if_asked(&self) {
        let hold = self.faults.lock().hold_before_commit.take();
        if let Some(h) = hold {
            self.locks.pause_renewal(!h.renew);
            h.reached.notify_one();
            h.go.notified().await;
            self.locks.pause_renewal(false);
        }
    }

    #[cfg(feature = "fault-injection")]
    async fn stall_if_asked(&self) {
        let stall = self.faults.lock().stall_before_publish.take();
        if let Some(d) = stall {
            self.locks.pause_renewal(true);
            tokio::time::sleep(d).await;
            self.locks.pause_renewal(false);
        }
    }

    #[cfg(feature = "fault-injection")]
    pub fn halted(&self) -> bool {
        self.faults.lock().halted
    }

    /// A physical table in a manifest already read: its folder and the
    /// Lance branch the graph branch writes on (`None`: the branch, or its
    /// table, is gone).
    fn physical(&self, latest: &Manifest, table: &TableKey) -> Result<Option<Physical>> {
        let Some(rec) = latest.branches.get(&table.branch) else {
            return Ok(None);
        };
        Ok(rec.tables.get(&table.table).map(|r| Physical {
            dir: r.dir.clone(),
            lance_branch: rec.line(&table.branch, &table.table),
        }))
    }

    /// A schema apply's publish. The schema it replaces must still be the
    /// accepted one, over exactly the graph version it was validated
    /// against (the exclusive schema gate and the roll-forward verdict see
    /// to it; this is the last word). Every branch then takes the new
    /// schema's tables, and its head moves to this version: its state now
    /// has another schema, so a write that captured it before re-prepares.
    async fn accept_schema(
        &self,
        latest: &Manifest,
        next: &mut Manifest,
        s: &SchemaChange,
    ) -> Result<()> {
        if latest.schema != s.from || !self.graph_as_at(latest, s.manifest).await? {
            return Err(OmniError::Storage(format!(
                "the graph moved under the schema apply: it was validated against schema {} at graph version {}, the graph is at {} with schema {}",
                s.from, s.manifest, latest.version, latest.schema
            )));
        }
        let from = self.g.schema(&s.from).await?;
        let to = self.g.schema(&s.to).await?;
        for rec in next.branches.values_mut() {
            super::retarget(rec, &from.catalog, &to.catalog, &s.created);
            rec.updated_at = next.version;
        }
        next.schema = s.to.clone();
        Ok(())
    }

    /// Is the graph at `latest` in the state it had at version `v`? Later
    /// versions that changed no branch and no schema (a lease takeover's
    /// fence) leave it so.
    async fn graph_as_at(&self, latest: &Manifest, v: u64) -> Result<bool> {
        if latest.version == v {
            return Ok(true);
        }
        // A version a cleanup removed was not the newest: the graph moved.
        let then = match self.g.manifests.at(v).await {
            Err(OmniError::NotFound(_)) => return Ok(false),
            other => other?,
        };
        Ok(then.schema == latest.schema && then.branches == latest.branches)
    }

    /// A branch head as storage has it now: other processes publish too.
    async fn read_head(&self, branch: &str) -> Result<Option<Head>> {
        let latest = self.g.manifests.refresh().await?;
        Ok(latest.branches.get(branch).map(|r| Head {
            commit: CommitId(r.head.clone()),
            version: r.updated_at,
        }))
    }

    /// A table gate's view, read from storage (never from a cache: other
    /// processes commit too): the latest version of the branch's own
    /// physical table beside the version the latest manifest names for it.
    async fn table_view(&self, table: &TableKey) -> Result<TableView> {
        // The table's line as this process last knew it: its versions are
        // probed from there while the manifest is read (both after the
        // gate's lock), one round trip for the two. A line the manifest
        // has moved since (a fork published, a schema apply) is probed
        // again.
        let line_of = |m: &Manifest| {
            let rec = m.branches.get(&table.branch)?;
            let r = rec.tables.get(&table.table)?;
            Some((
                r.dir.clone(),
                rec.line(&table.branch, &table.table),
                r.version,
            ))
        };
        let guess = self.g.manifests.known().and_then(|m| line_of(&m));
        let (latest, early) = match &guess {
            Some((dir, own, from)) => {
                let (m, top) = futures::join!(
                    self.g.manifests.refresh(),
                    self.g.tables.probe_latest(dir, own.as_deref(), *from)
                );
                (m?, Some(top))
            }
            None => (self.g.manifests.refresh().await?, None),
        };
        let gone = TableView {
            latest: None,
            named: None,
            published: false,
            line: None,
        };
        let Some(rec) = latest.branches.get(&table.branch) else {
            return Ok(gone);
        };
        let own = rec.line(&table.branch, &table.table);
        let Some(r) = rec.tables.get(&table.table) else {
            return Ok(gone);
        };
        let published = r.lance_branch == own;
        // An unpublished fork starts at the version the branch references,
        // so the probe starts there either way.
        let same_line = guess
            .as_ref()
            .is_some_and(|(dir, line, _)| *dir == r.dir && *line == own);
        let top = match early {
            Some(Ok(top)) if same_line && top >= Some(r.version) => top,
            _ => {
                self.g
                    .tables
                    .probe_latest(&r.dir, own.as_deref(), r.version)
                    .await?
            }
        };
        Ok(TableView {
            latest: top,
            named: Some(r.version),
            published,
            line: Some(line_id(&r.dir, own.as_deref())),
        })
    }

    /// Remove the Lance branch of a fork the manifest does not name.
    async fn drop_fork(&self, table: &TableKey) -> Result<()> {
        let view = self.table_view(table).await?;
        if view.published || view.latest.is_none() {
            return Ok(());
        }
        // The manifest version the view just read.
        let latest = self.g.manifests.latest().await?;
        let Some(p) = self.physical(&latest, table)? else {
            return Ok(());
        };
        let own = p
            .lance_branch
            .ok_or_else(|| OmniError::Storage("main has no forks".into()))?;
        self.g.tables.drop_branch(&p.dir, &own).await
    }

    async fn prepare(&self, op: OpId, attempt: u32, branch: String, head: Head) -> IoOut {
        let work = {
            let mut ops = self.ops.lock();
            let Some(ctx) = ops.get_mut(&op) else {
                return IoOut::Prepared(Err(Some(format!("unknown operation {op}"))));
            };
            ctx.staged.clear();
            ctx.work.clone()
        };
        let Some(work) = work else {
            return IoOut::Prepared(Err(Some(format!("operation {op} has nothing to prepare"))));
        };
        let at = super::Target::Version {
            version: head.version,
            branch: branch.clone(),
        };
        // A cleanup keeps every branch's head version, so a removed one is
        // no longer the head: prepare on the head now, and the recheck
        // under the gates sees the move.
        let snapshot = match self.g.snapshot(&at).await {
            Err(OmniError::VersionExpired { .. }) => {
                self.g
                    .snapshot(&super::Target::Branch(branch.clone()))
                    .await
            }
            other => other,
        };
        let snapshot = match snapshot {
            Ok(s) => s,
            Err(e) => return IoOut::Prepared(Err(Some(e.to_string()))),
        };
        // The branch gate's lease is read beside the prepare's reads, as
        // are its tables' (`PrepareCx::target_on`).
        let lease_reads = self
            .locks
            .read_ahead(&Addr::Branch(branch.clone()))
            .into_iter()
            .collect::<Vec<_>>();
        let mut cx = PrepareCx {
            graph: self.g.clone(),
            snapshot,
            writer: self.locks.incarnation().to_string(),
            op: op.clone(),
            attempt,
            staged: BTreeMap::new(),
            lease_reads: Mutex::new(lease_reads),
            locks: self.locks.clone(),
        };
        let result = work.prepare(&mut cx).await;
        let reads = std::mem::take(&mut *cx.lease_reads.lock());
        for read in reads {
            if let Ok(free) = read.await {
                self.locks.known_free(free);
            }
        }
        let mut ops = self.ops.lock();
        let Some(ctx) = ops.get_mut(&op) else {
            return IoOut::Prepared(Err(Some(format!("operation {op} vanished"))));
        };
        match result {
            Ok(prepared) => {
                let tables = cx
                    .staged
                    .iter()
                    .map(|(name, s)| TablePlan {
                        table: TableKey::new(s.branch.clone(), s.key.clone()),
                        base: s.base.version().version,
                        line: Some(line_id(&s.dir, s.lance_branch.as_deref())),
                        staged: StagedRef(name.clone()),
                        txn: s.txns.last().expect("a change").uuid.clone(),
                    })
                    .collect();
                ctx.staged = cx.staged;
                ctx.summary = prepared.summary.clone();
                ctx.error = None;
                // A schema apply was prepared over the latest schema; every
                // other write over its snapshot's.
                let schema = match &prepared.schema_change {
                    Some(s) => s.from.clone(),
                    None => cx.snapshot.schema.id.clone(),
                };
                IoOut::Prepared(Ok(Plan {
                    commit: CommitId(crate::util::ulid::new_ulid()),
                    schema,
                    class: prepared.class,
                    tables,
                    merge: prepared.merge,
                    schema_change: prepared.schema_change,
                }))
            }
            Err(e) => {
                debug!(op = %op, error = %e, "prepare rejected the write");
                ctx.error = Some(e);
                IoOut::Prepared(Err(None))
            }
        }
    }

    async fn commit_table(&self, op: &OpId, table: &TableKey, staged: &StagedRef) -> CommitResult {
        if let Err(e) = self.locks.valid() {
            // Nothing committed: the staged data stays unreferenced.
            return CommitResult::Unknown(e);
        }
        let taken = {
            let mut ops = self.ops.lock();
            ops.get_mut(op).and_then(|c| c.staged.remove(&staged.0))
        };
        let Some(s) = taken else {
            return CommitResult::Conflict(format!("nothing staged for {table:?}"));
        };
        #[cfg(feature = "fault-injection")]
        self.hold_if_asked().await;
        self.g
            .tables
            .commit(
                &s.dir,
                s.lance_branch.as_deref(),
                s.base,
                s.txns,
                s.appended,
            )
            .await
    }

    async fn restore(&self, table: &TableKey, to: u64) -> Result<u64> {
        // A restore changes a table as a commit does: only under a lease
        // (its own request is pinned to the version it read, like a commit).
        self.locks
            .valid()
            .map_err(|reason| OmniError::LeaseLost { reason })?;
        let latest = self.g.manifests.refresh().await?;
        let p = self
            .physical(&latest, table)?
            .ok_or_else(|| OmniError::NotFound(format!("branch '{}'", table.branch)))?;
        self.g
            .tables
            .restore(&p.dir, p.lance_branch.as_deref(), to)
            .await
    }

    async fn inspect(&self, intent: &Intent) -> Result<Inspection> {
        let latest = self.g.manifests.refresh().await?;
        let rec = latest.branches.get(&intent.branch);
        let published = rec.is_some_and(|r| r.head == intent.commit.0)
            || self.g.manifests.commit(&intent.commit.0).await?.is_some();
        let head = rec.map(|r| Head {
            commit: CommitId(r.head.clone()),
            version: r.updated_at,
        });
        let mut landed = Vec::new();
        let mut latest_versions = Vec::new();
        for t in &intent.tables {
            match self.physical(&latest, &t.table)? {
                Some(p) => {
                    let (l, top) = self
                        .g
                        .tables
                        .find_landed(&p.dir, p.lance_branch.as_deref(), t.base, &t.txn)
                        .await?;
                    landed.push(l);
                    latest_versions.push(top);
                }
                None => {
                    landed.push(None);
                    latest_versions.push(None);
                }
            }
        }
        Ok(Inspection {
            sidecar: sidecar::exists(&self.g.store, &intent.op).await?,
            published,
            head,
            landed,
            latest: latest_versions,
            validated_graph_current: match &intent.schema_change {
                Some(s) => self.graph_as_at(&latest, s.manifest).await?,
                None => true,
            },
        })
    }

    /// Apply a change to the latest manifest and publish it as the next
    /// version. The branch head must still be `expected`.
    // Kept whole: each attempt's order (re-read, check the head and the
    // tables, build, compare-and-swap, classify the outcome) is the
    // protocol's publish step, and reads best top to bottom.
    async fn publish(&self, req: PublishReq) -> PublishResult {
        // A create-if-absent lost to another process: re-read and try again
        // (bounded); the expected-head check decides whether we may.
        let early = self.early_records.lock().remove(&req.op);
        let early = early.filter(
            |e| matches!(&req.change, Change::Commit { commit, .. } if commit.0 == e.commit),
        );
        let (mut record_tag, mut claimed_at) = match early {
            Some(e) => (Some(e.tag), Some(e.version)),
            None => (None, None),
        };
        for attempt in 0..MAX_PUBLISH_CAS_ATTEMPTS {
            // A commit's first try builds on the newest version this process
            // knows, without reading: its writer read the branch head under
            // the branch gate just now, and a version published since makes
            // the compare-and-swap fail (versions are contiguous), after
            // which the manifest is read. Every other change reads first.
            let known = attempt == 0 && matches!(req.change, Change::Commit { .. });
            let latest = match if known {
                self.g.manifests.latest().await
            } else {
                self.g.manifests.refresh().await
            } {
                Ok(m) => m,
                Err(e) => return PublishResult::Unknown(e.to_string()),
            };
            // A process whose lease was taken over must not publish: its
            // intent is another process's to resolve now. Checked after the
            // base was read: a takeover after this check comes with a fence
            // version, which this compare-and-swap then loses, and the retry
            // stops here.
            if let Err(e) = self.locks.valid() {
                return PublishResult::Unknown(e);
            }
            let current = latest.branches.get(&req.branch);
            let actual = current.map(|r| Head {
                commit: CommitId(r.head.clone()),
                version: r.updated_at,
            });
            if actual != req.expected {
                return PublishResult::HeadMoved { actual };
            }
            let (next, commit) = match self.apply(&latest, &req).await {
                Ok(x) => x,
                Err(e) => return PublishResult::Refused(e.to_string()),
            };
            if matches!(req.change, Change::Repoint { .. })
                && next
                    .branches
                    .iter()
                    .all(|(n, r)| latest.branches.get(n).map(|l| &l.tables) == Some(&r.tables))
            {
                // Only unpublished forks were restored: nothing to record.
                return PublishResult::Published {
                    version: latest.version,
                    head: actual,
                };
            }
            #[cfg(feature = "fault-injection")]
            self.stall_if_asked().await;
            if let Some(c) = &commit
                && claimed_at != Some(c.manifest_version)
            {
                let recovered = c.kind == RECOVERED_KIND;
                match self
                    .g
                    .manifests
                    .claim_record(c, record_tag.as_deref(), recovered)
                    .await
                {
                    Ok(Claim::Mine(tag)) => {
                        record_tag = Some(tag);
                        claimed_at = Some(c.manifest_version);
                    }
                    Ok(Claim::Published) => {
                        return PublishResult::Unknown(format!(
                            "commit {} was published by another process",
                            c.id
                        ));
                    }
                    Ok(Claim::Taken) => {
                        return PublishResult::Unknown(format!(
                            "another process is publishing commit {}",
                            c.id
                        ));
                    }
                    Err(e) => return PublishResult::Unknown(e.to_string()),
                }
            }
            match self.g.manifests.publish_version(&next).await {
                Ok(true) => {
                    if matches!(req.change, Change::DeleteBranch)
                        && let Some(rec) = current
                    {
                        self.deleted.lock().insert(req.branch.clone(), rec.clone());
                    }
                    let head = next.branches.get(&req.branch).map(|r| Head {
                        commit: CommitId(r.head.clone()),
                        version: r.updated_at,
                    });
                    return PublishResult::Published {
                        version: next.version,
                        head,
                    };
                }
                Ok(false) => {
                    warn!(op = %req.op, "lost a manifest compare-and-swap; re-reading");
                    continue;
                }
                Err(e) => return PublishResult::Unknown(e.to_string()),
            }
        }
        PublishResult::Unknown("manifest publish kept losing races".into())
    }

    /// The record of `op`'s commit on `branch` over `parent`, as graph
    /// version `version` carries it.
    fn commit_record(
        &self,
        op: &OpId,
        branch: &str,
        commit: &CommitId,
        parent: String,
        merge: Option<&MergeOf>,
        version: u64,
    ) -> CommitRecord {
        let (kind, summary, actor) = match self.ops.lock().get(op) {
            Some(c) => (c.kind.clone(), c.summary.clone(), c.actor.clone()),
            None => (
                RECOVERED_KIND.to_string(),
                serde_json::Value::Null,
                self.actor.clone(),
            ),
        };
        let mut parents = vec![parent];
        parents.extend(merge.map(|m| m.head.commit.0.clone()));
        CommitRecord {
            id: commit.0.clone(),
            parents,
            branch: branch.to_string(),
            manifest_version: version,
            actor,
            timestamp: chrono::Utc::now().to_rfc3339(),
            kind,
            summary,
            expired: false,
        }
    }

    /// Write the commit record of a write's intent beside its sidecar, for
    /// the graph version after the newest this process knows (its publish
    /// lands there unless another publish comes first). A record is
    /// trusted only once the version it names carries its commit, so one
    /// written early, or left by a write that failed, misleads nobody.
    /// Best effort: without it the publish writes the record itself.
    async fn write_early_record(&self, intent: &Intent) {
        if intent.merge.as_ref().is_some_and(|m| m.fast_forward)
            || !self.ops.lock().contains_key(&intent.op)
        {
            return;
        }
        let Some(known) = self.g.manifests.known() else {
            return;
        };
        let version = known.version + 1;
        let rec = self.commit_record(
            &intent.op,
            &intent.branch,
            &intent.commit,
            intent.expected.commit.0.clone(),
            intent.merge.as_ref(),
            version,
        );
        if let Ok(Some(tag)) = self.g.manifests.create_record(&rec).await {
            let early = EarlyRecord {
                commit: intent.commit.0.clone(),
                tag,
                version,
            };
            self.early_records.lock().insert(intent.op.clone(), early);
        }
    }

    // One arm per kind of change a publish carries; each arm is the whole
    // rule for that kind.
    async fn apply(
        &self,
        latest: &Manifest,
        req: &PublishReq,
    ) -> Result<(Manifest, Option<CommitRecord>)> {
        let version = latest.version + 1;
        let mut next = latest.clone();
        next.version = version;
        let mut commit_record = None;
        let (kind, commit) = match &req.change {
            Change::Commit {
                commit,
                tables,
                merge,
                schema_change,
            } => {
                // The source's state as the merge pinned it (an immutable
                // manifest version, so a source that moved or was deleted
                // since changes nothing).
                let source = match merge {
                    Some(m) => Some(
                        self.g
                            .manifests
                            .at(m.head.version)
                            .await?
                            .branch(&m.source)?
                            .clone(),
                    ),
                    None => None,
                };
                for (key, v) in tables {
                    let rec = next.branches.get_mut(&key.branch).ok_or_else(|| {
                        OmniError::Storage(format!("branch '{}' is gone", key.branch))
                    })?;
                    let named = rec.tables.get(&key.table).ok_or_else(|| {
                        OmniError::Storage(format!(
                            "branch '{}' has no table {}",
                            key.branch, key.table
                        ))
                    })?;
                    let line = rec.line(&key.branch, &key.table);
                    let manifest_size =
                        self.g.tables.manifest_size(&named.dir, line.as_deref(), *v);
                    let r = TableRef {
                        dir: named.dir.clone(),
                        lance_branch: line,
                        version: *v,
                        incarnation: named.incarnation,
                        manifest_size,
                    };
                    rec.tables.insert(key.table.clone(), r);
                }
                if let Some(s) = schema_change {
                    self.accept_schema(latest, &mut next, s).await?;
                }
                let rec = next.branches.get_mut(&req.branch).expect("head checked");
                let parent = rec.head.clone();
                if let (Some(m), Some(src)) = (merge, &source) {
                    adopt(rec, &req.branch, src, &m.adopt, version)?;
                }
                rec.updated_at = version;
                if let Some(m) = merge.as_ref().filter(|m| m.fast_forward) {
                    // The head moves to the source's commit: no new commit.
                    rec.head = m.head.commit.0.clone();
                    ("fast_forward", None)
                } else {
                    rec.head = commit.0.clone();
                    commit_record = Some(self.commit_record(
                        &req.op,
                        &req.branch,
                        commit,
                        parent,
                        merge.as_ref(),
                        version,
                    ));
                    ("commit", Some(commit.0.clone()))
                }
            }
            Change::Repoint { tables } => {
                // Each table on its own branch (a schema apply's span them).
                for (key, v) in tables {
                    let Some(rec) = next.branches.get_mut(&key.branch) else {
                        continue;
                    };
                    let own = rec.line(&key.branch, &key.table);
                    if let Some(r) = rec.tables.get_mut(&key.table)
                        && r.lance_branch == own
                        && r.version != *v
                    {
                        r.version = *v;
                        r.manifest_size =
                            self.g
                                .tables
                                .manifest_size(&r.dir, r.lance_branch.as_deref(), *v);
                        rec.updated_at = version;
                    }
                }
                ("repoint", None)
            }
            Change::CreateBranch { from, at } => {
                super::manifest::validate_branch_name(&req.branch, latest.branches.keys())?;
                // The source as it is at the publish, whatever head was
                // captured: a past state may name table versions a cleanup
                // removed meanwhile (it keeps what the graph versions it
                // listed name, and this one is newer than all of them).
                let _ = at;
                let src = latest
                    .branches
                    .get(from)
                    .ok_or_else(|| OmniError::NotFound(format!("branch '{from}'")))?;
                next.branches.insert(
                    req.branch.clone(),
                    BranchRecord {
                        head: src.head.clone(),
                        updated_at: version,
                        incarnation: version,
                        parent: Some(from.clone()),
                        tables: src.tables.clone(),
                        lines: BTreeMap::new(),
                    },
                );
                ("create_branch", None)
            }
            Change::DeleteBranch => {
                if req.branch == MAIN {
                    return Err(OmniError::BadRequest(
                        "the main branch cannot be deleted".into(),
                    ));
                }
                next.branches.remove(&req.branch);
                ("delete_branch", None)
            }
        };
        next.change = ChangeNote {
            kind: kind.to_string(),
            branch: req.branch.clone(),
            commit,
            op: req.op.0.clone(),
        };
        Ok((next, commit_record))
    }

    async fn drop_branch_storage(&self, branch: &str) -> Result<()> {
        let Some(rec) = self.deleted.lock().remove(branch) else {
            return Ok(());
        };
        // A merge may have made another branch take this branch's table
        // version as it is: a line a live branch names stays.
        let latest = self.g.manifests.refresh().await?;
        let named = |dir: &str, line: &str| {
            latest.branches.values().any(|b| {
                b.tables
                    .values()
                    .any(|t| t.dir == dir && t.lance_branch.as_deref() == Some(line))
            })
        };
        let mut first_error = None;
        for (key, t) in &rec.tables {
            let Some(own) = rec.line(branch, key) else {
                continue;
            };
            if named(&t.dir, &own) {
                continue;
            }
            if let Err(e) = self.g.tables.drop_branch(&t.dir, &own).await {
                // A child branch may still share this fork's files: keep it.
                debug!(branch, table = %t.dir, error = %e, "fork kept");
                first_error.get_or_insert(e);
            }
        }
        match first_error {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }

    /// Every intent on storage, with whether its writer lives. Where
    /// liveness is a lease, an intent found dead is fenced first: a manifest
    /// version published after the decision makes any publish its stalled
    /// writer still attempts lose its compare-and-swap, and on retry that
    /// writer finds its own lease gone.
    /// Every sidecar, each with whether its writer lives. Only the recovery
    /// actor lists, and its first listing is the scan at start: that one
    /// was read beside the liveness lease (a listing is of some moment
    /// after the open began either way; the owners are judged after it).
    async fn list_sidecars(&self) -> Result<Vec<FoundIntent>> {
        let mut found = Vec::new();
        let mut fence = false;
        let listed = self.listed_at_start.lock().take();
        let listed = match listed {
            Some(l) => l,
            None => sidecar::list(&self.g.store).await?,
        };
        for (intent, owner) in listed {
            let owner_alive = self.locks.owner_alive(&owner).await;
            fence |= !owner_alive && self.locks.needs_fence() && self.fenced.lock().insert(owner);
            found.push(FoundIntent {
                intent,
                owner_alive,
            });
        }
        self.fence_dead(fence).await?;
        Ok(found)
    }

    /// Publish the fence for every owner this process took over and has not
    /// fenced yet (a gate takeover, gc's judge of writers, a listing), before
    /// anything acts on the takeover: a writer that was taken over while its
    /// publish was under way then loses that publish's compare-and-swap.
    pub async fn fence_takeovers(&self) -> Result<()> {
        self.fence_dead(false).await
    }

    /// One fence for this process's unfenced takeovers and, when `more`,
    /// for a dead owner another process took over (a listing's find).
    async fn fence_dead(&self, more: bool) -> Result<()> {
        let owners = self.locks.unfenced();
        if owners.is_empty() && !more {
            return Ok(());
        }
        self.publish_fence().await?;
        self.fenced.lock().extend(owners.iter().cloned());
        self.locks.fenced(&owners);
        Ok(())
    }

    async fn publish_fence(&self) -> Result<()> {
        for _ in 0..MAX_PUBLISH_CAS_ATTEMPTS {
            let latest = self.g.manifests.refresh().await?;
            let mut next = (*latest).clone();
            next.version = latest.version + 1;
            next.change = ChangeNote {
                kind: "fence".into(),
                branch: MAIN.into(),
                commit: None,
                op: crate::util::ulid::new_ulid(),
            };
            if self.g.manifests.publish(&next, None).await? {
                return Ok(());
            }
        }
        Err(OmniError::Storage(
            "the fence after a lease takeover kept losing manifest races".into(),
        ))
    }

    async fn run(&self, io: Io) -> IoOut {
        fn s<T>(r: Result<T>) -> std::result::Result<T, String> {
            r.map_err(|e| e.to_string())
        }
        match io {
            Io::ReadSchemaId => IoOut::SchemaId(s(self
                .g
                .manifests
                .refresh()
                .await
                .map(|m| m.schema.clone()))),
            Io::ReadHead { branch } => IoOut::Head(s(self.read_head(&branch).await)),
            Io::TableView { table } => IoOut::TableView(s(self.table_view(&table).await)),
            Io::LockGate { gate, mode } => {
                IoOut::Locked(match self.locks.lock(&gate, mode).await {
                    // A gate taken from a dead holder is acted on only behind
                    // the fence of that takeover.
                    Ok(()) => self.fence_takeovers().await.map_err(|e| e.to_string()),
                    Err(e) => Err(e),
                })
            }
            Io::UnlockGate { gate } => {
                self.locks.unlock(&gate).await;
                IoOut::Locked(Ok(()))
            }
            Io::DropFork { table } => IoOut::Done(s(self.drop_fork(&table).await)),
            Io::Prepare {
                op,
                attempt,
                branch,
                head,
            } => self.prepare(op, attempt, branch, head).await,
            Io::Discard { op } => {
                if let Some(c) = self.ops.lock().get_mut(&op) {
                    c.staged.clear();
                }
                IoOut::Done(Ok(()))
            }
            Io::WriteSidecar { intent } => {
                let kind = self
                    .ops
                    .lock()
                    .get(&intent.op)
                    .map(|c| c.kind.clone())
                    .unwrap_or_default();
                let (written, ()) = tokio::join!(
                    sidecar::write(&self.g.store, &intent, self.locks.incarnation(), &kind),
                    self.write_early_record(&intent)
                );
                IoOut::Done(s(written))
            }
            Io::DeleteSidecar { op } => {
                self.early_records.lock().remove(&op);
                IoOut::Done(s(sidecar::delete(&self.g.store, &op).await))
            }
            Io::ListSidecars => IoOut::Sidecars(s(self.list_sidecars().await)),
            Io::CommitTable { op, table, staged } => {
                let out = self.commit_table(&op, &table, &staged).await;
                if let CommitResult::Unknown(e) = &out {
                    self.note_outage(&op, e);
                }
                IoOut::TableCommit(out)
            }
            Io::RestoreTable { table, to } => {
                IoOut::TableRestore(s(self.restore(&table, to).await))
            }
            Io::Inspect { intent } => IoOut::Inspected(s(self.inspect(&intent).await)),
            Io::Publish { req } => {
                let op = req.op.clone();
                let out = self.publish(req).await;
                if let PublishResult::Unknown(e) = &out {
                    self.note_outage(&op, e);
                }
                IoOut::Published(out)
            }
            Io::DropBranchStorage { branch } => {
                IoOut::Done(s(self.drop_branch_storage(&branch).await))
            }
        }
    }

    /// The answer a halted (crashed) process gives: nothing happens.
    #[cfg(feature = "fault-injection")]
    fn halted_answer(io: &Io) -> IoOut {
        let e = "process halted by fault injection".to_string();
        match io {
            Io::ReadSchemaId => IoOut::SchemaId(Err(e)),
            Io::ReadHead { .. } => IoOut::Head(Err(e)),
            Io::TableView { .. } => IoOut::TableView(Err(e)),
            // A halted process keeps the locks it has until it is dropped,
            // and takes no new ones.
            Io::LockGate { .. } | Io::UnlockGate { .. } => IoOut::Locked(Err(e)),
            Io::DropFork { .. } => IoOut::Done(Err(e)),
            Io::Prepare { .. } => IoOut::Prepared(Err(Some(e))),
            Io::Discard { .. }
            | Io::WriteSidecar { .. }
            | Io::DeleteSidecar { .. }
            | Io::DropBranchStorage { .. } => IoOut::Done(Err(e)),
            Io::ListSidecars => IoOut::Sidecars(Err(e)),
            Io::CommitTable { .. } => IoOut::TableCommit(CommitResult::Unknown(e)),
            Io::RestoreTable { .. } => IoOut::TableRestore(Err(e)),
            Io::Inspect { .. } => IoOut::Inspected(Err(e)),
            Io::Publish { .. } => IoOut::Published(PublishResult::Unknown(e)),
        }
    }

    #[cfg(feature = "fault-injection")]
    async fn run_with_faults(&self, io: Io) -> IoOut {
        {
            let mut f = self.faults.lock();
            if !f.halted
                && matches!(io, Io::WriteSidecar { .. })
                && f.crash_at == Some(CrashPoint::BeforeSidecarWrite)
            {
                warn!("fault injection: the process halts before its sidecar");
                f.halted = true;
                // A crashed process renews nothing: its lease lapses.
                self.locks.pause_renewal(true);
            }
            if f.halted {
                return Self::halted_answer(&io);
            }
        }
        let point = match &io {
            Io::WriteSidecar { .. } => Some(CrashPoint::AfterSidecarWrite),
            Io::CommitTable { .. } => {
                let n = {
                    let mut f = self.faults.lock();
                    f.commits += 1;
                    f.commits
                };
                let crash_at = self.faults.lock().crash_at;
                if let Some(CrashPoint::AfterTableCommit(at)) = crash_at
                    && n > at
                {
                    while !self.faults.lock().halted {
                        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                    }
                    return Self::halted_answer(&io);
                }
                Some(CrashPoint::AfterTableCommit(n))
            }
            Io::Publish { .. } => Some(CrashPoint::AfterPublish),
            Io::RestoreTable { .. } => Some(CrashPoint::AfterRestore),
            _ => None,
        };
        let answer = Self::halted_answer(&io);
        let inside = matches!(io, Io::WriteSidecar { .. } | Io::CommitTable { .. });
        let out = self.run(io).await;
        let dwell = self.faults.lock().dwell_inside_commit;
        if let Some(d) = dwell.filter(|_| inside) {
            tokio::time::sleep(d).await;
        }
        let mut f = self.faults.lock();
        if point.is_some() && point == f.crash_at {
            warn!(?point, "fault injection: the process halts here");
            f.halted = true;
            self.locks.pause_renewal(true);
            return answer;
        }
        out
    }
}

impl Substrate for LanceSubstrate {
    fn lock_linger(&self) -> u64 {
        match self.locks.remote() {
            true => self.linger.as_millis() as u64,
            false => 0,
        }
    }

    fn execute(&self, io: Io) -> Pin<Box<dyn Future<Output = IoOut> + Send + '_>> {
        #[cfg(feature = "fault-injection")]
        return Box::pin(self.run_with_faults(io));
        #[cfg(not(feature = "fault-injection"))]
        Box::pin(self.run(io))
    }
}
