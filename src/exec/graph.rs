//! Which adjacency a traversal reads, cheapest first: the runtime cache's
//! for these exact table versions; one carried forward from a base (this
//! process's latest of the edge table, or the persisted file its version
//! records) by the rows changed since; for a first one-hop traversal from
//! a few sources, a probe of just their edges; else a build from a full
//! edge scan. A base is reused only for the rows it provably shares with
//! today's tables (same fragment, same files, same offset; see
//! `index::coverage`), so a stale or foreign base costs a rebuild, never a
//! wrong answer.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering as AtomicOrdering;
use std::time::Instant;

use arrow_array::{Array, StringArray};

use super::cache::Key;
use super::carry::WarmIds;
use super::residency::ROWS_MAX;
use super::run::Ctx;
use crate::compiler::catalog::ID;
use crate::compiler::query::ir::Dir;
use crate::error::{OmniError, Result};
use crate::index::adjacency::{self, Carry, Graph, GraphIndex, NodeMap, RowRank};
use crate::index::adjacency_file::{self, Basis};
use crate::index::coverage::{self, Change, Coverage, Layout};
use crate::index::id_order::NodeIds;
use crate::storage::manifest::TableRef;
use crate::storage::stage;
use crate::util::idindex::ABSENT;

/// A traversal from at most this many distinct sources may probe the edge
/// table instead of building its index (see [`Ctx::one_hop_graph`]).
const PROBE_SOURCES_MAX: usize = 64;

/// An adjacency and the rows it was built from: what later versions carry
/// forward.
pub struct Based {
    pub graph: Arc<GraphIndex>,
    pub basis: Basis,
    /// The source and destination tables' ids at the basis, when known
    /// (a merge's base has none: looked up in the tables instead).
    pub ids: Option<[NodeIds; 2]>,
}

/// Node rows new since a base up to this many are read to find nodes by
/// id beside the base's ids; past it the ids are looked up in the table.
const FRESH_NODES_MAX: usize = 65_536;

/// Today's position of a node by id, through a base's ids: a row added
/// since the base (read from the fragments it never saw) first, else its
/// position in the base carried to today (no coverage: rows were only
/// appended, so positions stand).
struct Finder<'a> {
    ids: &'a NodeIds,
    cov: Option<&'a Coverage>,
    fresh: HashMap<String, u32>,
    /// Today's ids, when this process holds them (or carries them): every
    /// id's position today, with no row read.
    today: Option<WarmIds>,
}

impl Finder<'_> {
    fn find(&self, id: &str) -> u32 {
        if let Some(w) = &self.today {
            return w.position(id).unwrap_or(ABSENT);
        }
        if let Some(&p) = self.fresh.get(id) {
            return p;
        }
        match (self.ids.position(id), self.cov) {
            (None, _) => ABSENT,
            (Some(d), None) => d,
            (Some(d), Some(c)) => c.doc_row[d as usize].unwrap_or(ABSENT),
        }
    }
}

/// A carry decided: how, from what changes, onto which layouts.
struct Planned {
    carry: Carry,
    changes: [Arc<Change>; 3],
    now: [Arc<Layout>; 3],
}

/// How a traversal got its adjacency (`query --stats`, and the plan).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Cached,
    Persisted,
    /// A base with the edges added since beside it.
    Overlay,
    /// A base read through where its nodes moved and which of its edges
    /// were deleted since, the edges added since beside it.
    Remapped,
    /// A base merged with the rows changed since into a new base.
    Merged,
    Probed,
    Built,
}

impl Ctx<'_> {
    pub(super) fn graph_key(&self, edge: &str) -> Result<Key> {
        let e = self.def(edge);
        let (from, to) = e.endpoints().expect("edge");
        Ok(Key::Graph {
            edge: self.phys(e)?,
            from: self.phys(self.def(from))?,
            to: self.phys(self.def(to))?,
        })
    }

    /// The adjacency one hop from `sources` needs. Until an edge type has
    /// an index, a first traversal from a few sources reads only the edges
    /// that touch them (a filtered scan), which is far cheaper than building
    /// the whole index in a one-shot process; the result is exact for those
    /// sources in `dir` and is not cached.
    pub(super) async fn one_hop_graph(
        &self,
        edge: &str,
        dir: Dir,
        sources: &[u32],
    ) -> Result<Arc<Graph>> {
        let key = self.graph_key(edge)?;
        if let Some(g) = self.cached_graph(edge, &key).await? {
            return Ok(g);
        }
        {
            let _making = self.cache.making(&key).await;
            if let Some(g) = self.made_meanwhile(edge, &key) {
                return Ok(g);
            }
            if let Some(g) = self.carried(edge, &key).await? {
                return Ok(g);
            }
        }
        let probe = Key::Probed(self.phys(self.def(edge))?);
        let mut distinct = sources.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        if distinct.len() > PROBE_SOURCES_MAX || self.cache.get::<()>(&probe).is_some() {
            return self.graph(edge).await;
        }
        self.cache.put(probe, Arc::new(()), 64);
        let e = self.def(edge);
        let (from, to) = e.endpoints().expect("edge");
        let from_ids = self.node_ids(from).await?;
        let to_ids = self.node_ids(to).await?;
        let (by_src, by_dst) = match dir {
            Dir::Out => (true, false),
            Dir::In => (false, true),
            Dir::Both => (true, true),
        };
        let mut names: Vec<&str> = Vec::new();
        if by_src {
            names.extend(distinct.iter().map(|&n| from_ids.ids.value(n as usize)));
        }
        if by_dst {
            names.extend(distinct.iter().map(|&n| to_ids.ids.value(n as usize)));
        }
        names.sort_unstable();
        names.dedup();
        let ds = self.g.read_table(self.snap, e).await?;
        let (src, dst) = stage::edges_touching(&ds, &names, by_src, by_dst).await?;
        self.note(edge, Source::Probed);
        tracing::debug!(
            edge,
            sources = distinct.len(),
            "edges read by probing sources"
        );
        let g = GraphIndex::build(&src, &dst, &from_ids, &to_ids);
        Ok(Arc::new(Graph::whole(Arc::new(g))))
    }

    /// The edge type's adjacency if the runtime cache holds it. One read
    /// through maps (nodes moved or edges deleted since its base) is
    /// compacted into a new base on its second use: a one-shot process
    /// never pays for that, a warm one pays once and then reads without
    /// maps, and the new base is what later writes carry from. (A query
    /// that reads it again, hop after hop, is still its first use.)
    async fn cached_graph(&self, edge: &str, key: &Key) -> Result<Option<Arc<Graph>>> {
        let Some(g) = self.cache.get::<Graph>(key) else {
            return Ok(None);
        };
        let again_in_query = self.graphs.lock().iter().any(|(e, _)| e == edge);
        self.note(edge, Source::Cached);
        if !g.remapped() || again_in_query {
            return Ok(Some(g));
        }
        let (from, to) = self.def(edge).endpoints().expect("edge");
        let nodes = [
            coverage::rows(&self.layout(from).await?),
            coverage::rows(&self.layout(to).await?),
        ];
        let basis = self.basis(edge).await?;
        let t0 = Instant::now();
        let compacted = tokio::task::spawn_blocking(move || g.compact(nodes))
            .await
            .map_err(|e| OmniError::Storage(format!("graph index compaction failed: {e}")))?;
        tracing::info!(
            edge,
            ms = t0.elapsed().as_millis() as u64,
            "graph index compacted into a new base"
        );
        self.cache
            .stats
            .graph_merges
            .fetch_add(1, AtomicOrdering::Relaxed);
        let compacted = Arc::new(compacted);
        self.remember_base(
            edge,
            Based {
                graph: compacted.clone(),
                basis,
                ids: None,
            },
        )?;
        let whole = Arc::new(Graph::whole(compacted));
        self.cache.put(key.clone(), whole.clone(), whole.bytes());
        Ok(Some(whole))
    }

    fn note(&self, edge: &str, how: Source) {
        let s = &self.cache.stats;
        let counter = match how {
            Source::Cached => &s.graph_hits,
            Source::Persisted => &s.graph_persisted,
            Source::Overlay => &s.graph_overlays,
            Source::Remapped => &s.graph_remaps,
            Source::Merged => &s.graph_merges,
            Source::Probed => &s.edge_probes,
            Source::Built => &s.graph_builds,
        };
        counter.fetch_add(1, AtomicOrdering::Relaxed);
        self.graphs.lock().push((edge.to_string(), how));
    }

    pub(super) async fn graph(&self, edge: &str) -> Result<Arc<Graph>> {
        let key = self.graph_key(edge)?;
        if let Some(g) = self.cached_graph(edge, &key).await? {
            return Ok(g);
        }
        let _making = self.cache.making(&key).await;
        if let Some(g) = self.made_meanwhile(edge, &key) {
            return Ok(g);
        }
        if let Some(g) = self.carried(edge, &key).await? {
            return Ok(g);
        }
        self.build(edge, key).await
    }

    /// The adjacency another reader made while this one waited for its
    /// gate.
    fn made_meanwhile(&self, edge: &str, key: &Key) -> Option<Arc<Graph>> {
        let g = self.cache.get::<Graph>(key)?;
        self.note(edge, Source::Cached);
        Some(g)
    }

    /// The adjacency for an edge binding, which reads edge rows: a file's
    /// whose edge rows fail their check is replaced by a build.
    pub(super) async fn graph_with_edge_rows(&self, edge: &str) -> Result<Arc<Graph>> {
        let g = self.graph(edge).await?;
        if g.edge_rows_sound() {
            return Ok(g);
        }
        tracing::warn!(
            edge,
            "a graph index file's edge rows are damaged: built instead"
        );
        self.build(edge, self.graph_key(edge)?).await
    }

    /// Build the adjacency from a full edge scan, and cache it.
    async fn build(&self, edge: &str, key: Key) -> Result<Arc<Graph>> {
        let e = self.def(edge);
        let (from, to) = e.endpoints().expect("edge");
        let from_ids = self.node_ids(from).await?;
        let to_ids = self.node_ids(to).await?;
        let basis = self.basis(edge).await?;
        let ids = [from_ids.clone(), to_ids.clone()].map(NodeIds::Hashed);
        let t0 = Instant::now();
        let src = self.scan_strings(e, "src").await?;
        let dst = self.scan_strings(e, "dst").await?;
        let g =
            tokio::task::spawn_blocking(move || GraphIndex::build(&src, &dst, &from_ids, &to_ids))
                .await
                .map_err(|e| OmniError::Storage(format!("graph index build failed: {e}")))?;
        let micros = t0.elapsed().as_micros() as u64;
        let s = &self.cache.stats;
        s.graph_build_edges
            .fetch_add(g.edges as u64, AtomicOrdering::Relaxed);
        s.graph_build_micros
            .fetch_add(micros, AtomicOrdering::Relaxed);
        self.note(edge, Source::Built);
        tracing::info!(
            edge,
            edges = g.edges,
            ms = micros / 1000,
            "graph index built"
        );
        let g = Arc::new(g);
        self.remember_base(
            edge,
            Based {
                graph: g.clone(),
                basis,
                ids: Some(ids),
            },
        )?;
        let g = Arc::new(Graph::whole(g));
        self.cache.put(key, g.clone(), g.bytes());
        Ok(g)
    }

    /// What an adjacency built now is built from.
    async fn basis(&self, edge: &str) -> Result<Basis> {
        let e = self.def(edge);
        let (from, to) = e.endpoints().expect("edge");
        let mut tables: [String; 3] = Default::default();
        let mut layouts: [Layout; 3] = Default::default();
        for (i, name) in [edge, from, to].into_iter().enumerate() {
            tables[i] = serde_json::to_string(self.snap.table(self.def(name))?)?;
            layouts[i] = (*self.layout(name).await?).clone();
        }
        Ok(Basis { tables, layouts })
    }

    /// Keep `g` as the base later versions of the edge table carry forward.
    fn remember_base(&self, edge: &str, base: Based) -> Result<()> {
        let ids: usize = base.ids.iter().flatten().map(NodeIds::bytes).sum();
        let bytes = base.graph.bytes() + ids;
        let key = self.base_key(edge)?;
        self.cache.put(key, Arc::new(base), bytes);
        Ok(())
    }

    fn base_key(&self, edge: &str) -> Result<Key> {
        let p = self.phys(self.def(edge))?;
        Ok(Key::GraphBase {
            graph: p.graph,
            dir: p.dir,
        })
    }

    /// The adjacency of today's rows carried from a base: this process's
    /// latest, else the persisted one this edge table version records.
    /// `None` when neither exists or shares too little with today.
    async fn carried(&self, edge: &str, key: &Key) -> Result<Option<Arc<Graph>>> {
        let mut bases = Vec::new();
        if let Some(b) = self.cache.get::<Based>(&self.base_key(edge)?) {
            bases.push((b, Source::Cached));
        }
        if let Some(b) = self.persisted_graph(edge).await? {
            bases.push((b, Source::Persisted));
        }
        for (base, how) in bases {
            let t0 = Instant::now();
            if let Some((g, how)) = self.carry(edge, &base, how).await? {
                tracing::info!(
                    edge,
                    ?how,
                    edges = g.edges(),
                    ms = t0.elapsed().as_millis() as u64,
                    "graph index carried from a base"
                );
                self.note(edge, how);
                let g = Arc::new(g);
                self.cache.put(key.clone(), g.clone(), g.bytes());
                return Ok(Some(g));
            }
        }
        Ok(None)
    }

    /// The persisted graph index this edge table version records, opened
    /// once per process. A missing or unreadable file is no base (logged).
    async fn persisted_graph(&self, edge: &str) -> Result<Option<Arc<Based>>> {
        let table = self.g.read_table(self.snap, self.def(edge)).await?;
        let Some(r) = table.graph_index()? else {
            return Ok(None);
        };
        let key = Key::IndexFile {
            graph: self.g.store.uri().to_string(),
            file: r.file.clone(),
        };
        if let Some(b) = self.cache.get::<Based>(&key) {
            return Ok(Some(b));
        }
        let t0 = Instant::now();
        let Some(map) = self.g.store.map(&r.file).await? else {
            tracing::warn!(edge, file = r.file, "the recorded graph index is missing");
            return Ok(None);
        };
        let bytes = map.len();
        let file = r.file.clone();
        let decoded = tokio::task::spawn_blocking(move || adjacency_file::decode(map, &file)).await;
        match decoded {
            Ok(Ok(p)) => {
                tracing::info!(
                    edge,
                    bytes,
                    us = t0.elapsed().as_micros() as u64,
                    "graph index file opened and checked"
                );
                self.cache
                    .stats
                    .graph_opens
                    .fetch_add(1, AtomicOrdering::Relaxed);
                let b = Arc::new(Based {
                    graph: Arc::new(p.graph),
                    basis: p.basis,
                    ids: Some(p.ids.map(NodeIds::Ordered)),
                });
                self.cache.put(key, b.clone(), bytes);
                Ok(Some(b))
            }
            Ok(Err(e)) => {
                tracing::warn!(edge, error = %e, "a graph index file is refused");
                Ok(None)
            }
            Err(e) => Err(OmniError::Storage(format!("graph index open failed: {e}"))),
        }
    }

    /// How `base` serves today's rows, how each of its tables changed
    /// since, and today's layouts. Appends are told from the layouts'
    /// fragments without mapping rows, so a traversal after an insert costs
    /// the insert, and after an update the node table's rows, not the
    /// edges.
    async fn plan_carry(&self, edge: &str, base: &Based) -> Result<Planned> {
        let (from, to) = self.def(edge).endpoints().expect("edge");
        let b = &base.basis.layouts;
        let now = [
            self.layout(edge).await?,
            self.layout(from).await?,
            self.layout(to).await?,
        ];
        let of = |i: usize| Arc::new(Change::of(&b[i], &now[i]));
        let (e, f) = (Arc::new(Change::of_rows(&b[0], &now[0])), of(1));
        // One table at both ends: one change, mapped once.
        let t = if from == to { f.clone() } else { of(2) };
        let carry = adjacency::decide(base.graph.skipped, [&e, &f, &t]);
        let changes = [e, f, t];
        Ok(Planned {
            carry,
            changes,
            now,
        })
    }

    /// What a traversal of `edge` would read now, without reading it (for
    /// the plan): where its adjacency comes from.
    pub(super) async fn graph_plan(&self, edge: &str, one_hop: bool) -> Result<String> {
        if self.cache.get::<Graph>(&self.graph_key(edge)?).is_some() {
            return Ok("cached".into());
        }
        let mut bases = Vec::new();
        if let Some(b) = self.cache.get::<Based>(&self.base_key(edge)?) {
            bases.push((b, "this process's base"));
        }
        if let Some(b) = self.persisted_graph(edge).await? {
            bases.push((b, "persisted"));
        }
        for (base, name) in bases {
            match self.plan_carry(edge, &base).await?.carry {
                Carry::Same => return Ok(name.into()),
                Carry::Overlay { fresh } => {
                    return Ok(format!("{name} + delta ({fresh} new edges beside it)"));
                }
                Carry::Remap { fresh, moved, gone } => {
                    return Ok(format!(
                        "{name} + delta ({fresh} new edges beside it, {moved} moved nodes remapped, {gone} deleted edges skipped)"
                    ));
                }
                Carry::Merge { fresh, moved } => {
                    return Ok(format!(
                        "{name} + delta (merged: {fresh} new edges, {moved} moved nodes)"
                    ));
                }
                Carry::Rebuild => {}
            }
        }
        let probed = self
            .cache
            .get::<()>(&Key::Probed(self.phys(self.def(edge))?))
            .is_some();
        Ok(match one_hop && !probed {
            true => format!(
                "rebuilt, or a probe of the sources' edges from at most {PROBE_SOURCES_MAX} sources"
            ),
            false => "rebuilt from a full edge scan".into(),
        })
    }

    /// Today's adjacency from `base` and the rows changed since it, or
    /// `None` when a rebuild is as cheap (most edges changed) or the only
    /// exact answer (dangling edges whose ends may exist now).
    async fn carry(
        &self,
        edge: &str,
        base: &Based,
        how: Source,
    ) -> Result<Option<(Graph, Source)>> {
        let e = self.def(edge);
        let (from, to) = e.endpoints().expect("edge");
        let b = &base.basis.layouts;
        let Planned {
            carry,
            changes,
            now,
        } = self.plan_carry(edge, base).await?;
        match carry {
            Carry::Same => return Ok(Some((Graph::whole(base.graph.clone()), how))),
            Carry::Rebuild => return Ok(None),
            Carry::Merge { .. } | Carry::Remap { gone: 1.., .. }
                if !base.graph.edge_rows_sound() =>
            {
                tracing::warn!(
                    edge,
                    "a graph index file's edge rows are damaged: not carried"
                );
                return Ok(None);
            }
            Carry::Overlay { .. } | Carry::Remap { .. } | Carry::Merge { .. } => {}
        }
        // The edge rows no base row stands for: the fragments it never saw.
        let unseen = coverage::unseen(&b[0], &now[0]);
        let (mut src, mut dst) = (Vec::new(), Vec::new());
        if !unseen.is_empty() {
            let edges_now = self.g.read_table(self.snap, e).await?;
            src = edges_now.strings_of("src", &unseen).await?;
            dst = edges_now.strings_of("dst", &unseen).await?;
        }
        let find_from = self.finder(base, 1, from, changes[1].mapped()).await?;
        let find_to = match from == to {
            true => None,
            false => self.finder(base, 2, to, changes[2].mapped()).await?,
        };
        let finders = match (&find_from, &find_to) {
            (Some(f), None) if from == to => Some((f, f)),
            (Some(f), Some(t)) => Some((f, t)),
            _ => None,
        };
        let fresh = self.resolve(finders, (from, &src), (to, &dst)).await?;
        let expected = changes[0].fresh();
        if fresh.len() != expected {
            return Err(OmniError::Storage(format!(
                "edge table {edge}: {} fresh rows read where its layout has {expected}",
                fresh.len(),
            )));
        }
        if let Carry::Overlay { .. } | Carry::Remap { .. } = carry {
            // Only the tables whose rows moved need a map.
            let mut moved: [Option<Arc<NodeMap>>; 2] = [None, None];
            for (k, name) in [(1, from), (2, to)] {
                let Some(c) = changes[k].mapped() else {
                    continue;
                };
                if k == 2 && from == to {
                    moved[1] = moved[0].clone();
                    continue;
                }
                let f = finders.map(|f| if k == 1 { f.0 } else { f.1 });
                let at = self.node_positions(&base.basis, k, c, name, f).await?;
                moved[k - 1] = Some(Arc::new(NodeMap::new(at, c.rows)));
            }
            let how = match carry {
                Carry::Remap { .. } => Source::Remapped,
                _ => Source::Overlay,
            };
            // Edge rows move only when edges were deleted.
            let (edge_rows, first) = match &*changes[0] {
                Change::Deleted { gone, count, .. } if *count > 0 => (
                    Some(Arc::new(RowRank::new(gone.clone()))),
                    base.graph.edges - count,
                ),
                _ => (None, base.graph.edges),
            };
            let g = Graph::overlay(base.graph.clone(), moved, edge_rows, (&fresh, first as u32));
            return Ok(Some((g, how)));
        }
        let [ce, cf, ct] = [0, 1, 2].map(|i| changes[i].coverage(&b[i], &now[i]));
        let (ce, cf, ct) = (&*ce, &*cf, &*ct);
        let to_map = if from == to {
            None
        } else {
            let f = finders.map(|f| f.1);
            Some(self.node_positions(&base.basis, 2, ct, to, f).await?)
        };
        let f = finders.map(|f| f.0);
        let from_map = self.node_positions(&base.basis, 1, cf, from, f).await?;
        let to_map = to_map.as_ref().unwrap_or(&from_map);
        let edge_map = adjacency::positions(ce, |_| ABSENT);
        let (g, fresh_rows) = (base.graph.clone(), ce.fresh.clone());
        let sizes = (cf.rows, ct.rows, ce.rows);
        let from_map = from_map.clone();
        let to_map = to_map.clone();
        let merged = tokio::task::spawn_blocking(move || {
            adjacency::merge(
                &g,
                (&from_map, &to_map, &edge_map),
                (&fresh_rows, &fresh),
                sizes,
            )
        })
        .await
        .map_err(|e| OmniError::Storage(format!("graph index merge failed: {e}")))?;
        let merged = Arc::new(merged);
        self.remember_base(
            edge,
            Based {
                graph: merged.clone(),
                basis: self.basis(edge).await?,
                ids: None,
            },
        )?;
        Ok(Some((Graph::whole(merged), Source::Merged)))
    }

    /// A finder for node table `i` (1: from, 2: to) of `base` today, or
    /// `None` when the base holds no ids, they fail their check, or too
    /// many rows are new since.
    async fn finder<'a>(
        &self,
        base: &'a Based,
        i: usize,
        type_name: &str,
        cov: Option<&'a Coverage>,
    ) -> Result<Option<Finder<'a>>> {
        let Some(ids) = base.ids.as_ref().map(|ids| &ids[i - 1]) else {
            return Ok(None);
        };
        if !ids.sound() {
            tracing::warn!(
                type_name,
                "a graph index file's ids are damaged: looked up instead"
            );
            return Ok(None);
        }
        // Today's ids in memory find every node without reading the rows
        // added since the base (one per write since, on a graph written
        // to while it is read).
        let today = self.warm_ids(self.def(type_name)).await?;
        if today.is_some() {
            return Ok(Some(Finder {
                ids,
                cov,
                fresh: HashMap::new(),
                today,
            }));
        }
        let then = &base.basis.layouts[i];
        let now = self.layout(type_name).await?;
        let (first, rows_now) = (coverage::rows(then) as u32, coverage::rows(&now) as u32);
        let fresh_rows: Vec<u32> = match cov {
            Some(c) if c.fresh.len() <= FRESH_NODES_MAX => c.fresh.clone(),
            None if (rows_now - first) as usize <= FRESH_NODES_MAX => (first..rows_now).collect(),
            _ => return Ok(None),
        };
        let mut fresh = HashMap::new();
        if !fresh_rows.is_empty() {
            let table = self.g.read_table(self.snap, self.def(type_name)).await?;
            let read = table.strings_of(ID, &coverage::unseen(then, &now)).await?;
            let read_rows: usize = read.iter().map(|a| a.len()).sum();
            if read_rows != fresh_rows.len() {
                return Err(OmniError::Storage(format!(
                    "node table {type_name}: {read_rows} fresh rows read where its layout has {}",
                    fresh_rows.len()
                )));
            }
            let ids = read
                .iter()
                .flat_map(|a| (0..a.len()).map(move |k| a.value(k)));
            for (id, &row) in ids.zip(&fresh_rows) {
                fresh.entry(id.to_string()).or_insert(row);
            }
        }
        Ok(Some(Finder {
            ids,
            cov,
            fresh,
            today: None,
        }))
    }

    /// The dense `(source, destination)` of each edge (`ABSENT` where an
    /// id is not a node): through a base's ids when there are finders,
    /// else a few looked up one by one, many through the types' id indexes.
    async fn resolve(
        &self,
        finders: Option<(&Finder<'_>, &Finder<'_>)>,
        (from, src): (&str, &[StringArray]),
        (to, dst): (&str, &[StringArray]),
    ) -> Result<Vec<(u32, u32)>> {
        if let Some((f, t)) = finders {
            let pairs = src.iter().zip(dst).flat_map(|(s, d)| {
                (0..s.len()).map(move |k| {
                    let end = |a: &StringArray, by: &Finder| match a.is_null(k) {
                        true => ABSENT,
                        false => by.find(a.value(k)),
                    };
                    (end(s, f), end(d, t))
                })
            });
            return Ok(pairs.collect());
        }
        let rows: usize = src.iter().map(|a| a.len()).sum();
        if rows * 2 > ROWS_MAX {
            let from_ids = self.node_ids(from).await?;
            let to_ids = self.node_ids(to).await?;
            return Ok(adjacency::resolve(src, dst, &from_ids, &to_ids));
        }
        fn flat(parts: &[StringArray]) -> Vec<&str> {
            parts
                .iter()
                .flat_map(|a| (0..a.len()).map(move |i| a.value(i)))
                .collect()
        }
        let s_at = self.positions(from, &flat(src)).await?;
        let d_at = self.positions(to, &flat(dst)).await?;
        Ok(s_at
            .into_iter()
            .zip(d_at)
            .map(|(a, b)| (a.unwrap_or(ABSENT), b.unwrap_or(ABSENT)))
            .collect())
    }

    /// Where each node of the base's table `i` (1: from, 2: to) is today;
    /// a node whose row moved (an update rewrote it) is found again by id:
    /// its id from the base's ids when a finder has them, else read from
    /// the base's version of the table.
    async fn node_positions(
        &self,
        basis: &Basis,
        i: usize,
        c: &Coverage,
        type_name: &str,
        finder: Option<&Finder<'_>>,
    ) -> Result<Vec<u32>> {
        let moved: Vec<usize> = (0..c.doc_row.len())
            .filter(|&d| c.doc_row[d].is_none())
            .collect();
        let mut found: HashMap<usize, u32> = HashMap::new();
        if let Some(f) = finder {
            for &d in &moved {
                let id = f.ids.id(d as u32).ok_or_else(|| {
                    OmniError::Storage(format!("{type_name}: a base's ids lack position {d}"))
                })?;
                found.insert(d, f.find(id));
            }
        } else if !moved.is_empty() {
            let t: TableRef = serde_json::from_str(&basis.tables[i])?;
            let then = self.g.open_table(&t).await?;
            let layout = &basis.layouts[i];
            let at = coverage::locate(layout, &moved);
            let mut d = moved.iter();
            for f in layout {
                let offsets: Vec<u32> = at
                    .iter()
                    .filter(|(id, _)| *id == f.id)
                    .map(|(_, o)| *o)
                    .collect();
                if offsets.is_empty() {
                    continue;
                }
                let rows = then.rows_at(f.id as u32, &offsets, &f.deleted).await?;
                let ids = stage::string_column(&rows, ID)?;
                let names: Vec<&str> = (0..ids.len()).map(|k| ids.value(k)).collect();
                for at in self.positions(type_name, &names).await? {
                    let doc = *d.next().expect("one document per located row");
                    found.insert(doc, at.unwrap_or(ABSENT));
                }
            }
        }
        Ok(adjacency::positions(c, |d| {
            found.get(&d).copied().unwrap_or(ABSENT)
        }))
    }
}
