//! JSON Schema checks shared by tool arguments and skill inputs.

use std::fmt::Write as _;

use jsonschema::error::ValidationErrorKind;
use serde_json::Value;

use crate::text::{Escaped, OUTSIDE_TEXT_BYTES};

/// Violations described in one error; the rest are counted. Enough for a
/// caller (or a model) to fix a typical call in one go, short enough to
/// stay readable.
const VIOLATIONS_SHOWN: usize = 5;

/// Checks `value` against `validator` and describes every violation (up to
/// [`VIOLATIONS_SHOWN`]), each naming its field by JSON pointer, e.g.
/// ``field `orderId`: 88231 is not of type "string"; field `reason`: missing
/// (required)``, so the caller can fix them all at once.
///
/// The violations quote the value checked (its keys, its strings), which a
/// guest or a model wrote: the description is escaped and cut at 4 KiB
/// ([`crate::text::escaped`]) as it is written, since it is kept in records
/// and logs.
pub fn check(validator: &jsonschema::Validator, value: &Value) -> Result<(), String> {
    // `is_valid` stops at the first failure and builds no error: the fast
    // path for the common case. Only a failure pays for the description.
    if validator.is_valid(value) {
        return Ok(());
    }
    let mut message = Escaped::new(OUTSIDE_TEXT_BYTES);
    let mut found = 0;
    for error in validator.iter_errors(value) {
        found += 1;
        if found > VIOLATIONS_SHOWN {
            continue;
        }
        if found > 1 {
            message.push("; ");
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
    if found == 0 {
        // `is_valid` and `iter_errors` disagreed; trust the latter.
        return Ok(());
    }
    let mut message = message.finish();
    if found > VIOLATIONS_SHOWN {
        let _ = write!(message, "; and {} more", found - VIOLATIONS_SHOWN);
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

    /// Regression: an unexpected key was quoted whole and raw, so a guest
    /// calling a read tool with a 1 MiB key holding a line break wrote a
    /// 1 MiB warning, and a line of its own.
    #[test]
    fn a_violation_quoting_a_huge_forged_key_is_escaped_and_cut() {
        let key = format!("\nINFO forged line{}", "x".repeat(1 << 20));
        let arguments = json!({"orderId": "1", "reason": "x", key: 1});
        let message = check(&validator(), &arguments).unwrap_err();
        assert!(message.len() < 2 * OUTSIDE_TEXT_BYTES, "{}", message.len());
        assert!(message.contains("'\\nINFO forged line"), "{message}");
        assert!(!message.contains('\n') && message.contains("bytes cut"));
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
