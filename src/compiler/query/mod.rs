//! The query language (`.gq`): syntax tree and parser.

pub mod ast;
pub mod check;
pub mod codes;
pub mod ir;
pub mod mutation;
pub mod parser;
pub mod plans;
pub mod search;
