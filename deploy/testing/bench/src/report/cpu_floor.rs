//! The floor under the CPU targets: the calls the service makes for each prediction, each
//! priced at what the load tool's own client spent on the same call. MongoDB and JetStream
//! calls come from the baselines, a webhook POST is priced as a create request to the api, a
//! message received (the job, an event) as a publish (a message and its ack). The api's HTTP
//! server side, the attempt records and all JSON work are left out, so the true floor is higher.
//!
//! Two pricings of the same calls:
//! - **batched**: 8 in flight, as the cost batches run; the floor of the 1.0 × target (and, with one webhook, of the open loop's 4 ×);
//! - **alone**: each call made alone, 200 a second ([`crate::measure::paced`]), as the end-to-end phase
//!   at 200/s makes them: every call pays the wake-ups of a client that was idle before it.

use crate::scenarios::api_alone;
use crate::scenarios::baselines;
use crate::scenarios::baselines::Baselines;

/// What each kind of required call costs a client, in CPU microseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Prices {
    /// Insert a `starting` prediction into the indexed collection.
    pub insert: f64,
    /// A state change as a findAndModify returning the prediction.
    pub find_and_modify: f64,
    /// A state change as a conditional update returning nothing (what this runner writes).
    pub update: Option<f64>,
    /// A JetStream publish and its ack (also the price of a message received and acked).
    pub publish: f64,
    /// An HTTP POST (a webhook), priced as a create request to the api.
    pub http_request: f64,
}

impl Prices {
    /// Each call at [`baselines::FLOOR_LEVEL`] in flight, the HTTP request as a create at 8
    /// clients; a figure not measured is NaN (`update`: `None`).
    pub fn batched(baselines: &Baselines, api: &[api_alone::Row]) -> Self {
        let at_level = |operation: &str| baselines.client_cpu_us(operation, baselines::FLOOR_LEVEL);
        let http_request = api.iter().find(|row| row.request == "create" && row.clients == 8);
        Self {
            insert: at_level("mongodb_insert_prediction").unwrap_or(f64::NAN),
            find_and_modify: at_level("mongodb_find_and_modify_prediction").unwrap_or(f64::NAN),
            update: at_level("mongodb_update_prediction"),
            publish: at_level("jetstream_publish").unwrap_or(f64::NAN),
            http_request: http_request.map_or(f64::NAN, |row| row.client_cpu_us),
        }
    }

    /// Each call made alone, [`crate::measure::paced::PACED_RATE`] a second; `None` unless every
    /// figure was measured.
    pub fn alone(baselines: &Baselines, http_request: Option<f64>) -> Option<Self> {
        let alone = |operation: &str| baselines.paced_client_cpu_us(operation);
        Some(Self {
            insert: alone("mongodb_insert_prediction")?,
            find_and_modify: alone("mongodb_find_and_modify_prediction")?,
            update: Some(alone("mongodb_update_prediction")?),
            publish: alone("jetstream_publish")?,
            http_request: http_request?,
        })
    }
}

/// The required calls of one service and their price.
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    /// `api`, `runner` or `notifier`.
    pub service: &'static str,
    /// The calls, in words.
    pub calls: String,
    /// Their price per prediction, in CPU microseconds.
    pub cpu_us: f64,
}

/// The floor of one prediction of demo/echo (a `start` and a `completed` event) whose
/// notifier POSTs `webhooks` webhooks, at `prices`.
#[derive(Clone, Debug, PartialEq)]
pub struct Floor {
    /// Each service's calls.
    pub lines: Vec<Line>,
    prices: Prices,
}

impl Floor {
    /// The calls each service must make for one prediction, at `prices`.
    pub fn of(prices: Prices, webhooks: f64) -> Self {
        let Prices { insert, find_and_modify, publish, http_request, .. } = prices;
        let lines = vec![
            Line {
                service: "api",
                calls: "insert the `starting` prediction, publish its job".into(),
                cpu_us: insert + publish,
            },
            Line {
                service: "runner",
                calls: "receive and ack the job, 2 state changes (findAndModify returning the prediction), publish `start` and `completed`".into(),
                cpu_us: publish + 2.0 * (find_and_modify + publish),
            },
            Line {
                service: "notifier",
                calls: format!("receive and ack `start` and `completed`, POST each webhook ({webhooks} per prediction)"),
                cpu_us: 2.0 * publish + webhooks * http_request,
            },
        ];
        Self { lines, prices }
    }

    /// All services' calls.
    pub fn total(&self) -> f64 {
        self.lines.iter().map(|line| line.cpu_us).sum()
    }

    /// The same with the runner's two state changes priced as conditional updates that
    /// return nothing instead of findAndModify calls returning the prediction: the reading
    /// that fits this runner, which holds the prediction (the job carries it) and reads
    /// nothing back. `None` without that price.
    pub fn total_with_updates(&self) -> Option<f64> {
        Some(self.total() - 2.0 * (self.prices.find_and_modify - self.prices.update?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::rate::Measured as Rate;

    fn baselines() -> Baselines {
        let mut baselines = Baselines::empty(2);
        for (operation, client_cpu_us) in [
            ("mongodb_insert_prediction", 50.0),
            ("mongodb_find_and_modify_prediction", 80.0),
            ("mongodb_update_prediction", 50.0),
            ("jetstream_publish", 20.0),
        ] {
            baselines.record(operation, 8, Rate { per_second: 1000.0, client_cpu_us });
            baselines.record(operation, 1, Rate { per_second: 100.0, client_cpu_us: 1000.0 });
            baselines.paced_client_cpu_us.insert(operation, 2.0 * client_cpu_us);
        }
        baselines
    }

    fn create_at(clients: usize, client_cpu_us: f64) -> api_alone::Row {
        api_alone::Row {
            request: "create",
            clients,
            per_second: 5000.0,
            latency: harness::stats::Samples::new(vec![std::time::Duration::from_millis(1)]),
            client_cpu_us,
        }
    }

    #[test]
    fn each_required_call_is_priced_at_its_baseline_at_8_in_flight() {
        let prices = Prices::batched(&baselines(), &[create_at(1, 900.0), create_at(8, 60.0)]);
        let floor = Floor::of(prices, 2.0);
        let each: Vec<f64> = floor.lines.iter().map(|line| line.cpu_us).collect();
        assert_eq!(each, [50.0 + 20.0, 20.0 + 2.0 * (80.0 + 20.0), 2.0 * 20.0 + 2.0 * 60.0]);
        assert_eq!(floor.total(), 450.0);
        assert_eq!(floor.total_with_updates(), Some(450.0 - 2.0 * (80.0 - 50.0)), "state changes as updates");
        assert_eq!(Floor::of(prices, 1.0).total(), 390.0, "one webhook POST fewer");
    }

    #[test]
    fn calls_made_alone_are_priced_at_their_paced_figures() {
        let baselines = baselines();
        assert_eq!(Prices::alone(&baselines, None), None, "no paced create measured");
        let prices = Prices::alone(&baselines, Some(150.0)).expect("every price measured");
        assert_eq!(
            prices,
            Prices { insert: 100.0, find_and_modify: 160.0, update: Some(100.0), publish: 40.0, http_request: 150.0 }
        );
        assert_eq!(Floor::of(prices, 1.0).total(), (100.0 + 40.0) + (40.0 + 2.0 * 200.0) + (80.0 + 150.0));
        assert_eq!(Prices::alone(&Baselines::empty(2), Some(150.0)), None, "no paced baselines");
    }

    #[test]
    fn a_missing_price_leaves_the_floor_unknown_not_low() {
        let floor = Floor::of(Prices::batched(&Baselines::empty(2), &[]), 2.0);
        assert!(floor.total().is_nan());
        assert_eq!(floor.total_with_updates(), None);
    }
}
