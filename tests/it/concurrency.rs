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
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    assert_eq!(count(&t.g, "main", "Person").await, 3 + 16);
    assert_eq!(t.g.commits("main", None).await.unwrap().len(), 2 + 16);
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
