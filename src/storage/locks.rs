//! Cross-process locks of one process on one graph: the gate locks that make
//! the protocol's gates hold across processes, and the liveness lock that
//! tells other processes this process (and so its recovery intents) is alive.
//!
//! On a local path both are OS file locks (`flock`) under `_graph/locks/`
//! and `_graph/owners/`: the kernel drops them when the process dies, however
//! it dies, so a free liveness lock proves its owner is gone. Waiting for a
//! gate lock polls with backoff up to a named time limit, then fails naming
//! the gate. A `memory://` graph lives in one process, where the in-process
//! gates are enough. Object stores have no locks; see docs/architecture.md.

use std::collections::HashMap;
use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use omnigraph_actors::limits::GATE_WAIT_LIMIT_MS;
use omnigraph_actors::{Addr, GateMode};

/// First and longest pause between two tries of a held gate lock.
const LOCK_POLL_FIRST: Duration = Duration::from_micros(200);
const LOCK_POLL_MAX: Duration = Duration::from_millis(20);

pub struct ProcessLocks {
    /// The graph's folder, when it is on a local path.
    root: Option<PathBuf>,
    /// This process's incarnation: stamped into every sidecar it writes.
    incarnation: String,
    /// The liveness lock, held for as long as this value lives.
    liveness: Mutex<Option<File>>,
    held: Mutex<HashMap<String, File>>,
    wait_limit: Duration,
}

/// A file name for a gate: stable, and safe for any branch or table name.
fn gate_file(gate: &Addr) -> String {
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
    format!("{safe}.lock")
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

impl ProcessLocks {
    /// Locks for the graph at `uri`; on a local path this takes the
    /// process's liveness lock at once.
    pub fn new(uri: &str, incarnation: String) -> std::io::Result<Self> {
        let root = (!uri.contains("://")).then(|| PathBuf::from(uri));
        let locks = Self {
            root,
            incarnation,
            liveness: Mutex::new(None),
            held: Mutex::new(HashMap::new()),
            wait_limit: Duration::from_millis(GATE_WAIT_LIMIT_MS),
        };
        locks.sweep_dead_owners();
        if let Some(path) = locks.owner_path(&locks.incarnation) {
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

    /// Shorten the gate wait limit (tests of the limit itself).
    pub fn with_wait_limit(mut self, limit: Duration) -> Self {
        self.wait_limit = limit;
        self
    }

    pub fn incarnation(&self) -> &str {
        &self.incarnation
    }

    fn owner_path(&self, incarnation: &str) -> Option<PathBuf> {
        let root = self.root.as_ref()?;
        let ok = !incarnation.is_empty() && incarnation.chars().all(|c| c.is_ascii_alphanumeric());
        ok.then(|| {
            root.join("_graph/owners")
                .join(format!("{incarnation}.lock"))
        })
    }

    /// Take (or strengthen to `mode`) this process's lock on `gate`, waiting
    /// while another process holds it, up to the wait limit.
    pub async fn lock(&self, gate: &Addr, mode: GateMode) -> Result<(), String> {
        let Some(root) = &self.root else {
            return Ok(());
        };
        let name = gate_file(gate);
        let (file, was_held) = {
            let mut held = self.held.lock();
            match held.remove(&name) {
                Some(f) => (f, true),
                None => (
                    open_lock_file(&root.join("_graph/locks").join(&name))
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
                Ok(false) if start.elapsed() < self.wait_limit => {}
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
                            self.wait_limit.as_millis()
                        ),
                    });
                }
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(LOCK_POLL_MAX);
        }
    }

    /// Give up this process's lock on `gate`.
    pub fn unlock(&self, gate: &Addr) {
        if let Some(f) = self.held.lock().remove(&gate_file(gate)) {
            // Closing the file would release it too; say so explicitly.
            let _ = f.unlock();
        }
    }

    /// Is the process that stamped a sidecar with `incarnation` alive? Only
    /// a liveness lock someone holds says yes. A graph that no other process
    /// can reach has no other live writers.
    pub fn owner_alive(&self, incarnation: &str) -> bool {
        if incarnation == self.incarnation {
            return true;
        }
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
    /// process cannot remove its own). Runs once per read-write open, off
    /// every write's path.
    fn sweep_dead_owners(&self) {
        let Some(root) = &self.root else {
            return;
        };
        let Ok(entries) = std::fs::read_dir(root.join("_graph/owners")) else {
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

    /// Drop every lock this process holds, the liveness lock last: after
    /// this, other processes see it as gone.
    pub fn release_all(&self) {
        self.held.lock().clear();
        if let Some(f) = self.liveness.lock().take() {
            let _ = f.unlock();
            if let Some(path) = self.owner_path(&self.incarnation) {
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
        let a = ProcessLocks::new(&uri, "A".into()).unwrap();
        let b = ProcessLocks::new(&uri, "B".into())
            .unwrap()
            .with_wait_limit(Duration::from_millis(30));
        let gate = Addr::Branch("main".into());
        a.lock(&gate, GateMode::Exclusive).await.unwrap();
        let err = b.lock(&gate, GateMode::Exclusive).await.unwrap_err();
        assert!(err.contains("the gate of branch 'main'"), "{err}");
        assert!(err.contains("held by another process"), "{err}");
        a.unlock(&gate);
        b.lock(&gate, GateMode::Exclusive).await.unwrap();
    }

    #[tokio::test]
    async fn shared_locks_coexist_and_keep_an_exclusive_one_out() {
        let d = dir();
        let uri = d.path().to_string_lossy().to_string();
        let a = ProcessLocks::new(&uri, "A".into()).unwrap();
        let b = ProcessLocks::new(&uri, "B".into())
            .unwrap()
            .with_wait_limit(Duration::from_millis(20));
        a.lock(&Addr::Schema, GateMode::Shared).await.unwrap();
        b.lock(&Addr::Schema, GateMode::Shared).await.unwrap();
        b.unlock(&Addr::Schema);
        assert!(b.lock(&Addr::Schema, GateMode::Exclusive).await.is_err());
    }

    #[test]
    fn liveness_follows_the_owner() {
        let d = dir();
        let uri = d.path().to_string_lossy().to_string();
        let me = ProcessLocks::new(&uri, "ME".into()).unwrap();
        let other = ProcessLocks::new(&uri, "OTHER".into()).unwrap();
        assert!(me.owner_alive("ME"));
        assert!(me.owner_alive("OTHER"));
        drop(other);
        assert!(!me.owner_alive("OTHER"));
        // Never written, or not a valid incarnation: gone.
        assert!(!me.owner_alive("NEVER"));
        assert!(!me.owner_alive(""));
        assert!(!me.owner_alive("../x"));
    }

    #[test]
    fn an_open_sweeps_the_liveness_files_of_dead_processes_only() {
        let d = dir();
        let uri = d.path().to_string_lossy().to_string();
        let owners = d.path().join("_graph/owners");
        let live = ProcessLocks::new(&uri, "LIVE".into()).unwrap();
        // A process that was killed leaves its file behind.
        std::fs::write(owners.join("KILLED.lock"), b"").unwrap();
        let _me = ProcessLocks::new(&uri, "ME".into()).unwrap();
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
        let l = ProcessLocks::new("memory://g", "ME".into()).unwrap();
        let other = ProcessLocks::new("memory://g", "OTHER".into()).unwrap();
        // Only in-process gates apply: both take the same gate at once.
        let gate = Addr::Branch("main".into());
        l.lock(&gate, GateMode::Exclusive).await.unwrap();
        other.lock(&gate, GateMode::Exclusive).await.unwrap();
        assert!(!l.owner_alive("OTHER"));
    }
}
