//! Counting the MongoDB commands a process sends, through the driver's command monitoring:
//! what each service costs the database (`insert`, `update`, `findAndModify`, `find`, ...),
//! for `/metrics` and the benchmarks.
//!
//! Monitoring is off unless asked for ([`Monitoring::Counted`], `MONGODB_COMMAND_METRICS`):
//! with a handler registered the driver turns every command and every reply into an owned
//! `Document` for its event, whether or not the handler looks at them. Profiled in the api,
//! that was about 6 % of its CPU, more for list pages (a reply of 100 predictions).

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
};

use mongodb::event::{EventHandler, command::CommandEvent};

/// Whether a store counts its commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Monitoring {
    /// No command events (the default): nothing is counted.
    Off,
    /// Every command started is counted by name.
    Counted,
}

/// Commands started, by name; shared by every clone of a [`super::Store`].
#[derive(Clone, Debug, Default)]
pub struct CommandCounts(Arc<Mutex<BTreeMap<String, u64>>>);

impl CommandCounts {
    /// The driver hook that counts every command started.
    pub fn handler(&self) -> EventHandler<CommandEvent> {
        let counts = self.clone();
        EventHandler::callback(move |event| {
            if let CommandEvent::Started(started) = event {
                *counts.0.lock().unwrap_or_else(|p| p.into_inner()).entry(started.command_name).or_default() += 1;
            }
        })
    }

    /// The counts as an OpenMetrics counter family, `mongodb_commands_total{command}`.
    pub fn openmetrics(&self) -> String {
        let mut text = String::from(
            "# HELP mongodb_commands MongoDB commands sent by this process.\n# TYPE mongodb_commands counter\n",
        );
        for (command, n) in self.snapshot() {
            text.push_str(&format!("mongodb_commands_total{{command=\"{command}\"}} {n}\n"));
        }
        text
    }

    /// The counts so far, by command name.
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
