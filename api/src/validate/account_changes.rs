//! The body of `PATCH /v1/account`: `monthly_budget`, the account's own monthly budget, a
//! decimal string of US dollars (`"10.00"`, at most six places) or `null` to drop it and keep
//! only the operator's. One type is both the OpenAPI schema and what the parser fills.

use common::domain::Micros;
use serde::Deserialize;
use serde_json::Value;

use super::field::{Faults, Field, FieldValue, Read};
use crate::problem::FieldError;

/// The most digits before the point of a budget (under a billion dollars).
const MAX_WHOLE_DIGITS: usize = 9;

/// What a `PATCH /v1/account` changes.
// As sent; `AccountChanges` is it checked.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[schema(as = AccountChanges)]
pub struct AccountChangesBody {
    /// The account's own monthly budget in US dollars (a decimal string, say `"10.00"`), at
    /// most the operator's; `null` drops it. Absent: unchanged.
    #[schema(value_type = Option<String>, example = "10.00", pattern = r"^[0-9]{1,9}(\.[0-9]{1,6})?$")]
    #[serde(default, deserialize_with = "present")]
    pub monthly_budget: Option<Option<Field<Budget>>>,
}

/// A field that is present (`Some`), even as `null` (`Some(None)`): absent is `None` by
/// `#[serde(default)]`.
fn present<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// A monthly budget: a decimal string of US dollars, at most six places.
#[derive(Debug)]
pub struct Budget(Micros);

impl FieldValue for Budget {
    fn from_value(value: Value) -> Result<Self, Faults> {
        match value {
            Value::String(text) if text.split('.').next().is_some_and(|whole| whole.len() <= MAX_WHOLE_DIGITS) => {
                Micros::parse_dollars(&text).map(Self).map_err(|e| Faults::new(e.to_string()))
            }
            _ => Err(Faults::new("Must be a decimal string of US dollars, such as \"10.00\", or null.")),
        }
    }
}

/// What a `PATCH /v1/account` changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountChanges {
    /// The account's own monthly budget: `Some(None)` drops it; `None` leaves it.
    pub monthly_budget: Option<Option<Micros>>,
}

impl super::FromBody for AccountChanges {
    type Sent = AccountChangesBody;

    fn check(body: AccountChangesBody) -> Result<Self, Vec<FieldError>> {
        let mut errors = Vec::new();
        let monthly_budget =
            body.monthly_budget.map(|budget| budget.optional("monthly_budget", &mut errors).map(|b| b.0));
        if errors.is_empty() { Ok(Self { monthly_budget }) } else { Err(errors) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::FromBody;
    use serde_json::json;

    fn parse(v: Value) -> Result<AccountChanges, Vec<FieldError>> {
        AccountChanges::from_object(v.as_object().cloned().expect("an object"))
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
