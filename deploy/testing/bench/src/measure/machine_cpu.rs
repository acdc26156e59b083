//! How busy the whole machine's CPUs were over a span of work, from `/proc/stat`: every
//! process counts (the services, nats-server, the MongoDB server, a Cog model, the load tool).
//! A latency measured while the cores were nearly all busy is a queue for CPU, not a wait
//! inside the service, and this says which; [`ProcessCpu`] then says whose CPU it was.

use std::collections::{BTreeMap, HashMap};

use anyhow::Context;

/// CPU time of all cores, in clock ticks: not idle, and in all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTimes {
    busy: u64,
    total: u64,
}

impl CpuTimes {
    /// The machine's CPU time so far.
    pub fn now() -> anyhow::Result<Self> {
        let stat = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
        Self::parse(&stat)
    }

    /// From the text of `/proc/stat`: its first line, `cpu user nice system idle iowait irq
    /// softirq steal ...` (guest time is already in user time).
    fn parse(stat: &str) -> anyhow::Result<Self> {
        let line = stat.lines().find(|l| l.starts_with("cpu ")).context("no cpu line in /proc/stat")?;
        let fields: Vec<u64> = line.split_whitespace().skip(1).take(8).map(str::parse).collect::<Result<_, _>>()?;
        anyhow::ensure!(fields.len() >= 5, "a short cpu line in /proc/stat: {line}");
        let total: u64 = fields.iter().sum();
        let idle = fields[3] + fields[4];
        Ok(Self { busy: total - idle, total })
    }

    /// The time spent from `earlier` to this reading.
    pub fn since(self, earlier: Self) -> Self {
        Self { busy: self.busy.saturating_sub(earlier.busy), total: self.total.saturating_sub(earlier.total) }
    }

    /// Two spans together.
    pub fn plus(self, other: Self) -> Self {
        Self { busy: self.busy + other.busy, total: self.total + other.total }
    }

    /// The busy CPU time, in seconds (of all cores together).
    pub fn busy_seconds(self) -> f64 {
        self.busy as f64 / harness::processes::clock_ticks()
    }

    /// The share of the cores' time that was busy (0 to 1), if any time passed.
    pub fn busy_share(self) -> Option<f64> {
        (self.total > 0).then(|| self.busy as f64 / self.total as f64)
    }
}

/// CPU ticks of every process on the machine, by pid, with the role each plays in a run.
#[derive(Debug, Clone, Default)]
pub struct ProcessCpu {
    ticks: HashMap<u32, (Role, u64)>,
}

/// What a process is to a benchmark, from its command name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// The api, runner and notifier services.
    Api,
    /// See [`Role::Api`].
    Runner,
    /// See [`Role::Api`].
    Notifier,
    /// The MongoDB server: the stand-in runs in a JVM (`java`), a real one is `mongod`.
    Mongodb,
    /// `nats-server`.
    Nats,
    /// A Cog model server: coglet and its Python worker.
    Cog,
    /// This load tool.
    LoadTool,
    /// Anything else that ran.
    Other,
}

impl Role {
    /// The role of a process with command name `comm`.
    fn of(comm: &str) -> Self {
        match comm {
            "api" => Self::Api,
            "runner" => Self::Runner,
            "notifier" => Self::Notifier,
            "java" | "mongod" => Self::Mongodb,
            "nats-server" => Self::Nats,
            "bench" => Self::LoadTool,
            _ if comm.starts_with("python") => Self::Cog,
            _ => Self::Other,
        }
    }

    /// Its name in results.
    pub fn name(self) -> &'static str {
        match self {
            Self::Api => "api",
            Self::Runner => "runner",
            Self::Notifier => "notifier",
            Self::Mongodb => "mongodb",
            Self::Nats => "nats",
            Self::Cog => "cog",
            Self::LoadTool => "load_tool",
            Self::Other => "other",
        }
    }
}

impl ProcessCpu {
    /// Every process's CPU ticks now; a process that exits while being read is left out.
    pub fn now() -> anyhow::Result<Self> {
        let mut ticks = HashMap::new();
        for entry in std::fs::read_dir("/proc").context("listing /proc")? {
            let entry = entry?;
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
            if let Some(read) = Self::parse(&stat) {
                ticks.insert(pid, read);
            }
        }
        Ok(Self { ticks })
    }

    /// The role and user plus system ticks of one `/proc/<pid>/stat` line.
    fn parse(stat: &str) -> Option<(Role, u64)> {
        let comm = stat.split_once('(')?.1.rsplit_once(')')?.0;
        let ticks = harness::processes::cpu_ticks(stat).ok()?;
        Some((Role::of(comm), ticks.user + ticks.system))
    }

    /// CPU seconds per role from `earlier` to this reading (a process that started meanwhile
    /// counts from zero).
    pub fn since(&self, earlier: &Self) -> BTreeMap<Role, f64> {
        let mut by_role = BTreeMap::new();
        for (pid, (role, ticks)) in &self.ticks {
            let before = earlier.ticks.get(pid).filter(|(r, _)| r == role).map_or(0, |(_, t)| *t);
            *by_role.entry(*role).or_insert(0.0) += ticks.saturating_sub(before) as f64;
        }
        by_role.values_mut().for_each(|t| *t /= harness::processes::clock_ticks());
        by_role
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_time_is_all_but_idle_and_io_wait() {
        let before = CpuTimes::parse("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n").expect("parses");
        let after = CpuTimes::parse("cpu  250 0 100 850 50 0 0 0 0 0\n").expect("parses");
        let span = after.since(before);
        assert_eq!(span, CpuTimes { busy: 200, total: 250 });
        assert_eq!(span.busy_share(), Some(0.8));
        assert_eq!(CpuTimes::default().busy_share(), None, "no time passed");
        assert_eq!(span.plus(span).busy_share(), Some(0.8));
    }

    #[test]
    fn processes_count_by_role_and_new_ones_from_zero() {
        let stat = |pid: u32, comm: &str, utime: u64| {
            format!("{pid} ({comm}) S 1 1 1 0 -1 0 0 0 0 0 {utime} 10 0 0 20 0 8 0 1 0 0")
        };
        let read = |lines: &[String]| ProcessCpu {
            ticks: lines.iter().enumerate().map(|(n, l)| (n as u32, ProcessCpu::parse(l).expect("parses"))).collect(),
        };
        let before = read(&[stat(0, "java", 100), stat(1, "python3.11", 5)]);
        let after = read(&[stat(0, "java", 300), stat(1, "python3.11", 5), stat(2, "python", 40)]);
        let by_role = after.since(&before);
        let seconds = |ticks: f64| ticks / harness::processes::clock_ticks();
        assert_eq!(by_role[&Role::Mongodb], seconds(200.0));
        assert_eq!(by_role[&Role::Cog], seconds(50.0), "the new worker counts from zero, with its system time");
        assert!(!by_role.contains_key(&Role::Api));
        assert_eq!(Role::of("tokio-runtime-w"), Role::Other);
    }

    #[test]
    fn a_stat_without_a_cpu_line_is_an_error() {
        assert!(CpuTimes::parse("intr 1 2 3\n").is_err());
    }
}
