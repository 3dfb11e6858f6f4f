//! The accepted schema as the engine uses it: node and edge types with stable
//! ids, their properties with stable ids, constraints, and the Arrow schema of
//! each type's table. Serialised into the graph next to the schema source.

use std::sync::Arc;

use arrow_schema::{DataType, Field};
use serde::{Deserialize, Serialize};

/// Physical columns every node table has.
pub const ID: &str = "id";
/// Extra physical columns every edge table has.
pub const SRC: &str = "src";
pub const DST: &str = "dst";

/// Names users may not give properties.
pub const RESERVED: &[&str] = &[
    ID,
    SRC,
    DST,
    "_rowid",
    "_rowaddr",
    "_rowoffset",
    "_row_created_at_version",
    "_row_last_updated_at_version",
];

/// Arrow field metadata that makes Lance detect concurrent inserts of one id.

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum PropType {
    String,
    Bool,
    I32,
    I64,
    U32,
    U64,
    F32,
    F64,
    Date,
    DateTime,
    Vector(u32),
    List(Box<PropType>),
    Enum(Vec<String>),
    Blob,
}

impl PropType {
    /// A scalar type by its name in the languages (`String`, `I32`, ...).
    pub fn scalar_named(name: &str) -> Option<Self> {
        Some(match name {
            "String" => PropType::String,
            "Bool" => PropType::Bool,
            "I32" => PropType::I32,
            "I64" => PropType::I64,
            "U32" => PropType::U32,
            "U64" => PropType::U64,
            "F32" => PropType::F32,
            "F64" => PropType::F64,
            "Date" => PropType::Date,
            "DateTime" => PropType::DateTime,
            _ => return None,
        })
    }

    pub fn is_numeric(&self) -> bool {
        matches!(
            self,
            PropType::I32
                | PropType::I64
                | PropType::U32
                | PropType::U64
                | PropType::F32
                | PropType::F64
        )
    }

    pub fn is_scalar(&self) -> bool {
        !matches!(
            self,
            PropType::Vector(_) | PropType::List(_) | PropType::Blob
        )
    }

    /// Types whose values spell a stable id.
    pub fn can_be_key(&self) -> bool {
        matches!(
            self,
            PropType::String
                | PropType::Bool
                | PropType::I32
                | PropType::I64
                | PropType::U32
                | PropType::U64
                | PropType::Date
                | PropType::DateTime
                | PropType::Enum(_)
        )
    }

    pub fn arrow(&self) -> DataType {
        match self {
            PropType::String | PropType::Enum(_) => DataType::Utf8,
            PropType::Bool => DataType::Boolean,
            PropType::I32 => DataType::Int32,
            PropType::I64 => DataType::Int64,
            PropType::U32 => DataType::UInt32,
            PropType::U64 => DataType::UInt64,
            PropType::F32 => DataType::Float32,
            PropType::F64 => DataType::Float64,
            PropType::Date => DataType::Date32,
            PropType::DateTime => DataType::Date64,
            PropType::Vector(n) => DataType::FixedSizeList(
                Arc::new(Field::new("item", DataType::Float32, true)),
                *n as i32,
            ),
            PropType::List(inner) => {
                DataType::List(Arc::new(Field::new("item", inner.arrow(), true)))
            }
            // Blob columns are built by Lance's blob field helper.
            PropType::Blob => DataType::LargeBinary,
        }
    }

    pub fn describe(&self) -> String {
        match self {
            PropType::String => "String".into(),
            PropType::Bool => "Bool".into(),
            PropType::I32 => "I32".into(),
            PropType::I64 => "I64".into(),
            PropType::U32 => "U32".into(),
            PropType::U64 => "U64".into(),
            PropType::F32 => "F32".into(),
            PropType::F64 => "F64".into(),
            PropType::Date => "Date".into(),
            PropType::DateTime => "DateTime".into(),
            PropType::Vector(n) => format!("Vector({n})"),
            PropType::List(inner) => format!("[{}]", inner.describe()),
            PropType::Enum(vals) => format!("enum({})", vals.join(", ")),
            PropType::Blob => "Blob".into(),
        }
    }
}

/// A literal in an annotation argument.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Literal {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    Ident(String),
    /// `lo..hi`, either side open (`@range(age, 0..150)`, `@card(0..*)`).
    Range(Option<Num>, Option<Num>),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Annotation {
    pub name: String,
    pub args: Vec<Literal>,
    pub kwargs: Vec<(String, Literal)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Num {
    Int(i64),
    Float(f64),
}

impl Num {
    pub fn as_f64(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        }
    }
}

impl std::fmt::Display for Num {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Num::Int(i) => write!(f, "{i}"),
            Num::Float(x) => write!(f, "{x}"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RangeConstraint {
    pub property: String,
    pub min: Option<Num>,
    pub max: Option<Num>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckConstraint {
    pub property: String,
    pub pattern: String,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cardinality {
    pub min: u64,
    pub max: Option<u64>,
}

impl Cardinality {
    /// Does a rule hold anything back? `0..*` admits every count.
    pub fn constrains(&self) -> bool {
        self.min > 0 || self.max.is_some()
    }

    /// May a source node have `n` edges of the type?
    pub fn admits(&self, n: u64) -> bool {
        n >= self.min && self.max.is_none_or(|m| n <= m)
    }
}

impl std::fmt::Display for Cardinality {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.max {
            Some(m) => write!(f, "@card({}..{m})", self.min),
            None => write!(f, "@card({}..*)", self.min),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EmbedSpec {
    pub source: String,
    pub model: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PropDef {
    /// Stable within its type.
    pub id: u32,
    pub name: String,
    pub ty: PropType,
    pub nullable: bool,
    pub embed: Option<EmbedSpec>,
    pub annotations: Vec<Annotation>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum TypeKind {
    Node,
    Edge {
        from: String,
        to: String,
        card: Cardinality,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TypeDef {
    /// Stable across the graph's life.
    pub id: u32,
    pub name: String,
    pub kind: TypeKind,
    pub implements: Vec<String>,
    pub properties: Vec<PropDef>,
    /// `@key` properties in declaration order (nodes only; empty: generated ids).
    pub key: Vec<String>,
    pub uniques: Vec<Vec<String>>,
    pub indexes: Vec<Vec<String>>,
    pub ranges: Vec<RangeConstraint>,
    pub checks: Vec<CheckConstraint>,
    pub annotations: Vec<Annotation>,
    /// The next property id to hand out: ids of dropped properties are
    /// never reused (0 in catalogs written before schemas evolved: then
    /// one past the highest id).
    #[serde(default)]
    pub next_prop_id: u32,
}

impl TypeDef {
    pub fn is_edge(&self) -> bool {
        matches!(self.kind, TypeKind::Edge { .. })
    }

    /// The id and every property a row read returns (blobs are read
    /// through the blob reader, not with rows).
    pub fn row_columns(&self) -> Vec<&str> {
        let mut cols = vec![ID];
        cols.extend(
            self.properties
                .iter()
                .filter(|p| p.ty != PropType::Blob)
                .map(|p| p.name.as_str()),
        );
        cols
    }

    /// The stable key that names the type's table and orders table gates.
    pub fn table_key(&self) -> String {
        match self.kind {
            TypeKind::Node => format!("node:{}", self.name),
            TypeKind::Edge { .. } => format!("edge:{}", self.name),
        }
    }

    /// The table's folder under the graph root.
    pub fn table_dir(&self) -> String {
        match self.kind {
            TypeKind::Node => format!("nodes/{}.lance", self.name),
            TypeKind::Edge { .. } => format!("edges/{}.lance", self.name),
        }
    }

    pub fn property(&self, name: &str) -> Option<&PropDef> {
        self.properties.iter().find(|p| p.name == name)
    }

    pub fn endpoints(&self) -> Option<(&str, &str)> {
        match &self.kind {
            TypeKind::Edge { from, to, .. } => Some((from, to)),
            TypeKind::Node => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InterfaceDef {
    pub name: String,
    pub properties: Vec<PropDef>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Catalog {
    pub types: Vec<TypeDef>,
    pub interfaces: Vec<InterfaceDef>,
    /// The next type id to hand out (as [`TypeDef::next_prop_id`]).
    #[serde(default)]
    pub next_type_id: u32,
}

impl Catalog {
    pub fn get(&self, name: &str) -> Option<&TypeDef> {
        self.types.iter().find(|t| t.name == name)
    }

    pub fn node(&self, name: &str) -> Option<&TypeDef> {
        self.get(name).filter(|t| !t.is_edge())
    }

    pub fn edge(&self, name: &str) -> Option<&TypeDef> {
        self.get(name).filter(|t| t.is_edge())
    }

    pub fn by_table_key(&self, key: &str) -> Option<&TypeDef> {
        self.types.iter().find(|t| t.table_key() == key)
    }

    pub fn nodes(&self) -> impl Iterator<Item = &TypeDef> {
        self.types.iter().filter(|t| !t.is_edge())
    }

    pub fn edges(&self) -> impl Iterator<Item = &TypeDef> {
        self.types.iter().filter(|t| t.is_edge())
    }
}
