//! Serial hops on object storage: every operation of the write and read
//! paths run on a graph whose store answers every request after a delay
//! (the counting store's `Latency`), and again with no delay, so that
//! what an operation waits for one request after another shows apart from
//! its CPU time. For each: its requests by kind, the longest chain of
//! requests each sent after the one before it answered (the store's count
//! of serial hops) and the same read off wall time, `(wall at D - wall at
//! 0) / D`. Meant for an `s3://` URI (the local S3 server): the store of
//! a local path is not counted.
//!
//! A CLI process is the handle it opens: `mutate` is a read-write open, the
//! commit and the close; `query` a read-only open and the query, on a
//! handle with its own session (nothing cached), as the process has.

use std::time::{Duration, Instant};

use omnigraph::storage::requests::{Latency, Requests, counted_session_with, lance_one_row};
use omnigraph::{LoadMode, Omnigraph, OpenOptions, Target};
use serde_json::json;

const SCHEMA: &str = "node Person { name: String @key\n age: I32? }\nedge Knows: Person -> Person";
const PEOPLE: usize = 1000;

/// One measured run: wall time and the requests the handles counted.
#[derive(Clone, Copy, Default)]
struct Run {
    ms: f64,
    reqs: Requests,
}

fn opts(latency: Latency) -> OpenOptions {
    OpenOptions {
        latency,
        ..OpenOptions::default()
    }
}

fn people_jsonl(from: usize, n: usize, knows: bool) -> String {
    let mut out = String::new();
    for i in from..from + n {
        out.push_str(&format!(
            "{{\"type\":\"Person\",\"data\":{{\"name\":\"p{i}\",\"age\":{}}}}}\n",
            i % 90
        ));
    }
    if knows {
        for i in from..from + n {
            let to = from + (i + 1 - from) % n;
            out.push_str(&format!(
                "{{\"edge\":\"Knows\",\"from\":\"p{i}\",\"to\":\"p{to}\"}}\n"
            ));
        }
    }
    out
}

const INSERT: &str = "query m($n: String, $a: I32) { insert Person { name: $n, age: $a } }";
const UPDATE: &str =
    "query m($n: String, $a: I32) { update Person set { age: $a } where name = $n }";
const DELETE: &str = "query m($n: String) { delete Person where name = $n }";

/// Run `src` on `main` for the row `x{n}`.
async fn mutate(g: &Omnigraph, src: &str, n: usize) {
    let mut params = json!({"n": format!("x{n}")});
    if src.contains("$a") {
        params["a"] = json!((n % 90) as i32 + 1);
    }
    g.mutate("main", src, "m", &params).await.expect("mutation");
}

/// Each operation's runs at one latency, in a fixed order (see `NAMES`).
async fn suite(uri: &str, latency: Latency, n: usize) -> Vec<Vec<Run>> {
    let g = Omnigraph::init_with(uri, SCHEMA, opts(latency))
        .await
        .expect("init");
    g.load("main", &people_jsonl(0, PEOPLE, true), LoadMode::Overwrite)
        .await
        .expect("load");
    let mut out: Vec<Vec<Run>> = vec![Vec::new(); NAMES.len()];
    // Measure `f` on the handle `g`'s counters.
    macro_rules! on {
        ($slot:expr, $g:expr, $body:expr) => {{
            tracing::info!(target: "hops", "--- {}", NAMES[$slot]);
            let before = $g.requests();
            let t0 = Instant::now();
            $body;
            out[$slot].push(Run {
                ms: t0.elapsed().as_secs_f64() * 1000.0,
                reqs: $g.requests().since(&before),
            });
        }};
    }
    let main = Target::main();
    let lookup = "query q($n: String) { match { $p: Person { name: $n } } return { $p.age } }";
    let hop =
        "query q($n: String) { match { $p: Person { name: $n } $p knows $f } return { $f.name } }";
    let p = |k: usize| json!({"n": format!("p{}", k % PEOPLE)});
    for k in 0..n {
        on!(0, g, mutate(&g, INSERT, k).await);
        on!(1, g, mutate(&g, UPDATE, k).await);
        on!(2, g, mutate(&g, DELETE, k).await);
        let batch = people_jsonl(PEOPLE * (k + 2), 500, true);
        on!(
            3,
            g,
            g.load("main", &batch, LoadMode::Append)
                .await
                .expect("load")
        );
        // The handle's own write, then a read of it.
        mutate(&g, INSERT, n + k).await;
        let mine = json!({"n": format!("x{}", n + k)});
        on!(
            4,
            g,
            g.query(&main, lookup, "q", &mine).await.expect("read")
        );
    }
    // A process alone on the graph: this handle's locks go back first.
    g.close().await;
    for k in 0..n {
        // A `mutate` process: open, commit, close, counted on its handle.
        tracing::info!(target: "hops", "--- {}", NAMES[7]);
        let t0 = Instant::now();
        let h = Omnigraph::open_with(uri, opts(latency))
            .await
            .expect("open");
        mutate(&h, INSERT, 10 * n + k).await;
        let counted = h.clone();
        h.close().await;
        let reqs = counted.requests();
        out[7].push(Run {
            ms: t0.elapsed().as_secs_f64() * 1000.0,
            reqs,
        });
        for (slot, q) in [(8, lookup), (9, hop)] {
            let t0 = Instant::now();
            let h = Omnigraph::open_read_only_with(uri, opts(latency))
                .await
                .expect("open");
            // As the CLI's `query` does: the read is of the state the open found.
            let at = h.as_opened(&main);
            h.query(&at, q, "q", &p(k * 7)).await.expect("query");
            out[slot].push(Run {
                ms: t0.elapsed().as_secs_f64() * 1000.0,
                reqs: h.requests(),
            });
        }
        let t0 = Instant::now();
        let h = Omnigraph::open_read_only_with(uri, opts(latency))
            .await
            .expect("open");
        out[10].push(Run {
            ms: t0.elapsed().as_secs_f64() * 1000.0,
            reqs: h.requests(),
        });
        // The storage library alone: one row appended to one table.
        let (session, counters) = counted_session_with(latency);
        let table = format!("{uri}-floor-{k}.lance");
        lance_one_row(&session, &table, false)
            .await
            .expect("create");
        let before = counters.read();
        let t0 = Instant::now();
        lance_one_row(&session, &table, true).await.expect("append");
        out[11].push(Run {
            ms: t0.elapsed().as_secs_f64() * 1000.0,
            reqs: counters.read().since(&before),
        });
    }
    let g = Omnigraph::open_with(uri, opts(latency))
        .await
        .expect("open");
    // Last: a merged branch's tables become main's, and main's next write
    // forks them onto its own line, which the rows above do not measure.
    for k in 0..n {
        on!(
            5,
            g,
            g.branch_create(&format!("b{k}"), "main")
                .await
                .expect("branch")
        );
        let line = format!("{{\"type\":\"Person\",\"data\":{{\"name\":\"m{k}\"}}}}\n");
        g.load(&format!("b{k}"), &line, LoadMode::Append)
            .await
            .expect("branch load");
        on!(
            6,
            g,
            g.merge(&format!("b{k}"), "main").await.expect("merge")
        );
    }
    g.close().await;
    out
}

const NAMES: [&str; 12] = [
    "1-row insert (open handle)",
    "1-row update (open handle)",
    "1-row delete (open handle)",
    "1,000-row load, two tables (append)",
    "read of the handle's own write (warm)",
    "branch create",
    "merge of a 1-commit branch",
    "`mutate` process: open + 1-row insert + close",
    "cold key lookup (read-only open + query)",
    "cold one-hop traversal (read-only open + query)",
    "read-only open",
    "Lance alone: 1-row append to one table",
];

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return 0.0;
    }
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

pub async fn run(uri: &str, delay_ms: u64, max_concurrent: usize, n: usize) {
    let stamp = omnigraph::util::ulid::new_ulid().to_lowercase();
    let off = suite(&format!("{uri}/hops-{stamp}-0.omni"), Latency::default(), n).await;
    let latency = Latency {
        delay: Duration::from_millis(delay_ms),
        max_concurrent,
    };
    let on = suite(&format!("{uri}/hops-{stamp}-{delay_ms}.omni"), latency, n).await;
    println!(
        "delay {delay_ms} ms a request, at most {} under way; medians of {n}",
        if max_concurrent == 0 {
            "any".to_string()
        } else {
            max_concurrent.to_string()
        }
    );
    println!();
    println!(
        "| operation | serial hops (store) | hops by wall | requests | GET | HEAD | PUT | cond. PUT | LIST | DELETE | ms at 0 | ms at {delay_ms} |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (i, name) in NAMES.iter().enumerate() {
        let f = |g: fn(&Requests) -> u64| median(on[i].iter().map(|r| g(&r.reqs) as f64).collect());
        let (ms0, ms1) = (
            median(off[i].iter().map(|r| r.ms).collect()),
            median(on[i].iter().map(|r| r.ms).collect()),
        );
        println!(
            "| {name} | {} | {:.1} | {} | {} | {} | {} | {} | {} | {} | {ms0:.1} | {ms1:.1} |",
            f(|r| r.serial),
            (ms1 - ms0) / delay_ms.max(1) as f64,
            f(|r| r.total()),
            f(|r| r.get),
            f(|r| r.head),
            f(|r| r.put),
            f(|r| r.conditional_put),
            f(|r| r.list),
            f(|r| r.delete),
        );
    }
}
