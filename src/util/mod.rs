//! Small helpers with no better home.

pub mod clock;
pub mod cores;
pub mod dates;
pub mod hash;
pub mod idindex;
#[cfg(any(test, feature = "fault-injection"))]
pub mod local_s3;
pub mod ulid;
