//! The storage side of version retention: answers the cleaner's requests
//! (`omnigraph_actors::cleaner`, the order and the decisions) with the
//! graph's own files and Lance's cleanup. A table line is a table dataset's
//! main line or one of its Lance branches; Lance removes a line's versions
//! below a floor with the files only they reference (files later versions
//! or child branches share stay), and lists the files no version references
//! at all, whose removal the cleaner decides by their writers' liveness.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use lance::Dataset;
use lance::dataset::cleanup::{CleanupFileKind, CleanupPolicy, RemovalStats};
use omnigraph_actors::cleaner::{
    BranchAt, CleanIo, CleanOut, CleanStep, Cleaned, Cleaner, GraphVersion, IntentBases, LineAt,
    LineVersions, Policy, Unreferenced,
};
use serde::Serialize;

use super::substrate::LanceSubstrate;
use super::{GraphStorage, index_files, sidecar};
use crate::error::{OmniError, Result};

/// Lance's own default, so a bare cleanup never removes recent history.
pub const DEFAULT_OLDER_THAN: Duration = Duration::from_secs(7 * 24 * 3600);
/// Graph versions read at once while listing them.
const LISTING_READS: usize = 16;
/// How far the store's clock (file times) and a process's clock (its
/// incarnation's time) may differ: the leases' skew margin at their default.
const CLOCK_MARGIN_MS: u64 = 2_000;
const OWNERS: &str = "_graph/owners";

/// What a cleanup keeps besides what it always keeps (every branch head,
/// unresolved intents' bases, what a live writer may still commit).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// Graph versions written within this long stay.
    pub older_than: Duration,
    /// Per branch, the graph versions of its newest N commits stay.
    pub keep_versions: Option<usize>,
    /// Decide and report, remove nothing.
    pub dry_run: bool,
}

impl Default for RetentionPolicy {
    fn default() -> Self {
        Self {
            older_than: DEFAULT_OLDER_THAN,
            keep_versions: None,
            dry_run: false,
        }
    }
}

/// What a cleanup removed (a dry run: would remove).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CleanupReport {
    pub removed_versions: u64,
    pub kept_versions: u64,
    /// Graph version files, table versions' files and unreferenced files.
    pub removed_files: u64,
    pub bytes_freed: u64,
    /// Per branch, the oldest graph version that can still be read.
    pub oldest_kept: BTreeMap<String, u64>,
    /// Table versions removed, over every table line.
    #[serde(skip)]
    pub table_versions_removed: u64,
}

/// Parse a retention duration: a whole number and a unit, `s`, `m`, `h`
/// or `d` (`7d`, `12h`, `30m`, `0s`).
pub fn parse_duration(text: &str) -> Result<Duration> {
    let bad = || {
        OmniError::BadRequest(format!(
            "duration '{text}': expected a whole number and a unit s, m, h or d (like 7d, 12h, 30m, 0s)"
        ))
    };
    let t = text.trim();
    let unit = t.chars().last().ok_or_else(bad)?;
    let n: u64 = t[..t.len() - unit.len_utf8()].parse().map_err(|_| bad())?;
    let secs = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3_600,
        'd' => 86_400,
        _ => return Err(bad()),
    };
    n.checked_mul(secs).map(Duration::from_secs).ok_or_else(bad)
}

/// Run one cleanup through the protocol's order.
pub async fn cleanup(s: &LanceSubstrate, policy: &RetentionPolicy) -> Result<CleanupReport> {
    let mut cleaner = Cleaner::new(
        Policy {
            older_than_ms: policy.older_than.as_millis().min(u64::MAX as u128) as u64,
            keep_versions: policy.keep_versions,
            dry_run: policy.dry_run,
            margin_ms: CLOCK_MARGIN_MS,
        },
        Default::default(),
    );
    let mut step = cleaner.start();
    let done = loop {
        let io = match step {
            CleanStep::Done(done) => break done,
            CleanStep::Io(io) => io,
        };
        let out = match answer(s, io).await {
            Ok(out) => out,
            Err(e) => CleanOut::Failed(e.to_string()),
        };
        step = cleaner.on(out);
    };
    let done: Cleaned = done.map_err(OmniError::Storage)?;
    // Index files only removed table versions recorded are now unrecorded:
    // the collection protocol removes them (a dry run counts those
    // unrecorded before any version went).
    let collected = index_files::collect(s, policy.dry_run).await?;
    let report = CleanupReport {
        removed_versions: done.removed_versions.len() as u64,
        kept_versions: done.kept_versions as u64,
        removed_files: done.removed_files + collected.removed.len() as u64,
        bytes_freed: done.bytes_freed + collected.removed_bytes,
        oldest_kept: done.oldest_kept,
        table_versions_removed: done.table_versions_removed,
    };
    tracing::info!(
        removed_versions = report.removed_versions,
        table_versions = report.table_versions_removed,
        files = report.removed_files,
        bytes = report.bytes_freed,
        dry_run = policy.dry_run,
        "versions cleaned up"
    );
    Ok(report)
}

/// How the cleaner spells a line: the table folder, and `@branch` off
/// Lance's main line (a folder never holds `@`).
fn line(dir: &str, lance_branch: Option<&str>) -> String {
    match lance_branch {
        Some(b) => format!("{dir}@{b}"),
        None => dir.to_string(),
    }
}

fn parse_line(l: &str) -> (&str, Option<&str>) {
    match l.split_once('@') {
        Some((dir, b)) => (dir, Some(b)),
        None => (l, None),
    }
}

/// A file of a line as the cleaner names it: the line, then the file's
/// full path in the store.
fn file_name(line: &str, path: &str) -> String {
    format!("{line}\u{0}{path}")
}

async fn answer(s: &LanceSubstrate, io: CleanIo) -> Result<CleanOut> {
    let g = s.graph();
    Ok(match io {
        CleanIo::ListVersions => CleanOut::Versions {
            now_ms: crate::util::ulid::now_ms(),
            versions: list_versions(g).await?,
        },
        CleanIo::ListLines => CleanOut::Lines(list_lines(g).await?),
        CleanIo::ListIntents => CleanOut::Intents(list_intents(g).await?),
        CleanIo::Retire(carried) => {
            g.manifests.retire(&carried).await?;
            CleanOut::Done
        }
        CleanIo::RemoveVersions(vs) => {
            g.manifests.remove(&vs).await?;
            CleanOut::Done
        }
        CleanIo::Trim { floors, dry_run } => {
            let mut total = RemovalStats::default();
            for f in &floors {
                let policy = CleanupPolicy {
                    before_version: Some(f.version),
                    delete_unverified: false,
                    error_if_tagged_old_versions: false,
                    ..Default::default()
                };
                let Some(ds) = open_line(g, &f.line).await? else {
                    continue;
                };
                let stats = match dry_run {
                    true => ds.cleanup(policy).explain().await?.stats,
                    false => ds.cleanup(policy).execute().await?,
                };
                add(&mut total, &stats);
            }
            CleanOut::Trimmed {
                versions: total.old_versions,
                files: total.old_versions
                    + total.data_files_removed
                    + total.transaction_files_removed
                    + total.index_files_removed
                    + total.deletion_files_removed,
                bytes: total.bytes_removed,
            }
        }
        CleanIo::ListUnreferenced => CleanOut::Unreferenced(list_unreferenced(g).await?),
        CleanIo::LiveWriters { dry_run } => {
            let started_ms = live_writers(s, dry_run).await?;
            CleanOut::Live {
                now_ms: crate::util::ulid::now_ms(),
                started_ms,
            }
        }
        CleanIo::RemoveFiles(files) => {
            for f in &files {
                let (_, path) = f.split_once('\u{0}').unwrap_or(("", f));
                g.store.delete_object(path).await?;
            }
            CleanOut::Done
        }
    })
}

fn add(total: &mut RemovalStats, s: &RemovalStats) {
    total.bytes_removed += s.bytes_removed;
    total.old_versions += s.old_versions;
    total.data_files_removed += s.data_files_removed;
    total.transaction_files_removed += s.transaction_files_removed;
    total.index_files_removed += s.index_files_removed;
    total.deletion_files_removed += s.deletion_files_removed;
}

async fn open_line(g: &GraphStorage, l: &str) -> Result<Option<Arc<Dataset>>> {
    let (dir, branch) = parse_line(l);
    g.tables.fresh(dir, branch).await
}

async fn list_versions(g: &GraphStorage) -> Result<Vec<GraphVersion>> {
    // Versions removed earlier are markers, of a size no manifest has.
    let marker = super::manifest::REMOVED.len() as u64;
    let listing = g.manifests.listing().await?;
    let listing = listing
        .into_iter()
        .filter(move |(_, bytes, _)| *bytes != marker);
    futures::stream::iter(listing)
        .map(|(v, bytes, written_ms)| async move {
            // Removed by another cleanup since the listing: not listed.
            let m = match g.manifests.at(v).await {
                Ok(m) => m,
                Err(OmniError::NotFound(_)) => return Ok(None),
                Err(e) => return Err(e),
            };
            let branches = m
                .branches
                .iter()
                .map(|(name, r)| {
                    let tables = r
                        .tables
                        .values()
                        .map(|t| LineAt {
                            line: line(&t.dir, t.lance_branch.as_deref()),
                            version: t.version,
                        })
                        .collect();
                    let b = BranchAt {
                        head: r.head.clone(),
                        updated_at: r.updated_at,
                        tables,
                    };
                    (name.clone(), b)
                })
                .collect();
            Ok(Some(GraphVersion {
                version: v,
                written_ms,
                bytes: bytes.saturating_sub(super::manifest::REMOVED.len() as u64),
                carries: m.change.commit.clone(),
                branches,
            }))
        })
        .buffered(LISTING_READS)
        .try_filter_map(|v| async move { Ok(v) })
        .try_collect()
        .await
}

/// Every table line under `nodes/` and `edges/` (a type's old tables too).
async fn every_line(g: &GraphStorage) -> Result<Vec<(String, Arc<Dataset>)>> {
    let mut out = Vec::new();
    for kind in ["nodes", "edges"] {
        for dir in g.store.list_dirs(kind).await? {
            let dir = format!("{kind}/{dir}");
            for (b, ds) in g.tables.lines(&dir).await? {
                out.push((line(&dir, b.as_deref()), ds));
            }
        }
    }
    Ok(out)
}

async fn list_lines(g: &GraphStorage) -> Result<Vec<LineVersions>> {
    let mut out = Vec::new();
    for (l, ds) in every_line(g).await? {
        let versions = ds
            .version_refs()
            .await?
            .into_iter()
            .map(|v| v.version)
            .collect();
        out.push(LineVersions { line: l, versions });
    }
    Ok(out)
}

async fn list_intents(g: &GraphStorage) -> Result<Vec<IntentBases>> {
    let latest = g.manifests.refresh().await?;
    let mut out = Vec::new();
    for (intent, _) in sidecar::list(&g.store).await? {
        let bases = intent
            .tables
            .iter()
            .filter_map(|t| {
                let rec = latest.branches.get(&t.table.branch)?;
                let dir = &rec.tables.get(&t.table.table)?.dir;
                let own = rec.line(&t.table.branch, &t.table.table);
                Some(LineAt {
                    line: line(dir, own.as_deref()),
                    version: t.base,
                })
            })
            .collect();
        let mut versions = vec![intent.expected.version];
        versions.extend(intent.merge.as_ref().map(|m| m.head.version));
        out.push(IntentBases {
            op: intent.op.0.clone(),
            bases,
            versions,
        });
    }
    Ok(out)
}

/// The files of every line that no version of it references, as Lance's
/// cleanup finds them when told to remove no version (staged files of
/// writes that never committed, or still may), with their times.
async fn list_unreferenced(g: &GraphStorage) -> Result<Vec<Unreferenced>> {
    let mut out = Vec::new();
    for (l, ds) in every_line(g).await? {
        let none = CleanupPolicy {
            versions: Some(HashSet::from([u64::MAX])),
            delete_unverified: true,
            error_if_tagged_old_versions: false,
            ..Default::default()
        };
        let explained = ds
            .cleanup(none)
            .with_max_candidate_files(usize::MAX)
            .explain()
            .await?;
        for c in explained.candidate_files {
            if !c.unverified || matches!(c.kind, CleanupFileKind::Manifest) {
                continue;
            }
            let Some((bytes, written_ms)) = g.store.head_object(&c.path).await? else {
                continue;
            };
            out.push(Unreferenced {
                path: file_name(&l, &c.path),
                written_ms,
                bytes,
            });
        }
    }
    out.sort();
    Ok(out)
}

/// When each process that may still commit a file started: this one, and
/// every other read-write process whose liveness lock or lease holds (a
/// lapsed lease is taken over and fenced first, as recovery does). A dry
/// run takes no one over: every process with a record counts as live.
async fn live_writers(s: &LanceSubstrate, dry_run: bool) -> Result<Vec<u64>> {
    let me = s.locks().incarnation().to_string();
    let mut owners: BTreeSet<String> = BTreeSet::new();
    for name in s.graph().store.list(OWNERS).await? {
        if let Some((inc, _)) = name.split_once('.') {
            owners.insert(inc.to_string());
        }
    }
    owners.insert(me.clone());
    // A process whose intent is unresolved holds its files as a live one
    // does: recovery rolls the intent forward when its table commits
    // landed (one of them late, after the process was taken over), and
    // the versions it publishes reference the files the write staged.
    let intents: BTreeSet<String> = super::sidecar::list(&s.graph().store)
        .await?
        .into_iter()
        .map(|(_, owner)| owner)
        .collect();
    owners.extend(intents.iter().cloned());
    let mut started = Vec::new();
    for inc in owners {
        let alive =
            inc == me || dry_run || intents.contains(&inc) || s.locks().owner_alive(&inc).await;
        if alive {
            // A name that is not a ULID gives no start: it may have written
            // anything, so it holds every file.
            started.push(crate::util::ulid::millis(&inc).unwrap_or(0));
        }
    }
    if !dry_run {
        s.fence_takeovers().await?;
    }
    Ok(started)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_the_command_takes_them() {
        assert_eq!(parse_duration("7d").unwrap(), DEFAULT_OLDER_THAN);
        assert_eq!(parse_duration("12h").unwrap(), Duration::from_secs(43_200));
        assert_eq!(parse_duration("30m").unwrap(), Duration::from_secs(1_800));
        assert_eq!(parse_duration("0s").unwrap(), Duration::ZERO);
        for bad in ["", "7", "d", "7w", "-1d", "1.5h", "99999999999999999999d"] {
            let e = parse_duration(bad).unwrap_err();
            assert!(
                matches!(&e, OmniError::BadRequest(m) if m.contains(&format!("'{bad}'"))),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn a_line_spells_its_folder_and_branch_both_ways() {
        for (dir, b) in [("nodes/Person", None), ("edges/Knows", Some("dev/x-v3"))] {
            assert_eq!(parse_line(&line(dir, b)), (dir, b));
        }
    }
}
