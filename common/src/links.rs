//! Every URL the services hand out, built in one place: the links of a prediction on each API
//! surface, file-output URLs, and the capability token of a prediction's stream URL.
//!
//! | link | canonical (`/v1`) | Replicate (`/replicate/v1`) |
//! |---|---|---|
//! | `urls.get` | `{base}/v1/predictions/{id}` | `{base}/replicate/v1/predictions/{id}` |
//! | `urls.cancel` | `…/{id}/cancel` | `…/{id}/cancel` |
//! | `urls.stream` | `…/{id}/stream?token={t}` | `…/{id}/stream?token={t}` |
//! | `urls.web` | `{base}/predictions/{id}` | `{base}/replicate/v1/predictions/{id}/web` (a redirect to the page) |
//! | file output | `{base}/v1/files/{file id}` | `{base}/replicate/v1/files/{file id}` |
//!
//! The stream token is a MAC of the prediction id under the master key (CONTRACT §6): it opens
//! that prediction's stream without `Authorization` (a browser's `EventSource` cannot send one),
//! and nothing else. Any replica of any service computes the same token.

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

use crate::{
    crypto::MasterKey,
    domain::{ApiSurface, FileId, PredictionId},
};

/// What a stream token's MAC vouches for.
const STREAM_TOKEN_CONTEXT: &str = "stream_token.v1";
/// Bytes of the MAC kept in a token: 128 bits, unguessable.
const STREAM_TOKEN_BYTES: usize = 16;

/// The `urls` of a prediction (built by [`Links::prediction`]).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PredictionUrls {
    /// `{base}/v1/predictions/{id}`
    pub get: String,
    /// `{base}/v1/predictions/{id}/cancel`
    pub cancel: String,
    /// `{base}/predictions/{id}` (an HTML page)
    pub web: String,
    /// `{base}/v1/predictions/{id}/stream?token=…` (Server-Sent Events; the token opens it
    /// without `Authorization`)
    pub stream: String,
}

/// The deployment's public address and the key that signs its capability URLs.
#[derive(Clone, Debug)]
pub struct Links {
    base_url: String,
    key: MasterKey,
}

impl Links {
    /// Links under `base_url` (no trailing slash), with stream tokens signed by `key`.
    pub fn new(base_url: impl Into<String>, key: MasterKey) -> Self {
        Self { base_url: base_url.into(), key }
    }

    /// The public base URL (no trailing slash).
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// `{base}{root}`: where every route of `surface` starts.
    pub fn api(&self, surface: ApiSurface) -> String {
        format!("{}{}", self.base_url, surface.root())
    }

    /// The `urls` of prediction `id` as `surface` shows them.
    pub fn prediction(&self, id: &PredictionId, surface: ApiSurface) -> PredictionUrls {
        let get = format!("{}/predictions/{id}", self.api(surface));
        let web = match surface {
            ApiSurface::Canonical => format!("{}/predictions/{id}", self.base_url),
            ApiSurface::Replicate => format!("{get}/web"),
        };
        PredictionUrls {
            cancel: format!("{get}/cancel"),
            stream: format!("{get}/stream?token={}", self.stream_token(id)),
            web,
            get,
        }
    }

    /// The URL of a stored file as `surface` shows it.
    pub fn file(&self, id: &FileId, surface: ApiSurface) -> String {
        format!("{}/files/{id}", self.api(surface))
    }

    /// A stored output as `surface` shows it: a file URL (always stored in its canonical form)
    /// moves to the surface's own file route; any other output is unchanged.
    pub fn output(&self, output: &str, surface: ApiSurface) -> String {
        let canonical = format!("{}/files/", self.api(ApiSurface::Canonical));
        match output.strip_prefix(&canonical) {
            Some(file) if surface != ApiSurface::Canonical && !file.contains('/') => {
                format!("{}/files/{file}", self.api(surface))
            }
            _ => output.to_owned(),
        }
    }

    /// The capability token of prediction `id`'s stream.
    pub fn stream_token(&self, id: &PredictionId) -> String {
        URL_SAFE_NO_PAD.encode(&self.key.mac(STREAM_TOKEN_CONTEXT, id.as_str())[..STREAM_TOKEN_BYTES])
    }

    /// Whether `token` opens prediction `id`'s stream (compared in constant time).
    pub fn stream_token_opens(&self, id: &PredictionId, token: &str) -> bool {
        self.stream_token(id).as_bytes().ct_eq(token.as_bytes()).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn links() -> Links {
        Links::new("http://h", MasterKey::from_base64(&MasterKey::generate_base64()).expect("key"))
    }

    #[test]
    fn each_surface_links_inside_its_own_root() {
        let l = links();
        let id = PredictionId::generate();
        let v1 = l.prediction(&id, ApiSurface::Canonical);
        assert_eq!(v1.get, format!("http://h/v1/predictions/{id}"));
        assert_eq!(v1.cancel, format!("http://h/v1/predictions/{id}/cancel"));
        assert_eq!(v1.web, format!("http://h/predictions/{id}"));
        assert!(v1.stream.starts_with(&format!("http://h/v1/predictions/{id}/stream?token=")));
        let r = l.prediction(&id, ApiSurface::Replicate);
        for url in [&r.get, &r.cancel, &r.web, &r.stream] {
            assert!(url.starts_with("http://h/replicate/v1/"), "{url}");
        }
    }

    #[test]
    fn file_outputs_move_to_the_surface_and_other_outputs_stay() {
        let l = links();
        let file = FileId::generate();
        let stored = l.file(&file, ApiSurface::Canonical);
        assert_eq!(l.output(&stored, ApiSurface::Replicate), format!("http://h/replicate/v1/files/{file}"));
        assert_eq!(l.output(&stored, ApiSurface::Canonical), stored);
        assert_eq!(l.output("hello", ApiSurface::Replicate), "hello");
        assert_eq!(l.output("http://h/v1/files/a/b", ApiSurface::Replicate), "http://h/v1/files/a/b");
    }

    #[test]
    fn a_stream_token_opens_only_its_own_prediction() {
        let l = links();
        let (a, b) = (PredictionId::generate(), PredictionId::generate());
        let token = l.stream_token(&a);
        assert_eq!(token.len(), 22, "128 bits, URL-safe base64");
        assert!(l.stream_token_opens(&a, &token));
        assert!(!l.stream_token_opens(&b, &token), "bound to the prediction");
        assert!(!links().stream_token_opens(&a, &token), "signed with this deployment's key");
        let mut tampered = token.into_bytes();
        tampered[0] = if tampered[0] == b'A' { b'B' } else { b'A' };
        assert!(!l.stream_token_opens(&a, &String::from_utf8(tampered).expect("ascii")));
        assert!(!l.stream_token_opens(&a, ""));
    }
}
