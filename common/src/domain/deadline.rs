//! How a job ends at its deadline, which depends on who set it and whether it had started.
//!
//! Every job has a deadline: its kind's limit (`PREDICTION_DEADLINE_SECONDS`,
//! `TRAINING_DEADLINE_SECONDS`), or a sooner one the create asked for with `Cancel-After`.
//!
//! | deadline set by | reached while it runs | reached before it starts |
//! |---|---|---|
//! | the service's limit | `failed`, `PREDICTION_TIMEOUT` | `failed`, `PREDICTION_TIMEOUT` |
//! | the client (`Cancel-After`) | `canceled`, `PREDICTION_DEADLINE_REACHED`, charged for the time it ran | `canceled`, `PREDICTION_DEADLINE_BEFORE_START`, never run, not charged (`aborted` on `/replicate/v1`) |
//!
//! A client's deadline is what it asked for, so reaching it is a cancel, as on Replicate; the
//! service's limit is a failure of the job. The stored status is one of the five either way
//! (an aborted job is stored `canceled`, and only its view says `aborted`).

use super::{PredictionError, PredictionStatus};

/// How a job ended at its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadlineEnd {
    /// The service's limit: the job failed.
    TimedOut,
    /// The client's deadline, reached while the model ran: canceled, charged for its run.
    Canceled,
    /// The client's deadline, reached before the job started: it never runs.
    Aborted,
}

impl DeadlineEnd {
    /// How a job whose deadline the client set (`asked`) or not ends there, having started
    /// (`started`) or not.
    pub fn of(asked: bool, started: bool) -> Self {
        match (asked, started) {
            (false, _) => Self::TimedOut,
            (true, true) => Self::Canceled,
            (true, false) => Self::Aborted,
        }
    }

    /// The error code the job ends with.
    pub fn code(self) -> &'static str {
        match self {
            Self::TimedOut => "PREDICTION_TIMEOUT",
            Self::Canceled => "PREDICTION_DEADLINE_REACHED",
            Self::Aborted => "PREDICTION_DEADLINE_BEFORE_START",
        }
    }

    /// The error it ends with.
    pub fn error(self) -> PredictionError {
        let message = match self {
            Self::TimedOut => "The prediction did not finish within its time limit.",
            Self::Canceled => "The prediction was canceled at the deadline its Cancel-After header set.",
            Self::Aborted => {
                "The deadline its Cancel-After header set passed before the prediction started; it never ran."
            }
        };
        PredictionError { code: self.code().into(), message: message.into() }
    }

    /// The status it ends in.
    pub fn status(self) -> PredictionStatus {
        match self {
            Self::TimedOut => PredictionStatus::Failed,
            Self::Canceled | Self::Aborted => PredictionStatus::Canceled,
        }
    }

    /// The end an error `code` stands for, if it is a deadline's.
    pub fn from_code(code: &str) -> Option<Self> {
        [Self::TimedOut, Self::Canceled, Self::Aborted].into_iter().find(|end| end.code() == code)
    }
}

/// The status a job ends in with error `code`: a client's deadline cancels it, any other error
/// fails it.
pub fn status_of_error(code: &str) -> PredictionStatus {
    DeadlineEnd::from_code(code).map_or(PredictionStatus::Failed, DeadlineEnd::status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clients_deadline_cancels_or_aborts_and_the_services_fails() {
        assert_eq!(DeadlineEnd::of(false, true).status(), PredictionStatus::Failed);
        assert_eq!(DeadlineEnd::of(false, false).code(), "PREDICTION_TIMEOUT");
        assert_eq!(DeadlineEnd::of(true, true).status(), PredictionStatus::Canceled);
        assert_eq!(DeadlineEnd::of(true, false).code(), "PREDICTION_DEADLINE_BEFORE_START");
        assert_eq!(status_of_error("PREDICTION_DEADLINE_REACHED"), PredictionStatus::Canceled);
        assert_eq!(status_of_error("MODEL_ERROR"), PredictionStatus::Failed);
        for end in [DeadlineEnd::TimedOut, DeadlineEnd::Canceled, DeadlineEnd::Aborted] {
            assert_eq!(DeadlineEnd::from_code(&end.error().code), Some(end));
        }
    }
}
