//! The scalar view every comparison reads through, and the one comparison
//! function: query filters, mutation filters and validation all compare
//! with [`holds`], whether the value comes from an Arrow column, a plan
//! constant or a row a mutation is building.

use std::cmp::Ordering;

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;

use crate::compiler::query::ast::CmpOp;
use crate::compiler::query::ir::Value;

/// A value being compared (strings and lists borrowed). Dates and
/// date-times are their stored integers; the checker only lets values of
/// one type meet.
#[derive(Clone, Debug)]
pub enum S<'a> {
    Null,
    Bool(bool),
    I(i128),
    F(f64),
    Str(&'a str),
    List(Items<'a>),
}

/// The items of a list value: a list cell's Arrow array, or a constant's.
#[derive(Clone, Debug)]
pub enum Items<'a> {
    Column(ArrayRef),
    Values(&'a [Value]),
}

impl Items<'_> {
    fn len(&self) -> usize {
        match self {
            Items::Column(a) => a.len(),
            Items::Values(v) => v.len(),
        }
    }

    fn get(&self, i: usize) -> S<'_> {
        match self {
            Items::Column(a) => s_at(a, i),
            Items::Values(v) => s_of(&v[i]),
        }
    }
}

/// Order of two values; `None` when either is null or they do not meet.
/// Lists are equal when their items are, in order (they are only ever
/// tested for equality).
pub fn cmp_s(a: &S, b: &S) -> Option<Ordering> {
    match (a, b) {
        (S::Null, _) | (_, S::Null) => None,
        (S::I(x), S::I(y)) => Some(x.cmp(y)),
        (S::I(x), S::F(y)) => (*x as f64).partial_cmp(y),
        (S::F(x), S::I(y)) => x.partial_cmp(&(*y as f64)),
        (S::F(x), S::F(y)) => x.partial_cmp(y),
        (S::Str(x), S::Str(y)) => Some(x.cmp(y)),
        (S::Bool(x), S::Bool(y)) => Some(x.cmp(y)),
        (S::List(x), S::List(y)) => {
            let same = x.len() == y.len()
                && (0..x.len()).all(|i| cmp_s(&x.get(i), &y.get(i)) == Some(Ordering::Equal));
            Some(if same {
                Ordering::Equal
            } else {
                Ordering::Less
            })
        }
        _ => None,
    }
}

/// Row `i` of an Arrow column.
pub fn s_at(a: &ArrayRef, i: usize) -> S<'_> {
    if a.is_null(i) {
        return S::Null;
    }
    match a.data_type() {
        DataType::Utf8 => S::Str(a.as_string::<i32>().value(i)),
        DataType::Boolean => S::Bool(a.as_boolean().value(i)),
        DataType::Int32 => S::I(a.as_primitive::<Int32Type>().value(i) as i128),
        DataType::Int64 => S::I(a.as_primitive::<Int64Type>().value(i) as i128),
        DataType::UInt32 => S::I(a.as_primitive::<UInt32Type>().value(i) as i128),
        DataType::UInt64 => S::I(a.as_primitive::<UInt64Type>().value(i) as i128),
        DataType::Float32 => S::F(a.as_primitive::<Float32Type>().value(i) as f64),
        DataType::Float64 => S::F(a.as_primitive::<Float64Type>().value(i)),
        DataType::Date32 => S::I(a.as_primitive::<Date32Type>().value(i) as i128),
        DataType::Date64 => S::I(a.as_primitive::<Date64Type>().value(i) as i128),
        DataType::List(_) => S::List(Items::Column(a.as_list::<i32>().value(i))),
        _ => S::Null,
    }
}

/// A plan value. Vectors are never compared (the checker refuses it).
pub fn s_of(v: &Value) -> S<'_> {
    match v {
        Value::Null | Value::Vector(_) => S::Null,
        Value::Bool(b) => S::Bool(*b),
        Value::Int(i) => S::I(*i as i128),
        Value::UInt(u) => S::I(*u as i128),
        Value::Float(f) => S::F(*f),
        Value::Str(s) => S::Str(s),
        Value::Date(d) => S::I(*d as i128),
        Value::DateTime(ms) => S::I(*ms as i128),
        Value::List(items) => S::List(Items::Values(items)),
    }
}

/// Does `l op r` hold?
pub fn holds(op: CmpOp, l: &S, r: &S) -> bool {
    match op {
        CmpOp::Contains => match (l, r) {
            (S::List(items), r) => {
                (0..items.len()).any(|i| cmp_s(&items.get(i), r) == Some(Ordering::Equal))
            }
            (S::Str(a), S::Str(b)) => a.contains(b),
            _ => false,
        },
        CmpOp::StartsWith => matches!((l, r), (S::Str(a), S::Str(b)) if a.starts_with(b)),
        _ => cmp_s(l, r).is_some_and(|o| op.accepts(o)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_compare_by_content_from_columns_and_constants() {
        let col: ArrayRef = std::sync::Arc::new(arrow_array::StringArray::from(vec!["a", "b"]));
        let konst = [Value::Str("a".into()), Value::Str("b".into())];
        let other = [Value::Str("a".into())];
        let l = S::List(Items::Column(col));
        assert!(holds(CmpOp::Eq, &l, &S::List(Items::Values(&konst))));
        assert!(!holds(CmpOp::Eq, &l, &S::List(Items::Values(&other))));
        assert!(holds(CmpOp::Ne, &l, &S::List(Items::Values(&other))));
        assert!(holds(CmpOp::Contains, &l, &S::Str("b")));
    }

    #[test]
    fn integers_compare_exactly() {
        // Past 2^53 an f64 cannot tell these apart.
        let (a, b) = (Value::Int(i64::MAX), Value::Int(i64::MAX - 1));
        assert!(holds(CmpOp::Gt, &s_of(&a), &s_of(&b)));
        assert!(!holds(CmpOp::Eq, &s_of(&a), &s_of(&b)));
    }
}
