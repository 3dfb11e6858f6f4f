//! What history costs and what `cleanup` gives back: the social graph of
//! DIR takes one-row updates until it holds 10, 1,000 and 10,000 versions
//! of history; at each mark a copy is cleaned up (`omnigraph cleanup
//! --older-than 0s`), and the graph and its copy are measured side by side:
//! bytes and files, a one-row mutation (embedded, median of 20), a cold q1
//! and a `snapshot` (each a fresh `omnigraph` process, median of 5), and
//! the cleanup's own time.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use omnigraph::{LoadMode, Omnigraph};

const UPDATE: &str =
    "query set($c: String, $h: String) { update Person set { city: $c } where handle = $h }";
const Q1: &str =
    "query q1($h: String) { match { $p: Person { handle: $h } } return { $p.name, $p.age } }";

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Bytes and files under a folder.
fn footprint(dir: &Path) -> (u64, u64) {
    let mut out = (0, 0);
    for e in std::fs::read_dir(dir)
        .expect("a graph folder")
        .map(|e| e.expect("entry"))
    {
        let m = e.metadata().expect("metadata");
        if m.is_dir() {
            let (b, f) = footprint(&e.path());
            out = (out.0 + b, out.1 + f);
        } else {
            out = (out.0 + m.len(), out.1 + 1);
        }
    }
    out
}

fn cli() -> std::path::PathBuf {
    std::env::current_exe()
        .expect("current exe")
        .with_file_name("omnigraph")
}

/// Wall time of one `omnigraph` process, in ms.
fn run_ms(args: &[&str]) -> f64 {
    let t = Instant::now();
    let out = Command::new(cli())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e} (build --bin omnigraph too)", cli().display()));
    assert!(
        out.status.success(),
        "omnigraph {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    t.elapsed().as_secs_f64() * 1000.0
}

struct Figures {
    bytes: u64,
    files: u64,
    mutation_ms: f64,
    cold_q1_ms: f64,
    snapshot_ms: f64,
}

async fn measure(uri: &str, hub: &str, who: &str, tag: &str) -> Figures {
    let (bytes, files) = footprint(Path::new(uri));
    let params = serde_json::json!({ "h": hub }).to_string();
    let cold_q1_ms = median(
        (0..5)
            .map(|_| run_ms(&["query", "--store", uri, "-e", Q1, "q1", "--params", &params]))
            .collect(),
    );
    let snapshot_ms = median((0..5).map(|_| run_ms(&["snapshot", uri])).collect());
    let g = Omnigraph::open(uri).await.expect("open");
    let mut ms = Vec::new();
    for k in 0..21 {
        let p = serde_json::json!({ "c": format!("{tag}{k}"), "h": who });
        let t = Instant::now();
        g.mutate("main", UPDATE, "set", &p).await.expect("mutation");
        if k > 0 {
            ms.push(t.elapsed().as_secs_f64() * 1000.0);
        }
    }
    g.close().await;
    Figures {
        bytes,
        files,
        mutation_ms: median(ms),
        cold_q1_ms,
        snapshot_ms,
    }
}

pub async fn run(dir: &str, marks: &[usize]) {
    let meta: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(dir).join("meta.json")).expect("meta.json"),
    )
    .expect("meta.json is JSON");
    let hub = meta["start"]["hub"].as_str().expect("a hub").to_string();
    let who = meta["start"]["median"]
        .as_str()
        .expect("a median")
        .to_string();
    let scratch = std::env::temp_dir().join(format!(
        "omnigraph-bench-{}",
        omnigraph::util::ulid::new_ulid()
    ));
    std::fs::create_dir_all(&scratch).expect("scratch");
    let uri = scratch.join("g.omni").to_string_lossy().to_string();
    let g = Omnigraph::init(&uri, super::SOCIAL_SCHEMA)
        .await
        .expect("init");
    let data = std::fs::read_to_string(Path::new(dir).join("social.jsonl")).expect("social.jsonl");
    g.load("main", &data, LoadMode::Overwrite)
        .await
        .expect("load");
    drop(data);
    println!(
        "| history (one-row updates) | state | MB | files | 1-row mutation ms | cold q1 ms | snapshot ms | cleanup ms |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut done = 0;
    for &mark in marks {
        while done < mark {
            let p = serde_json::json!({ "c": format!("h{done}"), "h": who });
            g.mutate("main", UPDATE, "set", &p).await.expect("mutation");
            done += 1;
        }
        let copy = scratch.join(format!("clean-{mark}.omni"));
        let status = Command::new("cp")
            .args(["-a", &uri, &copy.to_string_lossy()])
            .status()
            .expect("cp");
        // `-a` keeps the files' times: the storage library's cleanup lists only
        // data files older than the oldest version it keeps.
        assert!(status.success(), "cp -a failed");
        let copy = copy.to_string_lossy().to_string();
        let before = measure(&uri, &hub, &who, &format!("b{mark}-")).await;
        done += 21;
        let cleanup_ms = run_ms(&["cleanup", &copy, "--older-than", "0s"]);
        let after = measure(&copy, &hub, &who, &format!("a{mark}-")).await;
        for (state, f, c) in [
            ("before", &before, String::new()),
            ("after", &after, format!("{cleanup_ms:.0}")),
        ] {
            println!(
                "| {mark} | {state} | {:.1} | {} | {:.2} | {:.0} | {:.0} | {c} |",
                f.bytes as f64 / 1e6,
                f.files,
                f.mutation_ms,
                f.cold_q1_ms,
                f.snapshot_ms
            );
        }
        let _ = std::fs::remove_dir_all(&copy);
    }
    g.close().await;
    let _ = std::fs::remove_dir_all(&scratch);
}
