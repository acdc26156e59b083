//! How `bench standard` reports: its figures as JSON and as Markdown tables, every figure next
//! to its baseline as a ratio, and the benchmark issue's targets checked against them.

use serde_json::{Value, json};

use crate::report::cpu_floor::{Floor, Prices};
use crate::scenarios::api_alone;
use crate::scenarios::baselines::Baselines;
use crate::scenarios::cost;
use crate::scenarios::create_vs_insert;
use crate::scenarios::e2e::{self, Phase, SUSTAINED_SEARCH_CEILING};
use crate::scenarios::scaling;
use crate::scenarios::scheduling;
use harness::cluster::round;

/// Everything the standard set measured.
pub struct Measured {
    /// Raw server rates.
    pub baselines: Baselines,
    /// The api alone.
    pub api: Vec<api_alone::Row>,
    /// The load tool's CPU per create made alone, 200 a second (the price of a webhook POST
    /// in the open-loop floor).
    pub paced_create_client_cpu_us: Option<f64>,
    /// Api creates against raw inserts into the same collection, round by round.
    pub create_vs_insert: Vec<create_vs_insert::Round>,
    /// The end-to-end phases, fixed ones first.
    pub e2e: Vec<Phase>,
    /// The cost with a webhook for every event, as deployed.
    pub all_events: Value,
    /// The same with MongoDB command monitoring on, for its command counts.
    pub all_events_counted: Value,
    /// The same with a tokio worker thread per core in every service (tokio's default).
    pub all_events_per_core: Value,
    /// Runner scale-out.
    pub scaling: Value,
    /// Creates per second with 1 and 2 api replicas.
    pub api_replicas: Value,
    /// The highest sustained end-to-end rate of each search, each on a fresh system (the
    /// first one's ramp is in `e2e`).
    pub sustained_repeats: Vec<Option<u64>>,
    /// The step load at 1x, 2x and 1x the median sustained rate ([`crate::scenarios::overload`]).
    pub overload: Value,
    /// The Cog overhead and first signs of life ([`crate::scenarios::cog`]).
    pub cog: Value,
    /// Start delays on the default model set, and of a light account behind a heavy one.
    pub scheduling: Value,
}

/// The overload step's targets, each as its scenario checked it.
fn overload_targets(overload: &Value) -> Vec<Target> {
    let met = |key: &str| overload["targets"][key].as_bool().unwrap_or(false);
    if overload["targets"].is_null() {
        return Vec::new();
    }
    vec![
        Target {
            name: "overload: goodput at 2x at least 0.9 of the sustained rate",
            measured: format!("{}/s ({})", overload["goodput_at_2x_per_second"], overload["goodput_at_2x_ratio"]),
            met: met("goodput_at_2x_at_least_0_9"),
        },
        Target {
            name: "overload: rejections answered within 50 ms (p99), each with Retry-After",
            measured: format!(
                "{} rejections, p99 {} ms, {} without Retry-After",
                overload["rejections"], overload["rejection_p99_ms"], overload["rejections_without_retry_after"]
            ),
            met: met("rejections_p99_within_50_ms") && met("rejections_carry_retry_after"),
        },
        Target {
            name: "overload: no accepted prediction lost",
            measured: format!("{} lost, {} webhooks missing", overload["accepted_lost"], overload["missing_webhooks"]),
            met: met("no_accepted_prediction_lost"),
        },
        Target {
            name: "overload: p99 back under 100 ms within 5 s of the end",
            measured: crate::scenarios::overload::recovery(overload),
            met: met("p99_under_100_ms_within_5_s"),
        },
    ]
}

/// Webhooks per prediction in the open-loop phases: they subscribe to `completed` only.
const OPEN_LOOP_WEBHOOKS: f64 = 1.0;

/// A target of the benchmark issue, with what was measured against it.
struct Target {
    name: &'static str,
    measured: String,
    met: bool,
}

impl Measured {
    /// Milliseconds one raw insert takes at one in flight.
    fn raw_insert_ms(&self) -> f64 {
        1000.0 / self.baselines.insert.get(&1).copied().unwrap_or(f64::NAN)
    }

    /// The cost of the fixed phase at `rate`.
    fn cost_at(&self, rate: u64) -> Option<&Value> {
        self.e2e.iter().find(|p| p.row().0 == rate).and_then(Phase::cost)
    }

    /// The floor under the batch: each required call at 8 in flight, as the batch runs, and
    /// as many webhook POSTs per prediction as its receiver verified (one if not counted).
    fn batch_floor(&self) -> Floor {
        let webhooks = self.all_events["webhooks_per_prediction"].as_f64().unwrap_or(1.0);
        Floor::of(Prices::batched(&self.baselines, &self.api), webhooks)
    }

    /// The floor under the open-loop phases, whose notifier POSTs one webhook per prediction
    /// (`completed`), with each call at 8 in flight: the floor of the 4 × target.
    fn open_loop_floor(&self) -> Floor {
        Floor::of(Prices::batched(&self.baselines, &self.api), OPEN_LOOP_WEBHOOKS)
    }

    /// The same with each call made alone, 200 a second, as the phase at 200/s makes them:
    /// what idleness costs a client. Shown, not held as a target: each paced call also pays
    /// the wake-up of the load tool's timer, where a service is woken by the message it
    /// answers, so this prices the calls from above.
    fn open_loop_floor_alone(&self) -> Option<Floor> {
        Some(Floor::of(Prices::alone(&self.baselines, self.paced_create_client_cpu_us)?, OPEN_LOOP_WEBHOOKS))
    }

    /// The median of the repetitions' highest sustained rates (a repetition where none held
    /// counts as 0).
    fn sustained_median(&self) -> Option<u64> {
        e2e::median(&self.sustained_repeats)
    }

    fn targets(&self) -> Vec<Target> {
        let mut targets = Vec::new();
        let batch_floor = self.batch_floor();
        let floor = batch_floor.total();
        let batch = num(&self.all_events["cpu_us_per_prediction"]);
        targets.push(Target {
            name: "CPU per prediction at most 1.0 × the floor (batch of 1,000 at 8 in flight, every event, as deployed)",
            measured: format!("{batch:.0} µs / {floor:.0} µs = {:.2}", batch / floor),
            met: batch / floor <= 1.0,
        });
        if let Some(with_updates) = batch_floor.total_with_updates() {
            targets.push(Target {
                name: "the same against the floor with the runner's state changes priced as conditional updates returning nothing",
                measured: format!("{batch:.0} µs / {with_updates:.0} µs = {:.2}", batch / with_updates),
                met: batch / with_updates <= 1.3,
            });
        }
        if let Some(cost) = self.cost_at(200) {
            let cpu = num(&cost["cpu_us_per_prediction"]);
            let floor = self.open_loop_floor().total();
            targets.push(Target {
                name: "CPU per prediction at most 4 × the floor at 200/s open loop (webhook for completed, as deployed)",
                measured: format!("{cpu:.0} µs / {floor:.0} µs = {:.2}", cpu / floor),
                met: cpu / floor <= 4.0,
            });
            let (writes, reads) =
                (num(&cost["mongodb_writes_per_prediction"]), num(&cost["mongodb_reads_per_prediction"]));
            targets.push(Target {
                name: "at most 4 MongoDB writes and 1 read per prediction (200/s, webhook for completed)",
                measured: format!("{writes:.2} writes, {reads:.2} reads"),
                met: writes <= 4.0 && reads <= 1.0,
            });
        }
        for level in self.cog["levels"].as_array().into_iter().flatten() {
            let (p50, p99) = (num(&level["added_p50_ms"]), num(&level["added_p99_ms"]));
            targets.push(Target {
                name: if level["in_flight"] == 1 {
                    "Cog overhead (through the service − direct) p50 < 2 ms and p99 < 5 ms, 1 in flight"
                } else {
                    "the same at 8 in flight"
                },
                measured: format!("p50 {p50:+.2} ms, p99 {p99:+.2} ms"),
                met: p50 < 2.0 && p99 < 5.0,
            });
        }
        if let Some(median) = self.sustained_median() {
            let each: Vec<String> =
                self.sustained_repeats.iter().map(|r| r.map_or("none".into(), |r| format!("{r}/s"))).collect();
            targets.push(Target {
                name: "highest sustained end-to-end rate (p99 ≤ 1 s, nothing lost) at least 200/s, median of 3 searches",
                measured: format!("{}/s ({})", at_least(median), each.join(", ")),
                met: median >= 200,
            });
            let held = self.sustained_repeats.iter().filter(|r| r.is_some_and(|r| r >= 1600)).count();
            targets.push(Target {
                name: "each of the 3 searches holds at least 1,600/s",
                measured: format!("{held} of {} ({})", self.sustained_repeats.len(), each.join(", ")),
                met: held == self.sustained_repeats.len() && held > 0,
            });
        }
        targets.extend(overload_targets(&self.overload));
        targets.extend(efficiency_targets(
            &self.scaling,
            "runner scale-out efficiency at least 0.9 (rate / N × one runner's)",
            "runners",
            "runners",
        ));
        targets.extend(efficiency_targets(
            &self.api_replicas,
            "api replicas efficiency at least 0.9 (creates/s / N × one replica's)",
            "api_replicas",
            "replicas",
        ));
        if let Some(phase) = self.e2e.iter().find(|p| p.row().0 == 50) {
            let p99 = phase.row().2[2];
            targets.push(Target {
                name: "create-to-webhook p99 under 100 ms at 50 predictions/s",
                measured: format!("{p99:.1} ms"),
                met: p99 < 100.0 && phase.lost() == 0,
            });
        }
        for load in self.scheduling["loads"].as_array().into_iter().flatten() {
            let p99 = num(&load["start_delay_p99_ms"]);
            targets.push(Target {
                name: if num(&load["share_of_capacity"]) < 0.7 {
                    "start delay p99 under 50 ms at 50 % of slot capacity (default model set)"
                } else {
                    "start delay p99 under 50 ms at 90 % of slot capacity (default model set)"
                },
                measured: format!("{p99:.1} ms"),
                met: p99 < 50.0,
            });
        }
        if !self.scheduling.is_null() {
            let light = &self.scheduling["light_account"];
            let run_times = num(&light["start_delay_in_run_times"]);
            targets.push(Target {
                name: "a light account's start delay behind a heavy backlog under two model run times",
                measured: format!("{:.0} ms = {run_times:.2} run times", num(&light["start_delay_ms"])),
                met: run_times < 2.0,
            });
        }
        if let Some(median) = create_vs_insert::median_ratio(&self.create_vs_insert) {
            targets.push(Target {
                name: "api creates/s at least 70% of raw inserts/s of a prediction into the same collection (median of alternating rounds)",
                measured: format!("{:.0}%", median * 100.0),
                met: median >= 0.7,
            });
        }
        targets
    }
}

/// The efficiency target of each step of a scale-out past the first (its `steps`, each with
/// its process count under `count` and its `efficiency`): at least 0.9. `unit` names the
/// processes in the measured text.
fn efficiency_targets<'a>(
    scale_out: &'a Value,
    name: &'static str,
    count: &'a str,
    unit: &'a str,
) -> impl Iterator<Item = Target> + 'a {
    scale_out["steps"].as_array().into_iter().flatten().skip(1).map(move |step| {
        let efficiency = num(&step["efficiency"]);
        Target { name, measured: format!("{} {unit}: {efficiency:.2}", step[count]), met: efficiency >= 0.9 }
    })
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

/// The results as JSON.
pub fn json(m: &Measured) -> Value {
    let sustainable = e2e::sustainable(&m.e2e);
    let insert_32 = m.baselines.insert.get(&32).copied();
    json!({
        "baselines": m.baselines.json(),
        "api": api_alone::json(&m.api, Some(&m.baselines)),
        "api_create_vs_insert_head_to_head": create_vs_insert::json(&m.create_vs_insert),
        "end_to_end": {
            "model": "demo/echo", "webhook_events_filter": ["completed"], "client": "Prefer: wait=10, then polling",
            "raw_insert_ms_at_1": round(m.raw_insert_ms(), 3),
            "phases": m.e2e.iter().map(Phase::json).collect::<Vec<_>>(),
            "highest_sustained_rate_per_second": sustainable,
            "highest_sustained_rate_of_each_search": m.sustained_repeats,
            "highest_sustained_rate_median": m.sustained_median(),
            "sustained_rate_over_raw_inserts_at_32": sustainable.zip(insert_32).map(|(s, i)| round(s as f64 / i, 3)),
        },
        "overload": m.overload,
        "cost_webhook_all_events": m.all_events,
        "cost_webhook_all_events_commands_counted": m.all_events_counted,
        "cost_webhook_all_events_worker_thread_per_core": m.all_events_per_core,
        "scaling": m.scaling,
        "api_replicas": m.api_replicas,
        "cog": m.cog,
        "scheduling": m.scheduling,
        "cpu_floor_of_required_calls": floor_json(m),
        "targets": m.targets().iter().map(|t| json!({"target": t.name, "measured": t.measured, "met": t.met})).collect::<Vec<_>>(),
    })
}

/// The floors as JSON, each with the measured CPU over it.
fn floor_json(m: &Measured) -> Value {
    let lines = |floor: &Floor| {
        floor
            .lines
            .iter()
            .map(|line| json!({"service": line.service, "calls": line.calls, "cpu_us": round(line.cpu_us, 1)}))
            .collect::<Vec<_>>()
    };
    let (batch_floor, batch) = (m.batch_floor(), num(&m.all_events["cpu_us_per_prediction"]));
    let open_loop = m.cost_at(200).map(|c| num(&c["cpu_us_per_prediction"]));
    let over = |cpu: Option<f64>, floor: f64| cpu.map(|cpu| round(cpu / floor, 2));
    json!({
        "priced_at": "the load tool's client CPU per call in the baselines, 8 in flight",
        "batch_over_floor": round(batch / batch_floor.total(), 2),
        "services": lines(&batch_floor),
        "cpu_us_per_prediction": round(batch_floor.total(), 1),
        "with_state_changes_as_updates": batch_floor.total_with_updates().map(|floor| json!({
            "cpu_us_per_prediction": round(floor, 1),
            "batch_over_floor": round(batch / floor, 2),
        })),
        "open_loop_200_per_second": {
            "webhooks_per_prediction": OPEN_LOOP_WEBHOOKS,
            "cpu_us_per_prediction": round(m.open_loop_floor().total(), 1),
            "over_floor": over(open_loop, m.open_loop_floor().total()),
            "calls_made_alone": m.open_loop_floor_alone().map(|alone| json!({
                "priced_at": "the load tool's client CPU per call made alone, 200 a second",
                "services": lines(&alone),
                "cpu_us_per_prediction": round(alone.total(), 1),
                "over_floor": over(open_loop, alone.total()),
            })),
        },
    })
}

/// The results as Markdown tables.
pub fn tables(m: &Measured) -> String {
    let mut out = String::new();
    let threads = match harness::cluster::service_worker_threads() {
        Some(threads) => format!("`TOKIO_WORKER_THREADS={threads}`"),
        None => "tokio's default worker threads".into(),
    };
    out.push_str(&format!("Service processes run with {threads} unless a table says otherwise.\n\n"));
    out.push_str(&format!("## Baselines\n\n{}\n", m.baselines.table()));
    out.push_str(&format!(
        "## API alone (closed loop)\n\nratio = the api's rate / the raw rate at the same number in flight\n\n{}\n",
        api_alone::table(&m.api, Some(&m.baselines))
    ));
    out.push_str(&format!(
        "## API creates against raw inserts, head to head\n\nalternating rounds of 2 s each, the raw inserts into the collection the api writes to\n\n{}\n",
        create_vs_insert::table(&m.create_vs_insert)
    ));
    let raw = m.raw_insert_ms();
    out.push_str(&format!(
        "## End to end (open loop, demo/echo, webhook for `completed`)\n\n\
         ratio = create-to-webhook p50 / one raw insert at 1 in flight ({raw:.3} ms)\n\n\
         | offered /s | to succeeded p50 | p95 | p99 | to webhook p50 | p95 | p99 | lost | sustained | p50 ratio |\n\
         |---|---|---|---|---|---|---|---|---|---|\n"
    ));
    for phase in &m.e2e {
        let (rate, c, w) = phase.row();
        out.push_str(&format!(
            "| {rate} | {} ms | {} ms | {} ms | {} ms | {} ms | {} ms | {} | {} | {:.1} |\n",
            c[0],
            c[1],
            c[2],
            w[0],
            w[1],
            w[2],
            phase.lost(),
            if phase.sustained() { "yes" } else { "no" },
            w[0] / raw
        ));
    }
    let insert_32 = m.baselines.insert.get(&32).copied().unwrap_or(f64::NAN);
    match e2e::sustainable(&m.e2e) {
        Some(rate) => out.push_str(&format!(
            "\nhighest sustained rate (p99 ≤ 1 s, nothing lost): {rate}/s = {:.2} × raw inserts/s at 32 in flight ({insert_32:.0})\n\n",
            rate as f64 / insert_32
        )),
        None => out.push_str("\nno rate was sustained\n\n"),
    }
    let each: Vec<String> = m.sustained_repeats.iter().map(|r| r.map_or("none".into(), |r| format!("{r}/s"))).collect();
    out.push_str(&format!(
        "each search on a fresh system: {}; median **{}/s**{}\n\n",
        each.join(", "),
        at_least(m.sustained_median().unwrap_or(0)),
        if m.sustained_median() == Some(SUSTAINED_SEARCH_CEILING) {
            " (every phase held up to the search's ceiling: the sustainable rate is at least this)"
        } else {
            ""
        }
    ));
    if !m.overload.is_null() {
        out.push_str(&format!(
            "## Overload

{}
",
            crate::scenarios::overload::table(&m.overload)
        ));
    }
    for rate in [50, 200] {
        if let Some(cost) = m.cost_at(rate) {
            out.push_str(&format!("## Cost at {rate}/s (webhook for `completed`)\n\n{}\n", cost::table(cost)));
        }
    }
    out.push_str(&format!(
        "## Cost with a webhook for every event (as deployed: commands not counted)\n\n{}\n",
        cost::table(&m.all_events)
    ));
    out.push_str(&format!(
        "## The same with MongoDB command monitoring on, to count the commands\n\n{}\n",
        cost::table(&m.all_events_counted)
    ));
    out.push_str(&format!(
        "## The same, a worker thread per core in each service (tokio's default)\n\n{}\n",
        cost::table(&m.all_events_per_core)
    ));
    out.push_str(&format!("## Runner scale-out\n\n{}", scaling::table(&m.scaling)));
    if !m.api_replicas.is_null() {
        out.push_str(&format!("\n## Api replicas\n\n{}", scaling::api_table(&m.api_replicas)));
    }
    if !m.cog.is_null() {
        out.push_str(&format!("\n## Cog overhead and first signs of life\n\n{}", crate::scenarios::cog::table(&m.cog)));
    }
    if !m.scheduling.is_null() {
        out.push_str(&format!("\n## Scheduling\n\n{}", scheduling::table(&m.scheduling)));
    }
    out.push_str(
        "\n## The floor under the CPU target\n\nThe calls the service makes for each prediction, each priced at what the load \
         tool's own client spent on the same call (8 in flight): MongoDB and JetStream calls in the baselines, a webhook POST as \
         a create request to the api, a message received (the job, an event) as a publish. The api's HTTP server side and all \
         JSON work are left out, so the real floor is higher.\n\n| service | calls | CPU |\n|---|---|---|\n",
    );
    let batch_floor = m.batch_floor();
    for line in &batch_floor.lines {
        out.push_str(&format!("| {} | {} | {:.0} µs |\n", line.service, line.calls, line.cpu_us));
    }
    out.push_str(&format!("| all | | {:.0} µs |\n", batch_floor.total()));
    if let Some(floor) = batch_floor.total_with_updates() {
        out.push_str(&format!(
            "\nWith the runner's two state changes priced as conditional updates that return nothing (what this \
             runner writes: the job carries the prediction), the floor is {floor:.0} µs.\n"
        ));
    }
    out.push_str(&format!(
        "\nThe open-loop phases POST one webhook per prediction (`completed`): their floor is {:.0} µs at 8 in flight.",
        m.open_loop_floor().total()
    ));
    if let Some(alone) = m.open_loop_floor_alone() {
        let each: Vec<String> =
            alone.lines.iter().map(|line| format!("{} {:.0} µs", line.service, line.cpu_us)).collect();
        out.push_str(&format!(
            " Priced with each call made alone, 200 a second (the load tool idle before each, as the phase at 200/s \
             makes them), it is {:.0} µs ({}): at that pace a client's CPU goes to waking up. Each paced call also \
             pays the wake-up of the load tool's timer, so this prices the calls from above; it is shown, not held \
             as a target.",
            alone.total(),
            each.join(", ")
        ));
    }
    out.push('\n');
    out.push_str("\n## Targets\n\n| target | measured | met |\n|---|---|---|\n");
    for t in m.targets() {
        out.push_str(&format!("| {} | {} | {} |\n", t.name, t.measured, if t.met { "yes" } else { "no" }));
    }
    out
}

/// A sustained rate as reported: "≥ N" when it is the search's ceiling, which held.
fn at_least(rate: u64) -> String {
    if rate == SUSTAINED_SEARCH_CEILING { format!("≥ {rate}") } else { rate.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::rate::Measured as Rate;

    #[test]
    fn each_scale_out_step_past_the_first_is_held_to_an_efficiency_of_0_9() {
        let scaling = json!({"steps": [
            {"runners": 1, "efficiency": 1.0},
            {"runners": 2, "efficiency": 0.95},
            {"runners": 4, "efficiency": 0.85},
        ]});
        let targets: Vec<Target> = efficiency_targets(&scaling, "runners", "runners", "runners").collect();
        let shown: Vec<(&str, bool)> = targets.iter().map(|t| (t.measured.as_str(), t.met)).collect();
        assert_eq!(shown, [("2 runners: 0.95", true), ("4 runners: 0.85", false)]);
        assert_eq!(efficiency_targets(&Value::Null, "none", "runners", "runners").count(), 0, "nothing measured");
    }

    #[test]
    fn the_report_shows_each_floor_beside_what_it_is_held_against() {
        let mut baselines = Baselines::empty(2);
        for (operation, client_cpu_us) in [
            ("mongodb_insert_prediction", 50.0),
            ("mongodb_find_and_modify_prediction", 80.0),
            ("mongodb_update_prediction", 50.0),
            ("jetstream_publish", 20.0),
        ] {
            baselines.record(operation, 8, Rate { per_second: 1000.0, client_cpu_us });
            baselines.paced_client_cpu_us.insert(operation, 2.0 * client_cpu_us);
        }
        let mut measured = Measured {
            baselines,
            api: vec![api_alone::Row {
                request: "create",
                clients: 8,
                per_second: 5000.0,
                latency: harness::stats::Samples::new(vec![std::time::Duration::from_millis(1)]),
                client_cpu_us: 60.0,
            }],
            paced_create_client_cpu_us: Some(150.0),
            create_vs_insert: Vec::new(),
            e2e: Vec::new(),
            all_events: json!({"webhooks_per_prediction": 2.0, "cpu_us_per_prediction": 540.0}),
            all_events_counted: Value::Null,
            all_events_per_core: Value::Null,
            scaling: Value::Null,
            api_replicas: Value::Null,
            sustained_repeats: vec![Some(200), None, Some(300)],
            overload: Value::Null,
            cog: Value::Null,
            scheduling: Value::Null,
        };
        assert_eq!(measured.sustained_median(), Some(200), "a search where nothing held counts as 0");
        assert_eq!(measured.batch_floor().total(), 450.0, "two webhooks, as the batch's receiver counted");
        assert_eq!(measured.open_loop_floor().total(), 390.0, "one webhook in the open loop");
        assert_eq!(measured.open_loop_floor_alone().map(|f| f.total()), Some(140.0 + 440.0 + 230.0));
        let tables = tables(&measured);
        assert!(tables.contains("| all | | 450 µs |"));
        assert!(tables.contains("the floor is 390 µs."), "state changes as updates");
        assert!(tables.contains("their floor is 390 µs at 8 in flight"));
        assert!(tables.contains("it is 810 µs (api 140 µs, runner 440 µs, notifier 230 µs): at that pace"));
        let names: Vec<&str> = measured.targets().iter().map(|t| t.name).collect();
        assert_eq!(
            names.len(),
            4,
            "the batch against both floors, the sustained rate twice: no paced target: {names:?}"
        );
        let each = measured.targets().into_iter().find(|t| t.name.starts_with("each of the 3")).expect("the 3 of 3");
        assert_eq!((each.measured.as_str(), each.met), ("0 of 3 (200/s, none, 300/s)", false));
        let json = json(&measured);
        assert_eq!(json["cpu_floor_of_required_calls"]["batch_over_floor"], 1.2);
        assert_eq!(
            json["cpu_floor_of_required_calls"]["open_loop_200_per_second"]["calls_made_alone"]["cpu_us_per_prediction"],
            810.0
        );
        measured.paced_create_client_cpu_us = None;
        assert!(measured.open_loop_floor_alone().is_none(), "no paced create, no floor of calls made alone");
        measured.sustained_repeats = vec![Some(SUSTAINED_SEARCH_CEILING); 3];
        let targets = measured.targets();
        let sustained = targets.iter().find(|t| t.name.starts_with("highest sustained")).expect("the sustained target");
        assert_eq!(sustained.measured, "≥ 3200/s (3200/s, 3200/s, 3200/s)", "a search that held its ceiling");
        assert!(super::tables(&measured).contains("median **≥ 3200/s** (every phase held up to the search's ceiling"));
    }
}
