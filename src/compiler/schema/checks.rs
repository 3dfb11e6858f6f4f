//! Declarations resolved: names, interfaces and what each node inherits,
//! properties and their ids, property annotations turned into type
//! constraints.

use std::collections::{BTreeSet, HashSet};

use super::super::catalog::*;
use super::super::lexer::Pos;
use super::constraints::apply_constraints;
use super::syntax::{RawDecl, RawDeclKind, RawProp};
use crate::error::{OmniError, Result};

fn at(pos: Pos) -> String {
    format!("line {}, column {}", pos.line, pos.col)
}

pub(super) fn err(pos: Pos, msg: impl AsRef<str>) -> OmniError {
    OmniError::schema(format!("{}: {}", at(pos), msg.as_ref()))
}

fn str_arg(a: &Annotation, i: usize) -> Option<&str> {
    match a.args.get(i) {
        Some(Literal::Str(s)) | Some(Literal::Ident(s)) => Some(s),
        _ => None,
    }
}

pub(super) fn parse_range(lit: Option<&Literal>) -> Option<(Option<Num>, Option<Num>)> {
    match lit {
        Some(Literal::Range(lo, hi)) => Some((*lo, *hi)),
        _ => None,
    }
}

const KNOWN_PROP_ANNOTATIONS: &[&str] = &["key", "unique", "index", "range", "check", "embed"];

/// A property's annotation as the type constraint it stands for
/// (`email: String @unique` is `@unique(email)`); `None` for the ones that
/// stay on the property (`@embed`).
fn as_constraint(prop: &str, a: &Annotation) -> Option<Annotation> {
    let mut args = vec![Literal::Ident(prop.to_string())];
    match a.name.as_str() {
        "key" | "unique" | "index" => {}
        "range" | "check" => args.extend(a.args.clone()),
        _ => return None,
    }
    Some(Annotation {
        name: a.name.clone(),
        args,
        kwargs: vec![],
    })
}

/// `@card(min..max)`: counts, max (if any) not below min.
fn cardinality(a: &Annotation, pos: Pos) -> Result<Cardinality> {
    let Some((lo, hi)) = parse_range(a.args.first()) else {
        return Err(err(pos, "@card takes a range such as 0..1, 1.. or 0..*"));
    };
    let as_count = |n: Option<Num>| -> Result<Option<u64>> {
        match n {
            None => Ok(None),
            Some(Num::Int(i)) if i >= 0 => Ok(Some(i as u64)),
            Some(other) => Err(err(pos, format!("@card bounds are counts, not {other}"))),
        }
    };
    let min = as_count(lo)?.unwrap_or(0);
    let max = as_count(hi)?;
    if let Some(m) = max
        && m < min
    {
        return Err(err(pos, format!("@card({min}..{m}) has max below min")));
    }
    Ok(Cardinality { min, max })
}

/// What a node or edge declaration is before its own body: its kind, and
/// the properties and constraints it inherits from its interfaces.
struct Shape {
    kind: TypeKind,
    inherited: Vec<PropDef>,
    constraints: Vec<(Annotation, Pos)>,
    is_edge: bool,
}

fn kind_of(
    d: &RawDecl,
    interfaces: &[InterfaceDef],
    iface_constraints: &[(String, Vec<(Annotation, Pos)>)],
    node_names: &BTreeSet<&str>,
) -> Result<Shape> {
    Ok(match &d.kind {
        RawDeclKind::Interface => unreachable!("interfaces are not types"),
        RawDeclKind::Node { implements } => {
            let mut inherited: Vec<PropDef> = Vec::new();
            let mut constraints = Vec::new();
            for (iname, ipos) in implements {
                let Some(iface) = interfaces.iter().find(|i| &i.name == iname) else {
                    return Err(err(
                        *ipos,
                        format!("node {} implements unknown interface '{iname}'", d.name),
                    ));
                };
                for p in &iface.properties {
                    if inherited.iter().any(|q| q.name == p.name) {
                        return Err(err(
                            *ipos,
                            format!(
                                "property '{}' comes from two interfaces of node {}",
                                p.name, d.name
                            ),
                        ));
                    }
                    inherited.push(p.clone());
                }
                if let Some((_, c)) = iface_constraints.iter().find(|(n, _)| n == iname) {
                    constraints.extend(c.clone());
                }
            }
            Shape {
                kind: TypeKind::Node,
                inherited,
                constraints,
                is_edge: false,
            }
        }
        RawDeclKind::Edge { from, to } => {
            for (n, p) in [from, to] {
                if !node_names.contains(n.as_str()) {
                    return Err(err(
                        *p,
                        format!("edge {} refers to unknown node type '{n}'", d.name),
                    ));
                }
            }
            Shape {
                kind: TypeKind::Edge {
                    from: from.0.clone(),
                    to: to.0.clone(),
                    card: Cardinality::default(),
                },
                inherited: Vec::new(),
                constraints: Vec::new(),
                is_edge: true,
            }
        }
    })
}

/// Type names: unique across all declarations, upper-case.
fn check_type_names(decls: &[RawDecl]) -> Result<()> {
    let mut seen = HashSet::new();
    for d in decls {
        if !d
            .name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_uppercase())
        {
            return Err(err(
                d.pos,
                format!(
                    "type name '{}' must start with an upper-case letter",
                    d.name
                ),
            ));
        }
        if !seen.insert(d.name.clone()) {
            return Err(err(d.pos, format!("type '{}' is declared twice", d.name)));
        }
    }
    Ok(())
}

pub(super) fn check(decls: Vec<RawDecl>) -> Result<Catalog> {
    check_type_names(&decls)?;
    let mut interfaces: Vec<InterfaceDef> = Vec::new();
    let mut iface_constraints: Vec<(String, Vec<(Annotation, Pos)>)> = Vec::new();
    for d in decls
        .iter()
        .filter(|d| matches!(d.kind, RawDeclKind::Interface))
    {
        let props = check_props(&d.name, &d.props, &[])?;
        interfaces.push(InterfaceDef {
            name: d.name.clone(),
            properties: props,
        });
        iface_constraints.push((d.name.clone(), d.constraints.clone()));
    }

    let node_names: BTreeSet<&str> = decls
        .iter()
        .filter(|d| matches!(d.kind, RawDeclKind::Node { .. }))
        .map(|d| d.name.as_str())
        .collect();

    let mut types = Vec::new();
    let mut next_id = 1u32;
    for d in &decls {
        if matches!(d.kind, RawDeclKind::Interface) {
            continue;
        }
        let Shape {
            kind,
            inherited,
            mut constraints,
            is_edge,
        } = kind_of(d, &interfaces, &iface_constraints, &node_names)?;
        let mut props = check_props(&d.name, &d.props, &inherited)?;
        let mut all_props = inherited.clone();
        all_props.append(&mut props);
        for (i, p) in all_props.iter_mut().enumerate() {
            p.id = i as u32 + 1;
        }
        let mut t = TypeDef {
            id: next_id,
            name: d.name.clone(),
            kind,
            implements: match &d.kind {
                RawDeclKind::Node { implements } => {
                    implements.iter().map(|(n, _)| n.clone()).collect()
                }
                _ => Vec::new(),
            },
            properties: all_props,
            key: Vec::new(),
            uniques: Vec::new(),
            indexes: Vec::new(),
            ranges: Vec::new(),
            checks: Vec::new(),
            annotations: Vec::new(),
            next_prop_id: 0,
        };
        t.next_prop_id = t.properties.len() as u32 + 1;
        next_id += 1;

        declaration_annotations(&mut t, d)?;
        constraints.extend(property_constraints(d, &decls));
        constraints.extend(d.constraints.clone());
        apply_constraints(&mut t, &constraints, is_edge)?;
        types.push(t);
    }

    Ok(Catalog {
        types,
        interfaces,
        next_type_id: next_id,
    })
}

/// Declaration annotations: @card on edges, the rest are kept.
fn declaration_annotations(t: &mut TypeDef, d: &RawDecl) -> Result<()> {
    for (a, pos) in &d.annotations {
        if a.name == "card" {
            let TypeKind::Edge { card, .. } = &mut t.kind else {
                return Err(err(
                    *pos,
                    format!("@card is only for edges, not node {}", d.name),
                ));
            };
            *card = cardinality(a, *pos)?;
        } else {
            t.annotations.push(a.clone());
        }
    }
    Ok(())
}

/// Property-level constraints as type constraints: the node's own, then
/// its interfaces' (e.g. `name: String @key`).
fn property_constraints(d: &RawDecl, decls: &[RawDecl]) -> Vec<(Annotation, Pos)> {
    let mut owned: Vec<&RawProp> = d.props.iter().collect();
    if let RawDeclKind::Node { implements } = &d.kind {
        for (iname, _) in implements {
            if let Some(idecl) = decls.iter().find(|x| &x.name == iname) {
                owned.extend(&idecl.props);
            }
        }
    }
    let mut out = Vec::new();
    for rp in owned {
        for (a, pos) in &rp.annotations {
            if let Some(c) = as_constraint(&rp.name, a) {
                out.push((c, *pos));
            }
        }
    }
    out
}

fn check_props(owner: &str, raw: &[RawProp], inherited: &[PropDef]) -> Result<Vec<PropDef>> {
    let mut out: Vec<PropDef> = Vec::new();
    for rp in raw {
        if RESERVED.contains(&rp.name.as_str()) {
            return Err(err(
                rp.pos,
                format!("property name '{}' of {owner} is reserved", rp.name),
            ));
        }
        if !rp
            .name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase())
        {
            return Err(err(
                rp.pos,
                format!(
                    "property name '{}' of {owner} must start with a lower-case letter",
                    rp.name
                ),
            ));
        }
        if out.iter().chain(inherited).any(|p| p.name == rp.name) {
            return Err(err(
                rp.pos,
                format!("property '{}' is declared twice in {owner}", rp.name),
            ));
        }
        let mut embed = None;
        let mut annotations = Vec::new();
        for (a, pos) in &rp.annotations {
            if rp.ty == PropType::Blob
                && matches!(a.name.as_str(), "key" | "unique" | "index" | "embed")
            {
                return Err(err(
                    *pos,
                    format!("Blob property {owner}.{} cannot carry @{}", rp.name, a.name),
                ));
            }
            if a.name == "embed" {
                embed = Some(embed_spec(owner, rp, a, *pos)?);
            }
            if !KNOWN_PROP_ANNOTATIONS.contains(&a.name.as_str()) {
                annotations.push(a.clone());
            }
        }
        out.push(PropDef {
            id: 0,
            name: rp.name.clone(),
            ty: rp.ty.clone(),
            nullable: rp.nullable,
            embed,
            annotations,
        });
    }
    check_embed_sources(owner, raw, &out, inherited)?;
    Ok(out)
}

/// `@embed("source", model: "...")` on a Vector property.
fn embed_spec(owner: &str, rp: &RawProp, a: &Annotation, pos: Pos) -> Result<EmbedSpec> {
    let Some(source) = str_arg(a, 0) else {
        return Err(err(
            pos,
            "@embed names its source property: @embed(\"bio\")",
        ));
    };
    if !matches!(rp.ty, PropType::Vector(_)) {
        return Err(err(
            pos,
            format!(
                "@embed is only for Vector properties, not {owner}.{}",
                rp.name
            ),
        ));
    }
    let model = a
        .kwargs
        .iter()
        .find(|(k, _)| k == "model")
        .and_then(|(_, v)| match v {
            Literal::Str(s) => Some(s.clone()),
            _ => None,
        });
    Ok(EmbedSpec {
        source: source.to_string(),
        model,
    })
}

/// @embed sources are String properties of the same owner.
fn check_embed_sources(
    owner: &str,
    raw: &[RawProp],
    out: &[PropDef],
    inherited: &[PropDef],
) -> Result<()> {
    for p in out {
        if let Some(e) = &p.embed {
            let src = out.iter().chain(inherited).find(|q| q.name == e.source);
            if !matches!(src, Some(q) if q.ty == PropType::String) {
                let pos = raw
                    .iter()
                    .find(|r| r.name == p.name)
                    .map(|r| r.pos)
                    .unwrap_or_default();
                return Err(err(
                    pos,
                    format!(
                        "@embed source '{}' of {owner}.{} must be a String property of {owner}",
                        e.source, p.name
                    ),
                ));
            }
        }
    }
    Ok(())
}
