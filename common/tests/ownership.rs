//! `common` holds what two or more services share: a collection typed in `common::store` is
//! reached by two or more of the services, or by a shared part of `common` itself (the usage
//! ledger, the files); one that a single service uses lives in that service's own `store`
//! module, where no other service can reach it. And every collection the index set names is
//! in exactly one of those maps, with the service that writes it.
//!
//! Read from the sources, as the maps are: a collection's accessor (`store.predictions()`)
//! named in a crate's code is a use by that crate.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

/// The workspace's root (this crate is `common/`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace").to_path_buf()
}

/// The `.rs` files under `dir`, at any depth.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
    found
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The accessors of `Store` in `common/src/store/mod.rs` that give a collection: each follows
/// a doc line "The `<collection>` ... collection(s)".
fn shared_accessors() -> Vec<String> {
    let text = read(&root().join("common/src/store/mod.rs"));
    let lines: Vec<&str> = text.lines().collect();
    lines
        .windows(2)
        .filter(|pair| pair[0].trim_start().starts_with("/// The `") && pair[0].contains("collection"))
        .filter_map(|pair| pair[1].trim_start().strip_prefix("pub fn "))
        .filter_map(|rest| rest.split_once("(&self)").map(|(name, _)| name.to_owned()))
        .collect()
}

/// Which of the services (and `common`'s shared parts, outside its `store`) name
/// `.<accessor>()` in their code.
fn users(accessors: &[String]) -> BTreeMap<String, BTreeSet<&'static str>> {
    let root = root();
    let parts: [(&str, PathBuf); 4] = [
        ("api", root.join("api/src")),
        ("runner", root.join("runner/src")),
        ("notifier", root.join("notifier/src")),
        ("common", root.join("common/src")),
    ];
    let store = root.join("common/src/store");
    let mut users: BTreeMap<String, BTreeSet<&'static str>> = BTreeMap::new();
    for (part, dir) in &parts {
        for file in sources(dir).into_iter().filter(|f| !f.starts_with(&store)) {
            let text = read(&file);
            for accessor in accessors {
                if text.contains(&format!(".{accessor}()")) {
                    users.entry(accessor.clone()).or_default().insert(part);
                }
            }
        }
    }
    users
}

#[test]
fn every_collection_common_types_is_shared_by_two_services_or_a_shared_part_of_common() {
    let accessors = shared_accessors();
    assert!(accessors.len() >= 10, "the accessors were read from common::store: {accessors:?}");
    let users = users(&accessors);
    let alone: Vec<String> = accessors
        .iter()
        .filter_map(|accessor| {
            let by = users.get(accessor).cloned().unwrap_or_default();
            let shared = by.contains("common") || by.len() >= 2;
            (!shared).then(|| format!("{accessor}() is used by {by:?} alone"))
        })
        .collect();
    assert!(
        alone.is_empty(),
        "collections typed in common that one service alone uses belong in that service's own \
         `store` module: {alone:?}"
    );
}

/// The collections named in the first cell of a map's table rows (`| \`a\`, \`b\` | ...`).
fn mapped(path: &Path) -> Vec<String> {
    read(path)
        .lines()
        .filter_map(|line| line.strip_prefix("//! | `"))
        .filter_map(|row| row.split(" | ").next())
        .flat_map(|cell| {
            // Every other piece between backticks is a name (`a`, `b` (GridFS)).
            format!("`{cell}").split('`').skip(1).step_by(2).map(str::to_owned).collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn every_indexed_collection_is_in_exactly_one_owners_map() {
    let root = root();
    let maps = ["common/src/store/mod.rs", "api/src/store/mod.rs", "notifier/src/store/mod.rs"];
    let mut listed: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for map in maps {
        for collection in mapped(&root.join(map)) {
            listed.entry(collection).or_default().push(map);
        }
    }
    let twice: Vec<_> = listed.iter().filter(|(_, maps)| maps.len() > 1).collect();
    assert!(twice.is_empty(), "collections in more than one map: {twice:?}");
    let indexed: BTreeSet<&str> = common::store::indexes().into_iter().map(|(collection, _)| collection).collect();
    let missing: Vec<&&str> = indexed.iter().filter(|c| !listed.contains_key(**c)).collect();
    assert!(missing.is_empty(), "collections with indexes that no map names with its writer: {missing:?}");
}
