//! Blob cells of one exact table version: finding the cell by a typed id
//! filter, decoding its stored descriptor (the only place that does), the
//! strong ETag, and a reader whose every call is one bounded range read.
//!
//! A reader holds the Lance blob file of the version it was opened at, so
//! it keeps reading those bytes after the branch moves on; the bytes of a
//! version are immutable, so it can never see newer or partial ones.

use std::collections::HashMap;
use std::ops::Range;

use arrow_array::cast::AsArray;
use arrow_array::types::{UInt8Type, UInt32Type, UInt64Type};
use arrow_array::{Array, StructArray};
use bytes::Bytes;
use futures::TryStreamExt;
use sha2::{Digest, Sha256};

use super::objstore::RangeRead;
use super::scan::{self, Filter, ROW_ID};
use super::stage::PROBE_CHUNK;
use super::tables::Table;
use crate::compiler::catalog::{ID, PropType};
use crate::compiler::query::ast::CmpOp;
use crate::compiler::value::Value;
use crate::error::{OmniError, Result};

/// The most one `read_range` call reads.
pub const MAX_RANGE_BYTES: u64 = 4 << 20;

/// The domain tag that starts every ETag's digest input.
pub const ETAG_DOMAIN: &[u8] = b"omnigraph/blob-etag/v1\0";

/// Lance's stored blob kinds (the descriptor's `kind` byte).
const INLINE: u8 = 0;
const PACKED: u8 = 1;
const DEDICATED: u8 = 2;
const EXTERNAL: u8 = 3;
const MANAGED: u8 = 4;
const MANAGED_WITH_BASE: u8 = 5;

/// What a non-null Blob cell holds, as its descriptor says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stored {
    /// Bytes the graph owns.
    Managed { length: u64 },
    /// A reference to an object outside the graph.
    External {
        uri: String,
        /// The object's ETag (or version) the write's HEAD saw, if the
        /// store gave one.
        etag: Option<String>,
        offset: u64,
        length: u64,
    },
}

/// The fragment that carries a reference's recorded ETag.
const ETAG_FRAGMENT: &str = "#etag=";

/// An external reference as the descriptor stores it: the checked URI and,
/// after `#etag=`, the ETag (or version) the write's HEAD saw, its bytes
/// outside `[A-Za-z0-9-._~]` percent-encoded. A checked URI never holds a
/// `#` (it encodes one), and a fragment is no part of an object's name, so
/// the stored reference names exactly the object the policy checked.
pub fn reference(uri: &str, etag: Option<&str>) -> String {
    let Some(tag) = etag else {
        return uri.to_string();
    };
    let mut out = format!("{uri}{ETAG_FRAGMENT}");
    for b in tag.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A stored reference's URI and recorded ETag (see [`reference`]).
pub fn split_reference(stored: &str) -> Result<(&str, Option<String>)> {
    let Some((uri, tag)) = stored.split_once(ETAG_FRAGMENT) else {
        return Ok((stored, None));
    };
    let bad = || {
        integrity(format!(
            "the external blob reference {stored:?} has a damaged ETag"
        ))
    };
    let mut out = Vec::with_capacity(tag.len());
    let mut bytes = tag.bytes();
    while let Some(b) = bytes.next() {
        if b != b'%' {
            out.push(b);
            continue;
        }
        let hex = [bytes.next().ok_or_else(bad)?, bytes.next().ok_or_else(bad)?];
        let hex = std::str::from_utf8(&hex).map_err(|_| bad())?;
        out.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
    }
    Ok((uri, Some(String::from_utf8(out).map_err(|_| bad())?)))
}

/// One stored descriptor's fields, as the scan returned them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RawDescriptor<'a> {
    pub kind: Option<u8>,
    pub position: Option<u64>,
    pub size: Option<u64>,
    pub blob_id: Option<u32>,
    pub uri: Option<&'a str>,
}

fn integrity(reason: impl Into<String>) -> OmniError {
    OmniError::BlobIntegrity {
        reason: reason.into(),
    }
}

/// Decode one descriptor: `None` for a null cell; every shape a Blob cell
/// of ours cannot hold is [`OmniError::BlobIntegrity`].
pub fn decode(d: &RawDescriptor) -> Result<Option<Stored>> {
    let Some(kind) = d.kind else {
        return Ok(None);
    };
    let (Some(position), Some(size)) = (d.position, d.size) else {
        return Err(integrity(format!(
            "a kind {kind} descriptor without a position or size"
        )));
    };
    if position.checked_add(size).is_none() {
        return Err(integrity(format!("the range {position}+{size} overflows")));
    }
    match kind {
        INLINE | PACKED | MANAGED => Ok(Some(Stored::Managed { length: size })),
        DEDICATED if position != 0 => Err(integrity(format!(
            "a dedicated blob at position {position} (must be 0)"
        ))),
        DEDICATED => Ok(Some(Stored::Managed { length: size })),
        MANAGED_WITH_BASE => Err(integrity(
            "a managed blob in a registered base (the graph registers none)",
        )),
        EXTERNAL => {
            if d.blob_id.unwrap_or(0) != 0 {
                return Err(integrity(format!(
                    "an external blob relative to base {} (the graph registers none)",
                    d.blob_id.unwrap_or(0)
                )));
            }
            let (uri, etag) = split_reference(d.uri.unwrap_or(""))?;
            let Some((scheme, rest)) = uri.split_once("://") else {
                return Err(integrity(format!(
                    "the external blob URI {uri:?} is not absolute"
                )));
            };
            let scheme_ok = !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
            if !scheme_ok || rest.is_empty() {
                return Err(integrity(format!(
                    "the external blob URI {uri:?} is malformed"
                )));
            }
            if size == 0 {
                return Err(integrity(format!(
                    "the external blob {uri:?} has no recorded length"
                )));
            }
            Ok(Some(Stored::External {
                uri: uri.to_string(),
                etag,
                offset: position,
                length: size,
            }))
        }
        k => Err(integrity(format!("unknown blob kind {k}"))),
    }
}

/// Everything an ETag binds: the cell's identity at one table version and
/// the witness of the commit that made that version.
#[derive(Clone, Debug)]
pub struct EtagInput<'a> {
    pub table_id: u64,
    pub incarnation: u64,
    pub property_id: u64,
    pub table_version: u64,
    pub row_id: u64,
    /// The table commit's transaction identity.
    pub transaction: &'a [u8],
}

/// The ETag: lowercase hex of the first 16 bytes of SHA-256 over the
/// domain tag, the big-endian identity fields and the length-prefixed
/// witness, in double quotes. No witness, no ETag.
pub fn etag(e: &EtagInput) -> Result<String> {
    if e.transaction.is_empty() {
        return Err(integrity(format!(
            "table version {} has no commit transaction identity to bind an ETag to",
            e.table_version
        )));
    }
    let mut h = Sha256::new();
    h.update(ETAG_DOMAIN);
    for v in [
        e.table_id,
        e.incarnation,
        e.property_id,
        e.table_version,
        e.row_id,
        e.transaction.len() as u64,
    ] {
        h.update(v.to_be_bytes());
    }
    h.update(e.transaction);
    let digest = h.finalize();
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("\"{hex}\""))
}

/// `start..end` against a blob of `length` bytes: valid iff
/// `start <= end <= length`, and at most [`MAX_RANGE_BYTES`] long.
pub fn check_range(range: &Range<u64>, length: u64) -> Result<()> {
    if range.start > range.end || range.end > length {
        return Err(OmniError::BlobRangeNotSatisfiable {
            start: range.start,
            end: range.end,
            length,
        });
    }
    if range.end - range.start > MAX_RANGE_BYTES {
        return Err(OmniError::ResourceLimitExceeded {
            what: format!("a blob read of {} bytes", range.end - range.start),
            limit: format!("{} MiB per read_range", MAX_RANGE_BYTES >> 20),
        });
    }
    Ok(())
}

/// `range` cut into consecutive reads of at most [`MAX_RANGE_BYTES`]: how
/// a caller walks a whole value through `read_range`.
pub fn steps(range: Range<u64>) -> impl Iterator<Item = Range<u64>> {
    let end = range.end;
    (range.start..end)
        .step_by(MAX_RANGE_BYTES as usize)
        .map(move |at| at..(at + MAX_RANGE_BYTES).min(end))
}

/// The cell `id`.`property` of a table version: its stable row id and
/// what it holds (`None`: null). `Ok(None)` when no row has that id.
pub async fn locate(
    table: &Table,
    property: &str,
    id: &str,
) -> Result<Option<(u64, Option<Stored>)>> {
    let filter = Filter::compare(
        ID,
        &PropType::String,
        CmpOp::Eq,
        &Value::Str(id.to_string().into()),
    )
    .expect("a string fits the id column");
    Ok(located(table, property, &filter).await?.remove(id))
}

/// [`locate`] for many ids, one scan per [`PROBE_CHUNK`] of them.
pub async fn locate_all(
    table: &Table,
    property: &str,
    ids: &[&str],
) -> Result<HashMap<String, (u64, Option<Stored>)>> {
    let mut out = HashMap::with_capacity(ids.len());
    for chunk in ids.chunks(PROBE_CHUNK) {
        let filter = Filter::AnyOf {
            column: ID.to_string(),
            values: chunk.iter().map(|s| s.to_string()).collect(),
        };
        out.extend(located(table, property, &filter).await?);
    }
    Ok(out)
}

/// The cells of `property` in the rows `filter` keeps, by id.
async fn located(
    table: &Table,
    property: &str,
    filter: &Filter,
) -> Result<HashMap<String, (u64, Option<Stored>)>> {
    let batches: Vec<_> = scan::stream(table, &[ID, property], Some(filter), None, true)
        .await?
        .try_collect()
        .await?;
    let mut found = HashMap::new();
    for b in &batches {
        let ids = b
            .column_by_name(ID)
            .and_then(|c| c.as_string_opt::<i32>())
            .ok_or_else(|| OmniError::Storage("ids missing from a blob scan".into()))?;
        let row_ids = b
            .column_by_name(ROW_ID)
            .ok_or_else(|| OmniError::Storage("row ids missing from a blob scan".into()))?
            .as_primitive::<UInt64Type>();
        let col = b.column_by_name(property).ok_or_else(|| {
            OmniError::Storage(format!("the blob scan returned no {property} column"))
        })?;
        for row in 0..b.num_rows() {
            let id = ids.value(row);
            let cell = (row_ids.value(row), decode(&raw_at(col.as_ref(), row)?)?);
            if found.insert(id.to_string(), cell).is_some() {
                return Err(integrity(format!("two rows have the id {id:?}")));
            }
        }
    }
    Ok(found)
}

/// The managed bytes of `property` for the rows with these ids, read only
/// after their declared lengths, summed, fit in `budget` bytes. A missing
/// id or a null cell gives `None`.
pub async fn values_of(
    table: &Table,
    property: &str,
    ids: &[&str],
    budget: usize,
) -> Result<HashMap<String, Option<Vec<u8>>>> {
    let mut out = HashMap::new();
    let mut located = Vec::new();
    let mut total: u64 = 0;
    let mut cells = locate_all(table, property, ids).await?;
    for &id in ids {
        match cells.remove(id) {
            None | Some((_, None)) => {
                out.insert(id.to_string(), None);
            }
            Some((row_id, Some(Stored::Managed { length }))) => {
                total = total.saturating_add(length);
                located.push((id, row_id, length));
            }
            Some((_, Some(Stored::External { uri, .. }))) => {
                return Err(OmniError::BadRequest(format!(
                    "{property} of {id:?} is an external reference ({uri}); \
                     this write would have to copy it: assign the property explicitly"
                )));
            }
        }
    }
    if total > budget as u64 {
        return Err(OmniError::ResourceLimitExceeded {
            what: format!("{total} bytes of {property} carried through one commit"),
            limit: format!("{} MiB per table", budget >> 20),
        });
    }
    for (id, row_id, length) in located {
        let r = BlobReader::open(
            table,
            property,
            row_id,
            length,
            format!("{id:?}.{property}"),
        )
        .await?;
        let mut bytes = Vec::with_capacity(length as usize);
        for step in steps(0..length) {
            bytes.extend_from_slice(&r.read_range(step).await?);
        }
        out.insert(id.to_string(), Some(bytes));
    }
    Ok(out)
}

/// The descriptor fields of row `row` of a scanned blob column.
fn raw_at(col: &dyn Array, row: usize) -> Result<RawDescriptor<'_>> {
    let Some(s) = col.as_any().downcast_ref::<StructArray>() else {
        return Err(integrity(format!(
            "the column holds {}, not blob descriptors",
            col.data_type()
        )));
    };
    if s.is_null(row) {
        return Ok(RawDescriptor::default());
    }
    let field = |name: &str| {
        s.column_by_name(name)
            .ok_or_else(|| integrity(format!("a blob descriptor without its {name} field")))
    };
    let kind = field("kind")?;
    let kind = kind
        .as_primitive_opt::<UInt8Type>()
        .ok_or_else(|| integrity("a blob descriptor kind that is not a byte"))?;
    let u64s = |name: &str| -> Result<Option<u64>> {
        let a = field(name)?;
        let a = a
            .as_primitive_opt::<UInt64Type>()
            .ok_or_else(|| integrity(format!("a blob descriptor {name} that is not a u64")))?;
        Ok(a.is_valid(row).then(|| a.value(row)))
    };
    let blob_id = field("blob_id")?;
    let blob_id = blob_id
        .as_primitive_opt::<UInt32Type>()
        .ok_or_else(|| integrity("a blob descriptor blob_id that is not a u32"))?;
    let uri = s
        .column_by_name("blob_uri")
        .ok_or_else(|| integrity("a blob descriptor without its blob_uri field"))?
        .as_string_opt::<i32>()
        .ok_or_else(|| integrity("a blob descriptor blob_uri that is not a string"))?;
    Ok(RawDescriptor {
        kind: kind.is_valid(row).then(|| kind.value(row)),
        position: u64s("position")?,
        size: u64s("size")?,
        blob_id: blob_id.is_valid(row).then(|| blob_id.value(row)),
        uri: uri.is_valid(row).then(|| uri.value(row)),
    })
}

/// The identity of the commit that made this table version.
pub async fn transaction_identity(Table(ds): &Table) -> Result<String> {
    match ds.read_transaction().await? {
        Some(t) if !t.uuid.is_empty() => Ok(t.uuid),
        _ => Err(integrity(format!(
            "table version {} records no commit transaction",
            ds.version().version
        ))),
    }
}

/// Whether the table's `_rowid` is Lance's stable row id (an ETag binds it).
pub fn has_stable_row_ids(Table(ds): &Table) -> bool {
    ds.manifest().uses_stable_row_ids()
}

/// Reads one managed blob of one table version, one bounded range a call.
pub struct BlobReader {
    source: Source,
    length: u64,
    what: String,
}

enum Source {
    Managed {
        file: lance::dataset::BlobFile,
        /// On local disk: the file holding the bytes and the offset of
        /// byte 0 in it (Lance's object-store read of a range took twice
        /// the time of a plain file read).
        local: Option<(std::path::PathBuf, u64)>,
    },
    /// An object outside the graph, read while it is the one referenced.
    External(ExternalObject),
}

/// The object an external reference names, as the reference recorded it.
pub struct ExternalObject {
    /// A store on the object's folder, and its name there.
    pub dir: super::objstore::Store,
    pub name: String,
    /// The reference's URI, for errors.
    pub uri: String,
    /// Its ETag (or version) when the reference was written.
    pub etag: Option<String>,
    /// Where the referenced bytes start in the object; the object's size
    /// was `offset + length` when the reference was written.
    pub offset: u64,
}

impl ExternalObject {
    fn recorded(&self, size: u64) -> String {
        describe(self.etag.as_deref(), size)
    }

    /// `range` of the referenced bytes (`len` in all), only while the
    /// object is the one the reference recorded.
    async fn read(&self, range: Range<u64>, len: u64) -> Result<Bytes> {
        let size = self.offset + len;
        let at = self.offset + range.start..self.offset + range.end;
        let changed = |found: String| OmniError::BlobChanged {
            uri: self.uri.clone(),
            recorded: self.recorded(size),
            found,
        };
        match self
            .dir
            .read_range_if(&self.name, at, self.etag.as_deref())
            .await?
        {
            RangeRead::Read { bytes, size: now } if now == size => Ok(bytes),
            RangeRead::Read { size: now, .. } => Err(changed(describe(None, now))),
            RangeRead::Gone => Err(changed("no object".into())),
            RangeRead::Moved => Err(changed(match self.dir.head(&self.name).await? {
                Some((now, tag)) => describe(tag.as_deref(), now),
                None => "no object".into(),
            })),
        }
    }
}

fn describe(etag: Option<&str>, size: u64) -> String {
    match etag {
        Some(t) => format!("ETag {t} and {size} bytes"),
        None => format!("{size} bytes"),
    }
}

impl std::fmt::Debug for BlobReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlobReader")
            .field("what", &self.what)
            .field("length", &self.length)
            .finish()
    }
}

impl BlobReader {
    /// Open the reader of a managed cell located at `row_id`; `length` is
    /// what its descriptor says, and the blob file must agree.
    pub async fn open(
        Table(ds): &Table,
        property: &str,
        row_id: u64,
        length: u64,
        what: String,
    ) -> Result<Self> {
        let mut files = ds.take_blobs(&[row_id], property).await?;
        let file = match files.pop() {
            Some(Some(f)) if files.is_empty() => f,
            _ => {
                return Err(integrity(format!(
                    "{what}: the blob file cannot be located"
                )));
            }
        };
        if file.size() != length {
            return Err(integrity(format!(
                "{what}: the descriptor says {length} bytes, the blob file {}",
                file.size()
            )));
        }
        // Lance's local store is rooted at `/`: its paths are absolute
        // paths without the leading slash.
        let uri = ds.uri();
        let local = (!uri.contains("://") || uri.starts_with("file://")).then(|| {
            (
                std::path::PathBuf::from(format!("/{}", file.data_path())),
                file.position(),
            )
        });
        Ok(Self {
            source: Source::Managed { file, local },
            length,
            what,
        })
    }

    /// The reader of an external reference's `length` bytes: nothing is
    /// asked of the object until a range is read.
    pub fn external(object: ExternalObject, length: u64) -> Self {
        let what = object.uri.clone();
        Self {
            source: Source::External(object),
            length,
            what,
        }
    }

    /// `range` of a local blob, read straight from its file into a buffer
    /// that is never zero-filled first.
    async fn read_local(
        &self,
        path: &std::path::Path,
        base: u64,
        range: Range<u64>,
    ) -> Result<Bytes> {
        use std::io::{Read, Seek, SeekFrom};
        let path = path.to_path_buf();
        let len = range.end - range.start;
        let at = base + range.start;
        let read = move || {
            let mut f = std::fs::File::open(&path)?;
            f.seek(SeekFrom::Start(at))?;
            let mut buf = Vec::with_capacity(len as usize);
            f.take(len).read_to_end(&mut buf)?;
            Ok::<_, std::io::Error>(Bytes::from(buf))
        };
        // On a multi-threaded runtime the read runs on this worker, which
        // hands its other tasks on first: no thread hop, and the buffer is
        // allocated and freed on the same thread.
        let handle = tokio::runtime::Handle::current();
        if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread {
            return Ok(tokio::task::block_in_place(read)?);
        }
        tokio::task::spawn_blocking(read)
            .await
            .map_err(|e| OmniError::Storage(format!("a blob read task failed: {e}")))?
            .map_err(OmniError::from)
    }

    pub fn len(&self) -> u64 {
        self.length
    }

    pub fn is_empty(&self) -> bool {
        self.length == 0
    }

    /// Bytes `range` of the blob (half-open). Checked before any I/O.
    pub async fn read_range(&self, range: Range<u64>) -> Result<Bytes> {
        check_range(&range, self.length)?;
        if range.is_empty() {
            return Ok(Bytes::new());
        }
        let want = range.end - range.start;
        let read = match &self.source {
            Source::External(o) => return self.checked(o.read(range, self.length).await?, want),
            Source::Managed {
                local: Some((path, base)),
                ..
            } => self.read_local(path, *base, range).await,
            Source::Managed { file, .. } => file.read_range(range).await.map_err(OmniError::from),
        };
        let bytes = read.map_err(|e| {
            OmniError::NotFound(format!(
                "the bytes of {} are no longer readable (the version's files were cleaned up?): {e}",
                self.what
            ))
        })?;
        self.checked(bytes, want)
    }

    fn checked(&self, bytes: Bytes, want: u64) -> Result<Bytes> {
        if bytes.len() as u64 != want {
            return Err(integrity(format!(
                "{}: asked for {want} bytes, storage returned {}",
                self.what,
                bytes.len()
            )));
        }
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn managed(kind: u8, position: u64, size: u64) -> RawDescriptor<'static> {
        RawDescriptor {
            kind: Some(kind),
            position: Some(position),
            size: Some(size),
            blob_id: Some(0),
            uri: Some(""),
        }
    }

    /// A digest worked out by hand: the input bytes are written out in
    /// full here, not built with the code under test.
    #[test]
    fn the_etag_is_the_first_16_bytes_of_sha256_over_the_spelled_out_input() {
        let txn = b"8c6c5e8e-0f5d-4c1e-9a38-2b1d6c9f1e77";
        let mut input = Vec::new();
        input.extend_from_slice(b"omnigraph/blob-etag/v1\0");
        input.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 3]); // table id 3
        input.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0x01, 0x02]); // incarnation 258
        input.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 7]); // property id 7
        input.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 42]); // table version 42
        input.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0]); // row id 2^32
        input.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 36]); // witness length
        input.extend_from_slice(txn);
        let full = Sha256::digest(&input);
        let want: String = full[..16].iter().map(|b| format!("{b:02x}")).collect();
        let got = etag(&EtagInput {
            table_id: 3,
            incarnation: 258,
            property_id: 7,
            table_version: 42,
            row_id: 1 << 32,
            transaction: txn,
        })
        .unwrap();
        assert_eq!(got, format!("\"{want}\""));
        // The fixed vector, so a change to both sides at once still fails.
        assert_eq!(got, "\"960135e894d7d87852cc4027c7f7dd00\"");
    }

    #[test]
    fn every_identity_field_changes_the_etag_and_an_empty_witness_has_none() {
        let base = EtagInput {
            table_id: 1,
            incarnation: 2,
            property_id: 3,
            table_version: 4,
            row_id: 5,
            transaction: b"t",
        };
        let e0 = etag(&base).unwrap();
        let variants = [
            EtagInput {
                table_id: 9,
                ..base.clone()
            },
            EtagInput {
                incarnation: 9,
                ..base.clone()
            },
            EtagInput {
                property_id: 9,
                ..base.clone()
            },
            EtagInput {
                table_version: 9,
                ..base.clone()
            },
            EtagInput {
                row_id: 9,
                ..base.clone()
            },
            EtagInput {
                transaction: b"u",
                ..base.clone()
            },
        ];
        for v in &variants {
            assert_ne!(etag(v).unwrap(), e0, "{v:?}");
        }
        let none = etag(&EtagInput {
            transaction: b"",
            ..base
        });
        assert!(
            matches!(none, Err(OmniError::BlobIntegrity { .. })),
            "{none:?}"
        );
    }

    #[test]
    fn ranges_are_half_open_within_the_length_and_at_most_4_mib() {
        assert!(check_range(&(0..0), 0).is_ok());
        assert!(check_range(&(10..10), 10).is_ok());
        assert!(check_range(&(0..10), 10).is_ok());
        #[allow(clippy::reversed_empty_ranges)]
        for (r, len) in [(5..4, 10), (0..11, 10), (11..11, 10)] {
            match check_range(&r, len) {
                Err(OmniError::BlobRangeNotSatisfiable { start, end, length }) => {
                    assert_eq!((start, end, length), (r.start, r.end, len))
                }
                other => panic!("{r:?}: {other:?}"),
            }
        }
        assert!(check_range(&(0..MAX_RANGE_BYTES), 1 << 30).is_ok());
        let over = check_range(&(1..MAX_RANGE_BYTES + 2), 1 << 30);
        assert!(
            matches!(over, Err(OmniError::ResourceLimitExceeded { .. })),
            "{over:?}"
        );
    }

    #[test]
    fn steps_cover_a_range_in_reads_of_at_most_4_mib() {
        let m = MAX_RANGE_BYTES;
        let got: Vec<_> = steps(5..2 * m + 7).collect();
        assert_eq!(got, vec![5..m + 5, m + 5..2 * m + 5, 2 * m + 5..2 * m + 7]);
        assert_eq!(steps(0..m).collect::<Vec<_>>(), vec![0..m]);
        assert_eq!(steps(9..9).count(), 0);
    }

    #[test]
    fn descriptors_decode_or_fail_as_integrity_errors() {
        assert_eq!(decode(&RawDescriptor::default()).unwrap(), None);
        for k in [INLINE, PACKED, MANAGED] {
            assert_eq!(
                decode(&managed(k, 100, 5)).unwrap(),
                Some(Stored::Managed { length: 5 })
            );
        }
        assert_eq!(
            decode(&managed(DEDICATED, 0, 0)).unwrap(),
            Some(Stored::Managed { length: 0 })
        );
        let ext = RawDescriptor {
            kind: Some(EXTERNAL),
            position: Some(4),
            size: Some(6),
            blob_id: Some(0),
            uri: Some("s3://bucket/a/b.bin"),
        };
        assert_eq!(
            decode(&ext).unwrap(),
            Some(Stored::External {
                uri: "s3://bucket/a/b.bin".into(),
                etag: None,
                offset: 4,
                length: 6
            })
        );
        let tagged = reference("s3://bucket/a/b.bin", Some("\"9f#a b%\""));
        assert_eq!(tagged, "s3://bucket/a/b.bin#etag=%229f%23a%20b%25%22");
        assert_eq!(
            decode(&RawDescriptor {
                uri: Some(&tagged),
                ..ext.clone()
            })
            .unwrap(),
            Some(Stored::External {
                uri: "s3://bucket/a/b.bin".into(),
                etag: Some("\"9f#a b%\"".into()),
                offset: 4,
                length: 6
            })
        );
        for damaged in ["s3://b/x#etag=%2", "s3://b/x#etag=%zz", "s3://b/x#etag=%ff"] {
            let d = RawDescriptor {
                uri: Some(damaged),
                ..ext.clone()
            };
            assert!(
                matches!(decode(&d), Err(OmniError::BlobIntegrity { reason }) if reason.contains("damaged ETag")),
                "{damaged}"
            );
        }
        let bad = [
            RawDescriptor {
                position: None,
                ..managed(INLINE, 0, 1)
            },
            managed(DEDICATED, 3, 1),
            managed(MANAGED_WITH_BASE, 0, 1),
            managed(9, 0, 1),
            managed(PACKED, u64::MAX, 2),
            RawDescriptor {
                uri: Some("relative/path"),
                ..ext.clone()
            },
            RawDescriptor {
                uri: Some("://x"),
                ..ext.clone()
            },
            RawDescriptor {
                uri: None,
                ..ext.clone()
            },
            RawDescriptor {
                blob_id: Some(2),
                ..ext.clone()
            },
            RawDescriptor {
                size: Some(0),
                ..ext.clone()
            },
        ];
        for d in &bad {
            let r = decode(d);
            assert!(
                matches!(r, Err(OmniError::BlobIntegrity { .. })),
                "{d:?}: {r:?}"
            );
        }
    }
}
