//! What the services' Prometheus metrics share: the OpenMetrics page built from a service's
//! own registry and the MongoDB command counts, and the `model` label.
//!
//! Each service keeps its own [`Registry`] of families (its `metrics.rs`); this module only
//! renders them. A page ends in exactly one `# EOF`, after every part. [`kit`] is the one list
//! of metric types the services build their families from.

use prometheus_client::{
    encoding::{EncodeLabelSet, text::encode},
    registry::Registry,
};

/// The Prometheus types every service's `metrics.rs` uses: `use common::metrics::kit::*;`.
pub mod kit {
    pub use prometheus_client::{
        encoding::EncodeLabelSet,
        metrics::{
            counter::Counter,
            family::Family,
            gauge::Gauge,
            histogram::{Histogram, exponential_buckets},
        },
        registry::Registry,
    };
}

/// The `model` label (`owner/name`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModelLabel {
    /// The model.
    pub model: String,
}

impl ModelLabel {
    /// The label of `model`.
    pub fn of(model: impl ToString) -> Self {
        Self { model: model.to_string() }
    }
}

/// The families of `registry` in the OpenMetrics text format, without the closing `# EOF`.
pub fn families(registry: &Registry) -> String {
    let mut text = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut text, registry);
    text.trim_end_matches("# EOF\n").to_owned()
}

/// A whole OpenMetrics page: `parts` one after the other, then `# EOF`.
pub fn page(parts: &[&str]) -> String {
    let mut text = parts.concat();
    text.push_str("# EOF\n");
    text
}

#[cfg(test)]
mod tests {
    use prometheus_client::metrics::{counter::Counter, family::Family};

    use super::*;

    #[test]
    fn a_page_of_several_parts_ends_in_one_eof() {
        let mut registry = Registry::default();
        let created = Family::<ModelLabel, Counter>::default();
        registry.register("created", "Created", created.clone());
        created.get_or_create(&ModelLabel::of("demo/echo")).inc();
        let ours = families(&registry);
        assert!(ours.contains(r#"created_total{model="demo/echo"} 1"#), "{ours}");
        assert!(!ours.contains("# EOF"));
        let text = page(&[&ours, "# TYPE other counter\n"]);
        assert_eq!(text.matches("# EOF").count(), 1);
        assert!(text.ends_with("# TYPE other counter\n# EOF\n"), "{text}");
    }
}
