//! Persisted search indexes end to end: `optimize` builds them as one
//! commit, searches read them and still find every row written since
//! (appended, updated, deleted), results equal a twin graph's that was
//! never optimized, and forks and time travel see the indexes their
//! version had.

use std::collections::BTreeMap;

use crate::common::Lcg;
use omnigraph::{LoadMode, OmniError, Omnigraph, Target};
use serde_json::{Value, json};

const SCHEMA: &str = r#"
node Doc {
    slug: String @key
    topic: enum(a, b)
    body: String? @index
    emb: Vector(8)? @index
}
"#;

/// Rows in the corpus: above the size a nearest search measures in full,
/// so the vector index is what answers.
const DOCS: usize = 5000;

const WORDS: [&str; 10] = [
    "graph", "vector", "search", "lance", "query", "index", "token", "rank", "fusion", "edge",
];

/// Eight clusters of vectors (around the axes, both signs of a half), Zipf-ish
/// bodies.
fn centre(c: usize) -> [f64; 8] {
    let mut v = [0.0; 8];
    v[c % 8] = 1.0;
    v[(c + 3) % 8] = if c.is_multiple_of(2) { 0.5 } else { -0.5 };
    v
}

fn corpus(n: usize) -> String {
    let mut r = Lcg(11);
    let mut out = String::new();
    for i in 0..n {
        let words = 1 + (r.next() % 8) as usize;
        let body: Vec<&str> = (0..words)
            .map(|_| WORDS[((r.next() % 55) as f64).sqrt() as usize % WORDS.len()])
            .collect();
        let c = centre(i % 8);
        let emb: Vec<f64> = c.iter().map(|x| x + 0.15 * r.unit()).collect();
        let mut data = json!({
            "slug": format!("d{i:04}"),
            "topic": if i % 3 == 0 { "b" } else { "a" },
            "emb": emb,
        });
        if i % 17 != 3 {
            data["body"] = json!(body.join(" "));
        }
        out.push_str(&json!({ "type": "Doc", "data": data }).to_string());
        out.push('\n');
    }
    out
}

const QUERIES: &str = r#"
query near($q: Vector(8)) { match { $d: Doc } return { $d.slug, nearest($d.emb, $q) as s } order { nearest($d.emb, $q) } limit 10 }
query near_b($q: Vector(8)) { match { $d: Doc { topic: "b" } } return { $d.slug, nearest($d.emb, $q) as s } order { nearest($d.emb, $q) } limit 10 }
query bm($t: String) { match { $d: Doc } return { $d.slug, bm25($d.body, $t) as s } order { bm25($d.body, $t) desc, $d.slug } limit 15 }
query has($t: String) { match { $d: Doc  search($d.body, $t) } return { $d.slug } order { $d.slug } }
query near_text($t: String) { match { $d: Doc  fuzzy($d.body, $t) } return { $d.slug } order { $d.slug } }
query phrase($t: String) { match { $d: Doc  match_text($d.body, $t) } return { $d.slug } order { $d.slug } }
query hybrid($q: Vector(8), $t: String) { match { $d: Doc } return { $d.slug, rrf(nearest($d.emb, $q), bm25($d.body, $t)) as s } order { s desc } limit 10 }
"#;

const MUTATIONS: &str = r#"
query add($s: String, $b: String, $e: Vector(8)) { insert Doc { slug: $s, topic: "b", body: $b, emb: $e } }
query set_body($s: String, $b: String) { update Doc set { body: $b } where slug = $s }
query drop($s: String) { delete Doc where slug = $s }
"#;

/// A new graph of `schema` in a folder of its own (kept while the folder
/// lives).
async fn fresh(schema: &str) -> (tempfile::TempDir, String, Omnigraph) {
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().join("g.omni").to_string_lossy().to_string();
    let g = Omnigraph::init(&uri, schema).await.unwrap();
    (dir, uri, g)
}

/// What an optimize built, as sorted `Type.property kind` lines.
fn built(r: &omnigraph::OptimizeReport) -> Vec<String> {
    let mut out: Vec<String> = r
        .indexes
        .iter()
        .map(|i| {
            format!(
                "{}.{} {}",
                i["type"].as_str().unwrap(),
                i["property"].as_str().unwrap(),
                i["kind"].as_str().unwrap()
            )
        })
        .collect();
    out.sort();
    out
}

async fn graph(dir: &tempfile::TempDir, name: &str) -> Omnigraph {
    let uri = dir.path().join(name).to_string_lossy().to_string();
    let g = Omnigraph::init(&uri, SCHEMA).await.unwrap();
    g.load("main", &corpus(DOCS), LoadMode::Overwrite)
        .await
        .unwrap();
    g
}

/// A query's rows and what each search said it did.
async fn ask(
    g: &Omnigraph,
    at: &Target,
    name: &str,
    params: &Value,
) -> (Vec<BTreeMap<String, Value>>, Vec<String>) {
    let r = g.query(at, QUERIES, name, params).await.unwrap();
    let rows = omnigraph::exec::output::rows(&r)
        .unwrap()
        .into_iter()
        .map(|m| m.into_iter().collect())
        .collect();
    (rows, r.search.iter().map(|s| s.method.clone()).collect())
}

fn slugs(rows: &[BTreeMap<String, Value>]) -> Vec<String> {
    rows.iter()
        .map(|r| r["d.slug"].as_str().unwrap().to_string())
        .collect()
}

fn q(c: usize) -> Value {
    let mut v = centre(c);
    v[(c + 1) % 8] = 0.05;
    json!({ "q": v })
}

/// Every text query gives exactly the same rows and scores on both graphs.
async fn same_text_answers(a: &Omnigraph, b: &Omnigraph, at: &Target) {
    for t in ["graph", "lance index", "fusion edge", "zebra", "vectr"] {
        for name in ["bm", "has", "near_text", "phrase"] {
            let p = json!({ "t": t });
            let (x, _) = ask(a, at, name, &p).await;
            let (y, _) = ask(b, at, name, &p).await;
            assert_eq!(
                x, y,
                "{name}({t}) differs between the indexed and the plain graph"
            );
        }
    }
}

#[tokio::test]
async fn optimize_builds_indexes_searches_use_them_and_miss_no_fresh_row() {
    let dir = tempfile::tempdir().unwrap();
    let (plain, g) = (
        graph(&dir, "plain.omni").await,
        graph(&dir, "indexed.omni").await,
    );
    let before = g.snapshot(&Target::main()).await.unwrap().manifest_version;
    let exact: Vec<Vec<String>> = {
        let mut out = Vec::new();
        for c in 0..8 {
            out.push(slugs(&ask(&plain, &Target::main(), "near", &q(c)).await.0));
        }
        out
    };

    let r = g.optimize("main").await.unwrap();
    assert!(r.commit.is_some(), "{r:?}");
    let mut built: Vec<(String, String, u64)> = r
        .indexes
        .iter()
        .map(|i| {
            (
                i["property"].as_str().unwrap().to_string(),
                i["kind"].as_str().unwrap().to_string(),
                i["rows"].as_u64().unwrap(),
            )
        })
        .collect();
    built.sort();
    assert_eq!(
        built,
        [
            ("body".to_string(), "text".to_string(), DOCS as u64),
            ("emb".to_string(), "vector".to_string(), DOCS as u64),
            ("id".to_string(), "btree".to_string(), DOCS as u64),
            ("id".to_string(), "id order".to_string(), DOCS as u64),
        ]
    );
    let again = g.optimize("main").await.unwrap();
    assert_eq!(again.commit, None, "every index is current: {again:?}");
    assert!(again.indexes.is_empty());

    // The vector index answers, and finds what exact search finds.
    let mut hits = 0;
    for (c, want) in exact.iter().enumerate() {
        let (rows, how) = ask(&g, &Target::main(), "near", &q(c)).await;
        assert!(how[0].starts_with("vector index"), "{how:?}");
        hits += slugs(&rows).iter().filter(|s| want.contains(s)).count();
    }
    assert!(hits >= 76, "recall@10 {hits} of 80");
    let (_, how) = ask(&g, &Target::main(), "bm", &json!({ "t": "graph" })).await;
    assert!(how[0].contains("persisted inverted index"), "{how:?}");
    assert!(
        how[0].contains(&format!("{DOCS} rows from it, 0 fresh")),
        "{how:?}"
    );
    same_text_answers(&plain, &g, &Target::main()).await;

    // The same writes on both graphs: an append, an update into a new
    // fragment, a delete.
    let zebra =
        json!({ "s": "z1", "b": "zebra graph", "e": [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.9] });
    for db in [&plain, &g] {
        db.mutate("main", MUTATIONS, "add", &zebra).await.unwrap();
        db.mutate(
            "main",
            MUTATIONS,
            "set_body",
            &json!({ "s": "d0001", "b": "a zebra lance" }),
        )
        .await
        .unwrap();
        db.mutate("main", MUTATIONS, "drop", &json!({ "s": "d0002" }))
            .await
            .unwrap();
    }
    same_text_answers(&plain, &g, &Target::main()).await;
    let (rows, how) = ask(&g, &Target::main(), "has", &json!({ "t": "zebra" })).await;
    assert_eq!(slugs(&rows), ["d0001", "z1"]);
    assert!(
        how[0].contains(&format!("{} rows from it, 2 fresh", DOCS - 2)),
        "{how:?}"
    );
    let (rows, _) = ask(
        &g,
        &Target::main(),
        "near",
        &json!({ "q": [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.9] }),
    )
    .await;
    assert_eq!(
        slugs(&rows)[0],
        "z1",
        "a row appended after the index is found"
    );
    let (rows, _) = ask(&g, &Target::main(), "near", &q(2)).await;
    assert!(
        !slugs(&rows).contains(&"d0002".to_string()),
        "a deleted row is gone"
    );
    let (rows, how) = ask(&g, &Target::main(), "near_b", &q(3)).await;
    assert_eq!(rows.len(), 10, "a filter keeps its top 10 ({how:?})");
    let (mut exact_b, _) = ask(&plain, &Target::main(), "near_b", &q(3)).await;
    let got = slugs(&rows);
    exact_b.retain(|r| got.contains(&r["d.slug"].as_str().unwrap().to_string()));
    assert!(
        exact_b.len() >= 9,
        "prefiltered recall {} of 10",
        exact_b.len()
    );
    let (rows, _) = ask(
        &g,
        &Target::main(),
        "hybrid",
        &json!({ "q": [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.9], "t": "zebra" }),
    )
    .await;
    assert_eq!(slugs(&rows)[0], "z1", "both sides rank the fresh row first");

    // Time travel: the version before the optimize has no index.
    let old = Target::Version {
        version: before,
        branch: "main".into(),
    };
    let (_, how) = ask(&g, &old, "bm", &json!({ "t": "graph" })).await;
    assert!(
        how[0].starts_with("inverted index built from the snapshot"),
        "{how:?}"
    );
    let (_, how) = ask(&g, &old, "near", &q(1)).await;
    assert!(how[0].starts_with("flat"), "{how:?}");

    // The writes made the indexes stale: optimize refreshes them, and the
    // answers stay the same.
    let r = g.optimize("main").await.unwrap();
    assert_eq!(r.indexes.len(), 4, "{r:?}");
    let (_, how) = ask(&g, &Target::main(), "has", &json!({ "t": "zebra" })).await;
    assert!(
        how[0].contains(&format!("{} rows from it, 0 fresh", DOCS - 1 + 1)),
        "{how:?}"
    );
    same_text_answers(&plain, &g, &Target::main()).await;
}

#[tokio::test]
async fn a_branch_uses_its_parents_indexes_and_builds_its_own_on_its_fork() {
    let dir = tempfile::tempdir().unwrap();
    let g = graph(&dir, "g.omni").await;
    g.optimize("main").await.unwrap();
    g.branch_create("b", "main").await.unwrap();
    let on_b = Target::Branch("b".into());
    let (_, how) = ask(&g, &on_b, "bm", &json!({ "t": "graph" })).await;
    assert!(how[0].contains("persisted inverted index"), "{how:?}");
    g.mutate(
        "b",
        MUTATIONS,
        "add",
        &json!({ "s": "only-b", "b": "okapi", "e": [1, 0, 0, 0, 0, 0, 0, 0] }),
    )
    .await
    .unwrap();
    let main_before = ask(&g, &Target::main(), "bm", &json!({ "t": "graph" }))
        .await
        .1;
    let r = g.optimize("b").await.unwrap();
    assert_eq!(r.indexes.len(), 4, "{r:?}");
    let (rows, how) = ask(&g, &on_b, "has", &json!({ "t": "okapi" })).await;
    assert_eq!(slugs(&rows), ["only-b"]);
    assert!(
        how[0].contains(&format!("{} rows from it, 0 fresh", DOCS + 1)),
        "{how:?}"
    );
    // Main keeps its own index, untouched.
    assert_eq!(
        ask(&g, &Target::main(), "bm", &json!({ "t": "graph" }))
            .await
            .1,
        main_before
    );
    assert!(
        ask(&g, &Target::main(), "has", &json!({ "t": "okapi" }))
            .await
            .0
            .is_empty()
    );
    assert_eq!(g.optimize("main").await.unwrap().commit, None);
}

#[tokio::test]
async fn a_missing_index_file_is_a_typed_error_and_optimize_rebuilds_it() {
    let dir = tempfile::tempdir().unwrap();
    let g = graph(&dir, "g.omni").await;
    let r = g.optimize("main").await.unwrap();
    let text = r.indexes.iter().find(|i| i["kind"] == "text").unwrap()["file"]
        .as_str()
        .unwrap()
        .to_string();
    let uri = dir.path().join("g.omni");
    g.close().await;
    std::fs::remove_file(uri.join(&text)).unwrap();
    let g = Omnigraph::open(&uri.to_string_lossy()).await.unwrap();
    let err = g
        .query(&Target::main(), QUERIES, "bm", &json!({ "t": "graph" }))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, OmniError::Storage(m) if m.contains(&text) && m.contains("missing")),
        "{err}"
    );
    let r = g.optimize("main").await.unwrap();
    assert_eq!(r.indexes.len(), 1, "only the lost index is rebuilt: {r:?}");
    let (rows, _) = ask(&g, &Target::main(), "has", &json!({ "t": "lance" })).await;
    assert!(!rows.is_empty());
}

#[tokio::test]
async fn the_cli_optimizes_with_json_and_refuses_an_unknown_branch() {
    let dir = tempfile::tempdir().unwrap();
    let g = graph(&dir, "g.omni").await;
    g.close().await;
    let uri = dir.path().join("g.omni").to_string_lossy().to_string();
    let cli = |args: &[&str]| crate::common::cli(&[&["optimize"], args].concat());
    let out = cli(&[&uri, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["branch"], "main");
    assert!(j["commit"].is_string(), "{j}");
    assert!(j["manifest_version"].as_u64().unwrap() > 1, "{j}");
    assert_eq!(j["indexes"].as_array().unwrap().len(), 4, "{j}");
    let out = cli(&["--store", &uri, "--json"]);
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(j["commit"].is_null(), "{j}");
    let out = cli(&[&uri, "--branch", "nope"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("error[NotFound]") && stderr.contains("'nope'"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_crash_inside_an_optimize_is_rolled_back_whole() {
    use omnigraph::storage::substrate::CrashPoint;
    const TWO: &str = "node Doc { slug: String @key\n body: String @index }\nnode Note { k: String @key\n text: String @index }";
    let (_dir, uri, g) = fresh(TWO).await;
    g.load(
        "main",
        "{\"type\":\"Doc\",\"data\":{\"slug\":\"a\",\"body\":\"red apple\"}}\n{\"type\":\"Note\",\"data\":{\"k\":\"n\",\"text\":\"green apple\"}}",
        LoadMode::Overwrite,
    )
    .await
    .unwrap();
    let before = g.snapshot(&Target::main()).await.unwrap();
    g.substrate().crash_at(CrashPoint::AfterTableCommit(1));
    crate::recovery::interrupted(g.optimize("main").await);
    drop(g);
    let g = Omnigraph::open(&uri).await.unwrap();
    assert_eq!(g.recovery_report().rolled_back.len(), 1);
    let after = g.snapshot(&Target::main()).await.unwrap();
    assert_eq!(after.head_commit, before.head_commit, "no optimize commit");
    let how = |q: &'static str| {
        let g = g.clone();
        async move {
            let r = g
                .query(&Target::main(), q, "q", &json!({ "t": "apple" }))
                .await
                .unwrap();
            r.search[0].method.clone()
        }
    };
    let doc = "query q($t: String) { match { $d: Doc  search($d.body, $t) } return { $d.slug } }";
    let note = "query q($t: String) { match { $n: Note  search($n.text, $t) } return { $n.k } }";
    // Neither table records an index: the one committed was restored.
    for q in [doc, note] {
        assert!(
            how(q)
                .await
                .starts_with("inverted index built from the snapshot"),
            "{}",
            how(q).await
        );
    }
    // Doc's change was a chain (its BTREE, then its index record); the
    // roll-back restored the version below the record, which keeps the
    // BTREE (no step of the chain changes a row), so only Note's BTREE,
    // both text indexes and both id orders are left to build.
    let r = g.optimize("main").await.unwrap();
    assert_eq!(
        built(&r),
        [
            "Doc.body text",
            "Doc.id id order",
            "Note.id btree",
            "Note.id id order",
            "Note.text text"
        ],
        "{r:?}"
    );
    for q in [doc, note] {
        assert!(
            how(q).await.starts_with("persisted inverted index"),
            "{}",
            how(q).await
        );
    }
}

#[tokio::test]
async fn key_checks_and_filters_stay_exact_over_btrees_through_appends_and_compaction() {
    const PEOPLE: &str = "node P { name: String @key\n age: I32? @index }";
    let (_dir, _, g) = fresh(PEOPLE).await;
    let row = |i: usize| {
        format!(
            "{{\"type\":\"P\",\"data\":{{\"name\":\"p{i}\",\"age\":{}}}}}\n",
            i % 50
        )
    };
    let first: String = (0..10).map(row).collect();
    g.load("main", &first, LoadMode::Overwrite).await.unwrap();
    let r = g.optimize("main").await.unwrap();
    assert_eq!(built(&r), ["P.age btree", "P.id btree", "P.id id order"]);
    assert_eq!(g.optimize("main").await.unwrap().commit, None);
    // Enough single-row appends that the table is compacted on the way.
    for i in 10..45 {
        g.load("main", &row(i), LoadMode::Append).await.unwrap();
    }
    let fragments = g.snapshot(&Target::main()).await.unwrap().types[0].fragments;
    assert!(
        fragments < 10,
        "the table was compacted over its BTREEs ({fragments} fragments)"
    );
    for i in [3, 12, 44] {
        let err = g.load("main", &row(i), LoadMode::Append).await.unwrap_err();
        assert!(matches!(err, OmniError::KeyConflict { .. }), "p{i}: {err}");
    }
    let count = |src: &'static str| {
        let g = g.clone();
        async move {
            let r = g
                .query(&Target::main(), src, "q", &Value::Null)
                .await
                .unwrap();
            omnigraph::exec::output::rows(&r).unwrap()[0]["n"]
                .as_i64()
                .unwrap()
        }
    };
    assert_eq!(
        count("query q() { match { $p: P { name: \"p40\" } } return { count($p) as n } }").await,
        1
    );
    assert_eq!(
        count("query q() { match { $p: P\n $p.age >= 30 } return { count($p) as n } }").await,
        15
    );
    let r = g.optimize("main").await.unwrap();
    assert_eq!(
        r.indexes.len(),
        3,
        "both BTREEs and the id order are stale after the appends: {r:?}"
    );
    for i in [0, 44] {
        let err = g.load("main", &row(i), LoadMode::Append).await.unwrap_err();
        assert!(matches!(err, OmniError::KeyConflict { .. }), "p{i}: {err}");
    }
    g.load("main", &row(45), LoadMode::Append).await.unwrap();
    assert_eq!(
        count("query q() { match { $p: P\n $p.age >= 30 } return { count($p) as n } }").await,
        16
    );
    assert_eq!(
        count("query q() { match { $p: P } return { count($p) as n } }").await,
        46
    );
}

/// Optimize and persisted searches on `place`: a fresh row is found, a
/// branch reads its parent's index.
async fn optimize_and_search_in(place: crate::common::Place) {
    const DOCS_SCHEMA: &str = "node Doc { slug: String @key\n body: String @index }";
    let uri = place.uri("g.omni");
    let g = Omnigraph::init(&uri, DOCS_SCHEMA).await.unwrap();
    g.load(
        "main",
        "{\"type\":\"Doc\",\"data\":{\"slug\":\"a\",\"body\":\"red apple\"}}\n{\"type\":\"Doc\",\"data\":{\"slug\":\"b\",\"body\":\"green pear\"}}",
        LoadMode::Overwrite,
    )
    .await
    .unwrap();
    let r = g.optimize("main").await.unwrap();
    assert_eq!(r.indexes.len(), 3, "{r:?}");
    // A new process's key lookup reads its row through the id order on a
    // local disk; on object storage (where the file would be fetched whole)
    // through the BTREE.
    let fresh = Omnigraph::open_read_only(&uri).await.unwrap();
    let one = "query one($s: String) { match { $d: Doc { slug: $s } } return { $d.body } }";
    let r = fresh
        .query(&Target::main(), one, "one", &json!({ "s": "b" }))
        .await
        .unwrap();
    let rows = omnigraph::exec::output::rows(&r).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["d.body"], json!("green pear"));
    let local = matches!(place, crate::common::Place::Local(_));
    assert_eq!(
        fresh.cache_stats()["id_order_reads"],
        json!(u64::from(local))
    );
    g.load(
        "main",
        "{\"type\":\"Doc\",\"data\":{\"slug\":\"c\",\"body\":\"apple pie\"}}",
        LoadMode::Append,
    )
    .await
    .unwrap();
    g.branch_create("x", "main").await.unwrap();
    let q = "query q($t: String) { match { $d: Doc  search($d.body, $t) } return { $d.slug } order { $d.slug } }";
    for at in [Target::main(), Target::Branch("x".into())] {
        let r = g
            .query(&at, q, "q", &json!({ "t": "apple" }))
            .await
            .unwrap();
        let rows: Vec<Value> = omnigraph::exec::output::rows(&r)
            .unwrap()
            .into_iter()
            .map(|m| m["d.slug"].clone())
            .collect();
        assert_eq!(rows, [json!("a"), json!("c")]);
        assert!(
            r.search[0].method.contains("2 rows from it, 1 fresh"),
            "{}",
            r.search[0].method
        );
    }
    g.close().await;
}

#[tokio::test]
async fn optimize_and_search_on_s3() {
    optimize_and_search_in(crate::common::Place::s3()).await;
}

#[tokio::test]
async fn optimize_and_search_on_local_disk() {
    optimize_and_search_in(crate::common::Place::local()).await;
}

#[tokio::test]
async fn two_optimizes_at_once_both_succeed_and_build_once() {
    let dir = tempfile::tempdir().unwrap();
    let g = graph(&dir, "g.omni").await;
    let (a, b) = tokio::join!(g.optimize("main"), g.optimize("main"));
    let (a, b) = (a.unwrap(), b.unwrap());
    // One builds and commits; the other loses the race, re-prepares under
    // the gates, finds every index current and commits nothing.
    assert!(a.commit.is_some() != b.commit.is_some(), "{a:?} {b:?}");
    assert_eq!(a.indexes.len() + b.indexes.len(), 4, "{a:?} {b:?}");
    assert_eq!(g.optimize("main").await.unwrap().commit, None);
    let (_, how) = ask(&g, &Target::main(), "bm", &json!({ "t": "graph" })).await;
    assert!(how[0].contains("persisted inverted index"), "{how:?}");
}

#[tokio::test]
async fn optimize_skips_empty_tables_and_indexes_them_once_they_have_rows() {
    const TWO: &str = "node Doc { slug: String @key\n body: String @index }\nnode Tag { name: String @key }\nedge Has: Doc -> Tag";
    let (_dir, _, g) = fresh(TWO).await;
    let r = g.optimize("main").await.unwrap();
    assert_eq!(r.commit, None, "nothing to index: {r:?}");
    g.load(
        "main",
        "{\"type\":\"Doc\",\"data\":{\"slug\":\"a\",\"body\":\"red apple\"}}",
        LoadMode::Overwrite,
    )
    .await
    .unwrap();
    let r = g.optimize("main").await.unwrap();
    assert_eq!(
        built(&r),
        ["Doc.body text", "Doc.id btree", "Doc.id id order"],
        "{r:?}"
    );
}

/// A key lookup in a new process reads its row through the persisted id
/// order while the table holds exactly the rows it was built from, and
/// through the BTREE otherwise (a write since, an id the file lacks, a
/// damaged file), with the same answers either way.
#[tokio::test]
async fn key_lookups_read_through_the_id_order_only_while_it_shows_the_row() {
    const ONE: &str =
        "query one($s: String) { match { $d: Doc { slug: $s } } return { $d.slug, $d.body } }";
    let dir = tempfile::tempdir().unwrap();
    let g = graph(&dir, "g.omni").await;
    g.optimize("main").await.unwrap();
    let uri = dir.path().join("g.omni").to_string_lossy().to_string();
    // What each lookup answers, and whether the id order found the row.
    let look = |slug: &'static str| {
        let uri = uri.clone();
        async move {
            let g = Omnigraph::open_read_only(&uri).await.unwrap();
            let r = g
                .query(&Target::main(), ONE, "one", &json!({ "s": slug }))
                .await
                .unwrap();
            let rows: Vec<Value> = omnigraph::exec::output::rows(&r)
                .unwrap()
                .into_iter()
                .map(|m| json!([m["d.slug"], m["d.body"]]))
                .collect();
            (rows, g.cache_stats()["id_order_reads"].as_u64().unwrap())
        }
    };
    let body = |i: usize| {
        let doc: Value = serde_json::from_str(corpus(DOCS).lines().nth(i).unwrap()).unwrap();
        doc["data"]["body"].clone()
    };
    for (slug, i) in [("d0000", 0), ("d2500", 2500), ("d4999", 4999)] {
        assert_eq!(
            look(slug).await,
            (vec![json!([slug, body(i)])], 1),
            "{slug}"
        );
    }
    assert_eq!(look("d5000").await, (vec![], 0), "a miss asks the BTREE");

    // A write moves the table past the file's rows: the BTREE answers.
    g.mutate(
        "main",
        MUTATIONS,
        "set_body",
        &json!({ "s": "d2500", "b": "changed" }),
    )
    .await
    .unwrap();
    assert_eq!(look("d2500").await, (vec![json!(["d2500", "changed"])], 0));
    assert_eq!(look("d0001").await, (vec![json!(["d0001", body(1)])], 0));
    let r = g.optimize("main").await.unwrap();
    assert!(built(&r).contains(&"Doc.id id order".to_string()), "{r:?}");
    assert_eq!(look("d2500").await, (vec![json!(["d2500", "changed"])], 1));

    // A damaged file: what it finds is checked against the row, and a
    // file that cannot be read is passed over.
    // The newest (names sort by their ULID).
    let file = std::fs::read_dir(dir.path().join("g.omni/_indexes/node-Doc"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "ids"))
        .max()
        .expect("an id order file");
    let good = std::fs::read(&file).unwrap();
    let mut shifted = good.clone();
    // The ids' bytes come before the positions sorted by id (the last
    // array): shift them by one id ("dNNNN", 5 bytes), so the file puts
    // each id one row before its own.
    let ids_end = good.len() - DOCS * 4;
    let ids_start = ids_end - (DOCS * 5).div_ceil(4) * 4;
    shifted[ids_start..ids_start + DOCS * 5].rotate_left(5);
    std::fs::write(&file, &shifted).unwrap();
    assert_eq!(
        look("d4000").await,
        (vec![json!(["d4000", body(4000)])], 0),
        "the file puts d4000 at d3999's row"
    );
    std::fs::write(&file, &good[..good.len() / 2]).unwrap();
    assert_eq!(look("d0007").await, (vec![json!(["d0007", body(7)])], 0));
    std::fs::write(&file, &good).unwrap();
    assert_eq!(look("d0007").await, (vec![json!(["d0007", body(7)])], 1));
}
