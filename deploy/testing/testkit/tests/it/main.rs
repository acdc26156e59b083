//! The test harness's own integration tests: that the stand-ins it and `deploy/local/up` start
//! behave as the MongoDB the services are written for.
//!
//! Its modules:
//! - [`standin_connections`]: each connection's commands apart, as mongod runs them.
//! - [`standin_scans`]: the MongoDB stand-in on its H2 file.
//! - [`standin_unique_keys`]: the H2 stand-in orders its unique indexes' keys of strings itself.

mod standin_connections;
mod standin_scans;
mod standin_unique_keys;
