//! The annotations of a type applied: `@key`, `@unique`, `@index`,
//! `@range`, `@check`, `@embed` and their rules per property type.

use super::super::catalog::*;
use super::super::lexer::Pos;
use super::checks::{err, parse_range};
use crate::error::Result;

fn prop_list(t: &TypeDef, a: &Annotation, pos: Pos, skip_last: usize) -> Result<Vec<String>> {
    let n = a.args.len().saturating_sub(skip_last);
    if n == 0 {
        return Err(err(pos, format!("@{} names at least one property", a.name)));
    }
    let mut out = Vec::new();
    for lit in &a.args[..n] {
        let Literal::Ident(name) = lit else {
            return Err(err(
                pos,
                format!("@{} takes property names, not {lit:?}", a.name),
            ));
        };
        let Some(p) = t.property(name) else {
            return Err(err(
                pos,
                format!("@{} on {} names unknown property '{name}'", a.name, t.name),
            ));
        };
        if p.ty == PropType::Blob && matches!(a.name.as_str(), "key" | "unique" | "index") {
            return Err(err(
                pos,
                format!("Blob property {}.{name} cannot carry @{}", t.name, a.name),
            ));
        }
        if out.contains(name) {
            return Err(err(pos, format!("@{} lists '{name}' twice", a.name)));
        }
        out.push(name.clone());
    }
    Ok(out)
}

pub(super) fn apply_constraints(
    t: &mut TypeDef,
    constraints: &[(Annotation, Pos)],
    is_edge: bool,
) -> Result<()> {
    for (a, pos) in constraints {
        let pos = *pos;
        if is_edge && !matches!(a.name.as_str(), "unique" | "index") {
            return Err(err(
                pos,
                format!(
                    "edge {} allows only @unique and @index in its body, not @{}",
                    t.name, a.name
                ),
            ));
        }
        match a.name.as_str() {
            "key" => key(t, a, pos)?,
            "unique" => {
                let props = prop_list(t, a, pos, 0)?;
                if !t.uniques.contains(&props) {
                    t.uniques.push(props);
                }
            }
            "index" => {
                let props = prop_list(t, a, pos, 0)?;
                if !t.indexes.contains(&props) {
                    t.indexes.push(props);
                }
            }
            "range" => range(t, a, pos)?,
            "check" => check(t, a, pos)?,
            _ => t.annotations.push(a.clone()),
        }
    }
    Ok(())
}

/// `@key(a, ...)`: one per node (repeating the same one is harmless), of
/// required properties whose type can spell an id.
fn key(t: &mut TypeDef, a: &Annotation, pos: Pos) -> Result<()> {
    let props = prop_list(t, a, pos, 0)?;
    if !t.key.is_empty() {
        if t.key == props {
            return Ok(());
        }
        return Err(err(pos, format!("node {} has more than one @key", t.name)));
    }
    for name in &props {
        let p = t.property(name).expect("checked");
        if p.nullable {
            return Err(err(
                pos,
                format!("key property {}.{name} cannot be nullable", t.name),
            ));
        }
        if !p.ty.can_be_key() {
            return Err(err(
                pos,
                format!(
                    "key property {}.{name} has type {}, which cannot form an id",
                    t.name,
                    p.ty.describe()
                ),
            ));
        }
    }
    t.key = props;
    Ok(())
}

/// `@range(prop, lo..hi)` on one numeric property, with at least one bound.
fn range(t: &mut TypeDef, a: &Annotation, pos: Pos) -> Result<()> {
    let props = prop_list(t, a, pos, 1)?;
    let [name] = props.as_slice() else {
        return Err(err(
            pos,
            "@range takes one property and a range: @range(age, 0..150)",
        ));
    };
    let Some((min, max)) = parse_range(a.args.last()) else {
        return Err(err(pos, "@range needs a range such as 0..150, 0.. or ..10"));
    };
    let p = t.property(name).expect("checked");
    if !p.ty.is_numeric() {
        return Err(err(
            pos,
            format!(
                "@range on {}.{name} needs a numeric property, not {}",
                t.name,
                p.ty.describe()
            ),
        ));
    }
    if min.is_none() && max.is_none() {
        return Err(err(pos, "@range needs at least one bound"));
    }
    if let (Some(lo), Some(hi)) = (min, max)
        && lo.as_f64() > hi.as_f64()
    {
        return Err(err(
            pos,
            format!("@range({name}, {lo}..{hi}) has min above max"),
        ));
    }
    t.ranges.push(RangeConstraint {
        property: name.clone(),
        min,
        max,
    });
    Ok(())
}

/// `@check(prop, "pattern")` on one String property, with a valid regex.
fn check(t: &mut TypeDef, a: &Annotation, pos: Pos) -> Result<()> {
    let props = prop_list(t, a, pos, 1)?;
    let [name] = props.as_slice() else {
        return Err(err(
            pos,
            "@check takes one property and a pattern: @check(email, \"^.+$\")",
        ));
    };
    let Some(Literal::Str(pattern)) = a.args.last() else {
        return Err(err(pos, "@check needs a pattern string"));
    };
    let p = t.property(name).expect("checked");
    if p.ty != PropType::String {
        return Err(err(
            pos,
            format!("@check on {}.{name} needs a String property", t.name),
        ));
    }
    if let Err(e) = regex::Regex::new(pattern) {
        return Err(err(
            pos,
            format!("@check pattern for {}.{name} is invalid: {e}", t.name),
        ));
    }
    t.checks.push(CheckConstraint {
        property: name.clone(),
        pattern: pattern.clone(),
    });
    Ok(())
}
