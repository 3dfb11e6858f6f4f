//! Small helpers with no better home.

pub mod hash;
pub mod idindex;
pub mod ulid;
