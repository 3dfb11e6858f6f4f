//! The syntax tree of `.gq` files: read queries and mutations, as written.

use crate::compiler::catalog::PropType;
use crate::compiler::lexer::Pos;

#[derive(Clone, Debug, PartialEq)]
pub struct QueryFile {
    pub queries: Vec<QueryDecl>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct QueryDecl {
    pub name: String,
    pub params: Vec<Param>,
    pub body: Body,
    pub pos: Pos,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    pub name: String,
    pub ty: PropType,
    pub optional: bool,
    pub pos: Pos,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Body {
    Read(ReadQuery),
    Mutation(Vec<Statement>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct ReadQuery {
    pub clauses: Vec<Clause>,
    pub returns: Vec<ReturnItem>,
    pub order: Vec<OrderItem>,
    pub limit: Option<u64>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Clause {
    /// `$x: Type { prop: value, ... }`
    Binding {
        var: String,
        type_name: String,
        props: Vec<(String, Expr)>,
        pos: Pos,
    },
    /// `$a edge $b`, `$a edge{1,3} $b`, `$a <edge> $b`, `$a $w:edge $b`
    Traverse {
        from: String,
        edge: String,
        edge_var: Option<String>,
        to: String,
        min: u32,
        max: Option<u32>,
        undirected: bool,
        pos: Pos,
    },
    Filter {
        left: Expr,
        op: CmpOp,
        right: Expr,
        pos: Pos,
    },
    /// `search(...)`, `fuzzy(...)`, `match_text(...)` used as filters.
    TextFilter {
        func: String,
        args: Vec<Expr>,
        pos: Pos,
    },
    Not {
        clauses: Vec<Clause>,
        pos: Pos,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Contains,
    StartsWith,
}

impl CmpOp {
    /// Does a comparison that came out `o` satisfy this operator?
    /// (`contains` and `starts_with` are not orderings: never.)
    pub fn accepts(self, o: std::cmp::Ordering) -> bool {
        use std::cmp::Ordering::*;
        match self {
            CmpOp::Eq => o == Equal,
            CmpOp::Ne => o != Equal,
            CmpOp::Lt => o == Less,
            CmpOp::Le => o != Greater,
            CmpOp::Gt => o == Greater,
            CmpOp::Ge => o != Less,
            CmpOp::Contains | CmpOp::StartsWith => false,
        }
    }

    pub fn text(self) -> &'static str {
        match self {
            CmpOp::Eq => "=",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
            CmpOp::Contains => "contains",
            CmpOp::StartsWith => "starts_with",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Lit {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    Null,
    /// `date("2024-05-01")`
    Date(String),
    /// `datetime("...")`
    DateTime(String),
    List(Vec<Lit>),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// `$x.prop`
    Prop {
        var: String,
        prop: String,
        pos: Pos,
    },
    /// `$x`
    Var {
        var: String,
        pos: Pos,
    },
    /// `$name` where `name` is a declared parameter (resolved by the checker).
    Lit {
        lit: Lit,
        pos: Pos,
    },
    Now {
        pos: Pos,
    },
    /// `count(...)`, `nearest(...)`, ...
    Call {
        func: String,
        args: Vec<Expr>,
        pos: Pos,
    },
    /// A bare name: an earlier return alias.
    Alias {
        name: String,
        pos: Pos,
    },
}

impl Expr {
    pub fn pos(&self) -> Pos {
        match self {
            Expr::Prop { pos, .. }
            | Expr::Var { pos, .. }
            | Expr::Lit { pos, .. }
            | Expr::Now { pos }
            | Expr::Call { pos, .. }
            | Expr::Alias { pos, .. } => *pos,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct ReturnItem {
    pub expr: Expr,
    pub alias: Option<String>,
    /// The item's text without `$`, used as its column name when unaliased.
    pub text: String,
}

impl ReturnItem {
    pub fn column(&self) -> &str {
        self.alias.as_deref().unwrap_or(&self.text)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct OrderItem {
    pub expr: Expr,
    pub desc: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Assignment {
    pub prop: String,
    pub value: Expr,
    pub pos: Pos,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Predicate {
    pub prop: String,
    pub op: CmpOp,
    pub value: Expr,
    pub pos: Pos,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Statement {
    Insert {
        type_name: String,
        values: Vec<Assignment>,
        pos: Pos,
    },
    Update {
        type_name: String,
        set: Vec<Assignment>,
        filter: Option<Predicate>,
        pos: Pos,
    },
    Delete {
        type_name: String,
        filter: Predicate,
        pos: Pos,
    },
}
