//! The gate-owning actors: the SchemaActor, one BranchActor per branch and one
//! TableActor per physical table. Each owns a gate; on every grant it reads the
//! state the holder must recheck against (schema identity, branch head, table
//! version). The TableActor also performs its table's commits and restores,
//! and only for the current gate holder.

use std::collections::BTreeMap;

use tracing::debug;

use crate::gate::{Gate, Lease};
use crate::machine::*;
use crate::types::*;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OwnerKind {
    Schema,
    Branch(String),
    Table(TableKey),
}

#[derive(Debug)]
enum Pending {
    /// Granted leases waiting for the view to be read.
    View(Vec<Lease>),
    Head(Addr, OpId),
    Commit(Addr, OpId),
    Restore(Addr, OpId),
}

pub struct GateOwner {
    kind: OwnerKind,
    gate: Gate,
    next_req: ReqId,
    pending: BTreeMap<ReqId, Pending>,
    /// Protocol violations seen (a commit from a non-holder, a release from
    /// nobody); reported by `check`.
    violations: Vec<String>,
}

impl GateOwner {
    pub fn new(kind: OwnerKind) -> Self {
        Self {
            kind,
            gate: Gate::default(),
            next_req: 0,
            pending: BTreeMap::new(),
            violations: Vec::new(),
        }
    }

    pub fn gate(&self) -> &Gate {
        &self.gate
    }

    fn io(&mut self, io: Io, pending: Pending) -> Effect {
        self.next_req += 1;
        self.pending.insert(self.next_req, pending);
        Effect::Io(self.next_req, io)
    }

    fn view_io(&self) -> Io {
        match &self.kind {
            OwnerKind::Schema => Io::ReadSchemaId,
            OwnerKind::Branch(b) => Io::ReadHead { branch: b.clone() },
            OwnerKind::Table(t) => Io::TableVersion { table: t.clone() },
        }
    }

    fn granted(&mut self, leases: Vec<Lease>) -> Vec<Effect> {
        if leases.is_empty() {
            return Vec::new();
        }
        for l in &leases {
            debug!(op = %l.op, gate = ?self.kind, mode = ?l.mode, "gate granted");
        }
        let io = self.view_io();
        vec![self.io(io, Pending::View(leases))]
    }

    fn table(&self) -> Option<&TableKey> {
        match &self.kind {
            OwnerKind::Table(t) => Some(t),
            _ => None,
        }
    }
}

impl Machine for GateOwner {
    fn on_start(&mut self, _now: Tick) -> Vec<Effect> {
        Vec::new()
    }

    fn on_msg(&mut self, _now: Tick, from: Addr, msg: Msg) -> Vec<Effect> {
        match msg {
            Msg::Acquire { op, mode } => {
                debug!(op = %op, gate = ?self.kind, ?mode, "gate requested");
                let granted = self.gate.request(from, op, mode);
                self.granted(granted)
            }
            Msg::Release { op } => match self.gate.release(&op) {
                Some(granted) => {
                    debug!(op = %op, gate = ?self.kind, "gate released");
                    self.granted(granted)
                }
                None => {
                    self.violations.push(format!(
                        "{op:?} released {:?} it never asked for",
                        self.kind
                    ));
                    Vec::new()
                }
            },
            Msg::HeadRequest { op } => match &self.kind {
                OwnerKind::Branch(b) => {
                    let io = Io::ReadHead { branch: b.clone() };
                    vec![self.io(io, Pending::Head(from, op))]
                }
                other => {
                    self.violations
                        .push(format!("head request sent to {other:?}"));
                    Vec::new()
                }
            },
            Msg::CommitTable { op, staged } => {
                let Some(table) = self.table().cloned() else {
                    self.violations
                        .push(format!("commit sent to {:?}", self.kind));
                    return Vec::new();
                };
                if !self.gate.holds(&op) {
                    self.violations.push(format!(
                        "{op:?} committed {table:?} without holding its gate"
                    ));
                    let result = CommitResult::Conflict("not the gate holder".into());
                    return vec![Effect::Send(
                        from,
                        Msg::TableCommitted { op, table, result },
                    )];
                }
                debug!(op = %op, table = ?table, "table commit");
                let io = Io::CommitTable {
                    op: op.clone(),
                    table,
                    staged,
                };
                vec![self.io(io, Pending::Commit(from, op))]
            }
            Msg::RestoreTable { op, to } => {
                let Some(table) = self.table().cloned() else {
                    self.violations
                        .push(format!("restore sent to {:?}", self.kind));
                    return Vec::new();
                };
                if !self.gate.holds(&op) {
                    self.violations.push(format!(
                        "{op:?} restored {table:?} without holding its gate"
                    ));
                    let result = Err("not the gate holder".to_string());
                    return vec![Effect::Send(from, Msg::TableRestored { op, table, result })];
                }
                debug!(op = %op, table = ?table, to, "table restore");
                vec![self.io(Io::RestoreTable { table, to }, Pending::Restore(from, op))]
            }
            other => {
                self.violations
                    .push(format!("{:?} got unexpected {other:?}", self.kind));
                Vec::new()
            }
        }
    }

    fn on_io(&mut self, _now: Tick, req: ReqId, out: IoOut) -> Vec<Effect> {
        let Some(pending) = self.pending.remove(&req) else {
            return Vec::new();
        };
        match (pending, out) {
            (Pending::View(leases), out) => {
                let view = match out {
                    IoOut::SchemaId(Ok(id)) => GateView::Schema(id),
                    IoOut::Head(Ok(h)) => GateView::Branch(h),
                    IoOut::TableVersion(Ok(v)) => GateView::Table(v),
                    IoOut::SchemaId(Err(e)) | IoOut::Head(Err(e)) | IoOut::TableVersion(Err(e)) => {
                        GateView::Unavailable(e)
                    }
                    other => GateView::Unavailable(format!("unexpected view {other:?}")),
                };
                leases
                    .into_iter()
                    // A lease released while its view was read needs no notice.
                    .filter(|l| self.gate.holds(&l.op))
                    .map(|l| {
                        Effect::Send(
                            l.who,
                            Msg::Granted {
                                op: l.op,
                                view: view.clone(),
                            },
                        )
                    })
                    .collect()
            }
            (Pending::Head(who, op), IoOut::Head(head)) => {
                vec![Effect::Send(who, Msg::HeadReply { op, head })]
            }
            (Pending::Commit(who, op), IoOut::TableCommit(result)) => {
                let table = self.table().cloned().expect("table owner");
                debug!(op = %op, table = ?table, ?result, "table commit done");
                vec![Effect::Send(who, Msg::TableCommitted { op, table, result })]
            }
            (Pending::Restore(who, op), IoOut::TableRestore(result)) => {
                let table = self.table().cloned().expect("table owner");
                vec![Effect::Send(who, Msg::TableRestored { op, table, result })]
            }
            (p, out) => {
                self.violations.push(format!(
                    "{:?}: completion {out:?} does not match {p:?}",
                    self.kind
                ));
                Vec::new()
            }
        }
    }

    fn check(&self) -> Result<(), String> {
        self.gate.check()?;
        match self.violations.first() {
            Some(v) => Err(v.clone()),
            None => Ok(()),
        }
    }
}
