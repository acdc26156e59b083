//! Secret inputs: the inputs a model's schema marks `x-cog-secret` (Cog's `Secret`, an API
//! token say) reach the model whole and are never stored or shown in the clear.
//!
//! At the create, the api seals each such value under the master key, bound to the prediction
//! and the field ([`Prediction::seal_secrets`]), into `sealed_inputs`, and puts [`MASK`] in its
//! place in both `input` (what every answer, list, webhook and the console show) and
//! `model_input`. The runner opens them right before it calls the model
//! ([`Prediction::opened_model_input`]), and keeps their values out of the logs it stores
//! ([`redact`]). A job message carries the masked input only, never a sealed value opened.

use serde_json::{Map, Value};

use super::{Prediction, PredictionId};
use crate::crypto::{CryptoError, MasterKey};

/// What a secret input shows instead of its value, as Cog's `Secret` prints itself.
pub const MASK: &str = "**********";

/// What a secret input's seal is bound to: a sealed value opens for its prediction and field
/// only.
fn context(prediction: &PredictionId, field: &str) -> String {
    format!("secret-input.v1:{prediction}:{field}")
}

impl Prediction {
    /// Seals the string values of `fields` of its model input into `sealed_inputs` and masks
    /// them in `input` and `model_input`.
    pub fn seal_secrets(&mut self, key: &MasterKey, fields: &[String]) {
        for field in fields {
            let Some(Value::String(value)) = self.model_input.get(field).cloned() else { continue };
            self.sealed_inputs.insert(field.clone(), key.seal(&value, &context(&self.id, field)));
            for shown in [&mut self.model_input, &mut self.input] {
                if let Some(slot) = shown.get_mut(field) {
                    *slot = Value::String(MASK.to_owned());
                }
            }
        }
    }

    /// Its model input with each sealed secret opened: what the model receives.
    pub fn opened_model_input(&self, key: &MasterKey) -> Result<Map<String, Value>, CryptoError> {
        let mut input = self.model_input.as_object().cloned().unwrap_or_default();
        for (field, sealed) in &self.sealed_inputs {
            input.insert(field.clone(), Value::String(key.open(sealed, &context(&self.id, field))?));
        }
        Ok(input)
    }

    /// Its sealed inputs sealed again under the master key's current key, if the previous key
    /// sealed any of them (a master-key rotation); `None` when none is left to move.
    pub fn resealed_inputs(
        &self,
        key: &MasterKey,
    ) -> Result<Option<std::collections::BTreeMap<String, String>>, CryptoError> {
        let mut moved = false;
        let mut resealed = self.sealed_inputs.clone();
        for (field, sealed) in &mut resealed {
            if let Some(again) = key.reseal(sealed, &context(&self.id, field))? {
                *sealed = again;
                moved = true;
            }
        }
        Ok(moved.then_some(resealed))
    }

    /// The values of its secret inputs in `opened` (its [`Self::opened_model_input`]), to keep
    /// out of what is stored.
    pub fn secret_values(&self, opened: &Map<String, Value>) -> Vec<String> {
        let values = self.sealed_inputs.keys().filter_map(|field| opened.get(field)?.as_str());
        values.filter(|v| !v.is_empty()).map(str::to_owned).collect()
    }
}

/// `text` with every occurrence of each of `secrets` replaced by [`MASK`].
pub fn redact(text: &str, secrets: &[String]) -> String {
    secrets.iter().filter(|s| !s.is_empty()).fold(text.to_owned(), |text, secret| text.replace(secret.as_str(), MASK))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::prediction::tests::sample;
    use serde_json::json;

    #[test]
    fn a_secret_is_masked_where_shown_and_opens_for_its_own_prediction_only() {
        let key = MasterKey::from_base64(&MasterKey::generate_base64()).expect("key");
        let mut p = sample();
        p.input = json!({"prompt": "hi", "token": "r8_abc"});
        p.model_input = json!({"prompt": "hi", "token": "r8_abc"});
        p.seal_secrets(&key, &["token".to_owned(), "absent".to_owned()]);
        assert_eq!((&p.input["token"], &p.model_input["token"]), (&json!(MASK), &json!(MASK)));
        assert!(!serde_json::to_string(&p).expect("json").contains("r8_abc"), "stored nowhere in the clear");
        let opened = p.opened_model_input(&key).expect("opens");
        assert_eq!(opened["token"], "r8_abc");
        assert_eq!(p.secret_values(&opened), vec!["r8_abc".to_owned()]);
        let mut other = sample();
        other.sealed_inputs = p.sealed_inputs.clone();
        assert!(other.opened_model_input(&key).is_err(), "bound to its prediction");
        assert_eq!(redact("using r8_abc twice: r8_abc", &["r8_abc".into()]), format!("using {MASK} twice: {MASK}"));
    }
}
