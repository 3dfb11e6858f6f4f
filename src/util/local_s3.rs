//! The local S3-compatible server the tests run against, for test binaries
//! started without `scripts/test.sh` (a plain `cargo test`): the same script
//! starts it (or finds it running) and its environment is handed back.

use std::process::Command;

/// The variables `scripts/s3-env.sh` exports (the AWS endpoint and keys,
/// and `OMNIGRAPH_TEST_S3`), after it made sure the server answers. Empty
/// when `OMNIGRAPH_TEST_S3` is already set, as under `scripts/test.sh`.
/// A server that cannot be started is reported on stderr and leaves the
/// environment as it was: the tests that need it then say what is missing.
pub fn environment() -> Vec<(String, String)> {
    if std::env::var_os("OMNIGRAPH_TEST_S3").is_some() {
        return Vec::new();
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/s3-env.sh");
    let out = Command::new("bash")
        .args(["-c", "source \"$1\" >&2 && env -0", "bash", script])
        .output();
    let out = match out {
        Ok(out) if out.status.success() => out,
        Ok(out) => {
            eprintln!(
                "the local S3 server did not start: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            return Vec::new();
        }
        Err(e) => {
            eprintln!("cannot run {script}: {e}");
            return Vec::new();
        }
    };
    out.stdout
        .split(|b| *b == 0)
        .filter_map(|kv| std::str::from_utf8(kv).ok()?.split_once('='))
        .filter(|(k, _)| k.starts_with("AWS_") || *k == "OMNIGRAPH_TEST_S3")
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Export [`environment`] into this process. Sound only before any other
/// thread runs: the test binaries call it from a constructor, before `main`.
///
/// # Safety
/// No other thread may read or write the environment meanwhile.
pub unsafe fn export() {
    for (k, v) in environment() {
        // SAFETY: the caller runs before any other thread exists.
        unsafe { std::env::set_var(k, v) };
    }
}
