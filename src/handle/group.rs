//! Group commit: mutations on one branch (by one actor) that arrive while
//! this handle is committing on that branch wait in a queue; the next
//! commit takes every one waiting and commits them together, one table
//! commit per table and one publish, each caller keeping its own answer
//! (src/write/group.rs judges the members). A lone writer commits at once.

use std::collections::{HashMap, VecDeque};

use tokio::sync::oneshot;

use super::*;
use crate::write::group::{GroupWork, Member, Verdict};

/// At most this many mutations share one commit.
pub(super) const MAX_GROUP: usize = 64;

/// How many times a member is put back in the queue (left for a later
/// group by a limit, or its group failed before writing) before it
/// commits alone.
const MAX_REQUEUE: u32 = 4;

/// One caller's share of a commit.
pub(super) struct Committed {
    pub commit: Option<String>,
    pub version: u64,
    /// The caller's own mutation's summary (`mutation`, `nodes`, `edges`).
    pub summary: serde_json::Value,
    /// Its place in its commit record's `members`, when it shared one.
    pub member: Option<u32>,
}

struct Waiter {
    member: Member,
    requeued: u32,
    reply: oneshot::Sender<Result<Committed>>,
}

#[derive(Default)]
struct Queue {
    /// A task is committing from this queue.
    running: bool,
    waiting: VecDeque<Waiter>,
}

/// A queue's key: the branch, and the actor its commits record.
type QueueKey = (String, Option<Arc<str>>);

/// The queues of this handle's writers, per branch and actor.
#[derive(Default)]
pub(super) struct Groups {
    queues: parking_lot::Mutex<HashMap<QueueKey, Queue>>,
}

/// Can a group's failure `e` be retried member by member? Only when it
/// wrote nothing: the write was refused before any table commit.
fn wrote_nothing(e: &OmniError) -> bool {
    !matches!(
        e,
        OmniError::Storage(_)
            | OmniError::Backend(_)
            | OmniError::Io(_)
            | OmniError::LeaseLost { .. }
            | OmniError::RecoveryRequired { .. }
    )
}

/// The same failure for another member of the group (storage errors are
/// not `Clone`; their text is kept).
fn for_each(e: &OmniError) -> OmniError {
    match e {
        OmniError::LeaseLost { reason } => OmniError::LeaseLost {
            reason: reason.clone(),
        },
        OmniError::RecoveryRequired { operation_id } => OmniError::RecoveryRequired {
            operation_id: operation_id.clone(),
        },
        other => OmniError::Storage(other.to_string()),
    }
}

impl Omnigraph {
    /// Commit `member` on `branch` with whichever mutations queue beside it.
    pub(super) async fn commit_grouped(&self, branch: &str, member: Member) -> Result<Committed> {
        let (reply, answer) = oneshot::channel();
        let key = (branch.to_string(), self.actor.clone());
        let start = {
            let mut queues = self.inner.groups.queues.lock();
            let q = queues.entry(key.clone()).or_default();
            q.waiting.push_back(Waiter {
                member,
                requeued: 0,
                reply,
            });
            !std::mem::replace(&mut q.running, true)
        };
        if start {
            let this = self.clone();
            tokio::spawn(async move { this.drain(key).await });
        }
        answer.await.unwrap_or_else(|_| {
            Err(OmniError::Storage(
                "the task committing this mutation's group stopped before answering".into(),
            ))
        })
    }

    /// Commit from the queue `key` until it is empty. Runs in its own task,
    /// so a caller that goes away cannot strand the others.
    async fn drain(self, key: QueueKey) {
        let branch = key.0.clone();
        loop {
            let group: Vec<Waiter> = {
                let mut queues = self.inner.groups.queues.lock();
                let q = queues.get_mut(&key).expect("a running queue stays");
                let Some(first) = q.waiting.front() else {
                    queues.remove(&key);
                    return;
                };
                // A mutation either writes or deletes; a group does one.
                let deletes = first.member.work.deletes();
                let n = match first.requeued >= MAX_REQUEUE {
                    true => 1,
                    false => q
                        .waiting
                        .iter()
                        .take(MAX_GROUP)
                        .take_while(|w| w.member.work.deletes() == deletes)
                        .count(),
                };
                q.waiting.drain(..n).collect()
            };
            if let Some(version) = self.commit_group(&branch, group).await {
                self.compact_if_fragmented(&branch, version).await;
            }
        }
    }

    /// Commit one group and answer its members (or put some back in the
    /// queue); the graph version it published, if it did.
    async fn commit_group(&self, branch: &str, mut group: Vec<Waiter>) -> Option<u64> {
        if group.len() == 1 {
            let w = group.pop().expect("one");
            return self.commit_alone(branch, w).await;
        }
        let work = Arc::new(GroupWork::new(
            group.iter().map(|w| w.member.clone()).collect(),
        ));
        let kind = OpKind::Write {
            branch: branch.to_string(),
        };
        let outcome = self.run(kind, "mutation", Some(work.clone())).await;
        let verdicts = work.take_verdicts();
        let mut back = Vec::new();
        let version = match &outcome {
            Ok((_, v, _)) => Some(*v),
            Err(_) => None,
        };
        let judged = verdicts.len() == group.len();
        match outcome {
            Ok((commit, version, _)) if judged => {
                for (w, v) in group.into_iter().zip(verdicts) {
                    let answer = match v {
                        Verdict::Kept { place, summary } => Ok(Committed {
                            commit: commit.clone(),
                            version,
                            summary,
                            member: Some(place),
                        }),
                        Verdict::Refused(e) => Err(e),
                        Verdict::Deferred => {
                            back.push(w);
                            continue;
                        }
                    };
                    let _ = w.reply.send(answer);
                }
            }
            // Every member refused: each has its own error.
            Err(_) if judged && verdicts.iter().all(|v| !matches!(v, Verdict::Kept { .. })) => {
                for (w, v) in group.into_iter().zip(verdicts) {
                    match v {
                        Verdict::Refused(e) => {
                            let _ = w.reply.send(Err(e));
                        }
                        _ => back.push(w),
                    }
                }
            }
            // Nothing written: when the branch moved (under a strict
            // member, or too often) the group is tried again, at most a
            // few times; any other refusal of the whole set (a limit of
            // its size, an external blob) has each member try alone.
            Err(e) if wrote_nothing(&e) => {
                let again = matches!(
                    e,
                    OmniError::ReadSetChanged
                        | OmniError::Contended { .. }
                        | OmniError::SchemaChanged { .. }
                );
                for mut w in group {
                    if !again {
                        w.requeued = MAX_REQUEUE;
                    }
                    back.push(w);
                }
            }
            Err(e) => {
                for w in group {
                    let _ = w.reply.send(Err(for_each(&e)));
                }
            }
            Ok(_) => unreachable!("a committed group's prepare judged every member"),
        }
        self.requeue(branch, back);
        version
    }

    /// Put members back at the head of the queue, in order; one put back
    /// too often commits alone now.
    fn requeue(&self, branch: &str, back: Vec<Waiter>) {
        let key = (branch.to_string(), self.actor.clone());
        let mut queues = self.inner.groups.queues.lock();
        let q = queues.get_mut(&key).expect("a running queue stays");
        for mut w in back.into_iter().rev() {
            w.requeued += 1;
            q.waiting.push_front(w);
        }
    }

    /// Commit one mutation as its own write (a group of one, or a member
    /// put back too often).
    async fn commit_alone(&self, branch: &str, w: Waiter) -> Option<u64> {
        let outcome = self.commit_one(branch, &w.member).await;
        let version = outcome.as_ref().ok().map(|c| c.version);
        let _ = w.reply.send(outcome);
        version
    }

    async fn commit_one(&self, branch: &str, member: &Member) -> Result<Committed> {
        let work = Arc::new(Pinned {
            schema: member.schema.clone(),
            work: member.work.clone(),
        });
        let kind = OpKind::Write {
            branch: branch.to_string(),
        };
        let (commit, version, summary) = self.run(kind, "mutation", Some(work)).await?;
        Ok(Committed {
            commit,
            version,
            summary,
            member: None,
        })
    }

    /// A conditional mutation: its own commit, outside any group (it names
    /// the head it must land on).
    pub(super) async fn commit_conditional(
        &self,
        branch: &str,
        member: Member,
    ) -> Result<Committed> {
        let done = self.commit_one(branch, &member).await?;
        self.compact_if_fragmented(branch, done.version).await;
        Ok(done)
    }
}
