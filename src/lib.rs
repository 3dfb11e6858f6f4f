//! Omnigraph: a typed property-graph database on Lance.
//!
//! Every node and edge type is a Lance dataset; one graph manifest ties their
//! versions together per branch. Writes go through the actor protocol in
//! `omnigraph-actors` (gates, recovery sidecars, staged table commits, one
//! atomic publish); reads resolve one snapshot and keep it.
//!
//! Layers call downward only. [`handle`] (the service API) checks text with
//! [`compiler`] (no I/O), reads a snapshot with [`exec`], and runs every
//! write through the protocol actors of `omnigraph-actors`; their storage
//! requests are carried out by [`storage`], which asks the write's
//! [`write`] work to prepare its change. [`storage`] alone touches Lance.

pub mod compiler;
pub mod error;
pub mod exec;
pub mod handle;
pub mod index;
pub mod policy;
pub mod server;
pub mod storage;
pub mod util;
pub mod write;

/// The unit tests' setup, before `main` while this is the only thread: the
/// local S3 server the lease tests use, as `scripts/test.sh` would start it.
#[cfg(test)]
#[ctor::ctor(unsafe)]
fn local_s3_server() {
    // SAFETY: constructors run before main, so no other thread exists.
    unsafe { util::local_s3::export() };
}

pub use compiler::blob_policy::BlobPolicy;
pub use compiler::schema::evolve::{
    Step as SchemaStep, StepKind as SchemaStepKind, Work as StepWork,
};
pub use error::{OmniError, Result};
pub use exec::blob::{Blob, BlobCell, BlobReader};
pub use exec::run::QueryResult;
pub use handle::{
    Baseline, BranchInfo, ChangeBlock, ChangePage, ChangeRequest, ChangeStart, CommitHold,
    FeedChange, LoadReport, Omnigraph, OpenOptions, OptimizeReport, SchemaCommit, SnapshotInfo,
    TableInfo, TableLocation, default_actor,
};
pub use storage::index_files::GcReport;
pub use storage::manifest::CommitRecord;
pub use storage::retention::{CleanupReport, RetentionPolicy};
pub use storage::{Snapshot, Target};
pub use write::arrow_input::TableInput;
pub use write::load::LoadMode;
pub use write::merge::changes::EntityChange;
pub use write::merge::{MergeConflict, MergeOutcome};
pub use write::mutate::MutationResult;
pub use write::schema_apply::{PlannedStep, SchemaPlan};

// What the interface bindings (the CLI, the server, the Python package)
// use beyond the handle: they reach nothing below this file.
pub use compiler::blob_policy::parse as parse_blob_base;
pub use compiler::query::check::query_name;
pub use storage::manifest::MAIN;
pub use storage::requests::StorageSession;
pub use storage::retention::parse_duration;

/// Results as the bindings hand them out: printed, as Arrow IPC, as JSON
/// rows, as the load format's lines.
pub mod results {
    pub use crate::exec::explain::render as explain;
    pub use crate::exec::export::{LineChunks, cell_json, check_types};
    pub use crate::exec::output::{Format, Row, from_ipc, ordered_rows, to_ipc, write};
}

/// A blob's bytes served in ranges and steps.
pub mod blob_range {
    pub use crate::exec::blob::{clamp, steps};
}
