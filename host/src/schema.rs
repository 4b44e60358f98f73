//! JSON Schema checks shared by tool arguments and skill inputs.

use std::fmt::Write as _;

use jsonschema::error::ValidationErrorKind;
use serde_json::Value;

/// Violations described in one error; the rest are counted. Enough for a
/// caller (or a model) to fix a typical call in one go, short enough to
/// stay readable.
const VIOLATIONS_SHOWN: usize = 5;

/// Checks `value` against `validator` and describes every violation (up to
/// [`VIOLATIONS_SHOWN`]), each naming its field by JSON pointer, e.g.
/// ``field `orderId`: 88231 is not of type "string"; field `reason`: missing
/// (required)``, so the caller can fix them all at once.
pub fn check(validator: &jsonschema::Validator, value: &Value) -> Result<(), String> {
    // `is_valid` stops at the first failure and builds no error: the fast
    // path for the common case. Only a failure pays for the description.
    if validator.is_valid(value) {
        return Ok(());
    }
    let mut message = String::new();
    let mut found = 0;
    for error in validator.iter_errors(value) {
        found += 1;
        if found > VIOLATIONS_SHOWN {
            continue;
        }
        if found > 1 {
            message.push_str("; ");
        }
        let path = error.instance_path().to_string();
        let field = path.trim_start_matches('/');
        match error.kind() {
            // Named after the missing field itself, not the object holding it.
            ValidationErrorKind::Required { property } => {
                let property = property
                    .as_str()
                    .map_or_else(|| property.to_string(), str::to_owned);
                let missing = if field.is_empty() {
                    property
                } else {
                    format!("{field}/{property}")
                };
                let _ = write!(message, "field `{missing}`: missing (required)");
            }
            _ if field.is_empty() => {
                let _ = write!(message, "{error}");
            }
            _ => {
                let _ = write!(message, "field `{field}`: {error}");
            }
        }
    }
    if found > VIOLATIONS_SHOWN {
        let _ = write!(message, "; and {} more", found - VIOLATIONS_SHOWN);
    }
    if message.is_empty() {
        // `is_valid` and `iter_errors` disagreed; trust the latter.
        return Ok(());
    }
    Err(message)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn validator() -> jsonschema::Validator {
        jsonschema::validator_for(&json!({
            "type": "object",
            "properties": {
                "orderId": {"type": "string"},
                "reason": {"type": "string"},
                "items": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"qty": {"type": "integer", "minimum": 1}},
                        "required": ["qty"],
                    },
                },
            },
            "required": ["orderId", "reason"],
            "additionalProperties": false,
        }))
        .expect("a valid schema")
    }

    #[test]
    fn valid_values_pass() {
        assert_eq!(
            check(&validator(), &json!({"orderId": "1", "reason": "x"})),
            Ok(())
        );
    }

    #[test]
    fn every_violation_is_named_by_its_field() {
        let message = check(&validator(), &json!({"orderId": 88231})).unwrap_err();
        assert!(
            message.contains("field `orderId`: 88231 is not of type \"string\""),
            "{message}"
        );
        assert!(
            message.contains("field `reason`: missing (required)"),
            "{message}"
        );

        let nested = json!({"orderId": "1", "reason": "x", "items": [{"qty": 0}, {}]});
        let message = check(&validator(), &nested).unwrap_err();
        assert!(
            message.contains("field `items/0/qty`: 0 is less than the minimum of 1"),
            "{message}"
        );
        assert!(
            message.contains("field `items/1/qty`: missing (required)"),
            "{message}"
        );

        let message = check(
            &validator(),
            &json!({"orderId": "1", "reason": "x", "extra": 1}),
        )
        .unwrap_err();
        assert!(message.contains("'extra' was unexpected"), "{message}");
    }

    #[test]
    fn long_lists_are_cut_with_a_count() {
        let items: Vec<Value> = (0..8).map(|_| json!({})).collect();
        let value = json!({"orderId": "1", "reason": "x", "items": items});
        let message = check(&validator(), &value).unwrap_err();
        assert_eq!(
            message.matches("missing (required)").count(),
            VIOLATIONS_SHOWN
        );
        assert!(message.ends_with("; and 3 more"), "{message}");
    }
}
