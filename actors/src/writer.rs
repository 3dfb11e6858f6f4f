//! The coordinator of one operation: a data write (load or mutation) follows
//! the write protocol step by step; branch create and delete are the short
//! forms of it. One `Writer` lives for one operation and answers its client
//! exactly once.
//!
//! Data write, as explicit states:
//! admit -> capture head -> prepare -> acquire gates (schema, branch, sorted
//! tables) -> recheck (snapshot still current, no overlapping intent) ->
//! record sidecar -> commit each table -> publish -> delete sidecar ->
//! release -> answer.

use tracing::{debug, info, warn};

use crate::bugs::Bugs;
use crate::machine::*;
use crate::types::limits::MAX_PREPARE_ATTEMPTS;
use crate::types::*;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// A load or mutation on `branch`; the substrate knows what to prepare.
    Write {
        branch: String,
    },
    CreateBranch {
        name: String,
        from: String,
    },
    DeleteBranch {
        name: String,
    },
    /// Accept a new schema: a write on `main` whose plan spans every
    /// branch. It waits until no intent is unresolved anywhere, takes the
    /// schema gate exclusively (so no data write holds it, shared,
    /// meanwhile, and every later write rechecks the schema identity),
    /// and prepares under its gates, so nothing moves between its
    /// validation and its publish.
    ApplySchema,
}

/// The branch a schema apply's commit lands on.
pub const SCHEMA_BRANCH: &str = "main";

#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
    Admitting,
    Capturing,
    Preparing(ReqId),
    Acquiring,
    Checking,
    Recording,
    /// The table commits are out, all at once; `unanswered` are those
    /// still to answer.
    Committing,
    Publishing,
    /// Waiting for the sidecar delete after a successful publish.
    Finalizing,
    /// Waiting for the sidecar delete after a conflict before any effect.
    Abandoning,
    /// Waiting for recovery to acknowledge a stuck intent.
    Stuck,
    DroppingStorage(ReqId),
    Done,
}

pub struct Writer {
    op: OpId,
    kind: OpKind,
    bugs: Bugs,
    state: State,
    attempt: u32,
    next_req: ReqId,
    captured: Option<Head>,
    plan: Option<Plan>,
    /// Gates in acquisition order, each with its mode.
    gates: Vec<(Addr, GateMode)>,
    /// Views of the gates granted so far, in acquisition order: complete
    /// once every gate asked for has answered (see `acquiring`).
    views: Vec<GateView>,
    /// The gates of `gates` asked for so far: the next one is asked once
    /// this one's lock is held (`Locked`), before its view arrives.
    next_gate: usize,
    /// Views that arrived while later gates were still being asked for,
    /// by index in `gates`; moved to `views` once all have.
    arriving: std::collections::BTreeMap<usize, GateView>,
    /// Gates asked for (held or queued), so that release reaches all of them.
    asked: Vec<Addr>,
    /// The schema gate's tenure this writer holds it under, once locked:
    /// its branch gate is asked for under it.
    schema_tenure: Option<u64>,
    /// The table commits that landed, in the order they answered.
    landed: Vec<(TableKey, u64)>,
    /// The table commits still to answer.
    unanswered: Vec<TableKey>,
    /// The table commits that failed.
    failed: Vec<CommitResult>,
    published: Option<(u64, Option<Head>)>,
    /// The outcome to send once the current cleanup step is done.
    after_cleanup: Option<Outcome>,
    /// Retries hold the schema and branch gates while they prepare, so no
    /// other writer on the branch can make them lose again.
    early_gates: bool,
    /// Outstanding fire-and-forget requests (discards): their completions
    /// are expected and carry nothing to act on.
    discards: Vec<ReqId>,
    violations: Vec<String>,
}

impl Writer {
    pub fn new(op: OpId, kind: OpKind, bugs: Bugs) -> Self {
        Self {
            op,
            kind,
            bugs,
            state: State::Admitting,
            attempt: 0,
            next_req: 0,
            captured: None,
            plan: None,
            gates: Vec::new(),
            views: Vec::new(),
            next_gate: 0,
            arriving: std::collections::BTreeMap::new(),
            asked: Vec::new(),
            schema_tenure: None,
            landed: Vec::new(),
            unanswered: Vec::new(),
            failed: Vec::new(),
            published: None,
            after_cleanup: None,
            early_gates: false,
            discards: Vec::new(),
            violations: Vec::new(),
        }
    }

    pub fn op(&self) -> &OpId {
        &self.op
    }

    fn branch(&self) -> &str {
        match &self.kind {
            OpKind::Write { branch } => branch,
            OpKind::CreateBranch { name, .. } | OpKind::DeleteBranch { name } => name,
            OpKind::ApplySchema => SCHEMA_BRANCH,
        }
    }

    /// The branches whose unresolved intents keep this operation waiting.
    fn scope(&self) -> &str {
        match &self.kind {
            OpKind::ApplySchema => EVERY_BRANCH,
            _ => self.branch(),
        }
    }

    fn io(&mut self, io: Io) -> (ReqId, Effect) {
        self.next_req += 1;
        (self.next_req, Effect::Io(self.next_req, io))
    }

    fn send(to: Addr, msg: Msg) -> Effect {
        Effect::Send(to, msg)
    }

    fn finish(&mut self, outcome: Outcome) -> Vec<Effect> {
        info!(op = %self.op, ?outcome, "operation finished");
        self.state = State::Done;
        vec![
            Self::send(
                Addr::Client(self.op.clone()),
                Msg::Finished {
                    op: self.op.clone(),
                    outcome,
                },
            ),
            Effect::Stop,
        ]
    }

    /// Release every gate asked for, latest first, each with what this
    /// operation left of its state.
    fn release_all(&mut self) -> Vec<Effect> {
        let op = self.op.clone();
        let asked = std::mem::take(&mut self.asked);
        let fx = asked
            .into_iter()
            .rev()
            .map(|g| {
                let left = self.left_at(&g);
                Self::send(
                    g,
                    Msg::Release {
                        op: op.clone(),
                        left,
                    },
                )
            })
            .collect();
        self.views.clear();
        self.arriving.clear();
        self.next_gate = 0;
        self.schema_tenure = None;
        fx
    }

    /// What this operation leaves of the state `gate` shows, where it knows
    /// it: after a data write's publish, the schema it checked, the head it
    /// published and the versions its table commits made. Anything else
    /// (no publish, a schema or branch change, a table it did not commit)
    /// is unknown, and the gate's owner reads it again.
    fn left_at(&self, gate: &Addr) -> Option<GateView> {
        if !matches!(self.kind, OpKind::Write { .. }) {
            return None;
        }
        let (_, head) = self.published.as_ref()?;
        match gate {
            Addr::Schema => self
                .views
                .iter()
                .find(|v| matches!(v, GateView::Schema(_)))
                .cloned(),
            Addr::Branch(_) => head.clone().map(|h| GateView::Branch(Some(h))),
            Addr::Table(t) => {
                let (_, v) = self.landed.iter().find(|(k, _)| k == t)?;
                let line = self.plan_table(t)?.line.clone();
                Some(GateView::Table(TableView::owned(line, *v)))
            }
            _ => None,
        }
    }

    fn start_admit(&mut self) -> Vec<Effect> {
        self.state = State::Admitting;
        debug!(op = %self.op, attempt = self.attempt, "admit");
        vec![Self::send(
            Addr::Recovery,
            Msg::Admit {
                op: self.op.clone(),
                branch: self.scope().to_string(),
            },
        )]
    }

    fn start_capture(&mut self) -> Vec<Effect> {
        self.state = State::Capturing;
        let from = match &self.kind {
            OpKind::CreateBranch { from, .. } => from.clone(),
            _ => self.branch().to_string(),
        };
        vec![Self::send(
            Addr::Branch(from),
            Msg::HeadRequest {
                op: self.op.clone(),
            },
        )]
    }

    /// The table gates of a plan in the one gate order (or reversed, when
    /// the planted bug says so).
    fn table_gates(&self, tables: &[TableKey]) -> Vec<(Addr, GateMode)> {
        let mut gates = table_gates(tables);
        if self.bugs.reverse_gate_order() {
            gates.reverse();
        }
        gates
    }

    fn start_acquire(&mut self, tables: Vec<TableKey>) -> Vec<Effect> {
        let mut gates = gate_order(self.branch(), &[]);
        if self.kind == OpKind::ApplySchema && !self.bugs.schema_apply_shared() {
            gates[0].1 = GateMode::Exclusive;
        }
        gates.extend(self.table_gates(&tables));
        self.gates = gates;
        self.views.clear();
        self.arriving.clear();
        self.next_gate = 0;
        self.state = State::Acquiring;
        self.acquire_next()
    }

    /// A view that cannot be used: nothing more is asked for.
    fn unusable(view: &GateView) -> bool {
        matches!(view, GateView::Unavailable(_) | GateView::Busy(_))
    }

    /// The gate asked for last holds its lock: ask for the next one, unless
    /// all are asked for or a view already came back unusable.
    fn on_locked(&mut self) -> Vec<Effect> {
        if self.next_gate < self.gates.len() && !self.arriving.values().any(Self::unusable) {
            return self.acquire_next();
        }
        Vec::new()
    }

    /// A gate's view arrived. Once every gate asked for has answered, and
    /// either all are asked for or one answered unusable, the views are
    /// complete and the operation goes on.
    fn on_view(&mut self, from: &Addr, view: GateView) -> Vec<Effect> {
        let Some(idx) = (self.views.len()..self.next_gate)
            .find(|i| self.gates[*i].0 == *from && !self.arriving.contains_key(i))
        else {
            return self.unexpected(format!("a view from {from:?}, not asked for"));
        };
        self.arriving.insert(idx, view);
        let all_answered = self.arriving.len() == self.next_gate - self.views.len();
        let stop = self.next_gate == self.gates.len() || self.arriving.values().any(Self::unusable);
        if !(all_answered && stop) {
            return Vec::new();
        }
        let arrived = std::mem::take(&mut self.arriving);
        self.views.extend(arrived.into_values());
        if self.early_gates && self.plan.is_none() {
            self.prepare_under_gates()
        } else {
            self.on_all_granted()
        }
    }

    fn acquire_next(&mut self) -> Vec<Effect> {
        let (gate, mode) = self.gates[self.next_gate].clone();
        self.next_gate += 1;
        debug!(op = %self.op, ?gate, ?mode, "acquire gate");
        self.asked.push(gate.clone());
        let expect = self.expected_view(&gate);
        let under = match gate {
            Addr::Branch(_) => self.schema_tenure,
            _ => None,
        };
        vec![Self::send(
            gate,
            Msg::Acquire {
                op: self.op.clone(),
                mode,
                expect,
                under,
            },
        )]
    }

    /// What this write's snapshot implies a table gate's view is, once it
    /// is prepared: the line it commits on, at the version it staged on.
    fn expected_view(&self, gate: &Addr) -> Option<GateView> {
        let Addr::Table(key) = gate else { return None };
        let t = self.plan_table(key)?;
        Some(GateView::Table(TableView::owned(t.line.clone(), t.base)))
    }

    /// The prepared plan's entry for table `key`.
    fn plan_table(&self, key: &TableKey) -> Option<&TablePlan> {
        self.plan.as_ref()?.tables.iter().find(|t| &t.table == key)
    }

    /// The outcome a gate view that cannot be used leads to, if any: the
    /// owner could not read its state, or another process kept the gate.
    fn failed_view(&self) -> Option<Outcome> {
        self.views.iter().find_map(|v| match v {
            GateView::Unavailable(e) => Some(Outcome::StorageFailed(e.clone())),
            GateView::Busy(e) => Some(Outcome::Contended {
                attempts: self.attempt + 1,
                waited_for: e.clone(),
            }),
            _ => None,
        })
    }

    fn give_up_on_view(&mut self, outcome: Outcome) -> Vec<Effect> {
        let mut fx = self.release_all();
        if self.plan.is_some() {
            fx.push(self.discard());
        }
        fx.extend(self.finish(outcome));
        fx
    }

    /// Tables whose view shows a version no published state accounts for.
    fn orphaned_tables(&self) -> Vec<TableKey> {
        self.gates
            .iter()
            .zip(&self.views)
            .filter_map(|((gate, _), view)| match (gate, view) {
                (Addr::Table(t), GateView::Table(v)) if v.orphaned() => Some(t.clone()),
                _ => None,
            })
            .collect()
    }

    /// Orphans under our gates: hand them to recovery, step back, and ask
    /// for admission again (recovery admits once they are resolved).
    fn suspect(&mut self, tables: Vec<TableKey>) -> Vec<Effect> {
        warn!(op = %self.op, ?tables, "table versions no published state accounts for; asking recovery to repair");
        let mut fx = self.release_all();
        fx.push(self.discard());
        if self.attempt + 1 >= MAX_PREPARE_ATTEMPTS {
            fx.extend(self.finish(Outcome::Contended {
                attempts: self.attempt + 1,
                waited_for: format!("the repair of orphaned table versions in {tables:?}"),
            }));
            return fx;
        }
        fx.push(Self::send(
            Addr::Recovery,
            Msg::Suspect {
                op: self.op.clone(),
                branch: self.branch().to_string(),
                tables,
            },
        ));
        self.attempt += 1;
        self.plan = None;
        fx.extend(self.start_admit());
        fx
    }

    /// All gates held: what to do next depends on the operation.
    fn on_all_granted(&mut self) -> Vec<Effect> {
        if let Some(outcome) = self.failed_view() {
            return self.give_up_on_view(outcome);
        }
        let branch_view = match &self.views[1] {
            GateView::Branch(h) => h.clone(),
            other => {
                self.violations
                    .push(format!("branch gate granted with {other:?}"));
                None
            }
        };
        match self.kind.clone() {
            OpKind::Write { .. } | OpKind::ApplySchema => {
                let orphans = self.orphaned_tables();
                if !orphans.is_empty() && !self.bugs.skip_recheck() {
                    return self.suspect(orphans);
                }
                if self.bugs.skip_recheck() || self.snapshot_current(&branch_view) {
                    self.state = State::Checking;
                    vec![Self::send(
                        Addr::Recovery,
                        Msg::CheckIntents {
                            op: self.op.clone(),
                            branch: self.scope().to_string(),
                        },
                    )]
                } else {
                    self.moved()
                }
            }
            OpKind::CreateBranch { from, .. } => {
                if branch_view.is_some() {
                    let mut fx = self.release_all();
                    fx.extend(self.finish(Outcome::BranchExists(self.branch().to_string())));
                    return fx;
                }
                let at = self.captured.clone().expect("captured before acquire");
                self.publish(None, Change::CreateBranch { from, at })
            }
            OpKind::DeleteBranch { .. } => match branch_view {
                None => {
                    let mut fx = self.release_all();
                    fx.extend(self.finish(Outcome::BranchNotFound(self.branch().to_string())));
                    fx
                }
                Some(h) => self.publish(Some(h), Change::DeleteBranch),
            },
        }
    }

    /// A retry holds schema and branch: capture the head from the branch
    /// gate's view and prepare against it.
    fn prepare_under_gates(&mut self) -> Vec<Effect> {
        if let Some(outcome) = self.failed_view() {
            return self.give_up_on_view(outcome);
        }
        let head = match self.views[1].clone() {
            GateView::Branch(Some(h)) => h,
            GateView::Branch(None) => {
                let mut fx = self.release_all();
                fx.extend(self.finish(Outcome::BranchNotFound(self.branch().to_string())));
                return fx;
            }
            other => {
                self.violations
                    .push(format!("branch gate granted with {other:?}"));
                return Vec::new();
            }
        };
        debug!(op = %self.op, ?head, "captured head under the branch gate");
        self.captured = Some(head.clone());
        let io = Io::Prepare {
            op: self.op.clone(),
            attempt: self.attempt,
            branch: self.branch().to_string(),
            head,
        };
        let (req, fx) = self.io(io);
        self.state = State::Preparing(req);
        vec![fx]
    }

    /// Step 4: the captured head, schema and every table base are unchanged.
    fn snapshot_current(&self, branch_view: &Option<Head>) -> bool {
        let plan = self.plan.as_ref().expect("plan before recheck");
        let schema_ok = matches!(&self.views[0], GateView::Schema(id) if *id == plan.schema);
        let head_ok = branch_view.as_ref() == self.captured.as_ref();
        let tables_ok = self.table_views_match(plan);
        debug!(op = %self.op, schema_ok, head_ok, tables_ok, "recheck");
        schema_ok && head_ok && tables_ok
    }

    fn table_views_match(&self, plan: &Plan) -> bool {
        self.gates[2..]
            .iter()
            .zip(&self.views[2..])
            .all(|((gate, _), view)| {
                let Addr::Table(key) = gate else { return false };
                let base = plan.tables.iter().find(|t| &t.table == key).map(|t| t.base);
                matches!(view, GateView::Table(v) if v.latest.is_some() && v.latest == base)
            })
    }

    /// The snapshot moved: retry from scratch or refuse.
    fn moved(&mut self) -> Vec<Effect> {
        let class = self.plan.as_ref().map(|p| p.class);
        let mut fx = self.release_all();
        fx.push(self.discard());
        match class {
            Some(WriteClass::Retryable) if self.attempt + 1 < MAX_PREPARE_ATTEMPTS => {
                self.attempt += 1;
                self.plan = None;
                debug!(op = %self.op, attempt = self.attempt, "snapshot moved: re-prepare");
                fx.extend(self.start_admit());
                fx
            }
            Some(WriteClass::Retryable) => {
                let attempts = self.attempt + 1;
                let waited_for =
                    format!("branch '{}' to stop moving under the write", self.branch());
                fx.extend(self.finish(Outcome::Contended {
                    attempts,
                    waited_for,
                }));
                fx
            }
            _ => {
                fx.extend(self.finish(Outcome::ReadSetChanged));
                fx
            }
        }
    }

    fn discard(&mut self) -> Effect {
        // Completion carries nothing: the staged work is invisible either way.
        let (req, fx) = self.io(Io::Discard {
            op: self.op.clone(),
        });
        self.discards.push(req);
        fx
    }

    /// Who may send `msg` to this writer in its current state: a grant comes
    /// from the gate being waited for, a table commit's result from that
    /// table, and so on. `None`: no message of this kind is expected now.
    fn expected_sender(&self, from: &Addr, msg: &Msg) -> Option<Addr> {
        match (&self.state, msg) {
            // Any gate asked for whose view is still out.
            (State::Acquiring, Msg::Granted { .. }) => {
                let out: Vec<&Addr> = (self.views.len()..self.next_gate)
                    .filter(|i| !self.arriving.contains_key(i))
                    .map(|i| &self.gates[i].0)
                    .collect();
                out.iter()
                    .find(|g| **g == from)
                    .or(out.first())
                    .map(|g| (*g).clone())
            }
            (State::Acquiring, Msg::Locked { .. }) => self
                .next_gate
                .checked_sub(1)
                .map(|i| self.gates[i].0.clone()),
            (State::Committing, Msg::TableCommitted { table, .. }) => self
                .unanswered
                .contains(table)
                .then(|| Addr::Table(table.clone())),
            (State::Capturing, Msg::HeadReply { .. }) => Some(Addr::Branch(match &self.kind {
                OpKind::CreateBranch { from, .. } => from.clone(),
                _ => self.branch().to_string(),
            })),
            (State::Publishing, Msg::PublishReply { .. }) => Some(Addr::Publisher),
            (
                _,
                Msg::Admitted { .. }
                | Msg::IntentsChecked { .. }
                | Msg::IntentRecorded { .. }
                | Msg::IntentDeleted { .. }
                | Msg::StuckNoted { .. },
            ) => Some(Addr::Recovery),
            _ => None,
        }
    }

    /// The operation a reply names, for replies that name one.
    fn reply_op(msg: &Msg) -> Option<&OpId> {
        match msg {
            Msg::Granted { op, .. }
            | Msg::Locked { op, .. }
            | Msg::HeadReply { op, .. }
            | Msg::TableCommitted { op, .. }
            | Msg::Admitted { op, .. }
            | Msg::IntentsChecked { op, .. }
            | Msg::IntentRecorded { op, .. }
            | Msg::IntentDeleted { op, .. }
            | Msg::StuckNoted { op }
            | Msg::PublishReply { op, .. } => Some(op),
            _ => None,
        }
    }

    fn intent(&self) -> Intent {
        let plan = self.plan.as_ref().expect("plan");
        Intent {
            op: self.op.clone(),
            branch: self.branch().to_string(),
            expected: self.captured.clone().expect("captured"),
            commit: plan.commit.clone(),
            tables: plan
                .tables
                .iter()
                .map(|t| IntentTable {
                    table: t.table.clone(),
                    base: t.base,
                    txn: t.txn.clone(),
                })
                .collect(),
            merge: plan.merge.clone(),
            schema_change: plan.schema_change.clone(),
        }
    }

    fn record_intent(&mut self) -> Vec<Effect> {
        if self.bugs.skip_sidecar() {
            return self.commit_tables();
        }
        self.state = State::Recording;
        debug!(op = %self.op, "record sidecar");
        vec![Self::send(
            Addr::Recovery,
            Msg::RecordIntent {
                intent: self.intent(),
            },
        )]
    }

    fn sorted_tables(&self) -> Vec<TablePlan> {
        let mut tables = self.plan.as_ref().expect("plan").tables.clone();
        tables.sort_by(|a, b| a.table.cmp(&b.table));
        tables
    }

    /// Every table commit goes out at once, once the sidecar is durable:
    /// each table's gate is held, and recovery resolves any subset of them
    /// landed (all landed and on top: forward; else every landed one is
    /// restored), so their order is nobody's concern.
    fn commit_tables(&mut self) -> Vec<Effect> {
        if self.bugs.publish_before_commit() && self.published.is_none() {
            return self.publish_commit();
        }
        // (An attempt before this one may have failed cleanly.)
        if !self.bugs.stale_commit_failures() {
            self.failed.clear();
        }
        let tables = self.sorted_tables();
        if tables.is_empty() {
            return self.all_committed();
        }
        self.state = State::Committing;
        self.unanswered = tables.iter().map(|t| t.table.clone()).collect();
        tables
            .into_iter()
            .map(|t| {
                debug!(op = %self.op, table = ?t.table, "commit table");
                Self::send(
                    Addr::Table(t.table),
                    Msg::CommitTable {
                        op: self.op.clone(),
                        staged: t.staged,
                    },
                )
            })
            .collect()
    }

    /// Every table commit has answered: publish when all landed; drop the
    /// write when none did and each refused cleanly (nothing changed);
    /// else the intent goes to recovery.
    fn all_committed(&mut self) -> Vec<Effect> {
        let clean = self.landed.is_empty() || self.bugs.abandon_beside_a_landing();
        match self.failed.first().cloned() {
            None if self.published.is_some() => self.after_publish(),
            None => self.publish_commit(),
            Some(_)
                if clean
                    && self.published.is_none()
                    && self
                        .failed
                        .iter()
                        .all(|f| matches!(f, CommitResult::Conflict(_))) =>
            {
                debug!(op = %self.op, failed = ?self.failed, "conflict before any effect");
                self.abandon()
            }
            Some(CommitResult::Conflict(e) | CommitResult::Unknown(e)) => self.stuck(&e),
            Some(CommitResult::Committed { .. }) => unreachable!("only failures are kept"),
        }
    }

    fn publish_commit(&mut self) -> Vec<Effect> {
        let plan = self.plan.as_ref().expect("plan");
        let tables = if self.bugs.publish_before_commit() && self.landed.is_empty() {
            // Publish the versions the commits are expected to produce.
            self.sorted_tables()
                .into_iter()
                .map(|t| (t.table, t.base + 1))
                .collect()
        } else {
            let mut landed = self.landed.clone();
            landed.sort();
            landed
        };
        let change = Change::Commit {
            commit: plan.commit.clone(),
            tables,
            merge: plan.merge.clone(),
            schema_change: plan.schema_change.clone(),
        };
        let expected = self.captured.clone();
        let mut fx = Vec::new();
        if self.bugs.delete_sidecar_first() {
            fx.push(Self::send(
                Addr::Recovery,
                Msg::IntentDone {
                    op: self.op.clone(),
                },
            ));
        }
        if self.bugs.release_gates_early() {
            fx.extend(self.release_all());
        }
        fx.extend(self.publish(expected, change));
        fx
    }

    fn publish(&mut self, expected: Option<Head>, change: Change) -> Vec<Effect> {
        self.state = State::Publishing;
        debug!(op = %self.op, "publish");
        vec![Self::send(
            Addr::Publisher,
            Msg::Publish {
                req: PublishReq {
                    op: self.op.clone(),
                    branch: self.branch().to_string(),
                    expected,
                    change,
                },
            },
        )]
    }

    /// After a data write's publish: answer (the write is durable and
    /// visible), then delete the sidecar and release the gates. The caller
    /// does not wait for the delete; the gates do, so the next holder finds
    /// no sidecar of this write, and a crash before the delete leaves one
    /// that recovery finds published and removes.
    fn after_publish(&mut self) -> Vec<Effect> {
        if self.bugs.skip_sidecar() || self.bugs.delete_sidecar_first() {
            return self.release_and_answer_committed();
        }
        self.state = State::Finalizing;
        let outcome = self.committed();
        info!(op = %self.op, ?outcome, "operation answered; its sidecar goes next");
        let settled = self.gates.iter().find_map(|(g, _)| match g {
            Addr::Branch(_) => Some((g.clone(), self.left_at(g)?)),
            _ => None,
        });
        let mut fx: Vec<Effect> = settled
            .into_iter()
            .map(|(g, left)| {
                let op = self.op.clone();
                Self::send(g, Msg::Settled { op, left })
            })
            .collect();
        fx.extend([
            Self::send(
                Addr::Client(self.op.clone()),
                Msg::Finished {
                    op: self.op.clone(),
                    outcome,
                },
            ),
            Self::send(
                Addr::Recovery,
                Msg::IntentDone {
                    op: self.op.clone(),
                },
            ),
        ]);
        fx
    }

    fn committed(&self) -> Outcome {
        let (version, _) = self.published.clone().expect("published");
        let commit = match &self.kind {
            OpKind::Write { .. } | OpKind::ApplySchema => {
                self.plan.as_ref().map(|p| p.commit.clone())
            }
            _ => None,
        };
        Outcome::Committed { commit, version }
    }

    fn release_and_answer_committed(&mut self) -> Vec<Effect> {
        let outcome = self.committed();
        let mut fx = self.release_all();
        fx.extend(self.finish(outcome));
        fx
    }

    /// An effect may have landed and the write cannot finish: hand the intent
    /// to recovery, and release only after recovery has noted it.
    fn stuck(&mut self, why: &str) -> Vec<Effect> {
        warn!(op = %self.op, why, "write stuck after an effect; leaving it to recovery");
        self.state = State::Stuck;
        self.after_cleanup = Some(Outcome::RecoveryRequired {
            op: self.op.clone(),
        });
        vec![Self::send(
            Addr::Recovery,
            Msg::IntentStuck {
                op: self.op.clone(),
            },
        )]
    }

    /// A conflict before any effect: drop the sidecar, then retry or refuse.
    fn abandon(&mut self) -> Vec<Effect> {
        self.state = State::Abandoning;
        vec![Self::send(
            Addr::Recovery,
            Msg::IntentDone {
                op: self.op.clone(),
            },
        )]
    }

    fn unexpected(&mut self, what: String) -> Vec<Effect> {
        self.violations.push(format!(
            "{:?} in state {:?} got {what}",
            self.op, self.state
        ));
        Vec::new()
    }
}

impl Machine for Writer {
    fn on_start(&mut self, _now: Tick) -> Vec<Effect> {
        info!(op = %self.op, kind = ?self.kind, "operation started");
        match &self.kind {
            OpKind::CreateBranch { .. } => self.start_capture(),
            OpKind::Write { .. } | OpKind::DeleteBranch { .. } | OpKind::ApplySchema => {
                self.start_admit()
            }
        }
    }

    // The writer's whole transition table, one arm per (state, message): a
    // protocol step is read and checked here, raft-rs style.
    fn on_msg(&mut self, _now: Tick, from: Addr, msg: Msg) -> Vec<Effect> {
        if let Some(op) = Self::reply_op(&msg)
            && op != &self.op
        {
            return self.unexpected(format!("a reply for {op:?} from {from:?}: {msg:?}"));
        }
        if let Some(want) = self.expected_sender(&from, &msg)
            && want != from
        {
            return self.unexpected(format!("{msg:?} from {from:?}, expected from {want:?}"));
        }
        match (self.state.clone(), msg) {
            (
                State::Admitting,
                Msg::Admitted {
                    blocked_by: Some(intent),
                    ..
                },
            ) => self.finish(Outcome::RecoveryRequired { op: intent }),
            (
                State::Admitting,
                Msg::Admitted {
                    blocked_by: None, ..
                },
            ) => match self.kind {
                OpKind::Write { .. } if self.attempt > 0 => {
                    self.early_gates = true;
                    self.start_acquire(Vec::new())
                }
                OpKind::Write { .. } => self.start_capture(),
                // Prepared under its gates: validation sees what it publishes over.
                OpKind::ApplySchema => {
                    self.early_gates = true;
                    self.start_acquire(Vec::new())
                }
                OpKind::DeleteBranch { .. } => self.start_acquire(Vec::new()),
                OpKind::CreateBranch { .. } => self.unexpected("admission".into()),
            },
            (State::Capturing, Msg::HeadReply { head, .. }) => match head {
                Err(e) => self.finish(Outcome::StorageFailed(e)),
                Ok(None) => {
                    let b = match &self.kind {
                        OpKind::CreateBranch { from, .. } => from.clone(),
                        _ => self.branch().to_string(),
                    };
                    self.finish(Outcome::BranchNotFound(b))
                }
                Ok(Some(head)) => {
                    debug!(op = %self.op, ?head, "captured head");
                    self.captured = Some(head.clone());
                    match &self.kind {
                        OpKind::Write { branch } => {
                            let io = Io::Prepare {
                                op: self.op.clone(),
                                attempt: self.attempt,
                                branch: branch.clone(),
                                head,
                            };
                            let (req, fx) = self.io(io);
                            self.state = State::Preparing(req);
                            vec![fx]
                        }
                        _ => self.start_acquire(Vec::new()),
                    }
                }
            },
            (State::Acquiring, Msg::Locked { tenure, .. }) => {
                if from == Addr::Schema {
                    self.schema_tenure = Some(tenure);
                }
                self.on_locked()
            }
            (State::Acquiring, Msg::Granted { view, .. }) => self.on_view(&from, view),
            (State::Checking, Msg::IntentsChecked { clear, .. }) => {
                if clear || self.bugs.skip_recheck() {
                    self.record_intent()
                } else {
                    self.moved()
                }
            }
            (State::Recording, Msg::IntentRecorded { result, .. }) => match result {
                Ok(()) => self.commit_tables(),
                Err(e) => {
                    // The sidecar may exist: let recovery resolve it.
                    let mut fx = self.stuck(&e);
                    self.after_cleanup = Some(Outcome::StorageFailed(e));
                    fx.push(self.discard());
                    fx
                }
            },
            (State::Committing, Msg::TableCommitted { table, result, .. }) => {
                self.unanswered.retain(|t| *t != table);
                let mut fx = Vec::new();
                match result {
                    CommitResult::Committed { version } => {
                        self.landed.push((table, version));
                        if self.bugs.ack_before_publish() && self.landed.len() == 1 {
                            // The planted bug: the client hears "committed" now.
                            let commit = self.plan.as_ref().map(|p| p.commit.clone());
                            fx.push(Self::send(
                                Addr::Client(self.op.clone()),
                                Msg::Finished {
                                    op: self.op.clone(),
                                    outcome: Outcome::Committed { commit, version },
                                },
                            ));
                        }
                    }
                    failed => self.failed.push(failed),
                }
                if self.unanswered.is_empty() {
                    fx.extend(self.all_committed());
                }
                fx
            }
            (State::Publishing, Msg::PublishReply { result, .. }) => {
                match (self.kind.clone(), result) {
                    (
                        OpKind::Write { .. } | OpKind::ApplySchema,
                        PublishResult::Published { version, head },
                    ) => {
                        self.published = Some((version, head));
                        if self.bugs.publish_before_commit() && self.landed.is_empty() {
                            return self.commit_tables();
                        }
                        self.after_publish()
                    }
                    (OpKind::Write { .. } | OpKind::ApplySchema, other) => {
                        self.stuck(&format!("{other:?}"))
                    }
                    (OpKind::CreateBranch { .. }, PublishResult::Published { version, head }) => {
                        self.published = Some((version, head));
                        self.release_and_answer_committed()
                    }
                    (OpKind::DeleteBranch { name }, PublishResult::Published { version, head }) => {
                        self.published = Some((version, head));
                        let (req, fx) = self.io(Io::DropBranchStorage { branch: name });
                        self.state = State::DroppingStorage(req);
                        vec![fx]
                    }
                    (kind, other) => {
                        let outcome = match (kind, other) {
                            (
                                OpKind::CreateBranch { name, .. },
                                PublishResult::HeadMoved { .. },
                            ) => Outcome::BranchExists(name),
                            (
                                OpKind::DeleteBranch { name },
                                PublishResult::HeadMoved { actual: None },
                            ) => Outcome::BranchNotFound(name),
                            (_, PublishResult::HeadMoved { .. }) => Outcome::ReadSetChanged,
                            (_, PublishResult::Refused(e)) => Outcome::Refused(e),
                            (_, PublishResult::Unknown(e)) => Outcome::StorageFailed(e),
                            (_, PublishResult::Published { .. }) => unreachable!("handled above"),
                        };
                        let mut fx = self.release_all();
                        fx.extend(self.finish(outcome));
                        fx
                    }
                }
            }
            // The planted bug deleted its sidecar early; its answer is not news.
            (s, Msg::IntentDeleted { .. })
                if self.bugs.delete_sidecar_first()
                    && !matches!(s, State::Finalizing | State::Abandoning) =>
            {
                Vec::new()
            }
            (State::Finalizing, Msg::IntentDeleted { .. }) => {
                // A failed delete leaves the intent with recovery, which finds
                // it published and removes it; the write itself is durable.
                // The client was answered at the publish.
                self.state = State::Done;
                let mut fx = self.release_all();
                fx.push(Effect::Stop);
                fx
            }
            (State::Abandoning, Msg::IntentDeleted { .. }) => self.moved(),
            (State::Stuck, Msg::StuckNoted { .. }) => {
                let outcome = self.after_cleanup.take().expect("stuck outcome");
                let mut fx = self.release_all();
                fx.extend(self.finish(outcome));
                fx
            }
            (_, other) => self.unexpected(format!("{other:?}")),
        }
    }

    fn on_io(&mut self, _now: Tick, req: ReqId, out: IoOut) -> Vec<Effect> {
        match (self.state.clone(), out) {
            (State::Preparing(r), IoOut::Prepared(result)) if r == req => match result {
                Ok(plan) => {
                    debug!(op = %self.op, tables = plan.tables.len(), "prepared");
                    let tables: Vec<TableKey> =
                        plan.tables.iter().map(|t| t.table.clone()).collect();
                    self.plan = Some(plan);
                    if !self.early_gates {
                        return self.start_acquire(tables);
                    }
                    // Schema and branch are held: add the tables, in order.
                    let more = self.table_gates(&tables);
                    self.gates.extend(more);
                    self.state = State::Acquiring;
                    if self.next_gate < self.gates.len() {
                        self.acquire_next()
                    } else {
                        self.on_all_granted()
                    }
                }
                Err(e) => {
                    let outcome = match e {
                        None => Outcome::Rejected,
                        Some(e) => Outcome::StorageFailed(e),
                    };
                    let mut out = self.release_all();
                    out.push(self.discard());
                    out.extend(self.finish(outcome));
                    out
                }
            },
            (State::DroppingStorage(r), IoOut::Done(result)) if r == req => {
                if let Err(e) = result {
                    warn!(op = %self.op, e, "could not reclaim a deleted branch's storage");
                }
                self.release_and_answer_committed()
            }
            (_, out) => {
                if let Some(i) = self.discards.iter().position(|r| *r == req) {
                    self.discards.remove(i);
                    return Vec::new();
                }
                self.unexpected(format!("completion #{req} {out:?}"))
            }
        }
    }

    fn check(&self) -> Result<(), String> {
        if let Some(v) = self.violations.first() {
            return Err(v.clone());
        }
        Ok(())
    }
}

impl Writer {
    /// The gates this writer has asked for, in order; the simulator checks the
    /// order against schema -> branch -> sorted tables.
    pub fn asked_gates(&self) -> &[Addr] {
        &self.asked
    }

    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op() -> OpId {
        OpId("w".into())
    }

    fn head() -> Head {
        Head {
            commit: CommitId("c0".into()),
            version: 1,
        }
    }

    /// A write on main, taken up to the point where it asks for its first gate.
    fn writer_asking_for_gates() -> Writer {
        let mut w = Writer::new(
            op(),
            OpKind::Write {
                branch: "main".into(),
            },
            Bugs::default(),
        );
        w.on_start(0);
        w.on_msg(
            0,
            Addr::Recovery,
            Msg::Admitted {
                op: op(),
                blocked_by: None,
            },
        );
        let fx = w.on_msg(
            0,
            Addr::Branch("main".into()),
            Msg::HeadReply {
                op: op(),
                head: Ok(Some(head())),
            },
        );
        let [Effect::Io(req, Io::Prepare { .. })] = &fx[..] else {
            panic!("expected a prepare, got {fx:?}");
        };
        let plan = Plan {
            commit: CommitId("c1".into()),
            schema: "s".into(),
            class: WriteClass::Retryable,
            tables: vec![TablePlan {
                table: TableKey::new("main", "node:A"),
                base: 1,
                staged: StagedRef("node:A".into()),
                txn: "t".into(),
                line: None,
            }],
            merge: None,
            schema_change: None,
        };
        let fx = w.on_io(0, *req, IoOut::Prepared(Ok(plan)));
        assert!(
            matches!(&fx[..], [Effect::Send(Addr::Schema, Msg::Acquire { .. })]),
            "{fx:?}"
        );
        w
    }

    /// A write whose schema gate's lock is held (it now asks for the
    /// branch gate), its view still out.
    fn writer_holding_the_schema_lock() -> Writer {
        let mut w = writer_asking_for_gates();
        w.on_msg(
            0,
            Addr::Schema,
            Msg::Locked {
                op: op(),
                tenure: 0,
            },
        );
        w
    }

    /// The outcome the client hears among the effects, if any.
    fn answer(fx: &[Effect]) -> Option<&Outcome> {
        fx.iter().find_map(|e| match e {
            Effect::Send(Addr::Client(_), Msg::Finished { outcome, .. }) => Some(outcome),
            _ => None,
        })
    }

    /// A gate tells the writer its lock is held, then sends its view; the
    /// effects of the view.
    fn grant(w: &mut Writer, gate: Addr, view: GateView) -> Vec<Effect> {
        w.on_msg(
            0,
            gate.clone(),
            Msg::Locked {
                op: op(),
                tenure: 0,
            },
        );
        view_of(w, gate, view)
    }

    /// A gate's view reaches the writer; the effects of it.
    fn view_of(w: &mut Writer, gate: Addr, view: GateView) -> Vec<Effect> {
        w.on_msg(0, gate, Msg::Granted { op: op(), view })
    }

    #[test]
    fn a_grant_from_a_gate_it_does_not_wait_for_is_a_violation() {
        let mut w = writer_asking_for_gates();
        let fx = w.on_msg(
            0,
            Addr::Branch("main".into()),
            Msg::Granted {
                op: op(),
                view: GateView::Branch(Some(head())),
            },
        );
        assert!(fx.is_empty());
        assert!(w.check().unwrap_err().contains("expected from Schema"));
    }

    #[test]
    fn a_schema_apply_waits_for_every_branch_then_prepares_under_the_exclusive_schema_gate() {
        let mut w = Writer::new(op(), OpKind::ApplySchema, Bugs::default());
        let fx = w.on_start(0);
        assert_eq!(
            fx,
            vec![Effect::Send(
                Addr::Recovery,
                Msg::Admit {
                    op: op(),
                    branch: EVERY_BRANCH.into()
                }
            )]
        );
        let fx = w.on_msg(
            0,
            Addr::Recovery,
            Msg::Admitted {
                op: op(),
                blocked_by: None,
            },
        );
        assert_eq!(
            fx,
            vec![Effect::Send(
                Addr::Schema,
                Msg::Acquire {
                    op: op(),
                    mode: GateMode::Exclusive,
                    expect: None,
                    under: None,
                }
            )]
        );
        grant(&mut w, Addr::Schema, GateView::Schema("s".into()));
        let fx = grant(
            &mut w,
            Addr::Branch(SCHEMA_BRANCH.into()),
            GateView::Branch(Some(head())),
        );
        assert!(
            matches!(&fx[..], [Effect::Io(_, Io::Prepare { branch, head: h, .. })] if branch == SCHEMA_BRANCH && *h == head()),
            "{fx:?}"
        );
        assert!(w.check().is_ok());
    }

    #[test]
    fn a_reply_for_another_operation_is_a_violation() {
        let mut w = writer_asking_for_gates();
        w.on_msg(
            0,
            Addr::Schema,
            Msg::Granted {
                op: OpId("someone-else".into()),
                view: GateView::Schema("s".into()),
            },
        );
        assert!(w.check().unwrap_err().contains("someone-else"));
    }

    #[test]
    fn orphans_under_the_gates_go_to_recovery_and_the_write_asks_again() {
        let mut w = writer_asking_for_gates();
        grant(&mut w, Addr::Schema, GateView::Schema("s".into()));
        grant(
            &mut w,
            Addr::Branch("main".into()),
            GateView::Branch(Some(head())),
        );
        let view = TableView {
            latest: Some(2),
            named: Some(1),
            published: true,
            line: None,
        };
        let fx = grant(
            &mut w,
            Addr::Table(TableKey::new("main", "node:A")),
            GateView::Table(view),
        );
        w.check().unwrap();
        let sent: Vec<&Msg> = fx
            .iter()
            .filter_map(|e| match e {
                Effect::Send(Addr::Recovery, m) => Some(m),
                _ => None,
            })
            .collect();
        assert!(
            matches!(sent[..], [Msg::Suspect { .. }, Msg::Admit { .. }]),
            "{sent:?}"
        );
        let releases = fx
            .iter()
            .filter(|e| matches!(e, Effect::Send(_, Msg::Release { .. })))
            .count();
        assert_eq!(
            releases, 3,
            "every gate is released before recovery repairs"
        );
    }

    /// The next gate is asked for as soon as the last one's lock is held,
    /// so the views are read together; the recheck waits for all of them,
    /// in whatever order they arrive.
    #[test]
    fn the_next_gate_is_asked_on_the_lock_and_the_recheck_waits_for_every_view() {
        let mut w = writer_asking_for_gates();
        let table = Addr::Table(TableKey::new("main", "node:A"));
        let locked = |w: &mut Writer, gate: &Addr| {
            w.on_msg(
                0,
                gate.clone(),
                Msg::Locked {
                    op: op(),
                    tenure: 0,
                },
            )
        };
        let acquire = |gate: &Addr| {
            // A table gate's lease says what its snapshot implies.
            let expect =
                matches!(gate, Addr::Table(_)).then(|| GateView::Table(TableView::owned(None, 1)));
            Effect::Send(
                gate.clone(),
                Msg::Acquire {
                    op: op(),
                    mode: GateMode::Exclusive,
                    expect,
                    // The branch gate is asked for under the schema's tenure.
                    under: matches!(gate, Addr::Branch(_)).then_some(0),
                },
            )
        };
        let fx = locked(&mut w, &Addr::Schema);
        let branch = Addr::Branch("main".into());
        assert_eq!(fx, vec![acquire(&branch)]);
        assert_eq!(locked(&mut w, &branch), vec![acquire(&table)]);
        // Every lock is held; no view has come: nothing more to do.
        assert!(locked(&mut w, &table).is_empty());
        let view = |v| {
            GateView::Table(TableView {
                latest: Some(v),
                named: Some(v),
                published: true,
                line: None,
            })
        };
        let granted = |w: &mut Writer, gate: &Addr, view| {
            w.on_msg(0, gate.clone(), Msg::Granted { op: op(), view })
        };
        assert!(granted(&mut w, &table, view(1)).is_empty());
        assert!(granted(&mut w, &Addr::Schema, GateView::Schema("s".into())).is_empty());
        // The last view completes them: the snapshot is current, so the
        // writer checks for intents.
        let fx = granted(&mut w, &branch, GateView::Branch(Some(head())));
        assert!(
            matches!(
                &fx[..],
                [Effect::Send(Addr::Recovery, Msg::CheckIntents { .. })]
            ),
            "{fx:?}"
        );
        w.check().unwrap();
    }

    /// A gate another process keeps answers "busy" with no lock: nothing
    /// further is asked, and the write gives up once every view it waits
    /// for is in.
    #[test]
    fn a_busy_gate_stops_the_acquisition_after_the_views_already_asked_for() {
        let mut w = writer_holding_the_schema_lock();
        let branch = Addr::Branch("main".into());
        let busy = GateView::Busy("kept by another process".into());
        let fx = view_of(&mut w, branch.clone(), busy);
        assert!(fx.is_empty(), "the schema's view is still out: {fx:?}");
        let fx = view_of(&mut w, Addr::Schema, GateView::Schema("s".into()));
        assert!(
            fx.iter()
                .all(|e| !matches!(e, Effect::Send(_, Msg::Acquire { .. }))),
            "{fx:?}"
        );
        assert!(
            matches!(answer(&fx), Some(Outcome::Contended { .. })),
            "{fx:?}"
        );
        w.check().unwrap();
    }

    /// A view that could not be read stops the asking too: a lock held
    /// after it asks for no further gate.
    #[test]
    fn an_unreadable_view_stops_the_asking() {
        let mut w = writer_holding_the_schema_lock();
        let branch = Addr::Branch("main".into());
        let view = GateView::Unavailable("the store did not answer".into());
        assert!(view_of(&mut w, Addr::Schema, view).is_empty());
        assert!(
            w.on_msg(
                0,
                branch.clone(),
                Msg::Locked {
                    op: op(),
                    tenure: 0
                }
            )
            .is_empty()
        );
        let fx = view_of(&mut w, branch, GateView::Branch(Some(head())));
        assert!(
            matches!(answer(&fx), Some(Outcome::StorageFailed(_))),
            "{fx:?}"
        );
        w.check().unwrap();
    }

    /// The caller hears "committed" at the publish; the sidecar delete and
    /// the release of the gates come after, and no second answer.
    #[test]
    fn the_answer_goes_at_the_publish_and_the_gates_wait_for_the_sidecar_delete() {
        let mut w = writer_asking_for_gates();
        let table = Addr::Table(TableKey::new("main", "node:A"));
        grant(&mut w, Addr::Schema, GateView::Schema("s".into()));
        grant(
            &mut w,
            Addr::Branch("main".into()),
            GateView::Branch(Some(head())),
        );
        let view = TableView {
            latest: Some(1),
            named: Some(1),
            published: true,
            line: None,
        };
        grant(&mut w, table.clone(), GateView::Table(view));
        let ok = Msg::IntentsChecked {
            op: op(),
            clear: true,
        };
        w.on_msg(0, Addr::Recovery, ok);
        let recorded = Msg::IntentRecorded {
            op: op(),
            result: Ok(()),
        };
        w.on_msg(0, Addr::Recovery, recorded);
        let committed = Msg::TableCommitted {
            op: op(),
            table: TableKey::new("main", "node:A"),
            result: CommitResult::Committed { version: 2 },
        };
        w.on_msg(0, table, committed);
        let published = Head {
            commit: CommitId("c1".into()),
            version: 2,
        };
        let reply = Msg::PublishReply {
            op: op(),
            result: PublishResult::Published {
                version: 2,
                head: Some(published.clone()),
            },
        };
        let fx = w.on_msg(0, Addr::Publisher, reply);
        // The branch's owner hears the head it left (for head requests
        // while the sidecar goes), then the client its answer.
        assert_eq!(
            fx,
            vec![
                Effect::Send(
                    Addr::Branch("main".into()),
                    Msg::Settled {
                        op: op(),
                        left: GateView::Branch(Some(published.clone()))
                    }
                ),
                Effect::Send(
                    Addr::Client(op()),
                    Msg::Finished {
                        op: op(),
                        outcome: Outcome::Committed {
                            commit: Some(CommitId("c1".into())),
                            version: 2
                        }
                    }
                ),
                Effect::Send(Addr::Recovery, Msg::IntentDone { op: op() }),
            ]
        );
        assert!(!w.is_done());
        let deleted = Msg::IntentDeleted {
            op: op(),
            result: Ok(()),
        };
        let fx = w.on_msg(0, Addr::Recovery, deleted);
        let releases = fx
            .iter()
            .filter(|e| matches!(e, Effect::Send(_, Msg::Release { .. })))
            .count();
        assert_eq!(releases, 3, "{fx:?}");
        // Each release says what the write left: the head it published and
        // the version its table commit made.
        let left = |to: Addr| {
            fx.iter().find_map(|e| match e {
                Effect::Send(a, Msg::Release { left, .. }) if *a == to => Some(left.clone()),
                _ => None,
            })
        };
        assert_eq!(
            left(Addr::Branch("main".into())),
            Some(Some(GateView::Branch(Some(published))))
        );
        let table = TableView {
            latest: Some(2),
            named: Some(2),
            published: true,
            line: None,
        };
        assert_eq!(
            left(Addr::Table(TableKey::new("main", "node:A"))),
            Some(Some(GateView::Table(table)))
        );
        assert_eq!(fx.last(), Some(&Effect::Stop));
        assert!(
            !fx.iter()
                .any(|e| matches!(e, Effect::Send(_, Msg::Finished { .. }))),
            "answered twice: {fx:?}"
        );
        assert!(w.is_done());
        w.check().unwrap();
    }
}
