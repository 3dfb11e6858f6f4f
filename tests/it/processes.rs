//! Several processes on one graph: concurrent writers in separate `omnigraph`
//! processes all commit; a table version no intent owns (the state a killed
//! writer with a lost sidecar leaves) does not stop later writes; a reader
//! that opens while another process is inside a commit neither blocks nor
//! changes anything, and a read-write open leaves a live process's intent to
//! it.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use omnigraph::storage::substrate::CrashPoint;
use omnigraph::{LoadMode, Omnigraph, Target};

use crate::common::*;

const TWO_TABLES: &str = "{\"type\":\"Person\",\"data\":{\"name\":\"Dan\"}}\n{\"edge\":\"Knows\",\"from\":\"Dan\",\"to\":\"Alice\"}";

/// Every file under `dir` with its bytes.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().to_string_lossy().to_string();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

fn sidecars(graph: &Path) -> Vec<String> {
    std::fs::read_dir(graph.join("_graph/recovery"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().to_string())
                .filter(|n| n.ends_with(".json"))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn a_table_version_no_intent_owns_is_repaired_by_the_next_writer() {
    let t = loaded_graph().await;
    let uri = t.uri();
    let before = state(&t.g).await;
    // A writer dies after its first table commit landed...
    t.g.substrate().crash_at(CrashPoint::AfterTableCommit(1));
    t.g.load("main", TWO_TABLES, LoadMode::Append)
        .await
        .expect_err("the interrupted write must not report success");
    let TestGraph { dir, g } = t;
    drop(g);
    // ...and its sidecar is lost: a table is ahead of the manifest and no
    // intent owns it.
    let graph = dir.path().join("g.omni");
    for s in sidecars(&graph) {
        std::fs::remove_file(graph.join("_graph/recovery").join(s)).unwrap();
    }
    let g = Omnigraph::open(&uri).await.unwrap();
    assert_eq!(
        g.recovery_report().rolled_back.len(),
        0,
        "nothing to recover by sidecar"
    );
    assert_eq!(state(&g).await, before, "the orphan is not visible");
    // The next writer meets the orphan under its gates, has it repaired, and
    // commits; nothing the dead writer did shows.
    g.load(
        "main",
        "{\"type\":\"Person\",\"data\":{\"name\":\"Zed\"}}\n{\"edge\":\"Knows\",\"from\":\"Zed\",\"to\":\"Bob\"}",
        LoadMode::Append,
    )
    .await
    .unwrap();
    assert_eq!(count(&g, "main", "Person").await, 4);
    assert_eq!(count(&g, "main", "Knows").await, 3);
    let mut dump = Vec::new();
    g.export(&Target::main(), &mut dump).await.unwrap();
    let dump = String::from_utf8(dump).unwrap();
    assert!(!dump.contains("\"Dan\""), "{dump}");
    // And again, from a fresh process's point of view.
    drop(g);
    let g = Omnigraph::open(&uri).await.unwrap();
    g.load(
        "main",
        "{\"type\":\"Person\",\"data\":{\"name\":\"Yan\"}}",
        LoadMode::Append,
    )
    .await
    .unwrap();
    assert_eq!(count(&g, "main", "Person").await, 5);
}

#[tokio::test]
async fn opens_during_another_processes_commit_leave_its_intent_alone() {
    let t = loaded_graph().await;
    let uri = t.uri();
    let graph = t.dir.path().join("g.omni");
    // The writer stops inside its commit and stays alive (its handle lives).
    t.g.substrate().crash_at(CrashPoint::AfterTableCommit(1));
    t.g.load("main", TWO_TABLES, LoadMode::Append)
        .await
        .expect_err("the write is stuck inside its commit");
    assert_eq!(sidecars(&graph).len(), 1);
    omnigraph::storage::background::settle().await;
    let before = files(&graph.join("_graph"));

    // A reader neither blocks nor changes anything.
    let r = Omnigraph::open_read_only(&uri).await.unwrap();
    assert_eq!(count(&r, "main", "Person").await, 3);
    assert!(matches!(
        r.load(
            "main",
            "{\"type\":\"Person\",\"data\":{\"name\":\"X\"}}",
            LoadMode::Append
        )
        .await,
        Err(omnigraph::OmniError::ReadOnly(_))
    ));
    drop(r);
    assert_eq!(
        files(&graph.join("_graph")),
        before,
        "a read-only open wrote"
    );

    // A read-write open resolves only dead writers' intents. (Were it to
    // try the live one, the live writer's gate locks would hold it up: a
    // short wait limit turns that into a quick failure here.)
    let opts = omnigraph::OpenOptions {
        gate_wait: std::time::Duration::from_millis(100),
        ..Default::default()
    };
    let rw = Omnigraph::open_with(&uri, opts).await.unwrap();
    let report = rw.recovery_report().clone();
    assert!(
        report.rolled_back.is_empty() && report.rolled_forward.is_empty(),
        "a live writer's intent was resolved: {report:?}"
    );
    assert_eq!(sidecars(&graph).len(), 1);
    drop(rw);

    // Once its process is gone, the next open resolves it exactly once.
    drop(t.g);
    let g = Omnigraph::open(&uri).await.unwrap();
    assert_eq!(g.recovery_report().rolled_back.len(), 1);
    assert!(sidecars(&graph).is_empty());
    assert_eq!(count(&g, "main", "Person").await, 3);
}

/// Processes and loads each (small, to keep the suite quick; the
/// benchmark runs the larger figures).
const PROCS: usize = 4;
const LOADS: usize = 6;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writer_processes_all_commit_and_lose_nothing() {
    writer_processes_all_commit_in(Place::local()).await;
}

pub async fn writer_processes_all_commit_in(place: Place) {
    let uri = place.uri("p.omni");
    let dir = place.scratch();
    Omnigraph::init(
        &uri,
        "node Item { name: String @key }\nnode Tag { name: String @key }\nedge HasTag: Item -> Tag",
    )
    .await
    .unwrap()
    .close()
    .await;
    let g = Omnigraph::open(&uri).await.unwrap();
    g.load(
        "main",
        "{\"type\":\"Tag\",\"data\":{\"name\":\"t\"}}",
        LoadMode::Append,
    )
    .await
    .unwrap();
    g.close().await;
    let workers: Vec<_> = (0..PROCS)
        .map(|p| {
            let uri = uri.clone();
            let dir = dir.to_path_buf();
            std::thread::spawn(move || {
                let mut failures = Vec::new();
                for n in 0..LOADS {
                    let file = dir.join(format!("w{p}-{n}.jsonl"));
                    std::fs::write(
                        &file,
                        format!("{{\"type\":\"Item\",\"data\":{{\"name\":\"i{p}-{n}\"}}}}\n{{\"edge\":\"HasTag\",\"from\":\"i{p}-{n}\",\"to\":\"t\"}}\n"),
                    )
                    .unwrap();
                    let out = Command::new(env!("CARGO_BIN_EXE_omnigraph"))
                        .args(["load", "--data", file.to_str().unwrap(), "--mode", "append", &uri])
                        .output()
                        .unwrap();
                    if !out.status.success() {
                        failures.push(format!(
                            "i{p}-{n}: {:?} {}",
                            out.status.code(),
                            String::from_utf8_lossy(&out.stderr)
                        ));
                    }
                }
                failures
            })
        })
        .collect();
    let failures: Vec<String> = workers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    assert!(failures.is_empty(), "writes failed: {failures:#?}");
    let g = Omnigraph::open_read_only(&uri).await.unwrap();
    assert_eq!(count(&g, "main", "Item").await, PROCS * LOADS);
    assert_eq!(count(&g, "main", "HasTag").await, PROCS * LOADS);
    let commits = g.commits("main", None).await.unwrap();
    // init, the tag, and one commit per load (compaction may add some).
    assert!(
        commits.len() > PROCS * LOADS + 1,
        "{} commits",
        commits.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_inserting_one_key_get_one_commit_and_one_key_conflict() {
    one_key_conflict_across_processes_in(Place::local()).await;
}

pub async fn one_key_conflict_across_processes_in(place: Place) {
    let uri = place.uri("g.omni");
    let g = Omnigraph::init(&uri, SCHEMA).await.unwrap();
    g.load("main", PEOPLE, LoadMode::Overwrite).await.unwrap();
    g.close().await;
    // `load --mode append` is a strict insert (a mutation's insert of a
    // keyed node is an upsert).
    let data = place.scratch().join("eve.jsonl");
    std::fs::write(
        &data,
        "{\"type\":\"Person\",\"data\":{\"name\":\"Eve\",\"age\":30}}\n",
    )
    .unwrap();
    // Both processes start together; whichever loses the race (or comes
    // second) re-reads under the branch gate and finds the key.
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
    let runs: Vec<_> = (0..2)
        .map(|_| {
            let (uri, barrier, data) = (uri.clone(), barrier.clone(), data.clone());
            std::thread::spawn(move || {
                barrier.wait();
                Command::new(env!("CARGO_BIN_EXE_omnigraph"))
                    .args([
                        "load",
                        "--data",
                        data.to_str().unwrap(),
                        "--mode",
                        "append",
                        &uri,
                    ])
                    .output()
                    .unwrap()
            })
        })
        .collect();
    let outs: Vec<_> = runs.into_iter().map(|r| r.join().unwrap()).collect();
    let ok = outs.iter().filter(|o| o.status.success()).count();
    assert_eq!(ok, 1, "exactly one insert commits: {outs:#?}");
    let loser = outs.iter().find(|o| !o.status.success()).unwrap();
    let err = String::from_utf8_lossy(&loser.stderr);
    assert!(err.contains("error[KeyConflict]"), "{err}");
    assert!(err.contains("Eve"), "the error names the key: {err}");
    let g = Omnigraph::open_read_only(&uri).await.unwrap();
    assert_eq!(count(&g, "main", "Person").await, 4);
}

/// Writers in two processes on four branches for two seconds, then every
/// branch merged into main (the fleet bench, small): no write fails (a
/// publish that loses its compare-and-swap to another process's, on
/// another branch, tries again), no merge fails, and every acknowledged
/// write is on main.
#[test]
fn writers_in_two_processes_on_four_branches_all_commit_and_merge() {
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().join("g.omni").to_string_lossy().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_omnigraph-bench"))
        .args([
            "fleet",
            &uri,
            "--branches",
            "4",
            "--writers-per-branch",
            "1",
        ])
        .args(["--processes", "2", "--seconds", "2"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{text}\n{err}");
    // | branches | writers/branch | processes | commits | commits/s | p50 |
    // p99 | failed | merges/s | merge failures | missing | floor |
    let row: Vec<&str> = text
        .lines()
        .last()
        .unwrap()
        .split('|')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    let n = |i: usize| row[i].parse::<u64>().unwrap();
    assert!(n(3) > 0, "nothing committed: {text}");
    assert_eq!((n(7), n(9), n(10)), (0, 0, 0), "{text}\n{err}");
}
