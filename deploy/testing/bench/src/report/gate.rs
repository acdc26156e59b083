//! The regression gate of `bench standard`: the figures its targets are read from, taken out
//! of a results file, and each compared with the same figure of the committed run
//! (`deploy/testing/bench/results/bench-results.json`). A figure worse by more than [`FLAG_AT`] of its
//! committed value is flagged in the summary. A bench, not a test: nothing fails for it, and
//! the two runs must come from machines of the same kind to be read against each other (the
//! figures are ratios to the run's own baselines where the target is one, so they travel
//! better than raw rates, but not across machine kinds).

use serde_json::{Value, json};

/// How much worse than the committed run a figure may be before it is flagged.
pub const FLAG_AT: f64 = 0.10;

/// Which way a figure improves.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Better {
    Lower,
    Higher,
}

/// One figure a target is read from.
#[derive(Clone, Debug, PartialEq)]
pub struct Figure {
    pub name: String,
    pub value: f64,
    pub better: Better,
}

/// A figure of this run beside the committed run's.
#[derive(Debug, PartialEq)]
pub struct Change {
    pub name: String,
    pub before: Option<f64>,
    pub now: f64,
    /// How much worse than before, as a share of before (negative: better); `None` without a
    /// figure before (or one of 0).
    pub worse_by: Option<f64>,
}

impl Change {
    /// Worse than before by more than [`FLAG_AT`].
    pub fn flagged(&self) -> bool {
        self.worse_by.is_some_and(|w| w > FLAG_AT)
    }
}

/// The figures of a standard run's results, each where the run measured it.
pub fn figures(results: &Value) -> Vec<Figure> {
    let mut out = Vec::new();
    let mut push = |name: String, value: Option<f64>, better: Better| {
        if let Some(value) = value.filter(|v| v.is_finite()) {
            out.push(Figure { name, value, better });
        }
    };
    let floor = &results["cpu_floor_of_required_calls"];
    push(
        "CPU per prediction / floor, batch of 1,000 at 8 in flight".into(),
        floor["batch_over_floor"].as_f64(),
        Better::Lower,
    );
    push(
        "CPU per prediction / floor, 200/s open loop".into(),
        floor["open_loop_200_per_second"]["over_floor"].as_f64(),
        Better::Lower,
    );
    let phases = results["end_to_end"]["phases"].as_array().cloned().unwrap_or_default();
    let phase = |rate: u64| phases.iter().find(|p| p["rate_per_second"].as_u64() == Some(rate));
    push(
        "MongoDB writes per prediction at 200/s".into(),
        phase(200).and_then(|p| p["cost"]["mongodb_writes_per_prediction"].as_f64()),
        Better::Lower,
    );
    push(
        "create-to-webhook p99 at 50/s (ms)".into(),
        phase(50).and_then(|p| p["create_to_webhook"]["p99_ms"].as_f64()),
        Better::Lower,
    );
    push(
        "api creates / raw inserts (median of rounds)".into(),
        results["api_create_vs_insert_head_to_head"]["median_ratio"].as_f64(),
        Better::Higher,
    );
    push(
        "highest sustained rate, median of searches (/s)".into(),
        results["end_to_end"]["highest_sustained_rate_median"].as_f64(),
        Better::Higher,
    );
    for level in results["cog"]["levels"].as_array().into_iter().flatten() {
        let n = level["in_flight"].as_u64().unwrap_or(0);
        push(format!("Cog overhead p50, {n} in flight (ms)"), level["added_p50_ms"].as_f64(), Better::Lower);
    }
    push(
        "overload: goodput at 2x / sustained rate".into(),
        results["overload"]["goodput_at_2x_ratio"].as_f64(),
        Better::Higher,
    );
    push("overload: rejections p99 (ms)".into(), results["overload"]["rejection_p99_ms"].as_f64(), Better::Lower);
    for step in results["scaling"]["steps"].as_array().into_iter().flatten().skip(1) {
        let n = step["runners"].as_u64().unwrap_or(0);
        push(format!("runner scale-out efficiency, {n} runners"), step["efficiency"].as_f64(), Better::Higher);
    }
    for step in results["api_replicas"]["steps"].as_array().into_iter().flatten().skip(1) {
        let n = step["api_replicas"].as_u64().unwrap_or(0);
        push(format!("api replicas efficiency, {n} replicas"), step["efficiency"].as_f64(), Better::Higher);
    }
    push(
        "light account's start delay behind a backlog (run times)".into(),
        results["scheduling"]["light_account"]["start_delay_in_run_times"].as_f64(),
        Better::Lower,
    );
    out
}

/// Each figure of `now` beside the same figure of `before`.
pub fn compare(now: &Value, before: &Value) -> Vec<Change> {
    let before = figures(before);
    figures(now)
        .into_iter()
        .map(|figure| {
            let was = before.iter().find(|b| b.name == figure.name).map(|b| b.value);
            let worse_by = was.filter(|w| *w != 0.0).map(|w| {
                let change = (figure.value - w) / w.abs();
                match figure.better {
                    Better::Lower => change,
                    Better::Higher => -change,
                }
            });
            Change { name: figure.name, before: was, now: figure.value, worse_by }
        })
        .collect()
}

/// The changes as a Markdown section, flagged ones marked, with a count at the end.
pub fn summary(changes: &[Change], committed: &str) -> String {
    let mut out = format!(
        "\n## Change from the committed run ({committed})\n\nA figure worse by more than {:.0} % is flagged.\n\n| figure | committed | this run | worse by | |\n|---|---:|---:|---:|---|\n",
        FLAG_AT * 100.0
    );
    for c in changes {
        let before = c.before.map_or("—".into(), |b| format!("{b:.3}"));
        let worse = c.worse_by.map_or("—".into(), |w| format!("{:+.1} %", w * 100.0));
        out.push_str(&format!(
            "| {} | {before} | {:.3} | {worse} | {} |\n",
            c.name,
            c.now,
            if c.flagged() { "**flagged**" } else { "" }
        ));
    }
    let flagged = changes.iter().filter(|c| c.flagged()).count();
    out.push_str(&format!("\n{flagged} of {} figures flagged.\n", changes.len()));
    out
}

/// The changes as JSON, for the results file.
pub fn json(changes: &[Change], committed: &str) -> Value {
    json!({
        "committed": committed,
        "flag_at": FLAG_AT,
        "flagged": changes.iter().filter(|c| c.flagged()).count(),
        "figures": changes.iter().map(|c| json!({
            "figure": c.name,
            "committed": c.before,
            "this_run": c.now,
            "worse_by": c.worse_by,
            "flagged": c.flagged(),
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(batch: f64, creates: f64) -> Value {
        json!({
            "cpu_floor_of_required_calls": {"batch_over_floor": batch},
            "api_create_vs_insert_head_to_head": {"median_ratio": creates},
        })
    }

    #[test]
    fn a_figure_worse_by_more_than_a_tenth_is_flagged_whichever_way_it_improves() {
        let changes = compare(&run(1.2, 0.6), &run(1.0, 0.7));
        let by_name = |n: &str| changes.iter().find(|c| c.name.starts_with(n)).expect(n);
        let batch = by_name("CPU per prediction / floor, batch");
        assert!((batch.worse_by.expect("compared") - 0.2).abs() < 1e-9, "{batch:?}");
        assert!(batch.flagged(), "20 % more CPU against the floor");
        let creates = by_name("api creates");
        assert!(creates.flagged(), "fewer creates per insert is worse: {creates:?}");

        let changes = compare(&run(1.05, 0.8), &run(1.0, 0.7));
        assert!(changes.iter().all(|c| !c.flagged()), "5 % worse and better are not flagged: {changes:?}");
        let text = summary(&changes, "committed.json");
        assert!(text.contains("0 of 2 figures flagged"), "{text}");
    }

    #[test]
    fn a_figure_the_committed_run_lacks_is_shown_without_a_change() {
        let changes = compare(&run(1.2, 0.6), &json!({}));
        assert_eq!(changes.len(), 2);
        assert!(changes.iter().all(|c| c.before.is_none() && c.worse_by.is_none() && !c.flagged()));
    }

    #[test]
    fn the_committed_run_yields_every_figure_the_targets_are_read_from() {
        let committed: Value = serde_json::from_str(include_str!("../../results/bench-results.json")).expect("json");
        let names: Vec<String> = figures(&committed).into_iter().map(|f| f.name).collect();
        for expected in [
            "CPU per prediction / floor, batch of 1,000 at 8 in flight",
            "CPU per prediction / floor, 200/s open loop",
            "MongoDB writes per prediction at 200/s",
            "api creates / raw inserts (median of rounds)",
            "Cog overhead p50, 1 in flight (ms)",
            "overload: goodput at 2x / sustained rate",
        ] {
            assert!(names.iter().any(|n| n == expected), "{expected} missing from {names:?}");
        }
    }
}
