//! The errors users can tell apart. Every failure of the engine is one of
//! these; each names what was wrong (line, type, property, value) where that
//! is known.

use std::fmt;

pub type Result<T, E = OmniError> = std::result::Result<T, E>;

/// Where in the user's input a data error was found, and what it was about.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Location {
    pub line: Option<usize>,
    /// The 0-based row of an input table (a load from Arrow tables); 32
    /// bits keep every error small, and a row past them saturates.
    pub row: Option<u32>,
    pub type_name: Option<String>,
    pub property: Option<String>,
    pub value: Option<String>,
    /// The line (or, with `row`, the row) of the earlier input row this one
    /// repeats: a duplicate id's or a `@unique` value's first occurrence
    /// (32 bits, as `row`; past them it is left out).
    pub first: Option<u32>,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(l) = self.line {
            parts.push(format!("line {l}"));
        }
        if let Some(r) = self.row {
            parts.push(format!("row {r}"));
        }
        match (&self.type_name, &self.property) {
            (Some(t), Some(p)) => parts.push(format!("{t}.{p}")),
            (Some(t), None) => parts.push(t.clone()),
            (None, Some(p)) => parts.push(format!("property {p}")),
            (None, None) => {}
        }
        if let Some(v) = &self.value {
            parts.push(format!("value {v}"));
        }
        match (self.first, self.row) {
            (Some(first), Some(_)) => parts.push(format!("first at row {first}")),
            (Some(first), None) => parts.push(format!("first at line {first}")),
            (None, _) => {}
        }
        f.write_str(&parts.join(", "))
    }
}

/// One reason a merge cannot be made.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MergeConflict {
    pub kind: ConflictKind,
    #[serde(rename = "type")]
    pub type_name: String,
    pub id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub property: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum ConflictKind {
    DivergentInsert,
    DivergentUpdate,
    DeleteVsUpdate,
    OrphanEdge,
    UniqueViolation,
    CardinalityViolation,
}

#[derive(Debug, thiserror::Error)]
pub enum OmniError {
    #[error("parse error at line {line}, column {column}: {message}\n  | {snippet}")]
    Parse {
        line: usize,
        column: usize,
        message: String,
        snippet: String,
    },
    /// The schema is well-formed but wrong (unknown type, duplicate, ...).
    #[error("schema error: {message}")]
    Schema { message: String },
    /// A query or mutation does not fit the schema. `code` is stable (Q0xx).
    #[error("type error {code}{}: {message}", at_position(*line, *column))]
    Type {
        code: &'static str,
        line: usize,
        column: usize,
        message: String,
    },
    /// Input data violates the schema or a constraint.
    #[error("{at}: {message}")]
    Invalid { at: Box<Location>, message: String },
    #[error("key conflict: {type_name} with id {id:?} already exists")]
    KeyConflict { type_name: String, id: String },
    /// A conditional write's branch head was not the expected commit.
    #[error("precondition failed: the branch head is {actual}, not the expected {expected}")]
    PreconditionFailed { expected: String, actual: String },
    #[error(
        "read set changed: the branch moved while the write was prepared; read again and retry"
    )]
    ReadSetChanged,
    /// A write compiled against one schema met another when it prepared (a
    /// schema apply came between); nothing was written.
    #[error(
        "schema changed: the write was checked against schema {compiled}, the graph now accepts {accepted}; nothing was written"
    )]
    SchemaChanged { compiled: String, accepted: String },
    /// Nothing was written: the write kept losing races, or waited past its
    /// limit for something another writer held (`waited_for` names it).
    #[error("write contended: gave up after {attempts} attempts, waiting for {waited_for}")]
    Contended { attempts: u32, waited_for: String },
    /// A write on a handle opened with `open_read_only`.
    #[error("the graph was opened read-only: {0}")]
    ReadOnly(String),
    #[error("recovery required for operation {operation_id}")]
    RecoveryRequired { operation_id: String },
    /// On object storage: this process's lease on the graph lapsed or was
    /// taken over, so it published nothing; the process that took the lease
    /// over resolves the write in flight. The handle writes nothing more.
    #[error("lease lost: {reason}")]
    LeaseLost { reason: String },
    #[error("resource limit exceeded: {what} (limit {limit})")]
    ResourceLimitExceeded { what: String, limit: String },
    /// A blob range outside `0..=length` or reversed; nothing was read.
    #[error("blob range {start}..{end} is not satisfiable for a blob of {length} bytes")]
    BlobRangeNotSatisfiable { start: u64, end: u64, length: u64 },
    /// A stored blob descriptor (or the witness its ETag needs) is not what
    /// a Blob cell must hold: the graph's storage is damaged or foreign.
    #[error("blob integrity: {reason}")]
    BlobIntegrity { reason: String },
    /// A write found, under its gates, nothing to do (an optimize with
    /// every index current, a merge whose source adds nothing): it wrote
    /// nothing. The handle reports that as a result without a commit, so
    /// its callers never see this error.
    #[error("nothing to write: already current")]
    AlreadyCurrent,
    /// A merge found conflicts; nothing was written. All of them, in order.
    #[error("the merge has {} conflict(s): {}", .0.len(), show_conflicts(.0))]
    MergeConflicts(Vec<MergeConflict>),
    #[error("not found: {0}")]
    NotFound(String),
    /// A read of a graph version a cleanup removed (its commit record, and
    /// so the history, stays).
    #[error(
        "graph version {version} of branch '{branch}' was removed by a cleanup; {}",
        oldest_kept.map_or("the branch keeps no older version".to_string(), |v| format!("the oldest version kept for '{branch}' is {v}"))
    )]
    VersionExpired {
        version: u64,
        branch: String,
        oldest_kept: Option<u64>,
    },
    #[error("already exists: {0}")]
    AlreadyExists(String),
    #[error("bad request: {0}")]
    BadRequest(String),
    #[error("storage error: {0}")]
    Storage(String),
    /// A change-feed cursor that is damaged, of another graph, branch
    /// (incarnation) or filter, or names a commit not on the branch.
    #[error("cursor rejected: {reason}")]
    CursorRejected { reason: String },
    /// The feed cannot go on from a cursor: a cleanup removed the state of
    /// the first commit it would deliver (recover with a baseline).
    #[error(
        "change feed gap: a cleanup removed what commit {first_unreadable_commit_id} changed; take a baseline (`omnigraph changes baseline`) and resume from its cursor"
    )]
    ChangeFeedGap { first_unreadable_commit_id: String },
    /// The policy in force does not let this actor do this here.
    #[error(
        "policy denied: actor {} may not {action}{}{} ({reason}); nothing was changed",
        who(.actor),
        on(" on branch", .branch),
        on(" targeting branch", .target_branch)
    )]
    PolicyDenied {
        actor: String,
        action: String,
        branch: Option<String>,
        target_branch: Option<String>,
        reason: String,
    },
    /// An external blob's object is no longer the one its reference
    /// recorded: another ETag (or version), another length, or gone.
    #[error(
        "the external object {uri} changed since its reference was written: {recorded} recorded, {found} now; nothing was read"
    )]
    BlobChanged {
        uri: String,
        recorded: String,
        found: String,
    },
    /// A text query could not be embedded: no endpoint configured, it did
    /// not answer in time, refused, or answered something that is not a
    /// vector of the property's dimension.
    #[error("embedding failed: {0}")]
    Embedding(String),
    /// The storage library failed: its error is kept as the source
    /// (`std::error::Error::source`), its type is not part of this one.
    #[error("storage error: {0}")]
    Backend(#[source] BackendError),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

/// A denied call's actor as its error names it.
fn who(actor: &str) -> String {
    match actor {
        "" => "(none)".into(),
        a => format!("'{a}'"),
    }
}

/// ` on branch 'b'`, or nothing.
fn on(what: &str, branch: &Option<String>) -> String {
    branch
        .as_ref()
        .map(|b| format!("{what} '{b}'"))
        .unwrap_or_default()
}

fn show_conflicts(c: &[MergeConflict]) -> String {
    c.iter()
        .map(|c| {
            let at = c
                .property
                .as_ref()
                .map_or(String::new(), |p| format!(".{p}"));
            format!("{:?} on {} {:?}{at}", c.kind, c.type_name, c.id)
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn at_position(line: usize, column: usize) -> String {
    if line == 0 {
        String::new()
    } else {
        format!(" at line {line}, column {column}")
    }
}

impl OmniError {
    pub fn invalid(at: Location, message: impl Into<String>) -> Self {
        Self::Invalid {
            at: Box::new(at),
            message: message.into(),
        }
    }

    pub fn schema(message: impl Into<String>) -> Self {
        Self::Schema {
            message: message.into(),
        }
    }

    pub fn storage(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::Backend(BackendError::new(e))
    }

    /// The exit code of the CLI, and the group a binding raises: 2, the
    /// input is wrong (fix it: its text, its data, a key it repeats, its
    /// size, a version it names that a cleanup removed, a graph, branch,
    /// commit, type or row it names that does not exist or one it would
    /// create that does); 4, a condition or
    /// another writer got in the way (retry); 5, a merge has conflicts
    /// (resolve them); 1, anything else. The README's table lists every
    /// kind (a test holds the two together).
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::Parse { .. }
            | Self::Schema { .. }
            | Self::Type { .. }
            | Self::BadRequest(_)
            | Self::Invalid { .. }
            | Self::KeyConflict { .. }
            | Self::ResourceLimitExceeded { .. }
            | Self::BlobRangeNotSatisfiable { .. }
            | Self::VersionExpired { .. }
            | Self::NotFound(_)
            | Self::AlreadyExists(_)
            | Self::CursorRejected { .. }
            | Self::ChangeFeedGap { .. }
            | Self::PolicyDenied { .. }
            | Self::ReadOnly(_) => 2,
            Self::ReadSetChanged
            | Self::SchemaChanged { .. }
            | Self::Contended { .. }
            | Self::PreconditionFailed { .. } => 4,
            Self::MergeConflicts(_) => 5,
            _ => 1,
        }
    }

    /// Did storage (or this process's lease) fail, rather than the write
    /// ask for something that cannot be done? Such a failure may come
    /// after an effect; any other came before one.
    pub fn is_storage_failure(&self) -> bool {
        matches!(
            self,
            OmniError::Storage(_)
                | OmniError::Backend(_)
                | OmniError::Io(_)
                | OmniError::LeaseLost { .. }
                | OmniError::RecoveryRequired { .. }
        )
    }

    /// A short stable name for the error kind, used in machine output.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Parse { .. } => "ParseError",
            Self::Schema { .. } => "SchemaError",
            Self::Type { .. } => "TypeError",
            Self::Invalid { .. } => "InvalidData",
            Self::KeyConflict { .. } => "KeyConflict",
            Self::PreconditionFailed { .. } => "PreconditionFailed",
            Self::ReadSetChanged => "ReadSetChanged",
            Self::SchemaChanged { .. } => "SchemaChanged",
            Self::Contended { .. } => "Contended",
            Self::ReadOnly(_) => "ReadOnly",
            Self::RecoveryRequired { .. } => "RecoveryRequired",
            Self::LeaseLost { .. } => "LeaseLost",
            Self::ResourceLimitExceeded { .. } => "ResourceLimitExceeded",
            Self::BlobRangeNotSatisfiable { .. } => "BlobRangeNotSatisfiable",
            Self::BlobIntegrity { .. } => "BlobIntegrity",
            Self::BlobChanged { .. } => "BlobChanged",
            Self::CursorRejected { .. } => "CursorRejected",
            Self::ChangeFeedGap { .. } => "ChangeFeedGap",
            Self::PolicyDenied { .. } => "PolicyDenied",
            Self::AlreadyCurrent => "AlreadyCurrent",
            Self::MergeConflicts(_) => "MergeConflicts",
            Self::NotFound(_) => "NotFound",
            Self::VersionExpired { .. } => "VersionExpired",
            Self::AlreadyExists(_) => "AlreadyExists",
            Self::BadRequest(_) => "BadRequest",
            Self::Embedding(_) => "EmbeddingError",
            Self::Storage(_) | Self::Backend(_) | Self::Io(_) => "StorageError",
        }
    }
}

impl From<arrow_schema::ArrowError> for OmniError {
    fn from(e: arrow_schema::ArrowError) -> Self {
        Self::Backend(BackendError::new(e))
    }
}

impl From<serde_json::Error> for OmniError {
    fn from(e: serde_json::Error) -> Self {
        Self::Backend(BackendError::new(e))
    }
}

/// A failure of a library below the engine (the storage library, the
/// query engine), kept whole as the source of [`OmniError::Backend`].
#[derive(Debug)]
pub struct BackendError(Box<dyn std::error::Error + Send + Sync>);

impl BackendError {
    pub fn new(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self(Box::new(e))
    }
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for BackendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.0.as_ref())
    }
}

#[cfg(test)]
mod exit_codes {
    use std::collections::BTreeMap;

    use super::*;

    /// One error of every kind a caller can meet.
    fn every_kind() -> Vec<OmniError> {
        let s = || "x".to_string();
        vec![
            OmniError::Parse {
                line: 1,
                column: 1,
                message: s(),
                snippet: s(),
            },
            OmniError::schema("x"),
            OmniError::Type {
                code: "Q001",
                line: 1,
                column: 1,
                message: s(),
            },
            OmniError::invalid(Location::default(), "x"),
            OmniError::KeyConflict {
                type_name: s(),
                id: s(),
            },
            OmniError::PreconditionFailed {
                expected: s(),
                actual: s(),
            },
            OmniError::ReadSetChanged,
            OmniError::SchemaChanged {
                compiled: s(),
                accepted: s(),
            },
            OmniError::Contended {
                attempts: 1,
                waited_for: s(),
            },
            OmniError::ReadOnly(s()),
            OmniError::RecoveryRequired { operation_id: s() },
            OmniError::LeaseLost { reason: s() },
            OmniError::ResourceLimitExceeded {
                what: s(),
                limit: s(),
            },
            OmniError::BlobRangeNotSatisfiable {
                start: 2,
                end: 1,
                length: 1,
            },
            OmniError::BlobIntegrity { reason: s() },
            OmniError::BlobChanged {
                uri: s(),
                recorded: s(),
                found: s(),
            },
            OmniError::CursorRejected { reason: s() },
            OmniError::ChangeFeedGap {
                first_unreadable_commit_id: s(),
            },
            OmniError::PolicyDenied {
                actor: s(),
                action: s(),
                branch: None,
                target_branch: None,
                reason: s(),
            },
            OmniError::MergeConflicts(Vec::new()),
            OmniError::NotFound(s()),
            OmniError::VersionExpired {
                version: 1,
                branch: s(),
                oldest_kept: None,
            },
            OmniError::AlreadyExists(s()),
            OmniError::BadRequest(s()),
            OmniError::Embedding(s()),
            OmniError::Storage(s()),
        ]
    }

    #[test]
    fn the_readme_lists_every_kind_with_its_exit_code() {
        let readme = include_str!("../README.md");
        let table: BTreeMap<&str, i32> = readme
            .lines()
            .filter_map(|l| {
                let cells: Vec<&str> = l.split('|').map(str::trim).collect();
                let kind = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
                let code = cells.get(2)?.parse().ok()?;
                Some((kind, code))
            })
            .collect();
        let kinds: BTreeMap<&str, i32> = every_kind()
            .iter()
            .map(|e| (e.kind(), e.exit_code()))
            .collect();
        assert_eq!(
            table, kinds,
            "README.md's table of error kinds and exit codes"
        );
        for input in [
            "ParseError",
            "SchemaError",
            "TypeError",
            "InvalidData",
            "KeyConflict",
            "BadRequest",
            "ReadOnly",
            "ResourceLimitExceeded",
        ] {
            assert_eq!(kinds[input], 2, "{input} is bad input");
        }
    }
}

#[cfg(test)]
mod backend {
    use super::*;

    /// Each library's failure keeps its own error as the source: the
    /// object store's, Arrow's, JSON's.
    #[test]
    fn every_library_s_failure_keeps_its_source() {
        let store = object_store::Error::NotImplemented {
            operation: "x".into(),
            implementer: "y".into(),
        };
        let arrow = arrow_schema::ArrowError::ComputeError("overflow".into());
        let json = serde_json::from_str::<u8>("no").unwrap_err();
        for (e, text) in [
            (OmniError::storage(store), "implemented"),
            (OmniError::from(arrow), "overflow"),
            (OmniError::from(json), "expected"),
        ] {
            assert_eq!(e.kind(), "StorageError");
            let inner = std::error::Error::source(&e)
                .and_then(|b| b.source())
                .unwrap_or_else(|| panic!("{e}: no source"));
            assert!(inner.to_string().to_lowercase().contains(text), "{inner}");
        }
    }

    #[test]
    fn a_library_failure_is_kept_as_the_source() {
        let io = std::io::Error::other("disk on fire");
        let e = OmniError::Backend(BackendError::new(io));
        assert_eq!(e.kind(), "StorageError");
        assert_eq!(e.to_string(), "storage error: disk on fire");
        let source = std::error::Error::source(&e).expect("the backend error");
        let inner = source.source().expect("the library's own error");
        assert_eq!(inner.to_string(), "disk on fire");
    }
}
