//! Layers never point up: `api` (the `/v1` HTTP facade) and the wiring that assembles
//! the binaries (`TOP`) sit on top, and nothing below may name them. A lower layer that needs a helper the API also uses takes
//! it from a bottom module (`clock`, `ids`, `crd::timestamps`), never from `api`.
//!
//! The test reads the source, not the compiled crate: it finds every path that
//! starts at the crate root (`crate::`, `flowline::`, or `super::` climbing to it)
//! and goes on into `api`, directly or inside a `{...}` group, wherever it is
//! written: `use` lines, expressions, `#[cfg(test)]` modules, doc links. Nothing is
//! excluded. It also makes every module under `src/` be classified as lower or
//! top, so a new module cannot slip past by not being listed.

use std::path::{Path, PathBuf};

/// Modules below `api`: they must not import it. Each is `src/<name>.rs`,
/// `src/<name>/`, or both.
const LOWER: &[&str] = &[
    "clock",
    // The web console serves files; its app talks to `/v1` over HTTP, never to `api`.
    "console",
    "controller",
    "crd",
    "delivery",
    "egress",
    "engine",
    "ids",
    "kubeutil",
    "limits",
    "telemetry",
];

/// The top: the API itself and the wiring that assembles the binaries (the
/// command line, the operator, the `api-key` and `step` commands). These may
/// import anything.
const TOP: &[&str] = &[
    "api",
    "api_key_command",
    "cli",
    "lib",
    "main",
    "operator",
    "step_command",
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// The files of one lower module: `src/<name>.rs` and everything under `src/<name>/`.
fn module_files(name: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let file = src().join(format!("{name}.rs"));
    if file.is_file() {
        files.push(file);
    }
    let dir = src().join(name);
    if dir.is_dir() {
        rust_files(&dir, &mut files);
    }
    assert!(
        !files.is_empty(),
        "lower layer `{name}` has neither src/{name}.rs nor src/{name}/: \
         renamed? update LOWER in tests/layers.rs"
    );
    files
}

#[derive(Debug, PartialEq)]
enum Token {
    Ident(String),
    PathSep,
    Open,
    Close,
    Comma,
    Other,
}

/// Splits source into the few tokens paths are made of, each with its line
/// (1-based). Comments and strings are scanned like code on purpose: a doc link
/// to `crate::api::...` points up as well.
fn tokens(source: &str) -> Vec<(Token, usize)> {
    let mut out = Vec::new();
    let mut line = 1;
    let mut chars = source.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' => line += 1,
            c if c.is_whitespace() => {}
            c if c.is_alphanumeric() || c == '_' => {
                let mut ident = String::from(c);
                while let Some(&n) = chars.peek() {
                    if n.is_alphanumeric() || n == '_' {
                        ident.push(n);
                        chars.next();
                    } else {
                        break;
                    }
                }
                out.push((Token::Ident(ident), line));
            }
            ':' if chars.peek() == Some(&':') => {
                chars.next();
                out.push((Token::PathSep, line));
            }
            '{' => out.push((Token::Open, line)),
            '}' => out.push((Token::Close, line)),
            ',' => out.push((Token::Comma, line)),
            _ => out.push((Token::Other, line)),
        }
    }
    out
}

fn is_ident(token: Option<&(Token, usize)>, name: &str) -> bool {
    matches!(token, Some((Token::Ident(i), _)) if i == name)
}

/// Lines (1-based) where a path from the crate root goes into `api`. `depth` is
/// how many `super`s reach the crate root from this file (`src/engine/x.rs`: 2;
/// `src/engine/mod.rs` and `src/limits.rs`: 1); fewer stay inside the lower
/// layer and are fine.
fn upward_paths(source: &str, depth: usize) -> Vec<usize> {
    let t = tokens(source);
    let mut hits = Vec::new();
    for i in 0..t.len() {
        // A path root: not itself the continuation of a longer path (`kube::api`).
        if i > 0 && t[i - 1].0 == Token::PathSep {
            continue;
        }
        let mut j = i;
        let at_root = if is_ident(t.get(j), "crate") || is_ident(t.get(j), "flowline") {
            j += 1;
            true
        } else {
            let mut supers = 0;
            while is_ident(t.get(j), "super") {
                supers += 1;
                j += 1;
                if t.get(j).map(|x| &x.0) == Some(&Token::PathSep)
                    && is_ident(t.get(j + 1), "super")
                {
                    j += 1;
                }
            }
            supers > 0 && supers >= depth
        };
        if !at_root || t.get(j).map(|x| &x.0) != Some(&Token::PathSep) {
            continue;
        }
        j += 1;
        match t.get(j) {
            Some((Token::Ident(name), line)) if TOP.contains(&name.as_str()) => hits.push(*line),
            Some((Token::Open, _)) => {
                // `crate::{engine::x, api::views}`: the first segment of each
                // item of the outermost group.
                let mut nesting = 0;
                let mut item_start = true;
                for (token, line) in &t[j + 1..] {
                    match token {
                        Token::Open => nesting += 1,
                        Token::Close if nesting == 0 => break,
                        Token::Close => nesting -= 1,
                        Token::Comma if nesting == 0 => {
                            item_start = true;
                            continue;
                        }
                        Token::Ident(name)
                            if item_start && nesting == 0 && TOP.contains(&name.as_str()) =>
                        {
                            hits.push(*line)
                        }
                        _ => {}
                    }
                    item_start = false;
                }
            }
            _ => {}
        }
    }
    hits
}

/// How many `super`s climb from this file's module to the crate root.
fn depth_below_root(file: &Path) -> usize {
    let relative = file.strip_prefix(src()).unwrap();
    let components = relative.components().count();
    if file.file_name().is_some_and(|n| n == "mod.rs") {
        components - 1
    } else {
        components
    }
}

#[test]
fn lower_layers_never_import_api() {
    let mut violations = Vec::new();
    let mut scanned = 0;
    for name in LOWER {
        for file in module_files(name) {
            let source = std::fs::read_to_string(&file).unwrap();
            scanned += 1;
            let shown = file.strip_prefix(env!("CARGO_MANIFEST_DIR")).unwrap();
            for line in upward_paths(&source, depth_below_root(&file)) {
                let text = source.lines().nth(line - 1).unwrap_or("").trim();
                violations.push(format!("{}:{line}: {text}", shown.display()));
            }
        }
    }
    assert!(
        scanned > 20,
        "only {scanned} files scanned: is the src/ layout still this one?"
    );
    assert!(
        violations.is_empty(),
        "lower layers must not import `api` (move what they need to a bottom module such as \
         `clock`, `ids` or `crd::timestamps`):\n{}",
        violations.join("\n")
    );
}

#[test]
fn every_module_is_either_lower_or_top() {
    let mut unclassified = Vec::new();
    for entry in std::fs::read_dir(src()).unwrap() {
        let path = entry.unwrap().path();
        let name = if path.is_dir() {
            path.file_name().unwrap().to_string_lossy().into_owned()
        } else if path.extension().is_some_and(|x| x == "rs") {
            path.file_stem().unwrap().to_string_lossy().into_owned()
        } else {
            continue;
        };
        if !LOWER.contains(&name.as_str()) && !TOP.contains(&name.as_str()) {
            unclassified.push(name);
        }
    }
    unclassified.sort();
    unclassified.dedup();
    assert!(
        unclassified.is_empty(),
        "modules under src/ in neither LOWER nor TOP of tests/layers.rs: {unclassified:?}"
    );
}

#[test]
fn the_scanner_finds_upward_paths_and_only_those() {
    let flagged = |s: &str, depth| upward_paths(s, depth);
    assert_eq!(flagged("use crate::api::views::now_ms;", 2), [1]);
    assert_eq!(flagged("let t = crate::api::views::now_ms();", 2), [1]);
    assert_eq!(flagged("use flowline::api::state;", 0), [1]);
    assert_eq!(flagged("use crate::{crd::Run,\n    api::views};", 2), [2]);
    assert_eq!(flagged("use crate::{api, crd};", 1), [1]);
    assert_eq!(flagged("use super::super::api::views;", 2), [1]);
    assert_eq!(flagged("/// See [`crate::api::views`].", 1), [1]);
    assert_eq!(
        flagged("macro_rules! m { () => { $crate::api::x() } }", 1),
        [1]
    );

    let none: [usize; 0] = [];
    assert_eq!(flagged("use kube::api::{Patch, PatchParams};", 2), none);
    assert_eq!(flagged("use k8s_openapi::api::core::v1::Secret;", 2), none);
    assert_eq!(
        flagged("use crate::api_key_command;", 1),
        [1],
        "the top, too"
    );
    assert_eq!(
        flagged("use crate::cli::LogFormat;", 1),
        [1],
        "the top, too"
    );
    assert_eq!(flagged("use crate::api_keys_of_crd;", 1), none);
    assert_eq!(
        flagged("use crate::{crd::{api, Run}};", 1),
        none,
        "crd::api, not api"
    );
    assert_eq!(
        flagged("use super::api::x;", 2),
        none,
        "a sibling, not the crate root"
    );
    assert_eq!(flagged("use crate::clock::now_ms;", 2), none);
}
