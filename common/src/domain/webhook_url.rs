//! A webhook target: an absolute `http` or `https` URL with a host, at most 2,048 characters.
//! Whether the host may be reached (private addresses) is decided at send time, after DNS
//! resolution, by the notifier.
//!
//! **Parsed once, where it matters.** The api parses every URL a client sends
//! ([`WebhookUrl::parse`]) and stores only those that parse. Everything else reads them back
//! from the database and the streams, where a full parse on every decode cost 2 % of the
//! runner's CPU and the api's reads, none of which use the URL. So decoding checks the cheap
//! invariants (length, `http`/`https` scheme) and the full parse runs on first use of
//! [`WebhookUrl::url`], once per value: in the notifier, which sends to it. A stored URL that
//! does not parse (only an edit of the database makes one) fails there, as a refused delivery.

use std::{fmt, sync::OnceLock};

use serde::{Deserialize, Serialize};
use url::Url;

const MAX_LEN: usize = 2048;

/// A webhook URL: its text, and the parsed URL once something asked for it.
#[derive(Clone, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct WebhookUrl {
    text: String,
    parsed: OnceLock<Result<Url, InvalidWebhookUrl>>,
}

/// Why a webhook URL was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("must be an absolute http or https URL with a host, at most 2048 characters")]
pub struct InvalidWebhookUrl;

impl WebhookUrl {
    /// Parses a webhook URL (the whole check: what a client sends goes through this); its
    /// text is the URL's normalized form.
    pub fn parse(text: &str) -> Result<Self, InvalidWebhookUrl> {
        let url = parse_url(text)?;
        Ok(Self { text: url.as_str().to_owned(), parsed: OnceLock::from(Ok(url)) })
    }

    /// The parsed URL (parsed on first use when the value was decoded).
    pub fn url(&self) -> Result<&Url, InvalidWebhookUrl> {
        self.parsed.get_or_init(|| parse_url(&self.text)).as_ref().map_err(Clone::clone)
    }

    /// The URL as text.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

/// The full check.
fn parse_url(text: &str) -> Result<Url, InvalidWebhookUrl> {
    if text.len() > MAX_LEN {
        return Err(InvalidWebhookUrl);
    }
    let url = Url::parse(text).map_err(|_| InvalidWebhookUrl)?;
    let scheme_ok = matches!(url.scheme(), "http" | "https");
    if scheme_ok && url.host().is_some() { Ok(url) } else { Err(InvalidWebhookUrl) }
}

/// The checks a decoded URL gets (it was parsed when it was accepted).
fn looks_like_webhook_url(text: &str) -> bool {
    let Some((scheme, rest)) = text.split_once("://") else {
        return false;
    };
    text.len() <= MAX_LEN
        && (scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https"))
        && !rest.is_empty()
}

impl TryFrom<String> for WebhookUrl {
    type Error = InvalidWebhookUrl;
    fn try_from(text: String) -> Result<Self, InvalidWebhookUrl> {
        if looks_like_webhook_url(&text) { Ok(Self { text, parsed: OnceLock::new() }) } else { Err(InvalidWebhookUrl) }
    }
}

impl From<WebhookUrl> for String {
    fn from(u: WebhookUrl) -> String {
        u.text
    }
}

impl PartialEq for WebhookUrl {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for WebhookUrl {}

impl fmt::Debug for WebhookUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("WebhookUrl").field(&self.text).finish()
    }
}

impl fmt::Display for WebhookUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
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

    #[test]
    fn a_decoded_url_is_checked_cheaply_and_parsed_on_first_use() {
        let decoded: WebhookUrl = serde_json::from_str(r#""https://example.com/h""#).expect("decodes");
        assert_eq!(decoded.url().map(Url::as_str), Ok("https://example.com/h"));
        assert_eq!(decoded, WebhookUrl::parse("https://example.com/h").expect("valid"));
        for bad in [r#""ftp://example.com/""#, r#""/relative""#, r#""https://""#, r#""""#] {
            assert!(serde_json::from_str::<WebhookUrl>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_decoded_url_that_does_not_parse_fails_where_it_is_used() {
        let stored: WebhookUrl = serde_json::from_str(r#""http://exa mple.com/""#).expect("cheap checks pass");
        assert_eq!(stored.url(), Err(InvalidWebhookUrl));
        assert_eq!(stored.as_str(), "http://exa mple.com/");
    }
}
