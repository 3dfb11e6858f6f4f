//! The gate-owning actors: the SchemaActor, one BranchActor per branch and one
//! TableActor per physical table. Each owns a gate; on every grant it reads the
//! state the holder must recheck against (schema identity, branch head, table
//! version). The TableActor also performs its table's commits, restores and
//! fork removals, and only for the current gate holder.
//!
//! A gate holds across processes: while any lease of this process holds the
//! gate, the process holds the gate's cross-process lock (`Io::LockGate`), in
//! a mode at least as strong as every lease's. Lock changes are serialised —
//! one lock request in flight at a time — so an unlock can never overtake
//! the lock that follows it. A lease is told it holds the gate (`Locked`)
//! only once the lock is held, and the view it gets (`Granted`) is read
//! after that.
//!
//! Where a lock costs a round trip (a lease object on object storage), the
//! owner keeps the lock for `linger` ticks after its last local lease
//! ends: the next write of this process then takes the gate without a
//! request. Keeping a lock longer never lets two processes hold it; it only
//! makes another process wait up to `linger` more, and the timer always
//! ends it. So that a process that
//! writes without pause cannot keep a gate from the others, a lock held
//! for `LINGER_HOLD_FACTOR` lingers is given up at its next last release,
//! and for `LINGER_COOLDOWN_FACTOR` lingers after that the owner does not
//! linger (each last release gives the lock up, a turn for a waiter).
//!
//! While the lock stays held, no other process changes what the view shows,
//! and in this process only an exclusive holder does, which says at its
//! release what it left (`Release::left`). So the owner knows the view
//! without reading it: a grant, and a branch head request while the gate is
//! free, are answered from what it knows. What it knows goes with the lock
//! (given up, or changed to another mode) and with any release that does
//! not say what it left.

use std::collections::BTreeMap;

use tracing::debug;

use crate::bugs::Bugs;
use crate::gate::{Gate, Lease};
use crate::machine::*;
use crate::types::limits::{LINGER_COOLDOWN_FACTOR, LINGER_HOLD_FACTOR};
use crate::types::*;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OwnerKind {
    Schema,
    Branch(String),
    Table(TableKey),
}

#[derive(Debug)]
enum Pending {
    /// Granted leases waiting for the view to be read, and the `known`
    /// epoch the read started in.
    View(Vec<Lease>, u64),
    Head(Addr, OpId),
    Commit(Addr, OpId),
    Restore(Addr, OpId),
    DropFork(Addr, OpId),
    /// A change of the cross-process lock to this mode (`None`: unlock).
    Lock(Option<GateMode>),
}

/// Does a lock held in `held` cover a lease in `want`? (Modes are ordered
/// by strength.)
fn covers(held: Option<GateMode>, want: GateMode) -> bool {
    held.is_some_and(|h| h >= want)
}

pub struct GateOwner {
    kind: OwnerKind,
    bugs: Bugs,
    gate: Gate,
    next_req: ReqId,
    pending: BTreeMap<ReqId, Pending>,
    /// This process's cross-process lock on the gate, as last confirmed.
    lock_held: Option<GateMode>,
    /// A lock change is in flight.
    lock_busy: bool,
    /// Leases granted in this process that wait for the cross-process lock.
    awaiting_lock: Vec<Lease>,
    /// Holders already told the lock could not be had: they are releasing,
    /// and the lock is not taken again on their behalf.
    told_busy: Vec<OpId>,
    /// Ticks the lock is kept after the last local lease ends (0: none).
    linger: u64,
    /// The timer of the current linger, if one runs: its id (each linger
    /// has a new one, so an earlier one's timer is known stale).
    lingering: Option<TimerId>,
    /// The linger is over: the next sync gives the lock up.
    linger_over: bool,
    next_timer: TimerId,
    /// When the cross-process lock was last taken, and until when the owner
    /// does not linger (after a long hold).
    locked_at: Tick,
    no_linger_until: Tick,
    now: Tick,
    /// The view as it stands, known while this process's lock has been held
    /// since it was read or since the holder that changed it said what it
    /// left; `None`: read on the next grant.
    known: Option<GateView>,
    /// Moves whenever `known` is dropped or replaced, so that a read
    /// started before cannot bring back what it read.
    known_epoch: u64,
    /// What each lease of a table gate expects its view to be (its
    /// snapshot's line and version): a known view stands in for a read
    /// only where it is that.
    expects: BTreeMap<OpId, GateView>,
    /// The schema tenure each lease of a branch gate holds it under.
    unders: BTreeMap<OpId, u64>,
    /// The schema tenure `known` was known under, for a branch gate.
    known_under: Option<u64>,
    /// This gate's tenure (see `Msg::Locked`).
    tenure: u64,
    /// The exclusive holder that said its effects are over (`Settled`):
    /// `known` is what it left, and it changes nothing before it releases.
    settled: Option<OpId>,
    /// Protocol violations seen (a commit from a non-holder, a release from
    /// nobody); reported by `check`.
    violations: Vec<String>,
}

impl GateOwner {
    pub fn new(kind: OwnerKind, bugs: Bugs) -> Self {
        Self {
            kind,
            bugs,
            gate: Gate::default(),
            next_req: 0,
            pending: BTreeMap::new(),
            lock_held: None,
            lock_busy: false,
            awaiting_lock: Vec::new(),
            told_busy: Vec::new(),
            linger: 0,
            lingering: None,
            linger_over: false,
            next_timer: 0,
            locked_at: 0,
            no_linger_until: 0,
            now: 0,
            known: None,
            known_epoch: 0,
            expects: BTreeMap::new(),
            unders: BTreeMap::new(),
            known_under: None,
            tenure: 0,
            settled: None,
            violations: Vec::new(),
        }
    }

    /// Keep the cross-process lock `ticks` after the last local lease ends.
    pub fn with_linger(mut self, ticks: u64) -> Self {
        self.linger = ticks;
        self
    }

    fn addr(&self) -> Addr {
        match &self.kind {
            OwnerKind::Schema => Addr::Schema,
            OwnerKind::Branch(b) => Addr::Branch(b.clone()),
            OwnerKind::Table(t) => Addr::Table(t.clone()),
        }
    }

    /// This process's hold on the cross-process lock, as last confirmed.
    pub fn lock_held(&self) -> Option<GateMode> {
        self.lock_held
    }

    /// The mode `op` holds the gate in (`None`: it holds it not, perhaps
    /// waiting for it).
    fn held_mode(&self, op: &OpId) -> Option<GateMode> {
        self.gate
            .holders()
            .iter()
            .find(|l| &l.op == op)
            .map(|l| l.mode)
    }

    /// Nobody holds the gate but, perhaps, a holder that settled: the state
    /// stays what it is until a new lease is granted.
    fn quiet(&self) -> bool {
        match self.gate.holders() {
            [] => true,
            [only] => self.settled.as_ref() == Some(&only.op),
            _ => false,
        }
    }

    /// Replace what is known of the view (`None`: forget it).
    fn know(&mut self, view: Option<GateView>) {
        self.know_under(view, None);
    }

    /// Replace what is known of the view, known under schema tenure
    /// `under` (a branch gate's; `None`: not known, and so never given).
    fn know_under(&mut self, view: Option<GateView>, under: Option<u64>) {
        self.known_epoch += 1;
        self.known = view;
        self.known_under = under;
    }

    /// Bring the cross-process lock in line with the in-process holders,
    /// then tell the leases whose lock is held. One lock change at a time.
    fn sync_lock(&mut self) -> Vec<Effect> {
        if self.lock_busy {
            return Vec::new();
        }
        let want = self
            .gate
            .holders()
            .iter()
            .filter(|l| !self.told_busy.contains(&l.op))
            .map(|l| l.mode)
            .max();
        let hold_max = self.linger * LINGER_HOLD_FACTOR;
        if self.lock_held.is_some()
            && want.is_none()
            && self.lingering.is_none()
            && self.linger > 0
            && self.now >= self.no_linger_until
            && self.now.saturating_sub(self.locked_at) >= hold_max
        {
            // Held long enough: given up now, and no linger for a while.
            self.no_linger_until = self.now + self.linger * LINGER_COOLDOWN_FACTOR;
        }
        let may_linger = self.linger > 0 && !self.linger_over && self.now >= self.no_linger_until;
        let change = match (self.lock_held, want) {
            // Kept a while for the next local lease, unless the linger is over.
            (Some(_), None) if may_linger => {
                if self.lingering.is_none() {
                    self.next_timer += 1;
                    self.lingering = Some(self.next_timer);
                    if self.bugs.linger_forever() {
                        // The planted bug: nothing ever ends the keeping.
                        return Vec::new();
                    }
                    return vec![Effect::SetTimer(self.next_timer, self.linger)];
                }
                None
            }
            (Some(_), None) => Some(None),
            // An upgrade gives the weaker lock up first: two processes that
            // each held it shared and upgraded in place would wait on each
            // other forever. No local holder needs it meanwhile: the gate
            // grants an exclusive lease only to a lone holder.
            (Some(held), Some(m)) if !covers(Some(held), m) => Some(None),
            (None, Some(m)) => Some(Some(m)),
            _ => None,
        };
        if let Some(target) = change
            && self.bugs.skip_process_lock()
        {
            // The planted bug: believe the lock is held without asking.
            self.lock_held = target;
            return self.sync_lock();
        }
        if want.is_some() {
            // A local lease came back while the lock was kept: no linger runs.
            self.lingering = None;
        }
        if let Some(target) = change {
            if target.is_none() {
                self.lingering = None;
                self.linger_over = false;
            }
            if !self.bugs.view_outlives_lock() {
                // Another process may change the state once the lock goes.
                self.know(None);
            }
            self.lock_busy = true;
            let gate = self.addr();
            let io = match target {
                Some(mode) => Io::LockGate { gate, mode },
                None => Io::UnlockGate { gate },
            };
            return vec![self.io(io, Pending::Lock(target))];
        }
        let ready: Vec<Lease> = std::mem::take(&mut self.awaiting_lock);
        let (ready, still): (Vec<Lease>, Vec<Lease>) = ready
            .into_iter()
            .partition(|l| covers(self.lock_held, l.mode));
        self.awaiting_lock = still;
        if ready.is_empty() {
            return Vec::new();
        }
        self.read_view(ready)
    }

    /// Tell each lease its gate is held, then give them the view: the one
    /// known where it may stand in for a read, or else one read now.
    fn read_view(&mut self, leases: Vec<Lease>) -> Vec<Effect> {
        let mut fx: Vec<Effect> = leases
            .iter()
            .map(|l| {
                let locked = Msg::Locked {
                    op: l.op.clone(),
                    tenure: self.tenure,
                };
                Effect::Send(l.who.clone(), locked)
            })
            .collect();
        let mut unread = Vec::new();
        for l in leases {
            match self.known_for(&l.op).cloned() {
                Some(view) => fx.push(Effect::Send(l.who, Msg::Granted { op: l.op, view })),
                None => unread.push(l),
            }
        }
        if !unread.is_empty() {
            let io = self.view_io();
            fx.push(self.io(io, Pending::View(unread, self.known_epoch)));
        }
        fx
    }

    /// The known view that stands in for a read for lease `op`. A table's
    /// line and its place in the manifest change under the branch gate
    /// alone (a merge taking another branch's version moves the branch to
    /// a fresh line; a branch deleted and made again has new lines), which
    /// this owner does not see; only its line's top is this gate's alone.
    /// So a table's known view serves only a lease whose snapshot names
    /// that line at that version, as the last holder left it; and a lease
    /// whose snapshot is old is refused by its own recheck of the head.
    fn known_for(&self, op: &OpId) -> Option<&GateView> {
        let known = self.known.as_ref()?;
        match &self.kind {
            OwnerKind::Table(_) if !self.bugs.known_table_ignores_line() => {
                (self.expects.get(op) == Some(known)).then_some(known)
            }
            OwnerKind::Branch(_) if !self.bugs.known_branch_ignores_schema() => {
                let under = self.unders.get(op).copied();
                (under.is_some() && under == self.known_under).then_some(known)
            }
            _ => Some(known),
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
            OwnerKind::Table(t) => Io::TableView { table: t.clone() },
        }
    }

    fn granted(&mut self, leases: Vec<Lease>) -> Vec<Effect> {
        for l in &leases {
            debug!(op = %l.op, gate = ?self.kind, mode = ?l.mode, "gate granted in process");
            if l.mode == GateMode::Exclusive {
                self.tenure += 1;
            }
        }
        if self.bugs.view_before_lock() && !leases.is_empty() {
            // The planted bug: the leases hear "held" and get a view read
            // before the cross-process lock is taken.
            let mut fx = self.read_view(leases);
            fx.extend(self.sync_lock());
            return fx;
        }
        self.awaiting_lock.extend(leases);
        self.sync_lock()
    }

    /// Only a table's gate holder may change the table. `Ok`: go ahead on
    /// this table; `Err(Some(table))`: refuse the sender; `Err(None)`: this
    /// is no table owner. Either refusal is recorded as a violation.
    fn holder_table(&mut self, op: &OpId, what: &str) -> Result<TableKey, Option<TableKey>> {
        let Some(table) = self.table().cloned() else {
            self.violations
                .push(format!("{what} sent to {:?}", self.kind));
            return Err(None);
        };
        if !self.gate.holds(op) {
            self.violations.push(format!(
                "{op:?} asked for a {what} of {table:?} without holding its gate"
            ));
            return Err(Some(table));
        }
        Ok(table)
    }

    /// A lease ends: `held` is its mode if it held the gate (it may have
    /// been waiting), `left` what it says it left of the view's state.
    fn released(
        &mut self,
        op: OpId,
        held: Option<GateMode>,
        left: Option<GateView>,
    ) -> Vec<Effect> {
        let Some(granted) = self.gate.release(&op) else {
            self.violations.push(format!(
                "{op:?} released {:?} it never asked for",
                self.kind
            ));
            return Vec::new();
        };
        debug!(op = %op, gate = ?self.kind, "gate released");
        self.expects.remove(&op);
        let under = self.unders.remove(&op);
        if self.settled.as_ref() == Some(&op) {
            self.settled = None;
        }
        match (held, left) {
            // A lease that never held the gate changed nothing, nor does a
            // shared holder (changes need the gate exclusive) that knows
            // what it left.
            (None, _) | (Some(GateMode::Shared), Some(_)) => {}
            (Some(_), left) => self.know_under(left, under),
        }
        self.awaiting_lock.retain(|l| l.op != op);
        self.told_busy.retain(|o| o != &op);
        self.granted(granted)
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

    // The gate owner's transition table, one arm per message.
    fn on_msg(&mut self, now: Tick, from: Addr, msg: Msg) -> Vec<Effect> {
        self.now = now;
        match msg {
            Msg::Acquire {
                op,
                mode,
                expect,
                under,
            } => {
                debug!(op = %op, gate = ?self.kind, ?mode, "gate requested");
                if let Some(e) = expect {
                    self.expects.insert(op.clone(), e);
                }
                if let Some(u) = under {
                    self.unders.insert(op.clone(), u);
                }
                let granted = self.gate.request(from, op, mode);
                self.granted(granted)
            }
            Msg::Release { op, left } => {
                let held = self.held_mode(&op);
                self.released(op, held, left)
            }
            Msg::Settled { op, left } => {
                if self.held_mode(&op) == Some(GateMode::Exclusive) {
                    let under = self.unders.get(&op).copied();
                    self.know_under(Some(left), under);
                    self.settled = Some(op);
                }
                Vec::new()
            }
            Msg::HeadRequest { op } => match &self.kind {
                // Free, or held only by a holder whose effects are over, and
                // locked by this process since the head was known: it is
                // the head.
                OwnerKind::Branch(_)
                    if self.lock_held.is_some()
                        && self.quiet()
                        && let Some(GateView::Branch(head)) = &self.known =>
                {
                    let head = Ok(head.clone());
                    vec![Effect::Send(from, Msg::HeadReply { op, head })]
                }
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
            Msg::ForgetHead => {
                // Reading again is always allowed: the next grant or head
                // request reads what storage has.
                self.know(None);
                Vec::new()
            }
            Msg::CommitTable { op, staged } => match self.holder_table(&op, "commit") {
                Ok(table) => {
                    debug!(op = %op, table = ?table, "table commit");
                    let io = Io::CommitTable {
                        op: op.clone(),
                        table,
                        staged,
                    };
                    vec![self.io(io, Pending::Commit(from, op))]
                }
                Err(Some(table)) => {
                    let result = CommitResult::Conflict("not the gate holder".into());
                    vec![Effect::Send(
                        from,
                        Msg::TableCommitted { op, table, result },
                    )]
                }
                Err(None) => Vec::new(),
            },
            Msg::RestoreTable { op, to } => match self.holder_table(&op, "restore") {
                Ok(table) => {
                    debug!(op = %op, table = ?table, to, "table restore");
                    vec![self.io(Io::RestoreTable { table, to }, Pending::Restore(from, op))]
                }
                Err(Some(table)) => {
                    let result = Err("not the gate holder".to_string());
                    vec![Effect::Send(from, Msg::TableRestored { op, table, result })]
                }
                Err(None) => Vec::new(),
            },
            Msg::DropFork { op } => match self.holder_table(&op, "fork drop") {
                Ok(table) => {
                    debug!(op = %op, table = ?table, "drop an unpublished fork");
                    vec![self.io(Io::DropFork { table }, Pending::DropFork(from, op))]
                }
                Err(Some(table)) => {
                    let result = Err("not the gate holder".to_string());
                    vec![Effect::Send(from, Msg::ForkDropped { op, table, result })]
                }
                Err(None) => Vec::new(),
            },
            other => {
                self.violations
                    .push(format!("{:?} got unexpected {other:?}", self.kind));
                Vec::new()
            }
        }
    }

    /// The linger ends: with still no local lease, the lock is given up.
    fn on_timer(&mut self, now: Tick, timer: TimerId) -> Vec<Effect> {
        self.now = now;
        if self.lingering != Some(timer) {
            return Vec::new();
        }
        self.lingering = None;
        self.linger_over = true;
        let fx = self.sync_lock();
        self.linger_over = false;
        fx
    }

    // One arm per storage answer the gate owner waits for.
    fn on_io(&mut self, now: Tick, req: ReqId, out: IoOut) -> Vec<Effect> {
        self.now = now;
        let Some(pending) = self.pending.remove(&req) else {
            return Vec::new();
        };
        match (pending, out) {
            (Pending::View(leases, epoch), out) => {
                let view = match out {
                    IoOut::SchemaId(Ok(id)) => GateView::Schema(id),
                    IoOut::Head(Ok(h)) => GateView::Branch(h),
                    IoOut::TableView(Ok(v)) => GateView::Table(v),
                    IoOut::SchemaId(Err(e)) | IoOut::Head(Err(e)) | IoOut::TableView(Err(e)) => {
                        GateView::Unavailable(e)
                    }
                    other => GateView::Unavailable(format!("unexpected view {other:?}")),
                };
                let read = matches!(
                    view,
                    GateView::Schema(_) | GateView::Branch(_) | GateView::Table(_)
                );
                if read && epoch == self.known_epoch && self.lock_held.is_some() {
                    // Known under the leases' schema tenure, when they
                    // share one.
                    let mut unders = leases.iter().map(|l| self.unders.get(&l.op).copied());
                    let first = unders.next().flatten();
                    let under = first.filter(|u| unders.all(|o| o == Some(*u)));
                    self.know_under(Some(view.clone()), under);
                }
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
            (Pending::DropFork(who, op), IoOut::Done(result)) => {
                let table = self.table().cloned().expect("table owner");
                vec![Effect::Send(who, Msg::ForkDropped { op, table, result })]
            }
            (Pending::Lock(target), IoOut::Locked(result)) => {
                self.lock_busy = false;
                match result {
                    Ok(()) => {
                        debug!(gate = ?self.kind, ?target, "cross-process lock changed");
                        if self.lock_held.is_none() && target.is_some() {
                            self.locked_at = self.now;
                            self.tenure += 1;
                        }
                        self.lock_held = target;
                        if target.is_none() && !self.bugs.view_outlives_lock() {
                            self.know(None);
                        }
                        self.sync_lock()
                    }
                    Err(e) if target.is_none() => {
                        // An unlock that failed leaves the lock to expire with
                        // the process (a lock file) or its lease.
                        debug!(gate = ?self.kind, e, "cross-process unlock failed");
                        self.lock_held = None;
                        self.know(None);
                        self.sync_lock()
                    }
                    Err(e) => {
                        // Every lease waiting for this lock hears why; each
                        // releases the gate, and the next one tries afresh.
                        let waiting = std::mem::take(&mut self.awaiting_lock);
                        self.told_busy.extend(waiting.iter().map(|l| l.op.clone()));
                        let mut fx: Vec<Effect> = waiting
                            .into_iter()
                            .map(|l| {
                                Effect::Send(
                                    l.who,
                                    Msg::Granted {
                                        op: l.op,
                                        view: GateView::Busy(e.clone()),
                                    },
                                )
                            })
                            .collect();
                        fx.extend(self.sync_lock());
                        fx
                    }
                }
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
        for l in &self.awaiting_lock {
            if !self.gate.holds(&l.op) {
                return Err(format!(
                    "{:?} waits for the lock of a gate it does not hold",
                    l.op
                ));
            }
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

    fn op(s: &str) -> OpId {
        OpId(s.into())
    }

    fn owner() -> GateOwner {
        GateOwner::new(OwnerKind::Branch("main".into()), Bugs::default())
    }

    /// A lease of `who`, under schema tenure 0.
    fn acquire(o: &mut GateOwner, who: &str) -> Vec<Effect> {
        acquire_under(o, who, 0)
    }

    fn acquire_under(o: &mut GateOwner, who: &str, tenure: u64) -> Vec<Effect> {
        o.on_msg(
            0,
            Addr::Writer(op(who)),
            Msg::Acquire {
                op: op(who),
                mode: GateMode::Exclusive,
                expect: None,
                under: Some(tenure),
            },
        )
    }

    fn release(o: &mut GateOwner, who: &str) -> Vec<Effect> {
        o.on_msg(
            0,
            Addr::Writer(op(who)),
            Msg::Release {
                op: op(who),
                left: None,
            },
        )
    }

    /// The one storage request among the effects, beside the `Locked`
    /// notices that go out with a view's read.
    fn only_io(fx: &[Effect]) -> (ReqId, Io) {
        let rest: Vec<&Effect> = fx
            .iter()
            .filter(|e| !matches!(e, Effect::Send(_, Msg::Locked { .. })))
            .collect();
        match rest[..] {
            [Effect::Io(r, io)] => (*r, io.clone()),
            ref other => panic!("expected one request, got {other:?}"),
        }
    }

    #[test]
    fn a_lease_hears_of_its_grant_only_after_the_cross_process_lock_is_held() {
        let mut o = owner();
        let (r, io) = only_io(&acquire(&mut o, "a"));
        assert_eq!(
            io,
            Io::LockGate {
                gate: Addr::Branch("main".into()),
                mode: GateMode::Exclusive
            }
        );
        // Locked: now the lease hears it holds the gate, and its view is
        // read; the view reaches it only after that.
        let fx = o.on_io(0, r, IoOut::Locked(Ok(())));
        let [
            Effect::Send(Addr::Writer(w), Msg::Locked { op: locked, .. }),
            Effect::Io(r2, Io::ReadHead { branch }),
        ] = &fx[..]
        else {
            panic!("expected a Locked notice and the view's read, got {fx:?}");
        };
        assert_eq!((w, locked, branch.as_str()), (&op("a"), &op("a"), "main"));
        let r2 = *r2;
        let fx = o.on_io(0, r2, IoOut::Head(Ok(None)));
        assert!(
            matches!(&fx[..], [Effect::Send(Addr::Writer(w), Msg::Granted { .. })] if *w == op("a"))
        );
        assert_eq!(o.lock_held(), Some(GateMode::Exclusive));
        o.check().unwrap();
    }

    #[test]
    fn an_upgrade_gives_the_shared_lock_up_before_asking_for_the_exclusive_one() {
        // Two processes that each hold the schema lock shared and upgrade it
        // in place would wait for each other forever.
        let mut o = GateOwner::new(OwnerKind::Schema, Bugs::default());
        let ask = |o: &mut GateOwner, who: &str, mode| {
            o.on_msg(
                0,
                Addr::Writer(op(who)),
                Msg::Acquire {
                    op: op(who),
                    mode,
                    expect: None,
                    under: None,
                },
            )
        };
        let (r, _) = only_io(&ask(&mut o, "a", GateMode::Shared));
        let (r, _) = only_io(&o.on_io(0, r, IoOut::Locked(Ok(()))));
        o.on_io(0, r, IoOut::SchemaId(Ok("s".into())));
        assert_eq!(o.lock_held(), Some(GateMode::Shared));
        assert!(ask(&mut o, "b", GateMode::Exclusive).is_empty());
        let (r, io) = only_io(&release(&mut o, "a"));
        assert_eq!(io, Io::UnlockGate { gate: Addr::Schema });
        let (_, io) = only_io(&o.on_io(0, r, IoOut::Locked(Ok(()))));
        assert_eq!(
            io,
            Io::LockGate {
                gate: Addr::Schema,
                mode: GateMode::Exclusive
            }
        );
        o.check().unwrap();
    }

    #[test]
    fn an_unlock_in_flight_is_never_overtaken_by_the_next_lock() {
        let mut o = owner();
        let (r, _) = only_io(&acquire(&mut o, "a"));
        let (r, _) = only_io(&o.on_io(0, r, IoOut::Locked(Ok(()))));
        o.on_io(0, r, IoOut::Head(Ok(None)));
        let (unlock, io) = only_io(&release(&mut o, "a"));
        assert_eq!(
            io,
            Io::UnlockGate {
                gate: Addr::Branch("main".into())
            }
        );
        // b asks while the unlock is in flight: nothing happens yet.
        assert!(acquire(&mut o, "b").is_empty());
        let (_, io) = only_io(&o.on_io(0, unlock, IoOut::Locked(Ok(()))));
        assert!(matches!(io, Io::LockGate { .. }), "{io:?}");
        o.check().unwrap();
    }

    #[test]
    fn a_lock_another_process_kept_is_reported_busy_and_not_retried_for_that_lease() {
        let mut o = owner();
        let (r, _) = only_io(&acquire(&mut o, "a"));
        let fx = o.on_io(0, r, IoOut::Locked(Err("held elsewhere".into())));
        assert!(
            matches!(&fx[..], [Effect::Send(_, Msg::Granted { view: GateView::Busy(e), .. })] if e == "held elsewhere"),
            "{fx:?}"
        );
        // Its release needs no unlock: the lock was never held.
        assert!(release(&mut o, "a").is_empty());
        assert_eq!(o.lock_held(), None);
        o.check().unwrap();
    }

    #[test]
    fn only_the_gate_holder_may_commit() {
        let mut o = GateOwner::new(
            OwnerKind::Table(TableKey::new("main", "node:A")),
            Bugs::default(),
        );
        let fx = o.on_msg(
            0,
            Addr::Writer(op("x")),
            Msg::CommitTable {
                op: op("x"),
                staged: StagedRef("s".into()),
            },
        );
        assert!(matches!(
            &fx[..],
            [Effect::Send(
                _,
                Msg::TableCommitted {
                    result: CommitResult::Conflict(_),
                    ..
                }
            )]
        ));
        assert!(o.check().unwrap_err().contains("without holding its gate"));
    }

    #[test]
    fn a_lingering_lock_serves_the_next_lease_and_its_timer_gives_it_up() {
        let mut o = owner().with_linger(25);
        let (r, _) = only_io(&acquire(&mut o, "a"));
        let (r, _) = only_io(&o.on_io(0, r, IoOut::Locked(Ok(()))));
        o.on_io(0, r, IoOut::Head(Ok(None)));
        // The last lease ends: the lock is kept, a timer set.
        let fx = release(&mut o, "a");
        let [Effect::SetTimer(first, 25)] = fx[..] else {
            panic!("expected a linger timer, got {fx:?}");
        };
        assert_eq!(o.lock_held(), Some(GateMode::Exclusive));
        // The next lease is granted on the kept lock: its view is read, no lock.
        let (r, io) = only_io(&acquire(&mut o, "b"));
        assert_eq!(io, read_main());
        o.on_io(0, r, IoOut::Head(Ok(None)));
        // The first linger's timer is stale now: the lease holds the gate.
        assert!(o.on_timer(0, first).is_empty());
        assert_eq!(o.lock_held(), Some(GateMode::Exclusive));
        let fx = release(&mut o, "b");
        let [Effect::SetTimer(second, 25)] = fx[..] else {
            panic!("expected a new linger timer, got {fx:?}");
        };
        assert_ne!(first, second);
        let (r, io) = only_io(&o.on_timer(0, second));
        assert_eq!(
            io,
            Io::UnlockGate {
                gate: Addr::Branch("main".into())
            }
        );
        assert!(o.on_io(0, r, IoOut::Locked(Ok(()))).is_empty());
        assert_eq!(o.lock_held(), None);
        o.check().unwrap();
    }

    /// The view read of the branch gate these tests own.
    fn read_main() -> Io {
        Io::ReadHead {
            branch: "main".into(),
        }
    }

    fn head(commit: &str, version: u64) -> Option<Head> {
        Some(Head {
            commit: CommitId(commit.into()),
            version,
        })
    }

    fn granted_view(fx: &[Effect]) -> Option<GateView> {
        fx.iter().find_map(|e| match e {
            Effect::Send(_, Msg::Granted { view, .. }) => Some(view.clone()),
            _ => None,
        })
    }

    /// An owner that keeps its lock 25 ticks, whose gate "a" holds, its
    /// view (head c1) read.
    fn held_by_a() -> GateOwner {
        let mut o = owner().with_linger(25);
        let (r, _) = only_io(&acquire(&mut o, "a"));
        let (r, _) = only_io(&o.on_io(0, r, IoOut::Locked(Ok(()))));
        o.on_io(0, r, IoOut::Head(Ok(head("c1", 1))));
        o
    }

    /// "a" published c2 and said so as it went; the lock is kept.
    fn left_c2_by_a() -> GateOwner {
        let mut o = held_by_a();
        let left = Some(GateView::Branch(head("c2", 2)));
        o.on_msg(0, Addr::Writer(op("a")), Msg::Release { op: op("a"), left });
        o
    }

    #[test]
    fn while_the_lock_is_kept_the_view_a_holder_left_is_the_next_leases_without_a_read() {
        let mut o = left_c2_by_a();
        let w = Addr::Writer(op("a"));
        // A head request while the gate is free, and the next grant, are
        // answered from it, with no request.
        let fx = o.on_msg(0, w, Msg::HeadRequest { op: op("x") });
        assert_eq!(
            fx,
            vec![Effect::Send(
                Addr::Writer(op("a")),
                Msg::HeadReply {
                    op: op("x"),
                    head: Ok(head("c2", 2))
                }
            )]
        );
        let fx = acquire(&mut o, "b");
        assert!(!fx.iter().any(|e| matches!(e, Effect::Io(..))), "{fx:?}");
        assert_eq!(granted_view(&fx), Some(GateView::Branch(head("c2", 2))));
        // A holder that cannot say what it left makes the next grant read.
        release(&mut o, "b");
        let (_, io) = only_io(&acquire(&mut o, "c"));
        assert_eq!(io, read_main());
        o.check().unwrap();
    }

    #[test]
    fn a_forgotten_head_is_read_again() {
        let mut o = left_c2_by_a();
        let w = Addr::Writer(op("a"));
        assert_eq!(o.on_msg(0, w.clone(), Msg::ForgetHead), Vec::new());
        let (_, io) = only_io(&o.on_msg(0, w, Msg::HeadRequest { op: op("x") }));
        assert_eq!(io, read_main());
        let (_, io) = only_io(&acquire(&mut o, "b"));
        assert_eq!(io, read_main());
        o.check().unwrap();
    }

    #[test]
    fn a_known_branch_view_serves_only_a_lease_under_the_schema_tenure_it_was_known_under() {
        let mut o = left_c2_by_a();
        // The schema gate changed hands since (a schema apply may have
        // moved the head): read.
        let (_, io) = only_io(&acquire_under(&mut o, "b", 1));
        assert_eq!(io, read_main());
        o.check().unwrap();
    }

    #[test]
    fn a_known_table_view_serves_only_a_lease_whose_snapshot_names_its_line_and_version() {
        let key = TableKey::new("main", "node:A");
        let mut o = GateOwner::new(OwnerKind::Table(key.clone()), Bugs::default()).with_linger(25);
        let at = |line: &str, v| GateView::Table(TableView::owned(Some(line.into()), v));
        let ask = |o: &mut GateOwner, who: &str, expect| {
            let msg = Msg::Acquire {
                op: op(who),
                mode: GateMode::Exclusive,
                expect: Some(expect),
                under: None,
            };
            o.on_msg(0, Addr::Writer(op(who)), msg)
        };
        // "a" reads its view under a new lock, commits version 2 on line
        // "t@" and says so as it releases; the lock is kept.
        let (r, _) = only_io(&ask(&mut o, "a", at("t@", 1)));
        let (r, io) = only_io(&o.on_io(0, r, IoOut::Locked(Ok(()))));
        assert_eq!(io, Io::TableView { table: key.clone() });
        let read = TableView::owned(Some("t@".into()), 1);
        o.on_io(0, r, IoOut::TableView(Ok(read)));
        let left = Some(at("t@", 2));
        o.on_msg(0, Addr::Writer(op("a")), Msg::Release { op: op("a"), left });
        // "b"'s snapshot names that line at that version: no read.
        let fx = ask(&mut o, "b", at("t@", 2));
        assert!(!fx.iter().any(|e| matches!(e, Effect::Io(..))), "{fx:?}");
        assert_eq!(granted_view(&fx), Some(at("t@", 2)));
        let left = Some(at("t@", 2));
        o.on_msg(0, Addr::Writer(op("b")), Msg::Release { op: op("b"), left });
        // A merge took another branch's version under the branch gate
        // alone and moved main to a fresh line: "c"'s snapshot names it,
        // and the view is read, though the lock was kept throughout.
        let (_, io) = only_io(&ask(&mut o, "c", at("t@main-v7", 3)));
        assert_eq!(io, Io::TableView { table: key });
        o.check().unwrap();
    }

    #[test]
    fn a_view_known_under_the_lock_is_forgotten_when_the_lock_goes() {
        let mut o = held_by_a();
        let left = Some(GateView::Branch(head("c1", 1)));
        let w = Addr::Writer(op("a"));
        let fx = o.on_msg(0, w, Msg::Release { op: op("a"), left });
        let [Effect::SetTimer(t, 25)] = fx[..] else {
            panic!("expected a linger timer, got {fx:?}");
        };
        let (r, _) = only_io(&o.on_timer(0, t));
        o.on_io(0, r, IoOut::Locked(Ok(())));
        // Another process may have published meanwhile: the lock is taken
        // again and the view read after it.
        let (r, io) = only_io(&acquire(&mut o, "b"));
        assert_eq!(
            io,
            Io::LockGate {
                gate: Addr::Branch("main".into()),
                mode: GateMode::Exclusive
            }
        );
        let (_, io) = only_io(&o.on_io(0, r, IoOut::Locked(Ok(()))));
        assert_eq!(io, read_main());
        o.check().unwrap();
    }

    #[test]
    fn without_a_linger_the_last_release_gives_the_lock_up_at_once() {
        let mut o = owner();
        let (r, _) = only_io(&acquire(&mut o, "a"));
        let (r, _) = only_io(&o.on_io(0, r, IoOut::Locked(Ok(()))));
        o.on_io(0, r, IoOut::Head(Ok(None)));
        let (_, io) = only_io(&release(&mut o, "a"));
        assert_eq!(
            io,
            Io::UnlockGate {
                gate: Addr::Branch("main".into())
            }
        );
    }

    #[test]
    fn a_lock_held_long_is_given_up_and_not_kept_for_a_while_after() {
        let mut o = owner().with_linger(25);
        let unlock = Io::UnlockGate {
            gate: Addr::Branch("main".into()),
        };
        let hold = |o: &mut GateOwner, from: Tick, to: Tick, who: &str| {
            let mode = GateMode::Exclusive;
            let w = Addr::Writer(op(who));
            let fx = o.on_msg(
                from,
                w.clone(),
                Msg::Acquire {
                    op: op(who),
                    mode,
                    expect: None,
                    under: None,
                },
            );
            if let [Effect::Io(r, Io::LockGate { .. })] = fx[..] {
                let (r, _) = only_io(&o.on_io(from, r, IoOut::Locked(Ok(()))));
                o.on_io(from, r, IoOut::Head(Ok(None)));
            }
            o.on_msg(
                to,
                w,
                Msg::Release {
                    op: op(who),
                    left: None,
                },
            )
        };
        // Held for 8 lingers: the last release gives the lock up at once.
        let (r, io) = only_io(&hold(&mut o, 0, 200, "a"));
        assert_eq!(io, unlock);
        o.on_io(200, r, IoOut::Locked(Ok(())));
        // For 2 lingers after, a last release gives it up at once too.
        let (r, io) = only_io(&hold(&mut o, 210, 220, "b"));
        assert_eq!(io, unlock);
        o.on_io(220, r, IoOut::Locked(Ok(())));
        // Then it lingers again.
        assert!(matches!(
            hold(&mut o, 250, 260, "c")[..],
            [Effect::SetTimer(_, 25)]
        ));
        o.check().unwrap();
    }
}
