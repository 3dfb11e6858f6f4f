//! The change feed: a branch's commits in first-parent order, each as one
//! block of entity changes with their before and after images, read from
//! a caller-owned cursor. Delivery is of whole commits, at least once: a
//! cursor moves only past complete blocks, and a consumer that saves it
//! after applying a block never loses one (docs/changes.md).

use base64::Engine;
use serde::Serialize;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::*;
use crate::compiler::catalog::{DST, PropType, SRC, TypeDef};
use crate::write::merge::changes::{CommitDelta, TableDelta, commit_delta};

/// Commits a page holds when the request names no limit.
pub const DEFAULT_PAGE_COMMITS: usize = 100;

/// The cursor's format version: a cursor of another is rejected.
const CURSOR_VERSION: u32 = 1;

/// Where a feed without a cursor starts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Start {
    /// After the branch's head now: only commits that land from here on.
    #[default]
    Now,
    /// From the branch's first commit.
    Beginning,
    /// After this commit of the branch's first-parent history.
    After(String),
}

impl std::str::FromStr for Start {
    type Err = OmniError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "now" => Ok(Start::Now),
            "beginning" => Ok(Start::Beginning),
            _ => match s.strip_prefix("after:") {
                Some(c) if !c.is_empty() => Ok(Start::After(c.to_string())),
                _ => Err(OmniError::BadRequest(format!(
                    "start {s:?}: give now, beginning or after:COMMIT"
                ))),
            },
        }
    }
}

/// One poll of the feed.
#[derive(Clone, Debug, Default)]
pub struct ChangeRequest {
    pub branch: String,
    /// Resume after what this cursor delivered; `start` is then unused.
    pub cursor: Option<String>,
    pub start: Start,
    /// Only these types' changes (none: every type).
    pub types: Vec<String>,
    /// Only nodes (`"node"`) or only edges (`"edge"`).
    pub kind: Option<String>,
    /// Only these operations (`insert`, `update`, `delete`; none: all).
    pub ops: Vec<String>,
    /// At most this many commits (default [`DEFAULT_PAGE_COMMITS`]).
    pub limit: Option<usize>,
}

/// One entity change: an insert has `after`, an update `before` and
/// `after`, a delete `before`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FeedChange {
    /// `node` or `edge`.
    pub kind: &'static str,
    #[serde(rename = "type")]
    pub type_name: String,
    pub id: String,
    pub op: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<Value>,
}

/// One commit of the branch's first-parent history and what it changed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChangeBlock {
    pub graph_commit_id: String,
    pub parent_commit_id: Option<String>,
    /// The other side, for a merge commit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merged_parent_commit_id: Option<String>,
    /// The branch the commit landed on.
    pub branch: String,
    pub actor: String,
    /// RFC 3339, as the commit records it.
    pub authored_at: String,
    /// The commit's kind (`load`, `mutation`, `merge`, `schema_apply`,
    /// `optimize`, ...).
    pub commit_kind: String,
    /// For a schema apply: the schema before and after. Its block lists no
    /// entity changes (an apply changes the shape of entities, not which
    /// there are or what they say).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema: Option<Value>,
    pub changes: Vec<FeedChange>,
    /// The cursor that resumes right after this block.
    pub cursor: String,
}

/// A page of the feed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChangePage {
    pub blocks: Vec<ChangeBlock>,
    /// Resumes after the last block (or where the request began, when the
    /// page is empty).
    pub cursor: String,
    /// Whether the page reached the branch's head as this poll found it.
    pub caught_up: bool,
}

/// What a cursor binds and where it stands.
#[derive(Serialize, serde::Deserialize, PartialEq)]
struct CursorState {
    v: u32,
    /// The graph: a digest of its URI.
    g: String,
    b: String,
    /// The branch's incarnation: a branch deleted and made again is
    /// another branch.
    i: u64,
    /// A digest of the filter.
    f: String,
    /// The last commit delivered; none before the branch's first.
    at: Option<String>,
}

fn digest(text: &str) -> String {
    let d = Sha256::digest(text.as_bytes());
    d[..8].iter().map(|b| format!("{b:02x}")).collect()
}

fn encode(state: &CursorState) -> String {
    let body = serde_json::to_vec(state).expect("a cursor serialises");
    let body = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(body);
    format!("{body}.{}", digest(&body))
}

fn decode(cursor: &str) -> Result<CursorState> {
    let bad = |why: &str| OmniError::CursorRejected {
        reason: format!("{why} (a cursor is given back exactly as a poll printed it)"),
    };
    let (body, sum) = cursor
        .rsplit_once('.')
        .ok_or_else(|| bad("it is not a cursor"))?;
    if digest(body) != sum {
        return Err(bad("its checksum does not match: it was changed or cut"));
    }
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(body)
        .map_err(|_| bad("it does not decode"))?;
    let state: CursorState =
        serde_json::from_slice(&bytes).map_err(|_| bad("it does not decode"))?;
    if state.v != CURSOR_VERSION {
        return Err(bad(&format!(
            "it is of format {}, not {CURSOR_VERSION}",
            state.v
        )));
    }
    Ok(state)
}

/// The request's filter, checked against the schema.
struct Filter {
    types: Vec<String>,
    kind: Option<String>,
    ops: Vec<String>,
}

impl Filter {
    fn of(req: &ChangeRequest, catalog: &Catalog) -> Result<Self> {
        export::check_types(catalog, &req.types)?;
        if let Some(k) = &req.kind
            && k != "node"
            && k != "edge"
        {
            return Err(OmniError::BadRequest(format!(
                "kind {k:?}: give node or edge"
            )));
        }
        for op in &req.ops {
            if !["insert", "update", "delete"].contains(&op.as_str()) {
                return Err(OmniError::BadRequest(format!(
                    "op {op:?}: give insert, update or delete"
                )));
            }
        }
        let (mut types, mut ops) = (req.types.clone(), req.ops.clone());
        types.sort();
        types.dedup();
        ops.sort();
        ops.dedup();
        Ok(Self {
            types,
            kind: req.kind.clone(),
            ops,
        })
    }

    fn digest(&self) -> String {
        digest(&format!("{:?}|{:?}|{:?}", self.types, self.kind, self.ops))
    }

    fn wants_type(&self, def: &TypeDef) -> bool {
        let kind = if def.is_edge() { "edge" } else { "node" };
        (self.types.is_empty() || self.types.contains(&def.name))
            && self.kind.as_deref().is_none_or(|k| k == kind)
    }

    fn wants_op(&self, op: &str) -> bool {
        self.ops.is_empty() || self.ops.iter().any(|o| o == op)
    }
}

/// A row as a change's image: its properties under `data` (Blob values
/// are not carried: read them at the commit), and an edge's endpoints.
fn image(def: &TypeDef, batch: &arrow_array::RecordBatch, row: usize) -> Result<Value> {
    let column = |name: &str| {
        batch.column_by_name(name).ok_or_else(|| {
            OmniError::Storage(format!("{} has no column {name} at this version", def.name))
        })
    };
    let mut data = Map::new();
    for p in def.properties.iter().filter(|p| p.ty != PropType::Blob) {
        let v = export::cell_json(column(&p.name)?, row)?;
        if !v.is_null() {
            data.insert(p.name.clone(), v);
        }
    }
    Ok(match def.is_edge() {
        true => json!({
            "from": export::cell_json(column(SRC)?, row)?,
            "to": export::cell_json(column(DST)?, row)?,
            "data": data,
        }),
        false => json!({ "data": data }),
    })
}

/// What one commit changed, as the filter asks; a commit whose state (or
/// its parent's) a cleanup removed is the feed's gap.
async fn block(
    g: &GraphStorage,
    rec: &CommitRecord,
    filter: &Filter,
    cursor: String,
) -> Result<ChangeBlock> {
    let gap = || OmniError::ChangeFeedGap {
        first_unreadable_commit_id: rec.id.clone(),
    };
    if rec.expired {
        return Err(gap());
    }
    let wanted = |def: &TypeDef| filter.wants_type(def);
    let delta = match commit_delta(g, rec, &wanted).await {
        Err(OmniError::VersionExpired { .. }) => return Err(gap()),
        other => other?,
    };
    let mut schema = None;
    let mut changes = Vec::new();
    match delta {
        CommitDelta::Root => {}
        CommitDelta::Schema { from, to } => schema = Some(json!({ "from": from, "to": to })),
        CommitDelta::Tables(tables) => {
            for TableDelta { def, side } in tables {
                let kind = if def.is_edge() { "edge" } else { "node" };
                for (id, op) in side.entity_changes() {
                    if !filter.wants_op(op) {
                        continue;
                    }
                    let at = |m: &std::collections::HashMap<_, _>| -> Result<Option<Value>> {
                        match m.get(&id) {
                            Some(&((b, r), _)) => Ok(Some(image(&def, &side.batches[b], r)?)),
                            None => Ok(None),
                        }
                    };
                    let (before, after) = match op {
                        "insert" => (None, at(&side.arrived)?),
                        "delete" => (at(&side.left)?, None),
                        _ => (at(&side.left)?, at(&side.arrived)?),
                    };
                    changes.push(FeedChange {
                        kind,
                        type_name: def.name.clone(),
                        id,
                        op,
                        before,
                        after,
                    });
                }
            }
        }
    }
    Ok(ChangeBlock {
        graph_commit_id: rec.id.clone(),
        parent_commit_id: rec.parents.first().cloned(),
        merged_parent_commit_id: rec.parents.get(1).cloned(),
        branch: rec.branch.clone(),
        actor: rec.actor.clone(),
        authored_at: rec.timestamp.clone(),
        commit_kind: rec.kind.clone(),
        schema,
        changes,
        cursor,
    })
}

/// A copy of a branch at one head, and the cursor that resumes the feed
/// right after that head.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Baseline {
    pub snapshot_commit_id: String,
    pub cursor: String,
    /// The export's lines.
    #[serde(skip)]
    pub lines: usize,
}

impl Omnigraph {
    /// Write `req.branch` as it is at one head (the load format, the types
    /// its filter keeps) to `out`, and return the cursor that resumes the
    /// feed right after that head, under that filter: a consumer that
    /// lost its place (a gap) starts again from here.
    pub async fn changes_baseline(
        &self,
        req: &ChangeRequest,
        out: &mut (dyn std::io::Write + Send),
    ) -> Result<Baseline> {
        let (snap, only, mut b) = self.baseline_head(req).await?;
        b.lines = self.export_snapshot(&snap, only.as_deref(), out).await?;
        Ok(b)
    }

    /// A baseline's head, checked before anything is written: the snapshot
    /// to export, the types it writes (none: all) and its cursor.
    pub async fn baseline_head(
        &self,
        req: &ChangeRequest,
    ) -> Result<(Snapshot, Option<Vec<String>>, Baseline)> {
        self.authorize(Action::Export, Some(req.branch.as_str()), None)?;
        let snap = self.resolve(&Target::Branch(req.branch.clone())).await?;
        let filter = Filter::of(req, snap.catalog())?;
        let only: Option<Vec<String>> =
            (!filter.types.is_empty() || filter.kind.is_some()).then(|| {
                snap.catalog()
                    .types
                    .iter()
                    .filter(|t| filter.wants_type(t))
                    .map(|t| t.name.clone())
                    .collect()
            });
        let head = snap.record.head.clone();
        let state = self.cursor_state(req, snap.record.incarnation, &filter, Some(head.clone()));
        let b = Baseline {
            snapshot_commit_id: head,
            cursor: encode(&state),
            lines: 0,
        };
        Ok((snap, only, b))
    }

    fn cursor_state(
        &self,
        req: &ChangeRequest,
        incarnation: u64,
        filter: &Filter,
        at: Option<String>,
    ) -> CursorState {
        CursorState {
            v: CURSOR_VERSION,
            g: digest(self.inner.graph.store.uri()),
            b: req.branch.clone(),
            i: incarnation,
            f: filter.digest(),
            at,
        }
    }

    /// One page of `req.branch`'s change feed: the commits after the
    /// cursor (or the start), oldest first, each whole.
    pub async fn changes(&self, req: &ChangeRequest) -> Result<ChangePage> {
        self.authorize(Action::Read, Some(req.branch.as_str()), None)?;
        let g = &self.inner.graph;
        let snap = self.resolve(&Target::Branch(req.branch.clone())).await?;
        let rec = &snap.record;
        let filter = Filter::of(req, snap.catalog())?;
        let state = |at: Option<String>| self.cursor_state(req, rec.incarnation, &filter, at);
        let after = match (&req.cursor, &req.start) {
            (Some(c), _) => {
                let got = decode(c)?;
                let want = state(got.at.clone());
                let differs = [
                    (got.g != want.g, "another graph".to_string()),
                    (
                        got.b != want.b,
                        format!("branch '{}', not '{}'", got.b, want.b),
                    ),
                    (
                        got.i != want.i,
                        format!(
                            "an earlier branch '{}' (deleted and made again since)",
                            got.b
                        ),
                    ),
                    (
                        got.f != want.f,
                        "another filter (types, kind, ops)".to_string(),
                    ),
                ];
                if let Some((_, what)) = differs.iter().find(|(d, _)| *d) {
                    return Err(OmniError::CursorRejected {
                        reason: format!("the cursor is of {what}"),
                    });
                }
                got.at
            }
            (None, Start::Now) => Some(rec.head.clone()),
            (None, Start::Beginning) => None,
            (None, Start::After(c)) => Some(c.clone()),
        };
        // The first-parent history from the head back to where the
        // consumer stands, then oldest first.
        let mut chain = Vec::new();
        let mut next = Some(rec.head.clone());
        while let Some(id) = next {
            if after.as_ref() == Some(&id) {
                break;
            }
            let r =
                g.manifests.commit(&id).await?.ok_or_else(|| {
                    OmniError::Storage(format!("commit {id} is missing its record"))
                })?;
            next = r.parents.first().cloned();
            chain.push(r);
            if next.is_none()
                && let Some(a) = &after
            {
                return Err(OmniError::CursorRejected {
                    reason: format!(
                        "commit {a} is not on branch '{}''s first-parent history",
                        req.branch
                    ),
                });
            }
        }
        chain.reverse();
        let limit = req.limit.unwrap_or(DEFAULT_PAGE_COMMITS).max(1);
        let take = chain.len().min(limit);
        let mut blocks = Vec::with_capacity(take);
        for r in &chain[..take] {
            blocks.push(block(g, r, &filter, encode(&state(Some(r.id.clone())))).await?);
        }
        let cursor = match blocks.last() {
            Some(b) => b.cursor.clone(),
            None => encode(&state(after)),
        };
        Ok(ChangePage {
            blocks,
            cursor,
            caught_up: take == chain.len(),
        })
    }

    /// Follow `req.branch`'s feed: each block as it lands, oldest first,
    /// from the request's cursor (or start, taken now: a `now` start
    /// follows what lands after this call), looking again every `every`
    /// once caught up. A bad request fails here; later, an error (a gap)
    /// is the stream's last item. Each block's `cursor` resumes after it.
    pub async fn watch(
        &self,
        mut req: ChangeRequest,
        every: std::time::Duration,
    ) -> Result<impl futures::Stream<Item = Result<ChangeBlock>> + Send + 'static> {
        let first = self.changes(&req).await?;
        req.cursor = Some(first.cursor);
        let ready: std::collections::VecDeque<ChangeBlock> = first.blocks.into();
        let state = (self.clone(), req, ready, false);
        Ok(futures::stream::unfold(
            state,
            move |(g, mut req, mut ready, failed)| async move {
                if failed {
                    return None;
                }
                loop {
                    if let Some(b) = ready.pop_front() {
                        return Some((Ok(b), (g, req, ready, false)));
                    }
                    match g.changes(&req).await {
                        Err(e) => return Some((Err(e), (g, req, ready, true))),
                        Ok(page) => {
                            req.cursor = Some(page.cursor);
                            ready.extend(page.blocks);
                            if ready.is_empty() && page.caught_up {
                                tokio::time::sleep(every).await;
                            }
                        }
                    }
                }
            },
        ))
    }
}
