//! The schema compiler: `.pg` source -> checked [`Catalog`]. Parsing reports
//! line and column; checks report the declaration and property at fault.

use std::collections::{BTreeSet, HashSet};

use super::catalog::*;
use super::lexer::{Cursor, Pos, Tok};
use crate::error::{OmniError, Result};

/// Compile schema source into a catalog with fresh stable ids.
pub fn compile(src: &str) -> Result<Catalog> {
    let decls = Parser::new(src)?.parse_all()?;
    check(src, decls)
}

// ---------------------------------------------------------------- syntax

#[derive(Debug)]
struct RawProp {
    name: String,
    pos: Pos,
    ty: PropType,
    nullable: bool,
    annotations: Vec<(Annotation, Pos)>,
}

#[derive(Debug)]
enum RawDeclKind {
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
struct RawDecl {
    name: String,
    pos: Pos,
    kind: RawDeclKind,
    /// Annotations on the declaration itself (including `@card`).
    annotations: Vec<(Annotation, Pos)>,
    props: Vec<RawProp>,
    /// Body constraints such as `@key(a, b)`.
    constraints: Vec<(Annotation, Pos)>,
}

struct Parser<'a> {
    c: Cursor<'a>,
}

impl<'a> Parser<'a> {
    fn new(src: &'a str) -> Result<Self> {
        Ok(Self {
            c: Cursor::new(src)?,
        })
    }

    fn parse_all(&mut self) -> Result<Vec<RawDecl>> {
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
fn is_body_form(a: &Annotation) -> bool {
    match a.name.as_str() {
        "key" | "unique" | "index" => !a.args.is_empty(),
        "range" | "check" => a.args.len() == 2,
        _ => false,
    }
}

// ---------------------------------------------------------------- checks

fn at(pos: Pos) -> String {
    format!("line {}, column {}", pos.line, pos.col)
}

fn err(pos: Pos, msg: impl AsRef<str>) -> OmniError {
    OmniError::schema(format!("{}: {}", at(pos), msg.as_ref()))
}

fn str_arg(a: &Annotation, i: usize) -> Option<&str> {
    match a.args.get(i) {
        Some(Literal::Str(s)) | Some(Literal::Ident(s)) => Some(s),
        _ => None,
    }
}

fn parse_range(lit: Option<&Literal>) -> Option<(Option<Num>, Option<Num>)> {
    match lit {
        Some(Literal::Range(lo, hi)) => Some((*lo, *hi)),
        _ => None,
    }
}

const KNOWN_PROP_ANNOTATIONS: &[&str] = &["key", "unique", "index", "range", "check", "embed"];

/// A property's annotation as the type constraint it stands for
/// (`email: String @unique` is `@unique(email)`); `None` for the ones that
/// stay on the property (`@embed`).
fn as_constraint(prop: &str, a: &Annotation) -> Option<Annotation> {
    let mut args = vec![Literal::Ident(prop.to_string())];
    match a.name.as_str() {
        "key" | "unique" | "index" => {}
        "range" | "check" => args.extend(a.args.clone()),
        _ => return None,
    }
    Some(Annotation {
        name: a.name.clone(),
        args,
        kwargs: vec![],
    })
}

/// `@card(min..max)`: counts, max (if any) not below min.
fn cardinality(a: &Annotation, pos: Pos) -> Result<Cardinality> {
    let Some((lo, hi)) = parse_range(a.args.first()) else {
        return Err(err(pos, "@card takes a range such as 0..1, 1.. or 0..*"));
    };
    let as_count = |n: Option<Num>| -> Result<Option<u64>> {
        match n {
            None => Ok(None),
            Some(Num::Int(i)) if i >= 0 => Ok(Some(i as u64)),
            Some(other) => Err(err(pos, format!("@card bounds are counts, not {other}"))),
        }
    };
    let min = as_count(lo)?.unwrap_or(0);
    let max = as_count(hi)?;
    if let Some(m) = max
        && m < min
    {
        return Err(err(pos, format!("@card({min}..{m}) has max below min")));
    }
    Ok(Cardinality { min, max })
}

/// What a node or edge declaration is before its own body: its kind, and
/// the properties and constraints it inherits from its interfaces.
struct Shape {
    kind: TypeKind,
    inherited: Vec<PropDef>,
    constraints: Vec<(Annotation, Pos)>,
    is_edge: bool,
}

fn kind_of(
    d: &RawDecl,
    interfaces: &[InterfaceDef],
    iface_constraints: &[(String, Vec<(Annotation, Pos)>)],
    node_names: &BTreeSet<&str>,
) -> Result<Shape> {
    Ok(match &d.kind {
        RawDeclKind::Interface => unreachable!("interfaces are not types"),
        RawDeclKind::Node { implements } => {
            let mut inherited: Vec<PropDef> = Vec::new();
            let mut constraints = Vec::new();
            for (iname, ipos) in implements {
                let Some(iface) = interfaces.iter().find(|i| &i.name == iname) else {
                    return Err(err(
                        *ipos,
                        format!("node {} implements unknown interface '{iname}'", d.name),
                    ));
                };
                for p in &iface.properties {
                    if inherited.iter().any(|q| q.name == p.name) {
                        return Err(err(
                            *ipos,
                            format!(
                                "property '{}' comes from two interfaces of node {}",
                                p.name, d.name
                            ),
                        ));
                    }
                    inherited.push(p.clone());
                }
                if let Some((_, c)) = iface_constraints.iter().find(|(n, _)| n == iname) {
                    constraints.extend(c.clone());
                }
            }
            Shape {
                kind: TypeKind::Node,
                inherited,
                constraints,
                is_edge: false,
            }
        }
        RawDeclKind::Edge { from, to } => {
            for (n, p) in [from, to] {
                if !node_names.contains(n.as_str()) {
                    return Err(err(
                        *p,
                        format!("edge {} refers to unknown node type '{n}'", d.name),
                    ));
                }
            }
            Shape {
                kind: TypeKind::Edge {
                    from: from.0.clone(),
                    to: to.0.clone(),
                    card: Cardinality::default(),
                },
                inherited: Vec::new(),
                constraints: Vec::new(),
                is_edge: true,
            }
        }
    })
}

fn check(src: &str, decls: Vec<RawDecl>) -> Result<Catalog> {
    let _ = src;
    // Names: unique across all declarations, upper-case types.
    let mut seen = HashSet::new();
    for d in &decls {
        if !d
            .name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_uppercase())
        {
            return Err(err(
                d.pos,
                format!(
                    "type name '{}' must start with an upper-case letter",
                    d.name
                ),
            ));
        }
        if !seen.insert(d.name.clone()) {
            return Err(err(d.pos, format!("type '{}' is declared twice", d.name)));
        }
    }

    let mut interfaces: Vec<InterfaceDef> = Vec::new();
    let mut iface_constraints: Vec<(String, Vec<(Annotation, Pos)>)> = Vec::new();
    for d in decls
        .iter()
        .filter(|d| matches!(d.kind, RawDeclKind::Interface))
    {
        let props = check_props(&d.name, &d.props, &[])?;
        interfaces.push(InterfaceDef {
            name: d.name.clone(),
            properties: props,
        });
        iface_constraints.push((d.name.clone(), d.constraints.clone()));
    }

    let node_names: BTreeSet<&str> = decls
        .iter()
        .filter(|d| matches!(d.kind, RawDeclKind::Node { .. }))
        .map(|d| d.name.as_str())
        .collect();

    let mut types = Vec::new();
    let mut next_id = 1u32;
    for d in &decls {
        if matches!(d.kind, RawDeclKind::Interface) {
            continue;
        }
        let Shape {
            kind,
            inherited,
            mut constraints,
            is_edge,
        } = kind_of(d, &interfaces, &iface_constraints, &node_names)?;
        let mut props = check_props(&d.name, &d.props, &inherited)?;
        let mut all_props = inherited.clone();
        all_props.append(&mut props);
        for (i, p) in all_props.iter_mut().enumerate() {
            p.id = i as u32 + 1;
        }
        let mut t = TypeDef {
            id: next_id,
            name: d.name.clone(),
            kind,
            implements: match &d.kind {
                RawDeclKind::Node { implements } => {
                    implements.iter().map(|(n, _)| n.clone()).collect()
                }
                _ => Vec::new(),
            },
            properties: all_props,
            key: Vec::new(),
            uniques: Vec::new(),
            indexes: Vec::new(),
            ranges: Vec::new(),
            checks: Vec::new(),
            annotations: Vec::new(),
        };
        next_id += 1;

        // Declaration annotations: @card on edges, the rest are kept.
        for (a, pos) in &d.annotations {
            if a.name == "card" {
                let TypeKind::Edge { card, .. } = &mut t.kind else {
                    return Err(err(
                        *pos,
                        format!("@card is only for edges, not node {}", d.name),
                    ));
                };
                *card = cardinality(a, *pos)?;
            } else {
                t.annotations.push(a.clone());
            }
        }

        // Property-level constraints become type constraints: the node's
        // own, then its interfaces' (e.g. `name: String @key`).
        let mut owned: Vec<&RawProp> = d.props.iter().collect();
        if let RawDeclKind::Node { implements } = &d.kind {
            for (iname, _) in implements {
                if let Some(idecl) = decls.iter().find(|x| &x.name == iname) {
                    owned.extend(&idecl.props);
                }
            }
        }
        for rp in owned {
            for (a, pos) in &rp.annotations {
                if let Some(c) = as_constraint(&rp.name, a) {
                    constraints.push((c, *pos));
                }
            }
        }
        constraints.extend(d.constraints.clone());
        apply_constraints(&mut t, &constraints, is_edge)?;
        types.push(t);
    }

    Ok(Catalog { types, interfaces })
}

fn check_props(owner: &str, raw: &[RawProp], inherited: &[PropDef]) -> Result<Vec<PropDef>> {
    let mut out: Vec<PropDef> = Vec::new();
    for rp in raw {
        if RESERVED.contains(&rp.name.as_str()) {
            return Err(err(
                rp.pos,
                format!("property name '{}' of {owner} is reserved", rp.name),
            ));
        }
        if !rp
            .name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase())
        {
            return Err(err(
                rp.pos,
                format!(
                    "property name '{}' of {owner} must start with a lower-case letter",
                    rp.name
                ),
            ));
        }
        if out.iter().chain(inherited).any(|p| p.name == rp.name) {
            return Err(err(
                rp.pos,
                format!("property '{}' is declared twice in {owner}", rp.name),
            ));
        }
        let mut embed = None;
        let mut annotations = Vec::new();
        for (a, pos) in &rp.annotations {
            if rp.ty == PropType::Blob
                && matches!(a.name.as_str(), "key" | "unique" | "index" | "embed")
            {
                return Err(err(
                    *pos,
                    format!("Blob property {owner}.{} cannot carry @{}", rp.name, a.name),
                ));
            }
            if a.name == "embed" {
                let Some(source) = str_arg(a, 0) else {
                    return Err(err(
                        *pos,
                        "@embed names its source property: @embed(\"bio\")",
                    ));
                };
                if !matches!(rp.ty, PropType::Vector(_)) {
                    return Err(err(
                        *pos,
                        format!(
                            "@embed is only for Vector properties, not {owner}.{}",
                            rp.name
                        ),
                    ));
                }
                let model =
                    a.kwargs
                        .iter()
                        .find(|(k, _)| k == "model")
                        .and_then(|(_, v)| match v {
                            Literal::Str(s) => Some(s.clone()),
                            _ => None,
                        });
                embed = Some(EmbedSpec {
                    source: source.to_string(),
                    model,
                });
            }
            if !KNOWN_PROP_ANNOTATIONS.contains(&a.name.as_str()) {
                annotations.push(a.clone());
            }
        }
        out.push(PropDef {
            id: 0,
            name: rp.name.clone(),
            ty: rp.ty.clone(),
            nullable: rp.nullable,
            embed,
            annotations,
        });
    }
    // @embed sources are String properties of the same owner.
    for p in &out {
        if let Some(e) = &p.embed {
            let src = out.iter().chain(inherited).find(|q| q.name == e.source);
            if !matches!(src, Some(q) if q.ty == PropType::String) {
                let pos = raw
                    .iter()
                    .find(|r| r.name == p.name)
                    .map(|r| r.pos)
                    .unwrap_or_default();
                return Err(err(
                    pos,
                    format!(
                        "@embed source '{}' of {owner}.{} must be a String property of {owner}",
                        e.source, p.name
                    ),
                ));
            }
        }
    }
    Ok(out)
}

fn prop_list(t: &TypeDef, a: &Annotation, pos: Pos, skip_last: usize) -> Result<Vec<String>> {
    let n = a.args.len().saturating_sub(skip_last);
    if n == 0 {
        return Err(err(pos, format!("@{} names at least one property", a.name)));
    }
    let mut out = Vec::new();
    for lit in &a.args[..n] {
        let Literal::Ident(name) = lit else {
            return Err(err(
                pos,
                format!("@{} takes property names, not {lit:?}", a.name),
            ));
        };
        let Some(p) = t.property(name) else {
            return Err(err(
                pos,
                format!("@{} on {} names unknown property '{name}'", a.name, t.name),
            ));
        };
        if p.ty == PropType::Blob && matches!(a.name.as_str(), "key" | "unique" | "index") {
            return Err(err(
                pos,
                format!("Blob property {}.{name} cannot carry @{}", t.name, a.name),
            ));
        }
        if out.contains(name) {
            return Err(err(pos, format!("@{} lists '{name}' twice", a.name)));
        }
        out.push(name.clone());
    }
    Ok(out)
}

fn apply_constraints(
    t: &mut TypeDef,
    constraints: &[(Annotation, Pos)],
    is_edge: bool,
) -> Result<()> {
    for (a, pos) in constraints {
        let pos = *pos;
        if is_edge && !matches!(a.name.as_str(), "unique" | "index") {
            return Err(err(
                pos,
                format!(
                    "edge {} allows only @unique and @index in its body, not @{}",
                    t.name, a.name
                ),
            ));
        }
        match a.name.as_str() {
            "key" => {
                let props = prop_list(t, a, pos, 0)?;
                if !t.key.is_empty() {
                    if t.key == props {
                        continue;
                    }
                    return Err(err(pos, format!("node {} has more than one @key", t.name)));
                }
                for name in &props {
                    let p = t.property(name).expect("checked");
                    if p.nullable {
                        return Err(err(
                            pos,
                            format!("key property {}.{name} cannot be nullable", t.name),
                        ));
                    }
                    if !p.ty.can_be_key() {
                        return Err(err(
                            pos,
                            format!(
                                "key property {}.{name} has type {}, which cannot form an id",
                                t.name,
                                p.ty.describe()
                            ),
                        ));
                    }
                }
                t.key = props;
            }
            "unique" => {
                let props = prop_list(t, a, pos, 0)?;
                if !t.uniques.contains(&props) {
                    t.uniques.push(props);
                }
            }
            "index" => {
                let props = prop_list(t, a, pos, 0)?;
                if !t.indexes.contains(&props) {
                    t.indexes.push(props);
                }
            }
            "range" => {
                let props = prop_list(t, a, pos, 1)?;
                let [name] = props.as_slice() else {
                    return Err(err(
                        pos,
                        "@range takes one property and a range: @range(age, 0..150)",
                    ));
                };
                let Some((min, max)) = parse_range(a.args.last()) else {
                    return Err(err(pos, "@range needs a range such as 0..150, 0.. or ..10"));
                };
                let p = t.property(name).expect("checked");
                if !p.ty.is_numeric() {
                    return Err(err(
                        pos,
                        format!(
                            "@range on {}.{name} needs a numeric property, not {}",
                            t.name,
                            p.ty.describe()
                        ),
                    ));
                }
                if min.is_none() && max.is_none() {
                    return Err(err(pos, "@range needs at least one bound"));
                }
                if let (Some(lo), Some(hi)) = (min, max)
                    && lo.as_f64() > hi.as_f64()
                {
                    return Err(err(
                        pos,
                        format!("@range({name}, {lo}..{hi}) has min above max"),
                    ));
                }
                t.ranges.push(RangeConstraint {
                    property: name.clone(),
                    min,
                    max,
                });
            }
            "check" => {
                let props = prop_list(t, a, pos, 1)?;
                let [name] = props.as_slice() else {
                    return Err(err(
                        pos,
                        "@check takes one property and a pattern: @check(email, \"^.+$\")",
                    ));
                };
                let Some(Literal::Str(pattern)) = a.args.last() else {
                    return Err(err(pos, "@check needs a pattern string"));
                };
                let p = t.property(name).expect("checked");
                if p.ty != PropType::String {
                    return Err(err(
                        pos,
                        format!("@check on {}.{name} needs a String property", t.name),
                    ));
                }
                if let Err(e) = regex::Regex::new(pattern) {
                    return Err(err(
                        pos,
                        format!("@check pattern for {}.{name} is invalid: {e}", t.name),
                    ));
                }
                t.checks.push(CheckConstraint {
                    property: name.clone(),
                    pattern: pattern.clone(),
                });
            }
            _ => t.annotations.push(a.clone()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = r#"
// line comments and /* block comments */
interface Named { name: String @key }

node Person implements Named {
    age: I32?
    email: String @unique
    tags: [String]
    bio: String @index
    embedding: Vector(384) @embed("bio")
    photo: Blob?
    status: enum(active, retired)
    @range(age, 0..150)
    @check(email, "^[^@]+@[^@]+$")
}

node Company { name: String @key }

edge Knows: Person -> Person { since: Date? }
edge WorksAt: Person -> Company @card(0..1) { role: String? }
"#;

    #[test]
    fn the_reference_schema_compiles() {
        let c = compile(FULL).unwrap();
        let p = c.node("Person").unwrap();
        assert_eq!(p.key, vec!["name"]);
        assert_eq!(p.properties[0].name, "name");
        assert_eq!(
            p.properties.iter().map(|p| p.id).collect::<Vec<_>>(),
            (1..=8).collect::<Vec<_>>()
        );
        assert_eq!(p.uniques, vec![vec!["email".to_string()]]);
        assert_eq!(p.ranges[0].max, Some(Num::Int(150)));
        assert_eq!(p.checks[0].property, "email");
        assert_eq!(
            p.property("embedding")
                .unwrap()
                .embed
                .as_ref()
                .unwrap()
                .source,
            "bio"
        );
        let w = c.edge("WorksAt").unwrap();
        assert_eq!(
            w.kind,
            TypeKind::Edge {
                from: "Person".into(),
                to: "Company".into(),
                card: Cardinality {
                    min: 0,
                    max: Some(1)
                }
            }
        );
        assert_eq!(
            c.types.iter().map(|t| t.id).collect::<Vec<_>>(),
            vec![1, 2, 3, 4]
        );
    }

    fn schema_err(src: &str) -> String {
        match compile(src) {
            Err(OmniError::Schema { message }) => message,
            other => panic!("expected a schema error, got {other:?}"),
        }
    }

    #[test]
    fn semantic_errors_name_what_is_wrong() {
        assert!(schema_err("node A { x: I32 }\nedge E: A -> B").contains("unknown node type 'B'"));
        assert!(schema_err("node A { x: I32 }\nnode A { y: I32 }").contains("declared twice"));
        assert!(schema_err("node A { x: I32\n x: String }").contains("'x' is declared twice"));
        assert!(schema_err("node A { id: String }").contains("reserved"));
        assert!(schema_err("node A { _rowid: I64 }").contains("reserved"));
        assert!(schema_err("node A { b: Blob @unique }").contains("Blob"));
        assert!(schema_err("node A { b: Blob @index }").contains("Blob"));
        assert!(schema_err("node A { b: Blob\n @key(b) }").contains("Blob"));
        assert!(schema_err("node A { x: I32\n @range(y, 0..1) }").contains("unknown property 'y'"));
        assert!(schema_err("node A { x: I32\n @range(x, 5..1) }").contains("min above max"));
        assert!(schema_err("node A { x: String\n @range(x, 0..1) }").contains("numeric"));
        assert!(
            schema_err("node A { x: I32 }\nedge E: A -> A { @key(x) }").contains("only @unique")
        );
        assert!(schema_err("node A { x: String? @key }").contains("nullable"));
        assert!(schema_err("node a { x: I32 }").contains("upper-case"));
        assert!(schema_err("node A { X: I32 }").contains("lower-case"));
        assert!(schema_err("node A { v: Vector(3) @embed(\"nope\") }").contains("source"));
        assert!(schema_err("node A implements Nope { x: I32 }").contains("unknown interface"));
        assert!(schema_err("node A { x: String\n @check(x, \"(\") }").contains("invalid"));
    }

    #[test]
    fn syntax_errors_carry_line_and_column() {
        match compile("node A {\n  x: Strin\n}") {
            Err(OmniError::Parse {
                line,
                column,
                message,
                snippet,
            }) => {
                assert_eq!((line, column), (2, 6));
                assert!(message.contains("unknown property type 'Strin'"));
                assert!(snippet.contains("x: Strin"));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            compile("node A { x: enum() }"),
            Err(OmniError::Parse { .. })
        ));
        assert!(matches!(
            compile("node A { x: enum(a, a) }"),
            Err(OmniError::Parse { .. })
        ));
        assert!(matches!(
            compile("node A { x: Vector(0) }"),
            Err(OmniError::Parse { .. })
        ));
        assert!(matches!(
            compile("edge E A -> A"),
            Err(OmniError::Parse { .. })
        ));
    }

    #[test]
    fn composite_keys_and_unknown_annotations() {
        let c = compile(
            "node Emp @description(\"x\") { org: String\n num: I64\n @key(org, num)\n @custom(1, a = \"b\") }\nedge E: Emp -> Emp",
        )
        .unwrap();
        let e = c.node("Emp").unwrap();
        assert_eq!(e.key, vec!["org", "num"]);
        assert!(e.annotations.iter().any(|a| a.name == "custom"));
        assert!(e.annotations.iter().any(|a| a.name == "description"));
        assert!(c.edge("E").unwrap().properties.is_empty());
    }

    #[test]
    fn open_card_and_range_bounds() {
        let c = compile("node A { x: F64\n @range(x, -1.5..) }\nedge E: A -> A @card(1..*)\nedge F: A -> A @card(2..)").unwrap();
        assert_eq!(c.node("A").unwrap().ranges[0].min, Some(Num::Float(-1.5)));
        assert_eq!(c.node("A").unwrap().ranges[0].max, None);
        for e in ["E", "F"] {
            let TypeKind::Edge { card, .. } = &c.edge(e).unwrap().kind else {
                panic!()
            };
            assert_eq!(card.max, None);
        }
    }
}
