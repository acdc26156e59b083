//! Models compiled into the runner, so the system is useful and testable without external
//! model servers. They are served and registered like any other model; nothing outside the
//! runner knows they are built in.

pub mod echo;
pub mod fail;
pub mod pattern;
pub mod sleep;
pub mod text_to_image;
pub mod text_to_video;

use std::sync::Arc;

use super::Model;

/// Every built-in model.
pub fn all() -> Vec<Arc<dyn Model>> {
    vec![
        Arc::new(echo::Echo::new()),
        Arc::new(sleep::Sleep::new()),
        Arc::new(fail::Fail::new()),
        Arc::new(text_to_image::TextToImage::new()),
        Arc::new(text_to_video::TextToVideo::new()),
    ]
}
