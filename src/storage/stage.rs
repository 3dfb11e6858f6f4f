//! Staging table changes without moving any table's head (two-phase writes),
//! and the reads writes need before staging: id probes and column scans.

use std::collections::HashSet;
use std::sync::Arc;

use arrow_array::{Array, RecordBatch, StringArray};
use datafusion::prelude::{col, lit};
use futures::TryStreamExt;
use lance::Dataset;
use lance::dataset::transaction::Transaction;
use lance::dataset::{InsertBuilder, MergeInsertBuilder, WhenMatched, WhenNotMatched, WriteMode};

use super::tables::{GRAPH_INDEX_KEY, Table, TableChange, index_key, write_params};
use crate::compiler::catalog::ID;
use crate::error::{OmniError, Result};
use crate::index::IndexRef;
use crate::index::adjacency_file::GraphIndexRef;

/// How many ids one `IN (...)` probe carries.
pub const PROBE_CHUNK: usize = 4096;

pub async fn append(Table(ds): Table, batches: Vec<RecordBatch>) -> Result<TableChange> {
    insert(ds, batches, WriteMode::Append).await
}

pub async fn overwrite(Table(ds): Table, batches: Vec<RecordBatch>) -> Result<TableChange> {
    insert(ds, batches, WriteMode::Overwrite).await
}

async fn insert(
    ds: Arc<Dataset>,
    batches: Vec<RecordBatch>,
    mode: WriteMode,
) -> Result<TableChange> {
    let session = ds.session();
    let params = write_params(&session, mode);
    Ok(TableChange::one(
        InsertBuilder::new(ds)
            .with_params(&params)
            .execute_uncommitted(batches)
            .await?,
    ))
}

/// Upsert by id: matched rows are replaced, new ids inserted.
pub async fn upsert(Table(ds): Table, batches: Vec<RecordBatch>) -> Result<TableChange> {
    let mut b = MergeInsertBuilder::try_new(ds, vec![ID.to_string()])?;
    b.when_matched(WhenMatched::UpdateAll)
        .when_not_matched(WhenNotMatched::InsertAll)
        .conflict_retries(0);
    let staged = b.try_build()?.execute_uncommitted_batches(batches).await?;
    Ok(TableChange::one(staged.transaction))
}

/// Rewrite a table's small fragments into few large ones, as a staged
/// transaction (`None` when there is nothing worth rewriting). The new files
/// are invisible until the transaction is committed.
pub async fn compaction(Table(ds): Table) -> Result<Option<TableChange>> {
    use lance::dataset::optimize::{CompactionOptions, plan_compaction};
    use lance::dataset::transaction::{Operation, RewriteGroup};
    let plan = plan_compaction(&ds, &CompactionOptions::default()).await?;
    if plan.num_tasks() == 0 {
        return Ok(None);
    }
    let mut groups = Vec::new();
    for task in plan.compaction_tasks() {
        let done = task.execute(&ds).await?;
        // A BTREE stores row addresses. With stable row ids (every table
        // here has them) a rewrite without remapped indexes drops the
        // rewritten fragments from such an index's coverage, and scans read
        // them flat until the next optimize: correct, so compact anyway.
        // Without stable row ids the addresses would need remapping.
        if done.row_addrs.is_some() && !ds.manifest().uses_stable_row_ids() {
            return Ok(None);
        }
        groups.push(RewriteGroup {
            old_fragments: done.original_fragments,
            new_fragments: done.new_fragments,
        });
    }
    let op = Operation::Rewrite {
        groups,
        rewritten_indices: Vec::new(),
        frag_reuse_index: None,
    };
    Ok(Some(TableChange::one(Transaction::new(
        plan.read_version(),
        op,
        None,
    ))))
}

/// Record these columns' persisted indexes in the table's metadata (a
/// commit that changes no row).
/// The change that records a table's persisted indexes: search indexes by
/// column, and an edge table's graph index.
pub fn index_records(
    table: Table,
    records: &[(String, IndexRef)],
    graph: Option<&GraphIndexRef>,
) -> Result<TableChange> {
    let mut entries = Vec::new();
    for (column, r) in records {
        entries.push((index_key(column), serde_json::to_string(r)?));
    }
    if let Some(r) = graph {
        entries.push((GRAPH_INDEX_KEY.to_string(), serde_json::to_string(r)?));
    }
    metadata(table, entries)
}

/// Set entries of a table's metadata: a version that changes no row.
fn metadata(Table(ds): Table, entries: Vec<(String, String)>) -> Result<TableChange> {
    use lance::dataset::transaction::{Operation, UpdateMap, UpdateMapEntry};
    let update_entries = entries
        .into_iter()
        .map(|(key, value)| UpdateMapEntry {
            key,
            value: Some(value),
        })
        .collect();
    let op = Operation::UpdateConfig {
        config_updates: None,
        table_metadata_updates: Some(UpdateMap {
            update_entries,
            replace: false,
        }),
        schema_metadata_updates: None,
        field_metadata_updates: Default::default(),
    };
    Ok(TableChange::one(Transaction::new(
        ds.version().version,
        op,
        None,
    )))
}

/// Lance's name for the BTREE this project builds on a column.
pub fn btree_name(column: &str) -> String {
    format!("omnigraph_btree_{column}")
}

/// Which of `columns` lack a BTREE that covers every fragment (none of an
/// empty table: there is nothing to look up).
pub async fn stale_btrees(Table(ds): &Table, columns: &[String]) -> Result<Vec<String>> {
    use lance::index::DatasetIndexExt;
    let fragments: Vec<u32> = ds.get_fragments().iter().map(|f| f.id() as u32).collect();
    if fragments.is_empty() {
        return Ok(Vec::new());
    }
    let indices = ds.load_indices().await?;
    Ok(columns
        .iter()
        .filter(|c| {
            let name = btree_name(c);
            !indices.iter().any(|ix| {
                ix.name == name
                    && ix
                        .fragment_bitmap
                        .as_ref()
                        .is_some_and(|b| fragments.iter().all(|f| b.contains(*f)))
            })
        })
        .cloned()
        .collect())
}

/// The columns with a BTREE of ours (covering some fragments at least).
pub async fn btree_columns(Table(ds): &Table) -> Result<Vec<String>> {
    use lance::index::DatasetIndexExt;
    let indices = ds.load_indices().await?;
    Ok(indices
        .iter()
        .filter_map(|ix| ix.name.strip_prefix("omnigraph_btree_").map(str::to_string))
        .collect())
}

/// Lance BTREEs on `columns` over every row, staged (their files written,
/// unreferenced until committed), replacing older ones of the same name.
/// Filters on those columns (key probes, inserts' id checks) then look
/// values up; rows written later are scanned beside the index.
pub async fn btrees(Table(ds): Table, columns: &[String]) -> Result<TableChange> {
    use lance::dataset::transaction::Operation;
    use lance::index::DatasetIndexExt;
    use lance_index::IndexType;
    use lance_index::scalar::ScalarIndexParams;
    let existing = ds.load_indices().await?;
    let mut work = (*ds).clone();
    let params = ScalarIndexParams::default();
    let mut new_indices = Vec::new();
    let mut removed_indices = Vec::new();
    for c in columns {
        let name = btree_name(c);
        let meta = work
            .create_index_builder(&[c.as_str()], IndexType::BTree, &params)
            .name(name.clone())
            .replace(true)
            .execute_uncommitted()
            .await?;
        new_indices.push(meta);
        removed_indices.extend(existing.iter().filter(|ix| ix.name == name).cloned());
    }
    let op = Operation::CreateIndex {
        new_indices,
        removed_indices,
    };
    Ok(TableChange::one(Transaction::new(
        ds.version().version,
        op,
        None,
    )))
}

/// Replace rows by where they are: the rows at `remove` (fragment id ->
/// physical offsets, live ones) are deleted and `add` is appended, as one
/// transaction. Nothing is looked up by key, so its cost is that of the
/// rows it touches, whatever the table's size (a merge knows every row's
/// address from the fragments it compared).
pub async fn replace_rows(
    Table(ds): Table,
    remove: &std::collections::BTreeMap<u32, Vec<u32>>,
    add: Vec<RecordBatch>,
) -> Result<TableChange> {
    use lance::dataset::transaction::{Operation, UpdateMode};
    let mut updated_fragments = Vec::new();
    let mut removed_fragment_ids = Vec::new();
    for (fid, offsets) in remove {
        let frag = ds.get_fragment(*fid as usize).ok_or_else(|| {
            OmniError::Storage(format!(
                "fragment {fid} is not in version {}",
                ds.version().version
            ))
        })?;
        match frag.extend_deletions(offsets.iter().copied()).await? {
            Some(f) => updated_fragments.push(f.metadata().clone()),
            None => removed_fragment_ids.push(u64::from(*fid)),
        }
    }
    let new_fragments = if add.iter().all(|b| b.num_rows() == 0) {
        Vec::new()
    } else {
        let session = ds.session();
        let params = write_params(&session, WriteMode::Append);
        let txn = InsertBuilder::new(ds.clone())
            .with_params(&params)
            .execute_uncommitted(add)
            .await?;
        match txn.operation {
            Operation::Append { fragments } => fragments,
            other => {
                return Err(OmniError::Storage(format!(
                    "an append staged {other:?}, not new fragments"
                )));
            }
        }
    };
    let op = Operation::Update {
        removed_fragment_ids,
        updated_fragments,
        new_fragments,
        fields_modified: Vec::new(),
        compacted_sstables: Vec::new(),
        fields_for_preserving_frag_bitmap: Vec::new(),
        update_mode: Some(UpdateMode::RewriteRows),
        inserted_rows_filter: None,
        updated_fragment_offsets: None,
    };
    Ok(TableChange::one(Transaction::new(
        ds.version().version,
        op,
        None,
    )))
}

/// Delete the rows with these ids.
pub async fn delete_ids(Table(ds): Table, ids: &[String]) -> Result<TableChange> {
    let list = ids.iter().map(|s| lit(s.clone())).collect();
    let staged = lance::dataset::DeleteBuilder::from_expr(ds, col(ID).in_list(list, false))
        .execute_uncommitted()
        .await?;
    Ok(TableChange::one(staged.transaction))
}

/// Which of `ids` exist in the table.
pub async fn existing_ids(Table(ds): &Table, ids: &[&str]) -> Result<HashSet<String>> {
    let mut found = HashSet::new();
    for chunk in ids.chunks(PROBE_CHUNK) {
        let list = chunk.iter().map(|s| lit(s.to_string())).collect();
        let mut scan = ds.scan();
        scan.project(&[ID])?;
        scan.filter_expr(col(ID).in_list(list, false));
        let mut stream = scan.try_into_stream().await?;
        while let Some(batch) = stream.try_next().await? {
            let ids = string_column(&batch, ID)?;
            for i in 0..ids.len() {
                found.insert(ids.value(i).to_string());
            }
        }
    }
    Ok(found)
}

/// Every value of a string column (e.g. all ids, or all edge sources).
pub async fn scan_strings(Table(ds): &Table, column: &str) -> Result<Vec<StringArray>> {
    let mut scan = ds.scan();
    scan.project(&[column])?;
    let mut stream = scan.try_into_stream().await?;
    let mut out = Vec::new();
    while let Some(batch) = stream.try_next().await? {
        out.push(string_column(&batch, column)?.clone());
    }
    Ok(out)
}

/// The `src` and `dst` of every edge whose `src` (when `by_src`) or `dst`
/// (when `by_dst`) is one of `ids`: the edges that touch a few nodes, read
/// without building a whole adjacency.
pub async fn edges_touching(
    Table(ds): &Table,
    ids: &[&str],
    by_src: bool,
    by_dst: bool,
) -> Result<(Vec<StringArray>, Vec<StringArray>)> {
    let (mut src, mut dst) = (Vec::new(), Vec::new());
    if !by_src && !by_dst {
        return Ok((src, dst));
    }
    for chunk in ids.chunks(PROBE_CHUNK) {
        let list: Vec<_> = chunk.iter().map(|s| lit(s.to_string())).collect();
        let on = |c: &str| col(c).in_list(list.clone(), false);
        let filter = match (by_src, by_dst) {
            (true, true) => on("src").or(on("dst")),
            (true, false) => on("src"),
            _ => on("dst"),
        };
        let mut scan = ds.scan();
        scan.project(&["src", "dst"])?;
        scan.filter_expr(filter);
        let mut stream = scan.try_into_stream().await?;
        while let Some(batch) = stream.try_next().await? {
            src.push(string_column(&batch, "src")?.clone());
            dst.push(string_column(&batch, "dst")?.clone());
        }
    }
    Ok((src, dst))
}

pub fn string_column<'b>(batch: &'b RecordBatch, name: &str) -> Result<&'b StringArray> {
    batch
        .column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<StringArray>())
        .ok_or_else(|| OmniError::Storage(format!("column {name} is missing or not a string")))
}

/// A column a schema change adds: its field, and the value every existing
/// row gets (`None`: null, which Lance records in the schema alone).
pub struct NewColumn {
    pub field: arrow_schema::Field,
    pub fill: Option<ColumnFill>,
}

/// Builds `n` rows of a new column's value.
pub type ColumnFill = Arc<dyn Fn(usize) -> Result<arrow_array::ArrayRef> + Send + Sync>;

/// A schema change to one table, staged: columns added (all-null ones in
/// the schema only; filled ones written beside each fragment's files),
/// renamed and dropped, then the search-index records moved with their
/// columns. Rows are neither read (but for the `id` column that paces a
/// fill) nor rewritten.
pub async fn evolve_columns(
    Table(ds): Table,
    added: Vec<NewColumn>,
    renamed: &[(String, String)],
    dropped: &[String],
) -> Result<TableChange> {
    use lance::dataset::transaction::Operation;
    use lance::dataset::{BatchUDF, NewColumnTransform};
    let base = ds.version().version;
    let mut schema = ds.schema().clone();
    let mut fragments = None;
    if !added.is_empty() {
        let out = Arc::new(arrow_schema::Schema::new(
            added.iter().map(|c| c.field.clone()).collect::<Vec<_>>(),
        ));
        schema = schema.merge(out.as_ref())?;
        schema.try_set_field_id(Some(ds.manifest().max_field_id()))?;
        if added.iter().all(|c| c.fill.is_none()) {
            fragments = Some(ds.manifest().fragments.as_ref().clone());
        } else {
            let fills: Vec<Option<ColumnFill>> = added.iter().map(|c| c.fill.clone()).collect();
            let fields: Vec<arrow_schema::Field> = added.iter().map(|c| c.field.clone()).collect();
            let mut out_frags = Vec::new();
            for frag in ds.get_fragments() {
                let (fills, fields, shape) = (fills.clone(), fields.clone(), out.clone());
                let mapper = move |b: &RecordBatch| -> lance::Result<RecordBatch> {
                    let n = b.num_rows();
                    let cols = fills
                        .iter()
                        .zip(&fields)
                        .map(|(fill, field)| match fill {
                            Some(f) => f(n).map_err(|e| lance::Error::invalid_input(e.to_string())),
                            None => Ok(arrow_array::new_null_array(field.data_type(), n)),
                        })
                        .collect::<lance::Result<Vec<_>>>()?;
                    Ok(RecordBatch::try_new(shape.clone(), cols)?)
                };
                let udf = BatchUDF {
                    mapper: Box::new(mapper),
                    output_schema: out.clone(),
                    result_checkpoint: None,
                };
                let (f, s) = frag
                    .add_columns(
                        NewColumnTransform::BatchUDF(udf),
                        Some(vec![ID.to_string()]),
                        None,
                    )
                    .await?;
                out_frags.push(f);
                schema = s;
            }
            fragments = Some(out_frags);
        }
    }
    for (from, to) in renamed {
        let f = schema
            .fields
            .iter_mut()
            .find(|f| &f.name == from)
            .ok_or_else(|| {
                OmniError::Storage(format!("the table has no column {from} to rename"))
            })?;
        f.name = to.clone();
    }
    schema.fields.retain(|f| !dropped.contains(&f.name));
    let op = match fragments {
        Some(fragments) => Operation::Merge {
            fragments,
            schema,
            preserves_nullability: true,
        },
        None => Operation::Project {
            schema,
            preserves_nullability: true,
        },
    };
    let change = TableChange::one(Transaction::new(base, op, None));
    // A search index is recorded under its column's name: it follows a
    // rename, and leaves with a dropped column (or a stale one under the
    // name of a column added now).
    let meta = ds.metadata();
    let mut entries = Vec::new();
    for (from, to) in renamed {
        if let Some(v) = meta.get(&index_key(from)) {
            entries.push((index_key(from), None));
            entries.push((index_key(to), Some(v.clone())));
        }
    }
    let gone = dropped
        .iter()
        .chain(added.iter().map(|c| c.field.name()))
        .filter(|c| !renamed.iter().any(|(_, to)| to == *c));
    for c in gone {
        if meta.contains_key(&index_key(c)) {
            entries.push((index_key(c), None));
        }
    }
    if entries.is_empty() {
        return Ok(change);
    }
    use lance::dataset::transaction::{UpdateMap, UpdateMapEntry};
    let op = Operation::UpdateConfig {
        config_updates: None,
        table_metadata_updates: Some(UpdateMap {
            update_entries: entries
                .into_iter()
                .map(|(key, value)| UpdateMapEntry { key, value })
                .collect(),
            replace: false,
        }),
        schema_metadata_updates: None,
        field_metadata_updates: Default::default(),
    };
    Ok(change.then_index_records(TableChange::one(Transaction::new(base, op, None))))
}
