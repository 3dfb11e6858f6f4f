//! Branches and history: create, list, delete, merge, and the commits
//! and changes a branch's history holds.

use super::*;

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct BranchInfo {
    pub name: String,
    pub head: String,
    pub parent: Option<String>,
    /// Graph manifest version at which the branch last changed.
    pub updated_at: u64,
}

impl Omnigraph {
    pub async fn branch_create(&self, name: &str, from: &str) -> Result<BranchInfo> {
        self.authorize(Action::BranchCreate, Some(from), Some(name))?;
        let latest = self.inner.graph.manifests.refresh().await?;
        validate_branch_name(name, latest.branches.keys())?;
        if !latest.branches.contains_key(from) {
            return Err(OmniError::NotFound(format!("branch '{from}'")));
        }
        self.run(
            OpKind::CreateBranch {
                name: name.to_string(),
                from: from.to_string(),
            },
            "create_branch",
            None,
        )
        .await?;
        self.branches()
            .await?
            .into_iter()
            .find(|b| b.name == name)
            .ok_or_else(|| OmniError::NotFound(format!("branch '{name}'")))
    }

    pub async fn branch_list(&self) -> Result<Vec<BranchInfo>> {
        self.authorize(Action::Read, None, None)?;
        self.branches().await
    }

    async fn branches(&self) -> Result<Vec<BranchInfo>> {
        let latest = self.inner.graph.manifests.refresh().await?;
        Ok(latest
            .branches
            .iter()
            .map(|(name, r)| BranchInfo {
                name: name.clone(),
                head: r.head.clone(),
                parent: r.parent.clone(),
                updated_at: r.updated_at,
            })
            .collect())
    }

    pub async fn branch_delete(&self, name: &str) -> Result<()> {
        self.authorize(Action::BranchDelete, None, Some(name))?;
        if name == MAIN {
            return Err(OmniError::BadRequest(
                "the main branch cannot be deleted".into(),
            ));
        }
        let latest = self.inner.graph.manifests.refresh().await?;
        if !latest.branches.contains_key(name) {
            return Err(OmniError::NotFound(format!("branch '{name}'")));
        }
        self.run(
            OpKind::DeleteBranch {
                name: name.to_string(),
            },
            "delete_branch",
            None,
        )
        .await?;
        Ok(())
    }

    /// Merge branch `source` into `target` as one write: nothing to do
    /// (`UpToDate`), the target becomes the source (`FastForward`), or a
    /// three-way merge commit (`Merged`). The source is pinned at its head
    /// now; a later advance of it is not merged. Any conflict writes nothing
    /// and is `MergeConflicts`, listing them all.
    pub async fn merge(&self, source: &str, target: &str) -> Result<MergeOutcome> {
        self.authorize(Action::BranchMerge, Some(source), Some(target))?;
        self.writes("merge")?;
        if source == target {
            return Err(OmniError::BadRequest(format!(
                "branch '{source}' cannot be merged into itself"
            )));
        }
        let latest = self.inner.graph.manifests.refresh().await?;
        for b in [source, target] {
            if !latest.branches.contains_key(b) {
                return Err(OmniError::NotFound(format!("branch '{b}'")));
            }
        }
        // The source as the manifest just read has it (no second read).
        let pinned = self
            .resolve(&Target::Version {
                version: latest.version,
                branch: source.to_string(),
            })
            .await?;
        let source_head = pinned.record.head.clone();
        let ran = self
            .run(
                OpKind::Write {
                    branch: target.to_string(),
                },
                "merge",
                Some(Arc::new(MergeWork { source: pinned })),
            )
            .await;
        match ran {
            Err(OmniError::AlreadyCurrent) => {
                let snap = self.resolve(&Target::Branch(target.to_string())).await?;
                Ok(MergeOutcome::UpToDate {
                    commit: snap.record.head,
                })
            }
            Err(e) => Err(e),
            Ok((commit, _, summary)) => {
                if summary["fast_forward"].as_bool() == Some(true) {
                    Ok(MergeOutcome::FastForward {
                        commit: source_head,
                    })
                } else {
                    Ok(MergeOutcome::Merged {
                        commit: commit.unwrap_or_default(),
                    })
                }
            }
        }
    }

    /// One commit's record (`NotFound` for an id no published version carries).
    pub async fn commit(&self, id: &str) -> Result<CommitRecord> {
        let rec = self
            .inner
            .graph
            .manifests
            .commit(id)
            .await?
            .ok_or_else(|| OmniError::NotFound(format!("commit {id}")))?;
        self.authorize(Action::Read, Some(rec.branch.as_str()), None)?;
        Ok(rec)
    }

    /// The entities commit `id` inserted, updated or deleted on its branch
    /// (a merge commit: on the target), optionally of one type only.
    pub async fn commit_changes(
        &self,
        id: &str,
        type_name: Option<&str>,
    ) -> Result<Vec<EntityChange>> {
        let rec = self.commit(id).await?;
        merge::changes::commit_changes(&self.inner.graph, &rec, type_name).await
    }

    /// The commits reachable from a branch head, newest first.
    pub async fn commits(&self, branch: &str, limit: Option<usize>) -> Result<Vec<CommitRecord>> {
        self.authorize(Action::Read, Some(branch), None)?;
        let snap = self.resolve(&Target::Branch(branch.to_string())).await?;
        let mut out = Vec::new();
        let mut next = Some(snap.record.head.clone());
        while let Some(id) = next {
            if limit.is_some_and(|l| out.len() >= l) {
                break;
            }
            let rec = self
                .inner
                .graph
                .manifests
                .commit(&id)
                .await?
                .ok_or_else(|| OmniError::Storage(format!("commit {id} is missing its record")))?;
            next = rec.parents.first().cloned();
            out.push(rec);
        }
        Ok(out)
    }
}
