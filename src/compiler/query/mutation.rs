//! The mutation checker: a parsed `insert` / `update` / `delete` query to a
//! typed [`MutationPlan`], before any I/O. Parameters and filters go through
//! the read checker's rules ([`declare_params`], [`Checker::pred`]), so a
//! filter is typed, coerced and refused exactly as the same filter in a
//! read query is.

use std::collections::BTreeMap;

use super::ast::{Assignment, Body, Expr, Predicate, QueryDecl, Statement};
use super::check::{Checker, Code, declare_params, type_error};
use super::ir::{MutStmt, MutationPlan, Pred, ValExpr};
use crate::compiler::catalog::{Catalog, ID, PropType, TypeDef};
use crate::compiler::lexer::Pos;
use crate::error::{OmniError, Result};

/// The name a statement's target rows are bound to: no query can spell it,
/// so it never shadows a parameter.
const ROWS: &str = " rows";

/// Check a mutation against the catalog.
pub fn check(catalog: &Catalog, q: &QueryDecl) -> Result<MutationPlan> {
    let Body::Mutation(stmts) = &q.body else {
        return Err(type_error(
            Code::WrongKind,
            q.pos,
            format!("'{}' is a read query; run it with query", q.name),
        ));
    };
    let params = declare_params(q)?;
    let constructive = stmts
        .iter()
        .any(|s| matches!(s, Statement::Insert { .. } | Statement::Update { .. }));
    let destructive = stmts.iter().any(|s| matches!(s, Statement::Delete { .. }));
    if constructive && destructive {
        return Err(OmniError::BadRequest(format!(
            "mutation '{}' mixes inserts/updates and deletes; split into separate mutations: (1) inserts and updates, then (2) deletes",
            q.name
        )));
    }
    let mut out = Vec::new();
    for s in stmts {
        out.push(match s {
            Statement::Insert {
                type_name,
                values,
                pos,
            } => insert(catalog, &params, type_name, values, *pos)?,
            Statement::Update {
                type_name,
                set,
                filter,
                pos,
            } => update(catalog, &params, type_name, set, filter.as_ref(), *pos)?,
            Statement::Delete {
                type_name,
                filter,
                pos,
            } => {
                let (t, c) = target(catalog, &params, type_name, *pos)?;
                MutStmt::Delete {
                    ty: t.name.clone(),
                    filter: row_filter(&c, filter)?,
                }
            }
        });
    }
    // Updates and deletes read what they change.
    let strict = out.iter().any(|s| !matches!(s, MutStmt::Insert { .. }));
    Ok(MutationPlan {
        name: q.name.clone(),
        params: params.into_iter().map(|(n, (t, o))| (n, t, o)).collect(),
        stmts: out,
        strict,
    })
}

type Params = BTreeMap<String, (PropType, bool)>;

/// `insert Type { prop: value, ... }`.
fn insert(
    catalog: &Catalog,
    params: &Params,
    type_name: &str,
    values: &[Assignment],
    pos: Pos,
) -> Result<MutStmt> {
    let (t, c) = target(catalog, params, type_name, pos)?;
    let mut map = BTreeMap::new();
    for a in values {
        settable(t, &a.prop, a.pos)?;
        if map.insert(a.prop.clone(), value(&c, &a.value)?).is_some() {
            return Err(type_error(
                Code::UnknownProperty,
                a.pos,
                format!("'{}' is given twice", a.prop),
            ));
        }
    }
    if t.is_edge() && !(map.contains_key("from") && map.contains_key("to")) {
        return Err(type_error(
            Code::UnknownProperty,
            pos,
            format!("inserting a {} edge needs from: and to:", t.name),
        ));
    }
    Ok(MutStmt::Insert {
        ty: t.name.clone(),
        values: map,
    })
}

/// `update Type set { prop: value, ... } [where prop op value]`.
fn update(
    catalog: &Catalog,
    params: &Params,
    type_name: &str,
    set: &[Assignment],
    filter: Option<&Predicate>,
    pos: Pos,
) -> Result<MutStmt> {
    let (t, c) = target(catalog, params, type_name, pos)?;
    let mut map = BTreeMap::new();
    for a in set {
        settable(t, &a.prop, a.pos)?;
        if a.prop == ID || a.prop == "from" || a.prop == "to" || t.key.contains(&a.prop) {
            return Err(type_error(
                Code::IdentityUpdate,
                a.pos,
                format!(
                    "{}.{} identifies the row and cannot be changed by update",
                    t.name, a.prop
                ),
            ));
        }
        map.insert(a.prop.clone(), value(&c, &a.value)?);
    }
    Ok(MutStmt::Update {
        ty: t.name.clone(),
        set: map,
        filter: filter.map(|f| row_filter(&c, f)).transpose()?,
    })
}

/// A statement's type, and a checker with its rows bound as variable 0.
fn target<'c>(
    catalog: &'c Catalog,
    params: &Params,
    name: &str,
    pos: Pos,
) -> Result<(&'c TypeDef, Checker<'c>)> {
    let t = catalog.get(name).ok_or_else(|| {
        type_error(
            Code::UnknownType,
            pos,
            format!("{name} is not a type of the schema"),
        )
    })?;
    let mut c = Checker::new(catalog, params.clone());
    c.bind_rows(ROWS, t);
    Ok((t, c))
}

/// A property an insert or update may name.
fn settable(t: &TypeDef, p: &str, pos: Pos) -> Result<()> {
    if t.property(p).is_some() || p == ID || (t.is_edge() && (p == "from" || p == "to")) {
        Ok(())
    } else {
        Err(type_error(
            Code::UnknownProperty,
            pos,
            format!("{} has no property '{p}'", t.name),
        ))
    }
}

/// A value written by a statement: a literal, a parameter or `now()`.
fn value(c: &Checker, e: &Expr) -> Result<ValExpr> {
    let (v, _) = c.value(e)?;
    match v {
        ValExpr::Const(_) | ValExpr::Param { .. } | ValExpr::Now => Ok(v),
        ValExpr::Prop { .. } | ValExpr::Id { .. } => Err(type_error(
            Code::TypeMismatch,
            e.pos(),
            "expected a literal, a $parameter or now()",
        )),
    }
}

/// `where prop op value`, typed as the same comparison in a read query.
fn row_filter(c: &Checker, f: &Predicate) -> Result<Pred> {
    let row = Expr::Prop {
        var: ROWS.to_string(),
        prop: f.prop.clone(),
        pos: f.pos,
    };
    c.pred(&row, f.op, &f.value, f.pos)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compiler::query::parser::parse;
    use crate::compiler::schema::compile;

    fn code(src: &str) -> &'static str {
        let cat = compile("node Person { name: String @key\n age: I32?\n born: Date? }").unwrap();
        let file = parse(src).unwrap();
        match check(&cat, &file.queries[0]) {
            Err(OmniError::Type { code, .. }) => code,
            other => panic!("expected a type error, got {other:?}"),
        }
    }

    #[test]
    fn filters_are_typed_as_in_reads() {
        assert_eq!(
            code(r#"query q() { update Person set { age: 3 } where age = "old" }"#),
            "Q009"
        );
        assert_eq!(
            code(r#"query q() { delete Person where name > 3 }"#),
            "Q009"
        );
        assert_eq!(
            code(r#"query q() { delete Person where born = "not a date" }"#),
            "Q009"
        );
        assert_eq!(
            code(r#"query q($a: String) { delete Person where age = $a }"#),
            "Q009"
        );
        assert_eq!(
            code(r#"query q() { delete Person where height = 3 }"#),
            "Q002"
        );
        assert_eq!(
            code(r#"query q() { delete Person where age = $x }"#),
            "Q010"
        );
    }

    #[test]
    fn a_parameter_declared_twice_is_refused() {
        assert_eq!(
            code(r#"query q($n: String, $n: I32) { insert Person { name: $n } }"#),
            "Q010"
        );
    }

    #[test]
    fn a_date_string_in_a_filter_becomes_a_date() {
        let cat = compile("node Person { name: String @key\n born: Date? }").unwrap();
        let file = parse(r#"query q() { delete Person where born < "2020-01-02" }"#).unwrap();
        let plan = check(&cat, &file.queries[0]).unwrap();
        match &plan.stmts[0] {
            MutStmt::Delete { filter, .. } => assert_eq!(
                filter.right,
                ValExpr::Const(crate::compiler::value::Value::Date(18263))
            ),
            other => panic!("{other:?}"),
        }
    }
}
