//! Where a read of one table version comes from in this process: memory it
//! already holds, or storage, and then just the rows the query needs or
//! the whole column (or id index), kept for the queries after it. One
//! decision for every read of a node type's ids and columns (a key lookup,
//! the ids a traversal starts from or ends at, the values a projection
//! takes), made per table version: the first query that reads a version
//! cold reads only its rows, so a fresh process pays for nothing it will
//! not use; a later query on the same version loads what it reads whole,
//! so a warm process answers from memory. `--explain` and `--profile` show
//! each decision with its reason.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use parking_lot::Mutex;

use super::cache::{Key, Phys, RuntimeCache};

/// More rows than this are read whole even on a first read: past it the
/// whole column is cheaper than looking rows up one by one.
pub const ROWS_MAX: usize = 4096;

/// Queries that read a table version cold before one loads what it reads
/// whole: the second query on a version is the sign of a repeated workload.
pub const COLD_QUERIES_BEFORE_LOAD: u32 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// In this process's memory already.
    Held,
    /// Just the rows the query needs, from storage (or a persisted file).
    Rows,
    /// The whole column or id index, from storage, kept for later queries.
    Whole,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    Held,
    /// No earlier query of this process read the version.
    FirstRead,
    /// This many earlier queries read the version cold.
    ReadBefore(u32),
    /// The query needs this many rows.
    ManyRows(usize),
    /// Held: an earlier version's, with this many rows changed since
    /// (`carry`).
    Carried(usize),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    pub reach: Reach,
    pub why: Why,
}

/// The rule: held stays held; many rows are read whole; a version read
/// cold by earlier queries is loaded whole; else just the rows.
pub fn decide(held: bool, earlier_cold_queries: u32, rows: usize) -> Decision {
    let (reach, why) = if held {
        (Reach::Held, Why::Held)
    } else if rows > ROWS_MAX {
        (Reach::Whole, Why::ManyRows(rows))
    } else if earlier_cold_queries >= COLD_QUERIES_BEFORE_LOAD {
        (Reach::Whole, Why::ReadBefore(earlier_cold_queries))
    } else {
        (Reach::Rows, Why::FirstRead)
    };
    Decision { reach, why }
}

impl Decision {
    /// What it reads and why, as `--explain` and `--profile` print it.
    pub fn text(&self) -> String {
        match (self.reach, self.why) {
            (Reach::Held, Why::Carried(n)) => format!(
                "held in memory: an earlier version's, with the {n} {} changed since",
                if n == 1 { "row" } else { "rows" }
            ),
            (Reach::Held, _) => "held in memory".into(),
            (Reach::Rows, _) => {
                "only the rows needed, from storage (first read of this table version in this process)"
                    .into()
            }
            (Reach::Whole, Why::ManyRows(n)) => {
                format!("read whole and kept ({n} rows needed)")
            }
            (Reach::Whole, Why::ReadBefore(n)) => format!(
                "read whole and kept ({n} earlier {} read this table version from storage)",
                if n == 1 { "query" } else { "queries" }
            ),
            (Reach::Whole, _) => "read whole and kept".into(),
        }
    }
}

/// How many queries read one table version cold (its entry in the cache,
/// so it goes with the version's other entries).
#[derive(Default)]
pub struct ColdReads(AtomicU32);

/// One query's view of the counts: a query counts once per table version,
/// however many of its columns it reads, and every read of the version in
/// the query is decided on the count as it stood when the query began
/// reading it.
#[derive(Default)]
pub struct QueryReads {
    counted: Mutex<HashMap<Phys, u32>>,
    /// Every decision of the query, for `--profile`: (type, column, how).
    pub log: Mutex<Vec<(String, String, Decision)>>,
}

impl QueryReads {
    /// Earlier queries that read `phys` cold; counts this query as one,
    /// once, when `count` (a run, not an explain).
    pub fn earlier(&self, cache: &RuntimeCache, phys: &Phys, count: bool) -> u32 {
        if let Some(n) = self.counted.lock().get(phys) {
            return *n;
        }
        let key = Key::ColdReads(phys.clone());
        let reads = cache.get::<ColdReads>(&key).unwrap_or_else(|| {
            let fresh = Arc::new(ColdReads::default());
            // Bookkeeping, not data: it takes no share of the budget.
            cache.put(key, fresh.clone(), 0);
            fresh
        });
        if !count {
            return reads.0.load(Ordering::Relaxed);
        }
        let n = reads.0.fetch_add(1, Ordering::Relaxed);
        self.counted.lock().insert(phys.clone(), n);
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::cache::tests::phys;

    #[test]
    fn a_first_read_takes_rows_a_repeated_one_loads_and_held_stays_held() {
        assert_eq!(decide(false, 0, 1).reach, Reach::Rows);
        assert_eq!(
            decide(false, 1, 1),
            Decision {
                reach: Reach::Whole,
                why: Why::ReadBefore(1)
            }
        );
        assert_eq!(
            decide(false, 0, ROWS_MAX + 1),
            Decision {
                reach: Reach::Whole,
                why: Why::ManyRows(ROWS_MAX + 1)
            }
        );
        assert_eq!(decide(false, 0, ROWS_MAX).reach, Reach::Rows);
        assert_eq!(decide(true, 0, ROWS_MAX + 1).reach, Reach::Held);
        assert_eq!(decide(true, 5, 1).reach, Reach::Held);
    }

    #[test]
    fn a_query_counts_once_per_version_and_an_explain_not_at_all() {
        let cache = RuntimeCache::new(1 << 20);
        let first = QueryReads::default();
        assert_eq!(first.earlier(&cache, &phys(1), true), 0);
        // Its other columns of the same version: still its first read.
        assert_eq!(first.earlier(&cache, &phys(1), true), 0);
        assert_eq!(first.earlier(&cache, &phys(2), true), 0);
        let explain = QueryReads::default();
        assert_eq!(explain.earlier(&cache, &phys(1), false), 1);
        assert_eq!(explain.earlier(&cache, &phys(1), false), 1);
        let second = QueryReads::default();
        assert_eq!(second.earlier(&cache, &phys(1), true), 1);
        assert_eq!(QueryReads::default().earlier(&cache, &phys(1), true), 2);
        assert_eq!(QueryReads::default().earlier(&cache, &phys(3), true), 0);
    }
}
