//! External blob references: the graph's policy (numbered versions under
//! `_graph/policy/`, each change a create-if-absent of the next, so two
//! concurrent changes never lose one), and turning the URIs a write carries
//! into what it stores. Every URI is checked against the policy and sized
//! (one HEAD) before any payload is read: an overwrite keeps it as a
//! reference with its recorded length and ETag, every other write copies
//! the bytes in (those of the object the HEAD saw), within the per-table
//! byte limit.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{LargeBinaryBuilder, StringBuilder, UInt64Builder};
use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch, StructArray};
use arrow_buffer::NullBufferBuilder;
use arrow_schema::{DataType, Field, Fields, Schema};

use super::objstore::Store;
use super::requests::StorageSession;
use crate::compiler::blob_policy::{BlobPolicy, ExternalUri};
use crate::compiler::catalog::{PropType, TypeDef};
use crate::error::{Location, OmniError, Result};

const POLICY_DIR: &str = "_graph/policy";

fn policy_name(n: u64) -> String {
    format!("external-blobs-{n:012}.json")
}

/// The newest policy and its number (0: none was ever set, deny all).
pub async fn read_policy(store: &Store) -> Result<(u64, BlobPolicy)> {
    let names = store.list(POLICY_DIR).await?;
    let newest = names
        .iter()
        .filter_map(|n| {
            n.strip_prefix("external-blobs-")?
                .strip_suffix(".json")?
                .parse::<u64>()
                .ok()
        })
        .max();
    let Some(n) = newest else {
        return Ok((0, BlobPolicy::default()));
    };
    let bytes = store
        .read(&format!("{POLICY_DIR}/{}", policy_name(n)))
        .await?
        .ok_or_else(|| OmniError::Storage(format!("policy version {n} vanished")))?;
    let p = serde_json::from_slice(&bytes)
        .map_err(|e| OmniError::Storage(format!("policy version {n} is corrupt: {e}")))?;
    Ok((n, p))
}

/// Change the policy: `change` applied to the newest one, written as the
/// next version; a concurrent change makes this one re-read and re-apply.
pub async fn update_policy(
    store: &Store,
    change: impl Fn(BlobPolicy) -> Result<BlobPolicy>,
) -> Result<BlobPolicy> {
    loop {
        let (n, p) = read_policy(store).await?;
        let next = change(p.clone())?;
        if next == p {
            return Ok(p);
        }
        let bytes = serde_json::to_vec_pretty(&next)?;
        if store
            .create(&format!("{POLICY_DIR}/{}", policy_name(n + 1)), bytes)
            .await?
        {
            return Ok(next);
        }
    }
}

/// What a write does with the external references it carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum External {
    /// Store each as a reference with its recorded length (overwrite).
    Reference,
    /// Copy the bytes in; the batches plus every referenced object must fit
    /// in `budget` bytes.
    Copy { budget: usize },
}

/// One URI cell of a batch.
struct UriCell {
    batch: usize,
    row: usize,
    column: usize,
    /// The URI as checked (its one spelling): what the cell stores.
    checked: String,
    size: u64,
    /// The object's ETag (or version) at the HEAD: recorded with a
    /// reference, and what a copy's read must find.
    etag: Option<String>,
    /// Where the input names it, for an error.
    at: Location,
    /// A store on the object's folder and the object's name there (opened
    /// once, for the HEAD and, when copied, the read).
    object: (Store, String),
}

/// The object a checked URI names: a store on its folder and its name.
async fn object(session: &StorageSession, u: &ExternalUri) -> Result<(Store, String)> {
    let (last, dir) = u
        .segments
        .split_last()
        .ok_or_else(|| OmniError::BadRequest(format!("{u} names no object")))?;
    let dir_uri = format!("{}://{}/{}", u.scheme, u.host, dir.join("/"));
    Ok((Store::open(session, &dir_uri).await?, last.clone()))
}

/// The object a stored reference names, reached through `graph`'s store
/// session (nothing is asked of it).
pub async fn object_of(graph: &super::GraphStorage, u: &ExternalUri) -> Result<(Store, String)> {
    object(&StorageSession(graph.tables.session().clone()), u).await
}

/// The batches of `def` with their external references resolved as
/// `mode` says, or `None` when they carry none (then nothing is read).
/// `lines[b][r]` is the input line of row `r` of batch `b`, if known.
pub async fn resolve(
    graph: &super::GraphStorage,
    def: &TypeDef,
    batches: &[RecordBatch],
    lines: &[Vec<u32>],
    mode: External,
) -> Result<Option<Vec<RecordBatch>>> {
    let blob_columns: Vec<(usize, &str)> = def
        .properties
        .iter()
        .filter(|p| p.ty == PropType::Blob)
        .filter_map(|p| {
            let schema = batches.first()?.schema();
            Some((schema.index_of(&p.name).ok()?, p.name.as_str()))
        })
        .collect();
    let (store, session) = (
        &graph.store,
        &StorageSession(graph.tables.session().clone()),
    );
    let mut cells = Vec::new();
    let mut policy: Option<BlobPolicy> = None;
    for (b, batch) in batches.iter().enumerate() {
        for &(column, prop) in &blob_columns {
            let Some(uris) = uri_child(batch.column(column)) else {
                continue;
            };
            for row in 0..batch.num_rows() {
                if !uris.is_valid(row) || batch.column(column).is_null(row) {
                    continue;
                }
                let raw = uris.value(row).to_string();
                let at = || Location {
                    line: lines.get(b).and_then(|l| l.get(row)).map(|&l| l as usize),
                    row: None,
                    type_name: Some(def.name.clone()),
                    property: Some(prop.to_string()),
                    value: Some(format!("{raw:?}")),
                    ..Default::default()
                };
                if policy.is_none() {
                    policy = Some(read_policy(store).await?.1);
                }
                let uri = policy
                    .as_ref()
                    .expect("read above")
                    .check(&raw)
                    .map_err(|why| OmniError::invalid(at(), why))?;
                let (dir, name) = object(session, &uri).await?;
                let (size, etag) = dir.head(&name).await?.ok_or_else(|| {
                    OmniError::invalid(at(), "the external object does not exist")
                })?;
                cells.push(UriCell {
                    batch: b,
                    row,
                    column,
                    checked: uri.to_string(),
                    size,
                    etag,
                    at: at(),
                    object: (dir, name),
                });
            }
        }
    }
    if cells.is_empty() {
        return Ok(None);
    }
    if let External::Copy { budget } = mode {
        let held: usize = batches.iter().map(|b| b.get_array_memory_size()).sum();
        let total = cells
            .iter()
            .fold(held as u64, |t, c| t.saturating_add(c.size));
        if total > budget as u64 {
            return Err(OmniError::ResourceLimitExceeded {
                what: format!(
                    "{total} bytes of {} in one commit, {} external object(s) copied in",
                    def.name,
                    cells.len()
                ),
                limit: format!("{} MiB per table", budget >> 20),
            });
        }
    }
    let mut out = Vec::with_capacity(batches.len());
    for (b, batch) in batches.iter().enumerate() {
        let mut columns = batch.columns().to_vec();
        let mut fields: Vec<Field> = batch
            .schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        for &(column, _) in &blob_columns {
            let here: HashMap<usize, &UriCell> = cells
                .iter()
                .filter(|c| c.batch == b && c.column == column)
                .map(|c| (c.row, c))
                .collect();
            let (field, array) =
                rebuild(&fields[column], batch.column(column), &here, mode).await?;
            fields[column] = field;
            columns[column] = array;
        }
        let schema = Arc::new(Schema::new_with_metadata(
            fields,
            batch.schema().metadata().clone(),
        ));
        out.push(RecordBatch::try_new(schema, columns)?);
    }
    Ok(Some(out))
}

/// The `uri` child of a logical blob column, if it has one.
fn uri_child(col: &ArrayRef) -> Option<&arrow_array::StringArray> {
    col.as_struct_opt()?
        .column_by_name("uri")?
        .as_string_opt::<i32>()
}

/// One blob column with its URI cells resolved: as data (copied bytes)
/// or as references carrying their position and length.
async fn rebuild(
    field: &Field,
    col: &ArrayRef,
    cells: &HashMap<usize, &UriCell>,
    mode: External,
) -> Result<(Field, ArrayRef)> {
    let s = col.as_struct_opt().ok_or_else(|| {
        OmniError::Storage(format!("blob column {} is not a struct", field.name()))
    })?;
    let data = s
        .column_by_name("data")
        .and_then(|d| d.as_binary_opt::<i64>())
        .ok_or_else(|| OmniError::Storage("a blob column without data".into()))?;
    let n = s.len();
    let mut d = LargeBinaryBuilder::with_capacity(n, 0);
    let mut u = StringBuilder::with_capacity(n, 0);
    let mut pos = UInt64Builder::with_capacity(n);
    let mut size = UInt64Builder::with_capacity(n);
    let mut valid = NullBufferBuilder::new(n);
    for row in 0..n {
        let cell = cells.get(&row);
        if s.is_null(row) {
            valid.append_null();
            d.append_null();
            u.append_null();
            pos.append_null();
            size.append_null();
            continue;
        }
        valid.append_non_null();
        match cell {
            // An empty object holds nothing to refer to: stored as empty.
            Some(c) if mode == External::Reference && c.size > 0 => {
                d.append_null();
                u.append_value(super::blob::reference(&c.checked, c.etag.as_deref()));
                pos.append_value(0);
                size.append_value(c.size);
            }
            Some(c) => {
                let bytes = if c.size == 0 {
                    bytes::Bytes::new()
                } else {
                    let (dir, name) = &c.object;
                    let (bytes, tag) = dir.read_tagged(name).await?.ok_or_else(|| {
                        OmniError::NotFound(format!("the external object {} vanished", c.checked))
                    })?;
                    // The bytes copied are those of the object the HEAD sized.
                    // A store that gives no ETag on a read (its HEAD gave a
                    // version instead) is checked by length alone.
                    let moved = c
                        .etag
                        .as_ref()
                        .is_some_and(|e| !tag.is_empty() && *e != tag);
                    if moved || bytes.len() as u64 != c.size {
                        return Err(OmniError::invalid(
                            c.at.clone(),
                            format!(
                                "the external object changed between its check and its copy (ETag {} at the check, {tag} read); nothing was written",
                                c.etag.as_deref().unwrap_or("none")
                            ),
                        ));
                    }
                    bytes
                };
                d.append_value(&bytes);
                u.append_null();
                pos.append_null();
                size.append_null();
            }
            None => {
                match data.is_valid(row) {
                    true => d.append_value(data.value(row)),
                    false => d.append_null(),
                }
                u.append_null();
                pos.append_null();
                size.append_null();
            }
        }
    }
    let children = Fields::from(vec![
        Field::new("data", DataType::LargeBinary, true),
        Field::new("uri", DataType::Utf8, true),
        Field::new("position", DataType::UInt64, true),
        Field::new("size", DataType::UInt64, true),
    ]);
    let array = StructArray::try_new(
        children.clone(),
        vec![
            Arc::new(d.finish()) as ArrayRef,
            Arc::new(u.finish()),
            Arc::new(pos.finish()),
            Arc::new(size.finish()),
        ],
        valid.finish(),
    )?;
    let field = Field::new(
        field.name(),
        DataType::Struct(children),
        field.is_nullable(),
    )
    .with_metadata(field.metadata().clone());
    Ok((field, Arc::new(array)))
}
