//! The production wiring under simulation: the real ractor host
//! (`omnigraph_actors::host`) on a paused single-thread tokio runtime, over the
//! simulated substrate with seeded latency jitter and faults, one process
//! crash mid-run, and a restart with recovery. This tests the glue the primary
//! simulator does not run: the adapter, the directory, spawning, Io tasks.
//! Storage invariants are checked after every storage effect, and an actor's
//! own invariant violation fails its operation (as in production), which
//! this mode reports.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use omnigraph_actors::host::{Host, Substrate};
use omnigraph_actors::*;

use crate::rng::{Digest, Rng};
use crate::sim::WORKLOAD_STREAM;
use crate::workload;
use crate::world::{Fault, Proc, World};

type Found = Arc<Mutex<Option<(&'static str, String)>>>;

struct SimSubstrate {
    world: Arc<Mutex<World>>,
    rng: Mutex<Rng>,
    /// Requests issued before a crash must not take effect after it.
    epoch: Arc<Mutex<u64>>,
    /// This process's incarnation.
    proc: Proc,
    /// The first storage invariant seen broken.
    found: Found,
    /// Milliseconds gate owners keep their lock after the last lease.
    linger: u64,
}

/// Storage invariants that hold after every effect.
fn storage_violation(w: &World) -> Option<(&'static str, String)> {
    let latest = w.manifests.len() as u64;
    w.effect_violation()
        .or_else(|| w.visible_violation(latest))
        .or_else(|| w.unowned_effect_violation())
}

impl Substrate for SimSubstrate {
    fn lock_linger(&self) -> u64 {
        self.linger
    }

    fn execute(&self, io: Io) -> Pin<Box<dyn Future<Output = IoOut> + Send + '_>> {
        let issued = *self.epoch.lock().expect("epoch");
        let (delay, fault) = {
            let mut r = self.rng.lock().expect("rng");
            let delay = r.below(4) as u64;
            let fault = if r.chance(1, 40) && !matches!(io, Io::Discard { .. }) {
                Fault::FailClean
            } else {
                Fault::None
            };
            (delay, fault)
        };
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(delay)).await;
            let gone = *self.epoch.lock().expect("epoch") != issued;
            if gone && matches!(io, Io::LockGate { .. } | Io::UnlockGate { .. }) {
                // A dead process takes no locks.
                return IoOut::Locked(Err("the process is gone".into()));
            }
            let fault = if gone { Fault::FailClean } else { fault };
            let mut w = self.world.lock().expect("world");
            let out = w.exec(self.proc, &io, fault);
            if let Some(v) = storage_violation(&w) {
                self.found.lock().expect("found").get_or_insert(v);
            }
            out
        })
    }
}

pub struct RactorReport {
    pub digest: u64,
    pub violation: Option<(&'static str, String)>,
    pub committed: usize,
}

pub fn run_seed(seed: u64, bugs: Bugs) -> RactorReport {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime");
    rt.block_on(run(seed, bugs))
}

async fn start(
    world: &Arc<Mutex<World>>,
    epoch: &Arc<Mutex<u64>>,
    found: &Found,
    seed: u64,
    bugs: Bugs,
) -> Host {
    let n = *epoch.lock().expect("epoch");
    let proc = n + 1;
    world.lock().expect("world").start_process(proc, 0);
    let sub = Arc::new(SimSubstrate {
        world: world.clone(),
        rng: Mutex::new(Rng::new(seed.wrapping_mul(31).wrapping_add(n))),
        epoch: epoch.clone(),
        proc,
        found: found.clone(),
        // Half the seeds keep locks a while after their last lease.
        linger: (seed % 2) * 5,
    });
    let host = Host::start(sub, bugs).await;
    host.ready(OpId(format!("ready-{n}"))).await;
    host
}

// One run as a script: start processes, drive writes with jitter and
// faults, crash one, restart and recover, then check; its steps are the
// order a reader follows.
async fn run(seed: u64, bugs: Bugs) -> RactorReport {
    let mut rng = Rng::new(seed);
    let planned = workload::generate(&mut rng, &mut Rng::new(seed ^ WORKLOAD_STREAM)).all();
    let world = Arc::new(Mutex::new(World::new()));
    let epoch = Arc::new(Mutex::new(0u64));
    let found: Found = Arc::new(Mutex::new(None));
    for p in &planned {
        if !p.stmts.is_empty() {
            world
                .lock()
                .expect("world")
                .work
                .insert(p.op.clone(), p.stmts.clone());
        }
    }
    let host = start(&world, &epoch, &found, seed, bugs).await;
    let crash_at = Duration::from_millis(20 + rng.below(150) as u64);
    let mut tasks = Vec::new();
    for p in planned {
        let h = host.clone();
        let delay = Duration::from_millis(rng.below(25) as u64);
        let w = world.clone();
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let outcome = h.run(p.op.clone(), p.kind.clone()).await;
            // Note the branch incarnation at acknowledgement time.
            let inc = match &p.kind {
                OpKind::Write { branch } => w
                    .lock()
                    .expect("world")
                    .latest()
                    .branches
                    .get(branch)
                    .map(|r| r.incarnation)
                    .unwrap_or(0),
                _ => 0,
            };
            (p.op, p.kind, outcome, inc)
        }));
    }
    // The process crashes once, mid-run.
    tokio::time::sleep(crash_at).await;
    let dead = {
        let mut e = epoch.lock().expect("epoch");
        *e += 1;
        *e
    };
    host.shutdown().await;
    world.lock().expect("world").crash(dead);

    let mut digest = Digest::default();
    let mut acked = Vec::new();
    let mut committed = 0;
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.expect("client task"));
    }
    results.sort_by(|a, b| a.0.cmp(&b.0));
    let mut actor_violation = None;
    for (op, kind, outcome, inc) in results {
        digest.add(&format!("{op:?} {outcome:?}"));
        if let Outcome::StorageFailed(e) = &outcome
            && e.starts_with("protocol invariant violated")
        {
            actor_violation.get_or_insert((
                "actor-local invariant (one holder per gate, only holders commit)",
                format!("{op:?}: {e}"),
            ));
        }
        if let (
            OpKind::Write { branch },
            Outcome::Committed {
                commit: Some(c), ..
            },
        ) = (kind, &outcome)
        {
            committed += 1;
            acked.push((branch, inc, c.clone()));
        }
    }
    // Restart: recovery runs before the host reports ready.
    let host = start(&world, &epoch, &found, seed, bugs).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    host.shutdown().await;
    let w = world.lock().expect("world");
    digest.add(&format!("{:?}", w.manifests));
    let latest = w.manifests.len() as u64;
    let during = found.lock().expect("found").clone();
    let violation = during
        .or(actor_violation)
        .or_else(|| w.effect_violation())
        .or_else(|| w.visible_violation(latest))
        .or_else(|| w.durability_violation(&acked))
        .or_else(|| w.settled_violation());
    RactorReport {
        digest: digest.value(),
        violation,
        committed,
    }
}
