//! `perf record` attached to each service process for one measured stretch, so the cost
//! bench can say where the CPU goes (`deploy/testing/bench/profile` turns the recordings into flame
//! graphs). Call stacks are walked by frame pointer when `BENCH_PERF_CALL_GRAPH=fp` (the
//! profile script builds the services with `-C force-frame-pointers=yes` for that), else
//! unwound from DWARF, which left most of a tokio worker's samples without their callers.

use std::path::{Path, PathBuf};

use anyhow::Context;
use tokio::process::{Child, Command};

/// Samples per second and process unless `BENCH_PERF_FREQUENCY` says otherwise (a batch of
/// 2,000 predictions gives a few hundred samples per service at this rate: enough for the
/// flame graphs' shape, too few to rank functions under 2 %).
const DEFAULT_FREQUENCY: &str = "499";
/// How call stacks are recorded unless `BENCH_PERF_CALL_GRAPH` says otherwise.
const DEFAULT_CALL_GRAPH: &str = "dwarf,16384";

/// The running recordings.
pub struct Profiler {
    recordings: Vec<(Child, PathBuf)>,
}

impl Profiler {
    /// Starts one recording per process into `dir/<name>-<pid>.perf.data`.
    pub async fn start(dir: &Path, processes: &[(&'static str, u32)]) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let call_graph = std::env::var("BENCH_PERF_CALL_GRAPH").unwrap_or_else(|_| DEFAULT_CALL_GRAPH.to_owned());
        let frequency = std::env::var("BENCH_PERF_FREQUENCY").unwrap_or_else(|_| DEFAULT_FREQUENCY.to_owned());
        let mut recordings = Vec::new();
        for (name, pid) in processes {
            let data = dir.join(format!("{name}-{pid}.perf.data"));
            let child = Command::new("perf")
                .args(["record", "-q", "-F", &frequency, "-g", "--call-graph", &call_graph, "-p", &pid.to_string()])
                .arg("-o")
                .arg(&data)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .context("starting perf record (is perf installed?)")?;
            recordings.push((child, data));
        }
        // perf needs a moment to attach before the stretch it should see begins.
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        Ok(Self { recordings })
    }

    /// Stops every recording (SIGINT, as perf expects) and returns the data files.
    pub async fn stop(self) -> anyhow::Result<Vec<PathBuf>> {
        let mut files = Vec::new();
        for (mut child, data) in self.recordings {
            if let Some(pid) = child.id() {
                Command::new("kill").args(["-INT", &pid.to_string()]).status().await?;
            }
            child.wait().await?;
            files.push(data);
        }
        Ok(files)
    }
}
