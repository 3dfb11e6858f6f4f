//! Rows -> one type's Arrow columns, with every value checked against the
//! schema on the way in: typed by `value::typed` (type, enum, vector
//! dimension and finiteness, blob encoding), then nullability, `@range` and
//! `@check`. A row is validated completely
//! before any column is touched, so a rejected row leaves the builder as it was.

use std::sync::Arc;

use arrow_array::builder::*;
use arrow_array::{ArrayRef, FixedSizeListArray, Float32Array, RecordBatch, new_null_array};
use arrow_schema::{DataType, Field, SchemaRef};

use crate::compiler::catalog::{Num, PropDef, PropType, TypeDef};
use crate::compiler::value::{self, Value};
use crate::error::{Location, OmniError, Result};
use crate::storage::tables::BlobInput;

/// A row's `@unique` key over some of its values, or `None` when one of
/// them is null: nulls never collide. Loads and mutations compare with it.
pub fn unique_key<'v, 'a: 'v>(vals: impl IntoIterator<Item = &'v Value<'a>>) -> Option<String> {
    use std::fmt::Write;
    let mut key = String::new();
    for (i, v) in vals.into_iter().enumerate() {
        if *v == Value::Null {
            return None;
        }
        if i > 0 {
            key.push('\u{1}');
        }
        write!(key, "{v:?}").expect("a String takes any write");
    }
    Some(key)
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

    /// Validate `cells` (one per property, in property order; `None` = absent)
    /// and return the converted values (in the cells' allocation), or an
    /// error naming line, type, property and value.
    pub fn validate<'a>(
        &self,
        cells: Vec<Option<Value<'a>>>,
        line: Option<usize>,
    ) -> Result<Vec<Value<'a>>> {
        let props = &self.props;
        assert_eq!(cells.len(), props.len(), "one cell per property");
        cells
            .into_iter()
            .enumerate()
            .map(|(i, cell)| {
                props[i].validate(cell).map_err(|(message, value)| {
                    OmniError::invalid(
                        Location {
                            line,
                            row: None,
                            type_name: Some(self.def.name.clone()),
                            property: Some(props[i].def.name.clone()),
                            value,
                            ..Default::default()
                        },
                        message,
                    )
                })
            })
            .collect()
    }

    pub fn prop_index(&self, name: &str) -> Option<usize> {
        self.props.iter().position(|p| p.def.name == name)
    }
}

/// Is `v` within `@range` bounds? Compared as filters compare (integers
/// exactly, integers and floats as floats).
fn in_range(r: &(Option<Num>, Option<Num>), v: &Value) -> bool {
    let bound = |n: &Num| match n {
        Num::Int(i) => Value::Int(*i),
        Num::Float(f) => Value::Float(*f),
    };
    let beyond = |b: &Option<Num>, side: std::cmp::Ordering| {
        b.as_ref()
            .is_some_and(|b| value::order(v, &bound(b)) == Some(side))
    };
    !(beyond(&r.0, std::cmp::Ordering::Less) || beyond(&r.1, std::cmp::Ordering::Greater))
}

impl PropRule {
    /// Validate one (possibly absent) value of this property.
    #[inline]
    pub fn validate<'a>(
        &self,
        cell: Option<Value<'a>>,
    ) -> std::result::Result<Value<'a>, (String, Option<String>)> {
        // The usual cells, already of their property's type with nothing
        // more to check, are taken as they are (what `typed` would return),
        // here where the caller's loop can keep them in registers.
        if self.range.is_none() && self.check.is_none() {
            match (&self.def.ty, &cell) {
                (PropType::String, Some(Value::Str(_)))
                | (PropType::Bool, Some(Value::Bool(_)))
                | (PropType::I64, Some(Value::Int(_))) => return Ok(cell.expect("matched")),
                (PropType::I32, Some(Value::Int(i))) if i32::try_from(*i).is_ok() => {
                    return Ok(cell.expect("matched"));
                }
                (_, None | Some(Value::Null)) if self.def.nullable => return Ok(Value::Null),
                _ => {}
            }
        }
        self.validate_fully(cell)
    }

    #[inline(never)]
    fn validate_fully<'a>(
        &self,
        cell: Option<Value<'a>>,
    ) -> std::result::Result<Value<'a>, (String, Option<String>)> {
        let cell = match cell {
            None | Some(Value::Null) if !self.def.nullable => {
                let shown = cell.as_ref().map(|c| c.show());
                return Err(("required property is missing".into(), shown));
            }
            None => return Ok(Value::Null),
            Some(c) => c,
        };
        // Spelling the value out costs more than checking it, so keep what
        // is needed to spell it and do that only on failure (a string cell
        // borrows the input; a list is spelt now rather than copied).
        let kept = match &cell {
            Value::List(_) => Err(cell.show()),
            c => Ok(c.clone()),
        };
        let shown = || match &kept {
            Ok(c) => c.show(),
            Err(s) => s.clone(),
        };
        let v = value::typed(&self.def.ty, cell).map_err(|e| (e, Some(shown())))?;
        if let Some(r) = &self.range
            && !matches!(v, Value::Null)
            && !in_range(r, &v)
        {
            let show = |n: Option<Num>| n.map(|n| n.to_string()).unwrap_or_default();
            return Err((
                format!("violates @range({}..{})", show(r.0), show(r.1)),
                Some(shown()),
            ));
        }
        if let (Some(re), Value::Str(s)) = (&self.check, &v)
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
    List(Vec<Option<Vec<Value<'static>>>>),
    Blob(Vec<BlobInput>),
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
    fn push(&mut self, v: Value<'_>) {
        match (self, v) {
            (Col::Str(b), Value::Str(s)) => b.append_value(s),
            (Col::Str(b), _) => b.append_null(),
            (Col::Bool(b), Value::Bool(x)) => b.append_value(x),
            (Col::Bool(b), _) => b.append_null(),
            (Col::I32(b), Value::Int(x)) => b.append_value(x as i32),
            (Col::I32(b), _) => b.append_null(),
            (Col::I64(b), Value::Int(x)) => b.append_value(x),
            (Col::I64(b), _) => b.append_null(),
            (Col::U32(b), Value::Int(x)) => b.append_value(x as u32),
            (Col::U32(b), _) => b.append_null(),
            (Col::U64(b), Value::UInt(x)) => b.append_value(x),
            (Col::U64(b), Value::Int(x)) => b.append_value(x as u64),
            (Col::U64(b), _) => b.append_null(),
            (Col::F32(b), Value::Float(x)) => b.append_value(x as f32),
            (Col::F32(b), _) => b.append_null(),
            (Col::F64(b), Value::Float(x)) => b.append_value(x),
            (Col::F64(b), _) => b.append_null(),
            (Col::Date(b), Value::Date(x)) => b.append_value(x),
            (Col::Date(b), _) => b.append_null(),
            (Col::DateTime(b), Value::DateTime(x)) => b.append_value(x),
            (Col::DateTime(b), _) => b.append_null(),
            (Col::Vector { dim, values, valid }, v) => match v {
                Value::Vector(xs) => {
                    values.extend_from_slice(&xs);
                    valid.push(true);
                }
                _ => {
                    values.extend(std::iter::repeat_n(0.0, *dim));
                    valid.push(false);
                }
            },
            (Col::List(rows), Value::List(items)) => {
                rows.push(Some(items.into_iter().map(Value::into_owned).collect()))
            }
            (Col::List(rows), _) => rows.push(None),
            (Col::Blob(rows), Value::Bytes(b)) => rows.push(BlobInput::Bytes(b)),
            (Col::Blob(rows), Value::BlobUri(uri)) => rows.push(BlobInput::Uri(uri.into_owned())),
            (Col::Blob(rows), _) => rows.push(BlobInput::Null),
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
fn list_array(field: &Field, rows: Vec<Option<Vec<Value<'static>>>>) -> Result<ArrayRef> {
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

    /// Append a validated row, leaving `vals` empty.
    pub fn push(
        &mut self,
        id: &str,
        endpoints: Option<(&str, &str)>,
        vals: &mut Vec<Value<'_>>,
        line: usize,
        explicit_id: bool,
    ) {
        self.id.append_value(id);
        if let Some((s, d)) = endpoints {
            self.src.append_value(s);
            self.dst.append_value(d);
        }
        for (col, v) in self.cols.iter_mut().zip(vals.drain(..)) {
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

/// `n` rows of one value of a property (a default filling existing rows).
pub fn constant_column(p: &PropDef, v: &Value<'static>, n: usize) -> Result<ArrayRef> {
    let mut col = Col::new(&p.ty, n);
    for _ in 0..n {
        col.push(v.clone());
    }
    col.finish(&crate::storage::tables::prop_field(p))
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

    /// The cells taken as they are get exactly what the full check gives
    /// (a rule with an unbounded range takes the full check).
    #[test]
    fn usual_cells_are_taken_as_the_full_check_would() {
        let cells = [
            None,
            Some(Value::Null),
            Some(Value::Str("x".into())),
            Some(Value::Bool(true)),
            Some(Value::Int(-7)),
            Some(Value::Int(i32::MAX as i64 + 1)),
            Some(Value::Int(i64::MIN)),
            Some(Value::Float(1.5)),
        ];
        for ty in [
            PropType::String,
            PropType::Bool,
            PropType::I32,
            PropType::I64,
        ] {
            for nullable in [false, true] {
                let def = PropDef {
                    id: 0,
                    name: "p".into(),
                    ty: ty.clone(),
                    nullable,
                    embed: None,
                    annotations: Vec::new(),
                };
                let plain = PropRule {
                    def: def.clone(),
                    range: None,
                    check: None,
                };
                let full = PropRule {
                    def,
                    range: Some((None, None)),
                    check: None,
                };
                for c in &cells {
                    let (a, b) = (plain.validate(c.clone()), full.validate(c.clone()));
                    assert_eq!(a, b, "{ty:?} nullable {nullable} {c:?}");
                }
            }
        }
    }

    #[test]
    fn committed_cells_read_back_as_the_values_written() {
        let r = rules(
            "node P { s: String\n i: I32?\n u: U64?\n f: F32?\n d: Date?\n t: DateTime?\n v: Vector(2)?\n l: [I64]?\n b: Bool? }",
            "P",
        );
        let vals = vec![
            Value::Str("x".into()),
            Value::Int(-3),
            Value::UInt(u64::MAX),
            Value::Float(0.5),
            Value::Date(19000),
            Value::DateTime(1_700_000_000_123),
            Value::Vector(vec![1.0, 2.5]),
            Value::List(vec![Value::Int(4), Value::Int(5)]),
            Value::Bool(true),
        ];
        let mut b = TableBuilder::new(r.clone(), 1);
        b.push("p1", None, &mut vals.clone(), 0, true);
        let mut nulls = vec![Value::Str("y".into())];
        nulls.extend(std::iter::repeat_n(Value::Null, 8));
        b.push("p2", None, &mut nulls.clone(), 0, true);
        let (batch, _) = b.finish().unwrap();
        for (row, want) in [vals, nulls].iter().enumerate() {
            let got: Vec<Value> = r
                .props
                .iter()
                .zip(want)
                .map(|(p, _)| {
                    value::at(batch.column_by_name(&p.def.name).unwrap(), row).into_owned()
                })
                .collect();
            assert_eq!(&got, want);
        }
    }

    // One case per rule of the conversion table, read as a table.
    #[test]
    fn values_are_checked_against_the_schema() {
        let r = rules(
            "node P { name: String\n age: I32?\n s: enum(a, b)\n v: Vector(2)?\n e: String?\n @range(age, 0..150)\n @check(e, \"^[a-z]+@x$\") }",
            "P",
        );
        let cells = |name: Value<'static>,
                     age: Value<'static>,
                     s: Value<'static>,
                     v: Value<'static>,
                     e: Value<'static>| {
            vec![Some(name), Some(age), Some(s), Some(v), Some(e)]
        };
        let ok = r
            .validate(
                cells(
                    Value::Str("x".into()),
                    Value::Int(3),
                    Value::Str("a".into()),
                    Value::List(vec![Value::Int(1), Value::Float(0.5)]),
                    Value::Str("ab@x".into()),
                ),
                Some(1),
            )
            .unwrap();
        assert_eq!(ok[1], Value::Int(3));
        let bad = |cs, prop: &str| match r.validate(cs, Some(7)) {
            Err(OmniError::Invalid { at, .. }) => {
                assert_eq!(at.line, Some(7));
                assert_eq!(at.property.as_deref(), Some(prop));
            }
            other => panic!("{other:?}"),
        };
        bad(
            cells(
                Value::Str("x".into()),
                Value::Int(200),
                Value::Str("a".into()),
                Value::Null,
                Value::Null,
            ),
            "age",
        );
        bad(
            cells(
                Value::Str("x".into()),
                Value::Str("3".into()),
                Value::Str("a".into()),
                Value::Null,
                Value::Null,
            ),
            "age",
        );
        bad(
            cells(
                Value::Str("x".into()),
                Value::Null,
                Value::Str("c".into()),
                Value::Null,
                Value::Null,
            ),
            "s",
        );
        bad(
            cells(
                Value::Str("x".into()),
                Value::Null,
                Value::Str("a".into()),
                Value::List(vec![Value::Int(1)]),
                Value::Null,
            ),
            "v",
        );
        bad(
            cells(
                Value::Str("x".into()),
                Value::Null,
                Value::Str("a".into()),
                Value::List(vec![Value::Float(1e300), Value::Int(1)]),
                Value::Null,
            ),
            "v",
        );
        bad(
            cells(
                Value::Str("x".into()),
                Value::Null,
                Value::Str("a".into()),
                Value::Null,
                Value::Str("AB".into()),
            ),
            "e",
        );
        bad(
            vec![None, None, Some(Value::Str("a".into())), None, None],
            "name",
        );
        bad(
            cells(
                Value::Null,
                Value::Null,
                Value::Str("a".into()),
                Value::Null,
                Value::Null,
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
        let mut vals = b
            .rules
            .validate(
                vec![
                    Some(Value::List(vec![Value::Str("a".into())])),
                    Some(Value::Str("1970-01-02".into())),
                    Some(Value::Str("1970-01-01T00:00:01Z".into())),
                    Some(Value::Str("base64:aGk=".into())),
                    Some(Value::UInt(u64::MAX)),
                ],
                Some(1),
            )
            .unwrap();
        assert_eq!(vals[1], Value::Date(1));
        assert_eq!(vals[2], Value::DateTime(1000));
        assert_eq!(vals[3], Value::Bytes(b"hi".to_vec()));
        b.push("1", None, &mut vals, 1, true);
        let mut vals = b
            .rules
            .validate(vec![None, None, None, None, None], Some(2))
            .unwrap();
        b.push("2", None, &mut vals, 2, true);
        let (batch, lines) = b.finish().unwrap();
        assert_eq!(batch.num_rows(), 2);
        assert_eq!(lines, vec![1, 2]);
        assert_eq!(batch.column(1).null_count(), 1);
    }
}
