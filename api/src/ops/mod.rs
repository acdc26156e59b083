//! Operations that the API's routes and the console share: each takes typed input and the
//! caller, reads and writes through [`common`], and returns domain values; the callers render
//! them (JSON, problem+json, or a page). They are the handlers' one door to the store: a
//! handler never reaches the store itself (held by `tests::handlers_reach_the_store_only_through_ops`).
//!
//! - Predictions and trainings: [`submit`] (validate, store, publish), [`training`] and
//!   [`trained`] (a fine-tune and the versions it makes), [`versions`] (what `version` names),
//!   [`owned`] (the caller's own, and the models it may see), [`models`] (an account's own
//!   models and their versions: create, change, delete), [`jobs`] (lists of them),
//!   [`file_inputs`] (the caller's files an input names),
//!   [`cancel`], [`idempotency`], [`wait`] (`Prefer: wait`).
//! - Accounts: [`accounts`] (keys), [`signing_secret`], [`deployment_changes`], [`usage`].
//! - Files and webhooks: [`uploads`], [`deliveries`] (resends).
//! - [`lists`]: the account's deployments, keys and files, a page at a time.
//! - [`sessions`]: the console's sign-in sessions.

pub mod accounts;
pub mod cancel;
pub mod deliveries;
pub mod deployment_changes;
pub mod file_inputs;
pub mod idempotency;
pub mod jobs;
pub mod lists;
pub mod models;
pub mod owned;
pub mod sessions;
pub mod signing_secret;
pub mod submit;
pub mod trained;
pub mod training;
pub mod uploads;
pub mod usage;
pub mod versions;
pub mod wait;

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    /// The source files under `dir`, recursively.
    fn sources(dir: &Path, found: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("a source folder") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                sources(&path, found);
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.push(path);
            }
        }
    }

    /// Where `line` (code, not a comment) reaches the store itself: the state's `store`
    /// field, or the api's own collections.
    fn reaches_the_store(line: &str) -> bool {
        let code = line.split("//").next().unwrap_or_default();
        let field = code
            .match_indices(".store")
            .any(|(at, _)| !code[at + ".store".len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_'));
        field || code.contains("ApiCollections")
    }

    /// The door to the store is `ops`: a handler of the routes or the console that read or
    /// wrote a collection itself would be a second door, with its own rules.
    #[test]
    fn handlers_reach_the_store_only_through_ops() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        for handlers in ["routes", "console"] {
            sources(&src.join(handlers), &mut files);
        }
        assert!(files.len() > 20, "the handlers' files were not found under {}", src.display());
        let mut doors = Vec::new();
        for file in &files {
            let text = std::fs::read_to_string(file).expect("readable");
            for (n, line) in text.lines().enumerate() {
                if reaches_the_store(line) {
                    doors.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
                }
            }
        }
        assert!(doors.is_empty(), "handlers that reach the store without `ops`:\n{}", doors.join("\n"));
    }

    #[test]
    fn the_check_sees_the_field_and_not_its_lookalikes() {
        assert!(reaches_the_store("    let x = state.store.predictions().get(id).await?;"));
        assert!(reaches_the_store("    usage::report(&state.store, None, &q)"));
        assert!(reaches_the_store("use crate::store::{ApiCollections, ApiKeyRecord};"));
        assert!(!reaches_the_store("    let x = state.stored_view(id); // state.store is not here"));
        assert!(!reaches_the_store("use crate::store::ApiKeyRecord;"));
    }
}
