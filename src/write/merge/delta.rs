//! What changed in a table between two versions, from their fragment
//! layouts alone (metadata, no rows read). Written fragments never change
//! except by deletions, so a row left a version when its fragment is gone,
//! was rewritten (other files), or has the offset newly deleted; a row
//! arrived when its fragment is new or rewritten. An update is a row that
//! left and one with the same id that arrived; rows that left and came
//! back equal (a compaction) are told apart later by their values.

use std::collections::BTreeMap;

use crate::index::coverage::FragmentRows;

/// Rows by where they are: fragment id -> physical offsets, ascending.
pub type Rows = BTreeMap<u32, Vec<u32>>;

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Delta {
    /// Rows of the older version that the newer one no longer has there.
    pub left: Rows,
    /// Rows of the newer version that the older one did not have there.
    pub arrived: Rows,
}

impl Delta {
    pub fn is_empty(&self) -> bool {
        self.left.is_empty() && self.arrived.is_empty()
    }
}

fn live(f: &FragmentRows) -> Vec<u32> {
    let mut deleted = f.deleted.iter().peekable();
    (0..f.physical)
        .filter(|o| {
            while deleted.peek().is_some_and(|d| **d < *o) {
                deleted.next();
            }
            deleted.peek() != Some(&o)
        })
        .collect()
}

fn id32(f: &FragmentRows) -> u32 {
    // Lance numbers fragments from 0 upwards with a u64; a table reaching
    // 2^32 fragments is far beyond anything compaction lets accumulate.
    u32::try_from(f.id).expect("fragment ids fit in 32 bits")
}

/// The change from `old` to `new` (two versions of one table's lineage).
pub fn delta(old: &[FragmentRows], new: &[FragmentRows]) -> Delta {
    let mut d = Delta::default();
    let old_by_id: BTreeMap<u64, &FragmentRows> = old.iter().map(|f| (f.id, f)).collect();
    let new_by_id: BTreeMap<u64, &FragmentRows> = new.iter().map(|f| (f.id, f)).collect();
    for f in old {
        match new_by_id.get(&f.id) {
            Some(n) if n.files == f.files => {
                // Same fragment: only deletions can differ.
                let gone: Vec<u32> = live(f)
                    .into_iter()
                    .filter(|o| n.deleted.binary_search(o).is_ok())
                    .collect();
                if !gone.is_empty() {
                    d.left.insert(id32(f), gone);
                }
            }
            _ => {
                let rows = live(f);
                if !rows.is_empty() {
                    d.left.insert(id32(f), rows);
                }
            }
        }
    }
    for f in new {
        let same = old_by_id.get(&f.id).is_some_and(|o| o.files == f.files);
        if !same {
            let rows = live(f);
            if !rows.is_empty() {
                d.arrived.insert(id32(f), rows);
            }
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frag(id: u64, files: &str, physical: u32, deleted: &[u32]) -> FragmentRows {
        FragmentRows {
            id,
            files: files.into(),
            physical,
            deleted: deleted.to_vec(),
        }
    }

    #[test]
    fn deletions_new_fragments_and_rewrites_are_seen() {
        let old = vec![
            frag(0, "a", 4, &[1]),
            frag(1, "b", 2, &[]),
            frag(2, "c", 3, &[]),
        ];
        let new = vec![
            // Fragment 0 lost offset 2 (offset 1 was already gone).
            frag(0, "a", 4, &[1, 2]),
            // Fragment 1 was rewritten in place (an overlay).
            frag(1, "b|o", 2, &[]),
            // Fragment 2 is gone; fragment 3 is new.
            frag(3, "d", 2, &[0]),
        ];
        let d = delta(&old, &new);
        assert_eq!(
            d.left,
            BTreeMap::from([(0, vec![2]), (1, vec![0, 1]), (2, vec![0, 1, 2])])
        );
        assert_eq!(d.arrived, BTreeMap::from([(1, vec![0, 1]), (3, vec![1])]));
    }

    #[test]
    fn equal_layouts_have_no_delta() {
        let l = vec![frag(0, "a", 4, &[1])];
        assert!(delta(&l, &l).is_empty());
    }
}
