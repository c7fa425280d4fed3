//! `tierscope export FILE --pprof OUT.pb.gz --perfetto OUT.pftrace`: a recorded session in the
//! formats other tools open.
use anyhow::{Context as _, Result};

use crate::{
    cli::ExportArgs,
    report::{perfetto, pprof},
};

pub fn run(args: ExportArgs) -> Result<i32> {
    let rec = super::report::open(&args.file)?;
    if let Some(out) = &args.pprof {
        let profile = pprof::profile(&rec)?;
        let bytes = pprof::encode_gzip(&profile).context("compressing the pprof profile")?;
        std::fs::write(out, bytes).with_context(|| format!("writing {}", out.display()))?;
        eprintln!("tierscope: wrote {} ({} CXL allocation sites)", out.display(), profile.sample.len());
    }
    if let Some(out) = &args.perfetto {
        let trace = perfetto::trace(&rec)?;
        std::fs::write(out, perfetto::encode(&trace)).with_context(|| format!("writing {}", out.display()))?;
        eprintln!("tierscope: wrote {} ({} trace packets)", out.display(), trace.packet.len());
    }
    Ok(0)
}
