//! The policy's check at the head of each verb: the handle's actor, the
//! action and the branches the call names, decided before any gate or
//! I/O of a write, so a denied call changes nothing. No policy, no check.

use std::sync::atomic::{AtomicU64, Ordering};

use super::*;
use crate::policy::Call;

/// Calls refused, per action.
#[derive(Default)]
pub(super) struct Denials([AtomicU64; Action::ALL.len()]);

impl Omnigraph {
    /// The actor this handle acts for: the one it acts as, else the one it
    /// was opened for.
    pub fn actor(&self) -> Option<&str> {
        self.actor.as_deref().or(self.inner.actor.as_deref())
    }

    /// The policy in force, if any.
    pub fn policy(&self) -> Option<Arc<Policy>> {
        self.inner.policy.read().clone()
    }

    /// Put `policy` in force for every call from now on (on every handle
    /// that shares this one's graph): a server's reload.
    pub fn set_policy(&self, policy: Option<Arc<Policy>>) {
        *self.inner.policy.write() = policy;
    }

    /// Whether the policy lets this handle's actor do `action` on `branch`
    /// (the branch it reads or writes) and `target` (the branch it
    /// changes): `PolicyDenied` if not. Every verb asks this first; a
    /// binding may ask ahead. With no policy, nothing is checked.
    pub fn authorize(
        &self,
        action: Action,
        branch: Option<&str>,
        target: Option<&str>,
    ) -> Result<()> {
        let Some(policy) = self.inner.policy.read().clone() else {
            return Ok(());
        };
        let checked = policy.check(&Call {
            actor: self.actor(),
            action,
            branch,
            target_branch: target,
        });
        if checked.is_err() {
            self.inner.denials.0[action.index()].fetch_add(1, Ordering::Relaxed);
        }
        checked
    }

    /// The calls the policy refused so far, by action.
    pub fn denials(&self) -> Vec<(Action, u64)> {
        Action::ALL
            .iter()
            .zip(&self.inner.denials.0)
            .map(|(a, n)| (*a, n.load(Ordering::Relaxed)))
            .collect()
    }

    /// `authorize` for a read of `target`: its branch, and for a commit, the
    /// branch it was made on.
    pub(crate) async fn allow_read(&self, action: Action, target: &Target) -> Result<()> {
        if self.inner.policy.read().is_none() {
            return Ok(());
        }
        match target {
            Target::Branch(b) | Target::Version { branch: b, .. } => {
                self.authorize(action, Some(b.as_str()), None)
            }
            Target::Commit(id) => {
                let branch = match self.inner.graph.manifests.commit(id).await? {
                    Some(rec) => rec.branch,
                    None => return Err(OmniError::NotFound(format!("commit {id}"))),
                };
                self.authorize(action, Some(branch.as_str()), None)
            }
        }
    }
}
