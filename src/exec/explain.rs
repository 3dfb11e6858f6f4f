//! What a plan does, step by step, and what each step reads: the operators
//! of each arm with the filters pushed to storage, the indexes a step uses,
//! and where each traversal's adjacency comes from (cached, persisted,
//! carried by a delta, probed or rebuilt), decided as the run would decide
//! it but without reading rows (`query --explain`). A profiled run adds the
//! rows each operator produced and the time it took (`query --profile`).

use std::collections::HashMap;
use std::time::Instant;

use super::antijoin::anti_degree_test;
use super::residency::Reach;
use super::run::Ctx;
use super::scan::{in_memory, pushdown};
use crate::compiler::catalog::ID;
use crate::compiler::query::ir::{Dir, Op, Plan, Pred, TextTest, ValExpr};
use crate::error::Result;
use crate::storage::stage;

/// One step of a plan.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct PlanStep {
    /// Which arm (a query over an interface has one per implementing type).
    pub arm: usize,
    /// Nesting: the steps inside a `not { }` are one deeper.
    pub depth: usize,
    pub op: String,
    pub detail: String,
    /// The indexes and the adjacency the step reads.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub uses: Vec<String>,
    /// With a profile: rows out (summed over its runs), and wall time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rows: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ms: Option<f64>,
}

/// What a profiled run measured, per operator (by its place in the plan).
#[derive(Default)]
pub struct Profile {
    ops: parking_lot::Mutex<HashMap<usize, (usize, f64)>>,
}

impl Profile {
    fn key(op: &Op) -> usize {
        op as *const Op as usize
    }

    pub(super) fn record(&self, op: &Op, rows: usize, started: Instant) {
        let mut ops = self.ops.lock();
        let e = ops.entry(Self::key(op)).or_default();
        e.0 += rows;
        e.1 += started.elapsed().as_secs_f64() * 1000.0;
    }

    fn of(&self, op: &Op) -> Option<(usize, f64)> {
        self.ops.lock().get(&Self::key(op)).copied()
    }
}

fn var(plan: &Plan, v: usize) -> String {
    format!("${}", plan.vars[v].name)
}

fn val(ctx: &Ctx<'_>, plan: &Plan, e: &ValExpr) -> String {
    match e {
        ValExpr::Prop { var: v, prop, .. } => format!("{}.{prop}", var(plan, *v)),
        ValExpr::Id { var: v } => format!("{}.id", var(plan, *v)),
        ValExpr::Param { name } => match ctx.param(name) {
            Some(v) => format!("${name} ({})", v.show()),
            None => format!("${name} (absent: dropped)"),
        },
        ValExpr::Const(v) => v.show(),
        ValExpr::Now => "now()".into(),
    }
}

fn pred(ctx: &Ctx<'_>, plan: &Plan, p: &Pred) -> String {
    format!(
        "{} {} {}",
        val(ctx, plan, &p.left),
        p.op.text(),
        val(ctx, plan, &p.right)
    )
}

fn preds(ctx: &Ctx<'_>, plan: &Plan, ps: &[&Pred]) -> String {
    ps.iter()
        .map(|p| pred(ctx, plan, p))
        .collect::<Vec<_>>()
        .join(" and ")
}

/// An edge pattern as a query writes it: `knows`, `<-knows`, `<knows>`.
fn edge_text(edge: &str, dir: Dir, bounds: &str) -> String {
    let e = edge.to_lowercase();
    match dir {
        Dir::Out => format!("{e}{bounds}"),
        Dir::In => format!("<-{e}{bounds}"),
        Dir::Both => format!("<{e}>{bounds}"),
    }
}

impl Ctx<'_> {
    /// Where the run read each node type's ids and columns from, and why
    /// (`residency`), once per distinct read: `Person.handle: held in
    /// memory`.
    pub fn reads_made(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for (t, column, d) in self.reads.log.lock().iter() {
            let what = match column.as_str() {
                ID => format!("{t} ids"),
                c => format!("{t}.{c}"),
            };
            let line = format!("{what}: {}", d.text());
            if !out.contains(&line) {
                out.push(line);
            }
        }
        out
    }

    /// The steps of `plan` (every arm), with what each reads, and what a
    /// profiled run measured when given.
    pub async fn explain(&self, plan: &Plan, profile: Option<&Profile>) -> Result<Vec<PlanStep>> {
        let mut out = Vec::new();
        let arms: Vec<&Plan> = std::iter::once(plan).chain(&plan.union).collect();
        for (arm, p) in arms.iter().enumerate() {
            self.describe(p, &p.ops, arm, 0, profile, &mut out).await?;
        }
        let mut detail: Vec<String> = plan
            .returns
            .iter()
            .filter(|r| r.visible)
            .map(|r| r.name.clone())
            .collect();
        if plan.aggregate {
            detail.push("(aggregated)".into());
        }
        if !plan.order.is_empty() {
            let keys: Vec<String> = plan
                .order
                .iter()
                .map(|k| {
                    let name = &plan.returns[k.col].name;
                    if k.desc {
                        format!("{name} desc")
                    } else {
                        name.clone()
                    }
                })
                .collect();
            detail.push(format!("order {}", keys.join(", ")));
        }
        if let Some(n) = plan.limit {
            detail.push(format!("limit {n}"));
        }
        out.push(PlanStep {
            arm: 0,
            depth: 0,
            op: "Return".into(),
            detail: detail.join(", "),
            uses: Vec::new(),
            rows: None,
            ms: None,
        });
        Ok(out)
    }

    fn describe<'b>(
        &'b self,
        plan: &'b Plan,
        ops: &'b [Op],
        arm: usize,
        depth: usize,
        profile: Option<&'b Profile>,
        out: &'b mut Vec<PlanStep>,
    ) -> futures::future::BoxFuture<'b, Result<()>> {
        Box::pin(async move {
            for op in ops {
                let (name, detail, uses) = self.step(plan, op).await?;
                let measured = profile.and_then(|p| p.of(op));
                out.push(PlanStep {
                    arm,
                    depth,
                    op: name.into(),
                    detail,
                    uses,
                    rows: profile.map(|_| measured.map_or(0, |m| m.0)),
                    ms: measured.map(|m| m.1),
                });
                if let Op::AntiJoin(inner) = op
                    && anti_degree_test(inner).is_none()
                {
                    self.describe(plan, inner, arm, depth + 1, profile, out)
                        .await?;
                }
            }
            Ok(())
        })
    }

    async fn step(&self, plan: &Plan, op: &Op) -> Result<(&'static str, String, Vec<String>)> {
        Ok(match op {
            Op::NodeScan {
                var: v,
                type_name,
                filters,
            } => {
                let t = self.def(type_name);
                let table = self.g.read_table(self.snap, t).await?;
                let btrees = stage::btree_columns(&table).await?;
                let warm = self.ids_warm(t).await?;
                let active: Vec<&Pred> = filters.iter().filter(|p| self.active(p)).collect();
                let mut uses = Vec::new();
                let mut detail = format!("{}: {type_name}", var(plan, *v));
                let rest: Vec<&Pred> = match super::point::key_lookup(self, t, &active) {
                    Some((i, _)) => {
                        detail.push_str(&format!(", key lookup {}", pred(self, plan, active[i])));
                        let ordered = super::point::usable_id_order(self, &table).await?.is_some();
                        let d = self.peek_reach(type_name, warm, 1)?;
                        let how = match (btrees.iter().any(|c| c == ID), ordered) {
                            (_, true) => "the persisted id order (the id BTREE for an id it lacks)",
                            (true, false) => "the id BTREE",
                            (false, false) => "a filtered scan of id (no BTREE: run optimize)",
                        };
                        uses.push(match d.reach {
                            Reach::Held => "the id index, held in memory".into(),
                            Reach::Whole => format!("the id index, {}", d.text()),
                            Reach::Rows => format!("{how}: {}", d.text()),
                        });
                        active
                            .iter()
                            .enumerate()
                            .filter(|(j, _)| *j != i)
                            .map(|(_, p)| *p)
                            .collect()
                    }
                    None => {
                        let stored =
                            |p: &&Pred| !(warm && in_memory(p)) && pushdown(self, p).is_some();
                        let pushed: Vec<&Pred> = active.iter().copied().filter(stored).collect();
                        if !pushed.is_empty() {
                            detail.push_str(&format!(
                                ", pushed to storage: {}",
                                preds(self, plan, &pushed)
                            ));
                            for p in &pushed {
                                if let Some((prop, ..)) = super::scan::property_vs(p)
                                    && btrees.iter().any(|c| c == prop)
                                {
                                    uses.push(format!("the BTREE on {prop}"));
                                }
                            }
                        }
                        active.iter().copied().filter(|p| !stored(p)).collect()
                    }
                };
                if !rest.is_empty() {
                    detail.push_str(&format!(", then on columns: {}", preds(self, plan, &rest)));
                }
                ("NodeScan", detail, uses)
            }
            Op::Expand {
                from,
                edge,
                dir,
                to,
                min,
                max,
                to_filters,
                ..
            } => {
                let bounds = match (min, max) {
                    (1, Some(1)) => String::new(),
                    (a, Some(b)) => format!("{{{a},{b}}}"),
                    (a, None) => format!("{{{a},}}"),
                };
                let mut detail = format!(
                    "{} {} {}",
                    var(plan, *from),
                    edge_text(edge, *dir, &bounds),
                    var(plan, *to)
                );
                let f: Vec<&Pred> = to_filters.iter().collect();
                if !f.is_empty() {
                    detail.push_str(&format!(", then {}", preds(self, plan, &f)));
                }
                let one_hop = (*min, *max) == (1, Some(1));
                let g = self.graph_plan(edge, one_hop).await?;
                (
                    "Expand",
                    detail,
                    vec![format!("graph index of {edge}: {g}")],
                )
            }
            Op::ExpandEdge {
                from,
                edge_var,
                edge,
                dir,
                to,
                to_filters,
                ..
            } => {
                let mut detail = format!(
                    "{} {}:{} {}",
                    var(plan, *from),
                    var(plan, *edge_var),
                    edge_text(edge, *dir, ""),
                    var(plan, *to)
                );
                let f: Vec<&Pred> = to_filters.iter().collect();
                if !f.is_empty() {
                    detail.push_str(&format!(", then {}", preds(self, plan, &f)));
                }
                let g = self.graph_plan(edge, false).await?;
                (
                    "ExpandEdge",
                    detail,
                    vec![format!("graph index of {edge}: {g}")],
                )
            }
            Op::Filter(p) => ("Filter", pred(self, plan, p), Vec::new()),
            Op::TextFilter {
                var: v,
                prop,
                test,
                query,
            } => {
                let f = match test {
                    TextTest::All => "search".to_string(),
                    TextTest::Phrase => "match_text".to_string(),
                    TextTest::Fuzzy(e) => format!("fuzzy (at most {e} edits)"),
                };
                let type_name = super::run::var_type(plan, *v);
                let table = self.g.read_table(self.snap, self.def(type_name)).await?;
                let uses = match table.index_of(prop)? {
                    Some(r) => vec![format!(
                        "the text index {} (rows written since read flat)",
                        r.file
                    )],
                    None => vec!["a flat read of the column (no text index)".into()],
                };
                let detail = format!("{f}({}.{prop}, {})", var(plan, *v), val(self, plan, query));
                ("TextFilter", detail, uses)
            }
            Op::AntiJoin(inner) => match anti_degree_test(inner) {
                Some((from, edge, dir, _)) => {
                    let g = self.graph_plan(edge, false).await?;
                    let detail = format!(
                        "not {{ {} {} $_ }}, from degrees alone",
                        var(plan, from),
                        edge_text(edge, dir, "")
                    );
                    (
                        "AntiJoin",
                        detail,
                        vec![format!("graph index of {edge}: {g}")],
                    )
                }
                None => ("AntiJoin", "not { the steps below }".into(), Vec::new()),
            },
        })
    }
}

/// The steps as a table for a terminal.
pub fn render(steps: &[PlanStep]) -> String {
    let mut s = String::new();
    let profiled = steps.iter().any(|x| x.ms.is_some() || x.rows.is_some());
    for st in steps {
        let indent = "  ".repeat(st.depth + 1);
        let arm = if steps.iter().any(|x| x.arm > 0) {
            format!("[arm {}] ", st.arm + 1)
        } else {
            String::new()
        };
        let measured = match (profiled, st.rows, st.ms) {
            (false, ..) => String::new(),
            (true, Some(r), Some(ms)) => format!("  [{r} rows, {ms:.2} ms]"),
            (true, Some(r), None) => format!("  [{r} rows, not run]"),
            (true, None, _) => String::new(),
        };
        s.push_str(&format!("{indent}{arm}{} {}{measured}\n", st.op, st.detail));
        for u in &st.uses {
            s.push_str(&format!("{indent}    uses {u}\n"));
        }
    }
    s
}
