//! Parameters: JSON values checked against a query's declarations and
//! turned into plan values.

use std::collections::BTreeMap;

use crate::compiler::catalog::PropType;
use crate::compiler::query::ir::{Plan, Value};
use crate::error::{OmniError, Result};

/// Parameter JSON -> typed values, checked against the plan's declarations.
pub fn bind_params(plan: &Plan, json: &serde_json::Value) -> Result<BTreeMap<String, Value>> {
    bind(&plan.name, &plan.params, json)
}

/// Parameter JSON -> typed values, checked against declarations
/// `(name, type, optional)` of the query `query`.
pub fn bind(
    query: &str,
    params: &[(String, PropType, bool)],
    json: &serde_json::Value,
) -> Result<BTreeMap<String, Value>> {
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
                let val = json_value(ty, v).ok_or_else(|| {
                    type_error(
                        Code::ParameterValue,
                        Pos::default(),
                        format!("parameter ${name} expects {}, got {v}", ty.describe()),
                    )
                })?;
                out.insert(name.clone(), val);
            }
        }
    }
    Ok(out)
}

pub(super) fn json_value(ty: &PropType, v: &serde_json::Value) -> Option<Value> {
    use crate::util::dates::{days_from_date, ms_from_datetime};
    Some(match ty {
        PropType::String | PropType::Enum(_) => Value::Str(v.as_str()?.to_string()),
        PropType::Bool => Value::Bool(v.as_bool()?),
        PropType::I32 => Value::Int(i32::try_from(v.as_i64()?).ok()? as i64),
        PropType::I64 => Value::Int(v.as_i64()?),
        PropType::U32 => Value::Int(u32::try_from(v.as_u64()?).ok()? as i64),
        PropType::U64 => match v.as_u64()? {
            u if u <= i64::MAX as u64 => Value::Int(u as i64),
            u => Value::UInt(u),
        },
        PropType::F32 | PropType::F64 => Value::Float(v.as_f64()?),
        PropType::Date => match v {
            serde_json::Value::String(s) => Value::Date(days_from_date(s)?),
            other => Value::Date(i32::try_from(other.as_i64()?).ok()?),
        },
        PropType::DateTime => match v {
            serde_json::Value::String(s) => Value::DateTime(ms_from_datetime(s)?),
            other => Value::DateTime(other.as_i64()?),
        },
        PropType::List(inner) => Value::List(
            v.as_array()?
                .iter()
                .map(|x| json_value(inner, x))
                .collect::<Option<_>>()?,
        ),
        PropType::Vector(n) => {
            let a = v.as_array()?;
            if a.len() != *n as usize {
                return None;
            }
            Value::Vector(
                a.iter()
                    .map(|x| x.as_f64().map(|f| f as f32))
                    .collect::<Option<_>>()?,
            )
        }
        PropType::Blob => return None,
    })
}
