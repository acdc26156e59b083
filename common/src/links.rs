//! Every URL the services hand out, built in one place: the links of a prediction on each API
//! surface, file-output URLs, and the capability token of a prediction's stream URL.
//!
//! | link | canonical (`/v1`) | Replicate (`/replicate/v1`) |
//! |---|---|---|
//! | `urls.get` | `{base}/v1/predictions/{id}` | `{base}/replicate/v1/predictions/{id}` |
//! | `urls.cancel` | `…/{id}/cancel` | `…/{id}/cancel` |
//! | `urls.stream` | `…/{id}/stream?token={t}` | `…/{id}/stream?token={t}` |
//! | `urls.web` | `{base}/predictions/{id}` | `{base}/replicate/v1/predictions/{id}/web` (a redirect to the page) |
//! | a file | `{base}/v1/files/{file id}` | `{base}/replicate/v1/files/{file id}` |
//! | its bytes | `…/files/{file id}/download` | `…/files/{file id}/download` |
//! | its signed download, and a file output | `…/download?owner={account}&expiry={unix s}&signature={s}` | the same |
//!
//! The stream token is a MAC of the prediction id under the master key (docs/replicate.md): it opens
//! that prediction's stream without `Authorization` (a browser's `EventSource` cannot send one),
//! and nothing else. Any replica of any service computes the same token.
//!
//! A signed download is Replicate's form: the signature is an HMAC-SHA256 of
//! `"{owner} {file id} {expiry}"` under a key derived from the master key (URL-safe base64). It
//! opens that file's bytes without `Authorization` until `expiry`: what a Cog model server is
//! given to fetch an input with, what a file object's `urls.download` holds, and how every
//! file in an output is shown (valid until [`output_expiry`]), as Replicate's output URLs
//! open in a browser without a token.

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

use crate::{
    crypto::MasterKey,
    domain::{AccountId, ApiSurface, FileId, PredictionId},
};

/// What a stream token's MAC vouches for.
const STREAM_TOKEN_CONTEXT: &str = "stream_token.v1";
/// Bytes of the MAC kept in a token: 128 bits, unguessable.
const STREAM_TOKEN_BYTES: usize = 16;
/// What a file download's signature vouches for.
const FILE_URL_CONTEXT: &str = "file_url.v1";
/// How long the signed download of a file object (`urls.download`) works.
pub const SIGNED_DOWNLOAD_SECONDS: i64 = 3600;

/// When the signed link of an output file rendered at `now` (unix seconds) stops working: the
/// end of the hour after this one, so a link works at least an hour from any read, and every
/// read within the same hour renders the same link (a client or a cache comparing two reads
/// of a prediction sees its output unchanged).
pub fn output_expiry(now: i64) -> i64 {
    (now.div_euclid(SIGNED_DOWNLOAD_SECONDS) + 2) * SIGNED_DOWNLOAD_SECONDS
}

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

    /// The master key its links are signed with, which also opens a prediction's sealed
    /// inputs ([`crate::domain::secret_inputs`]).
    pub fn master_key(&self) -> &MasterKey {
        &self.key
    }

    /// Links under `base_url` signed with a new random key: what a test needs.
    #[cfg(any(test, feature = "samples"))]
    pub fn for_tests(base_url: &str) -> Self {
        Self::new(base_url, MasterKey::from_base64(&MasterKey::generate_base64()).expect("a generated key parses"))
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

    /// The URL of a stored file (the object) as `surface` shows it; a file output is stored
    /// this way, in its canonical form.
    pub fn file(&self, id: &FileId, surface: ApiSurface) -> String {
        format!("{}/files/{id}", self.api(surface))
    }

    /// The URL of a stored file's bytes (bearer-authenticated).
    pub fn file_download(&self, id: &FileId, surface: ApiSurface) -> String {
        format!("{}/files/{id}/download", self.api(surface))
    }

    /// The signed download of file `id` of `owner`, working until `expiry` (unix seconds).
    pub fn file_signed_download(&self, id: &FileId, owner: &AccountId, expiry: i64, surface: ApiSurface) -> String {
        let signature = self.file_signature(owner.as_str(), id.as_str(), expiry);
        format!("{}?owner={owner}&expiry={expiry}&signature={signature}", self.file_download(id, surface))
    }

    /// The signature of a download of file `id` of `owner` until `expiry`.
    pub fn file_signature(&self, owner: &str, id: &str, expiry: i64) -> String {
        encode_file_signature(&self.key.mac(FILE_URL_CONTEXT, &file_message(owner, id, expiry)))
    }

    /// Whether `signature` signs the download of file `id` of `owner` until `expiry` (compared
    /// in constant time; the caller checks the expiry against its clock). During a master-key
    /// rotation a link the previous key signed is accepted too.
    pub fn file_signature_valid(&self, owner: &str, id: &str, expiry: i64, signature: &str) -> bool {
        let message = file_message(owner, id, expiry);
        let macs = self.key.accepted_macs(FILE_URL_CONTEXT, &message);
        accepted(macs.map(|mac| encode_file_signature(&mac)), signature)
    }

    /// The file of this service that `url` names, on either surface: its object URL, its
    /// download, or a signed download. Any other URL is `None`.
    pub fn file_named_by(&self, url: &str) -> Option<FileId> {
        let path = url.strip_prefix(&self.base_url)?;
        let path = path.split(['?', '#']).next()?;
        let rest = [ApiSurface::Canonical, ApiSurface::Replicate]
            .iter()
            .find_map(|s| path.strip_prefix(&format!("{}/files/", s.root())))?;
        let id = rest.strip_suffix("/download").unwrap_or(rest);
        FileId::parse(id).ok()
    }

    /// The links of training `id` on `surface` (its console page is `/trainings/{id}`; its
    /// stream is its job's, as a prediction's).
    pub fn training(&self, id: &PredictionId, surface: ApiSurface) -> PredictionUrls {
        let get = format!("{}/trainings/{id}", self.api(surface));
        let stream = format!("{}/predictions/{id}/stream?token={}", self.api(surface), self.stream_token(id));
        PredictionUrls {
            cancel: format!("{get}/cancel"),
            stream,
            web: format!("{}/trainings/{id}", self.base_url),
            get,
        }
    }

    /// A stored output string of a prediction of `owner` as `surface` shows it: a file (stored
    /// as its canonical object URL) becomes the surface's signed download of its bytes, which
    /// opens without `Authorization` (an `<img src>`, a client's plain fetch) until
    /// [`output_expiry`]; any other string is unchanged.
    pub fn output(&self, output: &str, surface: ApiSurface, owner: &AccountId) -> String {
        match self.stored_file(output) {
            Some(file) => {
                let expiry = output_expiry(chrono::Utc::now().timestamp());
                self.file_signed_download(&file, owner, expiry, surface)
            }
            None => output.to_owned(),
        }
    }

    /// The file a string of a stored output names: a file output is stored as its canonical
    /// object URL ([`Self::file`] on `/v1`), wherever it sits in the output's value.
    pub fn stored_file(&self, output: &str) -> Option<FileId> {
        let canonical = format!("{}/files/", self.api(ApiSurface::Canonical));
        output.strip_prefix(&canonical).and_then(|id| FileId::parse(id).ok())
    }

    /// The capability token of prediction `id`'s stream.
    pub fn stream_token(&self, id: &PredictionId) -> String {
        encode_stream_token(&self.key.mac(STREAM_TOKEN_CONTEXT, id.as_str()))
    }

    /// Whether `token` opens prediction `id`'s stream (compared in constant time; the previous
    /// master key's token too, during a rotation).
    pub fn stream_token_opens(&self, id: &PredictionId, token: &str) -> bool {
        let macs = self.key.accepted_macs(STREAM_TOKEN_CONTEXT, id.as_str());
        accepted(macs.map(|mac| encode_stream_token(&mac)), token)
    }
}

/// What a file's signature signs.
fn file_message(owner: &str, id: &str, expiry: i64) -> String {
    format!("{owner} {id} {expiry}")
}

/// A file signature as a URL carries it: the whole MAC.
fn encode_file_signature(mac: &[u8; 32]) -> String {
    URL_SAFE_NO_PAD.encode(mac)
}

/// A stream token as a URL carries it: the MAC's first [`STREAM_TOKEN_BYTES`].
fn encode_stream_token(mac: &[u8; 32]) -> String {
    URL_SAFE_NO_PAD.encode(&mac[..STREAM_TOKEN_BYTES])
}

/// Whether `given` is one of the `expected` texts (compared in constant time, every one
/// compared).
fn accepted(expected: impl Iterator<Item = String>, given: &str) -> bool {
    expected.fold(false, |found, text| found | bool::from(text.as_bytes().ct_eq(given.as_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn links() -> Links {
        Links::for_tests("http://h")
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
    fn file_outputs_are_signed_downloads_on_the_surface_for_an_hour_and_more_and_other_outputs_stay() {
        let l = links();
        let (file, owner) = (FileId::generate(), AccountId::generate());
        let stored = l.file(&file, ApiSurface::Canonical);
        for (surface, root) in
            [(ApiSurface::Replicate, "http://h/replicate/v1"), (ApiSurface::Canonical, "http://h/v1")]
        {
            let before = chrono::Utc::now().timestamp();
            let link = l.output(&stored, surface, &owner);
            let (path, query) = link.split_once('?').expect("signed");
            assert_eq!(path, format!("{root}/files/{file}/download"));
            let param = |name: &str| {
                query.split('&').find_map(|kv| kv.strip_prefix(&format!("{name}="))).expect(name).to_owned()
            };
            assert_eq!(param("owner"), owner.as_str());
            let expiry: i64 = param("expiry").parse().expect("a number");
            assert!(expiry - before >= SIGNED_DOWNLOAD_SECONDS, "valid at least an hour: {link}");
            assert!(l.file_signature_valid(owner.as_str(), file.as_str(), expiry, &param("signature")));
        }
        assert_eq!(l.output("hello", ApiSurface::Replicate, &owner), "hello");
        assert_eq!(l.output("http://h/v1/files/a/b", ApiSurface::Replicate, &owner), "http://h/v1/files/a/b");
    }

    #[test]
    fn an_output_link_stays_the_same_within_an_hour_and_works_past_the_next() {
        assert_eq!(output_expiry(3_600 * 10), 3_600 * 12);
        assert_eq!(output_expiry(3_600 * 10 + 3_599), 3_600 * 12);
        assert_eq!(output_expiry(3_600 * 11), 3_600 * 13);
        for now in [0, 1, 3_599, 3_600, 7_201] {
            assert!(output_expiry(now) - now > SIGNED_DOWNLOAD_SECONDS, "{now}");
        }
    }

    #[test]
    fn a_file_signature_opens_only_its_owner_file_and_expiry() {
        let l = links();
        let (file, owner) = (FileId::generate(), AccountId::generate());
        let url = l.file_signed_download(&file, &owner, 1_900_000_000, ApiSurface::Canonical);
        let signature = url.rsplit_once("signature=").expect("signed").1;
        assert!(url.starts_with(&format!("http://h/v1/files/{file}/download?owner={owner}&expiry=1900000000&")));
        assert!(l.file_signature_valid(owner.as_str(), file.as_str(), 1_900_000_000, signature));
        assert!(!l.file_signature_valid(owner.as_str(), file.as_str(), 1_900_000_001, signature));
        assert!(!l.file_signature_valid(owner.as_str(), FileId::generate().as_str(), 1_900_000_000, signature));
        assert!(!l.file_signature_valid(AccountId::generate().as_str(), file.as_str(), 1_900_000_000, signature));
        let other_key = Links::new("http://h", MasterKey::from_base64(&MasterKey::generate_base64()).expect("key"));
        assert!(!other_key.file_signature_valid(owner.as_str(), file.as_str(), 1_900_000_000, signature));
    }

    #[test]
    fn links_the_previous_master_key_signed_work_until_it_is_dropped() {
        let (old, new) = (MasterKey::from_base64(&MasterKey::generate_base64()).expect("key"), {
            MasterKey::from_base64(&MasterKey::generate_base64()).expect("key")
        });
        let before = Links::new("http://h", old.clone());
        let (id, file, owner) = (PredictionId::generate(), FileId::generate(), AccountId::generate());
        let (token, signature) = (before.stream_token(&id), before.file_signature(owner.as_str(), file.as_str(), 9));
        let during = Links::new("http://h", new.clone().with_previous(&old));
        assert!(during.stream_token_opens(&id, &token));
        assert!(during.file_signature_valid(owner.as_str(), file.as_str(), 9, &signature));
        assert!(during.stream_token_opens(&id, &during.stream_token(&id)));
        assert_eq!(during.stream_token(&id), Links::new("http://h", new.clone()).stream_token(&id), "new key signs");
        let after = Links::new("http://h", new);
        assert!(!after.stream_token_opens(&id, &token));
        assert!(!after.file_signature_valid(owner.as_str(), file.as_str(), 9, &signature));
    }

    #[test]
    fn a_file_url_of_this_service_names_its_file_on_either_surface() {
        let l = links();
        let file = FileId::generate();
        for url in [
            l.file(&file, ApiSurface::Canonical),
            l.file_download(&file, ApiSurface::Replicate),
            l.file_signed_download(&file, &AccountId::generate(), 1, ApiSurface::Canonical),
        ] {
            assert_eq!(l.file_named_by(&url), Some(file.clone()), "{url}");
        }
        assert_eq!(l.file_named_by(&format!("http://other/v1/files/{file}")), None);
        assert_eq!(l.file_named_by("http://h/v1/files/not-an-id"), None);
        assert_eq!(l.file_named_by(&format!("http://h/v1/predictions/{file}")), None);
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
