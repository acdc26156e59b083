//! File outputs under a fault: the `images` fixture (a real Cog server whose output is a list
//! of files) streaming its files to the scenario's runner (`--upload-url` to the runner's
//! callback receiver), and a few predictions of [`FILES`] files of [`FILE_KIB`] KiB each
//! started just before the fault, so the runner is killed while one uploads. Each must end
//! succeeded (run again after the redelivery) with its files whole, and no file record may be
//! left that no output names: what the killed run stored is removed once the prediction's
//! final output is written, and a file cut off mid-upload never got a record. With files in
//! S3, the bucket too must hold nothing that no file names once unfinished uploads are swept
//! ([`crate::uploads::orphans_after_sweep`]).

use std::{path::Path, time::Duration};

use anyhow::Context;
use harness::cog_server::CogServer;
use serde_json::{Value, json};

/// The fixture's directory, from the repository's root (where the suite runs).
const FIXTURE: &str = "runner/tests/fixtures/cog/images";
/// How many predictions a scenario starts, how many files each returns, and their size.
const PREDICTIONS: usize = 3;
const FILES: usize = 2;
const FILE_KIB: usize = 48 * 1024;
/// How long before the fault the predictions start: the model writes its two files in a
/// fraction of a second, and the runner takes about two seconds to store them (a debug build
/// on 2 cores), so the fault comes while the first prediction's files are uploading.
pub const LEAD: Duration = Duration::from_millis(1200);

/// The fixture's Cog server, alive for the scenario, uploading to the runner's receiver.
pub struct Uploader {
    server: CogServer,
    bind: String,
}

impl Uploader {
    /// Starts the server, uploading to a receiver on a port chosen now (the runner binds it,
    /// and binds it again when restarted).
    pub async fn start() -> anyhow::Result<Self> {
        let port = harness::servers::free_port()?;
        let bind = format!("127.0.0.1:{port}");
        let server = CogServer::start_uploading(Path::new(FIXTURE), 1, &format!("http://{bind}/upload/")).await?;
        Ok(Self { server, bind })
    }

    /// The runner's settings that serve it.
    pub fn vars(&self) -> [(&'static str, String); 2] {
        [("RUNNER_COG", format!("acme/images={}", self.server.base)), ("RUNNER_COG_CALLBACK_BIND", self.bind.clone())]
    }
}

/// Starts the predictions (webhooks to `webhook`); returns their ids.
pub async fn start(api: &str, key: &str, webhook: &str) -> anyhow::Result<Vec<String>> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build()?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while http.get(format!("{api}/v1/models/acme/images")).bearer_auth(key).send().await?.status() != 200 {
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "acme/images was not registered");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let mut ids = Vec::new();
    for _ in 0..PREDICTIONS {
        let body = json!({
            "input": {"count": FILES, "kib": FILE_KIB},
            "webhook": webhook, "webhook_events_filter": ["start", "completed"],
        });
        let created: Value = http
            .post(format!("{api}/v1/models/acme/images/predictions"))
            .bearer_auth(key)
            .json(&body)
            .send()
            .await?
            .error_for_status()
            .context("creating a prediction")?
            .json()
            .await?;
        ids.push(created["id"].as_str().context("a prediction id")?.to_owned());
    }
    Ok(ids)
}

/// How the predictions with file outputs ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutputsTally {
    /// Started.
    pub created: usize,
    /// Succeeded with every file whole.
    pub whole: usize,
    /// Not ended.
    pub stuck: usize,
    /// Ended otherwise (failed, or a file missing or short).
    pub wrong: usize,
    /// Files of the account whose record no output names.
    pub orphans: usize,
    /// Ended after running longer than the runner's downtime: the ones the fault hit while
    /// they ran, and which ran again.
    pub interrupted: usize,
    /// With files in S3: objects in the bucket that no file names, after the sweep of
    /// unfinished uploads.
    pub unnamed_objects: Option<usize>,
}

/// Reads each prediction and its files once the drain is over (the runner was down for
/// `down`), and the account's files.
pub async fn check(api: &str, key: &str, ids: &[String], down: Duration) -> anyhow::Result<OutputsTally> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(60)).build()?;
    let mut tally = OutputsTally { created: ids.len(), ..OutputsTally::default() };
    let mut named = Vec::new();
    for id in ids {
        let p: Value =
            http.get(format!("{api}/replicate/v1/predictions/{id}")).bearer_auth(key).send().await?.json().await?;
        if p["metrics"]["predict_time"].as_f64().is_some_and(|ran| ran > down.as_secs_f64()) {
            tally.interrupted += 1;
        }
        match p["status"].as_str() {
            Some("succeeded") => {
                let links: Vec<String> =
                    p["output"].as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_owned).collect();
                let mut whole = links.len() == FILES;
                for link in &links {
                    let answer = http.get(link).bearer_auth(key).send().await?;
                    let size = if answer.status() == 200 { answer.bytes().await?.len() } else { 0 };
                    whole &= size == FILE_KIB * 1024;
                    named.push(file_id_of(link).to_owned());
                }
                if whole { tally.whole += 1 } else { tally.wrong += 1 }
            }
            Some("starting" | "processing") => tally.stuck += 1,
            _ => tally.wrong += 1,
        }
    }
    let files: Value = http.get(format!("{api}/v1/files?limit=100")).bearer_auth(key).send().await?.json().await?;
    tally.orphans = files["results"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["name"].as_str().is_some_and(|n| n.starts_with("out-")))
        .filter(|f| !named.iter().any(|id| f["id"].as_str() == Some(id.as_str())))
        .count();
    Ok(tally)
}

impl OutputsTally {
    /// The tally as JSON.
    pub fn json(&self) -> Value {
        json!({"created": self.created, "whole": self.whole, "stuck": self.stuck, "wrong": self.wrong,
               "orphans": self.orphans, "interrupted": self.interrupted, "unnamed_objects": self.unnamed_objects})
    }

    /// What is wrong, if anything.
    pub fn failures(&self) -> Vec<String> {
        let mut failures = Vec::new();
        if self.stuck > 0 {
            failures.push(format!("{} predictions with file outputs never ended", self.stuck));
        }
        if self.wrong > 0 {
            failures.push(format!("{} predictions with file outputs ended without every file whole", self.wrong));
        }
        if self.orphans > 0 {
            failures.push(format!("{} file records no output names", self.orphans));
        }
        if let Some(unnamed) = self.unnamed_objects.filter(|n| *n > 0) {
            failures.push(crate::uploads::unnamed_objects_failure(unnamed));
        }
        if self.interrupted == 0 {
            failures.push("the fault hit no prediction with file outputs while it ran".into());
        }
        failures
    }
}

/// The file id an output's link names: `…/files/{id}/download`, signed
/// (`?owner=…&expiry=…&signature=…`) or not.
fn file_id_of(link: &str) -> &str {
    let path = link.split('?').next().unwrap_or_default();
    path.trim_end_matches("/download").rsplit('/').next().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_signed_output_link_names_its_file() {
        let signed = "http://h/replicate/v1/files/file_abc/download?owner=acct_x&expiry=1900000000&signature=s";
        assert_eq!(super::file_id_of(signed), "file_abc");
        assert_eq!(super::file_id_of("http://h/v1/files/file_abc/download"), "file_abc");
    }
}
