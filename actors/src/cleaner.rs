//! Version retention as a plain state machine: which graph versions a
//! retention rule keeps, which table versions and files go with the others,
//! and the order of the requests that makes removing them safe beside
//! writers, readers and recoveries in other processes. Its host answers one
//! request at a time (production with Lance, the simulator with its model).
//!
//! The order is the protocol:
//! 1. List the graph versions, then every table line's versions, then the
//!    unresolved intents. A version published after the listing is newer
//!    than everything it lists and names only table versions at or above
//!    what the listed heads name (a branch is created from its source as
//!    it is at the publish), so it is never touched. A table commit follows
//!    its writer's intent: a line listed with a commit above what the
//!    graph versions name has its intent in the later listing, and a line
//!    created after its listing (a fork) is not trimmed at all.
//! 2. Record the commits the removed graph versions carried (history stays
//!    listable), then remove those graph versions, then trim each table line
//!    below its floor: the oldest version a kept graph version names, an
//!    intent's base, or the line's latest. A graph version is always gone
//!    before any table version it named, so no readable version ever names
//!    a removed table version.
//! 3. Files no table version references: list them, judge who may still
//!    commit one (a live process may, from its start on; the judge fences a
//!    process it takes over), then list them again and remove only files in
//!    both listings that are older than every live process and the rule. A
//!    file referenced between the two listings was committed by a writer the
//!    first listing could not see as such.
//!
//! A cleanup killed between any two requests leaves a graph that reads and
//! writes normally; the next one finishes the job.

use std::collections::{BTreeMap, BTreeSet};

use crate::bugs::Bugs;

/// What a cleanup keeps, besides what it always keeps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Graph versions written within this many milliseconds of the start.
    pub older_than_ms: u64,
    /// Per branch, the graph versions of its newest N commits.
    pub keep_versions: Option<usize>,
    pub dry_run: bool,
    /// How far the clocks of file times and process starts may differ.
    pub margin_ms: u64,
}

/// One table version as a graph version names it: `line` is the physical
/// line (table folder and Lance branch) in the host's spelling.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct LineAt {
    pub line: String,
    pub version: u64,
}

/// A branch as one graph version records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BranchAt {
    pub head: String,
    /// The graph version at which the branch record last changed: writers
    /// read the branch's state there.
    pub updated_at: u64,
    pub tables: Vec<LineAt>,
}

/// One listed graph version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GraphVersion {
    pub version: u64,
    /// When its file was written (the store's clock).
    pub written_ms: u64,
    /// What removing it frees.
    pub bytes: u64,
    /// The commit it published, if any.
    pub carries: Option<String>,
    pub branches: BTreeMap<String, BranchAt>,
}

/// An unresolved intent's table bases: recovery may restore any of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IntentBases {
    pub op: String,
    pub bases: Vec<LineAt>,
    /// The graph versions its resolution reads (its expected head, a
    /// merge's pinned source head).
    pub versions: Vec<u64>,
}

/// A table line's versions on storage now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineVersions {
    pub line: String,
    pub versions: BTreeSet<u64>,
}

/// A file of a table line that no version of it references.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Unreferenced {
    pub path: String,
    pub written_ms: u64,
    /// What removing it frees.
    pub bytes: u64,
}

/// A storage request of the cleaner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CleanIo {
    ListVersions,
    ListIntents,
    ListLines,
    /// Record, before they go, the commits these graph versions carried.
    Retire(BTreeMap<u64, String>),
    RemoveVersions(Vec<u64>),
    /// Remove each line's versions below its floor and the files only they
    /// reference (with `dry_run`: count them).
    Trim {
        floors: Vec<LineAt>,
        dry_run: bool,
    },
    ListUnreferenced,
    /// The start of every process that may still commit a file, as judged
    /// now (with `dry_run`, judged without taking anyone over).
    LiveWriters {
        dry_run: bool,
    },
    RemoveFiles(Vec<String>),
}

/// The completion of a [`CleanIo`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CleanOut {
    Versions {
        now_ms: u64,
        versions: Vec<GraphVersion>,
    },
    Intents(Vec<IntentBases>),
    Lines(Vec<LineVersions>),
    Done,
    Trimmed {
        versions: u64,
        files: u64,
        bytes: u64,
    },
    Unreferenced(Vec<Unreferenced>),
    Live {
        now_ms: u64,
        started_ms: Vec<u64>,
    },
    Failed(String),
}

/// What a finished cleanup found and did (a dry run: would do).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cleaned {
    pub removed_versions: Vec<u64>,
    pub kept_versions: usize,
    pub table_versions_removed: u64,
    pub removed_files: u64,
    pub bytes_freed: u64,
    pub oldest_kept: BTreeMap<String, u64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CleanStep {
    Io(CleanIo),
    Done(Result<Cleaned, String>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Start,
    ListingVersions,
    ListingIntents,
    ListingLines,
    Retiring,
    RemovingVersions,
    Trimming,
    ListingFiles,
    Judging,
    Relisting,
    RemovingFiles,
    Done,
}

/// The graph versions `policy` keeps of `versions`, `now_ms` being the
/// start of the cleanup: the newest and each branch's head there (the
/// version its record last changed at, which writers read), those the
/// intents need, those written within the rule, and per branch those of
/// its newest N commits.
pub fn kept(
    versions: &[GraphVersion],
    intents: &[IntentBases],
    policy: &Policy,
    now_ms: u64,
    bugs: Bugs,
) -> BTreeSet<u64> {
    let mut keep = BTreeSet::new();
    if let Some(latest) = versions.iter().max_by_key(|v| v.version)
        && !bugs.cleanup_drops_heads()
    {
        keep.insert(latest.version);
        keep.extend(latest.branches.values().map(|b| b.updated_at));
    }
    if !bugs.cleanup_ignores_intents() {
        keep.extend(intents.iter().flat_map(|i| i.versions.iter().copied()));
    }
    let listed: BTreeSet<u64> = versions.iter().map(|v| v.version).collect();
    keep.retain(|v| listed.contains(v));
    for v in versions {
        if now_ms.saturating_sub(v.written_ms) < policy.older_than_ms {
            keep.insert(v.version);
        }
    }
    if let Some(n) = policy.keep_versions {
        let mut by_branch: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
        for v in versions {
            let Some(c) = &v.carries else { continue };
            for (name, b) in &v.branches {
                if &b.head == c {
                    by_branch.entry(name).or_default().push(v.version);
                }
            }
        }
        for vs in by_branch.values_mut() {
            vs.sort_unstable();
            keep.extend(vs.iter().rev().take(n));
        }
    }
    keep
}

/// Per branch of the newest version: the oldest kept version holding it.
pub fn oldest_kept(versions: &[GraphVersion], keep: &BTreeSet<u64>) -> BTreeMap<String, u64> {
    let Some(latest) = versions.iter().max_by_key(|v| v.version) else {
        return BTreeMap::new();
    };
    latest
        .branches
        .keys()
        .filter_map(|name| {
            versions
                .iter()
                .filter(|v| keep.contains(&v.version) && v.branches.contains_key(name))
                .map(|v| v.version)
                .min()
                .map(|oldest| (name.clone(), oldest))
        })
        .collect()
}

/// Each named line's floor: the oldest version a kept graph version names,
/// an intent's base, or the line's latest. Only lines a kept version names
/// and with something below their floor are returned.
pub fn floors(
    versions: &[GraphVersion],
    keep: &BTreeSet<u64>,
    intents: &[IntentBases],
    lines: &[LineVersions],
    bugs: Bugs,
) -> Vec<LineAt> {
    let mut named: BTreeMap<&str, u64> = BTreeMap::new();
    for t in versions
        .iter()
        .filter(|v| keep.contains(&v.version))
        .flat_map(|v| v.branches.values().flat_map(|b| &b.tables))
    {
        let f = named.entry(t.line.as_str()).or_insert(t.version);
        *f = (*f).min(t.version);
    }
    let intents = intents.iter().filter(|_| !bugs.cleanup_ignores_intents());
    for t in intents.flat_map(|i| &i.bases) {
        if let Some(f) = named.get_mut(t.line.as_str()) {
            *f = (*f).min(t.version);
        }
    }
    lines
        .iter()
        .filter_map(|l| {
            // A line no kept version names is an unpublished fork (or the
            // past of one no branch uses): its upkeep is the sweep's and
            // branch delete's, which may drop and make it again meanwhile.
            let latest = *l.versions.last()?;
            let f = (*named.get(l.line.as_str())?).min(latest);
            l.versions
                .first()
                .is_some_and(|&first| first < f)
                .then(|| LineAt {
                    line: l.line.clone(),
                    version: f,
                })
        })
        .collect()
}

/// Whether an unreferenced file goes: written before every process that
/// may still commit one started (with the clock margin), and before the
/// rule's cutoff.
pub fn file_goes(f: &Unreferenced, live_since_ms: u64, cutoff_ms: u64, margin_ms: u64) -> bool {
    f.written_ms.saturating_add(margin_ms) < live_since_ms && f.written_ms <= cutoff_ms
}

pub struct Cleaner {
    policy: Policy,
    bugs: Bugs,
    state: State,
    now_ms: u64,
    versions: Vec<GraphVersion>,
    keep: BTreeSet<u64>,
    intents: Vec<IntentBases>,
    lines: Vec<LineVersions>,
    removing: Vec<u64>,
    pending_trim: Option<CleanIo>,
    first_listing: Vec<Unreferenced>,
    live_since_ms: u64,
    out: Cleaned,
}

impl Cleaner {
    pub fn new(policy: Policy, bugs: Bugs) -> Self {
        Self {
            policy,
            bugs,
            state: State::Start,
            now_ms: 0,
            versions: Vec::new(),
            keep: BTreeSet::new(),
            intents: Vec::new(),
            lines: Vec::new(),
            removing: Vec::new(),
            pending_trim: None,
            first_listing: Vec::new(),
            live_since_ms: 0,
            out: Cleaned::default(),
        }
    }

    pub fn start(&mut self) -> CleanStep {
        assert_eq!(self.state, State::Start, "a cleaner starts once");
        self.io(State::ListingVersions, CleanIo::ListVersions)
    }

    fn io(&mut self, state: State, io: CleanIo) -> CleanStep {
        self.state = state;
        CleanStep::Io(io)
    }

    // The cleaner's transition table, one arm per (state, answer): the
    // protocol's order is read top to bottom here.
    pub fn on(&mut self, out: CleanOut) -> CleanStep {
        if let CleanOut::Failed(e) = out {
            assert!(
                !matches!(self.state, State::Start | State::Done),
                "an answer to no request: {e}"
            );
            self.state = State::Done;
            return CleanStep::Done(Err(e));
        }
        let dry_run = self.policy.dry_run;
        match (self.state, out) {
            (State::ListingVersions, CleanOut::Versions { now_ms, versions }) => {
                self.now_ms = now_ms;
                self.versions = versions;
                self.io(State::ListingLines, CleanIo::ListLines)
            }
            (State::ListingLines, CleanOut::Lines(lines)) => {
                self.lines = lines;
                self.io(State::ListingIntents, CleanIo::ListIntents)
            }
            (State::ListingIntents, CleanOut::Intents(intents)) => {
                self.intents = intents;
                let versions = &self.versions;
                self.keep = kept(
                    versions,
                    &self.intents,
                    &self.policy,
                    self.now_ms,
                    self.bugs,
                );
                self.out.kept_versions = self.keep.len();
                self.out.oldest_kept = oldest_kept(versions, &self.keep);
                self.removing = versions
                    .iter()
                    .map(|v| v.version)
                    .filter(|v| !self.keep.contains(v))
                    .collect();
                self.removing.sort_unstable();
                let floors = floors(
                    &self.versions,
                    &self.keep,
                    &self.intents,
                    &self.lines,
                    self.bugs,
                );
                self.out.removed_versions = self.removing.clone();
                for v in self
                    .versions
                    .iter()
                    .filter(|v| !self.keep.contains(&v.version))
                {
                    // The file stays, as a marker that keeps its number taken.
                    self.out.bytes_freed += v.bytes;
                }
                let trim = CleanIo::Trim { floors, dry_run };
                if dry_run || self.removing.is_empty() {
                    return self.io(State::Trimming, trim);
                }
                let carried = self
                    .versions
                    .iter()
                    .filter(|v| !self.keep.contains(&v.version))
                    .filter_map(|v| v.carries.clone().map(|c| (v.version, c)))
                    .collect();
                // The floors are decided; they travel with the trim request.
                self.pending_trim = Some(trim);
                self.io(State::Retiring, CleanIo::Retire(carried))
            }
            (State::Retiring, CleanOut::Done) => {
                let vs = self.removing.clone();
                self.io(State::RemovingVersions, CleanIo::RemoveVersions(vs))
            }
            (State::RemovingVersions, CleanOut::Done) => {
                let trim = self.pending_trim.take().expect("the trim was decided");
                self.io(State::Trimming, trim)
            }
            (
                State::Trimming,
                CleanOut::Trimmed {
                    versions,
                    files,
                    bytes,
                },
            ) => {
                self.out.table_versions_removed += versions;
                self.out.removed_files += files;
                self.out.bytes_freed += bytes;
                self.io(State::ListingFiles, CleanIo::ListUnreferenced)
            }
            (State::ListingFiles, CleanOut::Unreferenced(files)) => {
                self.first_listing = files;
                if self.first_listing.is_empty() {
                    return self.finish();
                }
                self.io(State::Judging, CleanIo::LiveWriters { dry_run })
            }
            (State::Judging, CleanOut::Live { now_ms, started_ms }) => {
                self.live_since_ms = if self.bugs.cleanup_ignores_writers() {
                    now_ms
                } else {
                    started_ms.into_iter().fold(now_ms, u64::min)
                };
                self.io(State::Relisting, CleanIo::ListUnreferenced)
            }
            (State::Relisting, CleanOut::Unreferenced(again)) => {
                let first: BTreeSet<&Unreferenced> = self.first_listing.iter().collect();
                let both = again.into_iter().filter(|f| first.contains(f)).collect();
                self.remove_files(both)
            }
            (State::RemovingFiles, CleanOut::Done) => self.finish(),
            (state, out) => panic!("cleaner in {state:?} got {out:?}"),
        }
    }

    fn remove_files(&mut self, candidates: Vec<Unreferenced>) -> CleanStep {
        let cutoff = self.now_ms.saturating_sub(self.policy.older_than_ms);
        let going: Vec<Unreferenced> = candidates
            .into_iter()
            .filter(|f| file_goes(f, self.live_since_ms, cutoff, self.policy.margin_ms))
            .collect();
        self.out.removed_files += going.len() as u64;
        self.out.bytes_freed += going.iter().map(|f| f.bytes).sum::<u64>();
        if self.policy.dry_run || going.is_empty() {
            return self.finish();
        }
        let paths = going.into_iter().map(|f| f.path).collect();
        self.io(State::RemovingFiles, CleanIo::RemoveFiles(paths))
    }

    fn finish(&mut self) -> CleanStep {
        self.state = State::Done;
        CleanStep::Done(Ok(std::mem::take(&mut self.out)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(line: &str, version: u64) -> LineAt {
        LineAt {
            line: line.into(),
            version,
        }
    }

    /// Version `v` written at `t`, carrying commit `c{v}` on `branch` whose
    /// table `T` is at table version `tv`.
    fn gv(v: u64, t: u64, branch: &str, tv: u64, carries: bool) -> GraphVersion {
        GraphVersion {
            version: v,
            written_ms: t,
            bytes: 10,
            carries: carries.then(|| format!("c{v}")),
            branches: BTreeMap::from([(
                branch.to_string(),
                BranchAt {
                    head: format!("c{v}"),
                    updated_at: v,
                    tables: vec![at("T", tv)],
                },
            )]),
        }
    }

    fn policy(older_than_ms: u64, keep_versions: Option<usize>) -> Policy {
        Policy {
            older_than_ms,
            keep_versions,
            dry_run: false,
            margin_ms: 5,
        }
    }

    #[test]
    fn the_rule_keeps_the_newest_the_recent_and_each_branchs_last_commits() {
        let vs: Vec<_> = (1..=6).map(|v| gv(v, v * 100, "main", v, v != 3)).collect();
        let b = Bugs::default();
        // Nothing is recent at 10_000: only the newest stays.
        assert_eq!(
            kept(&vs, &[], &policy(1_000, None), 10_000, b),
            BTreeSet::from([6])
        );
        // Written within 250 ms of 700: versions 5 and 6.
        assert_eq!(
            kept(&vs, &[], &policy(250, None), 700, b),
            BTreeSet::from([5, 6])
        );
        // Three newest commits; version 3 carries none, so 2 is the third.
        assert_eq!(
            kept(&vs, &[], &policy(0, Some(4)), 10_000, b),
            BTreeSet::from([2, 4, 5, 6])
        );
        // A head whose record last changed long ago, and an intent's head.
        let mut stale = vs.clone();
        stale[5].branches.get_mut("main").unwrap().updated_at = 2;
        let intent = IntentBases {
            op: "op".into(),
            bases: vec![],
            versions: vec![4],
        };
        assert_eq!(
            kept(&stale, &[intent], &policy(0, None), 10_000, b),
            BTreeSet::from([2, 4, 6])
        );
        let keep = BTreeSet::from([4, 5, 6]);
        assert_eq!(
            oldest_kept(&vs, &keep),
            BTreeMap::from([("main".into(), 4)])
        );
    }

    #[test]
    fn a_floor_is_the_oldest_kept_name_or_intent_base_and_unnamed_lines_stay() {
        let vs = vec![gv(1, 0, "main", 3, true), gv(2, 0, "main", 5, true)];
        let lines = vec![
            LineVersions {
                line: "T".into(),
                versions: (1..=6).collect(),
            },
            LineVersions {
                line: "orphan".into(),
                versions: BTreeSet::from([2, 3]),
            },
            LineVersions {
                line: "single".into(),
                versions: BTreeSet::from([4]),
            },
        ];
        let keep = BTreeSet::from([2]);
        let b = Bugs::default();
        assert_eq!(floors(&vs, &keep, &[], &lines, b), vec![at("T", 5)]);
        let intent = IntentBases {
            op: "op".into(),
            bases: vec![at("T", 2)],
            versions: vec![],
        };
        assert_eq!(floors(&vs, &keep, &[intent], &lines, b), vec![at("T", 2)]);
    }

    #[test]
    fn a_file_goes_only_before_every_live_start_and_the_cutoff() {
        let f = Unreferenced {
            path: "f".into(),
            written_ms: 100,
            bytes: 1,
        };
        assert!(file_goes(&f, 200, 100, 5));
        assert!(!file_goes(&f, 104, 1_000, 5), "within the clock margin");
        assert!(!file_goes(&f, 200, 99, 5), "newer than the rule");
    }

    #[test]
    fn the_requests_run_in_protocol_order_and_files_go_only_if_listed_twice() {
        let mut c = Cleaner::new(policy(0, None), Bugs::default());
        assert_eq!(c.start(), CleanStep::Io(CleanIo::ListVersions));
        let vs = vec![gv(1, 0, "main", 1, true), gv(2, 0, "main", 2, true)];
        assert_eq!(
            c.on(CleanOut::Versions {
                now_ms: 1_000,
                versions: vs
            }),
            CleanStep::Io(CleanIo::ListLines)
        );
        let lines = vec![LineVersions {
            line: "T".into(),
            versions: BTreeSet::from([1, 2]),
        }];
        assert_eq!(
            c.on(CleanOut::Lines(lines)),
            CleanStep::Io(CleanIo::ListIntents)
        );
        assert_eq!(
            c.on(CleanOut::Intents(vec![])),
            CleanStep::Io(CleanIo::Retire(BTreeMap::from([(1, "c1".into())])))
        );
        assert_eq!(
            c.on(CleanOut::Done),
            CleanStep::Io(CleanIo::RemoveVersions(vec![1]))
        );
        assert_eq!(
            c.on(CleanOut::Done),
            CleanStep::Io(CleanIo::Trim {
                floors: vec![at("T", 2)],
                dry_run: false
            })
        );
        assert_eq!(
            c.on(CleanOut::Trimmed {
                versions: 1,
                files: 3,
                bytes: 30
            }),
            CleanStep::Io(CleanIo::ListUnreferenced)
        );
        let file = |p: &str, t| Unreferenced {
            path: p.into(),
            written_ms: t,
            bytes: 7,
        };
        let first = vec![file("old", 10), file("committed", 10), file("young", 900)];
        assert_eq!(
            c.on(CleanOut::Unreferenced(first)),
            CleanStep::Io(CleanIo::LiveWriters { dry_run: false })
        );
        assert_eq!(
            c.on(CleanOut::Live {
                now_ms: 1_000,
                started_ms: vec![500]
            }),
            CleanStep::Io(CleanIo::ListUnreferenced)
        );
        // "committed" was referenced meanwhile; "young" is a live writer's.
        assert_eq!(
            c.on(CleanOut::Unreferenced(vec![
                file("old", 10),
                file("young", 900)
            ])),
            CleanStep::Io(CleanIo::RemoveFiles(vec!["old".into()]))
        );
        let CleanStep::Done(Ok(done)) = c.on(CleanOut::Done) else {
            panic!("the cleanup ends after removing files");
        };
        assert_eq!(done.removed_versions, vec![1]);
        assert_eq!(done.kept_versions, 1);
        assert_eq!(done.removed_files, 3 + 1);
        assert_eq!(done.bytes_freed, 10 + 30 + 7);
        assert_eq!(done.oldest_kept, BTreeMap::from([("main".into(), 2)]));
    }

    #[test]
    fn a_dry_run_removes_nothing_and_a_failure_ends_the_cleanup() {
        let mut c = Cleaner::new(
            Policy {
                dry_run: true,
                ..policy(0, None)
            },
            Bugs::default(),
        );
        c.start();
        c.on(CleanOut::Versions {
            now_ms: 1_000,
            versions: vec![gv(1, 0, "main", 1, true), gv(2, 0, "main", 1, true)],
        });
        c.on(CleanOut::Lines(vec![]));
        let step = c.on(CleanOut::Intents(vec![]));
        assert_eq!(
            step,
            CleanStep::Io(CleanIo::Trim {
                floors: vec![],
                dry_run: true
            })
        );
        c.on(CleanOut::Trimmed {
            versions: 0,
            files: 0,
            bytes: 0,
        });
        c.on(CleanOut::Unreferenced(vec![Unreferenced {
            path: "f".into(),
            written_ms: 0,
            bytes: 1,
        }]));
        c.on(CleanOut::Live {
            now_ms: 1_000,
            started_ms: vec![],
        });
        let step = c.on(CleanOut::Unreferenced(vec![Unreferenced {
            path: "f".into(),
            written_ms: 0,
            bytes: 1,
        }]));
        let CleanStep::Done(Ok(done)) = step else {
            panic!("a dry run ends without removing: {step:?}");
        };
        assert_eq!(done.removed_versions, vec![1]);
        assert_eq!(done.removed_files, 1);
        let mut c = Cleaner::new(policy(0, None), Bugs::default());
        c.start();
        assert_eq!(
            c.on(CleanOut::Failed("store down".into())),
            CleanStep::Done(Err("store down".into()))
        );
    }
}
