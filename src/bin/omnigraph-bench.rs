//! Benchmarks that print a table. Build with `--release`.
//!
//! ```text
//! omnigraph-bench load DIR [--repeats N]     # overwrite load of DIR/social.jsonl (gen_social.py)
//! omnigraph-bench append [--n 300]           # 1-row append latency on a graph with 10 types
//! ```

use std::time::Instant;

use omnigraph::{LoadMode, Omnigraph};

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

const SOCIAL_SCHEMA: &str = "node Person { handle: String @key\n name: String\n age: I32?\n city: String }\nedge Knows: Person -> Person { since: I32 }\n";

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

async fn append(n: usize) {
    let mut schema = String::new();
    for i in 0..10 {
        schema.push_str(&format!("node T{i} {{ name: String @key\n v: I64? }}\n"));
    }
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
    g.load(
        "main",
        "{\"type\":\"T0\",\"data\":{\"name\":\"warm\"}}",
        LoadMode::Append,
    )
    .await
    .expect("warm");
    let mut ms = Vec::with_capacity(n);
    for k in 0..n {
        let line = format!(
            "{{\"type\":\"T{}\",\"data\":{{\"name\":\"a{k}\",\"v\":{k}}}}}",
            k % 10
        );
        let t0 = Instant::now();
        g.load("main", &line, LoadMode::Append)
            .await
            .expect("append");
        ms.push(t0.elapsed().as_secs_f64() * 1000.0);
    }
    let mut sorted = ms.clone();
    sorted.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
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

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str, default: usize| -> usize {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
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
        _ => {
            eprintln!("usage: omnigraph-bench (load DIR [--repeats N] | append [--n N])");
            std::process::exit(2);
        }
    }
}
