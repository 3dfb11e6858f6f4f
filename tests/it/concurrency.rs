//! Many tasks on one handle.

use omnigraph::{LoadMode, OmniError};

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_writers_of_distinct_keys_all_succeed() {
    let t = loaded_graph().await;
    let mut tasks = Vec::new();
    for i in 0..16 {
        let g = t.g.clone();
        tasks.push(tokio::spawn(async move {
            g.load(
                "main",
                &format!("{{\"type\":\"Person\",\"data\":{{\"name\":\"w{i}\"}}}}"),
                LoadMode::Append,
            )
            .await
        }));
    }
    let mut shared = std::collections::BTreeSet::new();
    for task in tasks {
        shared.insert(task.await.unwrap().unwrap().commit);
    }
    assert_eq!(count(&t.g, "main", "Person").await, 3 + 16);
    // Loads that queued beside a commit in flight share the next one: the
    // history holds exactly the commits the writers were told of.
    let history: std::collections::BTreeSet<String> =
        t.g.commits("main", None)
            .await
            .unwrap()
            .into_iter()
            .map(|c| c.id)
            .collect();
    assert_eq!(history.len(), 2 + shared.len());
    assert!(shared.is_subset(&history));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_strict_inserts_of_one_key_have_one_winner() {
    let t = loaded_graph().await;
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let g = t.g.clone();
        tasks.push(tokio::spawn(async move {
            g.load(
                "main",
                "{\"type\":\"Person\",\"data\":{\"name\":\"Same\"}}",
                LoadMode::Append,
            )
            .await
        }));
    }
    let mut wins = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(_) => wins += 1,
            Err(OmniError::KeyConflict { type_name, id }) => {
                assert_eq!((type_name.as_str(), id.as_str()), ("Person", "Same"))
            }
            Err(other) => panic!("{other:?}"),
        }
    }
    assert_eq!(wins, 1);
    assert_eq!(count(&t.g, "main", "Person").await, 4);
    assert_eq!(t.g.commits("main", None).await.unwrap().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_on_different_branches_proceed_independently() {
    let t = loaded_graph().await;
    for b in ["b1", "b2", "b3"] {
        t.g.branch_create(b, "main").await.unwrap();
    }
    let mut tasks = Vec::new();
    for b in ["b1", "b2", "b3", "main"] {
        for i in 0..4 {
            let g = t.g.clone();
            tasks.push(tokio::spawn(async move {
                g.load(
                    b,
                    &format!("{{\"type\":\"Person\",\"data\":{{\"name\":\"{b}-{i}\"}}}}"),
                    LoadMode::Merge,
                )
                .await
            }));
        }
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    for b in ["b1", "b2", "b3", "main"] {
        assert_eq!(count(&t.g, b, "Person").await, 7, "branch {b}");
    }
}

/// A task that runs warm queries back to back (each answered from memory,
/// with nothing for the runtime to wait on) still lets a writer on the same
/// thread commit: each query spends the task's budget and yields once it is
/// spent. Without that, the reader's loop runs to its end first.
#[tokio::test(flavor = "current_thread")]
async fn a_reader_looping_on_warm_queries_lets_a_writer_on_its_thread_commit() {
    const QUERIES_MAX: usize = 200_000;
    let t = loaded_graph().await;
    let q = "query q() { match { $p: Person { name: \"Alice\" } } return { $p.age } }";
    for _ in 0..3 {
        t.g.query(&omnigraph::Target::main(), q, "q", &serde_json::Value::Null)
            .await
            .unwrap();
    }
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (g, done) = (t.g.clone(), done.clone());
        tokio::spawn(async move {
            g.load(
                "main",
                "{\"type\":\"Person\",\"data\":{\"name\":\"w\"}}",
                LoadMode::Append,
            )
            .await
            .unwrap();
            done.store(true, std::sync::atomic::Ordering::SeqCst);
        })
    };
    let mut seen_at = None;
    for k in 0..QUERIES_MAX {
        t.g.query(&omnigraph::Target::main(), q, "q", &serde_json::Value::Null)
            .await
            .unwrap();
        if done.load(std::sync::atomic::Ordering::SeqCst) {
            seen_at = Some(k);
            break;
        }
    }
    writer.await.unwrap();
    assert!(
        seen_at.is_some(),
        "the writer committed only after {QUERIES_MAX} queries"
    );
}

/// Sixteen readers that need the same graph index and id index at once (a
/// server's first queries, or a new table version) make each once: the
/// others wait for it and take it from the cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_that_need_one_graph_index_at_once_build_it_once() {
    let t = loaded_graph().await;
    let g = omnigraph::Omnigraph::open(&t.uri()).await.unwrap();
    let q = "query q($n: String) { match { $p: Person { name: $n }\n $p knows $f } return { $f.name } }";
    let mut tasks = Vec::new();
    for i in 0..16 {
        let g = g.clone();
        let name = ["Alice", "Bob", "Carol"][i % 3];
        tasks.push(tokio::spawn(async move {
            g.query(
                &omnigraph::Target::main(),
                q,
                "q",
                &serde_json::json!({ "n": name }),
            )
            .await
            .unwrap()
            .num_rows()
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let s = g.cache_stats();
    let n = |k: &str| s[k].as_u64().unwrap();
    // The first reader may probe its sources' edges instead (a one-shot
    // read); every other one reads the one index built.
    assert_eq!(n("graph_index_builds"), 1, "{s}");
    assert_eq!(
        n("graph_index_builds") + n("edge_probes") + n("graph_index_hits"),
        16,
        "{s}"
    );
    assert_eq!(n("column_loads"), 1, "{s}");
}
