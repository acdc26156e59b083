//! A Cog project declared to the runner (`RUNNER_COG=owner/name=dir:/path`): the directory
//! `cog init` lays out, with `cog.yaml` and the predictor (and trainer) it names.
//!
//! What the runner reads of it, without starting anything:
//! - `cog.yaml`: `predict` (`predict.py:Predictor`), `train` (`train.py:train`) and
//!   `concurrency.max` (default 1). coglet reads none of it: the runner hands these to it as
//!   `COG_PREDICT_TYPE_STUB`, `COG_TRAIN_TYPE_STUB` and `COG_MAX_CONCURRENCY`, as `cog build`
//!   would, and gives the model as many slots of its own.
//! - `.cog/openapi_schema.json`: the model's OpenAPI document (what `cog build` writes, and what
//!   coglet serves at `/openapi.json`), so a model at zero instances is registered, validated
//!   against and listed without booting it.
//! - its version: the SHA-256 of every file of the project (path and contents, in path order;
//!   `__pycache__` and other hidden directories than `.cog` left out), so it is stable across
//!   restarts and changes with any change of code, weights shipped in the directory or schema.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// What `cog.yaml` says that the runner uses.
#[derive(Debug, Default, Deserialize)]
struct CogYaml {
    predict: Option<String>,
    train: Option<String>,
    #[serde(default)]
    concurrency: Concurrency,
}

#[derive(Debug, Default, Deserialize)]
struct Concurrency {
    max: Option<usize>,
}

/// A Cog project, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CogProject {
    /// Its directory (absolute).
    pub dir: PathBuf,
    /// `predict` of its `cog.yaml`.
    pub predict: Option<String>,
    /// `train` of its `cog.yaml`.
    pub train: Option<String>,
    /// `concurrency.max` of its `cog.yaml` (1 when unset).
    pub concurrency: usize,
    /// The digest of its files.
    pub version: String,
}

impl CogProject {
    /// Reads the project in `dir`: its `cog.yaml` and the digest of its files.
    pub fn load(dir: &Path) -> anyhow::Result<Self> {
        let dir = dir.canonicalize().with_context(|| format!("the Cog project {} is not readable", dir.display()))?;
        let file = dir.join("cog.yaml");
        let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
        let yaml: CogYaml =
            serde_norway::from_str(&text).with_context(|| format!("{} does not parse", file.display()))?;
        let concurrency = yaml.concurrency.max.unwrap_or(1);
        anyhow::ensure!(concurrency >= 1, "{}: concurrency.max must be at least 1", file.display());
        anyhow::ensure!(
            yaml.predict.is_some() || yaml.train.is_some(),
            "{} names neither `predict` nor `train`",
            file.display()
        );
        let version = digest(&dir)?;
        Ok(Self { dir, predict: yaml.predict, train: yaml.train, concurrency, version })
    }

    /// The model's OpenAPI document (`.cog/openapi_schema.json`).
    pub fn openapi(&self) -> anyhow::Result<Value> {
        let file = self.dir.join(".cog/openapi_schema.json");
        let text = std::fs::read_to_string(&file).with_context(|| {
            format!("reading {} (the schema `cog build` writes; coglet serves no schema without it)", file.display())
        })?;
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", file.display()))
    }
}

/// The SHA-256 of the project's files: each file's path relative to `dir`, a NUL, its length
/// and its bytes, in path order; 32 hex digits of it (a version id is at most 64 letters and
/// digits).
fn digest(dir: &Path) -> anyhow::Result<String> {
    let mut files = Vec::new();
    collect(dir, dir, &mut files)?;
    files.sort();
    let mut hash = Sha256::new();
    for relative in files {
        let bytes = std::fs::read(dir.join(&relative)).with_context(|| format!("reading {relative}"))?;
        hash.update(relative.as_bytes());
        hash.update([0]);
        hash.update((bytes.len() as u64).to_be_bytes());
        hash.update(&bytes);
    }
    let digest = hash.finalize();
    Ok(digest.iter().take(16).map(|b| format!("{b:02x}")).collect())
}

fn collect(root: &Path, dir: &Path, files: &mut Vec<String>) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let kind = entry.file_type()?;
        if kind.is_dir() {
            if name == "__pycache__" || (name.starts_with('.') && name != ".cog") {
                continue;
            }
            collect(root, &entry.path(), files)?;
        } else if kind.is_file() {
            let path = entry.path();
            let relative = path.strip_prefix(root).unwrap_or(&path).to_string_lossy().into_owned();
            files.push(relative);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn project(files: &[(&str, &str)]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("cog-project-{}", rand::random::<u64>()));
        for (path, text) in files {
            let file = dir.join(path);
            std::fs::create_dir_all(file.parent().expect("a parent")).expect("dirs");
            std::fs::write(file, text).expect("write");
        }
        dir
    }

    #[test]
    fn a_project_reads_its_predictor_concurrency_and_a_stable_digest() {
        let yaml = "build:\n  python_version: \"3.11\"\npredict: \"predict.py:Predictor\"\nconcurrency:\n  max: 4\n";
        let dir = project(&[("cog.yaml", yaml), ("predict.py", "x = 1\n"), ("__pycache__/p.pyc", "junk")]);
        let read = CogProject::load(&dir).expect("a project");
        assert_eq!(
            (read.predict.as_deref(), read.train.as_deref(), read.concurrency),
            (Some("predict.py:Predictor"), None, 4)
        );
        assert_eq!(read.version.len(), 32);
        assert_eq!(CogProject::load(&dir).expect("again").version, read.version, "stable");
        std::fs::write(dir.join("__pycache__/p.pyc"), "other junk").expect("write");
        assert_eq!(CogProject::load(&dir).expect("again").version, read.version, "caches do not count");
        std::fs::write(dir.join("predict.py"), "x = 2\n").expect("write");
        assert_ne!(CogProject::load(&dir).expect("changed").version, read.version, "code counts");
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn a_project_without_a_predictor_or_a_cog_yaml_is_refused_by_name() {
        let dir = project(&[("cog.yaml", "build: {}\n")]);
        let err = CogProject::load(&dir).expect_err("no predictor");
        assert!(format!("{err:#}").contains("neither `predict` nor `train`"), "{err:#}");
        std::fs::remove_file(dir.join("cog.yaml")).expect("remove");
        let err = CogProject::load(&dir).expect_err("no cog.yaml");
        assert!(format!("{err:#}").contains("cog.yaml"), "{err:#}");
        std::fs::remove_dir_all(dir).ok();
    }
}
