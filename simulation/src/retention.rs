//! The simulated storage's side of version retention: what the cleaner's
//! listings show, what its removals do (as Lance's cleanup does: a table
//! line loses its versions below a floor and the data files only they
//! referenced), and the invariants that a cleanup must never break.

use std::collections::{BTreeMap, BTreeSet};

use omnigraph_actors::cleaner::{
    BranchAt, GraphVersion, IntentBases, LineAt, LineVersions, Unreferenced,
};

use crate::world::{Proc, World};

/// How the cleaner spells a physical table line.
fn line(lance: &str, table: &str) -> String {
    format!("{lance}/{table}")
}

impl World {
    /// Stamp the graph versions published during this step with its tick.
    pub fn stamp_versions(&mut self) {
        for m in &self.manifests {
            self.written.entry(m.version).or_insert(self.now);
        }
    }

    /// The graph versions on storage.
    pub fn version_listing(&self) -> Vec<GraphVersion> {
        self.manifests
            .iter()
            .filter(|m| !self.expired.contains(&m.version))
            .map(|m| GraphVersion {
                version: m.version,
                written_ms: self.written.get(&m.version).copied().unwrap_or(self.now),
                bytes: 1,
                carries: m.carries.as_ref().map(|c| c.0.clone()),
                branches: m
                    .branches
                    .iter()
                    .map(|(name, r)| {
                        let tables = r
                            .tables
                            .iter()
                            .map(|(t, at)| LineAt {
                                line: line(&at.lance, t),
                                version: at.version,
                            })
                            .collect();
                        let b = BranchAt {
                            head: r.head.0.clone(),
                            updated_at: r.updated_at,
                            tables,
                        };
                        (name.clone(), b)
                    })
                    .collect(),
            })
            .collect()
    }

    /// Every sidecar's table bases (on its branch's own line) and the graph
    /// versions its resolution reads.
    pub fn intent_listing(&self) -> Vec<IntentBases> {
        self.sidecars
            .values()
            .map(|(i, _)| {
                let bases = i
                    .tables
                    .iter()
                    .filter_map(|t| {
                        let rec = self.latest().branches.get(&t.table.branch)?;
                        let own = rec.line(&t.table.branch, &t.table.table);
                        Some(LineAt {
                            line: line(&own, &t.table.table),
                            version: t.base,
                        })
                    })
                    .collect();
                let mut versions = vec![i.expected.version];
                versions.extend(i.merge.as_ref().map(|m| m.head.version));
                IntentBases {
                    op: i.op.0.clone(),
                    bases,
                    versions,
                }
            })
            .collect()
    }

    pub fn line_listing(&self) -> Vec<LineVersions> {
        self.tables
            .iter()
            .map(|((l, t), h)| LineVersions {
                line: line(l, t),
                versions: h.keys().copied().collect(),
            })
            .collect()
    }

    /// Every data file some table version on storage references.
    fn referenced(&self) -> BTreeSet<String> {
        self.tables
            .iter()
            .flat_map(|((l, t), h)| h.keys().flat_map(move |v| self.lineage_of(l, t, *v)))
            .filter(|txn| self.data_written.contains(txn))
            .collect()
    }

    /// The data files no table version references, with their times.
    pub fn unreferenced_listing(&self) -> Vec<Unreferenced> {
        let referenced = self.referenced();
        self.data
            .iter()
            .filter(|(f, _)| !referenced.contains(*f))
            .map(|(f, (_, at))| Unreferenced {
                path: f.clone(),
                written_ms: *at,
                bytes: 1,
            })
            .collect()
    }

    /// Remove each line's versions below its floor, then the data files
    /// only removed versions referenced: (versions, files) removed.
    pub fn trim(&mut self, floors: &[LineAt]) -> (u64, u64) {
        let before = self.referenced();
        let mut freed = BTreeSet::new();
        let mut versions = 0;
        for f in floors {
            let Some((l, t)) = f.line.split_once('/') else {
                continue;
            };
            let key = (l.to_string(), t.to_string());
            let Some(h) = self.tables.get_mut(&key) else {
                continue;
            };
            let gone: Vec<u64> = h.range(..f.version).map(|(v, _)| *v).collect();
            h.retain(|v, _| *v >= f.version);
            for v in gone {
                freed.extend(self.lineage_of(&key.0, &key.1, v));
                self.removed_table_versions
                    .insert((key.0.clone(), key.1.clone(), v));
                versions += 1;
            }
        }
        let after = match self.bugs.cleanup_frees_shared_files() {
            true => before.difference(&freed).cloned().collect(),
            false => self.referenced(),
        };
        let mut files = 0;
        for f in before.difference(&after) {
            files += u64::from(self.data.remove(f).is_some());
        }
        (versions, files)
    }

    /// Is this table version missing because a cleanup removed it? (A
    /// line dropped and made again has its early versions anew.)
    pub fn trimmed(&self, lance: &str, table: &str, version: u64) -> bool {
        self.content(lance, table, version).is_none()
            && self.removed_table_versions.contains(&(
                lance.to_string(),
                table.to_string(),
                version,
            ))
    }

    /// Process `p` stages the data files of these transactions now.
    pub fn stage_files(&mut self, p: Proc, txns: impl Iterator<Item = String>) {
        for txn in txns {
            self.data.insert(txn.clone(), (p, self.now));
            self.data_written.insert(txn);
        }
    }

    /// The start of every process that may still commit a file, as `p`
    /// judges now: itself, and every other that lives (a lapsed lease is
    /// taken over and fenced, as recovery and gc judge; a dry run takes
    /// no one over and counts a lapsed lease as gone).
    pub fn live_writers(&mut self, p: Proc, dry_run: bool) -> Vec<u64> {
        let others: Vec<Proc> = self.alive.iter().copied().filter(|q| *q != p).collect();
        let mut started = vec![self.started.get(&p).copied().unwrap_or(0)];
        for q in others {
            let alive = match dry_run {
                true => !self.gone_for(p, q),
                false => self.judge_alive(p, q, true),
            };
            if alive {
                started.push(self.started.get(&q).copied().unwrap_or(0));
            }
        }
        // A process whose intent is unresolved may still have its staged
        // files referenced: recovery rolls the intent forward when its
        // table commits landed (one of them late, after a takeover).
        for (_, q) in self.sidecars.values() {
            started.push(self.started.get(q).copied().unwrap_or(0));
        }
        started
    }

    /// Does an intent's table still need its base: its transaction landed
    /// above it (a roll back restores the base), or may still land (the
    /// version after the base was never written, and a commit is pinned to
    /// land exactly there)? A taken-over writer that wakes after a cleanup
    /// can record an intent whose base is gone, but nothing of it can land
    /// over the versions written since, so nothing needs that base.
    fn may_land(&self, own: &str, t: &omnigraph_actors::IntentTable) -> bool {
        let key = (own.to_string(), t.table.table.clone());
        let history = self.tables.get(&key);
        let landed = history.is_some_and(|h| {
            h.range(t.base + 1..)
                .any(|(_, (_, txn))| txn.as_deref() == Some(t.txn.as_str()))
        });
        let next = t.base + 1;
        let next_written = history.is_some_and(|h| h.contains_key(&next))
            || self
                .removed_table_versions
                .contains(&(key.0.clone(), key.1.clone(), next));
        landed || !next_written
    }

    /// Retention's invariants, after every step:
    /// - every branch head stays readable: the newest graph version and the
    ///   table versions it names are on storage;
    /// - an unresolved intent's base stays while the intent may need it
    ///   (see `may_land`), so recovery can restore it;
    /// - a table version keeps every data file it references (a taken-over
    ///   writer's late commit excepted: it is never published, and the next
    ///   gate holder sweeps it).
    pub fn retention_violation(&self) -> Option<(&'static str, String)> {
        let latest = self.latest();
        if self.expired.contains(&latest.version) {
            return Some((
                "every branch head stays readable",
                format!("the newest graph version {} was removed", latest.version),
            ));
        }
        for (name, rec) in &latest.branches {
            if self.expired.contains(&rec.updated_at) {
                return Some((
                    "every branch head stays readable",
                    format!(
                        "branch {name}'s head version {} was removed",
                        rec.updated_at
                    ),
                ));
            }
            for (t, r) in &rec.tables {
                if self.trimmed(&r.lance, t, r.version) {
                    return Some((
                        "every branch head stays readable",
                        format!(
                            "branch {name}'s {t} @ {}/{} was removed",
                            r.lance, r.version
                        ),
                    ));
                }
            }
        }
        for (intent, _) in self.sidecars.values() {
            for t in &intent.tables {
                let Some(rec) = latest.branches.get(&t.table.branch) else {
                    continue;
                };
                let own = rec.line(&t.table.branch, &t.table.table);
                if self.trimmed(&own, &t.table.table, t.base) && self.may_land(&own, t) {
                    return Some((
                        "an unresolved intent's base stays until it is resolved",
                        format!(
                            "{:?} may restore {} @ {own}/{}, which a cleanup removed",
                            intent.op, t.table.table, t.base
                        ),
                    ));
                }
            }
        }
        let lost: BTreeMap<_, _> = self
            .tables
            .iter()
            .flat_map(|((l, t), h)| h.keys().map(move |v| (l, t, *v)))
            .filter(|(l, t, v)| !self.late_effect(l, t, *v))
            .flat_map(|(l, t, v)| {
                self.lineage_of(l, t, v)
                    .into_iter()
                    .filter(|f| self.data_written.contains(f) && !self.data.contains_key(f))
                    .map(move |f| ((l.clone(), t.clone(), v), f))
            })
            .take(1)
            .collect();
        lost.into_iter().next().map(|(at, f)| {
            (
                "a table version keeps every data file it references",
                format!("{at:?} references {f}, which a cleanup removed"),
            )
        })
    }
}
