//! CXL-tier allocation sites: a user stack normalised to (module, file offset) frames, so a site
//! can be named long after its process exited, and printed without a bare address.
use std::{
    collections::{BTreeMap, HashMap},
    fmt,
};

use serde::Serialize;

/// The default per-process site-sample budget (`[collect] site_samples_per_sec`): enough
/// samples to tell a process's allocation sites apart within seconds, few enough that one
/// process pinning gigabytes page by page costs the agent little (each sample is a ~1 KiB
/// record and a hash lookup).
pub const DEFAULT_SAMPLES_PER_SEC: u32 = 200;

/// One in this many CXL-tier allocations is a sampling attempt by default. Every allocation's
/// pages are still carried by the next delivered sample, so site totals stay exact; the rate
/// only bounds what the attempts cost the allocating process (a budget lookup and a clock read
/// each): a training loop allocating 140k pages/s on a CXL node makes about 2,200 attempts/s,
/// still above the 200/s budget.
pub const DEFAULT_SAMPLE_EVERY: u32 = 64;

/// Pages of user stack a site sample copies for unwinding through `.eh_frame` (the page `sp`
/// lies in and three above it: 12-16 KiB above `sp`, enough for the frames between an allocation
/// and the interpreter or training loop that asked for it).
pub const DEFAULT_USER_STACK_PAGES: u32 = 4;

/// Bytes of the `SITE_SAMPLES` ring buffer for a per-process budget of `samples_per_sec`
/// records of `record_bytes`: one second of one process at its budget (the reader drains the
/// ring as records arrive, so this is slack for a reader busy naming a burst of new sites, or
/// several processes at once), as a power of two between 1 MiB and 16 MiB; no budget: 16 MiB.
/// Every page of it becomes resident in the agent (mapped twice), so it is sized, not maximal:
/// 4 MiB at the default 200/s (16 MiB before: 32 MiB of the agent's RSS). Pure.
pub fn site_ring_bytes(samples_per_sec: u32, record_bytes: usize) -> u32 {
    const MIN: u64 = 1 << 20;
    const MAX: u64 = 16 << 20;
    if samples_per_sec == 0 {
        return MAX as u32;
    }
    // The ring's 8-byte record header, and records are 8-aligned.
    let record = (record_bytes as u64 + 8).next_multiple_of(8);
    let want = record.saturating_mul(u64::from(samples_per_sec));
    want.checked_next_power_of_two().unwrap_or(MAX).clamp(MIN, MAX) as u32
}

/// What the samples of one allocation site add up to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SiteTotals {
    /// CXL-tier pages the samples stand for: each sample carries every page its process
    /// allocated on the CXL tier since its previous delivered sample.
    pub pages: u64,
    pub samples: u64,
}

/// One delivered CPU sample: when, which thread, which stack, and how many ticks it carries
/// (itself and those its process's budget skipped).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuMark {
    /// `bpf_ktime_get_ns` of the tick.
    pub ts_ns: u64,
    pub tid: u32,
    /// The stack's id (shared with the site ids: the same hash of normalised frames).
    pub stack: u64,
    pub ticks: u64,
}

/// What the site reader gathered since the model last took it: sample totals per (tgid, site),
/// and the frames of sites named meanwhile.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SiteTally {
    pub samples: HashMap<(u32, u64), SiteTotals>,
    pub named: Vec<(u32, u64, Vec<SiteFrame>)>,
    /// CPU samples (tgid, sample), their stacks named like sites (`named`).
    pub cpu: Vec<(u32, CpuMark)>,
}

impl SiteTally {
    /// Adds one sample of `pages` at `site` of `tgid`.
    pub fn add(&mut self, tgid: u32, site: u64, pages: u64) {
        let t = self.samples.entry((tgid, site)).or_default();
        t.pages += pages;
        t.samples += 1;
    }
}

/// One site's share of its process's CXL-tier pages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SiteEstimate {
    pub site: u64,
    /// The process's CXL-tier pages (exact, from the page counters) in proportion to what this
    /// site's samples carried.
    pub pages: u64,
    /// The pages its delivered samples carried.
    pub sampled_pages: u64,
    pub samples: u64,
}

/// Each site's share of `exact_pages`, the process's CXL-tier pages as the page counters count
/// them, busiest first (ties by id). A sample carries the pages its process allocated there since
/// its previous delivered sample, so the pages after the last one (a burst the sample budget cut
/// short, an allocation just before exit) are carried by none: each site gets the exact total in
/// proportion to what its samples carried (largest remainder, so the shares add up to it). Never
/// below what the samples carried, and no sample, no share. Pure.
pub fn estimate_pages(sites: &BTreeMap<u64, SiteTotals>, exact_pages: u64) -> Vec<SiteEstimate> {
    let carried: u64 = sites.values().map(|t| t.pages).sum();
    let total = exact_pages.max(carried);
    let mut out: Vec<(SiteEstimate, u128)> = sites
        .iter()
        .map(|(&site, t)| {
            let scaled = u128::from(t.pages) * u128::from(total);
            let (pages, rem) = match u128::from(carried) {
                0 => (0, 0),
                c => ((scaled / c) as u64, scaled % c),
            };
            (SiteEstimate { site, pages, sampled_pages: t.pages, samples: t.samples }, rem)
        })
        .collect();
    let mut left = total - out.iter().map(|(e, _)| e.pages).sum::<u64>().min(total);
    if carried > 0 && left > 0 {
        out.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.site.cmp(&b.0.site)));
        for (e, _) in out.iter_mut() {
            if left == 0 {
                break;
            }
            e.pages += 1;
            left -= 1;
        }
    }
    let mut out: Vec<SiteEstimate> = out.into_iter().map(|(e, _)| e).collect();
    out.sort_by(|a, b| b.pages.cmp(&a.pages).then(b.samples.cmp(&a.samples)).then(a.site.cmp(&b.site)));
    out
}

/// What ran a frame: machine code, or the Python interpreter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FrameKind {
    #[default]
    Native,
    Python,
    /// A Python frame of the process's main thread, taken when a thread with no Python thread
    /// state (an OpenMP/MKL/ATen worker, a CUDA callback thread) was sampled: the line the work
    /// was handed out from, as context, not a frame of the sampled thread.
    #[serde(rename = "main_thread")]
    MainThread,
}

/// One frame of a site, innermost first.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
pub struct SiteFrame {
    pub kind: FrameKind,
    /// The file the frame's code came from (its name, `libcuda.so.1`), or `[vdso]`, or
    /// `[unknown]` for code in no file (JIT, an unmapped address); for a Python frame, the
    /// script's file name.
    pub module: String,
    /// Offset in the module's file; for `[unknown]`, the address itself; for a Python frame,
    /// its line.
    pub offset: u64,
    /// The enclosing function, when the module's symbols name it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    /// Offset of the frame from the function's start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub function_offset: Option<u64>,
    /// A Python frame's source file, as its code object names it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
}

impl SiteFrame {
    /// A frame of `module` at `offset` that no symbol names.
    pub fn unnamed(module: impl Into<String>, offset: u64) -> Self {
        SiteFrame {
            kind: FrameKind::Native,
            module: module.into(),
            offset,
            function: None,
            function_offset: None,
            file: None,
            line: None,
        }
    }

    /// A Python frame: `function` at `file:line`.
    pub fn python(file: &str, function: &str, line: u32) -> Self {
        let module = file.rsplit('/').next().unwrap_or(file).to_string();
        SiteFrame {
            kind: FrameKind::Python,
            module,
            offset: u64::from(line),
            function: Some(function.to_string()),
            function_offset: None,
            file: Some(file.to_string()),
            line: Some(line),
        }
    }

    /// The same Python frame as context: the main thread's while another thread was sampled.
    pub fn as_main_thread(self) -> Self {
        SiteFrame { kind: FrameKind::MainThread, ..self }
    }

    /// Whether the interpreter ran this frame (the sampled thread's own, or its main thread's).
    pub fn is_python(&self) -> bool {
        matches!(self.kind, FrameKind::Python | FrameKind::MainThread)
    }

    /// Whether a symbol or a code object named this frame.
    pub fn is_named(&self) -> bool {
        self.function.is_some() && !(self.is_python() && self.file.as_deref() == Some("[unknown]"))
    }

    /// The same frame named `function` (+`function_offset`).
    pub fn named(self, function: impl Into<String>, function_offset: u64) -> Self {
        SiteFrame { function: Some(function.into()), function_offset: Some(function_offset), ..self }
    }
}

/// `function+0x1f (module)` when named, `module+0x1a2b3c` otherwise: never a bare address;
/// a Python frame as `path/to/file.py:LINE in function`, the main thread's as context
/// `(main thread) path/to/file.py:LINE in function`.
impl fmt::Display for SiteFrame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_python() {
            if self.kind == FrameKind::MainThread {
                f.write_str("(main thread) ")?;
            }
            let file = self.file.as_deref().unwrap_or(&self.module);
            return write!(f, "{file}:{} in {}", self.line.unwrap_or(0), self.function.as_deref().unwrap_or("?"));
        }
        match &self.function {
            Some(func) => write!(f, "{func}+{:#x} ({})", self.function_offset.unwrap_or(0), self.module),
            None => write!(f, "{}+{:#x}", self.module, self.offset),
        }
    }
}

/// The frames of a site as text, innermost first, joined by ` <- `.
pub fn frames_text(frames: &[SiteFrame], max: usize) -> String {
    frames.iter().take(max).map(ToString::to_string).collect::<Vec<_>>().join(" <- ")
}

/// The frames as text with the Python frames first (innermost first), then the main thread's
/// (context for a native worker's sample), then the native ones: the script's lines are what a
/// training engineer reads first.
pub fn frames_text_python_first(frames: &[SiteFrame], max: usize) -> String {
    let of = |k: FrameKind| frames.iter().filter(move |f| f.kind == k);
    of(FrameKind::Python)
        .chain(of(FrameKind::MainThread))
        .chain(of(FrameKind::Native))
        .take(max)
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" <- ")
}

/// Replaces each native `_PyEval_EvalFrameDefault` frame (innermost first) with the Python
/// frames that call of the interpreter ran (`runs`, innermost first). Runs left over (the native
/// walk stopped short) go on the outer end. Pure.
pub fn splice_python(native: Vec<SiteFrame>, runs: Vec<Vec<SiteFrame>>) -> Vec<SiteFrame> {
    let mut runs = runs.into_iter();
    let mut out = Vec::with_capacity(native.len());
    for f in native {
        let eval = f.function.as_deref().is_some_and(|n| n.starts_with("_PyEval_EvalFrameDefault"));
        match (eval, eval.then(|| runs.next()).flatten()) {
            (true, Some(run)) => out.extend(run),
            _ => out.push(f),
        }
    }
    out.extend(runs.flatten());
    out
}

/// How many frames of the sites' samples are named, native and Python, weighted by samples.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FramesNamed {
    pub native: u64,
    pub native_named: u64,
    pub python: u64,
    pub python_named: u64,
}

impl FramesNamed {
    /// Adds `samples` samples of a site with `frames`.
    pub fn add(&mut self, frames: &[SiteFrame], samples: u64) {
        for f in frames {
            let named = u64::from(f.is_named()) * samples;
            match f.kind {
                FrameKind::Native => {
                    self.native += samples;
                    self.native_named += named;
                }
                FrameKind::Python | FrameKind::MainThread => {
                    self.python += samples;
                    self.python_named += named;
                }
            }
        }
    }
}

/// How the samples' stacks were taken (the reader's counts since the agent started).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StackFigures {
    /// Samples unwound through the modules' unwind tables.
    pub unwound: u64,
    /// ... of which the walk ran past the copied stack (the outer frames are missing).
    pub unwound_truncated: u64,
    /// Samples that kept their frame-pointer frames, by why: the kernel copied no stack
    /// (`no_copy`), the process had gone before its modules were read, the instruction pointer
    /// lay in no module with unwind tables (JIT), the tables gave under two frames.
    pub fp_no_copy: u64,
    pub fp_no_modules: u64,
    pub fp_no_tables: u64,
    pub fp_short: u64,
    /// Mean user-space unwinding time per unwound sample (ns).
    /// Frames dropped because their address lay in a mapping with no code (a data file,
    /// `/dev/zero`): what an unwinder reads past a stack's real end, never shown as a frame.
    pub frames_not_code: u64,
    pub unwind_ns_per_sample: u64,
    /// Samples with Python frames; without, by why: the thread had no Python thread state (a
    /// native thread), ran no Python code, its interpreter's memory could not be read, it had
    /// left the PID namespace its process was recognised in, or the search of a long thread
    /// list was cut at its per-sample bound (the next sample goes on from there).
    pub python: u64,
    pub python_no_thread: u64,
    /// ... of which carried their process's main thread's frames as context instead.
    pub python_main_context: u64,
    pub python_other_namespace: u64,
    pub python_search_cut: u64,
    pub python_no_frame: u64,
    pub python_read_failed: u64,
    /// Python processes recognised, and those whose frames the agent cannot read (their samples
    /// keep native frames), by why: a version other than 3.10-3.13, no `_PyRuntime`
    /// symbol (stripped), 3.13 debug offsets missing, unreadable, implausible or free-threaded.
    pub python_processes: u64,
    /// Of those, found when the process joined the watch, before its first sample (the kernel
    /// then read its Python frames from its first sampled allocation on).
    pub python_examined_ahead: u64,
    pub python_unsupported: u64,
    pub python_unsupported_version: u64,
    pub python_no_runtime: u64,
    pub python_bad_debug_offsets: u64,
    /// Python frames whose code object could not be read.
    pub python_frames_unresolved: u64,
    /// Reads of module files that failed (truncated, not a regular file, a table past the
    /// bound): their samples keep frame-pointer frames, their frames stay `module+0xoffset`.
    pub module_unreadable: u64,
    /// Module files (or their debug files) that were another build than what the process maps:
    /// a container's file read by its path inside the container's root whose inode and build
    /// id differ from the mapping's (replaced since it was mapped), a debug file whose build id
    /// or debuglink CRC32 differs. Their frames stay `module+0xoffset`, never named from it.
    pub module_mismatch: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workers_context_frames_are_labelled_and_read_after_its_own_python_lines() {
        let native = SiteFrame::unnamed("libmkl_vml_avx512.so.2", 0x40).named("mkl_vml_kernel_sSqrt", 0x12);
        let step = SiteFrame::python("/job/train.py", "step", 44).as_main_thread();
        let main = SiteFrame::python("/job/train.py", "<module>", 60).as_main_thread();
        assert_eq!(step.to_string(), "(main thread) /job/train.py:44 in step");
        assert!(step.is_python() && step.is_named());
        let frames = vec![native.clone(), step, main];
        assert_eq!(
            frames_text_python_first(&frames, 2),
            "(main thread) /job/train.py:44 in step <- (main thread) /job/train.py:60 in <module>"
        );
        // The thread's own Python lines come before its main thread's.
        let own = SiteFrame::python("/job/train.py", "worker_fn", 12);
        let mut with_own = frames.clone();
        with_own.insert(1, own);
        assert!(frames_text_python_first(&with_own, 1).starts_with("/job/train.py:12 in worker_fn"));
        let mut named = FramesNamed::default();
        named.add(&frames, 3);
        assert_eq!((named.native, named.python, named.python_named), (3, 6, 6));
        assert_eq!(serde_json::to_value(FrameKind::MainThread).unwrap(), "main_thread");
    }

    #[test]
    fn site_estimates_share_the_exact_total_by_what_the_samples_carried() {
        let t = |pages, samples| SiteTotals { pages, samples };
        // A burst the budget cut short: the samples carried 2,288 of 4,096 pages.
        let one = BTreeMap::from([(7, t(2288, 23))]);
        assert_eq!(
            estimate_pages(&one, 4096),
            vec![SiteEstimate { site: 7, pages: 4096, sampled_pages: 2288, samples: 23 }]
        );
        // Three sites: shares by carried pages, the remainder to the largest fractions.
        let three = BTreeMap::from([(1, t(1, 1)), (2, t(1, 1)), (3, t(1, 1))]);
        let e = estimate_pages(&three, 10);
        assert_eq!(e.iter().map(|e| e.pages).sum::<u64>(), 10);
        assert_eq!(e.iter().map(|e| (e.site, e.pages)).collect::<Vec<_>>(), vec![(1, 4), (2, 3), (3, 3)]);
        let skew = BTreeMap::from([(1, t(300, 3)), (2, t(100, 1))]);
        let e = estimate_pages(&skew, 1000);
        assert_eq!(
            e.iter().map(|e| (e.site, e.pages, e.sampled_pages)).collect::<Vec<_>>(),
            vec![(1, 750, 300), (2, 250, 100)]
        );
    }

    #[test]
    fn site_estimates_never_fall_below_what_the_samples_carried() {
        let t = |pages, samples| SiteTotals { pages, samples };
        // Counters behind the samples (a reading older than the sample): the samples stand.
        let sites = BTreeMap::from([(1, t(60, 2)), (2, t(40, 1))]);
        let e = estimate_pages(&sites, 50);
        assert_eq!(e.iter().map(|e| (e.site, e.pages)).collect::<Vec<_>>(), vec![(1, 60), (2, 40)]);
        // No site, nothing to share; sites whose samples carried nothing get nothing.
        assert!(estimate_pages(&BTreeMap::new(), 500).is_empty());
        let empty = BTreeMap::from([(1, t(0, 1))]);
        assert_eq!(estimate_pages(&empty, 500)[0].pages, 0);
        // Huge counts do not overflow.
        let big = BTreeMap::from([(1, t(u64::MAX / 2, 1)), (2, t(u64::MAX / 2, 1))]);
        assert_eq!(estimate_pages(&big, u64::MAX).iter().map(|e| e.pages as u128).sum::<u128>(), u64::MAX as u128);
    }

    #[test]
    fn the_site_ring_holds_a_second_of_one_process_at_its_budget() {
        let record = 18_900;
        assert_eq!(site_ring_bytes(DEFAULT_SAMPLES_PER_SEC, record), 4 << 20);
        assert_eq!(site_ring_bytes(10, record), 1 << 20);
        assert_eq!(site_ring_bytes(600, record), 16 << 20);
        assert_eq!(site_ring_bytes(100_000, record), 16 << 20);
        assert_eq!(site_ring_bytes(0, record), 16 << 20);
        let b = site_ring_bytes(300, record);
        assert!(b.is_power_of_two() && b as usize >= 300 * record, "{b}");
    }

    #[test]
    fn an_unnamed_frame_prints_as_module_plus_offset() {
        assert_eq!(SiteFrame::unnamed("libcuda.so.1", 0x1a2b3c).to_string(), "libcuda.so.1+0x1a2b3c");
        assert_eq!(SiteFrame::unnamed("[unknown]", 0x7f00_0000_1000).to_string(), "[unknown]+0x7f0000001000");
    }

    #[test]
    fn a_named_frame_prints_function_offset_and_module() {
        let f = SiteFrame::unnamed("libc.so.6", 0x11e3d).named("ioctl", 0x3d);
        assert_eq!(f.to_string(), "ioctl+0x3d (libc.so.6)");
        let json = serde_json::to_value(&f).expect("serializes");
        assert_eq!(json["module"], "libc.so.6");
        assert_eq!(json["offset"], 0x11e3d);
        assert_eq!(json["function"], "ioctl");
        assert!(serde_json::to_value(SiteFrame::unnamed("m", 1)).expect("serializes").get("function").is_none());
    }

    #[test]
    fn frames_text_joins_the_innermost_first() {
        let fr = [SiteFrame::unnamed("a", 1), SiteFrame::unnamed("b", 2).named("f", 0), SiteFrame::unnamed("c", 3)];
        assert_eq!(frames_text(&fr, 2), "a+0x1 <- f+0x0 (b)");
    }
}
