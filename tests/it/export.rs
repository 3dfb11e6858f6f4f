//! Export writes JSONL that loads back into an identical graph.

use omnigraph::{LoadMode, Omnigraph, Target};

use crate::common::*;

const RICH: &str = r#"{"type":"Doc","data":{"title":"one","published":"2024-05-01","edited":"2024-05-01T12:30:00.125Z","embedding":[0.5,-1.25,3],"body":"base64:aGVsbG8gYmxvYg=="}}
{"type":"Doc","data":{"title":"two","body":"base64:"}}
{"type":"Doc","data":{"title":"three"}}
"#;

#[tokio::test]
async fn export_round_trips_every_value_kind() {
    let t = loaded_graph().await;
    t.g.load("main", RICH, LoadMode::Append).await.unwrap();
    let mut first = Vec::new();
    let lines = t.g.export(&Target::main(), &mut first).await.unwrap();
    assert_eq!(lines, 7 + 3);
    let first = String::from_utf8(first).unwrap();
    assert!(first.contains("\"published\":\"2024-05-01\""), "{first}");
    assert!(first.contains("\"edited\":\"2024-05-01T12:30:00.125Z\""));
    assert!(first.contains("\"embedding\":[0.5,-1.25,3.0]"));
    assert!(first.contains("\"body\":\"base64:aGVsbG8gYmxvYg==\""));
    assert!(first.contains("\"tags\":[\"a\",\"b\"]"));

    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().join("copy").to_string_lossy().to_string();
    let copy = Omnigraph::init(&uri, SCHEMA).await.unwrap();
    copy.load("main", &first, LoadMode::Overwrite)
        .await
        .unwrap();
    let mut second = Vec::new();
    copy.export(&Target::main(), &mut second).await.unwrap();
    assert_eq!(first, String::from_utf8(second).unwrap());
}
