//! Service processes of a bench or fault run: the binaries `api`, `runner` and `notifier`
//! (built next to `bench` by `deploy/testing/bench/run`, next to `faults` by `deploy/local/fault-tests`) started with a scenario's settings, their
//! CPU time, peak resident memory and context switches read from `/proc` (the switches show
//! where CPU goes: a service that spends most of its time in the kernel pays per wake-up and
//! per message, not per byte; CPU to the nanosecond from the process's CPU-time clock), and a graceful stop (SIGTERM, then
//! SIGKILL after a bounded wait) so no run leaves a process behind.

use std::{collections::HashMap, path::PathBuf, process::Stdio, time::Duration};

use anyhow::Context;
use tokio::process::{Child, Command};

/// One running service process.
pub struct ServiceProcess {
    /// `api`, `runner` or `notifier`.
    pub name: &'static str,
    child: Child,
    pid: u32,
}

/// What a process has used so far.
#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    /// User plus system CPU seconds.
    pub cpu_seconds: f64,
    /// The system (kernel) part of `cpu_seconds`.
    pub kernel_seconds: f64,
    /// Peak resident set size (`VmHWM`), in KiB.
    pub peak_rss_kib: u64,
    /// Voluntary and involuntary context switches of the threads alive now.
    pub context_switches: u64,
}

impl ServiceProcess {
    /// Starts the release binary `name` with exactly `vars` as its environment (plus `PATH`),
    /// its output appended to `log`.
    pub fn spawn(name: &'static str, vars: &HashMap<String, String>, log: &std::path::Path) -> anyhow::Result<Self> {
        Self::spawn_binary(name, &binary(name)?, vars, log)
    }

    /// [`Self::spawn`] of the binary at `binary` (another build's), called `name`.
    pub fn spawn_binary(
        name: &'static str,
        binary: &std::path::Path,
        vars: &HashMap<String, String>,
        log: &std::path::Path,
    ) -> anyhow::Result<Self> {
        anyhow::ensure!(binary.exists(), "{} is missing", binary.display());
        let mut command = Command::new(binary);
        command.env_clear().envs(vars);
        let child = spawn_logged(&mut command, log, &binary.display().to_string())?;
        let pid = child.id().context("the process has no pid")?;
        Ok(Self { name, child, pid })
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// CPU time and peak memory so far.
    pub fn usage(&self) -> anyhow::Result<Usage> {
        usage_of(self.pid).with_context(|| format!("reading /proc for {} ({})", self.name, self.pid))
    }

    /// Whether the process has exited already (it should not have).
    pub fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends signal `name` (`TERM`, or `STOP` and `CONT`: a stopped process runs no code, as
    /// one starved of CPU, until it is continued).
    pub async fn signal(&self, name: &str) -> anyhow::Result<()> {
        let status = Command::new("kill").args([format!("-{name}"), self.pid.to_string()]).status().await?;
        anyhow::ensure!(status.success(), "kill -{name} {} failed", self.pid);
        Ok(())
    }

    /// SIGKILL, as a crash or the kernel's OOM killer would end it: no shutdown code runs.
    pub async fn kill(mut self) -> anyhow::Result<()> {
        self.child.kill().await.with_context(|| format!("killing {} ({})", self.name, self.pid))
    }

    /// SIGTERM, then up to `grace` for a clean exit, then SIGKILL. Returns its last usage. A
    /// process that has already exited by itself is left as it is (whoever runs it reports
    /// that, as [`Self::exited`] tells), rather than failing the stop with "no such process".
    pub async fn stop(mut self, grace: Duration) -> anyhow::Result<Usage> {
        let last = self.usage().unwrap_or_default();
        if self.exited() {
            tracing::warn!(service = self.name, pid = self.pid, "had exited by itself before the stop");
            return Ok(last);
        }
        self.signal("TERM").await?;
        if tokio::time::timeout(grace, self.child.wait()).await.is_err() {
            tracing::warn!(service = self.name, "did not stop within {grace:?}; killing it");
            self.child.kill().await?;
        }
        Ok(last)
    }
}

/// Starts `command` (called `what` in errors) with no input and its output appended to `log`;
/// the process is killed if its handle is dropped, so no run leaves one behind.
pub fn spawn_logged(command: &mut Command, log: &std::path::Path, what: &str) -> anyhow::Result<Child> {
    let out = std::fs::OpenOptions::new().create(true).append(true).open(log)?;
    command
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {what}"))
}

/// The path of a release binary built next to this one.
fn binary(name: &str) -> anyhow::Result<PathBuf> {
    let path = std::env::current_exe()?.with_file_name(name);
    anyhow::ensure!(path.exists(), "{} is missing; build it with cargo build --release -p {name}", path.display());
    Ok(path)
}

/// Resident memory of process `pid` now, in KiB (0 when it cannot be read).
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("VmRSS:").map(str::to_owned)))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Clock ticks per second, the unit of CPU times in `/proc/<pid>/stat` (100 on Linux builds
/// for every common architecture; `getconf` confirms it when available).
pub fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// What this process (the load tool) has used so far.
pub fn own_usage() -> anyhow::Result<Usage> {
    usage_of(std::process::id())
}

fn usage_of(pid: u32) -> anyhow::Result<Usage> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let mut context_switches = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        // A thread may exit between listing and reading; it simply no longer counts.
        if let Ok(status) = std::fs::read_to_string(task?.path().join("status")) {
            context_switches += field_of(&status, "voluntary_ctxt_switches:").unwrap_or(0)
                + field_of(&status, "nonvoluntary_ctxt_switches:").unwrap_or(0);
        }
    }
    let ticks = cpu_ticks(&stat)?;
    let cpu_seconds = cpu_clock_seconds(pid)?;
    // The kernel's share comes only in ticks: it splits the exact time.
    let kernel_share = ticks.system as f64 / (ticks.user + ticks.system).max(1) as f64;
    Ok(Usage {
        cpu_seconds,
        kernel_seconds: cpu_seconds * kernel_share,
        peak_rss_kib: peak_rss_kib(&status)?,
        context_switches,
    })
}

/// The CPU time of process `pid` so far, all its threads (those that exited too), to the
/// nanosecond: the kernel's CPU-time clock of the process (`clock_getcpuclockid`). The
/// `utime` and `stime` of `/proc/<pid>/stat` come in clock ticks of 10 ms, an eighth of what
/// one service spends on a batch of 1,000 predictions: read twice, they put ±12 % on its CPU.
pub fn cpu_clock_seconds(pid: u32) -> anyhow::Result<f64> {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(pid)?);
    let now = nix::time::ClockId::pid_cpu_clock_id(pid)?.now()?;
    Ok(now.tv_sec() as f64 + now.tv_nsec() as f64 * 1e-9)
}

/// The number after `name` on its line of a `/proc` key-value file.
fn field_of(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| v.trim().parse().ok())
}

/// CPU clock ticks of a process, in user space and in the kernel.
#[derive(Debug, PartialEq)]
pub struct Ticks {
    /// In user space.
    pub user: u64,
    /// In the kernel.
    pub system: u64,
}

/// `utime` and `stime` from a `/proc/<pid>/stat` line. The command name (field 2) may hold
/// spaces and parentheses, so fields are counted from the last `)`.
pub fn cpu_ticks(stat: &str) -> anyhow::Result<Ticks> {
    let rest = stat.rsplit_once(')').context("no ')' in stat")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name come field 3 (state) onwards; utime and stime are fields 14 and 15.
    let field = |n: usize| -> anyhow::Result<u64> { Ok(fields.get(n - 3).context("short stat")?.parse()?) };
    Ok(Ticks { user: field(14)?, system: field(15)? })
}

/// `VmHWM` from `/proc/<pid>/status`, in KiB.
fn peak_rss_kib(status: &str) -> anyhow::Result<u64> {
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).context("no VmHWM in status")?;
    Ok(line.trim_start_matches("VmHWM:").trim().trim_end_matches("kB").trim().parse()?)
}

/// The processes whose working directory is `dir` (a Cog project's coglet and its worker),
/// from `/proc`; none when `dir` does not exist.
pub fn processes_in(dir: &std::path::Path) -> Vec<u32> {
    let Ok(dir) = dir.canonicalize() else { return Vec::new() };
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd == dir))
        .collect();
    pids.sort_unstable();
    pids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stopping_a_process_that_exited_by_itself_is_not_an_error() {
        let mut command = Command::new("true");
        let log = std::env::temp_dir().join(format!("harness-exited-{}.log", std::process::id()));
        let child = spawn_logged(&mut command, &log, "true").expect("spawn");
        let pid = child.id().expect("a pid");
        let mut process = ServiceProcess { name: "runner", child, pid };
        for _ in 0..100 {
            if process.exited() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(process.exited(), "true exits at once");
        assert!(process.stop(Duration::from_secs(1)).await.is_ok());
        let _ = std::fs::remove_file(log);
    }

    #[test]
    fn cpu_ticks_count_from_the_last_parenthesis() {
        let stat = "4242 (odd) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 1 0 0";
        assert_eq!(cpu_ticks(stat).expect("parses"), Ticks { user: 250, system: 50 });
    }

    #[test]
    fn peak_rss_is_read_from_vmhwm() {
        let status = "Name:\tapi\nVmPeak:\t  900 kB\nVmHWM:\t   12345 kB\nVmRSS:\t 1000 kB\n";
        assert_eq!(peak_rss_kib(status).expect("parses"), 12345);
    }

    #[test]
    fn key_value_fields_are_read_by_their_exact_name() {
        let status = "voluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t3\n";
        assert_eq!(field_of(status, "voluntary_ctxt_switches:"), Some(12));
        assert_eq!(field_of(status, "nonvoluntary_ctxt_switches:"), Some(3));
        assert_eq!(field_of(status, "ctxt:"), None);
    }

    #[test]
    fn the_cpu_of_a_thread_that_exited_still_counts() {
        let before = cpu_clock_seconds(std::process::id()).expect("readable");
        std::thread::spawn(|| {
            let own = nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID;
            let start = own.now().expect("thread clock");
            while (own.now().expect("thread clock") - start) < nix::sys::time::TimeSpec::new(0, 15_000_000) {
                std::hint::spin_loop();
            }
        })
        .join()
        .expect("joined");
        let spent = cpu_clock_seconds(std::process::id()).expect("readable") - before;
        assert!(spent >= 0.015, "the spinning thread's 15 ms are in the process's clock: {spent}");
    }

    #[test]
    fn a_thread_that_sleeps_is_counted_as_switching() {
        let before = usage_of(std::process::id()).expect("readable");
        std::thread::spawn(|| std::thread::sleep(std::time::Duration::from_millis(5))).join().expect("joined");
        std::thread::sleep(std::time::Duration::from_millis(5));
        let after = usage_of(std::process::id()).expect("readable");
        assert!(after.peak_rss_kib > 0);
        assert!(after.cpu_seconds >= after.kernel_seconds && after.kernel_seconds >= 0.0);
        assert!(after.context_switches > before.context_switches, "sleeping gives up the CPU");
    }
}
