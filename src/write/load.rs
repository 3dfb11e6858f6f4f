//! A bulk load as one graph commit. Parsing (snapshot-independent) happens
//! before the protocol starts; the [`LoadWork`] below runs in the protocol's
//! prepare step against the captured snapshot: duplicate ids, edge endpoints,
//! key conflicts, overwrite orphans, then one staged transaction per type.
//!
//! Modes: `overwrite` replaces every type the file mentions; `append` is a
//! strict insert; `merge` upserts by id, the last occurrence in the file
//! winning.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{Array, BooleanArray, RecordBatch, StringArray};
use serde::Serialize;

use super::jsonl::{Parsed, ParsedType};
use super::staged_rules;
use crate::compiler::catalog::{Catalog, DST, ID, SRC, TypeDef, TypeKind};
use crate::error::{Location, OmniError, Result};
use crate::storage::external::{self, External};
use crate::storage::stage;
use crate::storage::substrate::{BoxFut, PrepareCx, PrepareWork, Prepared};
use crate::storage::tables::APPENDED_ROWS_MAX;
use crate::util::hash::FxHashMap;
use crate::util::idindex::{ABSENT, IdIndex};
use omnigraph_actors::WriteClass;

/// Rows one keyed write (append, merge) may stage per table in one commit.
pub const MAX_KEYED_ROWS: usize = 8192;
/// Bytes one keyed write may stage per table in one commit.
pub const MAX_KEYED_BYTES: usize = 32 << 20;
/// Above this many unknown endpoint ids, read all of a table's ids instead of
/// probing for each.
const PROBE_LIMIT: usize = 50_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LoadMode {
    Overwrite,
    Append,
    Merge,
}

impl std::str::FromStr for LoadMode {
    type Err = OmniError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "overwrite" => Ok(Self::Overwrite),
            "append" => Ok(Self::Append),
            "merge" => Ok(Self::Merge),
            other => Err(OmniError::BadRequest(format!(
                "unknown load mode {other:?} (overwrite, append or merge)"
            ))),
        }
    }
}

impl LoadMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Overwrite => "overwrite",
            Self::Append => "append",
            Self::Merge => "merge",
        }
    }
}

pub struct LoadWork {
    parsed: Parsed,
    mode: LoadMode,
    /// Each node type's ids in the file, and each edge type's explicit
    /// ones, indexed once.
    file_ids: FxHashMap<u32, Arc<IdIndex>>,
}

fn ids(b: &RecordBatch) -> &StringArray {
    stage::string_column(b, ID).expect("every table has an id column")
}

fn line_of(pt: &ParsedType, batch: usize, row: usize) -> usize {
    pt.lines[batch][row] as usize
}

fn loc(line: usize, ty: &str, prop: Option<&str>, value: Option<String>) -> Location {
    Location {
        line: Some(line),
        row: None,
        type_name: Some(ty.to_string()),
        property: prop.map(str::to_string),
        value,
        ..Default::default()
    }
}

impl LoadWork {
    /// Check what needs no snapshot (the keyed-write limits) and keep the
    /// parsed file for the prepare step. Merge also drops all but the last
    /// occurrence of each id here.
    pub fn new(mut parsed: Parsed, mode: LoadMode) -> Result<Self> {
        if mode != LoadMode::Overwrite {
            for pt in parsed.types.values() {
                let rows = pt.rows();
                if rows > MAX_KEYED_ROWS {
                    return Err(OmniError::ResourceLimitExceeded {
                        what: format!(
                            "{} rows of {} in one {} commit",
                            rows,
                            pt.def.name,
                            mode.as_str()
                        ),
                        limit: format!("{MAX_KEYED_ROWS} rows per table"),
                    });
                }
                let bytes: usize = pt.batches.iter().map(|b| b.get_array_memory_size()).sum();
                if bytes > MAX_KEYED_BYTES {
                    return Err(OmniError::ResourceLimitExceeded {
                        what: format!(
                            "{} bytes of {} in one {} commit",
                            bytes,
                            pt.def.name,
                            mode.as_str()
                        ),
                        limit: format!("{} MiB per table", MAX_KEYED_BYTES >> 20),
                    });
                }
            }
        }
        if mode == LoadMode::Merge {
            for pt in parsed.types.values_mut() {
                keep_last(pt)?;
            }
        }
        // Each node type's ids are indexed once, for every check after;
        // the pass that builds the index also refuses a repeated id.
        let mut file_ids = FxHashMap::default();
        for pt in parsed.types.values() {
            let unique = mode != LoadMode::Merge && pt.explicit_ids > 0;
            if pt.def.is_edge() && pt.explicit_ids == 0 {
                continue; // generated ids cannot repeat nor replace an edge
            }
            let parts: Vec<StringArray> = pt.batches.iter().map(|b| ids(b).clone()).collect();
            let all = IdIndex::concat(&parts)?;
            drop(parts);
            let index = match unique {
                true => {
                    IdIndex::unique(all).map_err(|(first, again)| repeated(pt, first, again))?
                }
                false => IdIndex::new(all),
            };
            file_ids.insert(pt.def.id, Arc::new(index));
        }
        Ok(Self {
            parsed,
            mode,
            file_ids,
        })
    }

    pub fn mode(&self) -> LoadMode {
        self.mode
    }

    /// One load of the rows of `works` (one mode, not an overwrite), in
    /// order, checked as one file of them would be: a group commit of
    /// loads. Under merge the last member to write an id wins.
    pub fn combine(works: &[&LoadWork]) -> Result<Self> {
        let mode = works[0].mode;
        let mut types: BTreeMap<u32, ParsedType> = BTreeMap::new();
        let (mut lines, mut bytes) = (0usize, 0u64);
        for w in works {
            for (id, pt) in &w.parsed.types {
                let e = types.entry(*id).or_insert_with(|| ParsedType {
                    def: pt.def.clone(),
                    batches: Vec::new(),
                    lines: Vec::new(),
                    explicit_ids: 0,
                });
                e.batches.extend(pt.batches.iter().cloned());
                let at = lines as u32;
                e.lines
                    .extend(pt.lines.iter().map(|l| l.iter().map(|x| x + at).collect()));
                e.explicit_ids += pt.explicit_ids;
            }
            lines += w.parsed.lines;
            bytes += w.parsed.bytes;
        }
        Self::new(
            Parsed {
                types,
                lines,
                bytes,
            },
            mode,
        )
    }

    /// The ids this load writes, per type name.
    pub fn ids(&self) -> BTreeMap<String, Vec<String>> {
        self.parsed
            .types
            .values()
            .map(|pt| {
                let list = pt
                    .batches
                    .iter()
                    .flat_map(|b| ids(b).iter().flatten().map(str::to_string))
                    .collect();
                (pt.def.name.clone(), list)
            })
            .collect()
    }

    /// Rows per type name, nodes and edges apart.
    pub fn counts(&self) -> (BTreeMap<String, usize>, BTreeMap<String, usize>) {
        let mut nodes = BTreeMap::new();
        let mut edges = BTreeMap::new();
        for pt in self.parsed.types.values() {
            let map = if pt.def.is_edge() {
                &mut edges
            } else {
                &mut nodes
            };
            map.insert(pt.def.name.clone(), pt.rows());
        }
        (nodes, edges)
    }

    fn overwrites(&self, t: &TypeDef) -> bool {
        self.mode == LoadMode::Overwrite && self.parsed.types.contains_key(&t.id)
    }

    /// Every edge endpoint names a node in the file or (unless the file
    /// overwrites that node type) in the snapshot.
    async fn check_endpoints(&self, cx: &PrepareCx) -> Result<()> {
        let catalog = cx.catalog();
        // One index of the file's ids per endpoint type, shared by src and dst.
        for pt in self.parsed.types.values() {
            let TypeKind::Edge { from, to, .. } = &pt.def.kind else {
                continue;
            };
            for (column, node_type) in [(SRC, from), (DST, to)] {
                let node = catalog.node(node_type).expect("edge endpoints are nodes");
                let missing = missing_endpoints(pt, column, &self.file_ids(node));
                if missing.is_empty() {
                    continue;
                }
                let mut unresolved: Vec<(&str, usize)> = missing.into_iter().collect();
                if !self.overwrites(node) {
                    let ds = cx.read(node).await?;
                    if unresolved.len() > PROBE_LIMIT {
                        let graph_ids = IdIndex::from_parts(&stage::scan_strings(&ds, ID).await?)?;
                        unresolved.retain(|(id, _)| graph_ids.get(id).is_none());
                    } else {
                        let probe: Vec<&str> = unresolved.iter().map(|(id, _)| *id).collect();
                        let found = stage::existing_ids(&ds, &probe).await?;
                        unresolved.retain(|(id, _)| !found.contains(*id));
                    }
                }
                if let Some((id, line)) = unresolved.into_iter().min_by_key(|(_, l)| *l) {
                    let which = if column == SRC { "from" } else { "to" };
                    return Err(OmniError::invalid(
                        loc(line, &pt.def.name, Some(which), Some(format!("{id:?}"))),
                        format!(
                            "edge endpoint: no {node_type} with this id exists in the file or the graph"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The ids the file gives a node type.
    fn file_ids(&self, node: &TypeDef) -> Arc<IdIndex> {
        match self.file_ids.get(&node.id) {
            Some(index) => index.clone(),
            None => Arc::new(IdIndex::new(StringArray::from(Vec::<&str>::new()))),
        }
    }

    /// Every `@card` edge type whose count the file may change: it brings
    /// edges of it, or (under a minimum) nodes of its source type.
    async fn check_cardinality(&self, cx: &PrepareCx) -> Result<()> {
        let catalog = cx.catalog();
        for edge in catalog.edges() {
            let TypeKind::Edge { from, card, .. } = &edge.kind else {
                continue;
            };
            let from = catalog.get(from).expect("an edge's source type");
            let (edges, nodes) = (
                self.parsed.types.get(&edge.id),
                self.parsed.types.get(&from.id),
            );
            if !card.constrains() || (edges.is_none() && (card.min == 0 || nodes.is_none())) {
                continue;
            }
            let edge_ids = self.file_ids(edge);
            staged_rules::cardinality(
                cx,
                staged_rules::CardInput {
                    edge,
                    card: *card,
                    edges,
                    edges_kept: !self.overwrites(edge),
                    edge_ids: &edge_ids,
                    from,
                    nodes,
                    nodes_kept: !self.overwrites(from),
                },
            )
            .await?;
        }
        Ok(())
    }

    /// Append is a strict insert: an id already in the graph is a conflict.
    async fn check_new_ids(&self, cx: &PrepareCx) -> Result<()> {
        for pt in self.parsed.types.values() {
            if pt.explicit_ids == 0 {
                continue; // generated ids cannot collide
            }
            let all: Vec<&str> = pt
                .batches
                .iter()
                .flat_map(|b| {
                    let a = ids(b);
                    (0..a.len()).map(move |i| a.value(i))
                })
                .collect();
            let ds = cx.read(&pt.def).await?;
            let found = stage::existing_ids(&ds, &all).await?;
            if let Some(id) = all.iter().find(|id| found.contains(**id)) {
                return Err(OmniError::KeyConflict {
                    type_name: pt.def.name.clone(),
                    id: id.to_string(),
                });
            }
        }
        Ok(())
    }

    /// Overwriting a node type must not strand edges the file leaves alone.
    async fn check_orphans(&self, cx: &PrepareCx) -> Result<()> {
        let catalog: &Catalog = cx.catalog();
        for pt in self.parsed.types.values().filter(|p| !p.def.is_edge()) {
            let new_ids = self.file_ids(&pt.def);
            for edge in catalog.edges() {
                if self.overwrites(edge) {
                    continue; // its rows are checked against the file
                }
                let (from, to) = edge.endpoints().expect("edge");
                for (column, node) in [(SRC, from), (DST, to)] {
                    if node != pt.def.name {
                        continue;
                    }
                    let ds = cx.read(edge).await?;
                    let mut at = Vec::new();
                    for a in stage::scan_strings(&ds, column).await? {
                        at.clear();
                        new_ids.lookup_all(&a, &mut at);
                        if let Some(i) = at.iter().position(|p| *p == ABSENT) {
                            return Err(OmniError::invalid(
                                Location {
                                    type_name: Some(pt.def.name.clone()),
                                    value: Some(format!("{:?}", a.value(i))),
                                    ..Default::default()
                                },
                                format!(
                                    "overwriting {} would leave {} edges pointing at this removed node",
                                    pt.def.name, edge.name
                                ),
                            ));
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// Edge endpoints (with the line of their first use) not among `known`.
fn missing_endpoints<'a>(
    pt: &'a ParsedType,
    column: &str,
    known: &IdIndex,
) -> FxHashMap<&'a str, usize> {
    let per_batch = |bi: usize| -> Vec<(&'a str, usize)> {
        let a = stage::string_column(&pt.batches[bi], column).expect("edge column");
        let mut at = Vec::with_capacity(a.len());
        known.lookup_all(a, &mut at);
        at.iter()
            .enumerate()
            .filter(|(_, p)| **p == ABSENT)
            .map(|(i, _)| (a.value(i), line_of(pt, bi, i)))
            .collect()
    };
    let n = pt.batches.len();
    let found: Vec<(&'a str, usize)> = if n > 1 {
        // Two halves on two cores: tens of millions of lookups at s1m.
        std::thread::scope(|s| {
            let half = n / 2;
            let left = s.spawn(move || (0..half).flat_map(per_batch).collect::<Vec<_>>());
            let mut right: Vec<_> = (half..n).flat_map(per_batch).collect();
            let mut all = left.join().expect("endpoint check thread");
            all.append(&mut right);
            all
        })
    } else {
        (0..n).flat_map(per_batch).collect()
    };
    let mut out = FxHashMap::default();
    for (id, line) in found {
        out.entry(id).or_insert(line);
    }
    out
}

/// The error for an id the file gives twice: at its rows `first` and
/// `again` (numbered across the type's batches).
fn repeated(pt: &ParsedType, first: u32, again: u32) -> OmniError {
    let place = |row: u32| {
        let mut row = row as usize;
        for (bi, b) in pt.batches.iter().enumerate() {
            if row < b.num_rows() {
                return (bi, row);
            }
            row -= b.num_rows();
        }
        unreachable!("a row of the type's batches")
    };
    let ((fb, fi), (ab, ai)) = (place(first), place(again));
    let id = ids(&pt.batches[ab]).value(ai);
    let at = loc(
        line_of(pt, ab, ai),
        &pt.def.name,
        Some("id"),
        Some(format!("{id:?}")),
    );
    let first = u32::try_from(line_of(pt, fb, fi)).ok();
    OmniError::invalid(Location { first, ..at }, "duplicate id in the input")
}

/// Merge keeps the last occurrence of each id.
fn keep_last(pt: &mut ParsedType) -> Result<()> {
    let mut last: FxHashMap<&str, (usize, usize)> = FxHashMap::default();
    let mut dup = false;
    for (bi, b) in pt.batches.iter().enumerate() {
        let a = ids(b);
        for i in 0..a.len() {
            dup |= last.insert(a.value(i), (bi, i)).is_some();
        }
    }
    if !dup {
        return Ok(());
    }
    let masks: Vec<BooleanArray> = pt
        .batches
        .iter()
        .enumerate()
        .map(|(bi, b)| {
            let a = ids(b);
            (0..a.len())
                .map(|i| Some(last[a.value(i)] == (bi, i)))
                .collect()
        })
        .collect();
    drop(last);
    for (bi, mask) in masks.iter().enumerate() {
        pt.batches[bi] = arrow::compute::filter_record_batch(&pt.batches[bi], mask)?;
        let lines = std::mem::take(&mut pt.lines[bi]);
        pt.lines[bi] = lines
            .into_iter()
            .zip(mask.iter())
            .filter_map(|(l, keep)| keep.unwrap_or(false).then_some(l))
            .collect();
    }
    Ok(())
}

impl PrepareWork for LoadWork {
    fn prepare<'a>(&'a self, cx: &'a mut PrepareCx) -> BoxFut<'a, Result<Prepared>> {
        Box::pin(async move {
            let t0 = std::time::Instant::now();
            self.check_endpoints(cx).await?;
            tracing::info!(
                ms = t0.elapsed().as_millis() as u64,
                "load: endpoints checked"
            );
            match self.mode {
                LoadMode::Append => self.check_new_ids(cx).await?,
                LoadMode::Overwrite => self.check_orphans(cx).await?,
                LoadMode::Merge => {}
            }
            for pt in self.parsed.types.values() {
                if staged_rules::applies(&pt.def) {
                    let file_ids = self.file_ids(&pt.def);
                    staged_rules::check(cx, pt, !self.overwrites(&pt.def), &file_ids).await?;
                }
            }
            self.check_cardinality(cx).await?;
            // External references are checked, sized and (but for an
            // overwrite) copied in before any table is staged: a refused
            // one leaves no staged file behind.
            let external = match self.mode {
                LoadMode::Overwrite => External::Reference,
                LoadMode::Append | LoadMode::Merge => External::Copy {
                    budget: MAX_KEYED_BYTES,
                },
            };
            let mut inputs = Vec::with_capacity(self.parsed.types.len());
            for pt in self.parsed.types.values() {
                inputs.push(
                    external::resolve(&cx.graph, &pt.def, &pt.batches, &pt.lines, external)
                        .await?
                        .unwrap_or_else(|| pt.batches.clone()),
                );
            }
            // Tables are written side by side: a node table's encoding
            // overlaps the edge table's.
            // On object storage each is a round trip or more: resolve them
            // together too.
            let targets = futures::future::try_join_all(
                self.parsed.types.values().map(|pt| cx.target(&pt.def)),
            )
            .await?;
            let staged = self
                .parsed
                .types
                .values()
                .zip(&targets)
                .zip(inputs)
                .map(|((pt, target), batches)| {
                let target = target.clone();
                async move {
                    let txn = match self.mode {
                        LoadMode::Overwrite => stage::overwrite(target, batches).await?,
                        LoadMode::Append => stage::append(target, batches).await?,
                        LoadMode::Merge => stage::upsert(target, batches).await?,
                    };
                    tracing::info!(table = %pt.def.name, ms = t0.elapsed().as_millis() as u64, "load: staged");
                    Ok::<_, OmniError>(txn)
                }
            });
            let txns = futures::future::try_join_all(staged).await?;
            for ((pt, target), txn) in self.parsed.types.values().zip(targets).zip(txns) {
                cx.stage(&pt.def, target, txn)?;
                // An append writes its rows in order: a read of the version
                // it makes takes them from the writer.
                if self.mode == LoadMode::Append && pt.rows() <= APPENDED_ROWS_MAX {
                    let rows =
                        arrow::compute::concat_batches(&pt.batches[0].schema(), &pt.batches)?;
                    cx.staged_rows(&pt.def, rows);
                }
            }
            let (nodes, edges) = self.counts();
            let class = match self.mode {
                LoadMode::Overwrite => WriteClass::Strict,
                LoadMode::Append | LoadMode::Merge => WriteClass::Retryable,
            };
            Ok(Prepared {
                class,
                summary: serde_json::json!({
                    "mode": self.mode.as_str(),
                    "nodes": nodes,
                    "edges": edges,
                }),
                merge: None,
                schema_change: None,
            })
        })
    }
}

/// Parse, check and wrap a JSONL input for loading.
pub fn prepare_input(
    catalog: &Catalog,
    input: impl std::io::Read,
    mode: LoadMode,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Arc<LoadWork>> {
    let t0 = std::time::Instant::now();
    let parsed = super::jsonl::parse(catalog, input, progress)?;
    tracing::info!(
        ms = t0.elapsed().as_millis() as u64,
        lines = parsed.lines,
        "load: parsed"
    );
    Ok(Arc::new(LoadWork::new(parsed, mode)?))
}
