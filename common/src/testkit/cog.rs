//! A Cog model server (coglet 0.23.1, from the venv `deploy/local/install` makes) serving a
//! fixture directory of the runner's tests (`runner/tests/fixtures/cog/<name>`), on a free
//! port, killed when dropped. A runner given its URL waits for it to be ready.

use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
};

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
    /// Its base URL.
    pub url: String,
}

impl CogServer {
    /// Serves fixture `name` in `mode` with one slot.
    pub fn start(name: &str, mode: CogMode) -> Self {
        let python = PathBuf::from(super::installed("COG_PYTHON"));
        let bin = python.parent().expect("the venv's bin").to_path_buf();
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a port").port();
        let dir = super::standins::repo_root().join("runner/tests/fixtures/cog").join(name);
        let mut command = Command::new(&python);
        command
            .args(["-m", "cog.server.http", "--host", "127.0.0.1"])
            .current_dir(dir)
            .env("PATH", format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default()))
            .env("PORT", port.to_string())
            .env("COG_MAX_CONCURRENCY", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        match mode {
            CogMode::Predict => command.env("COG_PREDICT_TYPE_STUB", "predict.py:Predictor"),
            CogMode::Train => command.env("COG_TRAIN_TYPE_STUB", "train.py:train").args(["--x-mode", "train"]),
        };
        let child = command.spawn().expect("start a Cog server");
        Self { child, url: format!("http://127.0.0.1:{port}") }
    }
}

impl Drop for CogServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
