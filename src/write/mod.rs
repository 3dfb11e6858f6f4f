//! Writes before the protocol: values checked against the schema, rows built
//! into Arrow batches, the JSONL loader, and the prepare step of each write.

pub mod arrow_input;
mod card;
pub mod columns;
pub mod compact;
pub mod group;
pub mod ids;
pub mod jsonl;
mod jsonl_fast;
pub mod load;
pub mod merge;
pub mod mutate;
pub mod optimize;
pub mod schema_apply;
mod staged_rules;
