//! Indexes as data: the structures a search reads (the inverted index of a
//! String column, the partitions of a Vector column), the adjacency a
//! traversal reads (`adjacency`, persisted by `adjacency_file`), which
//! rows of a table version an index built at another version covers, and
//! the one file format they persist in. Pure: no storage, no Lance. The
//! write side (`write::optimize`) builds and stores them; the read side
//! (`exec::search`) loads them and searches what they do not cover flat.

pub mod adjacency;
pub mod adjacency_file;
pub mod codec;
pub mod coverage;
pub mod id_file;
pub mod id_order;
pub mod ivf;
pub mod text;

/// Which search structure an index is (the property's type decides).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IndexKind {
    /// The inverted index of a String property ([`text::TextIndex`]).
    Text,
    /// The partitions of a Vector property ([`ivf::Ivf`]).
    Vector,
}

/// A table version's record of one persisted index: kept in the table's
/// own metadata, so forks and time travel see exactly the indexes that
/// version had.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IndexRef {
    pub kind: IndexKind,
    /// The index file, relative to the graph's root.
    pub file: String,
    /// The table version it was built from.
    pub built_at: u64,
    /// The rows it covers (that version's rows).
    pub rows: u64,
    /// The fragments it covers ([`coverage::digest`]): an index is current
    /// while its table holds exactly these.
    pub fragments: String,
}
