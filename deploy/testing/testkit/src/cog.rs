//! A Cog model server (coglet 0.23.1, from the venv `deploy/local/install` makes) serving a
//! fixture directory of the runner's tests (`runner/tests/fixtures/cog/<name>`), on a free
//! port, ready before it is returned ([`CogServer::start_ready`], at most two of a test binary
//! starting at once: [`STARTING`]), killed when dropped. Each server has a temporary directory
//! of its own (`TMPDIR`), removed when it is dropped: coglet leaves the files a model returned
//! and the inputs it downloaded there after a prediction.

use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::Duration,
};

use tokio::sync::Semaphore;

/// How many Cog servers of one test binary may be starting at once: each start imports
/// coglet's Python stack, seconds of a core, and with every Cog test of the runner starting
/// its server at once on 2 cores a start took over a minute in CI (the test's wait for the
/// model's registration ran out).
pub static STARTING: Semaphore = Semaphore::const_new(2);

/// How long a server may take to report `READY` once it may start.
const READY_WITHIN: Duration = Duration::from_secs(120);

/// What the server serves: a fixture's predictor, or its trainer (`--x-mode train`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CogMode {
    /// `predict.py:Predictor`.
    Predict,
    /// `train.py:train`.
    Train,
}

/// A running Cog server.
pub struct CogServer {
    child: Child,
    /// Its `TMPDIR`, removed with it.
    tmp: PathBuf,
    /// Its base URL.
    pub url: String,
}

impl CogServer {
    /// Serves fixture `name` in `mode` with one slot (see [`Self::start_ready`]); with
    /// `upload_url`, its output files are PUT there (coglet's `--upload-url`).
    fn start(name: &str, mode: CogMode, upload_url: Option<&str>) -> Self {
        let python = PathBuf::from(super::installed("COG_PYTHON"));
        let bin = python.parent().expect("the venv's bin").to_path_buf();
        let port = super::ports::free_port();
        let dir = super::standins::repo_root().join("runner/tests/fixtures/cog").join(name);
        let tmp = std::env::temp_dir().join(format!("ps-test-cog-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&tmp).expect("create the Cog server's temporary directory");
        let mut command = Command::new(&python);
        command
            .args(["-m", "cog.server.http", "--host", "127.0.0.1"])
            .current_dir(dir)
            .env("TMPDIR", &tmp)
            .env("PATH", format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default()))
            .env("PORT", port.to_string())
            .env("COG_MAX_CONCURRENCY", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        match mode {
            CogMode::Predict => command.env("COG_PREDICT_TYPE_STUB", "predict.py:Predictor"),
            CogMode::Train => command.env("COG_TRAIN_TYPE_STUB", "train.py:train").args(["--x-mode", "train"]),
        };
        if let Some(url) = upload_url {
            command.args(["--upload-url", url]);
        }
        let child = command.spawn().expect("start a Cog server");
        Self { child, tmp, url: format!("http://127.0.0.1:{port}") }
    }

    /// Starts fixture `name` as a Cog image's container runs it: `args` as the image's
    /// entrypoint runs them (`python` is the venv's, found on `PATH` as in an image), in the
    /// project's directory (an image's `/src`), with the container's `env` and what `cog build`
    /// writes into an image's environment (`COG_PREDICT_TYPE_STUB`, from the fixture's
    /// `predict`, and `COG_TRAIN_TYPE_STUB` from its `train` if it has one); serving on the port `env`'s `PORT` names. Waits for `READY` as
    /// [`Self::start_ready`] does.
    pub async fn start_as_container(name: &str, args: &[String], env: &[(String, String)]) -> Self {
        let _starting = STARTING.acquire().await.expect("the start gate is never closed");
        let python = PathBuf::from(super::installed("COG_PYTHON"));
        let bin = python.parent().expect("the venv's bin").to_path_buf();
        let port = env.iter().find(|(k, _)| k == "PORT").map(|(_, v)| v.clone()).expect("the container's PORT");
        let dir = super::standins::repo_root().join("runner/tests/fixtures/cog").join(name);
        let tmp = std::env::temp_dir().join(format!("ps-test-cog-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&tmp).expect("create the Cog server's temporary directory");
        let (program, rest) = args.split_first().expect("the container's arguments");
        let child = Command::new(program)
            .args(rest)
            .current_dir(&dir)
            .env("PATH", format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default()))
            .env("TMPDIR", &tmp)
            .env("COG_PREDICT_TYPE_STUB", "predict.py:Predictor")
            .envs(train_stub(&dir).map(|stub| ("COG_TRAIN_TYPE_STUB", stub)))
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the container's command");
        let server = Self { child, tmp, url: format!("http://127.0.0.1:{port}") };
        let ready = super::eventually(READY_WITHIN, || async {
            (server.health().await.as_deref() == Some("READY")).then_some(())
        });
        assert!(ready.await.is_some(), "the container of {name} reported READY within {READY_WITHIN:?}");
        server
    }

    /// Its `TMPDIR` (removed when it is dropped).
    pub fn tmp_dir(&self) -> &std::path::Path {
        &self.tmp
    }

    /// Starts as [`Self::start`] does, once fewer than [`STARTING`] are starting, and waits
    /// until the server reports `READY`, so a runner given it registers the model at once.
    pub async fn start_ready(name: &str, mode: CogMode) -> Self {
        Self::start_ready_uploading(name, mode, None).await
    }

    /// Starts as [`Self::start_ready`] does, the server uploading its output files to
    /// `upload_url` when given.
    pub async fn start_ready_uploading(name: &str, mode: CogMode, upload_url: Option<&str>) -> Self {
        let _starting = STARTING.acquire().await.expect("the start gate is never closed");
        let server = Self::start(name, mode, upload_url);
        let ready = super::eventually(READY_WITHIN, || async {
            (server.health().await.as_deref() == Some("READY")).then_some(())
        });
        assert!(ready.await.is_some(), "the Cog server for {name} reported READY within {READY_WITHIN:?}");
        server
    }

    /// What the server's `GET /health-check` reports (`READY`, `BUSY`, ...), if it answers
    /// within 2 s.
    pub async fn health(&self) -> Option<String> {
        let response = reqwest::Client::new()
            .get(format!("{}/health-check", self.url))
            .timeout(Duration::from_secs(2))
            .send()
            .await
            .ok()?;
        let body: serde_json::Value = serde_json::from_slice(&response.bytes().await.ok()?).ok()?;
        body["status"].as_str().map(str::to_owned)
    }

    /// Stops the server's process (SIGSTOP) for `pause`, then lets it go on (SIGCONT): a server
    /// too busy to answer anything for that long.
    pub async fn freeze_for(&self, pause: Duration) {
        let signal = |name: &str| {
            let sent = std::process::Command::new("kill").args([name, &self.child.id().to_string()]).status();
            assert!(sent.is_ok_and(|s| s.success()), "kill {name} the Cog server");
        };
        signal("-STOP");
        tokio::time::sleep(pause).await;
        signal("-CONT");
    }

    /// Kills the server (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        self.child.kill().expect("kill the Cog server");
    }
}

impl Drop for CogServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.tmp);
    }
}

/// The `train` of the project in `dir`'s `cog.yaml`, as `cog build` writes it into an image's
/// environment (`COG_TRAIN_TYPE_STUB`), if it has one.
fn train_stub(dir: &std::path::Path) -> Option<String> {
    let yaml = std::fs::read_to_string(dir.join("cog.yaml")).ok()?;
    let line = yaml.lines().find_map(|l| l.strip_prefix("train:"))?;
    Some(line.trim().trim_matches('"').to_owned())
}
