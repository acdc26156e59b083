//! The local stand-ins, started as child processes of the test binary: mongo-java-server
//! (memory backend) and nats-server with JetStream. Both read their stdin and stop when it
//! closes, which happens when this process exits however it exits, so nothing is left running.

use std::{
    io::{BufRead, BufReader},
    net::TcpStream,
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::Mutex,
    time::{Duration, Instant},
};

/// Children kept alive (and their stdin open) for the life of the test process.
static CHILDREN: Mutex<Vec<Child>> = Mutex::new(Vec::new());

pub(super) fn repo_root() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.ancestors().nth(3).expect("deploy/testing/testkit/ sits three folders below the workspace root").to_path_buf()
}

/// Runs `deploy/local/install` (idempotent) and returns the value of `KEY=` in its output:
/// `NATS_SERVER`, `MONGO_STANDIN_CLASSPATH`, `S3_STANDIN_CLASSPATH`, `COG_PYTHON` or
/// `NATS_CLI` (the NATS command line tool, built on the first ask).
pub fn installed(key: &str) -> String {
    let mut install = Command::new(repo_root().join("deploy/local/install"));
    if key == "NATS_CLI" {
        install.arg("natscli");
    }
    let out = install.stderr(Stdio::inherit()).output().expect("run deploy/local/install");
    assert!(out.status.success(), "deploy/local/install failed");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("deploy/local/install printed no {key}="))
        .to_owned()
}

fn keep(child: Child) {
    CHILDREN.lock().unwrap_or_else(|p| p.into_inner()).push(child);
}

pub(super) fn mongo() -> String {
    let mut standin = MongoStandin::start(None);
    let uri = standin.uri.clone();
    keep(standin.child.take().expect("a running stand-in"));
    uri
}

/// A MongoDB stand-in of one test's own, stopped (its H2 file closed) when dropped.
#[derive(Debug)]
pub struct MongoStandin {
    /// Its connection string.
    pub uri: String,
    child: Option<Child>,
}

impl MongoStandin {
    /// Starts the stand-in: on the H2 file `h2` (as `deploy/local/up` and the fault suite run
    /// it), or in memory (as the tests' shared one runs). Waits until it listens.
    pub fn start(h2: Option<&std::path::Path>) -> Self {
        Self::start_with(h2, &[])
    }

    /// [`MongoStandin::start`] with `env` set for the stand-in (its `MONGO_STANDIN_*` switches).
    pub fn start_with(h2: Option<&std::path::Path>, env: &[(&str, &str)]) -> Self {
        let classpath = installed("MONGO_STANDIN_CLASSPATH");
        let options = repo_root().join("deploy/testing/mongo-standin/jvm.options");
        let mut command = Command::new("java");
        // `Launcher` is compiled onto the classpath by deploy/local/install.
        command.arg(format!("@{}", options.display())).args(["-cp", &classpath, "Launcher"]);
        command.envs(env.iter().copied());
        if let Some(file) = h2 {
            command.arg("--h2").arg(file);
        }
        let mut child = command
            .arg("--exit-on-stdin-eof")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the MongoDB stand-in (java)");
        let stdout = child.stdout.take().expect("piped stdout");
        // The H2 launcher prints its progress opening the file before the address.
        let uri = BufReader::new(stdout)
            .lines()
            .map(|l| l.expect("read the stand-in's output"))
            .find_map(|l| l.trim().strip_prefix("LISTENING ").map(str::to_owned))
            .expect("the stand-in printed its address");
        Self { uri, child: Some(child) }
    }
}

impl Drop for MongoStandin {
    /// Closes its stdin, so it stops as a stopped `up` does (closing its file), and waits.
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            drop(child.stdin.take());
            let _ = child.wait();
        }
    }
}

/// A nats-server with JetStream of its own, on a free port, for the life of the test process;
/// its URL. (The tests' shared one, when no `NATS_URL` names one, is started so too.)
pub fn nats_server() -> String {
    let binary = installed("NATS_SERVER");
    let port = free_port();
    let store_dir = std::env::temp_dir().join(format!("ps-test-nats-{}-{port}", std::process::id()));
    let dir = store_dir.to_str().expect("utf-8 temp dir");
    let args = ["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd", dir];
    run_until_exit("nats-server", &binary, &args, dir, Stdio::null(), port, Duration::from_secs(20));
    format!("nats://127.0.0.1:{port}")
}

/// S3Proxy on a free port, keeping objects under a temporary directory removed when it stops;
/// its endpoint.
pub(super) fn s3() -> String {
    let classpath = installed("S3_STANDIN_CLASSPATH");
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("ps-test-s3-{}-{port}", std::process::id()));
    let dir = dir.to_str().expect("utf-8 temp dir");
    let run = repo_root().join("deploy/testing/s3-standin/run");
    let run = run.to_str().expect("utf-8 path");
    run_until_exit(
        "S3Proxy",
        run,
        &[&classpath, &port.to_string(), dir],
        dir,
        Stdio::inherit(),
        port,
        Duration::from_secs(60),
    );
    format!("http://127.0.0.1:{port}")
}

fn free_port() -> u16 {
    super::ports::free_port()
}

/// Runs `program` with `args` under a shell that stops it, and removes `dir`, once stdin
/// reaches EOF (when this process exits, however it exits); waits until it listens on `port`.
fn run_until_exit(what: &str, program: &str, args: &[&str], dir: &str, stderr: Stdio, port: u16, limit: Duration) {
    let script = r#"program="$1"; dir="$2"; shift 2
"$program" "$@" & pid=$!
cat >/dev/null
kill "$pid" 2>/dev/null; wait "$pid"; rm -rf "$dir""#;
    let child = Command::new("sh")
        .args(["-c", script, "sh", program, dir])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap_or_else(|e| panic!("start {what}: {e}"));
    keep(child);
    let deadline = Instant::now() + limit;
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{what} did not listen on {port} within {} s", limit.as_secs());
        std::thread::sleep(Duration::from_millis(50));
    }
}
