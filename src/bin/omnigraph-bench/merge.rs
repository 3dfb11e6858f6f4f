//! The merge workload on the social graph: a branch changes N Person rows,
//! another changes 1,000 others (disjoint), and the first is merged into
//! the second (a three-way merge); and a branch with 1,000 changes is
//! merged into one that has not moved (a fast-forward). Changes are loads
//! in `merge` mode (upserts by key) of rows whose `age` differs.

use std::time::Instant;

use omnigraph::{LoadMode, MergeOutcome, Omnigraph};

use super::SOCIAL_SCHEMA;

/// Rows per change load (the keyed-write limit).
const CHUNK: usize = 8192;
const TARGET_CHANGES: usize = 1000;

/// The Person lines of the data file, as parsed rows.
fn people(dir: &str, want: usize) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(format!("{dir}/social.jsonl")).expect("social.jsonl");
    text.lines()
        .take(want)
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json"))
        .take_while(|v| v["type"] == "Person")
        .collect()
}

/// Change the age of these people on `branch`, a load per chunk.
async fn change(g: &Omnigraph, branch: &str, rows: &[serde_json::Value], bump: i64) {
    for chunk in rows.chunks(CHUNK) {
        let mut jsonl = String::new();
        for r in chunk {
            let mut r = r.clone();
            let age = r["data"]["age"].as_i64().unwrap_or(0);
            r["data"]["age"] = serde_json::json!((age + bump) % 120);
            jsonl.push_str(&r.to_string());
            jsonl.push('\n');
        }
        g.load(branch, &jsonl, LoadMode::Merge)
            .await
            .expect("change load");
    }
}

pub async fn run(dir: &str, uri: &str, sizes: &[usize]) {
    let largest = sizes.iter().copied().max().unwrap_or(0);
    let rows = people(dir, largest + TARGET_CHANGES);
    assert!(
        rows.len() >= largest + TARGET_CHANGES,
        "not enough people in {dir}"
    );
    let g = match Omnigraph::open(uri).await {
        Ok(g) => g,
        Err(_) => {
            let g = Omnigraph::init(uri, SOCIAL_SCHEMA).await.expect("init");
            let file = format!("{dir}/social.jsonl");
            let reader = std::io::BufReader::with_capacity(
                1 << 20,
                std::fs::File::open(&file).expect("open"),
            );
            g.load_from("main", None, reader, LoadMode::Overwrite, |_| {})
                .await
                .expect("load");
            g
        }
    };
    let run_id = omnigraph::util::ulid::new_ulid().to_lowercase();
    // The target's 1,000 changes come from the end of the list: disjoint.
    let theirs = &rows[rows.len() - TARGET_CHANGES..];
    println!("| merge | source changes | target changes | outcome | ms |");
    println!("|---|---|---|---|---|");
    for &n in sizes {
        let (s, t) = (format!("s{n}-{run_id}"), format!("t{n}-{run_id}"));
        g.branch_create(&s, "main").await.expect("branch");
        g.branch_create(&t, "main").await.expect("branch");
        change(&g, &s, &rows[..n], 1).await;
        change(&g, &t, theirs, 2).await;
        let t0 = Instant::now();
        let out = g.merge(&s, &t).await.expect("merge");
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        assert!(matches!(out, MergeOutcome::Merged { .. }), "{out:?}");
        println!(
            "| three-way | {n} | {TARGET_CHANGES} | {} | {ms:.1} |",
            out.name()
        );
    }
    let (s, t) = (format!("ff-{run_id}"), format!("fft-{run_id}"));
    g.branch_create(&s, "main").await.expect("branch");
    g.branch_create(&t, "main").await.expect("branch");
    change(&g, &s, &rows[..TARGET_CHANGES], 3).await;
    let t0 = Instant::now();
    let out = g.merge(&s, &t).await.expect("merge");
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    assert!(matches!(out, MergeOutcome::FastForward { .. }), "{out:?}");
    println!(
        "| fast-forward | {TARGET_CHANGES} | 0 | {} | {ms:.1} |",
        out.name()
    );
    g.close().await;
}
