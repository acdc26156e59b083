//! Logging, set up once per process. `LOG_FORMAT=json` gives one JSON object per line for
//! production; the default is readable text. `RUST_LOG` filters (default `info`). Logs go to
//! stderr, so that a command's own output on stdout (e.g. the key `api admin bootstrap` prints)
//! stays clean.

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

/// Installs the global subscriber. Calling it again (tests) is harmless.
pub fn init(service: &'static str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let json = std::env::var("LOG_FORMAT").is_ok_and(|v| v.eq_ignore_ascii_case("json"));
    let registry = tracing_subscriber::registry().with(filter);
    let installed = if json {
        registry.with(fmt::layer().json().with_current_span(true).with_writer(std::io::stderr)).try_init()
    } else {
        registry.with(fmt::layer().with_target(false).with_writer(std::io::stderr)).try_init()
    };
    if installed.is_ok() {
        tracing::info!(service, version = crate::VERSION, "starting");
    }
}

/// For tests: logs to the test harness's captured output, filtered by `RUST_LOG`.
pub fn init_for_tests() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    let _ = tracing_subscriber::registry().with(filter).with(fmt::layer().with_test_writer()).try_init();
}
