//! The three-way rule for one entity, on its rows as values (every column,
//! `id` first): what the base had, what the source has, what the target
//! has (`None`: no such row). Changed on one side only: that side wins.
//! Changed on both to the same row: nothing to do. Otherwise property by
//! property, and a property both sides set to different values conflicts.

use crate::compiler::value::Value;

pub use crate::error::ConflictKind;

/// Which side a merged row's cell comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pick {
    Source,
    Target,
}

#[derive(Debug, PartialEq)]
pub enum Resolution {
    /// The target already has the merged row (or lacks it, as it should).
    Keep,
    /// The target's row (if any) is replaced by one whose column `c` comes
    /// from side `picks[c]`.
    Put(Vec<Pick>),
    /// The target's row is deleted.
    Delete,
    /// Conflicts, each with the column it is about (`None`: the whole row).
    Conflicts(Vec<(ConflictKind, Option<usize>)>),
}

type Row<'r> = Option<&'r [Value<'static>]>;

pub fn resolve(base: Row, source: Row, target: Row) -> Resolution {
    if source == base || source == target {
        return Resolution::Keep;
    }
    if target == base {
        return match source {
            None => Resolution::Delete,
            Some(s) => Resolution::Put(vec![Pick::Source; s.len()]),
        };
    }
    // Both sides changed the entity, differently.
    let (Some(b), Some(s), Some(t)) = (base, source, target) else {
        let kind = if base.is_none() {
            ConflictKind::DivergentInsert
        } else {
            ConflictKind::DeleteVsUpdate
        };
        return Resolution::Conflicts(vec![(kind, None)]);
    };
    let mut picks = Vec::with_capacity(s.len());
    let mut conflicts = Vec::new();
    for c in 0..s.len() {
        picks.push(if s[c] == b[c] || s[c] == t[c] {
            Pick::Target
        } else if t[c] == b[c] {
            Pick::Source
        } else {
            conflicts.push((ConflictKind::DivergentUpdate, Some(c)));
            Pick::Target
        });
    }
    if !conflicts.is_empty() {
        Resolution::Conflicts(conflicts)
    } else if picks.iter().all(|p| *p == Pick::Target) {
        Resolution::Keep
    } else {
        Resolution::Put(picks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Pick::{Source as S, Target as T};

    fn row(vals: &[i64]) -> Vec<Value<'static>> {
        vals.iter().map(|v| Value::Int(*v)).collect()
    }

    #[test]
    fn one_sided_changes_take_that_side() {
        let b = row(&[1, 10, 20]);
        let s = row(&[1, 11, 20]);
        assert_eq!(
            resolve(Some(&b), Some(&s), Some(&b)),
            Resolution::Put(vec![S, S, S])
        );
        assert_eq!(resolve(Some(&b), Some(&b), Some(&s)), Resolution::Keep);
        assert_eq!(resolve(Some(&b), None, Some(&b)), Resolution::Delete);
        assert_eq!(
            resolve(None, Some(&s), None),
            Resolution::Put(vec![S, S, S])
        );
        assert_eq!(resolve(Some(&b), Some(&b), None), Resolution::Keep);
    }

    #[test]
    fn both_sides_merge_property_by_property() {
        let b = row(&[1, 10, 20]);
        let s = row(&[1, 11, 20]);
        let t = row(&[1, 10, 21]);
        assert_eq!(
            resolve(Some(&b), Some(&s), Some(&t)),
            Resolution::Put(vec![T, S, T])
        );
        // The same new value on both sides is no conflict.
        let (s2, t2) = (row(&[1, 11, 21]), row(&[1, 11, 20]));
        assert_eq!(
            resolve(Some(&b), Some(&s2), Some(&t2)),
            Resolution::Put(vec![T, T, S])
        );
        assert_eq!(resolve(Some(&b), Some(&s), Some(&s)), Resolution::Keep);
        assert_eq!(resolve(Some(&b), None, None), Resolution::Keep);
        assert_eq!(resolve(None, Some(&s), Some(&s)), Resolution::Keep);
    }

    #[test]
    fn divergent_changes_conflict() {
        let b = row(&[1, 10, 20]);
        let s = row(&[1, 11, 22]);
        let t = row(&[1, 12, 22]);
        assert_eq!(
            resolve(Some(&b), Some(&s), Some(&t)),
            Resolution::Conflicts(vec![(ConflictKind::DivergentUpdate, Some(1))])
        );
        assert_eq!(
            resolve(Some(&b), None, Some(&t)),
            Resolution::Conflicts(vec![(ConflictKind::DeleteVsUpdate, None)])
        );
        assert_eq!(
            resolve(Some(&b), Some(&s), None),
            Resolution::Conflicts(vec![(ConflictKind::DeleteVsUpdate, None)])
        );
        assert_eq!(
            resolve(None, Some(&s), Some(&t)),
            Resolution::Conflicts(vec![(ConflictKind::DivergentInsert, None)])
        );
    }
}
