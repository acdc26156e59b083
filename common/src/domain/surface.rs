//! The two API surfaces a prediction can be seen through: the canonical `/v1` and the
//! Replicate-compatible `/replicate/v1` (docs/replicate.md). They share handlers, keys, limits and
//! storage; they differ only in the shape of what they return (see
//! [`crate::domain::prediction::Prediction::view`]). A prediction remembers the surface that
//! created it, so its webhooks carry the shape its creator reads.

use serde::{Deserialize, Serialize};

/// An API surface.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum ApiSurface {
    /// `/v1`: the interface's own shapes (`error` is `{code, message}`).
    #[default]
    #[serde(rename = "v1")]
    Canonical,
    /// `/replicate/v1`: Replicate's shapes (`error` is the message string).
    #[serde(rename = "replicate")]
    Replicate,
}

impl ApiSurface {
    /// The path every route of this surface starts with.
    pub const fn root(self) -> &'static str {
        match self {
            Self::Canonical => "/v1",
            Self::Replicate => "/replicate/v1",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_surface_has_its_own_root_and_stored_name() {
        assert_eq!(ApiSurface::Canonical.root(), "/v1");
        assert_eq!(ApiSurface::Replicate.root(), "/replicate/v1");
        assert_eq!(serde_json::to_value(ApiSurface::Replicate).ok(), Some(serde_json::json!("replicate")));
        assert_eq!(ApiSurface::default(), ApiSurface::Canonical, "records stored before surfaces existed");
    }
}
