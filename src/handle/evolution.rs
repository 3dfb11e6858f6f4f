//! The schema: the accepted catalog, planning and applying a new schema,
//! and the schema a past version accepted.

use super::*;

/// A schema apply's result.
#[derive(Clone, Debug, Serialize)]
pub struct SchemaCommit {
    /// The commit on `main` (`None`: the schema was already this one).
    pub commit: Option<String>,
    pub manifest_version: u64,
    /// The accepted schema's identity now.
    pub schema: String,
    pub changed: bool,
    pub steps: Vec<PlannedStep>,
}

impl Omnigraph {
    /// The catalog of the schema the graph accepts now.
    pub async fn catalog(&self) -> Result<Arc<Catalog>> {
        self.authorize(Action::Read, None, None)?;
        Ok(self.inner.graph.current_schema().await?.catalog.clone())
    }

    /// What applying schema `source` would do: each step and the rows it
    /// reads or writes, after checking every new rule on every branch's
    /// rows. Nothing is written. A change the data cannot follow is the
    /// error the apply would give.
    pub async fn plan_schema(&self, source: &str) -> Result<SchemaPlan> {
        self.authorize(Action::Read, None, None)?;
        Ok(schema_apply::plan(&self.inner.graph, source).await?.3)
    }

    /// Make `source` the graph's schema, for every branch, as one commit
    /// on `main`. It waits for every write in flight (the schema gate is
    /// exclusive) and fails `SchemaChanged` if another apply lands first.
    pub async fn apply_schema(&self, source: &str) -> Result<SchemaCommit> {
        self.authorize(Action::SchemaApply, None, Some(MAIN))?;
        self.writes("apply a schema")?;
        // Planned here without reading rows (bad input fails before any
        // gate); the rows are checked once, under the gates.
        let (latest, from, evo) = schema_apply::evolution(&self.inner.graph, source).await?;
        let unchanged = |version| SchemaCommit {
            commit: None,
            manifest_version: version,
            schema: from.id.clone(),
            changed: false,
            steps: Vec::new(),
        };
        if evo.is_empty() {
            return Ok(unchanged(latest.version));
        }
        let work = Arc::new(Pinned {
            schema: from.id.clone(),
            work: Arc::new(SchemaApplyWork {
                source: source.to_string(),
            }),
        });
        match self
            .run(OpKind::ApplySchema, "schema_apply", Some(work))
            .await
        {
            Ok((commit, version, summary)) => {
                // The apply moved every branch it migrated under the schema
                // gate alone: a head this process's branch owners know from
                // before it is older, and a write captured on it would meet
                // the old schema (docs/architecture.md, "schema tenure").
                let w = self.writes("apply a schema")?;
                for branch in latest.branches.keys() {
                    w.host.forget_head(branch).await;
                }
                Ok(SchemaCommit {
                    commit,
                    manifest_version: version,
                    schema: summary["schema"]["to"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    changed: true,
                    steps: serde_json::from_value(summary["plan"]["steps"].clone())?,
                })
            }
            Err(OmniError::AlreadyCurrent) => Ok(unchanged(latest.version)),
            Err(e) => Err(e),
        }
    }

    /// The accepted schema's source now, or at a target's graph version.
    pub async fn schema_source(&self, target: Option<&Target>) -> Result<String> {
        let schema = match target {
            Some(t) => {
                self.allow_read(Action::Read, t).await?;
                self.resolve(t).await?.schema
            }
            None => {
                self.authorize(Action::Read, None, None)?;
                self.inner.graph.current_schema().await?
            }
        };
        Ok(schema.source.clone())
    }
}
