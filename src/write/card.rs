//! The one `@card` rule, as every write applies it: once the write is
//! made, each node of an edge type's source type has between `min` and
//! `max` edges of that type, nodes with no edges included (a minimum above
//! 0 means a source node arrives with its edges in the same write). A write
//! counts only the sources it may change: those of the edges it adds,
//! replaces, moves away or removes, and the source nodes it adds; every
//! other source kept the count it had, which held the rule.

use crate::compiler::catalog::Cardinality;
use crate::error::{Location, OmniError};
use crate::util::hash::FxHashMap;

/// Edges per watched source node, on the image the write leaves.
pub struct Tally {
    card: Cardinality,
    /// Source id -> (edges counted, the input line to name: the first that
    /// brought the source in, or the edge that took it past the maximum).
    per: FxHashMap<String, (u64, Option<usize>)>,
}

impl Tally {
    pub fn new(card: Cardinality) -> Self {
        Self {
            card,
            per: FxHashMap::default(),
        }
    }

    /// Count `src`'s edges; `line`: where the input names it (the first
    /// line given is kept).
    pub fn watch(&mut self, src: &str, line: Option<usize>) {
        let e = self.per.entry(src.to_string()).or_insert((0, line));
        if e.1.is_none() {
            e.1 = line;
        }
    }

    /// A source node the write removes: it needs no edges.
    pub fn forget(&mut self, src: &str) {
        self.per.remove(src);
    }

    pub fn is_empty(&self) -> bool {
        self.per.is_empty()
    }

    /// One edge of the image from `src` (ignored unless watched), from
    /// the input's `line` if it has one: the edge past the maximum is the
    /// line that breaks the rule.
    pub fn edge(&mut self, src: &str, line: Option<usize>) {
        if let Some(e) = self.per.get_mut(src) {
            e.0 += 1;
            if line.is_some() && self.card.max.is_some_and(|m| e.0 == m + 1) {
                e.1 = line;
            }
        }
    }

    /// The watched sources outside `card`, as (id, edges, line), in input
    /// order (lines first, then ids), so the answer does not depend on
    /// hashing.
    pub fn broken(&self) -> Vec<(String, u64, Option<usize>)> {
        let mut out: Vec<(String, u64, Option<usize>)> = self
            .per
            .iter()
            .filter(|(_, (n, _))| !self.card.admits(*n))
            .map(|(s, (n, l))| (s.clone(), *n, *l))
            .collect();
        out.sort_by(|a, b| (a.2.is_none(), a.2, &a.0).cmp(&(b.2.is_none(), b.2, &b.0)));
        out
    }
}

/// The error a load or mutation gives for the first broken source.
pub fn violation(
    edge: &str,
    card: Cardinality,
    src: &str,
    n: u64,
    line: Option<usize>,
) -> OmniError {
    OmniError::invalid(
        Location {
            line,
            type_name: Some(edge.to_string()),
            property: Some("from".to_string()),
            value: Some(format!("{src:?}")),
            ..Default::default()
        },
        format!("{card} violated: the source {src:?} would have {n} {edge} edges"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watched_source_with_no_edges_counts_zero() {
        let mut t = Tally::new(Cardinality { min: 1, max: None });
        t.watch("a", Some(3));
        t.watch("b", None);
        t.edge("b", None);
        t.edge("c", None); // not watched: not counted, not reported
        assert_eq!(t.broken(), vec![("a".to_string(), 0, Some(3))]);
        t.forget("a");
        assert!(t.broken().is_empty());
    }

    #[test]
    fn broken_sources_come_in_input_order() {
        let mut t = Tally::new(Cardinality {
            min: 0,
            max: Some(1),
        });
        for (s, l) in [("z", Some(9)), ("y", None), ("x", Some(2)), ("w", None)] {
            t.watch(s, l);
            t.edge(s, None);
            t.edge(s, None);
        }
        t.watch("x", Some(1)); // the first line given stays
        let order: Vec<(String, Option<usize>)> =
            t.broken().into_iter().map(|(s, _, l)| (s, l)).collect();
        assert_eq!(
            order,
            [("x", Some(2)), ("z", Some(9)), ("w", None), ("y", None)]
                .map(|(s, l)| (s.to_string(), l))
        );
    }

    #[test]
    fn the_edge_past_the_maximum_names_its_line() {
        let mut t = Tally::new(Cardinality {
            min: 1,
            max: Some(2),
        });
        t.watch("a", Some(1));
        for line in [1, 4, 7, 9] {
            t.edge("a", Some(line));
        }
        assert_eq!(t.broken(), vec![("a".to_string(), 4, Some(7))]);
    }

    #[test]
    fn bounds_admit_their_ends() {
        let c = Cardinality {
            min: 1,
            max: Some(2),
        };
        assert_eq!(
            (0..4).map(|n| c.admits(n)).collect::<Vec<_>>(),
            [false, true, true, false]
        );
        assert!(!Cardinality::default().constrains());
        assert_eq!(c.to_string(), "@card(1..2)");
        assert_eq!(Cardinality { min: 2, max: None }.to_string(), "@card(2..*)");
    }
}
