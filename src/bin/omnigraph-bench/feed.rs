//! The change feed's cost: a poll that returns one commit's k changes, on
//! a graph of any size (what it reads is the rows the commit changed), and
//! how long a `--follow` process takes to print a commit after it landed.

use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

use omnigraph::{ChangeRequest, ChangeStart, LoadMode, Omnigraph};
use serde_json::Value;

use super::percentile;

/// The cursor after main's head now.
async fn now(g: &Omnigraph) -> String {
    g.changes(&ChangeRequest {
        branch: "main".into(),
        start: ChangeStart::Now,
        ..Default::default()
    })
    .await
    .expect("poll")
    .cursor
}

/// Poll latency after a commit of `k` updated people, `n` times.
async fn polls(g: &Omnigraph, k: usize, n: usize) -> (f64, f64, usize) {
    let mut cursor = now(g).await;
    let mut ms = Vec::new();
    let mut changes = 0;
    for i in 0..n {
        // k people rewritten whole (a merge-mode load of their rows).
        let rows: Vec<String> = (0..k)
            .map(|j| {
                format!(
                    r#"{{"type":"Person","data":{{"handle":"p{}","name":"n{i}","age":{},"city":"c"}}}}"#,
                    (i * k + j) * 13 % 90_000 + 1,
                    i % 90 + 1
                )
            })
            .collect();
        g.load("main", &rows.join("\n"), LoadMode::Merge)
            .await
            .expect("a merge load");
        let t0 = Instant::now();
        let page = g
            .changes(&ChangeRequest {
                branch: "main".into(),
                cursor: Some(cursor.clone()),
                ..Default::default()
            })
            .await
            .expect("poll");
        ms.push(t0.elapsed().as_secs_f64() * 1000.0);
        changes = page.blocks.iter().map(|b| b.changes.len()).sum();
        cursor = page.cursor;
    }
    ms.sort_by(f64::total_cmp);
    (percentile(&ms, 0.5), percentile(&ms, 0.99), changes)
}

pub async fn run(uri: &str, n: usize) {
    let g = Omnigraph::open(uri).await.expect("open");
    println!("| poll after a commit of | changes | p50 ms | p99 ms |");
    println!("|---|---|---|---|");
    for k in [1usize, 100] {
        let (p50, p99, c) = polls(&g, k, n).await;
        println!("| {k} updated people | {c} | {p50:.2} | {p99:.2} |");
    }
    // Follow: a process printing blocks as they land.
    let cursor = now(&g).await;
    let bin = std::env::current_exe()
        .expect("the bench's path")
        .with_file_name("omnigraph");
    let mut child = std::process::Command::new(bin)
        .args(["changes", "poll", uri, "--cursor", &cursor, "--follow"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("omnigraph beside the bench");
    let (tx, rx) = std::sync::mpsc::channel();
    let out = child.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if line.contains("graph_commit_id") && tx.send(Instant::now()).is_err() {
                break;
            }
        }
    });
    // Let it open and catch up first.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut ms = Vec::new();
    for i in 0..n {
        let body = format!(
            "query m() {{ update Person set {{ age: {} }} where handle = \"p{}\" }}",
            (i % 90) + 1,
            i * 11 + 3
        );
        g.mutate("main", &body, "m", &Value::Null)
            .await
            .expect("mutation");
        let landed = Instant::now();
        let printed = rx.recv_timeout(Duration::from_secs(30)).expect("a block");
        ms.push(printed.saturating_duration_since(landed).as_secs_f64() * 1000.0);
        tokio::time::sleep(Duration::from_millis(37)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    ms.sort_by(f64::total_cmp);
    println!(
        "\nfollow: commit acknowledged -> block printed, {n} commits: p50 {:.1} ms, p99 {:.1} ms",
        percentile(&ms, 0.5),
        percentile(&ms, 0.99)
    );
    g.close().await;
}
