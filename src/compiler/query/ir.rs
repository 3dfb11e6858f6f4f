//! The plan a checked read query lowers to: a pipeline of operators over a
//! frame of bindings (one column per variable), then projection,
//! aggregation, ordering and a limit.

use std::collections::BTreeMap;

use crate::compiler::catalog::PropType;
use crate::compiler::value::Value;

use super::ast::CmpOp;

#[derive(Clone, Debug, PartialEq)]
pub enum VarKind {
    Node(String),
    Edge(String),
}

#[derive(Clone, Debug, PartialEq)]
pub struct VarInfo {
    pub name: String,
    pub kind: VarKind,
    /// Bound through this interface (`$x: Named`): only its properties are
    /// visible, and a whole-node return shows those.
    pub interface: Option<String>,
}

/// The type of a value as the checker sees it.
#[derive(Clone, Debug, PartialEq)]
pub enum ValType {
    Known(PropType),
    /// `null`, or an empty list: fits anything.
    Any,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ValExpr {
    Prop {
        var: usize,
        prop: String,
        ty: PropType,
    },
    /// A node's or edge's id.
    Id {
        var: usize,
    },
    Param {
        name: String,
    },
    Const(Value<'static>),
    Now,
}

impl ValExpr {
    /// The single variable the expression reads, if any.
    pub fn var(&self) -> Option<usize> {
        match self {
            ValExpr::Prop { var, .. } | ValExpr::Id { var } => Some(*var),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Pred {
    pub left: ValExpr,
    pub op: CmpOp,
    pub right: ValExpr,
}

impl Pred {
    /// Variables the predicate reads.
    pub fn vars(&self) -> Vec<usize> {
        let mut v: Vec<usize> = [self.left.var(), self.right.var()]
            .into_iter()
            .flatten()
            .collect();
        v.dedup();
        v
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    Out,
    In,
    Both,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// Introduce `var` by scanning its type's table (filters pushed down).
    /// On a non-empty frame this is a cross product.
    NodeScan {
        var: usize,
        type_name: String,
        filters: Vec<Pred>,
    },
    /// Follow `edge` from `from` to `to` with reachability semantics over
    /// `min..=max` hops (`max` None: unbounded). If `to` is already bound the
    /// step keeps rows whose `to` is reached.
    Expand {
        from: usize,
        edge: String,
        dir: Dir,
        to: usize,
        to_bound: bool,
        min: u32,
        max: Option<u32>,
        to_filters: Vec<Pred>,
    },
    /// One hop binding the edge itself: one row per matching edge.
    ExpandEdge {
        from: usize,
        edge_var: usize,
        edge: String,
        dir: Dir,
        to: usize,
        to_bound: bool,
        to_filters: Vec<Pred>,
    },
    Filter(Pred),
    /// `search` / `match_text` / `fuzzy` on a node variable's String
    /// property: keep the rows whose text matches.
    TextFilter {
        var: usize,
        prop: String,
        test: TextTest,
        query: ValExpr,
    },
    /// Keep rows for which the inner pipeline (run with the row's bindings)
    /// produces nothing.
    AntiJoin(Vec<Op>),
}

/// What a text filter asks of a row's tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextTest {
    /// Every query token (`search`).
    All,
    /// The query's tokens, contiguously (`match_text`).
    Phrase,
    /// Every query token within this many edits of one of the row's
    /// (`fuzzy`).
    Fuzzy(u32),
}

/// A search function's score of one row.
#[derive(Clone, Debug, PartialEq)]
pub enum Score {
    /// Cosine distance between the row's vector and the query's.
    Nearest {
        var: usize,
        prop: String,
        query: ValExpr,
        /// Set when the query is text, embedded at query time.
        embed: Option<Embed>,
    },
    /// BM25 relevance of the row's text to the query's tokens.
    Bm25 {
        var: usize,
        prop: String,
        query: ValExpr,
    },
}

/// How a text query of `nearest` becomes a vector.
#[derive(Clone, Debug, PartialEq)]
pub struct Embed {
    /// The property's `@embed` model (`None`: the configured default).
    pub model: Option<String>,
    pub dim: u32,
}

impl Score {
    /// Does a better match score higher? (Distances rank low first.)
    pub fn higher_is_better(&self) -> bool {
        matches!(self, Score::Bm25 { .. })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AggFunc {
    Count,
    Sum,
    Avg,
    Min,
    Max,
}

#[derive(Clone, Debug, PartialEq)]
pub enum RetExpr {
    Val(ValExpr),
    /// A whole node, as an object of its properties.
    Node {
        var: usize,
    },
    Agg {
        func: AggFunc,
        arg: Option<ValExpr>,
        node_var: Option<usize>,
    },
    /// A search function's score. A row the function cannot score (no
    /// vector, no query token) is not in the result when the score is
    /// returned or ordered by.
    Score(Score),
    /// `rrf(a, b, k)`: the fusion of the rankings in two (hidden) score
    /// columns, indices into the plan's returns.
    Fused {
        sides: [usize; 2],
        k: u32,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct ReturnCol {
    pub name: String,
    pub expr: RetExpr,
    /// Shown to the user (order-only helper columns are not).
    pub visible: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct OrderKey {
    /// Index into `returns`.
    pub col: usize,
    pub desc: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub name: String,
    pub vars: Vec<VarInfo>,
    pub ops: Vec<Op>,
    pub returns: Vec<ReturnCol>,
    pub aggregate: bool,
    pub order: Vec<OrderKey>,
    pub limit: Option<u64>,
    /// Optional parameters that were absent: filters using them are dropped.
    pub params: Vec<(String, PropType, bool)>,
    /// The other arms of a query that binds interfaces: one per further
    /// choice of a concrete node type for each interface-bound variable
    /// (the same returns, order and limit; other variable types and
    /// operators). The rows of every arm form one result.
    pub union: Vec<Plan>,
}

impl Plan {
    /// Every edge type the plan traverses (also inside `not { }`).
    pub fn edge_types(&self) -> Vec<String> {
        fn walk(ops: &[Op], out: &mut Vec<String>) {
            for op in ops {
                match op {
                    Op::Expand { edge, .. } | Op::ExpandEdge { edge, .. } => out.push(edge.clone()),
                    Op::AntiJoin(inner) => walk(inner, out),
                    _ => {}
                }
            }
        }
        let mut out = Vec::new();
        for arm in std::iter::once(self).chain(&self.union) {
            walk(&arm.ops, &mut out);
        }
        out.sort();
        out.dedup();
        out
    }
}

/// A checked mutation: its statements run in order against one change set.
#[derive(Clone, Debug)]
pub struct MutationPlan {
    pub name: String,
    pub params: Vec<(String, PropType, bool)>,
    pub stmts: Vec<MutStmt>,
    /// Updates and deletes read what they change: a moved branch is
    /// `ReadSetChanged`, never a silent retry.
    pub strict: bool,
}

/// One mutation statement over the rows of one type. Values are
/// constants, parameters or `now()`; a filter's left side is the row's
/// property or id (variable 0).
#[derive(Clone, Debug)]
pub enum MutStmt {
    Insert {
        ty: String,
        values: BTreeMap<String, ValExpr>,
    },
    Update {
        ty: String,
        set: BTreeMap<String, ValExpr>,
        filter: Option<Pred>,
    },
    Delete {
        ty: String,
        filter: Pred,
    },
}
