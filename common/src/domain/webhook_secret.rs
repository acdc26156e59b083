//! The account's webhook signing secret: `whsec_` + standard padded base64 of 32 random bytes
//! (Standard Webhooks). The HMAC key is the decoded part after `whsec_`.

use std::fmt;

use base64::{Engine, engine::general_purpose::STANDARD};
use rand::RngCore;

const SECRET_PREFIX: &str = "whsec_";
/// How many leading characters `masked` leaves visible.
const MASK_VISIBLE: usize = 10;

/// A signing secret. Its `Debug` never shows the value.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookSecret {
    text: String,
    key: Vec<u8>,
}

/// The error of parsing a signing secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a signing secret is whsec_ followed by base64")]
pub struct InvalidSecret;

impl WebhookSecret {
    /// A new random secret of 32 bytes.
    pub fn generate() -> Self {
        let mut key = vec![0u8; 32];
        rand::rng().fill_bytes(&mut key);
        Self { text: format!("{SECRET_PREFIX}{}", STANDARD.encode(&key)), key }
    }

    /// Parses a secret in its `whsec_` text form.
    pub fn parse(text: &str) -> Result<Self, InvalidSecret> {
        let encoded = text.strip_prefix(SECRET_PREFIX).ok_or(InvalidSecret)?;
        let key = STANDARD.decode(encoded).map_err(|_| InvalidSecret)?;
        if key.is_empty() {
            return Err(InvalidSecret);
        }
        Ok(Self { text: text.to_owned(), key })
    }

    /// The full secret text, to show to the account's admin.
    pub fn expose(&self) -> &str {
        &self.text
    }

    /// The HMAC key: the decoded bytes after `whsec_`.
    pub fn key_bytes(&self) -> &[u8] {
        &self.key
    }

    /// The first 10 characters, then `*` for every other character (same length).
    pub fn masked(&self) -> String {
        let visible: String = self.text.chars().take(MASK_VISIBLE).collect();
        let hidden = self.text.chars().count().saturating_sub(MASK_VISIBLE);
        format!("{visible}{}", "*".repeat(hidden))
    }
}

impl fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WebhookSecret({})", self.masked())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_secret_is_whsec_and_padded_base64_of_32_bytes() {
        let s = WebhookSecret::generate();
        assert!(s.expose().starts_with("whsec_"));
        assert_eq!(s.expose().len(), 6 + 44);
        assert!(s.expose().ends_with('='));
        assert_eq!(s.key_bytes().len(), 32);
        assert_eq!(WebhookSecret::parse(s.expose()), Ok(s));
    }

    #[test]
    fn masked_keeps_ten_characters_and_the_length() {
        let s = WebhookSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").expect("valid");
        assert_eq!(s.masked(), format!("whsec_MfKQ{}", "*".repeat(28)));
    }

    #[test]
    fn malformed_secrets_are_rejected() {
        assert!(WebhookSecret::parse("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").is_err());
        assert!(WebhookSecret::parse("whsec_not base64!").is_err());
        assert!(WebhookSecret::parse("whsec_").is_err());
    }
}
