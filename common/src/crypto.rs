//! Secrets at rest: API key values and webhook signing secrets are sealed with AES-256-GCM
//! under the deployment's master key (`MASTER_KEY`, 32 bytes, base64).
//!
//! Sealed text is `v1.` + base64(nonce ‖ ciphertext ‖ tag) with a random 96-bit nonce. The
//! associated data names what is sealed and for which record (e.g. `api_key:key_…`), so a
//! sealed value copied onto another record does not open there.
//!
//! The same key, through a subkey derived from it, also authenticates short tokens
//! ([`MasterKey::mac`]), such as the capability in a prediction's stream URL.
//!
//! Rotation (docs/operations.md, "Rotating the master key"): with `MASTER_KEY_PREVIOUS` set
//! beside a new `MASTER_KEY`, the key also opens what the previous key sealed and accepts the
//! MACs it made ([`MasterKey::with_previous`]), while everything new is sealed and signed
//! under the new one; `api admin rotate-master-key` then seals every stored value again
//! ([`MasterKey::reseal`]), after which the previous key can be dropped.

use std::fmt;

use aes_gcm::{
    Aes256Gcm, Nonce,
    aead::{Aead, KeyInit, Payload},
};
use base64::{Engine, engine::general_purpose::STANDARD};
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

const SEALED_PREFIX: &str = "v1.";
const NONCE_LEN: usize = 12;

/// The master key, and during a rotation the previous one. Its `Debug` never shows a key.
#[derive(Clone)]
pub struct MasterKey {
    current: KeyPair,
    /// The key being rotated out: it still opens and verifies, never seals or signs.
    previous: Option<KeyPair>,
}

/// What one master key gives: its cipher and its MAC subkey.
#[derive(Clone)]
struct KeyPair {
    cipher: Aes256Gcm,
    /// HMAC-SHA256(master key, "mac-key.v1"): keys [`MasterKey::mac`], so no MAC is ever made
    /// with the encryption key itself.
    mac_key: [u8; 32],
}

impl KeyPair {
    fn open(&self, nonce: &[u8], ciphertext: &[u8], context: &str) -> Option<String> {
        let payload = Payload { msg: ciphertext, aad: context.as_bytes() };
        let plain = self.cipher.decrypt(Nonce::from_slice(nonce), payload).ok()?;
        String::from_utf8(plain).ok()
    }

    fn mac(&self, context: &str, message: &str) -> [u8; 32] {
        hmac_sha256(&self.mac_key, &[context.as_bytes(), b"\0", message.as_bytes()])
    }
}

/// Why a master key or a sealed value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CryptoError {
    /// The configured key is not base64 of exactly 32 bytes.
    #[error("MASTER_KEY must be standard base64 of exactly 32 bytes")]
    BadMasterKey,
    /// The value is not sealed text, or was sealed under another key or for another record.
    #[error("sealed value cannot be opened (wrong master key, wrong record, or corrupt)")]
    CannotOpen,
}

impl MasterKey {
    /// Parses the base64 text of a 32-byte key.
    pub fn from_base64(text: &str) -> Result<Self, CryptoError> {
        let bytes = STANDARD.decode(text.trim()).map_err(|_| CryptoError::BadMasterKey)?;
        let cipher = Aes256Gcm::new_from_slice(&bytes).map_err(|_| CryptoError::BadMasterKey)?;
        let mac_key = hmac_sha256(&bytes, &[b"mac-key.v1"]);
        Ok(Self { current: KeyPair { cipher, mac_key }, previous: None })
    }

    /// This key, which also opens what `previous` sealed and accepts the MACs it made: the
    /// services' key while a rotation is under way.
    pub fn with_previous(self, previous: &MasterKey) -> Self {
        Self { previous: Some(previous.current.clone()), ..self }
    }

    /// Whether a previous key is configured beside this one.
    pub fn has_previous(&self) -> bool {
        self.previous.is_some()
    }

    /// HMAC-SHA256 of `message` under a subkey of this key, bound to `context` (what the MAC
    /// vouches for, e.g. `stream_token.v1`), so a MAC made for one purpose is no use for another.
    pub fn mac(&self, context: &str, message: &str) -> [u8; 32] {
        self.current.mac(context, message)
    }

    /// The MACs of `message` that verification accepts: this key's, then the previous key's
    /// during a rotation (a link signed before it keeps working until the previous key goes).
    pub fn accepted_macs(&self, context: &str, message: &str) -> impl Iterator<Item = [u8; 32]> {
        let previous = self.previous.as_ref().map(|p| p.mac(context, message));
        std::iter::once(self.mac(context, message)).chain(previous)
    }

    /// A new random key, as base64 text (for `up` and tests).
    pub fn generate_base64() -> String {
        let mut bytes = [0u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        STANDARD.encode(bytes)
    }

    /// Seals `plaintext`, bound to `context`.
    pub fn seal(&self, plaintext: &str, context: &str) -> String {
        let mut nonce = [0u8; NONCE_LEN];
        rand::rng().fill_bytes(&mut nonce);
        let payload = Payload { msg: plaintext.as_bytes(), aad: context.as_bytes() };
        // Encryption fails only for plaintexts beyond AES-GCM's ~64 GiB limit.
        let ciphertext = self
            .current
            .cipher
            .encrypt(Nonce::from_slice(&nonce), payload)
            .expect("AES-GCM encrypts any secret-sized plaintext");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&ciphertext);
        format!("{SEALED_PREFIX}{}", STANDARD.encode(out))
    }

    /// Opens a value sealed for the same `context` with this key, or with the previous one.
    pub fn open(&self, sealed: &str, context: &str) -> Result<String, CryptoError> {
        let (nonce, ciphertext) = split(sealed)?;
        self.current
            .open(&nonce, &ciphertext, context)
            .or_else(|| self.previous.as_ref()?.open(&nonce, &ciphertext, context))
            .ok_or(CryptoError::CannotOpen)
    }

    /// The value sealed again under this key if only the previous key opens it (`Some`), or
    /// `None` when this key already does: what a rotation writes back. An error when neither
    /// opens it.
    pub fn reseal(&self, sealed: &str, context: &str) -> Result<Option<String>, CryptoError> {
        let (nonce, ciphertext) = split(sealed)?;
        if self.current.open(&nonce, &ciphertext, context).is_some() {
            return Ok(None);
        }
        let plain = self.previous.as_ref().and_then(|p| p.open(&nonce, &ciphertext, context));
        Ok(Some(self.seal(&plain.ok_or(CryptoError::CannotOpen)?, context)))
    }
}

/// The nonce and the ciphertext of sealed text.
fn split(sealed: &str) -> Result<(Vec<u8>, Vec<u8>), CryptoError> {
    let mut bytes = sealed
        .strip_prefix(SEALED_PREFIX)
        .and_then(|b64| STANDARD.decode(b64).ok())
        .filter(|b| b.len() > NONCE_LEN)
        .ok_or(CryptoError::CannotOpen)?;
    let ciphertext = bytes.split_off(NONCE_LEN);
    Ok((bytes, ciphertext))
}

fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    // HMAC accepts keys of any length.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

impl fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.has_previous() { "MasterKey(.., previous: ..)" } else { "MasterKey(..)" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> MasterKey {
        MasterKey::from_base64(&MasterKey::generate_base64()).expect("valid key")
    }

    #[test]
    fn a_sealed_value_opens_with_the_same_key_and_context() {
        let k = key();
        let sealed = k.seal("psk_secret", "api_key:key_1");
        assert!(!sealed.contains("psk_secret"));
        assert_eq!(k.open(&sealed, "api_key:key_1"), Ok("psk_secret".into()));
    }

    #[test]
    fn another_key_another_context_or_a_flipped_bit_cannot_open_it() {
        let k = key();
        let sealed = k.seal("psk_secret", "api_key:key_1");
        assert_eq!(key().open(&sealed, "api_key:key_1"), Err(CryptoError::CannotOpen));
        assert_eq!(k.open(&sealed, "api_key:key_2"), Err(CryptoError::CannotOpen));
        let mut bytes = STANDARD.decode(&sealed[3..]).expect("base64");
        bytes[20] ^= 1;
        let tampered = format!("v1.{}", STANDARD.encode(bytes));
        assert_eq!(k.open(&tampered, "api_key:key_1"), Err(CryptoError::CannotOpen));
    }

    #[test]
    fn sealing_twice_gives_different_text() {
        let k = key();
        assert_ne!(k.seal("x", "c"), k.seal("x", "c"));
    }

    #[test]
    fn a_mac_depends_on_the_key_the_context_and_the_message() {
        let k = key();
        assert_eq!(k.mac("c", "m"), k.mac("c", "m"));
        assert_ne!(k.mac("c", "m"), key().mac("c", "m"));
        assert_ne!(k.mac("c", "m"), k.mac("d", "m"));
        assert_ne!(k.mac("c", "m"), k.mac("c", "n"));
        assert_ne!(k.mac("c\0m", ""), k.mac("c", "\0m"), "context and message cannot be shifted");
    }

    #[test]
    fn during_a_rotation_both_keys_open_and_verify_and_only_the_new_one_seals_and_signs() {
        let (old, new) = (key(), key());
        let both = new.clone().with_previous(&old);
        let sealed_old = old.seal("s", "c");
        assert_eq!(both.open(&sealed_old, "c"), Ok("s".into()));
        assert_eq!(new.open(&both.seal("s", "c"), "c"), Ok("s".into()), "sealed under the new key");
        assert_eq!(old.open(&both.seal("s", "c"), "c"), Err(CryptoError::CannotOpen));
        assert_eq!(both.mac("c", "m"), new.mac("c", "m"), "signed with the new key");
        let accepted: Vec<_> = both.accepted_macs("c", "m").collect();
        assert_eq!(accepted, vec![new.mac("c", "m"), old.mac("c", "m")]);
        assert_eq!(new.accepted_macs("c", "m").count(), 1, "no previous key, one MAC");
    }

    #[test]
    fn reseal_moves_a_value_to_the_new_key_once_and_refuses_what_neither_opens() {
        let (old, new) = (key(), key());
        let both = new.clone().with_previous(&old);
        let resealed = both.reseal(&old.seal("s", "c"), "c").expect("opens").expect("moved");
        assert_eq!(new.open(&resealed, "c"), Ok("s".into()), "the new key alone opens it");
        assert_eq!(both.reseal(&resealed, "c"), Ok(None), "already under the new key");
        assert_eq!(both.reseal(&key().seal("s", "c"), "c"), Err(CryptoError::CannotOpen));
        assert_eq!(both.reseal(&old.seal("s", "c"), "other"), Err(CryptoError::CannotOpen), "bound to its context");
        assert_eq!(new.reseal(&old.seal("s", "c"), "c"), Err(CryptoError::CannotOpen), "no previous key given");
    }

    #[test]
    fn master_keys_of_the_wrong_size_are_refused() {
        assert_eq!(MasterKey::from_base64(&STANDARD.encode([0u8; 16])).err(), Some(CryptoError::BadMasterKey));
        assert_eq!(MasterKey::from_base64("not base64").err(), Some(CryptoError::BadMasterKey));
    }
}
