//! Two things docs/architecture.md and the other docs claim, checked on the
//! repository. First the layering: every file of `src/` names (in code, not in
//! comments) only modules of its own layer or of the layers below it. The
//! layers, bottom up: the words (`src/*.rs`), `wire/`, `node/`, `actors/`,
//! `front/`. A message that must travel upward goes through a `Recipient` of a
//! type defined below, so nothing here has a reason to fail but an import that
//! runs the wrong way. Second, the names: every file path and Rust name that
//! README.md and docs/*.md write in backticks or in a diagram exists, since
//! rustdoc's `-D warnings` cannot see markdown. Run it alone with
//! `cargo test --test layers`.

use std::collections::{HashMap, HashSet};
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

/// The library reaches nothing outside `src/` by `#[path]`: its unit tests
/// take the test harness as the `lockwarden-testkit` crate (compiled once),
/// not by including `tests/support/` files, and no history is told in its
/// comments (the reason for a choice stays, in the present tense; what
/// changed and when belongs in CHANGELOG.md).
#[test]
fn src_includes_nothing_by_path_and_tells_no_history() {
    let mut files = Vec::new();
    sources(Path::new("src"), &mut files);
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read a source file");
        for (n, line) in text.lines().enumerate() {
            let history = line.contains("used to ")
                || line
                    .match_indices("issue ")
                    .any(|(at, m)| line[at + m.len()..].starts_with(|c: char| c.is_ascii_digit()));
            if line.trim_start().starts_with("#[path") || history {
                found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "in src/:\n{}", found.join("\n"));
}

/// Names in backticks that belong to someone else: Redis, Redisson, redis-rs,
/// actix, tokio, the standard library, other crates. Each line says why; a
/// name of this crate never belongs here (fix the doc instead). Names that
/// are Java by their shape (`getLock`, `RLock`, `RedissonSemaphore`) need no
/// entry, see [`rust_names`].
const ALLOWED: &[(&str, &str)] = &[
    // Rust and its standard library.
    ("Some", "std"),
    ("Send", "std"),
    ("Display", "std"),
    ("Drop", "std"),
    ("map_err", "std Result"),
    ("max", "Lua's math.max in a script's words"),
    ("flock", "the flock(1) command"),
    // actix and actix-web.
    ("Supervisor", "actix"),
    ("HttpServer", "actix-web"),
    ("Data", "actix-web's web::Data"),
    ("Recipient", "actix"),
    ("WeakRecipient", "actix"),
    ("WeakAddr", "actix"),
    ("System", "actix"),
    ("MailboxError", "actix"),
    ("ResponseFuture", "actix"),
    ("run_interval", "actix AsyncContext"),
    ("send", "actix Addr::send"),
    ("do_send", "actix Addr::do_send"),
    ("ResponseError", "actix-web"),
    ("HttpResponse", "actix-web"),
    ("Logger", "actix-web's middleware::Logger"),
    // redis-rs.
    ("ConnectionManager", "redis-rs"),
    ("ConnectionLike", "redis-rs"),
    ("SentinelClient", "redis-rs"),
    ("SentinelClientBuilder", "redis-rs"),
    ("Script", "redis-rs (redis::Script)"),
    ("Client", "redis-rs (redis::Client)"),
    ("UnexpectedReturnType", "redis-rs ErrorKind"),
    ("Parse", "redis-rs ErrorKind"),
    // Redis's own words: INFO fields, and the system's.
    ("usec_per_call", "Redis INFO commandstats"),
    ("cmdstat_wait", "Redis INFO commandstats"),
    ("VmRSS", "Linux /proc/<pid>/status"),
    ("EX_TEMPFAIL", "sysexits.h (the command exits 75)"),
    // tokio, metrics and the bench's peers.
    ("Notify", "tokio::sync::Notify"),
    ("PrometheusBuilder", "metrics-exporter-prometheus"),
    ("set_retry", "rslock's LockManager"),
    // Redisson (Java), where the shape does not say so.
    ("LockOptions", "Redisson's LockOptions.BackOff"),
    (
        "NON_REENTRANT_REACQUIRE",
        "Redisson's error for a non-reentrant re-entry",
    ),
];

/// Crates whose paths a doc may name (`redis::Script`, `tokio::sync::watch`):
/// a span starting with one is not this crate's to check.
const OTHER_CRATES: &[&str] = &[
    "std",
    "core",
    "alloc",
    "redis",
    "tokio",
    "actix",
    "actix_web",
    "metrics",
    "i64",
    "u64",
];

/// What the crate's Rust sources define and say, and which files the
/// repository holds: what a doc's backticked span is checked against.
#[derive(Default)]
struct Index {
    /// Names in a defining place: after `struct`, `enum`, `trait`, `type`,
    /// `fn`, `const`, `static`, `mod`, `macro_rules!`; a variant (a line
    /// directly inside an `enum` body); a field (`name: ...` first on a
    /// line); a module's file or folder name. Each with the files that
    /// define it.
    defined: HashMap<String, HashSet<String>>,
    /// The files where a type is defined or has an `impl`, or a module is
    /// declared: where `Type::name` must find `name`.
    homes: HashMap<String, HashSet<String>>,
    /// A macro called on a type at the start of a line (`impl_kind_setters!(Acquire,
    /// ...)`), as (macro, type): the macro's file is a home of the type too.
    macro_uses: Vec<(String, String)>,
    /// Every identifier-like word anywhere in the code, strings and Lua
    /// scripts included: what a bare `snake_case` span must be one of.
    words: HashSet<String>,
    /// Every file and folder of the repository (folders end in `/`),
    /// relative to its root, `target/` and `.git/` left out.
    files: Vec<String>,
}

/// The type an `impl` line is for: `impl<T> Handler<M> for Foo<T> {` ->
/// `Foo`, `impl Bar {` -> `Bar`.
fn impl_target(code: &str) -> Option<&str> {
    let code = code.trim_start();
    let rest = code
        .strip_prefix("impl")
        .or_else(|| code.strip_prefix("unsafe impl"))?;
    if !rest.starts_with([' ', '<']) {
        return None;
    }
    let rest = rest.rsplit(" for ").next().unwrap_or(rest).trim_start();
    // Leading generics of the impl itself: `<T: Trait> Foo<T>`.
    let rest = match rest.strip_prefix('<') {
        Some(inner) => {
            let mut depth = 1;
            let end = inner.find(|c| {
                depth += match c {
                    '<' => 1,
                    '>' => -1,
                    _ => 0,
                };
                depth == 0
            })?;
            inner[end + 1..].trim_start()
        }
        None => rest,
    };
    let path = rest.split(['<', ' ', '{']).next()?;
    path.rsplit("::").next().filter(|name| !name.is_empty())
}

/// The identifier-like words of a line.
fn words_of(line: &str) -> impl Iterator<Item = &str> {
    line.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
}

impl Index {
    /// Notes that `file` defines `name`.
    fn define(&mut self, name: &str, file: &str) {
        let files = self.defined.entry(name.to_string()).or_default();
        files.insert(file.to_string());
    }

    /// Adds what one Rust source file, `file` from the root, defines and says.
    fn add_source(&mut self, file: &str, text: &str) {
        const KEYWORDS: &[&str] = &[
            "struct",
            "enum",
            "trait",
            "type",
            "fn",
            "const",
            "static",
            "mod",
            "union",
            "macro_rules",
        ];
        let mut depth = 0usize;
        // The depth of the `enum` body being read: its variants sit there.
        let mut variants_at: Option<usize> = None;
        for line in text.lines() {
            self.words.extend(words_of(line).map(str::to_string));
            let code = line.split("//").next().unwrap_or("");
            let words: Vec<&str> = words_of(code).collect();
            for pair in words.windows(2) {
                if KEYWORDS.contains(&pair[0]) {
                    self.define(pair[1], file);
                    let homes = self.homes.entry(pair[1].to_string()).or_default();
                    homes.insert(file.to_string());
                }
            }
            if let Some((called, on)) = code.trim_start().split_once("!(") {
                let on = words_of(on).next().unwrap_or_default();
                let is_name =
                    |w: &str| !w.is_empty() && w.chars().all(|c| c.is_alphanumeric() || c == '_');
                if is_name(called) && on.starts_with(char::is_uppercase) {
                    self.macro_uses.push((called.to_string(), on.to_string()));
                }
            }
            if let Some(implemented) = impl_target(code) {
                let homes = self.homes.entry(implemented.to_string()).or_default();
                homes.insert(file.to_string());
            }
            let bare = code.trim_start();
            let bare = bare
                .strip_prefix("pub(crate) ")
                .or_else(|| bare.strip_prefix("pub(super) "))
                .or_else(|| bare.strip_prefix("pub "))
                .unwrap_or(bare);
            let name_end = bare
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(bare.len());
            let (name, after) = bare.split_at(name_end);
            if !name.is_empty() {
                let is_field = after.starts_with(": ") && !name.starts_with(char::is_uppercase);
                let is_variant = variants_at == Some(depth)
                    && name.starts_with(char::is_uppercase)
                    && (after.is_empty()
                        || [",", " {", "(", " ="].iter().any(|a| after.starts_with(a)));
                if is_field || is_variant {
                    self.define(name, file);
                }
            }
            let before = depth;
            depth += code.matches('{').count();
            depth = depth.saturating_sub(code.matches('}').count());
            if words.contains(&"enum") && depth > before {
                variants_at = Some(before + 1);
            } else if variants_at.is_some_and(|at| depth < at) {
                variants_at = None;
            }
        }
    }

    /// Indexes the repository at `root`: its files, and the Rust sources of
    /// `src/`, `tests/`, `benches/`, `examples/` (and the words of `lua/`).
    fn of_repository(root: &Path) -> Index {
        let mut index = Index::default();
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).expect("read a folder") {
                let path = entry.expect("entry").path();
                let relative = path.strip_prefix(root).expect("under root");
                let relative = relative.to_string_lossy().replace('\\', "/");
                if relative == "target" || relative == ".git" {
                    continue;
                }
                let stem = path.file_stem().map(|s| s.to_string_lossy().to_string());
                if path.is_dir() {
                    index.files.push(format!("{relative}/"));
                    index.define(stem.as_deref().unwrap_or_default(), &relative);
                    stack.push(path);
                    continue;
                }
                index.files.push(relative.clone());
                let is_code = ["src/", "tests/", "benches/", "examples/", "lua/"]
                    .iter()
                    .any(|top| relative.starts_with(top));
                let ext = path.extension().map(|e| e.to_string_lossy().to_string());
                if is_code && ext.as_deref() == Some("rs") {
                    index.define(stem.as_deref().unwrap_or_default(), &relative);
                    let text = std::fs::read_to_string(&path).expect("read a source");
                    index.add_source(&relative, &text);
                } else if is_code && ext.as_deref() == Some("lua") {
                    let text = std::fs::read_to_string(&path).expect("read a script");
                    index.words.extend(words_of(&text).map(str::to_string));
                }
            }
        }
        index
    }

    /// Where `owner` lives, when `name` is defined but not there: the files
    /// that define or implement the type `owner`, or of the module `owner`.
    /// `None` when either is undefined (that is reported on its own).
    fn outside(&self, owner: &str, name: &str) -> Option<String> {
        let defining = self.defined.get(name)?;
        let mut homes: Vec<&String> = self.homes.get(owner).into_iter().flatten().collect();
        for (called, on) in &self.macro_uses {
            if on == owner {
                homes.extend(self.defined.get(called).into_iter().flatten());
            }
        }
        let module_file = format!("/{owner}.rs");
        let module_folder = format!("/{owner}/");
        homes.extend(self.files.iter().filter(|file| {
            file.ends_with(&module_file) || (file.contains(&module_folder) && !file.ends_with('/'))
        }));
        if homes.is_empty() || homes.iter().any(|home| defining.contains(*home)) {
            return None;
        }
        homes.sort();
        homes.dedup();
        let shown: Vec<&str> = homes.iter().take(3).map(|h| h.as_str()).collect();
        Some(shown.join(", ") + if homes.len() > 3 { ", ..." } else { "" })
    }

    /// Whether `path`, as a doc names it, is a file or folder here: from the
    /// root when it starts with a top folder (or names a root file), else
    /// under `src/` or `lua/` (the docs write `node/replicas.rs` for
    /// `src/node/replicas.rs`, `lock/mod.rs` for `src/actors/lock/mod.rs`,
    /// `acquire.lua` for `lua/acquire.lua`; a test, bench or example is named
    /// from the root). A `<placeholder>` stands for a file to be added: its
    /// folder must be there.
    fn has_file(&self, path: &str) -> bool {
        let path = match path.find('<') {
            Some(at) => &path[..path[..at].rfind('/').map_or(0, |slash| slash + 1)],
            None => path,
        };
        let rooted = ROOTS.iter().any(|top| path.starts_with(top));
        let wanted = [path.to_string(), format!("{}/", path.trim_end_matches('/'))];
        self.files.iter().any(|file| {
            let under = file.starts_with("src/") || file.starts_with("lua/");
            wanted
                .iter()
                .any(|w| file == w || (!rooted && under && file.ends_with(&format!("/{w}"))))
        })
    }
}

/// The top folders of the repository: a path starting with one is read from
/// the root.
const ROOTS: &[&str] = &[
    "src/",
    "tests/",
    "benches/",
    "examples/",
    "docs/",
    "lua/",
    ".ci/",
];

/// The extensions of the files a doc names.
const EXTENSIONS: &[&str] = &[".rs", ".md", ".lua", ".toml", ".sh", ".json", ".png"];

/// Whether a span names a file or folder of the repository: no spaces, no
/// `:` (a URL, a Redis key), not absolute or outside (`/proc/...`,
/// `../...`, `$VAR/...`), no elision (`...`); and it ends in a known
/// extension, or starts with a top folder, or is a folder (`node/sentinel/`).
fn is_path(span: &str) -> bool {
    let plain = !span.contains(char::is_whitespace)
        && !span.contains(':')
        && !span.contains("...")
        && !span.starts_with(['/', '$', '~'])
        && !span.starts_with("..")
        && span.len() > 1;
    let named_like_file = EXTENSIONS
        .iter()
        .any(|e| span.ends_with(e) && span.len() > e.len() && !span.starts_with('.'))
        || ROOTS
            .iter()
            .any(|top| span.starts_with(top) || span == top.trim_end_matches('/'))
        || (span.ends_with('/')
            && span
                .chars()
                .all(|c| c.is_alphanumeric() || "_-/".contains(c)));
    plain && named_like_file
}

/// The names of this crate a span uses, each with whether it must be defined
/// (`true`) or only appear somewhere in the code (`false`); `None` when the
/// span is not Rust. The rules, in order:
/// - the span is a path of identifiers joined by `::` and `.`, each maybe
///   followed by a bracketed group (`Acquire::new(key).spin()`,
///   `LockError::NotReplicated { acked, wanted }`, `Recipient<Release>`),
///   then maybe `?` or `.await`; anything else (prose, a command, a key,
///   a flag, a number) is not Rust;
/// - a path starting in another crate (`redis::`, `tokio::`), or with a name
///   of [`ALLOWED`], or holding a Java-shaped name (`getLock`: lower camel
///   case; `RLock`, `RedissonSemaphore`: Redisson's prefixes) is not ours;
/// - every name of a `::` path is checked (`Need::BestEffort`: `Need` and
///   `BestEffort`, the latter where `Need` is defined or implemented); after
///   a `.`, only a call (`guard.lost()`: `lost`);
/// - alone, a `CamelCase` name or a call (`release()`) is checked; a bare
///   `snake_case` or `SCREAMING_CASE` name with an underscore (`with_latch`,
///   a script's, a metric's or a variable's name) must appear in the code
///   (strings and `lua/` count); a lone word without one (`read`, `WAIT`)
///   is English or Redis and is not checked.
fn rust_names(span: &str) -> Option<Vec<Claim>> {
    // The span with every bracketed group emptied: `a::b(x, y)` -> `a::b()`.
    let mut shape = String::new();
    let mut open = Vec::new();
    for c in span.trim().chars() {
        match c {
            '(' | '[' | '{' | '<' => {
                if open.is_empty() {
                    shape.push(c);
                }
                open.push(c);
            }
            ')' | ']' | '}' | '>' => {
                let opener = open.pop()?;
                if !matches!(
                    (opener, c),
                    ('(', ')') | ('[', ']') | ('{', '}') | ('<', '>')
                ) {
                    return None;
                }
                if open.is_empty() {
                    shape.push(c);
                }
            }
            _ if open.is_empty() => shape.push(c),
            _ => {}
        }
    }
    if !open.is_empty() {
        return None;
    }
    let shape = shape.replace(" {", "{");
    let shape = shape.strip_suffix(".await").unwrap_or(&shape);
    let shape = shape.strip_suffix('?').unwrap_or(shape);
    let mut rest = shape.strip_prefix('.').unwrap_or(shape);
    // (separator before, name, called) for each name of the path.
    let mut parts: Vec<(&str, &str, bool)> = Vec::new();
    let mut separator = if shape.starts_with('.') { "." } else { "" };
    loop {
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let name = &rest[..end];
        if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
            return None;
        }
        rest = &rest[end..];
        let called = rest.starts_with("()");
        for group in ["()", "[]", "{}", "<>"] {
            rest = rest.strip_prefix(group).unwrap_or(rest);
        }
        parts.push((separator, name, called));
        if rest.is_empty() {
            break;
        }
        if let Some(more) = rest.strip_prefix("::") {
            separator = "::";
            rest = more;
        } else if let Some(more) = rest.strip_prefix('.') {
            separator = ".";
            rest = more;
        } else {
            return None;
        }
    }
    let java = |name: &str| {
        let camel = name.starts_with(char::is_lowercase) && name.contains(char::is_uppercase);
        let redisson = name.starts_with("Redisson")
            || (name.starts_with('R') && name[1..].starts_with(char::is_uppercase));
        camel || redisson
    };
    let first = parts[0].1;
    if OTHER_CRATES.contains(&first)
        || parts
            .iter()
            .any(|(_, name, _)| java(name) || ALLOWED.iter().any(|(a, _)| a == name))
    {
        return Some(Vec::new());
    }
    if ["crate", "self", "super"].contains(&first) {
        parts.remove(0);
    }
    let is_path = parts.iter().any(|(separator, ..)| *separator == "::");
    let mut claims = Vec::new();
    for (at, (separator, name, called)) in parts.iter().enumerate() {
        let in_path = *separator == "::" || (at == 0 && is_path && *separator != ".");
        let camel = name.starts_with(char::is_uppercase) && name.contains(char::is_lowercase);
        let alone = parts.len() == 1;
        if in_path || *called || (alone && camel) {
            claims.push(Claim::Defined(name.to_string()));
        } else if alone && name.contains('_') && *separator != "." {
            claims.push(Claim::Appears(name.to_string()));
        }
        if *separator == "::" && at > 0 {
            claims.push(Claim::Within(parts[at - 1].1.to_string(), name.to_string()));
        }
    }
    Some(claims)
}

/// What a span says about the code.
#[derive(Debug, PartialEq)]
enum Claim {
    /// This name is defined (a type, fn, const, module, variant or field).
    Defined(String),
    /// This name appears in the code or a script.
    Appears(String),
    /// `Owner::name`: the name is defined where the owner is defined or
    /// implemented (a type), or in the owner's files (a module).
    Within(String, String),
}

/// The inline code spans of a markdown text, with the line each starts on;
/// fenced blocks are left out (see [`diagram_names`]). A span may run over a
/// line end, not over a blank line.
fn code_spans(text: &str) -> Vec<(usize, String)> {
    let mut prose = String::new();
    let mut fenced = false;
    for line in text.lines() {
        let fence = line.trim_start().starts_with("```") || line.trim_start().starts_with("~~~");
        if fence {
            fenced = !fenced;
        } else if !fenced {
            prose.push_str(line);
        }
        prose.push('\n');
    }
    let mut spans = Vec::new();
    let mut rest = prose.as_str();
    let mut line = 1;
    while let Some(at) = rest.find('`') {
        line += rest[..at].matches('\n').count();
        rest = &rest[at..];
        let run = rest.len() - rest.trim_start_matches('`').len();
        let (ticks, after) = rest.split_at(run);
        // The closing run: the same number of backticks, no more.
        let mut end = None;
        let mut from = 0;
        while let Some(found) = after[from..].find(ticks) {
            let at = from + found;
            let longer = after[at + run..].starts_with('`');
            if !longer {
                end = Some(at);
                break;
            }
            from = at + run + after[at + run..].len()
                - after[at + run..].trim_start_matches('`').len();
        }
        match end {
            Some(end) if !after[..end].lines().skip(1).any(|l| l.trim().is_empty()) => {
                let content = after[..end].replace('\n', " ").replace("\\|", "|");
                spans.push((line, content.trim().to_string()));
                line += after[..end].matches('\n').count();
                rest = &after[end + run..];
            }
            _ => rest = after,
        }
    }
    spans
}

/// The file names and `CamelCase` names of a markdown text's diagrams (its
/// fenced blocks with no language or `text`), with their lines: the layer
/// and message drawings of docs/architecture.md name files and types without
/// backticks. A block in a language (shell, Rust, JSON, SQL) is left out: it
/// is an example, not a claim about the code. Only what looks like a path
/// ([`is_path`]) or a name of two humps or more (`LockManager`) is taken, so
/// that words of prose (`Redis`, `Sentinels`) are not.
fn diagram_names(text: &str) -> Vec<(usize, String)> {
    let mut names = Vec::new();
    let mut diagram = None;
    for (number, line) in text.lines().enumerate() {
        if let Some(info) = line.trim_start().strip_prefix("```") {
            diagram = match diagram {
                Some(_) => None,
                None => Some(info.trim().is_empty() || info.trim() == "text"),
            };
            continue;
        }
        if diagram != Some(true) {
            continue;
        }
        let words = line.split(|c: char| !(c.is_alphanumeric() || "_./<>".contains(c)));
        for word in words {
            let word = word.trim_end_matches('.').trim_start_matches("./");
            let humps = word.chars().filter(char::is_ascii_uppercase).count();
            let camel = word.starts_with(char::is_uppercase)
                && word.contains(char::is_lowercase)
                && humps >= 2
                && word.chars().all(char::is_alphanumeric);
            if is_path(word) || camel {
                names.push((number + 1, word.to_string()));
            }
        }
    }
    names
}

/// What is wrong with a `cargo` command of the docs, if anything: the target
/// of `--test`, `--example` or `--bench` must be a file or folder of its own
/// in `tests/`, `examples/` or `benches/`, and a filter after `--` a part of
/// some name in the code (the test it runs). A filter right after a grouped
/// test target (`--test topologies sentinel::`, `tests/topologies/main.rs`)
/// starts with one of the group's files, and the rest is part of some name.
fn cargo_drift(span: &str, index: &Index) -> Option<String> {
    let words: Vec<&str> = span.split_whitespace().collect();
    let mut missing = Vec::new();
    for triple in words.windows(3).filter(|w| w[0] == "--test") {
        let (group, filter) = (triple[1], triple[2]);
        let grouped = index.files.iter().any(|f| *f == format!("tests/{group}/"));
        let Some((file, rest)) = filter.split_once("::") else {
            continue;
        };
        if !grouped || filter.starts_with('-') {
            continue;
        }
        if !index.files.contains(&format!("tests/{group}/{file}.rs")) {
            missing.push(format!("no file tests/{group}/{file}.rs for `{filter}`"));
        } else if !rest.is_empty() && !index.words.iter().any(|w| w.contains(rest)) {
            missing.push(format!("no test name contains `{rest}`"));
        }
    }
    for (at, pair) in words.windows(2).enumerate() {
        let folder = match pair[0] {
            "--test" => "tests",
            "--example" => "examples",
            "--bench" => "benches",
            "--" => {
                let filter = pair[1];
                if !index.words.iter().any(|w| w.contains(filter)) {
                    missing.push(format!("no test name contains `{filter}`"));
                }
                continue;
            }
            _ => continue,
        };
        let target = pair[1];
        let file = format!("{folder}/{target}.rs");
        let dir = format!("{folder}/{target}/");
        if !index.files.iter().any(|f| *f == file || *f == dir) {
            missing.push(format!(
                "no target {file} (or {dir}) for `{}`",
                words[at..=at + 1].join(" ")
            ));
        }
    }
    (!missing.is_empty()).then(|| missing.join("; "))
}

/// What is wrong with one span, if anything.
fn drift(span: &str, index: &Index) -> Option<String> {
    if span.split_whitespace().any(|w| w == "cargo") {
        return cargo_drift(span, index);
    }
    if is_path(span) {
        return (!index.has_file(span))
            .then(|| "no such file or folder (a path not from the root is looked up under src/ and lua/; name tests, benches and examples from the root)".to_string());
    }
    let missing: Vec<String> = rust_names(span)?
        .into_iter()
        .filter_map(|claim| match claim {
            Claim::Defined(name) => (!index.defined.contains_key(&name)).then(|| {
                format!("`{name}` is defined nowhere in src/, tests/, benches/, examples/")
            }),
            Claim::Appears(name) => (!index.words.contains(&name))
                .then(|| format!("`{name}` appears nowhere in the code or lua/")),
            Claim::Within(owner, name) => index
                .outside(&owner, &name)
                .map(|homes| format!("`{name}` is defined, but not where `{owner}` is ({homes})")),
        })
        .collect();
    (!missing.is_empty()).then(|| missing.join("; "))
}

/// Every file path and Rust name the docs (README.md, docs/*.md) put in
/// backticks or in a diagram exists in the repository.
///
/// The rules (details at [`is_path`], [`rust_names`], [`diagram_names`]):
/// - a path (`node/replicas.rs`, `src/node/`, `acquire.lua`) is a file or
///   folder: from the root if it starts with `src/`, `tests/`, `benches/`,
///   `examples/`, `docs/`, `lua/`, else under `src/` or `lua/`;
/// - a Rust path (`Need::BestEffort`, `Config::sync_replicas(1, 300 ms)`,
///   `guard.lost()`) names only things defined in src/, tests/, benches/ or
///   examples/ (a type, fn, const, module, variant or field of that name);
///   a lone `CamelCase` name too; a lone `snake_case`/`SCREAMING_CASE` name
///   with an underscore appears somewhere in the code or lua/;
/// - `cargo test --test X -- f` (and `--example`, `--bench`) names a target
///   that exists and a filter some test name contains; `cargo test --test
///   group file::f` a file of the group `tests/group/` and an `f` likewise;
/// - not checked: prose, shell commands, Redis commands (`WAIT`), keys and
///   patterns (`redisson_lock__channel:{name}`), flags, numbers, Java names
///   (`getSpinLock`, `RLock`, `RedissonSpinLock`), paths of other crates
///   (`redis::Script`), and the names of [`ALLOWED`].
///
/// CHANGELOG.md is history and is not read.
#[test]
fn the_docs_name_only_what_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let index = Index::of_repository(root);
    let mut docs = vec![root.join("README.md")];
    docs.extend(markdown_in(&root.join("docs")));
    docs.extend(markdown_in(&root.join("docs/design")));
    docs.sort();
    let mut drifts = Vec::new();
    let mut checked = 0;
    for doc in &docs {
        let text = std::fs::read_to_string(doc).expect("read a doc");
        let name = doc.strip_prefix(root).expect("under root").display();
        for (line, span) in code_spans(&text).into_iter().chain(diagram_names(&text)) {
            checked += 1;
            if let Some(what) = drift(&span, &index) {
                drifts.push(format!("{name}:{line}: `{span}`: {what}"));
            }
        }
    }
    assert!(checked > 500, "read only {checked} spans");
    assert!(
        drifts.is_empty(),
        "{} names in the docs (in backticks or in a diagram) name nothing in the repository:\n{}\n\
         Fix the doc (the name was renamed, moved or removed), or, if the name \
         belongs to Redis, Redisson or another crate, add it to ALLOWED in \
         tests/layers.rs with the reason.",
        drifts.len(),
        drifts.join("\n")
    );
}

/// The `.md` files of `dir`.
fn markdown_in(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read a docs folder") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "md") {
            found.push(path);
        }
    }
    found.sort();
    found
}

/// The files a design page says it covers: the backticked paths of its
/// paragraph that starts with `Files:`.
fn listed_files(page: &str) -> Option<Vec<String>> {
    let at = page.find("\nFiles: ")?;
    let paragraph = page[at + 1..].split("\n\n").next().unwrap_or("");
    let spans = paragraph.split('`').skip(1).step_by(2);
    Some(spans.map(str::to_string).collect())
}

/// Every `.rs` file under `dir` (relative to `root`), as `dir/.../x.rs`.
fn rust_files_under(root: &Path, dir: &str) -> Vec<String> {
    let mut found = Vec::new();
    sources(&root.join(dir), &mut found);
    let mut names: Vec<String> = found
        .iter()
        .map(|p| {
            p.strip_prefix(root)
                .expect("under root")
                .display()
                .to_string()
        })
        .collect();
    names.sort();
    names
}

/// Every page under docs/design/ opens with the files it covers: each exists,
/// and a folder it lists has every one of its files named on the page, so that
/// a file renamed, or added to the folder, without the page saying so fails
/// here.
#[test]
fn design_pages_list_their_files() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let pages = markdown_in(&root.join("docs/design"));
    assert!(pages.len() >= 5, "design pages: {pages:?}");
    let mut wrong = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).expect("read a design page");
        let name = page.strip_prefix(root).expect("under root").display();
        let Some(files) = listed_files(&text) else {
            wrong.push(format!("{name}: no `Files:` paragraph"));
            continue;
        };
        for file in &files {
            if !root.join(file).exists() {
                wrong.push(format!("{name}: `{file}` does not exist"));
            }
            if file.ends_with('/') {
                for inside in rust_files_under(root, file) {
                    if !files.contains(&inside) {
                        wrong.push(format!("{name}: `{inside}` is in `{file}` but not listed"));
                    }
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// docs/architecture.md's count of actor kinds is the number of types that
/// implement `Actor` in `src/`.
#[test]
fn the_map_counts_the_actors_there_are() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let map = std::fs::read_to_string(root.join("docs/architecture.md")).expect("the map");
    let claimed: usize = map
        .split("There are ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("docs/architecture.md says \"There are N kinds of actor\"");
    let mut files = Vec::new();
    sources(&root.join("src"), &mut files);
    let mut actors = HashSet::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read a source file");
        for line in text.lines().filter(|l| l.starts_with("impl")) {
            if let Some((_, ty)) = line.split_once(" Actor for ") {
                let ty = ty
                    .split(|c: char| !c.is_alphanumeric())
                    .next()
                    .unwrap_or("");
                actors.insert(ty.to_string());
            }
        }
    }
    assert_eq!(claimed, actors.len(), "actor kinds in src/: {actors:?}");
}

/// The docs check itself catches what it is for: a variant that is gone, a
/// method renamed, a file moved; and lets by what is not the crate's.
#[test]
fn a_drifted_name_is_seen() {
    let mut index = Index::default();
    index.add_source("src/other.rs", "pub struct Other;\n");
    index.add_source(
        "src/need.rs",
        "pub enum Need {\n    Must,\n    BestEffort { why: u8 },\n}\n\
         impl Need { pub fn settle(&self) {} }\nconst KEEP: u8 = 3;\n",
    );
    index.files = vec![
        "src/".into(),
        "src/node/".into(),
        "src/node/replicas.rs".into(),
        "tests/layers.rs".into(),
        "tests/group/".into(),
        "tests/group/main.rs".into(),
        "tests/group/need.rs".into(),
        "benches/locks/".into(),
    ];
    for fine in [
        "Need::BestEffort",
        "Need::Must",
        "Need::settle()",
        "x.settle().await",
        "BestEffort { why: 1 }",
        "node/replicas.rs",
        "src/node/",
        "src/node/<kind>.rs",
        "redis::Script",
        "getSpinLock",
        "RedissonSpinLock",
        "WAIT",
        "cargo test --test layers",
        "redisson_lock__channel:{name}",
        "--sync-replicas",
        "cargo test --test layers -- settle",
        "cargo test --test group need::",
        "cargo test --test group need::settle",
        "LOCKWARDEN_X=1 cargo bench --bench locks",
    ] {
        assert_eq!(drift(fine, &index), None, "{fine}");
    }
    for drifted in [
        "Need::Hope",
        "Need::reconcile",
        "x.reconcile()",
        "Hope",
        "node/replicas_gone.rs",
        "src/replicas.rs",
        "src/wire/<kind>.rs",
        "KEEP_GONE",
        "Other::settle",
        "cargo test --test gone",
        "cargo test --test layers -- hope",
        "cargo test --test group gone::",
        "cargo test --test group need::hope",
    ] {
        assert!(drift(drifted, &index).is_some(), "{drifted}");
    }
    assert_eq!(
        code_spans("a `b`\n```\n`c`\n```\n`d\ne` ``f`g``"),
        [
            (1, "b".to_string()),
            (5, "d e".to_string()),
            (6, "f`g".to_string())
        ]
    );
}

/// The longest a function under `src/node/` may be, and the longest a part of
/// `node::connect` (`src/node/connect.rs`, one function per deployment) may
/// be: the seam is read by someone adding a deployment, who must be able to
/// take in each step whole.
const NODE_FN_LINES: usize = 80;
const CONNECT_FN_LINES: usize = 60;

/// Each `fn` of `text` with its length in lines, from the line that names it
/// to the `}` at its own indentation that closes it; a declaration without a
/// body (a trait's) is left out.
fn function_lengths(text: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let code = line.trim_start();
        let indent = &line[..line.len() - code.len()];
        let mut words = code.split_whitespace().peekable();
        while let Some(w) = words.peek() {
            let qualifier = w.starts_with("pub") || ["async", "const", "unsafe"].contains(w);
            if !qualifier {
                break;
            }
            words.next();
        }
        if words.next() != Some("fn") {
            continue;
        }
        let name: String = words
            .next()
            .unwrap_or("")
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let mut end = None;
        for (i, l) in lines.iter().enumerate().skip(at) {
            if i == at && l.trim_end().ends_with('}') && l.contains('{') {
                end = Some(i);
                break;
            }
            if l.trim_end().ends_with(';') && !lines[at..=i].iter().any(|s| s.contains('{')) {
                break;
            }
            if l.trim_end() == format!("{indent}}}") {
                end = Some(i);
                break;
            }
        }
        if let Some(end) = end {
            found.push((name, at + 1, end - at + 1));
        }
    }
    found
}

/// No function in `src/node/` is longer than [`NODE_FN_LINES`], and no part of
/// `node::connect` longer than [`CONNECT_FN_LINES`].
#[test]
fn node_functions_stay_short() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    sources(&root.join("src/node"), &mut files);
    assert!(files.len() > 10, "found only {} files", files.len());
    let mut long = Vec::new();
    let mut connect_parts = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read a source file");
        let relative = file.strip_prefix(root).expect("under root").display();
        let connect = file.ends_with("src/node/connect.rs");
        for (name, line, length) in function_lengths(&text) {
            let most = match connect {
                true => CONNECT_FN_LINES,
                false => NODE_FN_LINES,
            };
            connect_parts += usize::from(connect);
            if length > most {
                long.push(format!(
                    "{relative}:{line}: fn {name} is {length} lines (at most {most})"
                ));
            }
        }
    }
    assert!(connect_parts >= 4, "node::connect's parts: {connect_parts}");
    assert!(long.is_empty(), "functions too long:\n{}", long.join("\n"));
}

/// The longest a function in `src/actors/` may be: the actors' rules read as
/// short steps, each named.
const ACTORS_FN_LINES: usize = 60;

/// No function in `src/actors/` is longer than [`ACTORS_FN_LINES`].
#[test]
fn actor_functions_stay_short() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    sources(&root.join("src/actors"), &mut files);
    assert!(files.len() > 20, "found only {} files", files.len());
    let mut long = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read a source file");
        let relative = file.strip_prefix(root).expect("under root").display();
        for (name, line, length) in function_lengths(&text) {
            if length > ACTORS_FN_LINES {
                long.push(format!(
                    "{relative}:{line}: fn {name} is {length} lines (at most {ACTORS_FN_LINES})"
                ));
            }
        }
    }
    assert!(long.is_empty(), "functions too long:\n{}", long.join("\n"));
}

/// The length check itself counts what it is for.
#[test]
fn a_long_function_is_seen() {
    let text = "fn one() {}\n\
                pub(crate) async fn two(\n    a: u8,\n) -> u8 {\n    a\n}\n\
                trait T {\n    fn bare(&self);\n    fn body(&self) {\n        let _ = 1;\n    }\n}\n";
    let lengths = function_lengths(text);
    assert_eq!(
        lengths,
        [
            ("one".to_string(), 1, 1),
            ("two".to_string(), 2, 5),
            ("body".to_string(), 9, 3)
        ]
    );
}
