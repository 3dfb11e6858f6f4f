//! Export a snapshot as JSONL in the load format: nodes first (in catalog
//! order), then edges. Ids that a load would generate are written out, so the
//! file loads back into an identical graph; keyed ids are left to derivation.

use std::io::Write;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::DataType;
use base64::Engine;
use futures::TryStreamExt;
use serde_json::{Map, Value, json};

use crate::compiler::catalog::{DST, ID, PropType, SRC, TypeDef};
use crate::compiler::value::{self, has_json_form};
use crate::error::{OmniError, Result};
use crate::storage::scan;
use crate::storage::tables::{BlobInput, Table};
use crate::storage::{GraphStorage, Snapshot};
use crate::util::dates::{date_string, datetime_string};

/// Rows fetched per scan batch.
const BATCH_ROWS: u32 = 8192;

fn f64_json(v: f64) -> Value {
    serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number)
}

fn no_json_form(dt: &DataType) -> String {
    format!("a column of type {dt} has no JSON form")
}

/// One Arrow cell as the JSON a load accepts for it.
pub fn cell_json(a: &ArrayRef, i: usize) -> Result<Value> {
    match a.data_type() {
        DataType::Struct(fields) if !a.is_null(i) => {
            let s = a.as_struct();
            let mut obj = Map::new();
            for (f, c) in fields.iter().zip(s.columns()) {
                let v = cell_json(c, i)?;
                if !v.is_null() {
                    obj.insert(f.name().clone(), v);
                }
            }
            Ok(Value::Object(obj))
        }
        dt if has_json_form(dt) => Ok(value_json(&value::at(a, i))),
        other => Err(OmniError::Storage(no_json_form(other))),
    }
}

/// A value as the JSON a load accepts for it.
fn value_json(v: &value::Value) -> Value {
    use value::Value as V;
    match v {
        V::Null => Value::Null,
        V::Bool(b) => json!(b),
        V::Int(i) => json!(i),
        V::UInt(u) => json!(u),
        V::Float(f) => f64_json(*f),
        V::Str(s) => json!(s),
        V::Date(d) => json!(date_string(*d)),
        V::DateTime(ms) => json!(datetime_string(*ms)),
        V::Vector(xs) => Value::Array(xs.iter().map(|x| f64_json(*x as f64)).collect()),
        V::List(items) => Value::Array(items.iter().map(value_json).collect()),
        V::Bytes(b) => json!(format!(
            "base64:{}",
            base64::engine::general_purpose::STANDARD.encode(b)
        )),
        V::BlobUri(u) => json!(u),
    }
}

async fn export_type(
    g: &GraphStorage,
    snap: &Snapshot,
    t: &TypeDef,
    out: &mut (dyn Write + Send),
) -> Result<usize> {
    let ds = g.read_table(snap, t).await?;
    let blob_props: Vec<&str> = t
        .properties
        .iter()
        .filter(|p| p.ty == PropType::Blob)
        .map(|p| p.name.as_str())
        .collect();
    let mut columns: Vec<&str> = vec![ID];
    if t.is_edge() {
        columns.extend([SRC, DST]);
    }
    columns.extend(
        t.properties
            .iter()
            .filter(|p| p.ty != PropType::Blob)
            .map(|p| p.name.as_str()),
    );
    let mut stream = scan::stream(
        &ds,
        &columns,
        None,
        Some(BATCH_ROWS as usize),
        !blob_props.is_empty(),
    )
    .await?;
    let keyed = !t.key.is_empty();
    let mut lines = 0;
    while let Some(batch) = stream.try_next().await? {
        let blobs = read_blobs(&ds, &batch, &blob_props).await?;
        for i in 0..batch.num_rows() {
            let mut data = Map::new();
            if !keyed {
                data.insert(
                    ID.into(),
                    cell_json(batch.column_by_name(ID).expect("id"), i)?,
                );
            }
            for p in &t.properties {
                let v = match blobs.iter().find(|(name, _)| *name == p.name) {
                    Some((_, vals)) => vals[i].clone(),
                    None => cell_json(batch.column_by_name(&p.name).expect("projected"), i)?,
                };
                if !v.is_null() {
                    data.insert(p.name.clone(), v);
                }
            }
            let line = if t.is_edge() {
                json!({
                    "edge": t.name,
                    "from": cell_json(batch.column_by_name(SRC).expect("src"), i)?,
                    "to": cell_json(batch.column_by_name(DST).expect("dst"), i)?,
                    "data": data,
                })
            } else {
                json!({ "type": t.name, "data": data })
            };
            serde_json::to_writer(&mut *out, &line)?;
            out.write_all(b"\n")?;
            lines += 1;
        }
    }
    Ok(lines)
}

/// Blob values of a batch as `"base64:..."` strings, external references
/// as their URI (null where null).
async fn read_blobs<'p>(
    table: &Table,
    batch: &RecordBatch,
    props: &[&'p str],
) -> Result<Vec<(&'p str, Vec<Value>)>> {
    let mut out = Vec::new();
    for p in props {
        let vals = scan::blobs(table, batch, p)
            .await?
            .into_iter()
            .map(|b| match b {
                BlobInput::Null => Value::Null,
                BlobInput::Bytes(bytes) => value_json(&value::Value::Bytes(bytes)),
                BlobInput::Uri(uri) => value_json(&value::Value::BlobUri(uri.into())),
            })
            .collect();
        out.push((*p, vals));
    }
    Ok(out)
}

/// Every name is a type of `catalog` (else `BadRequest`, naming it).
pub fn check_types(catalog: &crate::compiler::catalog::Catalog, names: &[String]) -> Result<()> {
    match names.iter().find(|n| catalog.get(n).is_none()) {
        Some(unknown) => Err(OmniError::BadRequest(format!(
            "the schema has no type {unknown:?}; nothing was exported"
        ))),
        None => Ok(()),
    }
}

/// Export `snap`'s types (all of them, or only those `only` names, in
/// catalog order) to `out`; the number of lines.
pub async fn export(
    g: &GraphStorage,
    snap: &Snapshot,
    only: Option<&[String]>,
    out: &mut (dyn Write + Send),
) -> Result<usize> {
    // Every column is checked before the first line is written, so an
    // export either writes the whole graph or nothing.
    let catalog = snap.catalog();
    if let Some(names) = only {
        check_types(catalog, names)?;
    }
    let types: Vec<&TypeDef> = catalog
        .nodes()
        .chain(catalog.edges())
        .filter(|t| only.is_none_or(|names| names.contains(&t.name)))
        .collect();
    for t in &types {
        let ds = g.read_table(snap, t).await?;
        let schema = ds.schema();
        for f in schema.fields() {
            let blob = t.property(f.name()).is_some_and(|p| p.ty == PropType::Blob);
            if !blob && !has_json_form(f.data_type()) {
                return Err(OmniError::Storage(format!(
                    "{}.{}: {}; nothing was exported",
                    t.name,
                    f.name(),
                    no_json_form(f.data_type())
                )));
            }
        }
    }
    let mut lines = 0;
    for t in types {
        lines += export_type(g, snap, t, out).await?;
    }
    out.flush()?;
    Ok(lines)
}

/// Bytes gathered before [`LineChunks`] hands them on.
pub const CHUNK_BYTES: usize = 1 << 16;

/// A writer that hands an export on in chunks of whole lines (about
/// [`CHUNK_BYTES`] each) to `send`: how a streamed export (an HTTP body, a
/// Python iterator) takes its lines while the export runs.
pub struct LineChunks<F> {
    send: F,
    buf: Vec<u8>,
}

impl<F: FnMut(Vec<u8>) -> std::io::Result<()>> LineChunks<F> {
    pub fn new(send: F) -> Self {
        Self {
            send,
            buf: Vec::new(),
        }
    }

    /// Send the whole lines gathered so far.
    fn send_lines(&mut self) -> std::io::Result<()> {
        let Some(end) = self.buf.iter().rposition(|b| *b == b'\n') else {
            return Ok(());
        };
        let rest = self.buf.split_off(end + 1);
        (self.send)(std::mem::replace(&mut self.buf, rest))
    }
}

impl<F: FnMut(Vec<u8>) -> std::io::Result<()>> Write for LineChunks<F> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= CHUNK_BYTES {
            self.send_lines()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send_lines()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_column_without_a_json_form_is_an_error_not_a_string() {
        let a: ArrayRef = std::sync::Arc::new(arrow_array::BinaryArray::from(vec![&b"x"[..]]));
        assert!(!has_json_form(a.data_type()));
        match cell_json(&a, 0) {
            Err(OmniError::Storage(m)) => assert!(m.contains("Binary"), "{m}"),
            other => panic!("expected a storage error, got {other:?}"),
        }
        let ok: ArrayRef = std::sync::Arc::new(arrow_array::Int32Array::from(vec![7]));
        assert!(has_json_form(ok.data_type()));
        assert_eq!(cell_json(&ok, 0).unwrap(), json!(7));
    }
}
