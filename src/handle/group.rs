//! Group commit: mutations and small loads on one branch (by one actor)
//! that arrive while this handle is committing on that branch wait in a
//! queue; the next commit takes every one waiting (of one kind) and
//! commits them together, one table commit per table and one publish, each
//! caller keeping its own answer (src/write/group.rs judges the members).
//! A lone writer commits at once.

use std::collections::{HashMap, VecDeque};

use tokio::sync::oneshot;

use super::*;
use crate::write::group::{GroupWork, LoadGroup, Member, Verdict};

/// At most this many writes share one commit.
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

/// One queued write.
pub(super) enum Job {
    Mutation(Member),
    /// A load (append or merge) parsed against schema `schema`.
    Load {
        schema: String,
        work: Arc<LoadWork>,
    },
}

/// The kinds of write that share a commit only with their own kind.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Writes,
    Deletes,
    Loads(LoadMode),
}

impl Job {
    fn kind(&self) -> Kind {
        match self {
            // A mutation either writes or deletes, and a table's staged
            // transaction does one or the other.
            Job::Mutation(m) if m.work.deletes() => Kind::Deletes,
            Job::Mutation(_) => Kind::Writes,
            Job::Load { work, .. } => Kind::Loads(work.mode()),
        }
    }
}

type Reply = oneshot::Sender<Result<Committed>>;

/// Answers decided and not yet sent.
type Answers = Vec<(Reply, Result<Committed>)>;

struct Waiter {
    job: Job,
    requeued: u32,
    reply: Reply,
}

#[derive(Default)]
struct Queue {
    /// A task is committing from this queue.
    running: bool,
    /// Commits wait (see [`Omnigraph::hold_commits`]).
    held: bool,
    waiting: VecDeque<Waiter>,
}

/// A queue's key: the branch, and the actor its commits record.
type QueueKey = (String, Option<Arc<str>>);

/// The queues of this handle's writers, per branch and actor.
#[derive(Default)]
pub(super) struct Groups {
    queues: parking_lot::Mutex<HashMap<QueueKey, Queue>>,
}

/// Members to commit alone next.
fn alone(group: Vec<Waiter>) -> Vec<Waiter> {
    group
        .into_iter()
        .map(|mut w| {
            w.requeued = MAX_REQUEUE;
            w
        })
        .collect()
}

/// A group whose write failed as a whole with `e`: what goes back in the
/// queue. Nothing written: when the branch moved (under a strict member,
/// or too often) the group is tried again, at most a few times; any other
/// refusal of the whole set (a limit of its size, an external blob, a
/// schema a member was not checked against) has each member try alone. A
/// failure after an effect is every member's answer, as it would be a
/// lone writer's.
fn failed_whole(group: Vec<Waiter>, e: &OmniError, answers: &mut Answers) -> Vec<Waiter> {
    // Only a write refused before any table commit can be tried again.
    if e.is_storage_failure() {
        for w in group {
            answers.push((w.reply, Err(for_each(e))));
        }
        return Vec::new();
    }
    match e {
        OmniError::ReadSetChanged | OmniError::Contended { .. } => group,
        _ => alone(group),
    }
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

/// See [`Omnigraph::hold_commits`].
#[doc(hidden)]
pub struct CommitHold {
    g: Omnigraph,
    key: QueueKey,
}

impl Drop for CommitHold {
    fn drop(&mut self) {
        let mut queues = self.g.inner.groups.queues.lock();
        let Some(q) = queues.get_mut(&self.key) else {
            return;
        };
        q.held = false;
        if q.running {
            return;
        }
        if q.waiting.is_empty() {
            queues.remove(&self.key);
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            q.running = true;
            let (this, key) = (self.g.clone(), self.key.clone());
            rt.spawn(async move { this.drain(key).await });
        }
    }
}

impl Omnigraph {
    /// Tests only: writes to `branch` by this handle's actor queue (a
    /// commit in flight finishes) until the hold is dropped, so a test
    /// can gather a group deterministically.
    #[doc(hidden)]
    pub fn hold_commits(&self, branch: &str) -> CommitHold {
        let key = (branch.to_string(), self.actor.clone());
        self.inner
            .groups
            .queues
            .lock()
            .entry(key.clone())
            .or_default()
            .held = true;
        CommitHold {
            g: self.clone(),
            key,
        }
    }

    /// Tests only: how many writes wait in `branch`'s queue.
    #[doc(hidden)]
    pub fn queued(&self, branch: &str) -> usize {
        let key = (branch.to_string(), self.actor.clone());
        let queues = self.inner.groups.queues.lock();
        queues.get(&key).map_or(0, |q| q.waiting.len())
    }

    /// Commit `job` on `branch` with whichever writes queue beside it.
    pub(super) async fn commit_grouped(&self, branch: &str, job: Job) -> Result<Committed> {
        let (reply, answer) = oneshot::channel();
        let key = (branch.to_string(), self.actor.clone());
        let start = {
            let mut queues = self.inner.groups.queues.lock();
            let q = queues.entry(key.clone()).or_default();
            q.waiting.push_back(Waiter {
                job,
                requeued: 0,
                reply,
            });
            let start = !q.held && !q.running;
            q.running |= start;
            start
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
                if q.held {
                    q.running = false;
                    return;
                }
                let Some(first) = q.waiting.front() else {
                    queues.remove(&key);
                    return;
                };
                let kind = first.job.kind();
                let n = match first.requeued >= MAX_REQUEUE {
                    true => 1,
                    false => q
                        .waiting
                        .iter()
                        .take(MAX_GROUP)
                        .take_while(|w| w.job.kind() == kind && w.requeued < MAX_REQUEUE)
                        .count(),
                };
                q.waiting.drain(..n).collect()
            };
            let mut answers = Answers::new();
            let version = self.commit_group(&branch, group, &mut answers).await;
            // Fragmented tables are compacted before the answers go out,
            // as a lone writer's were: a process that exits after its last
            // write still leaves its tables compact.
            if let Some(version) = version {
                self.compact_if_fragmented(&branch, version).await;
            }
            for (reply, answer) in answers {
                let _ = reply.send(answer);
            }
        }
    }

    /// Commit one group and answer its members (or put some back in the
    /// queue); the graph version it published, if it did.
    async fn commit_group(
        &self,
        branch: &str,
        mut group: Vec<Waiter>,
        answers: &mut Answers,
    ) -> Option<u64> {
        if group.len() == 1 {
            let w = group.pop().expect("one");
            return self.commit_alone(branch, w, answers).await;
        }
        if let Kind::Loads(_) = group[0].job.kind() {
            return self.commit_loads(branch, group, answers).await;
        }
        let members = group
            .iter()
            .map(|w| match &w.job {
                Job::Mutation(m) => m.clone(),
                Job::Load { .. } => unreachable!("a group is of one kind"),
            })
            .collect();
        let work = Arc::new(GroupWork::new(members));
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
                    answers.push((w.reply, answer));
                }
            }
            // Every member refused: each has its own error.
            Err(_) if judged && verdicts.iter().all(|v| !matches!(v, Verdict::Kept { .. })) => {
                for (w, v) in group.into_iter().zip(verdicts) {
                    match v {
                        Verdict::Refused(e) => answers.push((w.reply, Err(e))),
                        _ => back.push(w),
                    }
                }
            }
            Err(e) => back = failed_whole(group, &e, answers),
            Ok(_) => unreachable!("a committed group's prepare judged every member"),
        }
        self.requeue(branch, back);
        version
    }

    /// Commit a group of loads as one load of their rows; when they cannot
    /// be one (an id given twice, a limit), each commits alone.
    async fn commit_loads(
        &self,
        branch: &str,
        group: Vec<Waiter>,
        answers: &mut Answers,
    ) -> Option<u64> {
        let members: Vec<(String, Arc<LoadWork>)> = group
            .iter()
            .map(|w| match &w.job {
                Job::Load { schema, work } => (schema.clone(), work.clone()),
                Job::Mutation(_) => unreachable!("a group is of one kind"),
            })
            .collect();
        let Some(work) = LoadGroup::new(&members) else {
            self.requeue(branch, alone(group));
            return None;
        };
        let kind = OpKind::Write {
            branch: branch.to_string(),
        };
        match self.run(kind, "load", Some(Arc::new(work))).await {
            Ok((commit, version, _)) => {
                for (place, w) in group.into_iter().enumerate() {
                    let answer = Ok(Committed {
                        commit: commit.clone(),
                        version,
                        summary: serde_json::Value::Null,
                        member: Some(place as u32),
                    });
                    answers.push((w.reply, answer));
                }
                Some(version)
            }
            Err(e) => {
                let back = failed_whole(group, &e, answers);
                self.requeue(branch, back);
                None
            }
        }
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
    async fn commit_alone(&self, branch: &str, w: Waiter, answers: &mut Answers) -> Option<u64> {
        let outcome = match &w.job {
            Job::Mutation(m) => self.commit_one(branch, m).await,
            Job::Load { schema, work } => {
                self.commit_pinned(branch, "load", schema, work.clone())
                    .await
            }
        };
        let version = outcome.as_ref().ok().map(|c| c.version);
        answers.push((w.reply, outcome));
        version
    }

    async fn commit_one(&self, branch: &str, member: &Member) -> Result<Committed> {
        let work = member.work.clone();
        self.commit_pinned(branch, "mutation", &member.schema, work)
            .await
    }

    /// One write of its own, checked against schema `schema`.
    async fn commit_pinned(
        &self,
        branch: &str,
        label: &str,
        schema: &str,
        work: Arc<dyn PrepareWork>,
    ) -> Result<Committed> {
        let work = Arc::new(Pinned {
            schema: schema.to_string(),
            work,
        });
        let kind = OpKind::Write {
            branch: branch.to_string(),
        };
        let (commit, version, summary) = self.run(kind, label, Some(work)).await?;
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
