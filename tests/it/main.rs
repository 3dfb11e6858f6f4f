//! Integration tests against real Lance, in one binary (each test binary links
//! Lance again).

mod common;

/// Before `main`, while this is the only thread: a plain `cargo test` finds
/// the local S3 server (starting it if needed) as `scripts/test.sh` would.
#[ctor::ctor(unsafe)]
fn local_s3_server() {
    // SAFETY: constructors run before main, so no other thread exists.
    unsafe { omnigraph::util::local_s3::export() };
}

mod adjacency;
mod bad_input;
mod blobs;
mod branches;
mod cardinality;
mod chaos;
mod concurrency;
mod differential;
mod export;
mod feed;
mod gc;
mod group_commit;
mod indexes;
mod layers;
mod load;
mod merge;
mod mutate;
mod outage;
mod policy;
mod processes;
mod query;
mod recovery;
mod retention;
mod round_trips;
mod s3;
mod schema;
mod search;
mod server;
mod warm;
