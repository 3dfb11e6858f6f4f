//! The layers call only downward: the interface bindings (the CLI, the
//! server, the Python package) use what `src/lib.rs` exports (the handle
//! and its public types) and nothing below it, and the write path uses
//! nothing of the query executor. Read off the source, so an import that
//! crosses a layer fails here, naming its file and line.

use std::path::{Path, PathBuf};

use regex::Regex;

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every line under `dirs` (relative to the crate) that `bad` matches, as
/// `file:line: text`.
fn crossings(dirs: &[&str], bad: &Regex) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for d in dirs {
        sources(&root.join(d), &mut files);
    }
    files.sort();
    let mut found = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for (i, line) in text.lines().enumerate() {
            if bad.is_match(line) {
                let rel = f.strip_prefix(root).unwrap().display();
                found.push(format!("{rel}:{}: {}", i + 1, line.trim()));
            }
        }
    }
    found
}

/// A path into the engine's inner layers, as the bindings would write it.
fn into(layers: &str) -> Regex {
    Regex::new(&format!(
        r"\b(crate|omnigraph|super)::({layers})\b|^\s*(pub\s+)?use\s+({layers})::"
    ))
    .unwrap()
}

#[test]
fn the_bindings_use_only_what_the_library_exports() {
    let found = crossings(
        &["src/server", "src/cli", "python/src"],
        &into("storage|write|exec|compiler|index|handle"),
    );
    assert!(
        found.is_empty(),
        "imports below src/lib.rs:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_write_path_uses_nothing_of_the_executor() {
    let found = crossings(&["src/write"], &into("exec"));
    assert!(
        found.is_empty(),
        "write/ imports exec/:\n{}",
        found.join("\n")
    );
}

#[test]
fn a_crossing_is_found() {
    // The check itself: a line of each form it must catch.
    let bad = into("storage|exec");
    for line in [
        "use crate::storage::Target;",
        "        older_than: omnigraph::storage::retention::parse_duration(&a)?,",
        "use super::exec::blob;",
    ] {
        assert!(bad.is_match(line), "{line}");
    }
    for line in [
        "use crate::{MAIN, Target};",
        "use std::io::Write;",
        "results::write(&r, f)",
    ] {
        assert!(!bad.is_match(line), "{line}");
    }
}
