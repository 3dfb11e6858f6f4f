//! Merging one branch into another, as one more write through the
//! protocol. The prepare finds the merge base (the nearest common ancestor
//! in the commit graph), then per table compares three table references:
//! unchanged on the source, nothing to do; changed on the source only, the
//! target takes the source's version as it is (no rows read or written);
//! changed on both, a three-way merge of the entities either side changed,
//! found from the fragment layouts (`delta`), so its cost follows the
//! change since the base and not the table's size. Every conflict is
//! collected before anything is staged; any conflict writes nothing.

pub mod changes;
pub mod delta;
pub mod rules;

use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};

use arrow_array::{Array, RecordBatch};
use serde::Serialize;

use crate::compiler::catalog::{Cardinality, DST, ID, PropType, SRC, TypeDef, TypeKind};
use crate::compiler::value::{self, Value};
use crate::error::{OmniError, Result};
use crate::storage::manifest::{CommitRecord, Manifests, TableRef};
use crate::storage::substrate::{BoxFut, PrepareCx, PrepareWork, Prepared};
use crate::storage::tables::Table;
use crate::storage::{Snapshot, Target, scan, stage};
use crate::write::card::Tally;
use crate::write::columns;
use changes::{Loc, Side, side};
use delta::Rows;
use omnigraph_actors::{MergeOf, WriteClass};
use rules::{ConflictKind, Pick, Resolution};

/// One reason a merge cannot be made (the error type's, which every
/// layer may name).
pub use crate::error::MergeConflict;

/// How a merge ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MergeOutcome {
    /// The source has nothing the target lacks.
    UpToDate { commit: String },
    /// The target had not moved since the base: it now is the source.
    FastForward { commit: String },
    /// Both had moved: a merge commit with two parents.
    Merged { commit: String },
}

/// `{"outcome": name, "commit": id}`, as the CLI's `--json` prints it.
impl Serialize for MergeOutcome {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry("outcome", self.name())?;
        m.serialize_entry("commit", self.commit())?;
        m.end()
    }
}

impl MergeOutcome {
    pub fn name(&self) -> &'static str {
        match self {
            MergeOutcome::UpToDate { .. } => "up_to_date",
            MergeOutcome::FastForward { .. } => "fast_forward",
            MergeOutcome::Merged { .. } => "merged",
        }
    }

    pub fn commit(&self) -> &str {
        match self {
            MergeOutcome::UpToDate { commit }
            | MergeOutcome::FastForward { commit }
            | MergeOutcome::Merged { commit } => commit,
        }
    }
}

/// The nearest common ancestor of two commits. Commits are visited newest
/// first (a commit is always published after its parents), each marked with
/// the sides it is reachable from; the first one reached from both is the
/// nearest, since all its descendants were visited before it. Only commits
/// newer than the base are read. Returns the base's record.
pub async fn merge_base(manifests: &Manifests, a: &str, b: &str) -> Result<CommitRecord> {
    // Each commit's record is read once, when it is first reached (the two
    // heads together): its version orders the queue, its parents are
    // walked when it is visited.
    if a == b {
        return record(manifests, a).await;
    }
    let (ra, rb) = futures::try_join!(record(manifests, a), record(manifests, b))?;
    let mut marks: HashMap<String, u8> = HashMap::new();
    let mut queue: BinaryHeap<(u64, String)> = BinaryHeap::new();
    let mut records: HashMap<String, CommitRecord> = HashMap::new();
    for (rec, mark) in [(ra, 1u8), (rb, 2u8)] {
        marks.insert(rec.id.clone(), mark);
        queue.push((rec.manifest_version, rec.id.clone()));
        records.insert(rec.id.clone(), rec);
    }
    while let Some((_, id)) = queue.pop() {
        let mark = marks[&id];
        let rec = records
            .remove(&id)
            .expect("a commit's record is read when it is first reached");
        if mark == 3 {
            return Ok(rec);
        }
        for p in rec.parents {
            let known = marks.get(&p).copied();
            let now = known.unwrap_or(0) | mark;
            if known == Some(now) {
                continue;
            }
            marks.insert(p.clone(), now);
            if known.is_none() {
                let rec = record(manifests, &p).await?;
                queue.push((rec.manifest_version, p.clone()));
                records.insert(p, rec);
            }
        }
    }
    Err(OmniError::Storage(format!(
        "commits {a} and {b} have no common ancestor"
    )))
}

async fn record(manifests: &Manifests, id: &str) -> Result<CommitRecord> {
    manifests
        .commit(id)
        .await?
        .ok_or_else(|| OmniError::Storage(format!("commit {id} is missing its record")))
}

/// Merge the pinned source snapshot into the write's branch.
pub struct MergeWork {
    pub source: Snapshot,
}

impl PrepareWork for MergeWork {
    fn prepare<'a>(&'a self, cx: &'a mut PrepareCx) -> BoxFut<'a, Result<Prepared>> {
        Box::pin(async move { self.run(cx).await })
    }
}

/// A cell's row among both sides' reads: (side: 0 the source's, 1 the
/// target's; batch; row).
type At = (usize, usize, usize);

/// What the merge does to one table of the target.
#[derive(Default)]
struct TableMerge {
    /// Target rows to remove (replaced or deleted).
    remove: Rows,
    /// Rows to write, each as its cells' places.
    puts: Vec<Vec<At>>,
    put_ids: Vec<String>,
    /// Ids the merge deletes from the target.
    deleted: Vec<String>,
    /// Rows that arrived on the target since the base and that the merge
    /// keeps (for the orphan check).
    target_arrived: Vec<Loc>,
}

impl MergeWork {
    async fn run(&self, cx: &mut PrepareCx) -> Result<Prepared> {
        let g = cx.graph.clone();
        let target_head = cx.snapshot.record.head.clone();
        let source_head = self.source.record.head.clone();
        if source_head == target_head {
            return Err(OmniError::AlreadyCurrent);
        }
        let base_rec = merge_base(&g.manifests, &target_head, &source_head).await?;
        let base_id = base_rec.id.clone();
        if base_id == source_head {
            return Err(OmniError::AlreadyCurrent);
        }
        let fast_forward = base_id == target_head;
        // The base as `Target::Commit` resolves it, from the record in hand.
        let base = g
            .snapshot(&Target::Version {
                version: base_rec.manifest_version,
                branch: base_rec.branch.clone(),
            })
            .await?;
        let catalog = cx.snapshot.catalog().clone();
        let mut adopt = Vec::new();
        let mut both = Vec::new();
        for def in &catalog.types {
            let key = def.table_key();
            let (b, s, t) = (
                at_base(&base, def),
                self.source.table(def)?,
                cx.snapshot.table(def)?,
            );
            if fast_forward {
                if s != t {
                    adopt.push(key);
                }
            } else if b == Some(s) || s == t {
                // The source did not change it (or both sides name one version).
            } else if b == Some(t) {
                adopt.push(key);
            } else if base.catalog().types.iter().find(|d| d.id == def.id) == Some(def) {
                both.push(def);
            } else {
                // A schema apply since the base re-versioned the table on
                // both lines; its rows may have changed on one side only.
                match (
                    rows_changed(&g, &base, &self.source, def).await?,
                    rows_changed(&g, &base, &cx.snapshot, def).await?,
                ) {
                    (false, _) => {}
                    (true, false) => adopt.push(key),
                    (true, true) => {
                        return Err(OmniError::BadRequest(format!(
                            "{} changed on both branches, and its schema changed since their merge base {base_id}: a three-way merge across a schema change is not supported",
                            def.name
                        )));
                    }
                }
            }
        }
        // Nodes first: the orphan check of edges needs the nodes' deletions.
        both.sort_by_key(|d| d.is_edge());
        let mut sides: Vec<(Side, Side)> = Vec::new();
        let mut merges: Vec<TableMerge> = Vec::new();
        let mut conflicts = Vec::new();
        for def in &both {
            if def.properties.iter().any(|p| p.ty == PropType::Blob) {
                return Err(OmniError::BadRequest(format!(
                    "{} has Blob properties and changed on both branches: a three-way merge of Blob values is not supported yet",
                    def.name
                )));
            }
            let base_t = g.read_table(&base, def).await?;
            let s = side(&base_t, &g.read_table(&self.source, def).await?).await?;
            let t = side(&base_t, &cx.read(def).await?).await?;
            let m = three_way(def, &s, &t, &mut conflicts);
            sides.push((s, t));
            merges.push(m);
        }
        let mut one_sided = NodeDeletions::default();
        if both.iter().any(|d| d.is_edge()) {
            for def in catalog.types.iter().filter(|d| !d.is_edge()) {
                if both.iter().any(|b| b.name == def.name) {
                    continue;
                }
                let (b, s, t) = (
                    at_base(&base, def),
                    self.source.table(def)?,
                    cx.snapshot.table(def)?,
                );
                if b.is_none() {
                    // Made after the base (by a schema apply): nothing of it
                    // was there to delete.
                    continue;
                }
                let (b, s, t) = (b.expect("checked"), s, t);
                let (changed, into) = if t != b {
                    (cx.read(def).await?, &mut one_sided.on_target)
                } else if s != b {
                    (
                        g.read_table(&self.source, def).await?,
                        &mut one_sided.by_merge,
                    )
                } else {
                    continue;
                };
                let base_t = g.read_table(&base, def).await?;
                into.insert(
                    def.name.clone(),
                    side(&base_t, &changed).await?.deleted_ids(),
                );
            }
        }
        let gone = orphans(&both, &sides, &merges, one_sided, &mut conflicts);
        for (i, def) in both.iter().enumerate() {
            // The source nodes the merge writes, for an edge type's minimum.
            let from = def.endpoints().map(|(f, _)| f);
            let new_sources = both
                .iter()
                .position(|d| Some(d.name.as_str()) == from)
                .map_or(&[][..], |j| &merges[j].put_ids[..]);
            let m = &merges[i];
            constraints(cx, def, &sides[i], m, &gone, new_sources, &mut conflicts).await?;
        }
        if !conflicts.is_empty() {
            return Err(OmniError::MergeConflicts(conflicts));
        }
        let mut nodes = BTreeMap::new();
        let mut edges = BTreeMap::new();
        for (i, def) in both.iter().enumerate() {
            let m = &merges[i];
            if m.remove.is_empty() && m.puts.is_empty() {
                continue;
            }
            let batch = assemble(&sides[i], &m.puts)?;
            let target = cx.target(def).await?;
            let change = stage::replace_rows(target.clone(), &m.remove, vec![batch]).await?;
            cx.stage(def, target, change)?;
            let counts = if def.is_edge() {
                &mut edges
            } else {
                &mut nodes
            };
            counts.insert(def.name.clone(), m.puts.len() + m.deleted.len());
        }
        Ok(Prepared {
            class: WriteClass::Retryable,
            summary: serde_json::json!({
                "merge": { "source": self.source.branch, "commit": source_head, "base": base_id },
                "nodes": nodes,
                "edges": edges,
                "adopted": adopt,
                "fast_forward": fast_forward,
            }),
            merge: Some(MergeOf {
                source: self.source.branch.clone(),
                head: self.source.head(),
                adopt,
                fast_forward,
            }),
            schema_change: None,
        })
    }
}

/// Whether `side` holds other rows of `def` than the base did, when a
/// schema apply came between (the type is new since the base: whether the
/// side wrote any). Only an apply that added no filled column leaves the
/// fragments as they were, so one that did counts as a change.
async fn rows_changed(
    g: &crate::storage::GraphStorage,
    base: &Snapshot,
    side_snap: &Snapshot,
    def: &TypeDef,
) -> Result<bool> {
    let now = g.read_table(side_snap, def).await?;
    let Some(then) = base.catalog().types.iter().find(|d| d.id == def.id) else {
        return Ok(now.rows().await? > 0);
    };
    let s = side(&g.read_table(base, then).await?, &now).await?;
    Ok(!s.left.is_empty() || !s.arrived.is_empty())
}

/// The base's table of `def`, found by the type's stable id (a rename since
/// the base moved its key); `None`: the type is newer than the base.
fn at_base<'s>(base: &'s Snapshot, def: &TypeDef) -> Option<&'s TableRef> {
    let then = base.catalog().types.iter().find(|d| d.id == def.id)?;
    base.record.tables.get(&then.table_key())
}

/// The cells of a row, as values.
fn cells(side: &Side, (b, r): Loc) -> Vec<Value<'static>> {
    let batch = &side.batches[b];
    (0..batch.num_columns())
        .map(|c| value::at(batch.column(c), r).into_owned())
        .collect()
}

fn id_of(side: &Side, (b, r): Loc) -> &str {
    side.batches[b]
        .column(0)
        .as_any()
        .downcast_ref::<arrow_array::StringArray>()
        .expect("id is a string column")
        .value(r)
}

/// The three-way merge of one table: source side `s`, target side `t`
/// (each the change from the base).
fn three_way(def: &TypeDef, s: &Side, t: &Side, conflicts: &mut Vec<MergeConflict>) -> TableMerge {
    let mut m = TableMerge::default();
    let mut ids: Vec<&String> = s.left.keys().chain(s.arrived.keys()).collect();
    ids.sort();
    ids.dedup();
    let names: Vec<String> = s
        .batches
        .first()
        .or(t.batches.first())
        .map(|b| {
            b.schema()
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect()
        })
        .unwrap_or_default();
    for id in ids {
        let base = s.left.get(id).map(|(at, _)| cells(s, *at));
        let source = s.arrived.get(id).map(|(at, _)| cells(s, *at));
        // The target's row and where it is: arrived since the base, gone,
        // or the base's row where the base had it.
        let (target, target_at, target_addr): (_, Option<At>, _) =
            match (t.arrived.get(id), t.left.get(id)) {
                (Some(((b, r), addr)), _) => {
                    (Some(cells(t, (*b, *r))), Some((1, *b, *r)), Some(*addr))
                }
                (None, Some(_)) => (None, None, None),
                (None, None) => (
                    base.clone(),
                    s.left.get(id).map(|((b, r), _)| (0, *b, *r)),
                    s.left.get(id).map(|(_, addr)| *addr),
                ),
            };
        match rules::resolve(base.as_deref(), source.as_deref(), target.as_deref()) {
            Resolution::Keep => {}
            Resolution::Delete => {
                let (f, o) = target_addr.expect("a deleted row is on the target");
                m.remove.entry(f).or_default().push(o);
                m.deleted.push(id.clone());
            }
            Resolution::Put(picks) => {
                let (sb, sr) = s.arrived[id].0;
                let row = picks
                    .iter()
                    .map(|p| match (p, target_at) {
                        (Pick::Target, Some(at)) => at,
                        _ => (0, sb, sr),
                    })
                    .collect();
                if let Some((f, o)) = target_addr {
                    m.remove.entry(f).or_default().push(o);
                }
                m.puts.push(row);
                m.put_ids.push(id.clone());
            }
            Resolution::Conflicts(found) => {
                for (kind, col) in found {
                    conflicts.push(MergeConflict {
                        kind,
                        type_name: def.name.clone(),
                        id: id.clone(),
                        property: col.and_then(|c| names.get(c).cloned()),
                    });
                }
            }
        }
    }
    let replaced: HashSet<&String> = m.put_ids.iter().chain(&m.deleted).collect();
    for (id, (loc, _)) in &t.arrived {
        if !replaced.contains(id) {
            m.target_arrived.push(*loc);
        }
    }
    for offsets in m.remove.values_mut() {
        offsets.sort_unstable();
    }
    m
}

/// The merged rows of a table as one batch, each cell taken from the side
/// (0: the source's reads, 1: the target's) and row the merge picked.
fn assemble(sides: &(Side, Side), puts: &[Vec<At>]) -> Result<RecordBatch> {
    let (s, t) = sides;
    let first = s.batches.first().or(t.batches.first());
    let Some(schema) = first.map(|b| b.schema()) else {
        return Err(OmniError::Storage("a merge put rows from no read".into()));
    };
    let offset = s.batches.len();
    let mut columns = Vec::with_capacity(schema.fields().len());
    for c in 0..schema.fields().len() {
        let arrays: Vec<&dyn Array> = s
            .batches
            .iter()
            .chain(&t.batches)
            .map(|b| b.column(c).as_ref())
            .collect();
        let indices: Vec<(usize, usize)> = puts
            .iter()
            .map(|row| {
                let (side_ix, b, r) = row[c];
                (if side_ix == 0 { b } else { offset + b }, r)
            })
            .collect();
        columns.push(arrow::compute::interleave(&arrays, &indices)?);
    }
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// A string cell of a merged row.
fn cell_str<'s>(s: &'s Side, t: &'s Side, (side_ix, b, r): At, column: &str) -> &'s str {
    let side = if side_ix == 0 { s } else { t };
    string_at(side, (b, r), column).unwrap_or_default()
}

fn string_at<'s>(side: &'s Side, (b, r): Loc, column: &str) -> Option<&'s str> {
    side.batches[b]
        .column_by_name(column)
        .and_then(|c| c.as_any().downcast_ref::<arrow_array::StringArray>())
        .map(|c| c.value(r))
}

/// Edges the merged image would keep whose endpoint it no longer has: an
/// edge the source added (or changed) to a node the target deleted, or one
/// the target added to a node the source deleted.
fn orphans(
    both: &[&TypeDef],
    sides: &[(Side, Side)],
    merges: &[TableMerge],
    one_sided: NodeDeletions,
    conflicts: &mut Vec<MergeConflict>,
) -> HashSet<String> {
    // Node type -> ids deleted on the target since the base, and ids the
    // merge deletes (the source's deletions), starting from the node types
    // only one side changed.
    let NodeDeletions {
        mut on_target,
        by_merge: mut merge_deletes,
    } = one_sided;
    for (i, def) in both.iter().enumerate() {
        if def.is_edge() {
            continue;
        }
        on_target
            .entry(def.name.clone())
            .or_default()
            .extend(sides[i].1.deleted_ids());
        merge_deletes
            .entry(def.name.clone())
            .or_default()
            .extend(merges[i].deleted.iter().cloned());
    }
    let gone_on_target = on_target;
    let gone: HashSet<String> = gone_on_target
        .values()
        .chain(merge_deletes.values())
        .flatten()
        .cloned()
        .collect();
    let hits = |sets: &HashMap<String, HashSet<String>>, ty: &str, id: &str| {
        sets.get(ty).is_some_and(|s| s.contains(id))
    };
    for (i, def) in both.iter().enumerate() {
        let TypeKind::Edge { from, to, .. } = &def.kind else {
            continue;
        };
        let (s, t) = &sides[i];
        let mut orphan = |id: String| {
            conflicts.push(MergeConflict {
                kind: ConflictKind::OrphanEdge,
                type_name: def.name.clone(),
                id,
                property: None,
            })
        };
        for (row, id) in merges[i].puts.iter().zip(&merges[i].put_ids) {
            let src = cell_str(s, t, row[1], SRC);
            let dst = cell_str(s, t, row[2], DST);
            if hits(&gone_on_target, from, src) || hits(&gone_on_target, to, dst) {
                orphan(id.clone());
            }
        }
        for at in &merges[i].target_arrived {
            let src = string_at(t, *at, SRC).unwrap_or_default();
            let dst = string_at(t, *at, DST).unwrap_or_default();
            if hits(&merge_deletes, from, src) || hits(&merge_deletes, to, dst) {
                orphan(id_of(t, *at).to_string());
            }
        }
    }
    gone
}

/// Node ids deleted since the base, per node type, in the node tables only
/// one side changed: on the target (they stay deleted), or on the source
/// (the target takes its table, so the merge deletes them).
#[derive(Default)]
struct NodeDeletions {
    on_target: HashMap<String, HashSet<String>>,
    by_merge: HashMap<String, HashSet<String>>,
}

/// `@unique` and `@card` on the merged image of one table: the target's
/// rows the merge keeps plus the rows it writes.
async fn constraints(
    cx: &PrepareCx,
    def: &TypeDef,
    sides: &(Side, Side),
    m: &TableMerge,
    gone: &HashSet<String>,
    new_sources: &[String],
    conflicts: &mut Vec<MergeConflict>,
) -> Result<()> {
    if m.puts.is_empty() && m.deleted.is_empty() && new_sources.is_empty() {
        return Ok(());
    }
    let (s, t) = sides;
    let replaced: HashSet<&str> = m
        .put_ids
        .iter()
        .chain(&m.deleted)
        .map(String::as_str)
        .collect();
    let target = cx.read(def).await?;
    for cols in &def.uniques {
        if m.puts.is_empty() {
            break;
        }
        let positions: Vec<usize> = cols
            .iter()
            .filter_map(|c| {
                let b = s.batches.first().or(t.batches.first())?;
                b.schema().index_of(c).ok()
            })
            .collect();
        let mut keys: HashMap<String, &str> = HashMap::new();
        for (row, id) in m.puts.iter().zip(&m.put_ids) {
            let vals: Vec<Value> = positions
                .iter()
                .map(|p| {
                    let (side_ix, b, r) = row[*p];
                    let side = if side_ix == 0 { s } else { t };
                    value::at(side.batches[b].column(*p), r)
                })
                .collect();
            if let Some(k) = columns::unique_key(&vals)
                && keys.insert(k, id).is_some()
            {
                conflicts.push(unique_conflict(def, id, cols));
            }
        }
        let mut wanted = vec![ID];
        wanted.extend(cols.iter().map(String::as_str));
        for b in scan::scan(&target, &wanted, None).await? {
            let ids = stage::string_column(&b, ID)?;
            for i in 0..b.num_rows() {
                if replaced.contains(ids.value(i)) {
                    continue;
                }
                let vals: Vec<Value> = (1..=cols.len())
                    .map(|c| value::at(b.column(c), i))
                    .collect();
                if let Some(k) = columns::unique_key(&vals)
                    && let Some(id) = keys.get(&k)
                {
                    conflicts.push(unique_conflict(def, id, cols));
                }
            }
        }
    }
    if let TypeKind::Edge { card, .. } = &def.kind
        && card.constrains()
    {
        let image = Image {
            target: &target,
            replaced: &replaced,
            gone,
            new_sources,
        };
        cardinality(&image, def, *card, sides, m, conflicts).await?;
    }
    Ok(())
}

fn unique_conflict(def: &TypeDef, id: &str, cols: &[String]) -> MergeConflict {
    MergeConflict {
        kind: ConflictKind::UniqueViolation,
        type_name: def.name.clone(),
        id: id.to_string(),
        property: Some(cols.join(", ")),
    }
}

/// The target's table as the merge leaves it: its rows but the replaced
/// ones, and the nodes that are gone.
struct Image<'a> {
    target: &'a Table,
    replaced: &'a HashSet<&'a str>,
    gone: &'a HashSet<String>,
    /// The ids of the source node type the merge writes.
    new_sources: &'a [String],
}

/// The `@card` rule (src/write/card.rs) on the merged image: the sources
/// of the edges the merge writes, of the target's edges it replaces or
/// deletes, and (under a minimum) the source nodes it writes. A table only
/// one side changed needs no count: that side held the rule, and the
/// merge takes its table whole.
async fn cardinality(
    image: &Image<'_>,
    def: &TypeDef,
    card: Cardinality,
    (s, t): &(Side, Side),
    m: &TableMerge,
    conflicts: &mut Vec<MergeConflict>,
) -> Result<()> {
    let Image {
        target,
        replaced,
        gone,
        new_sources,
    } = image;
    let mut tally = Tally::new(card);
    for row in &m.puts {
        tally.watch(cell_str(s, t, row[1], SRC), None);
    }
    for id in &m.deleted {
        if let Some((loc, _)) = s.left.get(id)
            && let Some(src) = string_at(s, *loc, SRC)
        {
            tally.watch(src, None);
        }
    }
    if card.min > 0 {
        for id in *new_sources {
            tally.watch(id, None);
        }
    }
    for id in gone.iter() {
        tally.forget(id);
    }
    let batches = scan::scan(target, &[ID, SRC], None).await?;
    // A replaced edge's source loses it (an update may move its `from`).
    for b in &batches {
        let (ids, src) = (stage::string_column(b, ID)?, stage::string_column(b, SRC)?);
        for i in 0..b.num_rows() {
            if replaced.contains(ids.value(i)) && !gone.contains(src.value(i)) {
                tally.watch(src.value(i), None);
            }
        }
    }
    for b in &batches {
        let (ids, src) = (stage::string_column(b, ID)?, stage::string_column(b, SRC)?);
        for i in 0..b.num_rows() {
            if !replaced.contains(ids.value(i)) {
                tally.edge(src.value(i), None);
            }
        }
    }
    for row in &m.puts {
        tally.edge(cell_str(s, t, row[1], SRC), None);
    }
    for (src, _, _) in tally.broken() {
        conflicts.push(MergeConflict {
            kind: ConflictKind::CardinalityViolation,
            type_name: def.name.clone(),
            id: src,
            property: None,
        });
    }
    Ok(())
}
