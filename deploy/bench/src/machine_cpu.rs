//! How busy the whole machine's CPUs were over a span of work, from `/proc/stat`: every
//! process counts (the services, nats-server, the MongoDB server, a Cog model, the load tool).
//! A latency measured while the cores were nearly all busy is a queue for CPU, not a wait
//! inside the service, and this says which.

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
        self.busy as f64 / crate::processes::clock_ticks()
    }

    /// The share of the cores' time that was busy (0 to 1), if any time passed.
    pub fn busy_share(self) -> Option<f64> {
        (self.total > 0).then(|| self.busy as f64 / self.total as f64)
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
    fn a_stat_without_a_cpu_line_is_an_error() {
        assert!(CpuTimes::parse("intr 1 2 3\n").is_err());
    }
}
