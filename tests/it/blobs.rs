//! The blob reader end to end: managed values of every storage size, edge
//! blobs, ETags, pinned readers, range limits, bad input and the CLI.

use base64::Engine;
use omnigraph::storage::objstore::Store;
use omnigraph::{Blob, BlobCell, LoadMode, OmniError, Omnigraph, StorageSession, Target};

use crate::common::{Place, fingerprint};

pub const BLOB_SCHEMA: &str = r#"
node Asset {
    name: String @key
    kind: String?
    data: Blob?
}
edge Attached: Asset -> Asset { payload: Blob? }
"#;

/// 5 MiB of bytes that differ by position (Lance stores this size in a
/// dedicated file, past one 4 MiB read).
pub fn big_bytes() -> Vec<u8> {
    (0..5u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect()
}

pub fn b64(bytes: &[u8]) -> String {
    format!(
        "base64:{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )
}

/// a1: small bytes, a2: empty, a3: null, a4: 5 MiB; an edge e1 with bytes.
pub fn assets_jsonl() -> String {
    [
        format!(
            r#"{{"type":"Asset","data":{{"name":"a1","kind":"small","data":"{}"}}}}"#,
            b64(b"hello blob")
        ),
        r#"{"type":"Asset","data":{"name":"a2","data":"base64:"}}"#.to_string(),
        r#"{"type":"Asset","data":{"name":"a3"}}"#.to_string(),
        format!(
            r#"{{"type":"Asset","data":{{"name":"a4","data":"{}"}}}}"#,
            b64(&big_bytes())
        ),
        format!(
            r#"{{"edge":"Attached","from":"a1","to":"a4","data":{{"id":"e1","payload":"{}"}}}}"#,
            b64(b"edge bytes")
        ),
    ]
    .join("\n")
}

pub async fn blob_graph(dir: &tempfile::TempDir) -> Omnigraph {
    let uri = dir.path().join("g.omni").to_string_lossy().to_string();
    let g = Omnigraph::init(&uri, BLOB_SCHEMA).await.unwrap();
    g.load("main", &assets_jsonl(), LoadMode::Overwrite)
        .await
        .unwrap();
    g
}

fn cell(t: &str, id: &str, p: &str) -> BlobCell {
    BlobCell::new(t, id, p)
}

/// A managed value's length, ETag and its bytes, read in 4 MiB steps.
async fn read_all(g: &Omnigraph, at: &Target, c: &BlobCell) -> (u64, String, Vec<u8>) {
    match g.read_blob_at(at, c).await.unwrap() {
        Blob::Managed {
            length,
            etag,
            reader,
        } => {
            assert_eq!(reader.len(), length);
            let mut out = Vec::new();
            for step in omnigraph::exec::blob::steps(0..length) {
                out.extend_from_slice(&reader.read_range(step).await.unwrap());
            }
            (length, etag, out)
        }
        other => panic!("{c}: {other:?}"),
    }
}

/// An external cell's (uri, offset, length).
pub async fn external_of(g: &Omnigraph, at: &Target, c: &BlobCell) -> (String, u64, u64) {
    match g.read_blob_at(at, c).await.unwrap() {
        Blob::External {
            uri,
            offset,
            length,
            ..
        } => (uri, offset, length),
        other => panic!("{c}: not external: {other:?}"),
    }
}

/// The ETag a reference recorded when it was written.
pub async fn recorded_etag(g: &Omnigraph, at: &Target, c: &BlobCell) -> Option<String> {
    match g.read_blob_at(at, c).await.unwrap() {
        Blob::External { etag, .. } => etag,
        other => panic!("{c}: not external: {other:?}"),
    }
}

fn is_strong_etag(e: &str) -> bool {
    e.len() == 34
        && e.starts_with('"')
        && e.ends_with('"')
        && e[1..33]
            .chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
}

#[tokio::test]
async fn managed_blobs_of_every_size_read_back_exactly_with_strong_etags() {
    let dir = tempfile::tempdir().unwrap();
    let g = blob_graph(&dir).await;
    let main = Target::main();
    let (len, e1, bytes) = read_all(&g, &main, &cell("Asset", "a1", "data")).await;
    assert_eq!((len, bytes.as_slice()), (10, b"hello blob".as_slice()));
    assert!(is_strong_etag(&e1), "{e1}");
    let (len, e2, bytes) = read_all(&g, &main, &cell("Asset", "a2", "data")).await;
    assert_eq!((len, bytes.len()), (0, 0));
    let (len, e4, bytes) = read_all(&g, &main, &cell("Asset", "a4", "data")).await;
    assert_eq!(len, 5 << 20);
    assert!(
        bytes == big_bytes(),
        "the 5 MiB value read back differently"
    );
    let (_, ee, bytes) = read_all(&g, &main, &cell("Attached", "e1", "payload")).await;
    assert_eq!(bytes, b"edge bytes");
    // One ETag per cell: distinct cells differ, the same cell at the same
    // version is the same token every time.
    let mut all = vec![e1.clone(), e2, e4, ee];
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 4);
    assert_eq!(
        read_all(&g, &main, &cell("Asset", "a1", "data")).await.1,
        e1
    );
    // A range inside, the empty range at the end, and a middle slice of
    // the dedicated value.
    let Blob::Managed { reader, .. } = g
        .read_blob_at(&main, &cell("Asset", "a4", "data"))
        .await
        .unwrap()
    else {
        panic!("managed")
    };
    let mid = reader.read_range(1_000_000..1_000_100).await.unwrap();
    assert_eq!(&mid[..], &big_bytes()[1_000_000..1_000_100]);
    assert!(reader.read_range(len..len).await.unwrap().is_empty());
    // A null cell is NotFound, not an empty value.
    let null = g.read_blob_at(&main, &cell("Asset", "a3", "data")).await;
    assert!(
        matches!(null, Err(OmniError::NotFound(ref m)) if m.contains("null")),
        "{null:?}"
    );
}

#[tokio::test]
async fn a_reader_keeps_its_version_after_the_branch_moves_and_etags_follow_versions() {
    let dir = tempfile::tempdir().unwrap();
    let g = blob_graph(&dir).await;
    let before = g.snapshot(&Target::main()).await.unwrap().manifest_version;
    let c = cell("Asset", "a1", "data");
    let Blob::Managed {
        reader: old,
        etag: old_etag,
        ..
    } = g.read_blob_at(&Target::main(), &c).await.unwrap()
    else {
        panic!("managed")
    };
    // The same bytes written again are another version: another ETag.
    let again = format!(
        r#"{{"type":"Asset","data":{{"name":"a1","data":"{}"}}}}"#,
        b64(b"hello blob")
    );
    g.load("main", &again, LoadMode::Merge).await.unwrap();
    let (_, same_bytes_etag, _) = read_all(&g, &Target::main(), &c).await;
    assert_ne!(same_bytes_etag, old_etag);
    let changed = format!(
        r#"{{"type":"Asset","data":{{"name":"a1","data":"{}"}}}}"#,
        b64(b"a different value")
    );
    g.load("main", &changed, LoadMode::Merge).await.unwrap();
    // The reader opened before both writes still reads its own bytes.
    assert_eq!(&old.read_range(0..10).await.unwrap()[..], b"hello blob");
    let (_, new_etag, new_bytes) = read_all(&g, &Target::main(), &c).await;
    assert_eq!(new_bytes, b"a different value");
    assert_ne!(new_etag, old_etag);
    // The old version, read later, is the old bytes with the old ETag.
    let past = Target::Version {
        version: before,
        branch: "main".into(),
    };
    let (_, past_etag, past_bytes) = read_all(&g, &past, &c).await;
    assert_eq!(
        (past_etag, past_bytes.as_slice()),
        (old_etag, b"hello blob".as_slice())
    );
}

#[tokio::test]
async fn bad_blob_reads_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let g = blob_graph(&dir).await;
    let main = Target::main();
    let bad = |e: Result<Blob, OmniError>, needle: &str| match e {
        Err(OmniError::BadRequest(m)) => assert!(m.contains(needle), "{m}"),
        other => panic!("{needle}: {other:?}"),
    };
    bad(
        g.read_blob_at(&main, &cell("Nope", "a1", "data")).await,
        "no type Nope",
    );
    bad(
        g.read_blob_at(&main, &cell("Asset", "a1", "nope")).await,
        "no property nope",
    );
    bad(
        g.read_blob_at(&main, &cell("Asset", "a1", "kind")).await,
        "not a Blob",
    );
    let missing = g.read_blob_at(&main, &cell("Asset", "zz", "data")).await;
    assert!(
        matches!(missing, Err(OmniError::NotFound(ref m)) if m.contains("zz")),
        "{missing:?}"
    );
    // An id is a value, never filter text.
    let injected = g
        .read_blob_at(&main, &cell("Asset", "a1' OR '1'='1", "data"))
        .await;
    assert!(
        matches!(injected, Err(OmniError::NotFound(_))),
        "{injected:?}"
    );
    let Blob::Managed { reader, .. } = g
        .read_blob_at(&main, &cell("Asset", "a4", "data"))
        .await
        .unwrap()
    else {
        panic!("managed")
    };
    let len = reader.len();
    #[allow(clippy::reversed_empty_ranges)]
    for r in [5..4, 0..len + 1, len + 1..len + 1] {
        match reader.read_range(r.clone()).await {
            Err(OmniError::BlobRangeNotSatisfiable { start, end, length }) => {
                assert_eq!((start, end, length), (r.start, r.end, len))
            }
            other => panic!("{r:?}: {other:?}"),
        }
    }
    match reader.read_range(0..(4 << 20) + 1).await {
        Err(OmniError::ResourceLimitExceeded { limit, .. }) => assert!(limit.contains("4 MiB")),
        other => panic!("{other:?}"),
    }
    // A malformed base64 payload names its line and writes nothing.
    let before = fingerprint(&g).await;
    let jsonl = "{\"type\":\"Asset\",\"data\":{\"name\":\"b1\"}}\n{\"type\":\"Asset\",\"data\":{\"name\":\"b2\",\"data\":\"base64:@@@\"}}";
    match g.load("main", jsonl, LoadMode::Append).await {
        Err(e @ OmniError::Invalid { .. }) => {
            let m = e.to_string();
            assert!(m.contains("line 2") && m.contains("base64"), "{m}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(fingerprint(&g).await, before);
}

#[tokio::test]
async fn the_cli_stats_and_gets_blobs_in_bounded_reads() {
    let dir = tempfile::tempdir().unwrap();
    let g = blob_graph(&dir).await;
    let uri = dir.path().join("g.omni").to_string_lossy().to_string();
    let (_, etag, _) = read_all(&g, &Target::main(), &cell("Asset", "a4", "data")).await;
    g.close().await;
    let run = |args: &[&str]| {
        let mut all = vec!["blob"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--store", &uri]);
        std::process::Command::new(env!("CARGO_BIN_EXE_omnigraph"))
            .args(all)
            .output()
            .unwrap()
    };
    let out = run(&["stat", "Asset", "a4", "data", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"kind": "managed", "length": 5 << 20, "etag": etag})
    );
    let big = big_bytes();
    let out = run(&["get", "Asset", "a4", "data"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout == big, "get printed other bytes");
    // An over-long length is clamped to the end, like an HTTP range.
    let out = run(&[
        "get", "Asset", "a4", "data", "--offset", "5242870", "--length", "100",
    ]);
    assert!(out.status.success());
    assert_eq!(out.stdout, &big[5_242_870..]);
    let out = run(&[
        "get", "Asset", "a1", "data", "--offset", "6", "--length", "2",
    ]);
    assert_eq!(out.stdout, b"bl");
    // An offset at the end prints nothing; past the end is refused.
    let out = run(&["get", "Asset", "a1", "data", "--offset", "10"]);
    assert!(out.status.success() && out.stdout.is_empty());
    let out = run(&["get", "Asset", "a1", "data", "--offset", "11"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("error[BlobRangeNotSatisfiable]"));
    // A reader that stops early (`| head -c 10`) ends the command quietly.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_omnigraph"))
        .args(["blob", "get", "Asset", "a4", "data", "--store", &uri])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 10];
    std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut first).unwrap();
    assert_eq!(first, big[..10]);
    drop(child.stdout.take());
    let done = child.wait_with_output().unwrap();
    assert!(
        done.status.success() && done.stderr.is_empty(),
        "{:?} {}",
        done.status,
        String::from_utf8_lossy(&done.stderr)
    );
    // --out writes the file whole.
    let file = dir.path().join("a4.bin");
    let out = run(&[
        "get",
        "Asset",
        "a4",
        "data",
        "--out",
        file.to_str().unwrap(),
    ]);
    assert!(out.status.success() && out.stdout.is_empty());
    assert!(std::fs::read(&file).unwrap() == big);
    // Time travel: the state before a later write, by graph version.
    let v1 = {
        let g = Omnigraph::open(&uri).await.unwrap();
        let v = g.snapshot(&Target::main()).await.unwrap().manifest_version;
        let line = format!(
            r#"{{"type":"Asset","data":{{"name":"a1","data":"{}"}}}}"#,
            b64(b"later")
        );
        g.load("main", &line, LoadMode::Merge).await.unwrap();
        g.close().await;
        v
    };
    let out = run(&["get", "Asset", "a1", "data"]);
    assert_eq!(out.stdout, b"later");
    let out = run(&["get", "Asset", "a1", "data", "--version", &v1.to_string()]);
    assert_eq!(out.stdout, b"hello blob");
    // An edge's blob, and the typed failures.
    let out = run(&["get", "Attached", "e1", "payload"]);
    assert_eq!(out.stdout, b"edge bytes");
    let out = run(&["stat", "Asset", "a3", "data"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("error[NotFound]"));
    let out = run(&["stat", "Asset", "a1", "kind"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("error[BadRequest]"));
}

#[tokio::test]
async fn compaction_of_a_blob_table_keeps_null_empty_and_large_values() {
    let dir = tempfile::tempdir().unwrap();
    let g = blob_graph(&dir).await;
    // Updates that keep the blobs, before the table is compacted.
    for id in ["a1", "a2", "a3", "a4"] {
        g.mutate(
            "main",
            BLOB_MUTATIONS,
            "set_kind",
            &serde_json::json!({"name": id, "kind": "before compaction"}),
        )
        .await
        .unwrap();
    }
    let before: Vec<(u64, Vec<u8>)> = {
        let mut v = Vec::new();
        for id in ["a1", "a2", "a4"] {
            let (len, _, bytes) = read_all(&g, &Target::main(), &cell("Asset", id, "data")).await;
            v.push((len, bytes));
        }
        v
    };
    // One small commit after another: each adds a fragment, until the
    // write that crosses the threshold compacts the table.
    for i in 0..40 {
        let row = match i % 3 {
            0 => format!(r#"{{"type":"Asset","data":{{"name":"n{i}"}}}}"#),
            1 => format!(r#"{{"type":"Asset","data":{{"name":"n{i}","data":"base64:"}}}}"#),
            _ => format!(
                r#"{{"type":"Asset","data":{{"name":"n{i}","data":"{}"}}}}"#,
                b64(format!("value {i}").as_bytes())
            ),
        };
        g.load("main", &row, LoadMode::Append).await.unwrap();
    }
    let snap = g.snapshot(&Target::main()).await.unwrap();
    let asset = snap.types.iter().find(|t| t.name == "Asset").unwrap();
    assert!(
        asset.fragments < 32,
        "not compacted: {} fragments",
        asset.fragments
    );
    for (id, (len, bytes)) in ["a1", "a2", "a4"].iter().zip(&before) {
        let (l, _, b) = read_all(&g, &Target::main(), &cell("Asset", id, "data")).await;
        assert_eq!(l, *len, "{id}");
        assert!(b == *bytes, "{id} changed in compaction");
    }
    for i in 0..40 {
        let got = g
            .read_blob_at(&Target::main(), &cell("Asset", &format!("n{i}"), "data"))
            .await;
        match (i % 3, got) {
            (0, Err(OmniError::NotFound(_))) => {}
            (1, Ok(Blob::Managed { length: 0, .. })) => {}
            (2, Ok(Blob::Managed { reader, length, .. })) => {
                let b = reader.read_range(0..length).await.unwrap();
                assert_eq!(&b[..], format!("value {i}").as_bytes());
            }
            (k, other) => panic!("n{i} (kind {k}): {other:?}"),
        }
    }
    let null = g
        .read_blob_at(&Target::main(), &cell("Asset", "a3", "data"))
        .await;
    assert!(matches!(null, Err(OmniError::NotFound(_))), "{null:?}");
    assert_eq!(kind_of(&g, "a4").await, "before compaction");
}

#[tokio::test]
async fn a_reader_whose_files_were_cleaned_up_fails_typed() {
    let dir = tempfile::tempdir().unwrap();
    let g = blob_graph(&dir).await;
    let Blob::Managed { reader, .. } = g
        .read_blob_at(&Target::main(), &cell("Asset", "a4", "data"))
        .await
        .unwrap()
    else {
        panic!("managed")
    };
    // What a cleanup of old versions does to the files of this one.
    let data = dir.path().join("g.omni/nodes/Asset.lance/data");
    std::fs::remove_dir_all(&data).unwrap();
    match reader.read_range(0..4096).await {
        Err(OmniError::NotFound(m)) => assert!(m.contains("no longer readable"), "{m}"),
        other => panic!("{other:?}"),
    }
}

const BLOB_MUTATIONS: &str = r#"
query set_kind($name: String, $kind: String) {
    update Asset set { kind: $kind } where name = $name
}
query set_data($name: String, $data: Blob?) {
    update Asset set { data: $data } where name = $name
}
query add_and_touch($new: String, $data: Blob, $other: String) {
    insert Asset { name: $new, data: $data }
    update Asset set { kind: "touched" } where name = $other
}
query forget($name: String) {
    delete Asset where name = $name
}
"#;

async fn kind_of(g: &Omnigraph, name: &str) -> serde_json::Value {
    let r = g
        .query(
            &Target::main(),
            "query k($n: String) { match { $a: Asset { name: $n } } return { $a.kind as kind } }",
            "k",
            &serde_json::json!({ "n": name }),
        )
        .await
        .unwrap();
    omnigraph::exec::output::rows(&r).unwrap()[0]["kind"].clone()
}

#[tokio::test]
async fn updates_and_deletes_of_a_blob_type_keep_or_replace_the_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let g = blob_graph(&dir).await;
    let main = Target::main();
    let m = |name: &str, p: serde_json::Value| {
        let g = g.clone();
        let name = name.to_string();
        async move { g.mutate("main", BLOB_MUTATIONS, &name, &p).await }
    };
    // An update that does not assign the Blob keeps it, large, empty or
    // null alike.
    for id in ["a1", "a2", "a3", "a4"] {
        m("set_kind", serde_json::json!({"name": id, "kind": "k2"}))
            .await
            .unwrap();
    }
    assert_eq!(kind_of(&g, "a4").await, "k2");
    let (_, _, big) = read_all(&g, &main, &cell("Asset", "a4", "data")).await;
    assert!(
        big == big_bytes(),
        "an update that did not assign the blob changed it"
    );
    assert_eq!(
        read_all(&g, &main, &cell("Asset", "a1", "data")).await.2,
        b"hello blob"
    );
    assert_eq!(read_all(&g, &main, &cell("Asset", "a2", "data")).await.0, 0);
    let null = g.read_blob_at(&main, &cell("Asset", "a3", "data")).await;
    assert!(matches!(null, Err(OmniError::NotFound(_))), "{null:?}");
    // One that assigns it replaces it; null clears it.
    m(
        "set_data",
        serde_json::json!({"name": "a1", "data": b64(b"new bytes")}),
    )
    .await
    .unwrap();
    assert_eq!(
        read_all(&g, &main, &cell("Asset", "a1", "data")).await.2,
        b"new bytes"
    );
    // The blob writer's other spellings from the Rust API: raw bytes, and
    // a `{data}` struct of either form.
    for (data, want) in [
        (serde_json::json!([104, 105]), b"hi".to_vec()),
        (serde_json::json!({"data": [1, 2, 3]}), vec![1, 2, 3]),
        (
            serde_json::json!({"data": b64(b"struct")}),
            b"struct".to_vec(),
        ),
    ] {
        m("set_data", serde_json::json!({"name": "a1", "data": data}))
            .await
            .unwrap();
        assert_eq!(
            read_all(&g, &main, &cell("Asset", "a1", "data")).await.2,
            want
        );
    }
    let refused = m(
        "set_data",
        serde_json::json!({"name": "a1", "data": {"uri": "s3://bucket/x.bin"}}),
    )
    .await;
    match refused {
        Err(e @ OmniError::Invalid { .. }) => {
            assert!(
                e.to_string()
                    .contains("outside the graph's external-blob policy"),
                "{e}"
            )
        }
        other => panic!("a {{uri}} struct is an external reference: {other:?}"),
    }
    for bad in [
        serde_json::json!([1, 256]),
        serde_json::json!({"data": 1, "uri": "x"}),
    ] {
        let e = m("set_data", serde_json::json!({"name": "a1", "data": bad})).await;
        assert!(
            matches!(e, Err(OmniError::Type { code: "Q012", .. })),
            "{e:?}"
        );
    }
    m(
        "set_data",
        serde_json::json!({"name": "a2", "data": {"data": null}}),
    )
    .await
    .unwrap();
    m("set_data", serde_json::json!({"name": "a2", "data": null}))
        .await
        .unwrap();
    let cleared = g.read_blob_at(&main, &cell("Asset", "a2", "data")).await;
    assert!(
        matches!(cleared, Err(OmniError::NotFound(_))),
        "{cleared:?}"
    );
    // An insert and an update of another row of the same table in one
    // mutation: the untouched row's bytes are carried through.
    m(
        "add_and_touch",
        serde_json::json!({"new": "a5", "data": b64(b"five"), "other": "a4"}),
    )
    .await
    .unwrap();
    assert_eq!(kind_of(&g, "a4").await, "touched");
    let (_, _, big) = read_all(&g, &main, &cell("Asset", "a4", "data")).await;
    assert!(big == big_bytes(), "the carried blob changed");
    assert_eq!(
        read_all(&g, &main, &cell("Asset", "a5", "data")).await.2,
        b"five"
    );
    // A delete removes the row and its incident edge.
    m("forget", serde_json::json!({"name": "a4"}))
        .await
        .unwrap();
    let gone = g.read_blob_at(&main, &cell("Asset", "a4", "data")).await;
    assert!(matches!(gone, Err(OmniError::NotFound(_))), "{gone:?}");
    let edge = g
        .read_blob_at(&main, &cell("Attached", "e1", "payload"))
        .await;
    assert!(matches!(edge, Err(OmniError::NotFound(_))), "{edge:?}");
}

/// A folder of external objects next to a fresh blob graph.
struct Ext {
    t: crate::common::TestGraph,
    dir: std::path::PathBuf,
}

impl Ext {
    async fn new() -> Self {
        let d = tempfile::tempdir().unwrap();
        let uri = d.path().join("g.omni").to_string_lossy().to_string();
        let g = Omnigraph::init(&uri, BLOB_SCHEMA).await.unwrap();
        let dir = d.path().join("ext");
        std::fs::create_dir_all(dir.join("in")).unwrap();
        std::fs::create_dir_all(dir.join("in2")).unwrap();
        std::fs::write(dir.join("in/a.bin"), b"external bytes").unwrap();
        std::fs::write(dir.join("in2/b.bin"), b"outside").unwrap();
        Self {
            t: crate::common::TestGraph { dir: d, g },
            dir,
        }
    }

    fn uri(&self, rel: &str) -> String {
        format!("file://{}/{rel}", self.dir.display())
    }

    fn line(&self, name: &str, uri: &str) -> String {
        format!(r#"{{"type":"Asset","data":{{"name":"{name}","data":"{uri}"}}}}"#)
    }
}

/// A reference is stored as the one spelling of the URI the policy
/// checked (lowercase scheme and host, escapes decoded and re-encoded only
/// where required), so what a reader resolves is what was allowed.
#[tokio::test]
async fn an_external_reference_is_stored_as_the_uri_that_was_checked() {
    let e = Ext::new().await;
    let g = &e.t.g;
    std::fs::write(e.dir.join("in/c d.bin"), b"twelve bytes").unwrap();
    g.allow_external_blobs(&format!("file://{}/in", e.dir.display()))
        .await
        .unwrap();
    let written = format!("FILE://{}/in/%63%20d.bin", e.dir.display());
    g.load("main", &e.line("a1", &written), LoadMode::Overwrite)
        .await
        .unwrap();
    let stored = format!("file://{}/in/c%20d.bin", e.dir.display());
    assert_eq!(
        external_of(g, &Target::main(), &cell("Asset", "a1", "data")).await,
        (stored.clone(), 0, 12)
    );
    let policy = omnigraph::compiler::blob_policy::parse(&stored).unwrap();
    assert_eq!(policy.segments.last().map(String::as_str), Some("c d.bin"));
}

/// A reference records the object's ETag as its HEAD saw it: a later
/// change of the object leaves the recorded one, so a reader tells the
/// object it fetches is no longer the one referenced; export writes the
/// URI alone, and loading it back records the object as it is then.
#[tokio::test]
async fn an_external_reference_records_the_objects_etag() {
    let e = Ext::new().await;
    let g = &e.t.g;
    g.allow_external_blobs(&format!("file://{}/in", e.dir.display()))
        .await
        .unwrap();
    let (main, a1) = (Target::main(), cell("Asset", "a1", "data"));
    g.load(
        "main",
        &e.line("a1", &e.uri("in/a.bin")),
        LoadMode::Overwrite,
    )
    .await
    .unwrap();
    let first = recorded_etag(g, &main, &a1)
        .await
        .expect("an ETag recorded");
    std::fs::write(e.dir.join("in/a.bin"), b"other, longer bytes").unwrap();
    assert_eq!(
        recorded_etag(g, &main, &a1).await.as_deref(),
        Some(first.as_str())
    );
    assert_eq!(
        external_of(g, &main, &a1).await,
        (e.uri("in/a.bin"), 0, 14),
        "the reference keeps the length its HEAD saw"
    );
    let mut dump = Vec::new();
    g.export(&main, &mut dump).await.unwrap();
    let dump = String::from_utf8(dump).unwrap();
    assert!(
        dump.contains(&format!("\"data\":\"{}\"", e.uri("in/a.bin"))),
        "{dump}"
    );
    assert!(!dump.contains("#etag"), "{dump}");
    g.load("main", &dump, LoadMode::Overwrite).await.unwrap();
    let now = recorded_etag(g, &main, &a1)
        .await
        .expect("an ETag recorded");
    assert_ne!(now, first, "the object changed, so its ETag did");
    assert_eq!(external_of(g, &main, &a1).await, (e.uri("in/a.bin"), 0, 19));
    // The earlier version still reads the reference as it was written.
    let v = g.snapshot(&main).await.unwrap().manifest_version - 1;
    let then = Target::Version {
        version: v,
        branch: "main".into(),
    };
    assert_eq!(recorded_etag(g, &then, &a1).await, Some(first));
}

/// A read of an external reference reads the object itself, and only
/// while it is the object the reference recorded: once it is another (the
/// same name and length, another ETag) or gone, the read is `BlobChanged`
/// naming the URI, what was recorded and what is there now.
async fn a_read_of_an_external_reference_stops_once_the_object_changed(place: Place, base: &str) {
    let objects = Store::open(&StorageSession::default(), base).await.unwrap();
    objects.put("a.bin", b"external bytes").await.unwrap();
    let g = Omnigraph::init(&place.uri("g.omni"), BLOB_SCHEMA)
        .await
        .unwrap();
    g.allow_external_blobs(base).await.unwrap();
    let uri = format!("{base}/a.bin");
    let line = format!(r#"{{"type":"Asset","data":{{"name":"a1","data":"{uri}"}}}}"#);
    g.load("main", &line, LoadMode::Overwrite).await.unwrap();
    let (main, a1) = (Target::main(), cell("Asset", "a1", "data"));
    let read = |range: std::ops::Range<u64>| {
        let (g, main, a1) = (&g, &main, &a1);
        async move {
            let r = g.read_blob_at(main, a1).await?.into_reader();
            r.read_range(range).await
        }
    };
    assert_eq!(read(0..14).await.unwrap(), &b"external bytes"[..]);
    assert_eq!(read(9..14).await.unwrap(), &b"bytes"[..]);
    let recorded = recorded_etag(&g, &main, &a1).await.expect("an ETag");
    objects.put("a.bin", b"EXTERNAL BYTES").await.unwrap();
    match read(0..14).await {
        Err(OmniError::BlobChanged {
            uri: named,
            recorded: then,
            found,
        }) => {
            assert_eq!(named, uri);
            assert_eq!(then, format!("ETag {recorded} and 14 bytes"));
            assert!(
                found.ends_with(" and 14 bytes") && !found.contains(&recorded),
                "{found}"
            );
        }
        other => panic!("a changed object read: {other:?}"),
    }
    objects.delete("a.bin").await.unwrap();
    match read(0..14).await {
        Err(OmniError::BlobChanged { found, .. }) => assert_eq!(found, "no object"),
        other => panic!("a removed object read: {other:?}"),
    }
    g.close().await;
}

#[tokio::test]
async fn a_read_of_an_external_file_stops_once_the_file_changed() {
    let place = Place::local();
    let base = format!("file://{}/ext", place.scratch().display());
    a_read_of_an_external_reference_stops_once_the_object_changed(place, &base).await;
}

#[tokio::test]
async fn a_read_of_an_external_s3_object_stops_once_the_object_changed() {
    let place = Place::s3();
    let base = place.uri("ext");
    a_read_of_an_external_reference_stops_once_the_object_changed(place, &base).await;
}

#[tokio::test]
async fn external_references_obey_the_policy_and_are_kept_or_copied_by_mode() {
    let e = Ext::new().await;
    let g = &e.t.g;
    let main = Target::main();
    assert_eq!(
        g.external_blob_policy().await.unwrap().allow,
        Vec::<String>::new()
    );
    // Denied by default, file:// above all; the error names the line and
    // the value, and nothing is written.
    let before = crate::common::Untouched::of(&e.t).await;
    let jsonl = format!(
        "{{\"type\":\"Asset\",\"data\":{{\"name\":\"x\"}}}}\n{}",
        e.line("a1", &e.uri("in/a.bin"))
    );
    match g.load("main", &jsonl, LoadMode::Overwrite).await {
        Err(err @ OmniError::Invalid { .. }) => {
            let m = err.to_string();
            assert!(
                m.contains("line 2") && m.contains("never allowed by default"),
                "{m}"
            );
        }
        other => panic!("{other:?}"),
    }
    before.check(&e.t, &"a denied file:// reference").await;
    // Allowed under its base: an overwrite keeps the reference, with the
    // length recorded, and the reader never touches the object.
    let base = format!("file://{}/in", e.dir.display());
    assert_eq!(
        g.allow_external_blobs(&base).await.unwrap().allow,
        vec![base.clone()]
    );
    g.load(
        "main",
        &e.line("a1", &e.uri("in/a.bin")),
        LoadMode::Overwrite,
    )
    .await
    .unwrap();
    std::fs::rename(e.dir.join("in/a.bin"), e.dir.join("in/moved.bin")).unwrap();
    assert_eq!(
        external_of(g, &main, &cell("Asset", "a1", "data")).await,
        (e.uri("in/a.bin"), 0, 14)
    );
    let mut dump = Vec::new();
    g.export(&main, &mut dump).await.unwrap();
    let dump = String::from_utf8(dump).unwrap();
    assert!(
        dump.contains(&format!("\"data\":\"{}\"", e.uri("in/a.bin"))),
        "{dump}"
    );
    std::fs::rename(e.dir.join("in/moved.bin"), e.dir.join("in/a.bin")).unwrap();
    // An append copies the bytes in: they stay after the object is gone.
    g.load("main", &e.line("a2", &e.uri("in/a.bin")), LoadMode::Append)
        .await
        .unwrap();
    // So does an insert from a mutation.
    g.mutate(
        "main",
        "query add($n: String, $d: Blob) { insert Asset { name: $n, data: $d } }",
        "add",
        &serde_json::json!({"n": "a3", "d": e.uri("in/a.bin")}),
    )
    .await
    .unwrap();
    std::fs::remove_file(e.dir.join("in/a.bin")).unwrap();
    for id in ["a2", "a3"] {
        assert_eq!(
            read_all(g, &main, &cell("Asset", id, "data")).await.2,
            b"external bytes",
            "{id}"
        );
    }
    // Outside the base (a sibling folder whose name starts the same way
    // is outside too), a `..` segment, an encoded one, a missing object.
    let before = crate::common::Untouched::of(&e.t).await;
    for (uri, needle) in [
        (
            e.uri("in2/b.bin"),
            "outside the graph's external-blob policy",
        ),
        (e.uri("in/../in2/b.bin"), "\"..\" segment"),
        (e.uri("in/%2e%2e/in2/b.bin"), "percent-encoded"),
        (e.uri("in/nope.bin"), "does not exist"),
    ] {
        match g.load("main", &e.line("b", &uri), LoadMode::Append).await {
            Err(err @ OmniError::Invalid { .. }) => {
                let m = err.to_string();
                assert!(m.contains(needle) && m.contains("line 1"), "{uri}: {m}");
            }
            other => panic!("{uri}: {other:?}"),
        }
    }
    before.check(&e.t, &"a reference outside the policy").await;
    // Revoked: new references are refused again.
    g.revoke_external_blobs(&base).await.unwrap();
    std::fs::write(e.dir.join("in/a.bin"), b"external bytes").unwrap();
    let refused = g
        .load("main", &e.line("c", &e.uri("in/a.bin")), LoadMode::Append)
        .await;
    assert!(
        matches!(refused, Err(OmniError::Invalid { .. })),
        "{refused:?}"
    );
}

#[tokio::test]
async fn copying_external_objects_is_checked_against_the_limit_before_reading() {
    let e = Ext::new().await;
    let g = &e.t.g;
    // 33 MiB of declared size: over the 32 MiB per-table limit.
    let f = std::fs::File::create(e.dir.join("in/big.bin")).unwrap();
    f.set_len(33 << 20).unwrap();
    let base = format!("file://{}/in", e.dir.display());
    g.allow_external_blobs(&base).await.unwrap();
    let before = crate::common::Untouched::of(&e.t).await;
    match g
        .load(
            "main",
            &e.line("big", &e.uri("in/big.bin")),
            LoadMode::Append,
        )
        .await
    {
        Err(OmniError::ResourceLimitExceeded { what, limit }) => {
            assert!(
                what.contains("Asset") && limit.contains("32 MiB"),
                "{what} {limit}"
            )
        }
        other => panic!("{other:?}"),
    }
    before.check(&e.t, &"a copy over the limit").await;
    // An overwrite keeps it as a reference: no limit, nothing copied.
    g.load(
        "main",
        &e.line("big", &e.uri("in/big.bin")),
        LoadMode::Overwrite,
    )
    .await
    .unwrap();
    let big = external_of(g, &Target::main(), &cell("Asset", "big", "data")).await;
    assert_eq!(big.2, 33 << 20);
}

#[tokio::test]
async fn the_cli_changes_and_shows_the_policy_and_stats_external_cells() {
    let e = Ext::new().await;
    let uri = e.t.uri();
    e.t.g.clone().close().await;
    let run = crate::common::cli;
    let base = format!("file://{}/in", e.dir.display());
    let out = run(&[
        "blob", "policy", "--allow", &base, "--store", &uri, "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v, serde_json::json!({ "allow": [base] }));
    let bad = run(&["blob", "policy", "--allow", "file:///", "--store", &uri]);
    assert_eq!(bad.status.code(), Some(2));
    let data = e.dir.join("data.jsonl");
    std::fs::write(&data, e.line("a1", &e.uri("in/a.bin"))).unwrap();
    let out = run(&[
        "load",
        "--data",
        data.to_str().unwrap(),
        "--mode",
        "overwrite",
        "--store",
        &uri,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(&[
        "blob", "stat", "Asset", "a1", "data", "--store", &uri, "--json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"kind": "external", "uri": e.uri("in/a.bin"), "offset": 0, "length": 14, "etag": v["etag"]})
    );
    assert!(v["etag"].as_str().is_some_and(|t| !t.is_empty()), "{v}");
    let out = run(&["blob", "get", "Asset", "a1", "data", "--store", &uri]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, b"external bytes");
    // The object replaced since: the read is refused, naming it.
    std::fs::write(e.dir.join("in/a.bin"), b"other bytes!!!").unwrap();
    let out = run(&["blob", "get", "Asset", "a1", "data", "--store", &uri]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("error[BlobChanged]"), "{stderr}");
    assert!(stderr.contains(&e.uri("in/a.bin")), "{stderr}");
    assert!(out.stdout.is_empty());
    let out = run(&["blob", "policy", "--store", &uri]);
    assert!(String::from_utf8_lossy(&out.stdout).contains(&base));
}
