//! The body of `PATCH /v1/account`: `monthly_budget`, the account's own monthly budget, a
//! decimal string of US dollars (`"10.00"`, at most six places) or `null` to drop it and keep
//! only the operator's. One type is both the OpenAPI schema and what the parser fills.

use common::domain::Micros;
use serde_json::{Map, Value};

use crate::problem::FieldError;

/// The most digits before the point of a budget (under a billion dollars).
const MAX_WHOLE_DIGITS: usize = 9;

/// What a `PATCH /v1/account` changes.
#[derive(Debug, Clone, PartialEq, Eq, utoipa::ToSchema)]
pub struct AccountChanges {
    /// The account's own monthly budget in US dollars (a decimal string, say `"10.00"`), at
    /// most the operator's; `null` drops it. Absent: unchanged.
    #[schema(value_type = Option<String>, example = "10.00", pattern = r"^[0-9]{1,9}(\.[0-9]{1,6})?$")]
    pub monthly_budget: Option<Option<Micros>>,
}

impl super::FromBody for AccountChanges {
    fn from_body(body: &Map<String, Value>) -> Result<Self, Vec<FieldError>> {
        let monthly_budget = match body.get("monthly_budget") {
            None => None,
            Some(Value::Null) => Some(None),
            Some(Value::String(text))
                if text.split('.').next().is_some_and(|whole| whole.len() <= MAX_WHOLE_DIGITS) =>
            {
                match Micros::parse_dollars(text) {
                    Ok(amount) => Some(Some(amount)),
                    Err(e) => return Err(vec![FieldError::invalid("monthly_budget", e.to_string())]),
                }
            }
            Some(_) => {
                return Err(vec![FieldError::invalid(
                    "monthly_budget",
                    "Must be a decimal string of US dollars, such as \"10.00\", or null.",
                )]);
            }
        };
        Ok(Self { monthly_budget })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::FromBody;
    use serde_json::json;

    fn parse(v: Value) -> Result<AccountChanges, Vec<FieldError>> {
        AccountChanges::from_body(v.as_object().expect("an object"))
    }

    #[test]
    fn a_budget_is_a_decimal_string_or_null() {
        assert_eq!(
            parse(json!({"monthly_budget": "10.00"})),
            Ok(AccountChanges { monthly_budget: Some(Some(Micros(10_000_000))) })
        );
        assert_eq!(parse(json!({"monthly_budget": null})), Ok(AccountChanges { monthly_budget: Some(None) }));
        assert_eq!(parse(json!({})), Ok(AccountChanges { monthly_budget: None }));
        for bad in [json!(10), json!("ten"), json!("-1"), json!("0.0000001"), json!("1000000000")] {
            let errors = parse(json!({"monthly_budget": bad})).expect_err("refused");
            assert_eq!(errors[0].field, "monthly_budget");
        }
    }
}
