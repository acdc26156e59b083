//! What clients see: the API's views of stored records (a prediction, a file), rendered for one
//! API surface. They are contracts too: the status events carry a prediction's view, and the
//! notifier delivers it as the webhook payload unchanged.
//!
//! Also here:
//! - [`output`]: a prediction's `output` as each API surface shows it, from the stored value.

pub mod file;
pub mod output;
pub mod prediction;

pub use file::{FileChecksums, FileUrls, FileView};
pub use prediction::{ErrorView, MetricsView, PredictionView, QueuePlace, StatusView};
