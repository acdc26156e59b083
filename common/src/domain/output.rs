//! A model's output as stored: its JSON value, as the model returned it (a string, a number,
//! an array of an iterator's items, an object of fields), with every file in it, at any
//! depth, replaced by the URL of a stored file of the prediction's account. The runner puts
//! the files in ([`strings_mut`] finds each `data:` URI); each API surface renders the value
//! its own way (`views::output`). Outputs stored before values were kept are strings (text, a
//! file's URL, or compact JSON text) and render as they did.
//!
//! The walk over a value is here, once: the runner's swap of `data:` URIs for files, the
//! views' swap of stored file URLs for a surface's links and the console's search for files
//! all go through it.

use serde_json::Value;

/// Every string of `value` at any depth (array items, object fields), in document order,
/// each to be rewritten in place.
pub fn strings_mut(value: &mut Value) -> Vec<&mut String> {
    let mut found = Vec::new();
    collect(value, &mut found);
    found
}

fn collect<'a>(value: &'a mut Value, found: &mut Vec<&'a mut String>) {
    match value {
        Value::String(s) => found.push(s),
        Value::Array(items) => items.iter_mut().for_each(|item| collect(item, found)),
        Value::Object(fields) => fields.values_mut().for_each(|item| collect(item, found)),
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// Every string of `value` at any depth, in document order, to be read.
pub fn strings(value: &Value) -> Vec<&str> {
    fn walk<'a>(value: &'a Value, found: &mut Vec<&'a str>) {
        match value {
            Value::String(s) => found.push(s),
            Value::Array(items) => items.iter().for_each(|item| walk(item, found)),
            Value::Object(fields) => fields.values().for_each(|item| walk(item, found)),
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
    let mut found = Vec::new();
    walk(value, &mut found);
    found
}

/// `value` with every string at any depth passed through `f`.
pub fn map_strings(mut value: Value, mut f: impl FnMut(&str) -> String) -> Value {
    for s in strings_mut(&mut value) {
        *s = f(s);
    }
    value
}

/// Whether `value` holds a `data:` URI anywhere: a file not yet stored.
pub fn holds_data_uri(value: &Value) -> bool {
    strings(value).iter().any(|s| s.starts_with("data:"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_string_at_any_depth_is_found_and_nothing_else_changes() {
        let value = json!({"a": ["x", 1, {"b": "y"}], "c": true, "d": null, "e": 2.5, "f": "z"});
        let mapped = map_strings(value, str::to_uppercase);
        assert_eq!(mapped, json!({"a": ["X", 1, {"b": "Y"}], "c": true, "d": null, "e": 2.5, "f": "Z"}));
        let mut list = json!(["p", {"k": ["q"]}, 3]);
        assert_eq!(strings(&list), ["p", "q"]);
        assert_eq!(strings_mut(&mut list).len(), 2);
    }

    #[test]
    fn a_data_uri_is_found_wherever_it_sits() {
        assert!(holds_data_uri(&json!({"x": [1, {"y": "data:text/plain;base64,aGk="}]})));
        assert!(holds_data_uri(&json!("data:,")));
        assert!(!holds_data_uri(&json!({"x": ["http://h/f"], "n": 1})));
    }
}
