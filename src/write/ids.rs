//! Node and edge ids. A keyed node's id is the canonical spelling of its key:
//! one key property's value as a string (integers in decimal, booleans
//! `true`/`false`, dates as their stored epoch numbers), or for a composite
//! key a compact JSON array of those strings. Everything else gets a ULID.

use std::borrow::Cow;

use super::cell::Cell;
use super::columns::Val;

/// The canonical spelling of one key value.
pub fn key_part(v: &Val) -> Option<String> {
    Some(match v {
        Val::Str(s) => s.to_string(),
        Val::Int(i) => i.to_string(),
        Val::UInt(u) => u.to_string(),
        Val::Bool(b) => b.to_string(),
        Val::Date(d) => d.to_string(),
        Val::DateTime(ms) => ms.to_string(),
        _ => return None,
    })
}

/// The id of a node from its key values, in key declaration order.
pub fn derive_id(parts: &[String]) -> String {
    match parts {
        [one] => one.clone(),
        many => serde_json::to_string(many).expect("strings serialise"),
    }
}

/// A row's id, the one rule for loads and inserts: a keyed row's id is
/// derived from its key (an id given beside the key must be that one); an
/// unkeyed row keeps the id it was given. `Ok(None)`: unkeyed and none
/// given, so the caller generates one. `Err`: the derived id the given one
/// contradicts.
pub fn row_id<'g>(
    key: &[usize],
    vals: &[Val],
    given: Option<Cow<'g, str>>,
) -> Result<Option<Cow<'g, str>>, String> {
    if key.is_empty() {
        return Ok(given);
    }
    let parts: Vec<String> = key
        .iter()
        .map(|&i| key_part(&vals[i]).unwrap_or_default())
        .collect();
    let derived = derive_id(&parts);
    match given {
        Some(g) if *g != *derived => Err(derived),
        _ => Ok(Some(Cow::Owned(derived))),
    }
}

/// An edge endpoint as written in JSONL (`"from"`/`"to"`): a string id, an
/// integer key, or a composite key written as a list. A string borrows.
pub fn endpoint_id<'c>(c: &'c Cell) -> Option<Cow<'c, str>> {
    Some(match c {
        Cell::Str(s) => Cow::Borrowed(s.as_ref()),
        Cell::Int(i) => Cow::Owned(i.to_string()),
        Cell::UInt(u) => Cow::Owned(u.to_string()),
        Cell::Bool(b) => Cow::Owned(b.to_string()),
        Cell::List(items) => {
            let parts: Option<Vec<String>> = items
                .iter()
                .map(|c| match c {
                    Cell::List(_) | Cell::Null | Cell::Float(_) => None,
                    other => endpoint_id(other).map(Cow::into_owned),
                })
                .collect();
            Cow::Owned(derive_id(&parts?))
        }
        Cell::Null | Cell::Float(_) => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_and_composite_keys_spell_canonically() {
        assert_eq!(derive_id(&["alice".into()]), "alice");
        assert_eq!(derive_id(&["acme".into(), "3".into()]), r#"["acme","3"]"#);
        assert_eq!(key_part(&Val::Int(-4)).unwrap(), "-4");
        assert_eq!(key_part(&Val::Date(19000)).unwrap(), "19000");
        assert_eq!(
            endpoint_id(&Cell::List(vec![Cell::Str("acme".into()), Cell::Int(3)])).unwrap(),
            r#"["acme","3"]"#
        );
        assert!(endpoint_id(&Cell::Float(1.5)).is_none());
    }

    #[test]
    fn a_keyed_row_takes_its_id_from_the_key() {
        let vals = [Val::Str("alice".into()), Val::Int(3)];
        assert_eq!(row_id(&[0], &vals, None).unwrap().as_deref(), Some("alice"));
        assert_eq!(
            row_id(&[0], &vals, Some("alice".into()))
                .unwrap()
                .as_deref(),
            Some("alice")
        );
        assert_eq!(
            row_id(&[0], &vals, Some("bob".into())).unwrap_err(),
            "alice"
        );
        assert_eq!(
            row_id(&[0, 1], &vals, None).unwrap().as_deref(),
            Some(r#"["alice","3"]"#)
        );
        assert_eq!(
            row_id(&[], &vals, Some("x".into())).unwrap().as_deref(),
            Some("x")
        );
        assert_eq!(row_id(&[], &vals, None).unwrap(), None);
    }
}
