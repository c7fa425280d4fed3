//! The agent's layers, checked: every name a file of `agent/src` takes from another module
//! (`use crate::…`, `super::…` that climbs out, `crate::…` written inline) must follow an edge of
//! the table in ARCHITECTURE.md (`## Layers`); files of one module must not use each other in a
//! circle; the table itself goes one way; and no source file of the workspace is over
//! [`MAX_LINES`] lines. Runs as a unit test (`cargo xtask test`) and as `cargo xtask layers`.
mod lex;
mod table;
mod uses;

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

use anyhow::{bail, Context as _, Result};

use crate::cmd;

/// Module path -> the module paths it uses, each with the first name taken (as written) and its line.
type Edges<'a> = BTreeMap<&'a [String], BTreeMap<Vec<String>, (String, usize)>>;

/// Small files, one concern each.
pub const MAX_LINES: usize = 800;

/// A source file of the crate: its path (for messages), module path and text.
pub struct SourceFile {
    pub path: String,
    pub module: Vec<String>,
    pub text: String,
}

/// Checks the agent in this workspace; `Err` lists every problem, one a line.
pub fn run() -> Result<()> {
    let root = cmd::workspace_root();
    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md")).context("reading ARCHITECTURE.md")?;
    let files = read_crate(&root.join("agent/src"), "agent/src")?;
    let mut problems = check(&doc, &files);
    problems.extend(long_files(root)?);
    if !problems.is_empty() {
        bail!("{} layer problem(s):\n{}", problems.len(), problems.join("\n"));
    }
    println!("xtask: layers kept ({} files of agent/src; none over {MAX_LINES} lines)", files.len());
    Ok(())
}

/// Every `.rs` file under `src`, with its module path (`a/mod.rs` and `a.rs` are module `a`;
/// `lib.rs` and `main.rs` the crate root).
pub fn read_crate(src: &Path, shown_as: &str) -> Result<Vec<SourceFile>> {
    let mut out = Vec::new();
    for p in rust_files(src)? {
        let rel = p.strip_prefix(src).unwrap_or(&p);
        let mut module: Vec<String> = rel.with_extension("").iter().map(|s| s.to_string_lossy().into_owned()).collect();
        if module.last().is_some_and(|m| m == "mod") || module == ["lib"] || module == ["main"] {
            module.pop();
        }
        let text = std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
        out.push(SourceFile { path: format!("{shown_as}/{}", rel.display()), module, text });
    }
    Ok(out)
}

fn rust_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let p = e?.path();
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if p.is_dir() {
                if !name.starts_with('.') && name != "target" {
                    dirs.push(p);
                }
            } else if name.ends_with(".rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Every problem with the layers of `files` against the table in `doc`, one line each.
pub fn check(doc: &str, files: &[SourceFile]) -> Vec<String> {
    let allowed = match table::parse(doc) {
        Ok(a) => a,
        Err(e) => return vec![e],
    };
    let mut problems = Vec::new();
    if let Some(c) = table::cycle(&allowed) {
        problems.push(format!("ARCHITECTURE.md, {}: the table goes in a circle: {}", table::HEADING, c.join(" -> ")));
    }
    let modules: BTreeSet<&[String]> = files.iter().map(|f| f.module.as_slice()).collect();
    let tops: BTreeSet<&str> = files.iter().filter_map(|f| f.module.first().map(String::as_str)).collect();
    for t in &tops {
        if !allowed.contains_key(*t) {
            problems.push(format!(
                "ARCHITECTURE.md, {}: module `{t}` has no row; say which modules it may use",
                table::HEADING
            ));
        }
    }
    let named: BTreeSet<&String> = allowed.iter().flat_map(|(m, uses)| std::iter::once(m).chain(uses)).collect();
    for name in named.into_iter().filter(|n| !tops.contains(n.as_str())) {
        problems.push(format!("ARCHITECTURE.md, {}: `{name}` is not a module of agent/src", table::HEADING));
    }
    // Edges between files (module paths), for circles among the files of one module.
    let mut edges = Edges::new();
    for f in files {
        for t in uses::taken(&f.text, &f.module) {
            let target = owner(&t.path, &modules);
            let (Some(from), Some(to)) = (f.module.first(), target.first()) else { continue };
            if from != to && !allowed.get(from).is_some_and(|a| a.contains(to)) {
                let may: Vec<&str> = allowed.get(from).into_iter().flatten().map(String::as_str).collect();
                problems.push(format!(
                    "{}:{}: {from} may not use {to} (takes {}); ARCHITECTURE.md lets {from} use: {}",
                    f.path,
                    t.line,
                    t.written,
                    if may.is_empty() { "nothing".to_string() } else { may.join(", ") }
                ));
            }
            // A module and its own submodules (declarations, `super::` to the parent) are one unit.
            let related = target.starts_with(&f.module) || f.module.starts_with(&target);
            if !related {
                edges.entry(&f.module).or_default().entry(target).or_insert((t.written, t.line));
            }
        }
    }
    let path_of: BTreeMap<&[String], &str> = files.iter().map(|f| (f.module.as_slice(), f.path.as_str())).collect();
    for c in circles(&edges) {
        let steps: Vec<String> = c
            .windows(2)
            .map(|w| {
                let (written, line) = &edges[w[0].as_slice()][&w[1]];
                format!("{}:{line} takes {written}", path_of.get(w[0].as_slice()).unwrap_or(&"?"))
            })
            .collect();
        problems.push(format!("files use each other in a circle: {}", steps.join("; ")));
    }
    problems
}

/// The module (file) that holds `path`: its longest prefix that is a module.
fn owner(path: &[String], modules: &BTreeSet<&[String]>) -> Vec<String> {
    (0..=path.len()).rev().map(|k| &path[..k]).find(|p| modules.contains(p)).unwrap_or(&[]).to_vec()
}

/// One circle per strongly connected group of files, as a closed walk `a, b, …, a`.
fn circles(edges: &Edges<'_>) -> Vec<Vec<Vec<String>>> {
    let next =
        |n: &[String]| -> Vec<Vec<String>> { edges.get(n).map(|m| m.keys().cloned().collect()).unwrap_or_default() };
    let mut found: Vec<Vec<Vec<String>>> = Vec::new();
    let mut in_circle: BTreeSet<Vec<String>> = BTreeSet::new();
    for start in edges.keys() {
        let start = start.to_vec();
        if in_circle.contains(&start) {
            continue;
        }
        // Breadth-first from `start` back to itself: the shortest circle through it.
        let mut prev: BTreeMap<Vec<String>, Vec<String>> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start.clone()]);
        let mut closed = None;
        while let Some(n) = queue.pop_front() {
            for m in next(&n) {
                if m == start {
                    closed = Some(n.clone());
                    break;
                }
                if !prev.contains_key(&m) {
                    prev.insert(m.clone(), n.clone());
                    queue.push_back(m);
                }
            }
            if closed.is_some() {
                break;
            }
        }
        let Some(mut at) = closed else { continue };
        // Back from the last file before `start` to the first after it.
        let mut middle = Vec::new();
        while at != start {
            middle.push(at.clone());
            at = prev.get(&at).cloned().unwrap_or_else(|| start.clone());
        }
        middle.reverse();
        let walk: Vec<Vec<String>> = std::iter::once(start.clone()).chain(middle).chain([start.clone()]).collect();
        in_circle.extend(walk.iter().cloned());
        found.push(walk);
    }
    found
}

/// Source files of the workspace over [`MAX_LINES`] lines.
fn long_files(root: &Path) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for dir in ["agent", "agent-common", "agent-ebpf", "xtask", "tests"] {
        for p in rust_files(&root.join(dir))? {
            let n = std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?.lines().count();
            if n > MAX_LINES {
                let shown = p.strip_prefix(root).unwrap_or(&p).display().to_string();
                out.push(format!("{shown}: {n} lines, over {MAX_LINES}: split it by concern"));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "## Layers\n\n| module | may use |\n|---|---|\n| `model` | `topology` |\n| `topology` | - |\n| `collect` | `model`, `topology` |\n| `tui` | `model` |\n";

    fn file(path: &str, text: &str) -> SourceFile {
        let module: Vec<String> =
            path.trim_end_matches(".rs").trim_end_matches("/mod").split('/').map(String::from).collect();
        SourceFile { path: path.into(), module, text: text.into() }
    }

    fn tree(extra: &[(&str, &str)]) -> Vec<SourceFile> {
        let mut v = vec![
            file("model/mod.rs", "pub mod process;\nuse crate::topology::Tier;\n"),
            file("model/process.rs", "use super::Model;\n"),
            file("topology/mod.rs", "pub struct Tier;\n"),
            file("collect/mod.rs", "use crate::model::process::Process;\nfn f() { crate::topology::read(); }\n"),
            file("tui/mod.rs", "pub mod screen;\npub mod overview;\n"),
            file("tui/screen.rs", "use super::overview;\n"),
            file("tui/overview.rs", "use super::{Scene, widgets::pad};\nuse crate::model::Model;\n"),
        ];
        v.extend(extra.iter().map(|(p, t)| file(p, t)));
        v
    }

    #[test]
    fn a_tree_that_keeps_the_table_passes() {
        assert_eq!(check(DOC, &tree(&[])), Vec::<String>::new());
    }

    #[test]
    fn a_back_edge_names_the_file_line_and_name() {
        let p = check(DOC, &tree(&[("model/residency.rs", "//! x\n\nuse crate::collect::procfs::NumaResidency;\n")]));
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].starts_with(
                "model/residency.rs:3: model may not use collect (takes crate::collect::procfs::NumaResidency)"
            ),
            "{}",
            p[0]
        );
    }

    #[test]
    fn inline_paths_and_super_that_climbs_out_count() {
        let p = check(
            DOC,
            &tree(&[("tui/rows.rs", "mod tests {\n    fn f() { super::super::super::collect::x(); }\n}\n")]),
        );
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].contains("tui/rows.rs:2: tui may not use collect (takes super::super::super::collect::x)"),
            "{}",
            p[0]
        );
        let p = check(DOC, &tree(&[("tui/app.rs", "fn f() -> crate::topology::Tier { todo!() }\n")]));
        assert!(p[0].contains("tui may not use topology"), "{p:?}");
    }

    #[test]
    fn files_that_use_each_other_in_a_circle_fail() {
        let p = check(DOC, &tree(&[("tui/widgets.rs", "use super::screen::draw;\n")]));
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].starts_with("files use each other in a circle:"), "{}", p[0]);
        for step in [
            "tui/screen.rs:1 takes super::overview",
            "tui/overview.rs:1 takes super::widgets::pad",
            "tui/widgets.rs:1 takes super::screen::draw",
        ] {
            assert!(p[0].contains(step), "{step}: {}", p[0]);
        }
    }

    #[test]
    fn the_table_must_name_every_module_and_only_modules() {
        let p = check(DOC, &tree(&[("export/mod.rs", "")]));
        assert!(p.iter().any(|l| l.contains("module `export` has no row")), "{p:?}");
        let doc = format!("{DOC}| `ghost` | - |\n");
        assert!(check(&doc, &tree(&[])).iter().any(|l| l.contains("`ghost` is not a module")));
        let circular = DOC.replace("| `topology` | - |", "| `topology` | `collect` |");
        assert!(check(&circular, &tree(&[])).iter().any(|l| l.contains("goes in a circle")));
    }

    /// The real thing: this workspace's agent against this workspace's ARCHITECTURE.md.
    #[test]
    fn the_agent_keeps_its_layers() {
        if let Err(e) = run() {
            panic!("{e:#}");
        }
    }
}
