//! Schema evolution, pure: a new schema's declarations matched to the
//! accepted catalog by stable identity (the same name, or the old name
//! `@rename_from` gives), the ids carried over, and the steps the change
//! takes with what each asks of existing data. What existing data cannot
//! follow (a type change, a key change, new endpoints) is refused here,
//! with the reason, before anything is read.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::super::catalog::*;
use super::super::value::{self, Value};
use super::{checks, syntax};
use crate::error::{OmniError, Result};

/// The annotation that names a type's or property's earlier name.
pub const RENAME_FROM: &str = "rename_from";
/// The annotation whose literal fills existing rows of an added required property.
pub const DEFAULT: &str = "default";

/// What one step does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepKind {
    AddType,
    DropType,
    RenameType,
    AddProperty,
    DropProperty,
    RenameProperty,
    AddEnumValues,
    RemoveEnumValues,
    MakeNullable,
    MakeRequired,
    AddIndex,
    DropIndex,
    AddConstraint,
    DropConstraint,
    ChangeAnnotations,
}

/// What a step asks of the data, before the storage side counts rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Work {
    /// The catalog (and at most each table's schema) changes; no row is read or written.
    Metadata,
    /// Every existing row is read to check it (nothing is written).
    Scan,
    /// A column is written for every existing row.
    Rewrite,
    /// An empty table is made.
    Create,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub kind: StepKind,
    /// The type's name in the new schema (its old name for a drop).
    #[serde(rename = "type")]
    pub type_name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub property: Option<String>,
    pub detail: String,
    pub work: Work,
}

/// Where a checked value comes from while the change is validated: a
/// column as the table stores it now, or a property this change adds
/// (every existing row then holds its default, or null).
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    Stored(String),
    Added(Value<'static>),
}

/// A rule existing rows must satisfy before the change is accepted.
#[derive(Clone, Debug, PartialEq)]
pub enum Rule {
    /// Each value of these properties passes the new type's property
    /// checks (required, enum values, `@range`, `@check`).
    Values(Vec<String>),
    Unique(Vec<String>),
    Card(Cardinality),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Validation {
    /// The type in the new catalog (its rules are checked).
    pub type_id: u32,
    /// The type's table key now (before the change renames it).
    pub table: String,
    /// New property name -> where its values come from now.
    pub columns: BTreeMap<String, Source>,
    pub rule: Rule,
}

/// A property a table gains: every existing row gets `fill` (null for a
/// nullable property).
#[derive(Clone, Debug, PartialEq)]
pub struct Added {
    pub prop: PropDef,
    pub fill: Value<'static>,
}

/// The change to one type's table, on every branch.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TableChange {
    pub type_id: u32,
    /// The table key now.
    pub table: String,
    pub added: Vec<Added>,
    /// (column now, new name).
    pub renamed: Vec<(String, String)>,
    /// Columns now.
    pub dropped: Vec<String>,
}

impl TableChange {
    pub fn rewrites(&self) -> bool {
        self.added.iter().any(|a| a.fill != Value::Null)
    }
}

/// Everything a schema change does, computed without data.
#[derive(Clone, Debug)]
pub struct Evolution {
    pub catalog: Catalog,
    pub steps: Vec<Step>,
    pub tables: Vec<TableChange>,
    pub validations: Vec<Validation>,
    /// Types the change adds (each needs an empty table).
    pub created: Vec<u32>,
}

impl Evolution {
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }
}

fn refuse(msg: impl Into<String>) -> OmniError {
    OmniError::schema(msg.into())
}

fn annotation<'a>(anns: &'a [Annotation], name: &str) -> Option<&'a Annotation> {
    anns.iter().find(|a| a.name == name)
}

fn rename_source(anns: &[Annotation], what: &str) -> Result<Option<String>> {
    let Some(a) = annotation(anns, RENAME_FROM) else {
        return Ok(None);
    };
    match a.args.as_slice() {
        [Literal::Str(s)] | [Literal::Ident(s)] => Ok(Some(s.clone())),
        _ => Err(refuse(format!(
            "@rename_from on {what} takes one name, as @rename_from(\"old_name\")"
        ))),
    }
}

/// Annotations that say what a change is (`@rename_from`, `@default`)
/// left out: a difference in the others is a change of annotations.
fn plain(anns: &[Annotation]) -> Vec<&Annotation> {
    anns.iter()
        .filter(|a| a.name != RENAME_FROM && a.name != DEFAULT)
        .collect()
}

/// The new schema's `@default` of a property, as a value of its type.
fn default_of(t: &str, p: &PropDef) -> Result<Option<Value<'static>>> {
    let Some(a) = annotation(&p.annotations, DEFAULT) else {
        return Ok(None);
    };
    let lit = match a.args.as_slice() {
        [l] => l,
        _ => {
            return Err(refuse(format!(
                "@default on {t}.{} takes one literal",
                p.name
            )));
        }
    };
    let raw = match lit {
        Literal::Str(s) | Literal::Ident(s) => Value::Str(s.clone().into()),
        Literal::Int(i) => Value::Int(*i),
        Literal::Float(f) => Value::Float(*f),
        Literal::Bool(b) => Value::Bool(*b),
        Literal::Range(..) => {
            return Err(refuse(format!(
                "@default on {t}.{} must be a single value, not a range",
                p.name
            )));
        }
    };
    if !p.ty.is_scalar() {
        return Err(refuse(format!(
            "@default on {t}.{}: a {} property takes no default",
            p.name,
            p.ty.describe()
        )));
    }
    let v = value::typed(&p.ty, raw).map_err(|why| {
        refuse(format!(
            "@default({}) does not fit {t}.{} ({}): {why}",
            show(lit),
            p.name,
            p.ty.describe()
        ))
    })?;
    Ok(Some(v.into_owned()))
}

fn show(l: &Literal) -> String {
    match l {
        Literal::Str(s) => format!("{s:?}"),
        Literal::Ident(s) => s.clone(),
        Literal::Int(i) => i.to_string(),
        Literal::Float(f) => f.to_string(),
        Literal::Bool(b) => b.to_string(),
        Literal::Range(lo, hi) => format!(
            "{}..{}",
            lo.map(|n| n.to_string()).unwrap_or_default(),
            hi.map(|n| n.to_string()).unwrap_or_default()
        ),
    }
}

/// Plan the change from `old` to the schema `src`.
pub fn evolve(old: &Catalog, src: &str) -> Result<Evolution> {
    let decls = syntax::Parser::new(src)?.parse_all()?;
    refuse_dropped_endpoints(old, &decls)?;
    let new = checks::check(decls)?;
    Planner::new(old, new)?.plan()
}

/// A node type the new schema leaves out while an edge it keeps still
/// names it: said as the drop it is, not as an unknown name.
fn refuse_dropped_endpoints(old: &Catalog, decls: &[syntax::RawDecl]) -> Result<()> {
    use syntax::RawDeclKind;
    let nodes: BTreeSet<&str> = decls
        .iter()
        .filter(|d| matches!(d.kind, RawDeclKind::Node { .. }))
        .map(|d| d.name.as_str())
        .collect();
    for d in decls {
        if let RawDeclKind::Edge { from, to } = &d.kind {
            for (n, _) in [from, to] {
                if !nodes.contains(n.as_str()) && old.node(n).is_some() {
                    return Err(refuse(format!(
                        "node type {n} cannot be dropped: edge type {} still references it",
                        d.name
                    )));
                }
            }
        }
    }
    Ok(())
}

struct Planner<'o> {
    old: &'o Catalog,
    new: Catalog,
    /// New type index -> old type (matched).
    matched: Vec<Option<&'o TypeDef>>,
    steps: Vec<Step>,
    tables: Vec<TableChange>,
    validations: Vec<Validation>,
    created: Vec<u32>,
}

impl<'o> Planner<'o> {
    fn new(old: &'o Catalog, new: Catalog) -> Result<Self> {
        let mut matched = Vec::new();
        let mut claimed: BTreeMap<&str, &str> = BTreeMap::new();
        for t in &new.types {
            let source = rename_source(&t.annotations, &format!("type {}", t.name))?;
            let m = match (old.get(&t.name), source) {
                (Some(same), Some(from)) if old.get(&from).is_some() && from != t.name => {
                    return Err(refuse(format!(
                        "type {} cannot be renamed from {from}: a type {} exists already",
                        t.name, same.name
                    )));
                }
                (Some(same), _) => Some(same),
                (None, Some(from)) => match old.get(&from) {
                    Some(o) => {
                        if new.get(&from).is_some() {
                            return Err(refuse(format!(
                                "type {} cannot be renamed from {from}: the new schema still declares {from}",
                                t.name
                            )));
                        }
                        Some(o)
                    }
                    None => {
                        return Err(refuse(format!(
                            "type {} is renamed from {from}, but the schema has no type {from}",
                            t.name
                        )));
                    }
                },
                (None, None) => None,
            };
            if let Some(o) = m
                && let Some(other) = claimed.insert(&o.name, &t.name)
            {
                return Err(refuse(format!(
                    "types {other} and {} both take over type {}",
                    t.name, o.name
                )));
            }
            matched.push(m);
        }
        Ok(Self {
            old,
            new,
            matched,
            steps: Vec::new(),
            tables: Vec::new(),
            validations: Vec::new(),
            created: Vec::new(),
        })
    }

    fn step(&mut self, kind: StepKind, t: &str, p: Option<&str>, detail: String, work: Work) {
        self.steps.push(Step {
            kind,
            type_name: t.to_string(),
            property: p.map(str::to_string),
            detail,
            work,
        });
    }

    fn plan(mut self) -> Result<Evolution> {
        let mut next_type = self.old.types.iter().map(|t| t.id).max().unwrap_or(0);
        next_type = next_type.max(self.old.next_type_id.saturating_sub(1));
        // Old type name -> new name, for edge endpoints.
        let renamed: BTreeMap<String, String> = self
            .new
            .types
            .iter()
            .zip(&self.matched)
            .filter_map(|(t, m)| m.map(|o| (o.name.clone(), t.name.clone())))
            .collect();
        for i in 0..self.new.types.len() {
            match self.matched[i] {
                Some(o) => self.evolve_type(i, o, &renamed)?,
                None => {
                    next_type += 1;
                    let t = &mut self.new.types[i];
                    t.id = next_type;
                    // A fresh type's properties keep the ids the compile gave.
                    t.next_prop_id = t.properties.len() as u32 + 1;
                    let (name, id) = (t.name.clone(), t.id);
                    let what = if t.is_edge() { "edge" } else { "node" };
                    self.created.push(id);
                    self.step(
                        StepKind::AddType,
                        &name,
                        None,
                        format!("a new {what} type with an empty table"),
                        Work::Create,
                    );
                }
            }
        }
        for o in &self.old.types {
            if !self.matched.iter().any(|m| m.is_some_and(|m| m.id == o.id)) {
                self.step(
                    StepKind::DropType,
                    &o.name,
                    None,
                    "leaves the schema; its data stays readable at earlier versions".into(),
                    Work::Metadata,
                );
            }
        }
        self.new.next_type_id = next_type + 1;
        Ok(Evolution {
            catalog: self.new,
            steps: self.steps,
            tables: self.tables,
            validations: self.validations,
            created: self.created,
        })
    }

    // One pass over a matched type: identity, endpoints, properties, then
    // the type's constraints; each difference is a step or a refusal.
    fn evolve_type(
        &mut self,
        i: usize,
        o: &'o TypeDef,
        renamed: &BTreeMap<String, String>,
    ) -> Result<()> {
        let name = self.new.types[i].name.clone();
        if o.is_edge() != self.new.types[i].is_edge() {
            return Err(refuse(format!(
                "{name} cannot change between a node type and an edge type"
            )));
        }
        if let (
            TypeKind::Edge { from, to, .. },
            TypeKind::Edge {
                from: f2, to: t2, ..
            },
        ) = (&o.kind, &self.new.types[i].kind)
        {
            let now = |n: &String| renamed.get(n).unwrap_or(n).clone();
            let (from, to) = (&now(from), &now(to));
            if (from, to) != (f2, t2) {
                return Err(refuse(format!(
                    "edge type {name} cannot change its endpoints from {from} -> {to} to {f2} -> {t2}"
                )));
            }
        }
        if o.name != name {
            self.step(
                StepKind::RenameType,
                &name,
                None,
                format!("renamed from {}", o.name),
                Work::Metadata,
            );
        }
        // Properties: new name -> old property.
        let mut props: BTreeMap<String, &'o PropDef> = BTreeMap::new();
        let mut next_prop = o
            .properties
            .iter()
            .map(|p| p.id)
            .max()
            .unwrap_or(0)
            .max(o.next_prop_id.saturating_sub(1));
        let mut change = TableChange {
            type_id: o.id,
            table: o.table_key(),
            ..TableChange::default()
        };
        let new_props = self.new.types[i].properties.clone();
        for p in &new_props {
            let source = rename_source(&p.annotations, &format!("{name}.{}", p.name))?;
            let m = match (o.property(&p.name), source) {
                (Some(_), Some(from)) if o.property(&from).is_some() && from != p.name => {
                    return Err(refuse(format!(
                        "{name}.{} cannot be renamed from {from}: {name} has a property {} already",
                        p.name, p.name
                    )));
                }
                (Some(same), _) => Some(same),
                (None, Some(from)) => match o.property(&from) {
                    Some(_) if new_props.iter().any(|q| q.name == from) => {
                        return Err(refuse(format!(
                            "{name}.{} cannot be renamed from {from}: the new schema still declares {name}.{from}",
                            p.name
                        )));
                    }
                    Some(op) => Some(op),
                    None => {
                        return Err(refuse(format!(
                            "{name}.{} is renamed from {from}, but {} has no property {from}",
                            p.name, o.name
                        )));
                    }
                },
                (None, None) => None,
            };
            if let Some(op) = m {
                if let Some(prev) = props.values().find(|q| q.id == op.id) {
                    return Err(refuse(format!(
                        "{name}: two properties take over {}.{}",
                        o.name, prev.name
                    )));
                }
                props.insert(p.name.clone(), op);
            }
        }
        // Ids, adds and per-property changes.
        for (j, p) in new_props.iter().enumerate() {
            let id = match props.get(&p.name) {
                Some(op) => {
                    self.evolve_property(&name, o, op, p, &mut change)?;
                    op.id
                }
                None => {
                    let fill = match (default_of(&name, p)?, p.nullable) {
                        (Some(v), _) => v,
                        (None, true) => Value::Null,
                        (None, false) => {
                            return Err(refuse(format!(
                                "{name}.{} is a new required property: give it @default(value) to fill the existing rows, or make it nullable ({}?)",
                                p.name,
                                p.ty.describe()
                            )));
                        }
                    };
                    next_prop += 1;
                    let (detail, work) = match &fill {
                        Value::Null => ("a new nullable property".to_string(), Work::Metadata),
                        v => (
                            format!("a new property; existing rows get {}", v.show()),
                            Work::Rewrite,
                        ),
                    };
                    self.step(StepKind::AddProperty, &name, Some(&p.name), detail, work);
                    let mut added = p.clone();
                    added.id = next_prop;
                    change.added.push(Added { prop: added, fill });
                    next_prop
                }
            };
            self.new.types[i].properties[j].id = id;
        }
        for op in &o.properties {
            if !props.values().any(|q| q.id == op.id) {
                if o.key.contains(&op.name) {
                    return Err(refuse(format!(
                        "{}.{} is part of the @key of {name} and cannot be dropped",
                        o.name, op.name
                    )));
                }
                self.step(
                    StepKind::DropProperty,
                    &name,
                    Some(&op.name),
                    "leaves the type; its values stay readable at earlier versions".into(),
                    Work::Metadata,
                );
                change.dropped.push(op.name.clone());
            }
        }
        self.new.types[i].next_prop_id = next_prop + 1;
        self.new.types[i].id = o.id;
        self.evolve_rules(i, o, &props, &change)?;
        if !(change.added.is_empty() && change.renamed.is_empty() && change.dropped.is_empty()) {
            self.tables.push(change);
        }
        Ok(())
    }

    fn evolve_property(
        &mut self,
        t: &str,
        o: &TypeDef,
        op: &PropDef,
        p: &PropDef,
        change: &mut TableChange,
    ) -> Result<()> {
        let pn = p.name.as_str();
        if op.name != p.name {
            self.step(
                StepKind::RenameProperty,
                t,
                Some(pn),
                format!("renamed from {}", op.name),
                Work::Metadata,
            );
            change.renamed.push((op.name.clone(), p.name.clone()));
        }
        match (&op.ty, &p.ty) {
            (PropType::Enum(was), PropType::Enum(now)) => {
                let added: Vec<&String> = now.iter().filter(|v| !was.contains(v)).collect();
                let removed: Vec<&String> = was.iter().filter(|v| !now.contains(v)).collect();
                if !added.is_empty() {
                    let list = added.iter().map(|s| s.as_str()).collect::<Vec<_>>();
                    self.step(
                        StepKind::AddEnumValues,
                        t,
                        Some(pn),
                        format!("adds {}", list.join(", ")),
                        Work::Metadata,
                    );
                }
                if !removed.is_empty() {
                    let list = removed.iter().map(|s| s.as_str()).collect::<Vec<_>>();
                    self.step(
                        StepKind::RemoveEnumValues,
                        t,
                        Some(pn),
                        format!("removes {}; no row may hold them", list.join(", ")),
                        Work::Scan,
                    );
                    self.values_rule(o, pn);
                }
            }
            (a, b) if a != b => {
                return Err(refuse(format!(
                    "{t}.{pn} cannot change type from {} to {} (existing values would need converting): add a new property instead",
                    a.describe(),
                    b.describe()
                )));
            }
            _ => {}
        }
        if op.nullable && !p.nullable {
            self.step(
                StepKind::MakeRequired,
                t,
                Some(pn),
                "becomes required; no row may be null".into(),
                Work::Scan,
            );
            self.values_rule(o, pn);
        } else if !op.nullable && p.nullable {
            self.step(
                StepKind::MakeNullable,
                t,
                Some(pn),
                "becomes nullable".into(),
                Work::Metadata,
            );
        }
        if op.embed != p.embed || plain(&op.annotations) != plain(&p.annotations) {
            self.step(
                StepKind::ChangeAnnotations,
                t,
                Some(pn),
                "annotations change".into(),
                Work::Metadata,
            );
        }
        Ok(())
    }

    /// Check the new property rules of `prop` (new name) on existing rows.
    fn values_rule(&mut self, o: &TypeDef, prop: &str) {
        if let Some(v) = self
            .validations
            .iter_mut()
            .find(|v| v.table == o.table_key() && matches!(v.rule, Rule::Values(_)))
        {
            if let Rule::Values(ps) = &mut v.rule
                && !ps.iter().any(|p| p == prop)
            {
                ps.push(prop.to_string());
            }
            return;
        }
        self.validations.push(Validation {
            type_id: o.id,
            table: o.table_key(),
            columns: BTreeMap::new(),
            rule: Rule::Values(vec![prop.to_string()]),
        });
    }

    // Constraints compared by property identity: a constraint on renamed
    // properties is the same constraint.
    fn evolve_rules(
        &mut self,
        i: usize,
        o: &TypeDef,
        props: &BTreeMap<String, &PropDef>,
        change: &TableChange,
    ) -> Result<()> {
        let t = self.new.types[i].clone();
        // Old name of a (new-named) property, if it existed.
        let was = |n: &str| props.get(n).map(|p| p.name.clone());
        let as_old =
            |names: &[String]| -> Option<Vec<String>> { names.iter().map(|n| was(n)).collect() };
        // New name of an (old-named) property, if it is kept.
        let now_of = |n: &str| {
            props
                .iter()
                .find(|(_, p)| p.name == n)
                .map(|(k, _)| k.clone())
        };
        let as_new =
            |names: &[String]| -> Option<Vec<String>> { names.iter().map(|n| now_of(n)).collect() };
        if as_old(&t.key) != Some(o.key.clone()) {
            return Err(refuse(format!(
                "the @key of {} cannot change (from ({}) to ({})): ids are derived from it",
                t.name,
                o.key.join(", "),
                t.key.join(", ")
            )));
        }
        for u in &t.uniques {
            if as_old(u).is_none_or(|old| !o.uniques.contains(&old)) {
                self.step(
                    StepKind::AddConstraint,
                    &t.name,
                    None,
                    format!("@unique({}); existing rows must satisfy it", u.join(", ")),
                    Work::Scan,
                );
                self.validations.push(Validation {
                    type_id: o.id,
                    table: o.table_key(),
                    columns: BTreeMap::new(),
                    rule: Rule::Unique(u.clone()),
                });
            }
        }
        for u in &o.uniques {
            let now = as_new(u);
            if now.is_none_or(|now| !t.uniques.contains(&now)) {
                self.step(
                    StepKind::DropConstraint,
                    &t.name,
                    None,
                    format!("@unique({}) no longer holds", u.join(", ")),
                    Work::Metadata,
                );
            }
        }
        for ix in &t.indexes {
            if as_old(ix).is_none_or(|old| !o.indexes.contains(&old)) {
                self.step(
                    StepKind::AddIndex,
                    &t.name,
                    Some(&ix.join(", ")),
                    "requested; the next optimize builds it".into(),
                    Work::Metadata,
                );
            }
        }
        for ix in &o.indexes {
            let now = as_new(ix);
            if now.is_none_or(|now| !t.indexes.contains(&now)) {
                self.step(
                    StepKind::DropIndex,
                    &t.name,
                    Some(&ix.join(", ")),
                    "no longer requested".into(),
                    Work::Metadata,
                );
            }
        }
        for r in &t.ranges {
            let before = was(&r.property)
                .and_then(|n| o.ranges.iter().find(|x| x.property == n))
                .map(|x| (x.min, x.max));
            if before != Some((r.min, r.max)) {
                let show = |n: Option<Num>| n.map(|n| n.to_string()).unwrap_or_default();
                self.step(
                    StepKind::AddConstraint,
                    &t.name,
                    Some(&r.property),
                    format!(
                        "@range({}..{}); existing values must satisfy it",
                        show(r.min),
                        show(r.max)
                    ),
                    Work::Scan,
                );
                self.values_rule(o, &r.property);
            }
        }
        for c in &t.checks {
            let before = was(&c.property)
                .and_then(|n| o.checks.iter().find(|x| x.property == n))
                .map(|x| x.pattern.clone());
            if before.as_ref() != Some(&c.pattern) {
                self.step(
                    StepKind::AddConstraint,
                    &t.name,
                    Some(&c.property),
                    format!("@check({:?}); existing values must satisfy it", c.pattern),
                    Work::Scan,
                );
                self.values_rule(o, &c.property);
            }
        }
        for r in &o.ranges {
            let kept =
                now_of(&r.property).is_some_and(|n| t.ranges.iter().any(|x| x.property == n));
            if !kept {
                self.step(
                    StepKind::DropConstraint,
                    &t.name,
                    Some(&r.property),
                    "@range no longer holds".into(),
                    Work::Metadata,
                );
            }
        }
        for c in &o.checks {
            let kept =
                now_of(&c.property).is_some_and(|n| t.checks.iter().any(|x| x.property == n));
            if !kept {
                self.step(
                    StepKind::DropConstraint,
                    &t.name,
                    Some(&c.property),
                    "@check no longer holds".into(),
                    Work::Metadata,
                );
            }
        }
        if let (TypeKind::Edge { card: was_card, .. }, TypeKind::Edge { card, .. }) =
            (&o.kind, &t.kind)
            && was_card != card
        {
            let looser = card.min <= was_card.min
                && match (card.max, was_card.max) {
                    (None, _) => true,
                    (Some(m), Some(w)) => m >= w,
                    (Some(_), None) => false,
                };
            let max = card.max.map_or("*".to_string(), |m| m.to_string());
            let (detail, work) = if looser {
                (
                    format!("@card({}..{max}), looser", card.min),
                    Work::Metadata,
                )
            } else {
                (
                    format!("@card({}..{max}); existing edges must satisfy it", card.min),
                    Work::Scan,
                )
            };
            let kind = if looser {
                StepKind::DropConstraint
            } else {
                StepKind::AddConstraint
            };
            self.step(kind, &t.name, None, detail, work);
            if !looser {
                self.validations.push(Validation {
                    type_id: o.id,
                    table: o.table_key(),
                    columns: BTreeMap::new(),
                    rule: Rule::Card(*card),
                });
            }
        }
        if plain(&o.annotations) != plain(&t.annotations) || o.implements != t.implements {
            self.step(
                StepKind::ChangeAnnotations,
                &t.name,
                None,
                "annotations change".into(),
                Work::Metadata,
            );
        }
        // Where each checked value comes from now.
        let sources: BTreeMap<String, Source> = t
            .properties
            .iter()
            .map(|p| {
                let s = match change.added.iter().find(|a| a.prop.name == p.name) {
                    Some(a) => Source::Added(a.fill.clone()),
                    None => Source::Stored(was(&p.name).unwrap_or_else(|| p.name.clone())),
                };
                (p.name.clone(), s)
            })
            .collect();
        for v in self.validations.iter_mut().filter(|v| v.type_id == o.id) {
            v.columns = sources.clone();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compiler::schema::compile;

    const V1: &str = r#"
node Person {
    name: String @key
    age: I32?
    status: enum(active, retired)?
}
node Company { name: String @key }
edge WorksAt: Person -> Company { role: String? }
"#;

    fn v1() -> Catalog {
        compile(V1).unwrap()
    }

    fn kinds(e: &Evolution) -> Vec<(StepKind, &str, Option<&str>, Work)> {
        e.steps
            .iter()
            .map(|s| (s.kind, s.type_name.as_str(), s.property.as_deref(), s.work))
            .collect()
    }

    fn err(src: &str) -> String {
        match evolve(&v1(), src) {
            Err(OmniError::Schema { message }) => message,
            other => panic!("expected a schema error, got {other:?}"),
        }
    }

    #[test]
    fn the_same_schema_is_no_change_and_keeps_every_id() {
        let e = evolve(&v1(), V1).unwrap();
        assert!(e.is_empty(), "{:?}", e.steps);
        assert_eq!(e.catalog.types, v1().types);
        assert!(e.tables.is_empty() && e.validations.is_empty() && e.created.is_empty());
    }

    #[test]
    fn an_added_nullable_property_is_metadata_and_takes_a_fresh_id() {
        let src = V1.replace("age: I32?", "age: I32?\n    nick: String?");
        let e = evolve(&v1(), &src).unwrap();
        assert_eq!(
            kinds(&e),
            vec![(
                StepKind::AddProperty,
                "Person",
                Some("nick"),
                Work::Metadata
            )]
        );
        let p = e.catalog.node("Person").unwrap();
        assert_eq!(p.property("nick").unwrap().id, 4);
        assert_eq!(p.property("status").unwrap().id, 3, "old ids stay");
        assert_eq!(p.next_prop_id, 5);
        assert_eq!(e.tables[0].added[0].fill, Value::Null);
        assert_eq!(e.tables[0].table, "node:Person");
    }

    #[test]
    fn a_required_property_needs_a_default_of_its_type() {
        let src = V1.replace("age: I32?", "age: I32?\n    score: I32");
        assert!(err(&src).contains("Person.score is a new required property"));
        let bad = V1.replace("age: I32?", "age: I32?\n    score: I32 @default(\"x\")");
        assert!(err(&bad).contains("@default(\"x\") does not fit Person.score"));
        let src = V1.replace("age: I32?", "age: I32?\n    score: I32 @default(7)");
        let e = evolve(&v1(), &src).unwrap();
        assert_eq!(e.steps[0].work, Work::Rewrite);
        assert_eq!(e.tables[0].added[0].fill, Value::Int(7));
        assert!(e.tables[0].rewrites());
    }

    #[test]
    fn renames_keep_identity_and_move_endpoints_and_rules() {
        let src = r#"
node Human @rename_from("Person") {
    name: String @key
    years: I32? @rename_from("age") @range(years, 0..200)
    status: enum(active, retired)?
}
node Company { name: String @key }
edge WorksAt: Human -> Company { role: String? }
"#;
        let e = evolve(&v1(), src).unwrap();
        let h = e.catalog.node("Human").unwrap();
        let was = v1();
        let p = was.node("Person").unwrap();
        assert_eq!(h.id, p.id);
        assert_eq!(
            h.property("years").unwrap().id,
            p.property("age").unwrap().id
        );
        assert_eq!(e.tables[0].renamed, vec![("age".into(), "years".into())]);
        assert_eq!(e.tables[0].table, "node:Person");
        let k = kinds(&e);
        assert!(k.contains(&(StepKind::RenameType, "Human", None, Work::Metadata)));
        assert!(k.contains(&(
            StepKind::RenameProperty,
            "Human",
            Some("years"),
            Work::Metadata
        )));
        assert!(k.contains(&(StepKind::AddConstraint, "Human", Some("years"), Work::Scan)));
        // The range is checked on the column as it is stored now.
        let v = &e.validations[0];
        assert_eq!(v.rule, Rule::Values(vec!["years".into()]));
        assert_eq!(v.columns["years"], Source::Stored("age".into()));
        // Applying the same text again is no change.
        assert!(evolve(&e.catalog, src).unwrap().is_empty());
    }

    #[test]
    fn bad_renames_are_refused_with_what_is_wrong() {
        let missing = V1.replace("age: I32?", "years: I32? @rename_from(\"yrs\")");
        assert!(
            err(&missing)
                .contains("Person.years is renamed from yrs, but Person has no property yrs")
        );
        let both = V1.replace(
            "age: I32?",
            "age: I32?\n    years: I32? @rename_from(\"age\")",
        );
        assert!(err(&both).contains("the new schema still declares Person.age"));
        let collide = V1.replace("node Company {", "node Company @rename_from(\"Person\") {");
        assert!(err(&collide).contains("type Company cannot be renamed from Person"));
        let no_type = format!("{V1}\nnode Firm @rename_from(\"Corp\") {{ name: String @key }}");
        assert!(err(&no_type).contains("the schema has no type Corp"));
    }

    #[test]
    fn drops_keep_ids_retired() {
        let dropped = V1.replace("    age: I32?\n", "");
        let e = evolve(&v1(), &dropped).unwrap();
        assert_eq!(
            kinds(&e),
            vec![(
                StepKind::DropProperty,
                "Person",
                Some("age"),
                Work::Metadata
            )]
        );
        assert_eq!(e.tables[0].dropped, vec!["age".to_string()]);
        let again = dropped.replace("name: String @key", "name: String @key\n    age: I32?");
        let e2 = evolve(&e.catalog, &again).unwrap();
        let age = e2
            .catalog
            .node("Person")
            .unwrap()
            .property("age")
            .unwrap()
            .id;
        assert_eq!(age, 4, "a re-added property is a new property");
        // A dropped type, and a type dropped while an edge names it.
        let no_edge = V1.replace("edge WorksAt: Person -> Company { role: String? }", "");
        let e = evolve(&v1(), &no_edge).unwrap();
        assert_eq!(
            kinds(&e),
            vec![(StepKind::DropType, "WorksAt", None, Work::Metadata)]
        );
        let with_edge = V1.replace("node Company { name: String @key }", "");
        assert!(err(&with_edge).contains(
            "node type Company cannot be dropped: edge type WorksAt still references it"
        ));
        let key = V1.replace("name: String @key\n    age", "age");
        assert!(
            err(&key).contains("Person.name is part of the @key of Person and cannot be dropped")
        );
    }

    #[test]
    fn changes_existing_data_cannot_follow_are_refused() {
        assert!(
            err(&V1.replace("age: I32?", "age: I64?"))
                .contains("Person.age cannot change type from I32 to I64")
        );
        assert!(
            err(&V1.replace("Person -> Company", "Company -> Person"))
                .contains("cannot change its endpoints")
        );
        let key = V1.replace(
            "name: String @key\n    age: I32?",
            "name: String\n    age: I32 @key",
        );
        assert!(err(&key).contains("the @key of Person cannot change (from (name) to (age))"));
    }

    #[test]
    fn enum_narrowing_required_and_unique_are_checked_on_the_rows() {
        let src = V1
            .replace("enum(active, retired)?", "enum(active, paused)")
            .replace("age: I32?", "age: I32? @unique");
        let e = evolve(&v1(), &src).unwrap();
        let k = kinds(&e);
        assert!(k.contains(&(
            StepKind::AddEnumValues,
            "Person",
            Some("status"),
            Work::Metadata
        )));
        assert!(k.contains(&(
            StepKind::RemoveEnumValues,
            "Person",
            Some("status"),
            Work::Scan
        )));
        assert!(k.contains(&(StepKind::MakeRequired, "Person", Some("status"), Work::Scan)));
        assert!(k.contains(&(StepKind::AddConstraint, "Person", None, Work::Scan)));
        let rules: Vec<&Rule> = e.validations.iter().map(|v| &v.rule).collect();
        assert_eq!(
            rules,
            vec![
                &Rule::Values(vec!["status".into()]),
                &Rule::Unique(vec!["age".into()])
            ]
        );
    }

    #[test]
    fn a_new_type_gets_an_id_never_used() {
        let no_edge = V1.replace("edge WorksAt: Person -> Company { role: String? }", "");
        let e = evolve(&v1(), &no_edge).unwrap();
        let back = format!("{no_edge}\nedge Knows: Person -> Person");
        let e2 = evolve(&e.catalog, &back).unwrap();
        assert_eq!(e2.created, vec![4]);
        assert_eq!(
            kinds(&e2),
            vec![(StepKind::AddType, "Knows", None, Work::Create)]
        );
    }
}
