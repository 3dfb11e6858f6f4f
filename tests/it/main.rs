//! Integration tests against real Lance, in one binary (each test binary links
//! Lance again).

mod common;

mod adjacency;
mod bad_input;
mod blobs;
mod branches;
mod chaos;
mod concurrency;
mod differential;
mod export;
mod gc;
mod indexes;
mod load;
mod merge;
mod mutate;
mod outage;
mod processes;
mod query;
mod recovery;
mod s3;
mod schema;
mod search;
