//! The query language (`.gq`): syntax tree and parser.

pub mod ast;
pub mod parser;
