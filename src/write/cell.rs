//! A JSON value as the loader reads it: borrowed strings, numbers kept exact,
//! no maps. Parsed straight from the input text, so a row costs no
//! intermediate `serde_json::Value`.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, SeqAccess, Visitor};

#[derive(Clone, Debug, PartialEq)]
pub enum Cell<'a> {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(Cow<'a, str>),
    List(Vec<Cell<'a>>),
}

impl Cell<'_> {
    /// The value as the user wrote it, for error messages.
    pub fn show(&self) -> String {
        match self {
            Cell::Null => "null".into(),
            Cell::Bool(b) => b.to_string(),
            Cell::Int(i) => i.to_string(),
            Cell::UInt(u) => u.to_string(),
            Cell::Float(f) => f.to_string(),
            Cell::Str(s) => {
                let mut t: String = s.chars().take(60).collect();
                if s.chars().count() > 60 {
                    t.push('…');
                }
                format!("{t:?}")
            }
            Cell::List(items) => {
                let shown: Vec<String> = items.iter().take(8).map(|c| c.show()).collect();
                let more = if items.len() > 8 { ", …" } else { "" };
                format!("[{}{more}]", shown.join(", "))
            }
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Cell::Null => "null",
            Cell::Bool(_) => "a boolean",
            Cell::Int(_) | Cell::UInt(_) => "an integer",
            Cell::Float(_) => "a number",
            Cell::Str(_) => "a string",
            Cell::List(_) => "a list",
        }
    }

    pub fn into_owned(self) -> Cell<'static> {
        match self {
            Cell::Null => Cell::Null,
            Cell::Bool(b) => Cell::Bool(b),
            Cell::Int(i) => Cell::Int(i),
            Cell::UInt(u) => Cell::UInt(u),
            Cell::Float(f) => Cell::Float(f),
            Cell::Str(s) => Cell::Str(Cow::Owned(s.into_owned())),
            Cell::List(v) => Cell::List(v.into_iter().map(Cell::into_owned).collect()),
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Cell<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(CellVisitor(std::marker::PhantomData))
    }
}

struct CellVisitor<'a>(std::marker::PhantomData<&'a ()>);

impl<'de: 'a, 'a> Visitor<'de> for CellVisitor<'a> {
    type Value = Cell<'a>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a property value (null, boolean, number, string or list)")
    }
    fn visit_unit<E>(self) -> Result<Cell<'a>, E> {
        Ok(Cell::Null)
    }
    fn visit_none<E>(self) -> Result<Cell<'a>, E> {
        Ok(Cell::Null)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Cell<'a>, E> {
        Ok(Cell::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Cell<'a>, E> {
        Ok(Cell::Int(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Cell<'a>, E> {
        Ok(match i64::try_from(v) {
            Ok(i) => Cell::Int(i),
            Err(_) => Cell::UInt(v),
        })
    }
    fn visit_f64<E>(self, v: f64) -> Result<Cell<'a>, E> {
        Ok(Cell::Float(v))
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Cell<'a>, E> {
        Ok(Cell::Str(Cow::Borrowed(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Cell<'a>, E> {
        Ok(Cell::Str(Cow::Owned(v.to_string())))
    }
    fn visit_string<E>(self, v: String) -> Result<Cell<'a>, E> {
        Ok(Cell::Str(Cow::Owned(v)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Cell<'a>, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(4));
        while let Some(c) = seq.next_element::<Cell<'a>>()? {
            items.push(c);
        }
        Ok(Cell::List(items))
    }
    fn visit_map<A: de::MapAccess<'de>>(self, _map: A) -> Result<Cell<'a>, A::Error> {
        Err(de::Error::custom("objects are not property values"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_borrowed_when_unescaped() {
        let c: Cell = serde_json::from_str(r#""plain""#).unwrap();
        assert!(matches!(c, Cell::Str(Cow::Borrowed("plain"))));
        let c: Cell = serde_json::from_str(r#""a\nb""#).unwrap();
        assert_eq!(c, Cell::Str(Cow::Owned("a\nb".into())));
        let c: Cell = serde_json::from_str("[1, 2.5, null, 18446744073709551615]").unwrap();
        assert_eq!(
            c,
            Cell::List(vec![
                Cell::Int(1),
                Cell::Float(2.5),
                Cell::Null,
                Cell::UInt(u64::MAX)
            ])
        );
        assert!(serde_json::from_str::<Cell>("{\"a\": 1}").is_err());
    }
}
