//! Root tests of profiling sessions on the real kernel: `record` follows a command and passes
//! its exit code, a recorder killed with SIGKILL leaves a file that reports, damaged files give
//! one-line errors in every command that reads sessions, and the HTML report renders its charts
//! in headless Chromium.
use std::{
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use tierscope_tests::{
    require_root_and_agent, run_tierscope as tierscope, scratch_dir, stderr_text as stderr, tierscope_bin,
};

const WORKLOAD: &str = env!("CARGO_BIN_EXE_tierscope-workload");

fn dir(name: &str) -> PathBuf {
    scratch_dir("sessions", name)
}

/// Records `cmd` (through `sh -c`) at 200 ms intervals into `file`.
fn record_command(file: &Path, script: &str) -> Output {
    tierscope(&["record", "-o", file.to_str().expect("path"), "--interval-ms", "200", "--", "sh", "-c", script])
}

fn report_json(file: &Path) -> serde_json::Value {
    let o = tierscope(&["report", file.to_str().expect("path"), "--format", "json"]);
    assert!(o.status.success(), "report failed: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).expect("report JSON")
}

/// A command that touches 64 MiB in a child of the shell, then exits with 3.
fn touch_script() -> String {
    // stdin stays open a second after `go`, so the workload holds its memory while sampled.
    format!("(printf 'go\\n'; sleep 1) | {WORKLOAD} touch 64 >/dev/null; sleep 0.4; exit 3")
}

#[test]
#[ignore = "requires root"]
fn a_recorded_command_and_its_children_report_their_memory_and_the_exit_code_passes_through() {
    require_root_and_agent!();
    let d = dir("cmd");
    let file = d.join("run.tscope");
    let o = record_command(&file, &touch_script());
    assert_eq!(o.status.code(), Some(3), "record should pass the command's exit code: {}", stderr(&o));
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(std::fs::metadata(&file).expect("session file").permissions().mode() & 0o777, 0o600);
    let a = report_json(&file);
    assert_eq!(a["summary"]["exit_code"], 3);
    assert_eq!(a["summary"]["end"], "command exited");
    let procs = a["processes"].as_array().expect("processes");
    let w = procs
        .iter()
        .find(|p| p["comm"].as_str().is_some_and(|c| c.starts_with("tierscope-work")))
        .unwrap_or_else(|| panic!("the shell's child is followed: {procs:?}"));
    let peak: u64 = w["peak_bytes_by_tier"].as_object().expect("tiers").values().filter_map(|v| v.as_u64()).sum();
    assert!(peak >= 60 << 20, "the 64 MiB it touched is resident in the report: {w}");
    assert!(w["faults"].as_u64().unwrap_or(0) >= 16_000, "{w}");
    assert!(procs.iter().any(|p| p["comm"] == "sh"), "the command itself is recorded");
    let events = a["events"].as_array().expect("events");
    assert!(events.iter().any(|e| e["what"] == "exit"), "{events:?}");
    let residency = a["charts"].as_array().expect("charts").iter().find(|c| c["id"] == "residency").expect("chart");
    assert!(residency["series"][0]["points"].as_array().expect("points").len() >= 3);
    // A run against itself: no change anywhere.
    let o = tierscope(&["diff", file.to_str().expect("p"), file.to_str().expect("p"), "--format", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let same: serde_json::Value = serde_json::from_slice(&o.stdout).expect("diff JSON");
    assert!(same["rows"].as_array().expect("rows").iter().all(|r| r["delta"] == 0.0), "{same}");
    std::fs::remove_dir_all(d).expect("cleanup");
}

/// Sessions recorded with each page path say which (and why) in the report, the sampled one
/// with the weights it used; `diff` of the two warns first that their allocations are not
/// comparable one to one, and of one with itself does not.
#[test]
#[ignore = "requires root"]
fn sessions_say_their_page_path_and_diff_warns_when_two_differ() {
    require_root_and_agent!();
    let d = dir("page-path");
    let mut files = vec![];
    for mode in ["exact", "sampled"] {
        let file = d.join(format!("{mode}.tscope"));
        let f = file.to_str().expect("path");
        let script = format!("(printf 'go\\n'; sleep 1) | {WORKLOAD} touch 32 >/dev/null");
        let o = tierscope(&["record", "-o", f, "--interval-ms", "200", "--page-path", mode, "--", "sh", "-c", &script]);
        assert!(o.status.success(), "record --page-path {mode}: {}", stderr(&o));
        let pp = report_json(&file)["page_path"].clone();
        assert_eq!((pp["mode"].as_str(), pp["reason"].as_str()), (Some(mode), Some("asked")), "{pp}");
        if mode == "sampled" {
            let weights = pp["weights"].as_array().expect("the sampled frames' weights");
            assert!(!weights.is_empty() && pp["weight_at_end"].as_u64().is_some_and(|w| w >= 1), "{pp}");
            let o = tierscope(&["report", f, "--format", "md"]);
            let md = String::from_utf8_lossy(&o.stdout).into_owned();
            assert!(md.contains("> **Page path:** sampled: estimates"), "{md}");
        }
        files.push(f.to_string());
    }
    let o = tierscope(&["diff", &files[0], &files[1]]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(text.starts_with("warning: the runs' page paths differ"), "{text}");
    let o = tierscope(&["diff", &files[1], &files[1]]);
    assert!(!String::from_utf8_lossy(&o.stdout).contains("warning"), "the same mode: no warning");
    std::fs::remove_dir_all(d).expect("cleanup");
}

/// Offsets where each chunk starts, and the file length (reads the framing of
/// docs/session-format.md itself).
fn chunk_starts(b: &[u8]) -> Vec<usize> {
    let mut at = 16;
    let mut starts = vec![];
    while at + 12 <= b.len() {
        starts.push(at);
        let len = u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes")) as usize;
        at += 12 + len;
    }
    assert_eq!(at, b.len(), "a whole file ends at a chunk boundary");
    starts
}

/// Every command that reads a session, reading `file` (`good` is an intact one; `out` a scratch path).
fn readers(file: &str, good: &str, out: &str) -> Vec<Vec<String>> {
    let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    vec![
        v(&["report", file, "--format", "json", "-o", out]),
        v(&["diff", good, file, "-o", out]),
        v(&["diff", file, good, "--format", "html", "-o", out]),
        v(&["export", file, "--pprof", out, "--perfetto", out]),
        v(&["top", "--replay", file]),
    ]
}

fn assert_one_line_error(o: &Output, what: &str, needle: &str) {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(1), "{what}: exit 1 expected: {e}");
    assert_eq!(e.trim_end().lines().count(), 1, "{what}: one line: {e}");
    assert!(e.starts_with("tierscope: error: ") && e.matches(needle).count() == 1, "{what}: said once: {e}");
}

#[test]
#[ignore = "requires root"]
fn damaged_session_files_give_one_line_errors_or_read_up_to_the_last_whole_chunk() {
    require_root_and_agent!();
    let d = dir("damage");
    let good = d.join("good.tscope");
    let o = record_command(&good, &touch_script());
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let bytes = std::fs::read(&good).expect("read");
    let starts = chunk_starts(&bytes);
    assert!(starts.len() >= 4, "several intervals: {starts:?}");
    let bad = d.join("bad.tscope");
    let out = d.join("out");
    let run_all = |what: &str, check: &dyn Fn(&Output, &str)| {
        for args in readers(bad.to_str().expect("p"), good.to_str().expect("p"), out.to_str().expect("p")) {
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            let o = tierscope(&a);
            check(&o, &format!("{what}: {}", args[0]));
        }
    };
    // Cut at every chunk boundary and inside every chunk.
    for (i, &s) in starts.iter().enumerate().skip(1) {
        for cut in [s, s + 5, s + 13, (s + starts.get(i + 1).copied().unwrap_or(bytes.len())) / 2] {
            std::fs::write(&bad, &bytes[..cut.min(bytes.len() - 1)]).expect("write");
            run_all(&format!("cut at {cut}"), &|o, what| {
                assert!(stderr(o).contains("tierscope: warning: "), "{what}: says it is incomplete: {}", stderr(o));
                if what.ends_with(": top") {
                    // It read the file, then found no terminal to take (standard output is a pipe).
                    assert!(stderr(o).contains("standard output is not a terminal"), "{what}: {}", stderr(o));
                } else {
                    assert!(o.status.success(), "{what}: a cut file still reads: {}", stderr(o));
                }
            });
        }
    }
    // Cut inside the first chunk (the header record): nothing to read.
    std::fs::write(&bad, &bytes[..starts[0] + 20]).expect("write");
    run_all("cut in the first chunk", &|o, what| assert_one_line_error(o, what, "no session header"));
    // A flipped bit in every chunk's body.
    for &s in &starts {
        let mut b = bytes.clone();
        b[s + 12 + 3] ^= 0x04;
        std::fs::write(&bad, &b).expect("write");
        run_all(&format!("bit flip at {}", s + 15), &|o, what| assert_one_line_error(o, what, "checksum mismatch"));
    }
    let mut b = bytes.clone();
    b[..4].copy_from_slice(b"\x7fELF");
    std::fs::write(&bad, &b).expect("write");
    run_all("wrong magic", &|o, what| assert_one_line_error(o, what, "not a tierscope session file"));
    let mut b = bytes.clone();
    // The version after the one this build wrote.
    let written = u32::from_le_bytes(b[8..12].try_into().expect("4 bytes"));
    b[8..12].copy_from_slice(&(written + 1).to_le_bytes());
    std::fs::write(&bad, &b).expect("write");
    run_all("future version", &|o, what| assert_one_line_error(o, what, "update tierscope"));
    std::fs::write(&bad, b"").expect("write");
    run_all("empty file", &|o, what| assert_one_line_error(o, what, "too short"));
    std::fs::remove_dir_all(d).expect("cleanup");
}

#[test]
#[ignore = "requires root"]
fn a_recorder_killed_with_sigkill_leaves_a_file_that_reports() {
    require_root_and_agent!();
    let d = dir("kill");
    let file = d.join("killed.tscope");
    let mut rec = Command::new(tierscope_bin().expect("bin"))
        .args(["record", "-o", file.to_str().expect("p"), "--interval-ms", "200", "--", "sleep", "30"])
        .stderr(Stdio::null())
        .spawn()
        .expect("record");
    // Wait for a few intervals on disk.
    let t0 = Instant::now();
    while !std::fs::read(&file).is_ok_and(|b| b.len() > 16 && chunk_starts(&b).len() >= 4) {
        assert!(t0.elapsed() < Duration::from_secs(30), "the recorder wrote no intervals");
        std::thread::sleep(Duration::from_millis(100));
    }
    let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", rec.id())).unwrap_or_default();
    rec.kill().expect("SIGKILL");
    rec.wait().expect("reap");
    for pid in children.split_whitespace().filter_map(|p| p.parse::<i32>().ok()) {
        // SAFETY: the recorder's own child (sleep), orphaned by the kill.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let o = tierscope(&["report", file.to_str().expect("p"), "--format", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("no end"), "{}", stderr(&o));
    let a: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert!(a["summary"]["duration_s"].as_f64().unwrap_or(0.0) >= 0.5, "{}", a["summary"]);
    assert!(a["processes"].as_array().expect("p").iter().any(|p| p["comm"] == "sleep"), "{}", a["processes"]);
    std::fs::remove_dir_all(d).expect("cleanup");
}

/// A recorded rank that churns allocations for 4 s, then idles: the report lists one
/// allocation_churn insight for it, opened while it churned and closed after, its evidence at its
/// worst agreeing with the pages the rank itself touched; `diff` against a run that did not churn
/// lists it as opened in that run only. Thresholds from `record --insights-config`.
#[test]
#[ignore = "requires root"]
fn a_recorded_churning_rank_opens_and_closes_an_insight_in_the_report_and_the_diff() {
    require_root_and_agent!();
    let d = dir("insights");
    let cfg = d.join("insights.toml");
    std::fs::write(
        &cfg,
        "open_after_s = 1\nclose_after_s = 1\nwindow_s = 2\nchurn_min_pages_per_s = 2000\nchurn_max_growth_pct = 25\n",
    )
    .expect("config");
    let out = d.join("workload.out");
    let rec = |file: &Path, action: &str, hold_s: u32| {
        let script = format!(
            "(printf 'go\\n'; sleep {hold_s}) | RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 {WORKLOAD} {action} > {}",
            out.display()
        );
        let cfg = cfg.to_str().expect("path");
        let o = tierscope(&[
            "record",
            "-o",
            file.to_str().expect("path"),
            "--interval-ms",
            "200",
            "--insights-config",
            cfg,
            "--",
            "sh",
            "-c",
            &script,
        ]);
        assert!(o.status.success(), "record: {}", stderr(&o));
    };
    let churned = d.join("churned.tscope");
    // Churning 4 s, the insight closes about 3 s later (close_after_s 1 over a 2 s window); the
    // recording lasts until stdin closes at 11 s, so the close lands inside it however late a
    // loaded host starts the rank (an 8 s hold left about a second).
    rec(&churned, "churn 4 1", 11);
    let done = std::fs::read_to_string(&out).expect("workload output");
    let field = |k: &str| -> f64 {
        done.split_whitespace().find_map(|w| w.strip_prefix(k)?.parse().ok()).unwrap_or_else(|| panic!("{k} in {done}"))
    };
    let own_rate = field("pages=") * 1000.0 / field("ms=");
    let a = report_json(&churned);
    let insights = a["insights"].as_array().expect("insights");
    let churn: Vec<&serde_json::Value> = insights.iter().filter(|i| i["id"] == "allocation_churn").collect();
    assert_eq!(churn.len(), 1, "one allocation_churn insight: {insights:?}");
    let i = churn[0];
    eprintln!("the rank touched {own_rate:.0} pages/s; insight: {i}");
    assert_eq!(i["severity"], "warning");
    assert_eq!(i["subject"]["kind"], "process");
    assert!(i["subject"]["comm"].as_str().is_some_and(|c| c.starts_with("tierscope-work")), "{i}");
    let (opened, closed) = (i["opened_s"].as_f64().expect("opened"), i["closed_s"].as_f64().expect("closed"));
    assert!(opened > 0.0 && opened < closed && closed < a["summary"]["duration_s"].as_f64().expect("duration"), "{i}");
    assert!((i["open_s"].as_f64().expect("open_s") - (closed - opened)).abs() < 1e-9, "{i}");
    let worst = i["evidence"]["alloc_pages_per_s"].as_f64().expect("evidence");
    assert!((worst - own_rate).abs() <= own_rate / 3.0, "worst {worst:.0} pages/s vs the rank's own {own_rate:.0}");
    let md = tierscope(&["report", churned.to_str().expect("p"), "--format", "md"]);
    assert!(String::from_utf8_lossy(&md.stdout).contains("| allocation_churn | warning | tierscope-work"), "md report");

    let quiet = d.join("quiet.tscope");
    rec(&quiet, "touch 8", 3);
    let quiet_insights = report_json(&quiet)["insights"].as_array().expect("insights").len();
    assert_eq!(quiet_insights, 0, "touching 8 MiB once opens nothing");
    let (c, q) = (churned.to_str().expect("p"), quiet.to_str().expect("p"));
    let o = tierscope(&["diff", c, q, "--format", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let diff: serde_json::Value = serde_json::from_slice(&o.stdout).expect("diff JSON");
    let changes = diff["insights"].as_array().expect("insights");
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!((&changes[0]["change"], &changes[0]["id"]), (&"only in A".into(), &"allocation_churn".into()));
    assert!(changes[0]["about"].as_str().is_some_and(|s| s.starts_with("process tierscope-work")), "{changes:?}");
    let text = String::from_utf8_lossy(&tierscope(&["diff", c, q]).stdout).to_string();
    assert!(text.contains("only in A allocation_churn on process tierscope-work"), "{text}");
    std::fs::remove_dir_all(d).expect("cleanup");
}

fn chromium() -> Option<&'static str> {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"].into_iter().find(|p| Path::new(p).is_file())
}

#[test]
#[ignore = "requires root and Debian's chromium (cargo xtask test installs it)"]
fn the_html_report_renders_its_charts_in_headless_chromium() {
    require_root_and_agent!();
    let chromium = chromium().expect("Debian's chromium package (apt-get install chromium)");
    let d = dir("html");
    let file = d.join("run.tscope");
    let o = record_command(&file, &touch_script());
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let html = d.join("report.html");
    let o = tierscope(&["report", file.to_str().expect("p"), "-o", html.to_str().expect("p")]);
    assert!(o.status.success(), "{}", stderr(&o));
    // The form without --format: Markdown on standard output (here a pipe, as on a terminal),
    // a file's by its extension.
    let f = file.to_str().expect("p");
    let o = tierscope(&["report", f]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && text.starts_with("# tierscope report: run.tscope"), "{}{text}", stderr(&o));
    assert!(!text.contains("<html") && !text.contains("<svg"), "HTML on standard output: {text}");
    assert_eq!(tierscope(&["report", f, "-o", "-"]).stdout, o.stdout, "`-o -` is standard output");
    let md = d.join("report.md");
    assert!(tierscope(&["report", f, "-o", md.to_str().expect("p")]).status.success());
    assert!(std::fs::read_to_string(&md).expect("report.md").starts_with("# tierscope report"));
    let json = d.join("report.json");
    assert!(tierscope(&["report", f, "-o", json.to_str().expect("p")]).status.success());
    let a: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).expect("report.json")).expect("JSON");
    assert!(a["summary"].is_object(), "{a}");
    let page = std::fs::read_to_string(&html).expect("report.html");
    assert!(page.starts_with("<!DOCTYPE html>"), "{}", &page[..page.len().min(200)]);
    let url = format!("file://{}", html.display());
    let common = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars"];
    let dom = Command::new(chromium).args(common).args(["--dump-dom", &url]).output().expect("chromium --dump-dom");
    let dom = String::from_utf8_lossy(&dom.stdout);
    let charts = dom.matches("<svg class=\"chart\"").count();
    let lines = dom.matches("<polyline").count();
    assert!(charts >= 5 && lines >= 4, "charts {charts}, lines {lines} in the DOM Chromium built");
    let png = d.join("report.png");
    let shot = Command::new(chromium)
        .args(common)
        .args([&format!("--screenshot={}", png.display()), "--window-size=1400,1600", &url])
        .output()
        .expect("chromium --screenshot");
    assert!(png.is_file(), "no screenshot: {}", String::from_utf8_lossy(&shot.stderr));
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&png).expect("png")));
    let mut reader = decoder.read_info().expect("PNG header");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("PNG frame");
    let px = info.color_type.samples();
    let pixels: Vec<&[u8]> = buf[..info.buffer_size()].chunks(px).collect();
    // Chart lines are drawn in the palette's blue (#0072B2) among others: count coloured pixels.
    let coloured = pixels.iter().filter(|p| p.len() >= 3 && (i32::from(p[2]) - i32::from(p[0])) > 80).count();
    let non_white = pixels.iter().filter(|p| p.iter().take(3).any(|&c| c < 200)).count();
    assert!(coloured > 500, "chart lines drawn: {coloured} blue pixels");
    assert!(non_white > 10_000, "the page is not blank: {non_white} of {} pixels", pixels.len());
    if let Ok(keep) = std::env::var("TIERSCOPE_KEEP_SCREENSHOT") {
        std::fs::copy(&png, keep).expect("copy screenshot");
    }
    std::fs::remove_dir_all(d).expect("cleanup");
}

/// CRC-32 (IEEE), as the session format checks each chunk with.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xedb8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

/// One chunk of `raw` as stored (uncompressed) DEFLATE blocks: a valid chunk without a deflate
/// library in the tests.
fn stored_chunk(raw: &[u8]) -> Vec<u8> {
    let mut body = vec![];
    let blocks: Vec<&[u8]> = raw.chunks(65_535).collect();
    for (i, b) in blocks.iter().enumerate() {
        body.push(u8::from(i + 1 == blocks.len()));
        body.extend((b.len() as u16).to_le_bytes());
        body.extend((!(b.len() as u16)).to_le_bytes());
        body.extend(*b);
    }
    let mut out = vec![];
    out.extend((body.len() as u32).to_le_bytes());
    out.extend((raw.len() as u32).to_le_bytes());
    out.extend(crc32(&body).to_le_bytes());
    out.extend(body);
    out
}

/// A session of `frames` one-second frames of `processes` processes each, one chunk a frame.
fn long_session(path: &Path, frames: u64, processes: u32) {
    use std::io::Write as _;
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).expect("create"));
    let mut header = b"TSCOPE\0S".to_vec();
    header.extend(1u32.to_le_bytes());
    header.extend([0; 4]);
    f.write_all(&header).expect("write");
    let meta = r#"{"meta":{"schema":"tierscope.session/v1","tool_version":"t","host":"h","kernel":"k","started_unix_ms":0,"interval_ms":1000,"page_size":4096,"site_sample_every":1,"command":[],"selection":"s"}}"#;
    let topology = r#"{"topology":{"nodes":[{"id":0,"tier":"dram","tier_evidence":"e","cpus":[0],"mem_total_bytes":null},{"id":1,"tier":"cxl","tier_evidence":"e","cpus":[],"mem_total_bytes":null}]}}"#;
    f.write_all(&stored_chunk(format!("{meta}\n{topology}\n").as_bytes())).expect("write");
    for i in 0..frames {
        let procs: Vec<String> = (0..processes)
            .map(|p| {
                let pid = 1000 + p;
                format!(
                    r#"{{"pid":{pid},"faults":{},"alloc_pages_by_node":{{"0":{},"1":{}}},"resident_bytes_by_tier":{{"dram":{},"cxl":{}}},"migrations":{{}},"exited":false}}"#,
                    i * 10 + u64::from(p),
                    i * 3,
                    i * 5,
                    (i + 1) * 4096 * u64::from(p + 1),
                    i * 8192
                )
            })
            .collect();
        let frame = format!(
            r#"{{"frame":{{"t_ms":{},"nodes":[{{"id":0,"alloc_pages":{},"freed_pages":0,"mem_free_bytes":null}}],"migrations":{{}},"processes":[{}]}}}}"#,
            i * 1000,
            i * 7,
            procs.join(",")
        );
        f.write_all(&stored_chunk(format!("{frame}\n").as_bytes())).expect("write");
    }
    let end = format!(r#"{{"end":{{"t_ms":{},"reason":"duration","exit_code":null,"drops":{{}}}}}}"#, frames * 1000);
    f.write_all(&stored_chunk(format!("{end}\n").as_bytes())).expect("write");
    f.flush().expect("flush");
}

/// Runs `tierscope ARGS` and returns its peak resident memory (ru_maxrss of the child, bytes).
fn peak_rss_of(bin: &str, args: &[&str]) -> u64 {
    let child = Command::new(bin).args(args).stdin(Stdio::null()).stdout(Stdio::null()).spawn().expect("spawn");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: plain wait4 on our own child with valid out-pointers; std's Child is not waited on after.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    assert_eq!(r, pid, "wait4: {}", std::io::Error::last_os_error());
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "tierscope {args:?}: status {status:#x}");
    ru.ru_maxrss as u64 * 1024
}

#[test]
#[ignore = "needs TIERSCOPE_BIN (cargo xtask test runs it)"]
fn a_long_recording_reports_and_exports_in_the_memory_of_a_short_one() {
    let bin = tierscope_bin().expect("cannot run: TIERSCOPE_BIN is not set to the built agent");
    let d = dir("long");
    let (short, long) = (d.join("short.tscope"), d.join("long.tscope"));
    // 100 processes a frame: about 20 kB of records each; 2,000 frames are about 40 MB.
    long_session(&short, 200, 100);
    long_session(&long, 2000, 100);
    let out = d.join("out");
    let o = out.to_str().expect("path");
    for (what, args) in [
        ("report --format md", vec!["report", "--format", "md", "-o", o]),
        ("report --format json", vec!["report", "--format", "json", "-o", o]),
        ("export --pprof", vec!["export", "--pprof", o]),
        ("export --perfetto", vec!["export", "--perfetto", o]),
    ] {
        let run = |file: &Path| {
            let mut a = vec![args[0], file.to_str().expect("path")];
            a.extend(&args[1..]);
            peak_rss_of(&bin, &a)
        };
        let (s, l) = (run(&short), run(&long));
        eprintln!("{what}: peak RSS {} KiB for 200 frames, {} KiB for 2,000", s / 1024, l / 1024);
        // Today's charts keep a few points a frame (about 1 MB for 2,000 frames); the frames
        // themselves (about 40 MB on disk, more parsed) must not stay.
        assert!(l < s + (12 << 20), "{what}: 10x the frames took {} KiB more", (l - s.min(l)) / 1024);
    }
    std::fs::remove_dir_all(d).expect("cleanup");
}

/// tmux on a server of its own (`-L socket`): `args` after the socket.
fn tmux_on(socket: &str, args: &[&str]) -> String {
    let out = Command::new("tmux").arg("-L").arg(socket).args(args).output().expect("running tmux");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `frame K/N` from the replay's header.
fn replay_frame(screen: &str) -> Option<(usize, usize)> {
    let rest = &screen[screen.find("  frame ")? + "  frame ".len()..];
    let (k, n) = rest.split_whitespace().next()?.split_once('/')?;
    Some((k.parse().ok()?, n.parse().ok()?))
}

/// Replays `file` in a tmux pane: waits for its first frame, goes to the last frame (End: the
/// history of the frames before it is rebuilt), back to the first (Home) and one on (Right),
/// then reads the peak resident memory of the UI (VmHWM, bytes) before quitting with q.
fn replay_peak_rss(bin: &str, file: &Path, frames: usize) -> u64 {
    let d = file.parent().expect("dir");
    let socket = format!("tierscope-replay-rss-{}", std::process::id());
    let pid_file = d.join("replay.pid");
    let _ = std::fs::remove_file(&pid_file);
    let command = format!(
        "echo $$ > {}; XDG_STATE_HOME={} exec {bin} top --replay {}",
        pid_file.display(),
        d.join("state").display(),
        file.display()
    );
    let _ = Command::new("tmux").args(["-L", &socket, "kill-server"]).output();
    let ok = Command::new("tmux")
        .args(["-L", &socket, "new-session", "-d", "-s", "rss", "-x", "120", "-y", "32", &command])
        .status()
        .expect("tmux new-session");
    assert!(ok.success(), "tmux new-session failed");
    struct Server<'a>(&'a str);
    impl Drop for Server<'_> {
        fn drop(&mut self) {
            let _ = Command::new("tmux").args(["-L", self.0, "kill-server"]).output();
        }
    }
    let _server = Server(&socket);
    let wait_for = |what: &str, want: (usize, usize)| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let screen = tmux_on(&socket, &["capture-pane", "-p", "-t", "rss"]);
            if replay_frame(&screen) == Some(want) {
                return;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}; the screen was:\n{screen}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let keys = |k: &str| {
        tmux_on(&socket, &["send-keys", "-t", "rss", k]);
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let pid: u32 = loop {
        if let Some(p) = std::fs::read_to_string(&pid_file).ok().and_then(|s| s.trim().parse().ok()) {
            break p;
        }
        assert!(Instant::now() < deadline, "the pane never started");
        std::thread::sleep(Duration::from_millis(100));
    };
    // Paused at once (one-second frames play slowly), then to either end and one on.
    let deadline = Instant::now() + Duration::from_secs(60);
    while replay_frame(&tmux_on(&socket, &["capture-pane", "-p", "-t", "rss"])).is_none() {
        assert!(Instant::now() < deadline, "top --replay never showed a frame");
        std::thread::sleep(Duration::from_millis(100));
    }
    keys("Space");
    keys("End");
    wait_for("the last frame", (frames, frames));
    keys("Home");
    wait_for("the first frame", (1, frames));
    keys("Right");
    wait_for("the second frame", (2, frames));
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the UI's status");
    let hwm = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmHWM");
    keys("q");
    let deadline = Instant::now() + Duration::from_secs(20);
    while Path::new(&format!("/proc/{pid}")).exists() {
        assert!(Instant::now() < deadline, "top --replay (pid {pid}) did not quit on q");
        std::thread::sleep(Duration::from_millis(100));
    }
    hwm * 1024
}

#[test]
#[ignore = "needs tmux and TIERSCOPE_BIN (cargo xtask test runs it)"]
fn a_long_recording_replays_in_the_memory_of_a_short_one() {
    let bin = tierscope_bin().expect("cannot run: TIERSCOPE_BIN is not set to the built agent");
    let d = dir("long-replay");
    // Both longer than the history the UI keeps (600 frames), so both rebuild a whole one at End.
    let (short, long) = (d.join("short.tscope"), d.join("long.tscope"));
    long_session(&short, 700, 100);
    long_session(&long, 2100, 100);
    let (s, l) = (replay_peak_rss(&bin, &short, 700), replay_peak_rss(&bin, &long, 2100));
    eprintln!("top --replay: peak RSS {} KiB for 700 frames, {} KiB for 2,100", s / 1024, l / 1024);
    // 1,400 frames more are about 28 MB on disk and far more parsed; the index of each is a few
    // dozen bytes (about 70 kB for all of them).
    assert!(l < s + (8 << 20), "3x the frames took {} KiB more", (l - s.min(l)) / 1024);
    std::fs::remove_dir_all(d).expect("cleanup");
}

/// The session `cargo xtask run` replays on machines without a slower tier (recorded in the QEMU
/// guest with a CXL memory expander by `cargo xtask vm-test --only recorded-demo --update-fixtures`)
/// still reads with this build and shows what tierscope is for: a lower tier, promotions and
/// demotions, a CXL-tier allocation site named down to the trainer's Python function, and an
/// insight that opened.
#[test]
#[ignore = "needs TIERSCOPE_BIN (cargo xtask test runs it)"]
fn the_shipped_tiered_session_shows_tiers_migrations_a_python_site_and_an_insight() {
    require_root_and_agent!();
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../agent/fixtures/sessions/tiered-guest.tscope");
    let r = report_json(&file);
    let tiers: Vec<&str> = r["nodes"].as_array().expect("nodes").iter().filter_map(|n| n["tier"].as_str()).collect();
    assert!(tiers.contains(&"dram") && tiers.contains(&"cxl"), "tiers {tiers:?}");
    assert!(r["promoted_pages"].as_u64().unwrap_or(0) > 0, "promoted {}", r["promoted_pages"]);
    assert!(r["demoted_pages"].as_u64().unwrap_or(0) > 0, "demoted {}", r["demoted_pages"]);
    let sites = r["sites"].as_array().expect("sites");
    let named = sites.iter().any(|s| {
        s["frames"].as_array().is_some_and(|f| {
            f.iter()
                .any(|f| f.as_str().is_some_and(|f| f.contains("init_optimizer_state") && f.contains("demo_train.py")))
        })
    });
    assert!(
        named,
        "no site names demo_train.py's init_optimizer_state: {:?}",
        sites.iter().map(|s| &s["frames"]).collect::<Vec<_>>()
    );
    let ids: Vec<&str> = r["insights"].as_array().expect("insights").iter().filter_map(|i| i["id"].as_str()).collect();
    assert!(ids.contains(&"slow_tier_with_fast_room"), "insights {ids:?}");
}
