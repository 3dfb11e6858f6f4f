//! The deterministic simulator: several processes, each with its own
//! protocol machines (the production state machines from `omnigraph-actors`),
//! sharing only the simulated storage — as processes on one graph do. It owns
//! a FIFO queue per (process, sender, receiver), the pending storage requests
//! and timers, and the world. Each step a seeded RNG picks one thing to
//! happen: a queue head is delivered, a storage request completes (maybe with
//! a fault; a gate lock held by another process waits), a timer fires, a
//! client starts an operation in some process, or one process crashes (its
//! machine memory and locks lost, durable storage kept, then it restarts with
//! a new incarnation and recovers), or one process pauses for a virtual
//! duration (nothing of it runs, its lease is not renewed, and others may
//! take it over; then it resumes where it was, mid-request). Time is the
//! step count; each process reads it through a wall clock of its own
//! skew, and renews its lease every few ticks while it runs. A table
//! commit, a restore and a publish take two steps: the lease check, then
//! the effect, with anything (a pause included) between. After every step
//! the invariants are checked; at the end every process settles and the
//! graph must still take a write.

use std::collections::{BTreeMap, VecDeque};

use omnigraph_actors::cleaner::{CleanIo, CleanOut, CleanStep, Cleaner, Policy};
use omnigraph_actors::collector::{Collector, GcIo, GcOut, GcStep};
use omnigraph_actors::owners::{GateOwner, OwnerKind};
use omnigraph_actors::publisher::Publisher;
use omnigraph_actors::recovery::Recovery;
use omnigraph_actors::*;

use crate::lease;
use crate::rng::{Digest, Rng};
use crate::workload::{self, Planned};
use crate::world::{Fault, MAIN, PUBLISH_RACE, Proc, Stmt, World};

/// Explicit limits of one run.
pub const MAX_STEPS: usize = 60_000;
pub const MAX_CRASHES: u32 = 3;
/// At most this many processes share the graph in one run.
pub const MAX_PROCS: usize = 3;
/// At most this many index-file collections start in one run.
pub const MAX_COLLECTIONS: usize = 4;
/// A collection's request completes in a step with odds 1 in this.
pub const GC_SLOWNESS: u64 = 8;
/// At most this many version cleanups start in one run.
pub const MAX_CLEANUPS: usize = 6;
/// At most this many pauses of a process in one run.
pub const MAX_PAUSES: u32 = 3;
/// A pause lasts between these many ticks (half a lease to three).
pub const PAUSE_TICKS: (u64, u64) = (lease::LEASE / 2, 3 * lease::LEASE);
/// How many times a publish reads and swaps before it reports the race.
pub const MAX_PUBLISH_ATTEMPTS: u32 = 16;
/// Writes started in one run to contend with a paused process once its
/// lease has lapsed (when nothing else would run meanwhile).
pub const MAX_CONTENDERS: usize = 4;

/// Mixed into the seed for the choice of the lock linger.
const LINGER_STREAM: u64 = 0x11a6_e5c0_ffee_0001;
/// Mixed into the seed for the workload's later choices.
pub const WORKLOAD_STREAM: u64 = 0x11a6_e5c0_ffee_0003;
/// Mixed into the seed for the choice of a long linger.
const LONG_LINGER_STREAM: u64 = 0x11a6_e5c0_ffee_0002;
/// A linger long enough that a lock kept since the early operations is
/// still kept when the merges and the writes after them run: what a gate
/// owner knows under it must survive, or be dropped, across them.
pub const LONG_LINGER: u64 = 2_000;

#[derive(Clone, Debug)]
pub struct Config {
    pub seed: u64,
    pub bugs: Bugs,
    pub crashes: bool,
    pub faults: bool,
    pub trace: bool,
    /// How many processes share the graph (`None`: the seed picks 1 to
    /// [`MAX_PROCS`]).
    pub procs: Option<usize>,
    /// Pause processes past their leases.
    pub pauses: bool,
    /// Skew the wall clocks beyond what the leases tolerate (to show that
    /// the bound is what keeps them safe).
    pub skew_beyond_margin: bool,
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
    /// Merge commits published (recovered ones included).
    pub merges: usize,
    /// Published merge commits that took tables as their source had them.
    pub adopting_merges: usize,
    /// Graph versions that accepted a new schema.
    pub schema_applies: usize,
    pub crashes: u32,
    pub pauses: u32,
    /// Leases taken over from processes that still ran.
    pub takeovers: usize,
    pub fences: usize,
    /// Index-file collections started.
    pub collections: usize,
    pub cleanups: usize,
    /// Published group commits, and the members they left out.
    pub group_commits: usize,
    pub group_refusals: usize,
    pub checks: u64,
    pub procs: usize,
}

/// A process slot: its index among the run's processes.
type Slot = usize;

enum Node {
    Owner(Box<GateOwner>),
    Publisher(Publisher),
    Recovery(Box<Recovery>),
    Writer(Box<Writer>),
}

impl Node {
    fn machine(&mut self) -> &mut dyn Machine {
        match self {
            Node::Owner(m) => m.as_mut(),
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

/// A slow upkeep job running in a process (an index-file collection or a
/// version cleanup), with its next request.
struct GcJob {
    slot: Slot,
    kind: JobKind,
}

enum JobKind {
    Collect(Box<Collector>, GcIo),
    Clean(Box<Cleaner>, CleanIo),
}

struct PendingIo {
    slot: Slot,
    owner: Addr,
    req: ReqId,
    io: Io,
    /// Past its lease check (a commit, restore or publish), with the
    /// manifest version a publish read then.
    checked: Option<u64>,
    /// Publishes: compare-and-swaps lost so far.
    races: u32,
}

struct Timer {
    slot: Slot,
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
    slot: Slot,
    kind: OpKind,
    state: ClientState,
}

pub struct Sim {
    cfg: Config,
    rng: Rng,
    /// How long gate owners keep their cross-process lock after the last
    /// local lease (0 on most seeds' halves: both are the product's). With
    /// a long one, each phase starts once the one before is answered, not
    /// once its lingers are over.
    linger: u64,
    pub world: World,
    /// The current incarnation of each process slot.
    procs: Vec<Proc>,
    next_incarnation: Proc,
    nodes: BTreeMap<(Slot, Addr), Node>,
    queues: BTreeMap<(Slot, Addr, Addr), VecDeque<Msg>>,
    ios: Vec<PendingIo>,
    timers: Vec<Timer>,
    tick: u64,
    planned: VecDeque<Planned>,
    /// The workload's later phases, each started once the one before is
    /// over.
    phases: VecDeque<Vec<Planned>>,
    /// The table commit answers each writer got in its current attempt, and
    /// whether it has asked for its publish since.
    commit_answers: BTreeMap<(Slot, OpId), (Vec<CommitResult>, bool)>,
    /// What each lease of a table gate said its snapshot implies.
    expects: BTreeMap<(Slot, OpId, Addr), GateView>,
    clients: BTreeMap<OpId, Client>,
    gcs: Vec<GcJob>,
    gcs_started: usize,
    cleanups_started: usize,
    /// Commits acknowledged to clients: (branch, its incarnation, commit).
    acked: Vec<(String, u64, CommitId)>,
    /// Gates each operation currently asked for, in order.
    gate_log: BTreeMap<(Slot, OpId), Vec<Addr>>,
    /// Gates a writer must hold from its first landed table commit until its
    /// publish completes (or it hands the intent to recovery).
    effect_gates: BTreeMap<(Slot, OpId), Vec<Addr>>,
    crashes: u32,
    /// Each paused slot's resume time and when it paused.
    paused: BTreeMap<Slot, (u64, u64)>,
    pauses: u32,
    contenders: usize,
    /// Each slot's next lease renewal.
    next_renewal: Vec<u64>,
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
        let workload = workload::generate(&mut rng, &mut Rng::new(cfg.seed ^ WORKLOAD_STREAM));
        let mut phases: VecDeque<Vec<Planned>> = workload.phases.into();
        let n = cfg.procs.unwrap_or_else(|| 1 + rng.below(MAX_PROCS));
        let mut world = World::new();
        world.bugs = cfg.bugs;
        // From a stream of its own, so that every other choice of the seed
        // stays what it was.
        let linger = match Rng::new(cfg.seed ^ LINGER_STREAM).below(4) {
            _ if Rng::new(cfg.seed ^ LONG_LINGER_STREAM).chance(1, 4) => LONG_LINGER,
            0 | 1 => 0,
            k => 8 * k as u64,
        };
        let mut sim = Self {
            cfg,
            rng,
            linger,
            world,
            procs: Vec::new(),
            next_incarnation: 1,
            nodes: BTreeMap::new(),
            queues: BTreeMap::new(),
            ios: Vec::new(),
            timers: Vec::new(),
            tick: 0,
            planned: phases.pop_front().unwrap_or_default().into(),
            phases,
            expects: BTreeMap::new(),
            commit_answers: BTreeMap::new(),
            clients: BTreeMap::new(),
            gcs: Vec::new(),
            gcs_started: 0,
            cleanups_started: 0,
            acked: Vec::new(),
            gate_log: BTreeMap::new(),
            effect_gates: BTreeMap::new(),
            crashes: 0,
            paused: BTreeMap::new(),
            pauses: 0,
            contenders: 0,
            next_renewal: Vec::new(),
            steps: 0,
            digest: Digest::default(),
            trace: Vec::new(),
            violation: None,
            checks: 0,
        };
        sim.log(format!("{n} processes, gate locks kept {linger} ticks"));
        for slot in 0..n {
            sim.procs.push(0);
            sim.next_renewal.push(0);
            sim.boot(slot);
        }
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

    /// Start process `slot` with a new incarnation: the fixed actors, each
    /// through `on_start`.
    fn boot(&mut self, slot: Slot) {
        let inc = self.next_incarnation;
        self.next_incarnation += 1;
        self.procs[slot] = inc;
        let bound = if self.cfg.skew_beyond_margin {
            lease::BEYOND_MARGIN_SKEW
        } else {
            lease::MAX_SKEW
        };
        let skew = self.rng.below(2 * bound as usize + 1) as i64 - bound;
        self.world.now = self.tick;
        self.world.start_process(inc, skew);
        self.next_renewal[slot] = self.tick + lease::RENEW_EVERY;
        self.log(format!(
            "boot process {slot} as incarnation {inc} (clock skew {skew})"
        ));
        let bugs = self.cfg.bugs;
        for (addr, node) in [
            (
                Addr::Schema,
                Node::Owner(Box::new(
                    GateOwner::new(OwnerKind::Schema, bugs).with_linger(self.linger),
                )),
            ),
            (Addr::Publisher, Node::Publisher(Publisher::new())),
            (
                Addr::Recovery,
                Node::Recovery(Box::new(Recovery::new(bugs))),
            ),
        ] {
            self.nodes.insert((slot, addr.clone()), node);
            self.start_node(slot, &addr);
        }
    }

    fn start_node(&mut self, slot: Slot, addr: &Addr) {
        let now = self.tick;
        let fx = self
            .nodes
            .get_mut(&(slot, addr.clone()))
            .expect("node")
            .machine()
            .on_start(now);
        self.effects(slot, addr.clone(), fx);
    }

    fn node_for(&mut self, slot: Slot, addr: &Addr) -> bool {
        let key = (slot, addr.clone());
        if self.nodes.contains_key(&key) {
            return true;
        }
        let bugs = self.cfg.bugs;
        let node = match addr {
            Addr::Branch(b) => Node::Owner(Box::new(
                GateOwner::new(OwnerKind::Branch(b.clone()), bugs).with_linger(self.linger),
            )),
            Addr::Table(t) => Node::Owner(Box::new(
                GateOwner::new(OwnerKind::Table(t.clone()), bugs).with_linger(self.linger),
            )),
            _ => return false,
        };
        self.nodes.insert(key, node);
        true
    }

    fn effects(&mut self, slot: Slot, from: Addr, fx: Vec<Effect>) {
        for e in fx {
            match e {
                Effect::Send(to, msg) => self.observe_send(slot, &from, &to, &msg),
                Effect::Io(req, io) => {
                    self.observe_io(slot, &from, &io);
                    self.ios.push(PendingIo {
                        slot,
                        owner: from.clone(),
                        req,
                        io,
                        checked: None,
                        races: 0,
                    })
                }
                Effect::SetTimer(id, ticks) => self.timers.push(Timer {
                    slot,
                    owner: from.clone(),
                    id,
                    due: self.tick + ticks,
                }),
                Effect::Stop => {
                    self.nodes.remove(&(slot, from.clone()));
                }
            }
        }
    }

    /// Check what a storage request says about the protocol, when issued.
    fn observe_io(&mut self, slot: Slot, from: &Addr, io: &Io) {
        if let (Addr::Recovery, Io::Inspect { intent }) = (from, io) {
            let me = self.procs[slot];
            if let Some(&owner) = self.world.sidecar_owner.get(&intent.op)
                && owner != me
                && self.world.alive.contains(&owner)
                && !self.world.taken_over.contains(&owner)
            {
                let detail = format!(
                    "process {slot} (incarnation {me}) resolves {:?}, whose writer's process (incarnation {owner}) lives",
                    intent.op
                );
                self.fail("no intent is resolved while its writer lives", detail);
            }
        }
    }

    /// Record protocol facts visible in a message, then queue it.
    fn observe_send(&mut self, slot: Slot, from: &Addr, to: &Addr, msg: &Msg) {
        match msg {
            Msg::Acquire { op, expect, .. } => {
                if let Some(e) = expect {
                    self.expects
                        .insert((slot, op.clone(), to.clone()), e.clone());
                }
                let log = self.gate_log.entry((slot, op.clone())).or_default();
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
                    .entry((slot, op.clone()))
                    .or_default()
                    .push(to.clone());
            }
            Msg::Release { op, .. } => {
                if let Some(log) = self.gate_log.get_mut(&(slot, op.clone())) {
                    log.retain(|g| g != to);
                }
            }
            Msg::IntentStuck { op } => {
                self.effect_gates.remove(&(slot, op.clone()));
                if let Some((answers, false)) = self.commit_answers.get(&(slot, op.clone()))
                    && !answers.is_empty()
                    && (answers
                        .iter()
                        .all(|r| matches!(r, CommitResult::Conflict(_)))
                        || answers
                            .iter()
                            .all(|r| matches!(r, CommitResult::Committed { .. })))
                {
                    // Every table refused before changing anything (the
                    // write is dropped, and retried), or every one landed
                    // and nothing was published yet (the write publishes):
                    // neither is left to recovery.
                    let detail = format!(
                        "p{slot} {op:?} handed its intent to recovery, unpublished, after its table commits answered {answers:?}"
                    );
                    self.fail(
                        "a write goes to recovery only after an effect it cannot account for",
                        detail,
                    );
                }
            }
            Msg::Publish { req } if matches!(from, Addr::Writer(_)) => {
                if let Some(a) = self.commit_answers.get_mut(&(slot, req.op.clone())) {
                    a.1 = true;
                }
            }
            Msg::RecordIntent { intent } => {
                // An attempt's table commits start after its sidecar.
                self.commit_answers.remove(&(slot, intent.op.clone()));
            }
            // A writer asks for its next gate, and gets a view, on these:
            // both say the process holds the gate's cross-process lock.
            Msg::Locked { op, .. }
            | Msg::Granted {
                op,
                view: GateView::Schema(_) | GateView::Branch(_) | GateView::Table(_),
            } => {
                let inc = self.procs[slot];
                let locked = self
                    .world
                    .locks
                    .get(from)
                    .is_some_and(|h| h.contains_key(&inc));
                if !locked && !self.world.taken_over.contains(&inc) {
                    let detail = format!(
                        "p{slot} {from:?} told {op:?} it holds the gate ({msg:?}); the process holds no lock on it"
                    );
                    self.fail(
                        "a lease hears its gate is held only while its process holds the lock",
                        detail,
                    );
                }
                let expected = self.expects.get(&(slot, op.clone(), from.clone()));
                if let Msg::Granted { view, .. } = msg
                    && locked
                    && self.world.taken_over.is_empty()
                    && let Some(truth) = self.world.view_of(from)
                    && *view != truth
                    && !old_snapshot(expected, &truth)
                {
                    // Under the lock only this process changes the state, so
                    // the view a lease gets, read or known, is the state.
                    // (Once a process was taken over, its late table commit
                    // may land under another's lock. A table's view known
                    // for a lease whose snapshot names another line or
                    // version than the manifest now does is not the state:
                    // that lease's recheck of the head refuses it.)
                    let detail =
                        format!("p{slot} {from:?} gave {op:?} {view:?}; storage holds {truth:?}");
                    self.fail("a granted view is the state under the lock", detail);
                }
            }
            Msg::Finished { op, outcome } => {
                let mut group = None;
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
                        // A group's caller splits the answer: the members
                        // its prepare kept are told they committed.
                        if let Some(g) = self.world.groups.get(commit) {
                            let acked: Vec<usize> =
                                match self.world.bugs.group_acks_a_refused_member() {
                                    true => (0..g.members.len()).collect(),
                                    false => g.kept.clone(),
                                };
                            group = self.world.group_violation(commit, &acked);
                        }
                    }
                    c.state = ClientState::Answered(outcome.clone());
                }
                if let Some((inv, detail)) = group {
                    self.fail(inv, detail);
                }
                return;
            }
            _ => {}
        }
        self.queues
            .entry((slot, from.clone(), to.clone()))
            .or_default()
            .push_back(msg.clone());
    }

    fn deliver(&mut self, slot: Slot, from: Addr, to: Addr, msg: Msg) {
        self.log(format!("p{slot} deliver {from:?} -> {to:?}: {msg:?}"));
        if let Addr::Writer(op) = &to {
            let key = (slot, op.clone());
            match &msg {
                Msg::TableCommitted {
                    result: CommitResult::Committed { .. },
                    ..
                } if !self.effect_gates.contains_key(&key) => {
                    let gates = self.gate_log.get(&key).cloned().unwrap_or_default();
                    self.effect_gates.insert(key.clone(), gates);
                }
                Msg::PublishReply { .. } => {
                    self.effect_gates.remove(&key);
                }
                _ => {}
            }
            if let Msg::TableCommitted { result, .. } = &msg {
                self.commit_answers
                    .entry(key)
                    .or_default()
                    .0
                    .push(result.clone());
            }
        }
        if !self.node_for(slot, &to) {
            return; // a finished writer: nothing listens
        }
        let now = self.tick;
        let fx = self
            .nodes
            .get_mut(&(slot, to.clone()))
            .expect("node")
            .machine()
            .on_msg(now, from, msg);
        self.effects(slot, to, fx);
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
            // Lock waits are modelled by blocking; unlocks always succeed
            // (a lock dies with its process anyway).
            Io::Discard { .. } | Io::LockGate { .. } | Io::UnlockGate { .. } => Fault::None,
            _ => Fault::FailClean,
        }
    }

    /// Storage requests that can complete now (a gate lock held by another
    /// process waits).
    fn ready_ios(&self) -> Vec<usize> {
        (0..self.ios.len())
            .filter(|&i| {
                let p = &self.ios[i];
                !self.paused.contains_key(&p.slot) && self.world.ready(self.procs[p.slot], &p.io)
            })
            .collect()
    }

    fn complete_io(&mut self, i: usize) {
        let mut p = self.ios.remove(i);
        let inc = self.procs[p.slot];
        let lease_checked = matches!(
            p.io,
            Io::CommitTable { .. } | Io::RestoreTable { .. } | Io::Publish { .. }
        );
        if lease_checked && p.checked.is_none() {
            // The first step: the lease check (and a publish's read).
            match self.world.check_lease(inc, &p.io) {
                Some(refused) => {
                    self.log(format!(
                        "p{} io {:?} #{} {:?} [lease check] -> {refused:?}",
                        p.slot, p.owner, p.req, p.io
                    ));
                    return self.answer(p, refused);
                }
                None => {
                    self.log(format!("p{} io #{} passed its lease check", p.slot, p.req));
                    p.checked = Some(self.world.latest().version);
                    let slot = p.slot;
                    self.ios.push(p);
                    // Paused right there, at the worst moment, now and then;
                    // or a paused process wakes right as this one is about
                    // to act (its late request then races this one's).
                    if self.pausing(4) {
                        self.pause(slot);
                    } else if let Some(&other) = self.paused.keys().next()
                        && self.rng.chance(1, 2)
                    {
                        let (_, from) = self.paused[&other];
                        self.paused.insert(other, (self.tick, from));
                        self.resume_due();
                    }
                    return;
                }
            }
        }
        let fault = self.pick_fault(&p.io);
        let out = match &p.io {
            Io::Publish { req } => IoOut::Published(self.world.publish(inc, req, fault, p.checked)),
            io => self.world.exec(inc, io, fault),
        };
        self.log(format!(
            "p{} io {:?} #{} {:?} [{fault:?}] -> {out:?}",
            p.slot, p.owner, p.req, p.io
        ));
        if matches!(&out, IoOut::Locked(Ok(())))
            && matches!(p.io, Io::LockGate { .. })
            && self.pausing(8)
        {
            // Paused while holding a gate it just took.
            self.pause(p.slot);
        }
        if matches!(&out, IoOut::Published(PublishResult::Unknown(e)) if e == PUBLISH_RACE)
            && p.races + 1 < MAX_PUBLISH_ATTEMPTS
        {
            // Read again, lease check first.
            p.races += 1;
            p.checked = None;
            self.ios.push(p);
            return;
        }
        self.answer(p, out);
    }

    fn answer(&mut self, p: PendingIo, out: IoOut) {
        if let Some(node) = self.nodes.get_mut(&(p.slot, p.owner.clone())) {
            let now = self.tick;
            let fx = node.machine().on_io(now, p.req, out);
            self.effects(p.slot, p.owner, fx);
        }
    }

    /// Whether to pause a process now, with odds 1 in `odds`.
    fn pausing(&mut self, odds: u64) -> bool {
        self.cfg.pauses
            && self.procs.len() > 1
            && self.pauses < MAX_PAUSES
            && self.rng.chance(1, odds)
    }

    /// Process `slot` stops for a while: nothing of it runs and its lease
    /// is not renewed; it resumes exactly where it was.
    fn pause(&mut self, slot: Slot) {
        if self.paused.contains_key(&slot) {
            return;
        }
        self.pauses += 1;
        let ticks = PAUSE_TICKS.0 + self.rng.below((PAUSE_TICKS.1 - PAUSE_TICKS.0) as usize) as u64;
        self.paused.insert(slot, (self.tick + ticks, self.tick));
        self.log(format!(
            "PAUSE #{} of process {slot} for {ticks} ticks",
            self.pauses
        ));
    }

    /// Resume the slots whose pause is over; their renewal comes at some
    /// point of its period, not necessarily before their next request.
    fn resume_due(&mut self) {
        let due: Vec<(Slot, u64, u64)> = self
            .paused
            .iter()
            .filter(|(_, (at, _))| *at <= self.tick)
            .map(|(s, (at, from))| (*s, *at, *from))
            .collect();
        for (slot, at, from) in due {
            self.paused.remove(&slot);
            self.world.resumed(self.procs[slot], at - from);
            // Its renewal races whatever it had under way.
            self.next_renewal[slot] =
                self.tick + self.rng.below(2 * lease::RENEW_EVERY as usize) as u64;
            self.log(format!("RESUME process {slot}"));
        }
    }

    /// Nothing can run but a process is paused: let time pass until its
    /// lease has lapsed for another process, then start a write there on
    /// the table the paused one was committing to (or any), as the next
    /// writer on a graph would. `false`: no contender now.
    fn contend(&mut self) -> bool {
        if self.contenders >= MAX_CONTENDERS {
            return false;
        }
        let Some((&slot, &(resume, _))) = self.paused.iter().next() else {
            return false;
        };
        let others: Vec<(u64, Slot)> = (0..self.procs.len())
            .filter(|s| {
                !self.paused.contains_key(s) && !self.world.taken_over.contains(&self.procs[*s])
            })
            .map(|s| (self.world.lapses_for_at(self.procs[slot], self.procs[s]), s))
            .collect();
        // The process whose clock sees the lease lapse first.
        let Some(&(lapsed, at)) = others.iter().min() else {
            return false;
        };
        if lapsed >= resume {
            return false;
        }
        let table = self
            .ios
            .iter()
            .find_map(|p| match (&p.io, p.slot == slot) {
                (Io::CommitTable { table, .. } | Io::RestoreTable { table, .. }, true) => {
                    Some(table.table.clone())
                }
                _ => None,
            })
            .unwrap_or_else(|| {
                crate::world::TABLES[self.rng.below(crate::world::TABLES.len())].to_string()
            });
        self.tick = lapsed.max(self.tick + 1);
        self.contenders += 1;
        let op = OpId(format!("contend{}", self.contenders));
        let stmts = vec![Stmt::Upsert {
            table,
            id: format!("k{}", self.contenders),
            val: 7,
        }];
        let kind = OpKind::Write {
            branch: MAIN.to_string(),
        };
        self.start_planned(at, Planned { op, kind, stmts });
        true
    }

    /// Every running process whose renewal is due renews its lease.
    fn renew_due(&mut self) {
        for slot in 0..self.procs.len() {
            if self.next_renewal[slot] <= self.tick && !self.paused.contains_key(&slot) {
                self.world.renew(self.procs[slot]);
                self.next_renewal[slot] = self.tick + lease::RENEW_EVERY;
            }
        }
    }

    /// Process `slot` dies: its machines, queues, timers, staged work and
    /// locks are gone; each of its in-flight storage requests either took
    /// effect or did not. It restarts at once with a new incarnation.
    fn crash(&mut self, slot: Slot) {
        self.crashes += 1;
        self.log(format!("CRASH #{} of process {slot}", self.crashes));
        let inc = self.procs[slot];
        let ios = std::mem::take(&mut self.ios);
        for p in ios {
            if p.slot != slot {
                self.ios.push(p);
                continue;
            }
            if self.world.ready(inc, &p.io) && self.rng.chance(1, 2) {
                if p.checked.is_none() && self.world.check_lease(inc, &p.io).is_some() {
                    continue;
                }
                match &p.io {
                    Io::Publish { req } => {
                        let _ = self.world.publish(inc, req, Fault::None, p.checked);
                    }
                    io => {
                        let _ = self.world.exec(inc, io, Fault::None);
                    }
                }
                self.log(format!("  landed before the crash: {:?}", p.io));
            }
        }
        self.world.crash(inc);
        self.paused.remove(&slot);
        self.nodes.retain(|(s, _), _| *s != slot);
        self.queues.retain(|(s, _, _), _| *s != slot);
        self.timers.retain(|t| t.slot != slot);
        self.gate_log.retain(|(s, _), _| *s != slot);
        self.effect_gates.retain(|(s, _), _| *s != slot);
        for g in std::mem::take(&mut self.gcs) {
            if g.slot != slot {
                self.gcs.push(g);
                continue;
            }
            // A removal in flight may have landed, wholly or in part.
            match &g.kind {
                JobKind::Collect(_, GcIo::Remove(paths)) if self.rng.chance(1, 2) => {
                    self.world.remove_index_files(paths);
                    self.log(format!("  landed before the crash: gc remove {paths:?}"));
                }
                JobKind::Clean(_, CleanIo::RemoveVersions(vs)) if self.rng.chance(1, 2) => {
                    let n = 1 + self.rng.below(vs.len().max(1));
                    self.world.expired.extend(vs.iter().take(n).copied());
                    self.log(format!(
                        "  landed before the crash: {n} graph version removals"
                    ));
                }
                JobKind::Clean(
                    _,
                    CleanIo::Trim {
                        floors,
                        dry_run: false,
                    },
                ) if self.rng.chance(1, 2) => {
                    let n = 1 + self.rng.below(floors.len().max(1));
                    let part: Vec<_> = floors.iter().take(n).cloned().collect();
                    self.world.trim(&part);
                    self.log(format!("  landed before the crash: trim {part:?}"));
                }
                JobKind::Clean(_, CleanIo::RemoveFiles(paths)) if self.rng.chance(1, 2) => {
                    let n = 1 + self.rng.below(paths.len().max(1));
                    for p in paths.iter().take(n) {
                        self.world.data.remove(p);
                    }
                    self.log(format!("  landed before the crash: {n} file removals"));
                }
                _ => {}
            }
        }
        for c in self.clients.values_mut() {
            if c.slot == slot && c.state == ClientState::Running {
                c.state = ClientState::Lost;
            }
        }
        self.boot(slot);
    }

    fn start_op(&mut self) {
        let p = self.planned.pop_front().expect("planned op");
        let slot = self.rng.below(self.procs.len());
        self.start_planned(slot, p);
        if self.gcs_started < MAX_COLLECTIONS && self.rng.chance(1, 3) {
            let slot = self.rng.below(self.procs.len());
            self.start_gc(slot);
        }
        if self.cleanups_started < MAX_CLEANUPS && self.rng.chance(1, 2) {
            let slot = self.rng.below(self.procs.len());
            self.start_cleanup(slot);
        }
    }

    /// A version cleanup starts in process `slot` (as `omnigraph cleanup`
    /// would, beside whatever else runs), with a rule the seed picks.
    fn start_cleanup(&mut self, slot: Slot) {
        self.cleanups_started += 1;
        let policy = Policy {
            older_than_ms: [0, 0, 40, 400][self.rng.below(4)],
            keep_versions: [None, None, Some(1), Some(3)][self.rng.below(4)],
            dry_run: self.rng.chance(1, 8),
            margin_ms: 0,
        };
        self.log(format!("p{slot} start version cleanup {policy:?}"));
        let mut cleaner = Box::new(Cleaner::new(policy, self.cfg.bugs));
        match cleaner.start() {
            CleanStep::Io(io) => self.gcs.push(GcJob {
                slot,
                kind: JobKind::Clean(cleaner, io),
            }),
            CleanStep::Done(d) => self.log(format!("p{slot} cleanup done at once: {d:?}")),
        }
    }

    /// A collection of index files starts in process `slot` (as `omnigraph
    /// gc` or `Omnigraph::gc` would, beside whatever else runs).
    fn start_gc(&mut self, slot: Slot) {
        self.gcs_started += 1;
        self.log(format!("p{slot} start index-file collection"));
        let mut collector = Collector::new(false, self.cfg.bugs);
        match collector.start() {
            GcStep::Io(io) => self.gcs.push(GcJob {
                slot,
                kind: JobKind::Collect(Box::new(collector), io),
            }),
            GcStep::Done(d) => self.log(format!("p{slot} collection done at once: {d:?}")),
        }
    }

    /// May writer `w` (an incarnation) still record a file, as process
    /// `slot` sees it: another process while it lives, this one while a
    /// write of its own is running.
    fn writer_alive(&mut self, slot: Slot, w: &str) -> bool {
        let w: Proc = w.parse().expect("the world names writers by incarnation");
        // Judged first: a lapsed lease is taken over and fenced either way.
        let judged = self.judge_writer(slot, w);
        // An intent of the writer's is unresolved: recovery may roll it
        // forward, and its versions record the writer's files.
        let unresolved = self.world.sidecars.values().any(|(_, p)| *p == w);
        judged || unresolved
    }

    fn judge_writer(&mut self, slot: Slot, w: Proc) -> bool {
        match w == self.procs[slot] {
            true => self
                .clients
                .values()
                .any(|c| c.slot == slot && c.state == ClientState::Running),
            // Judged as gc judges a writer: a lapsed lease is taken over
            // and fenced.
            false => self.world.judge_alive(self.procs[slot], w, true),
        }
    }

    fn complete_gc(&mut self, i: usize) {
        let GcJob { slot, kind } = self.gcs.remove(i);
        match kind {
            JobKind::Collect(collector, io) => self.complete_collect(slot, *collector, io),
            JobKind::Clean(cleaner, io) => self.complete_clean(slot, cleaner, io),
        }
    }

    fn complete_clean(&mut self, slot: Slot, mut cleaner: Box<Cleaner>, io: CleanIo) {
        let faulty = self.cfg.faults && self.rng.chance(1, 25);
        let me = self.procs[slot];
        let out = match &io {
            _ if faulty => CleanOut::Failed("injected failure".into()),
            CleanIo::ListVersions => CleanOut::Versions {
                now_ms: self.tick,
                versions: self.world.version_listing(),
            },
            CleanIo::ListIntents => CleanOut::Intents(self.world.intent_listing()),
            CleanIo::ListLines => CleanOut::Lines(self.world.line_listing()),
            CleanIo::Retire(_) => CleanOut::Done,
            CleanIo::RemoveVersions(vs) => {
                self.world.expired.extend(vs.iter().copied());
                CleanOut::Done
            }
            CleanIo::Trim { floors, dry_run } => {
                let (versions, files) = match dry_run {
                    true => (0, 0),
                    false => self.world.trim(floors),
                };
                CleanOut::Trimmed {
                    versions,
                    files,
                    bytes: files,
                }
            }
            CleanIo::ListUnreferenced => CleanOut::Unreferenced(self.world.unreferenced_listing()),
            CleanIo::LiveWriters { dry_run } => CleanOut::Live {
                now_ms: self.tick,
                started_ms: self.world.live_writers(me, *dry_run),
            },
            CleanIo::RemoveFiles(paths) => {
                for p in paths {
                    self.world.data.remove(p);
                }
                CleanOut::Done
            }
        };
        self.log(format!("p{slot} cleanup {io:?} -> {out:?}"));
        match cleaner.on(out) {
            CleanStep::Io(io) => self.gcs.push(GcJob {
                slot,
                kind: JobKind::Clean(cleaner, io),
            }),
            CleanStep::Done(d) => self.log(format!("p{slot} cleanup done: {d:?}")),
        }
    }

    fn complete_collect(&mut self, slot: Slot, mut collector: Collector, io: GcIo) {
        let faulty = self.cfg.faults && self.rng.chance(1, 25);
        let out = match &io {
            _ if faulty => GcOut::Failed("injected failure".into()),
            GcIo::ListFiles => GcOut::Files(self.world.index_file_listing()),
            GcIo::WritersAlive(ws) => {
                GcOut::Alive(ws.iter().map(|w| self.writer_alive(slot, w)).collect())
            }
            GcIo::ReadRecords => {
                let (files, versions) = self.world.index_file_records();
                GcOut::Records(files, versions)
            }
            GcIo::Remove(paths) => {
                self.world.remove_index_files(paths);
                GcOut::Removed
            }
        };
        self.log(format!("p{slot} gc {io:?} -> {out:?}"));
        match collector.on(out) {
            GcStep::Io(io) => self.gcs.push(GcJob {
                slot,
                kind: JobKind::Collect(Box::new(collector), io),
            }),
            GcStep::Done(d) => self.log(format!("p{slot} collection done: {d:?}")),
        }
    }

    fn start_planned(&mut self, slot: Slot, p: Planned) {
        let op = p.op.clone();
        self.log(format!("p{slot} start {op:?} {:?} {:?}", p.kind, p.stmts));
        if !p.stmts.is_empty() {
            self.world.work.insert(op.clone(), p.stmts);
        }
        self.clients.insert(
            op.clone(),
            Client {
                slot,
                kind: p.kind.clone(),
                state: ClientState::Running,
            },
        );
        let addr = Addr::Writer(op.clone());
        self.nodes.insert(
            (slot, addr.clone()),
            Node::Writer(Box::new(Writer::new(op, p.kind, self.cfg.bugs))),
        );
        self.start_node(slot, &addr);
    }

    fn quiescent(&self) -> bool {
        self.queues.values().all(|q| q.is_empty()) && self.ios.is_empty() && self.gcs.is_empty()
    }

    /// One scheduler step. Returns false when nothing can happen any more.
    // The scheduler's one choice per step, over every kind of pending event
    // (messages, storage answers, slow upkeep requests, timers, new work,
    // pauses, crashes, readers): the odds of each read together here.
    fn step(&mut self) -> bool {
        self.world.now = self.tick;
        self.resume_due();
        self.renew_due();
        self.queues.retain(|_, q| !q.is_empty());
        let running = |s: &Slot| !self.paused.contains_key(s);
        let queue_keys: Vec<(Slot, Addr, Addr)> = self
            .queues
            .keys()
            .filter(|k| running(&k.0))
            .cloned()
            .collect();
        let ready = self.ready_ios();
        let due: Vec<usize> = (0..self.timers.len())
            .filter(|&i| self.timers[i].due <= self.tick && running(&self.timers[i].slot))
            .collect();
        // A collection's requests walk the whole store (every file, every
        // table version), so each is slow beside a write's steps: other
        // things happen meanwhile, which is where its races live.
        let gcs: Vec<usize> = (0..self.gcs.len())
            .filter(|&i| running(&self.gcs[i].slot) && self.rng.chance(1, GC_SLOWNESS))
            .collect();
        let mut n = queue_keys.len() + ready.len() + due.len() + gcs.len();
        let can_start = !self.planned.is_empty();
        if can_start {
            n += 1;
        }
        if let (0, Some(i)) = (n, (0..self.gcs.len()).find(|&i| running(&self.gcs[i].slot))) {
            // Nothing else can happen: the slow request finishes.
            self.tick += 1;
            self.complete_gc(i);
            return true;
        }
        if n == 0 && self.contend() {
            return true;
        }
        if n == 0 {
            // Only future timers and paused processes: let time pass.
            let next = self
                .timers
                .iter()
                .map(|t| t.due)
                .filter(|&d| d > self.tick)
                .chain(self.paused.values().map(|(at, _)| *at))
                .min();
            if let Some(next) = next {
                self.tick = next.max(self.tick + 1);
                return true;
            }
            return false;
        }
        self.tick += 1;
        self.world.now = self.tick;
        if self.pausing(400) {
            // A process stops between two of its steps.
            let slot = self.rng.below(self.procs.len());
            self.pause(slot);
            return true;
        }
        if self.rng.chance(1, 8) {
            // A reader takes a snapshot of some graph version right now.
            let v = 1 + self.rng.below(self.world.manifests.len()) as u64;
            self.log(format!("reader snapshot at graph version {v}"));
            if let Some((inv, detail)) = self.world.visible_violation(v) {
                self.fail(inv, format!("reader: {detail}"));
            }
        }
        if self.cfg.crashes && self.crashes < MAX_CRASHES && self.rng.chance(1, 300) {
            let slot = self.rng.below(self.procs.len());
            self.crash(slot);
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
            self.deliver(key.0, key.1, key.2, msg);
            return true;
        }
        choice -= queue_keys.len();
        if choice < ready.len() {
            self.complete_io(ready[choice]);
            return true;
        }
        choice -= ready.len();
        if choice < gcs.len() {
            self.complete_gc(gcs[choice]);
            return true;
        }
        choice -= gcs.len();
        if choice < due.len() {
            let t = self.timers.remove(due[choice]);
            self.log(format!("p{} timer {:?} #{}", t.slot, t.owner, t.id));
            if let Some(node) = self.nodes.get_mut(&(t.slot, t.owner.clone())) {
                let now = self.tick;
                let fx = node.machine().on_timer(now, t.id);
                self.effects(t.slot, t.owner, fx);
            }
            return true;
        }
        self.start_op();
        true
    }

    /// Invariants that hold after every step.
    fn check(&mut self) {
        self.checks += 1;
        self.world.stamp_versions();
        let problems: Vec<(Slot, Addr, String)> = self
            .nodes
            .iter()
            .filter_map(|((s, a), n)| n.check().err().map(|e| (*s, a.clone(), e)))
            .collect();
        if let Some((s, a, e)) = problems.into_iter().next() {
            self.fail(
                "actor-local invariant (one holder per gate, only holders commit)",
                format!("p{s} {a:?}: {e}"),
            );
        }
        if let Some((inv, detail)) = self.world.effect_violation() {
            self.fail(inv, detail);
        }
        // Gates are held, in the process and across processes, from the
        // first landed table commit to the publish.
        let mut problem = None;
        for ((slot, op), gates) in &self.effect_gates {
            let inc = self.procs[*slot];
            if self.world.taken_over.contains(&inc) {
                // Its gates were taken over with its lease: what it had
                // sent may land, but it publishes nothing more.
                continue;
            }
            for g in gates {
                let held = match self.nodes.get(&(*slot, g.clone())) {
                    Some(Node::Owner(o)) => o.gate().holds(op),
                    _ => false,
                };
                let locked = self.world.locks.get(g).and_then(|h| h.get(&inc)).is_some();
                if !held || !locked {
                    problem = Some(format!(
                        "p{slot} {op:?} has landed table commits but no longer holds {g:?} (in process: {held}, across processes: {locked})"
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
            .or_else(|| self.world.unowned_effect_violation())
            .or_else(|| self.world.merge_violation())
            .or_else(|| self.world.index_file_violation())
            .or_else(|| self.world.retention_violation())
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

    /// Run a phase until it is over: until nothing can happen, or with a
    /// long linger until every operation started is answered (the locks
    /// kept meanwhile stay kept into the next phase).
    fn phase_done(&mut self, limit: usize) -> bool {
        if self.linger < LONG_LINGER {
            return self.settle(limit);
        }
        while self.violation.is_none() {
            if !self.planned.is_empty() || !self.unanswered().is_empty() {
                if self.steps >= limit {
                    return self.settle(limit);
                }
                if !self.step() {
                    return self.settle(limit);
                }
                self.steps += 1;
                self.check();
                continue;
            }
            return true;
        }
        false
    }

    /// Run until nothing can happen; a run that stops with clients waiting
    /// deadlocked.
    fn settle(&mut self, limit: usize) -> bool {
        while self.violation.is_none() {
            if self.steps >= limit {
                let pending = self.unanswered();
                self.fail(
                    "every run terminates (no livelock)",
                    format!("{limit} steps; still running: {pending:?}"),
                );
                return false;
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
                    return false;
                }
                return true;
            }
        }
        false
    }

    /// Every process crashes and restarts, and recovery settles.
    fn crash_all(&mut self) {
        for slot in 0..self.procs.len() {
            self.crash(slot);
        }
    }

    /// Run until everything settles, then crash every process, recover,
    /// settle, and check that a second recovery changes nothing
    /// (idempotence) and that the graph still takes a write.
    pub fn run(mut self) -> RunReport {
        // Each phase gets its own step budget.
        let mut settled = self.phase_done(MAX_STEPS);
        while settled && let Some(next) = self.phases.pop_front() {
            if !next.is_empty() {
                self.planned = next.into();
                settled = self.phase_done(self.steps + MAX_STEPS);
            }
        }
        if settled {
            self.settle(self.steps + MAX_STEPS);
        }
        if self.violation.is_none() {
            // Recovery settles with every process running: a pause from
            // here on would only delay it, and the end checks want it done.
            self.cfg.pauses = false;
            self.crash_all();
            self.settle(self.steps + MAX_STEPS);
        }
        if self.violation.is_none()
            && let Some((inv, detail)) = self.world.settled_violation()
        {
            self.fail(inv, detail);
        }
        if self.violation.is_none() {
            // Recovery is idempotent: another crash and recovery change nothing.
            let before = (self.world.manifests.len(), self.world.tables.clone());
            self.crash_all();
            self.settle(self.steps + MAX_STEPS * 2);
            if self.violation.is_none()
                && self.quiescent()
                && (self.world.manifests.len(), self.world.tables.clone()) != before
            {
                self.fail(
                    "recovery is idempotent",
                    "a second recovery changed storage".into(),
                );
            }
        }
        if self.violation.is_none() {
            self.probe_write();
        }
        let committed = self
            .clients
            .values()
            .filter(|c| matches!(c.state, ClientState::Answered(Outcome::Committed { .. })))
            .count();
        let merges = self
            .world
            .commits
            .values()
            .filter(|c| c.merged.is_some())
            .count();
        let adopting_merges = self
            .world
            .adopted
            .keys()
            .filter(|c| self.world.commits.contains_key(c))
            .count();
        let schema_applies = self
            .world
            .manifests
            .windows(2)
            .filter(|w| w[0].schema != w[1].schema)
            .count();
        let published_groups = || {
            self.world
                .groups
                .iter()
                .filter(|(c, _)| self.world.commits.contains_key(*c))
        };
        let group_commits = published_groups().count();
        let group_refusals = published_groups()
            .map(|(_, g)| g.members.len() - g.kept.len())
            .sum();
        RunReport {
            seed: self.cfg.seed,
            steps: self.steps,
            digest: self.digest.value(),
            violation: self.violation,
            trace: self.trace,
            committed,
            merges,
            adopting_merges,
            schema_applies,
            crashes: self.crashes,
            pauses: self.pauses,
            takeovers: self.world.takeovers,
            fences: self.world.fences,
            collections: self.gcs_started,
            cleanups: self.cleanups_started,
            group_commits,
            group_refusals,
            checks: self.checks,
            procs: self.procs.len(),
        }
    }

    /// Once every process is quiescent, the graph accepts a write: an
    /// upsert of a fresh id on main from every process in turn.
    fn probe_write(&mut self) {
        // Quiescent means no more faults, crashes or pauses either.
        self.cfg.faults = false;
        self.cfg.crashes = false;
        self.cfg.pauses = false;
        for slot in 0..self.procs.len() {
            let op = OpId(format!("probe-{slot}"));
            let stmts = vec![Stmt::Upsert {
                table: crate::world::TABLES[0].to_string(),
                id: format!("probe-{slot}"),
                val: -1,
            }];
            let kind = OpKind::Write {
                branch: MAIN.to_string(),
            };
            self.start_planned(
                slot,
                Planned {
                    op: op.clone(),
                    kind,
                    stmts,
                },
            );
            self.settle(self.steps + MAX_STEPS);
            if self.violation.is_some() {
                return;
            }
            let state = self.clients.get(&op).map(|c| c.state.clone());
            if !matches!(
                state,
                Some(ClientState::Answered(Outcome::Committed { .. }))
            ) {
                self.fail(
                    "a graph always accepts a write once every process is quiescent",
                    format!("process {slot}'s probe write ended {state:?}"),
                );
                return;
            }
        }
    }
}

/// Does a table lease's expectation name another line or version than the
/// manifest now does (its snapshot is older than the head)?
fn old_snapshot(expected: Option<&GateView>, truth: &GateView) -> bool {
    match (expected, truth) {
        (Some(GateView::Table(e)), GateView::Table(t)) => (&e.line, e.named) != (&t.line, t.named),
        _ => false,
    }
}
