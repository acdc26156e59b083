//! What this runner runs of each model now, and how long its last runs took: reported with its
//! presence ([`crate::presence`]), where the api reads them for a waiting prediction's estimate
//! (`running` slots busy, the average recent run). Kept here, in memory, so the api counts
//! neither the running predictions nor their run times in the `predictions` collection (two
//! queries that grow with it; on the stand-in, which scans, they held the collection for
//! seconds under load, and every other request waited behind them).

use std::{
    collections::{HashMap, VecDeque},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

use common::{
    domain::ModelRef,
    store::runners::{ModelRuns, RECENT_RUNS},
};

/// One model's figures.
#[derive(Default)]
struct Figures {
    running: u64,
    recent: VecDeque<f64>,
}

/// The figures of every model this runner has run, and whether they changed since last taken.
#[derive(Default)]
pub struct RunFigures {
    models: Mutex<HashMap<ModelRef, Figures>>,
    changed: AtomicBool,
}

/// Counts a prediction as running until dropped.
pub struct Running {
    figures: Arc<RunFigures>,
    model: ModelRef,
}

impl RunFigures {
    /// A prediction of `model` runs until the guard drops.
    pub fn started(self: &Arc<Self>, model: &ModelRef) -> Running {
        self.update(model, |f| f.running += 1);
        Running { figures: self.clone(), model: model.clone() }
    }

    /// A run of `model` succeeded after `seconds`.
    pub fn succeeded(&self, model: &ModelRef, seconds: f64) {
        self.update(model, |f| {
            f.recent.push_front(seconds);
            f.recent.truncate(RECENT_RUNS);
        });
    }

    /// Every model's figures, and whether they changed since the last call.
    pub fn take(&self) -> (Vec<ModelRuns>, bool) {
        let changed = self.changed.swap(false, Ordering::AcqRel);
        let models = self.models.lock().unwrap_or_else(|p| p.into_inner());
        let mut runs: Vec<ModelRuns> = models
            .iter()
            .map(|(model, f)| ModelRuns {
                model: model.clone(),
                running: f.running,
                recent_run_seconds: f.recent.iter().copied().collect(),
            })
            .collect();
        runs.sort_by_key(|r| r.model.to_string());
        (runs, changed)
    }

    fn update(&self, model: &ModelRef, change: impl FnOnce(&mut Figures)) {
        change(self.models.lock().unwrap_or_else(|p| p.into_inner()).entry(model.clone()).or_default());
        self.changed.store(true, Ordering::Release);
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.figures.update(&self.model, |f| f.running = f.running.saturating_sub(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_counts_while_its_guard_lives_and_its_time_is_kept_newest_first() {
        let figures = Arc::new(RunFigures::default());
        let model: ModelRef = "demo/echo".parse().expect("valid");
        let (runs, changed) = figures.take();
        assert!(runs.is_empty() && !changed);
        let first = figures.started(&model);
        let second = figures.started(&model);
        let (runs, changed) = figures.take();
        assert!(changed);
        assert_eq!(runs[0].running, 2);
        figures.succeeded(&model, 1.0);
        drop(first);
        figures.succeeded(&model, 2.0);
        drop(second);
        let (runs, changed) = figures.take();
        assert!(changed);
        assert_eq!((runs[0].running, runs[0].recent_run_seconds.clone()), (0, vec![2.0, 1.0]));
        assert!(!figures.take().1, "nothing changed since");
    }

    #[test]
    fn only_the_latest_runs_are_kept() {
        let figures = RunFigures::default();
        let model: ModelRef = "demo/echo".parse().expect("valid");
        for n in 0..(RECENT_RUNS + 5) {
            figures.succeeded(&model, n as f64);
        }
        let (runs, _) = figures.take();
        assert_eq!(runs[0].recent_run_seconds.len(), RECENT_RUNS);
        assert_eq!(runs[0].recent_run_seconds[0], (RECENT_RUNS + 4) as f64);
    }
}
