//! Human-readable output of the CLI: small aligned tables.

use omnigraph::{
    BranchInfo, ChangePage, CommitRecord, EntityChange, LoadReport, MergeConflict, SnapshotInfo,
};

/// Print rows under a header, each column as wide as its widest cell.
pub fn table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("{}", padded.join("  ").trim_end());
    };
    line(header.iter().map(|h| h.to_string()).collect());
    line(widths.iter().map(|w| "-".repeat(*w)).collect());
    for r in rows {
        line(r.clone());
    }
}

pub fn print_result(r: &omnigraph::QueryResult) -> omnigraph::Result<()> {
    let rows: Vec<Vec<String>> = omnigraph::results::ordered_rows(r)?
        .into_iter()
        .map(|row| {
            row.0
                .into_iter()
                .map(|(_, v)| match v {
                    serde_json::Value::Null => String::new(),
                    serde_json::Value::String(s) => s,
                    other => other.to_string(),
                })
                .collect()
        })
        .collect();
    let header: Vec<&str> = r.columns.iter().map(String::as_str).collect();
    table(&header, &rows);
    println!(
        "({} row{}; {} at graph version {}, commit {})",
        rows.len(),
        if rows.len() == 1 { "" } else { "s" },
        r.branch,
        r.manifest_version,
        r.graph_commit_id
    );
    Ok(())
}

/// An optimize: each index built, and its commit (if any).
pub fn print_optimize(r: &omnigraph::OptimizeReport) {
    for ix in &r.indexes {
        let ty = ix["type"].as_str().unwrap_or("?");
        let (rows, bytes) = (&ix["rows"], &ix["bytes"]);
        match ix["kind"].as_str().unwrap_or("?") {
            "graph" => println!("built graph index of {ty} over {rows} edges ({bytes} bytes)"),
            "id order" => println!("built id order of {ty} over {rows} rows ({bytes} bytes)"),
            kind => println!(
                "built {kind} index of {ty}.{} over {rows} rows",
                ix["property"].as_str().unwrap_or("?")
            ),
        }
    }
    match &r.commit {
        None => println!("every index of {} is current: nothing to commit", r.branch),
        Some(c) => println!("commit {c} at graph version {}", r.manifest_version),
    }
}

pub fn print_gc(r: &omnigraph::GcReport) {
    let verb = if r.dry_run { "would remove" } else { "removed" };
    for f in &r.removed {
        println!("{verb} {} ({} bytes)", f.file, f.bytes);
    }
    println!(
        "{verb} {} index files ({} bytes) after reading {} table versions; kept {} recorded, {} of running processes, {} recent without a writer, {} not index files",
        r.removed.len(),
        r.removed_bytes,
        r.table_versions,
        r.kept.recorded,
        r.kept.writer_alive,
        r.kept.recent,
        r.kept.foreign
    );
}

pub fn print_cleanup(r: &omnigraph::CleanupReport, dry_run: bool) {
    let verb = if dry_run { "would remove" } else { "removed" };
    println!(
        "{verb} {} graph versions ({} files, {} bytes); kept {}",
        r.removed_versions, r.removed_files, r.bytes_freed, r.kept_versions
    );
    for (branch, v) in &r.oldest_kept {
        println!("oldest readable version of {branch}: {v}");
    }
}

pub fn print_load(r: &LoadReport) {
    let created = if r.branch_created { " (created)" } else { "" };
    println!(
        "{} load into {}{}: commit {} at graph version {}",
        r.mode.as_str(),
        r.branch,
        created,
        r.commit,
        r.manifest_version
    );
    let mut rows = Vec::new();
    for (name, n) in &r.nodes {
        rows.push(vec![name.clone(), "node".into(), n.to_string()]);
    }
    for (name, n) in &r.edges {
        rows.push(vec![name.clone(), "edge".into(), n.to_string()]);
    }
    table(&["type", "kind", "rows loaded"], &rows);
}

pub fn print_branches(list: &[BranchInfo]) {
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|b| {
            vec![
                b.name.clone(),
                b.head.clone(),
                b.parent.clone().unwrap_or_default(),
                b.updated_at.to_string(),
            ]
        })
        .collect();
    table(&["branch", "head commit", "parent", "graph version"], &rows);
}

/// A blob's stat as `key  value` lines, in the JSON's order.
pub fn print_blob_stat(v: &serde_json::Value) {
    for key in ["kind", "length", "etag", "uri", "offset"] {
        match &v[key] {
            serde_json::Value::Null => {}
            serde_json::Value::String(s) => println!("{key:<7} {s}"),
            other => println!("{key:<7} {other}"),
        }
    }
}

pub fn print_snapshot(s: &SnapshotInfo) {
    println!(
        "branch {} at graph version {}, head commit {}, schema {}",
        s.branch, s.manifest_version, s.head_commit, s.schema_id
    );
    let rows: Vec<Vec<String>> = s
        .types
        .iter()
        .map(|t| {
            vec![
                t.name.clone(),
                t.kind.clone(),
                t.rows.to_string(),
                t.table_version.to_string(),
                t.lance_branch.clone().unwrap_or_else(|| "main".into()),
            ]
        })
        .collect();
    table(
        &["type", "kind", "rows", "table version", "lance branch"],
        &rows,
    );
}

pub fn print_commits(list: &[CommitRecord]) {
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|c| {
            vec![
                c.id.clone(),
                match c.expired {
                    true => format!("{} (removed)", c.manifest_version),
                    false => c.manifest_version.to_string(),
                },
                c.kind.clone(),
                c.actor.clone(),
                c.timestamp.clone(),
            ]
        })
        .collect();
    table(&["commit", "graph version", "kind", "actor", "time"], &rows);
}

pub fn print_commit(c: &CommitRecord) {
    println!("commit           {}", c.id);
    println!("parents          {}", c.parents.join(", "));
    println!("branch           {}", c.branch);
    let removed = if c.expired {
        " (removed by a cleanup)"
    } else {
        ""
    };
    println!("graph version    {}{removed}", c.manifest_version);
    println!("kind             {}", c.kind);
    println!("actor            {}", c.actor);
    println!("time             {}", c.timestamp);
    println!("summary          {}", c.summary);
}

pub fn print_changes(list: &[EntityChange]) {
    // A commit several mutations shared names who wrote each row.
    let shared = list.iter().any(|c| c.member.is_some());
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|c| {
            let mut row = vec![c.change.to_string(), c.type_name.clone(), c.id.clone()];
            if shared {
                row.push(match (&c.member, &c.mutation) {
                    (Some(m), Some(name)) => format!("{m} ({name})"),
                    _ => String::new(),
                });
            }
            row
        })
        .collect();
    match shared {
        true => table(&["change", "type", "id", "member"], &rows),
        false => table(&["change", "type", "id"], &rows),
    }
}

/// A feed page: each commit, then its changes; the cursor last.
pub fn print_feed(page: &ChangePage) {
    for b in &page.blocks {
        println!(
            "commit {} ({}) by {} at {}",
            b.graph_commit_id, b.commit_kind, b.actor, b.authored_at
        );
        let rows: Vec<Vec<String>> = b
            .changes
            .iter()
            .map(|c| vec![c.op.to_string(), c.type_name.clone(), c.id.clone()])
            .collect();
        if !rows.is_empty() {
            table(&["op", "type", "id"], &rows);
        }
    }
    println!(
        "cursor {}{}",
        page.cursor,
        if page.caught_up {
            ""
        } else {
            " (more waiting)"
        }
    );
}

pub fn print_conflicts(list: &[MergeConflict]) {
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|c| {
            vec![
                format!("{:?}", c.kind),
                c.type_name.clone(),
                c.id.clone(),
                c.property.clone().unwrap_or_default(),
            ]
        })
        .collect();
    table(&["conflict", "type", "id", "property"], &rows);
}
