//! A webhook target: an absolute `http` or `https` URL with a host, at most 2,048 characters.
//! Whether the host may be reached (private addresses) is decided at send time, after DNS
//! resolution, by the notifier.

use std::fmt;

use serde::{Deserialize, Serialize};
use url::Url;

const MAX_LEN: usize = 2048;

/// A parsed webhook URL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct WebhookUrl(Url);

/// Why a webhook URL was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("must be an absolute http or https URL with a host, at most 2048 characters")]
pub struct InvalidWebhookUrl;

impl WebhookUrl {
    /// Parses a webhook URL.
    pub fn parse(text: &str) -> Result<Self, InvalidWebhookUrl> {
        if text.len() > MAX_LEN {
            return Err(InvalidWebhookUrl);
        }
        let url = Url::parse(text).map_err(|_| InvalidWebhookUrl)?;
        let scheme_ok = matches!(url.scheme(), "http" | "https");
        if scheme_ok && url.host().is_some() { Ok(Self(url)) } else { Err(InvalidWebhookUrl) }
    }

    /// The URL.
    pub fn url(&self) -> &Url {
        &self.0
    }

    /// The URL as text.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl TryFrom<String> for WebhookUrl {
    type Error = InvalidWebhookUrl;
    fn try_from(s: String) -> Result<Self, InvalidWebhookUrl> {
        Self::parse(&s)
    }
}

impl From<WebhookUrl> for String {
    fn from(u: WebhookUrl) -> String {
        u.0.into()
    }
}

impl fmt::Display for WebhookUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_http_and_https_urls_are_accepted() {
        assert!(WebhookUrl::parse("https://example.com/hooks?x=1").is_ok());
        assert!(WebhookUrl::parse("http://127.0.0.1:9000/h").is_ok());
    }

    #[test]
    fn other_schemes_relative_urls_and_overlong_urls_are_refused() {
        for bad in ["ftp://example.com/", "/relative", "example.com/h", "https://", "javascript:alert(1)", ""] {
            assert!(WebhookUrl::parse(bad).is_err(), "{bad:?}");
        }
        let long = format!("https://example.com/{}", "a".repeat(2048));
        assert!(WebhookUrl::parse(&long).is_err());
    }
}
