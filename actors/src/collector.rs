//! Collection of index files no table version records, as a plain state
//! machine: list the files, ask whether each file's writer lives, read what
//! every table version records, remove the rest. Its host runs one request
//! at a time (production by direct calls, the simulator among everything
//! else that happens).
//!
//! The order is the protocol. An index file is written before the table
//! version that records it, so an unrecorded file is garbage only once its
//! writer can record nothing more. A writer found gone commits nothing
//! afterwards, so records read after every writer was judged name every
//! file a gone writer ever recorded; a file written after the listing is
//! not a candidate at all.

use std::collections::{BTreeMap, BTreeSet};

use crate::bugs::Bugs;

/// Who wrote an index file, as its name says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileWriter {
    /// A process incarnation, which can be asked whether it lives.
    Process(String),
    /// No writer in the name (written before names carried one); `expired`:
    /// older than the grace its host allows such files.
    Unnamed { expired: bool },
    /// A name no writer of index files gives: never removed.
    Foreign,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexFile {
    pub path: String,
    pub bytes: u64,
    pub writer: FileWriter,
}

/// Whether one file goes, and why it stays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Recorded,
    WriterAlive,
    /// Unnamed, within its grace.
    Recent,
    Foreign,
    Garbage,
}

/// The rule for one file. `writer_alive` must have been answered before
/// `recorded` was read (see the module comment).
pub fn verdict(writer: &FileWriter, writer_alive: bool, recorded: bool) -> Verdict {
    match writer {
        _ if recorded => Verdict::Recorded,
        FileWriter::Foreign => Verdict::Foreign,
        FileWriter::Process(_) if writer_alive => Verdict::WriterAlive,
        FileWriter::Process(_) => Verdict::Garbage,
        FileWriter::Unnamed { expired: false } => Verdict::Recent,
        FileWriter::Unnamed { expired: true } => Verdict::Garbage,
    }
}

/// A storage request of the collector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GcIo {
    ListFiles,
    /// Whether each of these writers may still record a file.
    WritersAlive(Vec<String>),
    /// Every file any version of any table records.
    ReadRecords,
    Remove(Vec<String>),
}

/// The completion of a [`GcIo`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GcOut {
    Files(Vec<IndexFile>),
    /// One answer per writer asked, in order.
    Alive(Vec<bool>),
    /// The files, and how many table versions were read.
    Records(BTreeSet<String>, usize),
    Removed,
    Failed(String),
}

/// Files kept, by reason.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Kept {
    pub recorded: usize,
    pub writer_alive: usize,
    pub recent: usize,
    pub foreign: usize,
}

/// What a finished collection found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Collection {
    pub removed: Vec<IndexFile>,
    pub kept: Kept,
    pub table_versions: usize,
}

/// What the host does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GcStep {
    Io(GcIo),
    Done(Result<Collection, String>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
    Start,
    Listing,
    Judging,
    Reading,
    Removing,
    Done,
}

pub struct Collector {
    dry_run: bool,
    bugs: Bugs,
    state: State,
    files: Vec<IndexFile>,
    listed: bool,
    asked: Vec<String>,
    alive: BTreeMap<String, bool>,
    records: Option<(BTreeSet<String>, usize)>,
    out: Collection,
}

impl Collector {
    pub fn new(dry_run: bool, bugs: Bugs) -> Self {
        Self {
            dry_run,
            bugs,
            state: State::Start,
            files: Vec::new(),
            listed: false,
            asked: Vec::new(),
            alive: BTreeMap::new(),
            records: None,
            out: Collection::default(),
        }
    }

    pub fn start(&mut self) -> GcStep {
        assert_eq!(self.state, State::Start, "a collector starts once");
        if self.bugs.gc_records_first() {
            self.state = State::Reading;
            return GcStep::Io(GcIo::ReadRecords);
        }
        self.state = State::Listing;
        GcStep::Io(GcIo::ListFiles)
    }

    pub fn on(&mut self, out: GcOut) -> GcStep {
        if let GcOut::Failed(e) = out {
            assert!(
                !matches!(self.state, State::Start | State::Done),
                "an answer to no request: {e}"
            );
            self.state = State::Done;
            return GcStep::Done(Err(e));
        }
        match (&self.state, out) {
            (State::Listing, GcOut::Files(files)) => {
                self.files = files;
                self.listed = true;
                let writers: BTreeSet<String> = self
                    .files
                    .iter()
                    .filter_map(|f| match &f.writer {
                        FileWriter::Process(w) => Some(w.clone()),
                        _ => None,
                    })
                    .collect();
                self.asked = writers.into_iter().collect();
                if self.bugs.gc_ignores_writers() {
                    self.alive = self.asked.drain(..).map(|w| (w, false)).collect();
                }
                if self.asked.is_empty() {
                    return self.after_judging();
                }
                self.state = State::Judging;
                GcStep::Io(GcIo::WritersAlive(self.asked.clone()))
            }
            (State::Judging, GcOut::Alive(answers)) => {
                assert_eq!(
                    answers.len(),
                    self.asked.len(),
                    "one liveness answer per writer asked"
                );
                self.alive = self.asked.drain(..).zip(answers).collect();
                self.after_judging()
            }
            (State::Reading, GcOut::Records(files, versions)) => {
                self.records = Some((files, versions));
                if !self.listed {
                    self.state = State::Listing;
                    return GcStep::Io(GcIo::ListFiles);
                }
                self.decide()
            }
            (State::Removing, GcOut::Removed) => self.finish(),
            (state, out) => panic!("collector in {state:?} got {out:?}"),
        }
    }

    fn after_judging(&mut self) -> GcStep {
        if self.records.is_some() {
            return self.decide();
        }
        self.state = State::Reading;
        GcStep::Io(GcIo::ReadRecords)
    }

    fn decide(&mut self) -> GcStep {
        let (recorded, versions) = self.records.take().expect("records read");
        self.out.table_versions = versions;
        for f in std::mem::take(&mut self.files) {
            let alive = match &f.writer {
                FileWriter::Process(w) => *self.alive.get(w).expect("every writer was asked"),
                _ => false,
            };
            match verdict(&f.writer, alive, recorded.contains(&f.path)) {
                Verdict::Recorded => self.out.kept.recorded += 1,
                Verdict::WriterAlive => self.out.kept.writer_alive += 1,
                Verdict::Recent => self.out.kept.recent += 1,
                Verdict::Foreign => self.out.kept.foreign += 1,
                Verdict::Garbage => self.out.removed.push(f),
            }
        }
        if self.dry_run || self.out.removed.is_empty() {
            return self.finish();
        }
        self.state = State::Removing;
        let paths = self.out.removed.iter().map(|f| f.path.clone()).collect();
        GcStep::Io(GcIo::Remove(paths))
    }

    fn finish(&mut self) -> GcStep {
        self.state = State::Done;
        GcStep::Done(Ok(std::mem::take(&mut self.out)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, writer: FileWriter) -> IndexFile {
        IndexFile {
            path: path.into(),
            bytes: 1,
            writer,
        }
    }

    #[test]
    fn only_unrecorded_files_of_gone_or_expired_unnamed_writers_go() {
        let by = FileWriter::Process("W".into());
        let old = FileWriter::Unnamed { expired: true };
        let young = FileWriter::Unnamed { expired: false };
        assert_eq!(verdict(&by, false, true), Verdict::Recorded);
        assert_eq!(verdict(&by, true, true), Verdict::Recorded);
        assert_eq!(verdict(&by, true, false), Verdict::WriterAlive);
        assert_eq!(verdict(&by, false, false), Verdict::Garbage);
        assert_eq!(verdict(&old, false, false), Verdict::Garbage);
        assert_eq!(verdict(&old, false, true), Verdict::Recorded);
        assert_eq!(verdict(&young, false, false), Verdict::Recent);
        assert_eq!(
            verdict(&FileWriter::Foreign, false, false),
            Verdict::Foreign
        );
    }

    #[test]
    fn writers_are_judged_after_the_listing_and_before_the_records() {
        let mut c = Collector::new(false, Bugs::default());
        assert_eq!(c.start(), GcStep::Io(GcIo::ListFiles));
        let files = vec![
            file("a", FileWriter::Process("1".into())),
            file("b", FileWriter::Process("2".into())),
            file("c", FileWriter::Process("1".into())),
            file("d", FileWriter::Foreign),
        ];
        assert_eq!(
            c.on(GcOut::Files(files)),
            GcStep::Io(GcIo::WritersAlive(vec!["1".into(), "2".into()]))
        );
        assert_eq!(
            c.on(GcOut::Alive(vec![false, true])),
            GcStep::Io(GcIo::ReadRecords)
        );
        assert_eq!(
            c.on(GcOut::Records(BTreeSet::from(["c".to_string()]), 7)),
            GcStep::Io(GcIo::Remove(vec!["a".into()]))
        );
        let GcStep::Done(Ok(done)) = c.on(GcOut::Removed) else {
            panic!("the collection ends after its removal");
        };
        assert_eq!(
            done.kept,
            Kept {
                recorded: 1,
                writer_alive: 1,
                recent: 0,
                foreign: 1
            }
        );
        assert_eq!(done.table_versions, 7);
        assert_eq!(
            done.removed,
            vec![file("a", FileWriter::Process("1".into()))]
        );
    }

    #[test]
    fn a_dry_run_removes_nothing_and_a_failure_ends_the_collection() {
        let mut c = Collector::new(true, Bugs::default());
        c.start();
        c.on(GcOut::Files(vec![file(
            "a",
            FileWriter::Process("1".into()),
        )]));
        c.on(GcOut::Alive(vec![false]));
        let GcStep::Done(Ok(done)) = c.on(GcOut::Records(BTreeSet::new(), 1)) else {
            panic!("a dry run ends after the records");
        };
        assert_eq!(done.removed.len(), 1);
        let mut c = Collector::new(false, Bugs::default());
        c.start();
        assert_eq!(
            c.on(GcOut::Failed("store down".into())),
            GcStep::Done(Err("store down".into()))
        );
    }
}
