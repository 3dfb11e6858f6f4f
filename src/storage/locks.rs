//! Cross-process locks of one process on one graph: the gate locks that make
//! the protocol's gates hold across processes, and the liveness lock that
//! tells other processes this process (and so its recovery intents) is alive.
//!
//! On a local path both are OS file locks (`flock`) under `_graph/locks/`
//! and `_graph/owners/`: the kernel drops them when the process dies, however
//! it dies, so a free liveness lock proves its owner is gone. On an object
//! store they are leases kept by conditional writes (`leases.rs`). Waiting
//! for a gate polls with backoff up to a named time limit, then fails naming
//! the gate. A `memory://` graph lives in one process, where the in-process
//! gates are enough.

use std::collections::HashMap;
use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use omnigraph_actors::limits::GATE_WAIT_LIMIT_MS;
use omnigraph_actors::{Addr, GateMode};

use super::leases::Leases;
use super::objstore::Store;
use crate::error::{OmniError, Result};

/// First and longest pause between two tries of a held gate lock.
const LOCK_POLL_FIRST: Duration = Duration::from_micros(200);
const LOCK_POLL_MAX: Duration = Duration::from_millis(20);

pub struct ProcessLocks {
    /// This process's incarnation: stamped into every sidecar it writes.
    incarnation: String,
    backend: Backend,
    wait_limit: Duration,
}

enum Backend {
    Files(FileLocks),
    Leases(Leases),
    /// A graph no other process can reach.
    Alone,
}

struct FileLocks {
    /// The graph's folder.
    root: PathBuf,
    /// The liveness lock, held for as long as this value lives.
    liveness: Mutex<Option<File>>,
    held: Mutex<HashMap<String, File>>,
}

/// A file name (without extension) for a gate: stable, and safe for any
/// branch or table name.
fn gate_name(gate: &Addr) -> String {
    let name = match gate {
        Addr::Schema => "schema".to_string(),
        Addr::Branch(b) => format!("branch-{b}"),
        Addr::Table(t) => format!("table-{}-{}", t.branch, t.table),
        other => format!("{other:?}"),
    };
    let safe: String = name
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02x}"),
        })
        .collect();
    safe
}

fn gate_file(gate: &Addr) -> String {
    format!("{}.lock", gate_name(gate))
}

fn describe(gate: &Addr) -> String {
    match gate {
        Addr::Schema => "the schema gate".into(),
        Addr::Branch(b) => format!("the gate of branch '{b}'"),
        Addr::Table(t) => format!("the gate of table {} on branch '{}'", t.table, t.branch),
        other => format!("{other:?}"),
    }
}

fn open_lock_file(path: &Path) -> std::io::Result<File> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
}

fn try_mode(f: &File, mode: GateMode) -> Result<bool, std::io::Error> {
    let r = match mode {
        GateMode::Exclusive => f.try_lock(),
        GateMode::Shared => f.try_lock_shared(),
    };
    match r {
        Ok(()) => Ok(true),
        Err(TryLockError::WouldBlock) => Ok(false),
        Err(TryLockError::Error(e)) => Err(e),
    }
}

/// Is this a process incarnation this code writes (a ULID)? Anything else
/// in a sidecar predates owners, or is not a name to build a path from.
pub(super) fn valid_incarnation(incarnation: &str) -> bool {
    !incarnation.is_empty() && incarnation.chars().all(|c| c.is_ascii_alphanumeric())
}

/// How long a liveness lease on object storage lasts unrenewed.
pub fn lease_time() -> Duration {
    let ms = std::env::var("OMNIGRAPH_LEASE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(super::leases::LEASE_TIME_MS);
    Duration::from_millis(ms)
}

/// How long a gate's lease object is kept after this process's last write
/// under it, for its next one, where taking it is a round trip
/// (`OMNIGRAPH_LOCK_LINGER_MS` sets it; another process waits up to this
/// much more for the gate).
pub const LOCK_LINGER_MS: u64 = 250;

/// The linger `OMNIGRAPH_LOCK_LINGER_MS` sets, or [`LOCK_LINGER_MS`].
pub fn lock_linger() -> Duration {
    Duration::from_millis(
        std::env::var("OMNIGRAPH_LOCK_LINGER_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(LOCK_LINGER_MS),
    )
}

impl ProcessLocks {
    /// Does taking a gate lock cost a request (a lease on object storage),
    /// so that keeping it a while pays?
    pub fn remote(&self) -> bool {
        matches!(self.backend, Backend::Leases(_))
    }

    /// Locks for the graph in `store`; this takes the process's liveness
    /// lock (or lease) at once.
    pub async fn new(store: &Store, incarnation: String) -> Result<Self> {
        Self::with_lease(store, incarnation, lease_time()).await
    }

    /// As `new`, with the lease time of object storage given.
    pub async fn with_lease(store: &Store, incarnation: String, lease: Duration) -> Result<Self> {
        let uri = store.uri();
        let backend = if uri.starts_with("memory://") {
            Backend::Alone
        } else if uri.contains("://") {
            // The leases of the gates nearly every write takes (the
            // schema's, main's) are read beside the start: one found free
            // is then taken with one conditional write, not two requests.
            let likely = [
                gate_name(&Addr::Schema),
                gate_name(&Addr::Branch(super::manifest::MAIN.to_string())),
            ];
            let (leases, free) = futures::join!(
                Leases::start(store.clone(), incarnation.clone(), lease),
                Leases::read_free(store, &likely)
            );
            let leases = leases?;
            leases.known_free(free);
            Backend::Leases(leases)
        } else {
            Backend::Files(
                FileLocks::new(PathBuf::from(uri), &incarnation).map_err(|e| {
                    OmniError::Storage(format!("cannot take the liveness lock: {e}"))
                })?,
            )
        };
        Ok(Self {
            incarnation,
            backend,
            wait_limit: Duration::from_millis(GATE_WAIT_LIMIT_MS),
        })
    }

    /// Shorten the gate wait limit (tests of the limit itself).
    pub fn with_wait_limit(mut self, limit: Duration) -> Self {
        self.wait_limit = limit;
        self
    }

    pub fn incarnation(&self) -> &str {
        &self.incarnation
    }

    /// Does deciding that an owner is dead need a fence (a manifest version
    /// published after the decision)? Only where liveness is a lease: a
    /// taken-over writer may still be about to publish on an old base.
    pub fn needs_fence(&self) -> bool {
        matches!(self.backend, Backend::Leases(_))
    }

    /// Owners this process declared dead (took their leases over) whose
    /// fence is not yet published. Only leases have any.
    pub fn unfenced(&self) -> Vec<String> {
        match &self.backend {
            Backend::Leases(l) => l.unfenced(),
            _ => Vec::new(),
        }
    }

    /// The fence after these owners' takeover is published.
    pub fn fenced(&self, owners: &[String]) {
        if let Backend::Leases(l) = &self.backend {
            l.fenced(owners);
        }
    }

    /// May this process still commit, restore and publish? Only a lapsed or
    /// taken-over lease says no.
    pub fn valid(&self) -> std::result::Result<(), String> {
        match &self.backend {
            Backend::Leases(l) => l.valid(),
            _ => Ok(()),
        }
    }

    /// The storage error that keeps the liveness lease from being renewed,
    /// if any: a lapse with one is an outage of the store.
    pub fn renewal_failure(&self) -> Option<String> {
        match &self.backend {
            Backend::Leases(l) => l.renewal_failure(),
            _ => None,
        }
    }

    /// Stop (or resume) renewing the liveness lease, as a paused process
    /// would (tests of a takeover).
    #[cfg(feature = "fault-injection")]
    pub fn pause_renewal(&self, paused: bool) {
        if let Backend::Leases(l) = &self.backend {
            l.pause_renewal(paused);
        }
    }

    /// Start reading `gate`'s lease now, so that taking it later costs one
    /// conditional write (a write's prepare starts one for each gate it
    /// will take, beside its own reads): the tags found free are handed to
    /// `known_free` by whoever awaits the handle. None where a gate costs
    /// no request, or its tag is known.
    pub fn read_ahead(
        &self,
        gate: &Addr,
    ) -> Option<tokio::task::JoinHandle<Vec<(String, String)>>> {
        match &self.backend {
            Backend::Leases(l) => l.read_ahead(&gate_name(gate)).map(tokio::spawn),
            _ => None,
        }
    }

    /// Leases found free by `read_ahead`, with their tags.
    pub fn known_free(&self, free: Vec<(String, String)>) {
        if let Backend::Leases(l) = &self.backend {
            l.known_free(free);
        }
    }

    /// Take (or strengthen to `mode`) this process's lock on `gate`, waiting
    /// while another process holds it, up to the wait limit.
    pub async fn lock(&self, gate: &Addr, mode: GateMode) -> std::result::Result<(), String> {
        match &self.backend {
            Backend::Files(f) => f.lock(gate, mode, self.wait_limit).await,
            Backend::Leases(l) => {
                l.lock(&gate_name(gate), &describe(gate), self.wait_limit)
                    .await
            }
            Backend::Alone => Ok(()),
        }
    }

    /// Give up this process's lock on `gate`.
    pub async fn unlock(&self, gate: &Addr) {
        match &self.backend {
            Backend::Files(f) => f.unlock(gate),
            Backend::Leases(l) => l.unlock(&gate_name(gate)).await,
            Backend::Alone => {}
        }
    }

    /// Is the process that stamped a sidecar with `incarnation` alive? A
    /// graph that no other process can reach has no other live writers.
    pub async fn owner_alive(&self, incarnation: &str) -> bool {
        if incarnation == self.incarnation {
            return true;
        }
        match &self.backend {
            Backend::Files(f) => f.owner_alive(incarnation),
            // Unknown: never resolve what might be alive.
            Backend::Leases(l) => l.owner_alive(incarnation).await.unwrap_or(true),
            Backend::Alone => false,
        }
    }

    /// Drop every lock this process holds, the liveness lock last: after
    /// this, other processes see it as gone. Leases need storage writes, so
    /// they are given back by `close`; dropped unclosed, they lapse.
    pub fn release_all(&self) {
        if let Backend::Files(f) = &self.backend {
            f.release_all(&self.incarnation);
        }
    }

    /// Release everything, leases included.
    pub async fn close(&self) {
        match &self.backend {
            Backend::Files(f) => f.release_all(&self.incarnation),
            Backend::Leases(l) => l.close().await,
            Backend::Alone => {}
        }
    }
}

impl FileLocks {
    fn new(root: PathBuf, incarnation: &str) -> std::io::Result<Self> {
        let locks = Self {
            root,
            liveness: Mutex::new(None),
            held: Mutex::new(HashMap::new()),
        };
        locks.sweep_dead_owners();
        if let Some(path) = locks.owner_path(incarnation) {
            let f = open_lock_file(&path)?;
            if !try_mode(&f, GateMode::Exclusive)? {
                return Err(std::io::Error::other(format!(
                    "liveness lock {} is held by another process",
                    path.display()
                )));
            }
            *locks.liveness.lock() = Some(f);
        }
        Ok(locks)
    }

    fn owner_path(&self, incarnation: &str) -> Option<PathBuf> {
        valid_incarnation(incarnation).then(|| {
            self.root
                .join("_graph/owners")
                .join(format!("{incarnation}.lock"))
        })
    }

    async fn lock(
        &self,
        gate: &Addr,
        mode: GateMode,
        wait_limit: Duration,
    ) -> std::result::Result<(), String> {
        let name = gate_file(gate);
        let (file, was_held) = {
            let mut held = self.held.lock();
            match held.remove(&name) {
                Some(f) => (f, true),
                None => (
                    open_lock_file(&self.root.join("_graph/locks").join(&name))
                        .map_err(|e| format!("cannot open the lock of {}: {e}", describe(gate)))?,
                    false,
                ),
            }
        };
        let start = Instant::now();
        let mut pause = LOCK_POLL_FIRST;
        loop {
            match try_mode(&file, mode) {
                Ok(true) => {
                    self.held.lock().insert(name, file);
                    return Ok(());
                }
                Ok(false) if start.elapsed() < wait_limit => {}
                outcome => {
                    if was_held {
                        // A failed upgrade keeps the weaker lock it had.
                        self.held.lock().insert(name, file);
                    }
                    return Err(match outcome {
                        Err(e) => format!("cannot lock {}: {e}", describe(gate)),
                        _ => format!(
                            "{}, held by another process for more than {} ms",
                            describe(gate),
                            wait_limit.as_millis()
                        ),
                    });
                }
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(LOCK_POLL_MAX);
        }
    }

    fn unlock(&self, gate: &Addr) {
        if let Some(f) = self.held.lock().remove(&gate_file(gate)) {
            // Closing the file would release it too; say so explicitly.
            let _ = f.unlock();
        }
    }

    /// Only a liveness lock someone holds says alive.
    fn owner_alive(&self, incarnation: &str) -> bool {
        let Some(path) = self.owner_path(incarnation) else {
            return false;
        };
        let Ok(f) = OpenOptions::new().read(true).write(true).open(&path) else {
            return false;
        };
        match try_mode(&f, GateMode::Exclusive) {
            Ok(true) => {
                // Its process is gone: the file is garbage now.
                let _ = f.unlock();
                let _ = std::fs::remove_file(&path);
                false
            }
            Ok(false) => true,
            // Unknown: never resolve what might be alive.
            Err(_) => true,
        }
    }

    /// Remove the liveness files of processes that are gone (a killed
    /// process cannot remove its own).
    fn sweep_dead_owners(&self) {
        let Ok(entries) = std::fs::read_dir(self.root.join("_graph/owners")) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if let Some(inc) = name.strip_suffix(".lock") {
                // Removes the file when its owner is gone.
                self.owner_alive(inc);
            }
        }
    }

    fn release_all(&self, incarnation: &str) {
        self.held.lock().clear();
        if let Some(f) = self.liveness.lock().take() {
            let _ = f.unlock();
            if let Some(path) = self.owner_path(incarnation) {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

impl Drop for ProcessLocks {
    fn drop(&mut self) {
        self.release_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use omnigraph_actors::TableKey;

    async fn locks_at(uri: &str, incarnation: &str) -> ProcessLocks {
        let store = Store::open(&crate::storage::requests::StorageSession::default(), uri)
            .await
            .expect("store");
        ProcessLocks::new(&store, incarnation.into())
            .await
            .expect("locks")
    }

    fn dir() -> tempfile::TempDir {
        tempfile::tempdir().expect("tempdir")
    }

    #[test]
    fn gate_file_names_are_safe_and_distinct() {
        let a = gate_file(&Addr::Branch("feature/x".into()));
        let b = gate_file(&Addr::Branch("feature%2fx".into()));
        assert_eq!(a, "branch-feature%2fx.lock");
        assert_ne!(a, b);
        assert!(!gate_file(&Addr::Table(TableKey::new("a/b", "node:T"))).contains('/'));
    }

    #[tokio::test]
    async fn a_gate_held_by_another_holder_is_waited_for_then_refused_by_name() {
        let d = dir();
        let uri = d.path().to_string_lossy().to_string();
        let a = locks_at(&uri, "A").await;
        let b = locks_at(&uri, "B")
            .await
            .with_wait_limit(Duration::from_millis(30));
        let gate = Addr::Branch("main".into());
        a.lock(&gate, GateMode::Exclusive).await.unwrap();
        let err = b.lock(&gate, GateMode::Exclusive).await.unwrap_err();
        assert!(err.contains("the gate of branch 'main'"), "{err}");
        assert!(err.contains("held by another process"), "{err}");
        a.unlock(&gate).await;
        b.lock(&gate, GateMode::Exclusive).await.unwrap();
    }

    #[tokio::test]
    async fn shared_locks_coexist_and_keep_an_exclusive_one_out() {
        let d = dir();
        let uri = d.path().to_string_lossy().to_string();
        let a = locks_at(&uri, "A").await;
        let b = locks_at(&uri, "B")
            .await
            .with_wait_limit(Duration::from_millis(20));
        a.lock(&Addr::Schema, GateMode::Shared).await.unwrap();
        b.lock(&Addr::Schema, GateMode::Shared).await.unwrap();
        b.unlock(&Addr::Schema).await;
        assert!(b.lock(&Addr::Schema, GateMode::Exclusive).await.is_err());
    }

    #[tokio::test]
    async fn liveness_follows_the_owner() {
        let d = dir();
        let uri = d.path().to_string_lossy().to_string();
        let me = locks_at(&uri, "ME").await;
        let other = locks_at(&uri, "OTHER").await;
        assert!(me.owner_alive("ME").await);
        assert!(me.owner_alive("OTHER").await);
        drop(other);
        assert!(!me.owner_alive("OTHER").await);
        // Never written, or not a valid incarnation: gone.
        assert!(!me.owner_alive("NEVER").await);
        assert!(!me.owner_alive("").await);
        assert!(!me.owner_alive("../x").await);
    }

    #[tokio::test]
    async fn an_open_sweeps_the_liveness_files_of_dead_processes_only() {
        let d = dir();
        let uri = d.path().to_string_lossy().to_string();
        let owners = d.path().join("_graph/owners");
        let live = locks_at(&uri, "LIVE").await;
        // A process that was killed leaves its file behind.
        std::fs::write(owners.join("KILLED.lock"), b"").unwrap();
        let _me = locks_at(&uri, "ME").await;
        let mut left: Vec<String> = std::fs::read_dir(&owners)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().to_string())
            .collect();
        left.sort();
        assert_eq!(left, vec!["LIVE.lock", "ME.lock"]);
        drop(live);
    }

    #[tokio::test]
    async fn a_graph_in_memory_has_no_other_processes() {
        let l = locks_at("memory://g", "ME").await;
        let other = locks_at("memory://g", "OTHER").await;
        // Only in-process gates apply: both take the same gate at once.
        let gate = Addr::Branch("main".into());
        l.lock(&gate, GateMode::Exclusive).await.unwrap();
        other.lock(&gate, GateMode::Exclusive).await.unwrap();
        assert!(!l.owner_alive("OTHER").await);
    }
}
