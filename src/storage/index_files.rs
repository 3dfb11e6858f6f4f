//! The files of persisted indexes under `_indexes/`: how a new one is named
//! (which process wrote it, and when), and the storage side of collecting
//! those no table version records (the protocol is
//! `omnigraph_actors::collector`).
//!
//! A file's name carries its writer's incarnation, so collection can ask
//! whether the writer may still record it: another process while it lives,
//! this one while a write of its own is in flight, and any process while
//! an intent it wrote is unresolved (a write whose table commits landed,
//! one of them late after its process was taken over, is rolled forward
//! by recovery, and its versions record the files it wrote). Recovery
//! never records a file of its own: it publishes versions already
//! committed or restores older content, whose records are read too.

use std::collections::BTreeSet;

use omnigraph_actors::Bugs;
use omnigraph_actors::collector::{Collector, FileWriter, GcIo, GcOut, GcStep, IndexFile};
use serde::Serialize;

use super::GraphStorage;
use super::substrate::LanceSubstrate;
use crate::compiler::catalog::TypeDef;
use crate::error::{OmniError, Result};

/// The folder every index file lies under.
pub const INDEXES: &str = "_indexes";

/// How old a file with no writer in its name (written before names carried
/// one) must be before it may be removed: its writer cannot be asked.
pub const UNNAMED_WRITER_GRACE_MS: u64 = 24 * 60 * 60 * 1000;

/// A table's name as index file paths spell it (`node:Person` ->
/// `node-Person`).
pub fn table_name(def: &TypeDef) -> String {
    def.table_key().replace(':', "-")
}

/// The path (relative to the graph's root) of a new index file:
/// `_indexes/<folder>/<stem>-<ulid>.<writer>.<ext>`.
pub fn new_index_file(folder: &str, stem: &str, ext: &str, writer: &str) -> String {
    format!(
        "{INDEXES}/{folder}/{stem}-{}.{writer}.{ext}",
        crate::util::ulid::new_ulid()
    )
}

/// Who wrote an index file, as its name (the last part of its path) says.
pub fn written(path: &str, now_ms: u64) -> FileWriter {
    let name = path.rsplit('/').next().unwrap_or(path);
    let parts: Vec<&str> = name.split('.').collect();
    let (stem, writer) = match parts.as_slice() {
        [stem, writer, _ext] => (*stem, Some(*writer)),
        [stem, _ext] => (*stem, None),
        _ => return FileWriter::Foreign,
    };
    let Some(ms) = stem
        .rsplit_once('-')
        .and_then(|(_, ulid)| crate::util::ulid::millis(ulid))
    else {
        return FileWriter::Foreign;
    };
    match writer {
        Some(w) if super::locks::valid_incarnation(w) => FileWriter::Process(w.to_string()),
        Some(_) => FileWriter::Foreign,
        None => FileWriter::Unnamed {
            expired: now_ms.saturating_sub(ms) >= UNNAMED_WRITER_GRACE_MS,
        },
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
    /// Without a writer in their name, and younger than a day.
    pub recent: usize,
    /// Names no writer of index files gives.
    pub foreign: usize,
}

/// Remove every index file no table version records and no live process
/// may still record (with `dry_run`, only say which): the protocol's
/// [`Collector`], its requests answered here one at a time.
pub async fn collect(s: &LanceSubstrate, dry_run: bool) -> Result<GcReport> {
    let mut c = Collector::new(dry_run, Bugs::default());
    let mut step = c.start();
    let done = loop {
        let io = match step {
            GcStep::Done(done) => break done,
            GcStep::Io(io) => io,
        };
        let out = match answer(s, io).await {
            Ok(out) => out,
            Err(e) => GcOut::Failed(e.to_string()),
        };
        step = c.on(out);
    };
    let done = done.map_err(OmniError::Storage)?;
    let report = GcReport {
        dry_run,
        table_versions: done.table_versions,
        removed_bytes: done.removed.iter().map(|f| f.bytes).sum(),
        removed: done
            .removed
            .into_iter()
            .map(|f| RemovedFile {
                file: f.path,
                bytes: f.bytes,
            })
            .collect(),
        kept: Kept {
            recorded: done.kept.recorded,
            writer_alive: done.kept.writer_alive,
            recent: done.kept.recent,
            foreign: done.kept.foreign,
        },
    };
    tracing::info!(
        removed = report.removed.len(),
        bytes = report.removed_bytes,
        table_versions = report.table_versions,
        dry_run,
        "index files collected"
    );
    Ok(report)
}

async fn answer(s: &LanceSubstrate, io: GcIo) -> Result<GcOut> {
    let g = s.graph();
    Ok(match io {
        GcIo::ListFiles => {
            let now_ms = crate::util::ulid::now_ms();
            let files = g.store.list_all(INDEXES).await?;
            GcOut::Files(
                files
                    .into_iter()
                    .map(|(rel, bytes)| {
                        let path = format!("{INDEXES}/{rel}");
                        let writer = written(&path, now_ms);
                        IndexFile {
                            path,
                            bytes,
                            writer,
                        }
                    })
                    .collect(),
            )
        }
        GcIo::WritersAlive(writers) => {
            let intents = super::sidecar::list(&g.store).await?;
            let mut alive = Vec::with_capacity(writers.len());
            for w in &writers {
                let unresolved = intents.iter().any(|(_, owner)| owner == w);
                alive.push(unresolved || writer_alive(s, w).await);
            }
            // A writer judged dead here was taken over: fenced before gc acts.
            s.fence_takeovers().await?;
            GcOut::Alive(alive)
        }
        GcIo::ReadRecords => {
            let (files, versions) = recorded_files(g).await?;
            GcOut::Records(files, versions)
        }
        GcIo::Remove(paths) => {
            for p in &paths {
                g.store.delete(p).await?;
            }
            GcOut::Removed
        }
    })
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
        let now = crate::util::ulid::now_ms();
        let f = new_index_file("node-Doc", "body", "text", "W1");
        assert!(f.starts_with("_indexes/node-Doc/body-"), "{f}");
        assert_eq!(written(&f, now), FileWriter::Process("W1".into()));
        let ulid = "01JD8X3V7Q2W9G5N4M6K8P0R2T";
        let made = crate::util::ulid::millis(ulid).unwrap();
        let old = format!("_indexes/graph/edge-Knows-{ulid}.adj");
        let at = |ms| written(&old, ms);
        assert_eq!(
            at(made + UNNAMED_WRITER_GRACE_MS - 1),
            FileWriter::Unnamed { expired: false }
        );
        assert_eq!(
            at(made + UNNAMED_WRITER_GRACE_MS),
            FileWriter::Unnamed { expired: true }
        );
        for foreign in [
            "_indexes/graph/notes.txt",
            "_indexes/graph/edge-Knows-short.adj",
            "_indexes/graph/edge-Knows-01JD8X3V7Q2W9G5N4M6K8P0R2T.a-b.adj",
            "_indexes/graph/a.b.c.d",
        ] {
            assert_eq!(written(foreign, now), FileWriter::Foreign, "{foreign}");
        }
    }
}
