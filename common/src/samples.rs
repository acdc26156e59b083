//! Sample data shared by the integration tests and the load tool (feature `samples`, also
//! part of `testkit`): predictions as the api would create them, made without the api.

use serde_json::Value;

use crate::domain::{AccountId, ApiSurface, ModelRef, NewPrediction, Prediction};

/// A `starting` prediction of `model` for `account`, with `input` already valid for the model
/// (it is both the request's input and the validated one), version `v1`, no webhook.
pub fn starting_prediction(account: AccountId, model: ModelRef, input: Value) -> Prediction {
    Prediction::new_starting(NewPrediction {
        account_id: account,
        model,
        version: "v1".into(),
        capability: "text-generation".into(),
        input: input.clone(),
        model_input: input,
        webhook: None,
        webhook_events_filter: None,
        surface: ApiSurface::Canonical,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::domain::PredictionStatus;

    #[test]
    fn a_sample_prediction_is_starting_with_its_input_as_given() {
        let account = AccountId::generate();
        let model: ModelRef = "demo/echo".parse().expect("model");
        let p = starting_prediction(account.clone(), model.clone(), json!({"prompt": "hi"}));
        assert_eq!(p.status, PredictionStatus::Starting);
        assert_eq!((p.account_id, p.model), (account, model));
        assert_eq!(p.input, json!({"prompt": "hi"}));
        assert!(p.webhook.is_none());
    }
}
