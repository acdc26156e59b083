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

use bson::{Bson, Document};
use mongodb::event::{EventHandler, command::CommandEvent};

/// Whether a store counts its commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Monitoring {
    /// No command events (the default): nothing is counted.
    Off,
    /// Every command started is counted by name.
    Counted,
    /// Counted, and the shape of every query kept ([`QueryShape`], `MONGODB_QUERY_SHAPES`): for
    /// the test that checks each query the services make has an index to use.
    Shapes,
}

/// What an index needs to know of one query: its collection and the fields it filters and
/// sorts on.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QueryShape {
    /// The command (`find`, `aggregate`, `update`, `delete`, `findAndModify`, `distinct`).
    pub command: String,
    /// The collection.
    pub collection: String,
    /// The field paths the filter names (those of `$and` and `$or` branches included).
    pub filter: Vec<String>,
    /// The field paths it sorts on, in order.
    pub sort: Vec<String>,
    /// Whether the command carries a time limit for the server (`maxTimeMS`).
    pub time_limited: bool,
}

/// The shapes of the queries of each database so far, in every store of this process that
/// keeps them.
static SHAPES: Mutex<BTreeMap<String, std::collections::BTreeSet<QueryShape>>> = Mutex::new(BTreeMap::new());

/// The shapes of the queries made on `database` so far (see [`Monitoring::Shapes`]).
pub fn query_shapes(database: &str) -> Vec<QueryShape> {
    SHAPES
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(database)
        .map(|s| s.iter().cloned().collect())
        .unwrap_or_default()
}

/// The field paths of `filter`, with those of `$and`, `$or` and `$nor` branches.
fn filter_fields(filter: &Document, into: &mut Vec<String>) {
    for (key, value) in filter {
        match (key.as_str(), value) {
            ("$and" | "$or" | "$nor", Bson::Array(branches)) => {
                for branch in branches.iter().filter_map(Bson::as_document) {
                    filter_fields(branch, into);
                }
            }
            (k, _) if k.starts_with('$') => {}
            (k, _) => {
                if !into.iter().any(|f| f == k) {
                    into.push(k.to_owned());
                }
            }
        }
    }
}

/// The shapes of the queries of one command (an `update` or `delete` carries several).
fn shapes_of(name: &str, command: &Document) -> Vec<QueryShape> {
    let collection = command.get_str(name).unwrap_or_default().to_owned();
    let shape = |filter: Option<&Document>, sort: Option<&Document>| {
        let mut fields = Vec::new();
        if let Some(filter) = filter {
            filter_fields(filter, &mut fields);
        }
        let sort = sort.map(|s| s.keys().cloned().collect()).unwrap_or_default();
        let time_limited = command.contains_key("maxTimeMS");
        QueryShape { command: name.to_owned(), collection: collection.clone(), filter: fields, sort, time_limited }
    };
    let statements = |list: &str| -> Vec<QueryShape> {
        command
            .get_array(list)
            .map(|items| {
                items.iter().filter_map(Bson::as_document).map(|s| shape(s.get_document("q").ok(), None)).collect()
            })
            .unwrap_or_default()
    };
    match name {
        "find" => vec![shape(command.get_document("filter").ok(), command.get_document("sort").ok())],
        "findAndModify" => vec![shape(command.get_document("query").ok(), command.get_document("sort").ok())],
        "count" | "distinct" => vec![shape(command.get_document("query").ok(), None)],
        "aggregate" => {
            let stages: Vec<&Document> = command
                .get_array("pipeline")
                .map(|p| p.iter().filter_map(Bson::as_document).collect())
                .unwrap_or_default();
            let first = |op: &str| stages.iter().find_map(|s| s.get_document(op).ok());
            vec![shape(first("$match"), first("$sort"))]
        }
        "update" => statements("updates"),
        "delete" => statements("deletes"),
        _ => Vec::new(),
    }
}

/// Commands started, by name; shared by every clone of a [`super::Store`].
#[derive(Clone, Debug, Default)]
pub struct CommandCounts(Arc<Mutex<BTreeMap<String, u64>>>);

impl CommandCounts {
    /// The driver hook that counts every command started, and keeps the shapes of its queries
    /// when `shapes` asks for them.
    pub fn handler(&self, shapes: bool) -> EventHandler<CommandEvent> {
        let counts = self.clone();
        EventHandler::callback(move |event| {
            if let CommandEvent::Started(started) = event {
                if shapes {
                    let found = shapes_of(&started.command_name, &started.command);
                    if !found.is_empty() {
                        SHAPES
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .entry(started.db.clone())
                            .or_default()
                            .extend(found);
                    }
                }
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
