//! The layering docs/architecture.md draws, checked on the source: every file of
//! `src/` names (in code, not in comments) only modules of its own layer or of
//! the layers below it. The layers, bottom up: the words (`src/*.rs`), `wire/`,
//! `node/`, `actors/`, `front/`. A message that must travel upward goes through a
//! `Recipient` of a type defined below, so nothing here has a reason to fail but
//! an import that runs the wrong way. Run it alone with `cargo test --test layers`.

use std::path::{Path, PathBuf};

/// The layers from the bottom; a top-level module not listed is a word.
const LAYERS: &[&str] = &["wire", "node", "actors", "front"];

/// The layer of a top-level module of the crate: 0 for the words.
fn layer_of(module: &str) -> usize {
    LAYERS
        .iter()
        .position(|l| *l == module)
        .map_or(0, |at| at + 1)
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            sources(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// The top-level modules a line of code names through paths that start at the
/// crate's root, `root` being `crate::` (or `super::` in a layer's `mod.rs`,
/// whose parent is the root); a `use crate::{a, b}` group too.
fn named(code: &str, root: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find(root) {
        rest = &rest[at + root.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let first = item.trim().split("::").next().unwrap_or("");
                names.push(first.to_string());
            }
            continue;
        }
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        names.push(rest[..end].to_string());
    }
    names
}

#[test]
fn every_file_imports_only_downward() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    let mut upward = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&root).expect("under src");
        let mut parts = relative
            .components()
            .map(|c| c.as_os_str().to_string_lossy());
        let first = parts.next().unwrap_or_default().to_string();
        // The command is a client of the library, not a layer of it; a unit
        // test drives its module from the top, as a user would.
        let is_test = file.file_name().is_some_and(|n| n == "tests.rs");
        if first == "bin" || first == "lib.rs" || is_test {
            continue;
        }
        let own = layer_of(first.trim_end_matches(".rs"));
        let text = std::fs::read_to_string(file).expect("read");
        let mut roots = vec!["crate::"];
        if parts.next().is_some_and(|p| p == "mod.rs") {
            roots.push("super::");
        }
        for (number, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for module in roots.iter().flat_map(|root| named(code, root)) {
                if layer_of(&module) > own {
                    upward.push(format!(
                        "src/{}:{}: names crate::{module}",
                        relative.display(),
                        number + 1
                    ));
                }
            }
        }
    }
    assert!(files.len() > 50, "found only {} files", files.len());
    assert!(
        upward.is_empty(),
        "imports that run up the layers:\n{}",
        upward.join("\n")
    );
}

/// The check itself catches what it is for.
#[test]
fn an_upward_import_is_seen() {
    let root = "crate::";
    assert_eq!(
        named("use crate::front::manager::LockManager;", root),
        ["front"]
    );
    assert_eq!(
        named("use crate::{keys, node::Conn};", root),
        ["keys", "node"]
    );
    assert_eq!(named("use super::actors::Shared;", "super::"), ["actors"]);
    assert!(layer_of("front") > layer_of("wire"));
    assert_eq!(layer_of("keys"), 0);
}
