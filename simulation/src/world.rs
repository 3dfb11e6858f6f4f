//! The simulated substrate: versioned tables with staged transactions and
//! forks, a graph manifest with compare-and-swap, commit records, recovery
//! sidecars stamped with their writer's process, and the cross-process gate
//! locks (held by a process, released when it dies, like an OS file lock).
//! Durable parts survive simulated crashes; staged work is process memory
//! and dies with its process. Several processes share one world. It answers the same `Io` requests as the
//! Lance substrate, with the same meaning, and it checks on every effect what
//! only the protocol can guarantee (a commit lands exactly on its base; a
//! strict insert never finds its id). A table version also records the
//! search index it carries, as Lance table metadata does: an optimize
//! write's table commit changes no row and records an index built from the
//! rows it was prepared against; every later commit, restore and fork
//! carries the record of the version it starts from.
//!
//! Storage behaves as Lance does, not kinder: a table commit staged on an
//! old base is rebased over the versions landed since (the substrate pins
//! it and refuses instead, unless a planted bug accepts any version), and
//! gate locks and liveness are leases on virtual clocks (`lease`): a
//! process paused past its lease is taken over while it still runs, and
//! what it had already sent lands late. Table commits, restores and
//! publishes check the lease first, a step before their effect; a publish
//! is a compare-and-swap on the manifest version read with that check, so
//! the fence a takeover publishes makes a late publish lose.

use std::collections::{BTreeMap, BTreeSet};

use omnigraph_actors::*;

use crate::lease::{self, Lease};

pub type Rows = BTreeMap<String, i64>;
/// A physical table's versions: content and the transaction that wrote it.
pub type History = BTreeMap<u64, (Rows, Option<String>)>;
pub const MAIN: &str = "main";
pub const SCHEMA_ID: &str = "schema-1";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TRef {
    /// The Lance branch (physical line) holding the table state.
    pub lance: String,
    pub version: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BranchRec {
    pub head: CommitId,
    pub updated_at: u64,
    pub incarnation: u64,
    pub tables: BTreeMap<String, TRef>,
    /// Table -> the line this branch writes it on where that is not its
    /// default line: a merge that took the source's version of a table in
    /// place of the branch's own moves the branch to a fresh line for it.
    pub lines: BTreeMap<String, String>,
}

impl BranchRec {
    pub fn head(&self) -> Head {
        Head {
            commit: self.head.clone(),
            version: self.updated_at,
        }
    }

    /// The line branch `name` writes `table` on.
    pub fn line(&self, name: &str, table: &str) -> String {
        match self.lines.get(table) {
            Some(l) => l.clone(),
            None => own_lance(name, self.incarnation),
        }
    }

    /// Every line the branch wrote or may write on.
    pub fn all_lines(&self, name: &str) -> Vec<String> {
        let mut v = vec![own_lance(name, self.incarnation)];
        v.extend(self.lines.values().cloned());
        v
    }
}

pub fn own_lance(branch: &str, incarnation: u64) -> String {
    if branch == MAIN {
        MAIN.to_string()
    } else {
        format!("{branch}-v{incarnation}")
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestV {
    pub version: u64,
    pub branches: BTreeMap<String, BranchRec>,
    /// The commit this version published, if any.
    pub carries: Option<CommitId>,
    /// The accepted schema at this version.
    pub schema: String,
    /// A fence: published after a takeover, it changes nothing.
    pub fence: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitRec {
    pub parent: Option<CommitId>,
    /// A merge commit's second parent: the source head it merged.
    pub merged: Option<CommitId>,
    pub version: u64,
}

/// One statement of a simulated write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stmt {
    /// Strict insert: the id must not exist.
    Insert {
        table: String,
        id: String,
        val: i64,
    },
    Upsert {
        table: String,
        id: String,
        val: i64,
    },
    /// Starts the next mutation of a group commit: the statements up to
    /// the next `Member` are one caller's, judged after the ones before
    /// it; a member whose statement fails is left out and the others
    /// commit.
    Member,
    /// Strict write: the id must exist; reads it.
    Update {
        table: String,
        id: String,
        val: i64,
    },
    Delete {
        table: String,
        id: String,
    },
    /// Optimize: build the table's index from the rows the write reads and
    /// record it (no row changes).
    Index {
        table: String,
    },
    /// Merge branch `source` (pinned at its head when the write first
    /// prepares) into the write's branch: the naive three-way merge of the
    /// base, source and target contents, row by row; any conflict rejects.
    Merge {
        source: String,
    },
    /// Schema apply: make `id` the accepted schema, moving every table of
    /// every branch to its layout (no row changes).
    Schema {
        id: String,
    },
}

impl Stmt {
    pub fn table(&self) -> &str {
        match self {
            Stmt::Insert { table, .. }
            | Stmt::Upsert { table, .. }
            | Stmt::Update { table, .. }
            | Stmt::Delete { table, .. }
            | Stmt::Index { table } => table,
            Stmt::Merge { .. } | Stmt::Schema { .. } | Stmt::Member => "",
        }
    }
    pub fn strict(&self) -> bool {
        matches!(self, Stmt::Update { .. } | Stmt::Delete { .. })
    }
}

pub type Changes = Vec<(String, Option<i64>)>;

/// A write's statements in progress: the rows it sees (its snapshot plus
/// its own changes) and what it will stage.
#[derive(Clone, Default)]
struct Pending {
    view: BTreeMap<String, Rows>,
    changes: BTreeMap<String, Changes>,
    inserts: BTreeMap<String, Vec<String>>,
    indexed: BTreeMap<String, Rows>,
    strict: bool,
}

impl Pending {
    fn over(view: BTreeMap<String, Rows>) -> Self {
        Pending {
            view,
            ..Default::default()
        }
    }
}

/// A prepared group commit (see [`Stmt::Member`]).
#[derive(Clone, Debug)]
pub struct Group {
    pub members: Vec<Vec<Stmt>>,
    /// The members in the commit, in order.
    pub kept: Vec<usize>,
    /// Every table's rows in the snapshot it was prepared on.
    pub base: BTreeMap<String, Rows>,
}

/// A group's members, when `stmts` is one.
pub fn members(stmts: &[Stmt]) -> Option<Vec<Vec<Stmt>>> {
    if !stmts.contains(&Stmt::Member) {
        return None;
    }
    let mut out: Vec<Vec<Stmt>> = Vec::new();
    for s in stmts {
        match s {
            Stmt::Member => out.push(Vec::new()),
            s => out
                .last_mut()
                .expect("a group starts with a member")
                .push(s.clone()),
        }
    }
    Some(out)
}

#[derive(Clone, Debug)]
struct Staged {
    lance: String,
    base: u64,
    changes: Changes,
    inserts: Vec<String>,
    /// The index an optimize records: the rows it was built from.
    index: Option<Rows>,
    /// The index file it wrote for them (durable since its prepare).
    index_file: Option<String>,
    /// The layout a schema apply moves the table to.
    layout: Option<String>,
    txn: String,
}

/// How an injected storage fault behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    None,
    /// Fails without any effect.
    FailClean,
    /// The effect happens, but the caller hears a failure.
    FailAfterEffect,
    /// A table commit refused as a conflict (no effect).
    Conflict,
}

/// A process incarnation: a fresh number each time a process (re)starts.
pub type Proc = u64;

#[derive(Default)]
pub struct World {
    // Durable.
    pub manifests: Vec<ManifestV>,
    pub tables: BTreeMap<(String, String), History>,
    /// The index each table version records (lance line, table, version):
    /// the rows it was built from.
    pub indexes: BTreeMap<(String, String, u64), Rows>,
    /// The index file each table version records (lance line, table,
    /// version), as Lance table metadata names one.
    pub index_files: BTreeMap<(String, String, u64), String>,
    /// Every index file on storage, with the process that wrote it: an
    /// optimize writes one per table in its prepare, before any commit.
    pub files: BTreeMap<String, Proc>,
    next_file: u64,
    /// The schema each table version is laid out for (lance line, table,
    /// version); absent: the first schema.
    pub layouts: BTreeMap<(String, String, u64), String>,
    /// Each sidecar with the incarnation of the process that wrote it.
    pub sidecars: BTreeMap<OpId, (Intent, Proc)>,
    /// Who wrote each sidecar ever written (kept after the delete), for the
    /// check that no intent is resolved while its writer's process lives.
    pub sidecar_owner: BTreeMap<OpId, Proc>,
    pub commits: BTreeMap<CommitId, CommitRec>,
    // Shared with the operating system: which processes live, and the
    // cross-process gate locks they hold.
    pub alive: std::collections::BTreeSet<Proc>,
    pub locks: BTreeMap<Addr, BTreeMap<Proc, GateMode>>,
    // Process memory.
    staged: BTreeMap<OpId, (Proc, BTreeMap<String, Staged>)>,
    /// Each deleted branch's lines, with the process that deleted it.
    deleted: BTreeMap<String, (Proc, Vec<String>)>,
    // Outside the process: what each client asked for.
    pub work: BTreeMap<OpId, Vec<Stmt>>,
    // The model the checks compare against: the logical effect of every
    // prepared commit (keyed by commit id).
    pub effects: BTreeMap<CommitId, BTreeMap<String, Changes>>,
    /// Each prepared group commit: its members, those kept, and the rows
    /// its snapshot held (the model its answers are checked against).
    pub groups: BTreeMap<CommitId, Group>,
    /// The tables whose index each prepared commit rebuilds.
    pub index_effects: BTreeMap<CommitId, Vec<String>>,
    /// Each merge's pinned source head (outside the process: the client
    /// named it when the merge started).
    pins: BTreeMap<OpId, Head>,
    /// Each prepared merge commit: (target head it merged into, source head).
    pub merges: BTreeMap<CommitId, (CommitId, CommitId)>,
    /// Each prepared merge commit that takes tables as its source has them:
    /// (the source head, those tables).
    pub adopted: BTreeMap<CommitId, (CommitId, Vec<String>)>,
    pub violations: Vec<String>,
    // Time and leases.
    /// True time (the simulator's tick), set before every request.
    pub now: u64,
    pub bugs: Bugs,
    pub leases: BTreeMap<Proc, Lease>,
    /// Processes another one declared dead (took their lease over) while
    /// they still ran: what they had sent may still land.
    pub taken_over: BTreeSet<Proc>,
    /// (observer, owner): the observer has published a fence for the owner.
    fenced_by: BTreeSet<(Proc, Proc)>,
    pub takeovers: usize,
    pub fences: usize,
    // The model of provenance the checks compare against.
    /// The process that wrote each table version (lance line, table, version).
    pub writers: BTreeMap<(String, String, u64), Proc>,
    /// The transactions whose effects (rows, index record, layout) each
    /// table version holds.
    pub lineage: BTreeMap<(String, String, u64), BTreeSet<String>>,
    /// The commit each transaction was prepared for.
    pub txn_commit: BTreeMap<String, CommitId>,
    /// Schema applies' commits: they land on `main` and move every other
    /// branch's tables under its unchanged head.
    schema_commits: BTreeSet<CommitId>,
    // Retention.
    /// Graph versions a cleanup removed (their entries stay in `manifests`
    /// for the checks; a read of one is refused, typed).
    pub expired: BTreeSet<u64>,
    /// When each graph version was written (the tick of the step).
    pub written: BTreeMap<u64, u64>,
    /// The data file each staged transaction wrote (named by the
    /// transaction), with its writer and the tick it was written at.
    pub data: BTreeMap<String, (Proc, u64)>,
    /// Every data file ever written, for the check that a table version
    /// keeps the files it references.
    pub data_written: BTreeSet<String>,
    /// When each process started.
    pub started: BTreeMap<Proc, u64>,
    /// Table versions (lance line, table, version) a cleanup removed.
    pub removed_table_versions: BTreeSet<(String, String, u64)>,
}

pub const TABLES: &[&str] = &["node:A", "node:B", "edge:E"];

/// What a publish whose compare-and-swap lost answers the scheduler, which
/// then runs its read and lease check again.
pub const PUBLISH_RACE: &str = "lost the manifest compare-and-swap";

impl World {
    pub fn new() -> Self {
        let mut w = World::default();
        let mut refs = BTreeMap::new();
        for t in TABLES {
            w.tables.insert(
                (MAIN.to_string(), t.to_string()),
                BTreeMap::from([(1, (Rows::new(), None))]),
            );
            refs.insert(
                t.to_string(),
                TRef {
                    lance: MAIN.into(),
                    version: 1,
                },
            );
        }
        let root = CommitId("root".into());
        w.commits.insert(
            root.clone(),
            CommitRec {
                parent: None,
                merged: None,
                version: 1,
            },
        );
        w.effects.insert(root.clone(), BTreeMap::new());
        w.manifests.push(ManifestV {
            version: 1,
            branches: BTreeMap::from([(
                MAIN.to_string(),
                BranchRec {
                    head: root.clone(),
                    updated_at: 1,
                    incarnation: 0,
                    tables: refs,
                    lines: BTreeMap::new(),
                },
            )]),
            carries: Some(root),
            schema: SCHEMA_ID.to_string(),
            fence: false,
        });
        w
    }

    /// Process `p` starts at the current time with its wall clock `skew`
    /// off true time, and writes its lease.
    pub fn start_process(&mut self, p: Proc, skew: i64) {
        self.alive.insert(p);
        self.started.insert(p, self.now);
        self.leases.insert(p, Lease::start(self.now, skew));
    }

    fn lease(&self, p: Proc) -> &Lease {
        self.leases.get(&p).expect("every process has a lease")
    }

    /// A renewal of `p`'s lease now: a taken-over lease is lost for good.
    pub fn renew(&mut self, p: Proc) {
        let (now, stops) = (self.now, self.bugs.trust_a_clock_that_stops());
        let taken = self.taken_over.contains(&p);
        let l = self.leases.get_mut(&p).expect("lease");
        if taken {
            l.lost = true;
        } else {
            l.renew(now, stops);
        }
    }

    /// `p` was paused for `ticks` and runs again.
    pub fn resumed(&mut self, p: Proc, ticks: u64) {
        if let Some(l) = self.leases.get_mut(&p) {
            l.paused_for += ticks;
        }
    }

    /// May `p` act on its lease now?
    pub fn trusted(&self, p: Proc) -> bool {
        self.lease(p)
            .trusted(self.now, self.bugs.trust_a_clock_that_stops())
    }

    /// The first true time at which `observer` sees `p`'s lease as lapsed
    /// (if it is not renewed meanwhile).
    pub fn lapses_for_at(&self, p: Proc, observer: Proc) -> u64 {
        let skew = self.lease(observer).skew;
        (self.lease(p).deadline + lease::MARGIN as i64 + 1 - skew).max(0) as u64
    }

    /// Is `holder` certainly gone as `observer` sees it (crashed, taken
    /// over, or its lease lapsed on the observer's clock)?
    pub(crate) fn gone_for(&self, observer: Proc, holder: Proc) -> bool {
        !self.alive.contains(&holder)
            || self.taken_over.contains(&holder)
            || self
                .lease(holder)
                .lapsed_for(self.now, self.lease(observer).skew)
    }

    /// `observer` judges whether `owner` lives; a lapsed lease is taken over
    /// here (final), and fenced when `fence` says so.
    pub fn judge_alive(&mut self, observer: Proc, owner: Proc, fence: bool) -> bool {
        if owner == observer {
            return true;
        }
        if !self.alive.contains(&owner) || self.taken_over.contains(&owner) {
            return false;
        }
        if !self.gone_for(observer, owner) {
            return true;
        }
        self.taken_over.insert(owner);
        self.takeovers += 1;
        if fence {
            self.fence(observer, owner);
        }
        false
    }

    /// A manifest version that changes nothing, published by `observer`
    /// after taking `owner` over: any publish `owner` had under way was
    /// read on an older version and loses its compare-and-swap.
    fn fence(&mut self, observer: Proc, owner: Proc) {
        self.fenced_by.insert((observer, owner));
        self.fences += 1;
        let mut next = self.latest().clone();
        next.version += 1;
        next.carries = None;
        next.fence = true;
        self.manifests.push(next);
    }

    /// The lease check a table commit, a restore and a publish make before
    /// their effect (a scheduler step before it). `Some`: refused, with
    /// the completion the request then gets.
    pub fn check_lease(&mut self, p: Proc, io: &Io) -> Option<IoOut> {
        let checks = match io {
            Io::CommitTable { .. } | Io::Publish { .. } => true,
            Io::RestoreTable { .. } => !self.bugs.restore_without_lease(),
            _ => return None,
        };
        let passes = !checks || self.trusted(p);
        if passes && self.taken_over.contains(&p) {
            self.violations.push(format!(
                "a process that lost its lease starts no effect: incarnation {p}, taken over, went on to {io:?}"
            ));
        }
        if passes {
            return None;
        }
        let e = format!("process {p}'s lease was lost or lapsed");
        Some(match io {
            Io::CommitTable { .. } => IoOut::TableCommit(CommitResult::Unknown(e)),
            Io::RestoreTable { .. } => IoOut::TableRestore(Err(e)),
            _ => IoOut::Published(PublishResult::Unknown(e)),
        })
    }

    pub fn latest(&self) -> &ManifestV {
        self.manifests.last().expect("version 1 exists")
    }

    /// Process `p` dies: its memory and its locks go; storage stays.
    pub fn crash(&mut self, p: Proc) {
        self.staged.retain(|_, (q, _)| *q != p);
        self.deleted.retain(|_, (q, _)| *q != p);
        self.alive.remove(&p);
        for holders in self.locks.values_mut() {
            holders.remove(&p);
        }
        self.locks.retain(|_, h| !h.is_empty());
    }

    /// Could process `p` take `gate`'s lock in `mode` now? A holder that is
    /// gone, as `p` judges it, holds nothing.
    fn lock_free_for(&self, p: Proc, gate: &Addr, mode: GateMode) -> bool {
        let Some(holders) = self.locks.get(gate) else {
            return true;
        };
        holders
            .iter()
            .filter(|(q, _)| **q != p && !self.gone_for(p, **q))
            .all(|(_, m)| mode.coexists_with(*m))
    }

    /// Would this request complete now? Only a gate lock held by another
    /// live process makes a request wait (a process that cannot trust its
    /// own lease is refused at once).
    pub fn ready(&self, p: Proc, io: &Io) -> bool {
        match io {
            Io::LockGate { gate, mode } => !self.trusted(p) || self.lock_free_for(p, gate, *mode),
            _ => true,
        }
    }

    /// What a gate owner's view of `gate` reads from storage now.
    pub fn view_of(&self, gate: &Addr) -> Option<GateView> {
        match gate {
            Addr::Schema => Some(GateView::Schema(self.latest().schema.clone())),
            Addr::Branch(b) => Some(GateView::Branch(
                self.latest().branches.get(b).map(|r| r.head()),
            )),
            Addr::Table(t) => Some(GateView::Table(self.table_view(t))),
            _ => None,
        }
    }

    /// The physical table a branch writes, as the latest manifest says:
    /// (own line, version the manifest names, whether it names own line).
    fn table_view(&self, table: &TableKey) -> TableView {
        let Some(rec) = self.latest().branches.get(&table.branch) else {
            return TableView {
                latest: None,
                named: None,
                published: false,
                line: None,
            };
        };
        let own = rec.line(&table.branch, &table.table);
        let r = rec.tables.get(&table.table);
        TableView {
            latest: self.latest_version(&own, &table.table),
            named: r.map(|r| r.version),
            published: r.is_some_and(|r| r.lance == own),
            line: Some(own),
        }
    }

    pub fn content(&self, lance: &str, table: &str, version: u64) -> Option<&Rows> {
        self.tables
            .get(&(lance.to_string(), table.to_string()))
            .and_then(|h| h.get(&version))
            .map(|(rows, _)| rows)
    }

    pub fn latest_version(&self, lance: &str, table: &str) -> Option<u64> {
        self.tables
            .get(&(lance.to_string(), table.to_string()))
            .and_then(|h| h.keys().next_back().copied())
    }

    /// The line a branch writes a table on, as the latest manifest says.
    fn own(&self, table: &TableKey) -> Option<String> {
        self.latest()
            .branches
            .get(&table.branch)
            .map(|r| r.line(&table.branch, &table.table))
    }

    /// The index record of a table version.
    pub fn index(&self, lance: &str, table: &str, version: u64) -> Option<&Rows> {
        self.indexes
            .get(&(lance.to_string(), table.to_string(), version))
    }

    /// Remove a Lance line's table (or every table on it) with what its
    /// versions record: a line made again starts from nothing, as a
    /// re-created Lance branch does.
    fn drop_line(&mut self, lance: &str, table: Option<&str>) {
        let gone = |l: &String, t: &String| l == lance && table.is_none_or(|x| x == t);
        self.tables.retain(|(l, t), _| !gone(l, t));
        self.indexes.retain(|(l, t, _), _| !gone(l, t));
        self.index_files.retain(|(l, t, _), _| !gone(l, t));
        self.layouts.retain(|(l, t, _), _| !gone(l, t));
        self.lineage.retain(|(l, t, _), _| !gone(l, t));
        self.writers.retain(|(l, t, _), _| !gone(l, t));
    }

    /// The row-changing transactions a table version's rows hold.
    pub fn lineage_of(&self, lance: &str, table: &str, version: u64) -> BTreeSet<String> {
        self.lineage
            .get(&(lance.to_string(), table.to_string(), version))
            .cloned()
            .unwrap_or_default()
    }

    /// Is the newest version of a table a late effect of a taken-over
    /// process (a request it had sent before it was taken over)? Such a
    /// version is no one's to own: the next gate holder sweeps it.
    pub(crate) fn late_effect(&self, lance: &str, table: &str, version: u64) -> bool {
        self.writers
            .get(&(lance.to_string(), table.to_string(), version))
            .is_some_and(|w| self.taken_over.contains(w))
    }

    /// Whether two table versions hold the same rows, index and layout.
    fn same_image(&self, lance: &str, table: &str, v: u64, other: &str, w: u64) -> bool {
        (
            self.content(lance, table, v),
            self.index(lance, table, v),
            self.layout(lance, table, v),
        ) == (
            self.content(other, table, w),
            self.index(other, table, w),
            self.layout(other, table, w),
        )
    }

    /// The schema a table version is laid out for.
    pub fn layout(&self, lance: &str, table: &str, version: u64) -> &str {
        self.layouts
            .get(&(lance.to_string(), table.to_string(), version))
            .map_or(SCHEMA_ID, String::as_str)
    }

    /// Carry what version `from` of one line records (its index and its
    /// layout) to version `to` of line `into`.
    fn carry_records(&mut self, lance: &str, table: &str, from: u64, into: &str, to: u64) {
        let key = (into.to_string(), table.to_string(), to);
        if let Some(ix) = self.index(lance, table, from).cloned() {
            self.indexes.insert(key.clone(), ix);
        }
        let file = (lance.to_string(), table.to_string(), from);
        if let Some(f) = self.index_files.get(&file).cloned() {
            self.index_files.insert(key.clone(), f);
        }
        let layout = self.layout(lance, table, from).to_string();
        self.layouts.insert(key, layout);
    }

    /// The index each table of a branch should record at `commit`: the rows
    /// of the table when its last optimize in the history committed.
    pub fn expected_indexes(&self, commit: &CommitId) -> Option<BTreeMap<String, Rows>> {
        let mut chain = Vec::new();
        let mut cur = Some(commit.clone());
        while let Some(c) = cur {
            chain.push(c.clone());
            cur = self.commits.get(&c)?.parent.clone();
        }
        let mut rows: BTreeMap<String, Rows> = BTreeMap::new();
        let mut out = BTreeMap::new();
        for c in chain.iter().rev() {
            for (table, changes) in self.effects.get(c)? {
                apply(rows.entry(table.clone()).or_default(), changes);
            }
            if let Some((source, tables)) = self.adopted.get(c) {
                // Taken with the source's version: its index too.
                let theirs = self.expected_indexes(source)?;
                for t in tables {
                    match theirs.get(t) {
                        Some(ix) => out.insert(t.clone(), ix.clone()),
                        None => out.remove(t),
                    };
                }
            }
            for table in self.index_effects.get(c).into_iter().flatten() {
                out.insert(table.clone(), rows.get(table).cloned().unwrap_or_default());
            }
        }
        Some(out)
    }

    /// The content a branch should have at `commit`, from the history of
    /// commit effects alone.
    pub fn expected(&self, commit: &CommitId) -> Option<BTreeMap<String, Rows>> {
        let mut chain = Vec::new();
        let mut cur = Some(commit.clone());
        while let Some(c) = cur {
            let rec = self.commits.get(&c)?;
            chain.push(c.clone());
            cur = rec.parent.clone();
        }
        let mut out: BTreeMap<String, Rows> = TABLES
            .iter()
            .map(|t| (t.to_string(), Rows::new()))
            .collect();
        for c in chain.iter().rev() {
            for (table, changes) in self.effects.get(c)? {
                let rows = out.entry(table.clone()).or_default();
                apply(rows, changes);
            }
        }
        Some(out)
    }

    /// Carry out `io` for process `p`. Call only when [`Self::ready`].
    // One arm per storage request of the protocol: the whole model of what
    // each does to the simulated store.
    pub fn exec(&mut self, p: Proc, io: &Io, fault: Fault) -> IoOut {
        match io {
            Io::LockGate { gate, mode } => {
                if !self.trusted(p) {
                    return IoOut::Locked(Err(format!("process {p}'s lease was lost or lapsed")));
                }
                debug_assert!(self.lock_free_for(p, gate, *mode));
                // Holders that are gone are taken over (and fenced) first.
                let holders: Vec<(Proc, GateMode)> = self
                    .locks
                    .get(gate)
                    .map(|h| h.iter().map(|(q, m)| (*q, *m)).collect())
                    .unwrap_or_default();
                let fence = !self.bugs.no_fence_on_gate_takeover();
                for (q, m) in holders {
                    if q != p && !mode.coexists_with(m) && !self.judge_alive(p, q, fence) {
                        self.locks.get_mut(gate).expect("held").remove(&q);
                    }
                }
                self.locks.entry(gate.clone()).or_default().insert(p, *mode);
                IoOut::Locked(Ok(()))
            }
            Io::UnlockGate { gate } => {
                if let Some(h) = self.locks.get_mut(gate) {
                    h.remove(&p);
                }
                self.locks.retain(|_, h| !h.is_empty());
                IoOut::Locked(Ok(()))
            }
            Io::DropFork { table } => {
                if fault == Fault::FailClean {
                    return IoOut::Done(Err("injected failure".into()));
                }
                let view = self.table_view(table);
                if !view.published
                    && let Some(own) = self.own(table)
                {
                    self.drop_line(&own, Some(&table.table));
                }
                IoOut::Done(fail_unless(fault))
            }
            Io::ReadSchemaId => IoOut::SchemaId(match fault {
                Fault::None => Ok(self.latest().schema.clone()),
                _ => Err("injected read failure".into()),
            }),
            Io::ReadHead { branch } => IoOut::Head(match fault {
                Fault::None => Ok(self.latest().branches.get(branch).map(|r| r.head())),
                _ => Err("injected read failure".into()),
            }),
            Io::TableView { table } => IoOut::TableView(match fault {
                Fault::None => Ok(self.table_view(table)),
                _ => Err("injected read failure".into()),
            }),
            Io::Prepare {
                op,
                attempt,
                branch,
                head,
            } => {
                if fault != Fault::None {
                    return IoOut::Prepared(Err(Some("injected prepare failure".into())));
                }
                IoOut::Prepared(self.prepare(p, op, *attempt, branch, head))
            }
            Io::Discard { op } => {
                self.staged.remove(op);
                IoOut::Done(Ok(()))
            }
            Io::WriteSidecar { intent } => {
                if fault != Fault::FailClean {
                    self.sidecars.insert(intent.op.clone(), (intent.clone(), p));
                    self.sidecar_owner.insert(intent.op.clone(), p);
                }
                IoOut::Done(fail_unless(fault))
            }
            Io::DeleteSidecar { op } => {
                if fault != Fault::FailClean {
                    self.sidecars.remove(op);
                }
                IoOut::Done(fail_unless(fault))
            }
            Io::ListSidecars => IoOut::Sidecars(match fault {
                Fault::None => {
                    let found: Vec<(Intent, Proc)> = self.sidecars.values().cloned().collect();
                    let mut out = Vec::new();
                    for (intent, owner) in found {
                        let owner_alive = self.judge_alive(p, owner, true);
                        // A taken-over owner is fenced once by each process
                        // that finds it dead (its takeover may have been
                        // another's, unfenced).
                        if (self.taken_over.contains(&owner)
                            && !self.fenced_by.contains(&(p, owner)))
                            || self.bugs.fence_on_every_listing()
                        {
                            self.fence(p, owner);
                        }
                        out.push(FoundIntent {
                            intent,
                            owner_alive,
                        });
                    }
                    if self.bugs.fence_on_every_listing() && out.is_empty() {
                        self.fence(p, p);
                    }
                    Ok(out)
                }
                _ => Err("injected list failure".into()),
            }),
            Io::CommitTable { op, table, staged } => {
                IoOut::TableCommit(self.commit(p, op, table, staged, fault))
            }
            Io::RestoreTable { table, to } => {
                IoOut::TableRestore(self.restore(p, table, *to, fault))
            }
            Io::Inspect { intent } => IoOut::Inspected(match fault {
                Fault::None => Ok(self.inspect(intent)),
                _ => Err("injected read failure".into()),
            }),
            Io::Publish { req } => IoOut::Published(self.publish(p, req, fault, None)),
            Io::DropBranchStorage { branch } => {
                if fault == Fault::FailClean {
                    return IoOut::Done(Err("injected failure".into()));
                }
                if let Some((_, lines)) = self.deleted.remove(branch) {
                    for own in lines {
                        let referenced = self
                            .latest()
                            .branches
                            .values()
                            .any(|r| r.tables.values().any(|t| t.lance == own));
                        if !referenced {
                            self.drop_line(&own, None);
                        }
                    }
                }
                IoOut::Done(fail_unless(fault))
            }
        }
    }

    // A write's prepare against its snapshot plus its own pending changes:
    // one pass over its statements, each arm a statement kind's rule.
    fn prepare(
        &mut self,
        p: Proc,
        op: &OpId,
        attempt: u32,
        branch: &str,
        head: &Head,
    ) -> Result<Plan, Option<String>> {
        // A removed head is no longer the head (the newest version always
        // stays): prepare against the newest, and the recheck sees the move.
        let at = match self.expired.contains(&head.version) {
            true => self.latest().version,
            false => head.version,
        };
        let m = self
            .manifests
            .get(at as usize - 1)
            .cloned()
            .ok_or_else(|| Some("no such manifest version".to_string()))?;
        let rec = m
            .branches
            .get(branch)
            .cloned()
            .ok_or_else(|| Some(format!("no branch {branch}")))?;
        let stmts = self.work.get(op).cloned().unwrap_or_default();
        if let [Stmt::Schema { id }] = stmts.as_slice() {
            // Prepared under the exclusive schema gate: the latest state
            // is the one it publishes over.
            let latest = self.latest().clone();
            return self.prepare_schema(p, op, attempt, &latest, id);
        }
        // Evaluate against the snapshot plus this write's own pending changes.
        let base: BTreeMap<String, Rows> = rec
            .tables
            .iter()
            .map(|(t, r)| {
                let rows = self.content(&r.lance, t, r.version).cloned();
                (t.clone(), rows.unwrap_or_default())
            })
            .collect();
        let mut w = Pending::over(base.clone());
        let mut merge = None;
        let mut adopted = BTreeMap::new();
        if let [Stmt::Merge { source }] = stmts.as_slice() {
            let (merged, note) = self.merge_changes(op, source, &rec)?;
            (adopted, w.changes) = merged
                .into_iter()
                .partition(|(t, _)| note.adopt.contains(t));
            merge = Some(note);
        }
        let commit = CommitId(format!("c-{}-{attempt}", op.0));
        match members(&stmts) {
            None => {
                let own: Vec<Stmt> = stmts
                    .iter()
                    .filter(|s| !matches!(s, Stmt::Merge { .. }))
                    .cloned()
                    .collect();
                self.run_stmts(&own, &mut w)?;
            }
            Some(members) => {
                let mut kept = Vec::new();
                for (i, m) in members.iter().enumerate() {
                    let before = w.clone();
                    match self.run_stmts(m, &mut w) {
                        Ok(()) => kept.push(i),
                        Err(_) if self.bugs.group_keeps_a_refused_member() => {}
                        Err(_) => w = before,
                    }
                }
                if kept.is_empty() {
                    return Err(None);
                }
                self.groups.insert(
                    commit.clone(),
                    Group {
                        members,
                        kept,
                        base,
                    },
                );
            }
        }
        let Pending {
            mut changes,
            inserts,
            indexed,
            strict,
            ..
        } = w;
        let mut staged = BTreeMap::new();
        let mut tables = Vec::new();
        for (t, ch) in &changes {
            let own = rec.line(branch, t);
            let base = self.base_on_own_line(&own, t, &rec.tables[t]);
            let txn = format!("{}-{attempt}-{t}", op.0);
            self.txn_commit.insert(txn.clone(), commit.clone());
            let index_file = indexed.contains_key(t).then(|| {
                self.next_file += 1;
                let f = format!("ix{}-{t}", self.next_file);
                self.files.insert(f.clone(), p);
                f
            });
            staged.insert(
                t.clone(),
                Staged {
                    lance: own.clone(),
                    base,
                    changes: ch.clone(),
                    inserts: inserts.get(t).cloned().unwrap_or_default(),
                    index: indexed.get(t).cloned(),
                    index_file,
                    layout: None,
                    txn: txn.clone(),
                },
            );
            tables.push(TablePlan {
                table: TableKey::new(branch, t.clone()),
                base,
                line: Some(own),
                staged: StagedRef(t.clone()),
                txn,
            });
        }
        self.stage_files(p, staged.values().map(|s| s.txn.clone()));
        self.staged.insert(op.clone(), (p, staged));
        if let Some(m) = &merge {
            self.merges
                .insert(commit.clone(), (rec.head.clone(), m.head.commit.clone()));
            if !m.adopt.is_empty() {
                self.adopted
                    .insert(commit.clone(), (m.head.commit.clone(), m.adopt.clone()));
            }
        }
        changes.extend(adopted);
        self.effects.insert(commit.clone(), changes);
        self.index_effects
            .insert(commit.clone(), indexed.into_keys().collect());
        Ok(Plan {
            commit,
            schema: m.schema.clone(),
            class: if strict {
                WriteClass::Strict
            } else {
                WriteClass::Retryable
            },
            tables,
            merge,
            schema_change: None,
        })
    }

    /// Run one write's (or one group member's) statements into `w`; a
    /// statement that cannot apply (a strict insert of an existing id, an
    /// update or delete of a missing one) fails them all.
    fn run_stmts(&self, stmts: &[Stmt], w: &mut Pending) -> Result<(), Option<String>> {
        for s in stmts {
            let t = s.table().to_string();
            let rows = w.view.entry(t.clone()).or_default();
            w.strict |= s.strict();
            if let Stmt::Index { .. } = s {
                w.indexed.insert(t.clone(), rows.clone());
                w.changes.entry(t).or_default();
                continue;
            }
            let change = match s {
                Stmt::Insert { id, val, .. } => {
                    if rows.contains_key(id) && !self.bugs.insert_skips_key_check() {
                        return Err(None); // KeyConflict
                    }
                    // A row this write deleted first may be inserted again:
                    // that replaces nothing the write did not remove itself.
                    let own_delete = w
                        .changes
                        .get(&t)
                        .is_some_and(|c| c.iter().any(|(d, v)| d == id && v.is_none()));
                    if !own_delete {
                        w.inserts.entry(t.clone()).or_default().push(id.clone());
                    }
                    (id.clone(), Some(*val))
                }
                Stmt::Upsert { id, val, .. } => (id.clone(), Some(*val)),
                Stmt::Update { id, val, .. } => {
                    if !rows.contains_key(id) {
                        return Err(None);
                    }
                    (id.clone(), Some(*val))
                }
                Stmt::Delete { id, .. } => {
                    if !rows.contains_key(id) {
                        return Err(None);
                    }
                    (id.clone(), None)
                }
                Stmt::Index { .. } | Stmt::Merge { .. } | Stmt::Schema { .. } | Stmt::Member => {
                    unreachable!("not a row statement")
                }
            };
            apply(rows, std::slice::from_ref(&change));
            w.changes.entry(t).or_default().push(change);
        }
        Ok(())
    }

    /// A group commit's answers against its model: the members its caller
    /// was told committed (`acked`), run in order over the rows its
    /// snapshot held, each apply and make exactly what the commit wrote.
    /// So no acknowledged member is missing from it and no refused one is
    /// in it.
    pub fn group_violation(
        &self,
        commit: &CommitId,
        acked: &[usize],
    ) -> Option<(&'static str, String)> {
        const INV: &str = "a group commit holds exactly the members it acknowledged";
        let g = self.groups.get(commit)?;
        let mut w = Pending::over(g.base.clone());
        for &i in acked {
            if self.run_stmts(&g.members[i], &mut w).is_err() {
                return Some((
                    INV,
                    format!(
                        "{commit:?} acknowledged member {i} {:?}, which cannot apply after members {:?}",
                        g.members[i],
                        &acked[..acked.iter().position(|&a| a == i).unwrap_or(0)]
                    ),
                ));
            }
        }
        let wrote = self.effects.get(commit)?;
        for (t, base) in &g.base {
            let mut want = base.clone();
            apply(
                &mut want,
                w.changes.get(t).map_or(&[][..], |c| c.as_slice()),
            );
            let mut got = base.clone();
            apply(&mut got, wrote.get(t).map_or(&[][..], |c| c.as_slice()));
            if want != got {
                return Some((
                    INV,
                    format!(
                        "{commit:?} writes {t} as {got:?}; its acknowledged members {acked:?} make {want:?}"
                    ),
                ));
            }
        }
        None
    }

    /// The version a write to table `t` stages on, on line `own`: the
    /// named one when the branch owns the table, else the top of a fork
    /// made from the shared version (invisible until published).
    fn base_on_own_line(&mut self, own: &str, t: &str, r: &TRef) -> u64 {
        if r.lance == own {
            return r.version;
        }
        let key = (own.to_string(), t.to_string());
        if !self.tables.contains_key(&key) {
            let rows = self
                .content(&r.lance, t, r.version)
                .cloned()
                .unwrap_or_default();
            self.tables
                .insert(key, BTreeMap::from([(r.version, (rows, None))]));
            let (from, version) = (r.lance.clone(), r.version);
            self.carry_records(&from, t, version, own, version);
            let held = self.lineage_of(&from, t, version);
            self.lineage
                .insert((own.to_string(), t.to_string(), version), held);
        }
        self.latest_version(own, t).expect("fork exists")
    }

    /// A schema apply: every table of every branch moves to the new
    /// layout, each on its branch's own line, with no row changes.
    fn prepare_schema(
        &mut self,
        p: Proc,
        op: &OpId,
        attempt: u32,
        m: &ManifestV,
        to: &str,
    ) -> Result<Plan, Option<String>> {
        if m.schema == to {
            return Err(None);
        }
        let commit = CommitId(format!("c-{}-{attempt}", op.0));
        let mut staged = BTreeMap::new();
        let mut tables = Vec::new();
        for (branch, rec) in &m.branches {
            for (t, r) in &rec.tables {
                let own = rec.line(branch, t);
                let base = self.base_on_own_line(&own, t, r);
                let txn = format!("{}-{attempt}-{branch}-{t}", op.0);
                self.txn_commit.insert(txn.clone(), commit.clone());
                let name = format!("{branch}/{t}");
                staged.insert(
                    name.clone(),
                    Staged {
                        lance: own.clone(),
                        base,
                        changes: Vec::new(),
                        inserts: Vec::new(),
                        index: None,
                        index_file: None,
                        layout: Some(to.to_string()),
                        txn: txn.clone(),
                    },
                );
                tables.push(TablePlan {
                    table: TableKey::new(branch, t.clone()),
                    base,
                    line: Some(own),
                    staged: StagedRef(name),
                    txn,
                });
            }
        }
        self.stage_files(p, staged.values().map(|s| s.txn.clone()));
        self.staged.insert(op.clone(), (p, staged));
        self.schema_commits.insert(commit.clone());
        self.effects.insert(commit.clone(), BTreeMap::new());
        self.index_effects.insert(commit.clone(), Vec::new());
        Ok(Plan {
            commit,
            schema: m.schema.clone(),
            class: WriteClass::Retryable,
            tables,
            merge: None,
            schema_change: Some(SchemaChange {
                from: m.schema.clone(),
                to: to.to_string(),
                manifest: m.version,
                created: Vec::new(),
            }),
        })
    }

    /// A merge's changes to the target, and what it publishes beside them.
    /// As production does, a table the target has not changed since the
    /// base and the source has is taken as the source has it (`adopt`: no
    /// table commit, the publish points the target at the source's version
    /// and moves it to a fresh line for that table); every other table the
    /// merge changes gets a table commit.
    fn merge_changes(
        &mut self,
        op: &OpId,
        source: &str,
        target: &BranchRec,
    ) -> Result<(BTreeMap<String, Changes>, MergeOf), Option<String>> {
        let pinned_head = match self.pins.get(op) {
            Some(h) => h.clone(),
            None => {
                let head = self.latest().branches.get(source).ok_or(None)?.head();
                self.pins.insert(op.clone(), head.clone());
                head
            }
        };
        let pinned = pinned_head.commit.clone();
        let base = self
            .merge_base(&target.head, &pinned)
            .ok_or_else(|| Some("no common ancestor".to_string()))?;
        if base == pinned {
            return Err(None); // up to date
        }
        let history = || Some("a merge side has no history".to_string());
        let b = self.expected(&base).ok_or_else(history)?;
        let s = self.expected(&pinned).ok_or_else(history)?;
        let t = self.expected(&target.head).ok_or_else(history)?;
        let merged = three_way(&b, &s, &t).ok_or(None)?;
        let mut changes = BTreeMap::new();
        for (table, rows) in &merged {
            let now = t.get(table).cloned().unwrap_or_default();
            let mut ids: Vec<&String> = rows.keys().chain(now.keys()).collect();
            ids.sort();
            ids.dedup();
            let ch: Changes = ids
                .into_iter()
                .filter(|id| rows.get(*id) != now.get(*id))
                .map(|id| (id.clone(), rows.get(id).copied()))
                .collect();
            if !ch.is_empty() {
                changes.insert(table.clone(), ch);
            }
        }
        let source_refs = self.refs_at(pinned_head.version, source, &pinned);
        let base_refs = self.commits.get(&base).and_then(|c| {
            let m = self.manifests.get(c.version as usize - 1)?;
            m.branches.values().find(|r| r.head == base)
        });
        let adopt = match (source_refs, base_refs) {
            (Some(s), Some(b)) => TABLES
                .iter()
                .map(|t| t.to_string())
                .filter(|t| {
                    let (b, s, t) = (b.tables.get(t), s.tables.get(t), target.tables.get(t));
                    s != t && b == t
                })
                .collect(),
            _ => Vec::new(),
        };
        Ok((
            changes,
            MergeOf {
                source: source.to_string(),
                head: pinned_head,
                adopt,
                fast_forward: false,
            },
        ))
    }

    /// Branch `name`'s record in graph version `version`, if its head there
    /// is `head`.
    fn refs_at(&self, version: u64, name: &str, head: &CommitId) -> Option<&BranchRec> {
        let m = self.manifests.get((version as usize).checked_sub(1)?)?;
        m.branches.get(name).filter(|r| &r.head == head)
    }

    /// Every commit `c` descends from, itself included, by both parents.
    fn ancestors(&self, c: &CommitId) -> std::collections::BTreeSet<CommitId> {
        let mut seen = std::collections::BTreeSet::new();
        let mut todo = vec![c.clone()];
        while let Some(x) = todo.pop() {
            if !seen.insert(x.clone()) {
                continue;
            }
            if let Some(rec) = self.commits.get(&x) {
                todo.extend(rec.parent.iter().cloned());
                todo.extend(rec.merged.iter().cloned());
            }
        }
        seen
    }

    /// The newest common ancestor of two commits.
    pub fn merge_base(&self, a: &CommitId, b: &CommitId) -> Option<CommitId> {
        let theirs = self.ancestors(b);
        self.ancestors(a)
            .into_iter()
            .filter(|c| theirs.contains(c))
            .max_by_key(|c| self.commits.get(c).map(|r| r.version))
    }

    /// Every published merge commit has the source head as its second
    /// parent, and its content is the three-way merge of its base, source
    /// and target: whatever crashed or raced, recovery included.
    pub fn merge_violation(&self) -> Option<(&'static str, String)> {
        for (commit, (target, source)) in &self.merges {
            let Some(rec) = self.commits.get(commit) else {
                continue;
            };
            let carried = self
                .manifests
                .get(rec.version as usize - 1)
                .is_some_and(|m| m.carries.as_ref() == Some(commit));
            if !carried {
                continue;
            }
            if rec.merged.as_ref() != Some(source) {
                return Some((
                    "a merge commit names the merged source head as its second parent",
                    format!(
                        "{commit:?} has second parent {:?}, not {source:?}",
                        rec.merged
                    ),
                ));
            }
            let base = self.merge_base(target, source)?;
            let naive = three_way(
                &self.expected(&base)?,
                &self.expected(source)?,
                &self.expected(target)?,
            );
            if naive.as_ref() != self.expected(commit).as_ref() {
                return Some((
                    "the merged image is the three-way merge of base, source and target",
                    format!(
                        "{commit:?} shows {:?}, the merge of {base:?}, {source:?} and {target:?} is {naive:?}",
                        self.expected(commit)
                    ),
                ));
            }
        }
        None
    }

    // A table commit as Lance makes it (refused unless on its base, a
    // rebase when planted), with the provenance the checks compare against.
    fn commit(
        &mut self,
        p: Proc,
        op: &OpId,
        table: &TableKey,
        staged: &StagedRef,
        fault: Fault,
    ) -> CommitResult {
        if matches!(fault, Fault::Conflict) {
            return CommitResult::Conflict("injected conflict".into());
        }
        if fault == Fault::FailClean {
            return CommitResult::Unknown("injected failure".into());
        }
        let Some(st) = self
            .staged
            .get_mut(op)
            .and_then(|(_, s)| s.remove(&staged.0))
        else {
            return CommitResult::Conflict(format!("nothing staged for {table:?}"));
        };
        if !self.data.contains_key(&st.txn) && !self.taken_over.contains(&p) {
            self.violations.push(format!(
                "a writer's staged files stay while it may commit them: {op:?} committed {table:?} with {}, which a cleanup removed",
                st.txn
            ));
        }
        let key = (st.lance.clone(), table.table.clone());
        let Some(latest) = self.latest_version(&st.lance, &table.table) else {
            return CommitResult::Conflict("table vanished".into());
        };
        if latest != st.base {
            // A taken-over writer's late commit may meet a version its
            // gate's next holder made, or be what a holder meets; anything
            // else is the protocol's fault.
            let foreign_late =
                (st.base + 1..=latest).all(|v| self.late_effect(&st.lance, &table.table, v));
            if !foreign_late && !self.taken_over.contains(&p) {
                self.violations.push(format!(
                    "no lost update: {op:?} committed {table:?} over version {latest}, but it was staged at version {}",
                    st.base
                ));
            }
            if !self.bugs.accept_any_commit_version() {
                // The substrate pins the commit to base + 1: the storage
                // library would rebase it, and it refuses instead.
                return CommitResult::Conflict(format!(
                    "{table:?} moved past its base {} (now {latest}): refused rather than rebased",
                    st.base
                ));
            }
        }
        // As the storage library does: on the latest version, whatever
        // landed after the base (a rebase).
        let mut rows = self.tables[&key][&latest].0.clone();
        // A strict insert is checked against what it read (its base): what
        // a rebase brings in is the provenance check's to find.
        let read = &self.tables[&key][&st.base].0;
        for id in &st.inserts {
            if read.contains_key(id) {
                self.violations.push(format!(
                    "strict insert never overwrites: {op:?} inserted existing id {id} into {table:?}"
                ));
            }
        }
        apply(&mut rows, &st.changes);
        let v = latest + 1;
        let mut held = self.lineage_of(&st.lance, &table.table, latest);
        held.insert(st.txn.clone());
        self.tables
            .get_mut(&key)
            .expect("table")
            .insert(v, (rows, Some(st.txn)));
        self.carry_records(&st.lance, &table.table, latest, &st.lance, v);
        let at = (st.lance.clone(), table.table.clone(), v);
        self.lineage.insert(at.clone(), held);
        self.writers.insert(at.clone(), p);
        if let Some(ix) = st.index {
            self.indexes.insert(at.clone(), ix);
        }
        if let Some(f) = st.index_file {
            self.index_files.insert(at.clone(), f);
        }
        if let Some(layout) = st.layout {
            self.layouts.insert(at, layout);
        }
        match fault {
            Fault::FailAfterEffect => {
                CommitResult::Unknown("injected failure after the commit landed".into())
            }
            _ => CommitResult::Committed { version: v },
        }
    }

    fn restore(&mut self, p: Proc, table: &TableKey, to: u64, fault: Fault) -> Result<u64, String> {
        if fault == Fault::FailClean {
            return Err("injected failure".into());
        }
        let own = self.own(table).ok_or("branch gone")?;
        let key = (own.clone(), table.table.clone());
        let hist = self.tables.get_mut(&key).ok_or("table gone")?;
        let rows = hist.get(&to).ok_or("no such version")?.0.clone();
        let v = hist.keys().next_back().copied().expect("non-empty") + 1;
        hist.insert(v, (rows, None));
        self.carry_records(&own, &table.table, to, &own, v);
        let held = self.lineage_of(&own, &table.table, to);
        let at = (own.clone(), table.table.clone(), v);
        self.lineage.insert(at.clone(), held);
        self.writers.insert(at, p);
        match fault {
            Fault::FailAfterEffect => Err("injected failure after the restore".into()),
            _ => Ok(v),
        }
    }

    fn inspect(&self, intent: &Intent) -> Inspection {
        let rec = self.latest().branches.get(&intent.branch);
        let published = rec.is_some_and(|r| r.head == intent.commit)
            || self.commits.get(&intent.commit).is_some_and(|c| {
                // Trusted only if the version it names exists and carries it.
                self.manifests
                    .get(c.version as usize - 1)
                    .is_some_and(|m| m.carries.as_ref() == Some(&intent.commit))
            });
        let mut landed = Vec::new();
        let mut latest = Vec::new();
        for t in &intent.tables {
            let hist = self
                .own(&t.table)
                .and_then(|o| self.tables.get(&(o, t.table.table.clone())));
            match hist {
                Some(h) => {
                    let l = h
                        .range(t.base + 1..)
                        .find(|(_, (_, txn))| txn.as_deref() == Some(&t.txn))
                        .map(|(v, _)| *v);
                    landed.push(l);
                    latest.push(h.keys().next_back().copied());
                }
                None => {
                    landed.push(None);
                    latest.push(None);
                }
            }
        }
        Inspection {
            sidecar: self.sidecars.contains_key(&intent.op),
            published,
            head: rec.map(|r| r.head()),
            landed,
            latest,
            // Fences change nothing, so they do not count.
            validated_graph_current: intent.schema_change.as_ref().is_none_or(|s| {
                self.manifests
                    .iter()
                    .skip(s.manifest as usize)
                    .all(|m| m.fence)
            }),
        }
    }

    /// Publish `req` for process `p`. `read`: the manifest version the
    /// publish read with its lease check, on which its compare-and-swap
    /// must land (`None`: read and swapped in this one step).
    // One arm per kind of change a publish carries, as production's
    // substrate has them; each arm is the whole rule for that kind.
    pub fn publish(
        &mut self,
        p: Proc,
        req: &PublishReq,
        fault: Fault,
        read: Option<u64>,
    ) -> PublishResult {
        if fault == Fault::FailClean {
            // As on real storage, a commit's record is written before the
            // version file that carries it: a failure between the two leaves
            // a record no manifest version carries, which nothing may trust.
            if self.bugs.version_before_record()
                && let Change::Commit { commit, .. } = &req.change
                && let Some(rec) = self.latest().branches.get(&req.branch)
                && Some(rec.head()) == req.expected
            {
                // The planted bug: the version lands first, its record never.
                let mut next = self.latest().clone();
                next.version += 1;
                next.carries = Some(commit.clone());
                next.fence = false;
                let rec = next.branches.get_mut(&req.branch).expect("checked");
                rec.head = commit.clone();
                rec.updated_at = next.version;
                self.manifests.push(next);
                return PublishResult::Unknown("injected failure".into());
            }
            if let Change::Commit { commit, .. } = &req.change
                && let Some(rec) = self.latest().branches.get(&req.branch)
                && Some(rec.head()) == req.expected
                && !self.commits.contains_key(commit)
            {
                let orphan = CommitRec {
                    parent: Some(rec.head.clone()),
                    merged: None,
                    version: self.latest().version + 1,
                };
                self.commits.insert(commit.clone(), orphan);
            }
            return PublishResult::Unknown("injected failure".into());
        }
        let latest = self.latest().clone();
        if read.is_some_and(|r| r != latest.version) {
            // Lost the compare-and-swap: the caller reads (and checks its
            // lease) again.
            return PublishResult::Unknown(PUBLISH_RACE.into());
        }
        let current = latest.branches.get(&req.branch);
        let actual = current.map(|r| r.head());
        if actual != req.expected {
            return PublishResult::HeadMoved { actual };
        }
        let version = latest.version + 1;
        let mut next = latest.clone();
        next.version = version;
        next.carries = None;
        next.fence = false;
        match &req.change {
            Change::Commit {
                commit,
                tables,
                merge,
                schema_change,
            } => {
                for (k, v) in tables {
                    let Some(rec) = next.branches.get_mut(&k.branch) else {
                        return PublishResult::Refused(format!("no branch {}", k.branch));
                    };
                    let own = rec.line(&k.branch, &k.table);
                    rec.tables.insert(
                        k.table.clone(),
                        TRef {
                            lance: own,
                            version: *v,
                        },
                    );
                    // Another branch's tables move under its unchanged head.
                    rec.updated_at = version;
                }
                if let Some(s) = schema_change {
                    // The protocol's to guarantee (the exclusive schema gate,
                    // the roll-forward verdict), so a violation, not a refusal.
                    let moved = self
                        .manifests
                        .iter()
                        .skip(s.manifest as usize)
                        .any(|m| !m.fence);
                    if latest.schema != s.from || moved {
                        self.violations.push(format!(
                            "a schema is accepted only over the graph it was validated against: {} validated {} at graph version {}, published over {} at {}",
                            s.to, s.from, s.manifest, latest.schema, latest.version
                        ));
                    }
                    next.schema = s.to.clone();
                }
                let source = merge.as_ref().map(|m| {
                    self.refs_at(m.head.version, &m.source, &m.head.commit)
                        .cloned()
                });
                let rec = next.branches.get_mut(&req.branch).expect("checked");
                if let (Some(m), Some(src)) = (merge, source) {
                    let Some(src) = src else {
                        return PublishResult::Refused("the merge source is gone".into());
                    };
                    for t in &m.adopt {
                        let Some(theirs) = src.tables.get(t).cloned() else {
                            return PublishResult::Refused(format!("the source has no {t}"));
                        };
                        if theirs.lance != rec.line(&req.branch, t) {
                            rec.lines
                                .insert(t.clone(), format!("{}-v{version}", req.branch));
                        }
                        rec.tables.insert(t.clone(), theirs);
                    }
                }
                let parent = rec.head.clone();
                rec.head = commit.clone();
                rec.updated_at = version;
                next.carries = Some(commit.clone());
                self.commits.insert(
                    commit.clone(),
                    CommitRec {
                        parent: Some(parent),
                        merged: merge.as_ref().map(|m| m.head.commit.clone()),
                        version,
                    },
                );
            }
            Change::Repoint { tables } => {
                let mut moved = false;
                for (k, v) in tables {
                    let Some(rec) = next.branches.get_mut(&k.branch) else {
                        continue;
                    };
                    let own = rec.line(&k.branch, &k.table);
                    if let Some(r) = rec.tables.get_mut(&k.table)
                        && r.lance == own
                        && r.version != *v
                    {
                        r.version = *v;
                        rec.updated_at = version;
                        moved = true;
                    }
                }
                if !moved {
                    return PublishResult::Published {
                        version: latest.version,
                        head: actual,
                    };
                }
            }
            Change::CreateBranch { from, at } => {
                if latest.branches.contains_key(&req.branch) {
                    return PublishResult::Refused("exists".into());
                }
                // The source as it is at the publish, whatever head the
                // writer captured: a past state may name table versions a
                // cleanup has removed since (it keeps only what the graph
                // versions it listed name, and this one is newer).
                let _ = at;
                let Some(src) = latest.branches.get(from).cloned() else {
                    return PublishResult::Refused("source gone".into());
                };
                next.branches.insert(
                    req.branch.clone(),
                    BranchRec {
                        head: src.head,
                        updated_at: version,
                        incarnation: version,
                        tables: src.tables,
                        lines: BTreeMap::new(),
                    },
                );
            }
            Change::DeleteBranch => {
                if req.branch == MAIN {
                    return PublishResult::Refused("main".into());
                }
                if let Some(r) = next.branches.remove(&req.branch) {
                    self.deleted
                        .insert(req.branch.clone(), (p, r.all_lines(&req.branch)));
                }
            }
        }
        let head = next.branches.get(&req.branch).map(|r| r.head());
        if self.taken_over.contains(&p) {
            self.violations.push(format!(
                "a process that lost its lease publishes nothing: incarnation {p}, taken over, published graph version {version}"
            ));
        }
        self.manifests.push(next);
        match fault {
            Fault::FailAfterEffect => {
                PublishResult::Unknown("injected failure after the publish".into())
            }
            _ => PublishResult::Published { version, head },
        }
    }
}

/// Storage-level invariants, shared by both simulation modes. Each returns
/// the violated invariant's name and what was seen.
impl World {
    /// Atomic visibility: every table a branch names at `version` equals what
    /// its commit history says (each commit entirely or not at all). A
    /// deleted branch's storage is reclaimed, so only branches still alive
    /// (in the same incarnation) can be read in the past.
    // Every check a reader of one graph version can make, per branch and
    // table, in one pass.
    pub fn visible_violation(&self, version: u64) -> Option<(&'static str, String)> {
        if self.expired.contains(&version) {
            // A cleanup removed it: the read is refused, typed.
            return None;
        }
        let m = &self.manifests[version as usize - 1];
        let live = &self.latest().branches;
        for (name, rec) in &m.branches {
            if live
                .get(name)
                .is_none_or(|l| l.incarnation != rec.incarnation)
            {
                continue;
            }
            let Some(expected) = self.expected(&rec.head) else {
                return Some((
                    "graph versions and commit parents form a consistent history",
                    format!("branch {name} head {:?} has no commit history", rec.head),
                ));
            };
            let indexes = self.expected_indexes(&rec.head).unwrap_or_default();
            let history = self.ancestors(&rec.head);
            for (table, r) in &rec.tables {
                let foreign = self
                    .lineage_of(&r.lance, table, r.version)
                    .into_iter()
                    .find(|txn| {
                        self.txn_commit
                            .get(txn)
                            .is_none_or(|c| !history.contains(c) && !self.published_apply(c))
                    });
                if let Some(txn) = foreign {
                    return Some((
                        "no row of a rolled-back or failed write is visible in a published version",
                        format!(
                            "graph version {version}, branch {name}, table {table} @ {}/{} holds the effect of {txn}, whose commit {:?} is not in the branch's history",
                            r.lance,
                            r.version,
                            self.txn_commit.get(&txn)
                        ),
                    ));
                }
                let actual = self.content(&r.lance, table, r.version);
                if actual.is_none() && self.trimmed(&r.lance, table, r.version) {
                    return Some((
                        "no readable graph version names a removed table version",
                        format!(
                            "graph version {version}, branch {name}, table {table} @ {}/{} was removed by a cleanup",
                            r.lance, r.version
                        ),
                    ));
                }
                let want = expected.get(table).cloned().unwrap_or_default();
                if actual != Some(&want) {
                    return Some((
                        "atomic visibility",
                        format!(
                            "graph version {version}, branch {name}, table {table} @ {}/{}: shows {actual:?}, its commits say {want:?}",
                            r.lance, r.version
                        ),
                    ));
                }
                let layout = self.layout(&r.lance, table, r.version);
                if layout != m.schema {
                    return Some((
                        "a schema is published with its tables, all at once",
                        format!(
                            "graph version {version} accepts {}, but branch {name}'s table {table} @ {}/{} is laid out for {layout}",
                            m.schema, r.lance, r.version
                        ),
                    ));
                }
                let index = self.index(&r.lance, table, r.version);
                if index != indexes.get(table) {
                    return Some((
                        "atomic visibility",
                        format!(
                            "graph version {version}, branch {name}, table {table} @ {}/{}: records an index of {index:?}, its commits say {:?}",
                            r.lance,
                            r.version,
                            indexes.get(table)
                        ),
                    ));
                }
            }
        }
        None
    }

    /// A schema apply's commit that a graph version published: its table
    /// commits on every branch are in force there.
    fn published_apply(&self, c: &CommitId) -> bool {
        self.schema_commits.contains(c)
            && self.commits.get(c).is_some_and(|r| {
                self.manifests
                    .get(r.version as usize - 1)
                    .is_some_and(|m| m.carries.as_ref() == Some(c))
            })
    }

    fn chain_contains(&self, head: &CommitId, c: &CommitId) -> bool {
        let mut cur = Some(head.clone());
        while let Some(x) = cur {
            if &x == c {
                return true;
            }
            cur = self.commits.get(&x).and_then(|r| r.parent.clone());
        }
        false
    }

    /// Durability: every acknowledged commit `(branch, incarnation, commit)`
    /// is still in its branch's history.
    pub fn durability_violation(
        &self,
        acked: &[(String, u64, CommitId)],
    ) -> Option<(&'static str, String)> {
        let latest = self.latest();
        for (branch, inc, commit) in acked {
            if let Some(rec) = latest.branches.get(branch)
                && rec.incarnation == *inc
                && !self.chain_contains(&rec.head, commit)
            {
                return Some((
                    "durability",
                    format!("acknowledged {commit:?} on {branch} is not in its history"),
                ));
            }
        }
        None
    }

    /// The index files on storage, as a listing names them.
    pub fn index_file_listing(&self) -> Vec<collector::IndexFile> {
        self.files
            .iter()
            .map(|(f, p)| collector::IndexFile {
                path: f.clone(),
                bytes: 1,
                writer: collector::FileWriter::Process(p.to_string()),
            })
            .collect()
    }

    /// Every index file any table version records, and how many versions
    /// there are.
    pub fn index_file_records(&self) -> (std::collections::BTreeSet<String>, usize) {
        let versions = self.tables.values().map(|h| h.len()).sum();
        (self.index_files.values().cloned().collect(), versions)
    }

    pub fn remove_index_files(&mut self, paths: &[String]) {
        for p in paths {
            self.files.remove(p);
        }
    }

    /// A file a table version records is never removed.
    /// (A taken-over writer's late commit may record a file gc removed once
    /// that writer was judged dead: its version is never published, and the
    /// next gate holder sweeps it.)
    pub fn index_file_violation(&self) -> Option<(&'static str, String)> {
        let (at, f) = self
            .index_files
            .iter()
            .find(|((l, t, v), f)| !self.files.contains_key(*f) && !self.late_effect(l, t, *v))?;
        Some((
            "an index file a table version records is never removed",
            format!("{at:?} records {f}, which is gone"),
        ))
    }

    /// What the protocol itself reported breaking while it ran.
    pub fn effect_violation(&self) -> Option<(&'static str, String)> {
        self.violations.first().map(|v| {
            let inv = if v.starts_with("no lost update") {
                "no lost update"
            } else if v.starts_with("a process that lost its lease starts no effect") {
                "a process that lost its lease starts no effect"
            } else if v.starts_with("a process that lost its lease publishes nothing") {
                "a process that lost its lease publishes nothing"
            } else if v.starts_with("a writer's staged files stay") {
                "a writer's staged files stay while it may commit them"
            } else if v.starts_with("a schema is accepted") {
                "a schema is accepted only over the graph it was validated against"
            } else {
                "strict insert never overwrites"
            };
            (inv, v.clone())
        })
    }

    /// No table commit without an owning intent or a published version: a
    /// live branch's physical table whose latest content differs from what
    /// the manifest names is owned by an intent on storage. Holds after every
    /// step, not only once recovery has settled.
    pub fn unowned_effect_violation(&self) -> Option<(&'static str, String)> {
        for (name, rec) in &self.latest().branches {
            for (table, r) in &rec.tables {
                let own = rec.line(name, table);
                let Some(top) = self.latest_version(&own, table) else {
                    continue;
                };
                if self.same_image(&own, table, top, &r.lance, r.version)
                    || self.late_effect(&own, table, top)
                {
                    continue;
                }
                let owned = self.sidecars.values().any(|(i, _)| {
                    i.tables
                        .iter()
                        .any(|t| &t.table.branch == name && &t.table.table == table)
                });
                if !owned {
                    return Some((
                        "no table commit without an owning intent or a published version",
                        format!(
                            "branch {name}: {table} on {own} is at {top} with content the manifest's {}@{} does not have, and no sidecar owns it",
                            r.lance, r.version
                        ),
                    ));
                }
            }
        }
        None
    }

    /// After recovery has settled: versions are contiguous, no sidecar is
    /// left, and every table's latest version is the one its branch names.
    pub fn settled_violation(&self) -> Option<(&'static str, String)> {
        for (i, m) in self.manifests.iter().enumerate() {
            if m.version != i as u64 + 1 {
                return Some((
                    "graph versions and commit parents form a consistent history",
                    format!("manifest {i} has version {}", m.version),
                ));
            }
        }
        if let Some(op) = self.sidecars.keys().next() {
            // (Every process is stopped or quiescent here.)
            return Some((
                "recovery converges and leaves no sidecar",
                format!("sidecar of {op:?} left after recovery"),
            ));
        }
        for (name, rec) in &self.latest().branches {
            for (table, r) in &rec.tables {
                let own = rec.line(name, table);
                if r.lance != own {
                    continue;
                }
                let top = self.latest_version(&own, table);
                // A sweep that restored the named image and stopped before
                // re-pointing the branch leaves a version no one reads; the
                // next writer to the table finds it and sweeps again.
                let settled = |t: u64| {
                    self.late_effect(&own, table, t)
                        || self.same_image(&own, table, t, &r.lance, r.version)
                };
                if top != Some(r.version) && !top.is_some_and(settled) {
                    return Some((
                        "recovery converges and leaves no orphan effect",
                        format!(
                            "branch {name} names {table} @ {} but the table is at {top:?}",
                            r.version
                        ),
                    ));
                }
            }
        }
        None
    }
}

fn fail_unless(fault: Fault) -> Result<(), String> {
    match fault {
        Fault::None => Ok(()),
        _ => Err("injected failure".into()),
    }
}

/// The naive three-way merge of whole contents, row by row: a row changed
/// on one side takes that side's value; both sides to the same value is
/// that value; different values conflict (`None`).
pub fn three_way(
    base: &BTreeMap<String, Rows>,
    source: &BTreeMap<String, Rows>,
    target: &BTreeMap<String, Rows>,
) -> Option<BTreeMap<String, Rows>> {
    let mut out = BTreeMap::new();
    for table in TABLES {
        let empty = Rows::new();
        let (b, s, t) = (
            base.get(*table).unwrap_or(&empty),
            source.get(*table).unwrap_or(&empty),
            target.get(*table).unwrap_or(&empty),
        );
        let mut rows = Rows::new();
        let mut ids: Vec<&String> = b.keys().chain(s.keys()).chain(t.keys()).collect();
        ids.sort();
        ids.dedup();
        for id in ids {
            let (bv, sv, tv) = (b.get(id), s.get(id), t.get(id));
            let v = if sv == bv || sv == tv {
                tv
            } else if tv == bv {
                sv
            } else {
                return None;
            };
            if let Some(v) = v {
                rows.insert(id.clone(), *v);
            }
        }
        out.insert(table.to_string(), rows);
    }
    Some(out)
}

pub fn apply(rows: &mut Rows, changes: &[(String, Option<i64>)]) {
    for (id, v) in changes {
        match v {
            Some(v) => {
                rows.insert(id.clone(), *v);
            }
            None => {
                rows.remove(id);
            }
        }
    }
}
