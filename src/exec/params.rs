//! Parameters: JSON values checked against a query's declarations and
//! turned into plan values.

use std::collections::BTreeMap;

use crate::compiler::catalog::PropType;
use serde::Deserialize;

use crate::compiler::query::ir::Plan;
use crate::compiler::value::{self, Value};
use crate::error::{OmniError, Result};

/// Parameter JSON -> typed values, checked against the plan's declarations.
pub fn bind_params(
    plan: &Plan,
    json: &serde_json::Value,
) -> Result<BTreeMap<String, Value<'static>>> {
    bind(&plan.name, &plan.params, json)
}

/// Parameter JSON -> typed values, checked against declarations
/// `(name, type, optional)` of the query `query`.
pub fn bind(
    query: &str,
    params: &[(String, PropType, bool)],
    json: &serde_json::Value,
) -> Result<BTreeMap<String, Value<'static>>> {
    use crate::compiler::lexer::Pos;
    use crate::compiler::query::check::{Code, type_error};
    let obj = match json {
        serde_json::Value::Null => serde_json::Map::new(),
        serde_json::Value::Object(m) => m.clone(),
        _ => return Err(OmniError::BadRequest("parameters are a JSON object".into())),
    };
    for k in obj.keys() {
        if !params.iter().any(|(n, _, _)| n == k) {
            return Err(type_error(
                Code::Parameter,
                Pos::default(),
                format!("'{query}' takes no parameter ${k}"),
            ));
        }
    }
    let mut out = BTreeMap::new();
    for (name, ty, optional) in params {
        match obj.get(name) {
            None | Some(serde_json::Value::Null) => {
                if !optional {
                    return Err(type_error(
                        Code::MissingParameter,
                        Pos::default(),
                        format!("missing parameter ${name} ({})", ty.describe()),
                    ));
                }
            }
            Some(v) => {
                let val = Value::deserialize(v)
                    .map_err(|e| e.to_string())
                    .and_then(|input| value::typed(ty, input))
                    .map_err(|why| {
                        type_error(
                            Code::ParameterValue,
                            Pos::default(),
                            format!(
                                "parameter ${name} expects {}, got {v}: {why}",
                                ty.describe()
                            ),
                        )
                    })?;
                out.insert(name.clone(), val.into_owned());
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compiler::query::check::Code;
    use serde_json::json;

    fn decls() -> Vec<(String, PropType, bool)> {
        vec![
            ("age".into(), PropType::I32, false),
            ("born".into(), PropType::Date, true),
            ("big".into(), PropType::U64, true),
        ]
    }

    #[test]
    fn parameters_are_typed_by_the_input_conversion_table() {
        let got = bind(
            "q",
            &decls(),
            &json!({"age": 41, "born": "2024-05-01", "big": 7}),
        )
        .unwrap();
        assert_eq!(got["age"], Value::Int(41));
        assert_eq!(got["born"], Value::Date(19844));
        assert_eq!(got["big"], Value::UInt(7));
    }

    #[test]
    fn a_parameter_of_the_wrong_type_names_the_value_and_why() {
        match bind("q", &decls(), &json!({"age": "old"})) {
            Err(OmniError::Type { code, message, .. }) => {
                assert_eq!(code, Code::ParameterValue.id());
                assert!(message.contains("$age expects I32"), "{message}");
                assert!(message.contains("\"old\""), "{message}");
                assert!(
                    message.contains("expected an integer, got a string"),
                    "{message}"
                );
            }
            other => panic!("expected a type error, got {other:?}"),
        }
        match bind("q", &decls(), &json!({"age": 3_000_000_000u64})) {
            Err(OmniError::Type { message, .. }) => {
                assert!(message.contains("out of range for I32"), "{message}")
            }
            other => panic!("expected a type error, got {other:?}"),
        }
    }
}
