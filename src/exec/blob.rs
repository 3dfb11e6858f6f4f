//! The blob reader: one Blob cell of one snapshot, as a managed value (its
//! length, strong ETag and a range reader bound to the exact table version
//! the snapshot names) or an external reference (its URI, recorded ETag and
//! length, and a reader of the object that reads it only while it is still
//! the object referenced).

use crate::compiler::catalog::{Catalog, PropType, TypeDef};
use crate::error::{OmniError, Result};
use crate::storage::blob::{self, EtagInput, ExternalObject, Stored};
use crate::storage::{GraphStorage, Target};

pub use crate::storage::blob::{BlobReader, MAX_RANGE_BYTES, steps};

/// Which cell: a node's or an edge's Blob property, by the entity's id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlobCell {
    pub type_name: String,
    pub id: String,
    pub property: String,
}

impl BlobCell {
    pub fn new(type_name: &str, id: &str, property: &str) -> Self {
        Self {
            type_name: type_name.to_string(),
            id: id.to_string(),
            property: property.to_string(),
        }
    }
}

impl std::fmt::Display for BlobCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {:?}.{}", self.type_name, self.id, self.property)
    }
}

/// What a non-null Blob cell holds.
#[derive(Debug)]
pub enum Blob {
    Managed {
        length: u64,
        /// `"<32 lowercase hex>"`, quotes included (an HTTP strong ETag).
        etag: String,
        reader: BlobReader,
    },
    External {
        uri: String,
        /// The object's ETag (or version) when the reference was written:
        /// the object a reader fetches is the one referenced while its
        /// ETag still is this one.
        etag: Option<String>,
        offset: u64,
        length: u64,
        reader: BlobReader,
    },
}

impl Blob {
    /// What the cell holds, as the CLI's `blob stat --json` prints it.
    pub fn stat(&self) -> serde_json::Value {
        match self {
            Blob::Managed { length, etag, .. } => {
                serde_json::json!({ "kind": "managed", "length": length, "etag": etag })
            }
            Blob::External {
                uri,
                etag,
                offset,
                length,
                ..
            } => {
                let mut v = serde_json::json!({ "kind": "external", "uri": uri, "offset": offset, "length": length });
                if let Some(e) = etag {
                    v["etag"] = serde_json::json!(e);
                }
                v
            }
        }
    }

    /// The reader of the cell's bytes: the graph's own, or the external
    /// object's while it is the one referenced (`BlobChanged` otherwise).
    pub fn into_reader(self) -> BlobReader {
        match self {
            Blob::Managed { reader, .. } | Blob::External { reader, .. } => reader,
        }
    }
}

/// The bytes `offset..offset+length` of a blob of `len` bytes, the end
/// clamped to `len`; an offset past the end is not satisfiable.
pub fn clamp(offset: u64, length: Option<u64>, len: u64) -> Result<std::ops::Range<u64>> {
    if offset > len {
        return Err(OmniError::BlobRangeNotSatisfiable {
            start: offset,
            end: offset.saturating_add(length.unwrap_or(0)),
            length: len,
        });
    }
    Ok(offset..length.map_or(len, |n| offset.saturating_add(n).min(len)))
}

/// The cell's type and property id, checked against the catalog.
fn resolve_cell<'c>(catalog: &'c Catalog, cell: &BlobCell) -> Result<(&'c TypeDef, u32)> {
    let t = catalog.get(&cell.type_name).ok_or_else(|| {
        OmniError::BadRequest(format!("the schema has no type {}", cell.type_name))
    })?;
    let p = t.property(&cell.property).ok_or_else(|| {
        OmniError::BadRequest(format!("{} has no property {}", t.name, cell.property))
    })?;
    if p.ty != PropType::Blob {
        return Err(OmniError::BadRequest(format!(
            "{}.{} is a {}, not a Blob",
            t.name,
            p.name,
            p.ty.describe()
        )));
    }
    Ok((t, p.id))
}

/// Read `cell` as `target` sees it; the cell is checked against the
/// catalog before any I/O.
pub async fn read(graph: &GraphStorage, target: &Target, cell: &BlobCell) -> Result<Blob> {
    let snap = graph.snapshot(target).await?;
    let (t, property_id) = resolve_cell(snap.catalog(), cell)?;
    let table_ref = snap.table(t)?;
    let table = graph.read_table(&snap, t).await?;
    let (row_id, stored) = blob::locate(&table, &cell.property, &cell.id)
        .await?
        .ok_or_else(|| OmniError::NotFound(format!("{} {:?}", t.name, cell.id)))?;
    match stored {
        None => Err(OmniError::NotFound(format!("{cell} is null"))),
        Some(Stored::External {
            uri,
            etag,
            offset,
            length,
        }) => {
            // The stored URI is the one the policy checked; opening a store
            // on its folder asks nothing of the object.
            let checked = crate::compiler::blob_policy::parse(&uri).map_err(|why| {
                OmniError::BlobIntegrity {
                    reason: format!("{cell} refers to {uri:?}, which does not parse: {why}"),
                }
            })?;
            let (dir, name) = crate::storage::external::object_of(graph, &checked).await?;
            let object = ExternalObject {
                dir,
                name,
                uri: uri.clone(),
                etag: etag.clone(),
                offset,
            };
            Ok(Blob::External {
                uri,
                etag,
                offset,
                length,
                reader: BlobReader::external(object, length),
            })
        }
        Some(Stored::Managed { length }) => {
            if !blob::has_stable_row_ids(&table) {
                return Err(OmniError::BlobIntegrity {
                    reason: format!("{} does not use stable row ids", t.name),
                });
            }
            let transaction = blob::transaction_identity(&table).await?;
            let etag = blob::etag(&EtagInput {
                table_id: u64::from(t.id),
                incarnation: table_ref.incarnation,
                property_id: u64::from(property_id),
                table_version: table_ref.version,
                row_id,
                transaction: transaction.as_bytes(),
            })?;
            let what = format!("{cell} at table version {}", table_ref.version);
            let reader = BlobReader::open(&table, &cell.property, row_id, length, what).await?;
            Ok(Blob::Managed {
                length,
                etag,
                reader,
            })
        }
    }
}
