//! Symbolizing the user stacks of CXL allocation sites with blazesym, while the process lives.
//! Binaries without frame pointers give fewer frames; we show what there is.
use std::collections::HashMap;

use aya::{maps::StackTraceMap, Ebpf};
use blazesym::{
    symbolize::{source::Process, source::Source, Input, Symbolized, Symbolizer},
    Pid,
};
use tierscope_common::names::map;

/// Frames kept per site.
const MAX_FRAMES: usize = 12;

/// Caches symbolized stacks per (tgid, stack id): a stack id's frames never change while the
/// process lives.
#[derive(Default)]
pub struct SiteSymbolizer {
    symbolizer: Option<Symbolizer>,
    done: HashMap<(u32, u32), Vec<String>>,
}

impl SiteSymbolizer {
    /// Frames for the given sites not resolved before: (tgid, stack id, frames).
    pub fn resolve(
        &mut self,
        ebpf: &Ebpf,
        sites: impl IntoIterator<Item = (u32, u32)>,
    ) -> Vec<(u32, u32, Vec<String>)> {
        let Some(stacks) = ebpf.map(map::STACKS).and_then(|m| StackTraceMap::try_from(m).ok()) else {
            return vec![];
        };
        let symbolizer = self.symbolizer.get_or_insert_with(Symbolizer::new);
        let mut out = Vec::new();
        for (tgid, stack_id) in sites {
            if self.done.contains_key(&(tgid, stack_id)) {
                continue;
            }
            let Ok(trace) = stacks.get(&stack_id, 0) else { continue };
            let addrs: Vec<u64> = trace.frames().iter().map(|f| f.ip).filter(|&ip| ip != 0).take(MAX_FRAMES).collect();
            if addrs.is_empty() {
                continue;
            }
            let src = Source::Process(Process::new(Pid::from(tgid)));
            let frames: Vec<String> = match symbolizer.symbolize(&src, Input::AbsAddr(&addrs)) {
                Ok(syms) => addrs.iter().zip(syms.iter()).map(|(a, s)| frame_text(*a, s)).collect(),
                Err(e) => {
                    tracing::debug!("symbolizing a stack of {tgid}: {e}");
                    addrs.iter().map(|a| format!("{a:#x}")).collect()
                }
            };
            self.done.insert((tgid, stack_id), frames.clone());
            out.push((tgid, stack_id, frames));
        }
        out
    }

    /// Forgets the stacks of processes that are gone.
    pub fn forget(&mut self, tgid: u32) {
        self.done.retain(|(t, _), _| *t != tgid);
    }
}

fn frame_text(addr: u64, s: &Symbolized<'_>) -> String {
    match s.as_sym() {
        Some(sym) => {
            let module =
                sym.module.as_deref().and_then(|m| m.to_str()).and_then(|m| m.rsplit('/').next()).unwrap_or("?");
            format!("{}+{:#x} ({module})", sym.name, sym.offset)
        }
        None => format!("{addr:#x}"),
    }
}
