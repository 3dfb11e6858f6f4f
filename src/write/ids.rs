//! Node and edge ids. A keyed node's id is the canonical spelling of its key:
//! one key property's value as a string (integers in decimal, booleans
//! `true`/`false`, dates as their stored epoch numbers), or for a composite
//! key a compact JSON array of those strings. Everything else gets a ULID.

use std::borrow::Cow;

use crate::compiler::value::Value;

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
#[inline]
pub fn row_id<'g>(
    key: &[usize],
    vals: &[Value],
    given: Option<Cow<'g, str>>,
) -> Result<Option<Cow<'g, str>>, String> {
    match key.is_empty() {
        true => Ok(given),
        false => keyed_id(key, vals, given),
    }
}

fn keyed_id<'g>(
    key: &[usize],
    vals: &[Value],
    given: Option<Cow<'g, str>>,
) -> Result<Option<Cow<'g, str>>, String> {
    let parts: Vec<String> = key
        .iter()
        .map(|&i| vals[i].key_part().unwrap_or_default())
        .collect();
    let derived = derive_id(&parts);
    match given {
        Some(g) if *g != *derived => Err(derived),
        _ => Ok(Some(Cow::Owned(derived))),
    }
}

/// An edge endpoint as written in JSONL (`"from"`/`"to"`): a string id, an
/// integer key, or a composite key written as a list. A string borrows.
pub fn endpoint_id<'c>(c: &'c Value) -> Option<Cow<'c, str>> {
    match c {
        Value::Str(s) => Some(Cow::Borrowed(s.as_ref())),
        Value::List(items) => {
            let parts: Option<Vec<String>> = items.iter().map(Value::key_part).collect();
            Some(Cow::Owned(derive_id(&parts?)))
        }
        other => other.key_part().map(Cow::Owned),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_and_composite_keys_spell_canonically() {
        assert_eq!(derive_id(&["alice".into()]), "alice");
        assert_eq!(derive_id(&["acme".into(), "3".into()]), r#"["acme","3"]"#);
        assert_eq!(Value::Int(-4).key_part().unwrap(), "-4");
        assert_eq!(Value::Date(19000).key_part().unwrap(), "19000");
        assert_eq!(
            endpoint_id(&Value::List(vec![Value::Str("acme".into()), Value::Int(3)])).unwrap(),
            r#"["acme","3"]"#
        );
        assert!(endpoint_id(&Value::Float(1.5)).is_none());
    }

    #[test]
    fn a_keyed_row_takes_its_id_from_the_key() {
        let vals = [Value::Str("alice".into()), Value::Int(3)];
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
