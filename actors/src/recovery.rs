//! The RecoveryActor: owns the recovery sidecars. It records and deletes them
//! for live writers, and resolves every intent no live writer owns — the
//! dead writers' it finds on storage after a (re)start or a rescan, and any
//! its own writers hand over as stuck. An intent of another process that is
//! still alive is never touched: its own process resolves it.
//!
//! An intent is resolved under its own gates, like a write; the verdict is
//! [`verdict`], a pure function of the intent and what storage shows:
//! already published -> delete the sidecar; every table landed (and still
//! latest) and the branch head unchanged -> publish its commit with its
//! original id (roll forward); otherwise restore every landed table to its
//! base version, re-point the branch at the restored versions (roll back).
//!
//! A writer that finds table versions no published state accounts for
//! (orphans) sends `Suspect`: recovery rescans the sidecars, resolves the
//! dead ones, waits (bounded) while a live foreign intent touches the
//! branch, then sweeps the tables under their gates: an orphaned version of
//! a published table is restored to the version the manifest names and the
//! branch re-pointed; an orphaned unpublished fork is removed. So no
//! sequence of crashes leaves a table that refuses writes.
//!
//! Every step is idempotent, so recovery may crash anywhere and run again.
//! Writers are admitted to a branch only when no unresolved intent or
//! pending sweep touches it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use tracing::{debug, info, warn};

use crate::bugs::Bugs;
use crate::machine::*;
use crate::types::limits::{MAX_RECOVERY_ATTEMPTS, MAX_SWEEP_WAITS, RECOVERY_BACKOFF, SWEEP_WAIT};
use crate::types::*;

/// Timer: retry the job queue after a failed attempt.
pub const TIMER_RETRY: TimerId = 0;
/// Timer: list the sidecars again after the scan at start failed.
pub const TIMER_SCAN: TimerId = 1;
/// Timer: look again at live foreign intents that hold up a sweep.
pub const TIMER_SWEEP_WAIT: TimerId = 2;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Status {
    /// Owned by a live writer of this process.
    InFlight,
    /// Needs resolution; `attempts` failed so far.
    Unresolved { attempts: u32 },
    /// Recovery gave up after too many storage errors; the next start retries.
    GivenUp,
}

#[derive(Clone, Debug)]
struct Entry {
    intent: Intent,
    status: Status,
}

/// One thing recovery resolves under gates.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Job {
    Intent(OpId),
    /// Repair orphaned versions of these tables on a branch.
    Sweep(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Step {
    Acquiring,
    Inspecting,
    Restoring { idx: usize },
    Dropping { idx: usize },
    Publishing,
    Deleting,
}

#[derive(Clone, Debug)]
struct Resolution {
    job: Job,
    /// The intent being resolved (`None` for a sweep).
    intent: Option<Intent>,
    branch: String,
    rop: OpId,
    gates: Vec<(Addr, GateMode)>,
    /// Gates asked for so far (held, or the one being waited on).
    asked: usize,
    views: Vec<GateView>,
    step: Step,
    /// The branch head the roll-back's re-point is published against.
    head: Option<Head>,
    /// Tables to restore: (table, version to restore).
    to_restore: Vec<(TableKey, u64)>,
    /// Unpublished forks to remove.
    to_drop: Vec<TableKey>,
    /// Restored (or already restored) versions to re-point the branch at.
    repoint: Vec<(TableKey, u64)>,
    verdict: Option<Verdict>,
}

/// What recovery does with an intent, given what storage shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The sidecar is gone: another process resolved the intent.
    ResolvedElsewhere,
    /// The manifest carries the commit: only the sidecar is left to delete.
    AlreadyPublished,
    /// The branch is gone: nothing the intent did is reachable.
    Abandoned,
    /// Every table landed, is still latest, and the head is unchanged:
    /// publish the commit under its original id.
    RollForward,
    /// Undo whatever landed.
    RollBack,
}

/// The verdict on an intent. Pure: a function of the intent and the
/// inspection alone.
pub fn verdict(intent: &Intent, ins: &Inspection) -> Verdict {
    if !ins.sidecar {
        return Verdict::ResolvedElsewhere;
    }
    if ins.published {
        return Verdict::AlreadyPublished;
    }
    if ins.head.is_none() {
        return Verdict::Abandoned;
    }
    let all_landed_and_latest =
        (0..intent.tables.len()).all(|i| ins.landed[i].is_some() && ins.landed[i] == ins.latest[i]);
    if all_landed_and_latest
        && ins.validated_graph_current
        && ins.head.as_ref() == Some(&intent.expected)
    {
        Verdict::RollForward
    } else {
        Verdict::RollBack
    }
}

/// Tables, each with a version: to restore to, or to re-point at.
pub type TableVersions = Vec<(TableKey, u64)>;

/// A roll-back, as (tables to restore to a version, tables already restored
/// by an earlier run to re-point at). A landed table still on top is
/// restored to the version just below it — the base, since the gate kept
/// others out; never older, so no one else's commit is undone. A landed
/// table not on top was restored by an earlier run, pinned, so at exactly
/// the next version: that one is re-pointed at, unless the branch names it
/// (or later) already (`named`, from the table's gate view). What lies
/// above it is another writer's (a taken-over writer's late commit, on the
/// restored base) and never this roll-back's to publish.
pub fn rollback_plan(
    intent: &Intent,
    ins: &Inspection,
    named: impl Fn(&TableKey) -> Option<u64>,
) -> (TableVersions, TableVersions) {
    let mut restore = Vec::new();
    let mut repoint = Vec::new();
    for (i, t) in intent.tables.iter().enumerate() {
        match (ins.landed[i], ins.latest[i]) {
            (Some(l), Some(latest)) if l == latest => restore.push((t.table.clone(), l - 1)),
            (Some(l), Some(_)) if named(&t.table).is_none_or(|n| n <= l) => {
                repoint.push((t.table.clone(), l + 1))
            }
            _ => {}
        }
    }
    (restore, repoint)
}

#[derive(Debug)]
enum PendingIo {
    /// The scan at start.
    List,
    /// A rescan asked for by a writer that found orphans (or a sweep's wait).
    Rescan,
    Write(Addr, OpId),
    DeleteForWriter(Addr, OpId),
    Inspect,
    DeleteResolved,
    /// The planted bug's early delete; its completion carries nothing.
    DeleteEarly,
}

pub struct Recovery {
    bugs: Bugs,
    started: bool,
    intents: BTreeMap<OpId, Entry>,
    /// Intents of other, live processes seen in the last scan: never
    /// resolved here, but a sweep waits for them to go away.
    foreign: BTreeMap<OpId, Intent>,
    queue: VecDeque<Job>,
    /// Branch -> tables a sweep must look at.
    sweeps: BTreeMap<String, BTreeSet<TableKey>>,
    /// Branch -> how many times its sweep waited for a live foreign intent.
    sweep_waits: BTreeMap<String, u32>,
    /// Branches whose sweep gave up waiting: writers to them are refused.
    sweeps_given_up: BTreeMap<String, OpId>,
    rescanning: bool,
    resolving: Option<Resolution>,
    admit_waiters: Vec<(Addr, OpId, String)>,
    ready_waiters: Vec<(Addr, OpId)>,
    report: RecoveryReport,
    next_req: ReqId,
    pending: BTreeMap<ReqId, PendingIo>,
    /// A retry timer is armed.
    backoff: bool,
    violations: Vec<String>,
}

impl Default for Recovery {
    fn default() -> Self {
        Self::new(Bugs::default())
    }
}

impl Recovery {
    pub fn new(bugs: Bugs) -> Self {
        Self {
            bugs,
            started: false,
            intents: BTreeMap::new(),
            foreign: BTreeMap::new(),
            queue: VecDeque::new(),
            sweeps: BTreeMap::new(),
            sweep_waits: BTreeMap::new(),
            sweeps_given_up: BTreeMap::new(),
            rescanning: false,
            resolving: None,
            admit_waiters: Vec::new(),
            ready_waiters: Vec::new(),
            report: RecoveryReport::default(),
            next_req: 0,
            pending: BTreeMap::new(),
            backoff: false,
            violations: Vec::new(),
        }
    }

    fn io(&mut self, io: Io, p: PendingIo) -> Effect {
        self.next_req += 1;
        self.pending.insert(self.next_req, p);
        Effect::Io(self.next_req, io)
    }

    /// What keeps writers off `branch`: `Some(None)` while something is being
    /// resolved there, `Some(Some(op))` once recovery gave up on `op`.
    fn blocking(&self, branch: &str) -> Option<Option<OpId>> {
        let given_up = match branch {
            EVERY_BRANCH => self.sweeps_given_up.values().next(),
            b => self.sweeps_given_up.get(b),
        };
        if let Some(op) = given_up {
            return Some(Some(op.clone()));
        }
        if let Some(e) = self
            .intents
            .values()
            .find(|e| e.intent.touches(branch) && e.status != Status::InFlight)
        {
            return Some((e.status == Status::GivenUp).then(|| e.intent.op.clone()));
        }
        if self.sweeps.contains_key(branch) || (branch == EVERY_BRANCH && !self.sweeps.is_empty()) {
            return Some(None);
        }
        None
    }

    fn idle(&self) -> bool {
        self.started
            && self.resolving.is_none()
            && self.queue.is_empty()
            && !self.backoff
            && !self.rescanning
    }

    /// Answer whoever can be answered now.
    fn wake(&mut self) -> Vec<Effect> {
        let mut fx = Vec::new();
        if !self.started {
            return fx;
        }
        let waiters = std::mem::take(&mut self.admit_waiters);
        for (who, op, branch) in waiters {
            match self.blocking(&branch) {
                None => fx.push(Effect::Send(
                    who,
                    Msg::Admitted {
                        op,
                        blocked_by: None,
                    },
                )),
                Some(Some(intent)) => fx.push(Effect::Send(
                    who,
                    Msg::Admitted {
                        op,
                        blocked_by: Some(intent),
                    },
                )),
                Some(None) => self.admit_waiters.push((who, op, branch)),
            }
        }
        if self.idle() {
            for (who, op) in std::mem::take(&mut self.ready_waiters) {
                fx.push(Effect::Send(
                    who,
                    Msg::Ready {
                        op,
                        report: self.report.clone(),
                    },
                ));
            }
        }
        fx
    }

    fn enqueue(&mut self, job: Job) {
        let current = self.resolving.as_ref().map(|r| &r.job);
        if !self.queue.contains(&job) && current != Some(&job) {
            self.queue.push_back(job);
        }
    }

    /// Take in the sidecars found on storage: a dead writer's intent is ours
    /// to resolve; a live one's belongs to its own process.
    fn take_in(&mut self, found: Vec<FoundIntent>) {
        let mut found = found;
        found.sort_by(|a, b| a.intent.op.cmp(&b.intent.op));
        self.foreign.clear();
        for f in found {
            let op = f.intent.op.clone();
            if self.intents.contains_key(&op) {
                continue;
            }
            if f.owner_alive && !self.bugs.recover_live_intent() {
                debug!(op = %op, "a live process's intent: left to it");
                self.foreign.insert(op, f.intent);
                continue;
            }
            info!(op = %op, "a dead writer's intent found");
            self.intents.insert(
                op.clone(),
                Entry {
                    intent: f.intent,
                    status: Status::Unresolved { attempts: 0 },
                },
            );
            self.enqueue(Job::Intent(op));
        }
    }

    /// Start resolving the next queued job, if idle.
    fn pump(&mut self) -> Vec<Effect> {
        if self.resolving.is_some() || self.backoff || !self.started || self.rescanning {
            return self.wake();
        }
        let Some(job) = self.queue.pop_front() else {
            return self.wake();
        };
        let (intent, branch, tables, rop) = match &job {
            Job::Intent(op) => {
                let Some(entry) = self.intents.get(op) else {
                    return self.pump();
                };
                let intent = entry.intent.clone();
                let tables: Vec<TableKey> = intent.tables.iter().map(|t| t.table.clone()).collect();
                let rop = OpId(format!("recover-{}", intent.op));
                info!(op = %intent.op, "resolving recovery intent");
                let branch = intent.branch.clone();
                (Some(intent), branch, tables, rop)
            }
            Job::Sweep(branch) => {
                let Some(tables) = self.sweeps.get(branch).cloned() else {
                    return self.pump();
                };
                if let Some(live) = self
                    .foreign
                    .values()
                    .find(|i| i.touches(branch))
                    .map(|i| i.op.clone())
                {
                    return self.wait_for_foreign(branch.clone(), live);
                }
                info!(branch, ?tables, "sweeping orphaned table versions");
                let rop = OpId(format!("sweep-{branch}"));
                (None, branch.clone(), tables.into_iter().collect(), rop)
            }
        };
        let gates = match &intent {
            Some(i) => i.gates(),
            None => gate_order(&branch, &tables),
        };
        let (gate, mode) = gates[0].clone();
        self.resolving = Some(Resolution {
            job,
            intent,
            branch,
            rop: rop.clone(),
            gates,
            asked: 1,
            views: Vec::new(),
            step: Step::Acquiring,
            head: None,
            to_restore: Vec::new(),
            to_drop: Vec::new(),
            repoint: Vec::new(),
            verdict: None,
        });
        let mut fx = vec![Effect::Send(
            gate,
            Msg::Acquire {
                op: rop,
                mode,
                expect: None,
                under: None,
            },
        )];
        fx.extend(self.wake());
        fx
    }

    /// A sweep must not act while a live process's intent touches its
    /// branch: look again later, a bounded number of times.
    fn wait_for_foreign(&mut self, branch: String, live: OpId) -> Vec<Effect> {
        let waits = self.sweep_waits.entry(branch.clone()).or_insert(0);
        *waits += 1;
        if *waits > MAX_SWEEP_WAITS {
            warn!(branch, op = %live, "a live process's intent kept holding up the repair");
            self.sweeps.remove(&branch);
            self.sweep_waits.remove(&branch);
            self.sweeps_given_up.insert(branch, live.clone());
            self.report.unresolved.push(live);
            return self.pump();
        }
        debug!(branch, op = %live, "sweep waits for a live process's intent");
        self.queue.push_front(Job::Sweep(branch));
        self.backoff = true;
        let mut fx = vec![Effect::SetTimer(TIMER_SWEEP_WAIT, SWEEP_WAIT)];
        fx.extend(self.wake());
        fx
    }

    fn release_gates(res: &Resolution) -> Vec<Effect> {
        res.gates[..res.asked]
            .iter()
            .rev()
            .map(|(g, _)| {
                Effect::Send(
                    g.clone(),
                    Msg::Release {
                        op: res.rop.clone(),
                        left: None,
                    },
                )
            })
            .collect()
    }

    /// The current resolution failed on storage: release, back off, retry.
    fn resolution_failed(&mut self, why: String) -> Vec<Effect> {
        let res = self.resolving.take().expect("resolving");
        let mut fx = Self::release_gates(&res);
        warn!(job = ?res.job, why, "recovery attempt failed");
        match &res.job {
            Job::Intent(op) => {
                let op = op.clone();
                if let Some(entry) = self.intents.get_mut(&op) {
                    let attempts = match entry.status {
                        Status::Unresolved { attempts } => attempts + 1,
                        _ => 1,
                    };
                    if attempts >= MAX_RECOVERY_ATTEMPTS {
                        entry.status = Status::GivenUp;
                        self.report.unresolved.push(op);
                    } else {
                        entry.status = Status::Unresolved { attempts };
                        self.queue.push_back(Job::Intent(op));
                        self.backoff = true;
                        fx.push(Effect::SetTimer(
                            TIMER_RETRY,
                            RECOVERY_BACKOFF * u64::from(attempts),
                        ));
                    }
                }
            }
            Job::Sweep(branch) => {
                let waits = self.sweep_waits.entry(branch.clone()).or_insert(0);
                *waits += 1;
                if *waits > MAX_RECOVERY_ATTEMPTS {
                    let op = res.rop.clone();
                    self.sweeps.remove(branch);
                    self.sweeps_given_up.insert(branch.clone(), op.clone());
                    self.report.unresolved.push(op);
                } else {
                    let attempts = u64::from(*waits);
                    self.queue.push_back(res.job.clone());
                    self.backoff = true;
                    fx.push(Effect::SetTimer(TIMER_RETRY, RECOVERY_BACKOFF * attempts));
                }
            }
        }
        fx.extend(self.pump());
        fx
    }

    fn resolution_done(&mut self) -> Vec<Effect> {
        let res = self.resolving.take().expect("resolving");
        match &res.job {
            Job::Intent(op) => {
                info!(op = %op, verdict = ?res.verdict, "recovery intent resolved");
                match res.verdict.expect("verdict") {
                    Verdict::ResolvedElsewhere => self.report.resolved_elsewhere.push(op.clone()),
                    Verdict::AlreadyPublished => self.report.already_published.push(op.clone()),
                    Verdict::Abandoned => self.report.abandoned.push(op.clone()),
                    Verdict::RollForward => self.report.rolled_forward.push(op.clone()),
                    Verdict::RollBack => self.report.rolled_back.push(op.clone()),
                }
                self.intents.remove(op);
            }
            Job::Sweep(branch) => {
                info!(branch, restored = ?res.repoint, dropped = ?res.to_drop, "orphans swept");
                if !res.repoint.is_empty() || !res.to_drop.is_empty() {
                    self.report.repaired.push(res.rop.clone());
                }
                self.sweeps.remove(branch);
                self.sweep_waits.remove(branch);
            }
        }
        let mut fx = Self::release_gates(&res);
        fx.extend(self.pump());
        fx
    }

    /// Decide what to do with an inspected intent.
    fn decide(&mut self, ins: Inspection) -> Vec<Effect> {
        let res = self.resolving.as_mut().expect("resolving");
        let intent = res.intent.clone().expect("an intent job");
        let verdict = verdict(&intent, &ins);
        debug!(op = %intent.op, ?verdict, ?ins, "recovery verdict");
        res.verdict = Some(verdict);
        res.head = ins.head.clone();
        match verdict {
            // Its resolver deleted the sidecar last: nothing to undo or delete.
            Verdict::ResolvedElsewhere => self.resolution_done(),
            Verdict::AlreadyPublished if self.bugs.keep_sidecar_when_published() => {
                self.resolution_done()
            }
            Verdict::AlreadyPublished | Verdict::Abandoned => self.finish_job(),
            Verdict::RollForward => {
                let tables = intent
                    .tables
                    .iter()
                    .zip(&ins.landed)
                    .map(|(t, v)| (t.table.clone(), v.expect("landed")))
                    .collect();
                let req = PublishReq {
                    op: res.rop.clone(),
                    branch: intent.branch.clone(),
                    expected: Some(intent.expected.clone()),
                    change: Change::Commit {
                        commit: intent.commit.clone(),
                        tables,
                        merge: if self.bugs.recover_merge_without_source() {
                            None
                        } else {
                            intent.merge.clone()
                        },
                        schema_change: intent.schema_change.clone(),
                    },
                };
                res.step = Step::Publishing;
                vec![Effect::Send(Addr::Publisher, Msg::Publish { req })]
            }
            Verdict::RollBack => {
                let named = |t: &TableKey| {
                    res.gates
                        .iter()
                        .zip(&res.views)
                        .find_map(|((gate, _), view)| match (gate, view) {
                            (Addr::Table(g), GateView::Table(v)) if g == t => v.named,
                            _ => None,
                        })
                };
                let (restore, repoint) = rollback_plan(&intent, &ins, named);
                res.to_restore = restore;
                res.repoint = repoint;
                let mut fx = Vec::new();
                if self.bugs.delete_sidecar_before_restore() {
                    let op = intent.op.clone();
                    fx.push(self.io(Io::DeleteSidecar { op }, PendingIo::DeleteEarly));
                }
                fx.extend(self.restore_next(0));
                fx
            }
        }
    }

    /// A sweep holds its gates: pick out the orphaned tables from the views.
    fn plan_sweep(&mut self) -> Vec<Effect> {
        let res = self.resolving.as_mut().expect("resolving");
        res.head = match &res.views[1] {
            GateView::Branch(h) => h.clone(),
            _ => None,
        };
        if res.head.is_none() {
            // The branch is gone, and with it anything to repair.
            return self.finish_job();
        }
        for ((gate, _), view) in res.gates.iter().zip(&res.views).skip(2) {
            let (Addr::Table(t), GateView::Table(v)) = (gate, view) else {
                continue;
            };
            if !v.orphaned() {
                continue;
            }
            match (v.published, v.named) {
                (true, Some(named)) => res.to_restore.push((t.clone(), named)),
                _ => res.to_drop.push(t.clone()),
            }
        }
        self.restore_next(0)
    }

    fn restore_next(&mut self, idx: usize) -> Vec<Effect> {
        let res = self.resolving.as_mut().expect("resolving");
        if let Some((table, base)) = res.to_restore.get(idx).cloned() {
            res.step = Step::Restoring { idx };
            return vec![Effect::Send(
                Addr::Table(table),
                Msg::RestoreTable {
                    op: res.rop.clone(),
                    to: base,
                },
            )];
        }
        self.drop_next(0)
    }

    fn drop_next(&mut self, idx: usize) -> Vec<Effect> {
        let res = self.resolving.as_mut().expect("resolving");
        if let Some(table) = res.to_drop.get(idx).cloned() {
            res.step = Step::Dropping { idx };
            return vec![Effect::Send(
                Addr::Table(table),
                Msg::DropFork {
                    op: res.rop.clone(),
                },
            )];
        }
        if res.repoint.is_empty() {
            return self.finish_job();
        }
        let head = res.head.clone().expect("a roll-back has a head");
        let mut tables = res.repoint.clone();
        tables.sort();
        let req = PublishReq {
            op: res.rop.clone(),
            branch: res.branch.clone(),
            expected: Some(head),
            change: Change::Repoint { tables },
        };
        res.step = Step::Publishing;
        vec![Effect::Send(Addr::Publisher, Msg::Publish { req })]
    }

    /// The job's storage work is done: an intent's sidecar goes last.
    fn finish_job(&mut self) -> Vec<Effect> {
        let res = self.resolving.as_mut().expect("resolving");
        let Some(intent) = res.intent.clone() else {
            return self.resolution_done();
        };
        res.step = Step::Deleting;
        vec![self.io(
            Io::DeleteSidecar { op: intent.op },
            PendingIo::DeleteResolved,
        )]
    }

    fn on_resolution_msg(&mut self, from: Addr, msg: Msg) -> Vec<Effect> {
        let Some(res) = self.resolving.as_mut() else {
            self.violations.push(format!(
                "recovery got {msg:?} from {from:?} while not resolving"
            ));
            return Vec::new();
        };
        let expected = match (&res.step, &msg) {
            (Step::Acquiring, Msg::Granted { .. }) => {
                res.gates.get(res.views.len()).map(|g| g.0.clone())
            }
            (Step::Restoring { idx }, Msg::TableRestored { .. }) => {
                res.to_restore.get(*idx).map(|t| Addr::Table(t.0.clone()))
            }
            (Step::Dropping { idx }, Msg::ForkDropped { .. }) => {
                res.to_drop.get(*idx).map(|t| Addr::Table(t.clone()))
            }
            (Step::Publishing, Msg::PublishReply { .. }) => Some(Addr::Publisher),
            _ => None,
        };
        if expected.as_ref() != Some(&from) {
            self.violations.push(format!(
                "recovery in step {:?} got {msg:?} from {from:?}, expected from {expected:?}",
                res.step
            ));
            return Vec::new();
        }
        match (res.step.clone(), msg) {
            (Step::Acquiring, Msg::Granted { view, .. }) => {
                if let GateView::Unavailable(e) | GateView::Busy(e) = &view {
                    let e = e.clone();
                    res.views.push(view);
                    return self.resolution_failed(e);
                }
                res.views.push(view);
                if let Some((gate, mode)) = res.gates.get(res.views.len()).cloned() {
                    res.asked += 1;
                    let op = res.rop.clone();
                    return vec![Effect::Send(
                        gate,
                        Msg::Acquire {
                            op,
                            mode,
                            expect: None,
                            under: None,
                        },
                    )];
                }
                match res.intent.clone() {
                    Some(intent) => {
                        res.step = Step::Inspecting;
                        vec![self.io(Io::Inspect { intent }, PendingIo::Inspect)]
                    }
                    None => self.plan_sweep(),
                }
            }
            (Step::Restoring { idx }, Msg::TableRestored { table, result, .. }) => match result {
                Ok(version) => {
                    res.repoint.push((table, version));
                    self.restore_next(idx + 1)
                }
                Err(e) => self.resolution_failed(e),
            },
            (Step::Dropping { idx }, Msg::ForkDropped { result, .. }) => match result {
                Ok(()) => self.drop_next(idx + 1),
                Err(e) => self.resolution_failed(e),
            },
            (Step::Publishing, Msg::PublishReply { result, .. }) => match result {
                PublishResult::Published { .. } => self.finish_job(),
                other => self.resolution_failed(format!("{other:?}")),
            },
            (step, other) => {
                self.violations
                    .push(format!("recovery in step {step:?} got {other:?}"));
                Vec::new()
            }
        }
    }

    /// Intents known to this actor, for the simulator's checks.
    pub fn known_intents(&self) -> impl Iterator<Item = &Intent> {
        self.intents.values().map(|e| &e.intent)
    }

    pub fn is_started(&self) -> bool {
        self.started
    }
}

impl Machine for Recovery {
    fn on_start(&mut self, _now: Tick) -> Vec<Effect> {
        info!("recovery scan");
        vec![self.io(Io::ListSidecars, PendingIo::List)]
    }

    fn on_msg(&mut self, _now: Tick, from: Addr, msg: Msg) -> Vec<Effect> {
        match msg {
            Msg::Admit { op, branch } => {
                self.admit_waiters.push((from, op, branch));
                self.wake()
            }
            Msg::AwaitReady { op } => {
                self.ready_waiters.push((from, op));
                self.wake()
            }
            Msg::CheckIntents { op, branch } => {
                let clear = self.blocking(&branch).is_none();
                vec![Effect::Send(from, Msg::IntentsChecked { op, clear })]
            }
            Msg::RecordIntent { intent } => {
                let op = intent.op.clone();
                debug!(op = %op, "write sidecar");
                self.intents.insert(
                    op.clone(),
                    Entry {
                        intent: intent.clone(),
                        status: Status::InFlight,
                    },
                );
                vec![self.io(Io::WriteSidecar { intent }, PendingIo::Write(from, op))]
            }
            Msg::IntentDone { op } => {
                debug!(op = %op, "delete sidecar");
                vec![self.io(
                    Io::DeleteSidecar { op: op.clone() },
                    PendingIo::DeleteForWriter(from, op),
                )]
            }
            Msg::IntentStuck { op } => {
                if let Some(e) = self.intents.get_mut(&op) {
                    if e.status == Status::InFlight {
                        e.status = Status::Unresolved { attempts: 0 };
                    }
                    self.enqueue(Job::Intent(op.clone()));
                }
                let mut fx = vec![Effect::Send(from, Msg::StuckNoted { op })];
                fx.extend(self.pump());
                fx
            }
            Msg::Suspect { op, branch, tables } => {
                info!(op = %op, branch, ?tables, "a writer found orphaned table versions");
                // A table is swept under its own branch's gates (a schema
                // apply's span branches).
                self.sweeps_given_up.remove(&branch);
                for t in tables {
                    self.sweeps.entry(t.branch.clone()).or_default().insert(t);
                }
                if self.rescanning || !self.started {
                    return self.wake();
                }
                self.rescanning = true;
                vec![self.io(Io::ListSidecars, PendingIo::Rescan)]
            }
            // Recovery asks for its gates one view at a time (it is rare):
            // a lock held is news only with its view.
            Msg::Locked { .. } if self.resolving.is_some() => Vec::new(),
            msg @ (Msg::Granted { .. }
            | Msg::TableRestored { .. }
            | Msg::ForkDropped { .. }
            | Msg::PublishReply { .. }) => self.on_resolution_msg(from, msg),
            other => {
                self.violations
                    .push(format!("recovery got unexpected {other:?}"));
                Vec::new()
            }
        }
    }

    fn on_io(&mut self, _now: Tick, req: ReqId, out: IoOut) -> Vec<Effect> {
        let Some(pending) = self.pending.remove(&req) else {
            self.violations.push(format!(
                "recovery: completion #{req} {out:?} of nothing it asked"
            ));
            return Vec::new();
        };
        match (pending, out) {
            (PendingIo::List, IoOut::Sidecars(Ok(found))) => {
                info!(count = found.len(), "recovery sidecars found");
                self.take_in(found);
                self.started = true;
                self.pump()
            }
            (PendingIo::Rescan, IoOut::Sidecars(Ok(found))) => {
                self.rescanning = false;
                self.take_in(found);
                // The sweeps go after the dead intents they may depend on.
                let branches: Vec<String> = self.sweeps.keys().cloned().collect();
                for b in branches {
                    self.enqueue(Job::Sweep(b));
                }
                self.pump()
            }
            (p @ (PendingIo::List | PendingIo::Rescan), out) => {
                warn!(?out, "recovery scan failed; retrying");
                if matches!(p, PendingIo::Rescan) {
                    self.rescanning = false;
                }
                self.backoff = true;
                vec![Effect::SetTimer(TIMER_SCAN, RECOVERY_BACKOFF)]
            }
            (PendingIo::Write(who, op), IoOut::Done(result)) => {
                vec![Effect::Send(who, Msg::IntentRecorded { op, result })]
            }
            (PendingIo::DeleteForWriter(who, op), IoOut::Done(result)) => {
                let mut fx = Vec::new();
                match &result {
                    Ok(()) => {
                        self.intents.remove(&op);
                    }
                    Err(_) => {
                        if let Some(e) = self.intents.get_mut(&op) {
                            e.status = Status::Unresolved { attempts: 0 };
                            self.enqueue(Job::Intent(op.clone()));
                        }
                    }
                }
                fx.push(Effect::Send(who, Msg::IntentDeleted { op, result }));
                fx.extend(self.pump());
                fx
            }
            (PendingIo::Inspect, IoOut::Inspected(Ok(ins))) => self.decide(ins),
            (PendingIo::Inspect, IoOut::Inspected(Err(e))) => self.resolution_failed(e),
            (PendingIo::DeleteResolved, IoOut::Done(Ok(()))) => self.resolution_done(),
            (PendingIo::DeleteResolved, IoOut::Done(Err(e))) => self.resolution_failed(e),
            (PendingIo::DeleteEarly, IoOut::Done(_)) => Vec::new(),
            (p, out) => {
                self.violations
                    .push(format!("recovery: completion {out:?} does not match {p:?}"));
                Vec::new()
            }
        }
    }

    fn on_timer(&mut self, _now: Tick, timer: TimerId) -> Vec<Effect> {
        self.backoff = false;
        match timer {
            TIMER_SCAN if !self.started => vec![self.io(Io::ListSidecars, PendingIo::List)],
            TIMER_SCAN | TIMER_SWEEP_WAIT => {
                if self.rescanning {
                    return self.wake();
                }
                // A sweep's wait (or a failed rescan) ends with a fresh look.
                if let Some(pos) = self.queue.iter().position(|j| matches!(j, Job::Sweep(_))) {
                    self.queue.remove(pos);
                }
                self.rescanning = true;
                vec![self.io(Io::ListSidecars, PendingIo::Rescan)]
            }
            TIMER_RETRY => self.pump(),
            other => {
                self.violations
                    .push(format!("recovery: unknown timer {other}"));
                Vec::new()
            }
        }
    }

    fn check(&self) -> Result<(), String> {
        if let Some(res) = &self.resolving
            && res.views.len() > res.asked
        {
            return Err(format!("{:?} holds more views than gates asked", res.job));
        }
        match self.violations.first() {
            Some(v) => Err(v.clone()),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn intent(tables: usize) -> Intent {
        Intent {
            op: OpId("w".into()),
            branch: "main".into(),
            expected: head("c0", 5),
            commit: CommitId("c1".into()),
            tables: (0..tables)
                .map(|i| IntentTable {
                    table: TableKey::new("main", format!("t{i}")),
                    base: 3,
                    txn: format!("x{i}"),
                })
                .collect(),
            merge: None,
            schema_change: None,
        }
    }

    #[test]
    fn a_schema_intent_keeps_writers_off_every_branch_and_is_resolved_exclusively() {
        let write = intent(1);
        assert!(write.touches("main") && !write.touches("dev"));
        assert_eq!(write.gates()[0], (Addr::Schema, GateMode::Shared));
        let mut apply = intent(0);
        apply.tables.push(IntentTable {
            table: TableKey::new("dev", "node:A"),
            base: 2,
            txn: "y".into(),
        });
        assert!(apply.touches("dev"), "a table on dev");
        apply.schema_change = Some(SchemaChange {
            from: "s1".into(),
            to: "s2".into(),
            manifest: 1,
            created: Vec::new(),
        });
        assert!(apply.touches("feature"), "a branch it has no table on");
        assert_eq!(
            apply.gates(),
            vec![
                (Addr::Schema, GateMode::Exclusive),
                (Addr::Branch("main".into()), GateMode::Exclusive),
                (
                    Addr::Table(TableKey::new("dev", "node:A")),
                    GateMode::Exclusive
                ),
            ]
        );
        let mut r = Recovery {
            started: true,
            ..Recovery::default()
        };
        r.intents.insert(
            apply.op.clone(),
            Entry {
                intent: apply,
                status: Status::Unresolved { attempts: 0 },
            },
        );
        assert_eq!(r.blocking("feature"), Some(None));
        assert_eq!(r.blocking(EVERY_BRANCH), Some(None));
    }

    fn head(c: &str, v: u64) -> Head {
        Head {
            commit: CommitId(c.into()),
            version: v,
        }
    }

    fn ins(
        published: bool,
        head: Option<Head>,
        landed: &[Option<u64>],
        latest: &[Option<u64>],
    ) -> Inspection {
        Inspection {
            published,
            head,
            landed: landed.to_vec(),
            latest: latest.to_vec(),
            sidecar: true,
            validated_graph_current: true,
        }
    }

    #[test]
    fn a_schema_apply_rolls_forward_only_over_the_graph_it_was_validated_against() {
        let mut i = intent(1);
        let landed = ins(false, Some(head("c0", 5)), &[Some(4)], &[Some(4)]);
        i.schema_change = Some(SchemaChange {
            from: "s1".into(),
            to: "s2".into(),
            manifest: 7,
            created: Vec::new(),
        });
        assert_eq!(verdict(&i, &landed), Verdict::RollForward);
        let moved_elsewhere = Inspection {
            validated_graph_current: false,
            ..landed.clone()
        };
        assert_eq!(verdict(&i, &moved_elsewhere), Verdict::RollBack);
    }

    #[test]
    fn verdicts_for_every_shape_of_what_storage_shows() {
        let i = intent(2);
        let same = Some(head("c0", 5));
        let moved = Some(head("c9", 6));
        let cases = [
            // (what storage shows, verdict)
            (
                ins(true, same.clone(), &[Some(4), Some(4)], &[Some(4), Some(4)]),
                Verdict::AlreadyPublished,
            ),
            (
                ins(true, None, &[None, None], &[None, None]),
                Verdict::AlreadyPublished,
            ),
            (
                ins(false, None, &[Some(4), None], &[Some(4), None]),
                Verdict::Abandoned,
            ),
            (
                ins(
                    false,
                    same.clone(),
                    &[Some(4), Some(4)],
                    &[Some(4), Some(4)],
                ),
                Verdict::RollForward,
            ),
            // One table did not land.
            (
                ins(false, same.clone(), &[Some(4), None], &[Some(4), Some(3)]),
                Verdict::RollBack,
            ),
            // Landed but something is on top of it (an earlier restore).
            (
                ins(
                    false,
                    same.clone(),
                    &[Some(4), Some(4)],
                    &[Some(4), Some(5)],
                ),
                Verdict::RollBack,
            ),
            // Everything landed but the head moved: never publish over it.
            (
                ins(false, moved, &[Some(4), Some(4)], &[Some(4), Some(4)]),
                Verdict::RollBack,
            ),
            (
                ins(false, same.clone(), &[None, None], &[Some(3), Some(3)]),
                Verdict::RollBack,
            ),
            // The sidecar is gone: whatever the rest shows, another process
            // resolved it (what is on top may be a later writer's).
            (
                Inspection {
                    sidecar: false,
                    ..ins(false, same, &[Some(4), Some(4)], &[Some(6), Some(4)])
                },
                Verdict::ResolvedElsewhere,
            ),
        ];
        for (n, (shown, want)) in cases.iter().enumerate() {
            assert_eq!(verdict(&i, shown), *want, "case {n}: {shown:?}");
        }
    }

    #[test]
    fn rollback_restores_only_what_is_on_top_and_repoints_earlier_restores() {
        let i = intent(3);
        let shown = ins(
            false,
            Some(head("c0", 5)),
            &[Some(4), Some(4), None],
            &[Some(4), Some(5), Some(3)],
        );
        let (restore, repoint) = rollback_plan(&i, &shown, |_| Some(3));
        assert_eq!(restore, vec![(TableKey::new("main", "t0"), 3)]);
        assert_eq!(repoint, vec![(TableKey::new("main", "t1"), 5)]);
    }

    /// A restore already re-pointed, with a taken-over writer's late
    /// commit on top of it (seed 36329): nothing is re-pointed, so the
    /// late commit is never published by this roll-back.
    #[test]
    fn rollback_never_repoints_past_its_own_restore() {
        let i = intent(1);
        let shown = ins(false, Some(head("c0", 5)), &[Some(2)], &[Some(4)]);
        let (restore, repoint) = rollback_plan(&i, &shown, |_| Some(3));
        assert_eq!((restore, repoint), (vec![], vec![]));
        // Not yet re-pointed: the restore itself, never what lies above it.
        let (_, repoint) = rollback_plan(&i, &shown, |_| Some(1));
        assert_eq!(repoint, vec![(TableKey::new("main", "t0"), 3)]);
    }
}
