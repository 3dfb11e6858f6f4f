//! Which rows of a table version an index covers. An index is built from
//! one version's rows: its documents are that version's live rows, in scan
//! order. Storage fragments never change once written, except that rows
//! can be deleted from them; so a later version's row is the index's
//! document exactly when it sits in a fragment the index saw (same id, same
//! files) at an offset the index saw live. Every other row (appended,
//! updated into a new fragment, rewritten by compaction) is fresh: searches
//! read those flat, so a result never misses a row for being newer than
//! the index.

use super::codec::{Decoder, Encoder};
use crate::error::Result;

/// One fragment of a table version: what it is, how many rows it was
/// written with, and which of their offsets are deleted (ascending).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FragmentRows {
    pub id: u64,
    /// The fragment's files; equal only for the same written fragment.
    pub files: String,
    pub physical: u32,
    pub deleted: Vec<u32>,
}

impl FragmentRows {
    pub fn live(&self) -> usize {
        self.physical as usize - self.deleted.len()
    }
}

/// The rows of a table version in scan order: fragment by fragment, live
/// offsets ascending.
pub type Layout = Vec<FragmentRows>;

pub fn rows(layout: &[FragmentRows]) -> usize {
    layout.iter().map(FragmentRows::live).sum()
}

/// An index's documents mapped onto a table version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Coverage {
    /// Per document: its row in the version, `None` once deleted.
    pub doc_row: Vec<Option<u32>>,
    /// The version's rows no document stands for, ascending.
    pub fresh: Vec<u32>,
    pub rows: usize,
}

impl Coverage {
    /// Every row is its own document: the version the index was built at.
    pub fn is_identity(&self) -> bool {
        self.fresh.is_empty()
            && self.doc_row.len() == self.rows
            && self
                .doc_row
                .iter()
                .enumerate()
                .all(|(d, r)| *r == Some(d as u32))
    }

    pub fn covered(&self) -> usize {
        self.rows - self.fresh.len()
    }
}

/// Map the documents of an index built over `built` onto the rows of `now`.
pub fn cover(built: &[FragmentRows], now: &[FragmentRows]) -> Coverage {
    let mut base = std::collections::HashMap::new();
    let mut docs = 0usize;
    for f in built {
        base.insert(f.id, (f, docs));
        docs += f.live();
    }
    let mut doc_row = vec![None; docs];
    let mut fresh = Vec::new();
    let mut row = 0u32;
    for f in now {
        let seen = base.get(&f.id).filter(|(b, _)| b.files == f.files);
        let mut gone_now = f.deleted.iter().peekable();
        // Walks the build's deletions beside the offsets: the document of
        // offset `o` is its rank among the offsets the build saw live.
        let mut gone_then = seen.map(|(b, _)| b.deleted.iter().peekable());
        let mut skipped = 0usize;
        for o in 0..f.physical {
            let dead_then = gone_then
                .as_mut()
                .is_some_and(|g| g.next_if_eq(&&o).is_some());
            skipped += usize::from(dead_then);
            if gone_now.next_if_eq(&&o).is_some() {
                continue;
            }
            match seen {
                Some((_, first)) if !dead_then => {
                    doc_row[first + o as usize - skipped] = Some(row);
                }
                _ => fresh.push(row),
            }
            row += 1;
        }
    }
    Coverage {
        doc_row,
        fresh,
        rows: row as usize,
    }
}

/// How a table changed since an index's version: rows only appended (every
/// row keeps its position, told from the fragment lists alone, so a table
/// of millions of rows that gained a few costs nothing to map), or mapped
/// row by row.
#[derive(Debug, PartialEq, Eq)]
pub enum Change {
    Appended {
        then: usize,
        added: usize,
    },
    /// Rows deleted and fragments appended, told from the deletion lists
    /// ([`deleted`]): a bit per document gone, `count` of them.
    Deleted {
        then: usize,
        added: usize,
        gone: Vec<u64>,
        count: usize,
    },
    Mapped(Coverage),
}

impl Change {
    pub fn of(built: &[FragmentRows], now: &[FragmentRows]) -> Self {
        Self::appended(built, now).unwrap_or_else(|| Self::Mapped(cover(built, now)))
    }

    /// Like [`Change::of`], but a table that only lost rows and gained
    /// fragments is told from its deletion lists, without walking its rows
    /// (an edge table of millions after a delete).
    pub fn of_rows(built: &[FragmentRows], now: &[FragmentRows]) -> Self {
        let deleted = || {
            deleted(built, now).map(|(gone, count, added)| Self::Deleted {
                then: rows(built),
                added,
                gone,
                count,
            })
        };
        Self::appended(built, now)
            .or_else(deleted)
            .unwrap_or_else(|| Self::Mapped(cover(built, now)))
    }

    fn appended(built: &[FragmentRows], now: &[FragmentRows]) -> Option<Self> {
        appended(built, now).map(|added| Self::Appended {
            then: rows(built),
            added,
        })
    }

    /// No row changed.
    pub fn is_same(&self) -> bool {
        match self {
            Self::Appended { added, .. } => *added == 0,
            Self::Deleted { added, count, .. } => *added == 0 && *count == 0,
            Self::Mapped(c) => c.is_identity(),
        }
    }

    /// Every row the index saw keeps its position; new rows come after.
    pub fn extends(&self) -> bool {
        match self {
            Self::Appended { .. } => true,
            Self::Deleted { count, .. } => *count == 0,
            Self::Mapped(c) => c
                .doc_row
                .iter()
                .enumerate()
                .all(|(d, r)| *r == Some(d as u32)),
        }
    }

    /// Do the rows no document stands for all come after every row that
    /// one does (rows appended, none rewritten in place)?
    pub fn fresh_at_end(&self) -> bool {
        match self {
            Self::Appended { .. } | Self::Deleted { .. } => true,
            Self::Mapped(c) => c
                .fresh
                .first()
                .is_none_or(|&f| f as usize == c.rows - c.fresh.len()),
        }
    }

    /// Rows no document stands for.
    pub fn fresh(&self) -> usize {
        match self {
            Self::Appended { added, .. } | Self::Deleted { added, .. } => *added,
            Self::Mapped(c) => c.fresh.len(),
        }
    }

    pub fn rows(&self) -> usize {
        match self {
            Self::Appended { then, added } => then + added,
            Self::Deleted {
                then, added, count, ..
            } => then - count + added,
            Self::Mapped(c) => c.rows,
        }
    }

    /// Documents whose row is gone (deleted, or rewritten elsewhere).
    pub fn moved(&self) -> usize {
        match self {
            Self::Appended { .. } => 0,
            Self::Deleted { count, .. } => *count,
            Self::Mapped(c) => c.doc_row.iter().filter(|r| r.is_none()).count(),
        }
    }

    /// The row-by-row coverage, when it was mapped.
    pub fn mapped(&self) -> Option<&Coverage> {
        match self {
            Self::Appended { .. } | Self::Deleted { .. } => None,
            Self::Mapped(c) => Some(c),
        }
    }

    /// The row-by-row coverage (mapped now if it was told from fragments).
    pub fn coverage(
        &self,
        built: &[FragmentRows],
        now: &[FragmentRows],
    ) -> std::borrow::Cow<'_, Coverage> {
        match self {
            Self::Appended { .. } | Self::Deleted { .. } => {
                std::borrow::Cow::Owned(cover(built, now))
            }
            Self::Mapped(c) => std::borrow::Cow::Borrowed(c),
        }
    }
}

/// How many rows `now` holds past `built` when it is `built` with fragments
/// appended (every fragment of `built` first, as it was, deletions and
/// all): then every row keeps its position, known without mapping rows.
pub fn appended(built: &[FragmentRows], now: &[FragmentRows]) -> Option<usize> {
    (now.len() >= built.len() && now[..built.len()] == *built)
        .then(|| now[built.len()..].iter().map(FragmentRows::live).sum())
}

/// The rows whose bit is set in a bit-per-row set (as [`deleted`] and
/// [`Change::Deleted`] hold the rows gone), ascending.
pub fn set_rows(bits: &[u64]) -> impl Iterator<Item = u32> + '_ {
    bits.iter().enumerate().flat_map(|(w, &word)| {
        (0..64u32)
            .filter(move |b| word >> b & 1 == 1)
            .map(move |b| w as u32 * 64 + b)
    })
}

/// The documents gone from `now` when it is `built` with rows deleted and
/// fragments appended: each of `built`'s fragments dropped, or as it was
/// but for more deleted offsets, in the same order, every other fragment
/// after them. A bit per document (set: deleted since), how many, and the
/// rows appended; `None` for any other change. Reads the deletion lists,
/// not the rows.
pub fn deleted(built: &[FragmentRows], now: &[FragmentRows]) -> Option<(Vec<u64>, usize, usize)> {
    let at: std::collections::HashMap<u64, usize> =
        now.iter().enumerate().map(|(i, f)| (f.id, i)).collect();
    let mut gone = vec![0u64; rows(built).div_ceil(64)];
    let mut set = |d: usize| gone[d / 64] |= 1 << (d % 64);
    let (mut count, mut first, mut matched) = (0usize, 0usize, 0usize);
    let mut last: Option<usize> = None;
    for f in built {
        match at.get(&f.id).map(|&i| (i, &now[i])) {
            None => {
                (first..first + f.live()).for_each(&mut set);
                count += f.live();
            }
            Some((i, g)) if g.files == f.files && g.physical == f.physical => {
                if last.is_some_and(|l| i <= l) {
                    return None;
                }
                (last, matched) = (Some(i), matched + 1);
                // Walks the build's deletions beside today's: each must
                // still be one (a row is never deleted and back again).
                let mut then = f.deleted.iter().copied().peekable();
                let mut skipped = 0usize;
                for &o in &g.deleted {
                    if then.peek().is_some_and(|&t| t < o) {
                        return None;
                    }
                    if then.next_if_eq(&o).is_some() {
                        skipped += 1;
                        continue;
                    }
                    set(first + o as usize - skipped);
                    count += 1;
                }
                if then.next().is_some() {
                    return None;
                }
            }
            Some(_) => return None,
        }
        first += f.live();
    }
    let tail = last.map_or(0, |l| l + 1);
    (matched == tail).then(|| (gone, count, rows(&now[tail..])))
}

/// The fragments of `now` that `built` never saw (another id, or the same
/// id rewritten): where the rows no document stands for are.
pub fn unseen(built: &[FragmentRows], now: &[FragmentRows]) -> Vec<u64> {
    let seen: std::collections::HashMap<u64, &str> =
        built.iter().map(|f| (f.id, f.files.as_str())).collect();
    now.iter()
        .filter(|f| seen.get(&f.id) != Some(&f.files.as_str()))
        .map(|f| f.id)
        .collect()
}

/// The position in scan order of the row at `offset` of fragment
/// `fragment`; `None` when the layout has no such live row.
pub fn position(layout: &[FragmentRows], fragment: u64, offset: u32) -> Option<u32> {
    let mut first = 0usize;
    for f in layout {
        if f.id == fragment {
            if offset >= f.physical || f.deleted.binary_search(&offset).is_ok() {
                return None;
            }
            let before = f.deleted.partition_point(|d| *d < offset);
            return Some((first + offset as usize - before) as u32);
        }
        first += f.live();
    }
    None
}

/// Where documents `docs` (ascending) of a layout are: `(fragment id,
/// physical offset)` each.
pub fn locate(layout: &[FragmentRows], docs: &[usize]) -> Vec<(u64, u32)> {
    let mut out = Vec::with_capacity(docs.len());
    let mut want = docs.iter().peekable();
    let mut first = 0usize;
    for f in layout {
        let mut gone = f.deleted.iter().peekable();
        let mut doc = first;
        for o in 0..f.physical {
            if want.peek().is_none() {
                return out;
            }
            if gone.next_if_eq(&&o).is_some() {
                continue;
            }
            if want.next_if_eq(&&doc).is_some() {
                out.push((f.id, o));
            }
            doc += 1;
        }
        first += f.live();
    }
    out
}

/// A name for the set of fragments of a layout (not their deletions).
pub fn digest(layout: &[FragmentRows]) -> String {
    let mut text = String::new();
    for f in layout {
        text.push_str(&format!("{}:{}:{}\n", f.id, f.physical, f.files));
    }
    crate::util::hash::sha256_hex(text.as_bytes(), 16)
}

/// A name for the rows of a layout: its fragments and their deletions, so
/// two layouts share it exactly when each row sits at the same position.
pub fn rows_digest(layout: &[FragmentRows]) -> String {
    let mut e = Encoder::new(b"ROWS");
    encode(layout, &mut e);
    crate::util::hash::sha256_hex(&e.finish(), 16)
}

pub fn encode(layout: &[FragmentRows], e: &mut Encoder) {
    e.u64(layout.len() as u64);
    for f in layout {
        e.u64(f.id);
        e.str(&f.files);
        e.u32(f.physical);
        e.u32s(&f.deleted);
    }
}

pub fn decode(d: &mut Decoder) -> Result<Layout> {
    let n = d.u64()?;
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(FragmentRows {
            id: d.u64()?,
            files: d.str()?.to_string(),
            physical: d.u32()?,
            deleted: d.u32s()?,
        });
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn frag(id: u64, physical: u32, deleted: &[u32]) -> FragmentRows {
        FragmentRows {
            id,
            files: format!("f{id}"),
            physical,
            deleted: deleted.to_vec(),
        }
    }

    #[test]
    fn appends_are_told_apart_from_other_changes() {
        let built = vec![frag(0, 3, &[1]), frag(1, 2, &[])];
        let mut now = built.clone();
        assert_eq!(appended(&built, &now), Some(0));
        now.push(frag(2, 4, &[3]));
        assert_eq!(appended(&built, &now), Some(3));
        let c = Change::of(&built, &now);
        assert_eq!(c, Change::Appended { then: 4, added: 3 });
        assert!(c.extends() && !c.is_same());
        assert_eq!((c.fresh(), c.rows(), c.moved()), (3, 7, 0));
        assert_eq!(*c.coverage(&built, &now), cover(&built, &now));
        now[0].deleted.push(2);
        assert_eq!(appended(&built, &now), None, "a deletion since");
        let c = Change::of(&built, &now);
        assert!(!c.extends() && !c.is_same());
        assert_eq!((c.fresh(), c.rows(), c.moved()), (3, 6, 1));
        assert!(c.fresh_at_end());
        // A rewritten first fragment: its rows are fresh, ahead of others.
        now[0].files = "rewritten".into();
        assert!(!Change::of(&built, &now).fresh_at_end());
        assert_eq!(appended(&built, &built[..1]), None, "a fragment gone");
    }

    #[test]
    fn deletions_are_told_from_the_deletion_lists() {
        // Docs: f0 o0 o2 (o1 deleted then) = 0 1; f1 o0 o1 = 2 3; f2 o0 = 4.
        let built = vec![frag(0, 3, &[1]), frag(1, 2, &[]), frag(2, 1, &[])];
        // Since: f0 o2 deleted, f1 dropped, f3 appended (o0 deleted).
        let now = vec![frag(0, 3, &[1, 2]), frag(2, 1, &[]), frag(3, 3, &[0])];
        let (gone, count, added) = deleted(&built, &now).unwrap();
        assert_eq!((gone, count, added), (vec![0b01110], 3, 2));
        let c = cover(&built, &now);
        let by_rows: Vec<bool> = c.doc_row.iter().map(Option::is_none).collect();
        assert_eq!(by_rows, [false, true, true, true, false]);
        // A deletion undone, a rewritten fragment, a new one in between.
        assert_eq!(deleted(&built, &[frag(0, 3, &[])]), None);
        let mut rewritten = now.clone();
        rewritten[1].files = "other".into();
        assert_eq!(deleted(&built, &rewritten), None);
        let between = vec![frag(0, 3, &[1]), frag(9, 1, &[]), frag(2, 1, &[])];
        assert_eq!(deleted(&built, &between), None);
        let swapped = vec![frag(2, 1, &[]), frag(0, 3, &[1])];
        assert_eq!(deleted(&built, &swapped), None);
    }

    #[test]
    fn documents_are_located_past_deleted_offsets() {
        let l = vec![frag(4, 3, &[0]), frag(9, 2, &[])];
        // Docs: 0 = f4 o1, 1 = f4 o2, 2 = f9 o0, 3 = f9 o1.
        assert_eq!(locate(&l, &[0, 2, 3]), [(4, 1), (9, 0), (9, 1)]);
        assert_eq!(locate(&l, &[]), []);
        assert_eq!(position(&l, 9, 1), Some(3));
        assert_eq!(position(&l, 4, 2), Some(1));
        assert_eq!(position(&l, 4, 0), None, "deleted");
        assert_eq!(position(&l, 7, 0), None, "no such fragment");
    }

    #[test]
    fn the_built_version_is_covered_row_for_row() {
        let l = vec![frag(0, 3, &[1]), frag(1, 2, &[])];
        let c = cover(&l, &l);
        assert!(c.is_identity());
        assert_eq!(c.rows, 4);
    }

    #[test]
    fn later_deletions_appends_and_rewrites() {
        // Built: fragment 0 with offset 1 deleted (docs 0, 1 = offsets 0,
        // 2), fragment 1 (docs 2, 3), fragment 2 (doc 4).
        let built = vec![frag(0, 3, &[1]), frag(1, 2, &[]), frag(2, 1, &[])];
        // Now: offset 2 of fragment 0 deleted too; fragment 1 rewritten
        // (same id, other files); fragment 2 as it was; fragment 3 appended.
        let mut rewritten = frag(1, 2, &[]);
        rewritten.files = "other".into();
        let now = vec![
            frag(0, 3, &[1, 2]),
            rewritten,
            frag(2, 1, &[]),
            frag(3, 2, &[0]),
        ];
        let c = cover(&built, &now);
        // Rows: 0 (f0 o0), 1-2 (f1), 3 (f2), 4 (f3 o1).
        assert_eq!(c.rows, 5);
        assert_eq!(c.doc_row, [Some(0), None, None, None, Some(3)]);
        assert_eq!(c.fresh, [1, 2, 4]);
        assert_eq!(unseen(&built, &now), [1, 3]);
        assert_eq!(c.covered(), 2);
        assert!(!c.is_identity());
    }

    #[test]
    fn a_row_the_build_saw_deleted_is_never_a_document() {
        // Offset 0 was deleted at build; a layout claiming it live again
        // (it cannot happen in storage) reads it fresh rather than as a
        // neighbour's document.
        let c = cover(&[frag(0, 2, &[0])], &[frag(0, 2, &[])]);
        assert_eq!(c.doc_row, [Some(1)]);
        assert_eq!(c.fresh, [0]);
    }
}
