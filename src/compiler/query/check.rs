//! The type checker: a parsed read query plus the catalog become a [`Plan`],
//! or a type error with a stable code. Filters that read one variable are
//! pushed onto the operator that introduces it.
//!
//! The codes are [`Code`]'s.

use std::collections::BTreeMap;

use super::ast::*;
pub use super::codes::Code;
use super::ir::{
    self, Dir, Op, OrderKey, Plan, Pred, RetExpr, ReturnCol, ValExpr, VarInfo, VarKind,
};
use crate::compiler::catalog::{Catalog, PropType, TypeDef};
use crate::compiler::lexer::Pos;
use crate::compiler::value::Value;
use crate::error::{OmniError, Result};
use crate::util::dates::{days_from_date, ms_from_datetime};

pub fn type_error(code: Code, pos: Pos, message: impl Into<String>) -> OmniError {
    OmniError::Type {
        code: code.id(),
        line: pos.line,
        column: pos.col,
        message: message.into(),
    }
}

/// Find a query by name in a parsed file.
pub fn find<'f>(file: &'f QueryFile, name: &str) -> Result<&'f QueryDecl> {
    file.queries.iter().find(|q| q.name == name).ok_or_else(|| {
        let names: Vec<&str> = file.queries.iter().map(|q| q.name.as_str()).collect();
        type_error(
            Code::UnknownQuery,
            Pos::default(),
            format!(
                "no query named '{name}' (the file has: {})",
                names.join(", ")
            ),
        )
    })
}

/// The query or mutation to run: `given`, or else the one `source`
/// declares (for callers that may leave the name out; a text with several
/// asks which).
pub fn query_name(source: &str, given: Option<String>) -> Result<String> {
    if let Some(name) = given {
        return Ok(name);
    }
    let file = super::parser::parse(source)?;
    match file.queries.as_slice() {
        [one] => Ok(one.name.clone()),
        many => {
            let names: Vec<&str> = many.iter().map(|q| q.name.as_str()).collect();
            Err(OmniError::BadRequest(format!(
                "which query? name one of: {}",
                names.join(", ")
            )))
        }
    }
}

/// The edge type a traversal word names: the type name with its first letter
/// lower-cased (`WorksAt` is `worksAt`).
pub fn edge_by_word<'c>(catalog: &'c Catalog, word: &str) -> Option<&'c TypeDef> {
    catalog.edges().find(|e| {
        let mut c = e.name.chars();
        let first = c.next().map(|f| f.to_ascii_lowercase());
        first.map(|f| format!("{f}{}", c.as_str())).as_deref() == Some(word)
    })
}

pub(super) struct Checker<'a> {
    catalog: &'a Catalog,
    /// The concrete node type chosen for each interface-bound variable in
    /// the arm being checked.
    choice: BTreeMap<String, String>,
    params: BTreeMap<String, (PropType, bool)>,
    vars: Vec<VarInfo>,
    /// Variable name -> index (anonymous `$_` never enters).
    names: BTreeMap<String, usize>,
}

fn type_name(ty: &PropType) -> String {
    ty.describe()
}

fn numeric(t: &PropType) -> bool {
    t.is_numeric()
}

fn stringy(t: &PropType) -> bool {
    matches!(t, PropType::String | PropType::Enum(_))
}

/// Can values of these two types be compared with `op`?
fn comparable(op: CmpOp, l: &ir::ValType, r: &ir::ValType) -> bool {
    use ir::ValType::*;
    let (l, r) = match (l, r) {
        (Any, _) | (_, Any) => return true,
        (Known(l), Known(r)) => (l, r),
    };
    match op {
        CmpOp::Contains => match l {
            PropType::List(inner) => {
                comparable(CmpOp::Eq, &Known((**inner).clone()), &Known(r.clone()))
            }
            _ => stringy(l) && stringy(r),
        },
        CmpOp::StartsWith => stringy(l) && stringy(r),
        _ => {
            (numeric(l) && numeric(r))
                || (stringy(l) && stringy(r))
                || (l == &PropType::Bool
                    && r == &PropType::Bool
                    && matches!(op, CmpOp::Eq | CmpOp::Ne))
                || (l == &PropType::Date && r == &PropType::Date)
                || (l == &PropType::DateTime && r == &PropType::DateTime)
                || (matches!((l, r), (PropType::List(_), PropType::List(_)))
                    && matches!(op, CmpOp::Eq | CmpOp::Ne)
                    && l == r)
        }
    }
}

fn lit_value(lit: &Lit, pos: Pos) -> Result<(Value<'static>, ir::ValType)> {
    use ir::ValType;
    Ok(match lit {
        Lit::Str(s) => (
            Value::Str(s.clone().into()),
            ValType::Known(PropType::String),
        ),
        Lit::Int(i) => (Value::Int(*i), ValType::Known(PropType::I64)),
        Lit::Float(f) => (Value::Float(*f), ValType::Known(PropType::F64)),
        Lit::Bool(b) => (Value::Bool(*b), ValType::Known(PropType::Bool)),
        Lit::Null => (Value::Null, ValType::Any),
        Lit::Date(s) => (
            Value::Date(days_from_date(s).ok_or_else(|| {
                type_error(
                    Code::TypeMismatch,
                    pos,
                    format!("date({s:?}) is not a date like \"2024-05-01\""),
                )
            })?),
            ValType::Known(PropType::Date),
        ),
        Lit::DateTime(s) => (
            Value::DateTime(ms_from_datetime(s).ok_or_else(|| {
                type_error(
                    Code::TypeMismatch,
                    pos,
                    format!("datetime({s:?}) is not an RFC 3339 date-time"),
                )
            })?),
            ValType::Known(PropType::DateTime),
        ),
        Lit::List(items) => {
            let mut vals = Vec::new();
            let mut ty = ValType::Any;
            for it in items {
                let (v, t) = lit_value(it, pos)?;
                if ty == ValType::Any {
                    ty = t;
                }
                vals.push(v);
            }
            let ty = match ty {
                ValType::Known(t) => ValType::Known(PropType::List(Box::new(t))),
                ValType::Any => ValType::Any,
            };
            (Value::List(vals), ty)
        }
    })
}

/// The declared parameters `name -> (type, optional)`; a name declared
/// twice is Q010, for reads and mutations alike.
pub(super) fn declare_params(q: &QueryDecl) -> Result<BTreeMap<String, (PropType, bool)>> {
    let mut params = BTreeMap::new();
    for p in &q.params {
        if params
            .insert(p.name.clone(), (p.ty.clone(), p.optional))
            .is_some()
        {
            return Err(type_error(
                Code::Parameter,
                p.pos,
                format!("parameter ${} is declared twice", p.name),
            ));
        }
    }
    Ok(params)
}

impl<'a> Checker<'a> {
    pub(super) fn new(catalog: &'a Catalog, params: BTreeMap<String, (PropType, bool)>) -> Self {
        Self {
            catalog,
            choice: BTreeMap::new(),
            params,
            vars: Vec::new(),
            names: BTreeMap::new(),
        }
    }

    /// Bind `name` to the rows of one type (a mutation's target).
    pub(super) fn bind_rows(&mut self, name: &str, t: &TypeDef) -> usize {
        let kind = if t.is_edge() {
            VarKind::Edge(t.name.clone())
        } else {
            VarKind::Node(t.name.clone())
        };
        self.new_var(name, kind)
    }

    /// A new named variable (not through an interface).
    fn new_var(&mut self, name: &str, kind: VarKind) -> usize {
        self.vars.push(VarInfo {
            name: name.to_string(),
            kind,
            interface: None,
        });
        self.names.insert(name.to_string(), self.vars.len() - 1);
        self.vars.len() - 1
    }

    pub(super) fn var(&self, name: &str, pos: Pos) -> Result<usize> {
        self.names.get(name).copied().ok_or_else(|| {
            type_error(
                Code::UnknownVariable,
                pos,
                format!("unknown variable ${name}"),
            )
        })
    }

    pub(super) fn var_type(&self, var: usize) -> &'a TypeDef {
        let name = match &self.vars[var].kind {
            VarKind::Node(t) | VarKind::Edge(t) => t,
        };
        self.catalog.get(name).expect("bound types exist")
    }

    /// Bind a node variable to a type (or check it is already that type).
    fn bind_node(&mut self, name: &str, ty: &str, pos: Pos) -> Result<(usize, bool)> {
        if name == "_" {
            self.vars.push(VarInfo {
                name: "_".into(),
                kind: VarKind::Node(ty.to_string()),
                interface: None,
            });
            return Ok((self.vars.len() - 1, true));
        }
        if let Some(&i) = self.names.get(name) {
            return match &self.vars[i].kind {
                VarKind::Node(t) if t == ty => Ok((i, false)),
                VarKind::Node(t) => Err(type_error(
                    Code::VariableTypeClash,
                    pos,
                    format!("${name} is a {t} here, not a {ty}"),
                )),
                VarKind::Edge(t) => Err(type_error(
                    Code::VariableTypeClash,
                    pos,
                    format!("${name} is a {t} edge, not a {ty} node"),
                )),
            };
        }
        Ok((self.new_var(name, VarKind::Node(ty.to_string())), true))
    }

    pub(super) fn prop_expr(
        &self,
        var: usize,
        prop: &str,
        pos: Pos,
    ) -> Result<(ValExpr, ir::ValType)> {
        let t = self.var_type(var);
        if prop == "id" {
            return Ok((ValExpr::Id { var }, ir::ValType::Known(PropType::String)));
        }
        if let Some(i) = &self.vars[var].interface {
            let visible = self
                .catalog
                .interfaces
                .iter()
                .find(|d| &d.name == i)
                .is_some_and(|d| d.properties.iter().any(|p| p.name == prop));
            if !visible {
                return Err(type_error(
                    Code::UnknownProperty,
                    pos,
                    format!("{i} has no property '{prop}'"),
                ));
            }
        }
        let p = t.property(prop).ok_or_else(|| {
            type_error(
                Code::UnknownProperty,
                pos,
                format!("{} has no property '{prop}'", t.name),
            )
        })?;
        Ok((
            ValExpr::Prop {
                var,
                prop: prop.to_string(),
                ty: p.ty.clone(),
            },
            ir::ValType::Known(p.ty.clone()),
        ))
    }

    /// A value expression in a filter or binding.
    pub(super) fn value(&self, e: &Expr) -> Result<(ValExpr, ir::ValType)> {
        match e {
            Expr::Prop { var, prop, pos } => {
                let v = self.var(var, *pos)?;
                self.prop_expr(v, prop, *pos)
            }
            Expr::Var { var, pos } => {
                if let Some((ty, _)) = self.params.get(var) {
                    return Ok((
                        ValExpr::Param { name: var.clone() },
                        ir::ValType::Known(ty.clone()),
                    ));
                }
                if let Some(&v) = self.names.get(var) {
                    return Ok((ValExpr::Id { var: v }, ir::ValType::Known(PropType::String)));
                }
                Err(type_error(
                    Code::Parameter,
                    *pos,
                    format!("${var} is neither a declared parameter nor a bound variable"),
                ))
            }
            Expr::Lit { lit, pos } => {
                let (v, t) = lit_value(lit, *pos)?;
                Ok((ValExpr::Const(v), t))
            }
            Expr::Now { .. } => Ok((ValExpr::Now, ir::ValType::Known(PropType::DateTime))),
            Expr::Call { func, pos, .. } if func == "date" || func == "datetime" => {
                Err(type_error(
                    Code::TypeMismatch,
                    *pos,
                    format!("{func}(...) takes a string literal"),
                ))
            }
            Expr::Call { func, pos, .. } => Err(self.unsupported_call(func, *pos, false)),
            Expr::Alias { name, pos } => Err(type_error(
                Code::UnknownVariable,
                *pos,
                format!("'{name}' is not a value here (variables start with $)"),
            )),
        }
    }

    fn unsupported_call(&self, func: &str, pos: Pos, in_return: bool) -> OmniError {
        match func {
            f if super::search::is_score(f) => type_error(
                Code::SearchArgument,
                pos,
                format!("{func}(...) is a score: use it in return or order"),
            ),
            f if super::search::is_text_filter(f) => type_error(
                Code::SearchArgument,
                pos,
                format!("{func}(...) is a match filter: use it in match {{ }}"),
            ),
            "count" | "sum" | "avg" | "min" | "max" if !in_return => type_error(
                Code::MisplacedAggregate,
                pos,
                format!("{func}(...) is an aggregate: use it in return or order"),
            ),
            other => type_error(
                Code::Unsupported,
                pos,
                format!("unknown function {other}(...)"),
            ),
        }
    }

    /// Coerce a string constant compared with a date into a date value.
    fn coerce(
        &self,
        side: (ValExpr, ir::ValType),
        other: &ir::ValType,
        pos: Pos,
    ) -> Result<(ValExpr, ir::ValType)> {
        use ir::ValType::Known;
        match (&side, other) {
            ((ValExpr::Const(Value::Str(s)), _), Known(PropType::Date)) => {
                let d = days_from_date(s).ok_or_else(|| {
                    type_error(
                        Code::TypeMismatch,
                        pos,
                        format!("{s:?} is not a date like \"2024-05-01\""),
                    )
                })?;
                Ok((ValExpr::Const(Value::Date(d)), Known(PropType::Date)))
            }
            ((ValExpr::Const(Value::Str(s)), _), Known(PropType::DateTime)) => {
                let ms = ms_from_datetime(s).ok_or_else(|| {
                    type_error(
                        Code::TypeMismatch,
                        pos,
                        format!("{s:?} is not an RFC 3339 date-time"),
                    )
                })?;
                Ok((
                    ValExpr::Const(Value::DateTime(ms)),
                    Known(PropType::DateTime),
                ))
            }
            ((_, Known(PropType::Vector(_))), _) | (_, Known(PropType::Vector(_))) => {
                Err(type_error(
                    Code::TypeMismatch,
                    pos,
                    "vectors cannot be compared (use nearest)",
                ))
            }
            ((_, Known(PropType::Blob)), _) => Err(type_error(
                Code::BlobMisuse,
                pos,
                "Blob properties cannot be compared",
            )),
            _ => Ok(side),
        }
    }

    pub(super) fn pred(&self, left: &Expr, op: CmpOp, right: &Expr, pos: Pos) -> Result<Pred> {
        let l = self.value(left)?;
        let r = self.value(right)?;
        let l = self.coerce(l, &r.1.clone(), pos)?;
        let r = self.coerce(r, &l.1.clone(), pos)?;
        if !comparable(op, &l.1, &r.1) {
            let show = |t: &ir::ValType| match t {
                ir::ValType::Known(t) => type_name(t),
                ir::ValType::Any => "null".into(),
            };
            return Err(type_error(
                Code::TypeMismatch,
                pos,
                format!("cannot compare {} {} {}", show(&l.1), op.text(), show(&r.1)),
            ));
        }
        Ok(Pred {
            left: l.0,
            op,
            right: r.0,
        })
    }

    /// Lower clauses into operators. `ops` may already hold outer operators
    /// (inside `not { }`, the outer bindings are visible).
    fn clauses(&mut self, clauses: &[Clause]) -> Result<Vec<Op>> {
        let mut ops: Vec<Op> = Vec::new();
        let mut filters: Vec<(Pred, Pos)> = Vec::new();
        let mut text_filters: Vec<Op> = Vec::new();
        let outer_vars = self.vars.len();
        for c in clauses {
            match c {
                Clause::Binding { .. } => self.binding(c, &mut ops, &mut filters)?,
                Clause::Traverse { .. } => self.traverse(c, &mut ops)?,
                Clause::Filter {
                    left,
                    op,
                    right,
                    pos,
                } => {
                    filters.push((self.pred(left, *op, right, *pos)?, *pos));
                }
                Clause::TextFilter { func, args, pos } => {
                    text_filters.push(self.text_filter(func, args, *pos)?);
                }
                Clause::Not { clauses, .. } => {
                    let saved = self.names.clone();
                    let inner = self.clauses(clauses)?;
                    self.names = saved;
                    ops.push(Op::AntiJoin(inner));
                }
            }
        }
        place_filters(&mut ops, filters, outer_vars);
        for f in text_filters {
            let Op::TextFilter { var, .. } = &f else {
                unreachable!("text_filter builds Op::TextFilter")
            };
            // Right after the variable is bound (outer ones already are).
            let at = introduced_at(&ops, *var).map_or(0, |i| i + 1);
            ops.insert(at, f);
        }
        Ok(ops)
    }

    /// `$x: Type { prop: value, ... }`: bind (or check) the variable, scan
    /// it if it is new, and keep its property filters.
    fn binding(
        &mut self,
        c: &Clause,
        ops: &mut Vec<Op>,
        filters: &mut Vec<(Pred, Pos)>,
    ) -> Result<()> {
        let Clause::Binding {
            var,
            type_name,
            props,
            pos,
        } = c
        else {
            unreachable!("binding checks Clause::Binding")
        };
        let interface = self.catalog.interfaces.iter().any(|i| &i.name == type_name);
        let node_type = match self.choice.get(var) {
            Some(concrete) if interface => concrete,
            None if interface => {
                return Err(type_error(
                    Code::Unsupported,
                    *pos,
                    format!(
                        "binding an interface ({type_name}) inside not {{ }} is not supported yet: bind a node type there"
                    ),
                ));
            }
            _ => type_name,
        };
        let Some(t) = self.catalog.node(node_type) else {
            let what = if self.catalog.edge(type_name).is_some() {
                "an edge type; bind nodes, traverse edges"
            } else {
                "not a node type of the schema"
            };
            return Err(type_error(
                Code::UnknownType,
                *pos,
                format!("{type_name} is {what}"),
            ));
        };
        let (v, fresh) = self.bind_node(var, &t.name, *pos)?;
        if interface {
            self.vars[v].interface = Some(type_name.clone());
        }
        for (prop, value) in props {
            let left = Expr::Prop {
                var: var.clone(),
                prop: prop.clone(),
                pos: *pos,
            };
            if var == "_" {
                return Err(type_error(
                    Code::UnknownVariable,
                    *pos,
                    "$_ cannot carry property filters",
                ));
            }
            filters.push((self.pred(&left, CmpOp::Eq, value, *pos)?, *pos));
        }
        if fresh {
            ops.push(Op::NodeScan {
                var: v,
                type_name: t.name.clone(),
                filters: Vec::new(),
            });
        }
        Ok(())
    }

    /// `$a edge $b` and its forms: check the ends against the edge, bind
    /// them, and expand from whichever end is bound.
    fn traverse(&mut self, c: &Clause, ops: &mut Vec<Op>) -> Result<()> {
        let Clause::Traverse {
            from,
            edge,
            edge_var,
            to,
            min,
            max,
            undirected,
            pos,
        } = c
        else {
            unreachable!("traverse checks Clause::Traverse")
        };
        let Some(e) = edge_by_word(self.catalog, edge) else {
            return Err(type_error(
                Code::UnknownEdge,
                *pos,
                format!("no edge type is traversed as '{edge}'"),
            ));
        };
        let (ef, et) = e.endpoints().expect("edge");
        if *undirected && ef != et {
            return Err(type_error(
                Code::UndirectedMixedEndpoints,
                *pos,
                format!("<{edge}> is undirected, but {} goes {ef} -> {et}", e.name),
            ));
        }
        if edge_var.is_some() && (*min, *max) != (1, Some(1)) {
            return Err(type_error(
                Code::EdgeBindingMultiHop,
                *pos,
                "an edge binding ($w:edge) cannot have hop bounds",
            ));
        }
        self.check_end(from, ef, e, *pos)?;
        self.check_end(to, et, e, *pos)?;
        let from_bound = from != "_" && self.names.contains_key(from);
        let to_bound = to != "_" && self.names.contains_key(to);
        // Start from whichever end is bound (prefer `from`).
        let (start, end, dir, start_ty, end_ty) = if !from_bound && to_bound && !*undirected {
            (to, from, Dir::In, et, ef)
        } else {
            (
                from,
                to,
                if *undirected { Dir::Both } else { Dir::Out },
                ef,
                et,
            )
        };
        let (sv, fresh_start) = self.bind_node(start, start_ty, *pos)?;
        if fresh_start {
            ops.push(Op::NodeScan {
                var: sv,
                type_name: start_ty.to_string(),
                filters: Vec::new(),
            });
        }
        let (tv, fresh_end) = self.bind_node(end, end_ty, *pos)?;
        match edge_var {
            None => ops.push(Op::Expand {
                from: sv,
                edge: e.name.clone(),
                dir,
                to: tv,
                to_bound: !fresh_end,
                min: *min,
                max: *max,
                to_filters: Vec::new(),
            }),
            Some(w) => {
                let wv = self.bind_edge(w, &e.name, *pos)?;
                ops.push(Op::ExpandEdge {
                    from: sv,
                    edge_var: wv,
                    edge: e.name.clone(),
                    dir,
                    to: tv,
                    to_bound: !fresh_end,
                    to_filters: Vec::new(),
                });
            }
        }
        Ok(())
    }

    /// A traversal end that is already bound must be a node of the type
    /// the edge has at that end (`_` is never bound).
    fn check_end(&self, name: &str, want: &str, e: &TypeDef, pos: Pos) -> Result<()> {
        let (ef, et) = e.endpoints().expect("edge");
        let Some(&i) = self.names.get(name).filter(|_| name != "_") else {
            return Ok(());
        };
        match &self.vars[i].kind {
            VarKind::Node(t) if t == want => Ok(()),
            VarKind::Node(t) => Err(type_error(
                Code::EdgeDirection,
                pos,
                format!("{} goes {ef} -> {et}, but ${name} is a {t}", e.name),
            )),
            VarKind::Edge(_) => Err(type_error(
                Code::VariableTypeClash,
                pos,
                format!("${name} is an edge"),
            )),
        }
    }

    /// `$w: edge` in a traversal: a new variable bound to the edge rows.
    fn bind_edge(&mut self, w: &str, edge: &str, pos: Pos) -> Result<usize> {
        if self.names.contains_key(w) {
            return Err(type_error(
                Code::VariableTypeClash,
                pos,
                format!("${w} is already bound"),
            ));
        }
        Ok(self.new_var(w, VarKind::Edge(edge.to_string())))
    }

    fn agg_func(name: &str) -> Option<ir::AggFunc> {
        Some(match name {
            "count" => ir::AggFunc::Count,
            "sum" => ir::AggFunc::Sum,
            "avg" => ir::AggFunc::Avg,
            "min" => ir::AggFunc::Min,
            "max" => ir::AggFunc::Max,
            _ => return None,
        })
    }

    // One arm per return-expression form (property, id, node, aggregate).
    fn ret_expr(&self, e: &Expr, returns: &mut Vec<ReturnCol>) -> Result<RetExpr> {
        match e {
            Expr::Var { var, pos } if self.names.contains_key(var) => {
                let v = self.names[var];
                match &self.vars[v].kind {
                    VarKind::Node(_) => Ok(RetExpr::Node { var: v }),
                    VarKind::Edge(t) => Err(type_error(
                        Code::BareEdgeReturned,
                        *pos,
                        format!(
                            "${var} is a {t} edge: return its properties ($w.prop), not the edge itself"
                        ),
                    )),
                }
            }
            Expr::Prop { pos, .. } => {
                let (v, t) = self.value(e)?;
                if t == ir::ValType::Known(PropType::Blob) {
                    return Err(type_error(
                        Code::BlobMisuse,
                        *pos,
                        "Blob properties cannot be returned (use the blob reader)",
                    ));
                }
                Ok(RetExpr::Val(v))
            }
            Expr::Call { func, args, pos } if super::search::is_score(func) => {
                self.score_expr(func, args, *pos, returns)
            }
            Expr::Call { func, args, pos } => {
                let Some(agg) = Self::agg_func(func) else {
                    return Err(self.unsupported_call(func, *pos, true));
                };
                let [arg] = args.as_slice() else {
                    return Err(type_error(
                        Code::MisplacedAggregate,
                        *pos,
                        format!("{func}(...) takes one argument"),
                    ));
                };
                match arg {
                    Expr::Var { var, pos } if self.names.contains_key(var) => {
                        if agg != ir::AggFunc::Count {
                            return Err(type_error(
                                Code::TypeMismatch,
                                *pos,
                                format!("{func}(${var}) needs a property, not a whole node"),
                            ));
                        }
                        Ok(RetExpr::Agg {
                            func: agg,
                            arg: None,
                            node_var: Some(self.names[var]),
                        })
                    }
                    other => {
                        let (v, t) = self.value(other)?;
                        if let ir::ValType::Known(t) = &t {
                            if t == &PropType::Blob {
                                return Err(type_error(
                                    Code::BlobMisuse,
                                    *pos,
                                    "Blob properties cannot be aggregated",
                                ));
                            }
                            let ok = match agg {
                                ir::AggFunc::Count => true,
                                ir::AggFunc::Sum | ir::AggFunc::Avg => t.is_numeric(),
                                ir::AggFunc::Min | ir::AggFunc::Max => t.is_scalar(),
                            };
                            if !ok {
                                return Err(type_error(
                                    Code::TypeMismatch,
                                    *pos,
                                    format!("{func}(...) does not apply to {}", t.describe()),
                                ));
                            }
                        }
                        Ok(RetExpr::Agg {
                            func: agg,
                            arg: Some(v),
                            node_var: None,
                        })
                    }
                }
            }
            Expr::Alias { name, pos } => returns
                .iter()
                .find(|r| r.name == *name)
                .map(|r| r.expr.clone())
                .ok_or_else(|| {
                    type_error(
                        Code::UnknownVariable,
                        *pos,
                        format!("'{name}' is not an earlier return alias"),
                    )
                }),
            other => Ok(RetExpr::Val(self.value(other)?.0)),
        }
    }
}

/// Type-check and lower one read query.
/// Push each filter onto the operator that introduces its variable(s), or
/// after every operator that binds what it reads (outer variables, of an
/// enclosing pattern, are bound already).
fn place_filters(ops: &mut Vec<Op>, filters: Vec<(Pred, Pos)>, outer_vars: usize) {
    for (p, _) in filters {
        let vars = p.vars();
        let introduced_at = |v: usize| introduced_at(ops, v);
        match vars.as_slice() {
            [v] if *v >= outer_vars => {
                let at = introduced_at(*v).expect("a variable is introduced before use");
                match &mut ops[at] {
                    Op::NodeScan { filters, .. } => filters.push(p),
                    Op::Expand { to_filters, .. } => to_filters.push(p),
                    Op::ExpandEdge { to, to_filters, .. } if *to == *v => to_filters.push(p),
                    _ => ops.insert(at + 1, Op::Filter(p)),
                }
            }
            _ => {
                // After every variable it reads is bound (outer ones already are).
                let at = vars
                    .iter()
                    .filter(|v| **v >= outer_vars)
                    .filter_map(|v| introduced_at(*v))
                    .max()
                    .map_or(0, |i| i + 1);
                ops.insert(at, Op::Filter(p));
            }
        }
    }
}

/// The operator that binds variable `v`, if one of `ops` does.
fn introduced_at(ops: &[Op], v: usize) -> Option<usize> {
    ops.iter().position(|op| match op {
        Op::NodeScan { var, .. } => *var == v,
        Op::Expand {
            to,
            to_bound: false,
            ..
        } => *to == v,
        Op::ExpandEdge {
            to,
            edge_var,
            to_bound,
            ..
        } => (*to == v && !to_bound) || *edge_var == v,
        _ => false,
    })
}

/// Most arms a query binding interfaces may have (the product of the
/// implementor counts of its interface-bound variables).
pub const MAX_INTERFACE_ARMS: usize = 64;

/// Check a read query. A query that binds interfaces is checked once per
/// choice of concrete node types (its arms); an arm whose types cannot
/// match (a traversal the chosen type is not an endpoint of) contributes no
/// rows, and only if no arm can match is that the error.
pub fn check(catalog: &Catalog, q: &QueryDecl) -> Result<Plan> {
    let choices = interface_choices(catalog, q)?;
    let several = choices.len() > 1;
    let mut arms = Vec::new();
    let mut unmatched = None;
    for choice in choices {
        match check_arm(catalog, q, choice) {
            Ok(p) => arms.push(p),
            Err(e @ OmniError::Type { code, .. })
                if several
                    && (code == Code::EdgeDirection.id()
                        || code == Code::VariableTypeClash.id()) =>
            {
                unmatched.get_or_insert(e);
            }
            Err(e) => return Err(e),
        }
    }
    let mut arms = arms.into_iter();
    let Some(mut plan) = arms.next() else {
        return Err(unmatched.expect("a query has at least one arm"));
    };
    plan.union = arms.collect();
    Ok(plan)
}

/// Every choice of a concrete node type for each variable bound to an
/// interface in the query's top-level match (one empty choice if none).
fn interface_choices(catalog: &Catalog, q: &QueryDecl) -> Result<Vec<BTreeMap<String, String>>> {
    let Body::Read(r) = &q.body else {
        return Ok(vec![BTreeMap::new()]);
    };
    let mut choices = vec![BTreeMap::new()];
    let mut seen = std::collections::BTreeSet::new();
    for c in &r.clauses {
        let Clause::Binding {
            var,
            type_name,
            pos,
            ..
        } = c
        else {
            continue;
        };
        if !catalog.interfaces.iter().any(|i| &i.name == type_name) || !seen.insert(var) {
            continue;
        }
        let implementors: Vec<&str> = catalog
            .nodes()
            .filter(|n| n.implements.contains(type_name))
            .map(|n| n.name.as_str())
            .collect();
        if implementors.is_empty() {
            return Err(type_error(
                Code::UnknownType,
                *pos,
                format!("no node type implements {type_name}"),
            ));
        }
        if choices.len() * implementors.len() > MAX_INTERFACE_ARMS {
            return Err(type_error(
                Code::Unsupported,
                *pos,
                format!(
                    "the interface bindings of '{}' give more than {MAX_INTERFACE_ARMS} combinations of node types",
                    q.name
                ),
            ));
        }
        choices = choices
            .into_iter()
            .flat_map(|c| {
                implementors.iter().map(move |t| {
                    let mut c = c.clone();
                    c.insert(var.clone(), t.to_string());
                    c
                })
            })
            .collect();
    }
    Ok(choices)
}

/// The return column an order item sorts by: a return alias, an existing
/// column, or a hidden column added for it.
fn order_column(
    c: &Checker,
    o: &OrderItem,
    returns: &mut Vec<ReturnCol>,
    aggregate: bool,
) -> Result<usize> {
    let pos = o.expr.pos();
    let by_alias = match &o.expr {
        Expr::Alias { name, .. } => returns.iter().position(|r| r.name == *name),
        _ => None,
    };
    let col = match by_alias {
        Some(i) => i,
        None => {
            let expr = match c.ret_expr(&o.expr, returns) {
                Ok(e) => e,
                Err(OmniError::Type { code, .. })
                    if code == Code::UnknownVariable.id()
                        && matches!(o.expr, Expr::Alias { .. }) =>
                {
                    return Err(type_error(
                        Code::UnknownOrderItem,
                        pos,
                        "order names neither a return alias nor an expression",
                    ));
                }
                Err(OmniError::Type { code, message, .. })
                    if code == Code::BareEdgeReturned.id() =>
                {
                    return Err(type_error(Code::BareEdgeReturned, pos, message));
                }
                Err(e) => return Err(e),
            };
            if let RetExpr::Node { .. } = expr {
                return Err(type_error(
                    Code::UnknownOrderItem,
                    pos,
                    "order by a property, not a whole node",
                ));
            }
            match returns.iter().position(|r| r.expr == expr) {
                Some(i) => i,
                None => {
                    if aggregate && !matches!(expr, RetExpr::Agg { .. }) {
                        return Err(type_error(
                            Code::MisplacedAggregate,
                            pos,
                            "in an aggregate query, order by a group key or an aggregate",
                        ));
                    }
                    returns.push(ReturnCol {
                        name: format!("__order{}", returns.len()),
                        expr,
                        visible: false,
                    });
                    returns.len() - 1
                }
            }
        }
    };
    Ok(col)
}

/// Scores are per row (never grouped), and a fusion ranks each side's
/// top `limit` rows, so it needs one.
fn search_rules(
    returns: &[ReturnCol],
    aggregate: bool,
    limit: Option<u64>,
    pos: Pos,
) -> Result<()> {
    let scored = returns
        .iter()
        .any(|r| matches!(r.expr, RetExpr::Score(_) | RetExpr::Fused { .. }));
    if aggregate && scored {
        return Err(type_error(
            Code::MisplacedAggregate,
            pos,
            "search scores are per row: they cannot be returned beside aggregates",
        ));
    }
    let fused = returns
        .iter()
        .any(|r| matches!(r.expr, RetExpr::Fused { .. }));
    if fused && limit.is_none() {
        return Err(type_error(
            Code::NearestWithoutLimit,
            pos,
            "rrf(...) fuses each ranking's top `limit` rows: it needs a limit",
        ));
    }
    Ok(())
}

/// Check one arm: interface-bound variables take the types in `choice`.
fn check_arm(catalog: &Catalog, q: &QueryDecl, choice: BTreeMap<String, String>) -> Result<Plan> {
    let Body::Read(r) = &q.body else {
        return Err(type_error(
            Code::WrongKind,
            q.pos,
            format!("'{}' is a mutation; run it with mutate", q.name),
        ));
    };
    let params = declare_params(q)?;
    let mut c = Checker::new(catalog, params.clone());
    c.choice = choice;
    let ops = c.clauses(&r.clauses)?;
    // nearest(...) ordering requires a limit (checked before "not supported").
    for o in &r.order {
        if let Expr::Call { func, pos, .. } = &o.expr
            && (func == "nearest" || func == "rrf")
            && r.limit.is_none()
        {
            return Err(type_error(
                Code::NearestWithoutLimit,
                *pos,
                format!("ordering by {func}(...) needs a limit"),
            ));
        }
    }
    let mut returns: Vec<ReturnCol> = Vec::new();
    for item in &r.returns {
        let expr = c.ret_expr(&item.expr, &mut returns)?;
        returns.push(ReturnCol {
            name: item.column().to_string(),
            expr,
            visible: true,
        });
    }
    let aggregate = returns
        .iter()
        .any(|r| matches!(r.expr, RetExpr::Agg { .. }));
    let mut order = Vec::new();
    for o in &r.order {
        let col = order_column(&c, o, &mut returns, aggregate)?;
        order.push(OrderKey { col, desc: o.desc });
    }
    search_rules(&returns, aggregate, r.limit, q.pos)?;
    Ok(Plan {
        name: q.name.clone(),
        vars: c.vars,
        ops,
        returns,
        aggregate,
        order,
        limit: r.limit,
        params: params.into_iter().map(|(n, (t, o))| (n, t, o)).collect(),
        union: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compiler::query::parser::parse;
    use crate::compiler::schema::compile;

    fn cat() -> Catalog {
        compile(
            "node Person { name: String @key\n age: I32?\n tags: [String]?\n photo: Blob?\n born: Date? }\nnode Company { name: String @key }\nedge Knows: Person -> Person { since: Date? }\nedge WorksAt: Person -> Company { role: String? }",
        )
        .unwrap()
    }

    fn plan(src: &str) -> Result<Plan> {
        let f = parse(src)?;
        check(&cat(), &f.queries[0])
    }

    fn code(src: &str) -> &'static str {
        match plan(src) {
            Err(OmniError::Type { code, .. }) => code,
            other => panic!("expected a type error, got {other:?}"),
        }
    }

    #[test]
    fn filters_move_onto_the_scan_or_expand_that_introduces_them() {
        let p = plan(
            "query q($n: String, $a: I32?) { match { $p: Person { name: $n }\n $p knows $f\n $f.age >= $a\n $p.age < $f.age } return { $f.name } }",
        )
        .unwrap();
        assert!(matches!(&p.ops[0], Op::NodeScan { filters, .. } if filters.len() == 1));
        assert!(
            matches!(&p.ops[1], Op::Expand { to_filters, dir: Dir::Out, .. } if to_filters.len() == 1)
        );
        assert!(matches!(&p.ops[2], Op::Filter(_)));
        assert_eq!(p.edge_types(), vec!["Knows"]);
    }

    #[test]
    fn traversal_from_a_bound_target_runs_backwards() {
        let p = plan("query q() { match { $c: Company { name: \"Acme\" }\n $p worksAt $c } return { $p.name } }").unwrap();
        assert!(matches!(&p.ops[1], Op::Expand { dir: Dir::In, .. }));
    }

    #[test]
    fn anti_join_sees_outer_variables() {
        let p =
            plan("query q() { match { $p: Person\n not { $p knows $_ } } return { count($p) } }")
                .unwrap();
        assert!(matches!(&p.ops[1], Op::AntiJoin(inner) if inner.len() == 1));
        assert!(p.aggregate);
    }

    #[test]
    fn type_errors_have_stable_codes() {
        assert_eq!(
            code("query q() { match { $p: Robot } return { $p } }"),
            "Q001"
        );
        assert_eq!(
            code("query q() { match { $p: Person } return { $p.height } }"),
            "Q002"
        );
        assert_eq!(
            code("query q() { match { $p: Person\n $p likes $f } return { $f } }"),
            "Q003"
        );
        assert_eq!(
            code("query q() { match { $c: Company\n $c knows $f } return { $f } }"),
            "Q004"
        );
        assert_eq!(
            code("query q() { match { $p: Person\n $p <worksAt> $c } return { $c } }"),
            "Q005"
        );
        assert_eq!(
            code("query q() { match { $p: Person\n $p $w:knows{1,2} $f } return { $f } }"),
            "Q006"
        );
        assert_eq!(
            code("query q() { match { $p: Person\n $p $w:knows $f } return { $w } }"),
            "Q007"
        );
        assert_eq!(
            code("query q() { match { $p: Person } return { $p.photo } }"),
            "Q008"
        );
        assert_eq!(
            code("query q() { match { $p: Person\n $p.age = \"x\" } return { $p } }"),
            "Q009"
        );
        assert_eq!(
            code("query q() { match { $p: Person\n $p.name = $nope } return { $p } }"),
            "Q010"
        );
        assert_eq!(
            code(
                "query q($v: Vector(2)) { match { $p: Person } return { $p } order { nearest($p.name, $v) } }"
            ),
            "Q011"
        );
        assert_eq!(
            code("query q() { match { $p: Person } return { frobnicate($p.name) } }"),
            "Q015"
        );
        assert_eq!(
            code("query q() { match { $p: Person } return { $x.name } }"),
            "Q013"
        );
        assert_eq!(
            code("query q() { match { $p: Person } return { $p.name } order { nope } }"),
            "Q017"
        );
        assert_eq!(
            code("query q() { match { $p: Person\n $c: Company\n $p knows $c } return { $p } }"),
            "Q004"
        );
        assert_eq!(code("query q() { insert Person { name: \"x\" } }"), "Q020");
    }

    #[test]
    fn order_uses_aliases_or_adds_hidden_columns() {
        let p = plan("query q() { match { $p: Person } return { $p.name as n } order { n desc, $p.age } limit 3 }").unwrap();
        assert_eq!(p.order.len(), 2);
        assert_eq!(p.order[0].col, 0);
        assert!(!p.returns[p.order[1].col].visible);
        assert_eq!(p.limit, Some(3));
    }
}
