//! A model's address, `<owner>/<name>`.
//!
//! Both parts are 1 to 64 characters of lowercase letters, digits, `-` and `_`, starting with a
//! letter or digit. They become NATS subject tokens (`jobs.<owner>.<name>`) and consumer names,
//! so nothing that NATS treats specially (`.`, `*`, `>`, spaces) can appear in them.

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
    "a model is addressed as <owner>/<name>, each 1-64 characters of a-z, 0-9, '-' and '_', starting with a letter or digit"
)]
pub struct InvalidModelRef;

/// Whether `s` is a valid owner or model name.
pub fn is_valid_segment(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 64
        && bytes[0].is_ascii_alphanumeric()
        && bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-' || *b == b'_')
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
        for bad in ["demo/ec.ho", "demo/*", "de mo/echo", "demo/>", "Demo/echo", "/echo", "demo/", "-x/y"] {
            assert!(bad.parse::<ModelRef>().is_err(), "{bad} must be rejected");
        }
        assert!(ModelRef::new(&"a".repeat(65), "x").is_err());
        assert!(ModelRef::new(&"a".repeat(64), "x_y-1").is_ok());
    }
}
