//! Rows -> one type's Arrow columns, with every value checked against the
//! schema on the way in: type, nullability, enum, `@range`, `@check`, vector
//! dimension and finiteness, blob encoding. A row is validated completely
//! before any column is touched, so a rejected row leaves the builder as it was.

use crate::util::dates::{days_from_date, ms_from_datetime};
use std::borrow::Cow;
use std::sync::Arc;

use arrow_array::builder::*;
use arrow_array::{ArrayRef, FixedSizeListArray, Float32Array, RecordBatch, new_null_array};
use arrow_schema::{DataType, Field, SchemaRef};
use base64::Engine;

use super::cell::Cell;
use crate::compiler::catalog::{Num, PropDef, PropType, TypeDef};
use crate::error::{Location, OmniError, Result};

/// Row `i` of a committed column of type `ty`, as the value validation gave
/// it when it was written (the way back from [`TableBuilder`]).
pub fn val_at(a: &ArrayRef, i: usize, ty: &PropType) -> Result<Val<'static>> {
    use arrow_array::Array;
    use arrow_array::cast::AsArray;
    use arrow_array::types::*;
    if a.is_null(i) {
        return Ok(Val::Null);
    }
    let mismatch = || {
        OmniError::Storage(format!(
            "a {} column holds {} values",
            ty.describe(),
            a.data_type()
        ))
    };
    Ok(match (ty, a.data_type()) {
        (PropType::String | PropType::Enum(_), DataType::Utf8) => {
            Val::Str(Cow::Owned(a.as_string::<i32>().value(i).to_string()))
        }
        (PropType::Bool, DataType::Boolean) => Val::Bool(a.as_boolean().value(i)),
        (PropType::I32, DataType::Int32) => Val::Int(a.as_primitive::<Int32Type>().value(i) as i64),
        (PropType::I64, DataType::Int64) => Val::Int(a.as_primitive::<Int64Type>().value(i)),
        (PropType::U32, DataType::UInt32) => {
            Val::Int(a.as_primitive::<UInt32Type>().value(i) as i64)
        }
        (PropType::U64, DataType::UInt64) => Val::UInt(a.as_primitive::<UInt64Type>().value(i)),
        (PropType::F32, DataType::Float32) => {
            Val::Float(a.as_primitive::<Float32Type>().value(i) as f64)
        }
        (PropType::F64, DataType::Float64) => Val::Float(a.as_primitive::<Float64Type>().value(i)),
        (PropType::Date, DataType::Date32) => Val::Date(a.as_primitive::<Date32Type>().value(i)),
        (PropType::DateTime, DataType::Date64) => {
            Val::DateTime(a.as_primitive::<Date64Type>().value(i))
        }
        (PropType::Vector(_), DataType::FixedSizeList(_, _)) => {
            let v = a.as_fixed_size_list().value(i);
            Val::Vector(v.as_primitive::<Float32Type>().values().to_vec())
        }
        (PropType::List(inner), DataType::List(_)) => {
            let v = a.as_list::<i32>().value(i);
            Val::List(
                (0..v.len())
                    .map(|j| val_at(&v, j, inner))
                    .collect::<Result<_>>()?,
            )
        }
        _ => return Err(mismatch()),
    })
}

/// A row's `@unique` key over some of its values, or `None` when one of
/// them is null: nulls never collide. Loads and mutations compare with it.
pub fn unique_key<'v, 'a: 'v>(vals: impl IntoIterator<Item = &'v Val<'a>>) -> Option<String> {
    let mut parts = Vec::new();
    for v in vals {
        if *v == Val::Null {
            return None;
        }
        parts.push(format!("{v:?}"));
    }
    Some(parts.join("\u{1}"))
}

/// A validated value, ready for its column.
#[derive(Clone, Debug, PartialEq)]
pub enum Val<'a> {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(Cow<'a, str>),
    Date(i32),
    DateTime(i64),
    Vector(Vec<f32>),
    List(Vec<Val<'a>>),
    Bytes(Vec<u8>),
}

impl Val<'_> {
    /// The same value, owning its strings.
    pub fn into_owned(self) -> Val<'static> {
        match self {
            Val::Str(s) => Val::Str(Cow::Owned(s.into_owned())),
            Val::List(items) => Val::List(items.into_iter().map(Val::into_owned).collect()),
            Val::Null => Val::Null,
            Val::Bool(b) => Val::Bool(b),
            Val::Int(i) => Val::Int(i),
            Val::UInt(u) => Val::UInt(u),
            Val::Float(f) => Val::Float(f),
            Val::Date(d) => Val::Date(d),
            Val::DateTime(d) => Val::DateTime(d),
            Val::Vector(v) => Val::Vector(v),
            Val::Bytes(b) => Val::Bytes(b),
        }
    }
}

/// The checks of one property, compiled once per load.
pub struct PropRule {
    pub def: PropDef,
    range: Option<(Option<Num>, Option<Num>)>,
    check: Option<regex::Regex>,
}

/// The checks of one type.
pub struct TypeRules {
    pub def: Arc<TypeDef>,
    pub props: Vec<PropRule>,
    /// Positions in `props` of the `@key` properties, in key order.
    pub key: Vec<usize>,
}

impl TypeRules {
    pub fn new(def: &TypeDef) -> Result<Self> {
        let mut props = Vec::new();
        for p in &def.properties {
            let range = def
                .ranges
                .iter()
                .find(|r| r.property == p.name)
                .map(|r| (r.min, r.max));
            let check = match def.checks.iter().find(|c| c.property == p.name) {
                Some(c) => Some(regex::Regex::new(&c.pattern).map_err(|e| {
                    OmniError::schema(format!("@check pattern of {}.{}: {e}", def.name, p.name))
                })?),
                None => None,
            };
            props.push(PropRule {
                def: p.clone(),
                range,
                check,
            });
        }
        let key = def
            .key
            .iter()
            .filter_map(|k| props.iter().position(|p| p.def.name == *k))
            .collect();
        Ok(Self {
            def: Arc::new(def.clone()),
            props,
            key,
        })
    }

    pub fn prop_index(&self, name: &str) -> Option<usize> {
        self.props.iter().position(|p| p.def.name == name)
    }
}

fn int_of(c: &Cell) -> Option<i128> {
    match c {
        Cell::Int(i) => Some(*i as i128),
        Cell::UInt(u) => Some(*u as i128),
        _ => None,
    }
}

fn in_range(r: &(Option<Num>, Option<Num>), v: f64, iv: Option<i128>) -> bool {
    let below = |b: &Num| match (b, iv) {
        (Num::Int(b), Some(i)) => i < *b as i128,
        _ => v < b.as_f64(),
    };
    let above = |b: &Num| match (b, iv) {
        (Num::Int(b), Some(i)) => i > *b as i128,
        _ => v > b.as_f64(),
    };
    !(r.0.as_ref().is_some_and(below) || r.1.as_ref().is_some_and(above))
}

/// Check and convert one cell for a property of type `ty`. Returns the reason
/// on failure (the caller adds where).
// One arm per (property type, input cell) pair: the whole conversion
// table of the JSONL format.
fn convert<'a>(ty: &PropType, cell: Cell<'a>) -> std::result::Result<Val<'a>, String> {
    let wrong = |want: &str, c: &Cell| format!("expected {want}, got {}", c.kind());
    Ok(match (ty, cell) {
        (_, Cell::Null) => Val::Null,
        (PropType::String, Cell::Str(s)) => Val::Str(s),
        (PropType::Enum(vals), Cell::Str(s)) => {
            if !vals.iter().any(|v| v == s.as_ref()) {
                return Err(format!("not one of the enum values ({})", vals.join(", ")));
            }
            Val::Str(s)
        }
        (PropType::Bool, Cell::Bool(b)) => Val::Bool(b),
        (PropType::I32 | PropType::I64 | PropType::U32 | PropType::U64, c) => {
            let Some(i) = int_of(&c) else {
                return Err(wrong("an integer", &c));
            };
            let (lo, hi): (i128, i128) = match ty {
                PropType::I32 => (i32::MIN as i128, i32::MAX as i128),
                PropType::I64 => (i64::MIN as i128, i64::MAX as i128),
                PropType::U32 => (0, u32::MAX as i128),
                _ => (0, u64::MAX as i128),
            };
            if i < lo || i > hi {
                return Err(format!("out of range for {}", ty.describe()));
            }
            match ty {
                PropType::U64 => Val::UInt(i as u64),
                _ => Val::Int(i as i64),
            }
        }
        (PropType::F32 | PropType::F64, c) => {
            let f = match &c {
                Cell::Float(f) => *f,
                Cell::Int(i) => *i as f64,
                Cell::UInt(u) => *u as f64,
                _ => return Err(wrong("a number", &c)),
            };
            if !f.is_finite() {
                return Err("not a finite number".into());
            }
            Val::Float(f)
        }
        (PropType::Date, Cell::Str(s)) => Val::Date(
            days_from_date(&s).ok_or_else(|| "expected a date like \"2024-05-01\"".to_string())?,
        ),
        (PropType::Date, c) => match int_of(&c).and_then(|i| i32::try_from(i).ok()) {
            Some(d) => Val::Date(d),
            None => return Err(wrong("a date string or days since 1970-01-01", &c)),
        },
        (PropType::DateTime, Cell::Str(s)) => {
            Val::DateTime(ms_from_datetime(&s).ok_or_else(|| {
                "expected an RFC 3339 date-time like \"2024-05-01T12:00:00Z\"".to_string()
            })?)
        }
        (PropType::DateTime, c) => match int_of(&c).and_then(|i| i64::try_from(i).ok()) {
            Some(ms) => Val::DateTime(ms),
            None => {
                return Err(wrong(
                    "an RFC 3339 string or milliseconds since the epoch",
                    &c,
                ));
            }
        },
        (PropType::Vector(n), Cell::List(items)) => {
            if items.len() != *n as usize {
                return Err(format!("expected {n} values, got {}", items.len()));
            }
            let mut out = Vec::with_capacity(items.len());
            for (i, c) in items.iter().enumerate() {
                let f = match c {
                    Cell::Float(f) => *f,
                    Cell::Int(v) => *v as f64,
                    Cell::UInt(v) => *v as f64,
                    other => return Err(format!("element {i} is {}, not a number", other.kind())),
                };
                let f32v = f as f32;
                if !f32v.is_finite() {
                    return Err(format!("element {i} is not a finite 32-bit float"));
                }
                out.push(f32v);
            }
            Val::Vector(out)
        }
        (PropType::List(inner), Cell::List(items)) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, c) in items.into_iter().enumerate() {
                if matches!(c, Cell::Null) {
                    return Err(format!("element {i} is null"));
                }
                out.push(convert(inner, c).map_err(|e| format!("element {i}: {e}"))?);
            }
            Val::List(out)
        }
        (PropType::Blob, Cell::Str(s)) => match s.strip_prefix("base64:") {
            Some(payload) => Val::Bytes(
                base64::engine::general_purpose::STANDARD
                    .decode(payload.trim())
                    .map_err(|e| format!("invalid base64 payload: {e}"))?,
            ),
            None => {
                return Err(
                    "external blob URIs are not allowed by this graph's blob policy \
                     (use \"base64:<payload>\" for managed bytes)"
                        .into(),
                );
            }
        },
        (ty, c) => return Err(wrong(&ty.describe(), &c)),
    })
}

impl PropRule {
    /// Validate one (possibly absent) value of this property.
    pub fn validate<'a>(
        &self,
        cell: Option<Cell<'a>>,
    ) -> std::result::Result<Val<'a>, (String, Option<String>)> {
        let cell = match cell {
            None | Some(Cell::Null) if !self.def.nullable => {
                let shown = cell.as_ref().map(|c| c.show());
                return Err(("required property is missing".into(), shown));
            }
            None => return Ok(Val::Null),
            Some(c) => c,
        };
        // Spelling the value out costs more than checking it, so keep what
        // is needed to spell it and do that only on failure (a string cell
        // borrows the input; a list is spelt now rather than copied).
        let kept = match &cell {
            Cell::List(_) => Err(cell.show()),
            c => Ok(c.clone()),
        };
        let shown = || match &kept {
            Ok(c) => c.show(),
            Err(s) => s.clone(),
        };
        let v = convert(&self.def.ty, cell).map_err(|e| (e, Some(shown())))?;
        if let Some(r) = &self.range {
            let (f, iv) = match &v {
                Val::Int(i) => (*i as f64, Some(*i as i128)),
                Val::UInt(u) => (*u as f64, Some(*u as i128)),
                Val::Float(f) => (*f, None),
                _ => (0.0, None),
            };
            if !matches!(v, Val::Null) && !in_range(r, f, iv) {
                let show = |n: Option<Num>| n.map(|n| n.to_string()).unwrap_or_default();
                return Err((
                    format!("violates @range({}..{})", show(r.0), show(r.1)),
                    Some(shown()),
                ));
            }
        }
        if let (Some(re), Val::Str(s)) = (&self.check, &v)
            && !re.is_match(s)
        {
            return Err((
                format!("violates @check(\"{}\")", re.as_str()),
                Some(shown()),
            ));
        }
        Ok(v)
    }
}

enum Col {
    Str(StringBuilder),
    Bool(BooleanBuilder),
    I32(Int32Builder),
    I64(Int64Builder),
    U32(UInt32Builder),
    U64(UInt64Builder),
    F32(Float32Builder),
    F64(Float64Builder),
    Date(Date32Builder),
    DateTime(Date64Builder),
    Vector {
        dim: usize,
        values: Vec<f32>,
        valid: Vec<bool>,
    },
    List(Vec<Option<Vec<Val<'static>>>>),
    Blob(Vec<Option<Vec<u8>>>),
}

impl Col {
    fn new(ty: &PropType, cap: usize) -> Self {
        match ty {
            PropType::String | PropType::Enum(_) => {
                Col::Str(StringBuilder::with_capacity(cap, cap * 8))
            }
            PropType::Bool => Col::Bool(BooleanBuilder::with_capacity(cap)),
            PropType::I32 => Col::I32(Int32Builder::with_capacity(cap)),
            PropType::I64 => Col::I64(Int64Builder::with_capacity(cap)),
            PropType::U32 => Col::U32(UInt32Builder::with_capacity(cap)),
            PropType::U64 => Col::U64(UInt64Builder::with_capacity(cap)),
            PropType::F32 => Col::F32(Float32Builder::with_capacity(cap)),
            PropType::F64 => Col::F64(Float64Builder::with_capacity(cap)),
            PropType::Date => Col::Date(Date32Builder::with_capacity(cap)),
            PropType::DateTime => Col::DateTime(Date64Builder::with_capacity(cap)),
            PropType::Vector(n) => Col::Vector {
                dim: *n as usize,
                values: Vec::with_capacity(cap * *n as usize),
                valid: Vec::with_capacity(cap),
            },
            PropType::List(_) => Col::List(Vec::with_capacity(cap)),
            PropType::Blob => Col::Blob(Vec::with_capacity(cap)),
        }
    }

    /// Append a value already validated for this column's type.
    fn push(&mut self, v: Val<'_>) {
        match (self, v) {
            (Col::Str(b), Val::Str(s)) => b.append_value(s),
            (Col::Str(b), _) => b.append_null(),
            (Col::Bool(b), Val::Bool(x)) => b.append_value(x),
            (Col::Bool(b), _) => b.append_null(),
            (Col::I32(b), Val::Int(x)) => b.append_value(x as i32),
            (Col::I32(b), _) => b.append_null(),
            (Col::I64(b), Val::Int(x)) => b.append_value(x),
            (Col::I64(b), _) => b.append_null(),
            (Col::U32(b), Val::Int(x)) => b.append_value(x as u32),
            (Col::U32(b), _) => b.append_null(),
            (Col::U64(b), Val::UInt(x)) => b.append_value(x),
            (Col::U64(b), Val::Int(x)) => b.append_value(x as u64),
            (Col::U64(b), _) => b.append_null(),
            (Col::F32(b), Val::Float(x)) => b.append_value(x as f32),
            (Col::F32(b), _) => b.append_null(),
            (Col::F64(b), Val::Float(x)) => b.append_value(x),
            (Col::F64(b), _) => b.append_null(),
            (Col::Date(b), Val::Date(x)) => b.append_value(x),
            (Col::Date(b), _) => b.append_null(),
            (Col::DateTime(b), Val::DateTime(x)) => b.append_value(x),
            (Col::DateTime(b), _) => b.append_null(),
            (Col::Vector { dim, values, valid }, v) => match v {
                Val::Vector(xs) => {
                    values.extend_from_slice(&xs);
                    valid.push(true);
                }
                _ => {
                    values.extend(std::iter::repeat_n(0.0, *dim));
                    valid.push(false);
                }
            },
            (Col::List(rows), Val::List(items)) => {
                rows.push(Some(items.into_iter().map(Val::into_owned).collect()))
            }
            (Col::List(rows), _) => rows.push(None),
            (Col::Blob(rows), Val::Bytes(b)) => rows.push(Some(b)),
            (Col::Blob(rows), _) => rows.push(None),
        }
    }

    fn finish(self, field: &Field) -> Result<ArrayRef> {
        Ok(match self {
            Col::Str(mut b) => Arc::new(b.finish()),
            Col::Bool(mut b) => Arc::new(b.finish()),
            Col::I32(mut b) => Arc::new(b.finish()),
            Col::I64(mut b) => Arc::new(b.finish()),
            Col::U32(mut b) => Arc::new(b.finish()),
            Col::U64(mut b) => Arc::new(b.finish()),
            Col::F32(mut b) => Arc::new(b.finish()),
            Col::F64(mut b) => Arc::new(b.finish()),
            Col::Date(mut b) => Arc::new(b.finish()),
            Col::DateTime(mut b) => Arc::new(b.finish()),
            Col::Vector { dim, values, valid } => {
                let DataType::FixedSizeList(item, _) = field.data_type() else {
                    return Err(OmniError::Storage(
                        "vector column without a list type".into(),
                    ));
                };
                let nulls = valid.iter().any(|v| !v).then(|| valid.into());
                Arc::new(FixedSizeListArray::try_new(
                    item.clone(),
                    dim as i32,
                    Arc::new(Float32Array::from(values)),
                    nulls,
                )?)
            }
            Col::List(rows) => list_array(field, rows)?,
            Col::Blob(rows) => crate::storage::tables::blob_array(rows)?,
        })
    }
}

/// A list column from validated rows. Lists are rare in bulk data, so they are
/// built once at the end through scalar builders.
fn list_array(field: &Field, rows: Vec<Option<Vec<Val<'static>>>>) -> Result<ArrayRef> {
    let DataType::List(item) = field.data_type() else {
        return Err(OmniError::Storage("list column without a list type".into()));
    };
    let inner_ty = match item.data_type() {
        DataType::Utf8 => PropType::String,
        DataType::Boolean => PropType::Bool,
        DataType::Int32 => PropType::I32,
        DataType::Int64 => PropType::I64,
        DataType::UInt32 => PropType::U32,
        DataType::UInt64 => PropType::U64,
        DataType::Float32 => PropType::F32,
        DataType::Float64 => PropType::F64,
        DataType::Date32 => PropType::Date,
        DataType::Date64 => PropType::DateTime,
        other => return Err(OmniError::Storage(format!("unsupported list item {other}"))),
    };
    let total: usize = rows.iter().flatten().map(|r| r.len()).sum();
    let mut inner = Col::new(&inner_ty, total);
    let mut offsets = Vec::with_capacity(rows.len() + 1);
    let mut valid = Vec::with_capacity(rows.len());
    offsets.push(0i32);
    let mut n = 0i32;
    for r in rows {
        match r {
            Some(items) => {
                n += items.len() as i32;
                for v in items {
                    inner.push(v);
                }
                valid.push(true);
            }
            None => valid.push(false),
        }
        offsets.push(n);
    }
    let values = inner.finish(item)?;
    let nulls = valid.iter().any(|v| !v).then(|| valid.into());
    Ok(Arc::new(arrow_array::ListArray::try_new(
        item.clone(),
        arrow_buffer::OffsetBuffer::new(offsets.into()),
        values,
        nulls,
    )?))
}

/// Builds one type's rows into a record batch.
pub struct TableBuilder {
    pub rules: Arc<TypeRules>,
    schema: SchemaRef,
    id: StringBuilder,
    src: StringBuilder,
    dst: StringBuilder,
    cols: Vec<Col>,
    /// Input line of each row (0 when the row did not come from a file).
    pub lines: Vec<u32>,
    /// Rows whose id was supplied or derived from a key (not generated).
    pub explicit_ids: usize,
}

impl TableBuilder {
    pub fn new(rules: Arc<TypeRules>, cap: usize) -> Self {
        let schema = crate::storage::tables::table_schema(&rules.def);
        let cols = rules
            .props
            .iter()
            .map(|p| Col::new(&p.def.ty, cap))
            .collect();
        Self {
            rules,
            schema,
            id: StringBuilder::with_capacity(cap, cap * 16),
            src: StringBuilder::with_capacity(0, 0),
            dst: StringBuilder::with_capacity(0, 0),
            cols,
            lines: Vec::with_capacity(cap),
            explicit_ids: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.lines.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// Validate `cells` (one per property, in property order; `None` = absent)
    /// and return the converted values, or an error naming line, type,
    /// property and value.
    pub fn validate<'a>(
        &self,
        cells: Vec<Option<Cell<'a>>>,
        line: Option<usize>,
    ) -> Result<Vec<Val<'a>>> {
        let mut vals = Vec::with_capacity(cells.len());
        for (rule, cell) in self.rules.props.iter().zip(cells) {
            match rule.validate(cell) {
                Ok(v) => vals.push(v),
                Err((message, value)) => {
                    return Err(OmniError::invalid(
                        Location {
                            line,
                            type_name: Some(self.rules.def.name.clone()),
                            property: Some(rule.def.name.clone()),
                            value,
                        },
                        message,
                    ));
                }
            }
        }
        Ok(vals)
    }

    /// Append a validated row.
    pub fn push(
        &mut self,
        id: &str,
        endpoints: Option<(&str, &str)>,
        vals: Vec<Val<'_>>,
        line: usize,
        explicit_id: bool,
    ) {
        self.id.append_value(id);
        if let Some((s, d)) = endpoints {
            self.src.append_value(s);
            self.dst.append_value(d);
        }
        for (col, v) in self.cols.iter_mut().zip(vals) {
            col.push(v);
        }
        self.lines.push(u32::try_from(line).unwrap_or(u32::MAX));
        if explicit_id {
            self.explicit_ids += 1;
        }
    }

    pub fn finish(mut self) -> Result<(RecordBatch, Vec<u32>)> {
        let mut arrays: Vec<ArrayRef> = vec![Arc::new(self.id.finish())];
        if self.rules.def.is_edge() {
            arrays.push(Arc::new(self.src.finish()));
            arrays.push(Arc::new(self.dst.finish()));
        }
        let offset = arrays.len();
        for (i, col) in self.cols.into_iter().enumerate() {
            arrays.push(col.finish(self.schema.field(offset + i))?);
        }
        let batch = RecordBatch::try_new(self.schema.clone(), arrays)?;
        Ok((batch, self.lines))
    }
}

/// An all-null column of the right type (for properties a batch lacks).
pub fn null_column(field: &Field, len: usize) -> ArrayRef {
    new_null_array(field.data_type(), len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compiler::schema::compile;

    fn rules(src: &str, ty: &str) -> Arc<TypeRules> {
        let c = compile(src).unwrap();
        Arc::new(TypeRules::new(c.get(ty).unwrap()).unwrap())
    }

    #[test]
    fn committed_cells_read_back_as_the_values_written() {
        let r = rules(
            "node P { s: String\n i: I32?\n u: U64?\n f: F32?\n d: Date?\n t: DateTime?\n v: Vector(2)?\n l: [I64]?\n b: Bool? }",
            "P",
        );
        let vals = vec![
            Val::Str("x".into()),
            Val::Int(-3),
            Val::UInt(u64::MAX),
            Val::Float(0.5),
            Val::Date(19000),
            Val::DateTime(1_700_000_000_123),
            Val::Vector(vec![1.0, 2.5]),
            Val::List(vec![Val::Int(4), Val::Int(5)]),
            Val::Bool(true),
        ];
        let mut b = TableBuilder::new(r.clone(), 1);
        b.push("p1", None, vals.clone(), 0, true);
        let mut nulls = vec![Val::Str("y".into())];
        nulls.extend(std::iter::repeat_n(Val::Null, 8));
        b.push("p2", None, nulls.clone(), 0, true);
        let (batch, _) = b.finish().unwrap();
        for (row, want) in [vals, nulls].iter().enumerate() {
            let got: Vec<Val> = r
                .props
                .iter()
                .zip(want)
                .map(|(p, _)| {
                    val_at(batch.column_by_name(&p.def.name).unwrap(), row, &p.def.ty).unwrap()
                })
                .collect();
            assert_eq!(&got, want);
        }
    }

    #[test]
    fn values_are_checked_against_the_schema() {
        let r = rules(
            "node P { name: String\n age: I32?\n s: enum(a, b)\n v: Vector(2)?\n e: String?\n @range(age, 0..150)\n @check(e, \"^[a-z]+@x$\") }",
            "P",
        );
        let b = TableBuilder::new(r.clone(), 4);
        let cells = |name: Cell<'static>,
                     age: Cell<'static>,
                     s: Cell<'static>,
                     v: Cell<'static>,
                     e: Cell<'static>| {
            vec![Some(name), Some(age), Some(s), Some(v), Some(e)]
        };
        let ok = b
            .validate(
                cells(
                    Cell::Str("x".into()),
                    Cell::Int(3),
                    Cell::Str("a".into()),
                    Cell::List(vec![Cell::Int(1), Cell::Float(0.5)]),
                    Cell::Str("ab@x".into()),
                ),
                Some(1),
            )
            .unwrap();
        assert_eq!(ok[1], Val::Int(3));
        let bad = |cs, prop: &str| match b.validate(cs, Some(7)) {
            Err(OmniError::Invalid { at, .. }) => {
                assert_eq!(at.line, Some(7));
                assert_eq!(at.property.as_deref(), Some(prop));
            }
            other => panic!("{other:?}"),
        };
        bad(
            cells(
                Cell::Str("x".into()),
                Cell::Int(200),
                Cell::Str("a".into()),
                Cell::Null,
                Cell::Null,
            ),
            "age",
        );
        bad(
            cells(
                Cell::Str("x".into()),
                Cell::Str("3".into()),
                Cell::Str("a".into()),
                Cell::Null,
                Cell::Null,
            ),
            "age",
        );
        bad(
            cells(
                Cell::Str("x".into()),
                Cell::Null,
                Cell::Str("c".into()),
                Cell::Null,
                Cell::Null,
            ),
            "s",
        );
        bad(
            cells(
                Cell::Str("x".into()),
                Cell::Null,
                Cell::Str("a".into()),
                Cell::List(vec![Cell::Int(1)]),
                Cell::Null,
            ),
            "v",
        );
        bad(
            cells(
                Cell::Str("x".into()),
                Cell::Null,
                Cell::Str("a".into()),
                Cell::List(vec![Cell::Float(1e300), Cell::Int(1)]),
                Cell::Null,
            ),
            "v",
        );
        bad(
            cells(
                Cell::Str("x".into()),
                Cell::Null,
                Cell::Str("a".into()),
                Cell::Null,
                Cell::Str("AB".into()),
            ),
            "e",
        );
        bad(
            vec![None, None, Some(Cell::Str("a".into())), None, None],
            "name",
        );
        bad(
            cells(
                Cell::Null,
                Cell::Null,
                Cell::Str("a".into()),
                Cell::Null,
                Cell::Null,
            ),
            "name",
        );
    }

    #[test]
    fn rows_build_a_batch_with_the_table_schema() {
        let r = rules(
            "node P { tags: [String]?\n d: Date?\n t: DateTime?\n b: Blob?\n u: U64? }",
            "P",
        );
        let mut b = TableBuilder::new(r, 2);
        let vals = b
            .validate(
                vec![
                    Some(Cell::List(vec![Cell::Str("a".into())])),
                    Some(Cell::Str("1970-01-02".into())),
                    Some(Cell::Str("1970-01-01T00:00:01Z".into())),
                    Some(Cell::Str("base64:aGk=".into())),
                    Some(Cell::UInt(u64::MAX)),
                ],
                Some(1),
            )
            .unwrap();
        assert_eq!(vals[1], Val::Date(1));
        assert_eq!(vals[2], Val::DateTime(1000));
        assert_eq!(vals[3], Val::Bytes(b"hi".to_vec()));
        b.push("1", None, vals, 1, true);
        let vals = b
            .validate(vec![None, None, None, None, None], Some(2))
            .unwrap();
        b.push("2", None, vals, 2, true);
        let (batch, lines) = b.finish().unwrap();
        assert_eq!(batch.num_rows(), 2);
        assert_eq!(lines, vec![1, 2]);
        assert_eq!(batch.column(1).null_count(), 1);
    }
}
