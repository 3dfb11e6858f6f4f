//! The same guarantees on object storage: graphs on `s3://` against the local
//! S3-compatible server the test binary starts (`scripts/s3-env.sh`). Load, query, mutate,
//! branches, crash recovery and writer processes run here as on local disk;
//! the rest is what only leases have: a writer taken over while merely slow
//! fails typed and publishes nothing, and the request cost of a commit.

use omnigraph::{LoadMode, OmniError, Omnigraph, Target};
use serde_json::{Value, json};

use crate::common::*;
use crate::recovery::{self, TEST_LEASE, test_options};

/// The one column of a query's rows.
fn names(r: &omnigraph::exec::run::QueryResult) -> Vec<Value> {
    omnigraph::exec::output::rows(r)
        .unwrap()
        .into_iter()
        .map(|row| row.into_iter().next().expect("one column").1)
        .collect()
}

#[tokio::test]
async fn load_query_mutate_and_time_travel_on_s3() {
    let place = Place::s3();
    let uri = place.uri("g.omni");
    let g = Omnigraph::init(&uri, SCHEMA).await.unwrap();
    g.load("main", PEOPLE, LoadMode::Overwrite).await.unwrap();
    let before = g.snapshot(&Target::main()).await.unwrap().manifest_version;
    let q = "query q($min: I32) { match { $p: Person  $p.age >= $min } return { $p.name } order { $p.name } }";
    let r = g
        .query(&Target::main(), q, "q", &json!({ "min": 35 }))
        .await
        .unwrap();
    assert_eq!(names(&r), vec![json!("Bob")]);
    g.mutate(
        "main",
        "query m() { update Person set { age: 50 } where name = \"Alice\" }",
        "m",
        &Value::Null,
    )
    .await
    .unwrap();
    let r = g
        .query(&Target::main(), q, "q", &json!({ "min": 35 }))
        .await
        .unwrap();
    assert_eq!(names(&r), vec![json!("Alice"), json!("Bob")]);
    // The version before the mutation still reads as it was.
    let old = Target::Version {
        version: before,
        branch: "main".into(),
    };
    let r = g.query(&old, q, "q", &json!({ "min": 35 })).await.unwrap();
    assert_eq!(names(&r), vec![json!("Bob")]);
    // A refused write changes nothing, on S3 too.
    let fp = fingerprint(&g).await;
    let err = g
        .load(
            "main",
            "{\"type\":\"Person\",\"data\":{\"name\":\"X\",\"age\":900}}",
            LoadMode::Append,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, OmniError::Invalid { at, .. } if at.line == Some(1)),
        "{err}"
    );
    assert_eq!(fp, fingerprint(&g).await);
    g.close().await;
    // Another process (a fresh handle) sees every acknowledged write.
    let r = Omnigraph::open_read_only(&uri).await.unwrap();
    assert_eq!(count(&r, "main", "Person").await, 3);
    assert_eq!(count(&r, "main", "Knows").await, 2);
}

#[tokio::test]
async fn branches_on_s3() {
    let place = Place::s3();
    let g = Omnigraph::init(&place.uri("g.omni"), SCHEMA).await.unwrap();
    g.load("main", PEOPLE, LoadMode::Overwrite).await.unwrap();
    g.branch_create("feature/x", "main").await.unwrap();
    g.load(
        "feature/x",
        "{\"type\":\"Person\",\"data\":{\"name\":\"Dan\"}}",
        LoadMode::Append,
    )
    .await
    .unwrap();
    assert_eq!(count(&g, "feature/x", "Person").await, 4);
    assert_eq!(count(&g, "main", "Person").await, 3);
    g.branch_delete("feature/x").await.unwrap();
    // Its name is free again, and the new branch starts from main.
    g.branch_create("feature/x", "main").await.unwrap();
    assert_eq!(count(&g, "feature/x", "Person").await, 3);
    g.close().await;
}

#[tokio::test]
async fn merges_on_s3() {
    crate::merge::merges_in(Place::s3()).await;
}

#[tokio::test]
async fn crash_after_sidecar_write_rolls_back_on_s3() {
    recovery::crash_after_sidecar_write_rolls_back_in(Place::s3()).await;
}

#[tokio::test]
async fn crash_after_first_of_two_table_commits_rolls_back_on_s3() {
    recovery::crash_after_first_of_two_table_commits_rolls_back_in(Place::s3()).await;
}

#[tokio::test]
async fn crash_after_all_table_commits_rolls_forward_on_s3() {
    recovery::crash_after_all_table_commits_rolls_forward_in(Place::s3()).await;
}

#[tokio::test]
async fn crash_after_publish_keeps_the_commit_on_s3() {
    recovery::crash_after_publish_keeps_the_commit_in(Place::s3()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writer_processes_all_commit_on_s3() {
    crate::processes::writer_processes_all_commit_in(Place::s3()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_conflict_across_processes_on_s3() {
    crate::processes::one_key_conflict_across_processes_in(Place::s3()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writer_processes_killed_among_live_ones_lose_nothing_on_s3() {
    crate::chaos::writer_processes_killed_among_live_ones_lose_nothing_in(Place::s3()).await;
}

/// Every object of a graph on any store, with its size, and its bytes
/// where a plain read returns them.
async fn every_object(uri: &str) -> Vec<(String, u64, Option<Vec<u8>>)> {
    let store = crate::common::store(uri).await;
    let mut out = Vec::new();
    for (name, size) in store.list_all("").await.unwrap() {
        let bytes = store.read(&name).await.unwrap().map(|b| b.to_vec());
        out.push((name, size, bytes));
    }
    out
}

/// A read-only open reads the graph and refuses writes without writing one
/// object, even beside a dead writer's unresolved intent (no recovery, no
/// takeover of its lease, no fence); a read-write open then resolves it.
#[tokio::test]
async fn a_read_only_open_on_s3_changes_nothing() {
    let place = Place::s3();
    let uri = place.uri("g.omni");
    let g = Omnigraph::init_with(&uri, SCHEMA, test_options())
        .await
        .unwrap();
    g.load("main", PEOPLE, LoadMode::Overwrite).await.unwrap();
    g.substrate()
        .crash_at(omnigraph::storage::substrate::CrashPoint::AfterTableCommit(
            1,
        ));
    recovery::interrupted(
        g.load(
            "main",
            "{\"type\":\"Person\",\"data\":{\"name\":\"Dan\"}}\n{\"edge\":\"Knows\",\"from\":\"Dan\",\"to\":\"Alice\"}",
            LoadMode::Append,
        )
        .await,
    );
    drop(g);
    // The crashed writer is dead for certain: its lease has lapsed.
    tokio::time::sleep(TEST_LEASE * 2).await;
    let before = every_object(&uri).await;
    assert!(
        before
            .iter()
            .any(|(n, _, b)| n.starts_with("_graph/recovery/")
                && n.ends_with(".json")
                && b.is_some()),
        "the crashed write left its sidecar"
    );

    let r = Omnigraph::open_read_only_with(&uri, test_options())
        .await
        .unwrap();
    assert_eq!(
        person_names(&r).await,
        vec![json!("Alice"), json!("Bob"), json!("Carol")]
    );
    assert_eq!(r.commits("main", None).await.unwrap().len(), 2);
    let err = r
        .load(
            "main",
            "{\"type\":\"Person\",\"data\":{\"name\":\"X\"}}",
            LoadMode::Append,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, OmniError::ReadOnly(_)), "{err}");
    let err = r.optimize("main").await.unwrap_err();
    assert!(matches!(err, OmniError::ReadOnly(_)), "{err}");
    r.close().await;
    assert!(
        before == every_object(&uri).await,
        "a read-only open changed the graph's objects"
    );

    let rw = Omnigraph::open_with(&uri, test_options()).await.unwrap();
    assert_eq!(rw.recovery_report().rolled_back.len(), 1);
}

/// A writer that stalls between its last lease check and its publish (a
/// paused process) loses its lease to another process, which resolves its
/// intent (complete, so rolled forward) behind a fence. When the slow
/// writer wakes it fails typed and publishes nothing itself: its write is
/// in the graph once, as the recoverer's commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_taken_over_while_merely_slow_fails_typed_and_publishes_nothing() {
    let place = Place::s3();
    let uri = place.uri("g.omni");
    let slow = Omnigraph::init_with(&uri, SCHEMA, test_options())
        .await
        .unwrap();
    slow.load("main", PEOPLE, LoadMode::Overwrite)
        .await
        .unwrap();
    slow.substrate().stall_before_publish(TEST_LEASE * 4);
    let stalled = {
        let slow = slow.clone();
        tokio::spawn(async move {
            slow.load(
                "main",
                "{\"type\":\"Person\",\"data\":{\"name\":\"Slow\"}}",
                LoadMode::Append,
            )
            .await
        })
    };
    // Another process opens once the slow one's lease has lapsed: it takes
    // the lease over and resolves the intent it finds, then writes.
    tokio::time::sleep(TEST_LEASE * 2).await;
    let other = Omnigraph::open_with(&uri, test_options()).await.unwrap();
    assert_eq!(other.recovery_report().rolled_forward.len(), 1);
    other
        .load(
            "main",
            "{\"type\":\"Person\",\"data\":{\"name\":\"Other\"}}",
            LoadMode::Append,
        )
        .await
        .unwrap();
    let err = stalled.await.unwrap().unwrap_err();
    match &err {
        OmniError::LeaseLost { reason } => {
            assert!(reason.contains("lease on the graph"), "{reason}")
        }
        other => panic!("expected LeaseLost, got {other:?}"),
    }
    let r = Omnigraph::open_read_only(&uri).await.unwrap();
    assert_eq!(
        person_names(&r).await,
        vec![
            json!("Alice"),
            json!("Bob"),
            json!("Carol"),
            json!("Other"),
            json!("Slow")
        ]
    );
    // Init, the first load, the recovered commit, Other's load: the slow
    // writer's own publish never landed.
    let kinds: Vec<String> = r
        .commits("main", None)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.kind)
        .collect();
    assert_eq!(kinds, vec!["load", "recovered", "load", "init"]);
    assert!(stored(&uri, "_graph/recovery").await.is_empty());
    // The taken-over handle refuses further writes rather than act unleased.
    let again = slow
        .load(
            "main",
            "{\"type\":\"Person\",\"data\":{\"name\":\"Again\"}}",
            LoadMode::Append,
        )
        .await
        .unwrap_err();
    assert!(matches!(again, OmniError::LeaseLost { .. }), "{again}");
    // Nor does it restore a table (as its own recovery would, rolling back).
    use omnigraph_actors::host::Substrate;
    let table = omnigraph_actors::TableKey::new("main", "node:Person");
    let versions = "nodes/Person.lance/_versions";
    let before = stored(&uri, versions).await;
    assert!(!before.is_empty(), "no versions listed under {versions}");
    match slow
        .substrate()
        .execute(omnigraph_actors::Io::RestoreTable { table, to: 1 })
        .await
    {
        omnigraph_actors::IoOut::TableRestore(Err(e)) => {
            assert!(e.contains("lease on the graph was taken over"), "{e}")
        }
        other => panic!("a taken-over process restored a table: {other:?}"),
    }
    assert_eq!(before, stored(&uri, versions).await);
    other.close().await;
}

/// The interleaving the storage library's rebasing commits made unsafe,
/// exactly: writer W1 passes its lease check before its table commit and
/// stalls past its lease; another process takes the lease over at open and
/// rolls W1's intent back (nothing had landed); W2 writes another type; W3
/// takes the gates, finds Person clean and stages five rows; W1 wakes, its
/// commit lands on the base (an orphan) and its publish is refused. W3's
/// commit on that same base is then refused instead of rebased over W1's
/// row, and W3 repairs the orphan and commits again. No published version
/// ever shows W1's row; W2's and W3's writes are all there, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_commit_of_a_taken_over_writer_is_never_published() {
    let place = Place::s3();
    let uri = place.uri("g.omni");
    let w1 = Omnigraph::init_with(&uri, SCHEMA, test_options())
        .await
        .unwrap();
    w1.load("main", PEOPLE, LoadMode::Overwrite).await.unwrap();
    let hold1 = w1.substrate().hold_before_commit(false);
    let stalled = {
        let w1 = w1.clone();
        tokio::spawn(async move {
            w1.load(
                "main",
                "{\"type\":\"Person\",\"data\":{\"name\":\"Late\"}}",
                LoadMode::Append,
            )
            .await
        })
    };
    hold1.reached.notified().await;
    tokio::time::sleep(TEST_LEASE * 2).await;
    let other = Omnigraph::open_with(&uri, test_options()).await.unwrap();
    assert_eq!(other.recovery_report().rolled_back.len(), 1);
    other
        .mutate(
            "main",
            "query m() { insert Company { name: \"Beta\" } }",
            "m",
            &Value::Null,
        )
        .await
        .unwrap();
    let hold3 = other.substrate().hold_before_commit(true);
    let five: String = (1..=5)
        .map(|i| format!("{{\"type\":\"Person\",\"data\":{{\"name\":\"W3-{i}\"}}}}\n"))
        .collect();
    let w3 = {
        let other = other.clone();
        tokio::spawn(async move { other.load("main", &five, LoadMode::Append).await })
    };
    // W3 holds its gates, has found Person clean and staged its rows.
    hold3.reached.notified().await;
    hold1.go.notify_one();
    let err = stalled.await.unwrap().unwrap_err();
    assert!(matches!(err, OmniError::LeaseLost { .. }), "{err}");
    hold3.go.notify_one();
    w3.await.unwrap().unwrap();
    let r = Omnigraph::open_read_only(&uri).await.unwrap();
    let mut want = vec![json!("Alice"), json!("Bob"), json!("Carol")];
    want.extend((1..=5).map(|i| json!(format!("W3-{i}"))));
    assert_eq!(person_names(&r).await, want);
    assert_eq!(count(&r, "main", "Company").await, 2);
    // No published version of the graph ever held W1's row.
    let q = "query q() { match { $p: Person  $p.name = \"Late\" } return { $p.name } }";
    let versions = r.snapshot(&Target::main()).await.unwrap().manifest_version;
    for version in 1..=versions {
        let at = Target::Version {
            version,
            branch: "main".into(),
        };
        let rows = r.query(&at, q, "q", &Value::Null).await.unwrap();
        assert!(
            names(&rows).is_empty(),
            "graph version {version} shows W1's row"
        );
    }
    assert!(stored(&uri, "_graph/recovery").await.is_empty());
    other.close().await;
}

/// A 1-row commit on S3 lists nothing: every listing is off the hot path.
#[tokio::test]
async fn a_one_row_commit_on_s3_sends_no_listing() {
    let place = Place::s3();
    let uri = place.uri("g.omni");
    let g = Omnigraph::init(&uri, SCHEMA).await.unwrap();
    g.load("main", PEOPLE, LoadMode::Overwrite).await.unwrap();
    for n in 0..3 {
        let before = g.requests();
        g.mutate(
            "main",
            "query m($n: String) { insert Person { name: $n } }",
            "m",
            &json!({ "n": format!("r{n}") }),
        )
        .await
        .unwrap();
        let cost = g.requests().since(&before);
        assert_eq!(cost.list, 0, "commit {n}: {cost}");
        assert!(
            cost.conditional_put > 0,
            "the publish is a conditional PUT: {cost}"
        );
    }
    g.close().await;
}

/// Probing for something absent (the next manifest version, on every
/// refresh) is one request, not a retried read.
#[tokio::test]
async fn a_missing_object_costs_one_request() {
    let (session, counters) = omnigraph::storage::requests::counted_session();
    let place = Place::s3();
    let store = omnigraph::storage::objstore::Store::open(&session, &place.uri("g.omni"))
        .await
        .unwrap();
    let before = counters.read();
    assert_eq!(
        store.read("_graph/versions/absent.json").await.unwrap(),
        None
    );
    let cost = counters.read().since(&before);
    assert_eq!(cost.total(), 1, "{cost}");
}

#[tokio::test]
async fn blobs_and_external_references_on_s3() {
    use crate::blobs::{BLOB_SCHEMA, b64, big_bytes, external_of};
    use omnigraph::{Blob, BlobCell};
    let place = Place::s3();
    let uri = place.uri("g.omni");
    let g = Omnigraph::init(&uri, BLOB_SCHEMA).await.unwrap();
    let big = big_bytes();
    let line = format!(
        r#"{{"type":"Asset","data":{{"name":"a1","data":"{}"}}}}"#,
        b64(&big)
    );
    g.load("main", &line, LoadMode::Overwrite).await.unwrap();
    let cell = BlobCell::new("Asset", "a1", "data");
    let Blob::Managed {
        length,
        etag,
        reader,
    } = g.read_blob_at(&Target::main(), &cell).await.unwrap()
    else {
        panic!("managed")
    };
    assert_eq!(length, big.len() as u64);
    assert_eq!(etag.len(), 34);
    let mid = reader
        .read_range(1_000_000..1_000_000 + (4 << 20) - 7)
        .await;
    assert!(mid.unwrap()[..] == big[1_000_000..1_000_000 + (4 << 20) - 7]);
    // An external object on the same server, under an allowed base; a
    // sibling prefix that starts the same way is not under it.
    let ext = place.uri("ext");
    let store = omnigraph::storage::objstore::Store::open(
        &omnigraph::storage::requests::StorageSession::default(),
        &ext,
    )
    .await
    .unwrap();
    store.put("pre/a.bin", b"s3 external").await.unwrap();
    store.put("prefix2/b.bin", b"other").await.unwrap();
    g.allow_external_blobs(&format!("{ext}/pre")).await.unwrap();
    let refer = |name: &str, rel: &str| {
        format!(r#"{{"type":"Asset","data":{{"name":"{name}","data":"{ext}/{rel}"}}}}"#)
    };
    let refused = g
        .load("main", &refer("x", "prefix2/b.bin"), LoadMode::Append)
        .await;
    assert!(
        matches!(refused, Err(OmniError::Invalid { .. })),
        "{refused:?}"
    );
    g.load("main", &refer("e1", "pre/a.bin"), LoadMode::Append)
        .await
        .unwrap();
    let Blob::Managed { reader, length, .. } = g
        .read_blob_at(&Target::main(), &BlobCell::new("Asset", "e1", "data"))
        .await
        .unwrap()
    else {
        panic!("an append copies the bytes in")
    };
    assert_eq!(
        &reader.read_range(0..length).await.unwrap()[..],
        b"s3 external"
    );
    g.load("main", &refer("e2", "pre/a.bin"), LoadMode::Overwrite)
        .await
        .unwrap();
    assert_eq!(
        external_of(&g, &Target::main(), &BlobCell::new("Asset", "e2", "data")).await,
        (format!("{ext}/pre/a.bin"), 0, 11)
    );
    g.close().await;
}

#[tokio::test]
async fn schema_applies_on_s3() {
    crate::schema::an_apply_that_crashes_after_its_table_commits_rolls_forward_in(Place::s3())
        .await;
    let place = Place::s3();
    let g = Omnigraph::init(&place.uri("g.omni"), SCHEMA).await.unwrap();
    g.load("main", PEOPLE, LoadMode::Overwrite).await.unwrap();
    g.branch_create("dev", "main").await.unwrap();
    let before = g.snapshot(&Target::main()).await.unwrap().manifest_version;
    let v2 = SCHEMA
        .replace(
            "    age: I32?\n",
            "    years: I32? @rename_from(\"age\")\n    level: I64 @default(3)\n",
        )
        .replace("@range(age, 0..150)", "@range(years, 0..150)");
    assert!(g.apply_schema(&v2).await.unwrap().changed);
    let years = "query q() { match { $p: Person } return { $p.years } order { $p.name } }";
    let level = "query q() { match { $p: Person } return { $p.level } order { $p.name } }";
    for b in ["main", "dev"] {
        let at = Target::Branch(b.into());
        let r = g.query(&at, years, "q", &Value::Null).await.unwrap();
        assert_eq!(names(&r), vec![json!(34), json!(41), Value::Null], "{b}");
        let r = g.query(&at, level, "q", &Value::Null).await.unwrap();
        assert_eq!(names(&r), vec![json!(3); 3], "{b}");
    }
    let then = Target::Version {
        version: before,
        branch: "main".into(),
    };
    let r = g
        .query(
            &then,
            "query q() { match { $p: Person } return { $p.age } order { $p.name } }",
            "q",
            &Value::Null,
        )
        .await
        .unwrap();
    assert_eq!(names(&r), vec![json!(34), json!(41), Value::Null]);
    g.close().await;
}
