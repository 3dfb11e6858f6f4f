//! Persisted graph indexes end to end: `optimize` writes each edge type's
//! adjacency beside the graph, a fresh process traverses from it without
//! building one, a write since is carried by its delta, and a damaged or
//! foreign file is refused (the adjacency is built instead), never followed.

use omnigraph::{LoadMode, Omnigraph, Target};
use serde_json::{Value, json};

use crate::common::Place;

const SCHEMA: &str = "node P { name: String @key }\nedge K: P -> P";

/// A chain p0 -> p1 -> ... -> p{n-1}, and a shortcut p0 -> p{n/2}.
fn chain(n: usize) -> String {
    let mut s = String::new();
    for i in 0..n {
        s.push_str(&format!(
            "{{\"type\":\"P\",\"data\":{{\"name\":\"p{i}\"}}}}\n"
        ));
    }
    for i in 1..n {
        s.push_str(&format!(
            "{{\"edge\":\"K\",\"from\":\"p{}\",\"to\":\"p{i}\"}}\n",
            i - 1
        ));
    }
    s.push_str(&format!(
        "{{\"edge\":\"K\",\"from\":\"p0\",\"to\":\"p{}\"}}\n",
        n / 2
    ));
    s
}

const REACH: &str = "query q() { match { $a: P { name: \"p0\" }\n $a k{1,3} $x } return { $x.name } order { $x.name } }";

async fn reach(g: &Omnigraph) -> Vec<String> {
    let r = g
        .query(&Target::main(), REACH, "q", &Value::Null)
        .await
        .unwrap();
    omnigraph::exec::output::rows(&r)
        .unwrap()
        .into_iter()
        .map(|row| row["x.name"].as_str().unwrap().to_string())
        .collect()
}

/// A fresh process's answer, and how it got its adjacency.
async fn cold(uri: &str) -> (Vec<String>, Value) {
    let g = Omnigraph::open(uri).await.unwrap();
    let answer = reach(&g).await;
    (answer, g.cache_stats())
}

fn counts(stats: &Value) -> [u64; 4] {
    [
        "graph_index_builds",
        "graph_index_opens",
        "graph_index_persisted",
        "graph_index_overlays",
    ]
    .map(|k| stats[k].as_u64().unwrap())
}

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

async fn graph_index_file(g: &Omnigraph) -> String {
    let r = g.optimize("main").await.unwrap();
    let graphs: Vec<&Value> = r.indexes.iter().filter(|i| i["kind"] == "graph").collect();
    assert_eq!(graphs.len(), 1, "{r:?}");
    assert_eq!(graphs[0]["type"], "K");
    assert_eq!(graphs[0]["rows"], json!(10));
    graphs[0]["file"].as_str().unwrap().to_string()
}

async fn persisted_index_in(place: Place) {
    let uri = place.uri("g.omni");
    let g = Omnigraph::init(&uri, SCHEMA).await.unwrap();
    g.load("main", &chain(10), LoadMode::Overwrite)
        .await
        .unwrap();
    let want = names(&["p1", "p2", "p3", "p5", "p6", "p7"]);
    // Before an optimize a fresh process builds the adjacency.
    let (answer, stats) = cold(&uri).await;
    assert_eq!(answer, want);
    assert_eq!(counts(&stats), [1, 0, 0, 0]);

    let file = graph_index_file(&g).await;
    let (answer, stats) = cold(&uri).await;
    assert_eq!(answer, want);
    assert_eq!(counts(&stats), [0, 1, 1, 0], "the file is used as it is");
    let again = g.optimize("main").await.unwrap();
    assert_eq!(again.commit, None, "the graph index is current: {again:?}");

    // A write since: the file plus the edge appended, no build.
    g.mutate(
        "main",
        "query m() { insert K { from: \"p0\", to: \"p9\" } }",
        "m",
        &Value::Null,
    )
    .await
    .unwrap();
    let want = names(&["p1", "p2", "p3", "p5", "p6", "p7", "p9"]);
    let (answer, stats) = cold(&uri).await;
    assert_eq!(answer, want);
    assert_eq!(counts(&stats), [0, 1, 0, 1], "carried by the delta");

    // The file of another graph with the same schema (other rows) is
    // read but shares no row with this one: built instead.
    let other_uri = place.uri("other.omni");
    let other = Omnigraph::init(&other_uri, SCHEMA).await.unwrap();
    other
        .load("main", &chain(10), LoadMode::Overwrite)
        .await
        .unwrap();
    let other_file = graph_index_file(&other).await;
    let store = |u: &str| {
        let u = u.to_string();
        async move {
            omnigraph::storage::objstore::Store::open(
                &omnigraph::storage::requests::StorageSession::default(),
                &u,
            )
            .await
            .unwrap()
        }
    };
    let (mine, theirs) = (store(&uri).await, store(&other_uri).await);
    let original = mine.read(&file).await.unwrap().unwrap();
    let foreign = theirs.read(&other_file).await.unwrap().unwrap();
    mine.put(&file, &foreign).await.unwrap();
    let (answer, stats) = cold(&uri).await;
    assert_eq!(answer, want);
    assert_eq!(
        counts(&stats),
        [1, 1, 0, 0],
        "a foreign file is not followed"
    );

    // One flipped bit in the ids the file keeps (first in its body: 11
    // offsets, then "p0".."p9"), turning "p9" into "p8": the file is
    // followed, but the new edge's end is looked up in the table, not in
    // the damaged ids (which would lose it).
    let mut damaged = original.to_vec();
    let header = u64::from_le_bytes(damaged[..8].try_into().unwrap()) as usize;
    let body = (8 + header).div_ceil(8) * 8;
    let nine = body + 11 * 4 + 19;
    assert_eq!(damaged[nine], b'9');
    damaged[nine] ^= 0x01;
    mine.put(&file, &damaged).await.unwrap();
    let (answer, stats) = cold(&uri).await;
    assert_eq!(answer, want);
    assert_eq!(counts(&stats), [0, 1, 0, 1], "damaged ids are not followed");

    // One flipped bit in a target (the file's last arrays are the 10 in
    // targets, then the 10 in edge rows): refused on open, built instead.
    let mut damaged = original.to_vec();
    let at = damaged.len() - 8 * 10 + 1;
    damaged[at] ^= 0x10;
    mine.put(&file, &damaged).await.unwrap();
    let (answer, stats) = cold(&uri).await;
    assert_eq!(answer, want);
    assert_eq!(counts(&stats), [1, 0, 0, 0], "a damaged file is refused");

    // One flipped bit in an edge row: a traversal (which reads none) uses
    // the file; an edge binding finds the damage and builds instead.
    let mut damaged = original.to_vec();
    let at = damaged.len() - 3;
    damaged[at] ^= 0x10;
    mine.put(&file, &damaged).await.unwrap();
    let (answer, stats) = cold(&uri).await;
    assert_eq!(answer, want);
    assert_eq!(counts(&stats), [0, 1, 0, 1]);
    let g2 = Omnigraph::open(&uri).await.unwrap();
    let bound = "query q() { match { $a: P { name: \"p0\" }\n $a $e:k $x } return { $x.name } order { $x.name } }";
    let r = g2
        .query(&Target::main(), bound, "q", &Value::Null)
        .await
        .unwrap();
    let got: Vec<String> = omnigraph::exec::output::rows(&r)
        .unwrap()
        .into_iter()
        .map(|row| row["x.name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(got, names(&["p1", "p5", "p9"]));
    assert_eq!(
        counts(&g2.cache_stats())[0],
        1,
        "damaged edge rows are not followed"
    );
    // An optimize writes a damaged file again.
    let repaired = g.optimize("main").await.unwrap();
    let file = repaired
        .indexes
        .iter()
        .find(|i| i["kind"] == "graph")
        .unwrap_or_else(|| panic!("{repaired:?}"))["file"]
        .as_str()
        .unwrap()
        .to_string();
    let (answer, stats) = cold(&uri).await;
    assert_eq!(answer, want);
    assert_eq!(counts(&stats), [0, 1, 1, 0], "the new file, as it is");

    // Gone: built instead, and the next optimize writes it again.
    mine.delete(&file).await.unwrap();
    let (answer, stats) = cold(&uri).await;
    assert_eq!(answer, want);
    assert_eq!(counts(&stats), [1, 0, 0, 0]);
    let rebuilt = g.optimize("main").await.unwrap();
    assert!(
        rebuilt.indexes.iter().any(|i| i["kind"] == "graph"),
        "{rebuilt:?}"
    );
    let (answer, stats) = cold(&uri).await;
    assert_eq!(answer, want);
    assert_eq!(counts(&stats), [0, 1, 1, 0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persisted_graph_index_is_followed_only_for_the_rows_it_was_built_from() {
    persisted_index_in(Place::local()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persisted_graph_index_on_s3_is_read_into_memory_and_checked_alike() {
    persisted_index_in(Place::s3()).await;
}

/// The step of `steps` whose operator is `op`.
fn step<'a>(
    steps: &'a [omnigraph::exec::explain::PlanStep],
    op: &str,
) -> &'a omnigraph::exec::explain::PlanStep {
    steps
        .iter()
        .find(|s| s.op == op)
        .unwrap_or_else(|| panic!("no {op} in {steps:?}"))
}

const ID_ORDER: &str = "the persisted id order (the id BTREE for an id it lacks): only the rows needed, from storage (first read of this table version in this process)";

/// `--explain` names where each step's index and adjacency would come
/// from, without running anything; `--profile` runs and adds each step's
/// rows and time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_names_each_steps_source_and_profile_counts_its_rows() {
    let place = Place::local();
    let uri = place.uri("g.omni");
    let g = Omnigraph::init(&uri, SCHEMA).await.unwrap();
    g.load("main", &chain(10), LoadMode::Overwrite)
        .await
        .unwrap();
    let explain = |g: Omnigraph| async move {
        let steps = g
            .explain(&Target::main(), REACH, "q", &Value::Null)
            .await
            .unwrap();
        assert_eq!(
            g.cache_stats()["graph_index_builds"],
            json!(0),
            "explain ran nothing"
        );
        steps
    };
    let steps = explain(Omnigraph::open(&uri).await.unwrap()).await;
    let scan = step(&steps, "NodeScan");
    assert_eq!(scan.detail, "$a: P, key lookup $a.name = \"p0\"");
    assert_eq!(
        scan.uses,
        [
            "a filtered scan of id (no BTREE: run optimize): only the rows needed, from storage (first read of this table version in this process)"
        ]
    );
    assert_eq!(step(&steps, "Expand").detail, "$a k{1,3} $x");
    assert_eq!(
        step(&steps, "Expand").uses,
        ["graph index of K: rebuilt from a full edge scan"]
    );
    assert_eq!(step(&steps, "Return").detail, "x.name, order x.name");
    assert!(steps.iter().all(|s| s.rows.is_none() && s.ms.is_none()));

    g.optimize("main").await.unwrap();
    let steps = explain(Omnigraph::open(&uri).await.unwrap()).await;
    assert_eq!(step(&steps, "NodeScan").uses, [ID_ORDER]);
    assert_eq!(step(&steps, "Expand").uses, ["graph index of K: persisted"]);
    g.mutate(
        "main",
        "query m() { insert K { from: \"p0\", to: \"p9\" } }",
        "m",
        &Value::Null,
    )
    .await
    .unwrap();
    let steps = explain(Omnigraph::open(&uri).await.unwrap()).await;
    assert_eq!(
        step(&steps, "Expand").uses,
        ["graph index of K: persisted + delta (1 new edges beside it)"]
    );

    // A profiled run: each step's rows; the plan as it stood before it.
    let fresh = Omnigraph::open(&uri).await.unwrap();
    let (r, steps) = fresh
        .query_profiled(&Target::main(), REACH, "q", &Value::Null)
        .await
        .unwrap();
    assert_eq!(r.num_rows(), 7);
    let rows: Vec<(String, Option<usize>)> = steps.iter().map(|s| (s.op.clone(), s.rows)).collect();
    assert_eq!(
        rows,
        [
            ("NodeScan".to_string(), Some(1)),
            ("Expand".to_string(), Some(7)),
            ("Return".to_string(), Some(7)),
        ]
    );
    assert!(steps.iter().all(|s| s.ms.is_some()), "{steps:?}");
    assert_eq!(
        step(&steps, "Expand").uses,
        ["graph index of K: persisted + delta (1 new edges beside it)"]
    );
    // The same handle holds it now.
    let steps = fresh
        .explain(&Target::main(), REACH, "q", &Value::Null)
        .await
        .unwrap();
    assert_eq!(step(&steps, "Expand").uses, ["graph index of K: cached"]);
    // The run read a few rows, not the whole id index; the next run of the
    // same version loads it (the workload repeats).
    assert_eq!(
        step(&steps, "NodeScan").uses,
        [
            "the id index, read whole and kept (1 earlier query read this table version from storage)"
        ]
    );
    fresh
        .query(&Target::main(), REACH, "q", &Value::Null)
        .await
        .unwrap();
    let steps = fresh
        .explain(&Target::main(), REACH, "q", &Value::Null)
        .await
        .unwrap();
    assert_eq!(
        step(&steps, "NodeScan").uses,
        ["the id index, held in memory"]
    );

    // The CLI: --explain prints the plan (JSON with --format json) and no
    // rows; --profile prints the rows on stdout and the plan on stderr.
    let bin = env!("CARGO_BIN_EXE_omnigraph");
    let run = |extra: &[&str]| {
        let mut args = vec!["query", "--store", &uri, "-e", REACH];
        args.extend_from_slice(extra);
        let out = std::process::Command::new(bin)
            .args(&args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        (
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    };
    let (out, _) = run(&["--explain", "--format", "json"]);
    let plan: Vec<Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(plan[1]["op"], "Expand");
    assert_eq!(
        plan[1]["uses"][0],
        "graph index of K: persisted + delta (1 new edges beside it)"
    );
    let (out, _) = run(&["--explain"]);
    assert!(
        out.contains("Expand $a k{1,3} $x") && !out.contains("p9"),
        "{out}"
    );
    let (out, err) = run(&["--profile", "--format", "json"]);
    let result: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(result["rows"].as_array().unwrap().len(), 7);
    let profile: Vec<Value> = serde_json::from_str(err.lines().last().unwrap()).unwrap();
    assert_eq!(profile[1]["rows"], json!(7));
}
