//! `omnigraph-bench server DIR --graph URI`: what the HTTP server adds to
//! the embedded handle, and what it sustains. The same warm point query
//! (q1) and 1-row mutation, embedded and over loopback (JSON and Arrow);
//! reads per second with 16 clients on q1 and q2; p50 / p99 under 16
//! readers and 4 writers at once. The server is the `omnigraph` binary
//! beside this one, on the same graph.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use omnigraph::Target;
use serde_json::json;

use super::{QUERIES, SOCIAL_SCHEMA, open_or_load, percentile};

const ADD: &str =
    r#"query add($h: String) { insert Person { handle: $h, name: "bench", city: "Bench" } }"#;
const TOKEN: &str = "bench-token";

fn median_ms(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    (percentile(&v, 0.5), percentile(&v, 0.99))
}

/// A person handle in `0..persons`, spread by a fixed multiplier.
fn person(k: usize, persons: usize) -> String {
    format!("p{}", (k.wrapping_mul(2_654_435_761)) % persons)
}

struct Served {
    child: std::process::Child,
    base: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

fn serve(uri: &str) -> Served {
    let exe = std::env::current_exe().expect("exe");
    let bin = exe.with_file_name("omnigraph");
    let mut child = Command::new(&bin)
        .args(["serve", "--listen", "127.0.0.1:0", "--graph"])
        .arg(format!("g={uri}"))
        .env("OMNIGRAPH_TOKENS", format!("{{\"bench\": \"{TOKEN}\"}}"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e} (build --bin omnigraph too)", bin.display()));
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("address");
    let addr = line
        .trim()
        .strip_prefix("OMNIGRAPH_LISTEN_ADDR=")
        .expect("OMNIGRAPH_LISTEN_ADDR=")
        .to_string();
    Served {
        child,
        base: format!("http://{addr}"),
    }
}

async fn post(c: &reqwest::Client, url: &str, body: &serde_json::Value, arrow: bool) -> usize {
    let mut r = c.post(url).bearer_auth(TOKEN).json(body);
    if arrow {
        r = r.header("accept", "application/vnd.apache.arrow.stream");
    }
    let r = r.send().await.expect("request");
    assert!(
        r.status().is_success(),
        "{}",
        r.text().await.unwrap_or_default()
    );
    r.bytes().await.expect("body").len()
}

pub async fn run(dir: &str, uri: &str, n: usize, seconds: u64) {
    let meta: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{dir}/meta.json")).expect("meta.json"),
    )
    .expect("json");
    let persons = meta["persons"].as_u64().expect("meta.json persons") as usize;
    let (g, _) = open_or_load(uri, SOCIAL_SCHEMA, &format!("{dir}/social.jsonl")).await;
    let main = Target::main();
    let median = meta["start"]["median"]
        .as_str()
        .expect("median")
        .to_string();

    // Embedded, warm.
    let q1 = json!({"h": median});
    for _ in 0..50 {
        g.query(&main, QUERIES, "q1", &q1).await.expect("q1");
    }
    let mut emb_q = Vec::new();
    for _ in 0..n {
        let t0 = Instant::now();
        std::hint::black_box(g.query(&main, QUERIES, "q1", &q1).await.expect("q1"));
        emb_q.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    // Over loopback, one client, kept-alive connection.
    let s = serve(uri);
    let c = reqwest::Client::new();
    let qurl = format!("{}/graphs/g/query", s.base);
    let murl = format!("{}/graphs/g/mutate", s.base);
    let body = json!({"query": QUERIES, "name": "q1", "params": q1});
    for _ in 0..50 {
        post(&c, &qurl, &body, false).await;
    }
    let mut http_q = Vec::new();
    let mut http_qa = Vec::new();
    for _ in 0..n {
        let t0 = Instant::now();
        post(&c, &qurl, &body, false).await;
        http_q.push(t0.elapsed().as_secs_f64() * 1e3);
        let t0 = Instant::now();
        post(&c, &qurl, &body, true).await;
        http_qa.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    // Mutations alternate, embedded then over loopback: a write's cost
    // grows with the graph's history, so both sides see the same history.
    let (mut emb_m, mut http_m) = (Vec::new(), Vec::new());
    for k in 0..n.min(300) {
        let t0 = Instant::now();
        g.mutate("main", ADD, "add", &json!({"h": format!("emb-{k}")}))
            .await
            .expect("mutate");
        emb_m.push(t0.elapsed().as_secs_f64() * 1e3);
        let t0 = Instant::now();
        let b = json!({"query": ADD, "params": {"h": format!("http-{k}")}});
        post(&c, &murl, &b, false).await;
        http_m.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    // p99 is printed for the load runs only; one client's tail is noise.
    let (eq, _) = median_ms(emb_q);
    let (hq, _) = median_ms(http_q);
    let (ha, _) = median_ms(http_qa);
    let (em, _) = median_ms(emb_m);
    let (hm, _) = median_ms(http_m);
    println!("| one client, warm, median ms | embedded | over loopback | added |");
    println!("|---|---|---|---|");
    println!(
        "| q1 point query, JSON | {eq:.3} | {hq:.3} | {:.3} |",
        hq - eq
    );
    println!(
        "| q1 point query, Arrow IPC | {eq:.3} | {ha:.3} | {:.3} |",
        ha - eq
    );
    println!("| 1-row mutation | {em:.2} | {hm:.2} | {:.2} |", hm - em);

    // Throughput: 16 clients, each its own connection, for `seconds`.
    println!();
    println!("| 16 clients, {seconds} s | requests/s | p50 ms | p99 ms |");
    println!("|---|---|---|---|");
    for q in ["q1", "q2"] {
        let (rps, p50, p99) = load_run(&s.base, q, persons, 16, 0, seconds).await.0;
        println!("| {q} (random person) | {rps:.0} | {p50:.2} | {p99:.2} |");
    }
    let (_, alone) = load_run(&s.base, "q2", persons, 0, 4, seconds).await;
    println!(
        "| 4 writing 1-row inserts, no readers | {:.0} | {:.2} | {:.2} |",
        alone.0, alone.1, alone.2
    );
    let (reads, writes) = load_run(&s.base, "q2", persons, 16, 4, seconds).await;
    println!(
        "| mixed: 16 reading q1/q2 | {:.0} | {:.2} | {:.2} |",
        reads.0, reads.1, reads.2
    );
    println!(
        "| mixed: 4 writing 1-row inserts | {:.0} | {:.2} | {:.2} |",
        writes.0, writes.1, writes.2
    );
    drop(s);
    g.close().await;
}

/// `readers` clients querying (`q`, or q1 and q2 alternately when there
/// are writers) and `writers` clients inserting, for `seconds`: per side,
/// (requests/s, p50 ms, p99 ms).
async fn load_run(
    base: &str,
    q: &str,
    persons: usize,
    readers: usize,
    writers: usize,
    seconds: u64,
) -> ((f64, f64, f64), (f64, f64, f64)) {
    let until = Instant::now() + Duration::from_secs(seconds);
    let run_id = omnigraph::util::ulid::new_ulid();
    let mut tasks = Vec::new();
    for w in 0..readers + writers {
        let reading = w < readers;
        let base = base.to_string();
        let q = if writers > 0 && w % 2 == 0 { "q1" } else { q }.to_string();
        let run_id = run_id.clone();
        tasks.push(tokio::spawn(async move {
            let c = reqwest::Client::new();
            let mut ms = Vec::new();
            let mut k = w * 1_000_003;
            while Instant::now() < until {
                k += 1;
                let t0 = Instant::now();
                if reading {
                    let b =
                        json!({"query": QUERIES, "name": q, "params": {"h": person(k, persons)}});
                    post(&c, &format!("{base}/graphs/g/query"), &b, false).await;
                } else {
                    let b = json!({"query": ADD, "params": {"h": format!("{run_id}-{w}-{k}")}});
                    post(&c, &format!("{base}/graphs/g/mutate"), &b, false).await;
                }
                ms.push(t0.elapsed().as_secs_f64() * 1e3);
            }
            (reading, ms)
        }));
    }
    let (mut r, mut wr) = (Vec::new(), Vec::new());
    for t in tasks {
        let (reading, ms) = t.await.expect("client");
        if reading { r.extend(ms) } else { wr.extend(ms) }
    }
    let side = |v: Vec<f64>| {
        let n = v.len() as f64;
        let (p50, p99) = median_ms(v);
        (n / seconds as f64, p50, p99)
    };
    (side(r), side(wr))
}
