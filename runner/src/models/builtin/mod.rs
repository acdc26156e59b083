//! Models compiled into the runner, so the system is useful and testable without external
//! model servers. They are served and registered like any other model; nothing outside the
//! runner knows they are built in.

pub mod echo;
pub mod sleep;

use std::sync::Arc;

use super::Model;

/// Every built-in model.
pub fn all() -> Vec<Arc<dyn Model>> {
    vec![Arc::new(echo::Echo::new()), Arc::new(sleep::Sleep::new())]
}
