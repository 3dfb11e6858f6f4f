//! The sans-IO contract every protocol actor implements: messages, storage
//! requests and their completions go in, effects come out as data. Hosts (the
//! ractor adapter in production, the simulator in tests) execute the effects.

use crate::types::*;

/// Identifies one outstanding storage request of one machine.
pub type ReqId = u64;
/// Identifies one timer of one machine.
pub type TimerId = u64;

/// Every message the protocol's actors exchange.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    // Gates (schema, branch and table actors).
    /// `expect`: for a table gate, the view the writer's snapshot implies
    /// (see [`TableView::owned`]); the owner gives a view it knows instead
    /// of reading only when it is that one.
    Acquire {
        op: OpId,
        mode: GateMode,
        expect: Option<GateView>,
        /// For a branch gate: the schema gate's tenure (see `Locked`) the
        /// writer holds it under. A schema apply moves every branch's head
        /// under the schema gate alone, so a branch owner gives a view it
        /// knows only to a lease under the tenure it was known under.
        under: Option<u64>,
    },
    /// The lease holds the gate, in this process and across processes;
    /// its view is being read and follows as `Granted`. A writer asks for
    /// its next gate on this, so the views of all its gates are read
    /// together rather than one after another (each still after its lock).
    Locked {
        op: OpId,
        /// The owner's tenure: a schema owner moves it whenever the schema
        /// may change under a lease (an exclusive lease granted, its
        /// cross-process lock taken anew).
        tenure: u64,
    },
    Granted {
        op: OpId,
        view: GateView,
    },
    /// `left`: what the holder left of the state its view shows, as far
    /// as it knows (`None`: unknown). While the process keeps the gate's
    /// cross-process lock, the owner gives that to the next lease as its
    /// view instead of reading it again.
    Release {
        op: OpId,
        left: Option<GateView>,
    },
    /// The holder's effects on the gate's state are over (its publish is
    /// answered; it only finishes before it releases): `left` is what it
    /// left. A branch owner answers head requests from it meanwhile.
    Settled {
        op: OpId,
        left: GateView,
    },

    // Branch actor.
    HeadRequest {
        op: OpId,
    },
    /// Drop the head known under a kept lock, so the next head request or
    /// grant reads it: sent by a process whose schema apply landed, since
    /// the apply moved the branch's head under the schema gate alone and a
    /// head request (a capture, before any gate) carries no schema tenure.
    ForgetHead,
    HeadReply {
        op: OpId,
        head: Result<Option<Head>, String>,
    },

    // Table actor (only the gate holder may send these).
    CommitTable {
        op: OpId,
        staged: StagedRef,
    },
    TableCommitted {
        op: OpId,
        table: TableKey,
        result: CommitResult,
    },
    RestoreTable {
        op: OpId,
        to: u64,
    },
    TableRestored {
        op: OpId,
        table: TableKey,
        result: Result<u64, String>,
    },
    /// Remove an unpublished fork (the holder found an orphan on it).
    DropFork {
        op: OpId,
    },
    ForkDropped {
        op: OpId,
        table: TableKey,
        result: Result<(), String>,
    },

    // Recovery actor.
    /// Wait until no unresolved intent touches `branch` (and the scan at start
    /// is done).
    Admit {
        op: OpId,
        branch: String,
    },
    /// `blocked_by`: recovery could not resolve this intent touching the
    /// branch; the write must not proceed.
    Admitted {
        op: OpId,
        blocked_by: Option<OpId>,
    },
    /// Under the gates: is any unresolved intent touching `branch`?
    CheckIntents {
        op: OpId,
        branch: String,
    },
    IntentsChecked {
        op: OpId,
        clear: bool,
    },
    RecordIntent {
        intent: Intent,
    },
    IntentRecorded {
        op: OpId,
        result: Result<(), String>,
    },
    /// The intent's commit is published: delete its sidecar.
    IntentDone {
        op: OpId,
    },
    IntentDeleted {
        op: OpId,
        result: Result<(), String>,
    },
    /// The intent's writer gave up after an effect: recovery must resolve it.
    /// The writer waits for `StuckNoted` before it releases its gates, so no
    /// later gate holder can miss the intent.
    IntentStuck {
        op: OpId,
    },
    StuckNoted {
        op: OpId,
    },
    /// A writer holding `branch`'s gates saw table versions no published
    /// state accounts for (orphans of a dead writer). Recovery rescans the
    /// sidecars, resolves the dead ones, then sweeps these tables; the writer
    /// has released its gates and asks for admission again after this.
    Suspect {
        op: OpId,
        branch: String,
        tables: Vec<TableKey>,
    },
    /// Sent by a client after start: answered once the start-up scan has
    /// resolved (or given up on) every intent.
    AwaitReady {
        op: OpId,
    },
    Ready {
        op: OpId,
        report: RecoveryReport,
    },

    // Manifest publisher.
    Publish {
        req: PublishReq,
    },
    PublishReply {
        op: OpId,
        result: PublishResult,
    },

    // Writer -> client.
    Finished {
        op: OpId,
        outcome: Outcome,
    },
}

/// What the start-up scan did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    pub rolled_forward: Vec<OpId>,
    pub rolled_back: Vec<OpId>,
    pub already_published: Vec<OpId>,
    /// Intents another process resolved first (their sidecar was gone).
    pub resolved_elsewhere: Vec<OpId>,
    pub abandoned: Vec<OpId>,
    /// Intents still unresolved (storage kept failing).
    pub unresolved: Vec<OpId>,
    /// Sweeps that repaired orphaned table versions no intent owned.
    pub repaired: Vec<OpId>,
}

/// Every storage request, as data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Io {
    ReadSchemaId,
    ReadHead {
        branch: String,
    },
    /// A table gate's view: the physical table's latest version beside the
    /// version the latest manifest names for it.
    TableView {
        table: TableKey,
    },
    /// Run the operation's statements against the snapshot at `head` and stage
    /// one transaction per touched table, without moving any table's head.
    Prepare {
        op: OpId,
        attempt: u32,
        branch: String,
        head: Head,
    },
    /// Drop whatever an abandoned attempt staged.
    Discard {
        op: OpId,
    },
    WriteSidecar {
        intent: Intent,
    },
    DeleteSidecar {
        op: OpId,
    },
    /// Every sidecar on storage, each with whether its writer still lives.
    ListSidecars,
    /// Take (or strengthen to `mode`) this process's cross-process lock on a
    /// gate; completes once held, or fails after the wait limit.
    LockGate {
        gate: Addr,
        mode: GateMode,
    },
    /// Give up this process's cross-process lock on a gate.
    UnlockGate {
        gate: Addr,
    },
    /// Remove the Lance branch of an unpublished fork.
    DropFork {
        table: TableKey,
    },
    CommitTable {
        op: OpId,
        table: TableKey,
        staged: StagedRef,
    },
    /// Write a new table version whose content equals version `to`.
    RestoreTable {
        table: TableKey,
        to: u64,
    },
    Inspect {
        intent: Intent,
    },
    Publish {
        req: PublishReq,
    },
    /// Best effort: reclaim the physical storage of a deleted branch.
    DropBranchStorage {
        branch: String,
    },
}

/// The completion of an [`Io`] request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IoOut {
    SchemaId(Result<String, String>),
    Head(Result<Option<Head>, String>),
    TableView(Result<TableView, String>),
    /// `Err(None)`: the operation was rejected (details stay with the
    /// substrate); `Err(Some(msg))`: a storage failure.
    Prepared(Result<Plan, Option<String>>),
    Done(Result<(), String>),
    Sidecars(Result<Vec<FoundIntent>, String>),
    /// A gate lock: `Err` names what was waited for, or the storage error.
    Locked(Result<(), String>),
    TableCommit(CommitResult),
    TableRestore(Result<u64, String>),
    Inspected(Result<Inspection, String>),
    Published(PublishResult),
}

/// An effect a machine asks its host to carry out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    Send(Addr, Msg),
    Io(ReqId, Io),
    SetTimer(TimerId, u64),
    /// The machine has finished; the host may drop it.
    Stop,
}

/// A protocol actor's logic. No `.await` inside a step: continuations are
/// explicit states, so a host can interleave and crash machines between any
/// two steps.
pub trait Machine: Send + 'static {
    /// Called once after (re)start; a restart after a crash starts from a
    /// fresh machine, so durable state must be re-read through `Io`.
    fn on_start(&mut self, now: Tick) -> Vec<Effect>;
    fn on_msg(&mut self, now: Tick, from: Addr, msg: Msg) -> Vec<Effect>;
    fn on_io(&mut self, now: Tick, req: ReqId, out: IoOut) -> Vec<Effect>;
    fn on_timer(&mut self, _now: Tick, _timer: TimerId) -> Vec<Effect> {
        Vec::new()
    }
    /// Local invariants; the simulator calls this after every step.
    fn check(&self) -> Result<(), String> {
        Ok(())
    }
}
