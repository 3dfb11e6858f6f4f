//! Benchmarks that print a table. Build with `--release`.
//!
//! ```text
//! omnigraph-bench load DIR [--repeats N]     # overwrite load of DIR/social.jsonl (gen_social.py)
//! omnigraph-bench append [--n 300]           # 1-row append latency on a graph with 10 types
//! omnigraph-bench mutations [--n 300]        # mutation latency, writer scaling, latency vs history
//! omnigraph-bench processes [--writes 25]     # appends from 4 and 16 processes vs as many tasks in one
//! omnigraph-bench locks [--n 10000]           # the cross-process lock work of one 1-table commit
//! omnigraph-bench feed GRAPH [--n 20]        # change-feed polls after small commits, and --follow's latency
//! omnigraph-bench hops URI [--delay-ms 20] [--max-concurrent 8] [--n 5]
//!                                             # serial hops per operation on object storage, see hops.rs
//! omnigraph-bench queries DIR --graph URI [--repeats 10] [--reference FILE] [--json FILE] [--only VARIANT]
//!                                             # q1..q6 warm (loads DIR into URI first if URI is empty)
//! omnigraph-bench blob DIR [--mib 64] [--repeats 5]
//!                                             # range reads of one blob vs a plain file and pylance
//! omnigraph-bench merge DIR --graph URI [--sizes 1,1000,100000]
//!                                             # branch merges on DIR's graph (loaded into URI if empty)
//! omnigraph-bench search DIR --graph URI [--repeats 3]
//!                                             # the search workload (gen_docs.py), see search.rs
//! omnigraph-bench schema DIR [--repeats 2]    # schema applies on DIR's graph, then 1-row inserts
//! omnigraph-bench server DIR --graph URI [--n 2000] [--seconds 10]
//!                                             # the HTTP server against the embedded handle, see server.rs
//! ```
// Spawning tasks that run queries asks the compiler to prove a deep
// future `Send`; the default limit is too shallow for it.
#![recursion_limit = "256"]

use std::time::Instant;

use omnigraph::{LoadMode, Omnigraph};

mod blob;
mod delta;
mod feed;
mod fleet;
mod hops;
mod merge;
mod policy;
mod retention;
mod schema;
mod search;
mod server;

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

/// A scratch folder removed when dropped.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let p = std::env::temp_dir().join(format!(
            "omnigraph-bench-{}",
            omnigraph::util::ulid::new_ulid()
        ));
        std::fs::create_dir_all(&p).expect("scratch dir");
        Self(p.join(name))
    }
    fn uri(&self) -> String {
        self.0.to_string_lossy().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some(parent) = self.0.parent() {
            let _ = std::fs::remove_dir_all(parent);
        }
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

const SOCIAL_SCHEMA: &str = include_str!("../../../bench/social.pg");
const QUERIES: &str = include_str!("../../../bench/queries.gq");

async fn load(dir: &str, repeats: usize) {
    let file = format!("{dir}/social.jsonl");
    let bytes = std::fs::metadata(&file).expect("social.jsonl").len();
    println!("| run | seconds | rows | rows/s | MiB/s | peak RSS MiB |");
    println!("|---|---|---|---|---|---|");
    for run in 0..repeats {
        let tmp = Scratch::new("social.omni");
        let uri = tmp.uri();
        let g = Omnigraph::init(&uri, SOCIAL_SCHEMA).await.expect("init");
        let reader =
            std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(&file).expect("open"));
        let t0 = Instant::now();
        let r = g
            .load_from("main", None, reader, LoadMode::Overwrite, |_| {})
            .await
            .expect("load");
        let secs = t0.elapsed().as_secs_f64();
        let rows: usize = r.nodes.values().chain(r.edges.values()).sum();
        println!(
            "| {run} | {secs:.2} | {rows} | {:.0} | {:.0} | {:.0} |",
            rows as f64 / secs,
            bytes as f64 / secs / (1 << 20) as f64,
            peak_rss_mib()
        );
    }
}

/// The graph of the 1-row commit figures: ten small node types.
fn ten_types_schema() -> String {
    (0..10)
        .map(|i| format!("node T{i} {{ name: String @key\n v: I64? }}\n"))
        .collect()
}

/// The `k`-th 1-row append of those figures, round-robin over the types.
/// One append to the 10-type graph, before anything is measured.
async fn warm_up(g: &Omnigraph) {
    g.load(
        "main",
        "{\"type\":\"T0\",\"data\":{\"name\":\"warm\"}}",
        LoadMode::Append,
    )
    .await
    .expect("warm");
}

fn ten_types_row(k: usize) -> String {
    format!(
        "{{\"type\":\"T{}\",\"data\":{{\"name\":\"a{k}\",\"v\":{k}}}}}",
        k % 10
    )
}

async fn append(n: usize) {
    let schema = ten_types_schema();
    let tmp = Scratch::new("ten.omni");
    let uri = tmp.uri();
    let g = Omnigraph::init(&uri, &schema).await.expect("init");
    let mut seed = String::new();
    for i in 0..10 {
        for k in 0..100 {
            seed.push_str(&format!(
                "{{\"type\":\"T{i}\",\"data\":{{\"name\":\"s{k}\",\"v\":{k}}}}}\n"
            ));
        }
    }
    g.load("main", &seed, LoadMode::Overwrite)
        .await
        .expect("seed");
    // Warm up once, then measure.
    warm_up(&g).await;
    let mut ms = Vec::with_capacity(n);
    for k in 0..n {
        let line = ten_types_row(k);
        let t0 = Instant::now();
        g.load("main", &line, LoadMode::Append)
            .await
            .expect("append");
        ms.push(t0.elapsed().as_secs_f64() * 1000.0);
    }
    let mut sorted = ms.clone();
    sorted.sort_by(f64::total_cmp);
    println!("| appends | median ms | p90 ms | p99 ms | max ms |");
    println!("|---|---|---|---|---|");
    println!(
        "| {n} | {:.2} | {:.2} | {:.2} | {:.2} |",
        percentile(&sorted, 0.5),
        percentile(&sorted, 0.9),
        percentile(&sorted, 0.99),
        sorted[sorted.len() - 1]
    );
}

/// What a graph at `uri` (meant for `s3://`) costs per operation: wall
/// time, and object-store requests by kind, for a 1-row commit, a branch
/// create and a read-write open. The graph is the 10-type one of `append`.
async fn object_store(uri: &str, n: usize) {
    use omnigraph::storage::requests::Requests;
    let schema = ten_types_schema();
    let g = Omnigraph::init(uri, &schema).await.expect("init");
    warm_up(&g).await;
    fn row(what: &str, ms: &mut [f64], reqs: &[Requests]) {
        ms.sort_by(f64::total_cmp);
        let mean =
            |f: fn(&Requests) -> u64| reqs.iter().map(f).sum::<u64>() as f64 / reqs.len() as f64;
        println!(
            "| {what} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
            ms.len(),
            percentile(ms, 0.5),
            percentile(ms, 0.9),
            mean(|r| r.total()),
            mean(|r| r.get),
            mean(|r| r.head),
            mean(|r| r.put),
            mean(|r| r.conditional_put),
            mean(|r| r.list),
            mean(|r| r.delete),
        );
    }
    println!(
        "| operation | runs | median ms | p90 ms | requests | GET | HEAD | PUT | cond. PUT | LIST | DELETE |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let (mut ms, mut reqs) = (Vec::new(), Vec::new());
    for k in 0..n {
        let line = ten_types_row(k);
        let before = g.requests();
        let t0 = Instant::now();
        g.load("main", &line, LoadMode::Append)
            .await
            .expect("append");
        ms.push(t0.elapsed().as_secs_f64() * 1000.0);
        reqs.push(g.requests().since(&before));
    }
    row("1-row commit (append)", &mut ms, &reqs);
    let (mut ms, mut reqs) = (Vec::new(), Vec::new());
    for k in 0..n.min(20) {
        let before = g.requests();
        let t0 = Instant::now();
        g.branch_create(&format!("b{k}"), "main")
            .await
            .expect("branch");
        ms.push(t0.elapsed().as_secs_f64() * 1000.0);
        reqs.push(g.requests().since(&before));
    }
    row("branch create (10 tables)", &mut ms, &reqs);
    g.close().await;
    let (mut ms, mut reqs) = (Vec::new(), Vec::new());
    for _ in 0..n.min(10) {
        let t0 = Instant::now();
        let h = Omnigraph::open(uri).await.expect("open");
        ms.push(t0.elapsed().as_secs_f64() * 1000.0);
        reqs.push(h.requests());
        h.close().await;
    }
    row("read-write open (recovery scan)", &mut ms, &reqs);
    let (mut ms, mut reqs) = (Vec::new(), Vec::new());
    for _ in 0..n.min(10) {
        let t0 = Instant::now();
        let h = Omnigraph::open_read_only(uri).await.expect("open");
        ms.push(t0.elapsed().as_secs_f64() * 1000.0);
        reqs.push(h.requests());
    }
    row("read-only open", &mut ms, &reqs);
}

const ITEMS_SCHEMA: &str =
    "node Item { name: String @key }\nnode Tag { name: String @key }\nedge HasTag: Item -> Tag";

/// One unique Item and its HasTag edge, appended as one commit.
async fn append_item(g: &Omnigraph, name: &str) -> omnigraph::Result<()> {
    let line = format!(
        "{{\"type\":\"Item\",\"data\":{{\"name\":\"{name}\"}}}}\n{{\"edge\":\"HasTag\",\"from\":\"{name}\",\"to\":\"t\"}}"
    );
    g.load("main", &line, LoadMode::Append).await.map(|_| ())
}

/// The child side of `processes`: open the graph, append `writes` items.
async fn append_worker(uri: &str, id: usize, writes: usize) {
    let g = Omnigraph::open(uri).await.expect("open");
    let mut failed = 0;
    for k in 0..writes {
        if let Err(e) = append_item(&g, &format!("w{id}-{k}")).await {
            eprintln!("w{id}-{k}: {e}");
            failed += 1;
        }
    }
    std::process::exit(if failed == 0 { 0 } else { 1 });
}

async fn items_graph(tmp: &Scratch) -> Omnigraph {
    let g = Omnigraph::init(&tmp.uri(), ITEMS_SCHEMA)
        .await
        .expect("init");
    g.load(
        "main",
        "{\"type\":\"Tag\",\"data\":{\"name\":\"t\"}}",
        LoadMode::Append,
    )
    .await
    .expect("tag");
    g
}

async fn items_on(uri: &str) -> usize {
    let g = Omnigraph::open_read_only(uri).await.expect("open");
    let s = g
        .snapshot(&omnigraph::Target::main())
        .await
        .expect("snapshot");
    s.types
        .iter()
        .find(|t| t.name == "Item")
        .map(|t| t.rows)
        .unwrap_or(0)
}

/// Concurrent appends of unique items from N processes, then from N tasks
/// of one process: commits/s, failures, and items missing afterwards.
async fn processes(writes: usize) {
    let me = std::env::current_exe().expect("own path");
    println!("| writers | as | appends | commits/s | failed | missing |");
    println!("|---|---|---|---|---|---|");
    for n in [4usize, 16] {
        let tmp = Scratch::new("procs.omni");
        let uri = tmp.uri();
        drop(items_graph(&tmp).await);
        let t0 = Instant::now();
        let children: Vec<_> = (0..n)
            .map(|id| {
                std::process::Command::new(&me)
                    .args(["append-worker", &uri, &id.to_string(), &writes.to_string()])
                    .spawn()
                    .expect("spawn")
            })
            .collect();
        let failed = children
            .into_iter()
            .map(|mut c| c.wait().expect("wait"))
            .filter(|s| !s.success())
            .count();
        let secs = t0.elapsed().as_secs_f64();
        let missing = n * writes - items_on(&uri).await;
        println!(
            "| {n} | processes | {} | {:.0} | {failed} processes | {missing} |",
            n * writes,
            (n * writes) as f64 / secs
        );

        let tmp = Scratch::new("tasks.omni");
        let g = items_graph(&tmp).await;
        let t0 = Instant::now();
        let tasks: Vec<_> = (0..n)
            .map(|id| {
                let g = g.clone();
                tokio::spawn(async move {
                    let mut failed = 0;
                    for k in 0..writes {
                        failed +=
                            usize::from(append_item(&g, &format!("w{id}-{k}")).await.is_err());
                    }
                    failed
                })
            })
            .collect();
        let mut failed = 0;
        for t in tasks {
            failed += t.await.expect("task");
        }
        let secs = t0.elapsed().as_secs_f64();
        drop(g);
        let missing = n * writes - items_on(&tmp.uri()).await;
        println!(
            "| {n} | tasks of one process | {} | {:.0} | {failed} appends | {missing} |",
            n * writes,
            (n * writes) as f64 / secs
        );
    }
}

/// What one commit of one table costs in cross-process locks on local disk:
/// the schema gate (shared), the branch gate and the table gate, each
/// locked and unlocked, as the gate owners do it.
async fn locks(n: usize) {
    use omnigraph::storage::locks::ProcessLocks;
    use omnigraph_actors::{Addr, GateMode, TableKey};
    let tmp = Scratch::new("locks.omni");
    std::fs::create_dir_all(&tmp.0).expect("dir");
    let store = omnigraph::storage::objstore::Store::open(
        &omnigraph::storage::requests::StorageSession::default(),
        &tmp.uri(),
    )
    .await
    .expect("store");
    let l = ProcessLocks::new(&store, "BENCH".into())
        .await
        .expect("locks");
    let gates = [
        (Addr::Schema, GateMode::Shared),
        (Addr::Branch("main".into()), GateMode::Exclusive),
        (
            Addr::Table(TableKey::new("main", "node:T0")),
            GateMode::Exclusive,
        ),
    ];
    let t0 = Instant::now();
    for _ in 0..n {
        for (g, m) in &gates {
            l.lock(g, *m).await.expect("lock");
        }
        for (g, _) in gates.iter().rev() {
            l.unlock(g).await;
        }
    }
    let us = t0.elapsed().as_secs_f64() * 1e6 / n as f64;
    let t0 = Instant::now();
    for _ in 0..n {
        assert!(!l.owner_alive("GONE").await);
    }
    let alive_us = t0.elapsed().as_secs_f64() * 1e6 / n as f64;
    println!("| commits | lock work per 1-table commit | a liveness check of a dead owner |");
    println!("|---|---|---|");
    println!("| {n} | {us:.1} µs | {alive_us:.1} µs |");
}

/// A one-row mutation: the query, its name, and its one string parameter.
type Mutation = (&'static str, &'static str, &'static str);

const INSERT: Mutation = (
    "query add($n: String) { insert Person { handle: $n, name: $n, city: \"x\" } }",
    "add",
    "n",
);

const UPDATE: Mutation = (
    "query set($c: String) { update Person set { city: $c } where handle = \"fixed\" }",
    "set",
    "c",
);

async fn mutate_once(g: &Omnigraph, branch: &str, m: Mutation, value: String) {
    let (gq, name, param) = m;
    g.mutate(branch, gq, name, &serde_json::json!({ param: value }))
        .await
        .expect("mutation");
}

/// Latencies in ms, sorted, of `n` mutations in a row.
async fn timed_mutations(
    g: &Omnigraph,
    branch: &str,
    m: Mutation,
    prefix: &str,
    n: usize,
) -> Vec<f64> {
    let mut ms = Vec::with_capacity(n);
    for k in 0..n {
        let t0 = Instant::now();
        mutate_once(g, branch, m, format!("{prefix}{k}")).await;
        ms.push(t0.elapsed().as_secs_f64() * 1000.0);
    }
    ms.sort_by(f64::total_cmp);
    ms
}

/// `writers` tasks committing `per` mutations each, back to back:
/// mutations/s and the sorted latencies of every mutation.
async fn throughput(
    g: &Omnigraph,
    writers: usize,
    branches: &[&str],
    per: usize,
    tag: &str,
) -> (f64, Vec<f64>) {
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let g = g.clone();
        let branch = branches[w % branches.len()].to_string();
        let tag = format!("{tag}-{w}-");
        tasks.push(tokio::spawn(async move {
            let mut ms = Vec::with_capacity(per);
            for k in 0..per {
                let t = Instant::now();
                mutate_once(&g, &branch, INSERT, format!("{tag}{k}")).await;
                ms.push(t.elapsed().as_secs_f64() * 1000.0);
            }
            ms
        }));
    }
    let mut ms = Vec::new();
    for t in tasks {
        ms.extend(t.await.expect("writer"));
    }
    let rate = (writers * per) as f64 / t0.elapsed().as_secs_f64();
    ms.sort_by(f64::total_cmp);
    (rate, ms)
}

async fn mutations(n: usize, history: usize) {
    let tmp = Scratch::new("mut.omni");
    let uri = tmp.uri();
    let g = Omnigraph::init(&uri, SOCIAL_SCHEMA).await.expect("init");
    mutate_once(&g, "main", INSERT, "warm".into()).await;
    let ms = timed_mutations(&g, "main", INSERT, "lat", n).await;
    println!(
        "| single-row mutation, embedded | median {:.2} ms | p99 {:.2} ms | n = {n} |",
        percentile(&ms, 0.5),
        percentile(&ms, 0.99)
    );
    println!();
    println!("| writers | branches | mutations/s | p50 ms | p99 ms |");
    println!("|---|---|---|---|---|");
    let row = |w: usize, b: &str, (rate, ms): &(f64, Vec<f64>)| {
        println!(
            "| {w} | {b} | {rate:.0} | {:.2} | {:.2} |",
            percentile(ms, 0.5),
            percentile(ms, 0.99)
        );
    };
    for w in [1, 4, 16] {
        let per = (n / w).max(8);
        let r = throughput(&g, w, &["main"], per, &format!("t{w}")).await;
        row(w, "1", &r);
    }
    for b in ["b1", "b2", "b3"] {
        g.branch_create(b, "main").await.expect("branch");
    }
    let one = throughput(&g, 4, &["main"], n / 4, "one").await;
    let four = throughput(&g, 4, &["main", "b1", "b2", "b3"], n / 4, "four").await;
    row(4, "1 (again, same run)", &one);
    row(4, "4", &four);
    let (one, four) = (one.0, four.0);
    println!("4 writers on 4 branches vs on 1 branch: {:.2}x", four / one);
    println!();
    // History and table size both grow under inserts; an update of one row
    // grows only the history, so the two effects show apart.
    println!(
        "| commits on the branch before | insert median ms | insert p99 ms | update median ms | update p99 ms |"
    );
    println!("|---|---|---|---|---|");
    let fresh = Scratch::new("hist.omni");
    let h = Omnigraph::init(&fresh.uri(), SOCIAL_SCHEMA)
        .await
        .expect("init");
    mutate_once(&h, "main", INSERT, "fixed".into()).await;
    let mut done = 0usize;
    for mark in [10usize, 1_000, 10_000]
        .into_iter()
        .filter(|m| *m <= history)
    {
        while done < mark {
            mutate_once(&h, "main", UPDATE, format!("h{done}")).await;
            done += 1;
        }
        let upd = timed_mutations(&h, "main", UPDATE, &format!("u{mark}-"), 30).await;
        let ins = timed_mutations(&h, "main", INSERT, &format!("at{mark}-"), 30).await;
        done += 60;
        println!(
            "| {mark} | {:.2} | {:.2} | {:.2} | {:.2} |",
            percentile(&ins, 0.5),
            percentile(&ins, 0.99),
            percentile(&upd, 0.5),
            percentile(&upd, 0.99)
        );
    }
}

fn sha12(mut handles: Vec<String>) -> String {
    handles.sort();
    omnigraph::util::hash::sha256_hex(handles.join("\n").as_bytes(), 6)
}

/// The answer of one query variant in the reference file's shape.
fn normalise(q: &str, r: &omnigraph::QueryResult) -> serde_json::Value {
    use serde_json::{Value, json};
    let rows: Vec<Vec<Value>> = omnigraph::exec::output::rows(r)
        .expect("query columns have a JSON form")
        .into_iter()
        .map(|row| r.columns.iter().map(|c| row[c].clone()).collect())
        .collect();
    match q {
        "q1" => rows.first().map_or(Value::Null, |r| json!(r)),
        "q2" => {
            let hs: Vec<String> = rows
                .iter()
                .map(|r| r[0].as_str().unwrap_or_default().to_string())
                .collect();
            json!({"count": hs.len(), "sha256_12": sha12(hs)})
        }
        "q3" | "q4" | "q5" => rows[0][0].clone(),
        _ => json!(
            rows.iter()
                .map(|r| json!([
                    r[0],
                    r[1],
                    r[2].as_f64().map(|f| (f * 10_000.0).round() / 10_000.0)
                ]))
                .collect::<Vec<_>>()
        ),
    }
}

/// The graph at `uri`, or a new one with `schema` loaded from the JSONL
/// file `data` (and how many seconds the load took).
async fn open_or_load(uri: &str, schema: &str, data: &str) -> (Omnigraph, Option<f64>) {
    if let Ok(g) = Omnigraph::open(uri).await {
        return (g, None);
    }
    let g = Omnigraph::init(uri, schema).await.expect("init");
    let file = std::fs::File::open(data).unwrap_or_else(|_| panic!("{data}"));
    let t0 = Instant::now();
    g.load_from(
        "main",
        None,
        std::io::BufReader::new(file),
        LoadMode::Overwrite,
        |_| {},
    )
    .await
    .expect("load");
    (g, Some(t0.elapsed().as_secs_f64()))
}

// One benchmark run from setup to report, in the order it prints.
/// q1..q6 warm; with `json`, also writes `{variant: {"first_ms", "warm_ms"}}`
/// (warm: the median) to that file, for `bench/guard.py`.
async fn queries(
    dir: &str,
    uri: &str,
    repeats: usize,
    reference: Option<&str>,
    json: Option<&str>,
    only: Option<&str>,
) {
    let meta: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{dir}/meta.json")).expect("meta.json"),
    )
    .expect("json");
    let (g, loaded) = open_or_load(uri, SOCIAL_SCHEMA, &format!("{dir}/social.jsonl")).await;
    if let Some(s) = loaded {
        eprintln!("loaded {dir} in {s:.1} s");
    }
    let reference: Option<serde_json::Value> = reference.map(|p| {
        serde_json::from_str(&std::fs::read_to_string(p).expect("reference")).expect("json")
    });
    let hub = meta["start"]["hub"].as_str().expect("hub").to_string();
    let median = meta["start"]["median"]
        .as_str()
        .expect("median")
        .to_string();
    let variants: Vec<(&str, &str, serde_json::Value)> = vec![
        ("q1", "q1_hub", serde_json::json!({"h": hub})),
        ("q1", "q1_median", serde_json::json!({"h": median})),
        ("q2", "q2_hub", serde_json::json!({"h": hub})),
        ("q2", "q2_median", serde_json::json!({"h": median})),
        ("q3", "q3_hub_bfs", serde_json::json!({"h": hub})),
        ("q3", "q3_median_bfs", serde_json::json!({"h": median})),
        ("q4", "q4_hub_bfs", serde_json::json!({"h": hub})),
        ("q4", "q4_median_bfs", serde_json::json!({"h": median})),
        ("q5", "q5", serde_json::Value::Null),
        ("q6", "q6", serde_json::Value::Null),
    ];
    println!("| variant | first run ms | warm median ms | warm min ms | answer |");
    println!("|---|---|---|---|---|");
    let target = omnigraph::Target::main();
    let mut figures = serde_json::Map::new();
    for (q, variant, params) in variants {
        if only.is_some_and(|o| o != variant) {
            continue;
        }
        let t0 = Instant::now();
        let first = g.query(&target, QUERIES, q, &params).await.expect("query");
        let first_ms = t0.elapsed().as_secs_f64() * 1000.0;
        let mut ms = Vec::new();
        for _ in 0..repeats {
            let t0 = Instant::now();
            let r = g.query(&target, QUERIES, q, &params).await.expect("query");
            ms.push(t0.elapsed().as_secs_f64() * 1000.0);
            std::hint::black_box(r);
        }
        ms.sort_by(f64::total_cmp);
        let got = normalise(q, &first);
        let verdict = match reference.as_ref().map(|r| r[variant].clone()) {
            Some(want) if want == got => "matches reference".to_string(),
            Some(want) => format!("MISMATCH: got {got}, reference {want}"),
            None => got.to_string(),
        };
        println!(
            "| {variant} | {first_ms:.1} | {:.2} | {:.2} | {verdict} |",
            percentile(&ms, 0.5),
            ms[0]
        );
        figures.insert(
            variant.to_string(),
            serde_json::json!({"first_ms": first_ms, "warm_ms": percentile(&ms, 0.5)}),
        );
    }
    if let Some(path) = json {
        std::fs::write(path, serde_json::Value::Object(figures).to_string()).expect("write --json");
    }
    let stats = g.cache_stats();
    let edges = stats["graph_index_edges_built"].as_f64().unwrap_or(0.0);
    let build_ms = stats["graph_index_build_ms"].as_f64().unwrap_or(0.0);
    println!();
    println!(
        "graph index: {} build(s), {} reuse(s), {edges} edges in {build_ms:.0} ms ({:.1} M edges/s); runtime cache {:.0} MiB; peak RSS {:.0} MiB",
        stats["graph_index_builds"],
        stats["graph_index_hits"],
        edges / build_ms.max(1e-9) / 1000.0,
        stats["bytes"].as_f64().unwrap_or(0.0) / (1 << 20) as f64,
        peak_rss_mib()
    );
}

fn main() {
    // SAFETY: the first thing the process does, before any thread starts.
    unsafe { omnigraph::util::cores::let_lance_use_the_cores() };
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_env("OMNIGRAPH_LOG") {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init();
    }
    let args: Vec<String> = std::env::args().collect();
    let opt = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let flag = |name: &str, default: usize| -> usize {
        opt(name).and_then(|v| v.parse().ok()).unwrap_or(default)
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    match args.get(1).map(String::as_str) {
        Some("load") => {
            let dir = args.get(2).expect("usage: omnigraph-bench load DIR");
            rt.block_on(load(dir, flag("--repeats", 1)));
        }
        Some("append") => rt.block_on(append(flag("--n", 300))),
        Some("processes") => rt.block_on(processes(flag("--writes", 25))),
        Some("locks") => rt.block_on(locks(flag("--n", 10_000))),
        Some("object-store") => {
            let uri = args
                .get(2)
                .expect("usage: omnigraph-bench object-store URI [--n N]");
            rt.block_on(object_store(uri, flag("--n", 30)));
        }
        Some("policy") => rt.block_on(policy::run(flag("--n", 100_000))),
        Some("feed") => {
            let uri = args.get(2).expect(
                "usage: omnigraph-bench feed GRAPH [--n 20] (a graph of the social workload)",
            );
            rt.block_on(feed::run(uri, flag("--n", 20)));
        }
        Some("hops") => {
            let uri = args.get(2).expect(
                "usage: omnigraph-bench hops URI [--delay-ms D] [--max-concurrent C] [--n N]",
            );
            let (d, c, n) = (
                flag("--delay-ms", 20),
                flag("--max-concurrent", 8),
                flag("--n", 5),
            );
            rt.block_on(hops::run(uri, d as u64, c, n));
        }
        Some("fleet") => {
            let uri = args.get(2).expect(
                "usage: omnigraph-bench fleet GRAPH --branches N --writers-per-branch M --processes P --seconds S",
            );
            rt.block_on(fleet::run(fleet::Fleet {
                uri: uri.clone(),
                branches: flag("--branches", 4),
                writers: flag("--writers-per-branch", 1),
                processes: flag("--processes", 1),
                seconds: flag("--seconds", 10) as u64,
            }));
        }
        Some("fleet-worker") => {
            let arg = |i: usize| {
                args.get(i)
                    .cloned()
                    .expect("fleet-worker URI RUN N M P S ID")
            };
            let num = |i: usize| arg(i).parse::<usize>().expect("a number");
            let f = fleet::Fleet {
                uri: arg(2),
                branches: num(4),
                writers: num(5),
                processes: num(6),
                seconds: num(7) as u64,
            };
            rt.block_on(fleet::worker(f, &arg(3), num(8)));
        }
        Some("append-worker") => {
            let uri = args.get(2).expect("usage: append-worker URI ID WRITES");
            let id = args.get(3).and_then(|v| v.parse().ok()).expect("ID");
            let writes = args.get(4).and_then(|v| v.parse().ok()).expect("WRITES");
            rt.block_on(append_worker(uri, id, writes));
        }
        Some("mutations") => rt.block_on(mutations(flag("--n", 300), flag("--history", 10_000))),
        Some("queries") => {
            let dir = args
                .get(2)
                .expect("usage: omnigraph-bench queries DIR --graph URI");
            let uri = opt("--graph").expect("--graph URI");
            rt.block_on(queries(
                dir,
                &uri,
                flag("--repeats", 10),
                opt("--reference").as_deref(),
                opt("--json").as_deref(),
                opt("--only").as_deref(),
            ));
        }
        Some("merge") => {
            let dir = args
                .get(2)
                .expect("usage: omnigraph-bench merge DIR --graph URI");
            let uri = opt("--graph").expect("--graph URI");
            let sizes: Vec<usize> = opt("--sizes")
                .unwrap_or_else(|| "1,1000,100000".into())
                .split(',')
                .map(|s| s.parse().expect("--sizes N,N,..."))
                .collect();
            rt.block_on(merge::run(dir, &uri, &sizes));
        }
        Some("blob") => {
            let dir = args
                .get(2)
                .expect("usage: omnigraph-bench blob DIR [--mib N] [--repeats N]");
            rt.block_on(blob::run(dir, flag("--mib", 64), flag("--repeats", 5)));
        }
        Some("schema") => {
            let dir = args
                .get(2)
                .expect("usage: omnigraph-bench schema DIR [--repeats N]");
            rt.block_on(schema::run(dir, flag("--repeats", 2)));
        }
        Some("delta") => {
            let dir = args
                .get(2)
                .expect("usage: omnigraph-bench delta DIR --graph URI [--repeats N] [--json FILE]");
            let uri = opt("--graph").expect("--graph URI (an optimized graph)");
            rt.block_on(delta::run(
                dir,
                &uri,
                flag("--repeats", 5),
                opt("--json").as_deref(),
            ));
        }
        Some("server") => {
            let dir = args
                .get(2)
                .expect("usage: omnigraph-bench server DIR --graph URI");
            let uri = opt("--graph").expect("--graph URI");
            rt.block_on(server::run(
                dir,
                &uri,
                flag("--n", 2000),
                flag("--seconds", 10) as u64,
            ));
        }
        Some("retention") => {
            let dir = args
                .get(2)
                .expect("usage: omnigraph-bench retention DIR [--marks 10,1000,10000]");
            let marks: Vec<usize> = opt("--marks")
                .unwrap_or_else(|| "10,1000,10000".into())
                .split(',')
                .map(|m| m.parse().expect("a number of versions"))
                .collect();
            rt.block_on(retention::run(dir, &marks));
        }
        Some("search") => {
            let dir = args
                .get(2)
                .expect("usage: omnigraph-bench search DIR --graph URI");
            let uri = opt("--graph").expect("--graph URI");
            rt.block_on(search::run(dir, &uri, flag("--repeats", 3)));
        }
        _ => {
            eprintln!(
                "usage: omnigraph-bench (load DIR [--repeats N] | append [--n N] | processes [--writes N] | locks [--n N] | object-store URI [--n N] | hops URI [--delay-ms D] [--max-concurrent C] [--n N] | fleet GRAPH [--branches N] [--writers-per-branch M] [--processes P] [--seconds S] | queries DIR --graph URI [--repeats N] [--reference FILE] [--json FILE] | merge DIR --graph URI [--sizes N,..] | search DIR --graph URI [--repeats N] | blob DIR [--mib N] [--repeats N] | schema DIR [--repeats N] | delta DIR --graph URI [--repeats N] [--json FILE] | server DIR --graph URI [--n N] [--seconds N] | retention DIR [--marks N,..] | policy [--n N])"
            );
            std::process::exit(2);
        }
    }
}
