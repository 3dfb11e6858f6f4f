//! The protocol's vocabulary: identities, addresses, heads, write plans and
//! recovery intents. Everything here is plain data so that the simulator and
//! the production host exchange exactly the same values.

use std::fmt;

/// Logical time handed to machines by their host. Production passes
/// milliseconds since the host started; the simulator passes its step count.
pub type Tick = u64;

/// Identifies one protocol operation (a write, a branch change, a recovery).
/// Production uses ULIDs; the simulator uses counters. Ordered so that sets of
/// operations iterate deterministically.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OpId(pub String);

impl fmt::Display for OpId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
impl fmt::Debug for OpId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "op:{}", self.0)
    }
}

/// A graph commit id (a ULID in production).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CommitId(pub String);

impl fmt::Display for CommitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
impl fmt::Debug for CommitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "commit:{}", self.0)
    }
}

/// One physical table as a gate and commit target: a logical table (one node
/// or edge type, named by its stable key) on one graph branch. Writes on a
/// branch always go to that branch's own physical table, so two branches never
/// share a table gate. The derived order (branch, then table key) is the gate
/// acquisition order.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TableKey {
    pub branch: String,
    pub table: String,
}

impl TableKey {
    pub fn new(branch: impl Into<String>, table: impl Into<String>) -> Self {
        Self {
            branch: branch.into(),
            table: table.into(),
        }
    }
}

impl fmt::Debug for TableKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.table, self.branch)
    }
}

/// A branch head: the commit it points at and the graph manifest version at
/// which the branch record last changed. Recovery can move `version` without
/// moving `commit` (a rolled-back table is re-pointed), so rechecks compare both.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Head {
    pub commit: CommitId,
    pub version: u64,
}

/// Where a protocol message goes. Addresses are logical and deterministic:
/// never runtime actor ids.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Addr {
    Schema,
    Publisher,
    Recovery,
    Branch(String),
    Table(TableKey),
    /// The coordinator of one write or branch operation.
    Writer(OpId),
    /// Whoever started an operation and waits for its outcome.
    Client(OpId),
}

/// Ordered by strength: `Shared < Exclusive`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GateMode {
    Shared,
    Exclusive,
}

impl GateMode {
    /// May a holder in this mode hold the gate beside one in `other`?
    pub fn coexists_with(self, other: GateMode) -> bool {
        self == GateMode::Shared && other == GateMode::Shared
    }
}

/// What a gate owner tells the holder when it grants the gate: the state the
/// holder must recheck its snapshot against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GateView {
    /// Schema gate: the identity of the accepted schema.
    Schema(String),
    /// Branch gate: the branch's current head (`None`: the branch does not exist).
    Branch(Option<Head>),
    /// Table gate: the physical table's latest version beside the version
    /// the branch's manifest says it must be at.
    Table(TableView),
    /// The owner could not read its state; the holder must treat the gate as
    /// unusable and release it.
    Unavailable(String),
    /// Another process held the gate for longer than the wait limit.
    Busy(String),
}

/// What a table gate's holder sees of its physical table, read under the
/// gate (and so under the cross-process lock).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableView {
    /// The latest committed version of the branch's own physical table
    /// (`None`: the table has no storage on this branch yet).
    pub latest: Option<u64>,
    /// The version the latest manifest says that physical table is at: the
    /// version it names when it names the branch's own table, else the
    /// version an unpublished fork starts at (`None`: the branch is gone).
    pub named: Option<u64>,
    /// The manifest names the branch's own physical table (a fork nobody
    /// has published yet is not named).
    pub published: bool,
    /// Names the line (the physical table's Lance branch) the graph
    /// branch writes this table on, whose top `latest` is (`None`: the
    /// branch is gone). A merge that takes another branch's version of the
    /// table moves the graph branch to a fresh line under the branch gate
    /// alone, so a view of one line says nothing of the next.
    pub line: Option<String>,
}

impl TableView {
    /// The view a write's snapshot implies where its branch owns the
    /// table at `base` on `line`: what a known view must be to stand in
    /// for a read.
    pub fn owned(line: Option<String>, base: u64) -> Self {
        Self {
            latest: Some(base),
            named: Some(base),
            published: true,
            line,
        }
    }

    /// A table version no published state accounts for. Under the gate no
    /// live writer is between its table commit and its publish, so such a
    /// version belongs to a dead writer (or to no intent at all).
    pub fn orphaned(&self) -> bool {
        self.latest.is_some() && self.named.is_some() && self.latest != self.named
    }
}

/// Whether a write may re-prepare when its snapshot moved under it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteClass {
    /// Strict inserts, upserts, appends and merges: drop the staged work and
    /// prepare again against the new head (bounded).
    Retryable,
    /// Updates, deletes and overwrites read what they change: a moved head is
    /// `ReadSetChanged`.
    Strict,
}

/// A staged (uncommitted) table transaction, held by the substrate and named
/// here by reference.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StagedRef(pub String);

/// The staged change to one physical table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TablePlan {
    pub table: TableKey,
    /// The table version the transaction was staged against. The table must
    /// still be at exactly this version when its gate is held.
    pub base: u64,
    /// The line the table commit lands on (see [`TableView::line`]).
    pub line: Option<String>,
    pub staged: StagedRef,
    /// The transaction identity recorded in the table's history when it lands;
    /// recovery looks for it to decide whether the commit landed.
    pub txn: String,
}

/// Everything a prepared write will do, computed without effects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub commit: CommitId,
    /// Identity of the accepted schema the write was prepared against.
    pub schema: String,
    pub class: WriteClass,
    /// Sorted by table key (the gate order) and without duplicates.
    pub tables: Vec<TablePlan>,
    /// A merge's other side, published with the commit.
    pub merge: Option<MergeOf>,
    /// A schema apply's change, published with the commit.
    pub schema_change: Option<SchemaChange>,
}

/// What a schema apply publishes beside its table commits: the schema it
/// replaces and the one it makes accepted (both identities name catalogs
/// written before the sidecar), and the tables it created for new types.
/// Its table commits span every branch (one per branch and changed type),
/// so it holds the schema gate exclusively: no data write, branch change
/// or recovery of another intent runs meanwhile. The commit lands on
/// `main`; every other branch it touched is re-pointed, keeping its head.
/// Plain data, kept in the sidecar, so a roll-forward publishes the same.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemaChange {
    pub from: String,
    pub to: String,
    /// The graph manifest version the apply was validated against. Only
    /// over this graph state may it publish: a roll-forward after any other
    /// change (a branch made, a write by a process that had not seen the
    /// intent) would accept a schema nobody checked that state against.
    pub manifest: u64,
    pub created: Vec<NewTable>,
}

/// A table a schema apply made for a new type: empty, at `version` on
/// the main line, shared by every branch until it first writes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewTable {
    pub table: String,
    pub dir: String,
    pub version: u64,
    pub incarnation: u64,
}

/// The admission scope of an operation that touches every branch.
pub const EVERY_BRANCH: &str = "*";

/// What a merge publishes beside its table commits: the source head it
/// pinned (the merge commit's second parent), the tables the target takes
/// from the source exactly as they are (changed on the source only; no
/// table commit, so no table gate: the branch gate covers the re-pointing),
/// and whether it is a fast-forward (the head moves to the source's commit
/// instead of a new one). Plain data, kept in the sidecar, so a recovery
/// that rolls a merge forward publishes the same merge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MergeOf {
    pub source: String,
    pub head: Head,
    pub adopt: Vec<String>,
    pub fast_forward: bool,
}

/// A recovery sidecar: written before the first table commit, deleted after
/// the publish. Durable across crashes. The substrate stamps it with the
/// writing process's incarnation, which is how another process tells a live
/// writer's intent from a dead one's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Intent {
    pub op: OpId,
    pub branch: String,
    pub expected: Head,
    pub commit: CommitId,
    pub tables: Vec<IntentTable>,
    pub merge: Option<MergeOf>,
    pub schema_change: Option<SchemaChange>,
}

impl Intent {
    /// Does this intent keep writers off `branch`? A schema apply's keeps
    /// them off every branch: until it is resolved, no one knows which
    /// schema is accepted.
    pub fn touches(&self, branch: &str) -> bool {
        branch == EVERY_BRANCH
            || self.schema_change.is_some()
            || self.branch == branch
            || self.tables.iter().any(|t| t.table.branch == branch)
    }

    /// The gates resolving this intent takes: a write's own, with the
    /// schema gate exclusive for a schema apply.
    pub fn gates(&self) -> Vec<(Addr, GateMode)> {
        let tables: Vec<TableKey> = self.tables.iter().map(|t| t.table.clone()).collect();
        let mut gates = gate_order(&self.branch, &tables);
        if self.schema_change.is_some() {
            gates[0].1 = GateMode::Exclusive;
        }
        gates
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IntentTable {
    pub table: TableKey,
    pub base: u64,
    pub txn: String,
}

/// A sidecar found on storage, and whether the process that wrote it is
/// certainly gone (its liveness lock is free, or its lease expired).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundIntent {
    pub intent: Intent,
    pub owner_alive: bool,
}

/// What storage says about an intent, read under the intent's gates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inspection {
    /// The graph manifest already carries the intent's commit.
    pub published: bool,
    /// The branch head now (`None`: the branch no longer exists).
    pub head: Option<Head>,
    /// Per intent table, in intent order: the version at which its transaction
    /// landed, if it did.
    pub landed: Vec<Option<u64>>,
    /// Per intent table: the table's latest version.
    pub latest: Vec<Option<u64>>,
    /// The intent's sidecar is still on storage. A sidecar goes only once
    /// its intent is resolved, so `false` means another process resolved
    /// it (this one's attempt failed after that, or it found the intent
    /// before the other finished): nothing is left to do.
    pub sidecar: bool,
    /// For a schema apply's intent: the graph is still as it was at the
    /// version the apply was validated against (versions that changed no
    /// branch and no schema, such as a lease takeover's fence, do not
    /// count). True for every other intent.
    pub validated_graph_current: bool,
}

/// A change to the graph manifest, published as one compare-and-swap on the
/// branch head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// A new commit on `branch`: its tables now point at these versions.
    Commit {
        commit: CommitId,
        /// Each on its own branch's line: a schema apply's span branches.
        tables: Vec<(TableKey, u64)>,
        merge: Option<MergeOf>,
        schema_change: Option<SchemaChange>,
    },
    /// Recovery restored rolled-back tables; each table's branch keeps its
    /// head commit and the table points at the restored version.
    Repoint { tables: Vec<(TableKey, u64)> },
    /// Create `branch` at `from`'s state as of `at`.
    CreateBranch { from: String, at: Head },
    /// Remove `branch` from the manifest.
    DeleteBranch,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublishReq {
    pub op: OpId,
    pub branch: String,
    /// The branch head the change was computed against; `None` when the
    /// branch must not exist yet (create).
    pub expected: Option<Head>,
    pub change: Change,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PublishResult {
    /// Published as this graph manifest version; the branch head is now `head`
    /// (`None` after a delete).
    Published { version: u64, head: Option<Head> },
    /// The compare-and-swap failed: nothing was published.
    HeadMoved { actual: Option<Head> },
    /// The change is invalid against the manifest (for example a branch name
    /// that collides); nothing was published.
    Refused(String),
    /// The publish may or may not have landed.
    Unknown(String),
}

/// The result of committing one staged table transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommitResult {
    Committed {
        version: u64,
    },
    /// The table refused the transaction and nothing was written.
    Conflict(String),
    /// The commit may or may not have landed.
    Unknown(String),
}

/// How an operation ended, as its client sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Committed {
        commit: Option<CommitId>,
        version: u64,
    },
    /// Prepare refused the write (validation, key conflict, limits). The
    /// substrate holds the detailed error; nothing was written.
    Rejected,
    /// A strict write's branch moved under it; nothing was written.
    ReadSetChanged,
    /// A retryable write kept losing races, or another process held a gate
    /// past the wait limit; nothing was written. `waited_for` names what.
    Contended {
        attempts: u32,
        waited_for: String,
    },
    /// An effect may have landed; the intent stays for recovery.
    RecoveryRequired {
        op: OpId,
    },
    BranchNotFound(String),
    BranchExists(String),
    /// A storage error before any effect; nothing was written.
    StorageFailed(String),
    /// A manifest change was refused (for example an invalid branch name).
    Refused(String),
}

/// Explicit limits of the protocol.
pub mod limits {
    /// How many times a retryable write prepares before giving up. Retries
    /// prepare under the branch gate, which holds across processes, so a
    /// write needs more than two only when it meets orphans to repair.
    pub const MAX_PREPARE_ATTEMPTS: u32 = 16;
    /// How long a gate's cross-process lock is waited for before the write
    /// fails `Contended` (milliseconds; the substrate enforces it).
    pub const GATE_WAIT_LIMIT_MS: u64 = 60_000;
    /// How many times a sweep of orphans waits for a live foreign intent on
    /// its branch to go away before writers to the branch are refused.
    pub const MAX_SWEEP_WAITS: u32 = 64;
    /// Ticks between two looks at a live foreign intent that blocks a sweep.
    pub const SWEEP_WAIT: u64 = 50;
    /// How many times recovery retries one intent after storage errors
    /// before it leaves the intent for the next open.
    pub const MAX_RECOVERY_ATTEMPTS: u32 = 16;
    /// Recovery's backoff between attempts, in ticks.
    pub const RECOVERY_BACKOFF: u64 = 10;
    /// A gate owner lingers on a cross-process lock it has held for less
    /// than this many lingers; past that it gives the lock up at its next
    /// last release, and for `LINGER_COOLDOWN_FACTOR` lingers after that
    /// every last release does (each a turn for a waiting process, which
    /// polls at least every 100 ms).
    pub const LINGER_HOLD_FACTOR: u64 = 8;
    pub const LINGER_COOLDOWN_FACTOR: u64 = 2;
    /// How long a closing handle waits for answered writes to delete their
    /// sidecars and release their gates (milliseconds).
    pub const FINISH_WAIT_MS: u64 = 30_000;
}

/// The one gate order: the schema gate (shared by data writes), the branch
/// gate, then the table gates sorted by key, without duplicates. Writers and
/// recovery both take their gates in exactly this order, which is what makes
/// the protocol deadlock-free within a process and across processes.
pub fn gate_order(branch: &str, tables: &[TableKey]) -> Vec<(Addr, GateMode)> {
    let mut gates = vec![
        (Addr::Schema, GateMode::Shared),
        (Addr::Branch(branch.to_string()), GateMode::Exclusive),
    ];
    gates.extend(table_gates(tables));
    gates
}

/// The table part of [`gate_order`]: sorted, deduplicated, exclusive.
pub fn table_gates(tables: &[TableKey]) -> Vec<(Addr, GateMode)> {
    let mut tables = tables.to_vec();
    tables.sort();
    tables.dedup();
    tables
        .into_iter()
        .map(|t| (Addr::Table(t), GateMode::Exclusive))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate_order_is_schema_branch_then_sorted_unique_tables() {
        let t = |b: &str, n: &str| TableKey::new(b, n);
        let order = gate_order(
            "main",
            &[
                t("main", "node:B"),
                t("main", "edge:E"),
                t("main", "node:B"),
            ],
        );
        assert_eq!(
            order,
            vec![
                (Addr::Schema, GateMode::Shared),
                (Addr::Branch("main".into()), GateMode::Exclusive),
                (Addr::Table(t("main", "edge:E")), GateMode::Exclusive),
                (Addr::Table(t("main", "node:B")), GateMode::Exclusive),
            ]
        );
    }

    #[test]
    fn only_a_version_the_manifest_does_not_account_for_is_an_orphan() {
        let v = |latest, named, published| TableView {
            latest,
            named,
            published,
            line: None,
        };
        assert!(!v(Some(3), Some(3), true).orphaned());
        assert!(v(Some(4), Some(3), true).orphaned());
        // A fork that exists but was never written is not an orphan.
        assert!(!v(Some(3), Some(3), false).orphaned());
        assert!(v(Some(5), Some(3), false).orphaned());
        // No fork yet, or no branch: nothing to account for.
        assert!(!v(None, Some(3), false).orphaned());
        assert!(!v(Some(3), None, false).orphaned());
    }
}
