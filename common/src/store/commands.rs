//! Counting the MongoDB commands a process sends, through the driver's command monitoring:
//! what each service costs the database (`insert`, `update`, `findAndModify`, `find`, ...),
//! for `/metrics` and the benchmarks.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
};

use mongodb::event::{EventHandler, command::CommandEvent};

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
