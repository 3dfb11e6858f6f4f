//! The search functions' checks: `nearest` and `bm25` as scores (returned
//! or ordered), `rrf` as the fusion of two of them, and `search`,
//! `match_text` and `fuzzy` as match filters.

use super::ast::{Expr, Lit};
use super::check::{Checker, type_error};
use super::codes::Code;
use super::ir::{self, Embed, Op, RetExpr, ReturnCol, Score, TextTest, ValExpr};
use crate::compiler::catalog::PropType;
use crate::compiler::lexer::Pos;
use crate::compiler::value::Value;
use crate::error::Result;

/// `rrf`'s constant when the query gives none.
pub const RRF_DEFAULT_K: u32 = 60;
/// The most edits `fuzzy` accepts.
pub const MAX_FUZZY_EDITS: u32 = 2;

fn arg_error(pos: Pos, message: impl Into<String>) -> crate::error::OmniError {
    type_error(Code::SearchArgument, pos, message)
}

/// Is `func` a score (`nearest`, `bm25`, `rrf`)?
pub fn is_score(func: &str) -> bool {
    matches!(func, "nearest" | "bm25" | "rrf")
}

/// Is `func` a text filter (`search`, `match_text`, `fuzzy`)?
pub fn is_text_filter(func: &str) -> bool {
    matches!(func, "search" | "match_text" | "fuzzy")
}

impl Checker<'_> {
    /// `$x.prop` of a bound node, of a type `fits` accepts (`what` names it).
    fn search_target(
        &self,
        func: &str,
        e: &Expr,
        fits: fn(&PropType) -> bool,
        what: &str,
    ) -> Result<(usize, String, PropType)> {
        let Expr::Prop { var, prop, pos } = e else {
            return Err(arg_error(
                e.pos(),
                format!("{func}(...) searches a node's property: {func}($x.prop, ...)"),
            ));
        };
        let v = self.var(var, *pos)?;
        if self.var_type(v).is_edge() {
            return Err(arg_error(
                *pos,
                format!("{func}(...) searches node properties; ${var} is an edge"),
            ));
        }
        let (_, t) = self.prop_expr(v, prop, *pos)?;
        let ir::ValType::Known(ty) = t else {
            unreachable!("a property has a type")
        };
        if !fits(&ty) {
            return Err(type_error(
                Code::TypeMismatch,
                *pos,
                format!(
                    "{func}(...) needs {what} property; ${var}.{prop} is {}",
                    ty.describe()
                ),
            ));
        }
        Ok((v, prop.clone(), ty))
    }

    /// A query argument: a parameter or a literal, with its type.
    fn search_query(&self, func: &str, e: &Expr) -> Result<(ValExpr, ir::ValType)> {
        let (v, t) = self.value(e)?;
        if matches!(v, ValExpr::Prop { .. } | ValExpr::Id { .. } | ValExpr::Now) {
            return Err(arg_error(
                e.pos(),
                format!("{func}(...)'s query is a parameter or a literal"),
            ));
        }
        Ok((v, t))
    }

    /// A text query: a String parameter or literal.
    fn text_query(&self, func: &str, e: &Expr) -> Result<ValExpr> {
        let (v, t) = self.search_query(func, e)?;
        match t {
            ir::ValType::Known(PropType::String) | ir::ValType::Any => Ok(v),
            ir::ValType::Known(other) => Err(type_error(
                Code::TypeMismatch,
                e.pos(),
                format!("{func}(...)'s query is a String, not {}", other.describe()),
            )),
        }
    }

    /// `nearest(...)` or `bm25(...)`.
    pub(super) fn score(&self, func: &str, args: &[Expr], pos: Pos) -> Result<Score> {
        let [target, query] = args else {
            return Err(arg_error(
                pos,
                format!("{func}(...) takes a property and a query: {func}($x.prop, $q)"),
            ));
        };
        if func == "bm25" {
            let (var, prop, _) =
                self.search_target(func, target, |t| *t == PropType::String, "a String")?;
            let query = self.text_query(func, query)?;
            return Ok(Score::Bm25 { var, prop, query });
        }
        let (var, prop, ty) = self.search_target(
            func,
            target,
            |t| matches!(t, PropType::Vector(_)),
            "a Vector",
        )?;
        let PropType::Vector(dim) = ty else {
            unreachable!("checked: a Vector property")
        };
        let (q, qt) = self.search_query(func, query)?;
        let (query, embed) = match (q, qt) {
            (q, ir::ValType::Known(PropType::Vector(n))) if n == dim => (q, None),
            (_, ir::ValType::Known(PropType::Vector(n))) => {
                return Err(type_error(
                    Code::TypeMismatch,
                    query.pos(),
                    format!("the query vector has {n} dimensions; {prop} has {dim}"),
                ));
            }
            (ValExpr::Const(Value::List(items)), _) => (
                ValExpr::Const(literal_vector(&items, dim, query.pos())?),
                None,
            ),
            (q, ir::ValType::Known(PropType::String)) => {
                let spec = self
                    .var_type(var)
                    .property(&prop)
                    .and_then(|p| p.embed.as_ref());
                let Some(spec) = spec else {
                    return Err(type_error(
                        Code::TypeMismatch,
                        query.pos(),
                        format!(
                            "a text query needs {prop} to declare @embed(\"source\"); it is a plain Vector({dim})"
                        ),
                    ));
                };
                let embed = Embed {
                    model: spec.model.clone(),
                    dim,
                };
                (q, Some(embed))
            }
            (_, other) => {
                let shown = match other {
                    ir::ValType::Known(t) => t.describe(),
                    ir::ValType::Any => "null".into(),
                };
                return Err(type_error(
                    Code::TypeMismatch,
                    query.pos(),
                    format!("nearest(...)'s query is a Vector({dim}) or a String, not {shown}"),
                ));
            }
        };
        Ok(Score::Nearest {
            var,
            prop,
            query,
            embed,
        })
    }

    /// A score in return or order: `nearest`, `bm25`, or `rrf` (whose two
    /// sides become hidden columns of `returns`).
    pub(super) fn score_expr(
        &self,
        func: &str,
        args: &[Expr],
        pos: Pos,
        returns: &mut Vec<ReturnCol>,
    ) -> Result<RetExpr> {
        if func != "rrf" {
            return Ok(RetExpr::Score(self.score(func, args, pos)?));
        }
        let (a, b, k) = match args {
            [a, b] => (a, b, RRF_DEFAULT_K),
            [
                a,
                b,
                Expr::Lit {
                    lit: Lit::Int(k), ..
                },
            ] if *k >= 1 && *k <= u32::MAX as i64 => (a, b, *k as u32),
            [_, _, k] => {
                return Err(arg_error(k.pos(), "rrf(...)'s k is a positive integer"));
            }
            _ => {
                return Err(arg_error(
                    pos,
                    "rrf(...) fuses two rankings: rrf(nearest(...), bm25(...) [, k])",
                ));
            }
        };
        let mut sides = [0; 2];
        for (i, side) in [a, b].into_iter().enumerate() {
            let Expr::Call { func, args, pos } = side else {
                return Err(arg_error(
                    side.pos(),
                    "rrf(...) fuses rankings: each side is nearest(...) or bm25(...)",
                ));
            };
            if !matches!(func.as_str(), "nearest" | "bm25") {
                return Err(arg_error(
                    *pos,
                    format!("rrf(...) fuses rankings: {func}(...) is not nearest or bm25"),
                ));
            }
            let expr = RetExpr::Score(self.score(func, args, *pos)?);
            sides[i] = match returns.iter().position(|r| r.expr == expr) {
                Some(at) => at,
                None => {
                    returns.push(ReturnCol {
                        name: format!("__rank{}", returns.len()),
                        expr,
                        visible: false,
                    });
                    returns.len() - 1
                }
            };
        }
        Ok(RetExpr::Fused { sides, k })
    }

    /// `search`, `match_text` or `fuzzy` in a match: the filter operator.
    pub(super) fn text_filter(&self, func: &str, args: &[Expr], pos: Pos) -> Result<Op> {
        let (target, query, edits) = match (func, args) {
            ("fuzzy", [t, q]) => (t, q, Some(1)),
            ("fuzzy", [t, q, e]) => {
                let Expr::Lit {
                    lit: Lit::Int(n), ..
                } = e
                else {
                    return Err(arg_error(e.pos(), "fuzzy(...)'s max_edits is an integer"));
                };
                if !(0..=MAX_FUZZY_EDITS as i64).contains(n) {
                    return Err(arg_error(
                        e.pos(),
                        format!("fuzzy(...)'s max_edits is 0 to {MAX_FUZZY_EDITS}, not {n}"),
                    ));
                }
                (t, q, Some(*n as u32))
            }
            (_, [t, q]) if func != "fuzzy" => (t, q, None),
            _ => {
                return Err(arg_error(
                    pos,
                    format!("{func}(...) takes a property and a query: {func}($x.prop, $q)"),
                ));
            }
        };
        let (var, prop, _) =
            self.search_target(func, target, |t| *t == PropType::String, "a String")?;
        let query = self.text_query(func, query)?;
        let test = match (func, edits) {
            ("search", _) => TextTest::All,
            ("match_text", _) => TextTest::Phrase,
            (_, Some(e)) => TextTest::Fuzzy(e),
            _ => unreachable!("fuzzy has its edits"),
        };
        Ok(Op::TextFilter {
            var,
            prop,
            test,
            query,
        })
    }
}

/// A literal list of numbers as a query vector of `dim` dimensions, typed
/// as a Vector property's value is.
fn literal_vector(items: &[Value], dim: u32, pos: Pos) -> Result<Value<'static>> {
    if items.len() != dim as usize {
        return Err(type_error(
            Code::TypeMismatch,
            pos,
            format!("the query vector has {} dimensions, not {dim}", items.len()),
        ));
    }
    crate::compiler::value::typed(&PropType::Vector(dim), Value::List(items.to_vec()))
        .map(Value::into_owned)
        .map_err(|why| type_error(Code::TypeMismatch, pos, format!("the query vector: {why}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compiler::catalog::Catalog;
    use crate::compiler::query::check::check;
    use crate::compiler::query::ir::Plan;
    use crate::compiler::query::parser::parse;
    use crate::compiler::schema::compile;
    use crate::error::OmniError;

    fn cat() -> Catalog {
        compile(
            "node Doc { slug: String @key\n body: String?\n n: I32?\n emb: Vector(3)? @embed(\"body\")\n raw: Vector(3)? }\nnode Person { name: String @key }\nedge Wrote: Person -> Doc",
        )
        .unwrap()
    }

    fn plan(src: &str) -> Result<Plan> {
        let f = parse(src)?;
        check(&cat(), &f.queries[0])
    }

    fn refused(src: &str) -> (&'static str, String) {
        match plan(src) {
            Err(OmniError::Type { code, message, .. }) => (code, message),
            other => panic!("expected a type error for {src}, got {other:?}"),
        }
    }

    #[test]
    fn scores_and_filters_lower_to_the_plan() {
        let p = plan(
            "query q($v: Vector(3), $t: String) { match { $p: Person\n $p wrote $d\n fuzzy($d.body, $t, 2) }
             return { $d.slug, rrf(nearest($d.emb, $v), bm25($d.body, $t), 10) as r } order { r desc } limit 5 }",
        )
        .unwrap();
        // The text filter runs right after the traversal binds $d.
        assert!(matches!(
            &p.ops[2],
            Op::TextFilter {
                var: 1,
                test: TextTest::Fuzzy(2),
                ..
            }
        ));
        let fused = p.returns.iter().find(|r| r.name == "r").unwrap();
        let RetExpr::Fused { sides, k } = &fused.expr else {
            panic!("rrf lowers to a fusion: {:?}", fused.expr)
        };
        assert_eq!(*k, 10);
        assert!(sides.iter().all(|&s| !p.returns[s].visible));
        assert!(matches!(
            p.returns[sides[0]].expr,
            RetExpr::Score(Score::Nearest { embed: None, .. })
        ));
        assert!(matches!(
            p.returns[sides[1]].expr,
            RetExpr::Score(Score::Bm25 { .. })
        ));
    }

    #[test]
    fn a_text_query_of_nearest_is_embedded_with_the_property_model() {
        let p = plan(
            "query q($t: String) { match { $d: Doc } return { $d.slug } order { nearest($d.emb, $t) } limit 3 }",
        )
        .unwrap();
        let hidden = p.returns.iter().find(|r| !r.visible).unwrap();
        assert!(matches!(
            &hidden.expr,
            RetExpr::Score(Score::Nearest {
                embed: Some(Embed {
                    model: None,
                    dim: 3
                }),
                ..
            })
        ));
        let (code, msg) = refused(
            "query q($t: String) { match { $d: Doc } return { $d.slug } order { nearest($d.raw, $t) } limit 3 }",
        );
        assert_eq!(code, "Q009");
        assert!(msg.contains("@embed"), "{msg}");
    }

    #[test]
    fn bad_search_arguments_have_their_codes() {
        let cases = [
            // nearest without a limit
            (
                "query q($v: Vector(3)) { match { $d: Doc } return { $d.slug } order { nearest($d.emb, $v) } }",
                "Q011",
                "limit",
            ),
            (
                "query q($v: Vector(3), $t: String) { match { $d: Doc } return { rrf(nearest($d.emb, $v), bm25($d.body, $t)) } }",
                "Q011",
                "limit",
            ),
            // wrong property types
            (
                "query q($v: Vector(3)) { match { $d: Doc } return { nearest($d.body, $v) } limit 1 }",
                "Q009",
                "Vector property",
            ),
            (
                "query q($t: String) { match { $d: Doc } return { bm25($d.n, $t) } }",
                "Q009",
                "String property",
            ),
            (
                "query q($t: String) { match { $d: Doc\n search($d.n, $t) } return { $d.slug } }",
                "Q009",
                "String property",
            ),
            (
                "query q($t: String) { match { $d: Doc\n fuzzy($d.emb, $t) } return { $d.slug } }",
                "Q009",
                "String property",
            ),
            // wrong query types and dimensions
            (
                "query q($v: Vector(4)) { match { $d: Doc } return { nearest($d.emb, $v) } limit 1 }",
                "Q009",
                "4 dimensions",
            ),
            (
                "query q($n: I32) { match { $d: Doc } return { bm25($d.body, $n) } }",
                "Q009",
                "query is a String",
            ),
            (
                "query q() { match { $d: Doc } return { nearest($d.emb, [1, 2]) } limit 1 }",
                "Q009",
                "2 dimensions",
            ),
            (
                "query q() { match { $d: Doc } return { nearest($d.emb, [1, 2, \"x\"]) } limit 1 }",
                "Q009",
                "element 2 is a string, not a number",
            ),
            (
                "query q() { match { $d: Doc } return { nearest($d.emb, [1, 1e300, 0]) } limit 1 }",
                "Q009",
                "not a finite 32-bit float",
            ),
            // shapes
            (
                "query q($t: String) { match { $d: Doc } return { rrf(bm25($d.body, $t), $d.n) } limit 1 }",
                "Q023",
                "rrf",
            ),
            (
                "query q($t: String) { match { $d: Doc } return { rrf(bm25($d.body, $t), count($d)) } limit 1 }",
                "Q023",
                "not nearest or bm25",
            ),
            (
                "query q($t: String) { match { $d: Doc\n fuzzy($d.body, $t, 3) } return { $d.slug } }",
                "Q023",
                "0 to 2",
            ),
            (
                "query q($t: String) { match { $d: Doc\n fuzzy($d.body, $t, -1) } return { $d.slug } }",
                "Q023",
                "0 to 2",
            ),
            (
                "query q($t: String) { match { $d: Doc\n search($d.body, $d.slug) } return { $d.slug } }",
                "Q023",
                "parameter or a literal",
            ),
            (
                "query q($t: String) { match { $d: Doc\n $p: Person\n $p $w:wrote $d\n search($w.x, $t) } return { $d.slug } }",
                "Q023",
                "edge",
            ),
            (
                "query q($t: String) { match { $d: Doc\n bm25($d.body, $t) > 1 } return { $d.slug } }",
                "Q023",
                "is a score",
            ),
            (
                "query q($t: String) { match { $d: Doc } return { search($d.body, $t) } }",
                "Q023",
                "match filter",
            ),
            (
                "query q($t: String) { match { $d: Doc } return { count($d), bm25($d.body, $t) } }",
                "Q018",
                "per row",
            ),
        ];
        for (src, want, says) in cases {
            let (code, msg) = refused(src);
            assert_eq!(code, want, "{src}: {msg}");
            assert!(msg.contains(says), "{src}: {msg}");
        }
    }
}
