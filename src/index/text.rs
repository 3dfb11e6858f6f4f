//! Full-text search over one String column of one table version: the one
//! tokenizer every text function shares, the inverted index (built from a
//! version's rows, persisted by optimize, and rebased onto later versions
//! with their fresh rows added, so no row is ever missed for being newer
//! than an index build), BM25 scores and the `search` / `match_text` /
//! `fuzzy` filters.

use arrow_array::{Array, StringArray};
use bytes::Bytes;

use super::codec::{Decoder, Encoder};
use super::coverage::Coverage;
use crate::error::Result;
use crate::util::hash::FxHashMap;

/// BM25's term-frequency saturation.
pub const BM25_K1: f64 = 1.2;
/// BM25's document-length normalisation.
pub const BM25_B: f64 = 0.75;

/// Each token of a text in order: a lowercase run of Unicode letters and
/// digits. No stemming, no stop words. The one tokenizer: a token that is
/// already lowercase ASCII is passed without copying it.
pub fn each_token(text: &str, mut f: impl FnMut(&str)) {
    for run in text.split(|c: char| !c.is_alphanumeric()) {
        if run.is_empty() {
            continue;
        }
        if run.bytes().all(|b| b.is_ascii() && !b.is_ascii_uppercase()) {
            f(run);
        } else {
            f(&run.to_lowercase());
        }
    }
}

/// The tokens of a text, in order.
pub fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    each_token(text, |t| out.push(t.to_string()));
    out
}

/// A query's distinct tokens, in first-seen order (a repeated query token
/// counts once).
pub fn query_tokens(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for t in tokens(text) {
        if !out.contains(&t) {
            out.push(t);
        }
    }
    out
}

/// The magic of a persisted inverted index.
const MAGIC: &[u8; 4] = b"OGTX";

/// The length of a row without a text (null): not a document for BM25.
const NO_TEXT: u32 = u32::MAX;

/// Per token id: (row, occurrences), rows ascending.
enum Postings {
    /// Built in memory.
    Built(Vec<Vec<(u32, u32)>>),
    /// Read from an index file: where each token's postings start in it.
    /// They are decoded when used, so a search decodes only its own
    /// tokens' (a new process reads a file, not the whole index).
    Stored {
        bytes: Bytes,
        at: Vec<usize>,
        /// The file, for errors.
        what: String,
    },
}

/// The inverted index of one column: for each token, the rows holding it
/// with their counts; each row's length in tokens.
pub struct TextIndex {
    vocab: FxHashMap<String, u32>,
    postings: Postings,
    /// Tokens per row ([`NO_TEXT`] for a null text, or a row not indexed).
    lengths: Vec<u32>,
    /// Rows with a text (not null): BM25's N.
    docs: u32,
    /// Mean tokens per row with a text: BM25's avgdl.
    mean_length: f64,
}

impl TextIndex {
    pub fn build(column: &StringArray) -> Self {
        Self::build_rows(column, 0..column.len())
    }

    /// The index of some rows of a column (ascending); the others hold no
    /// text for it.
    pub fn build_rows(column: &StringArray, rows: impl Iterator<Item = usize>) -> Self {
        let mut vocab: FxHashMap<String, u32> = FxHashMap::default();
        let mut postings: Vec<Vec<(u32, u32)>> = Vec::new();
        let mut lengths = vec![NO_TEXT; column.len()];
        let mut here: Vec<u32> = Vec::new();
        for row in rows {
            if column.is_null(row) {
                continue;
            }
            here.clear();
            each_token(column.value(row), |t| {
                let id = match vocab.get(t) {
                    Some(&id) => id,
                    None => {
                        let id = vocab.len() as u32;
                        vocab.insert(t.to_string(), id);
                        postings.push(Vec::new());
                        id
                    }
                };
                here.push(id);
            });
            lengths[row] = here.len() as u32;
            // The row's tokens counted: sorted, then runs.
            here.sort_unstable();
            for run in here.chunk_by(|a, b| a == b) {
                postings[run[0] as usize].push((row as u32, run.len() as u32));
            }
        }
        Self::assembled(vocab, Postings::Built(postings), lengths)
    }

    /// BM25's statistics (N, avgdl) follow from the lengths alone.
    fn assembled(vocab: FxHashMap<String, u32>, postings: Postings, lengths: Vec<u32>) -> Self {
        let present = lengths.iter().filter(|&&l| l != NO_TEXT);
        let docs = present.clone().count() as u32;
        let total: u64 = present.map(|&l| l as u64).sum();
        let mean_length = if docs == 0 {
            0.0
        } else {
            total as f64 / docs as f64
        };
        Self {
            vocab,
            postings,
            lengths,
            docs,
            mean_length,
        }
    }

    /// Token `id`'s postings.
    fn list(&self, id: u32) -> Result<std::borrow::Cow<'_, [(u32, u32)]>> {
        use std::borrow::Cow;
        match &self.postings {
            Postings::Built(p) => Ok(Cow::Borrowed(&p[id as usize])),
            Postings::Stored { bytes, at, what } => {
                let mut d = Decoder::resume(bytes, at[id as usize], what);
                let rows = d.ascending()?;
                let tfs = d.varints()?;
                if rows.len() != tfs.len()
                    || rows
                        .last()
                        .is_some_and(|&r| r as usize >= self.lengths.len())
                {
                    return Err(crate::error::OmniError::Storage(format!(
                        "index file {what}: postings do not fit its rows"
                    )));
                }
                Ok(Cow::Owned(rows.into_iter().zip(tfs).collect()))
            }
        }
    }

    /// The index of `rows` rows none of which is indexed.
    pub fn empty(rows: usize) -> Self {
        Self::assembled(
            FxHashMap::default(),
            Postings::Built(Vec::new()),
            vec![NO_TEXT; rows],
        )
    }

    /// This index, built at another version, as the index of a version whose
    /// rows `cov` maps its documents onto; `fresh` indexes that version's
    /// fresh rows (built over its whole column with [`Self::build_rows`]).
    /// The statistics (N, mean length, document frequencies) come out as if
    /// the whole version had been indexed at once.
    pub fn rebase(&self, cov: &Coverage, fresh: TextIndex) -> Result<TextIndex> {
        let TextIndex {
            mut vocab,
            postings,
            mut lengths,
            ..
        } = fresh;
        let Postings::Built(mut postings) = postings else {
            unreachable!("fresh rows are indexed in memory (build_rows)")
        };
        for (doc, row) in cov.doc_row.iter().enumerate() {
            if let Some(row) = row {
                lengths[*row as usize] = self.lengths[doc];
            }
        }
        for (word, &id) in &self.vocab {
            let from = self.list(id)?;
            let moved = from
                .iter()
                .filter_map(|&(doc, tf)| cov.doc_row[doc as usize].map(|row| (row, tf)));
            let at = match vocab.get(word.as_str()) {
                Some(&at) => at as usize,
                None => {
                    vocab.insert(word.clone(), postings.len() as u32);
                    postings.push(Vec::new());
                    postings.len() - 1
                }
            };
            let list = &mut postings[at];
            let had = list.len();
            list.extend(moved);
            if had > 0 || !list.is_sorted_by_key(|p| p.0) {
                list.sort_unstable_by_key(|p| p.0);
            }
        }
        Ok(Self::assembled(vocab, Postings::Built(postings), lengths))
    }

    /// The persisted form: every token with its postings, every length.
    fn encode(&self, e: &mut Encoder) -> Result<()> {
        e.varints(&self.lengths);
        e.u64(self.vocab.len() as u64);
        let mut words: Vec<(&String, &u32)> = self.vocab.iter().collect();
        words.sort_unstable_by_key(|(_, id)| **id);
        for (word, &id) in words {
            let list = self.list(id)?;
            e.str(word);
            e.ascending(&list.iter().map(|p| p.0).collect::<Vec<_>>());
            e.varints(&list.iter().map(|p| p.1).collect::<Vec<_>>());
        }
        Ok(())
    }

    /// Read an index whose postings stay in `bytes` (the whole file) until
    /// used.
    fn decode(d: &mut Decoder, bytes: Bytes, what: &str) -> Result<Self> {
        let lengths = d.varints()?;
        let words = d.u64()?;
        let mut vocab = FxHashMap::default();
        let mut at = Vec::new();
        for id in 0..words {
            let word = d.str()?.to_string();
            at.push(d.position());
            let rows = d.skip_varints()?;
            let tfs = d.skip_varints()?;
            if rows != tfs {
                return Err(crate::error::OmniError::Storage(format!(
                    "index file {what}: the postings of '{word}' do not fit its rows"
                )));
            }
            vocab.insert(word, id as u32);
        }
        let postings = Postings::Stored {
            bytes,
            at,
            what: what.to_string(),
        };
        Ok(Self::assembled(vocab, postings, lengths))
    }

    pub fn to_bytes(&self, built: &super::coverage::Layout) -> Result<Vec<u8>> {
        let mut e = Encoder::new(MAGIC);
        super::coverage::encode(built, &mut e);
        self.encode(&mut e)?;
        Ok(e.finish())
    }

    /// A persisted index and the layout of the version it was built at. The
    /// index keeps `bytes` (no copy) and decodes postings from them on use.
    pub fn from_bytes(bytes: Bytes, what: &str) -> Result<(super::coverage::Layout, Self)> {
        let mut d = Decoder::new(&bytes, MAGIC, what)?;
        let built = super::coverage::decode(&mut d)?;
        let ix = Self::decode(&mut d, bytes.clone(), what)?;
        d.end()?;
        Ok((built, ix))
    }

    /// Approximate heap size, for the cache's budget.
    pub fn bytes(&self) -> usize {
        let words: usize = self.vocab.keys().map(|k| k.len() + 32).sum();
        let posts: usize = match &self.postings {
            Postings::Built(p) => p.iter().map(|p| p.len() * 8 + 24).sum(),
            Postings::Stored { bytes, at, .. } => bytes.len() + at.len() * 8,
        };
        words + posts + self.lengths.len() * 4
    }

    fn postings_of(&self, token: &str) -> Result<std::borrow::Cow<'_, [(u32, u32)]>> {
        match self.vocab.get(token) {
            Some(&id) => self.list(id),
            None => Ok(std::borrow::Cow::Borrowed(&[][..])),
        }
    }

    /// Every row's BM25 against the query's distinct tokens, by row; NaN
    /// for a row that holds none of them. Reads only the query tokens'
    /// postings.
    pub fn bm25_all(&self, query: &[String]) -> Result<Vec<f64>> {
        let mut out = vec![f64::NAN; self.lengths.len()];
        let n = self.docs as f64;
        let avgdl = self.mean_length.max(f64::MIN_POSITIVE);
        for t in query {
            let list = self.postings_of(t)?;
            let df = list.len() as f64;
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            for &(row, tf) in list.iter() {
                let (tf, dl) = (tf as f64, self.lengths[row as usize] as f64);
                let norm = 1.0 - BM25_B + BM25_B * dl / avgdl;
                let s = idf * tf * (BM25_K1 + 1.0) / (tf + BM25_K1 * norm);
                let cell = &mut out[row as usize];
                *cell = if cell.is_nan() { s } else { *cell + s };
            }
        }
        Ok(out)
    }

    /// Rows holding every query token (all rows with a text for a query
    /// without tokens is not a match: a query with no tokens matches nothing).
    pub fn rows_with_all(&self, query: &[String]) -> Result<Vec<u32>> {
        let lists = query
            .iter()
            .map(|t| self.rows_of(t))
            .collect::<Result<_>>()?;
        Ok(self.rows_matching(lists))
    }

    /// Rows where every query token is within `edits` Levenshtein edits of
    /// some token of the row.
    pub fn rows_fuzzy(&self, query: &[String], edits: u32) -> Result<Vec<u32>> {
        let per_token = query
            .iter()
            .map(|q| {
                let mut rows: Vec<u32> = Vec::new();
                for (word, &id) in &self.vocab {
                    if within_edits(q, word, edits) {
                        rows.extend(self.list(id)?.iter().map(|p| p.0));
                    }
                }
                rows.sort_unstable();
                rows.dedup();
                Ok(rows)
            })
            .collect::<Result<_>>()?;
        Ok(self.rows_matching(per_token))
    }

    fn rows_of(&self, token: &str) -> Result<Vec<u32>> {
        Ok(self.postings_of(token)?.iter().map(|p| p.0).collect())
    }

    /// The intersection of ascending row lists (nothing for no lists).
    fn rows_matching(&self, mut lists: Vec<Vec<u32>>) -> Vec<u32> {
        lists.sort_by_key(|l| l.len());
        let mut lists = lists.into_iter();
        let Some(mut out) = lists.next() else {
            return Vec::new();
        };
        for l in lists {
            out.retain(|r| l.binary_search(r).is_ok());
        }
        out
    }
}

/// Does `text`'s token sequence contain `query`'s tokens contiguously?
pub fn contains_phrase(text: &str, query: &[String]) -> bool {
    if query.is_empty() {
        return false;
    }
    let toks = tokens(text);
    toks.windows(query.len()).any(|w| w == query)
}

/// Is the Levenshtein distance between `a` and `b` at most `max`?
pub fn within_edits(a: &str, b: &str, max: u32) -> bool {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let max = max as usize;
    if a.len().abs_diff(b.len()) > max {
        return false;
    }
    // One row of the edit-distance table at a time.
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        if cur.iter().min().is_some_and(|&m| m > max) {
            return false;
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()] <= max
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(rows: &[Option<&str>]) -> TextIndex {
        TextIndex::build(&StringArray::from(rows.to_vec()))
    }

    #[test]
    fn tokens_are_lowercase_unicode_alphanumeric_runs() {
        assert_eq!(
            tokens("Hello, wörld! R2-D2 ΣΊΣΥΦΟΣ_x"),
            ["hello", "wörld", "r2", "d2", "σίσυφος", "x"]
        );
        assert_eq!(query_tokens("a b a"), ["a", "b"]);
        assert!(tokens(" ,.; ").is_empty());
    }

    #[test]
    fn bm25_matches_the_formula_and_skips_rows_without_a_token() {
        let ix = index(&[
            Some("apple pie"),
            Some("apple apple tart"),
            Some("plum"),
            None,
        ]);
        let q = query_tokens("apple");
        let all = ix.bm25_all(&q).unwrap();
        assert!(all[2].is_nan() && all[3].is_nan());
        // N = 3 texts, avgdl = 2, df(apple) = 2.
        let idf = (1.0f64 + (3.0 - 2.0 + 0.5) / (2.0 + 0.5)).ln();
        let s0 = idf * 1.0 * 2.2 / (1.0 + 1.2 * (0.25 + 0.75 * 2.0 / 2.0));
        let s1 = idf * 2.0 * 2.2 / (2.0 + 1.2 * (0.25 + 0.75 * 3.0 / 2.0));
        assert!((all[0] - s0).abs() < 1e-12);
        assert!((all[1] - s1).abs() < 1e-12);
    }

    #[test]
    fn search_needs_every_token_and_fuzzy_allows_edits() {
        let ix = index(&[Some("red apple pie"), Some("green apple"), Some("red plum")]);
        assert_eq!(ix.rows_with_all(&query_tokens("apple red")).unwrap(), [0]);
        assert_eq!(ix.rows_with_all(&query_tokens("apple")).unwrap(), [0, 1]);
        assert!(ix.rows_with_all(&[]).unwrap().is_empty());
        assert_eq!(ix.rows_fuzzy(&query_tokens("aple"), 1).unwrap(), [0, 1]);
        assert!(ix.rows_fuzzy(&query_tokens("aple"), 0).unwrap().is_empty());
        assert_eq!(ix.rows_fuzzy(&query_tokens("rad plm"), 1).unwrap(), [2]);
    }

    #[test]
    fn a_rebased_index_equals_one_built_over_the_new_version() {
        use crate::index::coverage::{FragmentRows, cover};
        let frag = |id: u64, physical: u32, deleted: &[u32]| FragmentRows {
            id,
            files: format!("f{id}"),
            physical,
            deleted: deleted.to_vec(),
        };
        // Built: one fragment of three rows.
        let then = [Some("red apple"), None, Some("green apple pie")];
        let built = vec![frag(0, 3, &[])];
        let persisted = index(&then).to_bytes(&built).unwrap();
        let (layout, base) = TextIndex::from_bytes(persisted.into(), "t").unwrap();
        assert_eq!(layout, built);
        // Now: row 0 deleted, a fragment of two rows appended.
        let now_rows = [None, Some("green apple pie"), Some("apple"), Some("plum")];
        let now = StringArray::from(now_rows.to_vec());
        let cov = cover(&built, &[frag(0, 3, &[0]), frag(1, 2, &[])]);
        assert_eq!(cov.fresh, [2, 3]);
        let fresh = TextIndex::build_rows(&now, cov.fresh.iter().map(|&r| r as usize));
        let rebased = base.rebase(&cov, fresh).unwrap();
        let whole = TextIndex::build(&now);
        assert_eq!(rebased.docs, whole.docs);
        assert_eq!(rebased.mean_length, whole.mean_length);
        let q = query_tokens("apple pie");
        let (a, b) = (rebased.bm25_all(&q).unwrap(), whole.bm25_all(&q).unwrap());
        for (x, y) in a.iter().zip(&b) {
            assert!(x.is_nan() && y.is_nan() || x == y, "{a:?} vs {b:?}");
        }
        assert_eq!(
            rebased.rows_with_all(&q).unwrap(),
            whole.rows_with_all(&q).unwrap()
        );
        assert_eq!(
            rebased.rows_fuzzy(&query_tokens("aple"), 1).unwrap(),
            [1, 2]
        );
    }

    #[test]
    fn phrases_are_contiguous_token_runs() {
        let q = query_tokens("Apple Pie");
        assert!(contains_phrase("an apple, pie!", &q));
        assert!(!contains_phrase("pie apple", &q));
        assert!(!contains_phrase("apple tart pie", &q));
    }

    #[test]
    fn edit_distance_is_levenshtein() {
        assert!(within_edits("kitten", "sitting", 3));
        assert!(!within_edits("kitten", "sitting", 2));
        assert!(within_edits("", "ab", 2));
        assert!(!within_edits("abc", "", 2));
        assert!(within_edits("σίσυφος", "σίσυφοσ", 1));
    }
}
