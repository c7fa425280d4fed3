//! Root tests of `tierscope export` over a real recording, each output read back by a real reader
//! of its format: the pprof profile by `protoc --decode perftools.profiles.Profile` with pprof's
//! own profile.proto (Debian's golang-github-google-pprof-dev), the Perfetto trace by perfetto's
//! own trace.proto as the `perfetto` PyPI package ships it compiled (`cargo xtask setup` installs
//! both). What they decode is checked against the recording's report: pids, node and tier labels,
//! pages and bytes, residency peaks. A recording of a churning rank that opens and closes an
//! allocation_churn insight shows it as a Perfetto slice with its figures as arguments, and as a
//! line of the pprof profile's comments.
use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use serde_json::Value;
use tierscope_tests::{require_root_and_agent, run_tierscope as tierscope, scratch_dir, stderr_text as stderr};

#[path = "support/insight_session.rs"]
mod insight_session;

const WORKLOAD: &str = env!("CARGO_BIN_EXE_tierscope-workload");
const PROFILE_PROTO_DIR: &str = "/usr/share/gocode/src/github.com/google/pprof/proto";

fn dir(name: &str) -> PathBuf {
    scratch_dir("export", name)
}

/// A recording of the workload touching 64 MiB, node 0 declared the CXL tier so every page it
/// allocates takes the sampled-site path; and the recording's report as JSON.
fn recorded(d: &Path) -> (PathBuf, Value) {
    let file = d.join("run.tscope");
    let script = format!("(printf 'go\\n'; sleep 1) | {WORKLOAD} touch 64 >/dev/null; sleep 0.4");
    let f = file.to_str().expect("path");
    let o = tierscope(&[
        "record",
        "-o",
        f,
        "--interval-ms",
        "200",
        "--cxl-node",
        "0",
        "--page-path",
        "exact",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    assert!(o.status.success(), "record: {}", stderr(&o));
    let o = tierscope(&["report", f, "--format", "json"]);
    assert!(o.status.success(), "report: {}", stderr(&o));
    (file, serde_json::from_slice(&o.stdout).expect("report JSON"))
}

fn workload_pid(report: &Value) -> u64 {
    let procs = report["processes"].as_array().expect("processes");
    procs
        .iter()
        .find(|p| p["comm"].as_str().is_some_and(|c| c.starts_with("tierscope-work")))
        .and_then(|p| p["pid"].as_u64())
        .unwrap_or_else(|| panic!("the workload is in the report: {procs:?}"))
}

/// protoc's text format, as a tree: each field name with its scalar (unquoted) or message.
#[derive(Debug)]
enum Text {
    Scalar(String),
    Message(Vec<(String, Text)>),
}

impl Text {
    fn fields<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Text> + 'a {
        let all: &[(String, Text)] = match self {
            Text::Message(m) => m,
            Text::Scalar(_) => &[],
        };
        all.iter().filter(move |(k, _)| k == name).map(|(_, v)| v)
    }
    fn scalar(&self) -> &str {
        match self {
            Text::Scalar(s) => s,
            Text::Message(_) => panic!("a message where a scalar was expected"),
        }
    }
    fn int(&self, name: &str) -> i64 {
        self.fields(name).next().map_or(0, |v| v.scalar().parse().expect("integer"))
    }
    fn ints(&self, name: &str) -> Vec<i64> {
        self.fields(name).map(|v| v.scalar().parse().expect("integer")).collect()
    }
}

/// Undoes protoc's C escapes (`\"`, `\\`, `\n`, octal bytes) of a quoted string.
fn unquote(s: &str) -> String {
    let inner = s.strip_prefix('"').and_then(|s| s.strip_suffix('"')).unwrap_or(s).as_bytes();
    let mut out = vec![];
    let mut i = 0;
    while i < inner.len() {
        if inner[i] == b'\\' && i + 1 < inner.len() {
            let c = inner[i + 1];
            if c.is_ascii_digit() {
                let end = (i + 1..(i + 4).min(inner.len()))
                    .take_while(|&j| inner[j].is_ascii_digit())
                    .last()
                    .unwrap_or(i + 1);
                let oct = std::str::from_utf8(&inner[i + 1..=end]).expect("ascii");
                out.push(u8::from_str_radix(oct, 8).expect("octal"));
                i = end + 1;
                continue;
            }
            out.push(match c {
                b'n' => b'\n',
                b't' => b'\t',
                b'r' => b'\r',
                other => other,
            });
            i += 2;
        } else {
            out.push(inner[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parse_text(text: &str) -> Text {
    let mut stack: Vec<(String, Vec<(String, Text)>)> = vec![(String::new(), vec![])];
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some(name) = line.strip_suffix(" {") {
            stack.push((name.to_string(), vec![]));
        } else if line == "}" {
            let (name, fields) = stack.pop().expect("balanced braces");
            stack.last_mut().expect("an outer message").1.push((name, Text::Message(fields)));
        } else {
            let (k, v) = line.split_once(": ").unwrap_or_else(|| panic!("a field line: {line}"));
            stack.last_mut().expect("a message").1.push((k.to_string(), Text::Scalar(unquote(v))));
        }
    }
    assert_eq!(stack.len(), 1, "protoc's output closes every message");
    Text::Message(stack.pop().expect("root").1)
}

/// The gzipped profile at `path` as `protoc --decode` with pprof's own profile.proto reads it.
fn decode_profile(path: &Path) -> Text {
    let proto = Path::new(PROFILE_PROTO_DIR).join("profile.proto");
    assert!(proto.is_file(), "{} missing: run cargo xtask setup (golang-github-google-pprof-dev)", proto.display());
    let gz = std::fs::read(path).expect("profile written");
    assert_eq!(&gz[..2], b"\x1f\x8b", "gzipped");
    let raw = Command::new("gzip").args(["-dc"]).arg(path).output().expect("gzip -dc");
    assert!(raw.status.success(), "gzip reads it: {}", stderr(&raw));
    let mut protoc = Command::new("protoc")
        .args(["--decode", "perftools.profiles.Profile", "--proto_path", PROFILE_PROTO_DIR, "profile.proto"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("protoc (apt-get install protobuf-compiler)");
    std::io::Write::write_all(&mut protoc.stdin.take().expect("stdin"), &raw.stdout).expect("to protoc");
    let decoded = protoc.wait_with_output().expect("protoc");
    assert!(decoded.status.success(), "protoc --decode: {}", stderr(&decoded));
    parse_text(&String::from_utf8_lossy(&decoded.stdout))
}

#[test]
#[ignore = "requires root, protoc and pprof's profile.proto (cargo xtask setup installs them)"]
fn the_pprof_profile_decodes_with_protoc_and_holds_the_recorded_cxl_sites() {
    require_root_and_agent!();
    let d = dir("pprof");
    let (file, report) = recorded(&d);
    let out = d.join("sites.pb.gz");
    let o = tierscope(&["export", file.to_str().expect("p"), "--pprof", out.to_str().expect("p")]);
    assert!(o.status.success(), "export: {}", stderr(&o));
    let p = decode_profile(&out);
    let strings: Vec<String> = p.fields("string_table").map(|s| s.scalar().to_string()).collect();
    let s = |i: i64| strings[i as usize].as_str();
    assert_eq!(strings[0], "", "string 0 is empty");
    let types: Vec<(&str, &str)> = p.fields("sample_type").map(|t| (s(t.int("type")), s(t.int("unit")))).collect();
    assert_eq!(types, [("cxl_pages", "count"), ("cxl_bytes", "bytes")]);
    // location id -> innermost function name.
    let functions: BTreeMap<i64, String> =
        p.fields("function").map(|f| (f.int("id"), s(f.int("name")).to_string())).collect();
    let locations: BTreeMap<i64, String> = p
        .fields("location")
        .map(|l| (l.int("id"), functions[&l.fields("line").next().expect("a line").int("function_id")].clone()))
        .collect();
    struct Got {
        pid: i64,
        node: String,
        tier: String,
        pages: i64,
        bytes: i64,
        functions: Vec<String>,
    }
    let samples: Vec<Got> = p
        .fields("sample")
        .map(|x| {
            let label = |k: &str| x.fields("label").find(|l| s(l.int("key")) == k);
            let v = x.ints("value");
            Got {
                pid: label("pid").expect("pid label").int("num"),
                node: label("node").map(|l| s(l.int("str")).to_string()).unwrap_or_default(),
                tier: label("tier").map(|l| s(l.int("str")).to_string()).unwrap_or_default(),
                pages: v[0],
                bytes: v[1],
                functions: x.ints("location_id").iter().map(|id| locations[id].clone()).collect(),
            }
        })
        .collect();
    let sites = report["sites"].as_array().expect("report sites");
    assert!(!sites.is_empty(), "the recording has CXL sites: {report}");
    // Every site of the report is a sample of the profile, with its pid, pages, bytes and frames.
    for site in sites {
        let frames: Vec<&str> = site["frames"].as_array().expect("frames").iter().filter_map(Value::as_str).collect();
        let pid = site["pid"].as_i64().expect("pid");
        let found = samples.iter().find(|g| {
            g.pid == pid
                && g.pages == site["pages"].as_i64().expect("pages")
                && g.bytes == site["bytes"].as_i64().expect("bytes")
                && g.functions.len() == frames.len()
                && g.functions.iter().zip(&frames).all(|(f, text)| text.starts_with(f.as_str()))
        });
        let g = found.unwrap_or_else(|| panic!("report site {site} is a pprof sample"));
        assert_eq!((g.node.as_str(), g.tier.as_str()), ("0", "cxl"), "node 0 is the declared CXL node");
    }
    let pid = workload_pid(&report) as i64;
    let pages: i64 = samples.iter().filter(|g| g.pid == pid).map(|g| g.pages).sum();
    let allocated = report["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .find(|p| p["pid"].as_i64() == Some(pid))
        .and_then(|p| p["alloc_pages_by_node"]["0"].as_i64())
        .expect("the workload allocated on node 0");
    eprintln!("pprof: {} samples; workload {pid}: {pages} site pages of {allocated} allocated", samples.len());
    assert!(pages > 0 && pages <= allocated, "the workload's sites carry its CXL pages: {pages} of {allocated}");
    std::fs::remove_dir_all(d).expect("cleanup");
}

/// The venv `cargo xtask setup` makes with perfetto's compiled trace.proto.
fn perfetto_python() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-readers/venv/bin/python")
}

const DECODE_TRACE: &str = r#"
import json, sys
from google.protobuf import json_format
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
t = pb.Trace()
t.ParseFromString(open(sys.argv[1], "rb").read())
print(json.dumps(json_format.MessageToDict(t, preserving_proto_field_name=True)))
"#;

fn num(v: &Value) -> f64 {
    match v {
        Value::String(s) => s.parse().expect("a number in a string"),
        other => other.as_f64().expect("a number"),
    }
}

#[test]
#[ignore = "requires root and perfetto's trace.proto decoder (cargo xtask setup installs it)"]
fn the_perfetto_trace_decodes_with_perfettos_own_proto_and_holds_the_recorded_timelines() {
    require_root_and_agent!();
    let d = dir("perfetto");
    let (file, report) = recorded(&d);
    let out = d.join("timelines.pftrace");
    let o = tierscope(&["export", file.to_str().expect("p"), "--perfetto", out.to_str().expect("p")]);
    assert!(o.status.success(), "export: {}", stderr(&o));
    let trace = decode_trace(&out);
    let packets = trace["packet"].as_array().expect("packets");
    let descriptors: Vec<&Value> = packets.iter().filter_map(|p| p.get("track_descriptor")).collect();
    let pid = workload_pid(&report);
    let process_track = descriptors
        .iter()
        .find(|d| d["process"]["pid"].as_u64() == Some(pid))
        .unwrap_or_else(|| panic!("a process track for the workload {pid}"));
    assert!(process_track["process"]["process_name"].as_str().is_some_and(|n| n.starts_with("tierscope-work")));
    let uuid_of = |name: &str, parent: Option<&Value>| -> String {
        let d = descriptors
            .iter()
            .find(|d| d["name"] == name && parent.is_none_or(|p| d["parent_uuid"] == *p))
            .unwrap_or_else(|| panic!("a track named {name}: {descriptors:?}"));
        assert!(d.get("counter").is_some(), "{name} is a counter track");
        d["uuid"].as_str().expect("uuid (uint64 as a string)").to_string()
    };
    // (timestamp ns, value) of a counter track.
    let values = |uuid: &str| -> Vec<(f64, f64)> {
        packets
            .iter()
            .filter(|p| p["track_event"]["track_uuid"].as_str() == Some(uuid))
            .map(|p| {
                let e = &p["track_event"];
                assert_eq!(e["type"], "TYPE_COUNTER");
                let v = e.get("counter_value").or(e.get("double_counter_value")).expect("a counter value");
                (num(&p["timestamp"]), num(v))
            })
            .collect()
    };
    let peak = |v: &[(f64, f64)]| v.iter().map(|x| x.1).fold(0.0, f64::max);
    // The workload's own residency on the CXL tier peaks where the report says it does.
    let cxl = values(&uuid_of("resident bytes on cxl", Some(&process_track["uuid"])));
    let report_peak = report["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .find(|p| p["pid"].as_u64() == Some(pid))
        .and_then(|p| p["peak_bytes_by_tier"]["cxl"].as_f64())
        .expect("the workload's peak on cxl");
    assert!(report_peak >= (60 << 20) as f64, "{report_peak}");
    assert_eq!(peak(&cxl), report_peak, "the process track's peak is the report's");
    let node0 = values(&uuid_of("resident bytes on node 0 (cxl)", Some(&process_track["uuid"])));
    assert_eq!(peak(&node0), report_peak, "all of it on node 0");
    // The tier's track sums every selected process: its peak is the report's.
    let tier = values(&uuid_of("tier cxl resident bytes", None));
    let tier_peak = report["tiers"].as_array().expect("tiers").iter().find(|t| t["tier"] == "cxl").expect("cxl")
        ["peak_bytes"]
        .as_f64()
        .expect("peak");
    assert_eq!(peak(&tier), tier_peak);
    // Allocation rates of node 0, integrated over time, give back its pages allocated.
    let rates = values(&uuid_of("node 0 (cxl) allocated pages/s", None));
    // Each rate covers the time since the previous sample (the first: since the start).
    let mut integral = 0.0;
    let mut last_t = num(&report["summary"]["started_unix_ms"]) * 1e6;
    for &(t, r) in &rates {
        assert!(t > last_t, "timestamps are the recording's wall clock, in order");
        integral += r * (t - last_t) / 1e9;
        last_t = t;
    }
    let allocated = report["nodes"].as_array().expect("nodes").iter().find(|n| n["id"] == 0).expect("node 0")
        ["alloc_pages"]
        .as_f64()
        .expect("alloc_pages");
    eprintln!(
        "perfetto: {} packets; cxl peak {report_peak}; node 0 allocated {allocated}, rates integrate to {integral:.0}",
        packets.len()
    );
    assert!(allocated > 16_000.0, "{allocated}");
    assert!(
        (integral - allocated).abs() <= allocated * 0.01,
        "rates integrate to the allocations: {integral} vs {allocated}"
    );
    let instants: Vec<&str> = packets
        .iter()
        .filter(|p| p["track_event"]["type"] == "TYPE_INSTANT")
        .filter_map(|p| p["track_event"]["name"].as_str())
        .collect();
    assert!(instants.iter().any(|n| n.starts_with("exit tierscope-work")), "exit events: {instants:?}");
    std::fs::remove_dir_all(d).expect("cleanup");
}

/// Decodes a trace with perfetto's own trace.proto: its JSON form.
fn decode_trace(path: &Path) -> Value {
    let python = perfetto_python();
    assert!(python.is_file(), "{} missing: run cargo xtask setup", python.display());
    let decoded = Command::new(&python).args(["-c", DECODE_TRACE]).arg(path).output().expect("python");
    assert!(decoded.status.success(), "perfetto's decoder: {}", stderr(&decoded));
    serde_json::from_slice(&decoded.stdout).expect("JSON of the trace")
}

/// One recording (about 7.5 s) for both formats: the insight as a Perfetto slice, and as a line
/// of the pprof profile's comments.
#[test]
#[ignore = "requires root, perfetto's trace.proto decoder, protoc and pprof's profile.proto (cargo xtask setup)"]
fn a_recorded_insight_is_a_perfetto_slice_with_its_figures_and_a_pprof_comment() {
    require_root_and_agent!();
    let d = dir("insight");
    let file = insight_session::record_churning_rank(&d);
    let (report, insight) = insight_session::churn_insight(&file);
    let out = d.join("insights.pftrace");
    let o = tierscope(&["export", file.to_str().expect("p"), "--perfetto", out.to_str().expect("p")]);
    assert!(o.status.success(), "export: {}", stderr(&o));
    let trace = decode_trace(&out);
    let packets = trace["packet"].as_array().expect("packets");
    let descriptors: Vec<&Value> = packets.iter().filter_map(|p| p.get("track_descriptor")).collect();
    let pid = insight["subject"]["pid"].as_u64().expect("a process's insight");
    let process = descriptors
        .iter()
        .find(|d| d["process"]["pid"].as_u64() == Some(pid))
        .unwrap_or_else(|| panic!("a process track for {pid}"));
    let track = descriptors
        .iter()
        .find(|d| d["name"] == "insight allocation_churn")
        .unwrap_or_else(|| panic!("the insight's track: {descriptors:?}"));
    assert_eq!(track["parent_uuid"], process["uuid"], "under the churning process's track");
    let events: Vec<(f64, &Value)> = packets
        .iter()
        .filter(|p| p["track_event"]["track_uuid"] == track["uuid"])
        .map(|p| (num(&p["timestamp"]), &p["track_event"]))
        .collect();
    let types: Vec<&str> = events.iter().map(|(_, e)| e["type"].as_str().expect("type")).collect();
    assert_eq!(types, ["TYPE_SLICE_BEGIN", "TYPE_SLICE_END"], "one slice");
    let started_ns = num(&report["summary"]["started_unix_ms"]) * 1e6;
    let at = |s: &Value| started_ns + s.as_f64().expect("seconds") * 1e9;
    // Timestamps are whole ms: the report's seconds are the same ms.
    assert!((events[0].0 - at(&insight["opened_s"])).abs() < 1e3, "begins when it opened: {insight}");
    assert!((events[1].0 - at(&insight["closed_s"])).abs() < 1e3, "ends when it closed: {insight}");
    let begin = events[0].1;
    assert_eq!(begin["name"], "allocation_churn");
    let args = begin["debug_annotations"].as_array().expect("arguments");
    let arg = |name: &str| args.iter().find(|a| a["name"] == name).unwrap_or_else(|| panic!("{name} in {args:?}"));
    assert_eq!(arg("severity")["string_value"], insight["severity"]);
    assert_eq!(arg("summary")["string_value"], insight["summary"]);
    assert_eq!(arg("try_this")["string_value"], insight["try_this"]);
    assert_eq!(arg("subject")["string_value"], insight["about"]);
    assert_eq!(arg("open_at_end")["bool_value"], false);
    let evidence: BTreeMap<&str, f64> = arg("evidence")["dict_entries"]
        .as_array()
        .expect("evidence entries")
        .iter()
        .map(|e| (e["name"].as_str().expect("name"), num(&e["double_value"])))
        .collect();
    let want = insight["evidence"].as_object().expect("evidence");
    assert_eq!(evidence.len(), want.len(), "{evidence:?} vs {want:?}");
    for (k, v) in want {
        assert_eq!(evidence[k.as_str()], num(v), "evidence {k}");
    }
    eprintln!(
        "perfetto insight: {} s to {} s, {} pages/s at its worst",
        insight["opened_s"], insight["closed_s"], evidence["alloc_pages_per_s"]
    );

    let out = d.join("sites.pb.gz");
    let o = tierscope(&["export", file.to_str().expect("p"), "--pprof", out.to_str().expect("p")]);
    assert!(o.status.success(), "export: {}", stderr(&o));
    let p = decode_profile(&out);
    let strings: Vec<String> = p.fields("string_table").map(|s| s.scalar().to_string()).collect();
    let comments: Vec<&str> = p.ints("comment").iter().map(|&i| strings[i as usize].as_str()).collect();
    let want = format!(
        "insight allocation_churn {} on {}, open {:.1} s to {:.1} s: {}",
        insight["severity"].as_str().expect("severity"),
        insight["about"].as_str().expect("about"),
        insight["opened_s"].as_f64().expect("opened"),
        insight["closed_s"].as_f64().expect("closed"),
        insight["summary"].as_str().expect("summary")
    );
    eprintln!("pprof comments: {comments:?}");
    assert!(comments.contains(&want.as_str()), "{want} among the comments: {comments:?}");
    assert_eq!(comments.iter().filter(|c| c.starts_with("insight ")).count(), 1, "{comments:?}");
    std::fs::remove_dir_all(d).expect("cleanup");
}
