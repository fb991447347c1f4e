//! The crate's layers, checked over its own import graph.
//!
//! Every `src/` file is a node; an edge runs from a file to each file whose module it names
//! through `use` or an inline path (`crate::a::b`, `super::x`, `self::y`, a name brought in by
//! `use`, or an uninlined child module's name). Two rules hold over that graph:
//! - no circle crosses a folder: files that reach each other sit in one top-level module;
//! - the kernel (API client, cache, queues, events, manager, the runtime, ...) knows the
//!   `controller` interface and no controller, and reaches neither the configuration, the
//!   command line nor the start-up wiring. A controller is added without touching it, and it
//!   can be read and tested alone.
//!
//! The test reads the source itself (a small tokenizer, no parser crate) and stays
//! self-contained.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    /// API client, cache, queues, events, manager, the runtime, Go compatibility, ...
    Kernel,
    /// The controllers: they depend on the kernel, never the other way round.
    Controllers,
    /// What knows both: configuration, command line, start-up. `fuzz` is test support that
    /// drives parsers from every layer; `main` is the binary.
    Wiring,
}
use Kind::*;

/// Every top-level module of `src/`, lowest layer first. An import from a module to one later
/// in this list runs up the layers and is reported. The crate root (`lib`) re-exports `error`.
const LAYERS: &[(&str, Kind)] = &[
    ("error", Kernel),
    ("lib", Kernel),
    ("compat", Kernel),
    ("sort", Kernel),
    ("runtime", Kernel),
    ("http_head", Kernel),
    ("obj", Kernel),
    ("pki", Kernel),
    ("metrics", Kernel),
    ("queue", Kernel),
    ("api", Kernel),
    ("certs", Kernel),
    ("cache", Kernel),
    ("events", Kernel),
    ("controller", Kernel),
    ("credentials", Kernel),
    ("server", Kernel),
    ("auth", Kernel),
    ("leader", Kernel),
    ("manager", Kernel),
    ("sandbox", Kernel),
    ("config", Wiring),
    ("controllers", Controllers),
    ("cli", Wiring),
    ("startup", Wiring),
    ("run", Wiring),
    ("fuzz", Wiring),
    ("fuzzing", Wiring),
    ("main", Wiring),
];

// ---------------------------------------------------------------------------------------
// Tokens

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Str(String),
    PathSep,
    Punct(char),
}

fn lex(src: &str) -> Vec<Tok> {
    let b: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let ident_start = |c: char| c.is_alphabetic() || c == '_';
    let ident_char = |c: char| c.is_alphanumeric() || c == '_';
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied().unwrap_or('\0');
        if c.is_whitespace() {
            i += 1;
        } else if c == '/' && next == '/' {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == '*' {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if (c == 'r' || (c == 'b' && next == 'r'))
            && matches!(
                b.get(i + if c == 'b' { 2 } else { 1 }),
                Some('"') | Some('#')
            )
            && raw_string_at(&b, i).is_some()
        {
            let (end, text) = raw_string_at(&b, i).unwrap_or((i + 1, String::new()));
            out.push(Tok::Str(text));
            i = end;
        } else if c == '"' || (c == 'b' && next == '"') {
            i += if c == 'b' { 2 } else { 1 };
            let mut text = String::new();
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    i += 1;
                }
                if i < b.len() {
                    text.push(b[i]);
                }
                i += 1;
            }
            i += 1;
            out.push(Tok::Str(text));
        } else if c == '\'' || (c == 'b' && next == '\'') {
            let q = if c == 'b' { i + 1 } else { i };
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            if b.get(q + 1) == Some(&'\\') {
                let mut j = q + 2;
                while j < b.len() && b[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
            } else if b.get(q + 2) == Some(&'\'') {
                i = q + 3;
            } else if c == 'b' {
                // `b` followed by a lifetime cannot happen; take `b` as an identifier.
                out.push(Tok::Ident("b".into()));
                i += 1;
            } else {
                i = q + 1;
                while i < b.len() && ident_char(b[i]) {
                    i += 1;
                }
            }
        } else if c == 'r' && next == '#' && b.get(i + 2).is_some_and(|&c| ident_start(c)) {
            let start = i + 2;
            i = start;
            while i < b.len() && ident_char(b[i]) {
                i += 1;
            }
            out.push(Tok::Ident(b[start..i].iter().collect()));
        } else if ident_start(c) {
            let start = i;
            while i < b.len() && ident_char(b[i]) {
                i += 1;
            }
            out.push(Tok::Ident(b[start..i].iter().collect()));
        } else if c.is_ascii_digit() {
            while i < b.len() && (ident_char(b[i]) || b[i] == '.') {
                if b[i] == '.' && !b.get(i + 1).is_some_and(|c| c.is_ascii_digit()) {
                    break;
                }
                i += 1;
            }
            out.push(Tok::Punct('0'));
        } else if c == ':' && next == ':' {
            out.push(Tok::PathSep);
            i += 2;
        } else {
            out.push(Tok::Punct(c));
            i += 1;
        }
    }
    out
}

/// A raw string (`r"..."`, `r#"..."#`, `br#"..."#`) starting at `i`: its end and text.
fn raw_string_at(b: &[char], i: usize) -> Option<(usize, String)> {
    let mut j = i + if b[i] == 'b' { 2 } else { 1 };
    let mut hashes = 0;
    while b.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    if b.get(j) != Some(&'"') {
        return None;
    }
    j += 1;
    let start = j;
    while j < b.len() {
        if b[j] == '"' && (0..hashes).all(|k| b.get(j + 1 + k) == Some(&'#')) {
            return Some((j + 1 + hashes, b[start..j].iter().collect()));
        }
        j += 1;
    }
    None
}

// ---------------------------------------------------------------------------------------
// Files and their module paths

/// One source file: its module path (`["cache", "store"]`), what it declares and names.
struct File {
    path: PathBuf,
    module: Vec<String>,
    /// Out-of-line child modules: name, file, and whether only tests compile it.
    children: Vec<(String, PathBuf, bool)>,
    /// Compiled for tests only (`#[cfg(test)]` on its `mod`, or `#![cfg(test)]`): its
    /// imports are not edges; tests may reach anything.
    test_only: bool,
    /// Paths as written, each with the module it was written in.
    paths: Vec<(Vec<String>, Vec<String>)>,
    /// Names brought in by `use` or `mod`, with the module they were written in and the path.
    aliases: BTreeMap<String, (Vec<String>, Vec<String>)>,
}

fn ident(t: Option<&Tok>) -> Option<&str> {
    match t {
        Some(Tok::Ident(s)) => Some(s),
        _ => None,
    }
}

/// Expands a use tree starting at `toks[*i]` into (path, name it binds) pairs.
fn use_tree(toks: &[Tok], i: &mut usize, prefix: &[String], out: &mut Vec<(Vec<String>, String)>) {
    let mut path = prefix.to_vec();
    loop {
        match toks.get(*i) {
            Some(Tok::PathSep) => *i += 1,
            Some(Tok::Punct('$')) => *i += 1,
            Some(Tok::Ident(s)) if s == "as" => {
                *i += 1;
                let name = ident(toks.get(*i)).unwrap_or("_").to_string();
                *i += 1;
                if path.last().is_some_and(|l| l == "self") {
                    path.pop();
                }
                out.push((path, name));
                return;
            }
            Some(Tok::Ident(s)) => {
                path.push(s.clone());
                *i += 1;
            }
            Some(Tok::Punct('*')) => {
                *i += 1;
                out.push((path, "*".into()));
                return;
            }
            Some(Tok::Punct('{')) => {
                *i += 1;
                loop {
                    match toks.get(*i) {
                        None => return,
                        Some(Tok::Punct('}')) => {
                            *i += 1;
                            return;
                        }
                        Some(Tok::Punct(',')) => *i += 1,
                        _ => use_tree(toks, i, &path, out),
                    }
                }
            }
            _ => {
                if path.last().is_some_and(|l| l == "self") {
                    path.pop();
                }
                if let Some(name) = path.last().cloned() {
                    out.push((path, name));
                }
                return;
            }
        }
    }
}

/// An attribute (`#[...]` or `#![...]`) at `toks[i]`.
struct Attr {
    /// The token after it.
    end: usize,
    /// `#![...]`: about the enclosing file.
    inner: bool,
    /// `#[path = "..."]`.
    path: Option<String>,
    /// A `cfg` that holds only for tests.
    test: bool,
}

fn attribute(toks: &[Tok], i: usize) -> Attr {
    let inner = toks.get(i + 1) == Some(&Tok::Punct('!'));
    let open = if inner { i + 2 } else { i + 1 };
    let close = (open..toks.len())
        .find(|&j| toks[j] == Tok::Punct(']'))
        .unwrap_or(toks.len());
    let attr = toks.get(open + 1..close).unwrap_or(&[]);
    let path = match (ident(attr.first()), attr.get(2)) {
        (Some("path"), Some(Tok::Str(p))) => Some(p.clone()),
        _ => None,
    };
    let has = |w: &str| attr.iter().any(|t| ident(Some(t)) == Some(w));
    let test = ident(attr.first()) == Some("cfg") && has("test") && !has("not");
    Attr {
        end: close + 1,
        inner,
        path,
        test,
    }
}

fn read_file(path: &Path, module: Vec<String>, is_dir_owner: bool, test_only: bool) -> File {
    let text = std::fs::read_to_string(path).expect("read source");
    let toks = lex(&text);
    let dir = if is_dir_owner {
        path.parent().expect("parent").to_path_buf()
    } else {
        path.with_extension("")
    };
    let mut file = File {
        path: path.to_path_buf(),
        module: module.clone(),
        children: Vec::new(),
        test_only,
        paths: Vec::new(),
        aliases: BTreeMap::new(),
    };
    // Inline modules: name and the brace depth inside them.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut pending_mod: Option<String> = None;
    let mut path_attr: Option<String> = None;
    // Inside an item under `#[cfg(test)]`: the brace depth it started at.
    let mut test_attr = false;
    let mut test_region: Option<usize> = None;
    let mut i = 0;
    while i < toks.len() {
        let scope: Vec<String> = module
            .iter()
            .cloned()
            .chain(inline.iter().map(|(n, _)| n.clone()))
            .collect();
        if test_attr && test_region.is_none() {
            test_region = Some(depth);
            test_attr = false;
        }
        let in_test = file.test_only || test_region.is_some();
        match &toks[i] {
            Tok::Punct('#') if matches!(toks.get(i + 1), Some(Tok::Punct('[' | '!'))) => {
                let a = attribute(&toks, i);
                path_attr = a.path.or(path_attr);
                file.test_only |= a.test && a.inner;
                test_attr |= a.test && !a.inner;
                i = a.end;
                continue;
            }
            Tok::Punct('{') => {
                depth += 1;
                if let Some(name) = pending_mod.take() {
                    inline.push((name.clone(), depth));
                    file.aliases
                        .insert(name.clone(), (scope.clone(), vec!["self".into(), name]));
                }
                i += 1;
            }
            Tok::Punct('}') => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
                if test_region == Some(depth) {
                    test_region = None;
                }
                i += 1;
            }
            Tok::Punct(';') => {
                let ends_test = test_region == Some(depth);
                if let Some(name) = pending_mod.take() {
                    let child = match path_attr.take() {
                        Some(p) if is_dir_owner || inline.is_empty() => {
                            path.parent().expect("parent").join(p)
                        }
                        _ => {
                            let flat = dir.join(format!("{name}.rs"));
                            if flat.exists() {
                                flat
                            } else {
                                dir.join(&name).join("mod.rs")
                            }
                        }
                    };
                    if inline.is_empty() {
                        file.children.push((name.clone(), child, in_test));
                    }
                    file.aliases
                        .insert(name.clone(), (scope.clone(), vec!["self".into(), name]));
                }
                if ends_test {
                    test_region = None;
                }
                i += 1;
            }
            Tok::Ident(s) if s == "mod" => {
                if let Some(name) = ident(toks.get(i + 1)) {
                    pending_mod = Some(name.to_string());
                }
                i += 2;
            }
            Tok::Ident(s) if s == "use" && toks.get(i + 1) != Some(&Tok::Punct('<')) => {
                i += 1;
                let mut trees = Vec::new();
                use_tree(&toks, &mut i, &[], &mut trees);
                for (p, name) in trees {
                    if name != "*" && name != "_" {
                        file.aliases.insert(name, (scope.clone(), p.clone()));
                    }
                    if !in_test {
                        file.paths.push((scope.clone(), p));
                    }
                }
            }
            Tok::Ident(s) if toks.get(i + 1) == Some(&Tok::PathSep) => {
                let after_sep = i > 0 && toks[i - 1] == Tok::PathSep;
                if after_sep {
                    i += 1;
                    continue;
                }
                let mut p = vec![s.clone()];
                let mut j = i + 1;
                while toks.get(j) == Some(&Tok::PathSep) {
                    match ident(toks.get(j + 1)) {
                        Some(n) => p.push(n.to_string()),
                        None => break,
                    }
                    j += 2;
                }
                if !in_test {
                    file.paths.push((scope, p));
                }
                i = j;
            }
            _ => {
                pending_mod = None;
                i += 1;
            }
        }
    }
    file
}

/// Every file reachable from the crate root through `mod` declarations.
fn crate_files(src: &Path) -> Vec<File> {
    let mut out = Vec::new();
    let mut todo = vec![(src.join("lib.rs"), Vec::<String>::new(), true, false)];
    while let Some((path, module, owner, test_only)) = todo.pop() {
        let file = read_file(&path, module.clone(), owner, test_only);
        for (name, child, test) in &file.children {
            let mut m = module.clone();
            m.push(name.clone());
            let owner = child.file_name().is_some_and(|n| n == "mod.rs");
            todo.push((
                child.clone(),
                m,
                owner,
                test_only || *test || file.test_only,
            ));
        }
        out.push(file);
    }
    // The binary: `edgekcm::` is the library.
    let mut main = read_file(&src.join("main.rs"), vec!["main".into()], true, false);
    for (_, p) in main.paths.iter_mut() {
        if p.first().is_some_and(|s| s == "edgekcm") {
            p[0] = "crate".into();
        }
    }
    for (_, (_, p)) in main.aliases.iter_mut() {
        if p.first().is_some_and(|s| s == "edgekcm") {
            p[0] = "crate".into();
        }
    }
    out.push(main);
    out
}

// ---------------------------------------------------------------------------------------
// The graph

struct Graph {
    /// File paths relative to `src/`, indexed.
    names: Vec<String>,
    /// The top-level module of each file.
    top: Vec<String>,
    edges: Vec<BTreeSet<usize>>,
}

fn resolve(file: &File, scope: &[String], p: &[String], depth: usize) -> Option<Vec<String>> {
    if depth > 8 || p.is_empty() {
        return None;
    }
    let mut abs: Vec<String>;
    let mut rest = p;
    match p[0].as_str() {
        "crate" => {
            abs = Vec::new();
            rest = &p[1..];
        }
        "self" => {
            abs = scope.to_vec();
            rest = &p[1..];
        }
        "super" => {
            abs = scope.to_vec();
            while rest.first().is_some_and(|s| s == "super") {
                abs.pop();
                rest = &rest[1..];
            }
        }
        name => {
            let (alias_scope, alias_path) = file.aliases.get(name)?;
            if alias_path.len() == 1 && alias_path[0] == name {
                return None;
            }
            let mut base = resolve(file, alias_scope, alias_path, depth + 1)?;
            base.extend(p[1..].iter().cloned());
            return Some(base);
        }
    }
    while rest.first().is_some_and(|s| s == "self") {
        rest = &rest[1..];
    }
    abs.extend(rest.iter().cloned());
    Some(abs)
}

fn graph(src: &Path) -> Graph {
    let files = crate_files(src);
    let mut by_module = BTreeMap::new();
    for (n, f) in files.iter().enumerate() {
        by_module.insert(f.module.clone(), n);
    }
    let names: Vec<String> = files
        .iter()
        .map(|f| {
            f.path
                .strip_prefix(src)
                .unwrap_or(&f.path)
                .display()
                .to_string()
        })
        .collect();
    let top: Vec<String> = files
        .iter()
        .map(|f| f.module.first().cloned().unwrap_or_else(|| "lib".into()))
        .collect();
    let mut edges = vec![BTreeSet::new(); files.len()];
    for (n, f) in files.iter().enumerate() {
        for (scope, p) in &f.paths {
            let Some(mut abs) = resolve(f, scope, p, 0) else {
                continue;
            };
            // The longest prefix that is a file's module.
            loop {
                if let Some(&to) = by_module.get(&abs) {
                    if to != n {
                        edges[n].insert(to);
                    }
                    break;
                }
                if abs.pop().is_none() {
                    break;
                }
            }
        }
    }
    Graph { names, top, edges }
}

/// Strongly connected components (Tarjan), each as a list of file indices.
fn components(g: &Graph) -> Vec<Vec<usize>> {
    struct St<'a> {
        g: &'a Graph,
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(s: &mut St, v: usize) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on[v] = true;
        for &w in &s.g.edges[v] {
            match s.index[w] {
                None => {
                    visit(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(iw) if s.on[w] => s.low[v] = s.low[v].min(iw),
                _ => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on[w] = false;
                comp.push(w);
                if w == v {
                    break;
                }
            }
            s.out.push(comp);
        }
    }
    let n = g.names.len();
    let mut s = St {
        g,
        index: vec![None; n],
        low: vec![0; n],
        on: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if s.index[v].is_none() {
            visit(&mut s, v);
        }
    }
    s.out
}

fn src_dir() -> PathBuf {
    match std::env::var_os("LAYERING_SRC") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
    }
}

fn rank(top: &str) -> Option<usize> {
    LAYERS.iter().position(|(k, _)| *k == top)
}

fn is_kernel(top: &str) -> bool {
    LAYERS.iter().any(|(k, kind)| *k == top && *kind == Kernel)
}

/// Imports from one module up to a later one in `LAYERS` (`from -> to` as files).
fn back_imports(g: &Graph) -> Vec<String> {
    let mut out = Vec::new();
    for (a, tos) in g.edges.iter().enumerate() {
        for &b in tos {
            if let (Some(ra), Some(rb)) = (rank(&g.top[a]), rank(&g.top[b])) {
                if ra < rb {
                    out.push(format!("{} -> {}", g.names[a], g.names[b]));
                }
            }
        }
    }
    out
}

#[test]
fn no_circle_crosses_a_folder() {
    let g = graph(&src_dir());
    assert!(g.names.len() > 100, "files found: {}", g.names.len());
    let comps = components(&g);
    let largest = comps.iter().map(Vec::len).max().unwrap_or(0);
    let back = back_imports(&g);
    println!(
        "{} files, largest circle {} files, {} imports up the layers",
        g.names.len(),
        largest,
        back.len()
    );
    let mut report = Vec::new();
    for comp in &comps {
        let tops: BTreeSet<&str> = comp.iter().map(|&v| g.top[v].as_str()).collect();
        if tops.len() < 2 {
            continue;
        }
        let members: BTreeSet<usize> = comp.iter().copied().collect();
        let mut crossing = Vec::new();
        for &a in comp {
            for &b in &g.edges[a] {
                let up = rank(&g.top[a]) < rank(&g.top[b]);
                if members.contains(&b) && g.top[a] != g.top[b] && up {
                    crossing.push(format!("  {} -> {}", g.names[a], g.names[b]));
                }
            }
        }
        crossing.sort();
        report.push(format!(
            "a circle of {} files across {:?}; its imports up the layers:\n{}",
            comp.len(),
            tops,
            crossing.join("\n")
        ));
    }
    assert!(report.is_empty(), "{}", report.join("\n"));
    assert!(
        back.is_empty(),
        "imports up the layers (their order is LAYERS in tests/layering.rs):\n{}",
        back.join("\n")
    );
}

#[test]
fn the_kernel_reaches_no_controller_nor_the_wiring() {
    // Everything outside the kernel is config, a controller or wiring, so the kernel reaches
    // one of them exactly when an import leaves the kernel: those imports are listed.
    let g = graph(&src_dir());
    let mut out = Vec::new();
    for (a, tos) in g.edges.iter().enumerate() {
        for &b in tos {
            if is_kernel(&g.top[a]) && !is_kernel(&g.top[b]) {
                out.push(format!("  {} -> {}", g.names[a], g.names[b]));
            }
        }
    }
    assert!(
        out.is_empty(),
        "the kernel must not reach config, cli, a controller or the start-up wiring \
         (move what it needs into the kernel):\n{}",
        out.join("\n")
    );
}

#[test]
fn every_source_module_is_classified() {
    let g = graph(&src_dir());
    let tops: BTreeSet<&str> = g.top.iter().map(String::as_str).collect();
    for t in tops {
        assert!(
            rank(t).is_some(),
            "src/{t} is neither kernel, controllers nor wiring: add it to LAYERS in \
             tests/layering.rs"
        );
    }
    // Every file under src/ is part of the crate (a file left out would escape the checks).
    let mut on_disk = Vec::new();
    rust_files(&src_dir(), &mut on_disk);
    let src = src_dir();
    let known: BTreeSet<&str> = g.names.iter().map(String::as_str).collect();
    for f in on_disk {
        let rel = f.strip_prefix(&src).unwrap_or(&f).display().to_string();
        assert!(
            known.contains(rel.as_str()),
            "{rel} is not reached through `mod` from lib.rs or main.rs"
        );
    }
}

pub(crate) fn rust_files(p: &Path, out: &mut Vec<PathBuf>) {
    if p.is_dir() {
        for e in std::fs::read_dir(p).expect("read dir").flatten() {
            rust_files(&e.path(), out);
        }
    } else if p.extension().is_some_and(|e| e == "rs") {
        out.push(p.to_path_buf());
    }
}

#[test]
fn the_tokenizer_reads_paths_and_skips_text() {
    let toks = lex(
        "use crate::{a::b, c as d}; // crate::x\nlet s = \"crate::y\"; r#\"crate::z\"#; 'a'; &'b x",
    );
    let idents: Vec<&str> = toks
        .iter()
        .filter_map(|t| match t {
            Tok::Ident(s) => Some(s.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        idents,
        ["use", "crate", "a", "b", "c", "as", "d", "let", "s", "x"]
    );
    let mut i = 1;
    let mut out = Vec::new();
    use_tree(&toks, &mut i, &[], &mut out);
    let got: Vec<(String, String)> = out.into_iter().map(|(p, n)| (p.join("::"), n)).collect();
    assert_eq!(
        got,
        [
            ("crate::a::b".to_string(), "b".to_string()),
            ("crate::c".to_string(), "d".to_string())
        ]
    );
}
