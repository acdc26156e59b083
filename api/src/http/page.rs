//! [`Page<T>`]: the envelope of every list the API answers (`results`, `next`, `previous`, and
//! `total_count` for the lists that count their matches).
//!
//! The JSON is Replicate's, the same for every list. The OpenAPI document keeps one named schema
//! per list (`PredictionPage`, `FilePage`, …): each listed type says what its page is called and
//! what its fields say through [`Listed`], and the schema is built from that.

use std::borrow::Cow;

use serde::Serialize;
use utoipa::{
    PartialSchema, ToSchema,
    openapi::{
        RefOr, Schema,
        schema::{ArrayBuilder, KnownFormat, ObjectBuilder, SchemaFormat, Type},
    },
};

/// A page of a list of `T`.
#[derive(Debug, Serialize)]
pub struct Page<T> {
    /// This page's items.
    pub results: Vec<T>,
    /// The next page, `null` on the last.
    pub next: Option<String>,
    /// The previous page, `null` on the first.
    pub previous: Option<String>,
    /// How many match in all, for the lists that count ([`Listed::TOTAL_COUNT`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_count: Option<u64>,
}

impl<T> Page<T> {
    /// A page of a list that counts its matches (`total`), with the links to its neighbours.
    pub fn counted(results: Vec<T>, (next, previous): (Option<String>, Option<String>), total: u64) -> Self {
        Self { results, next, previous, total_count: Some(total) }
    }

    /// A page of a list that does not count its matches, with the links to its neighbours.
    pub fn uncounted(results: Vec<T>, (next, previous): (Option<String>, Option<String>)) -> Self {
        Self { results, next, previous, total_count: None }
    }

    /// The same page with each item turned into what clients see.
    pub fn map<U>(self, view: impl FnMut(T) -> U) -> Page<U> {
        let Self { results, next, previous, total_count } = self;
        Page { results: results.into_iter().map(view).collect(), next, previous, total_count }
    }
}

/// A type the API lists: the name of its page's schema in the OpenAPI document and what the
/// page's fields say there.
pub trait Listed: ToSchema {
    /// The schema's name (`PredictionPage`).
    const PAGE: &'static str;
    /// What the page is.
    const DESCRIPTION: &'static str;
    /// What `results` holds.
    const RESULTS: &'static str;
    /// What `total_count` counts; `None` for a list without it.
    const TOTAL_COUNT: Option<&'static str>;
    /// What `next` is.
    const NEXT: &'static str = "The next page, `null` on the last.";
    /// What `previous` is.
    const PREVIOUS: &'static str = "The previous page, `null` on the first.";
}

impl<T: Listed> PartialSchema for Page<T> {
    fn schema() -> RefOr<Schema> {
        let link = |description: &str| {
            ObjectBuilder::new()
                .schema_type([Type::String, Type::Null].into_iter().collect::<utoipa::openapi::schema::SchemaType>())
                .description(Some(description))
        };
        let results =
            ArrayBuilder::new().items(utoipa::openapi::Ref::from_schema_name(T::name())).description(Some(T::RESULTS));
        let mut page = ObjectBuilder::new()
            .description(Some(T::DESCRIPTION))
            .property("results", results)
            .required("results")
            .property("next", link(T::NEXT))
            .property("previous", link(T::PREVIOUS));
        if let Some(counts) = T::TOTAL_COUNT {
            let total = ObjectBuilder::new()
                .schema_type(Type::Integer)
                .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
                .description(Some(counts))
                .minimum(Some(0));
            page = page.property("total_count", total).required("total_count");
        }
        RefOr::T(Schema::Object(page.build()))
    }
}

impl<T: Listed> ToSchema for Page<T> {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed(T::PAGE)
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((T::name().into_owned(), T::schema()));
        T::schemas(schemas);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize, utoipa::ToSchema)]
    struct Thing {
        id: u32,
    }

    impl Listed for Thing {
        const PAGE: &'static str = "ThingPage";
        const DESCRIPTION: &'static str = "A page of things.";
        const RESULTS: &'static str = "The things.";
        const TOTAL_COUNT: Option<&'static str> = Some("How many things.");
    }

    #[test]
    fn a_counted_page_links_its_neighbours_and_counts() {
        let links = crate::validate::paging::Paging { limit: 1, offset: 1 }.links(3, "http://h/v1/things");
        let page = Page::counted(vec![Thing { id: 1 }], links, 3);
        assert_eq!(
            serde_json::to_value(&page).expect("a page serializes"),
            serde_json::json!({
                "results": [{"id": 1}],
                "next": "http://h/v1/things?limit=1&offset=2",
                "previous": "http://h/v1/things?limit=1&offset=0",
                "total_count": 3,
            })
        );
    }

    #[test]
    fn the_schema_is_named_for_the_list_and_requires_the_count_it_has() {
        assert_eq!(Page::<Thing>::name(), "ThingPage");
        let schema = serde_json::to_value(Page::<Thing>::schema()).expect("a schema serializes");
        assert_eq!(schema["required"], serde_json::json!(["results", "total_count"]));
        assert_eq!(schema["properties"]["results"]["items"]["$ref"], "#/components/schemas/Thing");
        assert_eq!(schema["properties"]["next"]["type"], serde_json::json!(["string", "null"]));
    }
}
