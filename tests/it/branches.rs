//! Branches: lazy forks, isolation, list and delete, loads that create their
//! branch.

use omnigraph::{LoadMode, OmniError, Target};

use crate::common::*;

#[tokio::test]
async fn a_branch_shares_tables_until_it_writes_them() {
    let t = loaded_graph().await;
    t.g.branch_create("feature/x", "main").await.unwrap();
    let snap =
        t.g.snapshot(&Target::Branch("feature/x".into()))
            .await
            .unwrap();
    assert!(
        snap.types.iter().all(|ty| ty.lance_branch.is_none()),
        "new branch should share main's tables"
    );

    t.g.load(
        "feature/x",
        "{\"type\":\"Person\",\"data\":{\"name\":\"Dan\"}}",
        LoadMode::Append,
    )
    .await
    .unwrap();
    let snap =
        t.g.snapshot(&Target::Branch("feature/x".into()))
            .await
            .unwrap();
    let person = snap.types.iter().find(|ty| ty.name == "Person").unwrap();
    let company = snap.types.iter().find(|ty| ty.name == "Company").unwrap();
    assert!(
        person
            .lance_branch
            .as_deref()
            .unwrap()
            .starts_with("feature/x")
    );
    assert_eq!(person.rows, 4);
    assert!(
        company.lance_branch.is_none(),
        "an unwritten table stays shared"
    );

    // main is untouched.
    assert_eq!(count(&t.g, "main", "Person").await, 3);
    // And main moving on does not change the branch.
    t.g.load(
        "main",
        "{\"type\":\"Person\",\"data\":{\"name\":\"Eve\"}}",
        LoadMode::Append,
    )
    .await
    .unwrap();
    assert_eq!(count(&t.g, "feature/x", "Person").await, 4);
    assert_eq!(count(&t.g, "main", "Person").await, 4);
    let mut dump = Vec::new();
    t.g.export(&Target::Branch("feature/x".into()), &mut dump)
        .await
        .unwrap();
    let dump = String::from_utf8(dump).unwrap();
    assert!(dump.contains("\"Dan\"") && !dump.contains("\"Eve\""));
}

#[tokio::test]
async fn branch_of_a_branch_and_second_writes() {
    let t = loaded_graph().await;
    t.g.branch_create("a", "main").await.unwrap();
    t.g.load(
        "a",
        "{\"type\":\"Person\",\"data\":{\"name\":\"A1\"}}",
        LoadMode::Append,
    )
    .await
    .unwrap();
    t.g.load(
        "a",
        "{\"type\":\"Person\",\"data\":{\"name\":\"A2\"}}",
        LoadMode::Append,
    )
    .await
    .unwrap();
    t.g.branch_create("a2", "a").await.unwrap();
    t.g.load(
        "a2",
        "{\"type\":\"Person\",\"data\":{\"name\":\"B1\"}}",
        LoadMode::Merge,
    )
    .await
    .unwrap();
    assert_eq!(count(&t.g, "a2", "Person").await, 6);
    assert_eq!(count(&t.g, "a", "Person").await, 5);
    assert_eq!(count(&t.g, "main", "Person").await, 3);
    let list: Vec<String> =
        t.g.branch_list()
            .await
            .unwrap()
            .into_iter()
            .map(|b| b.name)
            .collect();
    assert_eq!(list, vec!["a", "a2", "main"]);
    let a2 =
        t.g.branch_list()
            .await
            .unwrap()
            .into_iter()
            .find(|b| b.name == "a2")
            .unwrap();
    assert_eq!(a2.parent.as_deref(), Some("a"));
    // History of a2 runs through a's commits to main's.
    let commits = t.g.commits("a2", None).await.unwrap();
    assert_eq!(commits.len(), 5);
}

#[tokio::test]
async fn delete_removes_the_branch_and_a_new_one_can_take_its_name() {
    let t = loaded_graph().await;
    t.g.branch_create("tmp", "main").await.unwrap();
    t.g.load(
        "tmp",
        "{\"type\":\"Person\",\"data\":{\"name\":\"Dan\"}}",
        LoadMode::Append,
    )
    .await
    .unwrap();
    t.g.branch_delete("tmp").await.unwrap();
    match t.g.snapshot(&Target::Branch("tmp".into())).await {
        Err(OmniError::NotFound(what)) => assert!(what.contains("tmp"), "{what}"),
        other => panic!("expected NotFound, got {other:?}"),
    }
    t.g.branch_create("tmp", "main").await.unwrap();
    assert_eq!(count(&t.g, "tmp", "Person").await, 3);
    t.g.load(
        "tmp",
        "{\"type\":\"Person\",\"data\":{\"name\":\"Dan\"}}",
        LoadMode::Append,
    )
    .await
    .unwrap();
    assert_eq!(count(&t.g, "tmp", "Person").await, 4);
}

#[tokio::test]
async fn load_with_from_creates_the_branch_first() {
    let t = loaded_graph().await;
    let r =
        t.g.load_from(
            "feature/y",
            Some("main"),
            std::io::Cursor::new(b"{\"type\":\"Person\",\"data\":{\"name\":\"Yan\"}}".to_vec()),
            LoadMode::Merge,
            |_| {},
        )
        .await
        .unwrap();
    assert!(r.branch_created);
    assert_eq!(count(&t.g, "feature/y", "Person").await, 4);
    let r =
        t.g.load_from(
            "feature/y",
            Some("main"),
            std::io::Cursor::new(b"".to_vec()),
            LoadMode::Merge,
            |_| {},
        )
        .await
        .unwrap();
    assert!(!r.branch_created);
}

/// A write's commit record goes out beside its sidecar, naming the graph
/// version after the newest its process knows; when another process
/// publishes that version first, the write lands one later and its record
/// must say so, or no version carries the commit it names and the branch's
/// history breaks at it.
#[tokio::test]
async fn a_commit_that_lands_later_than_its_record_guessed_keeps_a_true_record() {
    let t = loaded_graph().await;
    t.g.branch_create("side", "main").await.unwrap();
    let other = omnigraph::Omnigraph::open(&t.uri()).await.unwrap();
    let insert = "query m($n: String) { insert Person { name: $n } }";
    // The first write stalls past its sidecar (and its record) while the
    // other process publishes on another branch.
    t.g.substrate()
        .stall_before_publish(std::time::Duration::from_secs(1));
    let first = tokio::spawn({
        let g = t.g.clone();
        async move {
            g.mutate("main", insert, "m", &serde_json::json!({ "n": "late" }))
                .await
        }
    });
    while stored(&t.uri(), "_graph/recovery").await.is_empty() {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let guessed =
        t.g.snapshot(&Target::main())
            .await
            .unwrap()
            .manifest_version
            + 1;
    other
        .mutate("side", insert, "m", &serde_json::json!({ "n": "early" }))
        .await
        .unwrap();
    let late = first.await.unwrap().unwrap();
    let rec = t.g.commit(&late.commit).await.unwrap();
    assert_eq!(rec.manifest_version, guessed + 1);
    let history = t.g.commits("main", None).await.unwrap();
    assert_eq!(history[0].id, late.commit);
    other.close().await;
}
