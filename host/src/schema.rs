//! JSON Schema checks shared by tool arguments and skill inputs.

use serde_json::Value;

/// Checks `value` against `validator` and describes the first violation,
/// naming the field by its JSON pointer so the caller can fix it.
pub fn check(validator: &jsonschema::Validator, value: &Value) -> Result<(), String> {
    // `is_valid` stops at the first failure and builds no error: the fast
    // path for the common case. Only a failure pays for the description.
    if validator.is_valid(value) {
        return Ok(());
    }
    let Some(error) = validator.iter_errors(value).next() else {
        return Ok(());
    };
    let path = error.instance_path().to_string();
    Err(if path.is_empty() {
        error.to_string()
    } else {
        format!("field `{}`: {error}", path.trim_start_matches('/'))
    })
}
