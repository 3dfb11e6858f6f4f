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

use super::tables::{GRAPH_INDEX_KEY, ID_ORDER_KEY, Table, TableChange, index_key, write_params};
use crate::compiler::catalog::ID;
use crate::error::{OmniError, Result};
use crate::index::IndexRef;
use crate::index::adjacency_file::GraphIndexRef;
use crate::index::id_file::IdOrderRef;

/// How many ids one `IN (...)` probe carries.
pub const PROBE_CHUNK: usize = 4096;

pub async fn append(Table(ds): Table, batches: Vec<RecordBatch>) -> Result<TableChange> {
    insert(ds, batches, WriteMode::Append).await
}

pub async fn overwrite(Table(ds): Table, batches: Vec<RecordBatch>) -> Result<TableChange> {
    insert(ds, batches, WriteMode::Overwrite).await
}

/// One insert of many files is written by several writers side by side:
/// Lance's file writer waits for each batch's encoding before taking the
/// next, so one writer keeps one core busy whatever the machine has.
async fn insert(
    ds: Arc<Dataset>,
    batches: Vec<RecordBatch>,
    mode: WriteMode,
) -> Result<TableChange> {
    let session = ds.session();
    let params = write_params(&session, mode);
    let writers = std::thread::available_parallelism().map_or(1, |n| n.get());
    insert_with(ds, batches, params, writers).await
}

async fn insert_with(
    ds: Arc<Dataset>,
    batches: Vec<RecordBatch>,
    params: lance::dataset::WriteParams,
    writers: usize,
) -> Result<TableChange> {
    let parts = split_at_files(batches, params.max_rows_per_file, writers);
    let written = parts.into_iter().map(|part| {
        let (ds, params) = (ds.clone(), params.clone());
        tokio::spawn(async move {
            InsertBuilder::new(ds)
                .with_params(&params)
                .execute_uncommitted(part)
                .await
        })
    });
    let mut txns = Vec::new();
    for t in futures::future::join_all(written).await {
        match t {
            Ok(t) => txns.push(t?),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => return Err(OmniError::Storage(format!("a table writer stopped: {e}"))),
        }
    }
    Ok(TableChange::one(one_transaction(txns)?))
}

/// `batches` cut into at most `parts` runs of whole files (`file_rows`
/// each), in order, so the files written are the ones one writer would
/// write.
fn split_at_files(
    batches: Vec<RecordBatch>,
    file_rows: usize,
    parts: usize,
) -> Vec<Vec<RecordBatch>> {
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    let files = rows.div_ceil(file_rows.max(1)).max(1);
    let per_part = files.div_ceil(parts.clamp(1, files)) * file_rows;
    let mut out = vec![Vec::new()];
    let mut room = per_part;
    for mut b in batches {
        while b.num_rows() > room {
            out.last_mut().expect("a part").push(b.slice(0, room));
            b = b.slice(room, b.num_rows() - room);
            out.push(Vec::new());
            room = per_part;
        }
        room -= b.num_rows();
        out.last_mut().expect("a part").push(b);
    }
    out.retain(|p| !p.is_empty());
    if out.is_empty() {
        out.push(Vec::new());
    }
    out
}

/// The transactions of one insert's parts as one: their new fragments in
/// order (ids and row ids are given at commit).
fn one_transaction(txns: Vec<Transaction>) -> Result<Transaction> {
    use lance::dataset::transaction::Operation;
    let mut txns = txns.into_iter();
    let mut first = txns.next().expect("an insert has a part");
    for t in txns {
        match (&mut first.operation, t.operation) {
            (Operation::Append { fragments }, Operation::Append { fragments: more })
            | (
                Operation::Overwrite { fragments, .. },
                Operation::Overwrite {
                    fragments: more, ..
                },
            ) => fragments.extend(more),
            (_, other) => {
                return Err(OmniError::Storage(format!(
                    "an insert's parts staged different operations: {other:?}"
                )));
            }
        }
    }
    Ok(first)
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

/// The change that records a table's persisted indexes in its metadata (a
/// commit that changes no row): search indexes by column, an edge table's
/// graph index, a node table's id order.
pub fn index_records(
    table: Table,
    records: &[(String, IndexRef)],
    graph: Option<&GraphIndexRef>,
    id_order: Option<&IdOrderRef>,
) -> Result<TableChange> {
    let mut entries = Vec::new();
    for (column, r) in records {
        entries.push((index_key(column), serde_json::to_string(r)?));
    }
    if let Some(r) = graph {
        entries.push((GRAPH_INDEX_KEY.to_string(), serde_json::to_string(r)?));
    }
    if let Some(r) = id_order {
        entries.push((ID_ORDER_KEY.to_string(), serde_json::to_string(r)?));
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Int64Array, RecordBatch};
    use arrow_schema::{DataType, Field, Schema};
    use futures::TryStreamExt;
    use lance::Dataset;
    use lance::dataset::{CommitBuilder, WriteMode, WriteParams};

    use super::{insert_with, split_at_files};

    fn batch(from: i64, n: i64) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        RecordBatch::try_new(
            schema,
            vec![Arc::new(Int64Array::from_iter_values(from..from + n))],
        )
        .unwrap()
    }

    fn values(batches: &[RecordBatch]) -> Vec<i64> {
        batches
            .iter()
            .flat_map(|b| {
                let a = b.column_by_name("v").unwrap();
                let a = a.as_any().downcast_ref::<Int64Array>().unwrap();
                a.values().to_vec()
            })
            .collect()
    }

    #[test]
    fn parts_are_runs_of_whole_files_in_order() {
        let input = || (0..4).map(|i| batch(i * 5, 5)).collect::<Vec<_>>();
        // 20 rows, files of 3: 7 files, 4 + 3 of them per part.
        let parts = split_at_files(input(), 3, 2);
        let rows: Vec<usize> = parts
            .iter()
            .map(|p| p.iter().map(|b| b.num_rows()).sum())
            .collect();
        assert_eq!(rows, [12, 8]);
        assert_eq!(values(&parts.concat()), (0..20).collect::<Vec<_>>());
        // More writers than files: one file each, the last one short.
        let rows: Vec<usize> = split_at_files(input(), 8, 5)
            .iter()
            .map(|p| p.iter().map(|b| b.num_rows()).sum())
            .collect();
        assert_eq!(rows, [8, 8, 4]);
        assert_eq!(split_at_files(input(), 100, 2).len(), 1);
        assert_eq!(split_at_files(input(), 3, 1).len(), 1);
        let empty = split_at_files(Vec::new(), 3, 2);
        assert_eq!(empty.len(), 1);
        assert!(empty[0].is_empty());
    }

    /// Several writers' files commit as one transaction: every row once, in
    /// input order, with distinct stable row ids.
    #[tokio::test]
    async fn an_insert_written_side_by_side_commits_every_file_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let uri = dir.path().join("t.lance");
        let params = |mode| WriteParams {
            mode,
            enable_stable_row_ids: true,
            max_rows_per_file: 3,
            ..Default::default()
        };
        let first = vec![batch(-2, 2)];
        let ds = Dataset::write(
            arrow_array::RecordBatchIterator::new(first.into_iter().map(Ok), batch(0, 0).schema()),
            uri.to_str().unwrap(),
            Some(params(WriteMode::Create)),
        )
        .await
        .unwrap();
        let ds = Arc::new(ds);
        let input: Vec<RecordBatch> = (0..4).map(|i| batch(i * 5, 5)).collect();
        let change = insert_with(ds.clone(), input, params(WriteMode::Append), 2)
            .await
            .unwrap();
        let [txn] = <[_; 1]>::try_from(change.0).ok().unwrap();
        let ds = CommitBuilder::new(ds).execute(txn).await.unwrap();
        assert_eq!(ds.get_fragments().len(), 1 + 7);
        let read: Vec<RecordBatch> = ds
            .scan()
            .with_row_id()
            .try_into_stream()
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        assert_eq!(values(&read), (-2..20).collect::<Vec<_>>());
        let mut row_ids: Vec<u64> = read
            .iter()
            .flat_map(|b| {
                let a = b.column_by_name("_rowid").unwrap();
                let a = a
                    .as_any()
                    .downcast_ref::<arrow_array::UInt64Array>()
                    .unwrap();
                a.values().to_vec()
            })
            .collect();
        row_ids.sort_unstable();
        row_ids.dedup();
        assert_eq!(row_ids.len(), 22);
    }
}
