//! A recording's CXL allocation sites as a pprof profile (profile.proto of google/pprof,
//! gzipped), which pprof, speedscope, Perfetto and Grafana Pyroscope open. One sample per site
//! and process: values `cxl_pages` (count) and `cxl_bytes` (bytes); labels `pid`, `rank` (when
//! the process has one), `node` (the CXL-tier nodes the pages came from) and `tier`; the site's
//! frames, innermost first, as locations with one function each. The profile's comments (`pprof
//! -comments`) say what was recorded and list each insight that opened during the recording, one
//! line each. Pure: bytes out.
use std::collections::BTreeMap;

use prost::Message as _;

use super::insights::{insights, InsightUse};
use crate::recording::{ReadError, Recording};

/// The messages of profile.proto that a profile of sites uses, field numbers as there.
pub(super) mod proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Profile {
        #[prost(message, repeated, tag = "1")]
        pub sample_type: Vec<ValueType>,
        #[prost(message, repeated, tag = "2")]
        pub sample: Vec<Sample>,
        #[prost(message, repeated, tag = "3")]
        pub mapping: Vec<Mapping>,
        #[prost(message, repeated, tag = "4")]
        pub location: Vec<Location>,
        #[prost(message, repeated, tag = "5")]
        pub function: Vec<Function>,
        #[prost(string, repeated, tag = "6")]
        pub string_table: Vec<String>,
        #[prost(int64, tag = "9")]
        pub time_nanos: i64,
        #[prost(int64, tag = "10")]
        pub duration_nanos: i64,
        #[prost(message, optional, tag = "11")]
        pub period_type: Option<ValueType>,
        #[prost(int64, tag = "12")]
        pub period: i64,
        #[prost(int64, repeated, tag = "13")]
        pub comment: Vec<i64>,
        #[prost(int64, tag = "14")]
        pub default_sample_type: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ValueType {
        #[prost(int64, tag = "1")]
        pub r#type: i64,
        #[prost(int64, tag = "2")]
        pub unit: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        #[prost(uint64, repeated, tag = "1")]
        pub location_id: Vec<u64>,
        #[prost(int64, repeated, tag = "2")]
        pub value: Vec<i64>,
        #[prost(message, repeated, tag = "3")]
        pub label: Vec<Label>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        #[prost(int64, tag = "1")]
        pub key: i64,
        #[prost(int64, tag = "2")]
        pub str: i64,
        #[prost(int64, tag = "3")]
        pub num: i64,
        #[prost(int64, tag = "4")]
        pub num_unit: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Mapping {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(int64, tag = "5")]
        pub filename: i64,
        #[prost(bool, tag = "7")]
        pub has_functions: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Location {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(uint64, tag = "2")]
        pub mapping_id: u64,
        #[prost(uint64, tag = "3")]
        pub address: u64,
        #[prost(message, repeated, tag = "4")]
        pub line: Vec<Line>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Line {
        #[prost(uint64, tag = "1")]
        pub function_id: u64,
        /// A Python frame's line (0: none).
        #[prost(int64, tag = "2")]
        pub line: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Function {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(int64, tag = "2")]
        pub name: i64,
        #[prost(int64, tag = "3")]
        pub system_name: i64,
        #[prost(int64, tag = "4")]
        pub filename: i64,
    }
}

pub use proto::Profile;

/// A frame as the recording writes it: `function+0x1f (module)` or `module+0x1a2b3c`.
#[derive(Debug, PartialEq, Eq)]
pub struct FrameParts<'a> {
    pub function: &'a str,
    pub module: &'a str,
    pub offset: u64,
}

/// Splits a frame's text; a frame of another shape is a function of that name in no module.
pub fn frame_parts(text: &str) -> FrameParts<'_> {
    let offset_of = |s: &str| s.strip_prefix("0x").and_then(|h| u64::from_str_radix(h, 16).ok());
    if let Some((left, module)) = text.strip_suffix(')').and_then(|t| t.rsplit_once(" (")) {
        if let Some((function, off)) = left.rsplit_once('+') {
            if let Some(offset) = offset_of(off) {
                return FrameParts { function, module, offset };
            }
        }
        return FrameParts { function: left, module, offset: 0 };
    }
    match text.rsplit_once('+').and_then(|(m, off)| Some((m, offset_of(off)?))) {
        Some((module, offset)) => FrameParts { function: text, module, offset },
        None => FrameParts { function: text, module: "", offset: 0 },
    }
}

/// The string table: index 0 is "".
#[derive(Default)]
pub(super) struct Strings {
    index: BTreeMap<String, i64>,
    pub(super) table: Vec<String>,
}

impl Strings {
    pub(super) fn new() -> Self {
        let mut s = Strings::default();
        s.id("");
        s
    }
    pub(super) fn id(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// The CXL-tier nodes of the recording's topology, as the `node` label says them (`2`, `2,3`).
fn cxl_nodes(rec: &Recording) -> String {
    let nodes: Vec<String> =
        rec.topology.iter().flat_map(|t| &t.nodes).filter(|n| n.tier == "cxl").map(|n| n.id.to_string()).collect();
    nodes.join(",")
}

/// The profile of the recording's CXL allocation sites (the latest totals of each process).
pub fn profile(rec: &Recording) -> Result<Profile, ReadError> {
    let mut strings = Strings::new();
    let page_size = rec.meta.page_size.max(1) as i64;
    let sample_type = vec![
        proto::ValueType { r#type: strings.id("cxl_pages"), unit: strings.id("count") },
        proto::ValueType { r#type: strings.id("cxl_bytes"), unit: strings.id("bytes") },
    ];
    let (mut mappings, mut functions, mut locations) =
        (BTreeMap::<String, u64>::new(), BTreeMap::<(String, String), u64>::new(), BTreeMap::<String, u64>::new());
    let mut out = Profile { sample_type, ..Profile::default() };
    let node = cxl_nodes(rec);
    let (k_pid, k_rank, k_node, k_tier) =
        (strings.id("pid"), strings.id("rank"), strings.id("node"), strings.id("tier"));
    let (v_node, v_tier) = (strings.id(&node), strings.id("cxl"));
    for (pid, s) in &rec.sites {
        let info = rec.processes.get(pid);
        for site in &s.sites {
            let mut location_id = Vec::with_capacity(site.frames.len());
            for text in &site.frames {
                if let Some(&id) = locations.get(text) {
                    location_id.push(id);
                    continue;
                }
                let parts = frame_parts(text);
                let mapping_id = if parts.module.is_empty() {
                    0
                } else {
                    let next = mappings.len() as u64 + 1;
                    let id = *mappings.entry(parts.module.to_string()).or_insert(next);
                    if id == next {
                        out.mapping.push(proto::Mapping {
                            id,
                            filename: strings.id(parts.module),
                            has_functions: true,
                        });
                    }
                    id
                };
                let key = (parts.function.to_string(), parts.module.to_string());
                let next = functions.len() as u64 + 1;
                let function_id = *functions.entry(key).or_insert(next);
                if function_id == next {
                    let name = strings.id(parts.function);
                    out.function.push(proto::Function {
                        id: function_id,
                        name,
                        system_name: name,
                        filename: strings.id(parts.module),
                    });
                }
                let id = locations.len() as u64 + 1;
                locations.insert(text.clone(), id);
                out.location.push(proto::Location {
                    id,
                    mapping_id,
                    address: parts.offset,
                    line: vec![proto::Line { function_id, line: 0 }],
                });
                location_id.push(id);
            }
            let mut label = vec![proto::Label { key: k_pid, num: i64::from(*pid), ..Default::default() }];
            if let Some(rank) = info.and_then(|i| i.rank) {
                label.push(proto::Label { key: k_rank, num: i64::from(rank), ..Default::default() });
            }
            if !node.is_empty() {
                label.push(proto::Label { key: k_node, str: v_node, ..Default::default() });
            }
            label.push(proto::Label { key: k_tier, str: v_tier, ..Default::default() });
            let pages = site.pages as i64;
            out.sample.push(proto::Sample { location_id, value: vec![pages, pages.saturating_mul(page_size)], label });
        }
    }
    out.time_nanos = (rec.meta.started_unix_ms as i64).saturating_mul(1_000_000);
    out.duration_nanos = (rec.duration_s() * 1e9) as i64;
    out.period_type = Some(proto::ValueType { r#type: strings.id("cxl_pages"), unit: strings.id("count") });
    out.period = 1;
    let mut comments = vec![format!("tierscope {} on {}", rec.meta.tool_version, rec.meta.host)];
    if !rec.meta.command.is_empty() {
        comments.push(format!("command: {}", rec.meta.command.join(" ")));
    }
    comments.push(format!("selection: {}", rec.meta.selection));
    comments.push(page_path_comment(rec));
    comments.extend(insights(rec)?.iter().map(insight_comment));
    out.comment = comments.iter().map(|c| strings.id(c)).collect();
    out.default_sample_type = strings.id("cxl_bytes");
    out.string_table = strings.table;
    Ok(out)
}

/// How the pages were counted: in the sampled page path the sites' pages are estimates.
fn page_path_comment(rec: &Recording) -> String {
    match rec.meta.page_path.as_ref().map(|p| p.mode) {
        Some(crate::model::page_path::PagePathMode::Sampled) => {
            "page path: sampled: the sites' pages are estimates (each page event seen counted w times)".into()
        }
        Some(crate::model::page_path::PagePathMode::Exact) => "page path: exact: every page event counted".into(),
        None => "page path: not recorded (a recording made before tierscope kept it)".into(),
    }
}

/// An insight as one comment line: `insight allocation_churn warning on train 7, open 2.0 s to
/// 4.0 s: <summary>`.
pub(super) fn insight_comment(u: &InsightUse) -> String {
    let until = u.closed_s.map_or_else(|| "the end".to_string(), |c| format!("{c:.1} s"));
    format!(
        "insight {} {} on {}, open {:.1} s to {until}: {}",
        u.id.as_str(),
        u.severity.as_str(),
        u.about,
        u.opened_s,
        u.summary
    )
}

/// The profile, gzipped, as pprof reads it.
pub fn encode_gzip(p: &Profile) -> std::io::Result<Vec<u8>> {
    use std::io::Write as _;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&p.encode_to_vec())?;
    gz.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::recording_with_sites;

    /// A recording read whole and one scanned (its frames read again from the file) give one
    /// pprof output.
    #[test]
    fn scanned_and_whole_give_one_pprof() {
        let d = crate::report::tests::tmp("scan-pprof");
        let path = d.join("m.tscope");
        std::fs::write(&path, crate::report::tests::moving_session(&d, true)).unwrap();
        let whole = crate::recording::read(&path).unwrap();
        let scanned = crate::recording::scan(&path).unwrap();
        assert!(scanned.frames.is_empty() && !whole.frames.is_empty());
        assert_eq!(profile(&scanned).unwrap(), profile(&whole).unwrap());
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn frames_split_into_function_module_and_offset() {
        assert_eq!(
            frame_parts("at::empty(c10::ArrayRef<long>)+0x1f (libtorch.so)"),
            FrameParts { function: "at::empty(c10::ArrayRef<long>)", module: "libtorch.so", offset: 0x1f }
        );
        assert_eq!(
            frame_parts("libcuda.so.1+0x1a2b3c"),
            FrameParts { function: "libcuda.so.1+0x1a2b3c", module: "libcuda.so.1", offset: 0x1a2b3c }
        );
        assert_eq!(frame_parts("<python>"), FrameParts { function: "<python>", module: "", offset: 0 });
    }

    #[test]
    fn every_site_is_a_sample_with_its_pages_bytes_labels_and_frames() {
        let rec = recording_with_sites();
        let p = profile(&rec).unwrap();
        let s = |i: i64| p.string_table[i as usize].as_str();
        assert_eq!(s(0), "");
        let types: Vec<(&str, &str)> = p.sample_type.iter().map(|t| (s(t.r#type), s(t.unit))).collect();
        assert_eq!(types, [("cxl_pages", "count"), ("cxl_bytes", "bytes")]);
        let total: usize = rec.sites.values().map(|s| s.sites.len()).sum();
        assert_eq!(p.sample.len(), total);
        for ((pid, sites), sample) in
            rec.sites.iter().flat_map(|(pid, s)| s.sites.iter().map(move |x| (pid, x))).zip(&p.sample)
        {
            assert_eq!(sample.value, [sites.pages as i64, (sites.pages * rec.meta.page_size) as i64]);
            let pid_label = sample.label.iter().find(|l| s(l.key) == "pid").expect("pid");
            assert_eq!(pid_label.num, i64::from(*pid));
            let names: Vec<&str> = sample
                .location_id
                .iter()
                .map(|id| {
                    let loc = &p.location[*id as usize - 1];
                    assert_eq!(loc.id, *id);
                    s(p.function[loc.line[0].function_id as usize - 1].name)
                })
                .collect();
            let want: Vec<&str> = sites.frames.iter().map(|f| frame_parts(f).function).collect();
            assert_eq!(names, want);
        }
        let decoded = Profile::decode(&p.encode_to_vec()[..]).expect("decodes");
        assert_eq!(decoded, p);
        assert!(p.comment.iter().all(|&c| !s(c).starts_with("insight ")), "no insight opened");
        assert!(p.comment.iter().any(|&c| s(c).starts_with("page path: not recorded")), "an old recording");
    }

    #[test]
    fn a_sampled_recordings_profile_says_its_pages_are_estimates() {
        use crate::{model::page_path::PagePathMode, recording::records::PagePathRec};
        let mut rec = recording_with_sites();
        for (mode, want) in
            [(PagePathMode::Sampled, "are estimates"), (PagePathMode::Exact, "every page event counted")]
        {
            rec.meta.page_path = Some(PagePathRec { mode, reason: None, chosen: String::new(), note: None });
            let p = profile(&rec).expect("a profile");
            let said: Vec<&str> = p.comment.iter().map(|&c| p.string_table[c as usize].as_str()).collect();
            assert!(said.iter().any(|c| c.starts_with("page path: ") && c.contains(want)), "{said:?}");
        }
    }

    #[test]
    fn each_insight_is_a_comment_line() {
        use crate::{
            model::insights::{InsightId, Severity, Subject},
            recording::records::InsightRec,
        };
        let mut rec = recording_with_sites();
        let churn = |closed_t_ms| InsightRec {
            id: InsightId::AllocationChurn,
            severity: Severity::Warning,
            subject: Subject::Process { pid: 7, comm: "ts-alloc".into() },
            summary: "allocates 9000 pages/s at a flat size".into(),
            evidence: [("alloc_pages_per_s".to_string(), 9000.0)].into(),
            details: vec![],
            try_this: "reuse buffers".into(),
            since_t_ms: 1000,
            opened_t_ms: 2000,
            closed_t_ms,
        };
        rec.frames[2].insights = vec![churn(None)];
        rec.frames[4].insights = vec![churn(Some(4000))];
        let node =
            InsightRec { id: InsightId::UnhealthyDeviceUnderJob, subject: Subject::Node { node: 1 }, ..churn(None) };
        rec.frames[9].insights = vec![InsightRec { since_t_ms: 8000, opened_t_ms: 9000, ..node }];
        let p = profile(&rec).unwrap();
        let lines: Vec<&str> = p.comment.iter().map(|&c| p.string_table[c as usize].as_str()).collect();
        let insights: Vec<&str> = lines.iter().copied().filter(|l| l.starts_with("insight ")).collect();
        assert_eq!(
            insights,
            [
                "insight allocation_churn warning on ts-alloc 7, open 2.0 s to 4.0 s: allocates 9000 pages/s at a flat size",
                "insight unhealthy_device_under_job warning on node 1, open 9.0 s to the end: allocates 9000 pages/s at a flat size",
            ]
        );
        assert!(lines[0].starts_with("tierscope "), "what was recorded comes first: {lines:?}");
    }
}
