//! Recovery sidecars on storage: one JSON file per in-flight write intent
//! under `_graph/recovery/`, written before the first table commit and deleted
//! after the publish. Each names the incarnation of the process that wrote
//! it, so another process can tell whether its writer still lives.

use serde::{Deserialize, Serialize};

use super::objstore::Store;
use crate::error::Result;
use omnigraph_actors::{
    CommitId, Head, Intent, IntentTable, MergeOf, NewTable, OpId, SchemaChange, TableKey,
};

const DIR: &str = "_graph/recovery";

#[derive(Serialize, Deserialize)]
struct SidecarFile {
    op: String,
    /// The writing process's incarnation (empty in sidecars written before
    /// owners were recorded: their writers are long gone).
    #[serde(default)]
    owner: String,
    /// What the operation was ("load", "mutate", "compact", ...), as its
    /// commit record would name it: for whoever finds the sidecar (an
    /// operator, a test), since a load's sidecar and the sidecar of the
    /// compaction the load runs after its commit look alike otherwise.
    #[serde(default)]
    kind: String,
    branch: String,
    expected_commit: String,
    expected_version: u64,
    commit: String,
    tables: Vec<SidecarTable>,
    /// A merge's other side (absent for every other write).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    merge: Option<SidecarMerge>,
    /// A schema apply's change (absent for every other write).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    schema: Option<SidecarSchema>,
}

#[derive(Serialize, Deserialize)]
struct SidecarSchema {
    from: String,
    to: String,
    manifest: u64,
    created: Vec<SidecarNewTable>,
}

#[derive(Serialize, Deserialize)]
struct SidecarNewTable {
    table: String,
    dir: String,
    version: u64,
    incarnation: u64,
}

#[derive(Serialize, Deserialize)]
struct SidecarMerge {
    source: String,
    source_commit: String,
    source_version: u64,
    adopt: Vec<String>,
    fast_forward: bool,
}

#[derive(Serialize, Deserialize)]
struct SidecarTable {
    branch: String,
    table: String,
    base: u64,
    txn: String,
}

fn file(op: &OpId) -> String {
    format!("{DIR}/{}.json", op.0)
}

pub async fn write(store: &Store, intent: &Intent, owner: &str, kind: &str) -> Result<()> {
    let f = SidecarFile {
        op: intent.op.0.clone(),
        owner: owner.to_string(),
        kind: kind.to_string(),
        branch: intent.branch.clone(),
        expected_commit: intent.expected.commit.0.clone(),
        expected_version: intent.expected.version,
        commit: intent.commit.0.clone(),
        tables: intent
            .tables
            .iter()
            .map(|t| SidecarTable {
                branch: t.table.branch.clone(),
                table: t.table.table.clone(),
                base: t.base,
                txn: t.txn.clone(),
            })
            .collect(),
        merge: intent.merge.as_ref().map(|m| SidecarMerge {
            source: m.source.clone(),
            source_commit: m.head.commit.0.clone(),
            source_version: m.head.version,
            adopt: m.adopt.clone(),
            fast_forward: m.fast_forward,
        }),
        schema: intent.schema_change.as_ref().map(|s| SidecarSchema {
            from: s.from.clone(),
            to: s.to.clone(),
            manifest: s.manifest,
            created: s
                .created
                .iter()
                .map(|t| SidecarNewTable {
                    table: t.table.clone(),
                    dir: t.dir.clone(),
                    version: t.version,
                    incarnation: t.incarnation,
                })
                .collect(),
        }),
    };
    store
        .put(&file(&intent.op), &serde_json::to_vec_pretty(&f)?)
        .await
}

/// Is the sidecar of `op` still on storage?
pub async fn exists(store: &Store, op: &OpId) -> Result<bool> {
    store.exists(&file(op)).await
}

pub async fn delete(store: &Store, op: &OpId) -> Result<()> {
    store.delete(&file(op)).await
}

/// Every sidecar, with the incarnation of the process that wrote it.
pub async fn list(store: &Store) -> Result<Vec<(Intent, String)>> {
    let mut out = Vec::new();
    for name in store.list(DIR).await? {
        // Temporary files of an interrupted atomic write are not sidecars.
        if !name.ends_with(".json") {
            continue;
        }
        let rel = format!("{DIR}/{name}");
        let Some(bytes) = store.read(&rel).await? else {
            continue;
        };
        let f: SidecarFile = match serde_json::from_slice(&bytes) {
            Ok(f) => f,
            Err(e) => {
                // A sidecar is complete before its first table commit starts,
                // so a torn one guards nothing: remove it.
                tracing::warn!(file = %rel, error = %e, "removing a torn recovery sidecar");
                store.delete(&rel).await?;
                continue;
            }
        };
        out.push((
            Intent {
                op: OpId(f.op),
                branch: f.branch,
                expected: Head {
                    commit: CommitId(f.expected_commit),
                    version: f.expected_version,
                },
                commit: CommitId(f.commit),
                tables: f
                    .tables
                    .into_iter()
                    .map(|t| IntentTable {
                        table: TableKey::new(t.branch, t.table),
                        base: t.base,
                        txn: t.txn,
                    })
                    .collect(),
                merge: f.merge.map(|m| MergeOf {
                    source: m.source,
                    head: Head {
                        commit: CommitId(m.source_commit),
                        version: m.source_version,
                    },
                    adopt: m.adopt,
                    fast_forward: m.fast_forward,
                }),
                schema_change: f.schema.map(|s| SchemaChange {
                    from: s.from,
                    to: s.to,
                    manifest: s.manifest,
                    created: s
                        .created
                        .into_iter()
                        .map(|t| NewTable {
                            table: t.table,
                            dir: t.dir,
                            version: t.version,
                            incarnation: t.incarnation,
                        })
                        .collect(),
                }),
            },
            f.owner,
        ));
    }
    Ok(out)
}
