//! Arrow tables as a load's input. Each row goes through the checks and
//! builders a line of a JSONL file goes through (`jsonl::ValueRows`), its
//! cells read straight from the columns (no text between), numbered as
//! lines that run on from one table to the next; an error the load reports
//! at such a line is told back as the table's row ([`Rows::restate`]).
//!
//! A table's columns are its type's properties (an edge's also `from` and
//! `to`; any type's `id`); a null cell is a property left out. Columns of
//! types a cell cannot be read from directly are cast first: narrow
//! integers widen, string views and dictionaries become strings,
//! timestamps become date-times; binary cells are blob bytes.

use std::sync::Arc;

use arrow::compute::cast;
use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch, RecordBatchReader};
use arrow_schema::{DataType, Field};
use parking_lot::Mutex;

use super::columns::TypeRules;
use super::jsonl::{self, Parsed};
use crate::compiler::catalog::{Catalog, TypeDef};
use crate::compiler::value::has_json_form;
use crate::compiler::value::{self, Value};
use crate::error::{Location, OmniError, Result};

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
        match e {
            OmniError::Invalid { mut at, message } => {
                if let Some((table, row)) = at.line.and_then(|l| self.of(l)) {
                    at.line = None;
                    at.row = Some(u32::try_from(row).unwrap_or(u32::MAX));
                    at.type_name.get_or_insert(table);
                    // Rules compare rows of one type, so of this table.
                    at.first = at
                        .first
                        .and_then(|l| self.of(l as usize))
                        .and_then(|(_, r)| u32::try_from(r).ok());
                }
                OmniError::Invalid { at, message }
            }
            other => other,
        }
    }
}

/// The rows of `tables`, checked by the rules a file's lines are checked
/// by, gathered per type; `rows` learns where each table starts.
/// `progress` hears the Arrow bytes read so far.
pub fn parse(
    catalog: &Catalog,
    tables: Vec<TableInput>,
    rows: &Rows,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Parsed> {
    // Every table's type and columns first, before a row is read.
    let mut checked = Vec::with_capacity(tables.len());
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
        check_columns(def, &t.batches.schema())?;
        checked.push(t);
    }
    // Blocks of at most BLOCK_ROWS rows, numbered as they are read; the
    // workers check them in parallel.
    // (A slice reports its whole batch's buffers, so bytes count per batch.)
    let next_line = std::cell::Cell::new(1usize);
    let bytes = std::cell::Cell::new(0u64);
    let blocks = checked.into_iter().flat_map(|t| {
        let TableInput { type_name, batches } = t;
        rows.spans.lock().push((next_line.get(), type_name.clone()));
        let bytes = &bytes;
        batches.flat_map(move |b| {
            let blocks: Vec<Result<(String, RecordBatch)>> = match b {
                Ok(b) => {
                    bytes.set(bytes.get() + b.get_array_memory_size() as u64);
                    progress(bytes.get());
                    (0..b.num_rows())
                        .step_by(BLOCK_ROWS)
                        .map(|at| {
                            Ok((
                                type_name.clone(),
                                b.slice(at, BLOCK_ROWS.min(b.num_rows() - at)),
                            ))
                        })
                        .collect()
                }
                Err(e) => vec![Err(e.into())],
            };
            blocks
        })
    });
    let numbered = blocks.map(|block| {
        let (type_name, batch) = block?;
        let first = next_line.get();
        next_line.set(first + batch.num_rows());
        Ok((type_name, batch, first))
    });
    let parsed = jsonl::parse_values(catalog, numbered, |out, (type_name, batch, first)| {
        let rules = out.rules(&type_name).expect("checked above");
        push_batch(out, rules, &batch, first).map(|_| ())
    })?;
    Ok(Parsed {
        bytes: bytes.get(),
        ..parsed
    })
}

/// Rows checked as one block by one worker.
const BLOCK_ROWS: usize = 65_536;

/// Where a column goes in a row.
#[derive(Clone, Copy)]
enum Slot {
    Prop(usize),
    Id,
    From,
    To,
}

fn slot_of(def: &TypeDef, name: &str) -> Option<Slot> {
    match name {
        "id" => Some(Slot::Id),
        "from" if def.is_edge() => Some(Slot::From),
        "to" if def.is_edge() => Some(Slot::To),
        p => def
            .properties
            .iter()
            .position(|d| d.name == p)
            .map(Slot::Prop),
    }
}

/// Every column names a property of the type (or its id, or an edge's
/// `from` / `to`) and has a type a cell can be read from.
fn check_columns(def: &TypeDef, schema: &arrow_schema::Schema) -> Result<()> {
    for f in schema.fields() {
        if slot_of(def, f.name()).is_none() {
            return Err(OmniError::invalid(
                column(&def.name, f),
                format!("{} has no property {:?}", def.name, f.name()),
            ));
        }
        if reading(f.data_type()).is_none() {
            return Err(OmniError::invalid(
                column(&def.name, f),
                format!("a column of type {} cannot be loaded", f.data_type()),
            ));
        }
    }
    Ok(())
}

/// One batch's rows, numbered from `line`; the number after the last.
fn push_batch<'c>(
    out: &mut jsonl::ValueRows<'c>,
    rules: &'c Arc<TypeRules>,
    batch: &RecordBatch,
    mut line: usize,
) -> Result<usize> {
    let def = &rules.def;
    let schema = batch.schema();
    let columns: Vec<(Slot, ArrayRef)> = schema
        .fields()
        .iter()
        .zip(batch.columns())
        .map(|(f, c)| {
            let slot = slot_of(def, f.name()).expect("checked before the rows");
            Ok((slot, json_ready(&def.name, f, c)?))
        })
        .collect::<Result<_>>()?;
    for i in 0..batch.num_rows() {
        let mut cells: Vec<Option<Value<'_>>> = vec![None; def.properties.len()];
        let (mut id, mut from, mut to) = (None, None, None);
        for (slot, c) in &columns {
            let v = cell(c, i);
            if matches!(v, Value::Null) {
                continue;
            }
            match slot {
                Slot::Prop(p) => cells[*p] = Some(v),
                Slot::Id => id = Some(v),
                Slot::From => from = Some(v),
                Slot::To => to = Some(v),
            }
        }
        let ends = def.is_edge().then_some((&from, &to));
        out.push(rules, cells, id.as_ref(), ends, line)?;
        line += 1;
    }
    Ok(line)
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

/// One cell as a value: binary cells as blob bytes.
fn cell(c: &ArrayRef, i: usize) -> Value<'_> {
    if c.is_null(i) {
        return Value::Null;
    }
    let bytes = match c.data_type() {
        DataType::Binary => c.as_binary::<i32>().value(i),
        DataType::LargeBinary => c.as_binary::<i64>().value(i),
        DataType::BinaryView => c.as_binary_view().value(i),
        DataType::FixedSizeBinary(_) => c.as_fixed_size_binary().value(i),
        _ => return value::at(c, i),
    };
    Value::Bytes(bytes.to_vec())
}
