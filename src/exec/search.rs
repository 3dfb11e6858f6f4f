//! Search in a read: text filters on the frame's rows, per-row scores
//! (cosine distance, BM25), and the fusion of two rankings over the whole
//! result. Everything reads the snapshot's own rows (through the runtime
//! cache), so a row is found however recently it was written.

use std::sync::Arc;
use std::sync::atomic::Ordering as AtomicOrdering;

use arrow::compute::{SortColumn, SortOptions, lexsort_to_indices};
use arrow_array::cast::AsArray;
use arrow_array::types::Float32Type;
use arrow_array::{Array, ArrayRef, Float64Array};

use super::cache::Key;
use super::run::{Ctx, Frame, var_type};
use crate::compiler::query::ir::{Op, Plan, RetExpr, Score, TextTest, ValExpr};
use crate::compiler::value::Value;
use crate::error::{OmniError, Result};
use crate::index::coverage::{self, Layout};
use crate::index::ivf::{self, Ivf, Partitions};
use crate::index::text::{self, TextIndex};
use crate::index::{IndexKind, IndexRef};

/// What one search function did in a query: reported by `query --stats`.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SearchStep {
    /// `nearest`, `bm25`, `rrf`, `search`, `match_text` or `fuzzy`.
    pub function: String,
    /// `Type.property` (for `rrf`, its two sides').
    pub property: String,
    /// How it found its rows.
    pub method: String,
    /// Rows it was given.
    pub rows_in: usize,
    /// Rows it kept (a filter) or scored (a score); for `rrf`, the rows in
    /// its result.
    pub rows_out: usize,
    /// For `rrf`: the rows each side contributed (its ranked top `limit`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sides: Option<[usize; 2]>,
}

/// A search that reads every row it is given.
const FLAT: &str = "flat: every row of the snapshot, exact";
/// A text search without a persisted index.
const INVERTED: &str = "inverted index built from the snapshot's rows (cached per table version)";

/// A String column's inverted index at one table version, and how it was
/// made (for the trace).
pub(super) struct TextView {
    pub(super) index: Arc<TextIndex>,
    method: String,
}

/// A Vector column's persisted partitions over one table version.
struct VectorView {
    ivf: Arc<Ivf>,
    parts: Partitions,
    built_at: u64,
}

/// Reads a persisted index file (`what` names it in errors).
type Decode<T> = fn(bytes::Bytes, &str) -> Result<(Layout, T)>;

/// A persisted index as decoded: the layout it was built at and the index.
struct Persisted<T> {
    built: Layout,
    index: Arc<T>,
}

impl Ctx<'_> {
    fn trace(&self, step: SearchStep) {
        self.search.lock().push(step);
    }

    /// The fragments of a type's table at this snapshot.
    pub(super) async fn layout(&self, type_name: &str) -> Result<Arc<Layout>> {
        let t = self.def(type_name);
        let key = Key::Layout(self.phys(t)?);
        if let Some(l) = self.cache.get::<Layout>(&key) {
            return Ok(l);
        }
        let l = Arc::new(self.g.read_table(self.snap, t).await?.layout().await?);
        self.cache.put(key, l.clone(), l.len() * 64);
        Ok(l)
    }

    /// The persisted index `type_name.prop` has at this snapshot, if any of
    /// `kind`.
    async fn index_ref(
        &self,
        type_name: &str,
        prop: &str,
        kind: IndexKind,
    ) -> Result<Option<IndexRef>> {
        let table = self.g.read_table(self.snap, self.def(type_name)).await?;
        Ok(table.index_of(prop)?.filter(|r| r.kind == kind))
    }

    /// An index file, decoded once.
    async fn persisted<T: Send + Sync + 'static>(
        &self,
        r: &IndexRef,
        decode: Decode<T>,
    ) -> Result<Arc<Persisted<T>>> {
        let key = Key::IndexFile {
            graph: self.g.store.uri().to_string(),
            file: r.file.clone(),
        };
        if let Some(p) = self.cache.get::<Persisted<T>>(&key) {
            return Ok(p);
        }
        let bytes = self
            .g
            .store
            .read(&r.file)
            .await?
            .ok_or_else(|| OmniError::Storage(format!("index file {} is missing", r.file)))?;
        let len = bytes.len();
        let what = r.file.clone();
        let (built, index) = tokio::task::spawn_blocking(move || decode(bytes, &what))
            .await
            .map_err(|e| OmniError::Storage(format!("decoding index file {}: {e}", r.file)))??;
        let p = Arc::new(Persisted {
            built,
            index: Arc::new(index),
        });
        self.cache.put(key, p.clone(), len * 2);
        Ok(p)
    }

    /// The inverted index of a String property at this snapshot, once per
    /// table version: the persisted one rebased onto this version with its
    /// fresh rows added, or (without one) built from every row.
    pub(super) async fn text_index(&self, type_name: &str, prop: &str) -> Result<Arc<TextView>> {
        let key = Key::Text(self.phys(self.def(type_name))?, prop.to_string());
        if let Some(ix) = self.cache.get::<TextView>(&key) {
            return Ok(ix);
        }
        let view = match self.index_ref(type_name, prop, IndexKind::Text).await? {
            Some(r) => {
                let p = self.persisted(&r, TextIndex::from_bytes).await?;
                let cov = coverage::cover(&p.built, &self.layout(type_name).await?);
                let method = format!(
                    "persisted inverted index (built at table version {}): {} rows from it, {} fresh rows tokenised",
                    r.built_at,
                    cov.covered(),
                    cov.fresh.len()
                );
                let index = if cov.is_identity() {
                    p.index.clone()
                } else if cov.fresh.is_empty() {
                    Arc::new(p.index.rebase(&cov, TextIndex::empty(cov.rows))?)
                } else {
                    let col = self.column(type_name, prop).await?;
                    let fresh = TextIndex::build_rows(
                        col.as_string::<i32>(),
                        cov.fresh.iter().map(|&r| r as usize),
                    );
                    Arc::new(p.index.rebase(&cov, fresh)?)
                };
                TextView { index, method }
            }
            None => {
                let col = self.column(type_name, prop).await?;
                self.cache
                    .stats
                    .text_builds
                    .fetch_add(1, AtomicOrdering::Relaxed);
                TextView {
                    index: Arc::new(TextIndex::build(col.as_string::<i32>())),
                    method: INVERTED.into(),
                }
            }
        };
        let view = Arc::new(view);
        self.cache.put(key, view.clone(), view.index.bytes());
        Ok(view)
    }

    /// A Vector property's persisted partitions at this snapshot, if it has
    /// an index.
    async fn vector_index(&self, type_name: &str, prop: &str) -> Result<Option<Arc<VectorView>>> {
        let key = Key::Partitions(self.phys(self.def(type_name))?, prop.to_string());
        if let Some(v) = self.cache.get::<VectorView>(&key) {
            return Ok(Some(v));
        }
        let Some(r) = self.index_ref(type_name, prop, IndexKind::Vector).await? else {
            return Ok(None);
        };
        let p = self
            .persisted(&r, |b, what| Ivf::from_bytes(&b, what))
            .await?;
        let cov = coverage::cover(&p.built, &self.layout(type_name).await?);
        let view = Arc::new(VectorView {
            parts: Partitions::of(&p.index, &cov),
            ivf: p.index.clone(),
            built_at: r.built_at,
        });
        self.cache.put(key, view.clone(), view.parts.bytes());
        Ok(Some(view))
    }

    /// The lengths of a Vector property's rows, once per table version.
    fn vector_norms(&self, type_name: &str, prop: &str, col: &ArrayRef) -> Result<Arc<Vec<f64>>> {
        let key = Key::Norms(self.phys(self.def(type_name))?, prop.to_string());
        if let Some(n) = self.cache.get::<Vec<f64>>(&key) {
            return Ok(n);
        }
        let n = Arc::new(norms(col));
        self.cache.put(key, n.clone(), n.len() * 8);
        Ok(n)
    }

    /// A query's text, or `None` for an absent optional parameter.
    fn query_text(&self, query: &ValExpr) -> Option<String> {
        match self.const_of(query)? {
            Value::Str(s) => Some(s.into_owned()),
            _ => None,
        }
    }

    /// `search` / `match_text` / `fuzzy`: keep the rows whose text matches.
    /// Reading an absent optional parameter, the filter is dropped.
    pub(super) async fn text_filter(&self, plan: &Plan, op: &Op, frame: Frame) -> Result<Frame> {
        let Op::TextFilter {
            var,
            prop,
            test,
            query,
        } = op
        else {
            unreachable!("text_filter runs Op::TextFilter")
        };
        let Some(q) = self.query_text(query) else {
            return Ok(frame);
        };
        let tokens = text::query_tokens(&q);
        let type_name = var_type(plan, *var);
        let view = self.text_index(type_name, prop).await?;
        let ix = &view.index;
        let rows = match test {
            TextTest::All => ix.rows_with_all(&tokens)?,
            TextTest::Fuzzy(edits) => ix.rows_fuzzy(&tokens, *edits)?,
            TextTest::Phrase => {
                let col = self.column(type_name, prop).await?;
                let texts = col.as_string::<i32>();
                let mut rows = ix.rows_with_all(&tokens)?;
                rows.retain(|&r| text::contains_phrase(texts.value(r as usize), &tokens));
                rows
            }
        };
        let of_var = frame.cols[*var].as_deref().expect("bound");
        let keep: Vec<usize> = (0..frame.rows)
            .filter(|&i| rows.binary_search(&of_var[i]).is_ok())
            .collect();
        let function = match test {
            TextTest::All => "search",
            TextTest::Phrase => "match_text",
            TextTest::Fuzzy(_) => "fuzzy",
        };
        self.trace(SearchStep {
            function: function.into(),
            property: format!("{type_name}.{prop}"),
            method: view.method.clone(),
            rows_in: frame.rows,
            rows_out: keep.len(),
            sides: None,
        });
        Ok(frame.take_rows(&keep))
    }

    /// Return `i`'s score per frame row; null where the row cannot be
    /// scored (no vector, a zero vector, no query token in its text) or,
    /// when only the best rows matter and an index chose the candidates,
    /// where the row was not one of them.
    pub(super) async fn score(&self, plan: &Plan, frame: &Frame, i: usize) -> Result<ArrayRef> {
        let RetExpr::Score(s) = &plan.returns[i].expr else {
            unreachable!("score runs on a score return")
        };
        let rows = |var: &usize| frame.cols[*var].as_deref().expect("bound");
        let (function, var, prop) = match s {
            Score::Nearest { var, prop, .. } => ("nearest", var, prop),
            Score::Bm25 { var, prop, .. } => ("bm25", var, prop),
        };
        let type_name = var_type(plan, *var);
        let (scores, method): (Float64Array, String) = match s {
            Score::Nearest { query, embed, .. } => {
                let q: Option<Vec<f32>> = match (embed, self.const_of(query)) {
                    (None, Some(Value::Vector(v))) => Some(v),
                    (Some(e), Some(Value::Str(t))) => {
                        Some(super::embed::embed(self.embed, e, &t).await?)
                    }
                    _ => None,
                };
                match q {
                    Some(q) => {
                        self.nearest(type_name, prop, &q, rows(var), ranked_top(plan, i))
                            .await?
                    }
                    None => (Float64Array::new_null(frame.rows), FLAT.into()),
                }
            }
            Score::Bm25 { query, .. } => match self.query_text(query) {
                Some(q) => {
                    let tokens = text::query_tokens(&q);
                    let view = self.text_index(type_name, prop).await?;
                    let all = view.index.bm25_all(&tokens)?;
                    let scores = rows(var)
                        .iter()
                        .map(|&r| Some(all[r as usize]).filter(|s| !s.is_nan()))
                        .collect();
                    (scores, view.method.clone())
                }
                None => (Float64Array::new_null(frame.rows), INVERTED.into()),
            },
        };
        self.trace(SearchStep {
            function: function.into(),
            property: format!("{type_name}.{prop}"),
            method,
            rows_in: frame.rows,
            rows_out: frame.rows - scores.null_count(),
            sides: None,
        });
        Ok(Arc::new(scores))
    }

    /// Cosine distances of `rows` to `q`. With `top` (only the best `top`
    /// rows matter) and a vector index, only the rows of the partitions
    /// nearest `q` and the fresh rows are measured; exact otherwise, and
    /// always for a few rows, where measuring them all is cheaper.
    async fn nearest(
        &self,
        type_name: &str,
        prop: &str,
        q: &[f32],
        rows: &[u32],
        top: Option<usize>,
    ) -> Result<(Float64Array, String)> {
        let col = self.column(type_name, prop).await?;
        let norms = self.vector_norms(type_name, prop, &col)?;
        let view = match top {
            Some(_) if rows.len() > ivf::EXACT_UP_TO => self.vector_index(type_name, prop).await?,
            _ => None,
        };
        let (Some(view), Some(top)) = (view, top) else {
            return Ok((cosine_distances(&col, &norms, q, rows), FLAT.into()));
        };
        let mut wanted = vec![false; norms.len()];
        for &r in rows {
            wanted[r as usize] = true;
        }
        let order = view.ivf.ranked_partitions(q);
        let list = col.as_fixed_size_list();
        let dim = list.value_length() as usize;
        let values = list.values().as_primitive::<Float32Type>().values();
        let qn = dot(q, q).sqrt();
        let probed = view.parts.probe(&order, top, &wanted, |r| {
            cosine(values, dim, &norms, r as usize, q, qn)
        });
        let mut distance = vec![f64::NAN; norms.len()];
        for &(r, d) in &probed.rows {
            distance[r as usize] = d;
        }
        let scores: Float64Array = rows
            .iter()
            .map(|&r| Some(distance[r as usize]).filter(|d| !d.is_nan()))
            .collect();
        let (read, chosen) = (probed.read, probed.rows.len());
        let method = format!(
            "vector index (built at table version {}): {read} of {} partitions and {} fresh rows, {} rows measured exactly",
            view.built_at,
            view.ivf.partitions(),
            view.parts.fresh.len(),
            chosen
        );
        Ok((scores, method))
    }
}

/// How many of score `i`'s best rows the result can show, when that is all
/// that matters: the query is ordered first by it (nearest first) or by a
/// fusion it is a side of, with a limit. `None`: every row's score matters.
fn ranked_top(plan: &Plan, i: usize) -> Option<usize> {
    let limit = usize::try_from(plan.limit?).ok()?;
    let first = plan.order.first()?;
    let leads = match &plan.returns[first.col].expr {
        _ if first.col == i => !first.desc,
        RetExpr::Fused { sides, .. } => first.desc && sides.contains(&i),
        _ => false,
    };
    leads.then_some(limit)
}

/// `a · b` in f64, over four independent lanes (which the compiler can
/// keep in vector registers; a single running sum it may not reorder).
fn dot(a: &[f32], b: &[f32]) -> f64 {
    let mut lanes = [0f64; 4];
    let (ca, cb) = (a.chunks_exact(4), b.chunks_exact(4));
    let tail: f64 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| *x as f64 * *y as f64)
        .sum();
    for (x, y) in ca.zip(cb) {
        for k in 0..4 {
            lanes[k] += x[k] as f64 * y[k] as f64;
        }
    }
    lanes.iter().sum::<f64>() + tail
}

/// Each row's vector length (0 for a null vector), once per column version.
fn norms(col: &ArrayRef) -> Vec<f64> {
    let list = col.as_fixed_size_list();
    let dim = list.value_length() as usize;
    let values = list.values().as_primitive::<Float32Type>().values();
    (0..list.len())
        .map(|r| {
            if list.is_null(r) {
                return 0.0;
            }
            let v = &values[r * dim..(r + 1) * dim];
            dot(v, v).sqrt()
        })
        .collect()
}

/// `1 - cos(angle)` between each listed row's vector and `q`; null for a
/// null or zero vector (`norms` from [`norms`]).
fn cosine_distances(col: &ArrayRef, norms: &[f64], q: &[f32], rows: &[u32]) -> Float64Array {
    let list = col.as_fixed_size_list();
    let dim = list.value_length() as usize;
    let values = list.values().as_primitive::<Float32Type>().values();
    let qn = dot(q, q).sqrt();
    rows.iter()
        .map(|&r| cosine(values, dim, norms, r as usize, q, qn))
        .collect()
}

/// Row `r`'s cosine distance to `q` (of length `qn`); `None` for a null or
/// zero vector, or a zero query.
fn cosine(values: &[f32], dim: usize, norms: &[f64], r: usize, q: &[f32], qn: f64) -> Option<f64> {
    (norms[r] != 0.0 && qn != 0.0)
        .then(|| 1.0 - dot(&values[r * dim..(r + 1) * dim], q) / (norms[r] * qn))
}

/// The ranks (from 1) of the rows in `scores`' best `limit`, ties by the
/// tie columns ascending; `None` outside it or where unscored.
fn ranks(
    scores: &ArrayRef,
    higher_is_better: bool,
    ties: &[ArrayRef],
    limit: usize,
) -> Result<Vec<Option<u32>>> {
    let mut cols = vec![SortColumn {
        values: scores.clone(),
        options: Some(SortOptions {
            descending: higher_is_better,
            nulls_first: false,
        }),
    }];
    cols.extend(ties.iter().map(|t| SortColumn {
        values: t.clone(),
        options: Some(SortOptions {
            descending: false,
            nulls_first: true,
        }),
    }));
    let best = lexsort_to_indices(&cols, Some(limit.min(scores.len())))?;
    let mut out = vec![None; scores.len()];
    for (rank, &row) in best.values().iter().enumerate() {
        if scores.is_null(row as usize) {
            break;
        }
        out[row as usize] = Some(rank as u32 + 1);
    }
    Ok(out)
}

/// `rrf`: each side contributes its best `limit` rows; a row's score is
/// the sum over the sides that rank it of `1 / (k + rank)`, null when
/// neither does.
pub(super) fn fuse(
    sides: [(&ArrayRef, bool); 2],
    k: u32,
    limit: usize,
    ties: &[ArrayRef],
) -> Result<(ArrayRef, [usize; 2])> {
    let a = ranks(sides[0].0, sides[0].1, ties, limit)?;
    let b = ranks(sides[1].0, sides[1].1, ties, limit)?;
    let ranked = |r: &[Option<u32>]| r.iter().filter(|x| x.is_some()).count();
    let contributed = [ranked(&a), ranked(&b)];
    let k = k as f64;
    let fused: Float64Array = a
        .iter()
        .zip(&b)
        .map(|(x, y)| match (x, y) {
            (None, None) => None,
            _ => Some(
                x.map_or(0.0, |r| 1.0 / (k + r as f64)) + y.map_or(0.0, |r| 1.0 / (k + r as f64)),
            ),
        })
        .collect();
    Ok((Arc::new(fused), contributed))
}

/// Does a row leave the result when return `i` cannot score it? (A
/// returned or ordered score; a fusion's hidden sides do not judge.)
fn judged(plan: &Plan, i: usize) -> bool {
    let r = &plan.returns[i];
    matches!(r.expr, RetExpr::Score(_) | RetExpr::Fused { .. })
        && (r.visible || plan.order.iter().any(|o| o.col == i))
}

impl Ctx<'_> {
    /// The arm's judged scores, and its frame without the rows they cannot
    /// score: those leave before anything else of them is read.
    pub(super) async fn scored_frame(
        &self,
        arm: &Plan,
        frame: Frame,
    ) -> Result<(Frame, Vec<Option<ArrayRef>>)> {
        let mut scored: Vec<Option<ArrayRef>> = vec![None; arm.returns.len()];
        // A judged fusion's sides are scored here too: a row neither side
        // scores has no rank, so it leaves with the unscored.
        let mut fused_sides = Vec::new();
        for (i, r) in arm.returns.iter().enumerate() {
            if let RetExpr::Fused { sides, .. } = &r.expr
                && judged(arm, i)
            {
                fused_sides.push(*sides);
            }
        }
        for (i, r) in arm.returns.iter().enumerate() {
            let side = fused_sides.iter().any(|s| s.contains(&i));
            if matches!(r.expr, RetExpr::Score(_)) && (judged(arm, i) || side) {
                scored[i] = Some(self.score(arm, &frame, i).await?);
            }
        }
        // Validity read from the null buffers directly: this runs once per
        // row of a frame that can hold a whole table.
        let nulls = |i: usize| scored[i].as_ref().expect("scored above").logical_nulls();
        let judging: Vec<arrow_buffer::NullBuffer> = (0..arm.returns.len())
            .filter(|&i| judged(arm, i) && scored[i].is_some())
            .filter_map(nulls)
            .collect();
        let fusions: Vec<[Option<arrow_buffer::NullBuffer>; 2]> = fused_sides
            .iter()
            .map(|s| [nulls(s[0]), nulls(s[1])])
            .collect();
        let valid = |n: &Option<arrow_buffer::NullBuffer>, r: usize| {
            n.as_ref().is_none_or(|n| n.is_valid(r))
        };
        let kept = |r: usize| {
            judging.iter().all(|n| n.is_valid(r))
                && fusions.iter().all(|[a, b]| valid(a, r) || valid(b, r))
        };
        if (0..frame.rows).all(kept) {
            return Ok((frame, scored));
        }
        let keep: Vec<usize> = (0..frame.rows).filter(|&r| kept(r)).collect();
        let take =
            arrow_array::UInt32Array::from(keep.iter().map(|&r| r as u32).collect::<Vec<_>>());
        let scored = scored
            .into_iter()
            .map(|c| {
                c.map(|c| arrow::compute::take(c.as_ref(), &take, None))
                    .transpose()
            })
            .collect::<std::result::Result<_, _>>()?;
        Ok((frame.take_rows(&keep), scored))
    }
}

/// The whole result's fusions (each ranks every row of every arm), then
/// the result without the rows that a returned or ordered score cannot
/// score.
pub(super) fn scored_rows(
    ctx: &Ctx<'_>,
    plan: &Plan,
    mut values: Vec<Option<ArrayRef>>,
    ties: Vec<ArrayRef>,
) -> Result<(Vec<Option<ArrayRef>>, Vec<ArrayRef>)> {
    let limit = plan.limit.unwrap_or(u64::MAX).min(usize::MAX as u64) as usize;
    for (i, r) in plan.returns.iter().enumerate() {
        if let RetExpr::Fused { sides, k } = &r.expr {
            let side = |c: usize| -> (&ArrayRef, bool) {
                let higher =
                    matches!(&plan.returns[c].expr, RetExpr::Score(s) if s.higher_is_better());
                (values[c].as_ref().expect("a score column"), higher)
            };
            let (fused, contributed) = fuse([side(sides[0]), side(sides[1])], *k, limit, &ties)?;
            let property = |c: usize| match &plan.returns[c].expr {
                RetExpr::Score(Score::Nearest { prop, .. } | Score::Bm25 { prop, .. }) => {
                    prop.clone()
                }
                _ => unreachable!("a fusion's sides are scores"),
            };
            ctx.trace(SearchStep {
                function: "rrf".into(),
                property: format!("{} + {}", property(sides[0]), property(sides[1])),
                method: format!("each side's best {limit} rows, ranks fused with k = {k}"),
                rows_in: fused.len(),
                rows_out: fused.len() - fused.null_count(),
                sides: Some(contributed),
            });
            values[i] = Some(fused);
        }
    }
    let judged: Vec<&ArrayRef> = (0..plan.returns.len())
        .filter(|&i| judged(plan, i))
        .filter_map(|i| values[i].as_ref())
        .collect();
    if judged.iter().all(|c| c.null_count() == 0) {
        return Ok((values, ties));
    }
    let rows = judged.first().map_or(0, |c| c.len());
    let keep = arrow_array::BooleanArray::from(
        (0..rows)
            .map(|r| judged.iter().all(|c| c.is_valid(r)))
            .collect::<Vec<bool>>(),
    );
    let cut = |c: &ArrayRef| arrow::compute::filter(c.as_ref(), &keep);
    let values = values
        .iter()
        .map(|v| v.as_ref().map(cut).transpose())
        .collect::<std::result::Result<_, _>>()?;
    let ties = ties
        .iter()
        .map(cut)
        .collect::<std::result::Result<_, _>>()?;
    Ok((values, ties))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(scores: &[Option<f64>]) -> ArrayRef {
        Arc::new(Float64Array::from(scores.to_vec()))
    }

    #[test]
    fn fusion_sums_reciprocal_ranks_of_each_sides_top_n() {
        let ids: ArrayRef = Arc::new(arrow_array::StringArray::from(vec!["a", "b", "c", "d"]));
        // Distances: b, a, c best first (d unscored); bm25: d, c best first.
        let dist = col(&[Some(0.2), Some(0.1), Some(0.3), None]);
        let bm = col(&[None, None, Some(1.0), Some(2.0)]);
        let (f, contributed) = fuse([(&dist, false), (&bm, true)], 60, 2, &[ids]).unwrap();
        assert_eq!(contributed, [2, 2]);
        let f = f.as_primitive::<arrow_array::types::Float64Type>();
        // Top 2 of each side: dist -> b(1), a(2); bm25 -> d(1), c(2).
        assert_eq!(f.value(0), 1.0 / 62.0);
        assert_eq!(f.value(1), 1.0 / 61.0);
        assert_eq!(f.value(2), 1.0 / 62.0);
        assert_eq!(f.value(3), 1.0 / 61.0);
        let (f3, contributed) = fuse([(&dist, false), (&bm, true)], 60, 3, &[]).unwrap();
        // bm25 scores only two rows: it contributes two of its three.
        assert_eq!(contributed, [3, 2]);
        let f3 = f3.as_primitive::<arrow_array::types::Float64Type>();
        // With N = 3, c is ranked by both sides.
        assert_eq!(f3.value(2), 1.0 / 63.0 + 1.0 / 62.0);
    }

    #[test]
    fn ranks_break_ties_by_id() {
        let ids: ArrayRef = Arc::new(arrow_array::StringArray::from(vec!["z", "a", "m"]));
        let s = col(&[Some(1.0), Some(1.0), Some(1.0)]);
        assert_eq!(
            ranks(&s, true, &[ids], 3).unwrap(),
            [Some(3), Some(1), Some(2)]
        );
    }

    #[test]
    fn cosine_distance_is_one_minus_the_cosine() {
        let values = arrow_array::Float32Array::from(vec![1.0, 0.0, 0.0, 2.0, 0.0, 0.0, 1.0, 1.0]);
        let field = Arc::new(arrow_schema::Field::new(
            "item",
            arrow_schema::DataType::Float32,
            true,
        ));
        let list: ArrayRef = Arc::new(
            arrow_array::FixedSizeListArray::try_new(field, 2, Arc::new(values), None).unwrap(),
        );
        let d = cosine_distances(&list, &norms(&list), &[1.0, 0.0], &[0, 1, 2, 3]);
        assert!((d.value(0) - 0.0).abs() < 1e-12);
        assert!((d.value(1) - 1.0).abs() < 1e-12);
        assert!(d.is_null(2), "a zero vector has no direction");
        assert!((d.value(3) - (1.0 - 1.0 / 2f64.sqrt())).abs() < 1e-9);
    }
}
