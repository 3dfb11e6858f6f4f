//! The schema compiler: `.pg` source -> checked [`Catalog`]. [`syntax`]
//! parses (reporting line and column), [`checks`] resolves declarations,
//! interfaces and properties, [`constraints`] applies the annotations; the
//! errors name the declaration and property at fault.

mod checks;
mod constraints;
pub mod evolve;
mod syntax;

use super::catalog::Catalog;
use crate::error::Result;

/// Compile schema source into a catalog with fresh stable ids.
pub fn compile(src: &str) -> Result<Catalog> {
    let decls = syntax::Parser::new(src)?.parse_all()?;
    checks::check(decls)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compiler::catalog::*;
    use crate::error::OmniError;

    const FULL: &str = r#"
// line comments and /* block comments */
interface Named { name: String @key }

node Person implements Named {
    age: I32?
    email: String @unique
    tags: [String]
    bio: String @index
    embedding: Vector(384) @embed("bio")
    photo: Blob?
    status: enum(active, retired)
    @range(age, 0..150)
    @check(email, "^[^@]+@[^@]+$")
}

node Company { name: String @key }

edge Knows: Person -> Person { since: Date? }
edge WorksAt: Person -> Company @card(0..1) { role: String? }
"#;

    #[test]
    fn the_reference_schema_compiles() {
        let c = compile(FULL).unwrap();
        let p = c.node("Person").unwrap();
        assert_eq!(p.key, vec!["name"]);
        assert_eq!(p.properties[0].name, "name");
        assert_eq!(
            p.properties.iter().map(|p| p.id).collect::<Vec<_>>(),
            (1..=8).collect::<Vec<_>>()
        );
        assert_eq!(p.uniques, vec![vec!["email".to_string()]]);
        assert_eq!(p.ranges[0].max, Some(Num::Int(150)));
        assert_eq!(p.checks[0].property, "email");
        assert_eq!(
            p.property("embedding")
                .unwrap()
                .embed
                .as_ref()
                .unwrap()
                .source,
            "bio"
        );
        let w = c.edge("WorksAt").unwrap();
        assert_eq!(
            w.kind,
            TypeKind::Edge {
                from: "Person".into(),
                to: "Company".into(),
                card: Cardinality {
                    min: 0,
                    max: Some(1)
                }
            }
        );
        assert_eq!(
            c.types.iter().map(|t| t.id).collect::<Vec<_>>(),
            vec![1, 2, 3, 4]
        );
    }

    fn schema_err(src: &str) -> String {
        match compile(src) {
            Err(OmniError::Schema { message }) => message,
            other => panic!("expected a schema error, got {other:?}"),
        }
    }

    #[test]
    fn semantic_errors_name_what_is_wrong() {
        assert!(schema_err("node A { x: I32 }\nedge E: A -> B").contains("unknown node type 'B'"));
        assert!(schema_err("node A { x: I32 }\nnode A { y: I32 }").contains("declared twice"));
        assert!(schema_err("node A { x: I32\n x: String }").contains("'x' is declared twice"));
        assert!(schema_err("node A { id: String }").contains("reserved"));
        assert!(schema_err("node A { _rowid: I64 }").contains("reserved"));
        assert!(schema_err("node A { b: Blob @unique }").contains("Blob"));
        assert!(schema_err("node A { b: Blob @index }").contains("Blob"));
        assert!(schema_err("node A { b: Blob\n @key(b) }").contains("Blob"));
        assert!(schema_err("node A { x: I32\n @range(y, 0..1) }").contains("unknown property 'y'"));
        assert!(schema_err("node A { x: I32\n @range(x, 5..1) }").contains("min above max"));
        assert!(schema_err("node A { x: String\n @range(x, 0..1) }").contains("numeric"));
        assert!(
            schema_err("node A { x: I32 }\nedge E: A -> A { @key(x) }").contains("only @unique")
        );
        assert!(schema_err("node A { x: String? @key }").contains("nullable"));
        assert!(schema_err("node a { x: I32 }").contains("upper-case"));
        assert!(schema_err("node A { X: I32 }").contains("lower-case"));
        assert!(schema_err("node A { v: Vector(3) @embed(\"nope\") }").contains("source"));
        assert!(schema_err("node A implements Nope { x: I32 }").contains("unknown interface"));
        assert!(schema_err("node A { x: String\n @check(x, \"(\") }").contains("invalid"));
    }

    #[test]
    fn syntax_errors_carry_line_and_column() {
        match compile("node A {\n  x: Strin\n}") {
            Err(OmniError::Parse {
                line,
                column,
                message,
                snippet,
            }) => {
                assert_eq!((line, column), (2, 6));
                assert!(message.contains("unknown property type 'Strin'"));
                assert!(snippet.contains("x: Strin"));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            compile("node A { x: enum() }"),
            Err(OmniError::Parse { .. })
        ));
        assert!(matches!(
            compile("node A { x: enum(a, a) }"),
            Err(OmniError::Parse { .. })
        ));
        assert!(matches!(
            compile("node A { x: Vector(0) }"),
            Err(OmniError::Parse { .. })
        ));
        assert!(matches!(
            compile("edge E A -> A"),
            Err(OmniError::Parse { .. })
        ));
    }

    #[test]
    fn composite_keys_and_unknown_annotations() {
        let c = compile(
            "node Emp @description(\"x\") { org: String\n num: I64\n @key(org, num)\n @custom(1, a = \"b\") }\nedge E: Emp -> Emp",
        )
        .unwrap();
        let e = c.node("Emp").unwrap();
        assert_eq!(e.key, vec!["org", "num"]);
        assert!(e.annotations.iter().any(|a| a.name == "custom"));
        assert!(e.annotations.iter().any(|a| a.name == "description"));
        assert!(c.edge("E").unwrap().properties.is_empty());
    }

    #[test]
    fn open_card_and_range_bounds() {
        let c = compile("node A { x: F64\n @range(x, -1.5..) }\nedge E: A -> A @card(1..*)\nedge F: A -> A @card(2..)").unwrap();
        assert_eq!(c.node("A").unwrap().ranges[0].min, Some(Num::Float(-1.5)));
        assert_eq!(c.node("A").unwrap().ranges[0].max, None);
        for e in ["E", "F"] {
            let TypeKind::Edge { card, .. } = &c.edge(e).unwrap().kind else {
                panic!()
            };
            assert_eq!(card.max, None);
        }
    }
}
