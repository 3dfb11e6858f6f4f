//! The RecoveryActor: owns the recovery sidecars. It records and deletes them
//! for live writers, and resolves every intent no writer owns any more — all
//! of them after a (re)start, and any a writer hands over as stuck. An intent
//! is resolved under its own gates, like a write:
//! already published -> delete the sidecar; every table landed (and still
//! latest) and the branch head unchanged -> publish its commit with its
//! original id (roll forward); otherwise restore every landed table to its
//! base version, re-point the branch at the restored versions (roll back).
//! Every step is idempotent, so recovery may crash anywhere and run again.
//! Writers are admitted to a branch only when no unresolved intent touches it.

use std::collections::{BTreeMap, VecDeque};

use tracing::{debug, info, warn};

use crate::machine::*;
use crate::types::limits::{MAX_RECOVERY_ATTEMPTS, RECOVERY_BACKOFF};
use crate::types::*;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Status {
    /// Owned by a live writer.
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

#[derive(Clone, Debug, PartialEq, Eq)]
enum Step {
    Acquiring,
    Inspecting,
    Restoring { idx: usize },
    Publishing,
    Deleting,
}

#[derive(Clone, Debug)]
struct Resolution {
    intent: Intent,
    rop: OpId,
    gates: Vec<(Addr, GateMode)>,
    /// Gates asked for so far (held, or the one being waited on).
    asked: usize,
    granted: usize,
    step: Step,
    inspection: Option<Inspection>,
    /// Tables to restore: (table, version to restore).
    to_restore: Vec<(TableKey, u64)>,
    /// Restored (or already restored) versions to re-point the branch at.
    repoint: Vec<(TableKey, u64)>,
    verdict: Option<Verdict>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    AlreadyPublished,
    Abandoned,
    RollForward,
    RollBack,
}

#[derive(Debug)]
enum PendingIo {
    List,
    Write(Addr, OpId),
    DeleteForWriter(Addr, OpId),
    Inspect,
    DeleteResolved,
}

pub struct Recovery {
    started: bool,
    intents: BTreeMap<OpId, Entry>,
    queue: VecDeque<OpId>,
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
        Self::new()
    }
}

impl Recovery {
    pub fn new() -> Self {
        Self {
            started: false,
            intents: BTreeMap::new(),
            queue: VecDeque::new(),
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

    /// An unresolved (or given-up) intent touches `branch`.
    fn blocking(&self, branch: &str) -> Option<&Entry> {
        self.intents
            .values()
            .find(|e| e.intent.branch == branch && e.status != Status::InFlight)
    }

    fn idle(&self) -> bool {
        self.started && self.resolving.is_none() && self.queue.is_empty() && !self.backoff
    }

    /// Answer whoever can be answered now.
    fn wake(&mut self) -> Vec<Effect> {
        let mut fx = Vec::new();
        if !self.started {
            return fx;
        }
        let waiters = std::mem::take(&mut self.admit_waiters);
        for (who, op, branch) in waiters {
            match self
                .blocking(&branch)
                .map(|e| (e.status.clone(), e.intent.op.clone()))
            {
                None => fx.push(Effect::Send(
                    who,
                    Msg::Admitted {
                        op,
                        blocked_by: None,
                    },
                )),
                Some((Status::GivenUp, intent)) => fx.push(Effect::Send(
                    who,
                    Msg::Admitted {
                        op,
                        blocked_by: Some(intent),
                    },
                )),
                Some(_) => self.admit_waiters.push((who, op, branch)),
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

    fn enqueue(&mut self, op: &OpId) {
        if !self.queue.contains(op) && self.resolving.as_ref().map(|r| &r.intent.op) != Some(op) {
            self.queue.push_back(op.clone());
        }
    }

    /// Start resolving the next queued intent, if idle.
    fn pump(&mut self) -> Vec<Effect> {
        if self.resolving.is_some() || self.backoff || !self.started {
            return self.wake();
        }
        let Some(op) = self.queue.pop_front() else {
            return self.wake();
        };
        let Some(entry) = self.intents.get(&op) else {
            return self.pump();
        };
        let intent = entry.intent.clone();
        let mut tables: Vec<TableKey> = intent.tables.iter().map(|t| t.table.clone()).collect();
        tables.sort();
        let mut gates = vec![
            (Addr::Schema, GateMode::Shared),
            (Addr::Branch(intent.branch.clone()), GateMode::Exclusive),
        ];
        gates.extend(
            tables
                .into_iter()
                .map(|t| (Addr::Table(t), GateMode::Exclusive)),
        );
        let rop = OpId(format!("recover-{}", intent.op));
        info!(op = %intent.op, "resolving recovery intent");
        let (gate, mode) = gates[0].clone();
        self.resolving = Some(Resolution {
            intent,
            rop: rop.clone(),
            gates,
            asked: 1,
            granted: 0,
            step: Step::Acquiring,
            inspection: None,
            to_restore: Vec::new(),
            repoint: Vec::new(),
            verdict: None,
        });
        let mut fx = vec![Effect::Send(gate, Msg::Acquire { op: rop, mode })];
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
                    },
                )
            })
            .collect()
    }

    /// The current resolution failed on storage: release, back off, retry.
    fn resolution_failed(&mut self, why: String) -> Vec<Effect> {
        let res = self.resolving.take().expect("resolving");
        let mut fx = Self::release_gates(&res);
        let op = res.intent.op.clone();
        warn!(op = %op, why, "recovery attempt failed");
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
                self.queue.push_back(op);
                self.backoff = true;
                fx.push(Effect::SetTimer(0, RECOVERY_BACKOFF * u64::from(attempts)));
            }
        }
        fx.extend(self.pump());
        fx
    }

    fn resolution_done(&mut self) -> Vec<Effect> {
        let res = self.resolving.take().expect("resolving");
        let op = res.intent.op.clone();
        info!(op = %op, verdict = ?res.verdict, "recovery intent resolved");
        match res.verdict.expect("verdict") {
            Verdict::AlreadyPublished => self.report.already_published.push(op.clone()),
            Verdict::Abandoned => self.report.abandoned.push(op.clone()),
            Verdict::RollForward => self.report.rolled_forward.push(op.clone()),
            Verdict::RollBack => self.report.rolled_back.push(op.clone()),
        }
        self.intents.remove(&op);
        let mut fx = Self::release_gates(&res);
        fx.extend(self.pump());
        fx
    }

    /// Decide what to do with an inspected intent.
    fn decide(&mut self, ins: Inspection) -> Vec<Effect> {
        let res = self.resolving.as_mut().expect("resolving");
        let intent = res.intent.clone();
        res.inspection = Some(ins.clone());
        let verdict = if ins.published {
            Verdict::AlreadyPublished
        } else if ins.head.is_none() {
            Verdict::Abandoned
        } else {
            let all_landed_and_latest = intent
                .tables
                .iter()
                .enumerate()
                .all(|(i, _)| ins.landed[i].is_some() && ins.landed[i] == ins.latest[i]);
            if all_landed_and_latest && ins.head.as_ref() == Some(&intent.expected) {
                Verdict::RollForward
            } else {
                Verdict::RollBack
            }
        };
        debug!(op = %intent.op, ?verdict, ?ins, "recovery verdict");
        res.verdict = Some(verdict);
        match verdict {
            Verdict::AlreadyPublished | Verdict::Abandoned => self.delete_resolved(),
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
                    },
                };
                res.step = Step::Publishing;
                vec![Effect::Send(Addr::Publisher, Msg::Publish { req })]
            }
            Verdict::RollBack => {
                for (i, t) in intent.tables.iter().enumerate() {
                    match (ins.landed[i], ins.latest[i]) {
                        // Landed and still on top: restore the version just
                        // below it (the base, since the gate kept others out;
                        // never older, so no one else's commit is undone).
                        (Some(l), Some(latest)) if l == latest => {
                            res.to_restore.push((t.table.clone(), l - 1))
                        }
                        // Landed, already restored by an earlier run.
                        (Some(_), Some(latest)) => res.repoint.push((t.table.clone(), latest)),
                        _ => {}
                    }
                }
                self.restore_next(0)
            }
        }
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
        if res.repoint.is_empty() {
            return self.delete_resolved();
        }
        let head = res
            .inspection
            .as_ref()
            .and_then(|i| i.head.clone())
            .expect("rollback has a head");
        let mut tables = res.repoint.clone();
        tables.sort();
        let req = PublishReq {
            op: res.rop.clone(),
            branch: res.intent.branch.clone(),
            expected: Some(head),
            change: Change::Repoint { tables },
        };
        res.step = Step::Publishing;
        vec![Effect::Send(Addr::Publisher, Msg::Publish { req })]
    }

    fn delete_resolved(&mut self) -> Vec<Effect> {
        let res = self.resolving.as_mut().expect("resolving");
        res.step = Step::Deleting;
        let op = res.intent.op.clone();
        vec![self.io(Io::DeleteSidecar { op }, PendingIo::DeleteResolved)]
    }

    fn on_resolution_msg(&mut self, msg: Msg) -> Vec<Effect> {
        let Some(res) = self.resolving.as_mut() else {
            self.violations
                .push(format!("recovery got {msg:?} while not resolving"));
            return Vec::new();
        };
        match (res.step.clone(), msg) {
            (Step::Acquiring, Msg::Granted { view, .. }) => {
                res.granted += 1;
                if let GateView::Unavailable(e) = view {
                    return self.resolution_failed(e);
                }
                if let Some((gate, mode)) = res.gates.get(res.granted).cloned() {
                    res.asked += 1;
                    let op = res.rop.clone();
                    return vec![Effect::Send(gate, Msg::Acquire { op, mode })];
                }
                res.step = Step::Inspecting;
                let intent = res.intent.clone();
                vec![self.io(Io::Inspect { intent }, PendingIo::Inspect)]
            }
            (Step::Restoring { idx }, Msg::TableRestored { table, result, .. }) => match result {
                Ok(version) => {
                    res.repoint.push((table, version));
                    self.restore_next(idx + 1)
                }
                Err(e) => self.resolution_failed(e),
            },
            (Step::Publishing, Msg::PublishReply { result, .. }) => match result {
                PublishResult::Published { .. } => self.delete_resolved(),
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
                    self.enqueue(&op);
                }
                let mut fx = vec![Effect::Send(from, Msg::StuckNoted { op })];
                fx.extend(self.pump());
                fx
            }
            msg @ (Msg::Granted { .. } | Msg::TableRestored { .. } | Msg::PublishReply { .. }) => {
                self.on_resolution_msg(msg)
            }
            other => {
                self.violations
                    .push(format!("recovery got unexpected {other:?}"));
                Vec::new()
            }
        }
    }

    fn on_io(&mut self, _now: Tick, req: ReqId, out: IoOut) -> Vec<Effect> {
        let Some(pending) = self.pending.remove(&req) else {
            return Vec::new();
        };
        match (pending, out) {
            (PendingIo::List, IoOut::Sidecars(Ok(mut intents))) => {
                intents.sort_by(|a, b| a.op.cmp(&b.op));
                info!(count = intents.len(), "recovery sidecars found");
                for intent in intents {
                    let op = intent.op.clone();
                    self.intents.insert(
                        op.clone(),
                        Entry {
                            intent,
                            status: Status::Unresolved { attempts: 0 },
                        },
                    );
                    self.enqueue(&op);
                }
                self.started = true;
                self.pump()
            }
            (PendingIo::List, out) => {
                warn!(?out, "recovery scan failed; retrying");
                self.backoff = true;
                vec![Effect::SetTimer(1, RECOVERY_BACKOFF)]
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
                            self.enqueue(&op);
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
            (p, out) => {
                self.violations
                    .push(format!("recovery: completion {out:?} does not match {p:?}"));
                Vec::new()
            }
        }
    }

    fn on_timer(&mut self, _now: Tick, timer: TimerId) -> Vec<Effect> {
        self.backoff = false;
        if timer == 1 {
            return vec![self.io(Io::ListSidecars, PendingIo::List)];
        }
        self.pump()
    }

    fn check(&self) -> Result<(), String> {
        match self.violations.first() {
            Some(v) => Err(v.clone()),
            None => Ok(()),
        }
    }
}
