//! Load modes end to end: overwrite, append (strict), merge (upsert, last
//! wins), nullable defaults, composite keys, and the load report.

use omnigraph::error::Location;
use omnigraph::{LoadMode, OmniError, Target};

use crate::common::*;

#[tokio::test]
async fn overwrite_append_merge_do_what_they_say() {
    let t = new_graph().await;
    let r = t.g.load("main", PEOPLE, LoadMode::Overwrite).await.unwrap();
    assert_eq!(r.nodes["Person"], 3);
    assert_eq!(r.edges["Knows"], 2);
    assert!(!r.branch_created);
    assert_eq!(count(&t.g, "main", "Person").await, 3);

    // Append is strict; a new person is fine, and edges can point at nodes in the graph.
    t.g.load(
        "main",
        "{\"type\":\"Person\",\"data\":{\"name\":\"Dan\"}}\n{\"edge\":\"Knows\",\"from\":\"Dan\",\"to\":\"Alice\"}",
        LoadMode::Append,
    )
    .await
    .unwrap();
    assert_eq!(count(&t.g, "main", "Person").await, 4);
    assert_eq!(count(&t.g, "main", "Knows").await, 3);

    // Merge upserts by id; the last occurrence in the file wins.
    t.g.load(
        "main",
        "{\"type\":\"Person\",\"data\":{\"name\":\"Bob\",\"age\":50}}\n{\"type\":\"Person\",\"data\":{\"name\":\"Bob\",\"age\":51}}\n{\"type\":\"Person\",\"data\":{\"name\":\"Eve\"}}",
        LoadMode::Merge,
    )
    .await
    .unwrap();
    assert_eq!(count(&t.g, "main", "Person").await, 5);
    let mut dump = Vec::new();
    t.g.export(&Target::main(), &mut dump).await.unwrap();
    let dump = String::from_utf8(dump).unwrap();
    let bob = dump
        .lines()
        .find(|l| l.contains("\"Bob\"") && l.contains("\"type\""))
        .unwrap();
    assert!(bob.contains("\"age\":51"), "{bob}");

    // Overwrite replaces only the types the file mentions.
    t.g.load("main", "{\"type\":\"Company\",\"data\":{\"name\":\"Acme\"}}\n{\"type\":\"Company\",\"data\":{\"name\":\"Initech\"}}", LoadMode::Overwrite)
        .await
        .unwrap();
    assert_eq!(count(&t.g, "main", "Company").await, 2);
    assert_eq!(count(&t.g, "main", "Person").await, 5);
}

#[tokio::test]
async fn composite_keys_and_generated_ids() {
    let t = new_graph().await;
    t.g.load(
        "main",
        "{\"type\":\"Emp\",\"data\":{\"org\":\"acme\",\"num\":3}}\n{\"type\":\"Doc\",\"data\":{\"title\":\"a\"}}\n{\"type\":\"Doc\",\"data\":{\"title\":\"a\"}}",
        LoadMode::Append,
    )
    .await
    .unwrap();
    let mut dump = Vec::new();
    t.g.export(&Target::main(), &mut dump).await.unwrap();
    let dump = String::from_utf8(dump).unwrap();
    // Generated ids are distinct ULIDs and are exported.
    let docs: Vec<serde_json::Value> = dump
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|j| j["type"] == "Doc")
        .collect();
    assert_eq!(docs.len(), 2);
    assert_ne!(docs[0]["data"]["id"], docs[1]["data"]["id"]);
    assert_eq!(docs[0]["data"]["id"].as_str().unwrap().len(), 26);
    // The composite key derives the id ["acme","3"]; merging the same key updates it.
    t.g.load("main", "{\"type\":\"Emp\",\"data\":{\"org\":\"acme\",\"num\":3,\"id\":\"[\\\"acme\\\",\\\"3\\\"]\"}}", LoadMode::Merge)
        .await
        .unwrap();
    assert_eq!(count(&t.g, "main", "Emp").await, 1);
}

#[tokio::test]
async fn each_load_is_one_commit_with_a_parent() {
    let t = new_graph().await;
    let r1 = t.g.load("main", PEOPLE, LoadMode::Overwrite).await.unwrap();
    let r2 =
        t.g.load(
            "main",
            "{\"type\":\"Person\",\"data\":{\"name\":\"Dan\"}}",
            LoadMode::Append,
        )
        .await
        .unwrap();
    assert!(r2.manifest_version > r1.manifest_version);
    let commits = t.g.commits("main", None).await.unwrap();
    assert_eq!(commits.len(), 3); // init + two loads
    assert_eq!(commits[0].id, r2.commit);
    assert_eq!(commits[0].parents, vec![r1.commit.clone()]);
    assert_eq!(commits[0].kind, "load");
    assert_eq!(commits[0].summary["nodes"]["Person"], 1);
    // Time travel by commit and by graph version.
    let old =
        t.g.snapshot(&Target::Commit(r1.commit.clone()))
            .await
            .unwrap();
    assert_eq!(
        old.types.iter().find(|x| x.name == "Person").unwrap().rows,
        3
    );
    let old =
        t.g.snapshot(&Target::Version {
            version: r1.manifest_version,
            branch: "main".into(),
        })
        .await
        .unwrap();
    assert_eq!(old.head_commit, r1.commit);
    match t.g.snapshot(&Target::Commit("NOPE".into())).await {
        Err(OmniError::NotFound(what)) => assert!(what.contains("NOPE"), "{what}"),
        other => panic!("expected NotFound, got {other:?}"),
    }
    match t
        .g
        .snapshot(&Target::Version {
            version: 999,
            branch: "main".into(),
        })
        .await
    {
        Err(OmniError::NotFound(what)) => assert!(what.contains("999"), "{what}"),
        other => panic!("expected NotFound, got {other:?}"),
    }
}

#[tokio::test]
async fn a_graph_reopens_with_its_state() {
    let t = loaded_graph().await;
    let before = fingerprint(&t.g).await;
    let uri = t.uri();
    let TestGraph { dir, g } = t;
    drop(g);
    let g = omnigraph::Omnigraph::open(&uri).await.unwrap();
    assert_eq!(before, fingerprint(&g).await);
    g.load(
        "main",
        "{\"type\":\"Person\",\"data\":{\"name\":\"Dan\"}}",
        LoadMode::Append,
    )
    .await
    .unwrap();
    drop(dir);
}

/// A new graph at `uri` with the sample people on main and one more person
/// on branch `b`.
async fn people_and_a_branch(uri: &str) -> omnigraph::Omnigraph {
    let g = omnigraph::Omnigraph::init(uri, SCHEMA).await.unwrap();
    g.load("main", PEOPLE, LoadMode::Overwrite).await.unwrap();
    g.branch_create("b", "main").await.unwrap();
    g.load(
        "b",
        "{\"type\":\"Person\",\"data\":{\"name\":\"Dan\"}}",
        LoadMode::Append,
    )
    .await
    .unwrap();
    g
}

#[tokio::test]
async fn memory_graphs_work_within_one_handle() {
    let g = people_and_a_branch("memory://t1").await;
    assert_eq!(count(&g, "b", "Person").await, 4);
    assert_eq!(count(&g, "main", "Person").await, 3);
}

#[tokio::test]
async fn an_object_store_graph_reopens_through_lances_store_layer() {
    // shared-memory:// is a process-global object store: everything goes
    // through object_store (conditional create included), not the local disk.
    let uri = format!(
        "shared-memory://omnigraph-test/{}",
        omnigraph::util::ulid::new_ulid()
    );
    let g = people_and_a_branch(&uri).await;
    let before = fingerprint(&g).await;
    drop(g);
    let g = omnigraph::Omnigraph::open(&uri).await.unwrap();
    assert_eq!(before, fingerprint(&g).await);
    assert!(matches!(
        omnigraph::Omnigraph::init(&uri, SCHEMA).await,
        Err(omnigraph::OmniError::AlreadyExists(_))
    ));
}

#[tokio::test]
async fn many_small_commits_are_compacted_without_changing_the_data() {
    let t = loaded_graph().await;
    for i in 0..40 {
        t.g.load(
            "main",
            &format!("{{\"type\":\"Person\",\"data\":{{\"name\":\"c{i}\"}}}}"),
            LoadMode::Append,
        )
        .await
        .unwrap();
        // The write that fragments a table answers once it is compacted:
        // a process that exits after its last write leaves it compact.
        let snap = t.g.snapshot(&Target::main()).await.unwrap();
        let person = snap.types.iter().find(|x| x.name == "Person").unwrap();
        assert!(
            person.fragments < omnigraph::write::compact::COMPACT_AT_FRAGMENTS,
            "after load {i}: {person:?}"
        );
    }
    let snap = t.g.snapshot(&Target::main()).await.unwrap();
    let person = snap.types.iter().find(|x| x.name == "Person").unwrap();
    assert_eq!(person.rows, 43);
    assert!(
        person.fragments < omnigraph::write::compact::COMPACT_AT_FRAGMENTS,
        "{person:?}"
    );
    let commits = t.g.commits("main", None).await.unwrap();
    assert!(commits.iter().any(|c| c.kind == "compact"));
    // The data a reader sees is what the loads wrote, in every version.
    let mut dump = Vec::new();
    t.g.export(&Target::main(), &mut dump).await.unwrap();
    let dump = String::from_utf8(dump).unwrap();
    for i in 0..40 {
        assert!(dump.contains(&format!("\"c{i}\"")));
    }
    let before_compaction = commits.iter().position(|c| c.kind == "compact").unwrap() + 1;
    let old =
        t.g.snapshot(&Target::Commit(commits[before_compaction].id.clone()))
            .await
            .unwrap();
    assert!(
        old.types
            .iter()
            .find(|x| x.name == "Person")
            .unwrap()
            .fragments
            >= omnigraph::write::compact::COMPACT_AT_FRAGMENTS
    );
}

#[tokio::test]
async fn many_endpoints_in_the_graph_are_checked_against_all_its_ids() {
    // Over 50,000 distinct endpoints that the file does not define are
    // resolved by reading every id of the node table, not by probing.
    let t = new_graph().await;
    let n = 50_010;
    let people: String = (0..n)
        .map(|i| format!("{{\"type\":\"Person\",\"data\":{{\"name\":\"p{i}\"}}}}\n"))
        .collect();
    t.g.load("main", &people, LoadMode::Overwrite)
        .await
        .unwrap();
    let mut edges: String = (0..n)
        .map(|i| {
            format!(
                "{{\"edge\":\"Knows\",\"from\":\"p{i}\",\"to\":\"p{}\"}}\n",
                (i + 1) % n
            )
        })
        .collect();
    t.g.load("main", &edges, LoadMode::Overwrite).await.unwrap();
    assert_eq!(count(&t.g, "main", "Knows").await, n);
    edges.push_str("{\"edge\":\"Knows\",\"from\":\"p1\",\"to\":\"ghost\"}\n");
    let before = fingerprint(&t.g).await;
    match t.g.load("main", &edges, LoadMode::Overwrite).await {
        Err(omnigraph::OmniError::Invalid { at, .. }) => {
            assert_eq!(at.line, Some(n + 1));
            assert_eq!(at.property.as_deref(), Some("to"));
            assert_eq!(at.value.as_deref(), Some("\"ghost\""));
        }
        other => panic!("expected the ghost endpoint to be refused, got {other:?}"),
    }
    assert_eq!(before, fingerprint(&t.g).await);
}

/// A refused load, with what it must leave behind: nothing visible changed.
async fn refused_load(t: &TestGraph, data: &str, mode: LoadMode) -> (Location, String) {
    let before = fingerprint(&t.g).await;
    let e = t.g.load("main", data, mode).await.unwrap_err();
    assert_eq!(
        before,
        fingerprint(&t.g).await,
        "a refused load changed the graph"
    );
    match e {
        OmniError::Invalid { at, message } => (*at, message),
        other => panic!("expected Invalid, got {other:?}"),
    }
}

/// Loads keep `@unique` as mutations do, on the complete staged image,
/// naming the line that breaks it.
#[tokio::test]
async fn loads_check_unique_on_the_staged_image() {
    let t = loaded_graph().await;
    // Against the graph: Alice has alice@x.org.
    let (at, message) = refused_load(
        &t,
        "{\"type\":\"Person\",\"data\":{\"name\":\"Zed\",\"email\":\"alice@x.org\"}}\n",
        LoadMode::Append,
    )
    .await;
    assert_eq!(at.line, Some(1));
    assert_eq!(at.type_name.as_deref(), Some("Person"));
    assert_eq!(at.property.as_deref(), Some("email"));
    assert!(
        message.contains("@unique") && message.contains("\"Alice\""),
        "{message}"
    );
    // Within the file.
    let (at, message) = refused_load(
        &t,
        concat!(
            "{\"type\":\"Person\",\"data\":{\"name\":\"Y\",\"email\":\"y@x.org\"}}\n",
            "{\"type\":\"Person\",\"data\":{\"name\":\"Z\",\"email\":\"y@x.org\"}}\n",
        ),
        LoadMode::Merge,
    )
    .await;
    assert_eq!((at.line, at.first), (Some(2), Some(1)));
    assert!(message.contains("@unique"), "{message}");
    // A merge that gives Alice a new address frees the old one in the same
    // load; an overwrite replaces every committed row.
    t.g.load(
        "main",
        concat!(
            "{\"type\":\"Person\",\"data\":{\"name\":\"Alice\",\"email\":\"new@x.org\"}}\n",
            "{\"type\":\"Person\",\"data\":{\"name\":\"Zed\",\"email\":\"alice@x.org\"}}\n",
        ),
        LoadMode::Merge,
    )
    .await
    .unwrap();
    // Nulls never collide.
    t.g.load(
        "main",
        "{\"type\":\"Person\",\"data\":{\"name\":\"N1\"}}\n{\"type\":\"Person\",\"data\":{\"name\":\"N2\"}}\n",
        LoadMode::Append,
    )
    .await
    .unwrap();
}

/// Loads keep `@card` on the complete staged image too.
#[tokio::test]
async fn loads_check_cardinality_on_the_staged_image() {
    let t = loaded_graph().await;
    t.g.load(
        "main",
        "{\"type\":\"Company\",\"data\":{\"name\":\"Other\"}}",
        LoadMode::Append,
    )
    .await
    .unwrap();
    // WorksAt is @card(0..1) and Alice already works at Acme.
    let (at, message) = refused_load(
        &t,
        "{\"edge\":\"WorksAt\",\"from\":\"Alice\",\"to\":\"Other\"}\n",
        LoadMode::Append,
    )
    .await;
    assert_eq!(at.line, Some(1));
    assert_eq!(at.type_name.as_deref(), Some("WorksAt"));
    assert_eq!(at.property.as_deref(), Some("from"));
    assert_eq!(at.value.as_deref(), Some("\"Alice\""));
    assert!(message.contains("@card(0..1)"), "{message}");
    // Two in one file, for a source without one yet.
    let (at, _) = refused_load(
        &t,
        concat!(
            "{\"edge\":\"WorksAt\",\"from\":\"Bob\",\"to\":\"Acme\"}\n",
            "{\"edge\":\"WorksAt\",\"from\":\"Bob\",\"to\":\"Other\"}\n",
        ),
        LoadMode::Append,
    )
    .await;
    assert_eq!(at.line, Some(2));
    assert_eq!(at.value.as_deref(), Some("\"Bob\""));
    // Overwriting the edge type replaces Alice's edge: one each is fine.
    t.g.load(
        "main",
        concat!(
            "{\"edge\":\"WorksAt\",\"from\":\"Alice\",\"to\":\"Other\"}\n",
            "{\"edge\":\"WorksAt\",\"from\":\"Bob\",\"to\":\"Acme\"}\n",
        ),
        LoadMode::Overwrite,
    )
    .await
    .unwrap();
    assert_eq!(count(&t.g, "main", "WorksAt").await, 2);
}
