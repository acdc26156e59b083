//! Logs and output while a model runs. The model writes here as often as it likes; the
//! executor takes the changes at most every 500 ms and stores them in one update, so a chatty
//! model cannot flood the database or the event stream.

use std::sync::Mutex;

/// The logs and output of one running prediction.
#[derive(Default)]
pub struct Progress {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    logs: String,
    output: Option<String>,
    logs_changed: bool,
    output_changed: bool,
}

/// What changed since the last [`Progress::take_changes`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changes {
    /// The whole log text, if it changed.
    pub logs: Option<String>,
    /// The whole output, if it changed.
    pub output: Option<String>,
}

impl Progress {
    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.state.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Appends one line to the logs.
    pub fn log(&self, line: &str) {
        self.with(|s| {
            s.logs.push_str(line);
            s.logs.push('\n');
            s.logs_changed = true;
        });
    }

    /// Appends text to the output (streaming text models).
    pub fn append_output(&self, text: &str) {
        self.with(|s| {
            s.output.get_or_insert_with(String::new).push_str(text);
            s.output_changed = true;
        });
    }

    /// Replaces the whole log text (models that report snapshots, like Cog servers).
    pub fn set_logs(&self, logs: &str) {
        self.with(|s| {
            if s.logs != logs {
                s.logs = logs.to_owned();
                s.logs_changed = true;
            }
        });
    }

    /// Replaces the whole output so far.
    pub fn set_output(&self, output: &str) {
        self.with(|s| {
            if s.output.as_deref() != Some(output) {
                s.output = Some(output.to_owned());
                s.output_changed = true;
            }
        });
    }

    /// The changes since the last call, or `None` when nothing changed.
    pub fn take_changes(&self) -> Option<Changes> {
        self.with(|s| {
            let changes = Changes {
                logs: s.logs_changed.then(|| s.logs.clone()),
                output: if s.output_changed { s.output.clone() } else { None },
            };
            s.logs_changed = false;
            s.output_changed = false;
            (changes.logs.is_some() || changes.output.is_some()).then_some(changes)
        })
    }

    /// All logs so far.
    pub fn logs(&self) -> String {
        self.with(|s| s.logs.clone())
    }

    /// The output so far.
    pub fn output(&self) -> Option<String> {
        self.with(|s| s.output.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
