//! A model's instances: up to `max_instances` servers of one Cog project ([`Instance`], each
//! the owner of its process), of which `min_instances` are kept running. This is what the
//! executor asks for a ready server ([`Instances::ready`]); it never starts one itself.
//!
//! Each instance has the project's `concurrency.max` slots, and the runner's slots for the model
//! are that times `max_instances` ([`Instances::slots`]), so a job always finds a slot here: a
//! run *claims* one on an instance before it waits for that instance's boot, and the choice is
//! made under one lock, so two jobs arriving together never both count on the last slot of a
//! booting server. A run goes to the busiest ready instance with a free slot (packing: the
//! others go idle and are stopped after `idle_seconds`), else joins a boot already under way,
//! else boots an instance that has none.
//!
//! The first `min_instances` instances are the kept ones: each boots at the runner's start and
//! again after a crash (its backoff), and is never stopped as idle. A deployment of the version
//! may raise that floor, up to `max_instances` ([`Instances::set_floor`], kept in step by
//! [`crate::deployment_floors`]).

use std::sync::{
    Arc, Mutex,
    atomic::{AtomicUsize, Ordering},
};

use tokio_util::sync::CancellationToken;
use url::Url;

use super::instance::{self, Instance, Launch};
use crate::{metrics::RunnerMetrics, models::ModelError};

/// The instances of one model (see the module's notes).
pub struct Instances {
    members: Vec<Arc<Instance>>,
    /// Each instance's slots (`concurrency.max`).
    slots_each: usize,
    /// The runs that hold or wait for a slot, per instance.
    claims: Arc<Mutex<Vec<usize>>>,
    /// The instance the latest run that had to wait for a boot was given.
    last_booted: AtomicUsize,
    /// The model's own `min_instances`: the floor a deployment may raise, never lower.
    declared_min: usize,
}

/// A ready server for one run: the instance, its URL, and the hold on its slot (released when
/// dropped).
pub struct Ready {
    /// The instance the run is on (to tell a crash from the model's error).
    pub instance: Arc<Instance>,
    /// Its server.
    pub url: Url,
    _lease: instance::Lease,
    _claim: Claim,
}

/// A slot claimed on one instance.
struct Claim {
    claims: Arc<Mutex<Vec<usize>>>,
    index: usize,
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut claims = self.claims.lock().unwrap_or_else(|p| p.into_inner());
        claims[self.index] = claims[self.index].saturating_sub(1);
    }
}

impl Instances {
    /// The instances of `launch` (`settings.max_instances` of them, at least one), the first
    /// `settings.min_instances` booted now in the background; they stop with `shutdown`.
    pub fn new(launch: Launch, metrics: RunnerMetrics, shutdown: CancellationToken) -> Arc<Self> {
        let settings = launch.settings.clone();
        let slots_each = launch.project.concurrency.max(1);
        let members: Vec<_> = (0..settings.max_instances.max(1))
            .map(|index| {
                let mut one = launch.clone();
                one.settings.min_instances = usize::from(index < settings.min_instances);
                one.settings.max_instances = 1;
                Instance::new(one, metrics.clone(), shutdown.clone())
            })
            .collect();
        let claims = Arc::new(Mutex::new(vec![0; members.len()]));
        let declared_min = settings.min_instances.min(members.len());
        Arc::new(Self { members, slots_each, claims, last_booted: AtomicUsize::new(0), declared_min })
    }

    /// Keeps `deployments_min` instances running (the `min_instances` of the deployments of
    /// this version), or the model's own `min_instances` if that is more, and never more than
    /// there are instances; returns how many are kept.
    pub fn set_floor(&self, deployments_min: usize) -> usize {
        let floor = deployments_min.max(self.declared_min).min(self.members.len());
        for (index, member) in self.members.iter().enumerate() {
            member.set_kept(index < floor);
        }
        floor
    }

    /// The runner's slots for the model: every instance's.
    pub fn slots(&self) -> usize {
        self.slots_each * self.members.len()
    }

    /// Every instance, for the runner's presence record.
    pub fn members(&self) -> &[Arc<Instance>] {
        &self.members
    }

    /// Whether a run would find a ready server with a free slot now (no boot to wait for).
    pub fn has_room(&self) -> bool {
        let claims = self.claims.lock().unwrap_or_else(|p| p.into_inner());
        self.members.iter().zip(claims.iter()).any(|(m, c)| m.serving() && *c < self.slots_each)
    }

    /// A ready server with a slot for one run, booting an instance first when none has room.
    /// A failed boot is `MODEL_SETUP_FAILED` (see [`Instance::ready`]).
    pub async fn ready(&self) -> Result<Ready, ModelError> {
        let claim = self.claim();
        let instance = self.members[claim.index].clone();
        let (url, lease) = instance.ready().await?;
        Ok(Ready { instance, url, _lease: lease, _claim: claim })
    }

    /// The latest boot's output of the instance the latest waiting run was given.
    pub fn boot_log(&self) -> String {
        self.members[self.last_booted.load(Ordering::Acquire).min(self.members.len() - 1)].boot_log()
    }

    /// Claims a slot (see the module's notes for the order of choice).
    fn claim(&self) -> Claim {
        let mut claims = self.claims.lock().unwrap_or_else(|p| p.into_inner());
        let serving: Vec<bool> = self.members.iter().map(|m| m.serving()).collect();
        let index = choose(&serving, &claims, self.slots_each);
        if !serving[index] {
            self.last_booted.store(index, Ordering::Release);
        }
        claims[index] += 1;
        Claim { claims: self.claims.clone(), index }
    }
}

/// The instance for one more run, given which serve now and the runs claimed on each: the
/// busiest serving one with a free slot, else one booting (claimed, not serving) with a free
/// slot, else the first with no claim, else (every slot taken: the runner's slots should not
/// allow it) the least claimed.
fn choose(serving: &[bool], claims: &[usize], slots_each: usize) -> usize {
    let n = claims.len();
    let free = |i: &usize| claims[*i] < slots_each;
    (0..n)
        .filter(|i| serving[*i] && free(i))
        .max_by_key(|i| (claims[*i], std::cmp::Reverse(*i)))
        .or_else(|| (0..n).filter(|i| !serving[*i] && claims[*i] > 0).find(free))
        .or_else(|| (0..n).find(|i| claims[*i] == 0))
        .or_else(|| (0..n).min_by_key(|i| claims[*i]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::choose;

    #[test]
    fn a_run_goes_to_the_busiest_serving_instance_with_room() {
        assert_eq!(choose(&[true, true], &[1, 2], 4), 1);
        assert_eq!(choose(&[true, true], &[0, 0], 4), 0, "ties go to the first");
        assert_eq!(choose(&[true, true], &[4, 1], 4), 1, "a full one is passed over");
    }

    #[test]
    fn a_run_joins_a_boot_under_way_before_booting_another() {
        assert_eq!(choose(&[false, false], &[1, 0], 2), 0);
        assert_eq!(choose(&[false, false], &[1, 0], 1), 1, "its one slot is claimed: the next boots");
        assert_eq!(choose(&[true, false, false], &[1, 0, 0], 1), 1);
    }

    #[test]
    fn with_every_slot_claimed_the_least_claimed_is_chosen() {
        assert_eq!(choose(&[true, true], &[2, 1], 1), 1);
    }
}
