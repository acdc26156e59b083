//! The test harness's own integration tests: that the stand-ins it and `deploy/local/up` start
//! behave as the MongoDB the services are written for.

mod standin_scans;
mod standin_unique_keys;
