//! `not { ... }`: the rows for which the inner pattern matches nothing;
//! `not { $p edge $_ }` is answered from degrees alone.

use super::run::{Ctx, Frame};
use crate::compiler::query::ir::{Dir, Op, Plan, VarKind};
use crate::error::Result;

impl Ctx<'_> {
    /// `not { $p edge $_ }`: a row survives iff $p has no neighbour.
    pub(super) async fn anti_degree(
        &self,
        (from, edge, dir, min): (usize, &str, Dir, u32),
        frame: Frame,
    ) -> Result<Frame> {
        let g = self.graph(edge).await?;
        let froms = frame.cols[from].as_ref().expect("bound");
        let e = self.def(edge);
        let (ef, et) = e.endpoints().expect("edge");
        let same = ef == et;
        let sides = match dir {
            Dir::Out => vec![g.out()],
            Dir::In => vec![g.inn()],
            Dir::Both => vec![g.out(), g.inn()],
        };
        let keep: Vec<usize> = if min == 0 {
            Vec::new()
        } else {
            let mut alone = vec![true; frame.rows];
            for s in sides {
                for (a, has) in alone.iter_mut().zip(s.have_neighbours(froms, same)) {
                    *a &= !has;
                }
            }
            (0..frame.rows).filter(|&r| alone[r]).collect()
        };
        Ok(frame.take_rows(&keep))
    }

    /// `not { ... }`: the rows for which the inner pattern matches nothing.
    pub(super) async fn anti_join(&self, plan: &Plan, inner: &[Op], frame: Frame) -> Result<Frame> {
        // Run the inner pattern on all rows at once, remembering each
        // row's origin; keep the rows that produced nothing.
        let origin = plan.vars.len();
        let mut probe = frame.clone();
        probe.cols.push(Some((0..frame.rows as u32).collect()));
        // The inner operators read only the plan's variables: copy those
        // (not the returns, nor an interface query's other arms).
        let mut vars = plan.vars.clone();
        vars.push(crate::compiler::query::ir::VarInfo {
            name: "__origin".into(),
            kind: VarKind::Node(String::new()),
            interface: None,
        });
        let extended = Plan {
            name: plan.name.clone(),
            vars,
            ops: Vec::new(),
            returns: Vec::new(),
            aggregate: false,
            order: Vec::new(),
            limit: None,
            params: plan.params.clone(),
            union: Vec::new(),
        };
        let matched = self.run_ops(&extended, inner, probe).await?;
        let mut hit = vec![false; frame.rows];
        if let Some(o) = &matched.cols[origin] {
            for &r in o {
                hit[r as usize] = true;
            }
        }
        let keep: Vec<usize> = (0..frame.rows).filter(|&r| !hit[r]).collect();
        Ok(frame.take_rows(&keep))
    }
}

/// An anti-join whose inner pattern is one step to a fresh, unfiltered
/// variable only asks whether the source has a neighbour.
pub(super) fn anti_degree_test(inner: &[Op]) -> Option<(usize, &str, Dir, u32)> {
    match inner {
        [
            Op::Expand {
                from,
                edge,
                dir,
                to_bound: false,
                min,
                to_filters,
                ..
            },
        ] if to_filters.is_empty() && *min <= 1 => Some((*from, edge.as_str(), *dir, *min)),
        _ => None,
    }
}
