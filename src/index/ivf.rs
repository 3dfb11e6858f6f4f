//! The vector index: an inverted file over a Vector column. Spherical
//! k-means splits the rows into partitions around unit centroids; a search
//! ranks the centroids against the query, reads only the rows of the best
//! few partitions (and every fresh row) and measures their exact cosine
//! distance. It keeps full vectors (no product quantisation), so the only
//! error is a near row in an unprobed partition. How far a search probes
//! is decided per query, as it goes: partitions are read best first until
//! [`PATIENCE`] in a row put no row into the best `k` found so far (a
//! cluster of the data spans several partitions, and a query near its
//! middle needs them all; a fixed probe count either misses them or reads
//! too much elsewhere). docs/benchmarks.md ("Search") has the recall.

use super::codec::{Decoder, Encoder};
use super::coverage::{Coverage, Layout};
use crate::error::{OmniError, Result};

const MAGIC: &[u8; 4] = b"OGIV";

/// A document without a direction (null or zero vector): in no partition.
pub const UNASSIGNED: u32 = u32::MAX;

/// Partitions are about the square root of the rows: a probe then costs
/// about as much in centroids as in rows.
pub const MAX_PARTITIONS: usize = 4096;
/// k-means rounds over the training sample.
pub const TRAIN_ROUNDS: usize = 10;
/// Training rows per partition (the sample is at most this many times the
/// partitions).
pub const TRAIN_ROWS_PER_PARTITION: usize = 64;
/// Partitions a search reads at least.
pub const MIN_PROBES: usize = 2;
/// A search stops after this many partitions in a row that improved
/// nothing (once it has its `k` rows).
pub const PATIENCE: usize = 3;
/// A nearest search over at most this many rows measures them all: that
/// costs less than ranking partitions, and it is exact.
pub const EXACT_UP_TO: usize = 4096;

pub fn partitions_for(rows: usize) -> usize {
    ((rows as f64).sqrt().round() as usize).clamp(1, MAX_PARTITIONS)
}

pub struct Ivf {
    dim: usize,
    /// `partitions * dim` values, each centroid of unit length.
    centroids: Vec<f32>,
    /// Per document: its partition, or [`UNASSIGNED`].
    assign: Vec<u32>,
}

/// `a · b` in f32, over eight lanes: enough to rank centroids and to train,
/// many times over per row. (A search's distances are measured in f64 from
/// the table's vectors, in `exec::search`.)
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for k in 0..8 {
            lanes[k] += x[k] * y[k];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

fn normalise(v: &mut [f32]) -> bool {
    let n = dot(v, v).sqrt();
    if n == 0.0 || !n.is_finite() {
        return false;
    }
    v.iter_mut().for_each(|x| *x /= n);
    true
}

impl Ivf {
    pub fn partitions(&self) -> usize {
        self.centroids.len() / self.dim.max(1)
    }

    fn centroid(&self, p: usize) -> &[f32] {
        &self.centroids[p * self.dim..(p + 1) * self.dim]
    }

    /// Train on `rows` vectors of `dim` values (`present[r]` false for a
    /// null row) and assign every row. Deterministic: the same rows give the
    /// same index.
    pub fn train(values: &[f32], dim: usize, present: &[bool]) -> Ivf {
        let unit: Vec<Option<Vec<f32>>> = present
            .iter()
            .enumerate()
            .map(|(r, &p)| {
                let mut v = values[r * dim..(r + 1) * dim].to_vec();
                (p && normalise(&mut v)).then_some(v)
            })
            .collect();
        let with: Vec<usize> = (0..unit.len()).filter(|&r| unit[r].is_some()).collect();
        let parts = partitions_for(with.len()).min(with.len().max(1));
        let sample_n = (parts * TRAIN_ROWS_PER_PARTITION).min(with.len());
        let sample: Vec<&[f32]> = (0..sample_n)
            .map(|i| {
                unit[with[i * with.len() / sample_n.max(1)]]
                    .as_deref()
                    .expect("present")
            })
            .collect();
        let mut centroids: Vec<f32> = Vec::with_capacity(parts * dim);
        for p in 0..parts {
            match sample.get(p * sample.len() / parts) {
                Some(v) => centroids.extend_from_slice(v),
                None => centroids.extend(std::iter::repeat_n(0.0, dim)),
            }
        }
        let mut ivf = Ivf {
            dim,
            centroids,
            assign: Vec::new(),
        };
        for _ in 0..TRAIN_ROUNDS {
            let owners = ivf.nearest_of(&sample);
            let mut sums = vec![0f32; parts * dim];
            let mut counts = vec![0usize; parts];
            for (v, &p) in sample.iter().zip(&owners) {
                counts[p as usize] += 1;
                for (s, x) in sums[p as usize * dim..][..dim].iter_mut().zip(v.iter()) {
                    *s += x;
                }
            }
            for p in 0..parts {
                let c = &mut sums[p * dim..(p + 1) * dim];
                // An empty partition restarts at a sample row, spread out.
                if (counts[p] == 0 || !normalise(c))
                    && let Some(v) = sample.get((p * 7919 + 1) % sample.len().max(1))
                {
                    c.copy_from_slice(v);
                }
            }
            ivf.centroids = sums;
        }
        let vectors: Vec<&[f32]> = with
            .iter()
            .map(|&r| unit[r].as_deref().expect("present"))
            .collect();
        let owners = ivf.nearest_of(&vectors);
        ivf.assign = vec![UNASSIGNED; unit.len()];
        for (&r, p) in with.iter().zip(owners) {
            ivf.assign[r] = p;
        }
        ivf
    }

    /// The nearest centroid of each vector, over the machine's cores.
    fn nearest_of(&self, vectors: &[&[f32]]) -> Vec<u32> {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let chunk = vectors.len().div_ceil(threads).max(1);
        let mut out = vec![0u32; vectors.len()];
        std::thread::scope(|s| {
            for (part, slot) in vectors.chunks(chunk).zip(out.chunks_mut(chunk)) {
                s.spawn(move || {
                    for (v, o) in part.iter().zip(slot.iter_mut()) {
                        *o = self.best_partition(v);
                    }
                });
            }
        });
        out
    }

    fn best_partition(&self, v: &[f32]) -> u32 {
        let mut best = (f32::NEG_INFINITY, 0u32);
        for p in 0..self.partitions() {
            let s = dot(self.centroid(p), v);
            if s > best.0 {
                best = (s, p as u32);
            }
        }
        best.1
    }

    /// Every partition, most similar to `q` first.
    pub fn ranked_partitions(&self, q: &[f32]) -> Vec<u32> {
        let mut scored: Vec<(f32, u32)> = (0..self.partitions())
            .map(|p| (dot(self.centroid(p), q), p as u32))
            .collect();
        scored.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        scored.into_iter().map(|(_, p)| p).collect()
    }

    pub fn to_bytes(&self, built: &Layout) -> Vec<u8> {
        let mut e = Encoder::new(MAGIC);
        super::coverage::encode(built, &mut e);
        e.u32(self.dim as u32);
        e.f32s(&self.centroids);
        e.u32s(&self.assign);
        e.finish()
    }

    pub fn from_bytes(bytes: &[u8], what: &str) -> Result<(Layout, Ivf)> {
        let mut d = Decoder::new(bytes, MAGIC, what)?;
        let built = super::coverage::decode(&mut d)?;
        let dim = d.u32()? as usize;
        let centroids = d.f32s()?;
        let assign = d.u32s()?;
        d.end()?;
        let ivf = Ivf {
            dim,
            centroids,
            assign,
        };
        let parts = ivf.partitions() as u32;
        if dim == 0
            || !ivf.centroids.len().is_multiple_of(dim)
            || ivf.assign.iter().any(|&p| p != UNASSIGNED && p >= parts)
        {
            return Err(OmniError::Storage(format!(
                "index file {what} cannot be read: its partitions do not fit"
            )));
        }
        Ok((built, ivf))
    }
}

/// An index's partitions over the rows of one table version.
pub struct Partitions {
    /// Per partition: its rows in this version, ascending.
    pub lists: Vec<Vec<u32>>,
    /// Rows no document stands for: every search reads them.
    pub fresh: Vec<u32>,
}

impl Partitions {
    pub fn of(ivf: &Ivf, cov: &Coverage) -> Self {
        let mut lists = vec![Vec::new(); ivf.partitions()];
        for (doc, row) in cov.doc_row.iter().enumerate() {
            if let (Some(row), p) = (row, ivf.assign[doc])
                && p != UNASSIGNED
            {
                lists[p as usize].push(*row);
            }
        }
        Self {
            lists,
            fresh: cov.fresh.clone(),
        }
    }

    pub fn bytes(&self) -> usize {
        self.lists.iter().map(|l| l.len() * 4 + 24).sum::<usize>() + self.fresh.len() * 4
    }

    /// The best rows for a query, measured by `distance` (smaller is
    /// nearer; `None` for a row that cannot be measured): every fresh row,
    /// then the partitions in `order` until at least [`MIN_PROBES`] are read,
    /// `k` rows are found, and [`PATIENCE`] partitions in a row put none
    /// into the best `k`. Only rows in `wanted` (the rows the query can
    /// return) count. Every row measured is returned, with how many
    /// partitions were read.
    pub fn probe(
        &self,
        order: &[u32],
        k: usize,
        wanted: &[bool],
        mut distance: impl FnMut(u32) -> Option<f64>,
    ) -> Probed {
        let mut best = Best::new(k);
        let mut rows = Vec::new();
        let mut measure = |r: u32, best: &mut Best| {
            if !wanted[r as usize] {
                return false;
            }
            let Some(d) = distance(r) else {
                return false;
            };
            rows.push((r, d));
            best.offer(d)
        };
        for &r in &self.fresh {
            measure(r, &mut best);
        }
        let (mut read, mut idle) = (0usize, 0usize);
        for &p in order {
            if read >= MIN_PROBES && best.full() && idle >= PATIENCE {
                break;
            }
            let mut improved = false;
            for &r in &self.lists[p as usize] {
                improved |= measure(r, &mut best);
            }
            read += 1;
            idle = if improved { 0 } else { idle + 1 };
        }
        Probed { rows, read }
    }
}

/// What a probe measured.
pub struct Probed {
    /// Every row measured, with its distance.
    pub rows: Vec<(u32, f64)>,
    /// Partitions read.
    pub read: usize,
}

/// The `k` smallest distances seen.
struct Best {
    k: usize,
    heap: std::collections::BinaryHeap<Dist>,
}

#[derive(PartialEq)]
struct Dist(f64);

impl Eq for Dist {}

impl PartialOrd for Dist {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

impl Ord for Dist {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&o.0)
    }
}

impl Best {
    fn new(k: usize) -> Self {
        Self {
            k,
            heap: std::collections::BinaryHeap::with_capacity(k + 1),
        }
    }

    fn full(&self) -> bool {
        self.heap.len() >= self.k
    }

    /// Does `d` enter the best `k`?
    fn offer(&mut self, d: f64) -> bool {
        if self.k == 0 {
            return false;
        }
        if !self.full() {
            self.heap.push(Dist(d));
            return true;
        }
        if d < self.heap.peek().expect("full").0 {
            self.heap.pop();
            self.heap.push(Dist(d));
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::coverage::{FragmentRows, cover};

    /// Rows around two opposite directions.
    fn two_clusters(n: usize) -> Vec<f32> {
        (0..n)
            .flat_map(|i| {
                let s = if i % 2 == 0 { 1.0 } else { -1.0 };
                [s, (i as f32) * 1e-3, 0.5 * s]
            })
            .collect()
    }

    #[test]
    fn partitions_follow_the_data_and_survive_a_round_trip() {
        let values = two_clusters(100);
        let mut present = vec![true; 100];
        present[3] = false;
        let ivf = Ivf::train(&values, 3, &present);
        assert_eq!(ivf.partitions(), 10);
        assert_eq!(ivf.assign[3], UNASSIGNED);
        // No partition mixes the two directions.
        for p in 0..ivf.partitions() as u32 {
            let sides: std::collections::BTreeSet<bool> = (0..100)
                .filter(|&r| ivf.assign[r] == p)
                .map(|r| r % 2 == 0)
                .collect();
            assert!(sides.len() <= 1, "partition {p} mixes {sides:?}");
        }
        let layout = vec![FragmentRows {
            id: 0,
            files: "f".into(),
            physical: 100,
            deleted: vec![],
        }];
        let (l, back) = Ivf::from_bytes(&ivf.to_bytes(&layout), "t").unwrap();
        assert_eq!(l, layout);
        assert_eq!(back.assign, ivf.assign);
        assert_eq!(back.centroids, ivf.centroids);
        // The query's side comes first.
        let order = back.ranked_partitions(&[1.0, 0.0, 0.5]);
        let first = order[0];
        assert!(
            (0..100)
                .filter(|&r| ivf.assign[r] == first)
                .all(|r| r % 2 == 0)
        );

        let parts = Partitions::of(&back, &cover(&layout, &layout));
        let everything = vec![true; 100];
        let q = [1.0f32, 0.0, 0.5];
        let distance = |r: u32| {
            let v = &values[r as usize * 3..][..3];
            present[r as usize].then(|| {
                1.0 - dot(v, &q) as f64 / dot(v, v).sqrt() as f64 / dot(&q, &q).sqrt() as f64
            })
        };
        // The query's side holds its 5 nearest rows: the probe stops on
        // the other side, without reading it all.
        let got = parts.probe(&order, 5, &everything, distance);
        assert!(got.read < back.partitions(), "read {}", got.read);
        assert!(got.read >= MIN_PROBES);
        let mut found: Vec<(u32, f64)> = got.rows.clone();
        found.sort_by(|a, b| a.1.total_cmp(&b.1));
        let mut exact: Vec<(u32, f64)> = (0..100u32)
            .filter_map(|r| distance(r).map(|d| (r, d)))
            .collect();
        exact.sort_by(|a, b| a.1.total_cmp(&b.1));
        let ids = |v: &[(u32, f64)]| v.iter().take(5).map(|x| x.0).collect::<Vec<_>>();
        assert_eq!(ids(&found), ids(&exact));
        // Only wanted rows count: with one wanted row, it is found.
        let mut one = vec![false; 100];
        one[99] = true;
        let got = parts.probe(&order, 1, &one, distance);
        assert_eq!(got.rows.iter().map(|r| r.0).collect::<Vec<_>>(), [99]);
    }
}
