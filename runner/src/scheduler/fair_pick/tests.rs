//! The fair pick's rules, one at a time, with time passed in.

use super::*;
use common::domain::{AccountId, Priority};

fn model(name: &str) -> ModelRef {
    format!("demo/{name}").parse().expect("model")
}

/// The account of the lanes that name none.
static ANYONE: std::sync::LazyLock<AccountId> = std::sync::LazyLock::new(AccountId::generate);

fn key(name: &str, account: Option<&AccountId>) -> Lane {
    let route = common::domain::Route { version: "v1".into(), pool: None };
    Lane { model: model(name), route, account: account.unwrap_or(&ANYONE).clone(), level: Priority::Normal }
}

fn leveled(name: &str, account: &AccountId, level: Priority) -> Lane {
    Lane { level, ..key(name, Some(account)) }
}

/// Opens `lanes` of model `a` (on a runner of `limit` slots), each with a job announced
/// at `at`.
fn with_lanes(lanes: &[&Lane], limit: usize, at: Instant) -> FairPick<()> {
    let pick = FairPick::new(&[model("a")], limit, &HashMap::new()).with_aging(Duration::from_secs(60));
    for lane in lanes {
        pick.add((*lane).clone(), ());
        assert!(pick.ring_at(lane, Heard::Doorbell, at));
    }
    pick
}

#[test]
fn a_higher_level_goes_first_and_turns_hold_within_a_level() {
    let (a, b, c) = (AccountId::generate(), AccountId::generate(), AccountId::generate());
    let (normal_a, normal_b) = (leveled("a", &a, Priority::Normal), leveled("a", &b, Priority::Normal));
    let (high, low) = (leveled("a", &c, Priority::High), leveled("a", &c, Priority::Low));
    let now = Instant::now();
    let pick = with_lanes(&[&low, &normal_a, &normal_b, &high], 4, now);
    assert_eq!(picked(&pick, now), Some(high.clone()), "high first, though opened last");
    pick.mark(&high, 1, 1, now);
    assert_eq!(picked(&pick, now), Some(high.clone()), "and again while it has work");
    pick.mark(&high, 1, 0, now + RING_SETTLE);
    assert_eq!(picked(&pick, now), Some(normal_a.clone()));
    pick.mark(&normal_a, 1, 1, now);
    assert_eq!(picked(&pick, now), Some(normal_b.clone()), "normal lanes take turns");
    pick.mark(&normal_b, 1, 1, now);
    assert_eq!(picked(&pick, now), Some(normal_a.clone()), "low still waits");
    let _full = run_jobs(&pick, "a", 4);
    assert_eq!(picked(&pick, now), None, "no free slot: nothing, whatever the level");
}

#[test]
fn a_lane_counts_one_level_higher_for_each_aging_bound_its_oldest_job_waited() {
    let (a, b) = (AccountId::generate(), AccountId::generate());
    let (low, normal) = (leveled("a", &a, Priority::Low), leveled("a", &b, Priority::Normal));
    let t0 = Instant::now();
    let pick = with_lanes(&[&low, &normal], 4, t0);
    assert_eq!(picked(&pick, t0 + Duration::from_secs(59)), Some(normal.clone()));
    // The normal lane keeps getting fresh work: each fetch leaves only the newest waiting.
    let fresh = t0 + Duration::from_secs(58);
    assert!(pick.ring_at(&normal, Heard::Doorbell, fresh));
    pick.mark(&normal, 1, 1, fresh);
    pick.left(&normal, 1, Some(t0));
    assert_eq!(picked(&pick, t0 + Duration::from_secs(61)), Some(low.clone()), "aged to normal, served less recently");
    assert_eq!(
        picked(&pick, t0 + Duration::from_secs(59)),
        Some(normal.clone()),
        "not before its wait passed the bound"
    );
    let high = leveled("a", &b, Priority::High);
    pick.add(high.clone(), ());
    assert!(pick.ring_at(&high, Heard::Doorbell, t0 + Duration::from_secs(120)));
    pick.mark(&high, 1, 1, t0 + Duration::from_secs(120));
    assert_eq!(
        picked(&pick, t0 + Duration::from_secs(121)),
        Some(low.clone()),
        "after twice the bound, low counts as high (and high was served more recently)"
    );
}

#[test]
fn a_level_ages_as_a_whole_so_its_heavy_account_does_not_take_the_light_ones_turns() {
    let (heavy, light, other) = (AccountId::generate(), AccountId::generate(), AccountId::generate());
    let (heavy, light) = (leveled("a", &heavy, Priority::Normal), leveled("a", &light, Priority::Normal));
    let high = leveled("a", &other, Priority::High);
    let t0 = Instant::now();
    let pick = with_lanes(&[&heavy], 8, t0);
    pick.add(light.clone(), ());
    let late = t0 + Duration::from_secs(61);
    assert!(pick.ring_at(&light, Heard::Doorbell, late), "a fresh job of the light account");
    let mut turns = Vec::new();
    for n in 0..4 {
        let lane = picked(&pick, late).expect("work");
        turns.push(lane.clone());
        pick.mark(&lane, 1, 1, late + Duration::from_millis(n));
    }
    assert_eq!(turns, [heavy.clone(), light.clone(), heavy.clone(), light.clone()], "turns within the aged level");
    pick.add(high.clone(), ());
    assert!(pick.ring_at(&high, Heard::Doorbell, late));
    assert_eq!(picked(&pick, late), Some(high.clone()), "the aged normal level counts as high: high takes its turn");
    pick.mark(&high, 1, 1, late + Duration::from_millis(9));
    assert_eq!(picked(&pick, late), Some(heavy), "and shares them");
}

#[test]
fn a_lane_found_empty_or_seen_empty_by_a_scan_forgets_its_waits() {
    let a = AccountId::generate();
    let (low, normal) = (leveled("a", &a, Priority::Low), leveled("a", &a, Priority::Normal));
    let t0 = Instant::now();
    let pick = with_lanes(&[&low, &normal], 4, t0);
    pick.mark(&normal, 1, 1, t0);
    pick.mark(&low, 1, 0, t0);
    let late = t0 + Duration::from_secs(100);
    assert!(pick.ring_at(&low, Heard::Doorbell, late));
    assert_eq!(picked(&pick, late), Some(normal.clone()), "low was found empty: its new job has not waited");
    pick.scanned(&model("a"), &[], late + Duration::from_millis(1));
    assert_eq!(picked(&pick, late), None, "both seen empty by the scan");
    let scan = late + Duration::from_secs(1);
    assert!(pick.ring_at(&low, Heard::Scan, scan));
    assert!(pick.ring_at(&normal, Heard::Doorbell, scan + Duration::from_secs(50)));
    assert_eq!(
        picked(&pick, scan + Duration::from_secs(61)),
        Some(low.clone()),
        "what a scan finds has waited at least since the scan: low aged to normal, served less recently"
    );
}

fn pick_of(names: &[&str], limit: usize, weights: &HashMap<ModelRef, u32>) -> FairPick<()> {
    let models: Vec<ModelRef> = names.iter().map(|n| model(n)).collect();
    let pick = FairPick::new(&models, limit, weights);
    for n in names {
        pick.add(key(n, None), ());
    }
    pick
}

/// Occupies `n` slots of `name`.
fn run_jobs(pick: &FairPick<()>, name: &str, n: usize) -> Vec<OwnedSemaphorePermit> {
    (0..n).map(|_| pick.model_slot(&key(name, None)).expect("a free slot")).collect()
}

fn picked(pick: &FairPick<()>, now: Instant) -> Option<Lane> {
    pick.pick(now, |_| false).map(|(k, _, _)| k)
}

#[test]
fn a_lane_found_empty_just_after_its_doorbell_is_asked_again_within_milliseconds() {
    let pick = pick_of(&["a"], 4, &HashMap::new());
    assert!(pick.ring(&key("a", None), Heard::Doorbell));
    let now = Instant::now();
    pick.mark(&key("a", None), 1, 0, now);
    assert_eq!(pick.next_recheck(now), Duration::from_millis(2), "the job may not be fetchable yet");
    assert_eq!(picked(&pick, now + Duration::from_millis(2)), Some(key("a", None)));
    for _ in 1..SETTLE_TRIES {
        pick.mark(&key("a", None), 1, 0, now);
    }
    assert_eq!(pick.next_recheck(now), Duration::from_millis(16));
    pick.mark(&key("a", None), 1, 0, now);
    assert_eq!(pick.next_recheck(now), FIRST_RECHECK, "after the quick tries, the usual back-off");
    let later = now + RING_SETTLE;
    pick.mark(&key("a", None), 1, 0, later);
    assert_eq!(pick.next_recheck(later), FIRST_RECHECK * 2, "an old ring does not shorten it");
}

#[test]
fn a_lane_gone_dormant_or_due_without_a_free_slot_sets_no_timer() {
    let pick = pick_of(&["a"], 1, &HashMap::new());
    let now = Instant::now();
    pick.mark(&key("a", None), 1, 0, now);
    let due = now + FIRST_RECHECK * 2;
    let running = run_jobs(&pick, "a", 1);
    assert_eq!(picked(&pick, due), None, "its model has no free slot");
    assert_eq!(pick.next_recheck(due), MAX_RECHECK, "a freed slot wakes the scheduler; no timer of 1 ms");
    drop(running);
    pick.scanned(&model("a"), &[], due);
    assert_eq!(picked(&pick, due), None, "dormant after a scan saw no job");
    assert_eq!(pick.next_recheck(due), MAX_RECHECK, "asked again when its doorbell rings, not every millisecond");
}

#[test]
fn a_lane_that_gave_fewer_jobs_than_asked_waits_for_its_next_doorbell() {
    let pick = pick_of(&["a"], 4, &HashMap::new());
    assert!(pick.ring(&key("a", None), Heard::Doorbell));
    let now = Instant::now();
    pick.mark(&key("a", None), 8, 1, now);
    assert_eq!(picked(&pick, now), None, "drained: not asked again at once");
    assert_eq!(pick.next_recheck(now), FIRST_RECHECK, "no quick re-asks: its doorbell's job was fetched");
    assert!(pick.ring(&key("a", None), Heard::Doorbell));
    assert_eq!(picked(&pick, now), Some(key("a", None)), "the next job rings it");
}

#[test]
fn a_lane_that_gave_every_job_asked_for_is_asked_again_at_once() {
    let pick = pick_of(&["a"], 4, &HashMap::new());
    let now = Instant::now();
    pick.mark(&key("a", None), 8, 8, now);
    assert_eq!(picked(&pick, now), Some(key("a", None)), "there may be more");
}

#[test]
fn a_doorbell_not_yet_made_up_for_still_gets_quick_re_asks() {
    let pick = pick_of(&["a"], 4, &HashMap::new());
    assert!(pick.ring(&key("a", None), Heard::Doorbell));
    assert!(pick.ring(&key("a", None), Heard::Doorbell));
    let now = Instant::now();
    pick.mark(&key("a", None), 8, 1, now);
    assert_eq!(pick.next_recheck(now), Duration::from_millis(2), "the second job may not be fetchable yet");
    pick.mark(&key("a", None), 8, 1, now + Duration::from_millis(2));
    assert_eq!(picked(&pick, now + Duration::from_millis(3)), None, "both fetched: nothing announced is missing");
}

#[test]
fn the_model_with_the_smallest_share_goes_first() {
    let pick = pick_of(&["a", "b"], 4, &HashMap::new());
    let now = Instant::now();
    let _a = run_jobs(&pick, "a", 2);
    let _b = run_jobs(&pick, "b", 1);
    assert_eq!(picked(&pick, now), Some(key("b", None)), "b runs fewer");
    let _b2 = run_jobs(&pick, "b", 2);
    assert_eq!(picked(&pick, now), Some(key("a", None)), "now a runs fewer");
}

#[test]
fn weights_scale_the_share() {
    let pick = pick_of(&["a", "b"], 8, &HashMap::from([(model("a"), 3)]));
    let now = Instant::now();
    let _a = run_jobs(&pick, "a", 2);
    let _b = run_jobs(&pick, "b", 1);
    assert_eq!(picked(&pick, now), Some(key("a", None)), "a's 2 of weight 3 is less than b's 1 of 1");
    let _a2 = run_jobs(&pick, "a", 2);
    assert_eq!(picked(&pick, now), Some(key("b", None)), "4/3 > 1/1");
}

#[test]
fn the_lanes_of_a_model_take_turns_one_job_at_a_time() {
    let pick = pick_of(&["a"], 4, &HashMap::new());
    let (heavy, light) = (AccountId::generate(), AccountId::generate());
    let now = Instant::now();
    pick.add(key("a", Some(&heavy)), ());
    pick.mark(&key("a", None), 1, 0, now);
    assert_eq!(pick.pick(now, |_| false), Some((key("a", Some(&heavy)), (), MAX_FETCH)), "alone, it may fetch a batch");
    pick.mark(&key("a", Some(&heavy)), 1, 1, now);
    pick.add(key("a", Some(&light)), ());
    assert_eq!(
        pick.pick(now, |_| false),
        Some((key("a", Some(&light)), (), 1)),
        "the lane served least recently, one job"
    );
    pick.mark(&key("a", Some(&light)), 1, 1, now);
    assert_eq!(picked(&pick, now), Some(key("a", Some(&heavy))));
}

#[test]
fn a_lane_held_back_by_its_accounts_cap_is_passed_over_for_the_next() {
    let pick = pick_of(&["a"], 4, &HashMap::new());
    let (capped, other) = (AccountId::generate(), AccountId::generate());
    let now = Instant::now();
    pick.mark(&key("a", None), 1, 0, now);
    pick.add(key("a", Some(&capped)), ());
    pick.add(key("a", Some(&other)), ());
    let held_back = |k: &Lane| k.account == capped;
    assert_eq!(
        pick.pick(now, held_back),
        Some((key("a", Some(&other)), (), MAX_FETCH)),
        "the other account's lane, alone among those that may go, may fetch a batch"
    );
    pick.mark(&key("a", Some(&other)), 1, 0, now);
    assert_eq!(pick.pick(now, held_back), None, "the capped lane waits, with work, for a slot of its account");
    assert_eq!(picked(&pick, now), Some(key("a", Some(&capped))), "and goes once its account has one");
}

#[test]
fn empty_lanes_and_full_models_are_skipped_until_their_doorbell_or_the_recheck() {
    let pick = pick_of(&["a", "b"], 1, &HashMap::new());
    let now = Instant::now();
    pick.mark(&key("a", None), 1, 0, now);
    let _b = run_jobs(&pick, "b", 1);
    assert_eq!(picked(&pick, now), None, "a is empty and b has no free slot");
    assert!(pick.next_recheck(now) <= FIRST_RECHECK);
    assert_eq!(picked(&pick, now + FIRST_RECHECK), Some(key("a", None)), "asked again after the recheck");
    assert!(pick.ring(&key("a", None), Heard::Doorbell));
    assert_eq!(picked(&pick, now), Some(key("a", None)), "or at once when its doorbell rings");
    assert!(!pick.ring(&key("c", None), Heard::Doorbell), "an unknown lane must be opened first");
}

#[test]
fn a_lane_the_scan_saw_empty_sleeps_until_rung_unless_it_was_rung_after_the_scan_began() {
    let pick = pick_of(&["a", "b"], 1, &HashMap::new());
    let scan_began = Instant::now();
    pick.scanned(&model("a"), &[], scan_began);
    pick.scanned(&model("b"), &[key("b", None)], scan_began);
    let later = scan_began + MAX_RECHECK * 10;
    assert_eq!(picked(&pick, later), Some(key("b", None)), "a is dormant, b has jobs");
    let _b = run_jobs(&pick, "b", 1);
    assert_eq!(picked(&pick, later), None);
    assert!(pick.ring(&key("a", None), Heard::Doorbell));
    assert_eq!(picked(&pick, later), Some(key("a", None)), "rung awake");
    pick.scanned(&model("a"), &[], scan_began);
    assert_eq!(picked(&pick, later), Some(key("a", None)), "a scan older than the doorbell changes nothing");
}

#[test]
fn an_empty_lane_backs_off_and_is_forgotten_after_a_while() {
    let pick = pick_of(&["a"], 1, &HashMap::new());
    let start = Instant::now();
    for _ in 0..10 {
        pick.mark(&key("a", None), 1, 0, start);
    }
    assert_eq!(picked(&pick, start + FIRST_RECHECK), None, "backed off");
    assert_eq!(picked(&pick, start + MAX_RECHECK), Some(key("a", None)), "but never beyond the longest recheck");
    pick.forget(None, start + FORGET_AFTER);
    assert_eq!(picked(&pick, start + FORGET_AFTER), None, "forgotten");
    assert!(pick.add(key("a", None), ()), "and opened again when its doorbell rings");
}

#[test]
fn a_training_takes_its_trainers_slot_never_the_models_and_waits_while_the_trainer_is_busy() {
    let account = AccountId::generate();
    let route = |pool: Option<common::domain::Pool>| common::domain::Route { version: "v1".into(), pool };
    let predictions = Lane { route: route(None), ..key("a", Some(&account)) };
    let trainings = Lane { route: route(Some(common::domain::Pool::trainers())), ..predictions.clone() };
    let elsewhere = Lane { model: model("b"), ..trainings.clone() };
    let now = Instant::now();
    let pick = FairPick::new(&[model("a"), model("b")], 1, &HashMap::new()).with_trainers(&[model("a")]);
    assert!(pick.serves(&trainings) && pick.serves(&predictions));
    assert!(!pick.serves(&elsewhere), "no trainer of b here: its trainings are not picked for");
    for lane in [&predictions, &trainings] {
        pick.add(lane.clone(), ());
        assert!(pick.ring_at(lane, Heard::Doorbell, now));
    }
    let model_slot = pick.model_slot(&predictions).expect("the model's slot");
    assert_eq!(picked(&pick, now), Some(trainings.clone()), "the model is full; its trainer is not");
    let trainer_slot = pick.model_slot(&trainings).expect("the trainer's slot");
    assert!(pick.model_slot(&trainings).is_none(), "a trainer runs one training at a time");
    assert_eq!(picked(&pick, now), None, "both full: the training waits in its lane");
    drop(model_slot);
    assert_eq!(picked(&pick, now), Some(predictions.clone()), "predictions go on beside the training");
    drop(trainer_slot);
}
