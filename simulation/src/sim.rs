//! The deterministic simulator: it owns every protocol machine (the
//! production state machines from `omnigraph-actors`), a FIFO queue per
//! (sender, receiver) pair, the pending storage requests and timers, and the
//! simulated substrate. Each step a seeded RNG picks one thing to happen: a
//! queue head is delivered, a storage request completes (maybe with a fault),
//! a timer fires, a client starts an operation, or the process crashes (all
//! machine memory lost, durable storage kept, then restart and recovery).
//! After every step the invariants are checked.

use std::collections::{BTreeMap, VecDeque};

use omnigraph_actors::owners::{GateOwner, OwnerKind};
use omnigraph_actors::publisher::Publisher;
use omnigraph_actors::recovery::Recovery;
use omnigraph_actors::*;

use crate::rng::{Digest, Rng};
use crate::workload::{self, Planned};
use crate::world::{Fault, World};

/// Explicit limits of one run.
pub const MAX_STEPS: usize = 60_000;
pub const MAX_CRASHES: u32 = 3;

#[derive(Clone, Debug)]
pub struct Config {
    pub seed: u64,
    pub bugs: Bugs,
    pub crashes: bool,
    pub faults: bool,
    pub trace: bool,
}

#[derive(Clone, Debug)]
pub struct Violation {
    pub invariant: &'static str,
    pub detail: String,
    pub step: usize,
}

pub struct RunReport {
    pub seed: u64,
    pub steps: usize,
    pub digest: u64,
    pub violation: Option<Violation>,
    pub trace: Vec<String>,
    pub committed: usize,
    pub crashes: u32,
    pub checks: u64,
}

enum Node {
    Owner(GateOwner),
    Publisher(Publisher),
    Recovery(Box<Recovery>),
    Writer(Box<Writer>),
}

impl Node {
    fn machine(&mut self) -> &mut dyn Machine {
        match self {
            Node::Owner(m) => m,
            Node::Publisher(m) => m,
            Node::Recovery(m) => m.as_mut(),
            Node::Writer(m) => m.as_mut(),
        }
    }
    fn check(&self) -> Result<(), String> {
        match self {
            Node::Owner(m) => m.check(),
            Node::Publisher(m) => m.check(),
            Node::Recovery(m) => m.check(),
            Node::Writer(m) => m.check(),
        }
    }
}

struct PendingIo {
    owner: Addr,
    req: ReqId,
    io: Io,
}

struct Timer {
    owner: Addr,
    id: TimerId,
    due: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum ClientState {
    Running,
    /// The process crashed under it: no answer will come.
    Lost,
    Answered(Outcome),
}

struct Client {
    kind: OpKind,
    state: ClientState,
}

pub struct Sim {
    cfg: Config,
    rng: Rng,
    pub world: World,
    nodes: BTreeMap<Addr, Node>,
    queues: BTreeMap<(Addr, Addr), VecDeque<Msg>>,
    ios: Vec<PendingIo>,
    timers: Vec<Timer>,
    tick: u64,
    planned: VecDeque<Planned>,
    clients: BTreeMap<OpId, Client>,
    /// Commits acknowledged to clients: (branch, its incarnation, commit).
    acked: Vec<(String, u64, CommitId)>,
    /// Gates each operation currently asked for, in order.
    gate_log: BTreeMap<OpId, Vec<Addr>>,
    /// Gates a writer must hold from its first landed table commit until its
    /// publish completes (or it hands the intent to recovery).
    effect_gates: BTreeMap<OpId, Vec<Addr>>,
    crashes: u32,
    steps: usize,
    digest: Digest,
    trace: Vec<String>,
    violation: Option<Violation>,
    checks: u64,
}

fn gate_rank(a: &Addr) -> (u8, String) {
    match a {
        Addr::Schema => (0, String::new()),
        Addr::Branch(b) => (1, b.clone()),
        Addr::Table(t) => (2, format!("{}\u{1}{}", t.branch, t.table)),
        other => (9, format!("{other:?}")),
    }
}

impl Sim {
    pub fn new(cfg: Config) -> Self {
        let mut rng = Rng::new(cfg.seed);
        let planned = workload::generate(&mut rng);
        let mut sim = Self {
            cfg,
            rng,
            world: World::new(),
            nodes: BTreeMap::new(),
            queues: BTreeMap::new(),
            ios: Vec::new(),
            timers: Vec::new(),
            tick: 0,
            planned: planned.into(),
            clients: BTreeMap::new(),
            acked: Vec::new(),
            gate_log: BTreeMap::new(),
            effect_gates: BTreeMap::new(),
            crashes: 0,
            steps: 0,
            digest: Digest::default(),
            trace: Vec::new(),
            violation: None,
            checks: 0,
        };
        sim.boot();
        sim
    }

    fn log(&mut self, line: String) {
        self.digest.add(&line);
        if self.cfg.trace {
            self.trace.push(format!("{:>6} {line}", self.steps));
        }
    }

    fn fail(&mut self, invariant: &'static str, detail: String) {
        if self.violation.is_none() {
            self.log(format!("VIOLATION {invariant}: {detail}"));
            self.violation = Some(Violation {
                invariant,
                detail,
                step: self.steps,
            });
        }
    }

    /// Start the process: the fixed actors, each through `on_start`.
    fn boot(&mut self) {
        for (addr, node) in [
            (Addr::Schema, Node::Owner(GateOwner::new(OwnerKind::Schema))),
            (Addr::Publisher, Node::Publisher(Publisher::new())),
            (Addr::Recovery, Node::Recovery(Box::new(Recovery::new()))),
        ] {
            self.nodes.insert(addr.clone(), node);
            self.start_node(&addr);
        }
    }

    fn start_node(&mut self, addr: &Addr) {
        let now = self.tick;
        let fx = self
            .nodes
            .get_mut(addr)
            .expect("node")
            .machine()
            .on_start(now);
        self.effects(addr.clone(), fx);
    }

    fn node_for(&mut self, addr: &Addr) -> bool {
        if self.nodes.contains_key(addr) {
            return true;
        }
        let node = match addr {
            Addr::Branch(b) => Node::Owner(GateOwner::new(OwnerKind::Branch(b.clone()))),
            Addr::Table(t) => Node::Owner(GateOwner::new(OwnerKind::Table(t.clone()))),
            _ => return false,
        };
        self.nodes.insert(addr.clone(), node);
        true
    }

    fn effects(&mut self, from: Addr, fx: Vec<Effect>) {
        for e in fx {
            match e {
                Effect::Send(to, msg) => self.observe_send(&from, &to, &msg, true),
                Effect::Io(req, io) => self.ios.push(PendingIo {
                    owner: from.clone(),
                    req,
                    io,
                }),
                Effect::SetTimer(id, ticks) => self.timers.push(Timer {
                    owner: from.clone(),
                    id,
                    due: self.tick + ticks,
                }),
                Effect::Stop => {
                    self.nodes.remove(&from);
                }
            }
        }
    }

    /// Record protocol facts visible in a message, then queue it.
    fn observe_send(&mut self, from: &Addr, to: &Addr, msg: &Msg, enqueue: bool) {
        match msg {
            Msg::Acquire { op, .. } => {
                let log = self.gate_log.entry(op.clone()).or_default();
                if let Some(last) = log.last()
                    && gate_rank(to) <= gate_rank(last)
                {
                    let detail = format!("{op:?} asked for {to:?} after {last:?}");
                    self.fail(
                        "gates are acquired schema -> branch -> sorted tables",
                        detail,
                    );
                }
                self.gate_log
                    .entry(op.clone())
                    .or_default()
                    .push(to.clone());
            }
            Msg::Release { op } => {
                if let Some(log) = self.gate_log.get_mut(op) {
                    log.retain(|g| g != to);
                }
            }
            Msg::IntentStuck { op } => {
                self.effect_gates.remove(op);
            }
            Msg::Finished { op, outcome } => {
                if let Some(c) = self.clients.get_mut(op) {
                    if let (
                        OpKind::Write { branch },
                        Outcome::Committed {
                            commit: Some(commit),
                            ..
                        },
                    ) = (&c.kind, outcome)
                    {
                        let inc = self
                            .world
                            .latest()
                            .branches
                            .get(branch)
                            .map(|r| r.incarnation)
                            .unwrap_or(0);
                        self.acked.push((branch.clone(), inc, commit.clone()));
                    }
                    c.state = ClientState::Answered(outcome.clone());
                }
                return;
            }
            _ => {}
        }
        if enqueue {
            self.queues
                .entry((from.clone(), to.clone()))
                .or_default()
                .push_back(msg.clone());
        }
    }

    fn deliver(&mut self, from: Addr, to: Addr, msg: Msg) {
        self.log(format!("deliver {from:?} -> {to:?}: {msg:?}"));
        if let Addr::Writer(op) = &to {
            match &msg {
                Msg::TableCommitted {
                    result: CommitResult::Committed { .. },
                    ..
                } if !self.effect_gates.contains_key(op) => {
                    let gates = self.gate_log.get(op).cloned().unwrap_or_default();
                    self.effect_gates.insert(op.clone(), gates);
                }
                Msg::PublishReply { .. } => {
                    self.effect_gates.remove(op);
                }
                _ => {}
            }
        }
        if !self.node_for(&to) {
            return; // a finished writer: nothing listens
        }
        let now = self.tick;
        let fx = self
            .nodes
            .get_mut(&to)
            .expect("node")
            .machine()
            .on_msg(now, from, msg);
        self.effects(to, fx);
    }

    fn pick_fault(&mut self, io: &Io) -> Fault {
        if !self.cfg.faults || !self.rng.chance(1, 25) {
            return Fault::None;
        }
        match io {
            Io::CommitTable { .. } => match self.rng.below(3) {
                0 => Fault::Conflict,
                1 => Fault::FailClean,
                _ => Fault::FailAfterEffect,
            },
            Io::Publish { .. }
            | Io::WriteSidecar { .. }
            | Io::DeleteSidecar { .. }
            | Io::RestoreTable { .. } => {
                if self.rng.chance(1, 2) {
                    Fault::FailClean
                } else {
                    Fault::FailAfterEffect
                }
            }
            Io::Discard { .. } => Fault::None,
            _ => Fault::FailClean,
        }
    }

    fn complete_io(&mut self, i: usize) {
        let p = self.ios.remove(i);
        let fault = self.pick_fault(&p.io);
        let out = self.world.exec(&p.io, fault);
        self.log(format!(
            "io {:?} #{} {:?} [{fault:?}] -> {out:?}",
            p.owner, p.req, p.io
        ));
        if let Some(node) = self.nodes.get_mut(&p.owner) {
            let now = self.tick;
            let fx = node.machine().on_io(now, p.req, out);
            self.effects(p.owner, fx);
        }
    }

    /// The process dies: machines, queues, timers and staged work are gone;
    /// each in-flight storage request either took effect or did not.
    fn crash(&mut self) {
        self.crashes += 1;
        self.log(format!("CRASH #{}", self.crashes));
        let ios = std::mem::take(&mut self.ios);
        for p in ios {
            if self.rng.chance(1, 2) {
                let _ = self.world.exec(&p.io, Fault::None);
                self.log(format!("  landed before the crash: {:?}", p.io));
            }
        }
        self.world.crash();
        self.nodes.clear();
        self.queues.clear();
        self.timers.clear();
        self.gate_log.clear();
        self.effect_gates.clear();
        for c in self.clients.values_mut() {
            if c.state == ClientState::Running {
                c.state = ClientState::Lost;
            }
        }
        self.boot();
    }

    fn start_op(&mut self) {
        let p = self.planned.pop_front().expect("planned op");
        let op = p.op.clone();
        self.log(format!("start {op:?} {:?} {:?}", p.kind, p.stmts));
        if !p.stmts.is_empty() {
            self.world.work.insert(op.clone(), p.stmts);
        }
        self.clients.insert(
            op.clone(),
            Client {
                kind: p.kind.clone(),
                state: ClientState::Running,
            },
        );
        let addr = Addr::Writer(op.clone());
        self.nodes.insert(
            addr.clone(),
            Node::Writer(Box::new(Writer::new(op, p.kind, self.cfg.bugs))),
        );
        self.start_node(&addr);
    }

    fn quiescent(&self) -> bool {
        self.queues.values().all(|q| q.is_empty()) && self.ios.is_empty()
    }

    /// One scheduler step. Returns false when nothing can happen any more.
    fn step(&mut self) -> bool {
        self.queues.retain(|_, q| !q.is_empty());
        let queue_keys: Vec<(Addr, Addr)> = self.queues.keys().cloned().collect();
        let due: Vec<usize> = (0..self.timers.len())
            .filter(|&i| self.timers[i].due <= self.tick)
            .collect();
        let mut n = queue_keys.len() + self.ios.len() + due.len();
        let can_start = !self.planned.is_empty();
        if can_start {
            n += 1;
        }
        if n == 0 {
            // Only future timers: let time pass.
            if let Some(next) = self.timers.iter().map(|t| t.due).min() {
                self.tick = next;
                return true;
            }
            return false;
        }
        self.tick += 1;
        if self.rng.chance(1, 8) {
            // A reader takes a snapshot of some graph version right now.
            let v = 1 + self.rng.below(self.world.manifests.len()) as u64;
            self.log(format!("reader snapshot at graph version {v}"));
            if let Some((inv, detail)) = self.world.visible_violation(v) {
                self.fail(inv, format!("reader: {detail}"));
            }
        }
        if self.cfg.crashes && self.crashes < MAX_CRASHES && self.rng.chance(1, 300) {
            self.crash();
            return true;
        }
        let mut choice = self.rng.below(n);
        if choice < queue_keys.len() {
            let key = queue_keys[choice].clone();
            let msg = self
                .queues
                .get_mut(&key)
                .and_then(|q| q.pop_front())
                .expect("non-empty");
            self.deliver(key.0, key.1, msg);
            return true;
        }
        choice -= queue_keys.len();
        if choice < self.ios.len() {
            self.complete_io(choice);
            return true;
        }
        choice -= self.ios.len();
        if choice < due.len() {
            let t = self.timers.remove(due[choice]);
            self.log(format!("timer {:?} #{}", t.owner, t.id));
            if let Some(node) = self.nodes.get_mut(&t.owner) {
                let now = self.tick;
                let fx = node.machine().on_timer(now, t.id);
                self.effects(t.owner, fx);
            }
            return true;
        }
        self.start_op();
        true
    }

    /// Invariants that hold after every step.
    fn check(&mut self) {
        self.checks += 1;
        let problems: Vec<(Addr, String)> = self
            .nodes
            .iter()
            .filter_map(|(a, n)| n.check().err().map(|e| (a.clone(), e)))
            .collect();
        if let Some((a, e)) = problems.into_iter().next() {
            self.fail(
                "actor-local invariant (one holder per gate, only holders commit)",
                format!("{a:?}: {e}"),
            );
        }
        if let Some((inv, detail)) = self.world.effect_violation() {
            self.fail(inv, detail);
        }
        // Gates are held from the first landed table commit to the publish.
        let mut problem = None;
        for (op, gates) in &self.effect_gates {
            for g in gates {
                let held = match self.nodes.get(g) {
                    Some(Node::Owner(o)) => o.gate().holds(op),
                    _ => false,
                };
                if !held {
                    problem = Some(format!(
                        "{op:?} has landed table commits but no longer holds {g:?}"
                    ));
                }
            }
        }
        if let Some(p) = problem {
            self.fail("gates are held until the publish", p);
        }
        let latest = self.world.manifests.len() as u64;
        if let Some((inv, detail)) = self
            .world
            .visible_violation(latest)
            .or_else(|| self.world.durability_violation(&self.acked))
        {
            self.fail(inv, detail);
        }
    }

    fn unanswered(&self) -> Vec<OpId> {
        self.clients
            .iter()
            .filter(|(_, c)| c.state == ClientState::Running)
            .map(|(op, _)| op.clone())
            .collect()
    }

    /// Run until everything settles, then crash once more, recover, settle,
    /// and check that a second recovery changes nothing (idempotence).
    pub fn run(mut self) -> RunReport {
        let mut phase_done = false;
        while self.violation.is_none() {
            if self.steps >= MAX_STEPS {
                let pending = self.unanswered();
                self.fail(
                    "every run terminates (no livelock)",
                    format!("{MAX_STEPS} steps; still running: {pending:?}"),
                );
                break;
            }
            let progressed = self.step();
            self.steps += 1;
            self.check();
            if !progressed {
                let pending = self.unanswered();
                if !pending.is_empty() {
                    self.fail(
                        "every run terminates (no deadlock)",
                        format!("nothing can happen, but {pending:?} wait"),
                    );
                    break;
                }
                if phase_done {
                    break;
                }
                // Final crash and recovery.
                phase_done = true;
                self.crash();
            }
        }
        if self.violation.is_none()
            && let Some((inv, detail)) = self.world.settled_violation()
        {
            self.fail(inv, detail);
        }
        if self.violation.is_none() {
            // Recovery is idempotent: another crash and recovery change nothing.
            let before = (self.world.manifests.len(), self.world.tables.clone());
            self.crash();
            while self.step() {
                self.steps += 1;
                self.check();
                if self.steps >= MAX_STEPS * 2 {
                    break;
                }
            }
            if self.quiescent() && (self.world.manifests.len(), self.world.tables.clone()) != before
            {
                self.fail(
                    "recovery is idempotent",
                    "a second recovery changed storage".into(),
                );
            }
        }
        let committed = self
            .clients
            .values()
            .filter(|c| matches!(c.state, ClientState::Answered(Outcome::Committed { .. })))
            .count();
        RunReport {
            seed: self.cfg.seed,
            steps: self.steps,
            digest: self.digest.value(),
            violation: self.violation,
            trace: self.trace,
            committed,
            crashes: self.crashes,
            checks: self.checks,
        }
    }
}
