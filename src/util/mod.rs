//! Small helpers with no better home.

pub mod clock;
pub mod cores;
pub mod dates;
pub mod hash;
pub mod idindex;
pub mod ulid;
