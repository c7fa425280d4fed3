//! Root tests of the masking of secrets (issue 41): processes whose command lines carry the
//! common secret forms (a MySQL `-pPASSWORD`, curl's `-u user:PASSWORD`, an Azure SAS `sig=`, a
//! Slack `xoxb-` and a GitLab `glpat-` token, a `--password` value that begins with `-`,
//! `PGPASSWORD=`, `sshpass -p`) are recorded and watched, and no secret is found in the session
//! (raw and inflated), its reports, diff, pprof and Perfetto exports, or the snapshot; and
//! `--config FILE` brings the `[privacy] redact` patterns of `run` to `record`, `snapshot` and
//! `top` (a bad file is one line naming it, before anything starts).
use std::{
    path::Path,
    process::{Child, Command, Output, Stdio},
};

use tierscope_tests::{process, require_root_and_agent, run_tierscope, scratch_dir, stderr_text as stderr};

/// Each form as the arguments that carry it, and the secret in it.
const FORMS: &[(&[&str], &str)] = &[
    (&["mysql", "-pMYSQLsecret41"], "MYSQLsecret41"),
    (&["curl", "-u", "alice:CURLsecret41"], "CURLsecret41"),
    (&["https://acct.blob.core.windows.net/c/f?sv=2022-11-02&sp=r&sig=AZUREsig41xyz%3D"], "AZUREsig41xyz"),
    (&["xoxb-123456789012-1234567890123-SLACKsecret41abc"], "SLACKsecret41"),
    (&["glpat-GITLABsecret41abcdefgh"], "GITLABsecret41"),
    (&["--password", "-DASHsecret41"], "DASHsecret41"),
    (&["PGPASSWORD=PGsecret41"], "PGsecret41"),
    (&["sshpass", "-p", "SSHPASSsecret41"], "SSHPASSsecret41"),
];

/// What each form looks like masked (in the command lines the outputs show).
const MASKED: &[&str] = &["-p***", "alice:***", "sig=***", "--password ***", "PGPASSWORD=***"];

/// A Python process that touches memory for `secs` seconds, with every form on its command line
/// (and `extra` after them): its `sys.argv`, which it ignores.
fn python_with_forms(secs: f64, extra: &[&str]) -> Vec<String> {
    let script = format!(
        "import time\nend = time.time() + {secs}\nwhile time.time() < end:\n    b = bytearray(b'a' * (8 << 20))\n    time.sleep(0.05)\n"
    );
    let mut argv = vec!["python3".to_string(), "-c".into(), script];
    argv.extend(FORMS.iter().flat_map(|(args, _)| args.iter().map(|a| a.to_string())));
    argv.extend(extra.iter().map(|a| a.to_string()));
    argv
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn tierscope(args: &[&str]) -> Output {
    run_tierscope(args)
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut c = Command::new("gzip")
        .arg("-dc")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("gzip (install it)");
    let mut stdin = c.stdin.take().expect("stdin");
    let input = bytes.to_vec();
    let w = std::thread::spawn(move || stdin.write_all(&input));
    let o = c.wait_with_output().expect("gzip");
    w.join().expect("writer").expect("writing to gzip");
    assert!(o.status.success(), "gzip -dc failed");
    o.stdout
}

/// A recorded session, and every output made from it: (name, bytes).
fn record_and_read(d: &Path, extra_flags: &[&str], extra_args: &[&str]) -> Vec<(String, Vec<u8>)> {
    let session = d.join("s.tscope");
    let argv = python_with_forms(1.5, extra_args);
    let mut args = vec!["record", "-o", s(&session), "--interval-ms", "200"];
    args.extend_from_slice(extra_flags);
    args.push("--");
    args.extend(argv.iter().map(String::as_str));
    let o = tierscope(&args);
    assert!(o.status.success(), "record: {}", stderr(&o));
    let f = s(&session);
    let mut outputs = vec![
        ("session (raw)".to_string(), std::fs::read(&session).expect("session")),
        ("session (inflated)".to_string(), tierscope_tests::inflated_session(&session)),
        ("record's stderr".to_string(), o.stderr.clone()),
    ];
    for (name, args) in [
        ("r.json", vec!["report", f, "--format", "json"]),
        ("r.md", vec!["report", f, "--format", "md"]),
        ("r.html", vec!["report", f, "--format", "html"]),
        ("d.txt", vec!["diff", f, f]),
    ] {
        let p = d.join(name);
        let mut args = args.clone();
        args.extend(["-o", s(&p)]);
        let o = tierscope(&args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        outputs.push((name.into(), std::fs::read(&p).expect("output")));
    }
    let (pprof, perfetto) = (d.join("p.pb.gz"), d.join("t.pftrace"));
    let o = tierscope(&["export", f, "--pprof", s(&pprof), "--perfetto", s(&perfetto)]);
    assert!(o.status.success(), "export: {}", stderr(&o));
    let gz = std::fs::read(&pprof).expect("pprof");
    outputs.push(("p.pb.gz (inflated)".into(), gunzip(&gz)));
    outputs.push(("p.pb.gz".into(), gz));
    outputs.push(("t.pftrace".into(), std::fs::read(&perfetto).expect("perfetto")));
    outputs
}

/// The python process's command line as the report's process table shows it.
fn reported_cmdline(outputs: &[(String, Vec<u8>)]) -> String {
    let json: serde_json::Value =
        serde_json::from_slice(&outputs.iter().find(|o| o.0 == "r.json").expect("r.json").1).expect("report JSON");
    let p = json["processes"].as_array().expect("processes").iter().find(|p| p["comm"] == "python3");
    p.unwrap_or_else(|| panic!("python3 not in the report: {}", json["processes"]))["cmdline"]
        .as_str()
        .expect("cmdline")
        .to_string()
}

/// A process with the forms on its command line, killed on drop.
struct Holder(Child);

impl Holder {
    fn start(extra: &[&str]) -> Holder {
        let argv = python_with_forms(120.0, extra);
        Holder(Command::new(&argv[0]).args(&argv[1..]).spawn().expect("python3 (install it)"))
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `snapshot --json` of the holder's pid, with `flags`: the document's bytes and JSON.
fn snapshot_of(h: &Holder, flags: &[&str]) -> (Vec<u8>, serde_json::Value) {
    let pid = h.0.id().to_string();
    let mut args = vec!["snapshot", "--json", "--duration", "1", "--pid", &pid];
    args.extend_from_slice(flags);
    let o = tierscope(&args);
    assert!(o.status.success(), "snapshot: {}", stderr(&o));
    let json = serde_json::from_slice(&o.stdout).expect("snapshot JSON");
    let mut bytes = o.stdout;
    bytes.extend_from_slice(&o.stderr);
    (bytes, json)
}

#[test]
#[ignore = "requires root"]
fn the_common_secret_forms_are_found_nowhere_in_the_session_reports_exports_or_snapshot() {
    require_root_and_agent!();
    let d = scratch_dir("redaction", "forms");
    let outputs = record_and_read(&d, &[], &[]);
    let holder = Holder::start(&[]);
    let (snap, json) = snapshot_of(&holder, &[]);
    let snap_cmdline = process(&json, holder.0.id())["cmdline"].as_str().expect("cmdline").to_string();
    drop(holder);
    let mut leaks = vec![];
    for (what, bytes) in outputs.iter().chain([&("snapshot".to_string(), snap)]) {
        for (_, secret) in FORMS {
            if contains(bytes, secret) {
                leaks.push(format!("{what} holds {secret}"));
            }
        }
    }
    assert!(leaks.is_empty(), "secrets found:\n{}", leaks.join("\n"));
    // The command lines are there, masked: what was looked through is what holds them.
    let cmdline = reported_cmdline(&outputs);
    for (what, text) in [("the report's process table", &cmdline), ("the snapshot", &snap_cmdline)] {
        for m in MASKED {
            assert!(text.contains(m), "{what} shows {m:?}: {text}");
        }
    }
    std::fs::remove_dir_all(d).expect("cleanup");
}

#[test]
#[ignore = "requires root"]
fn config_redact_patterns_mask_record_and_snapshot_and_a_bad_file_is_one_line() {
    require_root_and_agent!();
    let d = scratch_dir("redaction", "config");
    let config = d.join("privacy.toml");
    std::fs::write(&config, "[privacy]\nredact = [\"corp-[0-9]{5}\"]\n").expect("config");
    const OWN: &str = "corp-90210";
    let outputs = record_and_read(&d, &["--config", s(&config)], &["--project", OWN]);
    let holder = Holder::start(&["--project", OWN]);
    let (snap, json) = snapshot_of(&holder, &["--config", s(&config)]);
    let snap_cmdline = process(&json, holder.0.id())["cmdline"].as_str().expect("cmdline").to_string();
    drop(holder);
    for (what, bytes) in outputs.iter().chain([&("snapshot".to_string(), snap)]) {
        assert!(!contains(bytes, OWN), "{what} holds {OWN}, which the config masks");
    }
    for text in [reported_cmdline(&outputs), snap_cmdline] {
        assert!(text.contains("--project ***"), "masked where it was: {text}");
    }
    // A file that does not parse, a pattern that is no regex, a missing file: one line naming
    // the file and the problem, for each watching command, before anything starts (`top`
    // before it asks for a terminal; `record` before it runs the command).
    let marker = d.join("ran");
    let bad = d.join("bad.toml");
    std::fs::write(&bad, "[privacy]\nredact = [\"(\"]\n").expect("bad");
    let typo = d.join("typo.toml");
    std::fs::write(&typo, "[privacy]\nredcat = []\n").expect("typo");
    let missing = d.join("missing.toml");
    for (file, problem) in [
        (&bad, "privacy.redact: redaction pattern \"(\" is not a valid regular expression"),
        (&typo, "line 2: unknown field `redcat`"),
        (&missing, "cannot read it"),
    ] {
        let out = d.join("out.tscope");
        for args in [
            vec!["record", "-o", s(&out), "--config", s(file), "--", "touch", s(&marker)],
            vec!["snapshot", "--json", "--duration", "1", "--config", s(file)],
            vec!["top", "--config", s(file)],
        ] {
            let o = tierscope(&args);
            let e = stderr(&o);
            let want = format!("config file {}: {problem}", file.display());
            assert!(!o.status.success() && e.contains(&want), "{args:?} says {want:?}: {e}");
            assert_eq!(e.trim().lines().count(), 1, "{args:?}: one line: {e}");
            assert!(!marker.exists() && !out.exists(), "{args:?} started before refusing the file");
        }
    }
    std::fs::remove_dir_all(d).expect("cleanup");
}
