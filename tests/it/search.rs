//! Search end to end: `nearest`, `bm25`, `rrf` and the text filters against
//! reference implementations written here (independent of the engine's),
//! on fresh rows and old snapshots, and query-time embedding through a
//! loopback HTTP endpoint.

use std::collections::{BTreeMap, HashMap};

use crate::common::Lcg;
use omnigraph::exec::embed::EmbedConfig;
use omnigraph::{LoadMode, OmniError, Omnigraph, OpenOptions, Target};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SCHEMA: &str = r#"
node Author { name: String @key }
node Doc {
    slug: String @key
    topic: enum(a, b)
    body: String?
    emb: Vector(4)? @embed("body", model = "tiny")
}
edge Wrote: Author -> Doc
"#;

const WORDS: [&str; 12] = [
    "graph", "vector", "search", "lance", "query", "index", "token", "rank", "fusion", "edge",
    "node", "Graph",
];

struct Doc {
    slug: String,
    topic: &'static str,
    body: Option<String>,
    emb: Option<[f64; 4]>,
    author: String,
}

fn corpus(n: usize, seed: u64) -> Vec<Doc> {
    let mut r = Lcg(seed);
    (0..n)
        .map(|i| {
            let words = 1 + (r.next() % 9) as usize;
            let body: Vec<&str> = (0..words)
                .map(|_| WORDS[(r.next() % WORDS.len() as u64) as usize])
                .collect();
            Doc {
                slug: format!("d{i:03}"),
                topic: if r.next().is_multiple_of(3) { "b" } else { "a" },
                body: (i % 11 != 5).then(|| body.join(if i % 2 == 0 { " " } else { ", " })),
                emb: (i % 13 != 7).then(|| [r.unit(), r.unit(), r.unit(), r.unit()]),
                author: format!("w{}", i % 4),
            }
        })
        .collect()
}

fn jsonl(docs: &[Doc]) -> String {
    let mut out = String::new();
    for w in 0..4 {
        out.push_str(&format!(
            "{{\"type\":\"Author\",\"data\":{{\"name\":\"w{w}\"}}}}\n"
        ));
    }
    for d in docs {
        let mut data = json!({ "slug": d.slug, "topic": d.topic });
        if let Some(b) = &d.body {
            data["body"] = json!(b);
        }
        if let Some(e) = &d.emb {
            data["emb"] = json!(e);
        }
        out.push_str(&json!({ "type": "Doc", "data": data }).to_string());
        out.push('\n');
        out.push_str(&json!({ "edge": "Wrote", "from": d.author, "to": d.slug }).to_string());
        out.push('\n');
    }
    out
}

// ---- reference implementations -------------------------------------------

fn ref_tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in text.chars() {
        if c.is_alphanumeric() {
            cur.extend(c.to_lowercase());
        } else if !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

fn ref_cosine(a: &[f64; 4], q: &[f64; 4]) -> f64 {
    let dot: f64 = a.iter().zip(q).map(|(x, y)| x * y).sum();
    let na: f64 = a.iter().map(|x| x * x).sum::<f64>().sqrt();
    let nq: f64 = q.iter().map(|x| x * x).sum::<f64>().sqrt();
    1.0 - dot / (na * nq)
}

/// BM25 (k1 1.2, b 0.75, idf ln(1 + (N - df + .5)/(df + .5))) over every
/// document with a body; `None` for a document holding no query token.
fn ref_bm25(docs: &[Doc], query: &str) -> HashMap<String, f64> {
    let mut q = ref_tokens(query);
    q.dedup();
    let mut seen = Vec::new();
    q.retain(|t| {
        let fresh = !seen.contains(t);
        seen.push(t.clone());
        fresh
    });
    let texts: Vec<(&Doc, Vec<String>)> = docs
        .iter()
        .filter_map(|d| d.body.as_ref().map(|b| (d, ref_tokens(b))))
        .collect();
    let n = texts.len() as f64;
    let avgdl = texts.iter().map(|(_, t)| t.len()).sum::<usize>() as f64 / n;
    let mut out = HashMap::new();
    for (d, toks) in &texts {
        let mut score = None;
        for t in &q {
            let tf = toks.iter().filter(|x| *x == t).count() as f64;
            if tf == 0.0 {
                continue;
            }
            let df = texts.iter().filter(|(_, x)| x.contains(t)).count() as f64;
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            let s = idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * toks.len() as f64 / avgdl));
            score = Some(score.unwrap_or(0.0) + s);
        }
        if let Some(s) = score {
            out.insert(d.slug.clone(), s);
        }
    }
    out
}

/// The best `n` of `scored`, best first, ties by slug.
fn ref_top(mut scored: Vec<(String, f64)>, higher_is_better: bool, n: usize) -> Vec<(String, f64)> {
    scored.sort_by(|a, b| {
        let o = a.1.partial_cmp(&b.1).unwrap();
        let o = if higher_is_better { o.reverse() } else { o };
        o.then_with(|| a.0.cmp(&b.0))
    });
    scored.truncate(n);
    scored
}

// ---- helpers --------------------------------------------------------------

async fn graph(docs: &[Doc], opts: OpenOptions) -> (tempfile::TempDir, Omnigraph) {
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().join("g.omni").to_string_lossy().to_string();
    let g = Omnigraph::init_with(&uri, SCHEMA, opts).await.unwrap();
    g.load("main", &jsonl(docs), LoadMode::Overwrite)
        .await
        .unwrap();
    (dir, g)
}

async fn run(
    g: &Omnigraph,
    target: &Target,
    src: &str,
    params: Value,
) -> Vec<BTreeMap<String, Value>> {
    try_run(g, target, src, params).await.unwrap()
}

async fn try_run(
    g: &Omnigraph,
    target: &Target,
    src: &str,
    params: Value,
) -> Result<Vec<BTreeMap<String, Value>>, OmniError> {
    let r = g.query(target, src, "q", &params).await?;
    Ok(omnigraph::exec::output::rows(&r)?
        .into_iter()
        .map(|m| m.into_iter().collect())
        .collect())
}

fn slugs_scores(rows: &[BTreeMap<String, Value>], score: &str) -> Vec<(String, f64)> {
    rows.iter()
        .map(|r| {
            (
                r["d.slug"].as_str().unwrap().to_string(),
                r[score].as_f64().unwrap(),
            )
        })
        .collect()
}

fn assert_same_ranking(got: &[(String, f64)], want: &[(String, f64)], what: &str) {
    let names = |v: &[(String, f64)]| v.iter().map(|x| x.0.clone()).collect::<Vec<_>>();
    assert_eq!(names(got), names(want), "{what}: the ranked rows differ");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g.1 - w.1).abs() < 1e-6,
            "{what}: {} scored {} not {}",
            g.0,
            g.1,
            w.1
        );
    }
}

const Q: [f64; 4] = [0.3, -0.2, 0.9, 0.1];

#[tokio::test]
async fn nearest_is_exact_and_filters_apply_before_ranking() {
    let docs = corpus(120, 7);
    let (_d, g) = graph(&docs, OpenOptions::default()).await;
    let m = Target::main();
    let nn = |filter: &str| {
        format!(
            "query q($v: Vector(4)) {{ match {{ $d: Doc {filter} }} return {{ $d.slug, nearest($d.emb, $v) as dist }} order {{ nearest($d.emb, $v) }} limit 10 }}"
        )
    };
    let all = ref_top(
        docs.iter()
            .filter_map(|d| d.emb.map(|e| (d.slug.clone(), ref_cosine(&e, &Q))))
            .collect(),
        false,
        10,
    );
    let got = run(&g, &m, &nn(""), json!({ "v": Q })).await;
    assert_same_ranking(&slugs_scores(&got, "dist"), &all, "nearest");
    // The top 10 of the topic-b rows, not what is left of the global top 10.
    let b = ref_top(
        docs.iter()
            .filter(|d| d.topic == "b")
            .filter_map(|d| d.emb.map(|e| (d.slug.clone(), ref_cosine(&e, &Q))))
            .collect(),
        false,
        10,
    );
    assert!(all.iter().filter(|x| b.contains(x)).count() < 10);
    let got = run(&g, &m, &nn("{ topic: \"b\" }"), json!({ "v": Q })).await;
    assert_same_ranking(&slugs_scores(&got, "dist"), &b, "prefiltered nearest");
    // A score over an absent optional parameter scores no row.
    let optional = "query q($v: Vector(4)?) { match { $d: Doc } return { $d.slug, nearest($d.emb, $v) as dist } order { dist } limit 10 }";
    assert!(run(&g, &m, optional, json!({})).await.is_empty());
    assert_eq!(run(&g, &m, optional, json!({ "v": Q })).await.len(), 10);
    // A literal vector is a query too; rows without a vector are never returned.
    let got = run(
        &g,
        &m,
        "query q() { match { $d: Doc } return { $d.slug, nearest($d.emb, [0.3, -0.2, 0.9, 0.1]) as dist } order { dist } limit 200 }",
        Value::Null,
    )
    .await;
    assert_eq!(got.len(), docs.iter().filter(|d| d.emb.is_some()).count());
}

#[tokio::test]
async fn bm25_ranks_as_the_formula_and_skips_rows_without_a_token() {
    let docs = corpus(150, 11);
    let (_d, g) = graph(&docs, OpenOptions::default()).await;
    let m = Target::main();
    for text in ["graph fusion", "LANCE", "rank rank edge", "nothingmatches"] {
        let want = ref_bm25(&docs, text);
        let got = run(
            &g,
            &m,
            "query q($t: String) { match { $d: Doc } return { $d.slug, bm25($d.body, $t) as s } order { s desc } }",
            json!({ "t": text }),
        )
        .await;
        let want = ref_top(want.into_iter().collect(), true, usize::MAX);
        assert_same_ranking(&slugs_scores(&got, "s"), &want, text);
    }
}

#[tokio::test]
async fn rrf_is_exactly_the_fusion_of_the_two_rankings_the_same_query_gives() {
    let docs = corpus(150, 3);
    let (_d, g) = graph(&docs, OpenOptions::default()).await;
    let m = Target::main();
    let params = json!({ "v": Q, "t": "graph search token" });
    let filter = "$w: Author { name: \"w1\" }\n $w wrote $d";
    let side = |score: &str, dir: &str| {
        format!(
            "query q($v: Vector(4), $t: String) {{ match {{ {filter} }} return {{ $d.slug, {score} as s }} order {{ s {dir} }} limit 7 }}"
        )
    };
    let a = slugs_scores(
        &run(&g, &m, &side("nearest($d.emb, $v)", "asc"), params.clone()).await,
        "s",
    );
    let b = slugs_scores(
        &run(&g, &m, &side("bm25($d.body, $t)", "desc"), params.clone()).await,
        "s",
    );
    assert_eq!((a.len(), b.len()), (7, 7));
    let mut fused: HashMap<String, f64> = HashMap::new();
    for list in [&a, &b] {
        for (rank, (slug, _)) in list.iter().enumerate() {
            *fused.entry(slug.clone()).or_default() += 1.0 / (30.0 + rank as f64 + 1.0);
        }
    }
    let want = ref_top(fused.into_iter().collect(), true, 7);
    let got = run(
        &g,
        &m,
        &format!(
            "query q($v: Vector(4), $t: String) {{ match {{ {filter} }} return {{ $d.slug, rrf(nearest($d.emb, $v), bm25($d.body, $t), 30) as s }} order {{ s desc }} limit 7 }}"
        ),
        params,
    )
    .await;
    assert_same_ranking(&slugs_scores(&got, "s"), &want, "rrf");
}

#[tokio::test]
async fn text_filters_combine_with_traversal_and_see_fresh_rows_only_in_new_snapshots() {
    let docs = corpus(100, 5);
    let (_d, g) = graph(&docs, OpenOptions::default()).await;
    let m = Target::main();
    let matching = |func: &str, text: &str| {
        let q = ref_tokens(text);
        let mut out: Vec<String> = docs
            .iter()
            .filter(|d| d.author == "w2")
            .filter(|d| {
                let Some(b) = &d.body else { return false };
                let toks = ref_tokens(b);
                match func {
                    "search" => q.iter().all(|t| toks.contains(t)),
                    "match_text" => toks.windows(q.len()).any(|w| w == q.as_slice()),
                    _ => q
                        .iter()
                        .all(|t| toks.iter().any(|x| levenshtein(t, x) <= 1)),
                }
            })
            .map(|d| d.slug.clone())
            .collect();
        out.sort();
        out
    };
    for (func, text) in [
        ("search", "graph node"),
        ("match_text", "vector search"),
        ("fuzzy", "grap tokn"),
    ] {
        let got = run(
            &g,
            &m,
            &format!(
                "query q($t: String) {{ match {{ $w: Author {{ name: \"w2\" }}\n $w wrote $d\n {func}($d.body, $t) }} return {{ $d.slug }} order {{ $d.slug }} }}"
            ),
            json!({ "t": text }),
        )
        .await;
        let got: Vec<String> = got
            .iter()
            .map(|r| r["d.slug"].as_str().unwrap().into())
            .collect();
        assert_eq!(got, matching(func, text), "{func}({text:?})");
        assert!(
            !got.is_empty(),
            "{func}({text:?}) should match something here"
        );
    }
    // A row written after the first search is found by the next one; the
    // snapshot before it still does not have it.
    let before = g.snapshot(&m).await.unwrap().manifest_version;
    let src = "query q($t: String) { match { $d: Doc\n search($d.body, $t) } return { $d.slug } }";
    assert!(run(&g, &m, src, json!({ "t": "zebra" })).await.is_empty());
    g.load(
        "main",
        "{\"type\":\"Doc\",\"data\":{\"slug\":\"fresh\",\"topic\":\"a\",\"body\":\"a Zebra graph\"}}\n",
        LoadMode::Append,
    )
    .await
    .unwrap();
    let got = run(&g, &m, src, json!({ "t": "zebra" })).await;
    assert_eq!(got[0]["d.slug"], json!("fresh"));
    let old = Target::Version {
        version: before,
        branch: "main".into(),
    };
    assert!(run(&g, &old, src, json!({ "t": "zebra" })).await.is_empty());
}

fn levenshtein(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d: Vec<Vec<usize>> = (0..=a.len()).map(|i| vec![i; b.len() + 1]).collect();
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let sub = d[i - 1][j - 1] + usize::from(a[i - 1] != b[j - 1]);
            d[i][j] = sub.min(d[i - 1][j] + 1).min(d[i][j - 1] + 1);
        }
    }
    d[a.len()][b.len()]
}

// ---- query-time embedding -------------------------------------------------

/// What the loopback endpoint does with each request.
#[derive(Clone, Copy)]
enum Endpoint {
    /// Answer with the vector [len(text), 1, 0, 0] for the model "tiny".
    Embed,
    Refuse,
    Garbage,
    WrongDim,
    Silent,
}

/// A one-connection-at-a-time HTTP server on loopback; returns its base URL
/// and the requests it saw (model, input, authorization).
async fn endpoint(mode: Endpoint) -> (String, std::sync::Arc<parking_lot::Mutex<Vec<Value>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let seen = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            let (head, body) = loop {
                let n = s.read(&mut chunk).await.unwrap_or(0);
                if n == 0 {
                    break (String::new(), Vec::new());
                }
                buf.extend_from_slice(&chunk[..n]);
                if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&buf[..at]).to_string();
                    let len: usize = head
                        .lines()
                        .find_map(|l| {
                            l.to_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse().unwrap())
                        })
                        .unwrap_or(0);
                    while buf.len() < at + 4 + len {
                        let n = s.read(&mut chunk).await.unwrap_or(0);
                        if n == 0 {
                            break;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                    }
                    break (head, buf[at + 4..].to_vec());
                }
            };
            let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let auth = head
                .lines()
                .find_map(|l| {
                    l.strip_prefix("authorization: ")
                        .or(l.strip_prefix("Authorization: "))
                })
                .map(str::to_string);
            log.lock()
                .push(json!({ "path": head.split(' ').nth(1), "body": req, "auth": auth }));
            let text = req["input"][0].as_str().unwrap_or("").to_string();
            let (status, answer) = match mode {
                Endpoint::Embed => (
                    "200 OK",
                    json!({ "data": [{ "embedding": [text.len(), 1, 0, 0] }] }).to_string(),
                ),
                Endpoint::Refuse => ("503 Service Unavailable", "overloaded".to_string()),
                Endpoint::Garbage => ("200 OK", "<html>hello</html>".to_string()),
                Endpoint::WrongDim => (
                    "200 OK",
                    json!({ "data": [{ "embedding": [1, 2] }] }).to_string(),
                ),
                Endpoint::Silent => {
                    tokio::time::sleep(std::time::Duration::from_secs(30)).await;
                    continue;
                }
            };
            let reply = format!(
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
                answer.len()
            );
            let _ = s.write_all(reply.as_bytes()).await;
        }
    });
    (url, seen)
}

fn embed_opts(url: Option<String>) -> OpenOptions {
    OpenOptions {
        embed: EmbedConfig {
            url,
            key: Some("sekret".into()),
            timeout_ms: Some(400),
            ..Default::default()
        },
        ..OpenOptions::default()
    }
}

const BY_TEXT: &str = "query q($t: String) { match { $d: Doc } return { $d.slug, nearest($d.emb, $t) as dist } order { dist } limit 5 }";
const BY_VECTOR: &str = "query q($v: Vector(4)) { match { $d: Doc } return { $d.slug, nearest($d.emb, $v) as dist } order { dist } limit 5 }";

#[tokio::test]
async fn a_text_query_is_embedded_by_the_configured_endpoint() {
    let docs = corpus(60, 9);
    let (url, seen) = endpoint(Endpoint::Embed).await;
    let (_d, g) = graph(&docs, embed_opts(Some(url))).await;
    let m = Target::main();
    let by_text = run(&g, &m, BY_TEXT, json!({ "t": "hello" })).await;
    let by_vector = run(&g, &m, BY_VECTOR, json!({ "v": [5.0, 1.0, 0.0, 0.0] })).await;
    assert_eq!(by_text, by_vector);
    let seen = seen.lock().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0]["path"], json!("/v1/embeddings"));
    assert_eq!(
        seen[0]["body"],
        json!({ "model": "tiny", "input": ["hello"] })
    );
    assert_eq!(seen[0]["auth"], json!("Bearer sekret"));
}

#[tokio::test]
async fn embedding_failures_are_typed_errors() {
    let docs = corpus(20, 1);
    let expect = |r: Result<Vec<BTreeMap<String, Value>>, OmniError>, says: &str| match r {
        Err(OmniError::Embedding(m)) => assert!(m.contains(says), "{m}"),
        other => panic!("expected an embedding error saying {says:?}, got {other:?}"),
    };
    let m = Target::main();
    let t = json!({ "t": "hello" });
    let (_d, g) = graph(&docs, embed_opts(None)).await;
    expect(
        try_run(&g, &m, BY_TEXT, t.clone()).await,
        "OMNIGRAPH_EMBED_URL",
    );
    // Nothing listens on a port just released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (_d, g) = graph(&docs, embed_opts(Some(format!("http://127.0.0.1:{port}")))).await;
    expect(try_run(&g, &m, BY_TEXT, t.clone()).await, "could not reach");
    for (mode, says) in [
        (Endpoint::Refuse, "503"),
        (Endpoint::Garbage, "not an embedding"),
        (Endpoint::WrongDim, "2 dimensions; the property has 4"),
        (Endpoint::Silent, "did not answer within 400 ms"),
    ] {
        let (url, _) = endpoint(mode).await;
        let (_d, g) = graph(&docs, embed_opts(Some(url))).await;
        expect(try_run(&g, &m, BY_TEXT, t.clone()).await, says);
    }
}

#[tokio::test]
async fn bad_vector_parameters_are_refused() {
    let docs = corpus(10, 2);
    let (_d, g) = graph(&docs, OpenOptions::default()).await;
    let m = Target::main();
    for (v, says) in [
        (json!([1.0, 2.0]), "expected 4 values, got 2"),
        (json!([1.0, 2.0, "x", 4.0]), "not a number"),
        (json!([1.0, 2.0, 1e300, 4.0]), "not a finite 32-bit float"),
    ] {
        match try_run(&g, &m, BY_VECTOR, json!({ "v": v })).await {
            Err(OmniError::Type { code, message, .. }) => {
                assert_eq!(code, "Q012", "{message}");
                assert!(message.contains(says), "{message}");
            }
            other => panic!("expected Q012 for {v}, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn the_cli_searches_reports_how_and_refuses_bad_searches() {
    let docs = corpus(40, 4);
    let (dir, g) = graph(&docs, OpenOptions::default()).await;
    g.close().await;
    let uri = dir.path().join("g.omni").to_string_lossy().to_string();
    let cli = |query: &str, params: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_omnigraph"))
            .args(["query", "--store", &uri, "-e", query, "--params", params])
            .args(["--format", "json", "--stats"])
            .env_remove("OMNIGRAPH_EMBED_URL")
            .output()
            .unwrap()
    };
    let out = cli(
        "query q($v: Vector(4), $t: String) { match { $d: Doc\n search($d.body, $t) } return { $d.slug, rrf(nearest($d.emb, $v), bm25($d.body, $t)) as s } order { s desc } limit 3 }",
        r#"{"v": [1, 0, 0, 0], "t": "graph"}"#,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["rows"].as_array().unwrap().len(), 3, "{json}");
    for says in [
        "search: search(Doc.body) inverted index",
        "search: nearest(Doc.emb) flat",
        "search: bm25(Doc.body) inverted index",
        "search: rrf(emb + body) each side's best 3 rows",
        "(the sides contributed 3 and 3)",
    ] {
        assert!(stderr.contains(says), "no {says:?} in {stderr}");
    }
    for (query, params, code, says) in [
        (
            "query q($v: Vector(4)) { match { $d: Doc } return { $d.slug } order { nearest($d.emb, $v) } }",
            r#"{"v": [1, 0, 0, 0]}"#,
            2,
            "Q011",
        ),
        (
            "query q($t: String) { match { $d: Doc\n fuzzy($d.body, $t, 5) } return { $d.slug } }",
            r#"{"t": "x"}"#,
            2,
            "Q023",
        ),
        (
            "query q($t: String) { match { $d: Doc } return { $d.slug } order { nearest($d.emb, $t) } limit 2 }",
            r#"{"t": "graph"}"#,
            1,
            "error[EmbeddingError]",
        ),
    ] {
        let out = cli(query, params);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{stderr}");
        assert!(stderr.contains(says), "{stderr}");
    }
}
