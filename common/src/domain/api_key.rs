//! API key values and scopes.
//!
//! A key is `psk_` followed by 40 base62 characters (about 238 random bits). The service keeps
//! only its SHA-256 hash for look-ups (a unique index) and the value sealed with the master key
//! (see [`crate::crypto`]) so that an admin can read it back.

use std::{fmt, str::FromStr};

use rand::Rng;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

const KEY_PREFIX: &str = "psk_";
const KEY_RANDOM_LEN: usize = 40;
const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// The full secret value of an API key. Its `Debug` never shows the value.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKeyValue(String);

/// The SHA-256 hash of a key value, hex encoded: what the store looks keys up by.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct KeyHash(String);

impl KeyHash {
    /// The hash as hex text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl ApiKeyValue {
    /// A new random key.
    pub fn generate() -> Self {
        let mut rng = rand::rng();
        let random: String =
            (0..KEY_RANDOM_LEN).map(|_| char::from(BASE62[rng.random_range(0..BASE62.len())])).collect();
        Self(format!("{KEY_PREFIX}{random}"))
    }

    /// Parses a presented key; `None` unless it has the exact key format.
    pub fn parse(s: &str) -> Option<Self> {
        let rest = s.strip_prefix(KEY_PREFIX)?;
        (rest.len() == KEY_RANDOM_LEN && rest.bytes().all(|b| b.is_ascii_alphanumeric())).then(|| Self(s.to_owned()))
    }

    /// The full value, to show its owner once or to an admin.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The first 8 characters, safe to display (`psk_` and 4 random characters).
    pub fn prefix(&self) -> &str {
        &self.0[..8]
    }

    /// The look-up hash of this key.
    pub fn hash(&self) -> KeyHash {
        KeyHash(hex(&Sha256::digest(self.0.as_bytes())))
    }
}

impl fmt::Debug for ApiKeyValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ApiKeyValue({}…)", self.prefix())
    }
}

/// Lower-case hex, two digits a byte (built in place: every request hashes its key).
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    out
}

/// A permission a key holds. `read`: GET predictions, files, streams. `write`: create and
/// cancel predictions. `admin`: the `/v1/account/...` endpoints.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Read predictions and files.
    Read,
    /// Create and cancel predictions.
    Write,
    /// Manage the account's keys and webhook secret.
    Admin,
}

impl Scope {
    /// Every scope.
    pub const ALL: [Self; 3] = [Self::Read, Self::Write, Self::Admin];

    /// The scope's wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::Admin => "admin",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error of parsing a scope name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown scope; expected one of read, write, admin")]
pub struct UnknownScope;

impl FromStr for Scope {
    type Err = UnknownScope;
    fn from_str(s: &str) -> Result<Self, UnknownScope> {
        Self::ALL.into_iter().find(|x| x.as_str() == s).ok_or(UnknownScope)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_two_lower_case_digits_a_byte() {
        assert_eq!(hex(&[0x00, 0x0f, 0xa5, 0xff]), "000fa5ff");
        assert_eq!(hex(&Sha256::digest(b"abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }

    #[test]
    fn generated_keys_have_the_documented_format() {
        let key = ApiKeyValue::generate();
        assert!(key.expose().starts_with("psk_"));
        assert_eq!(key.expose().len(), 44);
        assert_eq!(ApiKeyValue::parse(key.expose()), Some(key.clone()));
        assert_eq!(key.prefix(), &key.expose()[..8]);
    }

    #[test]
    fn malformed_keys_do_not_parse() {
        assert!(ApiKeyValue::parse("psk_short").is_none());
        assert!(ApiKeyValue::parse(&format!("sk_{}", "a".repeat(40))).is_none());
        assert!(ApiKeyValue::parse(&format!("psk_{}-", "a".repeat(39))).is_none());
    }

    #[test]
    fn the_hash_is_the_sha256_of_the_whole_value() {
        let key = ApiKeyValue::parse(&format!("psk_{}", "a".repeat(40))).expect("valid");
        // sha256("psk_" + 40 x "a"), computed independently with `sha256sum`.
        assert_eq!(key.hash().as_str(), "bd070666149244d2af90d5101f3d89bc3c89c73bdd8ce5a14851a81a1475fbe3");
    }

    #[test]
    fn debug_output_hides_the_key() {
        let key = ApiKeyValue::generate();
        assert!(!format!("{key:?}").contains(key.expose()));
    }
}
