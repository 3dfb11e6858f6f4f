//! The files of persisted indexes under `_indexes/`: how a new one is named
//! (which process wrote it, and when), and the removal of those no table
//! version records.
//!
//! An index file is written before the table version that records it is
//! committed, so between the two a file no version records is not garbage
//! yet. Its name carries its writer's incarnation, and liveness settles it:
//! a writer found gone commits nothing afterwards, so once every writer has
//! been judged, the records read next name every file a gone writer will
//! ever have recorded. Files of live writers are kept whatever they are;
//! this process's own, only while one of its writes is in flight.
//! Recovery never records a file either: it publishes versions already
//! committed or restores older content, whose records were read too.

use std::collections::{BTreeSet, HashMap};

use serde::Serialize;

use super::GraphStorage;
use super::substrate::LanceSubstrate;
use crate::error::Result;

/// The folder every index file lies under.
pub const INDEXES: &str = "_indexes";

/// How old a file with no writer in its name (written before names carried
/// one) must be before it may be removed: its writer cannot be asked.
pub const UNNAMED_WRITER_GRACE_MS: u64 = 24 * 60 * 60 * 1000;

/// The path (relative to the graph's root) of a new index file:
/// `_indexes/<folder>/<stem>-<ulid>.<writer>.<ext>`.
pub fn new_index_file(folder: &str, stem: &str, ext: &str, writer: &str) -> String {
    format!(
        "{INDEXES}/{folder}/{stem}-{}.{writer}.{ext}",
        crate::util::ulid::new_ulid()
    )
}

/// What an index file's name says about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Written {
    /// By this writer incarnation.
    By(String),
    /// With no writer in its name, at this time (ms since the epoch).
    At(u64),
    /// A name no writer of index files gives: not ours to remove.
    Foreign,
}

/// Read an index file's name (the last part of its path).
pub fn written(path: &str) -> Written {
    let name = path.rsplit('/').next().unwrap_or(path);
    let parts: Vec<&str> = name.split('.').collect();
    let (stem, writer) = match parts.as_slice() {
        [stem, writer, _ext] => (*stem, Some(*writer)),
        [stem, _ext] => (*stem, None),
        _ => return Written::Foreign,
    };
    let Some(ms) = stem
        .rsplit_once('-')
        .and_then(|(_, ulid)| crate::util::ulid::millis(ulid))
    else {
        return Written::Foreign;
    };
    match writer {
        Some(w) if super::locks::valid_incarnation(w) => Written::By(w.to_string()),
        Some(_) => Written::Foreign,
        None => Written::At(ms),
    }
}

/// Whether one file goes, and why it stays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Recorded,
    WriterAlive,
    /// No writer in its name, and younger than [`UNNAMED_WRITER_GRACE_MS`].
    Recent,
    Foreign,
    Garbage,
}

/// The rule, given what was found about the file. `writer_alive` is asked
/// only of files `By` a writer, and must have been answered before
/// `recorded` was read.
pub fn verdict(written: &Written, writer_alive: bool, recorded: bool, now_ms: u64) -> Verdict {
    match written {
        _ if recorded => Verdict::Recorded,
        Written::Foreign => Verdict::Foreign,
        Written::By(_) if writer_alive => Verdict::WriterAlive,
        Written::By(_) => Verdict::Garbage,
        Written::At(ms) if now_ms.saturating_sub(*ms) < UNNAMED_WRITER_GRACE_MS => Verdict::Recent,
        Written::At(_) => Verdict::Garbage,
    }
}

/// What a collection found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct GcReport {
    pub dry_run: bool,
    /// Table versions whose records were read (every version of every
    /// table, on every Lance branch).
    pub table_versions: usize,
    /// Removed (or, in a dry run, to be removed): path and bytes.
    pub removed: Vec<RemovedFile>,
    pub removed_bytes: u64,
    pub kept: Kept,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RemovedFile {
    pub file: String,
    pub bytes: u64,
}

/// Files kept, by reason.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Kept {
    pub recorded: usize,
    pub writer_alive: usize,
    pub recent: usize,
    pub foreign: usize,
}

/// Remove every index file no table version records and no live process
/// may still record (with `dry_run`, only say which).
pub async fn collect(s: &LanceSubstrate, dry_run: bool) -> Result<GcReport> {
    let g = s.graph();
    let now_ms = crate::util::ulid::now_ms();
    let files = g.store.list_all(INDEXES).await?;
    // Writers after the listing, records after the writers: see the module
    // comment for why the order matters.
    let mut alive: HashMap<String, bool> = HashMap::new();
    let mut judged = Vec::with_capacity(files.len());
    for (rel, bytes) in files {
        let path = format!("{INDEXES}/{rel}");
        let w = written(&path);
        let writer_alive = match &w {
            Written::By(inc) => match alive.get(inc) {
                Some(a) => *a,
                None => {
                    let a = writer_alive(s, inc).await;
                    alive.insert(inc.clone(), a);
                    a
                }
            },
            _ => false,
        };
        judged.push((path, bytes, w, writer_alive));
    }
    let (recorded, table_versions) = recorded_files(g).await?;
    let mut report = GcReport {
        dry_run,
        table_versions,
        ..Default::default()
    };
    for (path, bytes, w, writer_alive) in judged {
        match verdict(&w, writer_alive, recorded.contains(&path), now_ms) {
            Verdict::Recorded => report.kept.recorded += 1,
            Verdict::WriterAlive => report.kept.writer_alive += 1,
            Verdict::Recent => report.kept.recent += 1,
            Verdict::Foreign => report.kept.foreign += 1,
            Verdict::Garbage => {
                if !dry_run {
                    g.store.delete(&path).await?;
                }
                report.removed_bytes += bytes;
                report.removed.push(RemovedFile { file: path, bytes });
            }
        }
    }
    tracing::info!(
        removed = report.removed.len(),
        bytes = report.removed_bytes,
        table_versions,
        dry_run,
        "index files collected"
    );
    Ok(report)
}

/// May the writer `incarnation` still record a file it wrote? Another
/// process may while it lives; this one only while a write of its own is
/// in flight (a write that has finished has recorded its files or never
/// will, and one that starts now writes files the listing did not see).
async fn writer_alive(s: &LanceSubstrate, incarnation: &str) -> bool {
    match incarnation == s.locks().incarnation() {
        true => s.writes_in_flight(),
        false => s.locks().owner_alive(incarnation).await,
    }
}

/// Every index file any version of any table records, and how many table
/// versions were read. Tables lie under `nodes/` and `edges/`, a type's
/// old tables included.
async fn recorded_files(g: &GraphStorage) -> Result<(BTreeSet<String>, usize)> {
    let mut files = BTreeSet::new();
    let mut versions = 0;
    for kind in ["nodes", "edges"] {
        for dir in g.store.list_dirs(kind).await? {
            for t in g.tables.every_version(&format!("{kind}/{dir}")).await? {
                versions += 1;
                files.extend(t.recorded_files()?);
            }
        }
    }
    Ok((files, versions))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_name_reads_back_as_its_writers() {
        let f = new_index_file("node-Doc", "body", "text", "W1");
        assert!(f.starts_with("_indexes/node-Doc/body-"), "{f}");
        assert_eq!(written(&f), Written::By("W1".into()));
        let old = "_indexes/graph/edge-Knows-01JD8X3V7Q2W9G5N4M6K8P0R2T.adj";
        assert_eq!(
            written(old),
            Written::At(crate::util::ulid::millis("01JD8X3V7Q2W9G5N4M6K8P0R2T").unwrap())
        );
        for foreign in [
            "_indexes/graph/notes.txt",
            "_indexes/graph/edge-Knows-short.adj",
            "_indexes/graph/edge-Knows-01JD8X3V7Q2W9G5N4M6K8P0R2T.a-b.adj",
            "_indexes/graph/a.b.c.d",
        ] {
            assert_eq!(written(foreign), Written::Foreign, "{foreign}");
        }
    }

    #[test]
    fn only_unrecorded_files_of_gone_or_long_unnamed_writers_go() {
        let by = Written::By("W".into());
        let now = 10 * UNNAMED_WRITER_GRACE_MS;
        let old = Written::At(now - UNNAMED_WRITER_GRACE_MS);
        let young = Written::At(now - UNNAMED_WRITER_GRACE_MS + 1);
        assert_eq!(verdict(&by, false, true, now), Verdict::Recorded);
        assert_eq!(verdict(&by, true, true, now), Verdict::Recorded);
        assert_eq!(verdict(&by, true, false, now), Verdict::WriterAlive);
        assert_eq!(verdict(&by, false, false, now), Verdict::Garbage);
        assert_eq!(verdict(&old, false, false, now), Verdict::Garbage);
        assert_eq!(verdict(&old, false, true, now), Verdict::Recorded);
        assert_eq!(verdict(&young, false, false, now), Verdict::Recent);
        assert_eq!(
            verdict(&Written::Foreign, false, false, now),
            Verdict::Foreign
        );
    }
}
