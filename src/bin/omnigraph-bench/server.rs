//! `omnigraph-bench server DIR --graph URI`: what the HTTP server adds to
//! the embedded handle, and what it sustains. The same warm point query
//! (q1) and 1-row mutation, embedded and over loopback (JSON and Arrow);
//! reads per second with 16 clients on q1 and q2; p50 / p99 of 16 readers
//! (q1 and q2 by halves) alone, 4 writers alone and both at once, embedded
//! and over loopback. The server is the `omnigraph` binary
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

/// A policy file that lets the bench's actor do anything (tokens alone
/// allow only reads).
fn allow_all() -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("omnigraph-bench-{}.yaml", std::process::id()));
    std::fs::write(
        &path,
        "version: 1\nrules:\n  - id: all\n    allow: { actors: \"*\", actions: [\"*\"] }\n",
    )
    .expect("the policy file");
    path
}

fn serve(uri: &str) -> Served {
    let exe = std::env::current_exe().expect("exe");
    let bin = exe.with_file_name("omnigraph");
    let mut child = Command::new(&bin)
        .args(["serve", "--listen", "127.0.0.1:0", "--graph"])
        .arg(format!("g={uri}"))
        .env("OMNIGRAPH_TOKENS", format!("{{\"bench\": \"{TOKEN}\"}}"))
        .arg("--policy")
        .arg(allow_all())
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
    println!("| 16 clients, {seconds} s, over loopback | requests/s | p50 ms | p99 ms |");
    println!("|---|---|---|---|");
    let http = Via::Http(s.base.clone());
    for q in ["q1", "q2"] {
        let (rps, p50, p99) = load_run(&http, q, persons, 16, 0, seconds).await.0;
        println!("| {q} (random person) | {rps:.0} | {p50:.2} | {p99:.2} |");
    }
    let g = std::sync::Arc::new(g);
    for via in [Via::Embedded(g.clone()), http] {
        let name = match via {
            Via::Embedded(_) => "embedded",
            Via::Http(_) => "over loopback",
        };
        let (alone, _) = load_run(&via, MIX, persons, 16, 0, seconds).await;
        let (_, w_alone) = load_run(&via, MIX, persons, 0, 4, seconds).await;
        let (reads, writes) = load_run(&via, MIX, persons, 16, 4, seconds).await;
        let row = |what: &str, (n, p50, p99): (f64, f64, f64)| {
            println!("| {name}: {what} | {n:.0} | {p50:.2} | {p99:.2} |");
        };
        row("16 reading q1/q2, no writers", alone);
        row("4 writing 1-row inserts, no readers", w_alone);
        row("mixed: the 16 reading q1/q2", reads);
        row("mixed: the 4 writing beside them", writes);
        println!(
            "| {name}: mixed against alone | reads {:.0} % | writes {:.0} % | |",
            100.0 * reads.0 / alone.0,
            100.0 * writes.0 / w_alone.0
        );
    }
    let g = std::sync::Arc::into_inner(g).expect("the runs are over");
    drop(s);
    g.close().await;
}

/// Readers take q1 and q2 by halves.
const MIX: &str = "mix";

/// How the clients reach the graph.
#[derive(Clone)]
enum Via {
    Embedded(std::sync::Arc<omnigraph::Omnigraph>),
    Http(String),
}

impl Via {
    async fn read(&self, c: &reqwest::Client, q: &str, h: String) {
        let params = json!({ "h": h });
        match self {
            Via::Embedded(g) => {
                std::hint::black_box(
                    g.query(&Target::main(), QUERIES, q, &params)
                        .await
                        .expect(q),
                );
            }
            Via::Http(base) => {
                let b = json!({"query": QUERIES, "name": q, "params": params});
                post(c, &format!("{base}/graphs/g/query"), &b, false).await;
            }
        }
    }

    async fn write(&self, c: &reqwest::Client, h: String) {
        let params = json!({ "h": h });
        match self {
            Via::Embedded(g) => {
                g.mutate("main", ADD, "add", &params).await.expect("mutate");
            }
            Via::Http(base) => {
                let b = json!({"query": ADD, "params": params});
                post(c, &format!("{base}/graphs/g/mutate"), &b, false).await;
            }
        }
    }
}

/// `readers` clients querying (`q`; [`MIX`]: q1 and q2 by halves) and
/// `writers` clients inserting, for `seconds`: per side, (requests/s, p50
/// ms, p99 ms).
async fn load_run(
    via: &Via,
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
        let via = via.clone();
        let q = match q {
            MIX if w % 2 == 0 => "q1",
            MIX => "q2",
            q => q,
        }
        .to_string();
        let run_id = run_id.clone();
        tasks.push(tokio::spawn(async move {
            let c = reqwest::Client::new();
            let mut ms = Vec::new();
            let mut k = w * 1_000_003;
            while Instant::now() < until {
                k += 1;
                let t0 = Instant::now();
                match reading {
                    true => via.read(&c, &q, person(k, persons)).await,
                    false => via.write(&c, format!("{run_id}-{w}-{k}")).await,
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
