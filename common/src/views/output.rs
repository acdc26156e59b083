//! A prediction's `output` as each API surface shows it, from the stored value
//! ([`crate::domain::output`]):
//!
//! | stored | `/replicate/v1` | `/v1` (always a string) |
//! |---|---|---|
//! | text | the text | the text |
//! | a file (its stored URL) | the link to its bytes | the link to its bytes |
//! | an array of text items (an iterator's tokens) | the array | the items joined: the text |
//! | anything else | the value, every file in it as its link | its compact JSON text, files as links |
//!
//! A file's link is the surface's signed `…/files/{id}/download?owner=…&expiry=…&signature=…`
//! ([`Links::output`]), which opens without a key: built when rendered, so it is fresh with
//! each answer and outputs stored before keep working under a new base URL. Never a `data:`
//! URI: the runner stored each as a file before the output was written.

use serde_json::Value;

use crate::{
    domain::{AccountId, ApiSurface, output::map_strings},
    links::Links,
};

/// The stored `output` of a prediction of `owner` as `surface` shows it.
pub fn render(stored: &Value, links: &Links, surface: ApiSurface, owner: &AccountId) -> Value {
    match (surface, stored) {
        (_, Value::String(text)) => Value::String(links.output(text, surface, owner)),
        (ApiSurface::Replicate, value) => linked(value, links, surface, owner),
        (ApiSurface::Canonical, Value::Array(items)) if is_text(items, links) => {
            Value::String(items.iter().filter_map(Value::as_str).collect())
        }
        (ApiSurface::Canonical, value) => Value::String(linked(value, links, surface, owner).to_string()),
    }
}

/// `value` with each stored file in it as `surface`'s signed link to its bytes.
pub fn linked(value: &Value, links: &Links, surface: ApiSurface, owner: &AccountId) -> Value {
    map_strings(value.clone(), |s| links.output(s, surface, owner))
}

/// Whether `items` are an iterator's text: strings, none of them a stored file.
fn is_text(items: &[Value], links: &Links) -> bool {
    items.iter().all(|item| item.as_str().is_some_and(|s| links.stored_file(s).is_none()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::FileId;
    use serde_json::json;

    fn links() -> Links {
        Links::for_tests("http://h")
    }

    /// `value` with the signature of every signed link cut off (each is checked in `links`):
    /// up to the end of the string, or to the quote that ends it in a JSON text.
    fn unsigned(value: Value) -> Value {
        map_strings(value, |s| {
            let mut out = s.to_owned();
            while let Some(at) = out.find("?owner=") {
                let end = out[at..].find('"').map_or(out.len(), |n| at + n);
                out.replace_range(at..end, "");
            }
            out
        })
    }

    #[test]
    fn each_shape_renders_as_the_table_says() {
        let l = links();
        let owner = AccountId::generate();
        let (a, b) = (FileId::generate(), FileId::generate());
        let stored = |f: &FileId| l.file(f, ApiSurface::Canonical);
        let v1 = |f: &FileId| format!("http://h/v1/files/{f}/download");
        let rep = |f: &FileId| format!("http://h/replicate/v1/files/{f}/download");
        let render_both = |v: Value| {
            let (canonical, replicate) =
                (render(&v, &l, ApiSurface::Canonical, &owner), render(&v, &l, ApiSurface::Replicate, &owner));
            (unsigned(canonical), unsigned(replicate))
        };

        assert_eq!(render_both(json!("hi")), (json!("hi"), json!("hi")));
        assert_eq!(render_both(json!(stored(&a))), (json!(v1(&a)), json!(rep(&a))));
        assert_eq!(render_both(json!(["Hel", "lo"])), (json!("Hello"), json!(["Hel", "lo"])));
        let files = json!([stored(&a), stored(&b)]);
        assert_eq!(render_both(files), (json!(json!([v1(&a), v1(&b)]).to_string()), json!([rep(&a), rep(&b)])));
        let object = json!({"file": stored(&a), "text": "t", "scores": [0.5, 1], "ok": true});
        let (canonical, replicate) = render_both(object);
        assert_eq!(replicate, json!({"file": rep(&a), "text": "t", "scores": [0.5, 1], "ok": true}));
        let text = canonical.as_str().expect("a string on /v1");
        assert_eq!(
            serde_json::from_str::<Value>(text).expect("compact JSON"),
            json!({"file": v1(&a), "text": "t", "scores": [0.5, 1], "ok": true})
        );
        assert!(!text.contains(' '), "compact: {text}");
        assert_eq!(render_both(json!(42)), (json!("42"), json!(42)));
    }

    #[test]
    fn outputs_stored_as_strings_before_values_render_as_they_did() {
        let l = links();
        let old_json_text = json!("{\"sha256\":\"ab\",\"size\":2}");
        let owner = AccountId::generate();
        assert_eq!(render(&old_json_text, &l, ApiSurface::Replicate, &owner), old_json_text);
        assert_eq!(render(&old_json_text, &l, ApiSurface::Canonical, &owner), old_json_text);
    }
}
