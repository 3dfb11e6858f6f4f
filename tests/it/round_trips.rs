//! The round trips of writes and reads on object storage, held: each
//! operation's requests and its serial hops (the store's count of requests
//! sent one after another, under a delay that dwarfs the work between
//! them) may not grow, so a change that adds a round trip fails here. The
//! figures and what each hop is for are in docs/benchmarks.md ("Serial hops
//! on object storage").

use std::time::Duration;

use omnigraph::storage::background;
use omnigraph::storage::requests::{Latency, Requests};
use omnigraph::{LoadMode, Omnigraph, OpenOptions, Target};
use serde_json::{Value, json};

use crate::common::*;

/// Each request answers this late: long enough that requests sent
/// together overlap and requests sent one after another do not.
const DELAY: Duration = Duration::from_millis(40);

fn opts() -> OpenOptions {
    OpenOptions {
        latency: Latency {
            delay: DELAY,
            max_concurrent: 8,
        },
        // No renewal or end of a linger falls inside a measurement.
        lease: Duration::from_secs(120),
        lock_linger: Duration::from_secs(60),
        ..OpenOptions::default()
    }
}

/// What `op` cost on `g`'s store, with the background writes of what came
/// before it settled first.
async fn cost<F: std::future::Future<Output = ()>>(g: &Omnigraph, op: F) -> Requests {
    background::settle().await;
    let before = g.requests();
    op.await;
    g.requests().since(&before)
}

/// A 1,000-row load of two tables (docs/benchmarks.md): 9 hops while its
/// table commits went one after the other, 7 since they go together, 6
/// since the files a handle wrote are kept (its key check reads none).
const LOAD_HOPS: u64 = 6;
const LOAD_REQUESTS: u64 = 13;

/// At most `serial` hops and `requests` requests.
fn within(what: &str, c: Requests, serial: u64, requests: u64) {
    assert!(
        c.serial <= serial && c.total() <= requests,
        "{what}: {c}, allowed {serial} serial and {requests} requests"
    );
}

#[tokio::test]
async fn a_commit_and_a_read_on_object_storage_take_the_round_trips_they_did() {
    let place = Place::s3();
    let uri = place.uri("g.omni");
    let g = Omnigraph::init_with(&uri, SCHEMA, opts()).await.unwrap();
    g.load("main", PEOPLE, LoadMode::Overwrite).await.unwrap();
    let insert = "query m($n: String) { insert Person { name: $n } }";
    let m = |n: &str| json!({ "n": n });
    // The first write takes the gates' leases; the ones after find them kept.
    g.mutate("main", insert, "m", &m("first")).await.unwrap();
    for n in ["a", "b"] {
        let c = cost(&g, async {
            g.mutate("main", insert, "m", &m(n)).await.unwrap();
        })
        .await;
        within("a 1-row insert through an open handle", c, 5, 8);
    }
    let lookup = "query q($n: String) { match { $p: Person { name: $n } } return { $p.age } }";
    let c = cost(&g, async {
        g.query(&Target::main(), lookup, "q", &m("b"))
            .await
            .unwrap();
    })
    .await;
    within("a read of the handle's own write", c, 1, 1);
    let c = cost(&g, async {
        g.branch_create("x", "main").await.unwrap();
    })
    .await;
    within("a branch create", c, 7, 8);
    g.close().await;
    let c = {
        // A `mutate` process: a read-write open (its liveness lease, and
        // beside it the recovery scan's listing), the insert (its gate
        // leases read beside its prepare's reads), and the close that
        // gives its gate leases back.
        let h = Omnigraph::open_with(&uri, opts()).await.unwrap();
        h.mutate("main", insert, "m", &m("c")).await.unwrap();
        let counted = h.clone();
        h.close().await;
        counted.requests()
    };
    within("a mutate process", c, 19, 40);
    let c = {
        let r = Omnigraph::open_read_only_with(&uri, opts()).await.unwrap();
        r.requests()
    };
    within("a read-only open", c, 2, 6);
    let c = {
        // A CLI `query` process: it reads the state its open found.
        let r = Omnigraph::open_read_only_with(&uri, opts()).await.unwrap();
        r.query(&r.as_opened(&Target::main()), lookup, "q", &m("b"))
            .await
            .unwrap();
        r.requests()
    };
    within("a cold key lookup", c, 4, 12);
}

#[tokio::test]
async fn a_merge_of_a_one_commit_branch_takes_the_round_trips_it_did() {
    let place = Place::s3();
    let g = Omnigraph::init_with(&place.uri("g.omni"), SCHEMA, opts())
        .await
        .unwrap();
    g.load("main", PEOPLE, LoadMode::Overwrite).await.unwrap();
    let insert = "query m($n: String) { insert Person { name: $n } }";
    let m = |n: &str| json!({ "n": n });
    g.mutate("main", insert, "m", &m("first")).await.unwrap();
    g.branch_create("x", "main").await.unwrap();
    g.mutate("x", insert, "m", &m("on x")).await.unwrap();
    let c = cost(&g, async {
        g.merge("x", "main").await.unwrap();
    })
    .await;
    within("a merge of a 1-commit branch", c, 4, 6);
}

/// A write answers at its publish and deletes its sidecar after; a
/// `mutate` process, which closes its handle and exits right after the
/// answer, still leaves no sidecar on a store that answers late: the close
/// waits for answered writes to finish.
#[tokio::test]
async fn a_cli_write_on_a_slow_store_leaves_no_sidecar() {
    let place = Place::s3();
    let uri = place.uri("cli.omni");
    Omnigraph::init_with(&uri, SCHEMA, OpenOptions::default())
        .await
        .unwrap()
        .close()
        .await;
    let insert = "query m() { insert Person { name: \"late\" } }";
    cli_ok_with(
        &[("OMNIGRAPH_S3_DELAY_MS", "150")],
        &["mutate", &uri, "-e", insert],
    );
    let left: Vec<String> = sidecars(&uri).await.into_iter().map(|s| s.op).collect();
    assert!(left.is_empty(), "sidecars left: {left:?}");
    let g = Omnigraph::open_read_only(&uri).await.unwrap();
    assert_eq!(person_names(&g).await, vec![json!("late")]);
}

#[tokio::test]
async fn a_load_of_two_tables_commits_them_together() {
    let place = Place::s3();
    let uri = place.uri("g.omni");
    let g = Omnigraph::init_with(&uri, SCHEMA, opts()).await.unwrap();
    // The first load takes the gates' leases; the one after finds them kept.
    g.load("main", PEOPLE, LoadMode::Overwrite).await.unwrap();
    // 1,000 rows of two tables: their table commits go out together.
    let mut rows: Vec<String> = (0..500)
        .map(|i| format!(r#"{{"type":"Person","data":{{"name":"p{i}"}}}}"#))
        .collect();
    rows.extend((0..500).map(|i| {
        format!(
            r#"{{"edge":"Knows","from":"p{i}","to":"p{}"}}"#,
            (i + 1) % 500
        )
    }));
    let c = cost(&g, async {
        g.load("main", &rows.join("\n"), LoadMode::Append)
            .await
            .unwrap();
    })
    .await;
    within(
        "a 1,000-row load of two tables",
        c,
        LOAD_HOPS,
        LOAD_REQUESTS,
    );
    g.close().await;
}

/// A handle that reads while it writes (a server's): once it holds a
/// table's ids, the version its own 1-row write made is carried from the
/// one it holds and the written row taken from the write, so a key lookup
/// of that row reads nothing the write did not leave in memory (a handle
/// that only point-read the table reads the file its write kept, the
/// first test's "read of the handle's own write").
#[tokio::test]
async fn a_warm_read_of_the_handle_s_own_write_reads_no_rows() {
    let place = Place::s3();
    let uri = place.uri("warm-own.omni");
    let g = Omnigraph::init_with(&uri, SCHEMA, opts()).await.unwrap();
    g.load("main", PEOPLE, LoadMode::Overwrite).await.unwrap();
    let insert = "query m($n: String) { insert Person { name: $n } }";
    let lookup = "query q($n: String) { match { $p: Person { name: $n } } return { $p.age } }";
    let every = "query e() { match { $p: Person } return { $p.name, $p.age } }";
    let m = |n: &str| json!({ "n": n });
    g.mutate("main", insert, "m", &m("first")).await.unwrap();
    g.query(&Target::main(), every, "e", &Value::Null)
        .await
        .unwrap();
    g.query(&Target::main(), lookup, "q", &m("first"))
        .await
        .unwrap();
    g.mutate("main", insert, "m", &m("mine")).await.unwrap();
    let c = cost(&g, async {
        let r = g
            .query(&Target::main(), lookup, "q", &m("mine"))
            .await
            .unwrap();
        assert_eq!(r.num_rows(), 1);
    })
    .await;
    // The one request is the branch head's, which a read asks for while
    // it runs the query; reading the row too was a second, before the
    // writer handed its rows over and kept its files.
    within("a warm read of the handle's own write", c, 1, 1);
}
