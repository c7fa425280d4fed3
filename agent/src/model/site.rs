//! CXL-tier allocation sites: a user stack normalised to (module, file offset) frames, so a site
//! can be named long after its process exited, and printed without a bare address.
use std::{collections::HashMap, fmt};

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

/// What the samples of one allocation site add up to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SiteTotals {
    /// CXL-tier pages the samples stand for: each sample carries every page its process
    /// allocated on the CXL tier since its previous delivered sample.
    pub pages: u64,
    pub samples: u64,
}

/// What the site reader gathered since the model last took it: sample totals per (tgid, site),
/// and the frames of sites named meanwhile.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SiteTally {
    pub samples: HashMap<(u32, u64), SiteTotals>,
    pub named: Vec<(u32, u64, Vec<SiteFrame>)>,
}

impl SiteTally {
    /// Adds one sample of `pages` at `site` of `tgid`.
    pub fn add(&mut self, tgid: u32, site: u64, pages: u64) {
        let t = self.samples.entry((tgid, site)).or_default();
        t.pages += pages;
        t.samples += 1;
    }
}

/// One frame of a site, innermost first.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct SiteFrame {
    /// The file the frame's code came from (its name, `libcuda.so.1`), or `[vdso]`, or
    /// `[unknown]` for code in no file (JIT, an unmapped address).
    pub module: String,
    /// Offset in the module's file; for `[unknown]`, the address itself.
    pub offset: u64,
    /// The enclosing function, when the module's symbols name it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    /// Offset of the frame from the function's start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub function_offset: Option<u64>,
}

impl SiteFrame {
    /// A frame of `module` at `offset` that no symbol names.
    pub fn unnamed(module: impl Into<String>, offset: u64) -> Self {
        SiteFrame { module: module.into(), offset, function: None, function_offset: None }
    }

    /// The same frame named `function` (+`function_offset`).
    pub fn named(self, function: impl Into<String>, function_offset: u64) -> Self {
        SiteFrame { function: Some(function.into()), function_offset: Some(function_offset), ..self }
    }
}

/// `function+0x1f (module)` when named, `module+0x1a2b3c` otherwise: never a bare address.
impl fmt::Display for SiteFrame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
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

#[cfg(test)]
mod tests {
    use super::*;

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
