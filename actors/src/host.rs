//! The production host: one small generic ractor adapter that runs any
//! [`Machine`] as an actor. `Send` effects become casts through a directory of
//! logical addresses, `Io` effects run on the [`Substrate`] in their own task
//! and come back as completions, timers become sleeps. The same host runs over
//! the simulated substrate on a paused single-thread runtime in tests.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex as StdMutex};

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::{Mutex, oneshot};

use crate::bugs::Bugs;
use crate::machine::*;
use crate::owners::{GateOwner, OwnerKind};
use crate::publisher::Publisher;
use crate::recovery::Recovery;
use crate::types::*;
use crate::writer::{OpKind, Writer};

/// Executes the protocol's storage requests. Lance implements it in the main
/// crate; the simulator has its own.
pub trait Substrate: Send + Sync + 'static {
    fn execute(&self, io: Io) -> Pin<Box<dyn Future<Output = IoOut> + Send + '_>>;

    /// How long (ticks: milliseconds here) a gate owner keeps its
    /// cross-process lock after the last local lease ends: worth it where
    /// taking a lock is a round trip (see `owners`).
    fn lock_linger(&self) -> u64 {
        0
    }
}

/// What an actor's mailbox carries.
pub enum HostMsg {
    Deliver { from: Addr, msg: Msg },
    IoDone { req: ReqId, out: IoOut },
    Timer { id: TimerId },
}

struct MachineActor;

struct ActorState {
    me: Addr,
    machine: Box<dyn Machine>,
    host: Arc<HostInner>,
}

impl Actor for MachineActor {
    type Msg = HostMsg;
    type State = ActorState;
    type Arguments = (Addr, Box<dyn Machine>, Arc<HostInner>);

    async fn pre_start(
        &self,
        _myself: ActorRef<HostMsg>,
        (me, machine, host): Self::Arguments,
    ) -> Result<ActorState, ActorProcessingErr> {
        Ok(ActorState { me, machine, host })
    }

    async fn post_start(
        &self,
        myself: ActorRef<HostMsg>,
        state: &mut ActorState,
    ) -> Result<(), ActorProcessingErr> {
        let now = state.host.now();
        let fx = state.machine.on_start(now);
        run_effects(&myself, state, fx).await;
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<HostMsg>,
        message: HostMsg,
        state: &mut ActorState,
    ) -> Result<(), ActorProcessingErr> {
        let now = state.host.now();
        let fx = match message {
            HostMsg::Deliver { from, msg } => state.machine.on_msg(now, from, msg),
            HostMsg::IoDone { req, out } => state.machine.on_io(now, req, out),
            HostMsg::Timer { id } => state.machine.on_timer(now, id),
        };
        if let Err(violation) = state.machine.check() {
            tracing::error!(actor = ?state.me, violation, "protocol invariant violated");
            // An operation whose coordinator broke an invariant must not go
            // on as if nothing happened: it fails, typed, and stops here.
            // Its gates stay with it until the process ends, which is safer
            // than releasing gates whose state is unknown.
            if let Addr::Writer(op) = &state.me {
                let outcome =
                    Outcome::StorageFailed(format!("protocol invariant violated: {violation}"));
                let msg = Msg::Finished {
                    op: op.clone(),
                    outcome,
                };
                state
                    .host
                    .deliver(state.me.clone(), Addr::Client(op.clone()), msg)
                    .await;
                run_effects(&myself, state, vec![Effect::Stop]).await;
                return Ok(());
            }
        }
        run_effects(&myself, state, fx).await;
        Ok(())
    }
}

async fn run_effects(myself: &ActorRef<HostMsg>, state: &mut ActorState, fx: Vec<Effect>) {
    for effect in fx {
        match effect {
            Effect::Send(to, msg) => {
                if let (Addr::Writer(op), Addr::Client(_)) = (&state.me, &to) {
                    // Answered; it may still have its sidecar to delete.
                    state
                        .host
                        .finishing
                        .lock()
                        .expect("finishing")
                        .insert(op.clone());
                }
                state.host.deliver(state.me.clone(), to, msg).await
            }
            Effect::Io(req, io) => {
                let substrate = state.host.substrate.clone();
                let me = myself.clone();
                tokio::spawn(async move {
                    let out = substrate.execute(io).await;
                    // The actor may have stopped (finished or shut down).
                    let _ = me.cast(HostMsg::IoDone { req, out });
                });
            }
            Effect::SetTimer(id, ticks) => {
                let me = myself.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(std::time::Duration::from_millis(ticks)).await;
                    let _ = me.cast(HostMsg::Timer { id });
                });
            }
            Effect::Stop => {
                state.host.directory.lock().await.remove(&state.me);
                if let Addr::Writer(op) = &state.me {
                    state.host.finishing.lock().expect("finishing").remove(op);
                    state.host.finished.notify_waiters();
                }
                myself.stop(None);
            }
        }
    }
}

struct HostInner {
    substrate: Arc<dyn Substrate>,
    directory: Mutex<BTreeMap<Addr, ActorRef<HostMsg>>>,
    clients: StdMutex<BTreeMap<OpId, oneshot::Sender<Msg>>>,
    started: tokio::time::Instant,
    bugs: Bugs,
    /// Set once the host shuts down: no new operation starts after that.
    stopped: std::sync::atomic::AtomicBool,
    /// Operations answered whose writer still runs (deleting its sidecar,
    /// then releasing its gates); a shutdown lets them end first.
    finishing: StdMutex<std::collections::BTreeSet<OpId>>,
    finished: tokio::sync::Notify,
}

impl HostInner {
    fn now(&self) -> Tick {
        self.started.elapsed().as_millis() as Tick
    }

    async fn deliver(self: &Arc<Self>, from: Addr, to: Addr, msg: Msg) {
        if let Addr::Client(op) = &to {
            if let Some(tx) = self.clients.lock().expect("clients").remove(op) {
                let _ = tx.send(msg);
            }
            return;
        }
        let Some(actor) = self.actor(&to).await else {
            tracing::warn!(?to, ?msg, "message to a finished actor dropped");
            return;
        };
        let _ = actor.cast(HostMsg::Deliver { from, msg });
    }

    /// The actor behind an address; gate owners are started on first use.
    async fn actor(self: &Arc<Self>, addr: &Addr) -> Option<ActorRef<HostMsg>> {
        let mut dir = self.directory.lock().await;
        if let Some(a) = dir.get(addr) {
            return Some(a.clone());
        }
        let machine: Box<dyn Machine> = match addr {
            Addr::Branch(b) => Box::new(self.owner(OwnerKind::Branch(b.clone()))),
            Addr::Table(t) => Box::new(self.owner(OwnerKind::Table(t.clone()))),
            _ => return None,
        };
        let actor = self.spawn_locked(&mut dir, addr.clone(), machine).await;
        Some(actor)
    }

    fn owner(&self, kind: OwnerKind) -> GateOwner {
        GateOwner::new(kind, self.bugs).with_linger(self.substrate.lock_linger())
    }

    async fn spawn_locked(
        self: &Arc<Self>,
        dir: &mut BTreeMap<Addr, ActorRef<HostMsg>>,
        addr: Addr,
        machine: Box<dyn Machine>,
    ) -> ActorRef<HostMsg> {
        let (actor, _join) =
            Actor::spawn(None, MachineActor, (addr.clone(), machine, self.clone()))
                .await
                .expect("spawning a protocol actor");
        dir.insert(addr, actor.clone());
        actor
    }
}

/// A running set of protocol actors over one substrate. Cheap to clone.
#[derive(Clone)]
pub struct Host {
    inner: Arc<HostInner>,
}

impl Host {
    /// Start the schema actor, the publisher and the recovery actor; recovery
    /// begins its start-up scan at once.
    pub async fn start(substrate: Arc<dyn Substrate>, bugs: Bugs) -> Self {
        let inner = Arc::new(HostInner {
            substrate,
            directory: Mutex::new(BTreeMap::new()),
            clients: StdMutex::new(BTreeMap::new()),
            started: tokio::time::Instant::now(),
            bugs,
            stopped: std::sync::atomic::AtomicBool::new(false),
            finishing: StdMutex::new(std::collections::BTreeSet::new()),
            finished: tokio::sync::Notify::new(),
        });
        {
            let mut dir = inner.directory.lock().await;
            inner
                .spawn_locked(
                    &mut dir,
                    Addr::Schema,
                    Box::new(inner.owner(OwnerKind::Schema)),
                )
                .await;
            inner
                .spawn_locked(&mut dir, Addr::Publisher, Box::new(Publisher::new()))
                .await;
            inner
                .spawn_locked(&mut dir, Addr::Recovery, Box::new(Recovery::new(bugs)))
                .await;
        }
        Self { inner }
    }

    fn register(&self, op: &OpId) -> oneshot::Receiver<Msg> {
        let (tx, rx) = oneshot::channel();
        self.inner
            .clients
            .lock()
            .expect("clients")
            .insert(op.clone(), tx);
        rx
    }

    /// Wait for the start-up recovery scan to finish.
    pub async fn ready(&self, op: OpId) -> Option<RecoveryReport> {
        let rx = self.register(&op);
        self.inner
            .deliver(
                Addr::Client(op.clone()),
                Addr::Recovery,
                Msg::AwaitReady { op },
            )
            .await;
        match rx.await {
            Ok(Msg::Ready { report, .. }) => Some(report),
            _ => None,
        }
    }

    /// Run one operation to its outcome.
    pub async fn run(&self, op: OpId, kind: OpKind) -> Outcome {
        if self.inner.stopped.load(std::sync::atomic::Ordering::SeqCst) {
            return Outcome::StorageFailed("the graph is closed".into());
        }
        let rx = self.register(&op);
        let writer = Writer::new(op.clone(), kind, self.inner.bugs);
        {
            let mut dir = self.inner.directory.lock().await;
            self.inner
                .spawn_locked(&mut dir, Addr::Writer(op.clone()), Box::new(writer))
                .await;
        }
        match rx.await {
            Ok(Msg::Finished { outcome, .. }) => outcome,
            Ok(other) => Outcome::StorageFailed(format!("unexpected answer {other:?}")),
            Err(_) => {
                Outcome::StorageFailed("the operation's actor stopped without an answer".into())
            }
        }
    }

    /// Have branch `branch`'s gate owner, if this process started one,
    /// drop the head it knows (see `Msg::ForgetHead`; an owner not started
    /// knows nothing, so none is started for this). Its mailbox keeps
    /// order, so an operation run after this asks it with the head gone.
    pub async fn forget_head(&self, branch: &str) {
        let to = Addr::Branch(branch.to_string());
        let owner = self.inner.directory.lock().await.get(&to).cloned();
        if let Some(owner) = owner {
            let from = Addr::Client(OpId("forget".into()));
            let _ = owner.cast(HostMsg::Deliver {
                from,
                msg: Msg::ForgetHead,
            });
        }
    }

    /// Stop every actor without waiting (for `Drop`); a no-op if the
    /// directory is busy at that instant.
    pub fn stop_all_now(&self) {
        self.inner
            .stopped
            .store(true, std::sync::atomic::Ordering::SeqCst);
        if let Ok(mut dir) = self.inner.directory.try_lock() {
            for a in std::mem::take(&mut *dir).into_values() {
                a.stop(None);
            }
        }
    }

    /// Wait (at most `FINISH_WAIT_MS`) until the operations already answered
    /// have finished their cleanup (a sidecar delete): until then their
    /// intents are on storage, and what looks at intents (a cleanup of old
    /// versions) would take them for writes in flight.
    pub async fn settle_answered(&self) {
        let wait = async {
            loop {
                let notified = self.inner.finished.notified();
                if self.inner.finishing.lock().expect("finishing").is_empty() {
                    return;
                }
                notified.await;
            }
        };
        let limit = std::time::Duration::from_millis(crate::types::limits::FINISH_WAIT_MS);
        let _ = tokio::time::timeout(limit, wait).await;
    }

    /// Stop every actor. Outstanding operations end without an answer;
    /// answered ones first finish their cleanup (a sidecar delete), for at
    /// most `FINISH_WAIT_MS`: a sidecar left behind is published, and the
    /// next read-write open removes it.
    pub async fn shutdown(&self) {
        self.inner
            .stopped
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.settle_answered().await;
        let actors: Vec<_> = std::mem::take(&mut *self.inner.directory.lock().await)
            .into_values()
            .collect();
        for a in actors {
            a.stop(None);
        }
        self.inner.clients.lock().expect("clients").clear();
    }
}
