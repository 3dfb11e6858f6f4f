//! Collection of index files: `gc` removes exactly the files no table
//! version records (a crashed optimize's, a deleted branch's), never one a
//! live process wrote, never one an older version records, on a local disk
//! and on S3; the CLI reports it.

use std::collections::BTreeSet;

use omnigraph::storage::substrate::CrashPoint;
use omnigraph::{LoadMode, OmniError, Omnigraph, Target};
use serde_json::{Value, json};

use crate::common::{Place, cli_ok};

const SCHEMA: &str = "node Doc { slug: String @key\n body: String @index }\nedge Cites: Doc -> Doc";

const DOCS: &str = "{\"type\":\"Doc\",\"data\":{\"slug\":\"a\",\"body\":\"red apple\"}}\n{\"type\":\"Doc\",\"data\":{\"slug\":\"b\",\"body\":\"green pear\"}}\n{\"edge\":\"Cites\",\"from\":\"a\",\"to\":\"b\"}";

const MORE: &str = "{\"type\":\"Doc\",\"data\":{\"slug\":\"c\",\"body\":\"apple pie\"}}\n{\"edge\":\"Cites\",\"from\":\"c\",\"to\":\"a\"}";

const SEARCH: &str = "query q($t: String) { match { $d: Doc  search($d.body, $t) } return { $d.slug } order { $d.slug } }";

/// Every index file of the graph at `uri`, on any store.
pub(crate) async fn index_files(uri: &str) -> BTreeSet<String> {
    let store = omnigraph::storage::objstore::Store::open(
        &omnigraph::storage::requests::StorageSession::default(),
        uri,
    )
    .await
    .unwrap();
    store
        .list_all("_indexes")
        .await
        .unwrap()
        .into_iter()
        .map(|(f, _)| format!("_indexes/{f}"))
        .collect()
}

fn removed(r: &omnigraph::GcReport) -> BTreeSet<String> {
    r.removed.iter().map(|f| f.file.clone()).collect()
}

/// The slugs a search finds at `at`, and how it searched.
async fn search(g: &Omnigraph, at: &Target, t: &str) -> (Vec<Value>, String) {
    let r = g.query(at, SEARCH, "q", &json!({ "t": t })).await.unwrap();
    let rows = omnigraph::exec::output::rows(&r)
        .unwrap()
        .into_iter()
        .map(|m| m["d.slug"].clone())
        .collect();
    (rows, r.search[0].method.clone())
}

async fn gc_in(place: Place) {
    let uri = place.uri("g.omni");
    let g = Omnigraph::init(&uri, SCHEMA).await.unwrap();
    g.load("main", DOCS, LoadMode::Overwrite).await.unwrap();
    g.optimize("main").await.unwrap();
    let first = index_files(&uri).await;
    assert_eq!(
        first.iter().filter(|f| f.ends_with(".adj")).count(),
        1,
        "{first:?}"
    );
    let old = g.snapshot(&Target::main()).await.unwrap().manifest_version;
    g.load("main", MORE, LoadMode::Append).await.unwrap();
    g.optimize("main").await.unwrap();
    let second = index_files(&uri).await;
    assert!(second.is_superset(&first) && second.len() > first.len());

    // Everything is recorded, the first optimize's files by older versions.
    let r = g.gc(false).await.unwrap();
    assert_eq!(removed(&r), BTreeSet::new(), "{r:?}");
    assert_eq!(r.kept.recorded, second.len(), "{r:?}");
    assert_eq!(index_files(&uri).await, second);
    let at_old = Target::Version {
        version: old,
        branch: "main".into(),
    };
    let (rows, how) = search(&g, &at_old, "apple").await;
    assert_eq!(rows, [json!("a")]);
    assert!(how.starts_with("persisted inverted index"), "{how}");

    // An optimize dies after writing its files and before any commit: its
    // files are unrecorded, but their writer lives, so they stay.
    g.load(
        "main",
        "{\"type\":\"Doc\",\"data\":{\"slug\":\"d\",\"body\":\"apple tart\"}}\n{\"edge\":\"Cites\",\"from\":\"d\",\"to\":\"c\"}",
        LoadMode::Append,
    )
    .await
    .unwrap();
    g.substrate().crash_at(CrashPoint::BeforeSidecarWrite);
    let e = g.optimize("main").await.expect_err("the optimize halts");
    assert!(e.to_string().contains("halted"), "{e}");
    let crashed: BTreeSet<String> = index_files(&uri)
        .await
        .difference(&second)
        .cloned()
        .collect();
    assert_eq!(
        crashed.len(),
        3,
        "a text index, a graph index and an id order: {crashed:?}"
    );
    let other = Omnigraph::open(&uri).await.unwrap();
    let r = other.gc(false).await.unwrap();
    assert_eq!(removed(&r), BTreeSet::new(), "{r:?}");
    assert_eq!(r.kept.writer_alive, crashed.len(), "{r:?}");

    // Once its process is gone they are garbage; a dry run only says so.
    g.close().await;
    let r = other.gc(true).await.unwrap();
    assert_eq!(removed(&r), crashed, "{r:?}");
    assert!(r.dry_run && r.removed_bytes > 0, "{r:?}");
    assert_eq!(index_files(&uri).await.len(), second.len() + crashed.len());
    let r = other.gc(false).await.unwrap();
    assert_eq!(removed(&r), crashed, "{r:?}");
    assert_eq!(index_files(&uri).await, second);
    assert_eq!(removed(&other.gc(false).await.unwrap()), BTreeSet::new());
    let (rows, how) = search(&other, &Target::main(), "apple").await;
    assert_eq!(rows, [json!("a"), json!("c"), json!("d")]);
    assert!(how.contains("1 fresh"), "{how}");

    // A deleted branch's files are recorded only by its fork's versions.
    let before_b = index_files(&uri).await;
    other.branch_create("b", "main").await.unwrap();
    other
        .load(
            "b",
            "{\"type\":\"Doc\",\"data\":{\"slug\":\"e\",\"body\":\"pear jam\"}}",
            LoadMode::Append,
        )
        .await
        .unwrap();
    other.optimize("b").await.unwrap();
    let on_b: BTreeSet<String> = index_files(&uri)
        .await
        .difference(&before_b)
        .cloned()
        .collect();
    assert!(!on_b.is_empty());
    assert_eq!(removed(&other.gc(false).await.unwrap()), BTreeSet::new());
    other.branch_delete("b").await.unwrap();
    // This process's own files stay while a write of its own is in flight.
    let op = omnigraph_actors::OpId("in-flight".into());
    other.substrate().register(&op, "optimize", None, None);
    let r = other.gc(false).await.unwrap();
    assert_eq!(removed(&r), BTreeSet::new(), "{r:?}");
    assert_eq!(r.kept.writer_alive, on_b.len(), "{r:?}");
    other.substrate().finish(&op);
    let r = other.gc(false).await.unwrap();
    assert_eq!(removed(&r), on_b, "{r:?}");
    assert_eq!(index_files(&uri).await, before_b);
    other.close().await;
}

#[tokio::test]
async fn gc_removes_what_no_version_records_and_no_live_writer_may_on_local_disk() {
    gc_in(Place::local()).await;
}

#[tokio::test]
async fn gc_removes_what_no_version_records_and_no_live_writer_may_on_s3() {
    gc_in(Place::s3()).await;
}

#[tokio::test]
async fn files_without_a_writer_go_only_when_old_and_others_stay() {
    let place = Place::local();
    let uri = place.uri("g.omni");
    let g = Omnigraph::init(&uri, SCHEMA).await.unwrap();
    let day_ms = 24 * 60 * 60 * 1000;
    let ulid_at = |ms: u64| {
        // A ULID whose time is `ms`: its first ten characters.
        let mut v = ms;
        let mut head = [b'0'; 10];
        for c in head.iter_mut().rev() {
            *c = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ"[(v & 31) as usize];
            v >>= 5;
        }
        format!(
            "{}0000000000000000",
            String::from_utf8(head.to_vec()).unwrap()
        )
    };
    let now = omnigraph::util::ulid::now_ms();
    let old = format!(
        "_indexes/graph/edge-Cites-{}.adj",
        ulid_at(now - 2 * day_ms)
    );
    let young = format!("_indexes/graph/edge-Cites-{}.adj", ulid_at(now - 1000));
    let foreign = "_indexes/notes/readme.txt".to_string();
    let dir = std::path::Path::new(&uri);
    for f in [&old, &young, &foreign] {
        let p = dir.join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, b"x").unwrap();
    }
    let r = g.gc(false).await.unwrap();
    assert_eq!(removed(&r), BTreeSet::from([old.clone()]), "{r:?}");
    assert_eq!((r.kept.recent, r.kept.foreign), (1, 1), "{r:?}");
    assert_eq!(
        index_files(&uri).await,
        BTreeSet::from([young.clone(), foreign.clone()])
    );

    // A read-only handle removes nothing.
    std::fs::write(dir.join(&old), b"x").unwrap();
    let ro = Omnigraph::open_read_only(&uri).await.unwrap();
    assert!(matches!(ro.gc(false).await, Err(OmniError::ReadOnly(_))));
    assert!(dir.join(&old).exists());
    g.close().await;
}

/// A writer whose process is gone but whose intent is unresolved may still
/// have its files recorded: recovery rolls the intent forward when its
/// table commits landed (one of them late, after the process was taken
/// over). Collection keeps its files until the intent is resolved.
#[tokio::test]
async fn a_dead_writer_s_files_stay_while_its_intent_is_unresolved() {
    let place = Place::local();
    let uri = place.uri("g.omni");
    let g = Omnigraph::init(&uri, SCHEMA).await.unwrap();
    let dead = "01m97zzzzzzzzzzzzzzzzzzzzz";
    let now = omnigraph::util::ulid::new_ulid();
    let file = format!("_indexes/graph/edge-Cites-{now}.{dead}.adj");
    let dir = std::path::Path::new(&uri);
    let p = dir.join(&file);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, b"x").unwrap();
    let sidecar = crate::common::unresolved_intent_of(&uri, dead);
    let r = g.gc(false).await.unwrap();
    assert!(removed(&r).is_empty(), "{r:?}");
    assert_eq!(r.kept.writer_alive, 1, "{r:?}");
    // Resolved (here: gone), the writer's file is no one's.
    std::fs::remove_file(&sidecar).unwrap();
    let r = g.gc(false).await.unwrap();
    assert_eq!(removed(&r), BTreeSet::from([file]), "{r:?}");
    g.close().await;
}

#[tokio::test]
async fn the_cli_collects_with_a_dry_run_and_json() {
    let place = Place::local();
    let uri = place.uri("g.omni");
    let g = Omnigraph::init(&uri, SCHEMA).await.unwrap();
    g.load("main", DOCS, LoadMode::Overwrite).await.unwrap();
    g.optimize("main").await.unwrap();
    g.close().await;
    // A file a gone process wrote and never recorded.
    let kept = index_files(&uri).await;
    let stray = format!(
        "_indexes/node-Doc/body-{}.GONE.text",
        omnigraph::util::ulid::new_ulid()
    );
    std::fs::write(std::path::Path::new(&uri).join(&stray), b"stray").unwrap();
    let stdout = cli_ok(&["gc", &uri, "--dry-run"]);
    assert!(
        stdout.contains(&format!("would remove {stray} (5 bytes)")),
        "{stdout}"
    );
    assert!(std::path::Path::new(&uri).join(&stray).exists());
    let j: Value = serde_json::from_str(&cli_ok(&["gc", &uri, "--json"])).unwrap();
    assert_eq!(j["dry_run"], false);
    assert_eq!(j["removed"], json!([{ "file": stray, "bytes": 5 }]), "{j}");
    assert_eq!(j["removed_bytes"], 5);
    assert_eq!(j["kept"]["recorded"], kept.len(), "{j}");
    assert!(j["table_versions"].as_u64().unwrap() >= 2, "{j}");
    assert_eq!(index_files(&uri).await, kept);
}
