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

    // One flipped bit: refused on open, built instead.
    let mut damaged = original.to_vec();
    let at = damaged.len() - 3;
    damaged[at] ^= 0x10;
    mine.put(&file, &damaged).await.unwrap();
    let (answer, stats) = cold(&uri).await;
    assert_eq!(answer, want);
    assert_eq!(counts(&stats), [1, 0, 0, 0], "a damaged file is refused");

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
