//! A schema apply as a write. Prepared under the exclusive schema gate over
//! the latest graph version, it checks every branch's rows against the new
//! rules, writes the new schema's files, makes the tables of new types and
//! stages each changed type's table change on every branch's line (forking
//! a table a branch still shares); the protocol commits them and publishes
//! the new schema with them, all at once. The same checks, without the
//! writes, make the plan a user reads first.

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow_array::RecordBatch;
use futures::TryStreamExt;
use serde::{Deserialize, Serialize};

use super::card::Tally;
use super::columns::{self, TypeRules};
use crate::compiler::catalog::{Catalog, ID, SRC, TypeDef, TypeKind};
use crate::compiler::schema::evolve::{self, Evolution, Rule, Source, Step, Validation, Work};
use crate::compiler::value::{self, Value};
use crate::error::{Location, OmniError, Result};
use crate::storage::manifest::{BranchRecord, Manifest};
use crate::storage::stage::{self, NewColumn};
use crate::storage::substrate::{BoxFut, PrepareCx, PrepareWork, Prepared};
use crate::storage::{GraphStorage, Schema, Snapshot, scan, tables};
use crate::util::hash::FxHashMap;
use omnigraph_actors::{NewTable, SchemaChange, WriteClass};

/// A schema's source as the graph keeps it: newlines as `\n`, no trailing
/// blanks on a line, one newline at the end.
pub fn normalise(source: &str) -> String {
    let mut out: String = source
        .lines()
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n");
    while out.ends_with('\n') {
        out.pop();
    }
    let start = out.len() - out.trim_start_matches('\n').len();
    out.drain(..start);
    out.push('\n');
    out
}

/// One step of a plan, with the rows it reads or writes (every branch's
/// tables, each physical version once).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PlannedStep {
    #[serde(flatten)]
    pub step: Step,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<u64>,
}

/// What applying a schema would do; nothing is written to make it.
#[derive(Clone, Debug, Serialize)]
pub struct SchemaPlan {
    /// The accepted schema the plan starts from.
    pub from: String,
    pub changes: bool,
    pub steps: Vec<PlannedStep>,
    /// Table commits the apply makes (one per changed type and branch).
    pub table_commits: usize,
}

/// The latest graph version, its schema and the evolution to `source`,
/// planned without reading any row.
pub async fn evolution(
    g: &GraphStorage,
    source: &str,
) -> Result<(Arc<Manifest>, Arc<Schema>, Evolution)> {
    let latest = g.manifests.refresh().await?;
    let from = g.schema(&latest.schema).await?;
    let evo = evolve::evolve(&from.catalog, &normalise(source))?;
    Ok((latest, from, evo))
}

/// [`evolution`], with every rule checked on every branch's rows and the
/// rows of each step counted.
pub async fn plan(
    g: &GraphStorage,
    source: &str,
) -> Result<(Arc<Manifest>, Arc<Schema>, Evolution, SchemaPlan)> {
    let (latest, from, evo) = evolution(g, source).await?;
    validate(g, &latest, &from, &evo).await?;
    let mut steps = Vec::new();
    for s in &evo.steps {
        let rows = match s.work {
            Work::Scan | Work::Rewrite => {
                let def = evo
                    .catalog
                    .get(&s.type_name)
                    .and_then(|t| from.catalog.types.iter().find(|o| o.id == t.id))
                    .ok_or_else(|| OmniError::Storage(format!("no type {}", s.type_name)))?;
                Some(rows_of(g, &latest, &from, def).await?)
            }
            Work::Metadata | Work::Create => None,
        };
        steps.push(PlannedStep {
            step: s.clone(),
            rows,
        });
    }
    let plan = SchemaPlan {
        from: from.id.clone(),
        changes: !evo.is_empty(),
        table_commits: evo.tables.len() * latest.branches.len(),
        steps,
    };
    Ok((latest, from, evo, plan))
}

/// Each distinct combination of physical versions of the types' tables
/// across the branches, as a snapshot of one branch that names it.
fn versions_of(latest: &Arc<Manifest>, from: &Arc<Schema>, defs: &[&TypeDef]) -> Vec<Snapshot> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for (branch, rec) in &latest.branches {
        let Some(key) = defs
            .iter()
            .map(|d| {
                let r = rec.tables.get(&d.table_key())?;
                Some((r.dir.clone(), r.lance_branch.clone(), r.version))
            })
            .collect::<Option<Vec<_>>>()
        else {
            continue;
        };
        if seen.insert(key) {
            out.push(snapshot(latest, from, branch, rec));
        }
    }
    out
}

fn snapshot(
    latest: &Arc<Manifest>,
    from: &Arc<Schema>,
    branch: &str,
    rec: &BranchRecord,
) -> Snapshot {
    Snapshot {
        manifest: latest.clone(),
        branch: branch.to_string(),
        record: rec.clone(),
        schema: from.clone(),
    }
}

async fn rows_of(
    g: &GraphStorage,
    latest: &Arc<Manifest>,
    from: &Arc<Schema>,
    def: &TypeDef,
) -> Result<u64> {
    let mut n = 0;
    for snap in versions_of(latest, from, &[def]) {
        n += g.read_table(&snap, def).await?.rows().await? as u64;
    }
    Ok(n)
}

fn violation(t: &TypeDef, prop: Option<&str>, value: Option<String>, message: String) -> OmniError {
    OmniError::invalid(
        Location {
            line: None,
            row: None,
            type_name: Some(t.name.clone()),
            property: prop.map(str::to_string),
            value,
            ..Default::default()
        },
        message,
    )
}

/// Every rule of the evolution on every branch's rows; the first row that
/// breaks one refuses the change, by its id.
async fn validate(
    g: &GraphStorage,
    latest: &Arc<Manifest>,
    from: &Arc<Schema>,
    evo: &Evolution,
) -> Result<()> {
    for v in &evo.validations {
        let old = def_by_id(&from.catalog, v.type_id)?;
        let new = def_by_id(&evo.catalog, v.type_id)?;
        // A minimum counts every source node, those with no edges too: each
        // distinct pair of the edge and source tables is read.
        let source_type = match (&v.rule, &old.kind) {
            (Rule::Card(card), TypeKind::Edge { from: f, .. }) if card.min > 0 => {
                Some(from.catalog.get(f).expect("an edge's source type"))
            }
            _ => None,
        };
        let mut types = vec![old];
        types.extend(source_type);
        for snap in versions_of(latest, from, &types) {
            let table = g.read_table(&snap, old).await?;
            let sources = match source_type {
                Some(node) => Some(g.read_table(&snap, node).await?),
                None => None,
            };
            check_rule(&table, sources.as_ref(), &snap.branch, new, v).await?;
        }
    }
    Ok(())
}

/// The stored columns a rule reads, beside `id` (and `src` for `@card`).
fn stored(v: &Validation, props: &[String]) -> Vec<String> {
    props
        .iter()
        .filter_map(|p| match v.columns.get(p) {
            Some(Source::Stored(c)) => Some(c.clone()),
            _ => None,
        })
        .collect()
}

/// The value of property `p` (new name) in row `i`.
fn cell<'b>(v: &'b Validation, b: &'b RecordBatch, p: &str, i: usize) -> Result<Value<'b>> {
    match v.columns.get(p) {
        Some(Source::Stored(c)) => {
            let a = b
                .column_by_name(c)
                .ok_or_else(|| OmniError::Storage(format!("column {c} is missing")))?;
            Ok(value::at(a, i))
        }
        Some(Source::Added(x)) => Ok(x.clone()),
        None => Err(OmniError::Storage(format!("no property {p}"))),
    }
}

async fn check_rule(
    table: &crate::storage::tables::Table,
    sources: Option<&crate::storage::tables::Table>,
    branch: &str,
    t: &TypeDef,
    v: &Validation,
) -> Result<()> {
    let on = |id: &str| format!("the existing {} {id:?} (branch {branch})", t.name);
    match &v.rule {
        Rule::Values(props) => {
            let rules = TypeRules::new(t)?;
            let mut cols = vec![ID.to_string()];
            cols.extend(stored(v, props));
            let wanted: Vec<&str> = cols.iter().map(String::as_str).collect();
            let mut batches = scan::stream(table, &wanted, None, None, false).await?;
            while let Some(b) = batches.try_next().await? {
                let ids = stage::string_column(&b, ID)?;
                for i in 0..b.num_rows() {
                    for p in props {
                        let Some(k) = rules.prop_index(p) else {
                            continue;
                        };
                        if let Err((why, shown)) = rules.props[k].validate(Some(cell(v, &b, p, i)?))
                        {
                            return Err(violation(
                                t,
                                Some(p),
                                shown,
                                format!(
                                    "{}: {why}; the schema change is refused",
                                    on(ids.value(i))
                                ),
                            ));
                        }
                    }
                }
            }
        }
        Rule::Unique(props) => {
            let mut cols = vec![ID.to_string()];
            cols.extend(stored(v, props));
            let wanted: Vec<&str> = cols.iter().map(String::as_str).collect();
            let mut seen: FxHashMap<String, String> = FxHashMap::default();
            let mut batches = scan::stream(table, &wanted, None, None, false).await?;
            while let Some(b) = batches.try_next().await? {
                let ids = stage::string_column(&b, ID)?;
                for i in 0..b.num_rows() {
                    let vals = props
                        .iter()
                        .map(|p| cell(v, &b, p, i))
                        .collect::<Result<Vec<_>>>()?;
                    let Some(key) = columns::unique_key(&vals) else {
                        continue;
                    };
                    let id = ids.value(i);
                    if let Some(first) = seen.get(&key) {
                        return Err(violation(
                            t,
                            Some(&props.join(", ")),
                            Some(key.replace('\u{1}', ", ")),
                            format!(
                                "{} has the same value as {first:?}, so @unique({}) does not hold; the schema change is refused",
                                on(id),
                                props.join(", ")
                            ),
                        ));
                    }
                    seen.insert(key, id.to_string());
                }
            }
        }
        Rule::Card(card) => {
            let mut tally = Tally::new(*card);
            if let Some(nodes) = sources {
                let mut batches = scan::stream(nodes, &[ID], None, None, false).await?;
                while let Some(b) = batches.try_next().await? {
                    let ids = stage::string_column(&b, ID)?;
                    for i in 0..b.num_rows() {
                        tally.watch(ids.value(i), None);
                    }
                }
            }
            let mut batches = scan::stream(table, &[SRC], None, None, false).await?;
            while let Some(b) = batches.try_next().await? {
                let src = stage::string_column(&b, SRC)?;
                for i in 0..b.num_rows() {
                    // Under a maximum only, a source with edges is all there is to count.
                    tally.watch(src.value(i), None);
                    tally.edge(src.value(i), None);
                }
            }
            if let Some((s, n, _)) = tally.broken().into_iter().next() {
                return Err(violation(
                    t,
                    Some("from"),
                    Some(format!("{s:?}")),
                    format!(
                        "the source {s:?} (branch {branch}) has {n} {} edges, outside {card}; the schema change is refused",
                        t.name
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The apply's prepare step, pinned (by the handle) to the schema its
/// source was written against.
pub struct SchemaApplyWork {
    pub source: String,
}

impl PrepareWork for SchemaApplyWork {
    fn prepare<'a>(&'a self, cx: &'a mut PrepareCx) -> BoxFut<'a, Result<Prepared>> {
        Box::pin(self.run(cx))
    }
}

impl SchemaApplyWork {
    async fn run(&self, cx: &mut PrepareCx) -> Result<Prepared> {
        let g = cx.graph.clone();
        let (latest, from, evo, plan) = plan(&g, &self.source).await?;
        if evo.is_empty() {
            return Err(OmniError::AlreadyCurrent);
        }
        let to = g
            .put_schema(&normalise(&self.source), evo.catalog.clone())
            .await?;
        let created = create_tables(&g, &evo.catalog, &evo.created).await?;
        for change in &evo.tables {
            let old = def_by_id(&from.catalog, change.type_id)?;
            for (branch, rec) in &latest.branches {
                let base = cx.target_on(branch, rec, old).await?;
                let added = change
                    .added
                    .iter()
                    .map(|a| {
                        let prop = a.prop.clone();
                        let fill = a.fill.clone();
                        NewColumn {
                            field: tables::prop_field(&a.prop),
                            fill: (fill != Value::Null).then(|| {
                                Arc::new(move |n: usize| columns::constant_column(&prop, &fill, n))
                                    as stage::ColumnFill
                            }),
                        }
                    })
                    .collect();
                let staged =
                    stage::evolve_columns(base.clone(), added, &change.renamed, &change.dropped)
                        .await?;
                cx.stage_on(branch, rec, old, base, staged)?;
            }
        }
        let steps: Vec<&Step> = evo.steps.iter().collect();
        Ok(Prepared {
            class: WriteClass::Retryable,
            summary: serde_json::json!({
                "schema": { "from": from.id, "to": to.id },
                "steps": steps,
                "plan": plan,
            }),
            merge: None,
            schema_change: Some(SchemaChange {
                from: from.id.clone(),
                to: to.id.clone(),
                manifest: latest.version,
                created,
            }),
        })
    }
}

fn def_by_id(c: &Catalog, id: u32) -> Result<&TypeDef> {
    c.types
        .iter()
        .find(|t| t.id == id)
        .ok_or_else(|| OmniError::Storage(format!("the catalog has no type with id {id}")))
}

/// An empty table for each new type, at a folder of its own: a folder a
/// type of the same name ever had (dropped, its data kept for the past),
/// or an apply that died before its publish, is never reused.
async fn create_tables(g: &GraphStorage, catalog: &Catalog, ids: &[u32]) -> Result<Vec<NewTable>> {
    let mut out = Vec::new();
    for id in ids {
        let def = def_by_id(catalog, *id)?;
        let incarnation: u64 = rand::random();
        let dir = def
            .table_dir()
            .replace(".lance", &format!("-{incarnation:016x}.lance"));
        let version = g.tables.create(&dir, tables::table_schema(def)).await?;
        out.push(NewTable {
            table: def.table_key(),
            dir,
            version,
            incarnation,
        });
    }
    Ok(out)
}
