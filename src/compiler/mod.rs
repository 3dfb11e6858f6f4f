//! Pure language work: lexing, parsing and checking schemas, queries and
//! mutations into the catalog and the plans the engine runs, and the one
//! value type both work with. No I/O here.

pub mod blob_policy;
pub mod catalog;
pub mod lexer;
pub mod query;
pub mod schema;
pub mod value;
