//! Arrow tables as a load's input. Each row becomes one line of the JSONL
//! load format as the loader reads, so a load from tables is checked by
//! exactly the rules a file is (and never holds the whole input twice); an
//! error the loader reports at a line is told back as the table's row.
//!
//! A table's columns are its type's properties (an edge's also `from` and
//! `to`); a null cell is a property left out. Columns of types JSON has no
//! form for directly are cast first: narrow integers widen, string views
//! and dictionaries become strings, timestamps become date-times, binary
//! cells become `base64:` blobs.

use std::io::Read;
use std::sync::Arc;

use arrow::compute::cast;
use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch, RecordBatchReader};
use arrow_schema::{DataType, Field};
use base64::Engine;
use parking_lot::Mutex;
use serde_json::{Map, Value};

use crate::compiler::catalog::Catalog;
use crate::error::{Location, OmniError, Result};
use crate::exec::export::{cell_json, has_json_form};

/// One table to load: the type its rows are, and its batches.
pub struct TableInput {
    pub type_name: String,
    pub batches: Box<dyn RecordBatchReader + Send>,
}

/// Where each table's lines start: line numbers are 1-based and run on
/// from one table to the next.
#[derive(Clone, Debug, Default)]
pub struct Rows {
    spans: Arc<Mutex<Vec<(usize, String)>>>,
    /// Why reading the tables stopped (the loader sees only an I/O error).
    failed: Arc<Mutex<Option<OmniError>>>,
}

impl Rows {
    /// The table and 0-based row of a line.
    fn of(&self, line: usize) -> Option<(String, usize)> {
        let spans = self.spans.lock();
        spans
            .iter()
            .rev()
            .find(|(first, _)| *first <= line)
            .map(|(first, t)| (t.clone(), line - first))
    }

    /// `e` as the rows of the tables say it: a line becomes a row.
    pub fn restate(&self, e: OmniError) -> OmniError {
        let e = match (e, self.failed.lock().take()) {
            (OmniError::Io(_), Some(why)) => why,
            (e, _) => e,
        };
        match e {
            OmniError::Invalid { mut at, message } => {
                if let Some((table, row)) = at.line.and_then(|l| self.of(l)) {
                    at.line = None;
                    at.row = Some(u32::try_from(row).unwrap_or(u32::MAX));
                    at.type_name.get_or_insert(table);
                }
                OmniError::Invalid { at, message }
            }
            other => other,
        }
    }
}

/// The tables as JSONL text, made as it is read.
pub struct Lines {
    tables: std::vec::IntoIter<Table>,
    current: Option<Table>,
    rows: Rows,
    next_line: usize,
    buf: Vec<u8>,
    pos: usize,
}

struct Table {
    type_name: String,
    edge: bool,
    batches: Box<dyn RecordBatchReader + Send>,
}

/// Rows turned into text per read: enough to keep the loader's blocks full.
const ROWS_PER_FILL: usize = 4096;

impl Lines {
    /// Every table's type must be one of `catalog`'s; nothing is read yet.
    pub fn new(catalog: &Catalog, tables: Vec<TableInput>) -> Result<Self> {
        let mut out = Vec::with_capacity(tables.len());
        for t in tables {
            let def = catalog.get(&t.type_name).ok_or_else(|| {
                OmniError::invalid(
                    Location {
                        type_name: Some(t.type_name.clone()),
                        ..Default::default()
                    },
                    format!("the schema has no type {:?}", t.type_name),
                )
            })?;
            check_columns(&t.type_name, &t.batches.schema())?;
            out.push(Table {
                edge: def.is_edge(),
                type_name: t.type_name,
                batches: t.batches,
            });
        }
        Ok(Self {
            tables: out.into_iter(),
            current: None,
            rows: Rows::default(),
            next_line: 1,
            buf: Vec::new(),
            pos: 0,
        })
    }

    /// Where each table's rows are, for [`Rows::restate`].
    pub fn rows(&self) -> Rows {
        self.rows.clone()
    }

    /// Turn the next batch into text; false at the end of every table.
    fn fill(&mut self) -> Result<bool> {
        self.buf.clear();
        self.pos = 0;
        loop {
            if self.current.is_none() {
                match self.tables.next() {
                    Some(t) => {
                        self.rows
                            .spans
                            .lock()
                            .push((self.next_line, t.type_name.clone()));
                        self.current = Some(t);
                    }
                    None => return Ok(false),
                }
            }
            let t = self.current.as_mut().expect("a table");
            match t.batches.next() {
                Some(batch) => {
                    let batch = batch?;
                    let (type_name, edge) = (t.type_name.clone(), t.edge);
                    for start in (0..batch.num_rows()).step_by(ROWS_PER_FILL) {
                        let part = batch.slice(start, ROWS_PER_FILL.min(batch.num_rows() - start));
                        self.write_rows(&type_name, edge, &part)?;
                    }
                    if !self.buf.is_empty() {
                        return Ok(true);
                    }
                }
                None => self.current = None,
            }
        }
    }

    fn write_rows(&mut self, type_name: &str, edge: bool, batch: &RecordBatch) -> Result<()> {
        let schema = batch.schema();
        let columns: Vec<(&Field, ArrayRef)> = schema
            .fields()
            .iter()
            .zip(batch.columns())
            .map(|(f, c)| Ok((f.as_ref(), json_ready(type_name, f, c)?)))
            .collect::<Result<_>>()?;
        for i in 0..batch.num_rows() {
            let mut data = Map::new();
            let mut line = Map::new();
            for (f, c) in &columns {
                let v = cell(c, i)?;
                if v.is_null() {
                    continue;
                }
                match f.name().as_str() {
                    "from" | "to" if edge => line.insert(f.name().clone(), v),
                    _ => data.insert(f.name().clone(), v),
                };
            }
            let kind = if edge { "edge" } else { "type" };
            line.insert(kind.into(), Value::String(type_name.to_string()));
            line.insert("data".into(), Value::Object(data));
            serde_json::to_writer(&mut self.buf, &line)?;
            self.buf.push(b'\n');
            self.next_line += 1;
        }
        Ok(())
    }
}

/// How a column of `dt` is read: as it is (`Some(None)`), cast to a type
/// [`cell`] reads (`Some(Some(to))`), or not at all (`None`).
fn reading(dt: &DataType) -> Option<Option<DataType>> {
    let to = match dt {
        dt if is_binary(dt) || has_json_form(dt) => return Some(None),
        DataType::Int8 | DataType::Int16 | DataType::UInt8 | DataType::UInt16 => DataType::Int64,
        DataType::Float16 => DataType::Float32,
        DataType::Utf8View => DataType::Utf8,
        DataType::Dictionary(_, v) if is_text(v) => DataType::Utf8,
        DataType::Timestamp(_, _) => DataType::Date64,
        DataType::LargeList(item) | DataType::ListView(item) | DataType::LargeListView(item)
            if reading(item.data_type()) == Some(None) =>
        {
            DataType::List(item.clone())
        }
        _ => return None,
    };
    Some(Some(to))
}

/// Every column of `schema` can be read, or the error naming the first
/// that cannot.
fn check_columns(type_name: &str, schema: &arrow_schema::Schema) -> Result<()> {
    for f in schema.fields() {
        if reading(f.data_type()).is_none() {
            return Err(OmniError::invalid(
                column(type_name, f),
                format!("a column of type {} cannot be loaded", f.data_type()),
            ));
        }
    }
    Ok(())
}

fn column(type_name: &str, f: &Field) -> Location {
    Location {
        type_name: Some(type_name.into()),
        property: Some(f.name().clone()),
        ..Default::default()
    }
}

/// A column in a type [`cell`] reads.
fn json_ready(type_name: &str, f: &Field, c: &ArrayRef) -> Result<ArrayRef> {
    match reading(c.data_type()) {
        Some(None) => Ok(c.clone()),
        Some(Some(to)) => cast(c, &to).map_err(|e| {
            OmniError::invalid(
                column(type_name, f),
                format!("cannot read a column of {}: {e}", c.data_type()),
            )
        }),
        None => Err(OmniError::invalid(
            column(type_name, f),
            format!("a column of type {} cannot be loaded", c.data_type()),
        )),
    }
}

fn is_text(dt: &DataType) -> bool {
    matches!(
        dt,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    )
}

fn is_binary(dt: &DataType) -> bool {
    matches!(
        dt,
        DataType::Binary
            | DataType::LargeBinary
            | DataType::BinaryView
            | DataType::FixedSizeBinary(_)
    )
}

/// One cell as the load format's JSON: binary cells as `base64:` blobs.
fn cell(c: &ArrayRef, i: usize) -> Result<Value> {
    if c.is_null(i) {
        return Ok(Value::Null);
    }
    let bytes = match c.data_type() {
        DataType::Binary => c.as_binary::<i32>().value(i),
        DataType::LargeBinary => c.as_binary::<i64>().value(i),
        DataType::BinaryView => c.as_binary_view().value(i),
        DataType::FixedSizeBinary(_) => c.as_fixed_size_binary().value(i),
        _ => return cell_json(c, i),
    };
    let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
    Ok(Value::String(format!("base64:{b64}")))
}

impl Read for Lines {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.pos == self.buf.len() {
            match self.fill() {
                Ok(true) => {}
                Ok(false) => return Ok(0),
                Err(e) => {
                    let said = std::io::Error::other(e.to_string());
                    *self.rows.failed.lock() = Some(e);
                    return Err(said);
                }
            }
        }
        let n = out.len().min(self.buf.len() - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}
