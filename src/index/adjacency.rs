//! An edge type's adjacency as data: CSR (out) and CSC (in) with the edge
//! row of every entry, over the dense numbering of its endpoint tables
//! ([`IdIndex`]: a node's number is its position in its table's scan
//! order). Built from one version's rows, or carried to a later version by
//! the rows that changed since ([`Graph::overlay`], [`merge`]), so a small
//! write costs its delta rather than a rebuild. Its arrays live on the heap
//! or in a mapped file (`adjacency_file`); either way they never change.

use std::ops::{Deref, Range};
use std::sync::Arc;

use arrow_array::{Array, StringArray};

use super::coverage::{Change, Coverage};
use crate::util::idindex::{ABSENT, IdIndex};

/// Fresh edges up to this many ride beside their base as an overlay;
/// past it the delta is merged into a new base, so lookups stay two ranges.
pub const OVERLAY_EDGES_MAX: usize = 65_536;

/// Node rows that moved since the base (updated or deleted) up to this many
/// are found again by id; past it a merge reads more than a rebuild.
pub const MOVED_NODES_MAX: usize = 100_000;

/// `u32`s that never change: a vector's, or a stretch of a mapped file.
pub struct Words {
    ptr: *const u32,
    len: usize,
    _keep: Arc<dyn Send + Sync>,
}

// SAFETY: the words are immutable for as long as `_keep` holds their
// storage (a vector never pushed to again, or a read-only mapping).
unsafe impl Send for Words {}
unsafe impl Sync for Words {}

impl Words {
    /// `len` words at byte `at` of `map`. `None` when they do not fit or
    /// are not aligned.
    pub fn mapped(map: &Arc<memmap2::Mmap>, at: usize, len: usize) -> Option<Self> {
        let end = at.checked_add(len.checked_mul(4)?)?;
        if end > map.len() || !(map.as_ptr() as usize + at).is_multiple_of(4) {
            return None;
        }
        Some(Self {
            // SAFETY: `at..end` lies inside the mapping (checked above).
            ptr: unsafe { map.as_ptr().add(at) } as *const u32,
            len,
            _keep: map.clone(),
        })
    }
}

impl From<Vec<u32>> for Words {
    fn from(v: Vec<u32>) -> Self {
        let v = Arc::new(v);
        Self {
            ptr: v.as_ptr(),
            len: v.len(),
            _keep: v,
        }
    }
}

impl Words {
    /// The words as the bytes a file holds (little-endian machines only
    /// map files, see `adjacency_file`).
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: any `u32` slice is a valid byte slice four times as long.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len * 4) }
    }
}

impl Deref for Words {
    type Target = [u32];
    #[inline]
    fn deref(&self) -> &[u32] {
        // SAFETY: `ptr..ptr+len` is aligned, inside storage `_keep` holds,
        // and nothing writes it (see the type).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// One direction of adjacency: for node `n`, entries `offsets[n]..offsets[n+1]`
/// of `targets` (dense node index) and `edges` (edge row). `offsets` has
/// two entries past the last node: the dangling bucket's end.
pub struct Adjacency {
    pub offsets: Words,
    pub targets: Words,
    pub edges: Words,
}

impl Adjacency {
    /// From `(source, destination)` per edge row, over `nodes` nodes;
    /// `reverse` indexes by destination instead; edge row `i` of `pairs`
    /// is `first_row + i`. A dangling edge (an [`ABSENT`] end) goes into one
    /// extra bucket past the last node, which no lookup reads, so it can
    /// never be followed.
    fn build(nodes: usize, pairs: &[(u32, u32)], reverse: bool, first_row: u32) -> Self {
        let aim = |&(a, b): &(u32, u32)| match (a == ABSENT || b == ABSENT, reverse) {
            (true, _) => (nodes as u32, 0),
            (false, false) => (a, b),
            (false, true) => (b, a),
        };
        let n = nodes + 1;
        let mut offsets = vec![0u32; n + 1];
        for p in pairs {
            offsets[aim(p).0 as usize + 1] += 1;
        }
        for i in 0..n {
            offsets[i + 1] += offsets[i];
        }
        let mut fill = offsets.clone();
        let mut targets = vec![0u32; pairs.len()];
        let mut edges = vec![0u32; pairs.len()];
        // `pairs` is indexed by edge row, so entries stay in edge-row order.
        for (row, p) in pairs.iter().enumerate() {
            let (from, to) = aim(p);
            let at = fill[from as usize] as usize;
            targets[at] = to;
            edges[at] = first_row + row as u32;
            fill[from as usize] += 1;
        }
        Self {
            offsets: offsets.into(),
            targets: targets.into(),
            edges: edges.into(),
        }
    }

    /// How many nodes this side indexes.
    #[inline]
    pub fn nodes(&self) -> usize {
        self.offsets.len() - 2
    }

    /// The entries of node `n`; none for a node past the ones indexed (a
    /// node added after this adjacency was built).
    #[inline]
    pub fn range(&self, n: u32) -> Range<usize> {
        if n as usize >= self.nodes() {
            return 0..0;
        }
        self.offsets[n as usize] as usize..self.offsets[n as usize + 1] as usize
    }

    fn bytes(&self) -> usize {
        (self.offsets.len() + self.targets.len() + self.edges.len()) * 4
    }
}

/// CSR (out) and CSC (in) adjacency of one edge type at one version.
pub struct GraphIndex {
    pub out: Adjacency,
    pub inn: Adjacency,
    /// Edge rows whose endpoint is missing from the node tables (dangling).
    pub skipped: usize,
    pub edges: usize,
    /// A file's digests of the out and in edge rows, not yet checked.
    pub unchecked: Option<[u64; 2]>,
    sound: std::sync::OnceLock<bool>,
}

impl GraphIndex {
    pub fn new(out: Adjacency, inn: Adjacency, skipped: usize, edges: usize) -> Self {
        Self {
            out,
            inn,
            skipped,
            edges,
            unchecked: None,
            sound: std::sync::OnceLock::new(),
        }
    }

    /// Can the edge rows be read? Built ones can; a file's are checked
    /// against its digests the first time (only edge bindings and merges
    /// read them, so a traversal never pays for it).
    pub fn edge_rows_sound(&self) -> bool {
        let Some([out, inn]) = self.unchecked else {
            return true;
        };
        *self.sound.get_or_init(|| {
            use xxhash_rust::xxh3::xxh3_64;
            xxh3_64(self.out.edges.as_bytes()) == out && xxh3_64(self.inn.edges.as_bytes()) == inn
        })
    }

    /// Build from the edge table's `src`/`dst` columns (in scan order) and
    /// the endpoint node tables. Lookups run on two cores.
    pub fn build(
        src: &[StringArray],
        dst: &[StringArray],
        from: &Arc<IdIndex>,
        to: &Arc<IdIndex>,
    ) -> Self {
        let pairs = resolve(src, dst, from, to);
        Self::from_pairs(from.len(), to.len(), &pairs, 0)
    }

    /// From `(source, destination)` per edge row (see [`Adjacency::build`]).
    pub fn from_pairs(
        nodes_from: usize,
        nodes_to: usize,
        pairs: &[(u32, u32)],
        first_row: u32,
    ) -> Self {
        let skipped = pairs
            .iter()
            .filter(|(a, b)| *a == ABSENT || *b == ABSENT)
            .count();
        Self::new(
            Adjacency::build(nodes_from, pairs, false, first_row),
            Adjacency::build(nodes_to, pairs, true, first_row),
            skipped,
            pairs.len(),
        )
    }

    pub fn bytes(&self) -> usize {
        self.out.bytes() + self.inn.bytes()
    }

    /// Every edge whose ends this index knows, as its edge row and its
    /// `(source, destination)`, by source.
    fn known(&self) -> impl Iterator<Item = (u32, (u32, u32))> + '_ {
        let out = &self.out;
        (0..out.nodes() as u32).flat_map(move |s| {
            out.range(s)
                .map(move |i| (out.edges[i], (s, out.targets[i])))
        })
    }

    /// Every edge row's `(source, destination)`, [`ABSENT`] for a dangling
    /// edge's (whose ends this index no longer knows).
    fn pairs(&self) -> Vec<(u32, u32)> {
        let mut pairs = vec![(ABSENT, ABSENT); self.edges];
        for (row, p) in self.known() {
            pairs[row as usize] = p;
        }
        pairs
    }
}

/// The dense `(source, destination)` of each edge, in order; [`ABSENT`]
/// where an id is not a node.
pub fn resolve(
    src: &[StringArray],
    dst: &[StringArray],
    from: &IdIndex,
    to: &IdIndex,
) -> Vec<(u32, u32)> {
    let total: usize = src.iter().map(|a| a.len()).sum();
    let mut starts = Vec::with_capacity(src.len());
    let mut acc = 0;
    for a in src {
        starts.push(acc);
        acc += a.len();
    }
    let mut pairs = vec![(ABSENT, ABSENT); total];
    let work = |range: Range<usize>, out: &mut [(u32, u32)], base: usize| {
        let (mut s_at, mut d_at) = (Vec::new(), Vec::new());
        for b in range {
            s_at.clear();
            d_at.clear();
            from.lookup_all(&src[b], &mut s_at);
            to.lookup_all(&dst[b], &mut d_at);
            let at = starts[b] - base;
            for (i, pair) in s_at.iter().zip(&d_at).enumerate() {
                out[at + i] = (*pair.0, *pair.1);
            }
        }
    };
    let nb = src.len();
    if nb > 1 {
        let half = nb / 2;
        let split = starts[half];
        let (left, right) = pairs.split_at_mut(split);
        std::thread::scope(|s| {
            s.spawn(|| work(0..half, left, 0));
            work(half..nb, right, split);
        });
    } else {
        work(0..nb, &mut pairs, 0);
    }
    pairs
}

/// Where the nodes of one endpoint table are, between a base and today,
/// once rows moved (an update rewrites a row elsewhere) or went: per base
/// position its row today, and per row today its base position ([`ABSENT`]:
/// gone, or new since). Building one costs the table's rows, not its edges.
pub struct NodeMap {
    now: NowOfBase,
    pub base_of_now: Vec<u32>,
}

/// A base position's row today. A traversal asks it for every entry, at
/// random, so the usual shape (rows deleted or moved to the end, the rest
/// in order) is kept small enough to stay in cache: which positions left
/// their place, the rest renumbered by rank, and where the moved ones went.
enum NowOfBase {
    Dense(Vec<u32>),
    Ranked {
        rank: RowRank,
        /// `(base position, row today)` of the moved, ascending.
        moved: Vec<(u32, u32)>,
    },
}

/// Past this many nodes out of rank order, a dense array reads better.
const OUT_OF_PLACE_MAX: usize = 4096;

impl NodeMap {
    /// From where each base position is today ([`positions`]), over
    /// `rows` rows today.
    pub fn new(now_of_base: Vec<u32>, rows: usize) -> Self {
        let mut base_of_now = vec![ABSENT; rows];
        for (b, &n) in now_of_base.iter().enumerate() {
            if n != ABSENT {
                base_of_now[n as usize] = b as u32;
            }
        }
        Self {
            now: NowOfBase::of(now_of_base),
            base_of_now,
        }
    }

    /// Base position `t`'s row today ([`ABSENT`]: gone).
    #[inline]
    pub fn now(&self, t: u32) -> u32 {
        match &self.now {
            NowOfBase::Dense(v) => v[t as usize],
            NowOfBase::Ranked { rank, moved } => match rank.now(t) {
                ABSENT => moved
                    .binary_search_by_key(&t, |m| m.0)
                    .map_or(ABSENT, |i| moved[i].1),
                n => n,
            },
        }
    }

    /// The base positions gone since (not moved: gone).
    fn gone(&self) -> Vec<u32> {
        match &self.now {
            NowOfBase::Dense(v) => (0..v.len() as u32)
                .filter(|&t| v[t as usize] == ABSENT)
                .collect(),
            NowOfBase::Ranked { rank, moved } => rank
                .left()
                .filter(|t| moved.binary_search_by_key(t, |m| m.0).is_err())
                .collect(),
        }
    }

    fn bytes(&self) -> usize {
        let now = match &self.now {
            NowOfBase::Dense(v) => v.len() * 4,
            NowOfBase::Ranked { rank, moved } => rank.bytes() + moved.len() * 8,
        };
        now + self.base_of_now.len() * 4
    }
}

impl NowOfBase {
    fn of(now_of_base: Vec<u32>) -> Self {
        let mut gone = vec![0u64; now_of_base.len().div_ceil(64)];
        let (mut left, mut moved) = (0u32, Vec::new());
        for (t, &n) in now_of_base.iter().enumerate() {
            if n != ABSENT && n == t as u32 - left {
                continue;
            }
            gone[t / 64] |= 1 << (t % 64);
            left += 1;
            if n != ABSENT {
                if moved.len() == OUT_OF_PLACE_MAX {
                    return Self::Dense(now_of_base);
                }
                moved.push((t as u32, n));
            }
        }
        Self::Ranked {
            rank: RowRank::new(gone),
            moved,
        }
    }
}

/// Which base rows left their place since (deleted edges, built from the
/// deletion lists; gone or moved nodes), and where the others are today
/// (the rest keep their order): a bit per base row and the bits set
/// before each 64-row word, so a row's position today is one popcount away.
pub struct RowRank {
    gone: Vec<u64>,
    before: Vec<u32>,
}

impl RowRank {
    pub fn new(gone: Vec<u64>) -> Self {
        let mut before = Vec::with_capacity(gone.len());
        let mut n = 0u32;
        for w in &gone {
            before.push(n);
            n += w.count_ones();
        }
        Self { gone, before }
    }

    /// How many base rows left their place.
    pub fn count(&self) -> usize {
        let last = self.gone.last().map_or(0, |w| w.count_ones());
        self.before.last().map_or(0, |&b| b as usize) + last as usize
    }

    /// The base rows that left their place, ascending.
    fn left(&self) -> impl Iterator<Item = u32> + '_ {
        super::coverage::set_rows(&self.gone)
    }

    /// Base row `r`'s row today ([`ABSENT`]: deleted).
    #[inline]
    pub fn now(&self, r: u32) -> u32 {
        let (w, b) = (r as usize / 64, r % 64);
        let word = self.gone[w];
        if word >> b & 1 == 1 {
            return ABSENT;
        }
        r - self.before[w] - (word & ((1u64 << b) - 1)).count_ones()
    }

    fn bytes(&self) -> usize {
        self.gone.len() * 8 + self.before.len() * 4
    }
}

/// What a traversal reads: a base adjacency, and the edges added since it
/// was built when they are few (numbered after the base's edge rows, over
/// today's node numbering). When nodes moved since, the base is read
/// through the source and destination tables' [`NodeMap`]s (the same one
/// when both ends are one table); without one, today's numbering extends
/// the base's.
pub struct Graph {
    pub base: Arc<GraphIndex>,
    pub added: Option<GraphIndex>,
    pub moved: [Option<Arc<NodeMap>>; 2],
    /// Where the base's edge rows are today, when edges were deleted.
    pub edge_rows: Option<Arc<RowRank>>,
    /// Every deleted edge is an edge of a gone node, so the node maps
    /// alone drop them and a traversal need not read edge rows.
    deletions_follow_nodes: bool,
    /// Today's edge rows.
    rows: usize,
}

/// Is every deleted base edge (in `rows`) an edge of a node gone from
/// `moved`? The usual delete (a node and the edges it takes with it) costs
/// its nodes' edges to check, not the graph's.
fn deletions_follow_nodes(
    base: &GraphIndex,
    moved: &[Option<Arc<NodeMap>>; 2],
    rows: &RowRank,
) -> bool {
    let gone = |side: usize| moved[side].as_ref().map_or_else(Vec::new, |m| m.gone());
    let src_gone = |s: u32| moved[0].as_ref().is_some_and(|m| m.now(s) == ABSENT);
    let deleted = |edges: &Words, i: usize| rows.now(edges[i]) == ABSENT;
    let mut told = 0;
    for g in gone(0) {
        told += base
            .out
            .range(g)
            .filter(|&i| deleted(&base.out.edges, i))
            .count();
    }
    for g in gone(1) {
        // An edge whose source went too was counted on the out side.
        told += base
            .inn
            .range(g)
            .filter(|&i| !src_gone(base.inn.targets[i]) && deleted(&base.inn.edges, i))
            .count();
    }
    told == rows.count()
}

impl Graph {
    pub fn whole(base: Arc<GraphIndex>) -> Self {
        Self {
            rows: base.edges,
            base,
            added: None,
            moved: [None, None],
            edge_rows: None,
            deletions_follow_nodes: false,
        }
    }

    /// Is the base read through maps (nodes moved or edges deleted since)?
    pub fn remapped(&self) -> bool {
        self.moved.iter().any(Option::is_some) || self.edge_rows.is_some()
    }

    /// Today's edges as one new base read without maps, over `nodes`
    /// (today's rows of the source and destination tables): the base
    /// [`merge`]d through this overlay's maps, with the edges it added.
    /// Integer work over the edges.
    pub fn compact(&self, [nodes_from, nodes_to]: [usize; 2]) -> GraphIndex {
        let base = &self.base;
        let now = |m: &Option<Arc<NodeMap>>, nodes: usize| -> Vec<u32> {
            (0..nodes as u32)
                .map(|b| m.as_ref().map_or(b, |m| m.now(b)))
                .collect()
        };
        let (from, to) = (
            now(&self.moved[0], base.out.nodes()),
            now(&self.moved[1], base.inn.nodes()),
        );
        let edges: Vec<u32> = (0..base.edges as u32)
            .map(|r| self.edge_rows.as_ref().map_or(r, |rank| rank.now(r)))
            .collect();
        let (rows, pairs): (Vec<u32>, Vec<(u32, u32)>) =
            self.added.iter().flat_map(GraphIndex::known).unzip();
        merge(
            base,
            (&from, &to, &edges),
            (&rows, &pairs),
            (nodes_from, nodes_to, self.rows),
        )
    }

    /// See [`GraphIndex::edge_rows_sound`] (an overlay's own are built).
    pub fn edge_rows_sound(&self) -> bool {
        self.base.edge_rows_sound()
    }

    /// `base` with the edges appended since: `pairs` are the new edge rows
    /// (today's rows from `first` on), resolved over today's nodes; `moved`
    /// where the source and destination tables' nodes are, when they moved;
    /// `edge_rows` where the base's edge rows are, when edges were deleted.
    /// The overlay indexes nodes only up to the last one a new edge
    /// touches (past it a lookup finds nothing), so a few edges cost a few
    /// entries, not two arrays as long as the node tables.
    pub fn overlay(
        base: Arc<GraphIndex>,
        moved: [Option<Arc<NodeMap>>; 2],
        edge_rows: Option<Arc<RowRank>>,
        (pairs, first): (&[(u32, u32)], u32),
    ) -> Self {
        let span = |end: fn(&(u32, u32)) -> u32| {
            let last = pairs.iter().map(end).filter(|&n| n != ABSENT).max();
            last.map_or(0, |n| n as usize + 1)
        };
        let (nodes_from, nodes_to) = (span(|p| p.0), span(|p| p.1));
        let added = GraphIndex::from_pairs(nodes_from, nodes_to, pairs, first);
        let follow = edge_rows
            .as_ref()
            .is_some_and(|r| deletions_follow_nodes(&base, &moved, r));
        Self {
            rows: first as usize + pairs.len(),
            base,
            added: Some(added),
            moved,
            edge_rows,
            deletions_follow_nodes: follow,
        }
    }

    pub fn out(&self) -> Side<'_> {
        self.side(&self.base.out, self.added.as_ref().map(|a| &a.out), [0, 1])
    }

    pub fn inn(&self) -> Side<'_> {
        self.side(&self.base.inn, self.added.as_ref().map(|a| &a.inn), [1, 0])
    }

    /// A side whose sources are table `src` and targets table `dst`.
    fn side<'a>(
        &'a self,
        base: &'a Adjacency,
        added: Option<&'a Adjacency>,
        [src, dst]: [usize; 2],
    ) -> Side<'a> {
        Side {
            base,
            added,
            base_of_now: self.moved[src].as_ref().map(|m| &m.base_of_now[..]),
            now_of_base: self.moved[dst].as_deref(),
            edge_rows: self.edge_rows.as_deref(),
            live: match self.deletions_follow_nodes {
                true => None,
                false => self.edge_rows.as_deref(),
            },
        }
    }

    pub fn edges(&self) -> usize {
        self.rows
    }

    /// Heap bytes, the base's counted once per holder (a mapped file counts
    /// too: its pages are what a traversal touches).
    pub fn bytes(&self) -> usize {
        let moved: usize = self.moved.iter().flatten().map(|m| m.bytes()).sum();
        let rows = self.edge_rows.as_ref().map_or(0, |r| r.bytes());
        self.base.bytes() + self.added.as_ref().map_or(0, |a| a.bytes()) + moved + rows
    }
}

/// The targets of one node: the base's slice as it is, or checked entry by
/// entry against what changed since.
pub enum Targets<'a, C> {
    Plain(std::slice::Iter<'a, u32>),
    Changed(C),
}

impl<C: Iterator<Item = u32>> Iterator for Targets<'_, C> {
    type Item = u32;

    #[inline]
    fn next(&mut self) -> Option<u32> {
        match self {
            Targets::Plain(s) => s.next().copied(),
            Targets::Changed(c) => c.next(),
        }
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            Targets::Plain(s) => s.size_hint(),
            Targets::Changed(c) => c.size_hint(),
        }
    }

    #[inline]
    fn fold<B, F: FnMut(B, u32) -> B>(self, init: B, mut f: F) -> B {
        match self {
            Targets::Plain(s) => s.fold(init, |b, &t| f(b, t)),
            Targets::Changed(c) => c.fold(init, f),
        }
    }
}

/// Does node `n` of a base adjacency (`offsets`, `targets`) have a target
/// (other than itself when `same_type`)? The bucket past the last node
/// holds dangling edges and is never read.
#[inline]
fn plain_has_neighbour(offsets: &[u32], targets: &[u32], n: u32, same_type: bool) -> bool {
    let n_ = n as usize;
    if n_ + 2 >= offsets.len() {
        return false;
    }
    let (a, b) = (offsets[n_] as usize, offsets[n_ + 1] as usize);
    if same_type {
        targets[a..b].iter().any(|&t| t != n)
    } else {
        a < b
    }
}

/// One direction of a [`Graph`], over today's node numbering.
#[derive(Clone, Copy)]
pub struct Side<'a> {
    base: &'a Adjacency,
    added: Option<&'a Adjacency>,
    /// The sources' base positions, when they moved.
    base_of_now: Option<&'a [u32]>,
    /// The targets' positions today, when they moved.
    now_of_base: Option<&'a NodeMap>,
    /// The base's edge rows today, when edges were deleted.
    edge_rows: Option<&'a RowRank>,
    /// What tells a live base entry by its edge row: `edge_rows`, unless
    /// the node maps already drop every deleted edge.
    live: Option<&'a RowRank>,
}

impl<'a> Side<'a> {
    fn added_range(self, n: u32) -> Range<usize> {
        self.added.map_or(0..0, |a| a.range(n))
    }

    /// The base entries of today's node `n` (none for a node new since).
    #[inline]
    fn base_range(self, n: u32) -> Range<usize> {
        let at = match self.base_of_now {
            None => n,
            Some(m) => m.get(n as usize).copied().unwrap_or(ABSENT),
        };
        if at == ABSENT {
            0..0
        } else {
            self.base.range(at)
        }
    }

    /// Base entry `i`'s target today ([`ABSENT`]: gone since).
    #[inline]
    fn target_now(self, i: usize) -> u32 {
        let t = self.base.targets[i];
        match self.now_of_base {
            None => t,
            Some(m) => m.now(t),
        }
    }

    /// Base entry `i`'s edge row today ([`ABSENT`]: deleted since).
    #[inline]
    fn row_now(self, i: usize) -> u32 {
        let row = self.base.edges[i];
        match self.edge_rows {
            None => row,
            Some(r) => r.now(row),
        }
    }

    /// Nothing changed since the base: no node moved, no edge was deleted
    /// or added, so a node's targets are the base's own slice.
    #[inline]
    pub fn plain(self) -> bool {
        self.added.is_none()
            && self.base_of_now.is_none()
            && self.now_of_base.is_none()
            && self.live.is_none()
    }

    /// The nodes `n` reaches, one per edge. On a side with nothing changed
    /// since its base (an optimized graph, or one indexed since its last
    /// write) this walks the base's slice without the per-entry checks:
    /// those checks were most of a hub traversal's time.
    #[inline]
    pub fn targets(self, n: u32) -> Targets<'a, impl Iterator<Item = u32> + 'a> {
        if self.plain() {
            return Targets::Plain(self.base.targets[self.base.range(n)].iter());
        }
        Targets::Changed(self.changed_targets(n))
    }

    /// Has `n` a neighbour (other than itself, when both ends share a
    /// type)? On a plain side a degree, not a walk: `not { $p edge $_ }`
    /// asks it of every node.
    #[inline]
    pub fn has_neighbour(self, n: u32, same_type: bool) -> bool {
        if self.plain() {
            return plain_has_neighbour(&self.base.offsets, &self.base.targets, n, same_type);
        }
        self.changed_targets(n).any(|t| !same_type || t != n)
    }

    /// How many entries node `n` has on a plain side (see [`Self::plain`]).
    #[inline]
    pub fn plain_degree(self, n: u32) -> usize {
        self.base.range(n).len()
    }

    /// Entries of a plain side, over all its nodes.
    #[inline]
    pub fn plain_entries(self) -> usize {
        self.base.targets.len()
    }

    /// [`Self::has_neighbour`] of each of `nodes`, the slices read once.
    pub fn have_neighbours(self, nodes: &[u32], same_type: bool) -> Vec<bool> {
        if self.plain() {
            let (offsets, targets) = (&self.base.offsets[..], &self.base.targets[..]);
            return nodes
                .iter()
                .map(|&n| plain_has_neighbour(offsets, targets, n, same_type))
                .collect();
        }
        nodes
            .iter()
            .map(|&n| self.has_neighbour(n, same_type))
            .collect()
    }

    #[inline]
    fn changed_targets(self, n: u32) -> impl Iterator<Item = u32> + 'a {
        let a = self.added;
        let added = self.added_range(n);
        // Without deletions (or with only a gone node's) the edge rows are
        // never read.
        let live = move |i: &usize| {
            self.live
                .is_none_or(|r| r.now(self.base.edges[*i]) != ABSENT)
        };
        self.base_range(n)
            .filter(live)
            .map(move |i| self.target_now(i))
            .filter(|&t| t != ABSENT)
            .chain(added.map(move |i| a.expect("an added range").targets[i]))
    }

    /// `(edge row, node reached)` of each edge of `n`.
    #[inline]
    pub fn entries(self, n: u32) -> impl Iterator<Item = (u32, u32)> + 'a {
        let a = self.added;
        let added = self.added_range(n);
        self.base_range(n)
            .map(move |i| (self.row_now(i), self.target_now(i)))
            .filter(|&(row, t)| row != ABSENT && t != ABSENT)
            .chain(added.map(move |i| {
                let a = a.expect("an added range");
                (a.edges[i], a.targets[i])
            }))
    }
}

/// How a base adjacency serves today's rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Carry {
    /// Today's rows are the base's.
    Same,
    /// Rows were only appended: the base with `fresh` new edges beside it.
    Overlay { fresh: usize },
    /// Edge rows were appended (after every row the base saw) or deleted,
    /// or `moved` nodes moved or went: the base read through maps of node
    /// positions ([`NodeMap`]) and, when `gone` edges were deleted, of edge
    /// rows, with the `fresh` edges beside it.
    Remap {
        fresh: usize,
        moved: usize,
        gone: usize,
    },
    /// A new base: the base's edges moved to today's rows, `moved` nodes
    /// found again by id, `fresh` new edges resolved.
    Merge { fresh: usize, moved: usize },
    /// The base shares too little with today, or cannot be exact.
    Rebuild,
}

/// The decision for a base with `skipped` dangling edges, from how its
/// edge, source and destination tables changed since (`from` and `to` the
/// same change when both ends are one table).
pub fn decide(skipped: usize, [edges, from, to]: [&Change; 3]) -> Carry {
    if [edges, from, to].iter().all(|c| c.is_same()) {
        return Carry::Same;
    }
    // Most edges new: a merge reads as much as a build.
    let rows = edges.rows();
    if rows > 0 && (rows - edges.fresh()) * 2 < rows {
        return Carry::Rebuild;
    }
    // A dangling edge's end may be a node added since; only a build knows.
    if skipped > 0 && (from.fresh() > 0 || to.fresh() > 0) {
        return Carry::Rebuild;
    }
    let moved = from.moved()
        + if std::ptr::eq(from, to) {
            0
        } else {
            to.moved()
        };
    if moved > MOVED_NODES_MAX {
        return Carry::Rebuild;
    }
    let (fresh, gone) = (edges.fresh(), edges.moved());
    // Read through maps while the base's entries are mostly live, the
    // deleted ones told by their deletion lists and the new edges few and
    // after them; else a new base reads better.
    let told = gone == 0 || matches!(edges, Change::Deleted { .. });
    let beside = fresh <= OVERLAY_EDGES_MAX && edges.fresh_at_end() && told && gone * 2 <= rows;
    match (beside, moved + gone) {
        (true, 0) if edges.extends() && from.extends() && to.extends() => Carry::Overlay { fresh },
        (true, _) => Carry::Remap { fresh, moved, gone },
        (false, _) => Carry::Merge { fresh, moved },
    }
}

/// Where each base position of a table is now ([`ABSENT`]: gone): the
/// documents of a [`Coverage`], with node rows that moved found again by id.
pub fn positions(c: &Coverage, found: impl Fn(usize) -> u32) -> Vec<u32> {
    c.doc_row
        .iter()
        .enumerate()
        .map(|(d, r)| r.unwrap_or_else(|| found(d)))
        .collect()
}

/// A new base for today's rows, the one way one is made from an older
/// one: `base`'s edges moved to where their rows and ends are now (`from`,
/// `to`, `edges`: per base position, see [`positions`]), plus the fresh
/// edge rows `fresh` (today's rows, with their ends resolved today; a row
/// left out is dangling).
pub fn merge(
    base: &GraphIndex,
    (from, to, edges): (&[u32], &[u32], &[u32]),
    fresh: (&[u32], &[(u32, u32)]),
    (nodes_from, nodes_to, rows): (usize, usize, usize),
) -> GraphIndex {
    let map = |m: &[u32], n: u32| {
        if n == ABSENT { ABSENT } else { m[n as usize] }
    };
    let mut pairs = vec![(ABSENT, ABSENT); rows];
    for (row, (s, d)) in base.pairs().into_iter().enumerate() {
        let now = edges[row];
        if now != ABSENT {
            pairs[now as usize] = (map(from, s), map(to, d));
        }
    }
    for (&row, &p) in fresh.0.iter().zip(fresh.1) {
        pairs[row as usize] = p;
    }
    GraphIndex::from_pairs(nodes_from, nodes_to, &pairs, 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::coverage::cover;
    use crate::index::coverage::tests::frag;

    fn targets(s: Side<'_>, n: u32) -> Vec<u32> {
        s.targets(n).collect()
    }

    #[test]
    fn ids_and_adjacency() {
        let nodes = Arc::new(IdIndex::new(StringArray::from(vec!["a", "b", "c"])));
        assert_eq!(nodes.get("c"), Some(2));
        assert_eq!(nodes.get("z"), None);
        let src = vec![
            StringArray::from(vec!["a", "a"]),
            StringArray::from(vec!["b", "x"]),
        ];
        let dst = vec![
            StringArray::from(vec!["b", "c"]),
            StringArray::from(vec!["c", "a"]),
        ];
        let g = Graph::whole(Arc::new(GraphIndex::build(&src, &dst, &nodes, &nodes)));
        assert_eq!(g.base.skipped, 1);
        assert_eq!(targets(g.out(), 0), vec![1, 2]);
        assert_eq!(targets(g.inn(), 2), vec![0, 1]);
        let edge_rows: Vec<u32> = g.inn().entries(2).map(|e| e.0).collect();
        assert_eq!(edge_rows, vec![1, 2]);
        // The dangling bucket sits at position 3: no lookup reaches it.
        assert!(targets(g.out(), 3).is_empty());
    }

    #[test]
    fn an_overlay_answers_as_a_rebuild_of_all_the_edges() {
        // Base: 3 nodes, edges a->b, b->c. Since: node d, edges c->d, a->d.
        let base = GraphIndex::from_pairs(3, 3, &[(0, 1), (1, 2)], 0);
        let g = Graph::overlay(Arc::new(base), [None, None], None, (&[(2, 3), (0, 3)], 2));
        let whole = GraphIndex::from_pairs(4, 4, &[(0, 1), (1, 2), (2, 3), (0, 3)], 0);
        let whole = Graph::whole(Arc::new(whole));
        for n in 0..4 {
            for (a, b) in [(g.out(), whole.out()), (g.inn(), whole.inn())] {
                let mut x: Vec<_> = a.entries(n).collect();
                let mut y: Vec<_> = b.entries(n).collect();
                x.sort_unstable();
                y.sort_unstable();
                assert_eq!(x, y, "node {n}");
            }
        }
        assert_eq!(g.edges(), 4);
    }

    /// What `items` gives for every node on both sides, each sorted.
    fn per_node<T: Ord>(
        g: &Graph,
        nodes: u32,
        items: impl Fn(Side<'_>, u32) -> Vec<T>,
    ) -> Vec<Vec<T>> {
        let mut out = Vec::new();
        for n in 0..nodes {
            for s in [g.out(), g.inn()] {
                let mut e = items(s, n);
                e.sort_unstable();
                out.push(e);
            }
        }
        out
    }

    /// Every node's entries, sorted, both sides.
    fn all_entries(g: &Graph, nodes: u32) -> Vec<Vec<(u32, u32)>> {
        per_node(g, nodes, |s, n| s.entries(n).collect())
    }

    #[test]
    fn a_remapped_base_answers_as_a_rebuild_over_todays_rows() {
        // Nodes a b c d (one fragment). Since: b updated (deleted at offset
        // 1, written again in fragment 2) and d deleted, so today a=0 c=1
        // b=2. Edges a->b, b->c, c->a, a->d as they were, c->b appended.
        let nodes_then = vec![frag(1, 4, &[])];
        let nodes_now = vec![frag(1, 4, &[1, 3]), frag(2, 1, &[])];
        let base = GraphIndex::from_pairs(4, 4, &[(0, 1), (1, 2), (2, 0), (0, 3)], 0);
        let nc = cover(&nodes_then, &nodes_now);
        let map = Arc::new(NodeMap::new(
            positions(&nc, |d| if d == 1 { 2 } else { ABSENT }),
            nc.rows,
        ));
        assert_eq!(map.base_of_now, [0, 2, 1]);
        assert_eq!([0, 1, 2, 3].map(|t| map.now(t)), [0, 2, 1, ABSENT]);
        let moved = [Some(map.clone()), Some(map)];
        let g = Graph::overlay(Arc::new(base), moved, None, (&[(1, 2)], 4));
        // Today's edge rows: a->b, b->c, c->a, a->(gone), c->b.
        let pairs = [(0, 2), (2, 1), (1, 0), (ABSENT, ABSENT), (1, 2)];
        let whole = Graph::whole(Arc::new(GraphIndex::from_pairs(3, 3, &pairs, 0)));
        assert_eq!(all_entries(&g, 3), all_entries(&whole, 3));
        assert!(g.out().targets(3).next().is_none(), "no node 3 today");
        assert!(g.remapped());
        let compacted = Graph::whole(Arc::new(g.compact([3, 3])));
        assert_eq!(all_entries(&compacted, 3), all_entries(&whole, 3));
        assert_eq!(compacted.base.skipped, 1, "the edge to the deleted node");
    }

    #[test]
    fn node_positions_read_alike_ranked_or_dense() {
        // 300 nodes: 5 deleted, 3 moved to the end (rows 292..295), the rest
        // in order; and a shuffle, which no rank describes.
        let mut now_of_base = Vec::new();
        let (mut next, mut end) = (0u32, 292u32);
        for t in 0..300u32 {
            now_of_base.push(match t {
                7 | 64 | 65 | 128 | 299 => ABSENT,
                3 | 70 | 200 => {
                    end += 1;
                    end - 1
                }
                _ => {
                    next += 1;
                    next - 1
                }
            });
        }
        assert_eq!(next, 292);
        let map = NodeMap::new(now_of_base.clone(), 295);
        assert!(matches!(map.now, NowOfBase::Ranked { .. }));
        for (t, &n) in now_of_base.iter().enumerate() {
            assert_eq!(map.now(t as u32), n, "position {t}");
        }
        let shuffled: Vec<u32> = (0..10_000u32).map(|t| (t * 7919) % 10_000).collect();
        let map = NodeMap::new(shuffled.clone(), 10_000);
        assert!(matches!(map.now, NowOfBase::Dense(_)));
        assert_eq!(map.now(1), shuffled[1]);
    }

    #[test]
    fn edge_rows_today_count_the_deleted_before_them_across_words() {
        let gone_rows = [0usize, 3, 63, 64, 65, 130, 199];
        let mut gone = vec![0u64; 200usize.div_ceil(64)];
        for r in gone_rows {
            gone[r / 64] |= 1 << (r % 64);
        }
        let rows = RowRank::new(gone);
        let mut next = 0;
        for r in 0..200u32 {
            if gone_rows.contains(&(r as usize)) {
                assert_eq!(rows.now(r), ABSENT, "row {r}");
            } else {
                assert_eq!(rows.now(r), next, "row {r}");
                next += 1;
            }
        }
    }

    /// Nodes a b c d, edges a->b b->c c->a a->c d->b b->d (rows 0..6).
    /// Deleting nodes with the edges they take along leaves the edge rows
    /// unread; any other deleted edge is still told by its row.
    #[test]
    fn deletions_that_follow_gone_nodes_need_no_edge_rows() {
        let pairs = [(0, 1), (1, 2), (2, 0), (0, 2), (3, 1), (1, 3)];
        let base = Arc::new(GraphIndex::from_pairs(4, 4, &pairs, 0));
        let bits = |rows: &[u32]| RowRank::new(vec![rows.iter().map(|r| 1u64 << r).sum()]);
        let targets = |g: &Graph, nodes: u32| per_node(g, nodes, |s, n| s.targets(n).collect());
        /// Base positions today, deleted edge rows, whether the deletions
        /// follow the nodes, and today's edges.
        type Case<'a> = (&'a [u32], &'a [u32], bool, &'a [(u32, u32)]);
        let cases: [Case; 3] = [
            // b gone with its four edges: today a c d, edges c->a a->c.
            (&[0, ABSENT, 1, 2], &[0, 1, 4, 5], true, &[(1, 0), (0, 1)]),
            // ... and a->c deleted on its own.
            (&[0, ABSENT, 1, 2], &[0, 1, 3, 4, 5], false, &[(1, 0)]),
            // b and d gone: d->b and b->d are counted once.
            (
                &[0, ABSENT, 1, ABSENT],
                &[0, 1, 4, 5],
                true,
                &[(1, 0), (0, 1)],
            ),
        ];
        for (now_of_base, deleted, follow, today) in cases {
            let rows = now_of_base.iter().filter(|&&n| n != ABSENT).count();
            let map = Arc::new(NodeMap::new(now_of_base.to_vec(), rows));
            let g = Graph::overlay(
                base.clone(),
                [Some(map.clone()), Some(map)],
                Some(Arc::new(bits(deleted))),
                (&[], (pairs.len() - deleted.len()) as u32),
            );
            assert_eq!(g.deletions_follow_nodes, follow, "{deleted:?}");
            let whole = Graph::whole(Arc::new(GraphIndex::from_pairs(rows, rows, today, 0)));
            assert_eq!(
                targets(&g, rows as u32),
                targets(&whole, rows as u32),
                "{deleted:?}"
            );
            assert_eq!(
                all_entries(&g, rows as u32),
                all_entries(&whole, rows as u32)
            );
        }
    }

    #[test]
    fn deleted_edges_are_skipped_and_the_rest_renumbered() {
        // Nodes a b c as they were. Edges a->b, b->c, c->a, a->c; since, b->c
        // deleted (offset 1) and c->b appended, so today's rows are a->b,
        // c->a, a->c, c->b.
        let base = GraphIndex::from_pairs(3, 3, &[(0, 1), (1, 2), (2, 0), (0, 2)], 0);
        let (then, now) = ([frag(5, 4, &[])], [frag(5, 4, &[1]), frag(6, 1, &[])]);
        let Change::Deleted { gone, count, .. } = Change::of_rows(&then, &now) else {
            panic!("told from the deletion lists");
        };
        assert_eq!(count, 1);
        let rows = Arc::new(RowRank::new(gone));
        assert_eq!([0, 1, 2, 3].map(|r| rows.now(r)), [0, ABSENT, 1, 2]);
        let first = 3;
        let g = Graph::overlay(Arc::new(base), [None, None], Some(rows), (&[(2, 1)], first));
        let pairs = [(0, 1), (2, 0), (0, 2), (2, 1)];
        let whole = Graph::whole(Arc::new(GraphIndex::from_pairs(3, 3, &pairs, 0)));
        assert_eq!(all_entries(&g, 3), all_entries(&whole, 3));
        assert_eq!(g.edges(), 4);
        let compacted = g.compact([3, 3]);
        assert_eq!(compacted.pairs(), pairs);
    }

    #[test]
    fn a_merge_moves_edges_to_their_rows_and_ends_today() {
        // Nodes a b c (one fragment); b is updated: deleted at offset 1 and
        // written again in fragment 2, so today a=0 c=1 b=2.
        let nodes_then = vec![frag(1, 3, &[])];
        let nodes_now = vec![frag(1, 3, &[1]), frag(2, 1, &[])];
        // Edges a->b, b->c, c->a; the second is deleted, one edge c->b added.
        let edges_then = vec![frag(5, 3, &[])];
        let edges_now = vec![frag(5, 3, &[1]), frag(6, 1, &[])];
        let base = GraphIndex::from_pairs(3, 3, &[(0, 1), (1, 2), (2, 0)], 0);
        let nc = cover(&nodes_then, &nodes_now);
        assert!(!Change::Mapped(cover(&nodes_then, &nodes_now)).extends());
        // Base node 1 ("b") is found again at today's row 2.
        let nodes = positions(&nc, |d| if d == 1 { 2 } else { ABSENT });
        let ec = cover(&edges_then, &edges_now);
        let edges = positions(&ec, |_| ABSENT);
        let fresh_pairs = [(1, 2)];
        let m = merge(
            &base,
            (&nodes, &nodes, &edges),
            (&ec.fresh, &fresh_pairs),
            (3, 3, ec.rows),
        );
        let want = GraphIndex::from_pairs(3, 3, &[(0, 2), (1, 0), (1, 2)], 0);
        assert_eq!(m.pairs(), want.pairs());
        assert_eq!(m.skipped, 0);
    }
}
