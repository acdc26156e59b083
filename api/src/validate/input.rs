//! A prediction's `input` checked against the model's input JSON Schema.
//!
//! The subset the contract names is supported: `type` (also a list of types, and `nullable`),
//! `required`, `default`, `enum`, `minimum`/`maximum` and their exclusive forms,
//! `minLength`/`maxLength`, and `items` for arrays; local `$ref`s (`#/...`) and `allOf` are
//! followed, because Cog describes `choices` inputs that way. Other keywords are ignored.
//!
//! The result is what the model receives: only the properties the schema declares (unless it
//! says `additionalProperties: true`), with defaults applied and integral numbers such as `2.0`
//! turned into integers where the schema asks for an integer (Python models would otherwise
//! receive a float). A `null` value counts as absent. Every failing field is reported, as
//! `input.<name>` (and `input.<name>[i]` inside arrays).
//!
//! A string with `format: uri` must be a URL of a kind a model can read a file from: an
//! `http(s)` URL (a file of this service is one of those, checked against its owner later, in
//! [`crate::ops::file_inputs`]) or a `data:` URI. [`uri_values`] lists them.

use crate::problem::FieldError;
use serde_json::{Map, Number, Value};

const MAX_REF_DEPTH: usize = 16;

/// Validates `input`; returns the model's input, or every field error.
pub fn validate(schema: &Value, input: &Map<String, Value>) -> Result<Map<String, Value>, Vec<FieldError>> {
    let validator = Validator { root: schema };
    let mut errors = Vec::new();
    let mut model_input = Map::new();
    let empty = Map::new();
    let properties = schema.get("properties").and_then(Value::as_object).unwrap_or(&empty);

    let required = schema.get("required").and_then(Value::as_array).into_iter().flatten();
    for name in required.filter_map(Value::as_str) {
        if input.get(name).is_none_or(Value::is_null) {
            errors.push(FieldError::missing(format!("input.{name}")));
        }
    }
    for (name, property) in properties {
        match input.get(name) {
            Some(value) if !value.is_null() => {
                let path = format!("input.{name}");
                if let Some(v) = validator.check(value, property, &path, &mut errors) {
                    model_input.insert(name.clone(), v);
                }
            }
            _ => {
                if let Some(default) = validator.default_of(property) {
                    model_input.insert(name.clone(), default.clone());
                }
            }
        }
    }
    if schema.get("additionalProperties") == Some(&Value::Bool(true)) {
        for (name, value) in input {
            if !properties.contains_key(name) {
                model_input.insert(name.clone(), value.clone());
            }
        }
    }
    if errors.is_empty() { Ok(model_input) } else { Err(errors) }
}

struct Validator<'a> {
    root: &'a Value,
}

impl<'a> Validator<'a> {
    /// The schema itself and every schema it pulls in through `$ref` and `allOf`.
    fn parts(&self, schema: &'a Value) -> Vec<&'a Value> {
        let mut out = Vec::new();
        self.collect(schema, 0, &mut out);
        out
    }

    fn collect(&self, schema: &'a Value, depth: usize, out: &mut Vec<&'a Value>) {
        if depth > MAX_REF_DEPTH {
            return;
        }
        out.push(schema);
        if let Some(target) = schema.get("$ref").and_then(Value::as_str).and_then(|r| self.resolve(r)) {
            self.collect(target, depth + 1, out);
        }
        for sub in schema.get("allOf").and_then(Value::as_array).into_iter().flatten() {
            self.collect(sub, depth + 1, out);
        }
    }

    fn resolve(&self, reference: &str) -> Option<&'a Value> {
        self.root.pointer(reference.strip_prefix('#')?)
    }

    fn default_of(&self, schema: &'a Value) -> Option<&'a Value> {
        self.parts(schema).into_iter().find_map(|p| p.get("default"))
    }

    /// Checks one value; returns it as the model should receive it, or records errors.
    fn check(&self, value: &Value, schema: &'a Value, path: &str, errors: &mut Vec<FieldError>) -> Option<Value> {
        let before = errors.len();
        let mut value = value.clone();
        for part in self.parts(schema) {
            if let Some(normalized) = check_type(&value, part, path, errors) {
                value = normalized;
            }
            if errors.len() > before {
                return None; // a value of the wrong type cannot be checked further
            }
            check_enum(&value, part, path, errors);
            check_uri(&value, part, path, errors);
            check_bounds(&value, part, path, errors);
            check_length(&value, part, path, errors);
            if let (Some(items), Value::Array(list)) = (part.get("items"), &mut value) {
                for (i, item) in list.iter_mut().enumerate() {
                    if let Some(v) = self.check(item, items, &format!("{path}[{i}]"), errors) {
                        *item = v;
                    }
                }
            }
        }
        (errors.len() == before).then_some(value)
    }
}

/// Whether `value` is of the JSON Schema `kind`; an integral float is an integer, normalized.
fn matches_type(value: &Value, kind: &str) -> Option<Value> {
    let ok = match kind {
        "string" => value.is_string(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        "null" => value.is_null(),
        "integer" => return integer(value),
        _ => true,
    };
    ok.then(|| value.clone())
}

fn integer(value: &Value) -> Option<Value> {
    if value.as_number().is_some_and(|n| n.is_i64() || n.is_u64()) {
        return Some(value.clone());
    }
    super::body::integer(value).map(|i| Value::Number(Number::from(i)))
}

fn check_type(value: &Value, schema: &Value, path: &str, errors: &mut Vec<FieldError>) -> Option<Value> {
    let kinds: Vec<&str> = match schema.get("type") {
        Some(Value::String(k)) => vec![k.as_str()],
        Some(Value::Array(ks)) => ks.iter().filter_map(Value::as_str).collect(),
        _ => return None,
    };
    if value.is_null() && schema.get("nullable") == Some(&Value::Bool(true)) {
        return None;
    }
    let found = kinds.iter().find_map(|k| matches_type(value, k));
    if found.is_none() {
        errors.push(FieldError::invalid(path, format!("Must be of type {}.", kinds.join(" or "))));
    }
    found
}

/// Whether `schema` (or one of its parts) says `format: uri`.
fn is_uri(schema: &Value) -> bool {
    schema.get("format").and_then(Value::as_str) == Some("uri")
}

fn check_uri(value: &Value, schema: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let Some(text) = value.as_str().filter(|_| is_uri(schema)) else { return };
    let readable = if let Some(data) = text.strip_prefix("data:") {
        data.contains(',')
    } else {
        url::Url::parse(text).is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.has_host())
    };
    if !readable {
        errors.push(FieldError::invalid(
            path,
            "Must be a file's URL: a file of this service (its urls.get or urls.download), an http(s) URL or a data: URI.",
        ));
    }
}

/// The inputs `schema` marks `x-cog-secret` (Cog's `Secret`): sealed at the create, shown
/// masked ([`common::domain::secret_inputs`]).
pub fn secret_fields(schema: &Value) -> Vec<String> {
    let validator = Validator { root: schema };
    let empty = Map::new();
    let properties = schema.get("properties").and_then(Value::as_object).unwrap_or(&empty);
    properties
        .iter()
        .filter(|(_, property)| {
            validator.parts(property).iter().any(|p| p.get("x-cog-secret") == Some(&Value::Bool(true)))
        })
        .map(|(name, _)| name.clone())
        .collect()
}

/// Every `format: uri` string of `model_input` (validated against `schema`), with its field
/// path (`input.<name>`, or `input.<name>[i]` inside an array).
pub fn uri_values(schema: &Value, model_input: &Map<String, Value>) -> Vec<(String, String)> {
    let validator = Validator { root: schema };
    let empty = Map::new();
    let properties = schema.get("properties").and_then(Value::as_object).unwrap_or(&empty);
    let mut out = Vec::new();
    for (name, property) in properties {
        let parts = validator.parts(property);
        match model_input.get(name) {
            Some(Value::String(s)) if parts.iter().any(|p| is_uri(p)) => out.push((format!("input.{name}"), s.clone())),
            Some(Value::Array(items)) => {
                let item_schemas = parts.iter().filter_map(|p| p.get("items"));
                if item_schemas.flat_map(|i| validator.parts(i)).any(is_uri) {
                    for (i, item) in items.iter().enumerate() {
                        if let Some(s) = item.as_str() {
                            out.push((format!("input.{name}[{i}]"), s.to_owned()));
                        }
                    }
                }
            }
            _ => {}
        }
    }
    out
}

fn check_enum(value: &Value, schema: &Value, path: &str, errors: &mut Vec<FieldError>) {
    if let Some(options) = schema.get("enum").and_then(Value::as_array)
        && !options.iter().any(|o| same_value(o, value))
    {
        let listed: Vec<String> = options.iter().map(Value::to_string).collect();
        errors.push(FieldError::invalid(path, format!("Must be one of {}.", listed.join(", "))));
    }
}

fn same_value(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

fn check_bounds(value: &Value, schema: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let Some(x) = value.as_f64() else { return };
    let bound = |key: &str| schema.get(key).and_then(Value::as_f64);
    let mut fail = |msg: String| errors.push(FieldError::invalid(path, msg));
    if let Some(min) = bound("minimum").filter(|min| x < *min) {
        fail(format!("Must be at least {}.", fmt_num(min)));
    }
    if let Some(max) = bound("maximum").filter(|max| x > *max) {
        fail(format!("Must be at most {}.", fmt_num(max)));
    }
    if let Some(min) = bound("exclusiveMinimum").filter(|min| x <= *min) {
        fail(format!("Must be greater than {}.", fmt_num(min)));
    }
    if let Some(max) = bound("exclusiveMaximum").filter(|max| x >= *max) {
        fail(format!("Must be less than {}.", fmt_num(max)));
    }
}

fn fmt_num(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 9.0e15 { format!("{}", x as i64) } else { x.to_string() }
}

fn check_length(value: &Value, schema: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let Some(s) = value.as_str() else { return };
    let len = s.chars().count() as u64;
    if let Some(min) = schema.get("minLength").and_then(Value::as_u64).filter(|min| len < *min) {
        errors.push(FieldError::invalid(path, format!("Must be at least {min} characters long.")));
    }
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64).filter(|max| len > *max) {
        errors.push(FieldError::invalid(path, format!("Must be at most {max} characters long.")));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::FieldErrorCode;
    use serde_json::json;

    fn echo_schema() -> Value {
        json!({
            "type": "object",
            "required": ["prompt"],
            "properties": {
                "prompt": {"type": "string", "minLength": 1, "maxLength": 5},
                "repeat": {"type": "integer", "default": 1, "minimum": 1, "maximum": 10},
            }
        })
    }

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().expect("object")
    }

    fn fields(errors: &[FieldError]) -> Vec<(&str, FieldErrorCode)> {
        errors.iter().map(|e| (e.field.as_str(), e.code)).collect()
    }

    #[test]
    fn defaults_are_applied_and_unknown_parameters_dropped() {
        let out = validate(&echo_schema(), &obj(json!({"prompt": "hi", "bogus": 1}))).expect("valid");
        assert_eq!(Value::Object(out), json!({"prompt": "hi", "repeat": 1}));
    }

    #[test]
    fn a_missing_required_field_is_reported_as_missing() {
        let errors = validate(&echo_schema(), &obj(json!({}))).expect_err("invalid");
        assert_eq!(fields(&errors), vec![("input.prompt", FieldErrorCode::MissingField)]);
        let errors = validate(&echo_schema(), &obj(json!({"prompt": null}))).expect_err("invalid");
        assert_eq!(fields(&errors), vec![("input.prompt", FieldErrorCode::MissingField)]);
    }

    #[test]
    fn every_failing_field_is_reported_at_once() {
        let errors = validate(&echo_schema(), &obj(json!({"repeat": 11}))).expect_err("invalid");
        assert_eq!(
            fields(&errors),
            vec![("input.prompt", FieldErrorCode::MissingField), ("input.repeat", FieldErrorCode::InvalidArgument)]
        );
    }

    #[test]
    fn bounds_hold_on_both_sides() {
        for (repeat, ok) in [(0, false), (1, true), (10, true), (11, false)] {
            let r = validate(&echo_schema(), &obj(json!({"prompt": "a", "repeat": repeat})));
            assert_eq!(r.is_ok(), ok, "repeat={repeat}");
        }
        for (prompt, ok) in [("", false), ("a", true), ("abcde", true), ("abcdef", false)] {
            let r = validate(&echo_schema(), &obj(json!({"prompt": prompt})));
            assert_eq!(r.is_ok(), ok, "prompt={prompt:?}");
        }
    }

    #[test]
    fn wrong_types_are_invalid_arguments_and_strings_are_not_coerced() {
        let errors = validate(&echo_schema(), &obj(json!({"prompt": 123, "repeat": "3"}))).expect_err("invalid");
        assert_eq!(
            fields(&errors),
            vec![("input.prompt", FieldErrorCode::InvalidArgument), ("input.repeat", FieldErrorCode::InvalidArgument)]
        );
        assert!(validate(&echo_schema(), &obj(json!({"prompt": "a", "repeat": 2.5}))).is_err());
    }

    #[test]
    fn an_integral_float_becomes_an_integer_for_the_model() {
        let out = validate(&echo_schema(), &obj(json!({"prompt": "a", "repeat": 2.0}))).expect("valid");
        assert_eq!(out["repeat"], json!(2));
        assert!(out["repeat"].is_i64());
    }

    #[test]
    fn cog_choices_through_all_of_and_ref_are_enforced_with_their_default() {
        let schema = json!({
            "type": "object",
            "properties": {"kind": {"allOf": [{"$ref": "#/components/schemas/kind"}], "default": "png"}},
            "components": {"schemas": {"kind": {"type": "string", "enum": ["png", "txt"]}}}
        });
        assert_eq!(validate(&schema, &obj(json!({}))).expect("valid")["kind"], "png");
        assert!(validate(&schema, &obj(json!({"kind": "txt"}))).is_ok());
        let errors = validate(&schema, &obj(json!({"kind": "gif"}))).expect_err("invalid");
        assert_eq!(fields(&errors), vec![("input.kind", FieldErrorCode::InvalidArgument)]);
    }

    #[test]
    fn array_items_are_checked_one_by_one() {
        let schema = json!({"properties": {"xs": {"type": "array", "items": {"type": "integer", "maximum": 3}}}});
        let errors = validate(&schema, &obj(json!({"xs": [1, 4, "a"]}))).expect_err("invalid");
        let names: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(names, vec!["input.xs[1]", "input.xs[2]"]);
    }

    #[test]
    fn a_self_referencing_schema_does_not_loop_forever() {
        let schema = json!({"properties": {"a": {"$ref": "#/properties/a"}}});
        assert!(validate(&schema, &obj(json!({"a": 1}))).is_ok());
    }

    #[test]
    fn a_uri_input_takes_http_urls_and_data_uris_and_nothing_else() {
        let schema = json!({"properties": {
            "image": {"type": "string", "format": "uri"},
            "masks": {"type": "array", "items": {"type": "string", "format": "uri"}},
            "name": {"type": "string"},
        }});
        let good = json!({"image": "https://h/x.png", "masks": ["data:image/png;base64,AAAA", "http://h/v1/files/f"], "name": "a"});
        let model_input = validate(&schema, &obj(good)).expect("valid");
        assert_eq!(
            uri_values(&schema, &model_input),
            vec![
                ("input.image".to_owned(), "https://h/x.png".to_owned()),
                ("input.masks[0]".to_owned(), "data:image/png;base64,AAAA".to_owned()),
                ("input.masks[1]".to_owned(), "http://h/v1/files/f".to_owned()),
            ]
        );
        let bad = json!({"image": "ftp://h/x", "masks": ["data:nocomma", "/relative"], "name": "not a url at all"});
        let errors = validate(&schema, &obj(bad)).expect_err("invalid");
        let names: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(names, vec!["input.image", "input.masks[0]", "input.masks[1]"]);
    }
}
