//! Omnigraph's concurrency and commit protocol.
//!
//! Each actor's decisions are a sans-IO state machine ([`Machine`]): messages
//! and storage completions in, effects out, no `.await` inside a step. The
//! machines are hosted by a small ractor adapter in production ([`host`]) and
//! driven directly by the deterministic simulator in tests. Storage is reached
//! only through the [`Substrate`](host::Substrate) trait, so this crate depends
//! on neither Lance nor DataFusion.
//!
//! Gate order, always: schema -> branch -> tables sorted by [`TableKey`].

pub mod bugs;
pub mod cleaner;
pub mod collector;
pub mod gate;
pub mod host;
pub mod machine;
pub mod owners;
pub mod publisher;
pub mod recovery;
pub mod types;
pub mod writer;

pub use bugs::Bugs;
pub use machine::{Effect, Io, IoOut, Machine, Msg, RecoveryReport, ReqId, TimerId};
pub use types::*;
pub use writer::{OpKind, Writer};
