//! The handle's reads: snapshots, queries (plain, explained, profiled),
//! blobs, exports and where a type's table lies.

use super::*;

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct TableInfo {
    pub name: String,
    pub kind: String,
    pub rows: usize,
    /// Lance fragments (files) holding the rows.
    pub fragments: usize,
    pub table_version: u64,
    /// The Lance branch holding this state (`null`: Lance's main line).
    pub lance_branch: Option<String>,
}

/// A table's dataset as one graph version names it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct TableLocation {
    pub uri: String,
    /// The Lance branch (`None`: Lance's main line).
    pub lance_branch: Option<String>,
    pub version: u64,
}

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct SnapshotInfo {
    pub branch: String,
    pub manifest_version: u64,
    pub head_commit: String,
    /// The identity of the schema this graph version accepts.
    pub schema_id: String,
    pub types: Vec<TableInfo>,
}

impl Omnigraph {
    /// Resolve a target to one snapshot (for reads that span several calls).
    pub async fn resolve(&self, target: &Target) -> Result<Snapshot> {
        self.inner.graph.snapshot(target).await
    }

    /// Read one Blob cell as `target` sees it. A managed value's reader is
    /// bound to that exact table version: it keeps reading the same bytes
    /// after the branch moves on. An external value is returned as its
    /// reference, without touching the object. A null cell is `NotFound`.
    pub async fn read_blob_at(&self, target: &Target, cell: &BlobCell) -> Result<Blob> {
        self.allow_read(Action::Read, target).await?;
        blob::read(&self.inner.graph, target, cell).await
    }

    /// `target` pinned to the graph version this handle read last, when it
    /// names a branch that version has. A one-shot reader (a CLI `query`
    /// process: open, one read, exit) reads the state its open found, its
    /// one look at the head, instead of asking for the head again: its
    /// read happens at its open. Other targets, and a branch that version
    /// lacks, are returned as they are.
    pub fn as_opened(&self, target: &Target) -> Target {
        if let Target::Branch(b) = target
            && let Some(m) = self.inner.graph.manifests.known()
            && m.branches.contains_key(b)
        {
            return Target::Version {
                version: m.version,
                branch: b.clone(),
            };
        }
        target.clone()
    }

    pub async fn snapshot(&self, target: &Target) -> Result<SnapshotInfo> {
        self.allow_read(Action::Read, target).await?;
        let snap = self.resolve(target).await?;
        let mut types = Vec::new();
        for t in &snap.catalog().types {
            let r = snap.table(t)?;
            let table = self.inner.graph.read_table(&snap, t).await?;
            types.push(TableInfo {
                name: t.name.clone(),
                kind: if t.is_edge() { "edge" } else { "node" }.into(),
                rows: table.rows().await?,
                fragments: table.fragments(),
                table_version: r.version,
                lance_branch: r.lance_branch.clone(),
            });
        }
        Ok(SnapshotInfo {
            branch: snap.branch.clone(),
            manifest_version: snap.manifest.version,
            head_commit: snap.record.head.clone(),
            schema_id: snap.schema.id.clone(),
            types,
        })
    }

    /// Where type `type_name`'s table is at `target`: its dataset's URI,
    /// Lance branch and version, for tools that read Lance directly.
    pub async fn table_location(&self, target: &Target, type_name: &str) -> Result<TableLocation> {
        self.allow_read(Action::Read, target).await?;
        let snap = self.resolve(target).await?;
        let t = snap
            .catalog()
            .get(type_name)
            .ok_or_else(|| OmniError::NotFound(format!("type {type_name:?}")))?;
        let r = snap.table(t)?;
        Ok(TableLocation {
            uri: self.inner.graph.tables.uri(&r.dir),
            lance_branch: r.lance_branch.clone(),
            version: r.version,
        })
    }

    /// Run the read query `name` from `source` (a `.gq` text) against one
    /// snapshot of `target`, with parameters given as a JSON object.
    ///
    /// A branch is read at its head as it is now. When this handle knows a
    /// head of the branch already, the query runs on that one while the
    /// head is asked for: if the head has not moved (the branch record and
    /// the schema are the ones the query ran on) that answer is the
    /// answer, ready when the head's is, one round trip for both on
    /// object storage; if it has moved, the query runs again on the new
    /// head.
    pub async fn query(
        &self,
        target: &Target,
        source: &str,
        name: &str,
        params: &serde_json::Value,
    ) -> Result<QueryResult> {
        // A warm query needs nothing the runtime schedules, so a task that
        // runs queries back to back would never yield and starve the
        // writers on its threads: each query spends a unit of the task's
        // budget, and yields once it is spent.
        tokio::task::coop::consume_budget().await;
        self.allow_read(Action::Read, target).await?;
        let parsed = self.inner.plans.parsed(source, name)?;
        let known = self.as_opened(target);
        if known == *target {
            let snap = self.resolve(target).await?;
            return self.run_on(&snap, &parsed, params).await;
        }
        let guess = async {
            let snap = self.resolve(&known).await?;
            let answer = self.run_on(&snap, &parsed, params).await;
            Ok::<_, OmniError>((snap, answer))
        };
        let (now, guess) = futures::join!(self.resolve(target), guess);
        let now = now?;
        match guess {
            Ok((snap, answer)) if snap.record == now.record && snap.schema.id == now.schema.id => {
                answer
            }
            _ => self.run_on(&now, &parsed, params).await,
        }
    }

    /// Run a parsed query on one snapshot.
    async fn run_on(
        &self,
        snap: &Snapshot,
        parsed: &crate::compiler::query::plans::Parsed,
        params: &serde_json::Value,
    ) -> Result<QueryResult> {
        let plan = parsed.plan(&snap.schema.id, snap.catalog())?;
        let values = params::bind_params(&plan, params)?;
        run::run(&self.ctx(snap, &values), &plan).await
    }

    /// The snapshot `target` names and the plan of query `name` of `source`
    /// against it (the past type-checks against the schema it accepted).
    /// The text is parsed before the target is resolved, so a bad text is
    /// reported as such whatever the target.
    async fn planned(
        &self,
        target: &Target,
        source: &str,
        name: &str,
    ) -> Result<(Snapshot, Arc<crate::compiler::query::ir::Plan>)> {
        let parsed = self.inner.plans.parsed(source, name)?;
        let snap = self.resolve(target).await?;
        let plan = parsed.plan(&snap.schema.id, snap.catalog())?;
        Ok((snap, plan))
    }

    /// A read of one snapshot with bound parameters.
    fn ctx<'a>(
        &'a self,
        snap: &'a Snapshot,
        params: &'a BTreeMap<String, crate::compiler::value::Value<'static>>,
    ) -> run::Ctx<'a> {
        run::Ctx {
            g: &self.inner.graph,
            snap,
            cache: &self.inner.cache,
            params,
            now_ms: chrono::Utc::now().timestamp_millis(),
            embed: &self.inner.embed,
            search: Default::default(),
            point: Default::default(),
            graphs: Default::default(),
            reads: Default::default(),
            profile: None,
        }
    }

    /// The steps `query` would run, with what each would read (pushed
    /// filters, indexes, where each traversal's adjacency comes from),
    /// without running them.
    pub async fn explain(
        &self,
        target: &Target,
        source: &str,
        name: &str,
        params: &serde_json::Value,
    ) -> Result<Vec<crate::exec::explain::PlanStep>> {
        self.explained(target, source, name, params, false)
            .await
            .map(|(_, steps)| steps)
    }

    /// Run `query`, measuring each step: the result, and the steps with the
    /// rows each produced and the time it took.
    pub async fn query_profiled(
        &self,
        target: &Target,
        source: &str,
        name: &str,
        params: &serde_json::Value,
    ) -> Result<(QueryResult, Vec<crate::exec::explain::PlanStep>)> {
        let (r, steps) = self.explained(target, source, name, params, true).await?;
        Ok((r.expect("a profiled run has a result"), steps))
    }

    async fn explained(
        &self,
        target: &Target,
        source: &str,
        name: &str,
        params: &serde_json::Value,
        run: bool,
    ) -> Result<(Option<QueryResult>, Vec<crate::exec::explain::PlanStep>)> {
        self.allow_read(Action::Read, target).await?;
        let (snap, plan) = self.planned(target, source, name).await?;
        let values = params::bind_params(&plan, params)?;
        let profile = crate::exec::explain::Profile::default();
        let mut ctx = self.ctx(&snap, &values);
        if !run {
            return Ok((None, ctx.explain(&plan, None).await?));
        }
        ctx.profile = Some(&profile);
        // The plan as it stood before the run (the run caches what it
        // read, which would change what a later look says).
        let before = ctx.explain(&plan, None).await?;
        let started = std::time::Instant::now();
        let result = run::run(&ctx, &plan).await?;
        let total = started.elapsed().as_secs_f64() * 1000.0;
        let mut steps = ctx.explain(&plan, Some(&profile)).await?;
        for (s, b) in steps.iter_mut().zip(before) {
            (s.detail, s.uses) = (b.detail, b.uses);
        }
        let ops: f64 = steps
            .iter()
            .filter(|s| s.depth == 0)
            .filter_map(|s| s.ms)
            .sum();
        if let Some(last) = steps.last_mut() {
            last.rows = Some(result.num_rows());
            last.ms = Some((total - ops).max(0.0));
            last.uses = ctx.reads_made();
        }
        Ok((Some(result), steps))
    }

    /// The same as [`Self::query`] on `branch` as of graph manifest version `version`.
    pub async fn run_query_at(
        &self,
        version: u64,
        branch: &str,
        source: &str,
        name: &str,
        params: &serde_json::Value,
    ) -> Result<QueryResult> {
        let target = Target::Version {
            version,
            branch: branch.to_string(),
        };
        self.query(&target, source, name, params).await
    }

    /// What the runtime cache of graph indexes and columns has done.
    pub fn cache_stats(&self) -> serde_json::Value {
        let mut v = self.inner.cache.stats.snapshot();
        v["bytes"] = serde_json::json!(self.inner.cache.used_bytes());
        v
    }

    /// Write the target's nodes, then edges, as JSONL that loads back into an
    /// identical graph. Returns the number of lines written.
    pub async fn export(
        &self,
        target: &Target,
        out: &mut (dyn std::io::Write + Send),
    ) -> Result<usize> {
        self.allow_read(Action::Export, target).await?;
        let snap = self.resolve(target).await?;
        self.export_snapshot(&snap, None, out).await
    }

    /// [`Self::export`] of a snapshot already resolved, of the types `only`
    /// names (an unknown one is refused before anything is written).
    pub async fn export_snapshot(
        &self,
        snap: &Snapshot,
        only: Option<&[String]>,
        out: &mut (dyn std::io::Write + Send),
    ) -> Result<usize> {
        self.authorize(Action::Export, Some(snap.branch.as_str()), None)?;
        // Boxed: Lance's scan futures nest deep enough that a caller's own
        // async fn could otherwise overflow the compiler's layout query depth.
        Box::pin(export::export(&self.inner.graph, snap, only, out)).await
    }
}
