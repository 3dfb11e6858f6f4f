//! The `.pg` grammar: declarations, properties, types and annotations, as
//! raw declarations for the checks.

use std::collections::HashSet;

use super::super::catalog::*;
use super::super::lexer::{Cursor, Pos, Tok};
use crate::error::Result;

#[derive(Debug)]
pub(super) struct RawProp {
    pub(super) name: String,
    pub(super) pos: Pos,
    pub(super) ty: PropType,
    pub(super) nullable: bool,
    pub(super) annotations: Vec<(Annotation, Pos)>,
}

#[derive(Debug)]
pub(super) enum RawDeclKind {
    Interface,
    Node {
        implements: Vec<(String, Pos)>,
    },
    Edge {
        from: (String, Pos),
        to: (String, Pos),
    },
}

#[derive(Debug)]
pub(super) struct RawDecl {
    pub(super) name: String,
    pub(super) pos: Pos,
    pub(super) kind: RawDeclKind,
    /// Annotations on the declaration itself (including `@card`).
    pub(super) annotations: Vec<(Annotation, Pos)>,
    pub(super) props: Vec<RawProp>,
    /// Body constraints such as `@key(a, b)`.
    pub(super) constraints: Vec<(Annotation, Pos)>,
}

pub(super) struct Parser<'a> {
    c: Cursor<'a>,
}

impl<'a> Parser<'a> {
    pub(super) fn new(src: &'a str) -> Result<Self> {
        Ok(Self {
            c: Cursor::new(src)?,
        })
    }

    pub(super) fn parse_all(&mut self) -> Result<Vec<RawDecl>> {
        let mut out = Vec::new();
        while !self.c.at(&Tok::Eof) {
            out.push(self.decl()?);
        }
        Ok(out)
    }

    fn decl(&mut self) -> Result<RawDecl> {
        let (word, _) = self
            .c
            .expect_ident("a declaration ('node', 'edge' or 'interface')")?;
        let (name, pos) = self.c.expect_ident("a type name")?;
        match word.as_str() {
            "interface" => {
                let annotations = self.annotations()?;
                let (props, constraints) = self.body()?;
                Ok(RawDecl {
                    name,
                    pos,
                    kind: RawDeclKind::Interface,
                    annotations,
                    props,
                    constraints,
                })
            }
            "node" => {
                let mut annotations = self.annotations()?;
                let mut implements = Vec::new();
                if self.c.at_ident("implements") {
                    self.c.bump();
                    loop {
                        implements.push(self.c.expect_ident("an interface name")?);
                        if !self.c.eat(&Tok::Comma) {
                            break;
                        }
                    }
                }
                annotations.extend(self.annotations()?);
                let (props, constraints) = self.body()?;
                Ok(RawDecl {
                    name,
                    pos,
                    kind: RawDeclKind::Node { implements },
                    annotations,
                    props,
                    constraints,
                })
            }
            "edge" => {
                self.c.expect(&Tok::Colon, "':' after the edge name")?;
                let from = self.c.expect_ident("the source node type")?;
                self.c.expect(&Tok::Arrow, "'->'")?;
                let to = self.c.expect_ident("the target node type")?;
                let annotations = self.annotations()?;
                let (props, constraints) = if self.c.at(&Tok::LBrace) {
                    self.body()?
                } else {
                    (Vec::new(), Vec::new())
                };
                Ok(RawDecl {
                    name,
                    pos,
                    kind: RawDeclKind::Edge { from, to },
                    annotations,
                    props,
                    constraints,
                })
            }
            other => Err(self.c.error(format!(
                "expected 'node', 'edge' or 'interface', found '{other}'"
            ))),
        }
    }

    fn annotations(&mut self) -> Result<Vec<(Annotation, Pos)>> {
        let mut out = Vec::new();
        while self.c.at(&Tok::At) {
            out.push(self.annotation()?);
        }
        Ok(out)
    }

    fn annotation(&mut self) -> Result<(Annotation, Pos)> {
        let pos = self.c.pos();
        self.c.expect(&Tok::At, "'@'")?;
        let (name, _) = self.c.expect_ident("an annotation name")?;
        let mut args = Vec::new();
        let mut kwargs = Vec::new();
        if self.c.eat(&Tok::LParen) {
            if !self.c.at(&Tok::RParen) {
                loop {
                    if let (Tok::Ident(k), Tok::Eq) = (self.c.peek().clone(), self.c.peek_at(1)) {
                        self.c.bump();
                        self.c.bump();
                        kwargs.push((k, self.literal()?));
                    } else {
                        args.push(self.literal_or_range()?);
                    }
                    if !self.c.eat(&Tok::Comma) {
                        break;
                    }
                }
            }
            self.c.expect(&Tok::RParen, "')' closing the annotation")?;
        }
        Ok((Annotation { name, args, kwargs }, pos))
    }

    fn number(&mut self) -> Result<Option<Num>> {
        let neg = self.c.eat(&Tok::Minus);
        let sign = if neg { -1 } else { 1 };
        match self.c.peek().clone() {
            Tok::Int(i) => {
                self.c.bump();
                let v = i64::try_from(i * sign)
                    .map_err(|_| self.c.error(format!("number {i} is out of range")))?;
                Ok(Some(Num::Int(v)))
            }
            Tok::Float(f) => {
                self.c.bump();
                Ok(Some(Num::Float(f * sign as f64)))
            }
            _ if neg => Err(self.c.error("expected a number after '-'")),
            _ => Ok(None),
        }
    }

    /// A literal, or a range `a..b` (either side optional, `*` for open).
    fn literal_or_range(&mut self) -> Result<Literal> {
        let start = self.c.pos();
        let lo = self.number()?;
        if self.c.eat(&Tok::DotDot) {
            let hi = if self.c.eat(&Tok::Star) {
                None
            } else {
                self.number()?
            };
            return Ok(Literal::Range(lo, hi));
        }
        match lo {
            Some(Num::Int(i)) => Ok(Literal::Int(i)),
            Some(Num::Float(f)) => Ok(Literal::Float(f)),
            None => {
                if self.c.pos() != start {
                    return Err(self.c.error("expected a literal"));
                }
                self.literal()
            }
        }
    }

    fn literal(&mut self) -> Result<Literal> {
        if let Some(n) = self.number()? {
            return Ok(match n {
                Num::Int(i) => Literal::Int(i),
                Num::Float(f) => Literal::Float(f),
            });
        }
        match self.c.peek().clone() {
            Tok::Str(s) => {
                self.c.bump();
                Ok(Literal::Str(s))
            }
            Tok::Ident(s) if s == "true" || s == "false" => {
                self.c.bump();
                Ok(Literal::Bool(s == "true"))
            }
            Tok::Ident(s) => {
                self.c.bump();
                Ok(Literal::Ident(s))
            }
            other => Err(self
                .c
                .error(format!("expected a literal, found {}", other.describe()))),
        }
    }

    #[allow(clippy::type_complexity)]
    fn body(&mut self) -> Result<(Vec<RawProp>, Vec<(Annotation, Pos)>)> {
        self.c.expect(&Tok::LBrace, "'{'")?;
        let mut props = Vec::new();
        let mut constraints = Vec::new();
        loop {
            match self.c.peek() {
                Tok::RBrace => {
                    self.c.bump();
                    break;
                }
                Tok::At => constraints.push(self.annotation()?),
                Tok::Ident(_) => {
                    let mut prop = self.prop()?;
                    // A body constraint written after a property (on the
                    // next line, say) is not that property's annotation.
                    // Everything from the first such constraint on is body.
                    if let Some(i) = prop.annotations.iter().position(|(a, _)| is_body_form(a)) {
                        constraints.extend(prop.annotations.split_off(i));
                    }
                    props.push(prop);
                }
                Tok::Comma => {
                    self.c.bump();
                }
                other => {
                    return Err(self.c.error(format!(
                        "expected a property, a constraint or '}}', found {}",
                        other.describe()
                    )));
                }
            }
        }
        Ok((props, constraints))
    }

    fn prop(&mut self) -> Result<RawProp> {
        let (name, pos) = self.c.expect_ident("a property name")?;
        self.c.expect(&Tok::Colon, "':' after the property name")?;
        let ty = self.prop_type()?;
        let nullable = self.c.eat(&Tok::Question);
        let annotations = self.annotations()?;
        Ok(RawProp {
            name,
            pos,
            ty,
            nullable,
            annotations,
        })
    }

    // One arm per property type of the schema grammar.
    fn prop_type(&mut self) -> Result<PropType> {
        if self.c.eat(&Tok::LBracket) {
            let pos = self.c.pos();
            let inner = self.prop_type()?;
            if !inner.is_scalar() {
                return Err(self.c.error_at(
                    pos,
                    format!("a list holds scalars, not {}", inner.describe()),
                ));
            }
            self.c.expect(&Tok::RBracket, "']'")?;
            return Ok(PropType::List(Box::new(inner)));
        }
        let (name, pos) = self.c.expect_ident("a property type")?;
        if let Some(t) = PropType::scalar_named(&name) {
            return Ok(t);
        }
        Ok(match name.as_str() {
            "Blob" => PropType::Blob,
            "Vector" => {
                self.c.expect(&Tok::LParen, "'(' after Vector")?;
                let npos = self.c.pos();
                let n = match self.c.bump().tok {
                    Tok::Int(n) if (1..=65_536).contains(&n) => n as u32,
                    _ => {
                        return Err(self.c.error_at(
                            npos,
                            "Vector dimension must be an integer from 1 to 65536",
                        ));
                    }
                };
                self.c.expect(&Tok::RParen, "')'")?;
                PropType::Vector(n)
            }
            "enum" => {
                self.c.expect(&Tok::LParen, "'(' after enum")?;
                let mut vals = Vec::new();
                if !self.c.at(&Tok::RParen) {
                    loop {
                        let v = match self.c.peek().clone() {
                            Tok::Ident(s) | Tok::Str(s) => {
                                self.c.bump();
                                s
                            }
                            other => {
                                return Err(self.c.error(format!(
                                    "expected an enum value, found {}",
                                    other.describe()
                                )));
                            }
                        };
                        vals.push(v);
                        if !self.c.eat(&Tok::Comma) {
                            break;
                        }
                    }
                }
                self.c.expect(&Tok::RParen, "')' closing the enum")?;
                let mut seen = HashSet::new();
                for v in &vals {
                    if !seen.insert(v) {
                        return Err(self
                            .c
                            .error_at(pos, format!("enum value '{v}' is listed twice")));
                    }
                }
                if vals.is_empty() {
                    return Err(self.c.error_at(pos, "an enum needs at least one value"));
                }
                PropType::Enum(vals)
            }
            other => {
                return Err(self.c.error_at(
                    pos,
                    format!(
                        "unknown property type '{other}' (expected String, Bool, I32, I64, U32, \
                         U64, F32, F64, Date, DateTime, Vector(n), [T], enum(...) or Blob)"
                    ),
                ));
            }
        })
    }
}

/// Constraints that name their properties: `@key(a, b)`, `@unique(a)`,
/// `@index(a)`, `@range(p, 0..1)`, `@check(p, "re")`.
pub(super) fn is_body_form(a: &Annotation) -> bool {
    match a.name.as_str() {
        "key" | "unique" | "index" => !a.args.is_empty(),
        "range" | "check" => a.args.len() == 2,
        _ => false,
    }
}

// ---------------------------------------------------------------- checks
