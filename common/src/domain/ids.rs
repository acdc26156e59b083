//! Identifiers. Every id is random, unguessable and URL-safe: lowercase base32 drawn from the
//! operating system's CSPRNG through `rand`'s thread RNG. Prediction ids carry 130 random bits
//! (26 characters), as the contract asks (>= 120); the others carry at least 100.

use std::fmt;

use rand::Rng;
use serde::{Deserialize, Serialize};

const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

/// `len` random characters of lowercase base32 (5 bits each).
pub fn random_base32(len: usize) -> String {
    let mut rng = rand::rng();
    (0..len).map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())])).collect()
}

fn is_base32(s: &str) -> bool {
    s.bytes().all(|b| ALPHABET.contains(&b))
}

/// The error of parsing an id: the text is not an id of that kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a valid {kind} id")]
pub struct InvalidId {
    kind: &'static str,
}

macro_rules! random_id {
    ($(#[$doc:meta])* $name:ident, kind = $kind:literal, prefix = $prefix:literal, random_len = $len:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// A new random id.
            pub fn generate() -> Self {
                Self(format!("{}{}", $prefix, random_base32($len)))
            }

            /// Parses an id of this kind; anything else is rejected.
            pub fn parse(s: &str) -> Result<Self, InvalidId> {
                match s.strip_prefix($prefix) {
                    Some(rest) if rest.len() == $len && is_base32(rest) => Ok(Self(s.to_owned())),
                    _ => Err(InvalidId { kind: $kind }),
                }
            }

            /// The id as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = InvalidId;
            fn try_from(s: String) -> Result<Self, InvalidId> {
                Self::parse(&s)
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

random_id!(
    /// A prediction's id: 26 lowercase base32 characters (130 bits), also its MongoDB `_id`.
    PredictionId, kind = "prediction", prefix = "", random_len = 26
);
random_id!(
    /// An account's id (`acct_` + 20 characters).
    AccountId, kind = "account", prefix = "acct_", random_len = 20
);
random_id!(
    /// A stored file's id (`file_` + 26 characters), also its GridFS `_id`.
    FileId, kind = "file", prefix = "file_", random_len = 26
);
random_id!(
    /// An API key's id (`key_` + 20 characters); not the secret key value.
    ApiKeyId, kind = "API key", prefix = "key_", random_len = 20
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prediction_ids_are_26_lowercase_base32_characters_and_parse_back() {
        let id = PredictionId::generate();
        assert_eq!(id.as_str().len(), 26);
        assert!(id.as_str().bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()));
        assert_eq!(PredictionId::parse(id.as_str()), Ok(id));
    }

    #[test]
    fn two_generated_ids_differ() {
        assert_ne!(PredictionId::generate(), PredictionId::generate());
    }

    #[test]
    fn ids_of_another_kind_or_shape_are_rejected() {
        let key = ApiKeyId::generate();
        assert!(AccountId::parse(key.as_str()).is_err());
        assert!(PredictionId::parse("short").is_err());
        assert!(PredictionId::parse("ABCDEFGHIJKLMNOPQRSTUVWXYZ").is_err());
        assert!(PredictionId::parse("../../etc/passwd/aaaaaaaaaa").is_err());
    }

    #[test]
    fn ids_deserialize_only_when_valid() {
        let ok: Result<AccountId, _> = serde_json::from_str("\"acct_abcdefghijklmnopqrst\"");
        assert!(ok.is_ok());
        let bad: Result<AccountId, _> = serde_json::from_str("\"acct_1\"");
        assert!(bad.is_err());
    }
}
