//! The node and edge tables as Lance datasets: opening exact versions, the
//! latest version of a branch's physical table, lazy forks with Lance's native
//! branches, strict commits of staged transactions, restores, and looking a
//! transaction up in a table's history (recovery).

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{RecordBatch, RecordBatchIterator};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use lance::Dataset;
use lance::dataset::builder::DatasetBuilder;
use lance::dataset::transaction::{Operation, Transaction};
use lance::dataset::{CommitBuilder, WriteMode, WriteParams};
use lance::session::Session;
use parking_lot::Mutex;

use super::manifest::TableRef;
use super::objstore::Store;
use super::pinned::PinnedCommit;
use crate::compiler::catalog::{DST, ID, PropDef, PropType, SRC, TypeDef};
use crate::error::{OmniError, Result};
use crate::index::IndexRef;
use crate::index::adjacency_file::GraphIndexRef;
use crate::index::coverage::{FragmentRows, Layout};
use crate::index::id_file::IdOrderRef;
use omnigraph_actors::CommitResult;

/// How many opened table versions stay cached.
const OPEN_CACHE_LIMIT: usize = 512;

/// Versions whose appended rows a process keeps (see `Tables::appended`).
const APPENDED_LIMIT: usize = 256;

/// Rows handed over with a commit are kept up to this many.
pub const APPENDED_ROWS_MAX: usize = 4096;

/// Table versions a walk over a table's history reads at once.
const WALK_READS: usize = 16;

type Physical = (String, Option<String>);
/// A table version exactly: (folder, Lance branch, version).
type Exact = (String, Option<String>, u64);

/// One table at one version: what a read scans and what a write stages a
/// change against. The Lance dataset inside is storage's alone.
#[derive(Clone)]
pub struct Table(pub(super) Arc<Dataset>);

impl Table {
    pub async fn rows(&self) -> Result<usize> {
        Ok(self.0.count_rows(None).await?)
    }

    pub fn fragments(&self) -> usize {
        self.0.get_fragments().len()
    }

    /// The table's Arrow schema as stored.
    pub fn schema(&self) -> arrow_schema::Schema {
        arrow_schema::Schema::from(self.0.schema())
    }

    pub fn version(&self) -> u64 {
        self.0.version().version
    }

    /// `rows` (handed over by the writer of this version, see
    /// `Tables::appended`) as a take of `columns` from this version gives
    /// them: `None` when a column is missing or typed otherwise.
    pub fn as_taken(&self, rows: &RecordBatch, columns: &[&str]) -> Option<RecordBatch> {
        let schema = Arc::new(arrow_schema::Schema::from(
            &self.0.schema().project(columns).ok()?,
        ));
        let arrays = schema
            .fields()
            .iter()
            .map(|f| {
                rows.column_by_name(f.name())
                    .filter(|a| a.data_type() == f.data_type())
                    .cloned()
            })
            .collect::<Option<Vec<_>>>()?;
        RecordBatch::try_new(schema, arrays).ok()
    }

    /// The fragments of this version in scan order, each with its deleted
    /// offsets: which row is which, for indexes built at other versions.
    pub async fn layout(&self) -> Result<Layout> {
        let mut out = Vec::new();
        for f in self.0.get_fragments() {
            let meta = f.metadata();
            let physical = match meta.physical_rows {
                Some(n) => n,
                None => f.physical_rows().await?,
            };
            let deleted: Vec<u32> = match &meta.deletion_file {
                None => Vec::new(),
                Some(_) => match f.get_deletion_vector().await? {
                    Some(dv) => dv.to_sorted_iter().collect(),
                    None => Vec::new(),
                },
            };
            // Data files and overlays name the written fragment: an overlay
            // changes cells in place, so it makes the fragment another one.
            let files = meta
                .files
                .iter()
                .map(|d| d.path.as_str())
                .chain(meta.overlays.iter().map(|o| o.data_file.path.as_str()))
                .collect::<Vec<_>>()
                .join("|");
            out.push(FragmentRows {
                id: meta.id,
                files,
                physical: u32::try_from(physical).map_err(|_| {
                    OmniError::Storage(format!("a fragment of {physical} rows is too large"))
                })?,
                deleted,
            });
        }
        Ok(out)
    }

    /// Every column of the rows at these physical offsets of fragment
    /// `fragment` (all live in this version), in the order given. `deleted`
    /// is the fragment's sorted deleted offsets (from [`Self::layout`]).
    pub async fn rows_at(
        &self,
        fragment: u32,
        offsets: &[u32],
        deleted: &[u32],
    ) -> Result<RecordBatch> {
        let frag = self.0.get_fragment(fragment as usize).ok_or_else(|| {
            OmniError::Storage(format!(
                "fragment {fragment} is not in version {}",
                self.version()
            ))
        })?;
        // Lance's take counts live rows: skip the deleted ones before each.
        let logical: Vec<u32> = offsets
            .iter()
            .map(|o| o - deleted.partition_point(|d| d < o) as u32)
            .collect();
        Ok(frag.take(&logical, &self.described()).await?)
    }

    /// The table's schema with each Blob column as its descriptor
    /// (position and size, or the external reference): what a row holds,
    /// without its bytes.
    fn described(&self) -> lance::datatypes::Schema {
        let mut schema = self.0.schema().clone();
        schema.fields = schema
            .fields
            .into_iter()
            .map(|f| lance::datatypes::BlobHandling::BlobsDescriptions.unload_if_needed(f))
            .collect();
        schema
    }

    /// [`Self::rows_at`], with the rows' ids (for their Blob values,
    /// [`Self::blob_values`]).
    pub async fn rows_and_ids_at(
        &self,
        fragment: u32,
        offsets: &[u32],
    ) -> Result<(RecordBatch, Vec<u64>)> {
        let frag = self.0.get_fragment(fragment as usize).ok_or_else(|| {
            OmniError::Storage(format!(
                "fragment {fragment} is not in version {}",
                self.version()
            ))
        })?;
        let read = lance::dataset::fragment::FragReadConfig::default().with_row_id(true);
        let batch = frag
            .open(&self.described(), read)
            .await?
            .take_as_batch(offsets, None)
            .await?;
        let ids = batch
            .column_by_name(super::scan::ROW_ID)
            .and_then(|c| c.as_any().downcast_ref::<arrow_array::UInt64Array>())
            .ok_or_else(|| OmniError::Storage("a take with row ids returned none".into()))?
            .values()
            .to_vec();
        let keep: Vec<usize> = (0..batch.num_columns())
            .filter(|&i| batch.schema().field(i).name() != super::scan::ROW_ID)
            .collect();
        Ok((batch.project(&keep)?, ids))
    }

    /// The names of the table's Blob columns.
    pub fn blob_columns(&self) -> Vec<String> {
        self.0
            .schema()
            .fields
            .iter()
            .filter(|f| f.is_blob())
            .map(|f| f.name.clone())
            .collect()
    }

    /// The values of Blob column `prop` for these row ids: the bytes, or
    /// an external reference's URI (its object is not read).
    pub async fn blob_values(&self, row_ids: &[u64], prop: &str) -> Result<Vec<BlobInput>> {
        let mut out = Vec::with_capacity(row_ids.len());
        for f in self.0.take_blobs(row_ids, prop).await? {
            out.push(match f {
                None => BlobInput::Null,
                Some(f) => match f.uri() {
                    Some(uri) => BlobInput::Uri(super::blob::split_reference(uri)?.0.to_string()),
                    None => BlobInput::Bytes(f.read().await?.to_vec()),
                },
            });
        }
        Ok(out)
    }

    /// The persisted graph index this (edge) table version records, if any:
    /// built at this version or an earlier one (see `index::adjacency_file`).
    pub fn graph_index(&self) -> Result<Option<GraphIndexRef>> {
        self.record(GRAPH_INDEX_KEY, "the graph index record")
    }

    /// The record this version's metadata keeps under `key`, if any;
    /// `what` names it when it cannot be read.
    fn record<T: serde::de::DeserializeOwned>(&self, key: &str, what: &str) -> Result<Option<T>> {
        match self.0.metadata().get(key) {
            None => Ok(None),
            Some(json) => serde_json::from_str(json)
                .map(Some)
                .map_err(|e| OmniError::Storage(format!("{what} is unreadable: {e}"))),
        }
    }

    /// The row address (fragment id << 32 | physical offset) of each row
    /// whose string `column` is one of `values` (an indexed column's
    /// BTREE answers it), with the value.
    pub async fn addresses_of(
        &self,
        column: &str,
        values: &[String],
    ) -> Result<Vec<(String, u64)>> {
        use arrow_array::cast::AsArray;
        let mut out = Vec::new();
        if values.is_empty() {
            return Ok(out);
        }
        let list = values
            .iter()
            .map(|v| datafusion::prelude::lit(v.clone()))
            .collect();
        let mut scan = self.0.scan();
        scan.project(&[column])?;
        scan.filter_expr(datafusion::prelude::col(column).in_list(list, false));
        scan.with_row_address();
        let mut stream = scan.try_into_stream().await?;
        while let Some(batch) = futures::TryStreamExt::try_next(&mut stream).await? {
            let v = super::stage::string_column(&batch, column)?;
            let addr = batch
                .column_by_name(ROW_ADDR)
                .ok_or_else(|| OmniError::Storage("a scan returned no row addresses".into()))?
                .as_primitive::<arrow_array::types::UInt64Type>();
            for i in 0..batch.num_rows() {
                out.push((v.value(i).to_string(), addr.value(i)));
            }
        }
        Ok(out)
    }

    /// Columns at positions `rows` of the scan order (ascending, each a
    /// live row), in that order.
    pub async fn take_columns(&self, rows: &[u32], columns: &[&str]) -> Result<RecordBatch> {
        let rows: Vec<u64> = rows.iter().map(|&r| r as u64).collect();
        let projection = self.0.schema().project(columns)?;
        Ok(self.0.take(&rows, projection).await?)
    }

    /// One column at positions `rows` of the scan order (ascending, each
    /// a live row), in that order.
    pub async fn take_positions(
        &self,
        rows: &[u32],
        column: &str,
    ) -> Result<arrow_array::ArrayRef> {
        self.take_columns(rows, &[column])
            .await?
            .column_by_name(column)
            .cloned()
            .ok_or_else(|| OmniError::Storage(format!("a take returned no column {column}")))
    }

    /// Every value of string `column` in the fragments `ids`, in that order
    /// (deleted rows left out).
    pub async fn strings_of(
        &self,
        column: &str,
        ids: &[u64],
    ) -> Result<Vec<arrow_array::StringArray>> {
        let fragments = ids
            .iter()
            .map(|&id| {
                self.0
                    .get_fragment(id as usize)
                    .map(|f| f.metadata().clone())
                    .ok_or_else(|| {
                        OmniError::Storage(format!(
                            "fragment {id} is not in version {}",
                            self.version()
                        ))
                    })
            })
            .collect::<Result<Vec<_>>>()?;
        let mut scan = self.0.scan();
        scan.project(&[column])?;
        scan.with_fragments(fragments);
        let mut stream = scan.try_into_stream().await?;
        let mut out = Vec::new();
        while let Some(batch) = futures::TryStreamExt::try_next(&mut stream).await? {
            out.push(super::stage::string_column(&batch, column)?.clone());
        }
        Ok(out)
    }

    /// The persisted id order this (node) table version records, if any
    /// (see `index::id_file`).
    pub fn id_order(&self) -> Result<Option<IdOrderRef>> {
        self.record(ID_ORDER_KEY, "the id order record")
    }

    /// Every file this version's index records name: its graph index's,
    /// its id order's and each column's (relative to the graph's root).
    pub fn recorded_files(&self) -> Result<Vec<String>> {
        let mut files = Vec::new();
        for key in self.0.metadata().keys() {
            if key == GRAPH_INDEX_KEY {
                files.extend(self.graph_index()?.map(|r| r.file));
            } else if key == ID_ORDER_KEY {
                files.extend(self.id_order()?.map(|r| r.file));
            } else if let Some(column) = key.strip_prefix(INDEX_KEY_PREFIX) {
                files.extend(self.index_of(column)?.map(|r| r.file));
            }
        }
        files.sort();
        Ok(files)
    }

    /// The persisted index of `column` this version records, if any.
    pub fn index_of(&self, column: &str) -> Result<Option<IndexRef>> {
        self.record(
            &index_key(column),
            &format!("the index record of column {column}"),
        )
    }
}

/// Lance's row-address column, when a scan asks for it.
const ROW_ADDR: &str = "_rowaddr";

/// The table-metadata key of an edge table's persisted graph index.
pub const GRAPH_INDEX_KEY: &str = "omnigraph.graph_index";

/// The table-metadata key of a node table's persisted id order.
pub const ID_ORDER_KEY: &str = "omnigraph.id_order";

const INDEX_KEY_PREFIX: &str = "omnigraph.index.";

/// The table-metadata key that records a column's persisted index.
pub fn index_key(column: &str) -> String {
    format!("{INDEX_KEY_PREFIX}{column}")
}

/// A change staged against a [`Table`]: its files are written, but no
/// reader sees them until the write commits it. Usually one transaction
/// (one new table version); an optimize's is a chain of two that change no
/// row (the storage indexes, then the search-index records), committed one
/// after the other. Recovery finds the chain by its last transaction, and
/// may keep a landed prefix of it: no step changes a row.
pub struct TableChange(pub(super) Vec<Transaction>);

impl TableChange {
    pub(super) fn one(txn: Transaction) -> Self {
        Self(vec![txn])
    }

    /// This change, then `next` (staged against the version this one
    /// makes). Only for changes that leave every row as it is.
    pub fn then_index_records(mut self, mut next: TableChange) -> Self {
        let at = self
            .0
            .last()
            .expect("a change has a transaction")
            .read_version
            + 1;
        for t in &mut next.0 {
            t.read_version = at;
        }
        self.0.append(&mut next.0);
        self
    }
}

pub struct Tables {
    store: Store,
    session: Arc<Session>,
    /// Exact (dir, lance branch, version) -> dataset; immutable, so always valid.
    opened: Mutex<HashMap<Exact, Arc<Dataset>>>,
    /// The latest version of each physical table as this process last saw
    /// it. Other processes write too, so it is only a starting point: a
    /// decision under a gate reads storage (`probe_latest`).
    latest: Mutex<HashMap<Physical, Arc<Dataset>>>,
    /// Serialises forks of one physical table.
    fork_lock: tokio::sync::Mutex<()>,
    /// The rows each version this process committed appended, in the
    /// order they lie in its new fragments, when the writer knew that
    /// order: a read of the version's change takes them from here instead
    /// of from storage. Immutable per version, so always valid.
    appended: Mutex<HashMap<Exact, Arc<RecordBatch>>>,
}

/// Lance's marker of a primary-key column (merge-insert matches on it).
pub const PK_METADATA: &str = "lance-schema:unenforced-primary-key";

/// Lance's field metadata key choosing a column's compression.
const COMPRESSION: &str = "lance-encoding:compression";

/// The Arrow schema of a type's table: `id` (and `src`, `dst` for edges)
/// then the properties in declaration order; Blob properties are Lance blob
/// columns.
pub fn table_schema(def: &TypeDef) -> SchemaRef {
    let mut pk = HashMap::new();
    pk.insert(PK_METADATA.to_string(), "true".to_string());
    if def.is_edge() || def.key.is_empty() {
        // Generated ids (ULIDs) come in runs that share their first twenty
        // characters: LZ4 stores them smaller than Lance's default FSST
        // and at a fraction of its encoding time.
        pk.insert(COMPRESSION.to_string(), "lz4".to_string());
    }
    let mut fields = vec![Field::new(ID, DataType::Utf8, false).with_metadata(pk)];
    if def.is_edge() {
        fields.push(Field::new(SRC, DataType::Utf8, false));
        fields.push(Field::new(DST, DataType::Utf8, false));
    }
    for p in &def.properties {
        fields.push(prop_field(p));
    }
    Arc::new(Schema::new(fields))
}

/// The field metadata key naming the property a column stores: storage is
/// matched to the catalog by name at each version, and this says which
/// property's values a column holds whatever it is called.
pub const PROPERTY_ID: &str = "omnigraph:property-id";

/// A property's column (always nullable in storage: the catalog, not the
/// file format, says what may be null, so a schema change never rewrites
/// a column to relax or tighten it).
pub fn prop_field(p: &PropDef) -> Field {
    let field = match p.ty {
        PropType::Blob => lance::blob_field(&p.name, true),
        _ => Field::new(&p.name, p.ty.arrow(), true),
    };
    let mut meta = field.metadata().clone();
    meta.insert(PROPERTY_ID.to_string(), p.id.to_string());
    field.with_metadata(meta)
}

/// One Blob cell as a write gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BlobInput {
    Null,
    Bytes(Vec<u8>),
    /// An external reference, resolved before staging
    /// ([`super::external::resolve`]).
    Uri(String),
}

/// A Blob column in Lance's blob layout (an empty value stays empty, not
/// null).
pub fn blob_array(rows: Vec<BlobInput>) -> Result<arrow_array::ArrayRef> {
    let mut b = lance::BlobArrayBuilder::new(rows.len());
    for r in rows {
        match r {
            BlobInput::Bytes(bytes) if bytes.is_empty() => b.push_empty()?,
            BlobInput::Bytes(bytes) => b.push_bytes(bytes)?,
            BlobInput::Uri(uri) => b.push_uri(uri)?,
            BlobInput::Null => b.push_null()?,
        }
    }
    Ok(b.finish()?)
}

/// Where a table line keeps its manifest of `version` under Lance's V2
/// naming, relative to the graph's root: `<dir>/_versions/` on the main
/// line, `<dir>/tree/<branch>/_versions/` on a Lance branch, the file named
/// by the version counted down from `u64::MAX`, zero-padded to 20 digits.
fn manifest_file(dir: &str, lance_branch: Option<&str>, version: u64) -> String {
    let line = match lance_branch {
        Some(b) => format!("{dir}/tree/{b}"),
        None => dir.to_string(),
    };
    format!("{line}/_versions/{:020}.manifest", u64::MAX - version)
}

pub fn write_params(session: &Arc<Session>, mode: WriteMode) -> WriteParams {
    WriteParams {
        mode,
        session: Some(session.clone()),
        enable_stable_row_ids: true,
        // Only URIs the graph's policy allowed reach a write (see
        // `external::resolve`); Lance's own base registry is not used.
        allow_external_blob_outside_bases: true,
        commit_handler: Some(super::pinned::GraphCommit::shared()),
        ..Default::default()
    }
}

fn is_conflict(e: &lance::Error) -> bool {
    matches!(
        e,
        lance::Error::CommitConflict { .. }
            | lance::Error::RetryableCommitConflict { .. }
            | lance::Error::IncompatibleTransaction { .. }
            | lance::Error::TooMuchWriteContention { .. }
    )
}

impl Tables {
    pub fn new(store: Store, session: Arc<Session>) -> Self {
        Self {
            store,
            session,
            opened: Mutex::new(HashMap::new()),
            latest: Mutex::new(HashMap::new()),
            fork_lock: tokio::sync::Mutex::new(()),
            appended: Mutex::new(HashMap::new()),
        }
    }

    pub fn session(&self) -> &Arc<Session> {
        &self.session
    }

    pub fn uri(&self, dir: &str) -> String {
        self.store.uri_of(dir)
    }

    /// Create an empty table (version 1) with the type's schema.
    pub async fn create(&self, dir: &str, schema: SchemaRef) -> Result<u64> {
        let reader =
            RecordBatchIterator::new(Vec::<std::result::Result<RecordBatch, _>>::new(), schema);
        let ds = Dataset::write(
            reader,
            &self.uri(dir),
            Some(write_params(&self.session, WriteMode::Overwrite)),
        )
        .await?;
        let version = ds.version().version;
        self.remember_latest(dir, None, Arc::new(ds));
        Ok(version)
    }

    /// The size of a table version's manifest, if this process has the
    /// version open (every version it commits, it keeps open): for the
    /// graph manifest's ref, `TableRef::manifest_size`.
    pub fn manifest_size(
        &self,
        dir: &str,
        lance_branch: Option<&str>,
        version: u64,
    ) -> Option<u64> {
        let key = (dir.to_string(), lance_branch.map(str::to_string), version);
        self.opened.lock().get(&key)?.manifest_location().size
    }

    /// A table version this process has open already, without a request.
    pub fn cached(&self, t: &TableRef) -> Option<Arc<Dataset>> {
        let key = (t.dir.clone(), t.lance_branch.clone(), t.version);
        self.opened.lock().get(&key).cloned()
    }

    fn remember_opened(
        &self,
        dir: &str,
        lance_branch: Option<&str>,
        version: u64,
        ds: Arc<Dataset>,
    ) {
        let key = (dir.to_string(), lance_branch.map(str::to_string), version);
        let mut opened = self.opened.lock();
        if opened.len() >= OPEN_CACHE_LIMIT {
            opened.clear();
        }
        opened.insert(key, ds);
    }

    /// The rows this process's commit of `version` appended (see the
    /// field), if it handed them over.
    pub fn appended(
        &self,
        dir: &str,
        lance_branch: Option<&str>,
        version: u64,
    ) -> Option<Arc<RecordBatch>> {
        let key = (dir.to_string(), lance_branch.map(str::to_string), version);
        self.appended.lock().get(&key).cloned()
    }

    /// A table exactly as a manifest names it.
    pub async fn open(&self, t: &TableRef) -> Result<Arc<Dataset>> {
        if let Some(ds) = self.cached(t) {
            return Ok(ds);
        }
        let (dir, branch) = (&t.dir, t.lance_branch.as_deref());
        let ds = match self
            .load_version(dir, branch, t.version, t.manifest_size)
            .await
        {
            // A recorded size that does not fit the file (the storage
            // library reads past its end): read as if none were recorded.
            Err(_) if t.manifest_size.is_some() => {
                self.load_version(dir, branch, t.version, None).await
            }
            other => other,
        };
        let ds = ds.map_err(|e| {
            OmniError::Storage(format!(
                "table {} at version {} (branch {:?}) cannot be opened: {e}",
                t.dir, t.version, t.lance_branch
            ))
        })?;
        let ds = Arc::new(ds);
        self.remember_opened(&t.dir, t.lance_branch.as_deref(), t.version, ds.clone());
        Ok(ds)
    }

    async fn load_version(
        &self,
        dir: &str,
        lance_branch: Option<&str>,
        version: u64,
        manifest_size: Option<u64>,
    ) -> lance::Result<Dataset> {
        let handler = match manifest_size {
            Some(size) => super::pinned::GraphCommit::knowing(version, size),
            None => super::pinned::GraphCommit::shared(),
        };
        DatasetBuilder::from_uri(self.uri(dir))
            .with_session(self.session.clone())
            .with_commit_handler(handler)
            .with_branch(lance_branch.unwrap_or("main"), Some(version))
            .load()
            .await
    }

    fn cached_latest(&self, dir: &str, lance_branch: Option<&str>) -> Option<Arc<Dataset>> {
        self.latest
            .lock()
            .get(&(dir.to_string(), lance_branch.map(str::to_string)))
            .cloned()
    }

    fn remember_latest(&self, dir: &str, lance_branch: Option<String>, ds: Arc<Dataset>) {
        self.latest
            .lock()
            .insert((dir.to_string(), lance_branch), ds);
    }

    /// The newest version of a physical table, or `None` when that Lance
    /// branch does not exist.
    pub async fn latest(
        &self,
        dir: &str,
        lance_branch: Option<&str>,
    ) -> Result<Option<Arc<Dataset>>> {
        if let Some(ds) = self.cached_latest(dir, lance_branch) {
            return Ok(Some(ds));
        }
        let builder = DatasetBuilder::from_uri(self.uri(dir))
            .with_session(self.session.clone())
            .with_commit_handler(super::pinned::GraphCommit::shared());
        let builder = match lance_branch {
            Some(b) => builder.with_branch(b, None),
            None => builder,
        };
        match builder.load().await {
            Ok(ds) => {
                let ds = Arc::new(ds);
                self.remember_latest(dir, lance_branch.map(str::to_string), ds.clone());
                Ok(Some(ds))
            }
            Err(e) if lance_branch.is_some() && missing_branch(&e) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The newest version of a physical table, read from storage alone:
    /// version `from` must exist when the table does (the manifest names it,
    /// or a fork starts there), so probe forward from it. `None`: that Lance
    /// branch does not exist. Every table here names its manifests by
    /// Lance's V2 scheme, so the probe is a HEAD of the manifests of `from`
    /// and of `from + 1`, sent together: one round trip when nothing is new
    /// (Lance's own resolution of a version tries both schemes and its hint,
    /// six in a row). A `from` not found under V2 is left to Lance.
    pub async fn probe_latest(
        &self,
        dir: &str,
        lance_branch: Option<&str>,
        from: u64,
    ) -> Result<Option<u64>> {
        let manifest = |v: u64| manifest_file(dir, lance_branch, v);
        let (at, after) = (manifest(from), manifest(from + 1));
        let (here, next) = futures::try_join!(self.store.head(&at), self.store.head(&after))?;
        if here.is_none() {
            return self.probe_latest_by_loading(dir, lance_branch, from).await;
        }
        let (mut top, mut next) = (from, next);
        while next.is_some() {
            top += 1;
            next = self.store.head(&manifest(top + 1)).await?;
        }
        Ok(Some(top))
    }

    /// [`Self::probe_latest`] through Lance's own resolution of versions.
    async fn probe_latest_by_loading(
        &self,
        dir: &str,
        lance_branch: Option<&str>,
        from: u64,
    ) -> Result<Option<u64>> {
        let mut top = match self.load_version(dir, lance_branch, from, None).await {
            Ok(ds) => ds.version().version,
            Err(e) if missing_branch(&e) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        loop {
            match self.load_version(dir, lance_branch, top + 1, None).await {
                Ok(ds) => top = ds.version().version,
                Err(e) if missing_branch(&e) => return Ok(Some(top)),
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Make sure `lance_branch` exists on the table, forked from `from`; returns
    /// its latest version. Creating a fork changes nothing a reader can see:
    /// the manifest keeps naming `from` until a commit on the fork is published.
    /// Another process may fork (or a repair remove) the same branch, so its
    /// existence is read from storage, and a fork that appeared meanwhile is
    /// used as it is.
    pub async fn ensure_fork(&self, from: &TableRef, lance_branch: &str) -> Result<Arc<Dataset>> {
        let _guard = self.fork_lock.lock().await;
        self.forget_latest(&from.dir, Some(lance_branch));
        if let Some(ds) = self.latest(&from.dir, Some(lance_branch)).await? {
            return Ok(ds);
        }
        let mut base = (*self.open(from).await?).clone();
        let forked = match base
            .create_branch(
                lance_branch,
                (from.lance_branch.as_deref(), Some(from.version)),
                None,
            )
            .await
        {
            Ok(f) => Arc::new(f),
            Err(e) => {
                self.forget_latest(&from.dir, Some(lance_branch));
                match self.latest(&from.dir, Some(lance_branch)).await? {
                    Some(ds) => return Ok(ds),
                    None => return Err(e.into()),
                }
            }
        };
        self.remember_latest(&from.dir, Some(lance_branch.to_string()), forked.clone());
        Ok(forked)
    }

    /// Commit a staged change exactly on top of `base`, which must be the
    /// table's latest version (the table gate and the recheck ensure it):
    /// its transactions one after another, each pinned to the version right
    /// after the one before. A table that moved past its base anyway (a
    /// writer that lost its lease landed a late commit) refuses it as a
    /// conflict: the storage library would rebase it over the foreign
    /// version, and a publish would then carry that version's rows.
    pub async fn commit(
        &self,
        dir: &str,
        lance_branch: Option<&str>,
        mut base: Arc<Dataset>,
        txns: Vec<Transaction>,
        appended: Option<Arc<RecordBatch>>,
    ) -> CommitResult {
        // Rows handed over name one transaction's new fragments.
        let appended = appended.filter(|_| txns.len() == 1);
        let mut result = Err(lance::Error::invalid_input("an empty change".to_string()));
        let mut refusal = None;
        for txn in txns {
            let pin = PinnedCommit::at(base.version().version + 1);
            result = CommitBuilder::new(base.clone())
                .with_session(self.session.clone())
                .with_commit_handler(pin.clone())
                .with_max_retries(0)
                .execute(txn)
                .await;
            refusal = pin.refusal();
            match &result {
                Ok(ds) => base = Arc::new(ds.clone()),
                Err(_) => break,
            }
        }
        match result {
            Ok(ds) => {
                let version = ds.version().version;
                let ds = Arc::new(ds);
                self.remember_latest(dir, lance_branch.map(str::to_string), ds.clone());
                // A read of the version this process just wrote opens it
                // without a request.
                self.remember_opened(dir, lance_branch, version, ds);
                if let Some(rows) = appended {
                    let key = (dir.to_string(), lance_branch.map(str::to_string), version);
                    let mut kept = self.appended.lock();
                    if kept.len() >= APPENDED_LIMIT {
                        kept.clear();
                    }
                    kept.insert(key, rows);
                }
                CommitResult::Committed { version }
            }
            Err(_) if refusal.is_some() => {
                self.forget_latest(dir, lance_branch);
                CommitResult::Conflict(refusal.expect("checked"))
            }
            Err(e) if is_conflict(&e) => {
                self.forget_latest(dir, lance_branch);
                CommitResult::Conflict(e.to_string())
            }
            Err(e) => {
                self.forget_latest(dir, lance_branch);
                CommitResult::Unknown(e.to_string())
            }
        }
    }

    fn forget_latest(&self, dir: &str, lance_branch: Option<&str>) {
        self.latest
            .lock()
            .remove(&(dir.to_string(), lance_branch.map(str::to_string)));
    }

    /// Write a new version whose content equals version `to`, right after
    /// the latest version read here: pinned like a commit, so a version
    /// another process lands meanwhile refuses the restore (a conflict)
    /// instead of being buried under it.
    pub async fn restore(&self, dir: &str, lance_branch: Option<&str>, to: u64) -> Result<u64> {
        self.forget_latest(dir, lance_branch);
        let latest = self
            .latest(dir, lance_branch)
            .await?
            .ok_or_else(|| OmniError::Storage(format!("table {dir} vanished before a restore")))?;
        let top = latest.version().version;
        let txn = Transaction::new(top, Operation::Restore { version: to }, None);
        let pin = PinnedCommit::at(top + 1);
        let restored = CommitBuilder::new(latest)
            .with_session(self.session.clone())
            .with_commit_handler(pin.clone())
            .with_max_retries(0)
            .execute(txn)
            .await;
        self.forget_latest(dir, lance_branch);
        match (restored, pin.refusal()) {
            (Ok(ds), _) => Ok(ds.version().version),
            (Err(_), Some(why)) => Err(OmniError::Storage(format!(
                "the restore of table {dir} to version {to} was refused: {why}"
            ))),
            (Err(e), None) => Err(e.into()),
        }
    }

    /// Where (if anywhere) after `base` the change whose last transaction is
    /// `txn` landed (the highest version any of its transactions made), and
    /// the table's latest version now.
    pub async fn find_landed(
        &self,
        dir: &str,
        lance_branch: Option<&str>,
        base: u64,
        txn: &str,
    ) -> Result<(Option<u64>, Option<u64>)> {
        self.forget_latest(dir, lance_branch);
        let Some(latest) = self.latest(dir, lance_branch).await? else {
            return Ok((None, None));
        };
        let top = latest.version().version;
        let step = format!("{txn}.");
        let mut landed = None;
        for v in (base + 1)..=top {
            // A version a cleanup removed names no transaction: the intent's
            // own commit lands pinned at base + 1, which a cleanup keeps
            // while the intent may need it, so what is gone is another's.
            let found = match latest.read_transaction_by_version(v).await {
                Ok(found) => found,
                Err(e) if missing_branch(&e) => None,
                Err(e) => return Err(e.into()),
            };
            if found.is_some_and(|t| t.uuid == txn || t.uuid.starts_with(&step)) {
                landed = Some(v);
            }
        }
        Ok((landed, Some(top)))
    }

    /// Every version of a physical table on every Lance branch it has, each
    /// as it was committed (a maintenance walk: the versions are not kept in
    /// the open-table cache).
    pub async fn every_version(&self, dir: &str) -> Result<Vec<Table>> {
        use futures::{StreamExt, TryStreamExt};
        let Some(main) = self.latest(dir, None).await? else {
            return Ok(Vec::new());
        };
        async fn versions(ds: &Dataset) -> Result<Vec<u64>> {
            Ok(ds.versions().await?.iter().map(|v| v.version).collect())
        }
        let mut lines: Vec<(Option<String>, Vec<u64>)> = vec![(None, versions(&main).await?)];
        let mut branches: Vec<String> = main.list_branches().await?.into_keys().collect();
        branches.sort();
        for b in branches {
            self.forget_latest(dir, Some(&b));
            // A branch removed meanwhile has no versions left to record anything.
            if let Some(ds) = self.latest(dir, Some(&b)).await? {
                lines.push((Some(b), versions(&ds).await?));
            }
        }
        // Gathered first: a lazy iterator of borrowing closures held across
        // the awaits below would make this future not `Send`.
        let wanted: Vec<(Option<String>, u64)> = lines
            .into_iter()
            .flat_map(|(b, vs)| vs.into_iter().map(move |v| (b.clone(), v)))
            .collect();
        futures::stream::iter(wanted)
            .map(|(b, v)| async move {
                match self.load_version(dir, b.as_deref(), v, None).await {
                    Ok(ds) => Ok(Some(Table(Arc::new(ds)))),
                    // Its branch was removed meanwhile.
                    Err(e) if b.is_some() && missing_branch(&e) => Ok(None),
                    Err(e) => Err(OmniError::from(e)),
                }
            })
            .buffered(WALK_READS)
            .try_filter_map(|t| async move { Ok(t) })
            .try_collect()
            .await
    }

    /// A line's newest version read from storage now (another process may
    /// have committed), or `None` when that Lance branch does not exist.
    pub async fn fresh(
        &self,
        dir: &str,
        lance_branch: Option<&str>,
    ) -> Result<Option<Arc<Dataset>>> {
        self.forget_latest(dir, lance_branch);
        self.latest(dir, lance_branch).await
    }

    /// Every line of a table dataset (its main line, then each Lance
    /// branch), each at its newest version now.
    pub async fn lines(&self, dir: &str) -> Result<Vec<(Option<String>, Arc<Dataset>)>> {
        let Some(main) = self.fresh(dir, None).await? else {
            return Ok(Vec::new());
        };
        let mut branches: Vec<String> = main.list_branches().await?.into_keys().collect();
        branches.sort();
        let mut out = vec![(None, main)];
        for b in branches {
            // A branch removed meanwhile has nothing left to keep or trim.
            if let Some(ds) = self.fresh(dir, Some(&b)).await? {
                out.push((Some(b), ds));
            }
        }
        Ok(out)
    }

    /// Best effort: remove a Lance branch (a deleted graph branch's fork).
    pub async fn drop_branch(&self, dir: &str, lance_branch: &str) -> Result<()> {
        self.forget_latest(dir, Some(lance_branch));
        let Some(main) = self.latest(dir, None).await? else {
            return Ok(());
        };
        let mut main = (*main).clone();
        match main.delete_branch(lance_branch).await {
            Ok(()) => Ok(()),
            Err(e) if missing_branch(&e) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

fn missing_branch(e: &lance::Error) -> bool {
    let s = e.to_string();
    matches!(
        e,
        lance::Error::NotFound { .. } | lance::Error::DatasetNotFound { .. }
    ) || s.contains("not found")
        || s.contains("Not found")
        || s.contains("does not exist")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compiler::schema::compile;
    use arrow_array::StringArray;
    use lance::dataset::InsertBuilder;

    fn ids_batch(ids: &[&str]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Utf8, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(StringArray::from(ids.to_vec()))]).unwrap()
    }

    async fn ids_at(t: &Tables, version: u64) -> Vec<String> {
        let ds = t
            .open(&TableRef {
                dir: "t".into(),
                lance_branch: None,
                version,
                incarnation: 0,
                manifest_size: None,
            })
            .await
            .unwrap();
        let b = ds.scan().try_into_batch().await.unwrap();
        let col = b.column(0).as_any().downcast_ref::<StringArray>().unwrap();
        let mut ids: Vec<String> = col.iter().map(|v| v.unwrap().to_string()).collect();
        ids.sort();
        ids
    }

    async fn append_staged_on(
        base: &Arc<Dataset>,
        session: &Arc<Session>,
        id: &str,
    ) -> Transaction {
        InsertBuilder::new(base.clone())
            .with_params(&write_params(session, WriteMode::Append))
            .execute_uncommitted(vec![ids_batch(&[id])])
            .await
            .unwrap()
    }

    /// Tables in a fresh temporary folder, with their session.
    async fn temp_tables() -> (tempfile::TempDir, Arc<Session>, Tables) {
        let dir = tempfile::tempdir().unwrap();
        let (session, t) = tables_at(&dir).await;
        (dir, session, t)
    }

    /// Tables in `dir`, on a session of their own (a fresh process's).
    async fn tables_at(dir: &tempfile::TempDir) -> (Arc<Session>, Tables) {
        let session = Arc::new(Session::default());
        let store = Store::open(
            &crate::storage::requests::StorageSession(session.clone()),
            dir.path().to_str().unwrap(),
        )
        .await
        .unwrap();
        (session.clone(), Tables::new(store, session))
    }

    /// A committed version's manifest size is kept for the graph
    /// manifest's ref; a fresh process opens the version with it, and with
    /// a wrong one (the read finds no footer there and asks the size) still
    /// reads that version's rows.
    #[tokio::test]
    async fn a_version_opens_by_its_recorded_manifest_size_and_despite_a_wrong_one() {
        let (dir, session, t) = temp_tables().await;
        t.create("t", ids_batch(&[]).schema()).await.unwrap();
        let v1 = t.latest("t", None).await.unwrap().unwrap();
        let txn = append_staged_on(&v1, &session, "a").await;
        assert_eq!(
            t.commit("t", None, v1, vec![txn], None).await,
            CommitResult::Committed { version: 2 }
        );
        let size = t
            .manifest_size("t", None, 2)
            .expect("recorded at the commit");
        let stored = t.store.head(&manifest_file("t", None, 2)).await.unwrap();
        assert_eq!(Some(size), stored.map(|(bytes, _)| bytes));
        for size in [size, size / 2, size + 100] {
            let (_, fresh) = tables_at(&dir).await;
            let r = TableRef {
                dir: "t".into(),
                lance_branch: None,
                version: 2,
                incarnation: 0,
                manifest_size: Some(size),
            };
            let ds = fresh.open(&r).await.unwrap();
            assert_eq!(ds.version().version, 2);
            assert_eq!(ds.count_rows(None).await.unwrap(), 1, "size {size}");
        }
    }

    /// The library rebases an append staged on an old version over one that
    /// landed since, even with no retries; a pinned commit refuses instead,
    /// and nothing of it becomes a version.
    #[tokio::test]
    async fn a_commit_lands_on_its_base_or_is_refused_never_rebased() {
        let (_dir, session, t) = temp_tables().await;
        let schema = ids_batch(&[]).schema();
        assert_eq!(t.create("t", schema).await.unwrap(), 1);
        let v1 = t.latest("t", None).await.unwrap().unwrap();
        let late = append_staged_on(&v1, &session, "late").await;
        let next = append_staged_on(&v1, &session, "next").await;
        let unpinned = append_staged_on(&v1, &session, "unpinned").await;
        // The stalled writer's commit lands first, at its base + 1.
        assert_eq!(
            t.commit("t", None, v1.clone(), vec![late], None).await,
            CommitResult::Committed { version: 2 }
        );
        // The next writer's commit on the same base is refused, not rebased:
        // its manifest of version 2 is created only if absent.
        match t.commit("t", None, v1.clone(), vec![next], None).await {
            CommitResult::Conflict(_) => {}
            other => panic!("expected a conflict, got {other:?}"),
        }
        let top = t.probe_latest("t", None, 1).await.unwrap();
        assert_eq!(top, Some(2));
        assert_eq!(ids_at(&t, 2).await, vec!["late"]);
        // The probe's HEADs name the files Lance wrote, on a fork too.
        let there = |rel: String| {
            let store = t.store.clone();
            async move { store.head(&rel).await.unwrap().is_some() }
        };
        assert!(there(manifest_file("t", None, 2)).await);
        assert!(!there(manifest_file("t", None, 3)).await);
        let from = TableRef {
            dir: "t".into(),
            lance_branch: None,
            version: 2,
            incarnation: 0,
            manifest_size: None,
        };
        t.ensure_fork(&from, "dev/x-v1").await.unwrap();
        assert!(there(manifest_file("t", Some("dev/x-v1"), 2)).await);
        assert_eq!(
            t.probe_latest("t", Some("dev/x-v1"), 2).await.unwrap(),
            Some(2)
        );
        assert_eq!(t.probe_latest("t", Some("gone-v9"), 2).await.unwrap(), None);
        // What the pin guards against: the library's own commit, with its
        // own handler and no retries, lands the same staging at version 3,
        // over the stalled writer's rows.
        let plain = DatasetBuilder::from_uri(t.uri("t"))
            .with_session(session.clone())
            .with_version(1)
            .load()
            .await
            .unwrap();
        let rebased = CommitBuilder::new(Arc::new(plain))
            .with_max_retries(0)
            .execute(unpinned)
            .await
            .unwrap();
        assert_eq!(rebased.version().version, 3);
        assert_eq!(ids_at(&t, 3).await, vec!["late", "unpinned"]);
        // And a pinned commit refuses a rebase its handler would make.
        let v3 = t.latest("t", None).await.unwrap().unwrap();
        let stale = append_staged_on(&v3, &session, "stale").await;
        let pin = PinnedCommit::at(3);
        let refused = CommitBuilder::new(v3.clone())
            .with_commit_handler(pin.clone())
            .with_max_retries(0)
            .execute(stale)
            .await;
        assert!(refused.is_err());
        let why = pin.refusal().expect("refused by the pin");
        assert!(why.contains("would have rebased it to version 4"), "{why}");
        // A restore lands right after the latest version, as that version's
        // content at the version asked for.
        assert_eq!(t.restore("t", None, 1).await.unwrap(), 4);
        assert!(ids_at(&t, 4).await.is_empty());
    }

    /// Recovery's look for an intent's landed commit walks past versions a
    /// cleanup removed (the library reads no transaction for them): a
    /// taken-over writer that woke after a cleanup can record an intent
    /// whose base is gone, and its recovery must not fail on it.
    #[tokio::test]
    async fn finding_a_landed_commit_walks_past_removed_versions() {
        use lance::dataset::cleanup::CleanupPolicy;
        let (_dir, session, t) = temp_tables().await;
        assert_eq!(t.create("t", ids_batch(&[]).schema()).await.unwrap(), 1);
        for (v, id) in [(1, "a"), (2, "b"), (3, "c")] {
            let base = t.latest("t", None).await.unwrap().unwrap();
            let txn = append_staged_on(&base, &session, id).await;
            assert_eq!(
                t.commit("t", None, base, vec![txn], None).await,
                CommitResult::Committed { version: v + 1 }
            );
        }
        let ds = t.latest("t", None).await.unwrap().unwrap();
        let policy = CleanupPolicy {
            before_version: Some(4),
            delete_unverified: false,
            error_if_tagged_old_versions: false,
            ..Default::default()
        };
        ds.cleanup(policy).execute().await.unwrap();
        assert!(
            t.store
                .head(&manifest_file("t", None, 2))
                .await
                .unwrap()
                .is_none()
        );
        assert_eq!(
            t.find_landed("t", None, 1, "an-intent-that-never-landed")
                .await
                .unwrap(),
            (None, Some(4))
        );
    }

    #[test]
    fn a_table_schema_starts_with_its_ids() {
        let c = compile(
            "node Person { name: String @key\n photo: Blob? }\nedge Knows: Person -> Person { since: Date? }",
        )
        .unwrap();
        let schema = table_schema(c.node("Person").unwrap());
        assert_eq!(schema.field(0).name(), "id");
        assert!(schema.field(0).metadata().contains_key(PK_METADATA));
        assert_eq!(schema.field(0).metadata().get(COMPRESSION), None);
        let k = table_schema(c.edge("Knows").unwrap());
        let lz4 = Some(&"lz4".to_string());
        assert_eq!(k.field(0).metadata().get(COMPRESSION), lz4);
        assert_eq!(k.field(1).metadata().get(COMPRESSION), None);
        assert_eq!(
            k.fields()
                .iter()
                .map(|f| f.name().as_str())
                .collect::<Vec<_>>(),
            vec!["id", "src", "dst", "since"]
        );
    }
}
