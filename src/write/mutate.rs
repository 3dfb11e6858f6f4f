//! Mutations: `insert`, `update ... set ... where`, `delete ... where`,
//! executed from the plan the compiler checked
//! ([`crate::compiler::query::mutation`]). In the protocol's prepare step,
//! every statement accumulates into one in-memory change set that later
//! statements read (pending rows shadow committed ones). The change set is
//! validated against committed + pending state (keys, endpoints, `@unique`,
//! `@card`, limits) and staged as one transaction per touched table.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arrow_array::RecordBatch;
use serde::Serialize;

use super::card::{self, Tally};
use super::columns::{TableBuilder, TypeRules, unique_key};
use super::ids;
use super::load::{MAX_KEYED_BYTES, MAX_KEYED_ROWS};
use crate::compiler::catalog::{Cardinality, DST, ID, PropType, SRC, TypeDef, TypeKind};
use crate::compiler::query::ast::CmpOp;
use crate::compiler::query::ir::{MutStmt, MutationPlan, Pred, ValExpr};
use crate::compiler::value::holds;
use crate::compiler::value::{self, Value};
use crate::error::{Location, OmniError, Result};
use crate::storage::external::{self, External};
use crate::storage::scan::{self, Filter};
use crate::storage::stage;
use crate::storage::substrate::{BoxFut, PrepareCx, PrepareWork, Prepared};
use omnigraph_actors::WriteClass;

/// What a mutation did.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct MutationResult {
    pub branch: String,
    pub commit: String,
    pub manifest_version: u64,
    /// The mutation's place among the `members` of its commit record when
    /// it shared its commit with others queued on the branch beside it
    /// (group commit); absent when the commit is its own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub member: Option<u32>,
    /// Rows inserted, updated or deleted, per type.
    pub nodes: BTreeMap<String, usize>,
    pub edges: BTreeMap<String, usize>,
}

/// The column a filter reads (`prop op value`) and its type.
fn filter_column(p: &Pred) -> (&str, PropType) {
    match &p.left {
        ValExpr::Prop { prop, ty, .. } => (prop, ty.clone()),
        ValExpr::Id { .. } => (ID, PropType::String),
        other => unreachable!("checked: a mutation filter reads a property, not {other:?}"),
    }
}

/// One full row of a type, as validated values.
#[derive(Clone, Debug)]
struct Row {
    id: String,
    ends: Option<(String, String)>,
    vals: Vec<Value<'static>>,
    /// The Blob properties (indexes into `vals`) that keep their committed
    /// value: never read, so `vals` holds a placeholder there.
    kept: Vec<usize>,
}

/// The pending changes to one type.
#[derive(Clone, Default)]
pub(super) struct TypeChanges {
    /// Rows written (inserted or updated), by id.
    upserts: BTreeMap<String, Row>,
    /// Ids inserted strictly (must not exist).
    strict: BTreeSet<String>,
    deleted: BTreeSet<String>,
}

/// Up to how many written rows `@unique` is checked by one exact probe
/// each rather than by reading the type whole.
const UNIQUE_PROBES: usize = 64;

pub struct MutationWork {
    plan: MutationPlan,
    params: BTreeMap<String, Value<'static>>,
    if_commit: Option<String>,
    /// `now()`, read once per operation: every `now()` of the mutation,
    /// and every re-prepare of it, is this instant.
    now_ms: i64,
}

impl MutationWork {
    pub fn new(
        plan: MutationPlan,
        params: BTreeMap<String, Value<'static>>,
        if_commit: Option<String>,
    ) -> Self {
        Self {
            plan,
            params,
            if_commit,
            now_ms: chrono::Utc::now().timestamp_millis(),
        }
    }

    fn value(&self, e: &ValExpr) -> Value<'static> {
        match e {
            ValExpr::Const(v) => v.clone(),
            ValExpr::Param { name } => self.params.get(name).cloned().unwrap_or(Value::Null),
            ValExpr::Now => Value::DateTime(self.now_ms),
            ValExpr::Prop { .. } | ValExpr::Id { .. } => {
                unreachable!("checked: a mutation value is a constant, a parameter or now()")
            }
        }
    }
}

/// The indexes of a type's Blob properties.
fn blob_props(def: &TypeDef) -> Vec<usize> {
    def.properties
        .iter()
        .enumerate()
        .filter(|(_, p)| p.ty == PropType::Blob)
        .map(|(i, _)| i)
        .collect()
}

fn loc(ty: &str, prop: Option<&str>, value: Option<String>) -> Location {
    Location {
        line: None,
        row: None,
        type_name: Some(ty.to_string()),
        property: prop.map(str::to_string),
        value,
        ..Default::default()
    }
}

/// Does a row's value satisfy `prop op value`?
fn row_matches(rules: &TypeRules, row: &Row, f: &Pred, v: &Value) -> bool {
    match &f.left {
        ValExpr::Id { .. } => holds(f.op, &Value::Str(row.id.as_str().into()), v),
        _ => match rules.prop_index(filter_column(f).0) {
            Some(i) => holds(f.op, &row.vals[i], v),
            None => false,
        },
    }
}

/// The change set being built, with what it has read of the snapshot.
pub(super) struct Staging<'c> {
    cx: &'c PrepareCx,
    pub(super) changes: BTreeMap<String, TypeChanges>,
    rules: BTreeMap<String, Arc<TypeRules>>,
    /// The ids each type's statements wrote since [`Self::take_touched`]:
    /// a group commit attributes them to the mutation that ran them.
    touched: BTreeMap<String, BTreeSet<String>>,
}

impl<'c> Staging<'c> {
    pub(super) fn new(cx: &'c PrepareCx) -> Self {
        Staging {
            cx,
            changes: BTreeMap::new(),
            rules: BTreeMap::new(),
            touched: BTreeMap::new(),
        }
    }

    fn touch(&mut self, ty: &str, id: &str) {
        self.touched
            .entry(ty.to_string())
            .or_default()
            .insert(id.to_string());
    }

    /// The change set and the rules it was checked by.
    pub(super) fn into_parts(
        self,
    ) -> (
        BTreeMap<String, TypeChanges>,
        BTreeMap<String, Arc<TypeRules>>,
    ) {
        (self.changes, self.rules)
    }

    /// The ids written since the last call, by type.
    pub(super) fn take_touched(&mut self) -> BTreeMap<String, BTreeSet<String>> {
        std::mem::take(&mut self.touched)
    }

    fn rules(&mut self, ty: &str) -> Result<Arc<TypeRules>> {
        if let Some(r) = self.rules.get(ty) {
            return Ok(r.clone());
        }
        let def = self.cx.catalog().get(ty).expect("checked type");
        let r = Arc::new(TypeRules::new(def)?);
        self.rules.insert(ty.to_string(), r.clone());
        Ok(r)
    }

    fn def(&self, ty: &str) -> &'c TypeDef {
        self.cx.catalog().get(ty).expect("checked type")
    }

    fn pending(&mut self, ty: &str) -> &mut TypeChanges {
        self.changes.entry(ty.to_string()).or_default()
    }

    fn budget(&self, ty: &str) -> Result<()> {
        let n = self
            .changes
            .get(ty)
            .map_or(0, |c| c.upserts.len() + c.deleted.len());
        if n > MAX_KEYED_ROWS {
            return Err(OmniError::ResourceLimitExceeded {
                what: format!("more than {MAX_KEYED_ROWS} rows of {ty} staged in one commit"),
                limit: format!("{MAX_KEYED_ROWS} rows per table"),
            });
        }
        Ok(())
    }

    /// Committed rows of `ty` that match (all of them when no filter),
    /// read whole and validated into rows.
    async fn committed(
        &mut self,
        ty: &str,
        filter: Option<(&Pred, &Value<'_>)>,
    ) -> Result<Vec<Row>> {
        let def = self.def(ty);
        let rules = self.rules(ty)?;
        let ds = self.cx.read(def).await?;
        let mut cols: Vec<&str> = vec![ID];
        if def.is_edge() {
            cols.extend([SRC, DST]);
        }
        cols.extend(
            def.properties
                .iter()
                .filter(|p| p.ty != PropType::Blob)
                .map(|p| p.name.as_str()),
        );
        let pushed = filter.and_then(|(f, v)| {
            let (column, ty) = filter_column(f);
            Filter::compare(column, &ty, f.op, v)
        });
        let batches = scan::scan(&ds, &cols, pushed.as_ref()).await?;
        let mut out = Vec::new();
        for b in &batches {
            let ids = stage::string_column(b, ID)?;
            for i in 0..b.num_rows() {
                // Committed cells were validated when written: read them
                // straight into values (Blob columns are not read).
                let vals = def
                    .properties
                    .iter()
                    .map(|p| match b.column_by_name(&p.name) {
                        Some(c) => value::at(c, i).into_owned(),
                        None => Value::Null,
                    })
                    .collect::<Vec<_>>();
                let ends = if def.is_edge() {
                    Some((
                        stage::string_column(b, SRC)?.value(i).to_string(),
                        stage::string_column(b, DST)?.value(i).to_string(),
                    ))
                } else {
                    None
                };
                let row = Row {
                    id: ids.value(i).to_string(),
                    ends,
                    vals,
                    kept: blob_props(def),
                };
                if filter.is_none_or(|(f, v)| row_matches(&rules, &row, f, v)) {
                    out.push(row);
                }
            }
        }
        Ok(out)
    }

    /// Rows of `ty` as this mutation sees them: pending shadow committed,
    /// deleted ones are gone.
    async fn visible(&mut self, ty: &str, filter: Option<(&Pred, &Value<'_>)>) -> Result<Vec<Row>> {
        let rules = self.rules(ty)?;
        let mut rows: BTreeMap<String, Row> = BTreeMap::new();
        for r in self.committed(ty, filter).await? {
            rows.insert(r.id.clone(), r);
        }
        if let Some(c) = self.changes.get(ty) {
            for id in &c.deleted {
                rows.remove(id);
            }
            for (id, r) in &c.upserts {
                rows.remove(id);
                if filter.is_none_or(|(f, v)| row_matches(&rules, r, f, v)) {
                    rows.insert(id.clone(), r.clone());
                }
            }
        }
        Ok(rows.into_values().collect())
    }
}

impl MutationWork {
    async fn insert(
        &self,
        s: &mut Staging<'_>,
        ty: &str,
        values: &BTreeMap<String, ValExpr>,
    ) -> Result<()> {
        let def = s.def(ty);
        let rules = s.rules(ty)?;
        let cells: Vec<Option<Value>> = rules
            .props
            .iter()
            .map(|p| values.get(&p.def.name).map(|v| self.value(v)))
            .collect();
        let vals: Vec<Value<'static>> = rules
            .validate(cells, None)?
            .into_iter()
            .map(Value::into_owned)
            .collect();
        let given = match values.get(ID).map(|v| self.value(v)) {
            None | Some(Value::Null) => None,
            Some(Value::Str(s)) => Some(s),
            Some(other) => {
                return Err(OmniError::invalid(
                    loc(ty, Some(ID), Some(format!("{other:?}"))),
                    "an id is a string",
                ));
            }
        };
        let shown = given.as_ref().map(|g| format!("{g:?}"));
        let id = match ids::row_id(&rules.key, &vals, given) {
            Ok(Some(id)) => id.into_owned(),
            Ok(None) => crate::util::ulid::new_ulid(),
            Err(derived) => {
                return Err(OmniError::invalid(
                    loc(ty, Some(ID), shown),
                    format!("does not match the id {derived:?} derived from the key"),
                ));
            }
        };
        let ends = match def.endpoints() {
            Some(_) => {
                let end = |k: &str| -> Result<String> {
                    let v = self.value(&values[k]);
                    ids::endpoint_id(&v).map(Cow::into_owned).ok_or_else(|| {
                        OmniError::invalid(
                            loc(ty, Some(k), Some(format!("{v:?}"))),
                            "an endpoint is a node id",
                        )
                    })
                };
                Some((end("from")?, end("to")?))
            }
            None => None,
        };
        let keyed = !def.key.is_empty();
        let c = s.pending(ty);
        if !keyed {
            // A strict insert: the id must be new to the change set too.
            if c.upserts.contains_key(&id) || !c.strict.insert(id.clone()) {
                return Err(OmniError::KeyConflict {
                    type_name: ty.to_string(),
                    id,
                });
            }
        }
        c.deleted.remove(&id);
        c.upserts.insert(
            id.clone(),
            Row {
                id: id.clone(),
                ends,
                vals,
                kept: Vec::new(),
            },
        );
        s.touch(ty, &id);
        s.budget(ty)
    }

    async fn update(
        &self,
        s: &mut Staging<'_>,
        ty: &str,
        set: &BTreeMap<String, ValExpr>,
        filter: Option<&Pred>,
    ) -> Result<()> {
        let rules = s.rules(ty)?;
        let fv = filter.map(|f| (f, self.value(&f.right)));
        let matches = s.visible(ty, fv.as_ref().map(|(f, v)| (*f, v))).await?;
        // Stream the matches against the remaining budget.
        let room = MAX_KEYED_ROWS.saturating_sub(s.changes.get(ty).map_or(0, |c| c.upserts.len()));
        if matches.len() > room {
            return Err(OmniError::ResourceLimitExceeded {
                what: format!("update of {ty} matches {} rows", matches.len()),
                limit: format!("{MAX_KEYED_ROWS} rows per table"),
            });
        }
        let mut new_vals = Vec::new();
        for (prop, v) in set {
            let i = rules.prop_index(prop).expect("checked property");
            let val = rules.props[i]
                .validate(Some(self.value(v)))
                .map_err(|(m, value)| OmniError::invalid(loc(ty, Some(prop), value), m))?;
            new_vals.push((i, val.into_owned()));
        }
        for mut row in matches {
            for (i, v) in &new_vals {
                row.vals[*i] = v.clone();
                row.kept.retain(|k| k != i);
            }
            s.touch(ty, &row.id);
            s.pending(ty).upserts.insert(row.id.clone(), row);
        }
        Ok(())
    }

    async fn delete(&self, s: &mut Staging<'_>, ty: &str, filter: &Pred) -> Result<()> {
        let v = self.value(&filter.right);
        let matches = s.visible(ty, Some((filter, &v))).await?;
        let ids: Vec<String> = matches.into_iter().map(|r| r.id).collect();
        self.delete_ids(s, ty, ids).await
    }

    async fn delete_ids(&self, s: &mut Staging<'_>, ty: &str, ids: Vec<String>) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        for id in &ids {
            let c = s.pending(ty);
            c.upserts.remove(id);
            c.deleted.insert(id.clone());
            s.touch(ty, id);
        }
        s.budget(ty)?;
        // Deleting a node deletes its incident edges in the same commit.
        if s.def(ty).is_edge() {
            return Ok(());
        }
        let gone: BTreeSet<&String> = ids.iter().collect();
        let edges: Vec<String> =
            s.cx.catalog()
                .edges()
                .filter(|e| e.endpoints().is_some_and(|(f, t)| f == ty || t == ty))
                .map(|e| e.name.clone())
                .collect();
        for e in edges {
            let incident: Vec<String> = s
                .visible(&e, None)
                .await?
                .into_iter()
                .filter(|r| {
                    r.ends
                        .as_ref()
                        .is_some_and(|(a, b)| gone.contains(a) || gone.contains(b))
                })
                .map(|r| r.id)
                .collect();
            for id in incident {
                s.touch(&e, &id);
                s.pending(&e).deleted.insert(id);
            }
            s.budget(&e)?;
        }
        Ok(())
    }
}

/// Validate the whole change set against committed + pending state.
pub(super) async fn validate(s: &mut Staging<'_>) -> Result<()> {
    let types: Vec<String> = s.changes.keys().cloned().collect();
    for ty in &types {
        let def = s.def(ty);
        // Strict inserts must not find their id committed.
        let strict: Vec<String> = s.changes[ty].strict.iter().cloned().collect();
        if !strict.is_empty() {
            let ds = s.cx.read(def).await?;
            let probe: Vec<&str> = strict.iter().map(String::as_str).collect();
            let found = stage::existing_ids(&ds, &probe).await?;
            if let Some(id) = strict.iter().find(|id| found.contains(*id)) {
                return Err(OmniError::KeyConflict {
                    type_name: ty.clone(),
                    id: id.clone(),
                });
            }
        }
        // Edge endpoints exist (committed and not deleted, or pending).
        if let TypeKind::Edge { from, to, .. } = &def.kind {
            let rows: Vec<Row> = s.changes[ty].upserts.values().cloned().collect();
            for (end, node) in [(0, from), (1, to)] {
                let wanted: BTreeSet<String> = rows
                    .iter()
                    .filter_map(|r| {
                        r.ends
                            .as_ref()
                            .map(|e| if end == 0 { e.0.clone() } else { e.1.clone() })
                    })
                    .collect();
                let missing = missing_nodes(s, node, &wanted).await?;
                if let Some(m) = missing.first() {
                    let which = if end == 0 { "from" } else { "to" };
                    return Err(OmniError::invalid(
                        loc(ty, Some(which), Some(format!("{m:?}"))),
                        format!("edge endpoint: no {node} with this id exists"),
                    ));
                }
            }
        }
        // @unique over committed + pending.
        for cols in &def.uniques {
            check_unique(s, ty, cols).await?;
        }
    }
    // @card for every edge type whose counts the change set may move:
    // it writes edges of it, or (under a minimum) nodes of its source.
    let cx = s.cx;
    for edge in cx.catalog().edges() {
        let TypeKind::Edge { from, card, .. } = &edge.kind else {
            continue;
        };
        let new_sources =
            card.min > 0 && s.changes.get(from).is_some_and(|c| !c.upserts.is_empty());
        if card.constrains() && (s.changes.contains_key(&edge.name) || new_sources) {
            check_card(s, &edge.name, *card).await?;
        }
    }
    Ok(())
}

async fn missing_nodes(
    s: &mut Staging<'_>,
    node: &str,
    wanted: &BTreeSet<String>,
) -> Result<Vec<String>> {
    let pending = s.changes.get(node);
    let mut unresolved: Vec<String> = wanted
        .iter()
        .filter(|id| !pending.is_some_and(|c| c.upserts.contains_key(*id)))
        .cloned()
        .collect();
    if unresolved.is_empty() {
        return Ok(unresolved);
    }
    let ds = s.cx.read(s.def(node)).await?;
    let probe: Vec<&str> = unresolved.iter().map(String::as_str).collect();
    let found = stage::existing_ids(&ds, &probe).await?;
    let deleted = s
        .changes
        .get(node)
        .map(|c| c.deleted.clone())
        .unwrap_or_default();
    unresolved.retain(|id| !found.contains(id) || deleted.contains(id));
    Ok(unresolved)
}

/// The `@card` rule (src/write/card.rs) on the change set: the sources
/// of the edges it writes, of the committed edges it replaces or
/// deletes, and (under a minimum) the source nodes it writes, counted
/// on the edges the mutation leaves; a source it deletes needs none.
async fn check_card(s: &mut Staging<'_>, ty: &str, card: Cardinality) -> Result<()> {
    let from = s.def(ty).endpoints().expect("edge").0.to_string();
    let mut tally = Tally::new(card);
    let mut touched: BTreeSet<String> = BTreeSet::new();
    if let Some(c) = s.changes.get(ty) {
        for r in c.upserts.values() {
            tally.watch(&r.ends.as_ref().expect("edge").0, None);
        }
        touched.extend(c.upserts.keys().chain(&c.deleted).cloned());
    }
    if !touched.is_empty() {
        for r in &s.committed(ty, None).await? {
            if touched.contains(&r.id) {
                tally.watch(&r.ends.as_ref().expect("edge").0, None);
            }
        }
    }
    if let Some(c) = s.changes.get(&from) {
        if card.min > 0 {
            for id in c.upserts.keys() {
                tally.watch(id, None);
            }
        }
        for id in &c.deleted {
            tally.forget(id);
        }
    }
    if tally.is_empty() {
        return Ok(());
    }
    for r in s.visible(ty, None).await? {
        tally.edge(&r.ends.as_ref().expect("edge").0, None);
    }
    match tally.broken().into_iter().next() {
        Some((src, n, _)) => Err(card::violation(ty, card, &src, n, None)),
        None => Ok(()),
    }
}

/// `@unique` over committed + pending. The committed rows already hold
/// it, so only the keys this mutation writes can clash: few written
/// rows probe storage for their exact keys; many read the type whole.
async fn check_unique(s: &mut Staging<'_>, ty: &str, cols: &[String]) -> Result<()> {
    let rules = s.rules(ty)?;
    let idx: Vec<usize> = cols.iter().filter_map(|c| rules.prop_index(c)).collect();
    let key = |r: &Row| unique_key(idx.iter().map(|&i| &r.vals[i]));
    let clash = |a: &str, r: &Row| {
        let shown: Vec<String> = idx.iter().map(|&i| format!("{:?}", r.vals[i])).collect();
        OmniError::invalid(
            loc(ty, Some(&cols.join(", ")), Some(shown.join(", "))),
            format!("violates @unique: rows {a:?} and {:?} share it", r.id),
        )
    };
    let written: Vec<Row> = s.changes[ty].upserts.values().cloned().collect();
    if written.is_empty() {
        return Ok(());
    }
    // Exact probes, one per written key, when storage can evaluate them.
    let probes: Option<Vec<(Row, Filter)>> = (written.len() <= UNIQUE_PROBES)
        .then(|| {
            written
                .iter()
                .filter(|r| key(r).is_some())
                .map(|r| {
                    let parts: Option<Vec<Filter>> = idx
                        .iter()
                        .map(|&i| {
                            let p = &rules.props[i].def;
                            Filter::compare(&p.name, &p.ty, CmpOp::Eq, &r.vals[i])
                        })
                        .collect();
                    parts.and_then(Filter::all).map(|f| (r.clone(), f))
                })
                .collect()
        })
        .flatten();
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    let Some(probes) = probes else {
        for r in s.visible(ty, None).await? {
            if let Some(k) = key(&r)
                && let Some(other) = seen.insert(k, r.id.clone())
            {
                return Err(clash(&other, &r));
            }
        }
        return Ok(());
    };
    for r in &written {
        if let Some(k) = key(r)
            && let Some(other) = seen.insert(k, r.id.clone())
        {
            return Err(clash(&other, r));
        }
    }
    let gone = |id: &str| {
        let c = &s.changes[ty];
        c.upserts.contains_key(id) || c.deleted.contains(id)
    };
    for (r, filter) in &probes {
        let def = s.def(ty);
        let ds = s.cx.read(def).await?;
        for b in scan::scan(&ds, &[ID], Some(filter)).await? {
            let ids = stage::string_column(&b, ID)?;
            if let Some(other) = (0..b.num_rows()).map(|i| ids.value(i)).find(|id| !gone(id)) {
                return Err(clash(other, r));
            }
        }
    }
    Ok(())
}

/// What one table gets: upserted rows, or deleted ids (a mutation never
/// does both to one table).
enum Staged {
    /// Upserted rows; rows without their Blob columns are patched into
    /// place, the blob bytes staying where they are.
    Rows(Vec<RecordBatch>),
    Deletes(Vec<String>),
}

/// How a table's upserted rows are written, given which Blob cells they
/// keep: all rows keep every Blob cell (patch the other columns), none
/// keeps any (whole rows), or a mix (whole rows, the kept cells' bytes
/// read first, within the per-commit limit).
#[derive(Debug, PartialEq, Eq)]
enum BlobPlan {
    WholeRows,
    Patch,
    CarryKept,
}

fn blob_plan(blobs: &[usize], rows: &[&Row]) -> BlobPlan {
    if blobs.is_empty() || rows.iter().all(|r| r.kept.is_empty()) {
        BlobPlan::WholeRows
    } else if rows.iter().all(|r| r.kept.len() == blobs.len()) {
        BlobPlan::Patch
    } else {
        BlobPlan::CarryKept
    }
}

/// The upserted rows with every kept Blob cell filled in from the
/// committed row (declared lengths checked against the limit first).
async fn carry_kept(
    cx: &PrepareCx,
    def: &TypeDef,
    blobs: &[usize],
    c: &TypeChanges,
) -> Result<Vec<Row>> {
    let table = cx.read(def).await?;
    let mut rows: Vec<Row> = c.upserts.values().cloned().collect();
    for &b in blobs {
        let ids: Vec<&str> = rows
            .iter()
            .filter(|r| r.kept.contains(&b))
            .map(|r| r.id.as_str())
            .collect();
        if ids.is_empty() {
            continue;
        }
        let prop = &def.properties[b].name;
        let mut bytes =
            crate::storage::blob::values_of(&table, prop, &ids, MAX_KEYED_BYTES).await?;
        for r in rows.iter_mut().filter(|r| r.kept.contains(&b)) {
            r.vals[b] = match bytes.remove(&r.id).flatten() {
                Some(v) => Value::Bytes(v),
                None => Value::Null,
            };
            r.kept.retain(|k| *k != b);
        }
    }
    Ok(rows)
}

/// A table's upserted rows as one batch, within the per-commit limit.
fn rows_batch<'r>(
    rules: Arc<TypeRules>,
    ty: &str,
    rows: impl ExactSizeIterator<Item = &'r Row>,
) -> Result<RecordBatch> {
    let mut b = TableBuilder::new(rules, rows.len());
    for r in rows {
        b.push(
            &r.id,
            r.ends.as_ref().map(|(a, d)| (a.as_str(), d.as_str())),
            &mut r.vals.clone(),
            0,
            true,
        );
    }
    let (batch, _) = b.finish()?;
    if batch.get_array_memory_size() > MAX_KEYED_BYTES {
        return Err(OmniError::ResourceLimitExceeded {
            what: format!(
                "{} bytes of {ty} staged in one commit",
                batch.get_array_memory_size()
            ),
            limit: format!("{} MiB per table", MAX_KEYED_BYTES >> 20),
        });
    }
    Ok(batch)
}

impl MutationWork {
    /// The mutation's name, as its commit records it.
    pub fn name(&self) -> &str {
        &self.plan.name
    }

    /// Does the mutation delete (it then deletes only)?
    pub fn deletes(&self) -> bool {
        self.plan
            .stmts
            .iter()
            .any(|s| matches!(s, MutStmt::Delete { .. }))
    }

    /// Is it a strict write (its reads must still hold when it commits)?
    pub fn strict(&self) -> bool {
        self.plan.strict || self.if_commit.is_some()
    }

    /// Run the statements into the change set (validated later).
    pub(super) async fn run_stmts(&self, s: &mut Staging<'_>) -> Result<()> {
        for stmt in &self.plan.stmts {
            match stmt {
                MutStmt::Insert { ty, values } => self.insert(s, ty, values).await?,
                MutStmt::Update { ty, set, filter } => {
                    self.update(s, ty, set, filter.as_ref()).await?
                }
                MutStmt::Delete { ty, filter } => self.delete(s, ty, filter).await?,
            }
        }
        Ok(())
    }
}

/// Rows written per type, split into node and edge types.
pub(super) type Counts = (BTreeMap<String, usize>, BTreeMap<String, usize>);

/// Stage one transaction per table the change set touches; the rows it
/// writes per type.
pub(super) async fn stage_changes(
    cx: &mut PrepareCx,
    changes: &BTreeMap<String, TypeChanges>,
    rules: &BTreeMap<String, Arc<TypeRules>>,
) -> Result<Counts> {
    let mut nodes = BTreeMap::new();
    let mut edges = BTreeMap::new();
    let mut staged = Vec::new();
    for (ty, c) in changes {
        if c.upserts.is_empty() && c.deleted.is_empty() {
            continue;
        }
        let def = cx.catalog().get(ty).expect("checked type").clone();
        let count = c.upserts.len() + c.deleted.len();
        if def.is_edge() {
            edges.insert(ty.clone(), count);
        } else {
            nodes.insert(ty.clone(), count);
        }
        let input = if c.upserts.is_empty() {
            Staged::Deletes(c.deleted.iter().cloned().collect())
        } else {
            let blobs = blob_props(&def);
            let rows: Vec<&Row> = c.upserts.values().collect();
            let batch = match blob_plan(&blobs, &rows) {
                BlobPlan::WholeRows => rows_batch(rules[ty].clone(), ty, c.upserts.values())?,
                BlobPlan::Patch => {
                    let batch = rows_batch(rules[ty].clone(), ty, c.upserts.values())?;
                    let keep: Vec<usize> = (0..batch.num_columns())
                        .filter(|&i| {
                            def.property(batch.schema().field(i).name())
                                .is_none_or(|p| p.ty != PropType::Blob)
                        })
                        .collect();
                    batch.project(&keep)?
                }
                BlobPlan::CarryKept => {
                    let rows = carry_kept(cx, &def, &blobs, c).await?;
                    rows_batch(rules[ty].clone(), ty, rows.iter())?
                }
            };
            // External references are copied in (within the
            // per-table limit) before any table is staged.
            let batches = vec![batch];
            let copy = External::Copy {
                budget: MAX_KEYED_BYTES,
            };
            let resolved = external::resolve(&cx.graph, &def, &batches, &[], copy).await?;
            Staged::Rows(resolved.unwrap_or(batches))
        };
        staged.push((def, input));
    }
    // A whole row written alone is the one row its new fragment holds: a
    // read of the version takes it from the writer. (The order an upsert
    // writes several rows in is the storage library's, not known here.)
    let single_rows: Vec<Option<RecordBatch>> = staged
        .iter()
        .map(|(_, input)| match input {
            Staged::Rows(b) if b.len() == 1 && b[0].num_rows() == 1 => Some(b[0].clone()),
            _ => None,
        })
        .collect();
    // The tables are staged side by side: on object storage each
    // is several round trips.
    let cx_ref = &*cx;
    let txns = futures::future::try_join_all(staged.into_iter().map(|(def, input)| async move {
        let target = cx_ref.target(&def).await?;
        let txn = match input {
            Staged::Rows(batches) => stage::upsert(target.clone(), batches).await?,
            Staged::Deletes(ids) => stage::delete_ids(target.clone(), &ids).await?,
        };
        Ok::<_, OmniError>((def, target, txn))
    }))
    .await?;
    for ((def, target, txn), one) in txns.into_iter().zip(single_rows) {
        cx.stage(&def, target, txn)?;
        if let Some(row) = one {
            cx.staged_rows(&def, row);
        }
    }
    Ok((nodes, edges))
}

/// The class of a write made of mutations: strict if any is.
pub(super) fn class_of(strict: bool) -> WriteClass {
    match strict {
        true => WriteClass::Strict,
        false => WriteClass::Retryable,
    }
}

impl PrepareWork for MutationWork {
    fn prepare<'a>(&'a self, cx: &'a mut PrepareCx) -> BoxFut<'a, Result<Prepared>> {
        Box::pin(async move {
            if let Some(expected) = &self.if_commit
                && cx.snapshot.record.head != *expected
            {
                return Err(OmniError::PreconditionFailed {
                    expected: expected.clone(),
                    actual: cx.snapshot.record.head.clone(),
                });
            }
            let mut s = Staging::new(cx);
            self.run_stmts(&mut s).await?;
            validate(&mut s).await?;
            let (changes, rules) = s.into_parts();
            let (nodes, edges) = stage_changes(cx, &changes, &rules).await?;
            Ok(Prepared {
                class: class_of(self.strict()),
                summary: serde_json::json!({ "mutation": self.plan.name, "nodes": nodes, "edges": edges }),
                merge: None,
                schema_change: None,
            })
        })
    }
}

/// Counts of affected rows from a mutation's commit summary.
pub fn counts(summary: &serde_json::Value) -> (BTreeMap<String, usize>, BTreeMap<String, usize>) {
    let read = |k: &str| -> BTreeMap<String, usize> {
        summary[k]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(t, n)| (t.clone(), n.as_u64().unwrap_or(0) as usize))
                    .collect()
            })
            .unwrap_or_default()
    };
    (read("nodes"), read("edges"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn now_is_read_once_per_operation() {
        let plan = MutationPlan {
            name: "q".into(),
            params: Vec::new(),
            stmts: Vec::new(),
            strict: false,
        };
        let work = MutationWork::new(plan, BTreeMap::new(), None);
        let first = work.value(&ValExpr::Now);
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(work.value(&ValExpr::Now), first);
    }
}
