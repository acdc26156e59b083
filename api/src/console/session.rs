//! Console sessions: the cookie, and the signed-in person every page request proves it is.
//!
//! Signing in with an API key starts a server-side session: a random 256-bit token goes into
//! the cookie `console_session` (`HttpOnly`, `SameSite=Lax`, `Path=/`, `Secure` when
//! `PUBLIC_BASE_URL` is https); MongoDB keeps only its SHA-256 ([`crate::store::console_sessions`]),
//! bound to the key. The key itself is never put in a cookie or a page.
//!
//! [`Signed`] is the extractor of every console page: a live session whose key is still usable
//! (active and unexpired: a deactivation ends its sessions at once, see [`crate::state::keys`]). A
//! request without one is sent to `/login?next=<path>`. The API routes never read the cookie.

use axum::{
    extract::FromRequestParts,
    http::{HeaderMap, HeaderValue, header, request::Parts},
};
use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use bson::DateTime;
use common::domain::Scope;
use sha2::{Digest, Sha256};

use super::{error::ConsoleError, page::Chrome};
use crate::store::{ApiKeyRecord, console_sessions::ConsoleSession};
use crate::{http::auth::Caller, state::AppState};

/// The session cookie's name.
pub const COOKIE: &str = "console_session";
/// How long a session lasts at most (less when its key expires sooner).
pub const LIFETIME_MS: i64 = 12 * 3600 * 1000;

/// A session token as the cookie carries it.
pub struct SessionToken(String);

impl SessionToken {
    /// A new random token (256 bits).
    pub fn generate() -> Self {
        Self(URL_SAFE_NO_PAD.encode(rand::random::<[u8; 32]>()))
    }

    /// What the store keeps: the SHA-256 of the token, hex encoded.
    pub fn hash(&self) -> String {
        Sha256::digest(self.0.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// A random token for the forms of one session.
fn csrf_token() -> String {
    URL_SAFE_NO_PAD.encode(rand::random::<[u8; 32]>())
}

/// The value of cookie `name` in a request's `Cookie` headers.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v)
}

/// The `Set-Cookie` value that stores `token` (or, with `None`, removes the cookie).
pub fn set_cookie(state: &AppState, token: Option<&SessionToken>) -> HeaderValue {
    let secure = if state.base_url().starts_with("https://") { "; Secure" } else { "" };
    let value = match token {
        Some(t) => format!("{COOKIE}={}; HttpOnly; SameSite=Lax; Path=/{secure}", t.0),
        None => format!("{COOKIE}=; HttpOnly; SameSite=Lax; Path=/; Max-Age=0{secure}"),
    };
    HeaderValue::from_str(&value).unwrap_or(HeaderValue::from_static("console_session=; Path=/; Max-Age=0"))
}

/// Starts a session for `key`; returns its token for the cookie.
pub async fn start(state: &AppState, key: &ApiKeyRecord) -> Result<SessionToken, ConsoleError> {
    let token = SessionToken::generate();
    let now = DateTime::now();
    let mut expires_at = DateTime::from_millis(now.timestamp_millis() + LIFETIME_MS);
    if let Some(key_expiry) = key.expires_at {
        expires_at = expires_at.min(key_expiry);
    }
    let session = ConsoleSession {
        token_hash: token.hash(),
        account_id: key.account_id.clone(),
        key_id: key.id.clone(),
        key_hash: key.key_hash.clone(),
        csrf_token: csrf_token(),
        created_at: now,
        expires_at,
    };
    crate::ops::sessions::keep(state, &session).await?;
    tracing::info!(account_id = %key.account_id, key_id = %key.id, "console session started");
    Ok(token)
}

/// A signed-in person: a live session and its still usable key.
#[derive(Clone, Debug)]
pub struct Signed {
    /// The session.
    pub session: ConsoleSession,
    /// The key it was opened with, as it is now.
    pub key: ApiKeyRecord,
}

impl Signed {
    /// The key as an API caller, for the domain functions the API routes use too.
    pub fn caller(&self) -> Caller {
        Caller { key: self.key.clone() }
    }

    /// Fails with a 403 page unless the key holds `scope`.
    pub fn require(&self, scope: Scope) -> Result<(), ConsoleError> {
        if self.key.has_scope(scope) {
            Ok(())
        } else {
            Err(ConsoleError::Forbidden(format!("The key you signed in with lacks the '{scope}' scope this needs.")))
        }
    }

    /// The form token of this session.
    pub fn csrf(&self) -> &str {
        &self.session.csrf_token
    }

    /// What a page in `section` shows around its content for this person.
    pub fn chrome(&self, section: &'static str) -> Chrome {
        let name = if self.key.name.is_empty() { self.key.key_prefix.clone() } else { self.key.name.clone() };
        Chrome { csrf: self.csrf().to_owned(), section, key_name: name }
    }
}

/// The session a request's cookie names, if it is live and its key still usable.
pub async fn signed_in(state: &AppState, headers: &HeaderMap) -> Result<Option<Signed>, ConsoleError> {
    let Some(token) = cookie(headers, COOKIE).filter(|t| !t.is_empty()) else { return Ok(None) };
    let hash = SessionToken(token.to_owned()).hash();
    let now = DateTime::now();
    let Some(session) = crate::ops::sessions::live(state, &hash, now).await? else {
        return Ok(None);
    };
    let key =
        state.keys.lookup_hash(&session.key_hash).await?.filter(|k| k.is_usable_at(now) && k.id == session.key_id);
    Ok(key.map(|key| Signed { session, key }))
}

impl FromRequestParts<AppState> for Signed {
    type Rejection = ConsoleError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ConsoleError> {
        signed_in(state, &parts.headers).await?.ok_or_else(|| ConsoleError::SignIn {
            next: parts.uri.path_and_query().map_or("/".to_owned(), |p| p.as_str().to_owned()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cookie_is_found_by_its_exact_name_among_others() {
        let mut headers = HeaderMap::new();
        headers.append(header::COOKIE, HeaderValue::from_static("a=1; console_session_x=2"));
        headers.append(header::COOKIE, HeaderValue::from_static("console_session=abc; b=3"));
        assert_eq!(cookie(&headers, COOKIE), Some("abc"));
        assert_eq!(cookie(&headers, "b"), Some("3"));
        assert_eq!(cookie(&headers, "c"), None);
    }

    #[test]
    fn tokens_are_random_and_only_their_hash_is_kept() {
        let (a, b) = (SessionToken::generate(), SessionToken::generate());
        assert_ne!(a.0, b.0);
        assert_eq!(a.0.len(), 43, "256 bits, base64url");
        assert_eq!(a.hash().len(), 64);
        assert_ne!(a.hash(), a.0);
    }
}
