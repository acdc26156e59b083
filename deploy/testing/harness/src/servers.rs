//! The servers a fault run owns, so it can kill and restart them: nats-server (one node, or a
//! three-node JetStream cluster on loopback), the MongoDB stand-in with its H2 file backend
//! (data survives a restart of the stand-in, as a real database's would) and the S3 stand-in
//! (S3Proxy, objects as files).
//!
//! The programs come from the environment `deploy/local/fault-tests` sets: `NATS_SERVER` (the
//! nats-server binary), `MONGO_STANDIN_CLASSPATH` and `MONGO_STANDIN_JVM_OPTIONS` (the
//! stand-in's jars with its compiled `Launcher`, and its JVM options), `S3_STANDIN_CLASSPATH` and `S3_STANDIN_RUN` (S3Proxy's jars
//! and `deploy/testing/s3-standin/run`). A restarted server comes back on the same port and the same
//! data directory, so the services' clients find it again by themselves.
//!
//! Where `MONGODB_URI` names a MongoDB ([`Mongo::Given`]: a real one), the run uses it as it
//! is and starts no stand-in; it never stops that server, so the rows that restart MongoDB
//! are not run there.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::Context;
use tokio::process::{Child, Command};

/// How long a server may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A free loopback port (free when asked; servers bind it right after), below the kernel's
/// ephemeral range as the runner chooses its model servers' ports
/// ([`runner::models::cog::instance::free_port`]): no bind to port 0 and no outgoing
/// connection elsewhere takes it before its server binds it, or binds it again on a restart.
/// Never the same port twice in one process: servers started side by side (a NATS cluster's
/// nodes, a service's two listeners) never draw the same one.
pub fn free_port() -> anyhow::Result<u16> {
    static HANDED_OUT: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    loop {
        let port = runner::models::cog::instance::free_port()?;
        if HANDED_OUT.lock().unwrap_or_else(|p| p.into_inner()).insert(port) {
            return Ok(port);
        }
    }
}

/// A server program: how to start it again, and its process while it runs.
struct Server {
    what: String,
    command: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
}

impl Server {
    fn new(what: impl Into<String>, command: Vec<String>, log: PathBuf) -> Self {
        Self { what: what.into(), command, log, child: None }
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        let (program, args) = self.command.split_first().context("an empty command")?;
        let mut command = Command::new(program);
        command.args(args);
        self.child = Some(crate::processes::spawn_logged(&mut command, &self.log, &self.what)?);
        Ok(())
    }

    /// SIGKILL (`crash`) or SIGTERM with a bounded wait, then nothing runs.
    async fn stop(&mut self, crash: bool) -> anyhow::Result<()> {
        let Some(mut child) = self.child.take() else { return Ok(()) };
        if !crash && let Some(pid) = child.id() {
            Command::new("kill").args(["-TERM", &pid.to_string()]).status().await?;
            if tokio::time::timeout(Duration::from_secs(15), child.wait()).await.is_ok() {
                return Ok(());
            }
        }
        child.kill().await.with_context(|| format!("killing {}", self.what))
    }
}

/// Waits until `address` accepts connections.
async fn await_listening(address: SocketAddr, what: &str) -> anyhow::Result<()> {
    let poll = async {
        while tokio::net::TcpStream::connect(address).await.is_err() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(START_TIMEOUT, poll).await.with_context(|| format!("{what} did not listen on {address}"))
}

/// One nats-server node with JetStream, or a cluster of them.
pub struct Nats {
    nodes: Vec<(Server, SocketAddr)>,
}

impl Nats {
    /// One node with file storage under `dir`.
    pub async fn single(dir: &Path) -> anyhow::Result<Self> {
        Self::cluster(dir, 1).await
    }

    /// `size` nodes (one is a plain server; more form the JetStream cluster `faults`).
    pub async fn cluster(dir: &Path, size: usize) -> anyhow::Result<Self> {
        let binary = std::env::var("NATS_SERVER").context("NATS_SERVER (the nats-server binary) is not set")?;
        let ports: Vec<(u16, u16)> =
            (0..size).map(|_| Ok((free_port()?, free_port()?))).collect::<anyhow::Result<_>>()?;
        let routes = ports.iter().map(|(_, c)| format!("nats://127.0.0.1:{c}")).collect::<Vec<_>>().join(",");
        let mut nodes = Vec::new();
        for (i, (client, cluster)) in ports.iter().enumerate() {
            let store = dir.join(format!("nats-{i}"));
            std::fs::create_dir_all(&store)?;
            let mut command = vec![binary.clone(), "-js".into(), "-a".into(), "127.0.0.1".into()];
            command.extend(["-p".into(), client.to_string(), "-sd".into(), store.display().to_string()]);
            if size > 1 {
                command.extend(["-n".into(), format!("node-{i}"), "--cluster_name".into(), "faults".into()]);
                command.extend(["--cluster".into(), format!("nats://127.0.0.1:{cluster}"), "--routes".into()]);
                command.push(routes.clone());
            }
            let log = dir.join(format!("nats-{i}.log"));
            nodes.push((
                Server::new(format!("nats-server node {i}"), command, log),
                SocketAddr::from(([127, 0, 0, 1], *client)),
            ));
        }
        let mut nats = Self { nodes };
        for i in 0..size {
            nats.start(i).await?;
        }
        Ok(nats)
    }

    /// The client URL list of every node, as services take it in `NATS_URL`.
    pub fn url(&self) -> String {
        self.nodes.iter().map(|(_, a)| format!("nats://{a}")).collect::<Vec<_>>().join(",")
    }

    /// Starts node `i` (again).
    pub async fn start(&mut self, i: usize) -> anyhow::Result<()> {
        let (server, address) = &mut self.nodes[i];
        server.spawn()?;
        await_listening(*address, &server.what).await
    }

    /// Stops node `i`: SIGKILL when `crash`, else SIGTERM.
    pub async fn stop(&mut self, i: usize, crash: bool) -> anyhow::Result<()> {
        self.nodes[i].0.stop(crash).await
    }

    /// Stops every node.
    pub async fn shutdown(&mut self) -> anyhow::Result<()> {
        for (server, _) in &mut self.nodes {
            server.stop(false).await?;
        }
        Ok(())
    }
}

/// The MongoDB stand-in (mongo-java-server) on its H2 file backend.
pub struct MongoStandin {
    server: Server,
    address: SocketAddr,
}

impl MongoStandin {
    /// Starts it on a free port with its data in `dir`.
    pub async fn start(dir: &Path) -> anyhow::Result<Self> {
        let classpath = std::env::var("MONGO_STANDIN_CLASSPATH")
            .context("MONGO_STANDIN_CLASSPATH (the stand-in's jars) is not set")?;
        let options = std::env::var("MONGO_STANDIN_JVM_OPTIONS")
            .context("MONGO_STANDIN_JVM_OPTIONS (deploy/testing/mongo-standin/jvm.options) is not set")?;
        let port = free_port()?;
        let command = vec![
            "java".into(),
            format!("@{options}"),
            "-cp".into(),
            classpath,
            "Launcher".into(),
            "--port".into(),
            port.to_string(),
            "--h2".into(),
            dir.join("mongo.h2").display().to_string(),
        ];
        let mut standin = Self {
            server: Server::new("the MongoDB stand-in", command, dir.join("mongo.log")),
            address: SocketAddr::from(([127, 0, 0, 1], port)),
        };
        standin.restart().await?;
        Ok(standin)
    }

    /// Its connection string.
    pub fn uri(&self) -> String {
        format!("mongodb://{}", self.address)
    }

    /// Stops it (SIGKILL when `crash`, else SIGTERM).
    pub async fn stop(&mut self, crash: bool) -> anyhow::Result<()> {
        self.server.stop(crash).await
    }

    /// Starts it again on the same port and file. The port can stay taken for a moment after
    /// a stop (the old process's sockets close), so a start that exits at once is retried.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        loop {
            self.server.spawn()?;
            let exited = async {
                loop {
                    if let Some(child) = self.server.child.as_mut()
                        && !matches!(child.try_wait(), Ok(None))
                    {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            };
            tokio::select! {
                listening = await_listening(self.address, "the MongoDB stand-in") => return listening,
                () = exited => {
                    self.server.child = None;
                    anyhow::ensure!(tokio::time::Instant::now() < deadline, "the MongoDB stand-in kept exiting; see {}", self.server.log.display());
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }
}

/// The MongoDB of a run: the server `MONGODB_URI` names, when it names one (a real MongoDB:
/// the suite never stops it), else a [`MongoStandin`] the run starts and may restart.
pub enum Mongo {
    /// The server `MONGODB_URI` names.
    Given(String),
    /// A stand-in of this run.
    Standin(Box<MongoStandin>),
}

impl Mongo {
    /// The server `MONGODB_URI` names, or a stand-in started with its data in `dir`.
    pub async fn start(dir: &Path) -> anyhow::Result<Self> {
        match std::env::var("MONGODB_URI") {
            Ok(uri) if !uri.trim().is_empty() => Ok(Self::Given(uri)),
            _ => Ok(Self::Standin(Box::new(MongoStandin::start(dir).await?))),
        }
    }

    /// Its connection string.
    pub fn uri(&self) -> String {
        match self {
            Self::Given(uri) => uri.clone(),
            Self::Standin(standin) => standin.uri(),
        }
    }

    /// Whether the run may stop and start it (only a stand-in of its own).
    pub fn restartable(&self) -> bool {
        matches!(self, Self::Standin(_))
    }

    /// What it is, for a report: never the given URI itself, which may hold credentials.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Given(_) => "the MongoDB that MONGODB_URI names",
            Self::Standin(_) => "the MongoDB stand-in (H2 file backend)",
        }
    }

    /// Stops a stand-in (SIGKILL when `crash`, else SIGTERM); a given server is left running.
    pub async fn stop(&mut self, crash: bool) -> anyhow::Result<()> {
        match self {
            Self::Given(_) => Ok(()),
            Self::Standin(standin) => standin.stop(crash).await,
        }
    }

    /// Starts a stand-in again on the same port and file; a given server cannot be.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        match self {
            Self::Given(_) => anyhow::bail!("a MongoDB that MONGODB_URI names is not restarted by the run"),
            Self::Standin(standin) => standin.restart().await,
        }
    }
}

/// The S3 stand-in (S3Proxy) keeping its objects as files under a directory, so they survive a
/// restart as a real store's would.
pub struct S3Standin {
    server: Server,
    address: SocketAddr,
}

impl S3Standin {
    /// The credentials it takes.
    pub const KEY_ID: &'static str = "local-identity";
    /// The secret of [`Self::KEY_ID`].
    pub const SECRET: &'static str = "local-credential";

    /// Starts it on a free port with its objects under `dir`.
    pub async fn start(dir: &Path) -> anyhow::Result<Self> {
        let classpath =
            std::env::var("S3_STANDIN_CLASSPATH").context("S3_STANDIN_CLASSPATH (S3Proxy's jars) is not set")?;
        let run =
            std::env::var("S3_STANDIN_RUN").context("S3_STANDIN_RUN (deploy/testing/s3-standin/run) is not set")?;
        let port = free_port()?;
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let data = dir.join("s3");
        let command = vec![run, classpath, port.to_string(), data.display().to_string()];
        let mut standin = Self {
            server: Server::new("S3Proxy", command, dir.join("s3.log")),
            address: SocketAddr::from(([127, 0, 0, 1], port)),
        };
        standin.restart().await?;
        Ok(standin)
    }

    /// Its endpoint.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The settings that put a service's files in bucket `bucket` of it.
    pub fn env(&self, bucket: &str) -> Vec<(&'static str, String)> {
        vec![
            ("FILES_STORE", "s3".into()),
            ("S3_BUCKET", bucket.into()),
            ("S3_ENDPOINT", self.endpoint()),
            ("S3_REGION", "us-east-1".into()),
            ("S3_FORCE_PATH_STYLE", "true".into()),
            // S3Proxy joins a multipart upload's parts by copying them: files of declared
            // length go in one request, as `deploy/local/up` has them.
            ("S3_SINGLE_PUT_MAX_BYTES", common::files::s3::SINGLE_PUT_LIMIT.to_string()),
            ("AWS_ACCESS_KEY_ID", Self::KEY_ID.into()),
            ("AWS_SECRET_ACCESS_KEY", Self::SECRET.into()),
        ]
    }

    /// Stops it (SIGKILL when `crash`, else SIGTERM).
    pub async fn stop(&mut self, crash: bool) -> anyhow::Result<()> {
        self.server.stop(crash).await
    }

    /// Starts it (again) on the same port and directory.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.server.spawn()?;
        await_listening(self.address, "S3Proxy").await
    }
}
