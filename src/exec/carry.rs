//! Node ids and columns of a table version carried from an older version
//! of the same table that this process holds whole (its base), by the rows
//! changed since. Every committed write makes new table versions; without
//! this, the first reads of each new version read its ids and columns from
//! storage again, so readers beside a writer never stay warm. A version is
//! carried when it is its base with rows deleted and fragments appended
//! (`index::coverage::Change`, told from the fragment lists and deletion
//! vectors, not the rows) and at most [`CHANGED_ROWS_MAX`] rows changed:
//! the appended rows are read once (a take of a few rows), and a read
//! answers from the base's structures with deleted rows skipped. Any other
//! change (a compaction, a schema step that rewrote fragments, many rows)
//! reads from storage as before. A whole column or id index made from a
//! carry is exact, so it is kept and becomes the next base.

use std::sync::Arc;

use arrow::compute::{concat, filter, interleave};
use arrow_array::{Array, ArrayRef, BooleanArray, RecordBatch, StringArray};

use super::cache::{Key, Phys};
use super::residency::{Decision, Reach, Why};
use super::run::Ctx;
use crate::compiler::catalog::{ID, TypeDef};
use crate::error::{OmniError, Result};
use crate::index::coverage::{self, Change, Layout};
use crate::storage::{scan, stage};
use crate::util::idindex::IdIndex;

/// More rows changed since the base than this (appended plus deleted) and
/// a version is read from storage: past it, a whole read costs about what
/// carrying does, and the changed rows would crowd the cache.
pub const CHANGED_ROWS_MAX: usize = super::residency::ROWS_MAX;

/// The version at which this process last held a node table's ids, or
/// one of its columns, whole: what later versions carry from.
pub struct BaseRef {
    pub phys: Phys,
    pub layout: Arc<Layout>,
}

/// The latest version of a table line carried from one base: a later
/// version carries from it by its own change (a row or two), not by every
/// change since the base.
struct Tip {
    phys: Phys,
    layout: Arc<Layout>,
    delta: Arc<NodeDelta>,
}

/// A version's delta from one base (`None`: not a carry).
type Made = Option<Arc<NodeDelta>>;

/// A node table's ids at one snapshot, in memory: held whole, or carried
/// from a base's.
pub enum WarmIds {
    Held(Arc<IdIndex>),
    Carried(Arc<NodeDelta>, Arc<IdIndex>),
}

impl WarmIds {
    /// Today's position of `id`.
    pub fn position(&self, id: &str) -> Option<u32> {
        match self {
            WarmIds::Held(v) => v.get(id),
            WarmIds::Carried(d, base) => d.position(base, id),
        }
    }
}

/// A table version seen as its base with rows deleted and rows appended at
/// the end of the scan order. Positions below [`NodeDelta::kept`] are the
/// base's live rows in order; the rest are the appended rows.
pub struct NodeDelta {
    base_rows: usize,
    /// Base positions deleted since, ascending.
    gone: Vec<u32>,
    /// `gone[i] - i`: the i-th deleted row precedes today's row `p` exactly
    /// when this is at most `p` (the base's live rows before it).
    shift: Vec<u32>,
    /// The appended rows: the ids and every stored property but blobs.
    fresh: RecordBatch,
    fresh_ids: IdIndex,
}

impl NodeDelta {
    pub fn new(base_rows: usize, gone: Vec<u32>, fresh: RecordBatch) -> Result<Self> {
        debug_assert!(gone.windows(2).all(|w| w[0] < w[1]));
        debug_assert!(gone.last().is_none_or(|&g| (g as usize) < base_rows));
        let shift = gone.iter().enumerate().map(|(i, g)| g - i as u32).collect();
        let fresh_ids = IdIndex::new(stage::string_column(&fresh, ID)?.clone());
        Ok(Self {
            base_rows,
            gone,
            shift,
            fresh,
            fresh_ids,
        })
    }

    /// The base's rows still live, first in today's scan order.
    pub fn kept(&self) -> usize {
        self.base_rows - self.gone.len()
    }

    pub fn rows(&self) -> usize {
        self.kept() + self.fresh.num_rows()
    }

    /// Rows deleted and appended since the base.
    pub fn changed(&self) -> usize {
        self.gone.len() + self.fresh.num_rows()
    }

    /// The base position of today's row `p` (`p < kept`).
    fn base_of(&self, p: u32) -> u32 {
        p + self.shift.partition_point(|&s| s <= p) as u32
    }

    /// Today's position of base row `b`; `None` once deleted.
    fn now_of(&self, b: u32) -> Option<u32> {
        match self.gone.binary_search(&b) {
            Ok(_) => None,
            Err(before) => Some(b - before as u32),
        }
    }

    /// Today's position of `id`: an appended row first (an updated row is
    /// deleted from the base and appended), else its base row if live.
    pub fn position(&self, base: &IdIndex, id: &str) -> Option<u32> {
        match self.fresh_ids.get(id) {
            Some(f) => Some(self.kept() as u32 + f),
            None => base.get(id).and_then(|b| self.now_of(b)),
        }
    }

    /// The appended rows' values of `column`, when they can stand beside
    /// `base` (the same Arrow type).
    fn fresh_of(&self, column: &str, base: &dyn Array) -> Option<&ArrayRef> {
        self.fresh
            .column_by_name(column)
            .filter(|f| f.data_type() == base.data_type())
    }

    /// Can `column` be carried from `base` (its whole array at the base)?
    pub fn carries(&self, column: &str, base: &dyn Array) -> bool {
        base.len() == self.base_rows && self.fresh_of(column, base).is_some()
    }

    /// `column`'s values at today's rows `rows`, from the base's whole
    /// column and the appended rows ([`Self::carries`] must hold).
    pub fn take(&self, column: &str, base: &ArrayRef, rows: &[u32]) -> Result<ArrayRef> {
        let fresh = self
            .fresh_of(column, base.as_ref())
            .ok_or_else(|| mismatch(column))?;
        let kept = self.kept() as u32;
        let at: Vec<(usize, usize)> = rows
            .iter()
            .map(|&r| match r < kept {
                true => (0, self.base_of(r) as usize),
                false => (1, (r - kept) as usize),
            })
            .collect();
        Ok(interleave(&[base.as_ref(), fresh.as_ref()], &at)?)
    }

    /// `column` whole at today's version: the base's live rows, then the
    /// appended ones ([`Self::carries`] must hold).
    pub fn whole(&self, column: &str, base: &ArrayRef) -> Result<ArrayRef> {
        let fresh = self
            .fresh_of(column, base.as_ref())
            .ok_or_else(|| mismatch(column))?;
        let kept = match self.gone.is_empty() {
            true => base.clone(),
            false => {
                let mut live = vec![true; self.base_rows];
                for &g in &self.gone {
                    live[g as usize] = false;
                }
                filter(base.as_ref(), &BooleanArray::from(live))?
            }
        };
        Ok(concat(&[kept.as_ref(), fresh.as_ref()])?)
    }

    /// The delta from the same base of a later version that is this one
    /// with the rows at `gone` (this version's positions, ascending)
    /// deleted and `appended` after: only the rows new since are read.
    /// `None` when `appended` does not have the appended rows' columns.
    pub fn then(&self, gone: &[u32], appended: &RecordBatch) -> Result<Option<Self>> {
        if appended.schema() != self.fresh.schema() {
            return Ok(None);
        }
        let kept = self.kept() as u32;
        let mut gone_base = self.gone.clone();
        let mut live_fresh = vec![true; self.fresh.num_rows()];
        for &p in gone {
            match p < kept {
                true => gone_base.push(self.base_of(p)),
                false => live_fresh[(p - kept) as usize] = false,
            }
        }
        gone_base.sort_unstable();
        let fresh =
            arrow::compute::filter_record_batch(&self.fresh, &BooleanArray::from(live_fresh))?;
        let fresh = arrow::compute::concat_batches(&fresh.schema(), [&fresh, appended])?;
        Ok(Some(Self::new(self.base_rows, gone_base, fresh)?))
    }

    pub fn bytes(&self) -> usize {
        self.fresh.get_array_memory_size() + self.fresh_ids.bytes() + self.gone.len() * 8
    }
}

fn mismatch(column: &str) -> OmniError {
    OmniError::Storage(format!(
        "carried column {column}: no appended values of its type"
    ))
}

impl Ctx<'_> {
    fn node_base_key(&self, t: &TypeDef, column: &str, any_line: bool) -> Result<Key> {
        let mut line = self.phys(t)?.line();
        if any_line {
            line.lance_branch = None;
        }
        Ok(Key::NodeBase {
            line,
            column: column.to_string(),
            any_line,
        })
    }

    /// `column` (or the ids, [`ID`]) of `t` is now held whole at this
    /// snapshot's version: later versions carry from it, on its branch's
    /// line and, failing that, on any other (a branch's first write forks
    /// its tables; the fork shares the fragments it was made from, which
    /// the layouts tell).
    pub(super) async fn remember_node_base(&self, t: &TypeDef, column: &str) -> Result<()> {
        let layout = self.layout(&t.name).await?;
        let phys = self.phys(t)?;
        let base = Arc::new(BaseRef { phys, layout });
        for any_line in [false, true] {
            // Bookkeeping: the layout is the version's own cache entry.
            self.cache
                .put(self.node_base_key(t, column, any_line)?, base.clone(), 0);
        }
        Ok(())
    }

    /// The base `column` of `t` carries from: its line's, else any line's.
    fn node_base(&self, t: &TypeDef, column: &str) -> Result<Option<Arc<BaseRef>>> {
        for any_line in [false, true] {
            if let Some(b) = self
                .cache
                .get::<BaseRef>(&self.node_base_key(t, column, any_line)?)
            {
                return Ok(Some(b));
            }
        }
        Ok(None)
    }

    /// This snapshot's version of `t` as the base of `column` with the
    /// rows changed since, and that base's version; `None` when there is
    /// no base, it is this version, or the change is not a carry.
    async fn node_delta(
        &self,
        t: &TypeDef,
        column: &str,
    ) -> Result<Option<(Arc<NodeDelta>, Phys)>> {
        let now = self.phys(t)?;
        let Some(base) = self.node_base(t, column)? else {
            return Ok(None);
        };
        if base.phys == now {
            return Ok(None);
        }
        // Readers that meet a new version together make its delta once;
        // a version that is no carry is remembered as such.
        let key = Key::NodeDelta(now.clone(), base.phys.clone());
        let made = match self.cache.get::<Made>(&key) {
            Some(made) => made,
            None => {
                let _making = self.cache.making(&key).await;
                match self.cache.get::<Made>(&key) {
                    Some(made) => made,
                    None => {
                        let made = Arc::new(self.make_node_delta(t, &base, &now).await?);
                        // A version that is no carry takes a nominal
                        // share, so its entry can go too.
                        let bytes = made.as_ref().as_ref().map_or(64, |d| d.bytes());
                        self.cache.put(key, made.clone(), bytes);
                        made
                    }
                }
            }
        };
        Ok(made.as_ref().clone().map(|d| (d, base.phys.clone())))
    }

    /// The delta of this version from `base`, read: `None` when the
    /// change is not a carry.
    async fn make_node_delta(
        &self,
        t: &TypeDef,
        base: &BaseRef,
        now: &Phys,
    ) -> Result<Option<Arc<NodeDelta>>> {
        let t0 = std::time::Instant::now();
        let layout = self.layout(&t.name).await?;
        let tip_key = Key::NodeTip(now.line(), base.phys.clone());
        let tip = self
            .cache
            .get::<Tip>(&tip_key)
            .filter(|tip| tip.phys.version < now.version);
        let made = match &tip {
            Some(tip) => self.carry_from_tip(t, tip, &layout).await?,
            None => None,
        };
        let made = match made {
            Some(d) => {
                self.cache
                    .stats
                    .node_carries_chained
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Some(d)
            }
            None => self.carry_from_base(t, base, &layout).await?,
        };
        let Some(d) = made.map(Arc::new) else {
            return Ok(None);
        };
        tracing::debug!(
            type_name = t.name,
            base = base.phys.version,
            from_tip = tip.as_ref().map(|t| t.phys.version),
            now = now.version,
            rows = d.rows(),
            changed = d.changed(),
            us = t0.elapsed().as_micros() as u64,
            "node table carried from a base"
        );
        self.cache.put(
            tip_key,
            Arc::new(Tip {
                phys: now.clone(),
                layout,
                delta: d.clone(),
            }),
            0,
        );
        self.cache
            .stats
            .node_carries
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(Some(d))
    }

    /// The base positions deleted since `then` and the rows appended since
    /// (read), when `now` is `then` with rows deleted and fragments
    /// appended and at most `room` rows changed.
    async fn changed_since(
        &self,
        t: &TypeDef,
        (then, then_version): (&Layout, u64),
        now: &Layout,
        room: usize,
    ) -> Result<Option<(Vec<u32>, RecordBatch)>> {
        let (gone, count, added) = match Change::of_rows(then, now) {
            Change::Appended { added, .. } => (Vec::new(), 0, added),
            Change::Deleted {
                gone, count, added, ..
            } => (gone, count, added),
            Change::Mapped(_) => return Ok(None),
        };
        if count + added > room {
            return Ok(None);
        }
        let gone: Vec<u32> = coverage::set_rows(&gone).collect();
        let cols = t.row_columns();
        let table = self.g.read_table(self.snap, t).await?;
        let kept = (coverage::rows(then) - gone.len()) as u32;
        // The version right after `then`, written by this process: its
        // writer handed over the rows its new fragments hold.
        let handed = match then_version + 1 == table.version() {
            true => {
                let now = self.phys(t)?;
                self.g
                    .tables
                    .appended(&now.dir, now.lance_branch.as_deref(), now.version)
                    .filter(|rows| rows.num_rows() == added)
                    .and_then(|rows| table.as_taken(&rows, &cols))
            }
            false => None,
        };
        let appended = match (added, handed) {
            (0, _) => scan::empty(&table, &cols)?,
            (_, Some(rows)) => {
                self.cache
                    .stats
                    .rows_handed
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                rows
            }
            (n, None) => {
                table
                    .take_columns(&(kept..kept + n as u32).collect::<Vec<_>>(), &cols)
                    .await?
            }
        };
        Ok(Some((gone, appended)))
    }

    async fn carry_from_base(
        &self,
        t: &TypeDef,
        base: &BaseRef,
        now: &Layout,
    ) -> Result<Option<NodeDelta>> {
        let Some((gone, appended)) = self
            .changed_since(t, (&base.layout, base.phys.version), now, CHANGED_ROWS_MAX)
            .await?
        else {
            return Ok(None);
        };
        Ok(Some(NodeDelta::new(
            coverage::rows(&base.layout),
            gone,
            appended,
        )?))
    }

    async fn carry_from_tip(
        &self,
        t: &TypeDef,
        tip: &Tip,
        now: &Layout,
    ) -> Result<Option<NodeDelta>> {
        let room = CHANGED_ROWS_MAX.saturating_sub(tip.delta.changed());
        let then = (tip.layout.as_ref(), tip.phys.version);
        let Some((gone, appended)) = self.changed_since(t, then, now, room).await? else {
            return Ok(None);
        };
        tip.delta.then(&gone, &appended)
    }

    /// The ids of `t` carried from the id index of a base this process
    /// holds.
    pub(super) async fn carried_ids(
        &self,
        t: &TypeDef,
    ) -> Result<Option<(Arc<NodeDelta>, Arc<IdIndex>)>> {
        let Some((d, base)) = self.node_delta(t, ID).await? else {
            return Ok(None);
        };
        Ok(self
            .cache
            .get::<IdIndex>(&Key::Ids(base))
            .filter(|ids| d.carries(ID, &ids.ids))
            .map(|ids| (d, ids)))
    }

    /// `column` of `t` carried from its whole array at a base this process
    /// holds.
    pub(super) async fn carried_column(
        &self,
        t: &TypeDef,
        column: &str,
    ) -> Result<Option<(Arc<NodeDelta>, Arc<ArrayRef>)>> {
        let Some((d, base)) = self.node_delta(t, column).await? else {
            return Ok(None);
        };
        Ok(self
            .cache
            .get::<ArrayRef>(&Key::Column(base, column.to_string()))
            .filter(|c| d.carries(column, c.as_ref()))
            .map(|c| (d, c)))
    }

    /// `t`'s ids at this snapshot when this process holds them, or can
    /// carry them from a base.
    pub(super) async fn warm_ids(&self, t: &TypeDef) -> Result<Option<WarmIds>> {
        if let Some(v) = self.cache.get::<IdIndex>(&Key::Ids(self.phys(t)?)) {
            return Ok(Some(WarmIds::Held(v)));
        }
        Ok(self
            .carried_ids(t)
            .await?
            .map(|(d, base)| WarmIds::Carried(d, base)))
    }

    /// Does this process hold `t`'s ids at this version, or can it carry
    /// them from a base (the type is warm)?
    pub(super) async fn ids_warm(&self, t: &TypeDef) -> Result<bool> {
        Ok(self.warm_ids(t).await?.is_some())
    }

    /// Log a read answered by a carry (`--profile`).
    pub(super) fn log_carried(&self, type_name: &str, column: &str, d: &NodeDelta) {
        self.reads.log.lock().push((
            type_name.to_string(),
            column.to_string(),
            Decision {
                reach: Reach::Held,
                why: Why::Carried(d.changed()),
            },
        ));
    }
}

/// The ids of an id index as a column (a carry's base for [`ID`]).
pub fn ids_column(ids: &IdIndex) -> ArrayRef {
    Arc::new(StringArray::clone(&ids.ids))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Int32Array;
    use arrow_schema::{DataType, Field, Schema};

    fn batch(ids: &[&str], ages: &[i32]) -> RecordBatch {
        RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new(ID, DataType::Utf8, false),
                Field::new("age", DataType::Int32, true),
            ])),
            vec![
                Arc::new(StringArray::from(ids.to_vec())),
                Arc::new(Int32Array::from(ages.to_vec())),
            ],
        )
        .unwrap()
    }

    /// Base rows a..f; b and e deleted; g appended and c updated (deleted
    /// and appended as c').
    fn delta() -> (NodeDelta, IdIndex, ArrayRef) {
        let base = IdIndex::new(StringArray::from(vec!["a", "b", "c", "d", "e", "f"]));
        let ages: ArrayRef = Arc::new(Int32Array::from(vec![1, 2, 3, 4, 5, 6]));
        let d = NodeDelta::new(6, vec![1, 2, 4], batch(&["g", "c"], &[7, 33])).unwrap();
        (d, base, ages)
    }

    #[test]
    fn positions_skip_deleted_rows_and_find_appended_ones_first() {
        let (d, base, _) = delta();
        assert_eq!((d.kept(), d.rows(), d.changed()), (3, 5, 5));
        let at: Vec<Option<u32>> = ["a", "b", "c", "d", "e", "f", "g", "x"]
            .iter()
            .map(|id| d.position(&base, id))
            .collect();
        assert_eq!(
            at,
            [
                Some(0),
                None,
                Some(4),
                Some(1),
                None,
                Some(2),
                Some(3),
                None
            ]
        );
    }

    #[test]
    fn a_carried_column_equals_the_version_read_whole() {
        let (d, base, ages) = delta();
        let whole = d.whole("age", &ages).unwrap();
        assert_eq!(
            whole.as_any().downcast_ref::<Int32Array>().unwrap(),
            &Int32Array::from(vec![1, 4, 6, 7, 33])
        );
        let taken = d.take("age", &ages, &[4, 0, 2, 3, 1, 4]).unwrap();
        assert_eq!(
            taken.as_any().downcast_ref::<Int32Array>().unwrap(),
            &Int32Array::from(vec![33, 1, 6, 7, 4, 33])
        );
        let ids = d.whole(ID, &ids_column(&base)).unwrap();
        assert_eq!(
            ids.as_any().downcast_ref::<StringArray>().unwrap(),
            &StringArray::from(vec!["a", "d", "f", "g", "c"])
        );
    }

    #[test]
    fn only_a_column_of_the_base_s_rows_and_type_is_carried() {
        let (d, _, ages) = delta();
        assert!(d.carries("age", ages.as_ref()));
        let short: ArrayRef = Arc::new(Int32Array::from(vec![1, 2]));
        assert!(!d.carries("age", short.as_ref()), "another version's rows");
        let wide: ArrayRef = Arc::new(arrow_array::Int64Array::from(vec![1, 2, 3, 4, 5, 6]));
        assert!(!d.carries("age", wide.as_ref()), "another type");
        assert!(
            !d.carries("name", ages.as_ref()),
            "a column it did not read"
        );
    }

    #[test]
    fn a_delta_carried_from_the_last_one_equals_the_delta_from_the_base() {
        let (d, base, ages) = delta();
        // Today's rows: a d f g c'. Next: d (a base row) and g (an
        // appended one) deleted, h appended.
        let next = d.then(&[1, 3], &batch(&["h"], &[8])).unwrap().unwrap();
        let direct = NodeDelta::new(6, vec![1, 2, 3, 4], batch(&["c", "h"], &[33, 8])).unwrap();
        assert_eq!((next.kept(), next.rows()), (direct.kept(), direct.rows()));
        for id in ["a", "b", "c", "d", "e", "f", "g", "h"] {
            assert_eq!(next.position(&base, id), direct.position(&base, id), "{id}");
        }
        let all: Vec<u32> = (0..direct.rows() as u32).collect();
        assert_eq!(
            next.take("age", &ages, &all).unwrap().as_ref(),
            direct.take("age", &ages, &all).unwrap().as_ref()
        );
        assert_eq!(
            next.whole("age", &ages).unwrap().as_ref(),
            &Int32Array::from(vec![1, 6, 33, 8]) as &dyn Array
        );
        // Rows of another shape are not carried.
        let other = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new(ID, DataType::Utf8, false)])),
            vec![Arc::new(StringArray::from(vec!["x"]))],
        )
        .unwrap();
        assert!(d.then(&[], &other).unwrap().is_none());
    }

    #[test]
    fn the_base_row_of_every_position_skips_every_deleted_row() {
        // Deleted rows in runs, at both ends and alone.
        let gone = vec![0, 1, 4, 6, 7, 8, 11];
        let d = NodeDelta::new(12, gone.clone(), batch(&[], &[])).unwrap();
        let live: Vec<u32> = (0..12).filter(|b| !gone.contains(b)).collect();
        for (p, &b) in live.iter().enumerate() {
            assert_eq!(d.base_of(p as u32), b);
            assert_eq!(d.now_of(b), Some(p as u32));
        }
        for g in gone {
            assert_eq!(d.now_of(g), None);
        }
    }
}
