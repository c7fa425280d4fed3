//! The CPU sampler's perf events: the `cpu_sample` program on a software cpu-clock event per
//! online CPU, one tick every `1e9 / hz` ns of that CPU's time (a fixed period, so each sample
//! stands for a known CPU time; no PMU needed). A refusal (no permission, no such event, a
//! kernel without perf_event programs) is one line and a program status, never fatal.
use aya::{
    programs::{
        perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent},
        PerfEvent,
    },
    util::online_cpus,
    Ebpf,
};
use tierscope_common::names::program;

use crate::model::{
    agent::{Attach, ProgramStatus},
    cpu_profile::period_ns,
};

/// Attaches the sampler at `hz` ticks per second on every online CPU. The status for `check`,
/// and the period when it runs (`None`: off or refused; the status says why).
pub fn attach(ebpf: &mut Ebpf, hz: u32) -> (ProgramStatus, Option<u64>) {
    let status = |status, reason: String| ProgramStatus {
        name: program::CPU_SAMPLE,
        hook: "perf_event software:cpu-clock (each online CPU)".into(),
        feature: "CPU profile of watched processes",
        status,
        reason: Some(reason),
    };
    if hz == 0 {
        return (status(Attach::Unsupported, "off (cpu_samples_hz = 0)".into()), None);
    }
    let period = period_ns(hz);
    match try_attach(ebpf, period) {
        Ok(cpus) => (status(Attach::Attached, format!("{hz} Hz on {cpus} CPUs")), Some(period)),
        Err(e) => {
            let why = format!(
                "CPU samples off: {e} (perf_event_open of the software cpu-clock event needs root or CAP_PERFMON, and kernel.perf_event_paranoid <= 2 without them)"
            );
            tracing::warn!("{why}");
            (status(Attach::Unsupported, why), None)
        }
    }
}

fn try_attach(ebpf: &mut Ebpf, period: u64) -> Result<usize, String> {
    let prog = ebpf
        .program_mut(program::CPU_SAMPLE)
        .ok_or_else(|| format!("program {} missing from the object (build bug)", program::CPU_SAMPLE))?;
    let prog: &mut PerfEvent = prog.try_into().map_err(|e| format!("{}: {e}", program::CPU_SAMPLE))?;
    prog.load().map_err(|e| format!("loading {}: {e:#}", program::CPU_SAMPLE))?;
    let cpus = online_cpus().map_err(|(path, e)| format!("{path}: {e}"))?;
    for &cpu in &cpus {
        prog.attach(
            PerfEventConfig::Software(SoftwareEvent::CpuClock),
            PerfEventScope::AllProcessesOneCpu { cpu },
            SamplePolicy::Period(period),
            false,
        )
        .map_err(|e| format!("attaching to cpu-clock on CPU {cpu}: {e:#}"))?;
    }
    Ok(cpus.len())
}
