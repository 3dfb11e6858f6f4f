//! Reads over one snapshot.

pub mod cache;
pub mod export;
pub mod graph;
pub mod output;
pub mod run;
pub mod scalar;
