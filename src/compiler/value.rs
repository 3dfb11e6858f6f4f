//! The one runtime value: a plan's constant, a bound parameter, a JSONL input
//! value (before and after it is typed for its property), a row a mutation
//! builds and a cell read from Arrow are all a [`Value`]; and the one
//! comparison, [`holds`], that query filters, mutation filters and
//! validation share. Query text has its own literal syntax (`ast::Lit`),
//! which the checker turns into values.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt;

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;
use serde::de::{self, Deserialize, Deserializer, SeqAccess, Visitor};

use base64::Engine;

use crate::compiler::catalog::PropType;
use crate::compiler::query::ast::CmpOp;
use crate::util::dates::{date_string, datetime_string, days_from_date, ms_from_datetime};

/// A value, strings borrowed where they can be (from the input text or an
/// Arrow column). Input that is not yet typed has only the JSON shapes
/// (`Null`, `Bool`, `Int`/`UInt`, `Float`, `Str`, `List`); typing gives
/// dates, vectors and bytes their own variants.
#[derive(Clone, Debug, PartialEq)]
pub enum Value<'a> {
    Null,
    Bool(bool),
    Int(i64),
    /// Only for integers past `i64::MAX`, and for every `U64` property value.
    UInt(u64),
    Float(f64),
    Str(Cow<'a, str>),
    /// Days since 1970-01-01.
    Date(i32),
    /// Milliseconds since the epoch.
    DateTime(i64),
    Vector(Vec<f32>),
    List(Vec<Value<'a>>),
    Bytes(Vec<u8>),
    /// A Blob cell's external reference (checked against the graph's
    /// policy by the write that stores it).
    BlobUri(Cow<'a, str>),
}

impl Value<'_> {
    /// The same value, owning its strings.
    pub fn into_owned(self) -> Value<'static> {
        match self {
            Value::Str(s) => Value::Str(Cow::Owned(s.into_owned())),
            Value::List(items) => Value::List(items.into_iter().map(Value::into_owned).collect()),
            Value::Null => Value::Null,
            Value::Bool(b) => Value::Bool(b),
            Value::Int(i) => Value::Int(i),
            Value::UInt(u) => Value::UInt(u),
            Value::Float(f) => Value::Float(f),
            Value::Date(d) => Value::Date(d),
            Value::DateTime(d) => Value::DateTime(d),
            Value::Vector(v) => Value::Vector(v),
            Value::Bytes(b) => Value::Bytes(b),
            Value::BlobUri(u) => Value::BlobUri(Cow::Owned(u.into_owned())),
        }
    }

    /// The value as a user would write it, shortened, for error messages.
    pub fn show(&self) -> String {
        match self {
            Value::Null => "null".into(),
            Value::Bool(b) => b.to_string(),
            Value::Int(i) => i.to_string(),
            Value::UInt(u) => u.to_string(),
            Value::Float(f) => f.to_string(),
            Value::Str(s) => {
                let mut t: String = s.chars().take(60).collect();
                if s.chars().count() > 60 {
                    t.push('…');
                }
                format!("{t:?}")
            }
            Value::Date(d) => format!("{:?}", date_string(*d)),
            Value::DateTime(ms) => format!("{:?}", datetime_string(*ms)),
            Value::Vector(xs) => show_items(xs.iter().map(|x| x.to_string())),
            Value::List(items) => show_items(items.iter().map(Value::show)),
            Value::Bytes(b) => format!("<{} bytes>", b.len()),
            Value::BlobUri(u) => format!("{u:?}"),
        }
    }

    /// What kind of value it is, for "expected X, got Y".
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Int(_) | Value::UInt(_) => "an integer",
            Value::Float(_) => "a number",
            Value::Str(_) => "a string",
            Value::Date(_) => "a date",
            Value::DateTime(_) => "a date-time",
            Value::Vector(_) => "a vector",
            Value::List(_) => "a list",
            Value::Bytes(_) => "bytes",
            Value::BlobUri(_) => "a blob reference",
        }
    }

    /// The canonical spelling of a key value, the part of a keyed node's
    /// id it gives (integers in decimal, booleans `true`/`false`, dates as
    /// their stored epoch numbers); `None` for a value that cannot be a key.
    pub fn key_part(&self) -> Option<String> {
        Some(match self {
            Value::Str(s) => s.to_string(),
            Value::Int(i) => i.to_string(),
            Value::UInt(u) => u.to_string(),
            Value::Bool(b) => b.to_string(),
            Value::Date(d) => d.to_string(),
            Value::DateTime(ms) => ms.to_string(),
            _ => return None,
        })
    }

    /// The value as an exact integer, if it is one.
    #[inline]
    pub fn integer(&self) -> Option<i128> {
        match self {
            Value::Int(i) => Some(*i as i128),
            Value::UInt(u) => Some(*u as i128),
            _ => None,
        }
    }
}

fn show_items(items: impl ExactSizeIterator<Item = String>) -> String {
    let more = if items.len() > 8 { ", …" } else { "" };
    let shown: Vec<String> = items.take(8).collect();
    format!("[{}{more}]", shown.join(", "))
}

/// Order of two values; `None` when either is null or they do not meet
/// (the checker only lets values of one type meet; integers and floats
/// meet each other). Integers compare exactly. Lists are equal when their
/// items are, in order (they are only ever tested for equality); vectors
/// and bytes are never compared.
pub fn order(a: &Value, b: &Value) -> Option<Ordering> {
    use Value::*;
    match (a, b) {
        (Null, _) | (_, Null) => None,
        (Int(_) | UInt(_), Int(_) | UInt(_)) => Some(a.integer()?.cmp(&b.integer()?)),
        (Int(_) | UInt(_), Float(y)) => (a.integer()? as f64).partial_cmp(y),
        (Float(x), Int(_) | UInt(_)) => x.partial_cmp(&(b.integer()? as f64)),
        (Float(x), Float(y)) => x.partial_cmp(y),
        (Str(x), Str(y)) => Some(x.cmp(y)),
        (Bool(x), Bool(y)) => Some(x.cmp(y)),
        (Date(x), Date(y)) => Some(x.cmp(y)),
        (DateTime(x), DateTime(y)) => Some(x.cmp(y)),
        (List(x), List(y)) => {
            let same = x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|(p, q)| order(p, q) == Some(Ordering::Equal));
            Some(if same {
                Ordering::Equal
            } else {
                Ordering::Less
            })
        }
        _ => None,
    }
}

/// Does `l op r` hold?
pub fn holds(op: CmpOp, l: &Value, r: &Value) -> bool {
    match op {
        CmpOp::Contains => match (l, r) {
            (Value::List(items), r) => items.iter().any(|i| order(i, r) == Some(Ordering::Equal)),
            (Value::Str(a), Value::Str(b)) => a.contains(b.as_ref()),
            _ => false,
        },
        CmpOp::StartsWith => {
            matches!((l, r), (Value::Str(a), Value::Str(b)) if a.starts_with(b.as_ref()))
        }
        _ => order(l, r).is_some_and(|o| op.accepts(o)),
    }
}

/// An input value typed for a property of type `ty`: the JSONL format's
/// conversion table, which parameters and mutation values go through too.
/// Returns the reason on failure (the caller adds where).
// One arm per (property type, input cell) pair: the whole conversion
// table of the JSONL format.
pub fn typed<'a>(ty: &PropType, cell: Value<'a>) -> std::result::Result<Value<'a>, String> {
    let wrong = |want: &str, c: &Value| format!("expected {want}, got {}", c.kind());
    Ok(match (ty, cell) {
        (_, Value::Null) => Value::Null,
        (PropType::String, Value::Str(s)) => Value::Str(s),
        (PropType::Enum(vals), Value::Str(s)) => {
            if !vals.iter().any(|v| v == s.as_ref()) {
                return Err(format!("not one of the enum values ({})", vals.join(", ")));
            }
            Value::Str(s)
        }
        (PropType::Bool, Value::Bool(b)) => Value::Bool(b),
        // Values a plan or parameter already typed.
        (PropType::Date, Value::Date(d)) => Value::Date(d),
        (PropType::DateTime, Value::DateTime(ms)) => Value::DateTime(ms),
        (PropType::Blob, Value::Bytes(b)) => Value::Bytes(b),
        (PropType::Blob, Value::BlobUri(u)) => {
            crate::compiler::blob_policy::parse(&u).map_err(|why| {
                format!("an external blob reference must be an absolute URI: {why}")
            })?;
            Value::BlobUri(u)
        }
        // Raw bytes, as serde writes a byte vector: a list of 0..=255.
        (PropType::Blob, Value::List(items)) => Value::Bytes(
            items
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    v.integer()
                        .and_then(|n| u8::try_from(n).ok())
                        .ok_or_else(|| format!("byte {i} is not an integer in 0..=255"))
                })
                .collect::<Result<_, _>>()?,
        ),
        (PropType::Vector(n), Value::Vector(xs)) => {
            if xs.len() != *n as usize {
                return Err(format!("expected {n} values, got {}", xs.len()));
            }
            if let Some(i) = xs.iter().position(|x| !x.is_finite()) {
                return Err(format!("element {i} is not a finite 32-bit float"));
            }
            Value::Vector(xs)
        }
        (PropType::I32 | PropType::I64 | PropType::U32 | PropType::U64, c) => {
            let Some(i) = c.integer() else {
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
                PropType::U64 => Value::UInt(i as u64),
                _ => Value::Int(i as i64),
            }
        }
        (PropType::F32 | PropType::F64, c) => {
            let f = match &c {
                Value::Float(f) => *f,
                Value::Int(i) => *i as f64,
                Value::UInt(u) => *u as f64,
                _ => return Err(wrong("a number", &c)),
            };
            if !f.is_finite() {
                return Err("not a finite number".into());
            }
            Value::Float(f)
        }
        (PropType::Date, Value::Str(s)) => Value::Date(
            days_from_date(&s).ok_or_else(|| "expected a date like \"2024-05-01\"".to_string())?,
        ),
        (PropType::Date, c) => match c.integer().and_then(|i| i32::try_from(i).ok()) {
            Some(d) => Value::Date(d),
            None => return Err(wrong("a date string or days since 1970-01-01", &c)),
        },
        (PropType::DateTime, Value::Str(s)) => {
            Value::DateTime(ms_from_datetime(&s).ok_or_else(|| {
                "expected an RFC 3339 date-time like \"2024-05-01T12:00:00Z\"".to_string()
            })?)
        }
        (PropType::DateTime, c) => match c.integer().and_then(|i| i64::try_from(i).ok()) {
            Some(ms) => Value::DateTime(ms),
            None => {
                return Err(wrong(
                    "an RFC 3339 string or milliseconds since the epoch",
                    &c,
                ));
            }
        },
        (PropType::Vector(n), Value::List(items)) => {
            if items.len() != *n as usize {
                return Err(format!("expected {n} values, got {}", items.len()));
            }
            let mut out = Vec::with_capacity(items.len());
            for (i, c) in items.iter().enumerate() {
                let f = match c {
                    Value::Float(f) => *f,
                    Value::Int(v) => *v as f64,
                    Value::UInt(v) => *v as f64,
                    other => return Err(format!("element {i} is {}, not a number", other.kind())),
                };
                let f32v = f as f32;
                if !f32v.is_finite() {
                    return Err(format!("element {i} is not a finite 32-bit float"));
                }
                out.push(f32v);
            }
            Value::Vector(out)
        }
        (PropType::List(inner), Value::List(items)) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, c) in items.into_iter().enumerate() {
                if matches!(c, Value::Null) {
                    return Err(format!("element {i} is null"));
                }
                out.push(typed(inner, c).map_err(|e| format!("element {i}: {e}"))?);
            }
            Value::List(out)
        }
        // `base64:` is bytes the graph owns; any other string is an
        // external reference, kept as its URI (a well-formed one: the
        // write checks it against the graph's policy before staging).
        (PropType::Blob, Value::Str(s)) => match s.strip_prefix("base64:") {
            Some(payload) => Value::Bytes(base64_payload(payload)?),
            None => typed(&PropType::Blob, Value::BlobUri(s))?,
        },
        (ty, c) => return Err(wrong(&ty.describe(), &c)),
    })
}

/// Does a column of this type have a JSON form (the export's cells, the
/// load's input)?
pub fn has_json_form(dt: &DataType) -> bool {
    match dt {
        DataType::Struct(fields) => fields.iter().all(|f| has_json_form(f.data_type())),
        other => readable(other),
    }
}

/// Can [`at`] read cells of this Arrow type?
pub fn readable(dt: &DataType) -> bool {
    match dt {
        DataType::Utf8
        | DataType::LargeUtf8
        | DataType::Boolean
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt32
        | DataType::UInt64
        | DataType::Float32
        | DataType::Float64
        | DataType::Date32
        | DataType::Date64 => true,
        DataType::FixedSizeList(f, _) | DataType::List(f) => readable(f.data_type()),
        _ => false,
    }
}

/// Row `i` of an Arrow column, strings borrowed from it. A type that is
/// not [`readable`] reads as null: callers that meet arbitrary columns
/// check `readable` first.
#[inline]
pub fn at(a: &ArrayRef, i: usize) -> Value<'_> {
    if a.is_null(i) {
        return Value::Null;
    }
    match a.data_type() {
        DataType::Utf8 => Value::Str(Cow::Borrowed(a.as_string::<i32>().value(i))),
        DataType::LargeUtf8 => Value::Str(Cow::Borrowed(a.as_string::<i64>().value(i))),
        DataType::Boolean => Value::Bool(a.as_boolean().value(i)),
        DataType::Int32 => Value::Int(a.as_primitive::<Int32Type>().value(i) as i64),
        DataType::Int64 => Value::Int(a.as_primitive::<Int64Type>().value(i)),
        DataType::UInt32 => Value::Int(a.as_primitive::<UInt32Type>().value(i) as i64),
        DataType::UInt64 => Value::UInt(a.as_primitive::<UInt64Type>().value(i)),
        DataType::Float32 => Value::Float(a.as_primitive::<Float32Type>().value(i) as f64),
        DataType::Float64 => Value::Float(a.as_primitive::<Float64Type>().value(i)),
        DataType::Date32 => Value::Date(a.as_primitive::<Date32Type>().value(i)),
        DataType::Date64 => Value::DateTime(a.as_primitive::<Date64Type>().value(i)),
        DataType::FixedSizeList(f, _) if f.data_type() == &DataType::Float32 => {
            let v = a.as_fixed_size_list().value(i);
            Value::Vector(v.as_primitive::<Float32Type>().values().to_vec())
        }
        DataType::FixedSizeList(_, _) => items(a.as_fixed_size_list().value(i)),
        DataType::List(_) => items(a.as_list::<i32>().value(i)),
        _ => Value::Null,
    }
}

fn items(a: ArrayRef) -> Value<'static> {
    Value::List((0..a.len()).map(|j| at(&a, j).into_owned()).collect())
}

/// The bytes of a `base64:` payload (the part after the prefix).
fn base64_payload(payload: &str) -> std::result::Result<Vec<u8>, String> {
    base64::engine::general_purpose::STANDARD
        .decode(payload.trim())
        .map_err(|e| format!("invalid base64 payload: {e}"))
}

/// JSON input read straight from its text: strings borrowed when they need
/// no unescaping, integers kept exact, no objects. A row costs no
/// intermediate `serde_json::Value`.
impl<'de: 'a, 'a> Deserialize<'de> for Value<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(InputVisitor(std::marker::PhantomData))
    }
}

struct InputVisitor<'a>(std::marker::PhantomData<&'a ()>);

impl<'de: 'a, 'a> Visitor<'de> for InputVisitor<'a> {
    type Value = Value<'a>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a property value (null, boolean, number, string or list)")
    }
    fn visit_unit<E>(self) -> Result<Value<'a>, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value<'a>, E> {
        Ok(Value::Null)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value<'a>, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value<'a>, E> {
        Ok(Value::Int(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value<'a>, E> {
        Ok(match i64::try_from(v) {
            Ok(i) => Value::Int(i),
            Err(_) => Value::UInt(v),
        })
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value<'a>, E> {
        Ok(Value::Float(v))
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Value<'a>, E> {
        Ok(Value::Str(Cow::Borrowed(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value<'a>, E> {
        Ok(Value::Str(Cow::Owned(v.to_string())))
    }
    fn visit_string<E>(self, v: String) -> Result<Value<'a>, E> {
        Ok(Value::Str(Cow::Owned(v)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value<'a>, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(4));
        while let Some(c) = seq.next_element::<Value<'a>>()? {
            items.push(c);
        }
        Ok(Value::List(items))
    }
    /// The one object a value may be: a Blob given as `{"data": bytes}`
    /// (a list of bytes or a `base64:` string) or `{"uri": "..."}`, as
    /// LanceDB's blob writer takes them.
    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Value<'a>, A::Error> {
        let not_a_blob = || {
            de::Error::custom(
                "objects are not property values (a Blob takes {\"data\": ...} or {\"uri\": \"...\"})",
            )
        };
        let Some(key) = map.next_key::<Cow<'de, str>>()? else {
            return Err(not_a_blob());
        };
        let v: Value<'a> = map.next_value()?;
        if map.next_key::<Cow<'de, str>>()?.is_some() {
            return Err(not_a_blob());
        }
        match (key.as_ref(), v) {
            ("data", Value::Null) | ("uri", Value::Null) => Ok(Value::Null),
            ("data", Value::Str(s)) => match s.strip_prefix("base64:") {
                Some(payload) => base64_payload(payload)
                    .map(Value::Bytes)
                    .map_err(de::Error::custom),
                None => Err(de::Error::custom(
                    "\"data\" is bytes: a list or \"base64:...\"",
                )),
            },
            ("data", Value::List(items)) => Ok(Value::List(items)),
            ("uri", Value::Str(s)) => Ok(Value::BlobUri(s)),
            _ => Err(not_a_blob()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: &str) -> Value<'_> {
        Value::Str(Cow::Borrowed(x))
    }

    #[test]
    fn lists_compare_by_content_from_columns_and_constants() {
        let col: ArrayRef = std::sync::Arc::new(arrow_array::ListArray::from_iter_primitive::<
            Int64Type,
            _,
            _,
        >(vec![Some(vec![Some(1), Some(2)])]));
        let cell = at(&col, 0);
        let konst = Value::List(vec![Value::Int(1), Value::Int(2)]);
        let other = Value::List(vec![Value::Int(1)]);
        assert!(holds(CmpOp::Eq, &cell, &konst));
        assert!(!holds(CmpOp::Eq, &cell, &other));
        assert!(holds(CmpOp::Ne, &cell, &other));
        assert!(holds(CmpOp::Contains, &cell, &Value::Int(2)));
        assert!(!holds(CmpOp::Contains, &cell, &Value::Int(3)));
    }

    #[test]
    fn integers_compare_exactly() {
        // Past 2^53 an f64 cannot tell these apart.
        let (a, b) = (Value::Int(i64::MAX), Value::Int(i64::MAX - 1));
        assert!(holds(CmpOp::Gt, &a, &b));
        assert!(!holds(CmpOp::Eq, &a, &b));
        assert!(holds(
            CmpOp::Gt,
            &Value::UInt(u64::MAX),
            &Value::Int(i64::MAX)
        ));
        assert!(holds(CmpOp::Eq, &Value::UInt(5), &Value::Int(5)));
    }

    #[test]
    fn strings_and_dates_compare_as_themselves() {
        assert!(holds(CmpOp::StartsWith, &s("alice"), &s("al")));
        assert!(holds(CmpOp::Contains, &s("alice"), &s("lic")));
        assert!(holds(CmpOp::Lt, &Value::Date(1), &Value::Date(2)));
        // A date never meets an integer: no order, so no comparison holds.
        assert!(!holds(CmpOp::Ne, &Value::Date(1), &Value::Int(2)));
        assert!(!holds(CmpOp::Eq, &Value::Null, &Value::Null));
    }

    #[test]
    fn arrow_cells_read_borrowed_and_typed() {
        let strs: ArrayRef =
            std::sync::Arc::new(arrow_array::StringArray::from(vec![Some("x"), None]));
        assert!(matches!(at(&strs, 0), Value::Str(Cow::Borrowed("x"))));
        assert_eq!(at(&strs, 1), Value::Null);
        let days: ArrayRef = std::sync::Arc::new(arrow_array::Date32Array::from(vec![19000]));
        assert_eq!(at(&days, 0), Value::Date(19000));
        let bin: ArrayRef = std::sync::Arc::new(arrow_array::BinaryArray::from(vec![&b"x"[..]]));
        assert!(!readable(bin.data_type()));
    }

    #[test]
    fn input_strings_are_borrowed_when_unescaped() {
        let c: Value = serde_json::from_str(r#""plain""#).unwrap();
        assert!(matches!(c, Value::Str(Cow::Borrowed("plain"))));
        let c: Value = serde_json::from_str(r#""a\nb""#).unwrap();
        assert_eq!(c, Value::Str(Cow::Owned("a\nb".into())));
        let c: Value = serde_json::from_str("[1, 2.5, null, 18446744073709551615]").unwrap();
        assert_eq!(
            c,
            Value::List(vec![
                Value::Int(1),
                Value::Float(2.5),
                Value::Null,
                Value::UInt(u64::MAX)
            ])
        );
        let err = serde_json::from_str::<Value>("{\"a\": 1}").unwrap_err();
        assert!(
            err.to_string().contains("objects are not property values"),
            "{err}"
        );
    }
}
