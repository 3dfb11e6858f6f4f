//! The search workload (`../shared/bench/search/gen_docs.py`): load time,
//! then warm latency medians of vector, prefiltered vector, BM25 and hybrid
//! RRF over the corpus's 20 vector and 20 text queries, flat (at the
//! version the load made, before any index) and then through the indexes
//! `optimize` builds (its time is reported), with each kind's agreement
//! with the independent reference answers of `bench/search_truth.py`
//! (DIR/truth.json), and whether every hybrid result is exactly the fusion
//! of the two rankings the same queries give.

use std::collections::HashMap;
use std::time::Instant;

use omnigraph::{Omnigraph, Target};
use serde_json::{Value, json};

use super::{open_or_load, peak_rss_mib, percentile};

const QUERIES: &str = r#"
query vector($v: Vector(DIM)) {
    match { $d: Doc }
    return { $d.slug, nearest($d.embedding, $v) as s }
    order { s } limit 10
}
query prefilter($v: Vector(DIM)) {
    match { $d: Doc
        $d.year >= 2020 }
    return { $d.slug, nearest($d.embedding, $v) as s }
    order { s } limit 10
}
query bm25($t: String) {
    match { $d: Doc }
    return { $d.slug, bm25($d.body, $t) as s }
    order { s desc } limit 10
}
query hybrid($v: Vector(DIM), $t: String) {
    match { $d: Doc }
    return { $d.slug, rrf(nearest($d.embedding, $v), bm25($d.body, $t)) as s }
    order { s desc } limit 10
}
"#;

fn schema(dim: u64) -> String {
    format!(
        "node Doc {{\n    slug: String @key\n    title: String\n    body: String @index\n    embedding: Vector({dim}) @index\n    year: I32\n}}\n"
    )
}

fn slugs(r: &omnigraph::QueryResult) -> Vec<String> {
    omnigraph::exec::output::rows(r)
        .expect("rows")
        .iter()
        .map(|row| row["d.slug"].as_str().expect("slug").to_string())
        .collect()
}

/// Mean share of each reference top 10 that the result holds.
fn recall(got: &[Vec<String>], want: &Value) -> f64 {
    let want = want.as_array().expect("reference lists");
    let total: f64 = got
        .iter()
        .zip(want)
        .map(|(g, w)| {
            let w: Vec<&str> = w
                .as_array()
                .expect("list")
                .iter()
                .map(|s| s.as_str().expect("slug"))
                .collect();
            g.iter().filter(|s| w.contains(&s.as_str())).count() as f64 / w.len().max(1) as f64
        })
        .sum();
    total / got.len().max(1) as f64
}

/// The RRF fusion (k 60) of two ranked lists, best first, ties by slug.
fn fusion(a: &[String], b: &[String]) -> Vec<String> {
    let mut score: HashMap<&str, f64> = HashMap::new();
    for list in [a, b] {
        for (rank, s) in list.iter().enumerate() {
            *score.entry(s).or_default() += 1.0 / (60.0 + rank as f64 + 1.0);
        }
    }
    let mut all: Vec<(&str, f64)> = score.into_iter().collect();
    all.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(y.0)));
    all.into_iter()
        .take(10)
        .map(|(s, _)| s.to_string())
        .collect()
}

/// Run `name` once per parameter set untimed, then `repeats` timed passes:
/// (median ms, p90 ms, the first pass's slugs).
async fn timed(
    g: &Omnigraph,
    target: &Target,
    src: &str,
    name: &str,
    params: &[Value],
    repeats: usize,
) -> (f64, f64, Vec<Vec<String>>) {
    let mut first = Vec::new();
    for p in params {
        first.push(slugs(&g.query(target, src, name, p).await.expect(name)));
    }
    let mut ms = Vec::new();
    for _ in 0..repeats {
        for p in params {
            let t0 = Instant::now();
            let r = g.query(target, src, name, p).await.expect(name);
            ms.push(t0.elapsed().as_secs_f64() * 1000.0);
            std::hint::black_box(r);
        }
    }
    ms.sort_by(f64::total_cmp);
    (percentile(&ms, 0.5), percentile(&ms, 0.9), first)
}

/// What every pass runs.
struct Inputs<'a> {
    src: &'a str,
    vectors: &'a [Value],
    texts: &'a [Value],
    pairs: &'a [Value],
    truth: &'a Value,
    repeats: usize,
}

/// Each kind of search at one target: latency and agreement.
async fn pass(g: &Omnigraph, at: &Target, i: &Inputs<'_>) {
    let (src, repeats) = (i.src, i.repeats);
    let (vm, vp, vector) = timed(g, at, src, "vector", i.vectors, repeats).await;
    let (pm, pp, pre) = timed(g, at, src, "prefilter", i.vectors, repeats).await;
    let (bm, bp, bm25) = timed(g, at, src, "bm25", i.texts, repeats).await;
    let (hm, hp, hybrid) = timed(g, at, src, "hybrid", i.pairs, repeats).await;
    let exact_fusions = hybrid
        .iter()
        .enumerate()
        .filter(|(k, h)| **h == fusion(&vector[*k], &bm25[*k]))
        .count();
    let method = |name: &str, p: &Value| {
        let g = g.clone();
        let (at, src, name, p) = (at.clone(), src.to_string(), name.to_string(), p.clone());
        async move {
            let r = g.query(&at, &src, &name, &p).await.expect("query");
            r.search
                .first()
                .map(|s| s.method.clone())
                .unwrap_or_default()
        }
    };
    println!("| kind | warm median ms | p90 ms | agreement |");
    println!("|---|---|---|---|");
    println!(
        "| vector | {vm:.2} | {vp:.2} | recall@10 vs numpy {:.3} |",
        recall(&vector, &i.truth["vector"])
    );
    println!(
        "| prefiltered vector (year >= 2020) | {pm:.2} | {pp:.2} | recall@10 vs numpy filtered {:.3} |",
        recall(&pre, &i.truth["prefilter"])
    );
    println!(
        "| BM25 | {bm:.2} | {bp:.2} | top-10 overlap vs independent BM25 {:.3} |",
        recall(&bm25, &i.truth["bm25"])
    );
    println!(
        "| hybrid RRF | {hm:.2} | {hp:.2} | {exact_fusions}/{} exactly the fusion of the two rankings |",
        hybrid.len()
    );
    println!("vector: {}", method("vector", &i.vectors[0]).await);
    println!("bm25: {}", method("bm25", &i.texts[0]).await);
}

pub async fn run(dir: &str, uri: &str, repeats: usize) {
    let read = |f: &str| -> Value {
        serde_json::from_str(
            &std::fs::read_to_string(format!("{dir}/{f}")).unwrap_or_else(|_| panic!("{dir}/{f}")),
        )
        .expect("json")
    };
    let meta = read("meta.json");
    let queries = read("queries.json");
    let truth = read("truth.json");
    let dim = meta["dim"].as_u64().expect("dim");
    let src = QUERIES.replace("DIM", &dim.to_string());
    let (g, loaded) = open_or_load(uri, &schema(dim), &format!("{dir}/docs.jsonl")).await;
    if let Some(s) = loaded {
        println!("load: {} docs in {s:.2} s", meta["docs"]);
    }
    let vectors: Vec<Value> = queries["vectors"]
        .as_array()
        .expect("vectors")
        .iter()
        .map(|v| json!({ "v": v }))
        .collect();
    let texts: Vec<Value> = queries["texts"]
        .as_array()
        .expect("texts")
        .iter()
        .map(|t| json!({ "t": t }))
        .collect();
    let pairs: Vec<Value> = queries["vectors"]
        .as_array()
        .expect("vectors")
        .iter()
        .zip(queries["texts"].as_array().expect("texts"))
        .map(|(v, t)| json!({ "v": v, "t": t }))
        .collect();
    // The load is graph version 2 (version 1 is the empty graph): the flat
    // pass reads it, before any index existed.
    let flat = Target::Version {
        version: 2,
        branch: "main".into(),
    };
    // The first query of each kind also builds what the cache keeps (the
    // columns, the text index); it is timed apart.
    let t0 = Instant::now();
    g.query(&flat, &src, "hybrid", &pairs[0])
        .await
        .expect("first query");
    let first_ms = t0.elapsed().as_secs_f64() * 1000.0;
    let input = Inputs {
        src: &src,
        vectors: &vectors,
        texts: &texts,
        pairs: &pairs,
        truth: &truth,
        repeats,
    };
    println!("first query (builds the cached columns and text index): {first_ms:.0} ms");
    println!();
    println!("flat (graph version 2, before any index):");
    pass(&g, &flat, &input).await;
    let t0 = Instant::now();
    let r = g.optimize("main").await.expect("optimize");
    match r.commit {
        Some(_) => println!(
            "\noptimize: {} index(es) in {:.2} s",
            r.indexes.len(),
            t0.elapsed().as_secs_f64()
        ),
        None => println!("\noptimize: the indexes were already current"),
    }
    println!();
    println!("through the indexes (main after optimize):");
    pass(&g, &Target::main(), &input).await;
    let stats = g.cache_stats();
    println!();
    println!(
        "runtime cache {:.0} MiB ({} text index build(s)); peak RSS {:.0} MiB",
        stats["bytes"].as_f64().unwrap_or(0.0) / (1 << 20) as f64,
        stats["text_builds"],
        peak_rss_mib()
    );
}
