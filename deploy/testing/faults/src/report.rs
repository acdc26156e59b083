//! What a fault scenario shows, and whether it passes: from the creates' answers, the
//! predictions' last statuses and the webhook deliveries the recorder saw.
//!
//! - every create answered 201 ends in a terminal state (`stuck` counts those that did not);
//! - every prediction gets an accepted `completed` webhook (`missing`);
//! - `duplicated` counts predictions whose `completed` webhook was accepted more than once;
//!   it must be zero unless the scenario kills or restarts a part, and every copy of one event
//!   must carry the same `webhook-id` in any scenario;
//! - no 5xx answer outside the fault's window (from the fault until the part is back and has
//!   had [`SETTLE`] to reconnect);
//! - every signature verifies (with the new secret after a rotation), and no retry comes
//!   before the `Retry-After` it was given;
//! - where the scenario bounds it (NATS restarted), no accepted prediction waits longer than
//!   the bound to start (`started_at - created_at`); every scenario with a fault also shows the
//!   longest a prediction still waited to start once the part was back.

use std::{
    collections::{BTreeSet, HashMap},
    time::Duration,
};

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use tokio::time::Instant;

use harness::stats::{Samples, ms};

use crate::{
    capped::CapTally,
    flood::FloodTally,
    load::{Answer, Attempt},
    recorder::{Delivery, Tally},
    rollout::RolloutTally,
    uploads::UploadTally,
};

/// How long after a part is back its clients may still fail while they reconnect.
pub const SETTLE: Duration = Duration::from_secs(5);

/// When a fault was on: from its start until the part was back plus [`SETTLE`].
#[derive(Clone, Copy, Debug)]
pub struct Window {
    /// When the fault began.
    pub from: Instant,
    /// When the part was back, plus the settle time.
    pub until: Instant,
    /// When the part was back, by the wall clock the services stamp predictions with.
    pub back: DateTime<Utc>,
}

/// When an accepted prediction was created and started, as it says.
pub type Started = (DateTime<Utc>, DateTime<Utc>);

impl Window {
    fn contains(&self, at: Instant, took: Duration) -> bool {
        // A request that was in flight while the fault began is inside it too.
        at + took >= self.from && at <= self.until
    }
}

/// What one scenario showed.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// The scenario's name.
    pub scenario: String,
    /// Creates answered 201.
    pub accepted: usize,
    /// Of those, predictions in a terminal state at the end.
    pub terminal: usize,
    /// Of those, predictions that ended `failed` or `canceled`.
    pub unsuccessful: usize,
    /// Accepted predictions not terminal at the end.
    pub stuck: usize,
    /// Terminal predictions without an accepted `completed` webhook.
    pub missing: usize,
    /// Predictions whose `completed` webhook was accepted more than once.
    pub duplicated: usize,
    /// Predictions whose `completed` copies carried different `webhook-id`s.
    pub ids_differ: usize,
    /// 5xx answers outside the fault's window.
    pub server_errors: usize,
    /// Creates not answered 201 inside the fault's window (5xx, refused, timed out).
    pub refused_in_fault: usize,
    /// Creates not answered 201 outside the window (refused or timed out; 5xx are above).
    pub refused_outside: usize,
    /// p99 of creates and of read-backs, in ms.
    pub create_p99_ms: f64,
    /// p99 of the read-backs, in ms.
    pub get_p99_ms: f64,
    /// The longest an accepted prediction waited to start (`started_at - created_at`), in s.
    pub start_wait_s: f64,
    /// The longest a prediction still waited to start after the part was back, in s (where
    /// the scenario has a fault).
    pub start_wait_after_fault_s: Option<f64>,
    /// The longest wait to start allowed, where the scenario has a bound.
    pub start_bound: Option<Duration>,
    /// The recorder's counts.
    pub tally: Tally,
    /// Whether duplicates are allowed (the scenario kills or restarts a part).
    pub duplicates_allowed: bool,
    /// Service replicas that exited without being killed.
    pub crashed: Vec<&'static str>,
    /// The p99 that creates and read-backs must stay under, where the scenario has one.
    pub latency_bound: Option<Duration>,
    /// What the uploads found, in a scenario that uploads.
    pub uploads: Option<UploadTally>,
    /// What a capped account ran at once, in a scenario with a cap.
    pub cap: Option<CapTally>,
    /// What ran where, in a rollout.
    pub rollout: Option<RolloutTally>,
    /// What the flood's requests got, in an overload.
    pub overload: Option<FloodTally>,
    /// What the creates at each priority level got, in a scenario with levels.
    pub levels: Option<crate::levels::LevelsTally>,
    /// How the trainings ended, in a scenario with trainings.
    pub trainings: Option<crate::trainings::TrainingsTally>,
    /// How the predictions with uploaded file outputs ended, in a scenario with them.
    pub outputs: Option<crate::outputs::OutputsTally>,
    /// Runs, keys and answers lost, in the lost-answers scenario.
    pub lost: Option<crate::lost_replies::LostTally>,
    /// What the budget's refusals and costs showed, in a scenario with a budget.
    pub budget: Option<crate::budget::BudgetTally>,
    /// What the healthy and the dead receiver saw, in a scenario with a dead receiver.
    pub dead: Option<crate::dead_receiver::DeadTally>,
    /// The kills and the failures they caused, in the Cog crashes' scenario.
    pub cog: Option<crate::cog_crashes::CrashTally>,
    /// How the poisonous job ended, in its scenario.
    pub poison: Option<crate::poison::PoisonTally>,
    /// What the upgrade from the previous release did, in its scenario.
    pub upgrade: Option<crate::upgrade::UpgradeTally>,
    /// The model runs every runner counted, and the predictions, where they must be equal.
    pub runs: Option<(u64, usize)>,
    /// The account's usage (`GET /v1/usage`) against its ended predictions: `[succeeded,
    /// failed, canceled]` counted, and ended.
    pub usage: Option<([i64; 3], [i64; 3])>,
}

/// The inputs of an outcome.
pub struct Evidence<'a> {
    /// The creates.
    pub attempts: &'a [Attempt],
    /// The last status of each accepted prediction.
    pub statuses: &'a HashMap<String, String>,
    /// Every delivery.
    pub deliveries: &'a [Delivery],
    /// The fault's window, if the scenario has one.
    pub window: Option<Window>,
    /// When each accepted prediction that started was created and started.
    pub started: &'a HashMap<String, Started>,
}

fn terminal(status: &str) -> bool {
    matches!(status, "succeeded" | "failed" | "canceled")
}

impl Outcome {
    /// Sums up `evidence`.
    pub fn of(scenario: &str, evidence: &Evidence<'_>, tally: Tally, duplicates_allowed: bool) -> Self {
        let inside = |a: &Attempt| evidence.window.is_some_and(|w| w.contains(a.at, a.create));
        let accepted: Vec<&str> = evidence
            .attempts
            .iter()
            .filter_map(|a| match &a.answer {
                Answer::Accepted(id) => Some(id.as_str()),
                _ => None,
            })
            .collect();
        let status_of = |id: &str| evidence.statuses.get(id).map(String::as_str).unwrap_or("unknown");
        let ended: Vec<&str> = accepted.iter().copied().filter(|id| terminal(status_of(id))).collect();
        let mut completed: HashMap<&str, Vec<&str>> = HashMap::new();
        for d in evidence.deliveries.iter().filter(|d| d.accepted && d.event == "completed") {
            completed.entry(d.prediction.as_str()).or_default().push(d.webhook_id.as_str());
        }
        let server_error = |code: u16| (500..600).contains(&code);
        let server_errors = evidence
            .attempts
            .iter()
            .filter(|a| !inside(a))
            .filter(|a| {
                matches!(a.answer, Answer::Status(code) if server_error(code))
                    || a.get.is_some_and(|(code, _)| server_error(code))
            })
            .count();
        let not_accepted = |a: &&Attempt| !matches!(a.answer, Answer::Accepted(_));
        let refused_outside = evidence
            .attempts
            .iter()
            .filter(not_accepted)
            .filter(|a| !inside(a) && matches!(a.answer, Answer::Unanswered))
            .count();
        let p99 = |samples: Vec<Duration>| ms(Samples::new(samples).percentile(99.0));
        let seconds = |d: chrono::TimeDelta| d.num_milliseconds().max(0) as f64 / 1000.0;
        let longest = |wait: &dyn Fn(&Started) -> f64| evidence.started.values().map(wait).fold(0.0, f64::max);
        Self {
            start_wait_s: longest(&|(created, started)| seconds(*started - *created)),
            start_wait_after_fault_s: evidence
                .window
                .map(|w| longest(&|(created, started)| seconds(*started - w.back.max(*created)))),
            start_bound: None,
            scenario: scenario.to_owned(),
            accepted: accepted.len(),
            terminal: ended.len(),
            unsuccessful: ended.iter().filter(|id| status_of(id) != "succeeded").count(),
            stuck: accepted.len() - ended.len(),
            missing: ended.iter().filter(|id| !completed.contains_key(*id)).count(),
            duplicated: completed.values().filter(|ids| ids.len() > 1).count(),
            ids_differ: completed.values().filter(|ids| ids.iter().collect::<BTreeSet<_>>().len() > 1).count(),
            server_errors,
            refused_in_fault: evidence.attempts.iter().filter(not_accepted).filter(|a| inside(a)).count(),
            refused_outside,
            create_p99_ms: p99(evidence.attempts.iter().filter(|a| !not_accepted(a)).map(|a| a.create).collect()),
            get_p99_ms: p99(evidence.attempts.iter().filter_map(|a| a.get.map(|(_, took)| took)).collect()),
            tally,
            duplicates_allowed,
            crashed: Vec::new(),
            latency_bound: None,
            uploads: None,
            cap: None,
            rollout: None,
            overload: None,
            levels: None,
            trainings: None,
            outputs: None,
            budget: None,
            dead: None,
            cog: None,
            poison: None,
            upgrade: None,
            runs: None,
            lost: None,
            usage: None,
        }
    }

    /// Why the scenario fails, if it does.
    pub fn failures(&self) -> Vec<String> {
        let mut why = Vec::new();
        let mut fail = |bad: bool, text: String| {
            if bad {
                why.push(text);
            }
        };
        fail(self.accepted == 0, "no create was accepted".into());
        if let Some((counted, ended)) = self.usage {
            fail(
                counted != ended,
                format!("usage counted {counted:?} (succeeded, failed, canceled) of {ended:?} ended"),
            );
        }
        fail(self.stuck > 0, format!("{} predictions did not end", self.stuck));
        fail(self.missing > 0, format!("{} completed webhooks missing", self.missing));
        fail(!self.duplicates_allowed && self.duplicated > 0, format!("{} completed duplicates", self.duplicated));
        fail(self.ids_differ > 0, format!("{} duplicates with another webhook-id", self.ids_differ));
        fail(self.server_errors > 0, format!("{} 5xx outside the fault", self.server_errors));
        fail(self.refused_outside > 0, format!("{} creates unanswered outside the fault", self.refused_outside));
        fail(self.tally.bad_signatures > 0, format!("{} bad signatures", self.tally.bad_signatures));
        fail(self.tally.old_signatures > 0, format!("{} signed with the old secret", self.tally.old_signatures));
        fail(self.tally.early_retries > 0, format!("{} retries before Retry-After", self.tally.early_retries));
        if let Some(bound) = self.latency_bound {
            let worst = self.create_p99_ms.max(self.get_p99_ms);
            fail(worst > ms(bound), format!("p99 {worst:.1} ms over {} ms", ms(bound)));
        }
        if let Some(bound) = self.start_bound {
            let waited = self.start_wait_s;
            fail(
                waited > bound.as_secs_f64(),
                format!("a prediction waited {waited:.1} s to start, over {} s", bound.as_secs()),
            );
        }
        fail(!self.crashed.is_empty(), format!("exited by themselves: {}", self.crashed.join(", ")));
        if let Some(files) = &self.uploads {
            fail(files.accepted == 0, "no upload was accepted".into());
            fail(files.partial > 0, format!("{} partial files visible", files.partial));
            fail(files.lost > 0, format!("{} accepted uploads lost", files.lost));
            if let Some(orphans) = files.orphans {
                fail(orphans > 0, crate::uploads::unnamed_objects_failure(orphans));
            }
        }
        if let Some(levels) = &self.levels {
            for failure in levels.failures() {
                fail(true, failure);
            }
        }
        if let Some(outputs) = &self.outputs {
            for failure in outputs.failures() {
                fail(true, failure);
            }
        }
        if let Some(trainings) = &self.trainings {
            for failure in trainings.failures() {
                fail(true, failure);
            }
        }
        if let Some(budget) = &self.budget {
            for failure in budget.failures() {
                fail(true, failure);
            }
        }
        if let Some(dead) = &self.dead {
            for failure in dead.failures() {
                fail(true, failure);
            }
        }
        if let Some(cog) = &self.cog {
            for failure in cog.failures() {
                fail(true, failure);
            }
        }
        if let Some(poison) = &self.poison {
            for failure in poison.failures() {
                fail(true, failure);
            }
        }
        if let Some(upgrade) = &self.upgrade {
            for failure in upgrade.failures() {
                fail(true, failure);
            }
        }
        if let Some((runs, predictions)) = self.runs {
            fail(runs != predictions as u64, format!("the models ran {runs} times for {predictions} predictions"));
        }
        if let Some(lost) = &self.lost {
            for failure in lost.failures() {
                fail(true, failure);
            }
        }
        if let Some(cap) = &self.cap {
            fail(cap.most > u64::from(cap.cap), format!("{} running at once, past the cap of {}", cap.most, cap.cap));
            fail(!cap.full_after_fault, format!("never {} running again after the fault (a slot leaked?)", cap.cap));
        }
        if let Some(r) = &self.rollout {
            fail(r.unsuccessful > 0, format!("{} predictions did not succeed", r.unsuccessful));
            fail(r.wrong_version > 0, format!("{} ran on another version than they name", r.wrong_version));
            fail(r.on_v1 == 0 || r.on_v2 == 0, "not both versions ran".into());
            fail(!r.deployment_on_both, "the deployment's predictions did not run on both versions".into());
        }
        if let Some(flood) = &self.overload {
            why.extend(flood.failures());
        }
        why
    }

    /// The outcome as JSON.
    pub fn json(&self) -> Value {
        json!({
            "scenario": self.scenario, "accepted": self.accepted, "terminal": self.terminal,
            "uploads": self.uploads.as_ref().map(UploadTally::json),
            "usage": self.usage.map(|(counted, ended)| json!({"counted": counted, "ended": ended})),
            "cap": self.cap.as_ref().map(CapTally::json),
            "rollout": self.rollout.as_ref().map(RolloutTally::json),
            "overload": self.overload.as_ref().map(FloodTally::json),
            "levels": self.levels.as_ref().map(crate::levels::LevelsTally::json),
            "trainings": self.trainings.as_ref().map(crate::trainings::TrainingsTally::json),
            "outputs": self.outputs.as_ref().map(crate::outputs::OutputsTally::json),
            "budget": self.budget.as_ref().map(crate::budget::BudgetTally::json),
            "dead_receiver": self.dead.as_ref().map(crate::dead_receiver::DeadTally::json),
            "cog_crashes": self.cog.as_ref().map(crate::cog_crashes::CrashTally::json),
            "poison": self.poison.as_ref().map(crate::poison::PoisonTally::json),
            "upgrade": self.upgrade.as_ref().map(crate::upgrade::UpgradeTally::json),
            "model_runs": self.runs.map(|(runs, predictions)| json!({"runs": runs, "predictions": predictions})),
            "lost_answers": self.lost.as_ref().map(crate::lost_replies::LostTally::json),
            "unsuccessful": self.unsuccessful, "stuck": self.stuck, "missing": self.missing,
            "duplicated": self.duplicated, "duplicates_allowed": self.duplicates_allowed,
            "ids_differ": self.ids_differ, "server_errors_outside_fault": self.server_errors,
            "not_accepted_in_fault": self.refused_in_fault, "unanswered_outside_fault": self.refused_outside,
            "create_p99_ms": self.create_p99_ms, "get_p99_ms": self.get_p99_ms,
            "longest_start_wait_s": self.start_wait_s, "longest_start_wait_after_fault_s": self.start_wait_after_fault_s,
            "bad_signatures": self.tally.bad_signatures, "old_signatures": self.tally.old_signatures,
            "early_retries": self.tally.early_retries, "failures": self.failures(),
        })
    }
}

/// The table of outcomes, in Markdown.
pub fn table(outcomes: &[Outcome]) -> String {
    let mut out = String::from(
        "| scenario | accepted | terminal | stuck | missing | duplicated | 5xx | not accepted in fault | longest wait to start s (after the fault) | files accepted / listed / partial | most running / cap | ran on v1 / v2 / another | flood served / shed (no Retry-After) | create p99 ms | get p99 ms | result |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for o in outcomes {
        let failures = o.failures();
        let result = if failures.is_empty() { "pass".to_owned() } else { format!("FAIL: {}", failures.join("; ")) };
        let duplicated =
            if o.duplicates_allowed { format!("{} (allowed)", o.duplicated) } else { o.duplicated.to_string() };
        let files = o.uploads.as_ref().map_or("—".to_owned(), |f| {
            let orphans = f.orphans.map_or(String::new(), |n| format!(" / {n} orphans"));
            format!("{} / {} / {}{orphans}", f.accepted, f.listed, f.partial)
        });
        let cap = o.cap.as_ref().map_or("—".to_owned(), |c| format!("{} / {}", c.most, c.cap));
        let versions =
            o.rollout.as_ref().map_or("—".to_owned(), |r| format!("{} / {} / {}", r.on_v1, r.on_v2, r.wrong_version));
        let flood = o
            .overload
            .as_ref()
            .map_or("—".to_owned(), |f| format!("{} / {} ({})", f.served, f.shed, f.shed_without_retry_after));
        let waits = match o.start_wait_after_fault_s {
            Some(after) => format!("{:.1} ({after:.1})", o.start_wait_s),
            None => format!("{:.1}", o.start_wait_s),
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1} | {:.1} | {} |\n",
            o.scenario,
            o.accepted,
            o.terminal,
            o.stuck,
            o.missing,
            duplicated,
            o.server_errors,
            o.refused_in_fault,
            waits,
            files,
            cap,
            versions,
            flood,
            o.create_p99_ms,
            o.get_p99_ms,
            result
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accepted(id: &str, at: Instant) -> Attempt {
        Attempt {
            at,
            answer: Answer::Accepted(id.into()),
            create: Duration::from_millis(5),
            get: Some((200, Duration::from_millis(2))),
            asked_priority: None,
            shown_priority: None,
            retry_after: false,
            n: 0,
        }
    }

    fn completed(prediction: &str, webhook_id: &str) -> Delivery {
        Delivery {
            prediction: prediction.into(),
            event: "completed".into(),
            webhook_id: webhook_id.into(),
            at: Instant::now(),
            accepted: true,
        }
    }

    #[test]
    fn lost_stuck_and_duplicated_predictions_are_counted_apart() {
        let now = Instant::now();
        let attempts = [accepted("a", now), accepted("b", now), accepted("c", now), accepted("d", now)];
        let statuses: HashMap<String, String> =
            [("a", "succeeded"), ("b", "failed"), ("c", "processing"), ("d", "succeeded")]
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect();
        let deliveries = [completed("a", "msg_a"), completed("a", "msg_a"), completed("b", "msg_b")];
        let evidence = Evidence {
            attempts: &attempts,
            statuses: &statuses,
            deliveries: &deliveries,
            window: None,
            started: &HashMap::new(),
        };
        let outcome = Outcome::of("t", &evidence, Tally::default(), false);
        assert_eq!((outcome.accepted, outcome.terminal, outcome.unsuccessful), (4, 3, 1));
        assert_eq!((outcome.stuck, outcome.missing, outcome.duplicated, outcome.ids_differ), (1, 1, 1, 0));
        let failures = outcome.failures();
        assert_eq!(failures.len(), 3, "stuck, missing, duplicated: {failures:?}");
        let allowed = Outcome::of("t", &evidence, Tally::default(), true);
        assert_eq!(allowed.failures().len(), 2, "duplicates allowed in a kill run");
    }

    #[test]
    fn copies_with_different_webhook_ids_fail_even_where_duplicates_are_allowed() {
        let attempts = [accepted("a", Instant::now())];
        let statuses = HashMap::from([("a".to_owned(), "succeeded".to_owned())]);
        let deliveries = [completed("a", "msg_1"), completed("a", "msg_2")];
        let evidence = Evidence {
            attempts: &attempts,
            statuses: &statuses,
            deliveries: &deliveries,
            window: None,
            started: &HashMap::new(),
        };
        let outcome = Outcome::of("t", &evidence, Tally::default(), true);
        assert_eq!(outcome.ids_differ, 1);
        assert!(!outcome.failures().is_empty());
    }

    #[test]
    fn server_errors_count_only_outside_the_fault_window() {
        let start = Instant::now();
        let error = |at: Instant| Attempt {
            at,
            answer: Answer::Status(503),
            create: Duration::from_millis(1),
            get: None,
            asked_priority: None,
            shown_priority: None,
            retry_after: true,
            n: 0,
        };
        let attempts = [error(start), error(start + Duration::from_secs(2)), error(start + Duration::from_secs(9))];
        let window =
            Window { from: start + Duration::from_secs(1), until: start + Duration::from_secs(5), back: Utc::now() };
        let statuses = HashMap::new();
        let started = HashMap::new();
        let evidence = Evidence {
            attempts: &attempts,
            statuses: &statuses,
            deliveries: &[],
            window: Some(window),
            started: &started,
        };
        let outcome = Outcome::of("t", &evidence, Tally::default(), false);
        assert_eq!((outcome.server_errors, outcome.refused_in_fault), (2, 1));
    }

    #[test]
    fn the_table_has_a_row_per_scenario_with_its_verdict() {
        let passing = Outcome { scenario: "steady".into(), accepted: 10, terminal: 10, ..Outcome::default() };
        let failing = Outcome { scenario: "broken".into(), accepted: 10, terminal: 9, stuck: 1, ..Outcome::default() };
        let table = table(&[passing, failing]);
        assert!(
            table.contains("| steady | 10 | 10 | 0 | 0 | 0 | 0 | 0 | 0.0 | — | — | — | — | 0.0 | 0.0 | pass |"),
            "{table}"
        );
        assert!(table.contains("FAIL: 1 predictions did not end"), "{table}");
    }

    #[test]
    fn usage_that_differs_from_the_ended_predictions_fails_the_scenario() {
        let with =
            |counted| Outcome { accepted: 10, terminal: 10, usage: Some((counted, [9, 1, 0])), ..Outcome::default() };
        assert!(with([9, 1, 0]).failures().is_empty());
        assert_eq!(
            with([10, 1, 0]).failures(),
            vec!["usage counted [10, 1, 0] (succeeded, failed, canceled) of [9, 1, 0] ended".to_owned()]
        );
    }

    #[test]
    fn a_partial_or_lost_upload_fails_the_scenario() {
        let files = |partial, lost| UploadTally {
            sent: 5,
            accepted: 4,
            listed: 4 - lost + partial,
            partial,
            lost,
            orphans: None,
        };
        let with = |f| Outcome { accepted: 10, terminal: 10, uploads: Some(f), ..Outcome::default() };
        assert!(with(files(0, 0)).failures().is_empty());
        assert_eq!(with(files(1, 0)).failures(), vec!["1 partial files visible".to_owned()]);
        assert_eq!(with(files(0, 1)).failures(), vec!["1 accepted uploads lost".to_owned()]);
        assert!(table(&[with(files(0, 0))]).contains("| 4 / 4 / 0 |"));
        let orphaned = UploadTally { orphans: Some(2), ..files(0, 0) };
        assert_eq!(
            with(orphaned.clone()).failures(),
            vec!["2 objects in the bucket that no file names, after the sweep".to_owned()]
        );
        assert!(table(&[with(orphaned)]).contains("| 4 / 4 / 0 / 2 orphans |"));
    }

    #[test]
    fn a_cap_passed_or_never_reached_again_fails_the_scenario() {
        let capped = |most, full_after_fault| Outcome {
            accepted: 10,
            terminal: 10,
            cap: Some(CapTally { cap: 8, samples: 100, most, full_after_fault }),
            ..Outcome::default()
        };
        assert!(capped(8, true).failures().is_empty());
        assert_eq!(capped(9, true).failures(), ["9 running at once, past the cap of 8"]);
        assert_eq!(capped(8, false).failures(), ["never 8 running again after the fault (a slot leaked?)"]);
        assert!(table(&[capped(8, true)]).contains("| 8 / 8 |"));
    }

    #[test]
    fn a_rollout_fails_on_a_failed_or_misrouted_prediction_or_a_version_that_never_ran() {
        let rolled = |unsuccessful, wrong_version, on_v1| Outcome {
            accepted: 10,
            terminal: 10,
            rollout: Some(RolloutTally {
                read: 10,
                unsuccessful,
                wrong_version,
                on_v1,
                on_v2: 5,
                deployment_on_both: true,
            }),
            ..Outcome::default()
        };
        assert!(rolled(0, 0, 5).failures().is_empty());
        assert_eq!(rolled(1, 0, 5).failures(), ["1 predictions did not succeed"]);
        assert_eq!(rolled(0, 2, 5).failures(), ["2 ran on another version than they name"]);
        assert_eq!(rolled(0, 0, 0).failures(), ["not both versions ran"]);
        assert!(table(&[rolled(0, 0, 5)]).contains("| 5 / 5 / 0 |"));
    }

    #[test]
    fn waits_to_start_are_measured_from_creation_and_from_the_parts_return_and_bounded_where_asked() {
        let at = |s: i64| DateTime::<Utc>::from_timestamp(1_700_000_000 + s, 0).expect("a time");
        let started: HashMap<String, Started> =
            HashMap::from([("early".into(), (at(0), at(9))), ("late".into(), (at(12), at(13)))]);
        let now = Instant::now();
        let window = Window { from: now, until: now, back: at(5) };
        let attempts = [accepted("early", now), accepted("late", now)];
        let statuses: HashMap<String, String> =
            [("early", "succeeded"), ("late", "succeeded")].into_iter().map(|(k, v)| (k.into(), v.into())).collect();
        let evidence = Evidence {
            attempts: &attempts,
            statuses: &statuses,
            deliveries: &[],
            window: Some(window),
            started: &started,
        };
        let mut outcome = Outcome::of("t", &evidence, Tally::default(), true);
        assert_eq!((outcome.start_wait_s, outcome.start_wait_after_fault_s), (9.0, Some(4.0)));
        outcome.start_bound = Some(Duration::from_secs(8));
        assert!(
            outcome.failures().iter().any(|f| f == "a prediction waited 9.0 s to start, over 8 s"),
            "{:?}",
            outcome.failures()
        );
        assert!(table(&[outcome]).contains("| 9.0 (4.0) |"));
    }

    #[test]
    fn a_scenario_with_a_latency_bound_fails_past_it() {
        let bounded = |create_p99_ms| Outcome {
            accepted: 1,
            terminal: 1,
            create_p99_ms,
            latency_bound: Some(Duration::from_millis(100)),
            ..Outcome::default()
        };
        assert!(bounded(99.0).failures().is_empty());
        assert_eq!(bounded(140.0).failures(), ["p99 140.0 ms over 100 ms"]);
    }
}
