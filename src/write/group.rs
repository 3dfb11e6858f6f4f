//! A group commit's prepare: mutations that queued on one branch, applied
//! in the order they arrived to one change set and staged as one
//! transaction per table. Each member is judged as if it committed alone
//! right after the members before it: one that fails (a key conflict, an
//! invalid value, a broken `@unique` or `@card`) is left out with its own
//! error and the others commit. Small loads (append or merge) queued on a
//! branch commit together too, as one load of all their rows.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use parking_lot::Mutex;

use super::load::LoadWork;
use super::mutate::{self, MutationWork, Staging, validate};
use crate::error::{OmniError, Result};
use crate::storage::substrate::{BoxFut, PrepareCx, PrepareWork, Prepared};

/// One mutation of a group, compiled against schema `schema`.
#[derive(Clone)]
pub struct Member {
    pub schema: String,
    pub work: Arc<MutationWork>,
}

/// What the last prepare made of one member.
pub enum Verdict {
    /// In the commit, as member `place` of its record's `members`.
    Kept {
        place: u32,
        summary: serde_json::Value,
    },
    /// Left out, with the error it would have had alone.
    Refused(OmniError),
    /// Left out for a later group: it would have taken the change set
    /// over a per-commit limit that it alone does not reach.
    Deferred,
}

pub struct GroupWork {
    members: Vec<Member>,
    /// The verdicts of the newest prepare (the protocol may prepare again
    /// when the branch moved; the last one is what commits).
    verdicts: Mutex<Vec<Verdict>>,
}

/// The verdict on a member whose statements or checks failed with `e`;
/// `alone` says whether nothing was kept before it. Storage failures fail
/// the whole prepare.
fn refusal(e: OmniError, alone: bool) -> Result<Verdict> {
    match e {
        OmniError::ResourceLimitExceeded { .. } if !alone => Ok(Verdict::Deferred),
        e if !e.is_storage_failure() => Ok(Verdict::Refused(e)),
        e => Err(e),
    }
}

/// One kept member's ids, by type, and its record in the commit.
struct Kept {
    index: usize,
    ids: BTreeMap<String, BTreeSet<String>>,
}

impl GroupWork {
    pub fn new(members: Vec<Member>) -> Self {
        Self {
            members,
            verdicts: Mutex::new(Vec::new()),
        }
    }

    /// The verdicts of the prepare that ran last (empty when none ran).
    pub fn take_verdicts(&self) -> Vec<Verdict> {
        std::mem::take(&mut *self.verdicts.lock())
    }

    /// Run each member in order into `s`; with `check`, validate the change
    /// set after each. Returns the members kept; `verdicts` gets the others.
    async fn apply(
        &self,
        s: &mut Staging<'_>,
        which: impl Iterator<Item = usize>,
        check: bool,
        verdicts: &mut [Option<Verdict>],
    ) -> Result<Vec<Kept>> {
        let mut kept = Vec::new();
        for i in which {
            let before = s.changes.clone();
            s.take_touched();
            let work = &self.members[i].work;
            let ran = async {
                work.run_stmts(s).await?;
                match check {
                    true => validate(s).await,
                    false => Ok(()),
                }
            }
            .await;
            match ran {
                Ok(()) => kept.push(Kept {
                    index: i,
                    ids: s.take_touched(),
                }),
                Err(e) => {
                    s.changes = before;
                    verdicts[i] = Some(refusal(e, kept.is_empty())?);
                }
            }
        }
        Ok(kept)
    }
}

impl PrepareWork for GroupWork {
    fn prepare<'a>(&'a self, cx: &'a mut PrepareCx) -> BoxFut<'a, Result<Prepared>> {
        Box::pin(async move {
            self.verdicts.lock().clear();
            let mut verdicts: Vec<Option<Verdict>> = self.members.iter().map(|_| None).collect();
            let accepted = cx.snapshot.schema.id.clone();
            for (i, m) in self.members.iter().enumerate() {
                if m.schema != accepted {
                    verdicts[i] = Some(Verdict::Refused(OmniError::SchemaChanged {
                        compiled: m.schema.clone(),
                        accepted: accepted.clone(),
                    }));
                }
            }
            let pending: Vec<usize> = (0..self.members.len())
                .filter(|i| verdicts[*i].is_none())
                .collect();
            let mut s = Staging::new(cx);
            let mut kept = self
                .apply(&mut s, pending.into_iter(), false, &mut verdicts)
                .await?;
            // The whole set is checked once; only when that fails is each
            // member checked with the ones before it, to find who broke it.
            if !kept.is_empty()
                && let Err(e) = validate(&mut s).await
            {
                if e.is_storage_failure() {
                    return Err(e);
                }
                s = Staging::new(cx);
                let again: Vec<usize> = kept.iter().map(|k| k.index).collect();
                kept = self
                    .apply(&mut s, again.into_iter(), true, &mut verdicts)
                    .await?;
            }
            let (changes, rules) = s.into_parts();
            let mut members = Vec::new();
            let mut nodes_all = BTreeMap::new();
            let mut edges_all = BTreeMap::new();
            if !kept.is_empty() {
                (nodes_all, edges_all) = mutate::stage_changes(cx, &changes, &rules).await?;
            }
            for (place, k) in kept.iter().enumerate() {
                let work = &self.members[k.index].work;
                let (mut nodes, mut edges) = (BTreeMap::new(), BTreeMap::new());
                for (ty, ids) in &k.ids {
                    match cx.catalog().get(ty).is_some_and(|t| t.is_edge()) {
                        true => edges.insert(ty.clone(), ids.len()),
                        false => nodes.insert(ty.clone(), ids.len()),
                    };
                }
                let summary =
                    serde_json::json!({ "mutation": work.name(), "nodes": nodes, "edges": edges });
                members.push(serde_json::json!({
                    "mutation": work.name(),
                    "nodes": nodes,
                    "edges": edges,
                    "ids": k.ids,
                }));
                verdicts[k.index] = Some(Verdict::Kept {
                    place: place as u32,
                    summary,
                });
            }
            let strict = kept.iter().any(|k| self.members[k.index].work.strict());
            *self.verdicts.lock() = verdicts
                .into_iter()
                .map(|v| v.expect("every member judged"))
                .collect();
            if kept.is_empty() {
                return Err(OmniError::BadRequest(
                    "every mutation of the group was refused".into(),
                ));
            }
            Ok(Prepared {
                class: mutate::class_of(strict),
                summary: serde_json::json!({
                    "mutations": members.len(),
                    "nodes": nodes_all,
                    "edges": edges_all,
                    "members": members,
                }),
                merge: None,
                schema_change: None,
            })
        })
    }
}

/// Loads that queued on one branch, committed as one load of their rows
/// in order. A load cannot be left out alone: when the whole fails, each
/// member commits by itself (src/handle/group.rs).
pub struct LoadGroup {
    /// The schema each member was parsed against.
    schemas: Vec<String>,
    whole: LoadWork,
    /// Each member's record in the commit.
    members: Vec<serde_json::Value>,
}

impl LoadGroup {
    /// `None` when the members' rows together break a rule of one load
    /// (a limit, an id given twice): each then commits alone.
    pub fn new(members: &[(String, Arc<LoadWork>)]) -> Option<Self> {
        let works: Vec<&LoadWork> = members.iter().map(|(_, w)| w.as_ref()).collect();
        let whole = LoadWork::combine(&works).ok()?;
        let records = members
            .iter()
            .map(|(_, w)| {
                let (nodes, edges) = w.counts();
                serde_json::json!({
                    "mutation": "load",
                    "mode": w.mode().as_str(),
                    "nodes": nodes,
                    "edges": edges,
                    "ids": w.ids(),
                })
            })
            .collect();
        Some(Self {
            schemas: members.iter().map(|(s, _)| s.clone()).collect(),
            whole,
            members: records,
        })
    }
}

impl PrepareWork for LoadGroup {
    fn prepare<'a>(&'a self, cx: &'a mut PrepareCx) -> BoxFut<'a, Result<Prepared>> {
        Box::pin(async move {
            let accepted = &cx.snapshot.schema.id;
            if let Some(stale) = self.schemas.iter().find(|s| *s != accepted) {
                return Err(OmniError::SchemaChanged {
                    compiled: stale.clone(),
                    accepted: accepted.clone(),
                });
            }
            let mut p = self.whole.prepare(cx).await?;
            p.summary["loads"] = self.members.len().into();
            p.summary["members"] = self.members.clone().into();
            Ok(p)
        })
    }
}
