//! `tierscope report FILE [--format html|md|json] [-o OUT] [--step-marker SPEC]`: a recorded session as a
//! self-contained HTML page, Markdown, or JSON for scripts; with several files, the job's report
//! (each node's ranks, their steps lined up, the stragglers); `tierscope diff A B`: what changed.
use anyhow::{Context as _, Result};

use crate::{
    cli::{DiffArgs, DiffFormat, ReportArgs, ReportFormat},
    model::redact,
    output_file, recording,
    report::{analysis, diff as compare, html, job_report, markdown, steps, stragglers},
};

/// Reads a session, printing its warnings (a truncated file, no end record) on stderr. Its
/// frames stay in the file: a report reads them again one chunk at a time. The command lines
/// in it are masked again ([`mask_secrets`]): a file written before the recorder masked its
/// command, or by another tool, shows no secret in a report or an export either.
pub fn open(path: &std::path::Path) -> Result<recording::Recording> {
    if !path.exists() {
        anyhow::bail!("{}: no such file: give a session file written by `tierscope record`", path.display());
    }
    warn(recording::scan(path)?)
}

/// Prints a session's warnings (a truncated file, no end record) on stderr and masks its
/// command lines.
pub fn warn(mut rec: recording::Recording) -> Result<recording::Recording> {
    for w in &rec.warnings {
        eprintln!("tierscope: warning: {w}");
    }
    mask_secrets(&mut rec);
    Ok(rec)
}

/// The recorded command, the selection and every process's command line through the model's
/// redaction (a no-op on what the recorder already masked).
pub fn mask_secrets(rec: &mut recording::Recording) {
    rec.meta.command = redact::redact_args(&rec.meta.command);
    rec.meta.selection = redact::redact(&rec.meta.selection).into_owned();
    for p in rec.processes.values_mut() {
        if let std::borrow::Cow::Owned(masked) = redact::redact(&p.cmdline) {
            p.cmdline = masked;
        }
    }
}

/// Writes `text` to `out` ([`crate::output_file`]: a new file or the user's own, never through
/// a link), or standard output.
pub fn emit(text: &str, out: Option<&std::path::Path>) -> Result<()> {
    match out {
        Some(p) => output_file::write(p, text.as_bytes()).context("the output file"),
        None => {
            use std::io::Write as _;
            let mut o = std::io::stdout().lock();
            o.write_all(text.as_bytes()).and_then(|()| o.flush()).context("writing to standard output")
        }
    }
}

pub fn run(args: ReportArgs) -> Result<i32> {
    if args.files.len() > 1 {
        return job(&args);
    }
    let file = &args.files[0];
    let rec = open(file)?;
    let a = analysis::analyze_with(&rec, args.step_marker.as_ref())?;
    let title = format!("tierscope report: {}", name(file));
    let text = match args.format {
        ReportFormat::Html => html::render(&a, &title),
        ReportFormat::Md => markdown::render(&a, &title),
        ReportFormat::Json => serde_json::to_string_pretty(&a)? + "\n",
    };
    emit(&text, args.output.as_deref())?;
    if let Some(p) = &args.output {
        eprintln!("tierscope: wrote {}", p.display());
    }
    Ok(0)
}

/// `report A B ...`: one session per node of a job; each file's steps, lined up, the stragglers.
fn job(args: &ReportArgs) -> Result<i32> {
    let mut sessions = vec![];
    for file in &args.files {
        let rec = open(file)?;
        let ranks = steps::analyze(&rec, args.step_marker.as_ref())
            .with_context(|| format!("{}: reading its frames for the steps", file.display()))?;
        sessions.push(stragglers::SessionSteps {
            file: name(file),
            host: rec.meta.host.clone(),
            started_unix_ms: rec.meta.started_unix_ms,
            ranks,
        });
    }
    let j = stragglers::analyze(sessions);
    let names: Vec<String> = args.files.iter().map(|f| name(f)).collect();
    let title = format!("tierscope job report: {}", names.join(", "));
    let text = match args.format {
        ReportFormat::Html => job_report::html(&j, &title),
        ReportFormat::Md => job_report::markdown(&j, &title, markdown::cell),
        ReportFormat::Json => serde_json::to_string_pretty(&j)? + "\n",
    };
    emit(&text, args.output.as_deref())?;
    if let Some(p) = &args.output {
        eprintln!("tierscope: wrote {}", p.display());
    }
    Ok(0)
}

fn name(p: &std::path::Path) -> String {
    p.file_name().map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into_owned())
}

pub fn diff(args: DiffArgs) -> Result<i32> {
    let m = args.step_marker.as_ref();
    let (a, b) = (analysis::analyze_with(&open(&args.a)?, m)?, analysis::analyze_with(&open(&args.b)?, m)?);
    let d = compare::compare(&a, &b, &name(&args.a), &name(&args.b));
    let text = match args.format {
        DiffFormat::Text => compare::text(&d),
        DiffFormat::Html => compare::html(&d, &a, &b),
        DiffFormat::Json => serde_json::to_string_pretty(&d)? + "\n",
    };
    emit(&text, args.output.as_deref())?;
    Ok(0)
}
