//! `tierscope export FILE --pprof OUT.pb.gz --perfetto OUT.pftrace`: a recorded session in the
//! formats other tools open. Each file is written as [`crate::output_file`] says (a new file or
//! the user's own, never through a link).
use anyhow::{Context as _, Result};

use crate::{
    cli::ExportArgs,
    output_file,
    report::{perfetto, pprof},
};

pub fn run(args: ExportArgs) -> Result<i32> {
    let rec = super::report::open(&args.file)?;
    if let Some(out) = &args.pprof {
        let profile = pprof::profile(&rec)?;
        let bytes = pprof::encode_gzip(&profile).context("compressing the pprof profile")?;
        output_file::write(out, &bytes).context("the pprof profile")?;
        eprintln!("tierscope: wrote {} ({} CXL allocation sites)", out.display(), profile.sample.len());
    }
    if let Some(out) = &args.perfetto {
        let trace = perfetto::trace(&rec)?;
        output_file::write(out, &perfetto::encode(&trace)).context("the Perfetto trace")?;
        eprintln!("tierscope: wrote {} ({} trace packets)", out.display(), trace.packet.len());
    }
    Ok(0)
}
