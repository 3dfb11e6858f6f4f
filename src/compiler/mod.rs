//! Pure language work: lexing, parsing and checking schemas (and, later,
//! queries) into the catalog and plans the engine runs. No I/O here.

pub mod catalog;
pub mod lexer;
pub mod query;
pub mod schema;
