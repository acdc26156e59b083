//! Uploads under a fault: files of [`FILE_BYTES`] (or, with files in S3, [`S3_FILE_BYTES`], so
//! that each is a multipart upload) sent one after another, each streamed slowly
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
/// The size of each file when files go to S3: two parts of a multipart upload.
pub const S3_FILE_BYTES: usize = common::files::s3::PART_SIZE + 1024 * 1024;
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
    /// With files in S3: objects in the bucket that no file names, after the sweep of
    /// unfinished uploads.
    pub orphans: Option<usize>,
}

impl UploadTally {
    /// The tally as JSON.
    pub fn json(&self) -> Value {
        json!({"sent": self.sent, "accepted": self.accepted, "listed": self.listed, "partial": self.partial, "lost": self.lost, "orphans": self.orphans})
    }
}

/// The bytes of file `n`: different for every file, so a mix-up shows.
fn content(n: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| ((i * 31 + n * 7919) % 251) as u8).collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Uploads files to `api` one after another for `seconds`; returns the SHA-256 of every file
/// sent and the ids of those answered 201.
pub async fn run(api: &str, key: &str, seconds: u64, file_bytes: usize) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build()?;
    let until = Instant::now() + Duration::from_secs(seconds);
    let (mut sent, mut accepted) = (Vec::new(), Vec::new());
    let mut n = 0;
    while Instant::now() < until {
        let bytes = content(n, file_bytes);
        sent.push(hex(&Sha256::digest(&bytes)));
        let pieces: Vec<Bytes> = bytes.chunks(file_bytes / PIECES).map(Bytes::copy_from_slice).collect();
        let stream = futures::stream::iter(pieces).then(|piece| async move {
            tokio::time::sleep(PIECE_PAUSE).await;
            Ok::<_, std::io::Error>(piece)
        });
        let part = reqwest::multipart::Part::stream_with_length(reqwest::Body::wrap_stream(stream), file_bytes as u64)
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
pub async fn check(
    api: &str,
    key: &str,
    sent: &[String],
    accepted: &[String],
    file_bytes: usize,
) -> anyhow::Result<UploadTally> {
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
        let whole = bytes.len() == file_bytes
            && file["size"] == file_bytes
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

/// The failure of a row that left `count` objects in the bucket that no file names once the
/// sweep of unfinished uploads has run ([`orphans_after_sweep`]; S3 never keeps an object of an
/// unacknowledged write).
pub fn unnamed_objects_failure(count: usize) -> String {
    format!("{count} objects in the bucket that no file names, after the sweep")
}

/// Sweeps the unfinished uploads of `setup`'s files (whatever their age: the scenario is
/// over), then counts what the bucket still holds that no file names: objects without a
/// record, and multipart uploads noted as unfinished that still keep parts (invisible to a
/// listing of objects, but stored and billed).
pub async fn orphans_after_sweep(setup: &harness::setup::Setup) -> anyhow::Result<usize> {
    let files = common::files::Files::open(&setup.store, &setup.common.files).await?;
    let noted = setup.store.unfinished_uploads().begun_before(bson::DateTime::now(), 10_000).await?;
    let swept = files.sweep_unfinished_older_than(Duration::ZERO, 10_000).await?;
    // An upload the store refused to discard stays noted for a later sweep: still named, so
    // not an orphan. (S3Proxy's filesystem backend refuses, with a 500, to list or abort an
    // upload whose part a killed client cut off mid-body; S3 discards such a part.)
    let later = bson::DateTime::from_millis(bson::DateTime::now().timestamp_millis() + 60_000);
    let kept: Vec<_> = setup.store.unfinished_uploads().begun_before(later, 10_000).await?;
    let s3 = files.s3().ok_or_else(|| anyhow::anyhow!("the scenario's files are not in S3"))?;
    let mut orphans = 0;
    for upload in noted.iter().filter(|noted| !kept.iter().any(|k| k.id == noted.id)) {
        if let Some(upload_id) = &upload.multipart_upload_id
            && s3.multipart_parts_kept(&upload.id, upload_id).await? > 0
        {
            orphans += 1;
        }
    }
    for key in s3.list_keys().await? {
        let id = key.strip_prefix("files/").and_then(|id| common::domain::FileId::parse(id).ok());
        let named = match id {
            Some(id) => files.get(&id).await?.is_some(),
            None => false,
        };
        if !named {
            orphans += 1;
        }
    }
    println!(
        "  unfinished uploads swept: {swept} of {} noted, {} kept for a later sweep; orphans after: {orphans}",
        noted.len(),
        kept.len()
    );
    Ok(orphans)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_differs_and_has_the_full_size() {
        assert_eq!(content(0, FILE_BYTES).len(), FILE_BYTES);
        assert_ne!(content(0, FILE_BYTES), content(1, FILE_BYTES));
    }
}
