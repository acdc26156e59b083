//! A model's address, `<owner>/<name>`.
//!
//! Both parts are 1 to 100 characters of lowercase letters, digits, `-`, `_` and `.`, starting
//! with a letter or digit, as Replicate names them (`black-forest-labs/flux-1.1-pro`). They
//! become NATS subject tokens (`jobs.<owner>.<name>`) and consumer names, where a `.` would
//! split a token: there each `.` is written `~`, which no name holds (see
//! [`crate::subjects`]). Nothing else NATS treats specially (`*`, `>`, spaces) can appear.

use std::{fmt, str::FromStr};

use serde::{Deserialize, Serialize};

/// A parsed model address.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ModelRef {
    owner: String,
    name: String,
}

/// The error of parsing a model address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "a model is addressed as <owner>/<name>, each 1-100 characters of a-z, 0-9, '-', '_' and '.', starting with a letter or digit"
)]
pub struct InvalidModelRef;

/// The longest owner or model name.
pub const MAX_SEGMENT: usize = 100;

/// Whether `s` is a valid owner or model name.
pub fn is_valid_segment(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAX_SEGMENT
        && bytes[0].is_ascii_alphanumeric()
        && bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_' | b'.'))
}

impl ModelRef {
    /// Parses the two path segments of a model address.
    pub fn new(owner: &str, name: &str) -> Result<Self, InvalidModelRef> {
        if is_valid_segment(owner) && is_valid_segment(name) {
            Ok(Self { owner: owner.to_owned(), name: name.to_owned() })
        } else {
            Err(InvalidModelRef)
        }
    }

    /// The owner part.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The name part.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl FromStr for ModelRef {
    type Err = InvalidModelRef;
    fn from_str(s: &str) -> Result<Self, InvalidModelRef> {
        let (owner, name) = s.split_once('/').ok_or(InvalidModelRef)?;
        Self::new(owner, name)
    }
}

impl TryFrom<String> for ModelRef {
    type Error = InvalidModelRef;
    fn try_from(s: String) -> Result<Self, InvalidModelRef> {
        s.parse()
    }
}

impl From<ModelRef> for String {
    fn from(m: ModelRef) -> String {
        m.to_string()
    }
}

impl fmt::Display for ModelRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.owner, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_address_round_trips_through_text() {
        let m: ModelRef = "demo/echo".parse().expect("valid");
        assert_eq!((m.owner(), m.name()), ("demo", "echo"));
        assert_eq!(m.to_string(), "demo/echo");
    }

    #[test]
    fn characters_that_nats_treats_specially_are_rejected() {
        for bad in ["demo/*", "de mo/echo", "demo/>", "Demo/echo", "/echo", "demo/", "-x/y", "demo/.echo", "demo/e~cho"]
        {
            assert!(bad.parse::<ModelRef>().is_err(), "{bad} must be rejected");
        }
        assert!(ModelRef::new(&"a".repeat(101), "x").is_err());
        assert!(ModelRef::new(&"a".repeat(100), "x_y-1").is_ok());
    }

    #[test]
    fn dotted_names_are_replicates() {
        for good in ["black-forest-labs/flux-1.1-pro", "meta/meta-llama-3.1-405b-instruct", "a.b/c.d"] {
            assert_eq!(good.parse::<ModelRef>().expect("valid").to_string(), good);
        }
    }
}
