//! Cog outputs as the runner hands them on: the model's JSON value as it is (a string, an
//! iterator's items, an object), its files still `data:` URIs wherever they sit, or already
//! stored files when the server uploaded them ([`super::uploads`]). The executor stores each
//! `data:` URI as a file when the prediction ends (`execute::output_files`).

use serde_json::Value;

use crate::models::ModelOutput;

/// The output so far, as a snapshot shows it while the model runs: coglet sends the output of
/// a model that returns one value as a one-item list until it ends, so for a model whose
/// output is not an array that list is its value.
pub fn partial(output: &Value, returns_array: bool) -> Value {
    match output {
        Value::Array(items) if !returns_array && items.len() == 1 => items[0].clone(),
        other => other.clone(),
    }
}

/// The final output.
pub fn convert(output: Value) -> ModelOutput {
    match output {
        Value::String(text) if !text.starts_with("data:") => ModelOutput::Text(text),
        other => ModelOutput::Json(other),
    }
}

/// Whether output schema `schema` is an array (a list, or an iterator's items).
pub fn returns_array(schema: Option<&Value>) -> bool {
    schema.and_then(|s| s.get("type")).and_then(Value::as_str) == Some("array")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_output_stays_the_models_value() {
        assert_eq!(convert(json!("hi")), ModelOutput::Text("hi".into()));
        assert_eq!(convert(json!(["a ", "b"])), ModelOutput::Json(json!(["a ", "b"])));
        assert_eq!(convert(json!({"x": 1})), ModelOutput::Json(json!({"x": 1})));
        assert_eq!(
            convert(json!("data:text/plain;base64,aGk=")),
            ModelOutput::Json(json!("data:text/plain;base64,aGk="))
        );
    }

    #[test]
    fn a_one_value_models_partial_list_is_its_value() {
        assert_eq!(partial(&json!(["x"]), false), json!("x"));
        assert_eq!(partial(&json!(["x"]), true), json!(["x"]));
        assert_eq!(partial(&json!(["a", "b"]), true), json!(["a", "b"]));
        assert!(returns_array(Some(&json!({"type": "array", "items": {"type": "string"}}))));
        assert!(!returns_array(Some(&json!({"type": "string"}))));
        assert!(!returns_array(None));
    }
}
