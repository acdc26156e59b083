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

use crate::metrics::kit::*;

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
    /// Whether the filter names its documents by `_id` (a value, `$eq` or `$in` at its top
    /// level): a point lookup, served by the `_id` index whatever else it filters on. An `_id`
    /// range or sort is no such thing: an index must hold `_id` for it.
    pub by_id: bool,
    /// The fields of each branch of a top-level `$or`, with the fields beside it (empty when
    /// it has none): MongoDB serves each branch with an index of its own.
    pub branches: Vec<Vec<String>>,
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

/// Whether `filter` names its documents by `_id`: a plain value, `{$eq: v}` or `{$in: [...]}`.
fn names_by_id(filter: &Document) -> bool {
    match filter.get("_id") {
        None => false,
        Some(Bson::Document(ops)) if ops.keys().any(|k| k.starts_with('$')) => {
            ops.keys().all(|op| op == "$eq" || op == "$in")
        }
        Some(_) => true,
    }
}

/// The fields of each branch of `filter`'s top-level `$or`, each with the fields beside it.
fn or_branches(filter: &Document) -> Vec<Vec<String>> {
    let Ok(branches) = filter.get_array("$or") else { return Vec::new() };
    let mut beside = Vec::new();
    let mut rest = filter.clone();
    rest.remove("$or");
    filter_fields(&rest, &mut beside);
    branches
        .iter()
        .filter_map(Bson::as_document)
        .map(|branch| {
            let mut fields = beside.clone();
            filter_fields(branch, &mut fields);
            fields
        })
        .collect()
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
        let by_id = filter.is_some_and(names_by_id);
        let branches = filter.map(or_branches).unwrap_or_default();
        QueryShape {
            command: name.to_owned(),
            collection: collection.clone(),
            filter: fields,
            sort,
            time_limited,
            by_id,
            branches,
        }
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
        // A `count` without a query is read from the collection's metadata.
        "count" if command.get_document("query").is_ok_and(|q| !q.is_empty()) => {
            vec![shape(command.get_document("query").ok(), None)]
        }
        "count" => Vec::new(),
        "distinct" => vec![shape(command.get_document("query").ok(), None)],
        "aggregate" => {
            let stages: Vec<&Document> = command
                .get_array("pipeline")
                .map(|p| p.iter().filter_map(Bson::as_document).collect())
                .unwrap_or_default();
            let first = |op: &str| stages.iter().find_map(|s| s.get_document(op).ok());
            if first("$collStats").is_some() {
                return Vec::new(); // the collection's metadata
            }
            vec![shape(first("$match"), first("$sort"))]
        }
        "update" => statements("updates"),
        "delete" => statements("deletes"),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::*;

    #[test]
    fn an_id_given_as_values_is_a_point_lookup_and_an_id_range_is_not() {
        for point in [doc! {"_id": "a"}, doc! {"_id": {"$in": ["a", "b"]}, "x": 1}, doc! {"_id": {"$eq": "a"}}] {
            assert!(names_by_id(&point), "{point}");
        }
        for not in [
            doc! {"_id": {"$gt": "a"}},
            doc! {"x": 1},
            doc! {"$or": [{"_id": "a"}]},
            doc! {"_id": {"$in": [], "$lt": 1}},
        ] {
            assert!(!names_by_id(&not), "{not}");
        }
        let shapes =
            shapes_of("find", &doc! {"find": "c", "filter": {"_id": {"$lt": "z"}, "s": 1}, "sort": {"_id": 1}});
        assert_eq!(shapes[0].filter, ["_id", "s"]);
        assert!(!shapes[0].by_id);
        let or = doc! {"find": "c", "filter": {"k": 1, "$or": [{"a": 1}, {"b": 1, "c": 1}]}};
        assert_eq!(shapes_of("find", &or)[0].branches, [vec!["k", "a"], vec!["k", "b", "c"]]);
    }
}

/// Commands started, by name, and how long they took; shared by every clone of a
/// [`super::Store`].
#[derive(Clone, Debug)]
pub struct CommandCounts {
    started: Arc<Mutex<BTreeMap<String, u64>>>,
    durations: Family<CommandLabel, Histogram, fn() -> Histogram>,
}

/// The `command` label of the command metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CommandLabel {
    command: String,
}

/// Buckets of 0.25 ms to about 8 s: a document by its `_id` takes a millisecond or two, a
/// stall shows as seconds.
fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_25, 2.0, 16))
}

impl Default for CommandCounts {
    fn default() -> Self {
        Self { started: Arc::default(), durations: Family::new_with_constructor(duration_histogram) }
    }
}

impl CommandCounts {
    /// The driver hook that counts every command started and times every command answered
    /// (from the driver's sending it to its reply or failure: the wait for the reply to be
    /// read is in it), and keeps the shapes of its queries when `shapes` asks for them.
    pub fn handler(&self, shapes: bool) -> EventHandler<CommandEvent> {
        let counts = self.clone();
        EventHandler::callback(move |event| match event {
            CommandEvent::Started(started) => {
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
                *counts.started.lock().unwrap_or_else(|p| p.into_inner()).entry(started.command_name).or_default() += 1;
            }
            CommandEvent::Succeeded(done) => counts.took(done.command_name, done.duration),
            CommandEvent::Failed(failed) => counts.took(failed.command_name, failed.duration),
            _ => {}
        })
    }

    fn took(&self, command: String, duration: std::time::Duration) {
        self.durations.get_or_create(&CommandLabel { command }).observe(duration.as_secs_f64());
    }

    /// The counts as an OpenMetrics counter family, `mongodb_commands_total{command}`, and
    /// their durations, `mongodb_command_duration_seconds{command}` (a histogram).
    pub fn openmetrics(&self) -> String {
        let mut text = String::from(
            "# HELP mongodb_commands MongoDB commands sent by this process.\n# TYPE mongodb_commands counter\n",
        );
        for (command, n) in self.snapshot() {
            text.push_str(&format!("mongodb_commands_total{{command=\"{command}\"}} {n}\n"));
        }
        let mut registry = Registry::default();
        registry.register(
            "mongodb_command_duration_seconds",
            "How long MongoDB commands took to answer",
            self.durations.clone(),
        );
        text.push_str(&crate::metrics::families(&registry));
        text
    }

    /// The counts so far, by command name.
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.started.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
