//! Webhook event names: the values of `webhook_events_filter` and of the `webhook-event` header.
//! The four events of a prediction, and `account.budget`: a notice that the account's monthly
//! budget reached 80 % or 100 % (docs/spend.md), sent to the receivers whose predictions asked
//! for it by name (it is never in a filter's default).

use std::{fmt, str::FromStr};

use serde::{Deserialize, Serialize};

/// An event a webhook receiver can subscribe to.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WebhookEvent {
    /// The prediction began processing.
    Start,
    /// Its output changed.
    Output,
    /// Its logs changed.
    Logs,
    /// It reached a terminal status.
    Completed,
    /// The account's monthly budget reached a threshold (80 % or 100 %): a notice of the
    /// account, not a change of the prediction.
    #[serde(rename = "account.budget")]
    AccountBudget,
}

impl WebhookEvent {
    /// Every event of a prediction; a prediction without a filter receives all of them.
    pub const ALL: [Self; 4] = [Self::Start, Self::Output, Self::Logs, Self::Completed];

    /// The event's wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Start => "start",
            Self::Output => "output",
            Self::Logs => "logs",
            Self::Completed => "completed",
            Self::AccountBudget => "account.budget",
        }
    }

    /// Whether a prediction with this filter (absent = every event of a prediction) wants this
    /// event.
    pub fn selected_by(self, filter: Option<&[WebhookEvent]>) -> bool {
        match filter {
            None => Self::ALL.contains(&self),
            Some(events) => events.contains(&self),
        }
    }
}

impl fmt::Display for WebhookEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error of parsing an event name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown event; expected one of start, output, logs, completed, account.budget")]
pub struct UnknownEvent;

impl FromStr for WebhookEvent {
    type Err = UnknownEvent;
    fn from_str(s: &str) -> Result<Self, UnknownEvent> {
        Self::ALL.into_iter().chain([Self::AccountBudget]).find(|e| e.as_str() == s).ok_or(UnknownEvent)
    }
}

#[cfg(test)]
mod tests {
    use super::WebhookEvent::{self, *};

    #[test]
    fn no_filter_selects_every_event() {
        assert!(WebhookEvent::ALL.iter().all(|e| e.selected_by(None)));
    }

    #[test]
    fn a_filter_selects_only_its_events() {
        let filter = [Completed];
        assert!(Completed.selected_by(Some(&filter)));
        assert!(!Start.selected_by(Some(&filter)));
        assert!(!Logs.selected_by(Some(&[])));
    }

    #[test]
    fn event_names_parse() {
        assert_eq!("logs".parse(), Ok(Logs));
        assert_eq!("account.budget".parse(), Ok(AccountBudget));
        assert!(!AccountBudget.selected_by(None), "a budget notice only when asked for by name");
        assert!(AccountBudget.selected_by(Some(&[Completed, AccountBudget])));
        assert!("bogus".parse::<WebhookEvent>().is_err());
    }
}
