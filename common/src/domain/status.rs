//! A prediction's status and the transitions allowed between statuses.
//!
//! ```text
//! starting ──> processing ──> succeeded
//!    │             ├────────> failed
//!    │             └────────> canceled
//!    ├──> canceled   (canceled before a runner took it)
//!    └──> failed     (could not be run at all, e.g. its job was lost for good)
//! ```
//!
//! The three terminal statuses have no way out. Every write of a status is a conditional update
//! whose filter names [`PredictionStatus::predecessors`] of the new status, so no writer can move
//! a prediction backwards or out of a terminal state, however writes interleave.

use std::{fmt, str::FromStr};

use serde::{Deserialize, Serialize};

/// One of the five statuses of the interface.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PredictionStatus {
    /// Created, waiting for a runner.
    Starting,
    /// A runner is running the model.
    Processing,
    /// Finished with an output.
    Succeeded,
    /// Finished with an error.
    Failed,
    /// Stopped on request.
    Canceled,
}

impl PredictionStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [Self; 5] = [Self::Starting, Self::Processing, Self::Succeeded, Self::Failed, Self::Canceled];

    /// The status as it appears on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Processing => "processing",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Canceled => "canceled",
        }
    }

    /// Whether the prediction has ended; a terminal status never changes again.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Canceled)
    }

    /// Whether a prediction in `self` may move to `next`.
    pub fn can_become(self, next: Self) -> bool {
        use PredictionStatus::*;
        matches!((self, next), (Starting, Processing | Failed | Canceled) | (Processing, Succeeded | Failed | Canceled))
    }

    /// The statuses from which `self` may be reached: the filter of a conditional update.
    pub fn predecessors(self) -> Vec<Self> {
        Self::ALL.into_iter().filter(|s| s.can_become(self)).collect()
    }
}

impl fmt::Display for PredictionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error of parsing a status name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown status; expected one of starting, processing, succeeded, failed, canceled")]
pub struct UnknownStatus;

impl FromStr for PredictionStatus {
    type Err = UnknownStatus;
    fn from_str(s: &str) -> Result<Self, UnknownStatus> {
        Self::ALL.into_iter().find(|st| st.as_str() == s).ok_or(UnknownStatus)
    }
}

#[cfg(test)]
mod tests {
    use super::PredictionStatus::{self, *};

    #[test]
    fn no_terminal_status_can_be_left() {
        for from in PredictionStatus::ALL.into_iter().filter(|s| s.is_terminal()) {
            for to in PredictionStatus::ALL {
                assert!(!from.can_become(to), "{from} -> {to} must be refused");
            }
        }
    }

    #[test]
    fn the_lifecycle_moves_only_forward() {
        assert!(Starting.can_become(Processing));
        assert!(Processing.can_become(Succeeded));
        assert!(Processing.can_become(Failed));
        assert!(Processing.can_become(Canceled));
        assert!(Starting.can_become(Canceled));
        assert!(!Processing.can_become(Starting));
        assert!(!Starting.can_become(Succeeded), "success needs a run");
    }

    #[test]
    fn no_status_becomes_itself() {
        for s in PredictionStatus::ALL {
            assert!(!s.can_become(s), "{s} -> {s} would hide a double write");
        }
    }

    #[test]
    fn predecessors_are_exactly_the_statuses_that_may_move_there() {
        assert_eq!(Processing.predecessors(), vec![Starting]);
        assert_eq!(Succeeded.predecessors(), vec![Processing]);
        assert_eq!(Canceled.predecessors(), vec![Starting, Processing]);
        assert!(Starting.predecessors().is_empty());
    }

    #[test]
    fn statuses_parse_and_print_their_wire_names() {
        for s in PredictionStatus::ALL {
            assert_eq!(s.as_str().parse::<PredictionStatus>(), Ok(s));
            assert_eq!(serde_json::to_string(&s).unwrap_or_default(), format!("\"{s}\""));
        }
        assert!("Succeeded".parse::<PredictionStatus>().is_err());
    }
}
