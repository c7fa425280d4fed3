//! Keeps the docs true: every `tierscope` command line in a fenced code block of README.md and
//! docs/*.md parses with the real command line ([`Cli`]), every relative link points at a file
//! (and heading) that exists, and the README links every page of docs/.
use std::path::{Path, PathBuf};

use clap::{error::ErrorKind, Parser as _};

use super::Cli;

/// The repository root (the agent crate's parent).
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// README.md and every `.md` file of docs/, as (path shown in messages, text).
fn doc_files() -> Vec<(String, PathBuf, String)> {
    let root = repo_root();
    let mut paths = vec![root.join("README.md")];
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("reading docs/")
        .map(|e| e.expect("reading docs/").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    pages.sort();
    paths.extend(pages);
    paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()));
            let shown = p.strip_prefix(&root).unwrap_or(&p).display().to_string();
            (shown, p, text)
        })
        .collect()
}

/// One `tierscope` command line found in a fenced code block: its 1-based line and its text
/// (prompt, `sudo` and trailing comment removed).
#[derive(Debug, PartialEq)]
struct CommandLine {
    line: usize,
    text: String,
}

/// Whether a fence's info string marks shell commands (a bare fence counts: synopses and
/// captures are the reader's problem only if they start with `tierscope `).
fn is_shell_fence(info: &str) -> bool {
    matches!(info, "" | "sh" | "bash" | "shell" | "console")
}

/// Every command line starting with `tierscope ` (or `sudo tierscope `) in a shell fence of
/// `markdown`; `\` continuations are joined.
fn command_lines(markdown: &str) -> Vec<CommandLine> {
    let mut out = Vec::new();
    let mut fence: Option<bool> = None; // Some(takes commands) inside a fence
    let mut pending: Option<CommandLine> = None;
    for (i, raw) in markdown.lines().enumerate() {
        let trimmed = raw.trim();
        if let Some(info) = trimmed.strip_prefix("```") {
            fence = match fence {
                None => Some(is_shell_fence(info.trim())),
                Some(_) => None,
            };
            continue;
        }
        if fence != Some(true) {
            continue;
        }
        let (text, continued) = match trimmed.strip_suffix('\\') {
            Some(t) => (t.trim_end(), true),
            None => (trimmed, false),
        };
        let joined = match pending.take() {
            Some(mut p) => {
                p.text.push(' ');
                p.text.push_str(text);
                p
            }
            None => CommandLine { line: i + 1, text: text.to_string() },
        };
        if continued {
            pending = Some(joined);
            continue;
        }
        let mut t = joined.text.as_str();
        for prompt in ["$ ", "# "] {
            t = t.strip_prefix(prompt).unwrap_or(t);
        }
        if let Some(at) = t.find("  #") {
            t = &t[..at];
        }
        let t = t.trim();
        let t = t.strip_prefix("sudo ").map(str::trim_start).unwrap_or(t);
        if t == "tierscope" || t.starts_with("tierscope ") {
            out.push(CommandLine { line: joined.line, text: t.to_string() });
        }
    }
    out
}

/// Splits one command line into words as a shell would (single and double quotes, backslash
/// escapes), stopping at the first `|`, `>`, `<`, `;` or `&` outside quotes; a file descriptor
/// number right before a redirection (`2>`) is not a word.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                for q in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    w.push(q);
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                while let Some(q) = chars.next() {
                    match q {
                        '"' => break,
                        '\\' => {
                            if let Some(&n) = chars.peek() {
                                if matches!(n, '"' | '\\' | '$' | '`') {
                                    w.push(n);
                                    chars.next();
                                    continue;
                                }
                            }
                            w.push('\\');
                        }
                        _ => w.push(q),
                    }
                }
            }
            '\\' => {
                if let Some(n) = chars.next() {
                    word.get_or_insert_with(String::new).push(n);
                }
            }
            '|' | '>' | '<' | ';' | '&' => {
                if c == '>' || c == '<' {
                    if let Some(w) = &word {
                        if w.chars().all(|d| d.is_ascii_digit()) {
                            word = None;
                        }
                    }
                }
                break;
            }
            c if c.is_whitespace() => {
                if let Some(w) = word.take() {
                    words.push(w);
                }
            }
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    words
}

/// Parses every command line of `markdown` with the real CLI; one message per line that
/// clap refuses, naming `file`, the line and clap's error.
fn refused(file: &str, markdown: &str) -> (usize, Vec<String>) {
    let lines = command_lines(markdown);
    let mut problems = Vec::new();
    for l in &lines {
        let words = shell_words(&l.text);
        match Cli::try_parse_from(&words) {
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {}
            Err(e) => {
                let why = e.to_string();
                let why = why.lines().find(|s| !s.trim().is_empty()).unwrap_or("").trim().to_string();
                problems.push(format!("{file}:{}: `{}`: {why}", l.line, l.text));
            }
        }
    }
    (lines.len(), problems)
}

#[test]
fn cli_docs_every_command_line_in_the_docs_parses() {
    let mut total = 0;
    let mut problems = Vec::new();
    for (shown, _, text) in doc_files() {
        let (n, p) = refused(&shown, &text);
        total += n;
        problems.extend(p);
    }
    assert!(problems.is_empty(), "{} doc command line(s) the CLI refuses:\n{}", problems.len(), problems.join("\n"));
    println!("{total} command lines of README.md and docs/*.md parsed");
    // So that the test cannot pass by finding nothing.
    assert!(total >= 15, "only {total} `tierscope` command lines found in README.md and docs/*.md");
}

#[test]
fn cli_docs_the_checker_finds_and_names_a_wrong_command() {
    let md = "# t\n\n```sh\n$ sudo tierscope top --no-such-flag  # comment\ntierscope snapshot --json \\\n  --duration 2 | jq .\n```\n\n```text\ntierscope not-a-command\n```\n\n```\ntierscope report run.tscope --format pdf 2>/dev/null\n```\n";
    let lines = command_lines(md);
    assert_eq!(
        lines,
        vec![
            CommandLine { line: 4, text: "tierscope top --no-such-flag".into() },
            CommandLine { line: 5, text: "tierscope snapshot --json --duration 2 | jq .".into() },
            CommandLine { line: 14, text: "tierscope report run.tscope --format pdf 2>/dev/null".into() },
        ]
    );
    let (n, problems) = refused("x.md", md);
    assert_eq!(n, 3);
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems[0].starts_with("x.md:4: `tierscope top --no-such-flag`: ") && problems[0].contains("--no-such-flag")
    );
    assert!(problems[1].starts_with("x.md:14: ") && problems[1].contains("pdf"), "{}", problems[1]);
}

#[test]
fn cli_docs_shell_words_quotes_and_operators() {
    assert_eq!(
        shell_words(r#"tierscope snapshot --match 'python|torch' --pid 1 && echo x"#),
        ["tierscope", "snapshot", "--match", "python|torch", "--pid", "1"]
    );
    assert_eq!(shell_words(r#"a "b \"c\" d" e\ f; g"#), ["a", "b \"c\" d", "e f"]);
    assert_eq!(shell_words("tierscope check --json > out.json"), ["tierscope", "check", "--json"]);
    assert_eq!(shell_words("tierscope check 2>/dev/null"), ["tierscope", "check"]);
}

/// GitHub's anchor of a heading: lower case, spaces to `-`, punctuation other than `-`/`_` dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of every heading of `markdown` (outside code fences).
fn anchors(markdown: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for l in markdown.lines() {
        if l.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && l.starts_with('#') {
            out.push(anchor(l.trim_start_matches('#')));
        }
    }
    out
}

/// Every link target `(line, target)` of `markdown` outside code fences.
fn links(markdown: &str) -> Vec<(usize, String)> {
    let re = regex::Regex::new(r"\]\(([^)\s]+)\)").expect("link pattern");
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, l) in markdown.lines().enumerate() {
        if l.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.extend(re.captures_iter(l).map(|c| (i + 1, c[1].to_string())));
        }
    }
    out
}

#[test]
fn cli_docs_every_relative_link_points_at_what_exists() {
    let files = doc_files();
    let mut problems = Vec::new();
    let mut checked = 0;
    for (shown, path, text) in &files {
        let dir = path.parent().expect("a file's directory");
        for (line, target) in links(text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (file, frag) = match target.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (target.as_str(), None),
            };
            let dest = if file.is_empty() { path.clone() } else { dir.join(file) };
            if !dest.exists() {
                problems.push(format!("{shown}:{line}: the link `{target}` points at no file"));
                continue;
            }
            if let Some(a) = frag {
                let heads = std::fs::read_to_string(&dest).map(|t| anchors(&t)).unwrap_or_default();
                if !heads.iter().any(|h| h == a) {
                    problems.push(format!("{shown}:{line}: the link `{target}`: no heading with anchor `#{a}` there"));
                }
            }
        }
        if shown != "README.md" && !text.contains("](../README.md)") {
            problems.push(format!("{shown}: does not link back to the README (`../README.md`)"));
        }
    }
    let readme = &files[0].2;
    for (shown, _, _) in &files[1..] {
        if !readme.contains(&format!("]({shown})")) {
            problems.push(format!("README.md does not link {shown}"));
        }
    }
    assert!(problems.is_empty(), "{} broken doc link(s):\n{}", problems.len(), problems.join("\n"));
    assert!(checked >= 20, "only {checked} relative links found in README.md and docs/*.md");
}

#[test]
fn cli_docs_anchors_as_github_makes_them() {
    assert_eq!(anchor(" Export: OpenTelemetry and Prometheus"), "export-opentelemetry-and-prometheus");
    assert_eq!(anchor(" Hotness (DAMON)"), "hotness-damon");
    assert_eq!(anchors("# A\n```\n# not a heading\n```\n## B c"), ["a", "b-c"]);
}

#[test]
fn cli_docs_the_readme_is_one_a_newcomer_finishes() {
    let files = doc_files();
    let readme = &files[0].2;
    // Words as a reader meets them: fenced blocks (commands, the screen) are looked at, not read.
    let mut fenced = false;
    let mut words = 0;
    for line in readme.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            words += line.split_whitespace().count();
        }
    }
    assert!(words > 200, "only {words} words: the README was not found whole");
    assert!(words < 900, "the README has {words} words outside code blocks: keep it under 900 (move detail to docs/)");
    let what = readme.find("eBPF observability agent").expect("it says what the tool is");
    let commands = readme.find("cargo xtask run").expect("it gives the main command");
    assert!(what < commands, "it says what the tool is before the commands");
    assert!(readme.contains("target/release/tierscope"), "it says where the binary lands");
    assert!(readme.contains("](BENCHMARKS.md)"), "it links the benchmarks");
}
