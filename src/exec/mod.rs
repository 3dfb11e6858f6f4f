//! Reads over one snapshot.

pub mod export;
