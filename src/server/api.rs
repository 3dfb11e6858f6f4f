//! The request and response bodies of the HTTP API: the types the handlers
//! read and write, and the OpenAPI document is derived from. Requests
//! refuse unknown fields; the reference API's names are accepted as
//! aliases (`query_source`, `query_name`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::Target;
use crate::error::{OmniError, Result};

#[derive(Serialize, ToSchema)]
pub struct Health {
    /// `ok` while the server serves.
    pub status: &'static str,
    pub version: &'static str,
}

#[derive(Serialize, ToSchema)]
pub struct GraphEntry {
    pub id: String,
}

#[derive(Serialize, ToSchema)]
pub struct GraphList {
    pub graphs: Vec<GraphEntry>,
}

/// A read query: `query` is `.gq` text; `name` picks one of its queries
/// (needed only when it has several). Reads a branch head (default
/// `main`) or the state a commit published (`snapshot`), not both.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QueryRequest {
    #[serde(alias = "query_source")]
    pub query: String,
    #[serde(default, alias = "query_name")]
    pub name: Option<String>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub params: Option<serde_json::Value>,
    #[serde(default)]
    pub branch: Option<String>,
    #[serde(default)]
    pub snapshot: Option<String>,
    /// Read `branch` as of this graph manifest version.
    #[serde(default)]
    pub version: Option<u64>,
}

/// A branch head, a commit's state, or a branch (default `main`) as of a
/// graph manifest version; a snapshot beside a branch or a version is an
/// input error.
pub fn target(
    branch: Option<&str>,
    snapshot: Option<&str>,
    version: Option<u64>,
) -> Result<Target> {
    let named = branch.is_some();
    let branch = || branch.unwrap_or(crate::MAIN).to_string();
    match (snapshot, version) {
        (Some(_), _) if named || version.is_some() => Err(OmniError::BadRequest(
            "give a snapshot, or a branch and perhaps a version, not both".into(),
        )),
        (Some(c), _) => Ok(Target::Commit(c.to_string())),
        (None, Some(v)) => Ok(Target::Version {
            version: v,
            branch: branch(),
        }),
        (None, None) => Ok(Target::Branch(branch())),
    }
}

/// What a read read: `{"branch": name}` or `{"snapshot": commit}`.
#[derive(Serialize, ToSchema)]
pub struct ReadTarget {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
}

impl ReadTarget {
    pub fn of(t: &Target) -> Self {
        match t {
            Target::Branch(b) | Target::Version { branch: b, .. } => Self {
                branch: Some(b.clone()),
                snapshot: None,
            },
            Target::Commit(c) => Self {
                branch: None,
                snapshot: Some(c.clone()),
            },
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct QueryResponse {
    pub query_name: String,
    pub target: ReadTarget,
    pub columns: Vec<String>,
    pub row_count: usize,
    /// One object per row, keyed by column, in `columns` order.
    #[schema(value_type = Vec<Object>)]
    pub rows: Vec<crate::results::Row>,
    /// The commit whose state the query read.
    pub graph_commit_id: String,
}

/// A mutation, as one commit on `branch` (default `main`).
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MutateRequest {
    #[serde(alias = "query_source")]
    pub query: String,
    #[serde(default, alias = "query_name")]
    pub name: Option<String>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub params: Option<serde_json::Value>,
    #[serde(default)]
    pub branch: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct CommitRef {
    pub graph_commit_id: String,
    pub graph_manifest_version: u64,
}

#[derive(Serialize, ToSchema)]
pub struct MutateResponse {
    pub branch: String,
    pub query_name: String,
    /// Node rows inserted, updated or deleted, all types together (the
    /// reference's wire contract: an integer).
    pub affected_nodes: usize,
    /// The same for edge rows.
    pub affected_edges: usize,
    /// `affected_nodes` per node type.
    pub affected_nodes_by_type: BTreeMap<String, usize>,
    /// `affected_edges` per edge type.
    pub affected_edges_by_type: BTreeMap<String, usize>,
    /// Who the commit records as its author: the token's actor.
    pub actor_id: String,
    pub commit: CommitRef,
    /// The mutation's place among the members of a commit it shared with
    /// others queued on the branch beside it (group commit); absent when
    /// the commit is its own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub member: Option<u32>,
}

/// Which state a snapshot describes: a branch head (default `main`), a
/// commit's, or a branch as of a graph manifest version.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct SnapshotQuery {
    #[serde(default)]
    pub branch: Option<String>,
    #[serde(default)]
    pub snapshot: Option<String>,
    #[serde(default)]
    pub version: Option<u64>,
}

#[derive(Serialize, ToSchema)]
pub struct DatasetInfo {
    /// The node or edge type.
    #[serde(rename = "type")]
    pub type_name: String,
    /// `node` or `edge`.
    pub kind: String,
    /// The table version this graph version names.
    pub version: u64,
    pub rows: usize,
    pub fragments: usize,
    pub lance_branch: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct SnapshotResponse {
    pub graph_branch: String,
    pub graph_manifest_version: u64,
    pub graph_commit_id: String,
    pub schema_id: String,
    pub datasets: Vec<DatasetInfo>,
}

#[derive(Serialize, ToSchema)]
pub struct BranchEntry {
    pub name: String,
    /// The branch's head commit.
    pub head: String,
    /// The branch it was created from.
    pub parent: Option<String>,
    /// The graph manifest version at which it last changed.
    pub updated_at: u64,
}

impl From<crate::BranchInfo> for BranchEntry {
    fn from(b: crate::BranchInfo) -> Self {
        Self {
            name: b.name,
            head: b.head,
            parent: b.parent,
            updated_at: b.updated_at,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct BranchList {
    pub branches: Vec<BranchEntry>,
}

/// Create branch `name` at the head of `from` (default `main`).
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateBranch {
    pub name: String,
    #[serde(default)]
    pub from: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct Deleted {
    pub deleted: String,
}

/// Merge `source` into `target` (default `main`).
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MergeRequest {
    pub source: String,
    #[serde(default)]
    pub target: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct MergeResponse {
    pub source: String,
    pub target: String,
    /// `up_to_date`, `fast_forward` or `merged`.
    pub outcome: String,
    /// The target's head after the merge.
    pub graph_commit_id: String,
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct CommitsQuery {
    #[serde(default)]
    pub branch: Option<String>,
    #[serde(default)]
    pub limit: Option<usize>,
}

#[derive(Serialize, ToSchema)]
pub struct CommitEntry {
    pub graph_commit_id: String,
    /// The first parent (`null` for the graph's first commit).
    pub parent_commit_id: Option<String>,
    /// A merge commit's second parent: the merged source's head.
    pub merged_parent_commit_id: Option<String>,
    pub actor_id: String,
    /// RFC 3339.
    pub created_at: String,
    pub graph_branch: String,
    pub graph_manifest_version: u64,
    /// `load`, `mutation`, `merge`, `schema_apply`, ...
    pub kind: String,
    /// What the commit did (per-type row counts, ...).
    #[schema(value_type = Object)]
    pub summary: serde_json::Value,
}

impl From<crate::CommitRecord> for CommitEntry {
    fn from(c: crate::CommitRecord) -> Self {
        let mut parents = c.parents.into_iter();
        Self {
            graph_commit_id: c.id,
            parent_commit_id: parents.next(),
            merged_parent_commit_id: parents.next(),
            actor_id: c.actor,
            created_at: c.timestamp,
            graph_branch: c.branch,
            graph_manifest_version: c.manifest_version,
            kind: c.kind,
            summary: c.summary,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct CommitList {
    pub commits: Vec<CommitEntry>,
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ChangesQuery {
    /// Only this type's changes.
    #[serde(default, rename = "type")]
    pub type_name: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct Change {
    /// `insert`, `update` or `delete`.
    pub change: String,
    #[serde(rename = "type")]
    pub type_name: String,
    pub id: String,
}

#[derive(Serialize, ToSchema)]
pub struct ChangeList {
    pub graph_commit_id: String,
    pub changes: Vec<Change>,
}

#[derive(Serialize, ToSchema)]
pub struct SchemaResponse {
    /// The accepted schema's source text.
    pub schema_source: String,
    pub schema_id: String,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SchemaApplyRequest {
    pub schema_source: String,
}

#[derive(Serialize, ToSchema)]
pub struct SchemaApplyResponse {
    /// Whether the schema changed (`false`: it already was this one).
    pub changed: bool,
    /// The commit on `main` (`null` when nothing changed).
    pub graph_commit_id: Option<String>,
    pub graph_manifest_version: u64,
    pub schema_id: String,
    /// The steps applied, as `omnigraph schema plan --json` lists them.
    #[schema(value_type = Vec<Object>)]
    pub steps: Vec<serde_json::Value>,
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct LoadQuery {
    /// `overwrite`, `append` or `merge` (required, as on the CLI).
    #[serde(default)]
    pub mode: Option<String>,
    #[serde(default)]
    pub branch: Option<String>,
    /// Create a missing `branch` from this one first.
    #[serde(default)]
    pub from: Option<String>,
}

/// A change-feed poll (`GET /graphs/{id}/changes`) or baseline: the
/// branch (default `main`), a cursor or a start, the filter, and how long
/// a poll that finds nothing new may wait for a commit.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct FeedQuery {
    #[serde(default)]
    pub branch: Option<String>,
    /// From a poll before; not with `start`.
    #[serde(default)]
    pub cursor: Option<String>,
    /// `now` (default), `beginning` or `after:COMMIT`.
    #[serde(default)]
    pub start: Option<String>,
    /// Types, comma-separated.
    #[serde(default, rename = "type")]
    pub types: Option<String>,
    /// `node` or `edge`.
    #[serde(default)]
    pub kind: Option<String>,
    /// Operations, comma-separated (`insert`, `update`, `delete`).
    #[serde(default)]
    pub op: Option<String>,
    /// At most this many commits a page (default 100).
    #[serde(default)]
    pub limit: Option<usize>,
    /// With nothing new, wait up to this long (at most 60,000) for a
    /// commit before answering an empty page.
    #[serde(default)]
    pub wait_ms: Option<u64>,
}

impl FeedQuery {
    pub fn request(&self) -> crate::Result<crate::ChangeRequest> {
        if self.cursor.is_some() && self.start.is_some() {
            return Err(OmniError::BadRequest(
                "give cursor or start, not both".into(),
            ));
        }
        let list = |v: &Option<String>| -> Vec<String> {
            v.iter()
                .flat_map(|s| s.split(','))
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        };
        Ok(crate::ChangeRequest {
            branch: self
                .branch
                .clone()
                .unwrap_or_else(|| crate::MAIN.to_string()),
            cursor: self.cursor.clone(),
            start: self.start.as_deref().unwrap_or("now").parse()?,
            types: list(&self.types),
            kind: self.kind.clone(),
            ops: list(&self.op),
            limit: self.limit,
        })
    }
}

/// A page of the change feed (docs/changes.md).
#[derive(Serialize, ToSchema)]
pub struct FeedResponse {
    /// Whole commits, oldest first: `{graph_commit_id, parent_commit_id,
    /// merged_parent_commit_id?, branch, actor, authored_at, commit_kind,
    /// schema?, changes: [{kind, type, id, op, before?, after?}], cursor}`.
    #[schema(value_type = Vec<Object>)]
    pub blocks: Vec<crate::ChangeBlock>,
    pub cursor: String,
    pub caught_up: bool,
}

/// One type a load wrote rows of.
#[derive(Serialize, ToSchema)]
pub struct LoadedType {
    pub name: String,
    pub entities_loaded: usize,
}

impl LoadedType {
    /// Per-type counts as the wire has them: sorted by name.
    pub fn list(counts: BTreeMap<String, usize>) -> Vec<LoadedType> {
        counts
            .into_iter()
            .map(|(name, entities_loaded)| LoadedType {
                name,
                entities_loaded,
            })
            .collect()
    }
}

#[derive(Serialize, ToSchema)]
pub struct LoadResponse {
    pub branch: String,
    pub branch_created: bool,
    /// The branch a missing `branch` was to be created from (the request's
    /// `from`), echoed even when `branch` existed; null without `from`.
    pub base_branch: Option<String>,
    pub mode: String,
    /// The node types the load wrote, sorted by name.
    pub nodes: Vec<LoadedType>,
    /// The edge types, the same way.
    pub edges: Vec<LoadedType>,
    /// Every row the load wrote.
    pub total_entities: usize,
    pub actor_id: String,
    pub commit: CommitRef,
}

/// Export a branch (default `main`) or a snapshot as NDJSON in the load
/// format, optionally of some types only.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExportRequest {
    #[serde(default)]
    pub branch: Option<String>,
    #[serde(default)]
    pub snapshot: Option<String>,
    #[serde(default)]
    pub type_names: Option<Vec<String>>,
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct BlobQuery {
    #[serde(rename = "type")]
    pub type_name: String,
    pub id: String,
    pub property: String,
    #[serde(default)]
    pub branch: Option<String>,
    #[serde(default)]
    pub snapshot: Option<String>,
}
