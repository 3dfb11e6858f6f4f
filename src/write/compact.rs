//! Compaction as a write: every commit appends at least one small fragment
//! to each table it touches, and scans, probes and merges open every
//! fragment, so a long history would slow every write down. When a branch's
//! own table has many fragments, a compaction commit rewrites them into few
//! large ones. It goes through the write protocol like any other change
//! (gates, sidecar, publish), so recovery and the simulator's guarantees
//! cover it; the data it shows does not change.

use crate::error::Result;
use crate::storage::stage;
use crate::storage::substrate::{BoxFut, PrepareCx, PrepareWork, Prepared};
use omnigraph_actors::WriteClass;

/// A table with at least this many fragments is compacted after a write.
pub const COMPACT_AT_FRAGMENTS: usize = 32;

pub struct CompactWork {
    /// Type names to compact.
    pub types: Vec<String>,
}

impl PrepareWork for CompactWork {
    fn prepare<'a>(&'a self, cx: &'a mut PrepareCx) -> BoxFut<'a, Result<Prepared>> {
        Box::pin(async move {
            let mut compacted = Vec::new();
            for name in &self.types {
                let def = cx.catalog().get(name).expect("known type").clone();
                let target = cx.target(&def).await?;
                if let Some(txn) = stage::compaction(target.clone()).await? {
                    cx.stage(&def, target, txn)?;
                    compacted.push(name.clone());
                }
            }
            Ok(Prepared {
                class: WriteClass::Retryable,
                summary: serde_json::json!({ "compacted": compacted }),
                merge: None,
                schema_change: None,
            })
        })
    }
}
