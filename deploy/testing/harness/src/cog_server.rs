//! A Cog model server (coglet, from the Python that `COG_PYTHON` names; `deploy/testing/bench/run` and
//! `deploy/local/fault-tests` set it) started from a fixture directory for a run, as a
//! predictor or a trainer, ready before it is returned, and stopped when dropped. Each server has
//! a temporary directory of its own (`TMPDIR`), removed when it is dropped: coglet leaves the
//! files a model returned there after a prediction (a bench of 1 GiB outputs left 1 GiB each).

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::Context;
use serde_json::Value;

use crate::processes::spawn_logged;

/// How often a starting server is asked whether it is ready: often, as `bench coldstart`
/// times a start by it.
pub const READY_POLL: Duration = Duration::from_millis(10);

/// A Cog server (coglet) serving one fixture predictor; killed when dropped, and its log
/// removed unless `BENCH_KEEP_LOGS` is set.
pub struct CogServer {
    child: tokio::process::Child,
    log: PathBuf,
    /// Its `TMPDIR`, removed with it.
    tmp: PathBuf,
    /// Its base URL.
    pub base: String,
}

impl CogServer {
    /// Starts `fixture` with `slots` prediction slots and waits until it is ready.
    pub async fn start(fixture: &Path, slots: usize) -> anyhow::Result<Self> {
        Self::start_as(fixture, slots, false, None).await
    }

    /// Starts `fixture` with `slots` slots, its output files PUT to `upload_url` (coglet's
    /// `--upload-url`), and waits until it is ready.
    pub async fn start_uploading(fixture: &Path, slots: usize, upload_url: &str) -> anyhow::Result<Self> {
        Self::start_as(fixture, slots, false, Some(upload_url)).await
    }

    /// Starts `fixture`'s trainer (`train.py:train`, `--x-mode train`) and waits until it is
    /// ready.
    pub async fn start_trainer(fixture: &Path) -> anyhow::Result<Self> {
        Self::start_as(fixture, 1, true, None).await
    }

    async fn start_as(fixture: &Path, slots: usize, train: bool, upload_url: Option<&str>) -> anyhow::Result<Self> {
        let python = std::env::var("COG_PYTHON").context("COG_PYTHON is not set (deploy/testing/bench/run sets it)")?;
        let bin = Path::new(&python).parent().context("COG_PYTHON has no directory")?;
        let port = super::servers::free_port()?;
        let log = std::env::temp_dir().join(format!("bench-cog-{port}.log"));
        let tmp = std::env::temp_dir().join(format!("bench-cog-{port}"));
        std::fs::create_dir_all(&tmp).with_context(|| format!("create {}", tmp.display()))?;
        let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
        let mut command = tokio::process::Command::new(&python);
        command
            .args(["-m", "cog.server.http", "--host", "127.0.0.1"])
            .current_dir(fixture)
            .env("TMPDIR", &tmp)
            .env("PATH", path)
            .env("PORT", port.to_string())
            .env("COG_MAX_CONCURRENCY", slots.to_string());
        if let Some(url) = upload_url {
            command.args(["--upload-url", url]);
        }
        if train {
            command.args(["--x-mode", "train"]).env("COG_TRAIN_TYPE_STUB", "train.py:train");
        } else {
            command.env("COG_PREDICT_TYPE_STUB", "predict.py:Predictor");
        }
        let child = spawn_logged(&mut command, &log, "the Cog server")?;
        let server = Self { child, log, tmp, base: format!("http://127.0.0.1:{port}") };
        let http = reqwest::Client::builder().timeout(Duration::from_secs(2)).build()?;
        let ready = async {
            loop {
                if let Ok(r) = http.get(format!("{}/health-check", server.base)).send().await
                    && let Ok(v) = r.json::<Value>().await
                    && v["status"] == "READY"
                {
                    return;
                }
                tokio::time::sleep(READY_POLL).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(60), ready).await.context("the Cog server did not become ready")?;
        Ok(server)
    }
}

/// A copy of the fixture at `fixture` (its `predict.py` and `.cog/openapi_schema.json`) in
/// `dir`, declared as a Cog project by a `cog.yaml` of `yaml`: what a runner serves as
/// `dir:` in a run, apart from the fixture itself (so its processes are told apart by their
/// directory). The caller removes it.
pub fn project_copy(fixture: &Path, dir: &Path, yaml: &str) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir.join(".cog"))?;
    std::fs::copy(fixture.join("predict.py"), dir.join("predict.py"))?;
    std::fs::copy(fixture.join(".cog/openapi_schema.json"), dir.join(".cog/openapi_schema.json"))?;
    std::fs::write(dir.join("cog.yaml"), yaml)?;
    Ok(())
}

impl Drop for CogServer {
    fn drop(&mut self) {
        self.child.start_kill().ok();
        std::fs::remove_dir_all(&self.tmp).ok();
        if std::env::var_os("BENCH_KEEP_LOGS").is_none() {
            std::fs::remove_file(&self.log).ok();
        }
    }
}
