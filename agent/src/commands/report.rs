//! `tierscope report FILE [--format html|md|json] [-o OUT] [--step-marker SPEC]`: a recorded session as a
//! self-contained HTML page, Markdown, or JSON for scripts ([`report_format`]: Markdown on standard
//! output, a file's form by its extension); with several files, the job's report (each node's
//! ranks, their steps lined up, the stragglers); `tierscope diff A B`: what changed.
use anyhow::{Context as _, Result};

use crate::{
    cli::{DiffArgs, DiffFormat, ReportArgs, ReportFormat},
    model::redact,
    output_file, recording,
    report::{analysis, diff as compare, html, job_report, markdown, page_path, steps, stragglers},
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

/// The file `-o` names, or `None` for standard output (no `-o`, or `-o -`).
pub fn output_target(output: Option<&std::path::Path>) -> Option<&std::path::Path> {
    output.filter(|p| p.as_os_str() != "-")
}

/// The form of a report: the one asked for; else by the output file's extension (`.md`
/// Markdown, `.json` JSON, anything else the HTML page); else, on standard output, Markdown,
/// wherever it goes: text a terminal shows and a pipe or redirect gets the same (an HTML page
/// poured onto a terminal is unreadable; `-o FILE.html` or `--format html` writes one).
pub fn report_format(asked: Option<ReportFormat>, file: Option<&std::path::Path>) -> ReportFormat {
    if let Some(f) = asked {
        return f;
    }
    let Some(file) = file else { return ReportFormat::Md };
    match file.extension().map(|e| e.to_string_lossy().to_ascii_lowercase()).as_deref() {
        Some("md" | "markdown") => ReportFormat::Md,
        Some("json") => ReportFormat::Json,
        _ => ReportFormat::Html,
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
    let out = output_target(args.output.as_deref());
    let text = match report_format(args.format, out) {
        ReportFormat::Html => html::render(&a, &title),
        ReportFormat::Md => markdown::render(&a, &title),
        ReportFormat::Json => serde_json::to_string_pretty(&a)? + "\n",
    };
    write_report(&text, out)
}

/// Writes a report to its file (and says so) or standard output.
fn write_report(text: &str, out: Option<&std::path::Path>) -> Result<i32> {
    emit(text, out)?;
    if let Some(p) = out {
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
        let mut last_page_path = None;
        rec.each_frame(|f| last_page_path = f.page_path.clone())
            .with_context(|| format!("{}: reading its frames for the page path", file.display()))?;
        sessions.push(stragglers::SessionSteps {
            file: name(file),
            host: rec.meta.host.clone(),
            started_unix_ms: rec.meta.started_unix_ms,
            ranks,
            page_path: page_path::analyze(&rec.meta, last_page_path.as_ref()),
        });
    }
    let j = stragglers::analyze(sessions);
    let names: Vec<String> = args.files.iter().map(|f| name(f)).collect();
    let title = format!("tierscope job report: {}", names.join(", "));
    let out = output_target(args.output.as_deref());
    let text = match report_format(args.format, out) {
        ReportFormat::Html => job_report::html(&j, &title),
        ReportFormat::Md => job_report::markdown(&j, &title, markdown::cell),
        ReportFormat::Json => serde_json::to_string_pretty(&j)? + "\n",
    };
    write_report(&text, out)
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
    emit(&text, output_target(args.output.as_deref()))?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// Standard output gets Markdown unless a form is asked for; a file gets its extension's
    /// form, HTML by default; what is asked for wins.
    #[test]
    fn the_report_form_follows_the_flag_then_the_file_then_standard_output() {
        use ReportFormat::*;
        let cases: &[(Option<ReportFormat>, Option<&str>, ReportFormat)] = &[
            (None, None, Md),
            (None, Some("-"), Md),
            (None, Some("run.html"), Html),
            (None, Some("run.HTM"), Html),
            (None, Some("out/run"), Html),
            (None, Some("run.tscope.md"), Md),
            (None, Some("notes.markdown"), Md),
            (None, Some("run.JSON"), Json),
            (Some(Html), None, Html),
            (Some(Html), Some("-"), Html),
            (Some(Json), None, Json),
            (Some(Md), Some("run.html"), Md),
            (Some(Html), Some("run.json"), Html),
        ];
        for &(asked, output, want) in cases {
            let out = output_target(output.map(Path::new));
            assert_eq!(report_format(asked, out), want, "--format {asked:?} -o {output:?}");
        }
        assert_eq!(output_target(Some(Path::new("-"))), None, "`-o -` is standard output");
        assert_eq!(output_target(Some(Path::new("./-"))), Some(Path::new("./-")), "a file named - is given as ./-");
    }
}
