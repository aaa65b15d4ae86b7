//! The shape of the crate's source, kept as ARCHITECTURE.md describes it:
//! small files, short functions, a short front page, and no import cycle
//! between files (a parent module may declare and re-export its children;
//! a child may use its parent's items only if the parent uses none of the
//! child's).
//!
//! Test code does not count: a file's tests (from its `#[cfg(test)] mod`)
//! and the test-only modules (`tests/`, `proptests/`,
//! `testkit.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

const MAX_FILE_LINES: usize = 900;
const MAX_FN_LINES: usize = 150;
const MAX_LIB_LINES: usize = 300;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `src/` that is not test-only, with its code
/// before its tests.
fn sources() -> BTreeMap<PathBuf, String> {
    fn walk(dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
        let mut entries: Vec<_> = fs::read_dir(dir)
            .expect("src/ is readable")
            .map(|entry| entry.expect("src/ is readable").path())
            .collect();
        entries.sort();
        for path in entries {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if path.is_dir() {
                if name != "tests" && name != "proptests" {
                    walk(&path, out);
                }
            } else if name.ends_with(".rs") && name != "testkit.rs" {
                let text = fs::read_to_string(&path).expect("a source file is UTF-8");
                let code = match text.find("\n#[cfg(test)]\nmod ") {
                    Some(end) => text[..end].to_owned(),
                    None => text,
                };
                out.insert(path, code);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(&src(), &mut out);
    out
}

fn relative(path: &Path) -> String {
    path.strip_prefix(src())
        .unwrap_or(path)
        .display()
        .to_string()
}

#[test]
fn no_source_file_is_longer_than_the_limit() {
    let long: Vec<String> = sources()
        .iter()
        .map(|(path, code)| (relative(path), code.lines().count()))
        .filter(|(_, lines)| *lines > MAX_FILE_LINES)
        .map(|(path, lines)| format!("{path}: {lines} lines before its tests"))
        .collect();
    assert!(
        long.is_empty(),
        "split these files by job (at most {MAX_FILE_LINES} lines before the tests):\n{}",
        long.join("\n")
    );
}

#[test]
fn no_function_is_longer_than_the_limit() {
    let mut long = Vec::new();
    for (path, code) in sources() {
        let lines: Vec<&str> = code.lines().collect();
        for (start, line) in lines.iter().enumerate() {
            let Some(name) = fn_name(line) else { continue };
            let indent = &line[..line.len() - line.trim_start().len()];
            // A declaration without a body (a trait's) ends at `;`.
            let signature: String = lines[start..lines.len().min(start + 30)].concat();
            let declaration_only = match (signature.find('{'), signature.find(';')) {
                (None, _) => true,
                (Some(body), Some(semicolon)) => semicolon < body,
                (Some(_), None) => false,
            };
            if declaration_only {
                continue;
            }
            let closing = format!("{indent}}}");
            let end = lines[start..]
                .iter()
                .enumerate()
                .position(|(k, l)| *l == closing || (k == 0 && l.trim_end().ends_with('}')))
                .map_or(lines.len(), |offset| start + offset);
            let length = end - start + 1;
            if length > MAX_FN_LINES {
                long.push(format!(
                    "{}:{}: `{name}` is {length} lines",
                    relative(&path),
                    start + 1
                ));
            }
        }
    }
    assert!(
        long.is_empty(),
        "split these functions (at most {MAX_FN_LINES} lines):\n{}",
        long.join("\n")
    );
}

/// The name of the fn a line starts, if it starts one.
fn fn_name(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    for prefix in [
        "pub(crate) ",
        "pub(super) ",
        "pub ",
        "const ",
        "async ",
        "unsafe ",
    ] {
        rest = rest.strip_prefix(prefix).unwrap_or(rest);
    }
    let rest = rest.strip_prefix("fn ")?;
    let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
    Some(&rest[..end])
}

#[test]
fn the_front_page_stays_short() {
    let lib = fs::read_to_string(src().join("lib.rs")).expect("lib.rs is readable");
    let lines = lib.lines().count();
    assert!(
        lines < MAX_LIB_LINES,
        "lib.rs is {lines} lines: the guide's chapters belong in docs/ (under {MAX_LIB_LINES})"
    );
}

#[test]
fn no_two_files_import_each_other_even_through_others() {
    let graph = Imports::of(&sources());
    let cycles = graph.cycles();
    let described: Vec<String> = cycles
        .iter()
        .map(|cycle| {
            let names: Vec<String> = cycle.iter().map(|p| relative(p)).collect();
            format!("- {}", names.join(" <-> "))
        })
        .collect();
    assert!(
        cycles.is_empty(),
        "these files import each other; move what they share to a module of its own:\n{}",
        described.join("\n")
    );
}

#[test]
fn the_import_graph_sees_what_a_file_uses() {
    // A guard for the guard: the graph must find real edges, or the cycle
    // check above would pass on anything.
    let graph = Imports::of(&sources());
    let processing = src().join("processing.rs");
    let queueing = src().join("processing/queueing.rs");
    let edges = graph
        .edges
        .get(&processing)
        .expect("processing.rs is a source");
    assert!(
        edges
            .iter()
            .any(|to| to.starts_with(src().join("persistence"))),
        "processing.rs patches through persistence/: {edges:?}"
    );
    assert!(graph.edges.contains_key(&queueing));
    assert!(graph.edges.values().map(BTreeSet::len).sum::<usize>() > 100);
}

/// Which file's items each file uses, following re-exports to the file
/// that defines an item.
struct Imports {
    edges: BTreeMap<PathBuf, BTreeSet<PathBuf>>,
}

impl Imports {
    fn of(sources: &BTreeMap<PathBuf, String>) -> Self {
        let lib = src().join("lib.rs");
        let mut edges = BTreeMap::new();
        for (file, code) in sources {
            let code = strip_comments(code);
            let mut to = BTreeSet::new();
            for path in used_paths(&code) {
                if let Some(target) = resolve_from(file, &path, 0)
                    && target != *file
                    && target != lib
                {
                    to.insert(target);
                }
            }
            edges.insert(file.clone(), to);
        }
        Imports { edges }
    }

    /// The strongly connected components of more than one file (Tarjan).
    fn cycles(&self) -> Vec<Vec<PathBuf>> {
        struct Walk<'a> {
            edges: &'a BTreeMap<PathBuf, BTreeSet<PathBuf>>,
            index: BTreeMap<&'a PathBuf, usize>,
            low: BTreeMap<&'a PathBuf, usize>,
            stack: Vec<&'a PathBuf>,
            on_stack: BTreeSet<&'a PathBuf>,
            found: Vec<Vec<PathBuf>>,
        }
        impl<'a> Walk<'a> {
            fn visit(&mut self, v: &'a PathBuf) {
                let n = self.index.len();
                self.index.insert(v, n);
                self.low.insert(v, n);
                self.stack.push(v);
                self.on_stack.insert(v);
                for w in self.edges.get(v).into_iter().flatten() {
                    if !self.edges.contains_key(w) {
                        continue;
                    }
                    if !self.index.contains_key(w) {
                        self.visit(w);
                        let low = self.low[v].min(self.low[w]);
                        self.low.insert(v, low);
                    } else if self.on_stack.contains(w) {
                        let low = self.low[v].min(self.index[w]);
                        self.low.insert(v, low);
                    }
                }
                if self.low[v] == self.index[v] {
                    let mut component = Vec::new();
                    while let Some(w) = self.stack.pop() {
                        self.on_stack.remove(w);
                        component.push(w.clone());
                        if w == v {
                            break;
                        }
                    }
                    if component.len() > 1 {
                        component.sort();
                        self.found.push(component);
                    }
                }
            }
        }
        let mut walk = Walk {
            edges: &self.edges,
            index: BTreeMap::new(),
            low: BTreeMap::new(),
            stack: Vec::new(),
            on_stack: BTreeSet::new(),
            found: Vec::new(),
        };
        for v in self.edges.keys() {
            if !walk.index.contains_key(v) {
                walk.visit(v);
            }
        }
        walk.found
    }
}

/// The code without `//` comments (doc links are not imports).
fn strip_comments(code: &str) -> String {
    code.lines()
        .map(|line| match line.find("//") {
            Some(at) if !line[..at].contains('"') => &line[..at],
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The `use` items of some code, as (text, start, end).
fn use_items(code: &str) -> Vec<(String, usize, usize)> {
    let mut items = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("use ") {
        let start = from + at;
        let boundary = start == 0 || {
            let before = code.as_bytes()[start - 1];
            !(before.is_ascii_alphanumeric() || before == b'_')
        };
        let Some(len) = code[start..].find(';') else {
            break;
        };
        let end = start + len;
        if boundary {
            items.push((code[start + 4..end].to_owned(), start, end));
        }
        from = if boundary { end } else { start + 4 };
    }
    items
}

/// Flattens a use tree: `a::{b, c::{d, e as f}}` to `a::b`, `a::c::d`,
/// `a::c::e as f`.
fn expand(tree: &str) -> Vec<String> {
    let tree: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    let Some(open) = tree.find('{') else {
        return vec![tree.trim().to_owned()];
    };
    let close = tree.rfind('}').unwrap_or(tree.len());
    let prefix = &tree[..open];
    let mut parts = Vec::new();
    let (mut depth, mut part) = (0, String::new());
    for c in tree[open + 1..close].chars() {
        match c {
            ',' if depth == 0 => parts.push(std::mem::take(&mut part)),
            '{' => {
                depth += 1;
                part.push(c);
            }
            '}' => {
                depth -= 1;
                part.push(c);
            }
            _ => part.push(c),
        }
    }
    parts.push(part);
    parts
        .iter()
        .filter(|p| !p.trim().is_empty())
        .flat_map(|p| expand(&format!("{prefix}{}", p.trim())))
        .collect()
}

/// The paths some code names: its `use` trees, and `crate::`, `super::`
/// and `self::` paths elsewhere.
fn used_paths(code: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let mut rest = String::new();
    let mut last = 0;
    for (tree, start, end) in use_items(code) {
        let tree = tree
            .trim_start_matches("pub(crate) ")
            .trim_start_matches("pub ");
        for path in expand(tree) {
            let path = path.split(" as ").next().unwrap_or("").trim().to_owned();
            paths.push(path.split("::").map(str::to_owned).collect());
        }
        rest.push_str(&code[last..start]);
        last = end;
    }
    rest.push_str(&code[last..]);
    for root in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(at) = rest[from..].find(root) {
            let start = from + at;
            from = start + root.len();
            let before = rest[..start].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':' || c == '$') {
                continue;
            }
            let len = rest[start..]
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(rest.len() - start);
            let path = rest[start..start + len].trim_end_matches(':');
            paths.push(path.split("::").map(str::to_owned).collect());
        }
    }
    paths
}

/// The file of module `name`, a child of the module whose file is `parent`.
fn child(parent: &Path, name: &str) -> Option<PathBuf> {
    let file_name = parent.file_name()?.to_str()?;
    let dir = if file_name == "mod.rs" || file_name == "lib.rs" {
        parent.parent()?.to_path_buf()
    } else {
        parent.with_extension("")
    };
    [
        dir.join(format!("{name}.rs")),
        dir.join(name).join("mod.rs"),
    ]
    .into_iter()
    .find(|candidate| candidate.is_file())
}

/// The file of the module that declares the module whose file is `file`.
fn parent(file: &Path) -> Option<PathBuf> {
    let name = file.file_name()?.to_str()?;
    if name == "lib.rs" {
        return None;
    }
    let mut dir = file.parent()?.to_path_buf();
    if name == "mod.rs" {
        dir = dir.parent()?.to_path_buf();
    }
    if dir == src() {
        return Some(src().join("lib.rs"));
    }
    [dir.with_extension("rs"), dir.join("mod.rs")]
        .into_iter()
        .find(|candidate| candidate.is_file())
}

/// Whether `file` defines an item called `name`.
fn defines(file: &Path, name: &str) -> bool {
    let text = fs::read_to_string(file).unwrap_or_default();
    [
        "struct", "enum", "fn", "trait", "type", "const", "static", "union",
    ]
    .iter()
    .any(|keyword| {
        let needle = format!("{keyword} {name}");
        text.match_indices(&needle).any(|(at, _)| {
            let after = text[at + needle.len()..].chars().next();
            !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
        })
    }) || text.contains(&format!("macro_rules! {name}"))
}

/// The path a `use` of `file` brings `name` in from.
fn reexport(file: &Path, name: &str) -> Option<Vec<String>> {
    let text = strip_comments(&fs::read_to_string(file).unwrap_or_default());
    for (tree, _, _) in use_items(&text) {
        let tree = tree
            .trim_start_matches("pub(crate) ")
            .trim_start_matches("pub ");
        for path in expand(tree) {
            let mut halves = path.split(" as ");
            let segments: Vec<String> = halves
                .next()
                .unwrap_or("")
                .trim()
                .split("::")
                .map(str::to_owned)
                .collect();
            let alias = halves
                .next()
                .map(|a| a.trim().to_owned())
                .or_else(|| segments.last().cloned());
            if alias.as_deref() == Some(name) && segments.last().is_some_and(|s| s != "self") {
                return Some(segments);
            }
        }
    }
    None
}

/// The file that defines what `segments` names, seen from module `start`.
fn resolve(start: PathBuf, segments: &[String], depth: usize) -> Option<PathBuf> {
    let mut current = start;
    for segment in segments {
        if let Some(next) = child(&current, segment) {
            current = next;
            continue;
        }
        if segment == "self" || segment == "*" || depth > 8 || defines(&current, segment) {
            return Some(current);
        }
        return match reexport(&current, segment) {
            Some(via) => resolve_from(&current, &via, depth + 1),
            None => Some(current),
        };
    }
    Some(current)
}

/// The file that defines what `segments` names, written in `file`.
fn resolve_from(file: &Path, segments: &[String], depth: usize) -> Option<PathBuf> {
    let (first, rest) = segments.split_first()?;
    match first.as_str() {
        "crate" => resolve(src().join("lib.rs"), rest, depth),
        "super" | "self" => {
            let mut base = file.to_path_buf();
            let mut rest = segments;
            while let Some((head, tail)) = rest.split_first() {
                match head.as_str() {
                    "super" => base = parent(&base)?,
                    "self" => {}
                    _ => break,
                }
                rest = tail;
            }
            resolve(base, rest, depth)
        }
        // A child module of the file's own module; anything else is
        // another crate.
        name => {
            child(file, name)?;
            resolve(file.to_path_buf(), segments, depth)
        }
    }
}
