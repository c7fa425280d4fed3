//! A recording's CPU samples as a pprof CPU profile (profile.proto, gzipped), written beside the
//! CXL allocation profile: values `samples` (count: clock ticks) and `cpu` (nanoseconds: ticks x
//! the sampling period), period `cpu`/nanoseconds; one sample per (process, thread, stack), labels
//! `pid`, `tid` and `rank` (when the process has one); frames innermost first, a Python frame
//! as its function in its file with its line, a native one as its function in its module.
//! Pure: bytes out.
use std::collections::BTreeMap;

use super::{
    insights::insights,
    pprof::{insight_comment, proto, Profile, Strings},
};
use crate::{
    model::site::{FrameKind, SiteFrame},
    recording::{ReadError, Recording},
};

/// Builds profile tables: one function per (name, file), one location per distinct frame.
struct Tables {
    strings: Strings,
    mappings: BTreeMap<String, u64>,
    functions: BTreeMap<(String, String), u64>,
    locations: BTreeMap<(String, String, u64), u64>,
    out: Profile,
}

impl Tables {
    fn location(&mut self, f: &SiteFrame) -> u64 {
        let (name, file, line) = match f.kind {
            FrameKind::Python | FrameKind::MainThread => {
                let function = f.function.clone().unwrap_or_else(|| "?".into());
                // The main thread's frame is a native worker's context, not its caller: said so.
                let name = if f.kind == FrameKind::MainThread { format!("(main thread) {function}") } else { function };
                (name, f.file.clone().unwrap_or_else(|| f.module.clone()), u64::from(f.line.unwrap_or(0)))
            }
            FrameKind::Native => {
                (f.function.clone().unwrap_or_else(|| format!("{}+{:#x}", f.module, f.offset)), f.module.clone(), 0)
            }
        };
        let key = (name.clone(), file.clone(), if f.is_python() { line } else { f.offset });
        if let Some(&id) = self.locations.get(&key) {
            return id;
        }
        let mapping_id = if f.kind == FrameKind::Native {
            let next = self.mappings.len() as u64 + 1;
            let id = *self.mappings.entry(f.module.clone()).or_insert(next);
            if id == next {
                let filename = self.strings.id(&f.module);
                self.out.mapping.push(proto::Mapping { id, filename, has_functions: true });
            }
            id
        } else {
            0
        };
        let next = self.functions.len() as u64 + 1;
        let function_id = *self.functions.entry((name.clone(), file.clone())).or_insert(next);
        if function_id == next {
            let n = self.strings.id(&name);
            let filename = self.strings.id(&file);
            self.out.function.push(proto::Function { id: function_id, name: n, system_name: n, filename });
        }
        let id = self.locations.len() as u64 + 1;
        self.locations.insert(key, id);
        let address = if f.kind == FrameKind::Native { f.offset } else { 0 };
        self.out.location.push(proto::Location {
            id,
            mapping_id,
            address,
            line: vec![proto::Line { function_id, line: line as i64 }],
        });
        id
    }
}

/// The CPU profile of the recording's sampled processes; `None` when it holds no CPU sample.
pub fn profile(rec: &Recording) -> Result<Option<Profile>, ReadError> {
    if rec.cpu.values().all(|c| c.samples.is_empty()) {
        return Ok(None);
    }
    let mut t = Tables {
        strings: Strings::new(),
        mappings: BTreeMap::new(),
        functions: BTreeMap::new(),
        locations: BTreeMap::new(),
        out: Profile::default(),
    };
    let (samples, cpu, count, ns) =
        (t.strings.id("samples"), t.strings.id("cpu"), t.strings.id("count"), t.strings.id("nanoseconds"));
    t.out.sample_type =
        vec![proto::ValueType { r#type: samples, unit: count }, proto::ValueType { r#type: cpu, unit: ns }];
    let (k_pid, k_tid, k_rank) = (t.strings.id("pid"), t.strings.id("tid"), t.strings.id("rank"));
    let mut period = 0;
    for (pid, c) in &rec.cpu {
        period = period.max(c.period_ns);
        let mut by: BTreeMap<(u32, u64), u64> = BTreeMap::new();
        for s in &c.samples {
            *by.entry((s.tid, s.stack)).or_default() += s.ticks;
        }
        let rank = rec.processes.get(pid).and_then(|i| i.rank);
        for ((tid, stack), ticks) in by {
            let frames = c.stacks.get(&stack).map(Vec::as_slice).unwrap_or(&[]);
            let location_id = if frames.is_empty() {
                // Never named (the process left before its frames were): one frame saying so.
                vec![t.location(&SiteFrame::unnamed("[unnamed stack]", stack))]
            } else {
                frames.iter().map(|f| t.location(f)).collect()
            };
            let mut label = vec![
                proto::Label { key: k_pid, num: i64::from(*pid), ..Default::default() },
                proto::Label { key: k_tid, num: i64::from(tid), ..Default::default() },
            ];
            if let Some(r) = rank {
                label.push(proto::Label { key: k_rank, num: i64::from(r), ..Default::default() });
            }
            let ticks = ticks as i64;
            let value = vec![ticks, ticks.saturating_mul(c.period_ns as i64)];
            t.out.sample.push(proto::Sample { location_id, value, label });
        }
    }
    let mut out = t.out;
    out.time_nanos = (rec.meta.started_unix_ms as i64).saturating_mul(1_000_000);
    out.duration_nanos = (rec.duration_s() * 1e9) as i64;
    out.period_type = Some(proto::ValueType { r#type: cpu, unit: ns });
    out.period = period as i64;
    let mut comments = vec![format!("tierscope {} on {}: CPU samples", rec.meta.tool_version, rec.meta.host)];
    if !rec.meta.command.is_empty() {
        comments.push(format!("command: {}", rec.meta.command.join(" ")));
    }
    comments.extend(insights(rec)?.iter().map(insight_comment));
    out.comment = comments.iter().map(|c| t.strings.id(c)).collect();
    out.default_sample_type = cpu;
    out.string_table = t.strings.table;
    Ok(Some(out))
}

/// Where the CPU profile goes beside the CXL profile at `out`: `sites.pb.gz` ->
/// `sites.cpu.pb.gz`, `x.pprof` -> `x.cpu.pprof`, `x` -> `x.cpu`.
pub fn beside(out: &std::path::Path) -> std::path::PathBuf {
    let name = out.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let cpu = match name.find('.') {
        Some(i) if i > 0 => format!("{}.cpu{}", &name[..i], &name[i..]),
        _ => format!("{name}.cpu"),
    };
    out.with_file_name(cpu)
}

#[cfg(test)]
mod tests {
    use prost::Message as _;

    use super::*;
    use crate::recording::cpu::{CpuRecording, CpuSampleRec};

    #[test]
    fn the_cpu_profile_sums_ticks_per_thread_and_stack() {
        let mut rec = Recording::default();
        let mut c = CpuRecording { period_ns: 20_000_000, ..Default::default() };
        let py = SiteFrame::python("/w/train.py", "hot_loop", 5);
        let native = SiteFrame::unnamed("python3.12", 0x40).named("Py_RunMain", 3);
        c.stacks.insert(1, vec![py.clone(), native.clone()]);
        let s = |tid, stack, ticks| CpuSampleRec { t_us: 0, tid, stack, ticks };
        c.samples = vec![s(7, 1, 1), s(7, 1, 2), s(8, 2, 1)];
        rec.cpu.insert(7, c);
        let p = profile(&rec).unwrap().expect("samples");
        let st = |i: i64| p.string_table[i as usize].as_str();
        assert_eq!((st(p.sample_type[0].r#type), st(p.sample_type[0].unit)), ("samples", "count"));
        assert_eq!((st(p.sample_type[1].r#type), st(p.sample_type[1].unit)), ("cpu", "nanoseconds"));
        assert_eq!(p.period, 20_000_000);
        assert_eq!(p.sample.len(), 2, "one per (thread, stack)");
        assert_eq!(p.sample[0].value, vec![3, 60_000_000]);
        // The Python frame: its function in its file, with its line.
        let loc = &p.location[(p.sample[0].location_id[0] - 1) as usize];
        let f = &p.function[(loc.line[0].function_id - 1) as usize];
        assert_eq!((st(f.name), st(f.filename), loc.line[0].line), ("hot_loop", "/w/train.py", 5));
        assert_eq!(st(p.function[1].name), "Py_RunMain");
        // The unnamed stack still counts.
        assert_eq!(p.sample[1].value[0], 1);
        let bytes = p.encode_to_vec();
        assert_eq!(Profile::decode(bytes.as_slice()).unwrap(), p);
        assert!(profile(&Recording::default()).unwrap().is_none());
    }

    #[test]
    fn the_cpu_profile_goes_beside_the_sites_profile() {
        use std::path::Path;
        assert_eq!(beside(Path::new("/t/sites.pb.gz")), Path::new("/t/sites.cpu.pb.gz"));
        assert_eq!(beside(Path::new("out")), Path::new("out.cpu"));
        assert_eq!(beside(Path::new(".hidden")), Path::new(".hidden.cpu"));
    }
}
