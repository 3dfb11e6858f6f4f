//! Version retention: `cleanup` frees the space of old graph versions and of
//! crashed writes while every head, branch and kept version reads as
//! before; a removed version is `VersionExpired`; the history stays
//! listable; writer processes beside it lose nothing; a cleanup killed
//! anywhere leaves a graph that reads, writes and cleans; on a local disk
//! and on S3.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use omnigraph::storage::substrate::CrashPoint;
use omnigraph::{CleanupReport, LoadMode, OmniError, Omnigraph, RetentionPolicy, Target};
use serde_json::json;

use crate::chaos::{check_graph, spawn_writer, stop_writer};
use crate::common::{Place, cli, cli_ok, state, store};
use crate::gc::index_files;

const SCHEMA: &str = "node Person { name: String @key\n age: I64? }\nedge Knows: Person -> Person";
const ADD: &str = "query add($n: String, $a: I64) { insert Person { name: $n, age: $a } }";
const ALL: &str =
    "query all() { match { $p: Person } return { $p.name, $p.age } order { $p.name } }";

fn now(keep_versions: Option<usize>) -> RetentionPolicy {
    RetentionPolicy {
        older_than: Duration::ZERO,
        keep_versions,
        dry_run: false,
    }
}

async fn add(g: &Omnigraph, branch: &str, n: u32) {
    g.mutate(branch, ADD, "add", &json!({ "n": format!("p{n}"), "a": n }))
        .await
        .unwrap();
}

/// Every object of the graph and its size.
async fn objects(uri: &str) -> BTreeMap<String, u64> {
    store(uri)
        .await
        .list_all("")
        .await
        .unwrap()
        .into_iter()
        .filter(|(f, _)| !f.starts_with("_graph/owners/") && !f.starts_with("_graph/locks/"))
        .collect()
}

async fn names(g: &Omnigraph, at: &Target) -> omnigraph::Result<Vec<serde_json::Value>> {
    let r = g.query(at, ALL, "all", &serde_json::Value::Null).await?;
    Ok(omnigraph::exec::output::rows(&r)?
        .into_iter()
        .map(|row| row["p.name"].clone())
        .collect())
}

#[tokio::test(flavor = "multi_thread")]
async fn cleanup_frees_space_and_keeps_heads_branches_and_kept_versions() {
    cleanup_in(Place::local()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn cleanup_frees_space_and_keeps_heads_branches_and_kept_versions_on_s3() {
    cleanup_in(Place::s3()).await;
}

async fn cleanup_in(place: Place) {
    let uri = place.uri("g.omni");
    let g = Omnigraph::init(&uri, SCHEMA).await.unwrap();
    for n in 0..10 {
        add(&g, "main", n).await;
    }
    // A lazy fork: `dev` shares main's table at this version until it writes.
    g.branch_create("dev", "main").await.unwrap();
    let dev_at = g.snapshot(&Target::Branch("dev".into())).await.unwrap();
    g.branch_create("side", "main").await.unwrap();
    add(&g, "side", 100).await;
    for n in 10..30 {
        add(&g, "main", n).await;
    }
    let before = state(&g).await;
    let history: Vec<String> = g
        .commits("main", None)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.id)
        .collect();
    let latest = g.snapshot(&Target::main()).await.unwrap().manifest_version;

    // The default rule (7 days) keeps all of this young history.
    // (A fork's first version, which no graph version names, may go.)
    let young = g.cleanup(RetentionPolicy::default()).await.unwrap();
    assert_eq!(
        (young.removed_versions, young.kept_versions),
        (0, latest),
        "{young:?}"
    );
    assert_eq!(state(&g).await, before);

    let files_before = objects(&uri).await;
    // A dry run says what would go and removes nothing at all.
    let dry = g
        .cleanup(RetentionPolicy {
            dry_run: true,
            ..now(Some(2))
        })
        .await
        .unwrap();
    assert_eq!(objects(&uri).await, files_before, "a dry run removed files");
    assert!(dry.removed_versions > 0 && dry.bytes_freed > 0, "{dry:?}");

    let r: CleanupReport = g.cleanup(now(Some(2))).await.unwrap();
    assert_eq!(
        (
            r.removed_versions,
            r.kept_versions,
            r.removed_files,
            r.bytes_freed
        ),
        (
            dry.removed_versions,
            dry.kept_versions,
            dry.removed_files,
            dry.bytes_freed
        ),
        "the dry run reported what the cleanup did"
    );
    assert_eq!(r.removed_versions + r.kept_versions, latest, "{r:?}");
    let main_commits = g.commits("main", None).await.unwrap();
    let second = &main_commits[1];
    // Kept: the newest version and main's commit before it; each branch's
    // head (dev's record last changed when it was made, side's at its
    // commit). Every kept version holds main.
    let made_dev = dev_at.manifest_version;
    assert_eq!(
        r.oldest_kept,
        BTreeMap::from([
            ("dev".to_string(), made_dev),
            ("main".to_string(), made_dev),
            ("side".to_string(), made_dev + 2)
        ]),
        "{r:?}"
    );
    assert_eq!(r.kept_versions, 4, "{r:?}");
    let files_after = objects(&uri).await;
    let (b0, b1): (u64, u64) = (files_before.values().sum(), files_after.values().sum());
    assert!(
        b1 < b0 && files_after.len() < files_before.len(),
        "{b0} -> {b1} bytes"
    );

    // Heads, branches, their contents and the history are as they were.
    assert_eq!(state(&g).await, before);
    let ids: Vec<String> = main_commits.iter().map(|c| c.id.clone()).collect();
    assert_eq!(ids, history);
    let expired: Vec<bool> = main_commits.iter().map(|c| c.expired).collect();
    let mut want = vec![false, false];
    want.resize(history.len(), true);
    assert_eq!(
        expired, want,
        "only the two newest commits of main stay readable"
    );

    // A kept version reads; a removed one is typed, naming the oldest kept.
    let kept = names(&g, &Target::Commit(second.id.clone())).await.unwrap();
    assert_eq!(kept.len(), 29);
    let e = names(
        &g,
        &Target::Version {
            version: 3,
            branch: "main".into(),
        },
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&e, OmniError::VersionExpired { version: 3, branch, oldest_kept: Some(v) }
            if branch == "main" && *v == made_dev),
        "{e}"
    );
    assert_eq!(e.kind(), "VersionExpired");
    let e = names(&g, &Target::Commit(history[5].clone()))
        .await
        .unwrap_err();
    assert!(matches!(e, OmniError::VersionExpired { .. }), "{e}");
    let c = g.commit(&history[5]).await.unwrap();
    assert!(c.expired, "{c:?}");
    // The lazy fork still reads what it shares with main's past.
    let dev = names(&g, &Target::Branch("dev".into())).await.unwrap();
    assert_eq!(dev.len(), 10);
    assert_eq!(
        g.snapshot(&Target::Branch("dev".into()))
            .await
            .unwrap()
            .head_commit,
        dev_at.head_commit
    );

    // An export loads back into an identical graph.
    let mut dump = Vec::new();
    g.export(&Target::main(), &mut dump).await.unwrap();
    let copy_uri = place.uri("copy.omni");
    let copy = Omnigraph::init(&copy_uri, SCHEMA).await.unwrap();
    copy.load(
        "main",
        std::str::from_utf8(&dump).unwrap(),
        LoadMode::Overwrite,
    )
    .await
    .unwrap();
    let mut again = Vec::new();
    copy.export(&Target::main(), &mut again).await.unwrap();
    assert_eq!(again, dump);

    // The graph takes writes and reopens; a second cleanup finds nothing
    // more than the new history.
    add(&g, "dev", 200).await;
    g.close().await;
    let g = Omnigraph::open(&uri).await.unwrap();
    assert_eq!(
        names(&g, &Target::Branch("dev".into()))
            .await
            .unwrap()
            .len(),
        11
    );
    let r = g.cleanup(now(Some(2))).await.unwrap();
    assert!(r.removed_versions <= 2, "{r:?}");
    let r = g.cleanup(now(Some(2))).await.unwrap();
    assert_eq!((r.removed_versions, r.removed_files), (0, 0), "{r:?}");
    g.close().await;
}

/// A crashed write's staged files are kept while its process lives (it
/// may still commit them), and while an intent of that process is
/// unresolved (recovery may roll it forward, and the versions it
/// publishes reference them); they go once neither holds.
#[tokio::test(flavor = "multi_thread")]
async fn a_crashed_writes_files_go_once_its_process_is_gone() {
    let place = Place::local();
    let uri = place.uri("g.omni");
    let g = Omnigraph::init(&uri, SCHEMA).await.unwrap();
    add(&g, "main", 1).await;
    let clean = objects(&uri).await;
    g.substrate().crash_at(CrashPoint::BeforeSidecarWrite);
    let e = g
        .load(
            "main",
            "{\"type\":\"Person\",\"data\":{\"name\":\"staged\"}}",
            LoadMode::Append,
        )
        .await
        .expect_err("the load halts");
    assert!(e.to_string().contains("halted"), "{e}");
    let staged: BTreeSet<String> = objects(&uri)
        .await
        .into_keys()
        .filter(|f| !clean.contains_key(f) && f.contains("/data/"))
        .collect();
    assert!(!staged.is_empty(), "the load staged no data file");
    // Files written within the clock margin of a process's start count as
    // that process's: the next one starts clearly later.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let other = Omnigraph::open(&uri).await.unwrap();
    other.cleanup(now(None)).await.unwrap();
    let left = objects(&uri).await;
    assert!(
        staged.iter().all(|f| left.contains_key(f)),
        "a live writer's files went"
    );
    let gone = g.substrate().locks().incarnation().to_string();
    g.close().await;
    // An intent of the gone process, as one whose late table commit
    // landed after a takeover would leave it, still unresolved.
    let sidecar = crate::common::unresolved_intent_of(&uri, &gone);
    other.cleanup(now(None)).await.unwrap();
    let left = objects(&uri).await;
    assert!(
        staged.iter().all(|f| left.contains_key(f)),
        "the files of a writer whose intent is unresolved went"
    );
    std::fs::remove_file(&sidecar).unwrap();
    let r = other.cleanup(now(None)).await.unwrap();
    let left = objects(&uri).await;
    assert!(staged.iter().all(|f| !left.contains_key(f)), "{r:?}");
    assert_eq!(names(&other, &Target::main()).await.unwrap(), [json!("p1")]);
    add(&other, "main", 2).await;
    other.close().await;
}

/// A reader with an old snapshot in hand: what it already holds in memory
/// answers with its rows; what it must read again is refused, typed.
#[tokio::test(flavor = "multi_thread")]
async fn a_reader_of_an_old_snapshot_gets_its_rows_or_a_typed_error() {
    let place = Place::local();
    let uri = place.uri("g.omni");
    let g = Omnigraph::init(&uri, SCHEMA).await.unwrap();
    for n in 0..5 {
        add(&g, "main", n).await;
    }
    let old = Target::Version {
        version: 4,
        branch: "main".into(),
    };
    let warm = Omnigraph::open_read_only(&uri).await.unwrap();
    let want = names(&warm, &old).await.unwrap();
    assert_eq!(want.len(), 3);
    for _ in 0..2 {
        assert_eq!(names(&warm, &old).await.unwrap(), want);
    }
    let cold = Omnigraph::open_read_only(&uri).await.unwrap();
    g.cleanup(now(None)).await.unwrap();
    assert_eq!(
        names(&warm, &old).await.unwrap(),
        want,
        "rows held in memory"
    );
    let e = names(&cold, &old).await.unwrap_err();
    assert!(
        matches!(e, OmniError::VersionExpired { version: 4, .. }),
        "{e}"
    );
    g.close().await;
}

/// Writer processes append while this one cleans up again and again.
#[tokio::test(flavor = "multi_thread")]
async fn cleanup_beside_writer_processes_loses_nothing() {
    let place = Place::local();
    let uri = place.uri("g.omni");
    let g = Omnigraph::init(
        &uri,
        "node Person { name: String @key }\nedge Knows: Person -> Person",
    )
    .await
    .unwrap();
    let writers = [spawn_writer(&uri, 0), spawn_writer(&uri, 1_000_000)];
    let mut removed = 0;
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        removed += g.cleanup(now(Some(1))).await.unwrap().removed_versions;
    }
    let mut acked = BTreeSet::new();
    for w in writers {
        acked.extend(stop_writer(w).acked);
    }
    assert!(
        !acked.is_empty() && removed > 0,
        "{} acked, {removed} removed",
        acked.len()
    );
    g.close().await;
    check_graph(&uri, &acked).await;
    let g = Omnigraph::open(&uri).await.unwrap();
    g.cleanup(now(None)).await.unwrap();
    g.close().await;
    check_graph(&uri, &acked).await;
}

/// `omnigraph cleanup` killed with SIGKILL at many moments: the graph reads
/// and writes as before each time, and the next cleanup finishes the job.
#[tokio::test(flavor = "multi_thread")]
async fn a_cleanup_killed_anywhere_leaves_a_graph_that_reads_writes_and_cleans() {
    let place = Place::local();
    let uri = place.uri("g.omni");
    let g = Omnigraph::init(&uri, SCHEMA).await.unwrap();
    let mut n = 0;
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    for round in 0..8 {
        for _ in 0..15 {
            add(&g, "main", n).await;
            n += 1;
        }
        let before = state(&g).await;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_omnigraph"))
            .args(["cleanup", &uri, "--older-than", "0s"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        tokio::time::sleep(Duration::from_millis(20 + seed % 400)).await;
        let _ = child.kill();
        child.wait().unwrap();
        assert_eq!(state(&g).await, before, "round {round}");
        let fresh = Omnigraph::open(&uri).await.unwrap();
        assert_eq!(state(&fresh).await, before, "round {round}, reopened");
        add(&fresh, "main", n).await;
        n += 1;
        fresh.close().await;
    }
    let r = g.cleanup(now(None)).await.unwrap();
    let again = g.cleanup(now(None)).await.unwrap();
    assert_eq!(
        (again.removed_versions, again.removed_files),
        (0, 0),
        "{r:?} then {again:?}"
    );
    assert_eq!(names(&g, &Target::main()).await.unwrap().len(), n as usize);
    g.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cli_cleans_up_reports_json_and_types_its_errors() {
    let place = Place::local();
    let uri = place.uri("g.omni");
    let g = Omnigraph::init(&uri, SCHEMA).await.unwrap();
    for n in 0..4 {
        add(&g, "main", n).await;
    }
    g.close().await;
    let out = cli_ok(&["cleanup", &uri, "--older-than", "0s", "--dry-run", "--json"]);
    let dry: serde_json::Value = serde_json::from_str(&out).unwrap();
    // The report's fields, in any order.
    let mut keys: Vec<_> = dry.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "bytes_freed",
            "kept_versions",
            "oldest_kept",
            "removed_files",
            "removed_versions"
        ]
    );
    assert_eq!(
        (dry["removed_versions"].clone(), dry["oldest_kept"].clone()),
        (json!(4), json!({"main": 5}))
    );
    let out = cli_ok(&["cleanup", &uri, "--older-than", "0s", "--json"]);
    let done: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(done, dry);

    let bad = cli(&["cleanup", &uri, "--older-than", "7 days"]);
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("duration '7 days'"), "{err}");

    let q = cli(&["query", &uri, "all", "-e", ALL, "--version", "2"]);
    assert_eq!(q.status.code(), Some(2));
    let err = String::from_utf8_lossy(&q.stderr);
    assert!(
        err.contains("error[VersionExpired]")
            && err.contains("the oldest version kept for 'main' is 5"),
        "{err}"
    );
    let list = cli_ok(&["commit", "list", &uri]);
    assert_eq!(list.matches("(removed)").count(), 4, "{list}");
    let list = cli_ok(&["commit", "list", &uri, "--json"]);
    let list: Vec<serde_json::Value> = serde_json::from_str(&list).unwrap();
    let marks: Vec<bool> = list.iter().map(|c| c["expired"] == json!(true)).collect();
    assert_eq!(marks, [false, true, true, true, true]);
}

/// Index files only removed table versions recorded go with them; the
/// newest version's stay and searches use them.
#[tokio::test(flavor = "multi_thread")]
async fn index_files_only_removed_versions_recorded_go_with_them() {
    let place = Place::local();
    let uri = place.uri("g.omni");
    let g = Omnigraph::init(&uri, "node Doc { slug: String @key\n body: String @index }")
        .await
        .unwrap();
    let doc = |slug: &str, body: &str| {
        format!("{{\"type\":\"Doc\",\"data\":{{\"slug\":\"{slug}\",\"body\":\"{body}\"}}}}")
    };
    g.load("main", &doc("a", "red apple"), LoadMode::Overwrite)
        .await
        .unwrap();
    g.optimize("main").await.unwrap();
    let first = index_files(&uri).await;
    g.load("main", &doc("b", "apple pie"), LoadMode::Append)
        .await
        .unwrap();
    g.optimize("main").await.unwrap();
    let second = index_files(&uri).await;
    assert!(second.is_superset(&first) && second.len() > first.len());
    let r = g.cleanup(now(None)).await.unwrap();
    let left = index_files(&uri).await;
    assert!(
        left.is_subset(&second) && left.len() < second.len(),
        "{r:?}: {left:?}"
    );
    assert!(
        r.removed_files >= (second.len() - left.len()) as u64,
        "{r:?}"
    );
    assert!(g.gc(false).await.unwrap().removed.is_empty());
    let q = "query q($t: String) { match { $d: Doc  search($d.body, $t) } return { $d.slug } order { $d.slug } }";
    let found = g
        .query(&Target::main(), q, "q", &json!({ "t": "apple" }))
        .await
        .unwrap();
    let slugs: Vec<_> = omnigraph::exec::output::rows(&found)
        .unwrap()
        .into_iter()
        .map(|row| row["d.slug"].clone())
        .collect();
    assert_eq!(slugs, [json!("a"), json!("b")]);
    assert!(
        found.search[0].method.contains("index"),
        "{}",
        found.search[0].method
    );
    g.close().await;
}
