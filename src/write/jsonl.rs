//! The JSONL reader: text -> validated per-type Arrow batches, with the line
//! number of every row. The input is cut into blocks at line ends and the
//! blocks are parsed on every core; results are put back in input order, so
//! "last occurrence wins" and error positions are the same as a serial read.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use arrow_array::RecordBatch;
use serde::de::{DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::columns::{TableBuilder, TypeRules};
use super::ids;
use crate::compiler::catalog::{Catalog, TypeDef};
use crate::compiler::value::Value;
use crate::error::{Location, OmniError, Result};
use crate::util::hash::FxHashMap;

/// Input is handed to workers in blocks of about this size.
const BLOCK_BYTES: usize = 4 << 20;

/// Every type's checks, by type name.
pub(super) type RulesByName = FxHashMap<String, Arc<TypeRules>>;

/// Every type's checks by name, remembering the last one asked for: a
/// file's lines come in runs of one type.
pub(super) struct Types<'c> {
    by_name: &'c RulesByName,
    last: Option<(&'c str, &'c Arc<TypeRules>)>,
}

impl<'c> Types<'c> {
    pub(super) fn new(by_name: &'c RulesByName) -> Self {
        Self {
            by_name,
            last: None,
        }
    }

    pub(super) fn get(&mut self, name: &str) -> Option<&'c Arc<TypeRules>> {
        if let Some((last, rules)) = self.last
            && last == name
        {
            return Some(rules);
        }
        let (name, rules) = self.by_name.get_key_value(name)?;
        self.last = Some((name, rules));
        Some(rules)
    }
}

/// An emptied vector's allocation, for items of the same size under
/// another lifetime: a block's lines borrow their own text, and one buffer
/// of cells serves them all.
fn reuse<T, U>(mut v: Vec<T>) -> Vec<U> {
    v.clear();
    v.into_iter().map(|_| unreachable!("emptied")).collect()
}

/// One type's rows from a file.
pub struct ParsedType {
    pub def: Arc<TypeDef>,
    pub batches: Vec<RecordBatch>,
    /// Per batch, the input line of each row.
    pub lines: Vec<Vec<u32>>,
    /// Rows whose id was supplied or derived from a key.
    pub explicit_ids: usize,
}

impl ParsedType {
    pub fn rows(&self) -> usize {
        self.batches.iter().map(|b| b.num_rows()).sum()
    }
}

pub struct Parsed {
    /// By type name, in catalog order.
    pub types: BTreeMap<u32, ParsedType>,
    pub lines: usize,
    pub bytes: u64,
}

/// One line, read in one pass: `data` goes straight into cells when its type
/// is already known (the usual key order), and is kept raw otherwise.
pub(super) struct Line<'a> {
    pub(super) node: Option<Cow<'a, str>>,
    pub(super) edge: Option<Cow<'a, str>>,
    pub(super) from: Option<Value<'a>>,
    pub(super) to: Option<Value<'a>>,
    pub(super) data: Data<'a>,
}

impl Line<'_> {
    pub(super) fn empty() -> Self {
        Line {
            node: None,
            edge: None,
            from: None,
            to: None,
            data: Data::Absent,
        }
    }
}

pub(super) enum Data<'a> {
    Absent,
    Read(Row<'a>),
    Raw(&'a RawValue),
}

const LINE_FIELDS: &[&str] = &["type", "edge", "from", "to", "data"];

struct LineSeed<'r> {
    rules: &'r RulesByName,
    problem: &'r mut Option<Refused>,
}

impl<'de> DeserializeSeed<'de> for LineSeed<'_> {
    type Value = Line<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Line<'de>, D::Error> {
        d.deserialize_map(self)
    }
}

fn once<T, E: serde::de::Error>(
    slot: &mut Option<T>,
    value: T,
    field: &'static str,
) -> std::result::Result<(), E> {
    if slot.replace(value).is_some() {
        return Err(E::duplicate_field(field));
    }
    Ok(())
}

impl<'de> Visitor<'de> for LineSeed<'_> {
    type Value = Line<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a node or edge object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Line<'de>, A::Error> {
        let mut line = Line::empty();
        let mut seen_data = false;
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            // Byte patterns: four same-length names compare as bytes, not as
            // four memcmp calls, on every line.
            match key.as_bytes() {
                [b't', b'y', b'p', b'e'] => once(&mut line.node, map.next_value()?, "type")?,
                [b'e', b'd', b'g', b'e'] => once(&mut line.edge, map.next_value()?, "edge")?,
                [b'f', b'r', b'o', b'm'] => once(&mut line.from, map.next_value()?, "from")?,
                [b't', b'o'] => once(&mut line.to, map.next_value()?, "to")?,
                [b'd', b'a', b't', b'a'] => {
                    if std::mem::replace(&mut seen_data, true) {
                        return Err(serde::de::Error::duplicate_field("data"));
                    }
                    let rules = match (&line.node, &line.edge) {
                        (Some(n), None) => self.rules.get(n.as_ref()).filter(|r| !r.def.is_edge()),
                        (None, Some(e)) => self.rules.get(e.as_ref()).filter(|r| r.def.is_edge()),
                        _ => None,
                    };
                    line.data = match rules {
                        Some(rules) => Data::Read(map.next_value_seed(DataSeed {
                            rules,
                            problem: &mut *self.problem,
                        })?),
                        None => match map.next_value::<Option<&'de RawValue>>()? {
                            Some(raw) => Data::Raw(raw),
                            None => Data::Absent,
                        },
                    };
                }
                _ => return Err(serde::de::Error::unknown_field(&key, LINE_FIELDS)),
            }
        }
        Ok(line)
    }
}

/// A property of a `data` object that was refused, and why.
struct Refused {
    type_name: String,
    property: String,
    why: String,
}

impl Refused {
    fn at_line(self, line: usize) -> OmniError {
        let mut at = at_line(line, Some(&self.type_name));
        at.property = Some(self.property);
        OmniError::invalid(at, self.why)
    }
}

/// Reads a `data` object straight into per-property cells.
struct DataSeed<'r> {
    rules: &'r TypeRules,
    problem: &'r mut Option<Refused>,
}

pub(super) struct Row<'a> {
    pub(super) cells: Vec<Option<Value<'a>>>,
    pub(super) id: Option<Value<'a>>,
}

impl DataSeed<'_> {
    fn refuse(&mut self, property: &str, why: String) {
        *self.problem = Some(Refused {
            type_name: self.rules.def.name.clone(),
            property: property.to_string(),
            why,
        });
    }
}

impl<'de> DeserializeSeed<'de> for DataSeed<'_> {
    type Value = Row<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Row<'de>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for DataSeed<'_> {
    type Value = Row<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object of property values")
    }

    /// `"data": null` is no data.
    fn visit_unit<E>(self) -> std::result::Result<Row<'de>, E> {
        Ok(Row {
            cells: vec![None; self.rules.props.len()],
            id: None,
        })
    }

    fn visit_map<A: MapAccess<'de>>(
        mut self,
        mut map: A,
    ) -> std::result::Result<Row<'de>, A::Error> {
        let mut row = Row {
            cells: vec![None; self.rules.props.len()],
            id: None,
        };
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            if key == "id" {
                row.id = Some(map.next_value()?);
                continue;
            }
            let Some(i) = self.rules.prop_index(&key) else {
                self.refuse(&key, "unknown property".into());
                return Err(serde::de::Error::custom("unknown property"));
            };
            if row.cells[i].is_some() {
                self.refuse(&key, "property given twice".into());
                return Err(serde::de::Error::custom("duplicate property"));
            }
            match map.next_value::<Value<'de>>() {
                Ok(c) => row.cells[i] = Some(c),
                Err(e) => {
                    self.refuse(&key, e.to_string());
                    return Err(e);
                }
            }
        }
        Ok(row)
    }
}

/// An edge's `from` or `to` as an id.
#[inline(always)]
fn edge_end<'c>(
    c: &'c Option<Value>,
    which: &str,
    line: usize,
    name: &str,
) -> Result<Cow<'c, str>> {
    // The usual endpoint, a string, borrowed where the loop can keep it.
    match c {
        Some(Value::Str(s)) => Ok(Cow::Borrowed(s.as_ref())),
        _ => edge_end_other(c, which, line, name),
    }
}

#[inline(never)]
fn edge_end_other<'c>(
    c: &'c Option<Value>,
    which: &str,
    line: usize,
    name: &str,
) -> Result<Cow<'c, str>> {
    c.as_ref().and_then(ids::endpoint_id).ok_or_else(|| {
        OmniError::invalid(
            Location {
                property: Some(which.into()),
                value: c.as_ref().map(|c| c.show()),
                ..at_line(line, Some(name))
            },
            format!("an edge needs \"{which}\": the id of its endpoint node"),
        )
    })
}

/// One line read by serde, which spells every error.
pub(super) fn read_line<'a>(text: &'a str, rules: &RulesByName, line: usize) -> Result<Line<'a>> {
    let mut problem = None;
    let seed = LineSeed {
        rules,
        problem: &mut problem,
    };
    let mut de = serde_json::Deserializer::from_str(text);
    seed.deserialize(&mut de)
        .and_then(|l| de.end().map(|()| l))
        .map_err(|e| match problem {
            Some(refused) => refused.at_line(line),
            None => OmniError::invalid(at_line(line, None), format!("malformed JSON line: {e}")),
        })
}

/// Parses lines of one block.
struct BlockParser<'c> {
    rules: &'c RulesByName,
    types: Types<'c>,
    shapes: super::jsonl_fast::Shapes<'c>,
    builders: BTreeMap<u32, TableBuilder>,
    ids: crate::util::ulid::Monotonic,
    /// The last line's cells, emptied.
    spare: Vec<Option<Value<'static>>>,
}

fn at_line(line: usize, type_name: Option<&str>) -> Location {
    Location {
        line: Some(line),
        type_name: type_name.map(str::to_string),
        ..Default::default()
    }
}

impl<'c> BlockParser<'c> {
    fn new(rules: &'c RulesByName) -> Self {
        Self {
            rules,
            types: Types::new(rules),
            shapes: Default::default(),
            builders: BTreeMap::new(),
            ids: crate::util::ulid::Monotonic::new(),
            spare: Vec::new(),
        }
    }

    // The loader's hot path: a line of a shape seen before, read and
    // checked straight into its values; every other line through the
    // scanner (or serde) and the general checks, ending the same way.
    fn line(&mut self, text: &str, line: usize) -> Result<()> {
        let mut vals = reuse(std::mem::take(&mut self.spare));
        if let Some((shaped, rules)) = self.shapes.load(text, &mut vals) {
            let ends = rules.def.is_edge().then_some((&shaped.from, &shaped.to));
            return self.push_row(rules, vals, shaped.id.as_ref(), ends, line);
        }
        let cells = reuse(vals);
        let read = super::jsonl_fast::line(text, &mut self.types, &mut self.shapes, cells);
        let (raw, found) = match read {
            Some(read) => read,
            None => (read_line(text, self.rules, line)?, None),
        };
        let (name, is_edge) = match (&raw.node, &raw.edge) {
            (Some(n), None) => (n.as_ref(), false),
            (None, Some(e)) => (e.as_ref(), true),
            (Some(_), Some(_)) => {
                return Err(OmniError::invalid(
                    at_line(line, None),
                    "a line is either a node (\"type\") or an edge (\"edge\"), not both",
                ));
            }
            (None, None) => {
                return Err(OmniError::invalid(
                    at_line(line, None),
                    "a line needs \"type\" (a node) or \"edge\" (an edge)",
                ));
            }
        };
        let rules = match found.or_else(|| self.types.get(name)) {
            Some(r) if r.def.is_edge() == is_edge => r,
            Some(r) => {
                let what = if r.def.is_edge() { "an edge" } else { "a node" };
                return Err(OmniError::invalid(
                    at_line(line, Some(name)),
                    format!("{name} is {what} type"),
                ));
            }
            None => {
                return Err(OmniError::invalid(
                    at_line(line, Some(name)),
                    format!("unknown {} type", if is_edge { "edge" } else { "node" }),
                ));
            }
        };
        if !is_edge && (raw.from.is_some() || raw.to.is_some()) {
            return Err(OmniError::invalid(
                at_line(line, Some(name)),
                "\"from\" and \"to\" belong to edges",
            ));
        }
        let row = match raw.data {
            Data::Absent => Row {
                cells: vec![None; rules.props.len()],
                id: None,
            },
            Data::Read(row) => row,
            Data::Raw(raw_data) => {
                let mut problem = None;
                let mut de = serde_json::Deserializer::from_str(raw_data.get());
                let seed = DataSeed {
                    rules,
                    problem: &mut problem,
                };
                match seed.deserialize(&mut de) {
                    Ok(r) => r,
                    Err(e) => {
                        return Err(match problem {
                            Some(refused) => refused.at_line(line),
                            None => OmniError::invalid(at_line(line, Some(name)), e.to_string()),
                        });
                    }
                }
            }
        };
        let vals = rules.validate(row.cells, Some(line))?;
        let ends = is_edge.then_some((&raw.from, &raw.to));
        self.push_row(rules, vals, row.id.as_ref(), ends, line)
    }

    /// A line's checked values, its given id (if any) and, for an edge, its
    /// endpoints, into its type's rows: the id checked against the key (or
    /// generated), then the endpoints.
    fn push_row<'a>(
        &mut self,
        rules: &'c Arc<TypeRules>,
        mut vals: Vec<Value<'a>>,
        given: Option<&Value<'a>>,
        ends: Option<(&Option<Value<'a>>, &Option<Value<'a>>)>,
        line: usize,
    ) -> Result<()> {
        let name = rules.def.name.as_str();
        let given_id = match given {
            None | Some(Value::Null) => None,
            Some(c) => Some(ids::endpoint_id(c).ok_or_else(|| {
                OmniError::invalid(
                    Location {
                        property: Some("id".into()),
                        value: Some(c.show()),
                        ..at_line(line, Some(name))
                    },
                    "an id is a string",
                )
            })?),
        };
        let generated;
        let (id, explicit): (Cow<str>, bool) = match ids::row_id(&rules.key, &vals, given_id) {
            Ok(Some(id)) => (id, true),
            Ok(None) => {
                generated = self.ids.next_id();
                (Cow::Borrowed(&*generated), false)
            }
            Err(derived) => {
                return Err(OmniError::invalid(
                    Location {
                        property: Some("id".into()),
                        value: given.and_then(ids::endpoint_id).map(|g| format!("{g:?}")),
                        ..at_line(line, Some(name))
                    },
                    format!("does not match the id {derived:?} derived from the key"),
                ));
            }
        };
        let endpoints = match ends {
            Some((from, to)) => Some((
                edge_end(from, "from", line, name)?,
                edge_end(to, "to", line, name)?,
            )),
            None => None,
        };
        let builder = self
            .builders
            .entry(rules.def.id)
            .or_insert_with(|| TableBuilder::new(rules.clone(), 1024));
        builder.push(
            &id,
            endpoints.as_ref().map(|(s, d)| (s.as_ref(), d.as_ref())),
            &mut vals,
            line,
            explicit,
        );
        self.spare = reuse(vals);
        Ok(())
    }

    fn block(mut self, text: &str, first_line: usize) -> Result<BlockRows> {
        // Lines cut by the memchr crate's vectorised search (on lines this
        // short, faster than the search behind `str::split`), trimmed only
        // when an end is not a line's usual `{` or `}`.
        let mut start = 0;
        let ends = memchr::memchr_iter(b'\n', text.as_bytes()).chain([text.len()]);
        for (i, end) in ends.enumerate() {
            let raw = &text[start..end];
            start = end + 1;
            let l = match raw.as_bytes() {
                [b'{', .., b'}'] => raw,
                _ => raw.trim(),
            };
            if l.is_empty() || l.starts_with("//") {
                continue;
            }
            self.line(l, first_line + i)?;
        }
        self.finish()
    }

    /// The block's rows per type.
    fn finish(self) -> Result<BlockRows> {
        let mut out = BTreeMap::new();
        for (id, b) in self.builders {
            let explicit = b.explicit_ids;
            let (batch, lines) = b.finish()?;
            out.insert(id, (batch, lines, explicit));
        }
        Ok(out)
    }
}

/// Rows that arrive as values rather than text (a load from Arrow tables),
/// each checked and built exactly as a line of a file is.
pub(super) struct ValueRows<'c> {
    parser: BlockParser<'c>,
    lines: usize,
}

impl<'c> ValueRows<'c> {
    /// The checks of type `name`.
    pub(super) fn rules(&self, name: &str) -> Option<&'c Arc<TypeRules>> {
        self.parser.rules.get(name)
    }

    /// One row: a cell per property of `rules` (`None`: absent), the id
    /// it gives (if any) and, for an edge, its endpoints; `line` numbers it
    /// in errors and in "last occurrence wins".
    pub(super) fn push<'a>(
        &mut self,
        rules: &'c Arc<TypeRules>,
        cells: Vec<Option<Value<'a>>>,
        given: Option<&Value<'a>>,
        ends: Option<(&Option<Value<'a>>, &Option<Value<'a>>)>,
        line: usize,
    ) -> Result<()> {
        let vals = rules.validate(cells, Some(line))?;
        self.lines = self.lines.max(line);
        self.parser.push_row(rules, vals, given, ends, line)
    }
}

/// Rows given as values in blocks, checked and gathered per type as
/// [`parse`] gathers a file's: each block is fed to a [`ValueRows`] on one
/// of the workers, and the blocks' rows are put back in input order.
pub(super) fn parse_values<B: Send>(
    catalog: &Catalog,
    blocks: impl Iterator<Item = Result<B>>,
    feed: impl Fn(&mut ValueRows<'_>, B) -> Result<()> + Sync,
) -> Result<Parsed> {
    let rules = rules_by_name(catalog)?;
    let lines = AtomicUsize::new(0);
    let ((), results) = in_workers(
        |work_tx, failure| {
            for (idx, block) in blocks.enumerate() {
                if failure.any() || work_tx.send((idx, block?)).is_err() {
                    break;
                }
            }
            Ok(())
        },
        |block| {
            let mut rows = ValueRows {
                parser: BlockParser::new(&rules),
                lines: 0,
            };
            feed(&mut rows, block)?;
            lines.fetch_max(rows.lines, Ordering::Relaxed);
            rows.parser.finish()
        },
    )?;
    Ok(Parsed {
        types: merge_blocks(catalog, results)?,
        lines: lines.into_inner(),
        bytes: 0,
    })
}

/// One block's rows per type: the batch, its lines, and how many ids were explicit.
type BlockRows = BTreeMap<u32, (RecordBatch, Vec<u32>, usize)>;
type BlockResult = (usize, Result<BlockRows>);

/// Parse a whole JSONL input. `progress` is told how many bytes were read.
pub fn parse(
    catalog: &Catalog,
    input: impl Read,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Parsed> {
    let rules = rules_by_name(catalog)?;
    // Parsed blocks' buffers go back to the reader: fresh ones would cost
    // a page fault and a zeroed page every 4 KiB of input.
    let (spare_tx, spare_rx) = crossbeam_channel::bounded::<Vec<u8>>(2 * workers());
    let ((lines, bytes), results) = in_workers(
        |work_tx, failure| read_blocks(input, work_tx, spare_rx, failure, progress),
        |(first_line, bytes): (usize, Vec<u8>)| {
            let result = parse_block(&rules, first_line, &bytes);
            let _ = spare_tx.try_send(bytes);
            result
        },
    )?;
    Ok(Parsed {
        types: merge_blocks(catalog, results)?,
        lines,
        bytes,
    })
}

fn rules_by_name(catalog: &Catalog) -> Result<RulesByName> {
    catalog
        .types
        .iter()
        .map(|t| Ok((t.name.clone(), Arc::new(TypeRules::new(t)?))))
        .collect()
}

fn workers() -> usize {
    std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(1, 8)
}

/// The first block (in input order) whose check failed, if any.
struct Failure(AtomicUsize);

impl Failure {
    fn any(&self) -> bool {
        self.0.load(Ordering::Relaxed) != usize::MAX
    }

    /// Blocks after a failed one need no check: its error is reported.
    fn skips(&self, idx: usize) -> bool {
        idx > self.0.load(Ordering::Relaxed)
    }
}

/// Blocks checked on worker threads. `read` numbers the blocks and sends
/// them until its input ends or `Failure::any`; `check` turns one into its
/// rows. The results come back in input order, and since only blocks
/// after a failed one are skipped, the first error in input order is
/// among them whichever worker ran first.
fn in_workers<W: Send, R>(
    read: impl FnOnce(&crossbeam_channel::Sender<(usize, W)>, &Failure) -> Result<R>,
    check: impl Fn(W) -> Result<BlockRows> + Sync,
) -> Result<(R, Vec<BlockResult>)> {
    let workers = workers();
    let (work_tx, work_rx) = crossbeam_channel::bounded::<(usize, W)>(workers * 2);
    let (done_tx, done_rx) = crossbeam_channel::unbounded::<BlockResult>();
    let failure = Failure(AtomicUsize::new(usize::MAX));
    let read = std::thread::scope(|scope| {
        for _ in 0..workers {
            let (work_rx, done_tx) = (work_rx.clone(), done_tx.clone());
            let (failure, check) = (&failure, &check);
            scope.spawn(move || {
                for (idx, block) in work_rx {
                    if failure.skips(idx) {
                        continue;
                    }
                    let result = check(block);
                    if result.is_err() {
                        failure.0.fetch_min(idx, Ordering::Relaxed);
                    }
                    let _ = done_tx.send((idx, result));
                }
            });
        }
        drop(done_tx);
        let read = read(&work_tx, &failure);
        drop(work_tx);
        read
    });
    let mut results: Vec<BlockResult> = done_rx.into_iter().collect();
    results.sort_by_key(|(idx, _)| *idx);
    // A block's error comes before one of the reading that stopped after it.
    if let Some(at) = results.iter().position(|(_, r)| r.is_err()) {
        return Err(results.swap_remove(at).1.expect_err("found above"));
    }
    Ok((read?, results))
}

/// One block of whole lines, its first line numbered `first_line`.
fn parse_block(rules: &RulesByName, first_line: usize, bytes: &[u8]) -> Result<BlockRows> {
    match std::str::from_utf8(bytes) {
        Ok(text) => BlockParser::new(rules).block(text, first_line),
        Err(e) => {
            let bad_line = first_line
                + bytes[..e.valid_up_to()]
                    .iter()
                    .filter(|b| **b == b'\n')
                    .count();
            Err(OmniError::invalid(
                at_line(bad_line, None),
                "the line is not valid UTF-8",
            ))
        }
    }
}

/// Read the input in blocks cut at their last line end and hand them to
/// the workers, numbered, until the end or a worker fails. Returns the
/// lines and bytes read.
fn read_blocks(
    mut input: impl Read,
    work_tx: &crossbeam_channel::Sender<(usize, (usize, Vec<u8>))>,
    spare_rx: crossbeam_channel::Receiver<Vec<u8>>,
    failure: &Failure,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<(usize, u64)> {
    let (mut total_lines, mut total_bytes) = (0usize, 0u64);
    let mut carry: Vec<u8> = Vec::new();
    let mut idx = 0;
    let mut next_line = 1usize;
    let mut eof = false;
    while !eof && !failure.any() {
        let mut block = spare_rx.try_recv().unwrap_or_default();
        block.clear();
        block.extend_from_slice(&carry);
        carry.clear();
        block.reserve(BLOCK_BYTES);
        // `read_to_end` fills spare capacity without zeroing it first.
        let n = (&mut input)
            .take(BLOCK_BYTES as u64)
            .read_to_end(&mut block)?;
        eof = n < BLOCK_BYTES;
        total_bytes += n as u64;
        progress(total_bytes);
        if !eof {
            match memchr::memrchr(b'\n', &block) {
                Some(cut) => {
                    carry.extend_from_slice(&block[cut + 1..]);
                    block.truncate(cut + 1);
                }
                None => {
                    carry = block;
                    continue;
                }
            }
        }
        if block.is_empty() {
            continue;
        }
        let newlines = memchr::memchr_iter(b'\n', &block).count();
        let lines_here = newlines + usize::from(!block.ends_with(b"\n"));
        let first = next_line;
        next_line += newlines;
        total_lines += lines_here;
        if work_tx.send((idx, (first, block))).is_err() {
            break;
        }
        idx += 1;
    }
    Ok((total_lines, total_bytes))
}

/// The blocks' rows per type, in input order (the first error wins).
fn merge_blocks(catalog: &Catalog, results: Vec<BlockResult>) -> Result<BTreeMap<u32, ParsedType>> {
    let mut types: BTreeMap<u32, ParsedType> = BTreeMap::new();
    for (_, r) in results {
        for (id, (batch, lines, explicit)) in r? {
            let def = catalog
                .types
                .iter()
                .find(|t| t.id == id)
                .expect("parsed type exists");
            let entry = types.entry(id).or_insert_with(|| ParsedType {
                def: Arc::new(def.clone()),
                batches: Vec::new(),
                lines: Vec::new(),
                explicit_ids: 0,
            });
            entry.batches.push(batch);
            entry.lines.push(lines);
            entry.explicit_ids += explicit;
        }
    }
    Ok(types)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compiler::schema::compile;

    fn cat() -> Catalog {
        compile(
            "node Person { name: String @key\n age: I32? }\nnode Emp { org: String\n num: I64\n @key(org, num) }\nnode Doc { title: String }\nedge Knows: Person -> Person { since: Date? }",
        )
        .unwrap()
    }

    fn run(text: &str) -> Result<Parsed> {
        parse(&cat(), text.as_bytes(), &|_| {})
    }

    /// Cells and values share one allocation from line to line.
    #[test]
    fn a_buffer_of_cells_is_reused_across_lifetimes() {
        let mut cells: Vec<Option<Value<'static>>> = Vec::with_capacity(8);
        cells.push(Some(Value::Int(1)));
        let text = String::from("x");
        let mut vals: Vec<Value<'_>> = reuse(cells);
        assert!(vals.is_empty() && vals.capacity() == 8);
        vals.push(Value::Str(Cow::Borrowed(&text)));
        let back: Vec<Option<Value<'static>>> = reuse(vals);
        assert!(back.is_empty() && back.capacity() == 8);
    }

    #[test]
    fn rows_land_in_their_types_with_line_numbers() {
        let p = run("// people\n{\"type\":\"Person\",\"data\":{\"name\":\"a\",\"age\":3}}\n\n{\"type\":\"Emp\",\"data\":{\"org\":\"x\",\"num\":3}}\n{\"edge\":\"Knows\",\"from\":\"a\",\"to\":\"a\"}\n{\"type\":\"Doc\",\"data\":{\"title\":\"t\"}}").unwrap();
        let person = &p.types[&cat().get("Person").unwrap().id];
        assert_eq!(person.lines, vec![vec![2]]);
        let emp = &p.types[&cat().get("Emp").unwrap().id];
        let ids = emp.batches[0]
            .column(0)
            .as_any()
            .downcast_ref::<arrow_array::StringArray>()
            .unwrap();
        assert_eq!(ids.value(0), r#"["x","3"]"#);
        let doc = &p.types[&cat().get("Doc").unwrap().id];
        assert_eq!(doc.explicit_ids, 0);
        let knows = &p.types[&cat().get("Knows").unwrap().id];
        assert_eq!(knows.lines, vec![vec![5]]);
    }

    fn err_of(text: &str) -> (Location, String) {
        match run(text) {
            Err(OmniError::Invalid { at, message }) => (*at, message),
            other => panic!("expected invalid data, got {:?}", other.map(|p| p.lines)),
        }
    }

    #[test]
    fn bad_rows_name_line_type_property_and_value() {
        let (at, m) =
            err_of("{\"type\":\"Person\",\"data\":{\"name\":\"a\"}}\n{\"type\":\"Person\"");
        assert_eq!(at.line, Some(2));
        assert!(m.contains("malformed JSON"));
        let (at, _) = err_of("{\"type\":\"Robot\",\"data\":{}}");
        assert_eq!(at.type_name.as_deref(), Some("Robot"));
        let (at, m) = err_of("{\"type\":\"Person\",\"data\":{\"name\":\"a\",\"height\":3}}");
        assert_eq!(at.property.as_deref(), Some("height"));
        assert!(m.contains("unknown property"));
        let (at, _) = err_of("{\"type\":\"Person\",\"data\":{\"name\":\"a\",\"age\":\"old\"}}");
        assert_eq!(
            (at.property.as_deref(), at.value.as_deref()),
            (Some("age"), Some("\"old\""))
        );
        let (at, _) = err_of("{\"type\":\"Person\",\"data\":{\"age\":1}}");
        assert_eq!(at.property.as_deref(), Some("name"));
        let (at, _) = err_of("{\"edge\":\"Knows\",\"from\":\"a\"}");
        assert_eq!(at.property.as_deref(), Some("to"));
        let (_, m) = err_of("{\"edge\":\"Person\",\"from\":\"a\",\"to\":\"b\"}");
        assert!(m.contains("node type"));
    }

    #[test]
    fn key_order_null_data_and_repeated_keys() {
        // `data` before its type is read on a second look, with the same checks.
        let p = run("{\"data\":{\"name\":\"a\",\"age\":3},\"type\":\"Person\"}").unwrap();
        assert_eq!(p.types[&cat().get("Person").unwrap().id].rows(), 1);
        // `"data": null` is no data: here a required property is missing.
        let (at, m) = err_of("{\"type\":\"Doc\",\"data\":null}");
        assert_eq!(
            (at.property.as_deref(), m.as_str()),
            (Some("title"), "required property is missing")
        );
        let (at, m) = err_of("{\"data\":{\"name\":\"a\",\"x\":1},\"type\":\"Person\"}");
        assert_eq!(
            (at.property.as_deref(), m.as_str()),
            (Some("x"), "unknown property")
        );
        let (at, m) = err_of("{\"type\":\"Person\",\"data\":{\"name\":\"a\",\"x\":1}}");
        assert_eq!(at.type_name.as_deref(), Some("Person"));
        assert_eq!(
            (at.property.as_deref(), m.as_str()),
            (Some("x"), "unknown property")
        );
        let (_, m) = err_of("{\"type\":\"Person\",\"type\":\"Doc\"}");
        assert!(m.contains("duplicate field `type`"), "{m}");
        let (_, m) = err_of("{\"type\":\"Doc\",\"colour\":1}");
        assert!(m.contains("unknown field `colour`"), "{m}");
        let (_, m) = err_of("{\"type\":\"Doc\",\"data\":{\"title\":\"t\"}} trailing");
        assert!(m.contains("malformed JSON"), "{m}");
    }

    #[test]
    fn blocks_keep_order_and_line_numbers_across_boundaries() {
        let mut text = String::new();
        let n = 200_000;
        for i in 0..n {
            text.push_str(&format!(
                "{{\"type\":\"Person\",\"data\":{{\"name\":\"p{i}\",\"age\":{}}}}}\n",
                i % 100
            ));
        }
        let p = run(&text).unwrap();
        let person = &p.types[&cat().get("Person").unwrap().id];
        assert!(person.batches.len() > 1, "input should span several blocks");
        let lines: Vec<u32> = person.lines.iter().flatten().copied().collect();
        assert_eq!(lines.len(), n);
        assert!(lines.windows(2).all(|w| w[1] == w[0] + 1));
        assert_eq!(p.lines, n);
        let mut bad = text.clone();
        bad.push_str("{\"type\":\"Person\",\"data\":{\"name\":\"x\",\"age\":\"y\"}}\n");
        let err = run(&bad).err().expect("the bad line is refused");
        assert!(matches!(err, OmniError::Invalid { at, .. } if at.line == Some(n + 1)));
    }
}
