//! Uploads under a fault: files of [`FILE_BYTES`] sent one after another, each streamed slowly
//! (in [`PIECES`] pieces [`PIECE_PAUSE`] apart) so that uploads are in flight when the api
//! dies; afterwards every file the account lists is read back whole. A file that is listed must
//! be one that was sent, complete, with the checksum the api reported; an upload the api
//! answered 201 must be listed. A partial file, or a lost one, fails the scenario.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

/// The size of each file.
pub const FILE_BYTES: usize = 512 * 1024;
/// Pieces each upload is sent in.
const PIECES: usize = 8;
/// The pause between two pieces: an upload takes about 8 × 60 ms.
const PIECE_PAUSE: Duration = Duration::from_millis(60);

/// What the uploads and the read-back found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UploadTally {
    /// Uploads started.
    pub sent: usize,
    /// Answered 201.
    pub accepted: usize,
    /// Listed by the account afterwards.
    pub listed: usize,
    /// Listed, but not whole: a size or checksum that no sent file has, or bytes that do not
    /// match the checksum.
    pub partial: usize,
    /// Answered 201 but not listed.
    pub lost: usize,
}

impl UploadTally {
    /// The tally as JSON.
    pub fn json(&self) -> Value {
        json!({"sent": self.sent, "accepted": self.accepted, "listed": self.listed, "partial": self.partial, "lost": self.lost})
    }
}

/// The bytes of file `n`: different for every file, so a mix-up shows.
fn content(n: usize) -> Vec<u8> {
    (0..FILE_BYTES).map(|i| ((i * 31 + n * 7919) % 251) as u8).collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Uploads files to `api` one after another for `seconds`; returns the SHA-256 of every file
/// sent and the ids of those answered 201.
pub async fn run(api: &str, key: &str, seconds: u64) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build()?;
    let until = Instant::now() + Duration::from_secs(seconds);
    let (mut sent, mut accepted) = (Vec::new(), Vec::new());
    let mut n = 0;
    while Instant::now() < until {
        let bytes = content(n);
        sent.push(hex(&Sha256::digest(&bytes)));
        let pieces: Vec<Bytes> = bytes.chunks(FILE_BYTES / PIECES).map(Bytes::copy_from_slice).collect();
        let stream = futures::stream::iter(pieces).then(|piece| async move {
            tokio::time::sleep(PIECE_PAUSE).await;
            Ok::<_, std::io::Error>(piece)
        });
        let part = reqwest::multipart::Part::stream_with_length(reqwest::Body::wrap_stream(stream), FILE_BYTES as u64)
            .file_name(format!("fault-{n}.bin"))
            .mime_str("application/octet-stream")?;
        let form = reqwest::multipart::Form::new().part("content", part);
        let answer = http.post(format!("{api}/v1/files")).bearer_auth(key).multipart(form).send().await;
        if let Ok(response) = answer
            && response.status() == 201
            && let Ok(file) = response.json::<Value>().await
            && let Some(id) = file["id"].as_str()
        {
            accepted.push(id.to_owned());
        }
        n += 1;
    }
    Ok((sent, accepted))
}

/// Reads back every file the account lists and checks it against what was sent.
pub async fn check(api: &str, key: &str, sent: &[String], accepted: &[String]) -> anyhow::Result<UploadTally> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build()?;
    let list: Value =
        http.get(format!("{api}/v1/files?limit=100")).bearer_auth(key).send().await?.error_for_status()?.json().await?;
    let files = list["results"].as_array().cloned().unwrap_or_default();
    let mut tally =
        UploadTally { sent: sent.len(), accepted: accepted.len(), listed: files.len(), ..Default::default() };
    for file in &files {
        let id = file["id"].as_str().unwrap_or_default();
        let claimed = file["checksums"]["sha256"].as_str().unwrap_or_default();
        let bytes = http.get(format!("{api}/v1/files/{id}/download")).bearer_auth(key).send().await?.bytes().await?;
        let whole = bytes.len() == FILE_BYTES
            && file["size"] == FILE_BYTES
            && hex(&Sha256::digest(&bytes)) == claimed
            && sent.iter().any(|s| s == claimed);
        if !whole {
            tally.partial += 1;
        }
    }
    let listed: Vec<&str> = files.iter().filter_map(|f| f["id"].as_str()).collect();
    tally.lost = accepted.iter().filter(|id| !listed.contains(&id.as_str())).count();
    Ok(tally)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_differs_and_has_the_full_size() {
        assert_eq!(content(0).len(), FILE_BYTES);
        assert_ne!(content(0), content(1));
    }
}
