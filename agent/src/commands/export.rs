//! `tierscope export FILE --pprof OUT.pb.gz --perfetto OUT.pftrace [--step-marker SPEC]`: a
//! recorded session in the formats other tools open (with `--pprof`, the CPU profile beside the
//! sites': `OUT.cpu.pb.gz`; the Perfetto trace holds each rank's training steps as slices). Each
//! file is written as [`crate::output_file`] says (a new file or the user's own, never through a
//! link).
use anyhow::{Context as _, Result};

use crate::{
    cli::ExportArgs,
    output_file,
    report::{perfetto, pprof, pprof_cpu, steps},
};

pub fn run(args: ExportArgs) -> Result<i32> {
    let rec = super::report::open(&args.file)?;
    if let Some(out) = &args.pprof {
        let profile = pprof::profile(&rec)?;
        let bytes = pprof::encode_gzip(&profile).context("compressing the pprof profile")?;
        output_file::write(out, &bytes).context("the pprof profile")?;
        eprintln!("tierscope: wrote {} ({} CXL allocation sites)", out.display(), profile.sample.len());
        if let Some(cpu) = pprof_cpu::profile(&rec)? {
            let path = pprof_cpu::beside(out);
            let bytes = pprof::encode_gzip(&cpu).context("compressing the CPU profile")?;
            output_file::write(&path, &bytes).context("the CPU profile")?;
            eprintln!("tierscope: wrote {} (CPU profile: {} stacks by thread)", path.display(), cpu.sample.len());
        }
    }
    if let Some(out) = &args.perfetto {
        let writing = || format!("writing {}", out.display());
        let output = output_file::open(out, &output_file::Invoker::current()).context("the Perfetto trace")?;
        // The trace is written as the frames are read: no half of one is left behind. It is
        // removed through the directory it was created in, never by its path again.
        let discard = |output: output_file::Output| {
            if let Err(e) = output.discard() {
                eprintln!("tierscope: warning: the unfinished trace is left: {e}");
            }
        };
        let steps = match steps::analyze(&rec, args.step_marker.as_ref()) {
            Ok(steps) => steps,
            Err(e) => {
                discard(output);
                return Err(e.into());
            }
        };
        let written = perfetto::write(&rec, &steps, &output.file);
        if written.is_err() {
            discard(output);
        }
        let packets = match written {
            Ok(n) => n,
            Err(perfetto::TraceError::Read(e)) => return Err(e.into()),
            Err(perfetto::TraceError::Write(e)) => return Err(e).with_context(writing),
        };
        let found: usize = steps.iter().map(|r| r.count).sum();
        eprintln!("tierscope: wrote {} ({packets} trace packets, {found} training steps)", out.display());
    }
    Ok(0)
}
