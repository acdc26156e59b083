//! Logs and output while a model runs. The model writes here as often as it likes; the
//! executor takes the changes at most every 500 ms and stores them in one update, so a chatty
//! model cannot flood the database or the event stream.
//!
//! Both are bounded ([`Limits`]), because a prediction is one MongoDB document of at most
//! 16 MiB: past that it could no longer be updated, and would never end. The logs keep their
//! tail: once they pass `max_log_bytes` the oldest lines go, and the text starts with a line
//! saying how much was cut. Output is never cut: past `max_output_bytes` (its JSON text, for
//! a value that is not text) it stops growing and [`Progress::output_overflowed`] tells the
//! executor to fail the prediction (`OUTPUT_TOO_LARGE`).
//!
//! The output is a JSON value: a text model's growing string, or a Cog model's snapshot (an
//! iterator's items so far). A snapshot still holding a `data:` URI (a file not yet stored)
//! is not kept: its files become stored files only with the final output.

use std::sync::Mutex;

use serde_json::Value;

pub use crate::models::cog::uploads::RunOwner;

/// The most bytes of logs and of text output one prediction keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// `PREDICTION_MAX_LOG_BYTES`: the logs' tail kept, the cut line included.
    pub max_log_bytes: usize,
    /// `PREDICTION_MAX_OUTPUT_BYTES`: the longest output, as text or JSON text (the files in
    /// it count as their URLs).
    pub max_output_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self { max_log_bytes: 1024 * 1024, max_output_bytes: 4 * 1024 * 1024 }
    }
}

/// The logs and output of one running prediction.
pub struct Progress {
    state: Mutex<State>,
    /// Whose run it is: known once step 1 read the prediction, which a model started beside
    /// that step may not wait for, so the files it sends wait for it instead.
    owner: tokio::sync::watch::Sender<Option<RunOwner>>,
}

impl Default for Progress {
    fn default() -> Self {
        Self::with_limits(Limits::default())
    }
}

#[derive(Default)]
struct State {
    limits: Limits,
    /// The logs' kept tail.
    logs: String,
    /// Bytes cut from the head of the logs so far.
    cut: usize,
    /// What the logs begin with, never cut or replaced by the model's snapshots: the boot of
    /// the model's server this run waited for ([`Progress::set_preamble`]).
    preamble: String,
    output: Option<Value>,
    /// The output passed its limit (and stopped growing).
    overflowed: bool,
    logs_changed: bool,
    output_changed: bool,
    /// Values the shown logs mask: the run's secret inputs ([`Progress::set_secrets`]).
    secrets: Vec<String>,
    /// The numbers the model recorded of its run (Cog's `record_metric`).
    model_metrics: Option<serde_json::Map<String, Value>>,
}

/// The room a cut line takes (`[... N bytes of earlier logs cut ...]`).
const CUT_LINE_ROOM: usize = 64;

impl State {
    /// Cuts the head of the logs so that they and the cut line fit the limit; cuts a quarter
    /// more than needed, at a line's start where one is near, so that a chatty model does
    /// not pay a cut per line.
    fn bound_logs(&mut self) {
        let budget = self.limits.max_log_bytes.saturating_sub(CUT_LINE_ROOM + self.preamble.len());
        if self.logs.len() <= budget {
            return;
        }
        let mut at = self.logs.len() - budget * 3 / 4;
        while !self.logs.is_char_boundary(at) {
            at += 1;
        }
        if let Some(newline) = self.logs[at..].find('\n').filter(|n| *n < budget / 4) {
            at += newline + 1;
        }
        self.logs.drain(..at);
        self.cut += at;
    }

    /// The logs as stored: the cut line, if any, then the kept tail.
    fn shown_logs(&self) -> String {
        let shown = if self.cut == 0 {
            format!("{}{}", self.preamble, self.logs)
        } else {
            format!("{}[... {} bytes of earlier logs cut ...]\n{}", self.preamble, self.cut, self.logs)
        };
        if self.secrets.is_empty() { shown } else { common::domain::secret_inputs::redact(&shown, &self.secrets) }
    }

    /// Keeps text output within the limit, cut at it and marked overflowed past it.
    fn bound_text(&mut self) {
        if let Some(Value::String(output)) = self.output.as_mut()
            && output.len() > self.limits.max_output_bytes
        {
            let mut at = self.limits.max_output_bytes;
            while !output.is_char_boundary(at) {
                at -= 1;
            }
            output.truncate(at);
            self.overflowed = true;
        }
    }
}

/// What changed since the last [`Progress::take_changes`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changes {
    /// The whole log text, if it changed.
    pub logs: Option<String>,
    /// The whole output, if it changed.
    pub output: Option<Value>,
}

impl Progress {
    /// Progress kept within `limits`.
    pub fn with_limits(limits: Limits) -> Self {
        Self { state: Mutex::new(State { limits, ..State::default() }), owner: tokio::sync::watch::Sender::new(None) }
    }

    /// Says whose run this is: the files its model sends are theirs.
    pub fn set_owner(&self, owner: RunOwner) {
        self.owner.send_replace(Some(owner));
    }

    /// Whose run this is, once [`Self::set_owner`] said.
    pub fn owner(&self) -> tokio::sync::watch::Receiver<Option<RunOwner>> {
        self.owner.subscribe()
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.state.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Keeps `secrets` (the values of the run's secret inputs) out of the logs it shows:
    /// each occurrence is masked.
    pub fn set_secrets(&self, secrets: Vec<String>) {
        self.with(|s| {
            s.secrets = secrets;
            s.logs_changed = true;
        });
    }

    /// Appends one line to the logs.
    pub fn log(&self, line: &str) {
        self.with(|s| {
            s.logs.push_str(line);
            s.logs.push('\n');
            s.bound_logs();
            s.logs_changed = true;
        });
    }

    /// Sets what the logs begin with, ahead of everything the model logs (and of the model's
    /// snapshots, which replace only what follows): the boot and setup output of the model's
    /// server this run waited for. At most a quarter of the log limit, its tail kept.
    pub fn set_preamble(&self, text: &str) {
        self.with(|s| {
            let room = s.limits.max_log_bytes / 4;
            let mut at = text.len().saturating_sub(room);
            while !text.is_char_boundary(at) {
                at += 1;
            }
            s.preamble = text[at..].to_owned();
            if !s.preamble.is_empty() && !s.preamble.ends_with('\n') {
                s.preamble.push('\n');
            }
            s.bound_logs();
            s.logs_changed = true;
        });
    }

    /// Appends text to the output (streaming text models).
    pub fn append_output(&self, text: &str) {
        self.with(|s| {
            if s.overflowed {
                return;
            }
            match s.output.as_mut() {
                Some(Value::String(output)) => output.push_str(text),
                _ => s.output = Some(Value::String(text.to_owned())),
            }
            s.bound_text();
            s.output_changed = true;
        });
    }

    /// Replaces the whole log text (models that report snapshots, like Cog servers). A
    /// snapshot that starts with what was cut before is cut the same way.
    pub fn set_logs(&self, logs: &str) {
        self.with(|s| {
            let same_head = s.cut > 0 && logs.len() >= s.cut && logs.is_char_boundary(s.cut);
            let (cut, tail) = if same_head { (s.cut, &logs[s.cut..]) } else { (0, logs) };
            if s.cut != cut || s.logs != tail {
                s.cut = cut;
                s.logs = tail.to_owned();
                s.bound_logs();
                s.logs_changed = true;
            }
        });
    }

    /// Replaces the whole output so far (a snapshot). One that holds a `data:` URI is not
    /// kept (see the module's doc); one whose JSON text passes the limit marks the output
    /// overflowed and is not kept either.
    pub fn set_output(&self, output: Value) {
        if common::domain::output::holds_data_uri(&output) {
            return;
        }
        self.with(|s| {
            if s.overflowed || s.output.as_ref() == Some(&output) {
                return;
            }
            if let Value::String(_) = output {
                s.output = Some(output);
                s.bound_text();
            } else if common::files::payloads::json_len(&output) > s.limits.max_output_bytes {
                s.overflowed = true;
                return;
            } else {
                s.output = Some(output);
            }
            s.output_changed = true;
        });
    }

    /// The changes since the last call, or `None` when nothing changed.
    pub fn take_changes(&self) -> Option<Changes> {
        self.with(|s| {
            let changes = Changes {
                logs: s.logs_changed.then(|| s.shown_logs()),
                output: if s.output_changed { s.output.clone() } else { None },
            };
            s.logs_changed = false;
            s.output_changed = false;
            (changes.logs.is_some() || changes.output.is_some()).then_some(changes)
        })
    }

    /// All logs kept so far (with the cut line, if the head was cut).
    pub fn logs(&self) -> String {
        self.with(|s| s.shown_logs())
    }

    /// The output so far.
    pub fn output(&self) -> Option<Value> {
        self.with(|s| s.output.clone())
    }

    /// Whether the output passed its limit.
    pub fn output_overflowed(&self) -> bool {
        self.with(|s| s.overflowed)
    }

    /// Keeps the numbers the model recorded of its run (Cog's `record_metric`: a token count,
    /// say), beside the service's own timings.
    pub fn set_model_metrics(&self, metrics: serde_json::Map<String, Value>) {
        self.with(|s| s.model_metrics = Some(metrics));
    }

    /// The numbers the model recorded, if it recorded any.
    pub fn model_metrics(&self) -> Option<serde_json::Map<String, Value>> {
        self.with(|s| s.model_metrics.clone())
    }

    /// The limits kept.
    pub fn limits(&self) -> Limits {
        self.with(|s| s.limits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(max_log_bytes: usize, max_output_bytes: usize) -> Progress {
        Progress::with_limits(Limits { max_log_bytes, max_output_bytes })
    }

    #[test]
    fn the_boot_preamble_leads_the_logs_through_snapshots_and_cuts() {
        let p = small(1024, 1024);
        p.set_preamble("booting\nready");
        p.set_logs("setup done\n");
        assert_eq!(p.logs(), "booting\nready\nsetup done\n", "a snapshot replaces only what follows it");
        for i in 0..200 {
            p.log(&format!("line {i:03}"));
        }
        let logs = p.logs();
        assert!(logs.starts_with("booting\nready\n[... "), "{logs}");
        assert!(logs.len() <= 1024 && logs.ends_with("line 199\n"), "{}", logs.len());
        p.set_preamble(&"x".repeat(5000));
        assert!(p.logs().len() <= 1024, "a long boot keeps its tail, within a quarter of the limit");
    }

    #[test]
    fn logs_past_their_limit_keep_their_tail_after_a_line_saying_what_was_cut() {
        let p = small(1024, 1024);
        for i in 0..200 {
            p.log(&format!("line {i:03}"));
        }
        let logs = p.logs();
        assert!(logs.len() <= 1024, "{}", logs.len());
        assert!(
            logs.starts_with("[... ")
                && logs.lines().next().is_some_and(|l| l.ends_with("bytes of earlier logs cut ...]"))
        );
        assert!(logs.ends_with("line 199\n"), "the newest line is kept");
        let cut: usize = logs[5..].split(' ').next().and_then(|n| n.parse().ok()).expect("a count");
        let kept = logs.split_once('\n').map(|(_, tail)| tail.len()).expect("a tail");
        assert_eq!(cut + kept, 200 * 9, "every byte is either kept or counted as cut");
        assert!(logs.split_once('\n').is_some_and(|(_, tail)| tail.starts_with("line ")), "cut at a line's start");
    }

    #[test]
    fn a_growing_snapshot_of_logs_is_cut_as_the_lines_were() {
        let p = small(1024, 1024);
        let mut snapshot = String::new();
        for i in 0..300 {
            snapshot.push_str(&format!("line {i:03}\n"));
            p.set_logs(&snapshot);
        }
        let logs = p.logs();
        assert!(logs.len() <= 1024 && logs.ends_with("line 299\n"), "{logs}");
    }

    #[test]
    fn an_output_past_its_limit_stops_growing_and_says_so() {
        let p = small(1024, 10);
        p.append_output("12345");
        assert!(!p.output_overflowed());
        p.append_output("678901");
        p.append_output("more");
        assert!(p.output_overflowed());
        assert_eq!(p.output(), Some(Value::from("1234567890")));
        let q = small(1024, 10);
        q.set_output(Value::from("é".repeat(8)));
        assert!(q.output_overflowed() && q.output().is_some_and(|o| o.as_str().is_some_and(|t| t.len() <= 10)));
    }

    #[test]
    fn a_snapshot_of_items_is_kept_whole_until_its_json_passes_the_limit() {
        let p = small(1024, 30);
        p.set_output(serde_json::json!(["tick0 ", "tick1 "]));
        assert_eq!(p.output(), Some(serde_json::json!(["tick0 ", "tick1 "])));
        p.set_output(serde_json::json!(["tick0 ", "tick1 ", "tick2 ", "tick3 "]));
        assert!(p.output_overflowed(), "37 bytes of JSON pass 30");
        assert_eq!(p.output(), Some(serde_json::json!(["tick0 ", "tick1 "])), "the last snapshot within the limit");
    }

    #[test]
    fn a_snapshot_holding_a_file_not_yet_stored_is_not_kept() {
        let p = Progress::default();
        p.set_output(serde_json::json!(["data:image/png;base64,AAAA"]));
        assert_eq!(p.take_changes(), None);
        assert_eq!(p.output(), None);
    }

    #[test]
    fn changes_are_reported_once_and_carry_the_whole_text() {
        let p = Progress::default();
        assert_eq!(p.take_changes(), None);
        p.log("a");
        p.log("b");
        p.append_output("x");
        assert_eq!(p.take_changes(), Some(Changes { logs: Some("a\nb\n".into()), output: Some("x".into()) }));
        assert_eq!(p.take_changes(), None);
        p.append_output("y");
        assert_eq!(p.take_changes(), Some(Changes { logs: None, output: Some("xy".into()) }));
    }
}
