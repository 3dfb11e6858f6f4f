//! The handle's data writes: loads (JSONL text, readers, Arrow tables)
//! and mutations, each one commit through the protocol.

use super::group::Job;
use super::*;
use crate::write::group::Member;

/// What a load did.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LoadReport {
    pub branch: String,
    pub branch_created: bool,
    pub mode: LoadMode,
    pub nodes: BTreeMap<String, usize>,
    pub edges: BTreeMap<String, usize>,
    pub commit: String,
    pub manifest_version: u64,
    /// The load's place among the `members` of its commit record when it
    /// shared its commit with others queued on the branch beside it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub member: Option<u32>,
}

/// How many times a mutation is checked against the accepted schema when
/// schema applies keep landing between its check and its prepare.
const MUTATION_COMPILES: u32 = 2;

impl Omnigraph {
    /// A load changes `branch`; one that makes it from `from` creates it.
    fn allow_load(&self, branch: &str, from: Option<&str>) -> Result<()> {
        self.authorize(Action::Change, Some(branch), None)?;
        match from {
            Some(f) => self.authorize(Action::BranchCreate, Some(f), Some(branch)),
            None => Ok(()),
        }
    }

    /// Load JSONL text into `branch` as one commit.
    pub async fn load(&self, branch: &str, jsonl: &str, mode: LoadMode) -> Result<LoadReport> {
        let bytes = jsonl.as_bytes().to_vec();
        self.load_from(branch, None, std::io::Cursor::new(bytes), mode, |_| {})
            .await
    }

    /// Load from any reader. With `from`, a missing `branch` is first created
    /// from that branch. `progress` hears how many input bytes were read.
    pub async fn load_from<R, P>(
        &self,
        branch: &str,
        from: Option<&str>,
        input: R,
        mode: LoadMode,
        progress: P,
    ) -> Result<LoadReport>
    where
        R: Read + Send + 'static,
        P: Fn(u64) + Send + Sync + 'static,
    {
        self.allow_load(branch, from)?;
        self.load_prepared(branch, from, move |catalog: &Catalog| {
            prepare_input(catalog, input, mode, &progress)
        })
        .await
    }

    /// Load Arrow tables (one per type, in order) into `branch` as one
    /// commit, checked by the same rules as a file's lines; an error names
    /// the table's row instead of a line.
    pub async fn load_tables<P>(
        &self,
        branch: &str,
        from: Option<&str>,
        tables: Vec<TableInput>,
        mode: LoadMode,
        progress: P,
    ) -> Result<LoadReport>
    where
        P: Fn(u64) + Send + Sync + 'static,
    {
        self.allow_load(branch, from)?;
        let rows = Rows::default();
        let seen = rows.clone();
        self.load_prepared(branch, from, move |catalog: &Catalog| {
            let parsed = arrow_input::parse(catalog, tables, &seen, &progress)?;
            Ok(Arc::new(LoadWork::new(parsed, mode)?))
        })
        .await
        .map_err(|e| rows.restate(e))
    }

    /// The load `prepare` makes from the accepted catalog (off the async
    /// threads), as one commit on `branch`; with `from`, a missing `branch`
    /// is first created from that branch.
    async fn load_prepared<F>(
        &self,
        branch: &str,
        from: Option<&str>,
        prepare: F,
    ) -> Result<LoadReport>
    where
        F: FnOnce(&Catalog) -> Result<Arc<LoadWork>> + Send + 'static,
    {
        self.writes("load")?;
        let mut branch_created = false;
        if let Some(from) = from {
            let exists = self
                .inner
                .graph
                .manifests
                .refresh()
                .await?
                .branches
                .contains_key(branch);
            if !exists {
                match self.branch_create(branch, from).await {
                    Ok(_) => branch_created = true,
                    Err(OmniError::AlreadyExists(_)) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        // The input is read once, so a schema apply between the parse and
        // the prepare fails the load (`SchemaChanged`) rather than retrying.
        let schema = self.inner.graph.current_schema().await?;
        let catalog = schema.catalog.clone();
        let work = tokio::task::spawn_blocking(move || prepare(&catalog))
            .await
            .map_err(|e| OmniError::Storage(format!("the load task failed: {e}")))??;
        let mode = work.mode();
        let (nodes, edges) = work.counts();
        let schema = schema.id.clone();
        // A small append or merge may share its commit with others queued
        // on the branch; an overwrite replaces tables and commits alone.
        let done = match mode {
            LoadMode::Overwrite => {
                let work = Arc::new(Pinned { schema, work });
                let kind = OpKind::Write {
                    branch: branch.to_string(),
                };
                let (commit, version, _) = self.run(kind, "load", Some(work)).await?;
                self.compact_if_fragmented(branch, version).await;
                group::Committed {
                    commit,
                    version,
                    summary: serde_json::Value::Null,
                    member: None,
                }
            }
            LoadMode::Append | LoadMode::Merge => {
                self.commit_grouped(branch, Job::Load { schema, work })
                    .await?
            }
        };
        Ok(LoadReport {
            branch: branch.to_string(),
            branch_created,
            mode,
            nodes,
            edges,
            commit: done.commit.unwrap_or_default(),
            manifest_version: done.version,
            member: done.member,
        })
    }

    /// Compact the branch's own tables that have grown many small fragments.
    /// The write that called this is already durable, so a failure here is
    /// only logged.
    pub(super) async fn compact_if_fragmented(&self, branch: &str, version: u64) {
        let types = match self.fragmented_tables(branch, version).await {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(branch, error = %e, "could not check fragmentation");
                return;
            }
        };
        if types.is_empty() {
            return;
        }
        tracing::info!(branch, ?types, "compacting");
        let work = Arc::new(CompactWork { types });
        if let Err(e) = self
            .run(
                OpKind::Write {
                    branch: branch.to_string(),
                },
                "compact",
                Some(work),
            )
            .await
        {
            tracing::warn!(branch, error = %e, "compaction did not run");
        }
    }

    /// The branch's own tables with many fragments at graph `version` (the
    /// one the write just published), asked without a request: a table the
    /// write changed is open already (its commit left it so), and one this
    /// process has not opened was not made more fragmented by it.
    async fn fragmented_tables(&self, branch: &str, version: u64) -> Result<Vec<String>> {
        let at = Target::Version {
            version,
            branch: branch.to_string(),
        };
        let snap = self.resolve(&at).await?;
        let mut out = Vec::new();
        for t in &snap.catalog().types {
            let r = snap.table(t)?;
            if r.lance_branch != snap.record.line(branch, &t.table_key()) {
                continue;
            }
            if let Some(table) = self.inner.graph.cached_table(r)
                && table.fragments() >= COMPACT_AT_FRAGMENTS
            {
                out.push(t.name.clone());
            }
        }
        Ok(out)
    }

    /// Run the mutation `name` from `source` on `branch` as one commit.
    pub async fn mutate(
        &self,
        branch: &str,
        source: &str,
        name: &str,
        params: &serde_json::Value,
    ) -> Result<MutationResult> {
        self.mutate_if(branch, source, name, params, None).await
    }

    /// A conditional mutation: it runs only if the branch head is still
    /// `expected_head`; otherwise `PreconditionFailed` and nothing is written
    /// (never retried internally).
    pub async fn mutate_if(
        &self,
        branch: &str,
        source: &str,
        name: &str,
        params: &serde_json::Value,
        expected_head: Option<&str>,
    ) -> Result<MutationResult> {
        self.authorize(Action::Change, Some(branch), None)?;
        self.writes("mutate")?;
        let file = parser::parse(source)?;
        let decl = check::find(&file, name)?;
        // A schema apply between the check and the prepare: check again
        // against the schema it made (once; the text is still at hand).
        let mut attempt = 0;
        let done = loop {
            attempt += 1;
            let schema = match attempt {
                1 => self.inner.graph.known_schema().await?,
                _ => self.inner.graph.current_schema().await?,
            };
            let plan = match mutation::check(&schema.catalog, decl) {
                Ok(plan) => plan,
                // The schema this process knew may be behind one another
                // process applied: the text is judged by the newest.
                Err(e) if attempt == 1 => {
                    match self.inner.graph.current_schema().await?.id == schema.id {
                        true => return Err(e),
                        false => continue,
                    }
                }
                Err(e) => return Err(e),
            };
            let values = params::bind(&plan.name, &plan.params, params)?;
            let work = Arc::new(MutationWork::new(
                plan,
                values,
                expected_head.map(str::to_string),
            ));
            let member = Member {
                schema: schema.id.clone(),
                work,
            };
            // A conditional mutation names the head it must land on: it
            // commits alone, and is never tried again.
            let done = match expected_head {
                None => self.commit_grouped(branch, Job::Mutation(member)).await,
                Some(_) => self.commit_conditional(branch, member).await,
            };
            match done {
                Err(OmniError::SchemaChanged { .. }) if attempt < MUTATION_COMPILES => continue,
                other => break other?,
            }
        };
        let (nodes, edges) = mutate::counts(&done.summary);
        Ok(MutationResult {
            branch: branch.to_string(),
            commit: done.commit.unwrap_or_default(),
            manifest_version: done.version,
            member: done.member,
            nodes,
            edges,
        })
    }
}
