//! The `.gq` parser: query declarations with parameters, read bodies
//! (`match`/`return`/`order`/`limit`) and mutation bodies
//! (`insert`/`update`/`delete`). Errors carry line, column and the line's text.

use super::ast::*;
use crate::compiler::catalog::PropType;
use crate::compiler::lexer::{Cursor, Tok};
use crate::error::Result;

pub fn parse(src: &str) -> Result<QueryFile> {
    let mut p = Parser {
        c: Cursor::new(src)?,
    };
    let mut queries = Vec::new();
    while !p.c.at(&Tok::Eof) {
        queries.push(p.query()?);
    }
    Ok(QueryFile { queries })
}

struct Parser<'a> {
    c: Cursor<'a>,
}

const TEXT_FILTERS: &[&str] = &["search", "fuzzy", "match_text"];

impl Parser<'_> {
    fn query(&mut self) -> Result<QueryDecl> {
        let pos = self.c.expect_keyword("query")?;
        let (name, _) = self.c.expect_ident("a query name")?;
        self.c.expect(&Tok::LParen, "'(' after the query name")?;
        let params = self.comma_list(Self::param)?;
        self.c.expect(&Tok::RParen, "')' closing the parameters")?;
        // Annotations such as @description("...") are accepted and kept out of the plan.
        while self.c.eat(&Tok::At) {
            self.c.expect_ident("an annotation name")?;
            if self.c.eat(&Tok::LParen) {
                let mut depth = 1;
                while depth > 0 {
                    match self.c.bump().tok {
                        Tok::LParen => depth += 1,
                        Tok::RParen => depth -= 1,
                        Tok::Eof => return Err(self.c.error("unterminated annotation")),
                        _ => {}
                    }
                }
            }
        }
        self.c.expect(&Tok::LBrace, "'{' opening the query body")?;
        let body = if self.c.at_ident("match") {
            Body::Read(self.read_body()?)
        } else {
            let mut stmts = Vec::new();
            while !self.c.at(&Tok::RBrace) {
                stmts.push(self.statement()?);
            }
            if stmts.is_empty() {
                return Err(self
                    .c
                    .error("expected 'match', 'insert', 'update' or 'delete'"));
            }
            Body::Mutation(stmts)
        };
        self.c.expect(&Tok::RBrace, "'}' closing the query body")?;
        Ok(QueryDecl {
            name,
            params,
            body,
            pos,
        })
    }

    fn param(&mut self) -> Result<Param> {
        let pos = self.c.pos();
        let name = match self.c.bump().tok {
            Tok::Var(v) => v,
            other => {
                return Err(self.c.error_at(
                    pos,
                    format!(
                        "expected a parameter like $name, found {}",
                        other.describe()
                    ),
                ));
            }
        };
        self.c.expect(&Tok::Colon, "':' after the parameter name")?;
        let ty = self.param_type()?;
        let optional = self.c.eat(&Tok::Question);
        Ok(Param {
            name,
            ty,
            optional,
            pos,
        })
    }

    fn param_type(&mut self) -> Result<PropType> {
        if self.c.eat(&Tok::LBracket) {
            let inner = self.param_type()?;
            self.c.expect(&Tok::RBracket, "']'")?;
            return Ok(PropType::List(Box::new(inner)));
        }
        let (name, pos) = self.c.expect_ident("a parameter type")?;
        if let Some(t) = PropType::scalar_named(&name) {
            return Ok(t);
        }
        Ok(match name.as_str() {
            "Vector" => {
                self.c.expect(&Tok::LParen, "'(' after Vector")?;
                let n = match self.c.bump().tok {
                    Tok::Int(n) if n >= 1 => n as u32,
                    _ => return Err(self.c.error("Vector dimension must be a positive integer")),
                };
                self.c.expect(&Tok::RParen, "')'")?;
                PropType::Vector(n)
            }
            // For mutations that write a Blob property.
            "Blob" => PropType::Blob,
            other => {
                return Err(self
                    .c
                    .error_at(pos, format!("unknown parameter type '{other}'")));
            }
        })
    }

    fn read_body(&mut self) -> Result<ReadQuery> {
        self.c.expect_keyword("match")?;
        let clauses = self.clause_block()?;
        self.c.expect_keyword("return")?;
        self.c.expect(&Tok::LBrace, "'{' after return")?;
        let mut returns = Vec::new();
        while !self.c.at(&Tok::RBrace) {
            let start = self.c.offset();
            let expr = self.expr()?;
            let end = self.c.offset();
            let text = self.c.src[start..end].trim().replace('$', "");
            let alias = if self.c.at_ident("as") {
                self.c.bump();
                Some(self.c.expect_ident("an alias")?.0)
            } else {
                None
            };
            returns.push(ReturnItem { expr, alias, text });
            self.c.eat(&Tok::Comma);
        }
        self.c.bump();
        if returns.is_empty() {
            return Err(self.c.error("return needs at least one item"));
        }
        let mut order = Vec::new();
        if self.c.at_ident("order") {
            self.c.bump();
            self.c.expect(&Tok::LBrace, "'{' after order")?;
            while !self.c.at(&Tok::RBrace) {
                let expr = self.expr()?;
                let desc = if self.c.at_ident("desc") {
                    self.c.bump();
                    true
                } else {
                    if self.c.at_ident("asc") {
                        self.c.bump();
                    }
                    false
                };
                order.push(OrderItem { expr, desc });
                self.c.eat(&Tok::Comma);
            }
            self.c.bump();
        }
        let mut limit = None;
        if self.c.at_ident("limit") {
            self.c.bump();
            match self.c.bump().tok {
                Tok::Int(n) if n >= 0 => limit = Some(n as u64),
                _ => return Err(self.c.error("limit takes a non-negative integer")),
            }
        }
        Ok(ReadQuery {
            clauses,
            returns,
            order,
            limit,
        })
    }

    fn clause_block(&mut self) -> Result<Vec<Clause>> {
        self.c.expect(&Tok::LBrace, "'{'")?;
        let mut clauses = Vec::new();
        while !self.c.at(&Tok::RBrace) {
            clauses.push(self.clause()?);
            self.c.eat(&Tok::Comma);
        }
        self.c.bump();
        if clauses.is_empty() {
            return Err(self.c.error("a match block needs at least one clause"));
        }
        Ok(clauses)
    }

    fn var(&mut self) -> Result<String> {
        match self.c.bump().tok {
            Tok::Var(v) => Ok(v),
            other => Err(self.c.error(format!(
                "expected a variable like $x, found {}",
                other.describe()
            ))),
        }
    }

    fn hops(&mut self) -> Result<(u32, Option<u32>)> {
        if !self.c.at(&Tok::LBrace) {
            return Ok((1, Some(1)));
        }
        let pos = self.c.pos();
        self.c.bump();
        let min = match self.c.bump().tok {
            Tok::Int(n) if (0..=1000).contains(&n) => n as u32,
            _ => return Err(self.c.error_at(pos, "hop bounds look like {1,3} or {2,}")),
        };
        let max = if self.c.eat(&Tok::Comma) {
            match self.c.peek().clone() {
                Tok::Int(n) if (0..=1000).contains(&n) => {
                    self.c.bump();
                    Some(n as u32)
                }
                _ => None,
            }
        } else {
            Some(min)
        };
        self.c.expect(&Tok::RBrace, "'}' closing the hop bounds")?;
        if max.is_some_and(|m| m < min) || max == Some(0) {
            return Err(self
                .c
                .error_at(pos, "hop bounds need 1 <= max and min <= max"));
        }
        Ok((min, max))
    }

    // One arm per clause form of the match grammar.
    fn clause(&mut self) -> Result<Clause> {
        let pos = self.c.pos();
        if self.c.at_ident("not") && self.c.peek_at(1) == &Tok::LBrace {
            self.c.bump();
            let clauses = self.clause_block()?;
            return Ok(Clause::Not { clauses, pos });
        }
        if let Tok::Ident(f) = self.c.peek().clone()
            && TEXT_FILTERS.contains(&f.as_str())
            && self.c.peek_at(1) == &Tok::LParen
        {
            self.c.bump();
            let args = self.args()?;
            return Ok(Clause::TextFilter { func: f, args, pos });
        }
        if let Tok::Var(v) = self.c.peek().clone() {
            match (
                self.c.peek_at(1).clone(),
                self.c.peek_at(2).clone(),
                self.c.peek_at(3).clone(),
            ) {
                (Tok::Colon, Tok::Ident(ty), _) => {
                    self.c.bump();
                    self.c.bump();
                    self.c.bump();
                    let mut props = Vec::new();
                    if self.c.eat(&Tok::LBrace) {
                        while !self.c.at(&Tok::RBrace) {
                            let (p, _) = self.c.expect_ident("a property name")?;
                            self.c.expect(&Tok::Colon, "':' after the property")?;
                            props.push((p, self.value()?));
                            self.c.eat(&Tok::Comma);
                        }
                        self.c.bump();
                    }
                    return Ok(Clause::Binding {
                        var: v,
                        type_name: ty,
                        props,
                        pos,
                    });
                }
                (Tok::Ident(edge), _, _) if edge != "contains" && edge != "starts_with" => {
                    self.c.bump();
                    self.c.bump();
                    let (min, max) = self.hops()?;
                    let to = self.var()?;
                    return Ok(Clause::Traverse {
                        from: v,
                        edge,
                        edge_var: None,
                        to,
                        min,
                        max,
                        undirected: false,
                        pos,
                    });
                }
                (Tok::Lt, Tok::Ident(edge), Tok::Gt) => {
                    self.c.bump();
                    self.c.bump();
                    self.c.bump();
                    self.c.bump();
                    let (min, max) = self.hops()?;
                    let to = self.var()?;
                    return Ok(Clause::Traverse {
                        from: v,
                        edge,
                        edge_var: None,
                        to,
                        min,
                        max,
                        undirected: true,
                        pos,
                    });
                }
                (Tok::Var(w), Tok::Colon, Tok::Ident(edge)) => {
                    self.c.bump();
                    self.c.bump();
                    self.c.bump();
                    self.c.bump();
                    let (min, max) = self.hops()?;
                    let to = self.var()?;
                    return Ok(Clause::Traverse {
                        from: v,
                        edge,
                        edge_var: Some(w),
                        to,
                        min,
                        max,
                        undirected: false,
                        pos,
                    });
                }
                _ => {}
            }
        }
        let left = self.expr()?;
        let op = self.cmp_op()?;
        let right = self.expr()?;
        Ok(Clause::Filter {
            left,
            op,
            right,
            pos,
        })
    }

    fn cmp_op(&mut self) -> Result<CmpOp> {
        let op = match self.c.peek() {
            Tok::Eq => CmpOp::Eq,
            Tok::Ne => CmpOp::Ne,
            Tok::Lt => CmpOp::Lt,
            Tok::Le => CmpOp::Le,
            Tok::Gt => CmpOp::Gt,
            Tok::Ge => CmpOp::Ge,
            Tok::Ident(s) if s == "contains" => CmpOp::Contains,
            Tok::Ident(s) if s == "starts_with" => CmpOp::StartsWith,
            other => {
                return Err(self.c.error(format!(
                    "expected a comparison (=, !=, <, <=, >, >=, contains, starts_with), found {}",
                    other.describe()
                )));
            }
        };
        self.c.bump();
        Ok(op)
    }

    fn args(&mut self) -> Result<Vec<Expr>> {
        self.c.expect(&Tok::LParen, "'('")?;
        let args = self.comma_list(Self::expr)?;
        self.c.expect(&Tok::RParen, "')'")?;
        Ok(args)
    }

    /// Comma-separated items before a closing ')' (left for the caller);
    /// none is fine, a trailing comma is not.
    fn comma_list<T>(&mut self, item: fn(&mut Self) -> Result<T>) -> Result<Vec<T>> {
        let mut items = Vec::new();
        if !self.c.at(&Tok::RParen) {
            loop {
                items.push(item(self)?);
                if !self.c.eat(&Tok::Comma) {
                    break;
                }
            }
        }
        Ok(items)
    }

    /// A value in a binding's property list or a mutation: literal, `$param`, `now()`.
    fn value(&mut self) -> Result<Expr> {
        let e = self.expr()?;
        match &e {
            Expr::Lit { .. } | Expr::Now { .. } | Expr::Var { .. } => Ok(e),
            Expr::Call { func, .. } if func == "date" || func == "datetime" => Ok(e),
            other => Err(self
                .c
                .error_at(other.pos(), "expected a literal, a $parameter or now()")),
        }
    }

    fn literal(&mut self) -> Result<Option<Lit>> {
        let neg = matches!(self.c.peek(), Tok::Minus)
            && matches!(self.c.peek_at(1), Tok::Int(_) | Tok::Float(_));
        if neg {
            self.c.bump();
        }
        let sign = if neg { -1 } else { 1 };
        Ok(Some(match self.c.peek().clone() {
            Tok::Str(s) => {
                self.c.bump();
                Lit::Str(s)
            }
            Tok::Int(i) => {
                self.c.bump();
                Lit::Int(i64::try_from(i * sign).map_err(|_| self.c.error("integer out of range"))?)
            }
            Tok::Float(f) => {
                self.c.bump();
                Lit::Float(f * sign as f64)
            }
            Tok::Ident(s) if s == "true" || s == "false" => {
                self.c.bump();
                Lit::Bool(s == "true")
            }
            Tok::Ident(s) if s == "null" => {
                self.c.bump();
                Lit::Null
            }
            Tok::LBracket => {
                self.c.bump();
                let mut items = Vec::new();
                while !self.c.at(&Tok::RBracket) {
                    match self.literal()? {
                        Some(l) => items.push(l),
                        None => return Err(self.c.error("a list literal holds literals")),
                    }
                    if !self.c.eat(&Tok::Comma) {
                        break;
                    }
                }
                self.c.expect(&Tok::RBracket, "']'")?;
                Lit::List(items)
            }
            _ => return Ok(None),
        }))
    }

    fn expr(&mut self) -> Result<Expr> {
        let pos = self.c.pos();
        if let Some(lit) = self.literal()? {
            return Ok(Expr::Lit { lit, pos });
        }
        match self.c.peek().clone() {
            Tok::Var(v) => {
                self.c.bump();
                if self.c.eat(&Tok::Dot) {
                    let (prop, _) = self.c.expect_ident("a property name after '.'")?;
                    return Ok(Expr::Prop { var: v, prop, pos });
                }
                Ok(Expr::Var { var: v, pos })
            }
            Tok::Ident(name) => {
                self.c.bump();
                if self.c.at(&Tok::LParen) {
                    if name == "now" {
                        self.c.bump();
                        self.c.expect(&Tok::RParen, "')' after now(")?;
                        return Ok(Expr::Now { pos });
                    }
                    if name == "date" || name == "datetime" {
                        self.c.bump();
                        let s = self.c.expect_str("a date string")?;
                        self.c.expect(&Tok::RParen, "')'")?;
                        let lit = if name == "date" {
                            Lit::Date(s)
                        } else {
                            Lit::DateTime(s)
                        };
                        return Ok(Expr::Lit { lit, pos });
                    }
                    let args = self.args()?;
                    return Ok(Expr::Call {
                        func: name,
                        args,
                        pos,
                    });
                }
                Ok(Expr::Alias { name, pos })
            }
            other => Err(self.c.error(format!(
                "expected an expression, found {}",
                other.describe()
            ))),
        }
    }

    fn assignments(&mut self) -> Result<Vec<Assignment>> {
        self.c.expect(&Tok::LBrace, "'{'")?;
        let mut out = Vec::new();
        while !self.c.at(&Tok::RBrace) {
            let pos = self.c.pos();
            let (prop, _) = self.c.expect_ident("a property name")?;
            self.c.expect(&Tok::Colon, "':' after the property")?;
            let value = self.value()?;
            out.push(Assignment { prop, value, pos });
            self.c.eat(&Tok::Comma);
        }
        self.c.bump();
        Ok(out)
    }

    fn predicate(&mut self) -> Result<Predicate> {
        let pos = self.c.pos();
        let (prop, _) = self.c.expect_ident("a property name after 'where'")?;
        let op = self.cmp_op()?;
        let value = self.value()?;
        Ok(Predicate {
            prop,
            op,
            value,
            pos,
        })
    }

    fn statement(&mut self) -> Result<Statement> {
        let pos = self.c.pos();
        let (kw, _) = self.c.expect_ident("'insert', 'update' or 'delete'")?;
        match kw.as_str() {
            "insert" => {
                let (type_name, _) = self.c.expect_ident("a type name")?;
                let values = self.assignments()?;
                Ok(Statement::Insert {
                    type_name,
                    values,
                    pos,
                })
            }
            "update" => {
                let (type_name, _) = self.c.expect_ident("a type name")?;
                self.c.expect_keyword("set")?;
                let set = self.assignments()?;
                let filter = if self.c.at_ident("where") {
                    self.c.bump();
                    Some(self.predicate()?)
                } else {
                    None
                };
                Ok(Statement::Update {
                    type_name,
                    set,
                    filter,
                    pos,
                })
            }
            "delete" => {
                let (type_name, _) = self.c.expect_ident("a type name")?;
                self.c.expect_keyword("where")?;
                let filter = self.predicate()?;
                Ok(Statement::Delete {
                    type_name,
                    filter,
                    pos,
                })
            }
            other => Err(self.c.error_at(
                pos,
                format!("expected 'insert', 'update' or 'delete', found '{other}'"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::OmniError;

    #[test]
    fn the_reference_query_parses() {
        let f = parse(
            r#"
query friends_of($name: String, $min_age: I32?)
    @description("People a person knows") {
    match {
        $p: Person { name: $name }
        $p knows $f
        $f.age >= $min_age
    }
    return { $f.name, $f.age as age }
    order { age desc }
    limit 10
}"#,
        )
        .unwrap();
        let q = &f.queries[0];
        assert_eq!(q.name, "friends_of");
        assert!(q.params[1].optional);
        let Body::Read(r) = &q.body else { panic!() };
        assert_eq!(r.clauses.len(), 3);
        assert!(
            matches!(&r.clauses[1], Clause::Traverse { edge, min: 1, max: Some(1), .. } if edge == "knows")
        );
        assert_eq!(r.returns[0].column(), "f.name");
        assert_eq!(r.returns[1].column(), "age");
        assert!(r.order[0].desc);
        assert_eq!(r.limit, Some(10));
    }

    #[test]
    fn traversal_forms() {
        let f = parse(
            "query q() { match { $a knows{1,3} $b\n $a <knows> $c\n $a $w:knows $d\n $a knows{2,} $e\n not { $e knows $_ } } return { count($b) } }",
        )
        .unwrap();
        let Body::Read(r) = &f.queries[0].body else {
            panic!()
        };
        assert!(matches!(
            &r.clauses[0],
            Clause::Traverse {
                min: 1,
                max: Some(3),
                ..
            }
        ));
        assert!(matches!(
            &r.clauses[1],
            Clause::Traverse {
                undirected: true,
                ..
            }
        ));
        assert!(matches!(&r.clauses[2], Clause::Traverse { edge_var: Some(w), .. } if w == "w"));
        assert!(matches!(
            &r.clauses[3],
            Clause::Traverse {
                min: 2,
                max: None,
                ..
            }
        ));
        assert!(matches!(&r.clauses[4], Clause::Not { clauses, .. } if clauses.len() == 1));
        assert_eq!(r.returns[0].column(), "count(b)");
    }

    #[test]
    fn mutations_parse() {
        let f = parse(
            r#"query onboard($name: String, $org: String) {
    insert Person { name: $name, age: 30 }
    insert WorksAt { from: $name, to: $org }
}
query rename($old: String, $new: String) { update Person set { nickname: $new } where name = $old }
query forget($name: String) { delete Person where name = $name }"#,
        )
        .unwrap();
        assert_eq!(f.queries.len(), 3);
        let Body::Mutation(s) = &f.queries[0].body else {
            panic!()
        };
        assert_eq!(s.len(), 2);
        let Body::Mutation(s) = &f.queries[1].body else {
            panic!()
        };
        assert!(matches!(&s[0], Statement::Update { filter: Some(p), .. } if p.op == CmpOp::Eq));
    }

    #[test]
    fn errors_point_at_the_offending_text() {
        match parse("query q() {\n  match { $p: Person }\n  return { $p.name\n}") {
            Err(OmniError::Parse { line, .. }) => assert_eq!(line, 4),
            other => panic!("{other:?}"),
        }
        match parse("query q() { match { $p ~ 3 } return { $p } }") {
            Err(OmniError::Parse {
                column, message, ..
            }) => {
                assert_eq!(column, 24);
                assert!(message.contains('~'));
            }
            other => panic!("{other:?}"),
        }
        assert!(parse("query q() { match { $a knows{3,1} $b } return { $b } }").is_err());
    }
}
