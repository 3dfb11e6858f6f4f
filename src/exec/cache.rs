//! The runtime cache of derived read structures: node id mappings, whole
//! columns and graph indexes. Entries are keyed by the physical identity of
//! the table versions they were built from (graph, folder, Lance branch,
//! version), never by snapshot, so another snapshot or a branch that still
//! shares a table reuses them. Bounded in bytes; least recently used first out.

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::storage::manifest::TableRef;

/// The bytes of one table version: enough to name it anywhere.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Phys {
    pub graph: String,
    pub dir: String,
    pub lance_branch: Option<String>,
    pub version: u64,
}

impl Phys {
    pub fn of(graph: &str, t: &TableRef) -> Self {
        Self {
            graph: graph.to_string(),
            dir: t.dir.clone(),
            lance_branch: t.lance_branch.clone(),
            version: t.version,
        }
    }

    /// The table line this version is on: every version of it, any version.
    pub fn line(&self) -> Phys {
        Phys {
            version: 0,
            ..self.clone()
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Key {
    Ids(Phys),
    Column(Phys, String),
    /// An edge type's adjacency depends on its own rows and on the dense
    /// numbering of both endpoint tables.
    Graph {
        edge: Phys,
        from: Phys,
        to: Phys,
    },
    /// The latest adjacency this process built of an edge table (folder),
    /// with the rows it was built from: what later versions carry forward.
    GraphBase {
        graph: String,
        dir: String,
    },
    /// Marks an edge table version whose edges were once read by probing a
    /// few sources instead of building its index; the next traversal of it
    /// builds the index, since a repeated workload pays for it quickly.
    Probed(Phys),
    /// The inverted index of one String column.
    Text(Phys, String),
    /// The row lengths of one Vector column.
    Norms(Phys, String),
    /// A table version's fragments and deletions.
    Layout(Phys),
    /// A persisted index file, decoded (files never change once written).
    IndexFile {
        graph: String,
        file: String,
    },
    /// A Vector column's index partitions over one table version.
    Partitions(Phys, String),
    /// How many queries read a table version cold (`residency`).
    ColdReads(Phys),
    /// Where this process last held a node table's ids or one column
    /// whole (`carry`): the line ([`Phys::line`]) or, with `any_line`, the
    /// table on any branch; and the column.
    NodeBase {
        line: Phys,
        column: String,
        any_line: bool,
    },
    /// A node table version as a base version (the second) with the rows
    /// changed since (`carry`).
    NodeDelta(Phys, Phys),
    /// The gate of the entry at this key while one reader makes it
    /// (`RuntimeCache::making`).
    Making(Box<Key>),
    /// The latest version of a node table line ([`Phys::line`]) carried
    /// from a base version (the second): what the next carries from.
    NodeTip(Phys, Phys),
}

struct Entry {
    value: Arc<dyn Any + Send + Sync>,
    bytes: usize,
    last_used: u64,
}

#[derive(Default)]
struct Inner {
    map: HashMap<Key, Entry>,
    used: usize,
    clock: u64,
}

/// Counters that show what the cache did (reported by `query --stats` and
/// the benchmarks).
#[derive(Default, Debug)]
pub struct CacheStats {
    pub graph_builds: AtomicU64,
    pub graph_hits: AtomicU64,
    pub edge_probes: AtomicU64,
    pub graph_opens: AtomicU64,
    pub graph_persisted: AtomicU64,
    pub graph_overlays: AtomicU64,
    pub graph_remaps: AtomicU64,
    pub graph_merges: AtomicU64,
    pub graph_build_edges: AtomicU64,
    pub graph_build_micros: AtomicU64,
    pub column_loads: AtomicU64,
    pub text_builds: AtomicU64,
    pub evictions: AtomicU64,
    /// Point reads that found their row through a persisted id order.
    pub id_order_reads: AtomicU64,
    /// Node table versions carried from a base (`carry`).
    pub node_carries: AtomicU64,
    /// Of those, carried from the version carried before them.
    pub node_carries_chained: AtomicU64,
    /// Carries that took a version's appended rows from this process's
    /// writer of it instead of reading them.
    pub rows_handed: AtomicU64,
}

impl CacheStats {
    pub fn snapshot(&self) -> serde_json::Value {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        serde_json::json!({
            "graph_index_builds": g(&self.graph_builds),
            "graph_index_hits": g(&self.graph_hits),
            "edge_probes": g(&self.edge_probes),
            "graph_index_opens": g(&self.graph_opens),
            "graph_index_persisted": g(&self.graph_persisted),
            "graph_index_overlays": g(&self.graph_overlays),
            "graph_index_remaps": g(&self.graph_remaps),
            "graph_index_merges": g(&self.graph_merges),
            "graph_index_edges_built": g(&self.graph_build_edges),
            "graph_index_build_ms": g(&self.graph_build_micros) as f64 / 1000.0,
            "column_loads": g(&self.column_loads),
            "text_builds": g(&self.text_builds),
            "evictions": g(&self.evictions),
            "id_order_reads": g(&self.id_order_reads),
            "node_carries": g(&self.node_carries),
            "node_carries_chained": g(&self.node_carries_chained),
            "rows_handed": g(&self.rows_handed),
        })
    }
}

/// A held gate of [`RuntimeCache::making`].
pub struct Making<'a> {
    cache: &'a RuntimeCache,
    key: Key,
    gate: Arc<tokio::sync::Mutex<()>>,
    _held: tokio::sync::OwnedMutexGuard<()>,
}

impl Drop for Making<'_> {
    fn drop(&mut self) {
        let mut inner = self.cache.inner.lock();
        // Only this gate, and only when no other reader waits on it (one
        // reference here, one held by the lock guard, one in the cache).
        let ours = inner.map.get(&self.key).is_some_and(|e| {
            e.value
                .clone()
                .downcast::<tokio::sync::Mutex<()>>()
                .is_ok_and(|g| Arc::ptr_eq(&g, &self.gate))
        });
        if ours && Arc::strong_count(&self.gate) <= 3 {
            let e = inner.map.remove(&self.key).expect("present");
            inner.used -= e.bytes;
        }
    }
}

pub struct RuntimeCache {
    limit: usize,
    inner: Mutex<Inner>,
    pub stats: CacheStats,
}

/// Default bound of the cache.
pub const DEFAULT_LIMIT: usize = 2 << 30;

impl RuntimeCache {
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            inner: Mutex::new(Inner::default()),
            stats: CacheStats::default(),
        }
    }

    pub fn get<T: Any + Send + Sync>(&self, key: &Key) -> Option<Arc<T>> {
        let mut inner = self.inner.lock();
        inner.clock += 1;
        let now = inner.clock;
        let e = inner.map.get_mut(key)?;
        e.last_used = now;
        e.value.clone().downcast::<T>().ok()
    }

    pub fn put<T: Any + Send + Sync>(&self, key: Key, value: Arc<T>, bytes: usize) {
        let mut inner = self.inner.lock();
        inner.clock += 1;
        self.insert(&mut inner, key, value, bytes);
    }

    /// Put under the lock held: evict least recently used entries until
    /// `bytes` fit.
    fn insert<T: Any + Send + Sync>(
        &self,
        inner: &mut Inner,
        key: Key,
        value: Arc<T>,
        bytes: usize,
    ) {
        let now = inner.clock;
        if let Some(old) = inner.map.remove(&key) {
            inner.used -= old.bytes;
        }
        while inner.used + bytes > self.limit && !inner.map.is_empty() {
            let oldest = inner
                .map
                .iter()
                .min_by_key(|(_, e)| e.last_used)
                .map(|(k, _)| k.clone())
                .expect("non-empty");
            let e = inner.map.remove(&oldest).expect("present");
            inner.used -= e.bytes;
            self.stats.evictions.fetch_add(1, Ordering::Relaxed);
        }
        inner.used += bytes;
        inner.map.insert(
            key,
            Entry {
                value,
                bytes,
                last_used: now,
            },
        );
    }

    /// The entry at `key`, made by `make` and put (with `bytes`) when
    /// there is none, in one step under the lock: callers racing for it
    /// share one. `make` must be cheap (an empty cell to fill).
    pub fn get_or_put<T: Any + Send + Sync>(
        &self,
        key: Key,
        make: impl FnOnce() -> Arc<T>,
        bytes: usize,
    ) -> Arc<T> {
        let mut inner = self.inner.lock();
        inner.clock += 1;
        let now = inner.clock;
        if let Some(e) = inner.map.get_mut(&key)
            && let Ok(v) = e.value.clone().downcast::<T>()
        {
            e.last_used = now;
            return v;
        }
        let v = make();
        self.insert(&mut inner, key, v.clone(), bytes);
        v
    }

    /// Wait for the gate of `key`'s entry: readers that miss the same
    /// entry at once (a thundering herd on a new table version, or a
    /// server's first queries) take turns, so the first makes it and the
    /// others, looking again once they hold the gate, find it made. The
    /// gate goes from the cache when its last holder is done, so a
    /// long-lived process writing new versions keeps none.
    pub async fn making(&self, key: &Key) -> Making<'_> {
        let key = Key::Making(Box::new(key.clone()));
        let gate = self.get_or_put(key.clone(), || Arc::new(tokio::sync::Mutex::new(())), 0);
        let held = gate.clone().lock_owned().await;
        Making {
            cache: self,
            key,
            gate,
            _held: held,
        }
    }

    pub fn used_bytes(&self) -> usize {
        self.inner.lock().used
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Version `v` of one table (the tests of the cache's users share it).
    pub(in crate::exec) fn phys(v: u64) -> Phys {
        Phys {
            graph: "g".into(),
            dir: "t".into(),
            lance_branch: None,
            version: v,
        }
    }

    #[test]
    fn callers_racing_for_an_entry_share_the_first_one_made() {
        let c = RuntimeCache::new(100);
        let a = c.get_or_put(Key::Ids(phys(1)), || Arc::new(1u32), 10);
        let b = c.get_or_put(Key::Ids(phys(1)), || Arc::new(2u32), 10);
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(*b, 1);
        assert_eq!(c.used_bytes(), 10);
    }

    #[tokio::test]
    async fn a_gate_goes_from_the_cache_when_its_last_holder_is_done() {
        let c = Arc::new(RuntimeCache::new(100));
        let key = Key::Ids(phys(1));
        let gate = Key::Making(Box::new(key.clone()));
        let first = c.making(&key).await;
        // A second reader waits on the same gate.
        let waiter = {
            let (c, key) = (c.clone(), key.clone());
            tokio::spawn(async move {
                let _second = c.making(&key).await;
            })
        };
        while Arc::strong_count(&c.get::<tokio::sync::Mutex<()>>(&gate).unwrap()) < 6 {
            tokio::task::yield_now().await;
        }
        drop(first);
        assert!(
            c.get::<tokio::sync::Mutex<()>>(&gate).is_some(),
            "a reader still waits on it"
        );
        waiter.await.unwrap();
        assert!(c.get::<tokio::sync::Mutex<()>>(&gate).is_none());
    }

    #[test]
    fn bounded_and_least_recently_used_first_out() {
        let c = RuntimeCache::new(100);
        c.put(Key::Ids(phys(1)), Arc::new(1u32), 60);
        c.put(Key::Ids(phys(2)), Arc::new(2u32), 30);
        assert_eq!(*c.get::<u32>(&Key::Ids(phys(1))).unwrap(), 1);
        c.put(Key::Ids(phys(3)), Arc::new(3u32), 30); // evicts 2 (least recent)
        assert!(c.get::<u32>(&Key::Ids(phys(2))).is_none());
        assert!(c.get::<u32>(&Key::Ids(phys(1))).is_some());
        assert!(c.used_bytes() <= 100);
        assert!(
            c.get::<String>(&Key::Ids(phys(1))).is_none(),
            "wrong type is a miss"
        );
    }
}
