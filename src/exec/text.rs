//! Full-text search over one String column of one table version: the one
//! tokenizer every text function shares, the table's inverted index (built
//! from the snapshot's rows, so no row is ever missed for being newer than
//! an index build), BM25 scores and the `search` / `match_text` / `fuzzy`
//! filters.

use arrow_array::{Array, StringArray};

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

/// The inverted index of one column: for each token, the rows holding it
/// with their counts; each row's length in tokens.
pub struct TextIndex {
    vocab: FxHashMap<String, u32>,
    /// Per token id: (row, occurrences), rows ascending.
    postings: Vec<Vec<(u32, u32)>>,
    /// Tokens per row (0 for a null text).
    lengths: Vec<u32>,
    /// Rows with a text (not null): BM25's N.
    docs: u32,
    /// Mean tokens per row with a text: BM25's avgdl.
    mean_length: f64,
}

impl TextIndex {
    pub fn build(column: &StringArray) -> Self {
        let mut vocab: FxHashMap<String, u32> = FxHashMap::default();
        let mut postings: Vec<Vec<(u32, u32)>> = Vec::new();
        let mut lengths = Vec::with_capacity(column.len());
        let (mut docs, mut total) = (0u32, 0u64);
        let mut here: Vec<u32> = Vec::new();
        for row in 0..column.len() {
            if column.is_null(row) {
                lengths.push(0);
                continue;
            }
            docs += 1;
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
            lengths.push(here.len() as u32);
            total += here.len() as u64;
            // The row's tokens counted: sorted, then runs.
            here.sort_unstable();
            for run in here.chunk_by(|a, b| a == b) {
                postings[run[0] as usize].push((row as u32, run.len() as u32));
            }
        }
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

    /// Approximate heap size, for the cache's budget.
    pub fn bytes(&self) -> usize {
        let words: usize = self.vocab.keys().map(|k| k.len() + 32).sum();
        let posts: usize = self.postings.iter().map(|p| p.len() * 8 + 24).sum();
        words + posts + self.lengths.len() * 4
    }

    fn postings_of(&self, token: &str) -> &[(u32, u32)] {
        self.vocab
            .get(token)
            .map_or(&[][..], |&id| &self.postings[id as usize])
    }

    /// Every row's BM25 against the query's distinct tokens, by row; NaN
    /// for a row that holds none of them. Reads only the query tokens'
    /// postings.
    pub fn bm25_all(&self, query: &[String]) -> Vec<f64> {
        let mut out = vec![f64::NAN; self.lengths.len()];
        let n = self.docs as f64;
        let avgdl = self.mean_length.max(f64::MIN_POSITIVE);
        for t in query {
            let list = self.postings_of(t);
            let df = list.len() as f64;
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            for &(row, tf) in list {
                let (tf, dl) = (tf as f64, self.lengths[row as usize] as f64);
                let norm = 1.0 - BM25_B + BM25_B * dl / avgdl;
                let s = idf * tf * (BM25_K1 + 1.0) / (tf + BM25_K1 * norm);
                let cell = &mut out[row as usize];
                *cell = if cell.is_nan() { s } else { *cell + s };
            }
        }
        out
    }

    /// Rows holding every query token (all rows with a text for a query
    /// without tokens is not a match: a query with no tokens matches nothing).
    pub fn rows_with_all(&self, query: &[String]) -> Vec<u32> {
        self.rows_matching(query.iter().map(|t| self.rows_of(t)).collect())
    }

    /// Rows where every query token is within `edits` Levenshtein edits of
    /// some token of the row.
    pub fn rows_fuzzy(&self, query: &[String], edits: u32) -> Vec<u32> {
        let per_token = query
            .iter()
            .map(|q| {
                let mut rows: Vec<u32> = Vec::new();
                for (word, &id) in &self.vocab {
                    if within_edits(q, word, edits) {
                        rows.extend(self.postings[id as usize].iter().map(|p| p.0));
                    }
                }
                rows.sort_unstable();
                rows.dedup();
                rows
            })
            .collect();
        self.rows_matching(per_token)
    }

    fn rows_of(&self, token: &str) -> Vec<u32> {
        self.postings_of(token).iter().map(|p| p.0).collect()
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
        let all = ix.bm25_all(&q);
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
        assert_eq!(ix.rows_with_all(&query_tokens("apple red")), [0]);
        assert_eq!(ix.rows_with_all(&query_tokens("apple")), [0, 1]);
        assert!(ix.rows_with_all(&[]).is_empty());
        assert_eq!(ix.rows_fuzzy(&query_tokens("aple"), 1), [0, 1]);
        assert!(ix.rows_fuzzy(&query_tokens("aple"), 0).is_empty());
        assert_eq!(ix.rows_fuzzy(&query_tokens("rad plm"), 1), [2]);
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
