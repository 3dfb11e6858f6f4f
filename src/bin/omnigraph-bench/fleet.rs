//! The fleet workload: N branches, each written by M writers for S seconds
//! (tasks of this process, or spread over P processes that each open the
//! graph once), every write one unique Item with its tag edge as one
//! commit; then every branch merged back into main, one after another.
//! Prints commits/s, commit latency, merges/s, and whether every
//! acknowledged write is on main afterwards; beside it, the floor: a 1-row
//! Lance append and commit on the same store.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use omnigraph::storage::requests::{Latency, counted_session_with, lance_one_row};
use omnigraph::{LoadMode, Omnigraph, Target};
use serde_json::json;

use super::{ITEMS_SCHEMA, percentile};

pub struct Fleet {
    pub uri: String,
    pub branches: usize,
    pub writers: usize,
    pub processes: usize,
    pub seconds: u64,
}

/// What one process's writers did.
#[derive(Default)]
struct Done {
    acked: Vec<String>,
    latencies_ms: Vec<f64>,
    failed: usize,
}

fn branch_name(run: &str, b: usize) -> String {
    format!("fleet-{run}-{b}")
}

/// The writers (branch, writer) that process `id` of `processes` runs.
fn mine(f: &Fleet, id: usize) -> Vec<(usize, usize)> {
    (0..f.branches)
        .flat_map(|b| (0..f.writers).map(move |w| (b, w)))
        .enumerate()
        .filter(|(i, _)| i % f.processes == id)
        .map(|(_, bw)| bw)
        .collect()
}

/// Run this process's writers on `g` until the deadline.
async fn write(g: &Omnigraph, f: &Fleet, run: &str, id: usize) -> Done {
    let until = Instant::now() + Duration::from_secs(f.seconds);
    let tasks: Vec<_> = mine(f, id)
        .into_iter()
        .map(|(b, w)| {
            let g = g.clone();
            let branch = branch_name(run, b);
            let run = run.to_string();
            tokio::spawn(async move {
                let mut done = Done::default();
                let mut k = 0;
                while Instant::now() < until {
                    let name = format!("{run}-b{b}-w{w}-{k}");
                    k += 1;
                    let line = format!(
                        "{{\"type\":\"Item\",\"data\":{{\"name\":\"{name}\"}}}}\n{{\"edge\":\"HasTag\",\"from\":\"{name}\",\"to\":\"t\"}}"
                    );
                    let t0 = Instant::now();
                    match g.load(&branch, &line, LoadMode::Append).await {
                        Ok(_) => {
                            done.latencies_ms.push(t0.elapsed().as_secs_f64() * 1e3);
                            done.acked.push(name);
                        }
                        Err(e) => {
                            eprintln!("{name}: {e}");
                            done.failed += 1;
                        }
                    }
                }
                done
            })
        })
        .collect();
    let mut all = Done::default();
    for t in tasks {
        let d = t.await.expect("writer task");
        all.acked.extend(d.acked);
        all.latencies_ms.extend(d.latencies_ms);
        all.failed += d.failed;
    }
    all
}

/// The child side of a fleet over processes: run process `id`'s writers
/// and print what they did as one JSON line.
pub async fn worker(f: Fleet, run: &str, id: usize) {
    let g = Omnigraph::open(&f.uri).await.expect("open");
    let d = write(&g, &f, run, id).await;
    g.close().await;
    println!(
        "{}",
        json!({"acked": d.acked, "latencies_ms": d.latencies_ms, "failed": d.failed})
    );
}

/// Every Item name on main.
async fn items_on_main(uri: &str) -> BTreeSet<String> {
    let g = Omnigraph::open_read_only(uri).await.expect("open");
    let mut dump = Vec::new();
    g.export(&Target::main(), &mut dump).await.expect("export");
    String::from_utf8(dump)
        .expect("utf-8")
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["type"] == "Item")
        .filter_map(|v| v["data"]["name"].as_str().map(str::to_string))
        .collect()
}

/// A 1-row Lance append and commit on the store of `uri`: the median of
/// 30, in ms.
async fn floor_ms(uri: &str) -> f64 {
    let (session, _) = counted_session_with(Latency::default());
    let table = format!("{uri}-floor.lance");
    // A run's floor table is its own: an earlier run's goes first.
    if !table.contains("://") {
        let _ = std::fs::remove_dir_all(&table);
    }
    lance_one_row(&session, &table, false)
        .await
        .expect("create");
    let mut ms = Vec::new();
    for _ in 0..30 {
        let t0 = Instant::now();
        lance_one_row(&session, &table, true).await.expect("append");
        ms.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    ms.sort_by(f64::total_cmp);
    percentile(&ms, 0.5)
}

pub async fn run(f: Fleet) {
    let run = omnigraph::util::ulid::new_ulid().to_lowercase();
    let g = match Omnigraph::open(&f.uri).await {
        Ok(g) => g,
        Err(_) => {
            let g = Omnigraph::init(&f.uri, ITEMS_SCHEMA).await.expect("init");
            let tag = "{\"type\":\"Tag\",\"data\":{\"name\":\"t\"}}";
            g.load("main", tag, LoadMode::Append).await.expect("tag");
            g
        }
    };
    for b in 0..f.branches {
        g.branch_create(&branch_name(&run, b), "main")
            .await
            .expect("branch");
    }
    let t0 = Instant::now();
    let done = if f.processes <= 1 {
        write(&g, &f, &run, 0).await
    } else {
        g.close().await;
        let me = std::env::current_exe().expect("own path");
        let children: Vec<_> = (0..f.processes)
            .map(|id| {
                std::process::Command::new(&me)
                    .args([
                        "fleet-worker",
                        &f.uri,
                        &run,
                        &f.branches.to_string(),
                        &f.writers.to_string(),
                        &f.processes.to_string(),
                        &f.seconds.to_string(),
                        &id.to_string(),
                    ])
                    .stdout(std::process::Stdio::piped())
                    .spawn()
                    .expect("spawn")
            })
            .collect();
        let mut all = Done::default();
        for c in children {
            let out = c.wait_with_output().expect("worker");
            let text = String::from_utf8_lossy(&out.stdout);
            let Some(v) = text
                .lines()
                .last()
                .and_then(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            else {
                eprintln!("a worker printed no result (exit {})", out.status);
                all.failed += 1;
                continue;
            };
            let strs = |k: &str| -> Vec<serde_json::Value> {
                v[k].as_array().cloned().unwrap_or_default()
            };
            all.acked.extend(
                strs("acked")
                    .iter()
                    .filter_map(|x| x.as_str().map(String::from)),
            );
            all.latencies_ms
                .extend(strs("latencies_ms").iter().filter_map(|x| x.as_f64()));
            all.failed += v["failed"].as_u64().unwrap_or(0) as usize;
        }
        all
    };
    let secs = t0.elapsed().as_secs_f64();
    let mut done = done;
    done.latencies_ms.sort_by(f64::total_cmp);
    let g = Omnigraph::open(&f.uri).await.expect("open");
    let m0 = Instant::now();
    let mut merge_failed = 0;
    for b in 0..f.branches {
        if let Err(e) = g.merge(&branch_name(&run, b), "main").await {
            eprintln!("merge of {}: {e}", branch_name(&run, b));
            merge_failed += 1;
        }
    }
    let merge_secs = m0.elapsed().as_secs_f64();
    g.close().await;
    let on_main = items_on_main(&f.uri).await;
    let missing = done.acked.iter().filter(|n| !on_main.contains(*n)).count();
    let floor = floor_ms(&f.uri).await;
    println!(
        "| branches | writers/branch | processes | commits | commits/s | p50 ms | p99 ms | failed | merges/s | merge failures | acknowledged missing on main | 1-row Lance append (floor), ms |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    println!(
        "| {} | {} | {} | {} | {:.0} | {:.1} | {:.1} | {} | {:.1} | {merge_failed} | {missing} | {floor:.2} |",
        f.branches,
        f.writers,
        f.processes.max(1),
        done.acked.len(),
        done.acked.len() as f64 / secs,
        percentile(&done.latencies_ms, 0.5),
        percentile(&done.latencies_ms, 0.99),
        done.failed,
        f.branches as f64 / merge_secs,
    );
    if missing > 0 {
        eprintln!("{missing} acknowledged writes are not on main");
        std::process::exit(1);
    }
}
