//! The loader's fast reading of a JSONL line in its usual shape: an object
//! whose keys are plain names, `type`/`edge` before `data`, and values that
//! are strings without escapes, integers within `i64`, booleans or null.
//! Such a line is read by a byte scanner without serde's per-token dispatch.
//! Anything else (escapes, floats, lists, blobs, unknown or repeated keys,
//! malformed text) returns `None`, and the serde reader reads the line from
//! the start: it alone spells every error, so both paths accept exactly the
//! same lines with exactly the same values.
//!
//! Lines of one file mostly differ only in their values. Each line the
//! scanner reads leaves its [`Shape`]: the bytes between its values and
//! what each value fills. A later line with exactly those bytes between its
//! values is read by comparing them and scanning the values alone (the
//! keys, their order and the type are in the bytes compared), each value
//! checked by its property's rule as it is read, straight into the row's
//! values. A value its rule refuses sends the line back to the scanner and
//! the general checks, which spell the error.

use std::borrow::Cow;

use std::sync::Arc;

use super::columns::TypeRules;
use super::jsonl::{Data, Line, Row, Types};
use crate::compiler::value::Value;

/// Shapes kept per block, most recent first.
const SHAPES_MAX: usize = 4;
/// Lines in a row that match no shape before a block stops keeping them
/// (a file whose lines all differ in their keys).
const SHAPE_MISSES_MAX: u32 = 256;

/// What one value of a line fills.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fills {
    From,
    To,
    Id,
    Cell(usize),
}

/// One line's bytes between its values, and what each value fills.
pub(super) struct Shape<'c> {
    /// `fills.len() + 1` runs of bytes: before the first value, between
    /// values, after the last.
    between: Vec<Box<[u8]>>,
    fills: Vec<Fills>,
    rules: &'c Arc<TypeRules>,
    /// Whether the shape's lines can pass their type's checks at all.
    loads: bool,
}

/// A block's recent shapes.
#[derive(Default)]
pub(super) struct Shapes<'c> {
    recent: Vec<Shape<'c>>,
    misses: u32,
    /// Where the scanner's values were, for the shape of the line it read.
    values: Vec<(usize, usize, Fills)>,
}

impl<'c> Shape<'c> {
    /// `text` read and checked into `vals` (one per property, in property
    /// order), if its bytes between values are this shape's and every value
    /// passes its property's checks. `vals` may hold some of the line's
    /// values when it is not.
    fn load<'a>(&self, text: &'a str, vals: &mut Vec<Value<'a>>) -> Option<Shaped<'a>>
    where
        'c: 'a,
    {
        if !self.loads {
            return None;
        }
        let b = text.as_bytes();
        let mut s = Scan { b, text, at: 0 };
        let mut out = Shaped {
            from: None,
            to: None,
            id: None,
        };
        vals.clear();
        vals.extend((0..self.rules.props.len()).map(|_| Value::Null));
        for (between, fills) in self.between.iter().zip(&self.fills) {
            let end = s.at + between.len();
            same(b.get(s.at..end)?, between).then_some(())?;
            s.at = end;
            let v = s.value()?;
            match *fills {
                Fills::From => out.from = Some(v),
                Fills::To => out.to = Some(v),
                Fills::Id => out.id = Some(v),
                Fills::Cell(i) => vals[i] = self.rules.props[i].validate(Some(v)).ok()?,
            }
        }
        let last = self.between.last().expect("a shape ends with bytes");
        same(b.get(s.at..)?, last).then_some(out)
    }
}

/// Do two runs of bytes hold the same bytes? Inline, in words: the runs
/// between a line's values are a few bytes long, where a call to `memcmp`
/// costs more than the comparison.
#[inline]
fn same(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    let word = |x: &[u8], at: usize| u64::from_le_bytes(x[at..at + 8].try_into().expect("8 bytes"));
    if n < 8 {
        return a.iter().zip(b).all(|(x, y)| x == y);
    }
    let mut at = 0;
    while at + 8 <= n {
        if word(a, at) != word(b, at) {
            return false;
        }
        at += 8;
    }
    word(a, n - 8) == word(b, n - 8)
}

/// What a line read by a known shape gives beside its property values.
pub(super) struct Shaped<'a> {
    pub(super) from: Option<Value<'a>>,
    pub(super) to: Option<Value<'a>>,
    pub(super) id: Option<Value<'a>>,
}

impl<'c> Shapes<'c> {
    /// `text` read by one of the recent shapes, its values checked into
    /// `vals`, with the checks of its type. `None`: no shape reads it (the
    /// line is new, or it holds a value its property refuses), and the
    /// scanner and the general checks take it from the start.
    pub(super) fn load<'a>(
        &mut self,
        text: &'a str,
        vals: &mut Vec<Value<'a>>,
    ) -> Option<(Shaped<'a>, &'c Arc<TypeRules>)>
    where
        'c: 'a,
    {
        if self.misses >= SHAPE_MISSES_MAX {
            return None;
        }
        for (i, shape) in self.recent.iter().enumerate() {
            if let Some(read) = shape.load(text, vals) {
                let rules = shape.rules;
                self.recent[..=i].rotate_right(1);
                self.misses = 0;
                return Some((read, rules));
            }
        }
        self.misses += 1;
        None
    }
}

/// Read `text` (one trimmed line) if it has the usual shape, with the
/// checks of its type when it has `data`, and keep its shape for the lines
/// after. The data's cells go into `cells` (empty; its allocation is
/// reused).
pub(super) fn line<'a, 'c: 'a>(
    text: &'a str,
    types: &mut Types<'c>,
    shapes: &mut Shapes<'c>,
    cells: Vec<Option<Value<'a>>>,
) -> Option<(Line<'a>, Option<&'c Arc<TypeRules>>)> {
    shapes.values.clear();
    let read = scan(text, types, &mut shapes.values, cells)?;
    if let (true, Some(rules)) = (shapes.misses < SHAPE_MISSES_MAX, read.1) {
        let mut between = Vec::with_capacity(shapes.values.len() + 1);
        let mut at = 0;
        for &(start, end, _) in &shapes.values {
            between.push(text.as_bytes()[at..start].into());
            at = end;
        }
        between.push(text.as_bytes()[at..].into());
        let fills: Vec<Fills> = shapes.values.iter().map(|v| v.2).collect();
        // A node with `from`/`to` or a property left out that must be
        // given: every line of the shape is refused, by the general checks.
        let ends = fills.iter().any(|f| matches!(f, Fills::From | Fills::To));
        let loads = (rules.def.is_edge() || !ends)
            && (0..rules.props.len())
                .all(|i| fills.contains(&Fills::Cell(i)) || rules.props[i].validate(None).is_ok());
        shapes.recent.truncate(SHAPES_MAX - 1);
        shapes.recent.insert(
            0,
            Shape {
                between,
                fills,
                rules,
                loads,
            },
        );
    }
    Some(read)
}

/// The scanner proper: `values` gets where each value was and what it
/// filled.
fn scan<'a, 'c>(
    text: &'a str,
    types: &mut Types<'c>,
    values: &mut Vec<(usize, usize, Fills)>,
    cells: Vec<Option<Value<'a>>>,
) -> Option<(Line<'a>, Option<&'c Arc<TypeRules>>)> {
    let mut s = Scan {
        b: text.as_bytes(),
        text,
        at: 0,
    };
    let mut line = Line::empty();
    let mut found = None;
    let mut cells = Some(cells);
    s.eat(b'{')?;
    if s.peek()? == b'}' {
        s.at += 1;
    } else {
        loop {
            let key = s.string()?;
            s.eat(b':')?;
            match key {
                "type" if line.node.is_none() => line.node = Some(Cow::Borrowed(s.string()?)),
                "edge" if line.edge.is_none() => line.edge = Some(Cow::Borrowed(s.string()?)),
                "from" if line.from.is_none() => line.from = Some(s.value_at(values, Fills::From)?),
                "to" if line.to.is_none() => line.to = Some(s.value_at(values, Fills::To)?),
                "data" if found.is_none() => {
                    let rules = match (&line.node, &line.edge) {
                        (Some(n), None) => types.get(n).filter(|r| !r.def.is_edge()),
                        (None, Some(e)) => types.get(e).filter(|r| r.def.is_edge()),
                        _ => None,
                    }?;
                    found = Some(rules);
                    line.data = Data::Read(s.data(rules, cells.take()?, values)?);
                }
                _ => return None,
            }
            match s.next()? {
                b',' => continue,
                b'}' => break,
                _ => return None,
            }
        }
    }
    s.ws();
    (s.at == s.b.len()).then_some((line, found))
}

struct Scan<'a> {
    b: &'a [u8],
    text: &'a str,
    at: usize,
}

impl<'a> Scan<'a> {
    #[inline]
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.at) {
            self.at += 1;
        }
    }

    /// The next byte past whitespace, not consumed.
    #[inline]
    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.b.get(self.at).copied()
    }

    /// The next byte past whitespace, consumed.
    fn next(&mut self) -> Option<u8> {
        let c = self.peek()?;
        self.at += 1;
        Some(c)
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.next()? == c).then_some(())
    }

    /// A string needing no unescaping, borrowed from the line.
    #[inline(always)]
    fn string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let start = self.at;
        let len = self.b[start..]
            .iter()
            .position(|&c| matches!(c, b'"' | b'\\' | 0..=0x1f))?;
        // Escapes and control characters: the serde reader's.
        if self.b[start + len] != b'"' {
            return None;
        }
        self.at = start + len + 1;
        Some(&self.text[start..start + len])
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.at + word.len();
        (self.b.get(self.at..end)? == word).then(|| self.at = end)
    }

    /// A value, noting where it was and what it fills.
    fn value_at(
        &mut self,
        values: &mut Vec<(usize, usize, Fills)>,
        fills: Fills,
    ) -> Option<Value<'a>> {
        let start = self.at;
        let v = self.value()?;
        values.push((start, self.at, fills));
        Some(v)
    }

    #[inline(always)]
    fn value(&mut self) -> Option<Value<'a>> {
        Some(match self.peek()? {
            b'"' => Value::Str(Cow::Borrowed(self.string()?)),
            b'n' => {
                self.literal(b"null")?;
                Value::Null
            }
            b't' => {
                self.literal(b"true")?;
                Value::Bool(true)
            }
            b'f' => {
                self.literal(b"false")?;
                Value::Bool(false)
            }
            b'-' | b'0'..=b'9' => Value::Int(self.integer()?),
            _ => return None,
        })
    }

    /// An integer as JSON spells it, within `i64`. `-0` (a float to
    /// serde_json), fractions and exponents are the serde reader's.
    fn integer(&mut self) -> Option<i64> {
        let negative = self.b[self.at] == b'-';
        self.at += usize::from(negative);
        let start = self.at;
        let mut magnitude: u64 = 0;
        while let Some(d @ b'0'..=b'9') = self.b.get(self.at) {
            magnitude = magnitude
                .checked_mul(10)?
                .checked_add(u64::from(d - b'0'))?;
            self.at += 1;
        }
        let digits = self.at - start;
        if digits == 0 || (digits > 1 && self.b[start] == b'0') {
            return None;
        }
        if let Some(b'.' | b'e' | b'E') = self.b.get(self.at) {
            return None;
        }
        if negative {
            if magnitude == 0 || magnitude > 1 << 63 {
                return None;
            }
            Some((magnitude as i64).wrapping_neg())
        } else {
            i64::try_from(magnitude).ok()
        }
    }

    /// A `data` object (or null) straight into the type's cells.
    fn data(
        &mut self,
        rules: &TypeRules,
        mut cells: Vec<Option<Value<'a>>>,
        values: &mut Vec<(usize, usize, Fills)>,
    ) -> Option<Row<'a>> {
        cells.resize(rules.props.len(), None);
        let mut row = Row { cells, id: None };
        match self.peek()? {
            b'n' => {
                self.literal(b"null")?;
                return Some(row);
            }
            b'{' => self.at += 1,
            _ => return None,
        }
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(row);
        }
        loop {
            let key = self.string()?;
            self.eat(b':')?;
            if key == "id" {
                let v = self.value_at(values, Fills::Id)?;
                if row.id.replace(v).is_some() {
                    return None;
                }
            } else {
                let i = rules.prop_index(key)?;
                let v = self.value_at(values, Fills::Cell(i))?;
                if row.cells[i].replace(v).is_some() {
                    return None;
                }
            }
            match self.next()? {
                b',' => continue,
                b'}' => return Some(row),
                _ => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::compiler::schema::compile;
    use crate::write::jsonl::RulesByName;

    fn rules() -> RulesByName {
        let c = compile(
            "node Person { name: String @key\n age: I64?\n ok: Bool?\n @range(age, 0..150) }\nedge Knows: Person -> Person { since: I64? }",
        )
        .unwrap();
        c.types
            .iter()
            .map(|t| (t.name.clone(), Arc::new(TypeRules::new(t).unwrap())))
            .collect()
    }

    fn fast<'a>(text: &'a str, r: &'a RulesByName) -> Option<Line<'a>> {
        let (l, rules) = line(text, &mut Types::new(r), &mut Shapes::default(), Vec::new())?;
        // The checks handed back are the ones of the line's type.
        if let Some(rules) = rules {
            let name = l.node.as_ref().or(l.edge.as_ref()).unwrap();
            assert_eq!(rules.def.name, name.as_ref());
        }
        Some(l)
    }

    /// A line's fields, spelled so that borrowed and owned strings compare equal.
    fn spell(l: &Line) -> String {
        let data = match &l.data {
            Data::Absent => "absent".to_string(),
            Data::Read(row) => format!("{:?} {:?}", row.cells, row.id),
            Data::Raw(raw) => format!("raw {}", raw.get()),
        };
        format!("{:?} {:?} {:?} {:?} {data}", l.node, l.edge, l.from, l.to)
    }

    fn serde(text: &str, r: &RulesByName) -> Option<String> {
        super::super::jsonl::read_line(text, r, 1)
            .ok()
            .map(|l| spell(&l))
    }

    #[test]
    fn the_usual_shapes_take_the_fast_path_with_the_serde_values() {
        let r = rules();
        for text in [
            r#"{"type":"Person","data":{"name":"Ann","age":53,"ok":true}}"#,
            r#"{"type":"Person","data":{"name":"Émile","age":null,"ok":false}}"#,
            r#"{ "type" : "Person" , "data" : { "id" : "x", "name" : "b" } }"#,
            r#"{"type":"Person","data":{"name":"c","age":-9223372036854775808}}"#,
            r#"{"type":"Person","data":{"name":"c","age":9223372036854775807}}"#,
            r#"{"type":"Person","data":null}"#,
            r#"{"type":"Person","data":{}}"#,
            r#"{"type":"Person"}"#,
            r#"{"edge":"Knows","from":"p1","to":"p2","data":{"since":2015}}"#,
            r#"{"edge":"Knows","from":7,"to":true}"#,
            r#"{}"#,
        ] {
            let fast = fast(text, &r).map(|l| spell(&l));
            assert!(fast.is_some(), "{text} should read fast");
            assert_eq!(fast, serde(text, &r), "{text}");
        }
    }

    /// What a line loads as: its type, endpoints, given id and checked
    /// values, spelled so that borrowed and owned strings compare equal.
    fn row(
        name: &str,
        from: &Option<Value>,
        to: &Option<Value>,
        id: &Option<Value>,
        vals: &[Value],
    ) -> String {
        format!("{name} {from:?} {to:?} {id:?} {vals:?}")
    }

    /// A line's row by the general checks: serde's reading, then the type's
    /// checks. `None` when either refuses it.
    fn checked(text: &str, r: &RulesByName) -> Option<String> {
        let l = super::super::jsonl::read_line(text, r, 1).ok()?;
        let name = l.node.as_ref().or(l.edge.as_ref())?;
        let rules = &r[name.as_ref()];
        let (cells, id) = match l.data {
            Data::Absent => (vec![None; rules.props.len()], None),
            Data::Read(row) => (row.cells, row.id),
            Data::Raw(_) => return None,
        };
        let vals = rules.validate(cells, None).ok()?;
        Some(row(name, &l.from, &l.to, &id, &vals))
    }

    /// A line's row the way a block reads it: a recent shape, else the
    /// scanner (keeping its shape) and the checks. Whether a shape read it.
    fn through<'c>(
        text: &str,
        r: &'c RulesByName,
        types: &mut Types<'c>,
        shapes: &mut Shapes<'c>,
    ) -> (Option<String>, bool) {
        let mut vals = Vec::new();
        if let Some((s, rules)) = shapes.load(text, &mut vals) {
            let name = &rules.def.name;
            return (Some(row(name, &s.from, &s.to, &s.id, &vals)), true);
        }
        let read = line(text, types, shapes, Vec::new()).and_then(|(l, _)| {
            let name = l.node.as_ref().or(l.edge.as_ref())?;
            let rules = &r[name.as_ref()];
            let Data::Read(data) = l.data else {
                return checked(text, r);
            };
            let vals = rules.validate(data.cells, None).ok()?;
            Some(row(name, &l.from, &l.to, &data.id, &vals))
        });
        (read, false)
    }

    /// A line of a known shape is read by it, to the row the general checks
    /// make; one whose bytes between values differ is read by the scanner
    /// and leaves its shape.
    #[test]
    fn lines_of_a_known_shape_are_read_by_it() {
        let r = rules();
        let mut types = Types::new(&r);
        let mut shapes = Shapes::default();
        let mut read = |text: &str| {
            let (got, shaped) = through(text, &r, &mut types, &mut shapes);
            assert_eq!(got, checked(text, &r), "{text}");
            assert!(got.is_some(), "{text}");
            (shaped, shapes.recent.len())
        };
        let knows = |n: &str| {
            format!(r#"{{"edge":"Knows","from":"p{n}","to":{n},"data":{{"since":{n}}}}}"#)
        };
        assert_eq!(read(&knows("1")), (false, 1));
        assert_eq!(read(&knows("22")), (true, 1));
        assert_eq!(read(&knows("-3")), (true, 1));
        let person = r#"{"type":"Person","data":{"name":"Ann","age":null,"id":"Ann"}}"#;
        assert_eq!(read(person), (false, 2));
        let person = r#"{"type":"Person","data":{"name":"Bo","age":7,"id":"Bo"}}"#;
        assert_eq!(read(person), (true, 2));
        // Other keys, spacing or order: the scanner, and a new shape.
        let person = r#"{"type":"Person","data":{"age":7,"name":"Bo"}}"#;
        assert_eq!(read(person), (false, 3));
        let spaced = r#"{"edge":"Knows", "from":"p1","to":1,"data":{"since":1}}"#;
        assert_eq!(read(spaced), (false, 4));
        assert_eq!(read(&knows("5")), (true, 4));
        // A shape's values still go through the scanner's value rules and
        // their property's checks.
        let mut vals = Vec::new();
        for bad in [
            r#"{"edge":"Knows","from":"p\"1","to":1,"data":{"since":1}}"#,
            r#"{"edge":"Knows","from":"p1","to":1.5,"data":{"since":1}}"#,
            r#"{"edge":"Knows","from":"p1","to":1,"data":{"since":"1"}}"#,
            r#"{"edge":"Knows","from":"p1","to":1,"data":{"since":1}} "#,
            r#"{"edge":"Knows","from":"p1","to":1,"data":{"since":1},"x":1}"#,
            r#"{"type":"Person","data":{"age":200,"name":"Bo"}}"#,
            r#"{"type":"Person","data":{"age":7,"name":null}}"#,
        ] {
            assert!(shapes.load(bad, &mut vals).is_none(), "{bad}");
        }
    }

    /// Runs of every length up to three words: equal, or one byte apart
    /// anywhere, or one byte longer.
    #[test]
    fn runs_compare_byte_for_byte() {
        for n in 0..24 {
            let a: Vec<u8> = (0..n as u8).map(|i| b'a' + i).collect();
            assert!(same(&a, &a.clone()), "{n}");
            for at in 0..n {
                let mut b = a.clone();
                b[at] ^= 0x20;
                assert!(!same(&a, &b), "{n} differing at {at}");
            }
            let mut longer = a.clone();
            longer.push(b'z');
            assert!(!same(&a, &longer) && !same(&longer, &a), "{n}");
        }
    }

    /// A shape whose lines leave out a property that must be given, or a
    /// node's with endpoints, reads none: the general checks refuse them.
    #[test]
    fn a_shape_the_checks_refuse_loads_nothing() {
        let r = rules();
        let mut types = Types::new(&r);
        for text in [
            r#"{"type":"Person","data":{"age":7}}"#,
            r#"{"type":"Person","from":"a","data":{"name":"Bo"}}"#,
        ] {
            let mut shapes = Shapes::default();
            assert!(line(text, &mut types, &mut shapes, Vec::new()).is_some());
            assert_eq!(shapes.recent.len(), 1, "{text}");
            assert!(shapes.load(text, &mut Vec::new()).is_none(), "{text}");
        }
    }

    #[test]
    fn everything_else_goes_to_the_serde_reader() {
        let r = rules();
        for text in [
            r#"{"type":"Person","data":{"name":"a\"b"}}"#,
            r#"{"type":"Person","data":{"name":"a","age":1.5}}"#,
            r#"{"type":"Person","data":{"name":"a","age":1e3}}"#,
            r#"{"type":"Person","data":{"name":"a","age":-0}}"#,
            r#"{"type":"Person","data":{"name":"a","age":01}}"#,
            r#"{"type":"Person","data":{"name":"a","age":9223372036854775808}}"#,
            r#"{"type":"Person","data":{"name":"a","age":-9223372036854775809}}"#,
            r#"{"type":"Person","data":{"name":"a","name":"b"}}"#,
            r#"{"type":"Person","data":{"name":"a","id":"x","id":"y"}}"#,
            r#"{"type":"Person","data":{"name":"a","height":3}}"#,
            r#"{"type":"Person","data":{"name":["a"]}}"#,
            r#"{"data":{"name":"a"},"type":"Person"}"#,
            r#"{"type":"Robot","data":{"name":"a"}}"#,
            r#"{"edge":"Person","data":{"name":"a"}}"#,
            r#"{"type":"Person","type":"Person"}"#,
            r#"{"type":"Person","colour":1}"#,
            r#"{"t\u0079pe":"Person"}"#,
            r#"{"edge":"Knows","from":["a",1],"to":"b"}"#,
            r#"{"type":"Person","data":{"name":"a"}} x"#,
            r#"{"type":"Person","data":{"name":"a"},}"#,
            r#"{"type":"Person","data":{"name":"a"}"#,
            "{\"type\":\"Person\",\"data\":{\"name\":\"a\tb\"}}",
        ] {
            assert!(fast(text, &r).is_none(), "{text} should go to serde");
        }
    }

    /// Lines cut, spliced and re-spaced at random: whenever the fast path
    /// reads one, serde reads it too, to the same values.
    #[test]
    fn whatever_the_fast_path_reads_serde_reads_the_same() {
        let r = rules();
        let seeds = [
            r#"{"type":"Person","data":{"name":"Ann","age":53,"ok":true,"id":"Ann"}}"#,
            r#"{"edge":"Knows","from":"p1","to":"p2","data":{"since":-2015}}"#,
            r#"{"edge":"Knows","to":12,"from":"p2","data":null}"#,
        ];
        let alphabet = b"{}[]\":,\\ \t0123456789-+.eEnulltruefalse\x01a";
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut rand = move |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        let mut fast_reads = 0;
        let mut shaped = 0;
        let mut types = Types::new(&r);
        for _ in 0..200_000 {
            let mut b = seeds[rand(seeds.len())].as_bytes().to_vec();
            for _ in 0..1 + rand(3) {
                let at = rand(b.len() + 1);
                match rand(3) {
                    0 if at < b.len() => {
                        b.remove(at);
                    }
                    1 => b.insert(at, alphabet[rand(alphabet.len())]),
                    _ => b.insert(at, b' '),
                }
            }
            let Ok(text) = std::str::from_utf8(&b) else {
                continue;
            };
            let text = text.trim();
            if let Some(l) = fast(text, &r) {
                fast_reads += 1;
                assert_eq!(Some(spell(&l)), serde(text, &r), "{text}");
            }
            // The same line against the seeds' shapes.
            let mut shapes = Shapes::default();
            for seed in seeds {
                line(seed, &mut types, &mut shapes, Vec::new()).unwrap();
            }
            shapes.misses = 0;
            let mut vals = Vec::new();
            if let Some((s, rules)) = shapes.load(text, &mut vals) {
                shaped += 1;
                let got = row(&rules.def.name, &s.from, &s.to, &s.id, &vals);
                assert_eq!(Some(got), checked(text, &r), "{text} (shaped)");
            }
        }
        assert!(
            fast_reads > 10_000,
            "only {fast_reads} mutated lines read fast"
        );
        assert!(shaped > 10_000, "only {shaped} mutated lines read by shape");
    }
}
