//! Pure language work: lexing, parsing and checking schemas, queries and
//! mutations into the catalog and the plans the engine runs. No I/O here.

pub mod catalog;
pub mod lexer;
pub mod query;
pub mod schema;
