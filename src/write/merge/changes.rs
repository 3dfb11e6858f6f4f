//! The entity changes between two versions of one table, read from the
//! rows their fragment layouts say differ (`delta`): the one reading of
//! "what changed" that a merge's sides and `commit changes` share.

use std::collections::HashMap;

use arrow_array::{Array, RecordBatch, StringArray};
use serde::Serialize;

use super::delta::{Rows, delta};
use crate::error::{OmniError, Result};
use crate::storage::manifest::CommitRecord;
use crate::storage::tables::{BlobInput, Table};
use crate::storage::{GraphStorage, Snapshot};

/// A row among one side's reads: (batch, row).
pub type Loc = (usize, usize);

/// One side of a change: the rows that left the older version and those
/// that arrived in the newer one, by id, each with where it is (fragment,
/// offset: in the older version for rows that left, the newer for rows
/// that arrived). An id in both changed or was rewritten.
#[derive(Default)]
pub struct Side {
    pub batches: Vec<RecordBatch>,
    /// Per batch, the values of its Blob columns by column index: a Blob
    /// column holds a descriptor (where the bytes lie), and two rows hold
    /// the same value only when their bytes are the same.
    blobs: Vec<HashMap<usize, Vec<BlobInput>>>,
    pub left: HashMap<String, (Loc, (u32, u32))>,
    pub arrived: HashMap<String, (Loc, (u32, u32))>,
}

async fn read(
    table: &Table,
    rows: &Rows,
    batches: &mut Vec<RecordBatch>,
    blobs: &mut Vec<HashMap<usize, Vec<BlobInput>>>,
) -> Result<HashMap<String, (Loc, (u32, u32))>> {
    let blob_columns = table.blob_columns();
    let mut out = HashMap::new();
    for (frag, offsets) in rows {
        let (batch, ids) = table.rows_and_ids_at(*frag, offsets).await?;
        let mut values = HashMap::new();
        for name in &blob_columns {
            if let Ok(c) = batch.schema().index_of(name) {
                values.insert(c, table.blob_values(&ids, name).await?);
            }
        }
        blobs.push(values);
        let ids = batch
            .column(0)
            .as_any()
            .downcast_ref::<StringArray>()
            .ok_or_else(|| OmniError::Storage("the id column is not a string".into()))?;
        let b = batches.len();
        for (r, o) in offsets.iter().enumerate() {
            out.insert(ids.value(r).to_string(), ((b, r), (*frag, *o)));
        }
        batches.push(batch);
    }
    Ok(out)
}

/// The change from `old` to `new`, two versions of one table's lineage.
pub async fn side(old: &Table, new: &Table) -> Result<Side> {
    // Each layout is read once (it lists deletion vectors).
    let (old_layout, new_layout) = (old.layout().await?, new.layout().await?);
    let d = delta(&old_layout, &new_layout);
    let mut s = Side::default();
    s.left = read(old, &d.left, &mut s.batches, &mut s.blobs).await?;
    s.arrived = read(new, &d.arrived, &mut s.batches, &mut s.blobs).await?;
    Ok(s)
}

impl Side {
    fn row_equal(&self, a: Loc, b: Loc) -> bool {
        let (x, y) = (&self.batches[a.0], &self.batches[b.0]);
        (0..x.num_columns()).all(|c| match self.blobs[a.0].get(&c) {
            Some(values) => Some(&values[a.1]) == self.blobs[b.0].get(&c).map(|v| &v[b.1]),
            None => {
                crate::compiler::value::at(x.column(c), a.1)
                    == crate::compiler::value::at(y.column(c), b.1)
            }
        })
    }

    /// The ids that left and did not come back.
    pub fn deleted_ids(&self) -> std::collections::HashSet<String> {
        self.left
            .keys()
            .filter(|id| !self.arrived.contains_key(*id))
            .cloned()
            .collect()
    }

    /// Each id that really changed: (id, "insert" | "update" | "delete").
    /// A row that left and came back equal (a compaction) is no change.
    pub fn entity_changes(&self) -> Vec<(String, &'static str)> {
        let mut out = Vec::new();
        for (id, (at, _)) in &self.arrived {
            match self.left.get(id) {
                None => out.push((id.clone(), "insert")),
                Some((old, _)) if !self.row_equal(*old, *at) => out.push((id.clone(), "update")),
                Some(_) => {}
            }
        }
        for id in self.left.keys() {
            if !self.arrived.contains_key(id) {
                out.push((id.clone(), "delete"));
            }
        }
        out.sort();
        out
    }
}

/// One entity a commit changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EntityChange {
    pub change: &'static str,
    #[serde(rename = "type")]
    pub type_name: String,
    pub id: String,
    /// In a commit that several mutations shared (group commit): the
    /// place among the record's `members` of the mutation that wrote the
    /// row last, and that mutation's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub member: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mutation: Option<String>,
}

/// Who wrote each (type, id) of a shared commit: the last member whose
/// ids name it.
fn writers(rec: &CommitRecord) -> HashMap<(String, String), (u32, String)> {
    let mut out = HashMap::new();
    let Some(members) = rec.summary["members"].as_array() else {
        return out;
    };
    for (place, m) in members.iter().enumerate() {
        let name = m["mutation"].as_str().unwrap_or_default();
        let Some(ids) = m["ids"].as_object() else {
            continue;
        };
        for (ty, list) in ids {
            for id in list
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str())
            {
                out.insert(
                    (ty.clone(), id.to_string()),
                    (place as u32, name.to_string()),
                );
            }
        }
    }
    out
}

/// What one commit changed in one table.
pub struct TableDelta {
    pub def: crate::compiler::catalog::TypeDef,
    pub side: Side,
}

/// What a commit changed against its first parent.
pub enum CommitDelta {
    /// The graph's first commit: it only creates the empty tables.
    Root,
    /// A schema apply: it changes the shape of entities, not which
    /// entities there are or what they say.
    Schema { from: String, to: String },
    /// The tables whose rows it changed (among those asked for).
    Tables(Vec<TableDelta>),
}

/// The tables commit `rec` changed on its branch against its first parent
/// (for a merge commit: what it changed on the target), of the types
/// `wanted` says: only those tables' changed rows are read.
pub async fn commit_delta(
    g: &GraphStorage,
    rec: &CommitRecord,
    wanted: &(dyn Fn(&crate::compiler::catalog::TypeDef) -> bool + Sync),
) -> Result<CommitDelta> {
    let Some(parent) = rec.parents.first() else {
        return Ok(CommitDelta::Root);
    };
    let prec = g
        .manifests
        .commit(parent)
        .await?
        .ok_or_else(|| OmniError::Storage(format!("commit {parent} is missing its record")))?;
    let (before, after) = (snapshot_of(g, &prec).await?, snapshot_of(g, rec).await?);
    if before.schema.id != after.schema.id {
        return Ok(CommitDelta::Schema {
            from: before.schema.id.clone(),
            to: after.schema.id.clone(),
        });
    }
    let mut out = Vec::new();
    for def in &after.catalog().types {
        if !wanted(def) || before.table(def)? == after.table(def)? {
            continue;
        }
        let side = side(
            &g.read_table(&before, def).await?,
            &g.read_table(&after, def).await?,
        )
        .await?;
        out.push(TableDelta {
            def: def.clone(),
            side,
        });
    }
    Ok(CommitDelta::Tables(out))
}

/// What commit `rec` changed on its branch, against its first parent (for
/// a merge commit: what it changed on the target), optionally for one type.
pub async fn commit_changes(
    g: &GraphStorage,
    rec: &CommitRecord,
    only: Option<&str>,
) -> Result<Vec<EntityChange>> {
    if let Some(t) = only
        && snapshot_of(g, rec).await?.catalog().get(t).is_none()
    {
        return Err(OmniError::NotFound(format!("type {t}")));
    }
    let wanted = |def: &crate::compiler::catalog::TypeDef| only.is_none_or(|t| t == def.name);
    let CommitDelta::Tables(tables) = commit_delta(g, rec, &wanted).await? else {
        return Ok(Vec::new());
    };
    let writers = writers(rec);
    let mut out = Vec::new();
    for TableDelta { def, side } in tables {
        out.extend(side.entity_changes().into_iter().map(|(id, change)| {
            let by = writers.get(&(def.name.clone(), id.clone()));
            EntityChange {
                change,
                type_name: def.name.clone(),
                member: by.map(|b| b.0),
                mutation: by.map(|b| b.1.clone()),
                id,
            }
        }));
    }
    Ok(out)
}

/// The branch state a commit published.
async fn snapshot_of(g: &GraphStorage, rec: &CommitRecord) -> Result<Snapshot> {
    g.snapshot(&crate::storage::Target::Version {
        version: rec.manifest_version,
        branch: rec.branch.clone(),
    })
    .await
}
