//! A prediction's priority: `high`, `normal` (the default) or `low`. An account may ask for at
//! most its `max_priority` (`normal` unless the operator raised or lowered it).

use std::{fmt, str::FromStr};

use serde::{Deserialize, Serialize};

/// How urgent a prediction is.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// Before normal and low work.
    High,
    /// The default.
    #[default]
    Normal,
    /// After high and normal work.
    Low,
}

impl Priority {
    /// Its name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::High => "high",
            Self::Normal => "normal",
            Self::Low => "low",
        }
    }

    /// Its rank: 0 for `high`, 1 for `normal`, 2 for `low` (a lower rank goes first).
    pub fn rank(self) -> u8 {
        match self {
            Self::High => 0,
            Self::Normal => 1,
            Self::Low => 2,
        }
    }

    /// The priority of `rank` ([`Self::rank`]; past `low`, `low`).
    pub fn from_rank(rank: u8) -> Self {
        match rank {
            0 => Self::High,
            1 => Self::Normal,
            _ => Self::Low,
        }
    }

    /// Whether `self` asks for more than `max` allows.
    pub fn above(self, max: Self) -> bool {
        self.rank() < max.rank()
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Priority {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "high" => Ok(Self::High),
            "normal" => Ok(Self::Normal),
            "low" => Ok(Self::Low),
            other => Err(format!("`{other}` is not a priority: use high, normal or low")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priorities_read_and_rank_as_their_names_say() {
        for p in [Priority::High, Priority::Normal, Priority::Low] {
            assert_eq!(p.as_str().parse::<Priority>(), Ok(p));
        }
        assert!("urgent".parse::<Priority>().is_err());
        assert_eq!(Priority::default(), Priority::Normal);
        assert!(Priority::High.above(Priority::Normal));
        assert!(!Priority::Normal.above(Priority::Normal));
        assert!(!Priority::Low.above(Priority::Normal));
        assert!(Priority::Normal.above(Priority::Low));
        for p in [Priority::High, Priority::Normal, Priority::Low] {
            assert_eq!(Priority::from_rank(p.rank()), p);
        }
    }
}
