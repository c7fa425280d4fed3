//! The Grafana dashboards shipped in `dashboards/` against the catalog: every metric an
//! expression names is one the exporter registers, under its Prometheus name, and every label it
//! groups by or matches on is one that metric carries. The names come from the real SDK and
//! Prometheus exporter fed one point of every catalogued instrument, so a renamed instrument, a
//! changed unit or a dropped attribute fails here, naming the dashboard and the expression.
use std::{
    collections::{BTreeMap, BTreeSet},
    path::PathBuf,
    sync::Arc,
};

use opentelemetry::KeyValue;
use opentelemetry_sdk::Resource;

use super::{
    cardinality::{Limits, Shape},
    instruments::{Kind, Point, Points, Value, CATALOG},
    meter::{build, prometheus_text, ExportStats, Latest},
};

/// Labels Prometheus adds to every scraped series (the target's), not the agent.
const TARGET_LABELS: [&str; 2] = ["instance", "job"];

/// Prometheus metric name -> its label names, as the exporter writes them for every catalogued
/// instrument with all of its attributes set.
fn exported() -> BTreeMap<String, BTreeSet<String>> {
    let mut points = Points::new();
    for def in CATALOG.iter().filter(|d| d.kind != Kind::Histogram) {
        let attributes = def.attributes.iter().map(|a| KeyValue::new(*a, "x")).collect();
        let value = match (def.kind, def.float) {
            (Kind::UpDownCounter, _) => Value::I64(1),
            (_, true) => Value::F64(1.0),
            (_, false) => Value::U64(1),
        };
        points.insert(def.name, vec![Point { attributes, value }]);
    }
    let latest = Arc::new(Latest::default());
    latest.publish(points);
    let limits = Limits::new(Shape { max_tracked: 4, nodes: 2 });
    let t = build(Resource::builder_empty().build(), false, true, latest, Arc::new(ExportStats::default()), &limits)
        .expect("the meter provider");
    for def in CATALOG.iter().filter(|d| d.kind == Kind::Histogram) {
        let attributes: Vec<KeyValue> = def.attributes.iter().map(|a| KeyValue::new(*a, "x")).collect();
        t.record_steps([(attributes, 1.0)]);
    }
    let text = prometheus_text(t.prometheus.as_ref().expect("the Prometheus registry")).expect("the scrape text");
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, _)) = line.rsplit_once(' ') else { continue };
        let (name, labels) = series.split_once('{').unwrap_or((series, ""));
        let labels = labels.trim_end_matches('}');
        let names = labels.split("\",").filter_map(|kv| kv.split_once('=')).map(|(k, _)| k.trim().to_string());
        out.entry(name.to_string()).or_default().extend(names.filter(|k| k != "le"));
    }
    out
}

/// What one PromQL expression asks for.
#[derive(Debug, Default, PartialEq, Eq)]
struct Query {
    /// Metric names with the labels their selector matches on.
    selectors: Vec<(String, BTreeSet<String>)>,
    /// Labels in `by (...)`, `without (...)`, `on (...)`, `ignoring (...)` lists and as
    /// `label_values`' second argument.
    grouping: BTreeSet<String>,
}

const KEYWORDS: [&str; 12] =
    ["by", "without", "on", "ignoring", "group_left", "group_right", "or", "and", "unless", "bool", "offset", "inf"];

/// Reads a PromQL expression (or Grafana's `label_values(SELECTOR, LABEL)`): identifiers
/// followed by `(` are functions, keywords open label lists, the rest outside `{}` and `[]` are
/// metric names.
fn parse(expr: &str) -> Query {
    let chars: Vec<char> = expr.chars().collect();
    let mut q = Query::default();
    let ident = |i: usize| {
        let mut j = i;
        while j < chars.len() && (chars[j].is_ascii_alphanumeric() || chars[j] == '_' || chars[j] == ':') {
            j += 1;
        }
        (chars[i..j].iter().collect::<String>(), j)
    };
    let skip_space = |mut i: usize| {
        while i < chars.len() && chars[i].is_whitespace() {
            i += 1;
        }
        i
    };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' {
            i = skip_string(&chars, i);
        } else if c == '[' {
            while i < chars.len() && chars[i] != ']' {
                i += 1;
            }
            i += 1;
        } else if c == '$' {
            let (_, j) = ident(i + 1);
            i = j;
        } else if c.is_ascii_digit() {
            let (_, j) = ident(i);
            i = j;
        } else if c.is_ascii_alphabetic() || c == '_' {
            let (word, j) = ident(i);
            let next = skip_space(j);
            // A function's `(`, or an aggregation's `by (...)`/`without (...)` before its `(`.
            let (after, _) = if next < chars.len() { ident(next) } else { (String::new(), next) };
            let paren = chars.get(next) == Some(&'(') || after == "by" || after == "without";
            let paren_now = chars.get(next) == Some(&'(');
            if KEYWORDS.contains(&word.as_str()) {
                if paren_now
                    && ["by", "without", "on", "ignoring", "group_left", "group_right"].contains(&word.as_str())
                {
                    let end = chars[next..].iter().position(|&c| c == ')').map_or(chars.len(), |p| next + p);
                    let list: String = chars[next + 1..end].iter().collect();
                    q.grouping.extend(list.split(',').map(|l| l.trim().to_string()).filter(|l| !l.is_empty()));
                    i = end + 1;
                } else {
                    i = j;
                }
            } else if paren {
                if word == "label_values" && paren_now {
                    let end = closing(&chars, next);
                    let args: String = chars[next + 1..end].iter().collect();
                    let (selector, label) = args.rsplit_once(',').unwrap_or((&args, ""));
                    let inner = parse(selector);
                    q.selectors.extend(inner.selectors);
                    q.grouping.extend(inner.grouping);
                    if !label.trim().is_empty() {
                        q.grouping.insert(label.trim().to_string());
                    }
                    i = end + 1;
                } else {
                    i = j;
                }
            } else {
                let mut labels = BTreeSet::new();
                i = j;
                if chars.get(next) == Some(&'{') {
                    let end = closing(&chars, next);
                    labels = matcher_labels(&chars[next + 1..end]);
                    i = end + 1;
                }
                q.selectors.push((word, labels));
            }
        } else {
            i += 1;
        }
    }
    q
}

/// The index past the string that starts at `i` (a `"`), escapes included.
fn skip_string(chars: &[char], i: usize) -> usize {
    let mut j = i + 1;
    while j < chars.len() && chars[j] != '"' {
        j += if chars[j] == '\\' { 2 } else { 1 };
    }
    j + 1
}

/// The index of the bracket that closes the one at `open`, strings skipped.
fn closing(chars: &[char], open: usize) -> usize {
    let (o, c) = (chars[open], if chars[open] == '(' { ')' } else { '}' });
    let mut depth = 0;
    let mut i = open;
    while i < chars.len() {
        if chars[i] == '"' {
            i = skip_string(chars, i);
            continue;
        }
        if chars[i] == o {
            depth += 1;
        } else if chars[i] == c {
            depth -= 1;
            if depth == 0 {
                return i;
            }
        }
        i += 1;
    }
    chars.len()
}

/// The label names of `label="v", other=~"w"`.
fn matcher_labels(inner: &[char]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut i = 0;
    while i < inner.len() {
        if inner[i] == '"' {
            i = skip_string(inner, i);
        } else if inner[i].is_ascii_alphabetic() || inner[i] == '_' {
            let start = i;
            while i < inner.len() && (inner[i].is_ascii_alphanumeric() || inner[i] == '_') {
                i += 1;
            }
            out.insert(inner[start..i].iter().collect());
        } else {
            i += 1;
        }
    }
    out
}

/// Every dashboard's expressions (panel targets and variable queries), by file.
fn dashboards() -> Vec<(String, Vec<String>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../dashboards");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 3, "node overview, training job and device health in {}", dir.display());
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            let d: serde_json::Value =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: not JSON: {e}", p.display()));
            let mut exprs = Vec::new();
            expressions(&d, &mut exprs);
            (p.file_name().unwrap_or_default().to_string_lossy().into_owned(), exprs)
        })
        .collect()
}

fn expressions(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("expr", serde_json::Value::String(s)) => out.push(s.clone()),
                    // A variable's query (the data source variable's is the plugin's name).
                    ("query", serde_json::Value::String(s)) if s.contains('(') => out.push(s.clone()),
                    _ => expressions(x, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| expressions(x, out)),
        _ => {}
    }
}

#[test]
fn promql_is_read_into_metrics_and_labels() {
    let q = parse(
        r#"sum by (tierscope_memory_tier) (rate(tierscope_node_page_allocations_total{instance=~"$host", tierscope_memory_tier="cxl"}[$__rate_interval])) or on() vector(0)"#,
    );
    let labels = ["instance", "tierscope_memory_tier"].map(String::from).into();
    assert_eq!(q.selectors, vec![("tierscope_node_page_allocations_total".to_string(), labels)]);
    assert_eq!(q.grouping, ["tierscope_memory_tier".to_string()].into());
    let q = parse(r#"label_values(tierscope_process_faults_total{tierscope_job=~"$job"}, tierscope_rank)"#);
    assert_eq!(q.selectors, vec![("tierscope_process_faults_total".to_string(), ["tierscope_job".into()].into())]);
    assert_eq!(q.grouping, ["tierscope_rank".to_string()].into());
    // A name in a string (label_replace's arguments) or a matcher's value is no metric.
    let q = parse(r#"label_replace(vector(0), "tierscope_fake", "a b", "", "") / x_total{a="y_total"}"#);
    assert_eq!(q.selectors, vec![("x_total".to_string(), ["a".into()].into())]);
    let q = parse("topk(10, sum without (process_pid) (a) > 5e3 and b offset 5m)");
    assert_eq!(q.selectors.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["a", "b"]);
}

/// What the expressions of dashboard `file` ask for that the exporter does not have, one line each.
fn problems(file: &str, exprs: &[String], exported: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut bad = Vec::new();
    for e in exprs {
        let q = parse(e);
        if q.selectors.is_empty() {
            bad.push(format!("{file}: no metric in {e}"));
        }
        let mut carried: BTreeSet<String> = TARGET_LABELS.iter().map(|s| s.to_string()).collect();
        for (name, labels) in &q.selectors {
            let Some(has) = exported.get(name) else {
                bad.push(format!("{file}: {name} is not a series the exporter has (in {e})"));
                continue;
            };
            carried.extend(has.iter().cloned());
            for l in labels.iter().filter(|l| !TARGET_LABELS.contains(&l.as_str()) && !has.contains(*l)) {
                bad.push(format!("{file}: {name} has no label {l} (it has {has:?}; in {e})"));
            }
        }
        for l in q.grouping.iter().filter(|l| !carried.contains(*l)) {
            bad.push(format!("{file}: no series of {e} has the label {l} it groups by"));
        }
    }
    bad
}

#[test]
fn every_dashboard_query_names_series_and_labels_the_exporter_has() {
    let exported = exported();
    // One family per catalogued instrument.
    let families = exported.keys().filter(|n| !n.ends_with("_sum") && !n.ends_with("_count")).count();
    assert_eq!(families, CATALOG.len(), "{:?}", exported.keys());
    let mut bad = Vec::new();
    let mut selectors = 0;
    for (file, exprs) in dashboards() {
        selectors += exprs.iter().map(|e| parse(e).selectors.len()).sum::<usize>();
        bad.extend(problems(&file, &exprs, &exported));
    }
    assert!(bad.is_empty(), "the dashboards ask for what the exporter does not have:\n{}", bad.join("\n"));
    assert!(selectors >= 40, "only {selectors} selectors read from the dashboards");
}

#[test]
fn an_unknown_series_or_label_is_caught() {
    let exported = exported();
    let labels = &exported["tierscope_memory_migration_duration_seconds"];
    assert!(labels.contains("tierscope_migrate_reason") && labels.contains("tierscope_quantile"), "{labels:?}");
    let exprs = [
        r#"sum(rate(tierscope_memory_migrations_total{instance=~"$host"}[5m]))"#,
        r#"tierscope_migrate_reason{instance=~"$host"}"#,
        r#"sum by (process_pid) (tierscope_memory_migration_calls_total)"#,
        r#"tierscope_node_memory_free_bytes{tierscope_migrate_result="failed"}"#,
    ]
    .map(String::from);
    let bad = problems("t.json", &exprs, &exported);
    assert_eq!(bad.len(), 3, "{bad:#?}");
    assert!(bad[0].contains("tierscope_migrate_reason is not a series"), "{bad:#?}");
    assert!(bad[1].contains("the label process_pid it groups by"), "{bad:#?}");
    assert!(bad[2].contains("has no label tierscope_migrate_result"), "{bad:#?}");
}
