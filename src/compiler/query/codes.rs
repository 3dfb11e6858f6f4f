//! The query checker's error codes: one enum, one stable `Qnnn` spelling
//! each. docs/language.md lists them for users; tests and callers match on
//! the spelling (`OmniError::Type { code: "Q009", .. }`).

/// Why a query or mutation was refused before it ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    /// A type name that is not in the schema.
    UnknownType,
    /// A property the type does not have.
    UnknownProperty,
    /// A traversal over an edge the schema does not have.
    UnknownEdge,
    /// A traversal whose endpoints do not fit the edge's direction.
    EdgeDirection,
    /// An undirected traversal over an edge with different endpoint types.
    UndirectedMixedEndpoints,
    /// An edge variable on a multi-hop traversal.
    EdgeBindingMultiHop,
    /// A bare edge variable returned or ordered by.
    BareEdgeReturned,
    /// A Blob property returned, ordered, aggregated or compared.
    BlobMisuse,
    /// Values of types that the operator cannot compare, or a malformed
    /// literal (a date that is not one).
    TypeMismatch,
    /// A parameter used without being declared, declared twice, or given
    /// to a query that does not take it.
    Parameter,
    /// Ordering by `nearest(...)` without a limit.
    NearestWithoutLimit,
    /// A parameter value of the wrong type.
    ParameterValue,
    /// A variable that is not bound.
    UnknownVariable,
    /// A required parameter without a value.
    MissingParameter,
    /// Something the language has that this version does not run yet.
    Unsupported,
    /// A query name that is not in the file.
    UnknownQuery,
    /// An order item that names neither a return alias nor an expression.
    UnknownOrderItem,
    /// An aggregate outside return and order, or a non-key in an aggregate
    /// query's order.
    MisplacedAggregate,
    /// A variable bound to two types.
    VariableTypeClash,
    /// A mutation run as a read query, or the reverse.
    WrongKind,
    /// An update of a property that identifies the row (id, endpoints,
    /// key).
    IdentityUpdate,
    /// A search function given the wrong arguments (see docs/language.md).
    SearchArgument,
}

impl Code {
    /// Every code, in number order.
    pub const ALL: [Code; 22] = [
        Code::UnknownType,
        Code::UnknownProperty,
        Code::UnknownEdge,
        Code::EdgeDirection,
        Code::UndirectedMixedEndpoints,
        Code::EdgeBindingMultiHop,
        Code::BareEdgeReturned,
        Code::BlobMisuse,
        Code::TypeMismatch,
        Code::Parameter,
        Code::NearestWithoutLimit,
        Code::ParameterValue,
        Code::UnknownVariable,
        Code::MissingParameter,
        Code::Unsupported,
        Code::UnknownQuery,
        Code::UnknownOrderItem,
        Code::MisplacedAggregate,
        Code::VariableTypeClash,
        Code::WrongKind,
        Code::IdentityUpdate,
        Code::SearchArgument,
    ];

    /// The stable spelling users see.
    pub const fn id(self) -> &'static str {
        match self {
            Code::UnknownType => "Q001",
            Code::UnknownProperty => "Q002",
            Code::UnknownEdge => "Q003",
            Code::EdgeDirection => "Q004",
            Code::UndirectedMixedEndpoints => "Q005",
            Code::EdgeBindingMultiHop => "Q006",
            Code::BareEdgeReturned => "Q007",
            Code::BlobMisuse => "Q008",
            Code::TypeMismatch => "Q009",
            Code::Parameter => "Q010",
            Code::NearestWithoutLimit => "Q011",
            Code::ParameterValue => "Q012",
            Code::UnknownVariable => "Q013",
            Code::MissingParameter => "Q014",
            Code::Unsupported => "Q015",
            Code::UnknownQuery => "Q016",
            Code::UnknownOrderItem => "Q017",
            Code::MisplacedAggregate => "Q018",
            Code::VariableTypeClash => "Q019",
            Code::WrongKind => "Q020",
            // Q021 was never given out.
            Code::IdentityUpdate => "Q022",
            Code::SearchArgument => "Q023",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_are_distinct_and_in_order() {
        let ids: Vec<&str> = Code::ALL.iter().map(|c| c.id()).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(ids, sorted);
    }

    #[test]
    fn the_language_reference_lists_every_code() {
        let doc = include_str!("../../../docs/language.md");
        for c in Code::ALL {
            assert!(
                doc.contains(&format!("| {} |", c.id())),
                "docs/language.md does not list {}",
                c.id()
            );
        }
    }
}
