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
        let writing = || format!("writing {}", out.display());
        let file = std::fs::File::create(out).with_context(writing)?;
        let written = perfetto::write(&rec, file);
        if written.is_err() {
            // The trace is written as the frames are read: no half of one is left behind.
            let _ = std::fs::remove_file(out);
        }
        let packets = match written {
            Ok(n) => n,
            Err(perfetto::TraceError::Read(e)) => return Err(e.into()),
            Err(perfetto::TraceError::Write(e)) => return Err(e).with_context(writing),
        };
        eprintln!("tierscope: wrote {} ({packets} trace packets)", out.display());
    }
    Ok(0)
}
