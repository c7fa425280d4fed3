//! End to end: the real `tierscope top --demo` in a detached tmux session (80x24 and 160x48),
//! read back with `capture-pane`: the demo workload shows up with faults, Tab switches views, the
//! tiering counters and health show, the tier probe runs in the background on `r` and reports
//! node 0, `q` quits and leaves the terminal as it found it (main screen, cooked mode, echo on,
//! mouse reporting off). The mouse: the UI turns on mouse reporting (tmux's pane flags say so),
//! `m` turns it off and on, and clicks (SGR mouse sequences typed into the pane with
//! `send-keys -H`, as a terminal would send them; tmux's own `send-keys -M` needs a real mouse
//! event) switch views and open a process. A replayed recording that holds an insight shows it
//! in the Insights view (7) at the frames it was open, and not before it opened.
use std::{
    process::Command,
    thread::sleep,
    time::{Duration, Instant},
};

use tierscope_tests::{require_root_and_agent, tierscope_bin};

#[path = "support/insight_session.rs"]
mod insight_session;

fn tmux(args: &[&str]) -> String {
    let out = Command::new("tmux").args(args).output().unwrap_or_else(|e| panic!("running tmux {args:?}: {e}"));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A tmux session killed on drop, whatever the test's fate.
struct Pane {
    name: String,
}

impl Pane {
    fn start(name: &str, w: u16, h: u16, command: &str) -> Pane {
        let _ = Command::new("tmux").args(["kill-session", "-t", name]).output();
        let status = Command::new("tmux")
            .args(["new-session", "-d", "-s", name, "-x", &w.to_string(), "-y", &h.to_string(), command])
            .status()
            .expect("tmux new-session");
        assert!(status.success(), "tmux new-session failed");
        // Keep the session's size fixed whatever clients attach.
        let _ = Command::new("tmux").args(["set-option", "-t", name, "window-size", "manual"]).status();
        Pane { name: name.into() }
    }

    fn capture(&self) -> String {
        tmux(&["capture-pane", "-p", "-t", &self.name])
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", &self.name];
        args.extend_from_slice(keys);
        tmux(&args);
    }

    /// A left click at the 0-based screen cell (x, y), as an SGR mouse report: press, release.
    fn click(&self, x: u16, y: u16) {
        let report = format!("\x1b[<0;{};{}M\x1b[<0;{};{}m", x + 1, y + 1, x + 1, y + 1);
        let hex: Vec<String> = report.bytes().map(|b| format!("{b:02x}")).collect();
        let mut args = vec!["send-keys", "-t", &self.name, "-H"];
        args.extend(hex.iter().map(String::as_str));
        tmux(&args);
    }

    /// The cell where `needle` starts on the screen.
    fn find(&self, needle: &str) -> Option<(u16, u16)> {
        let screen = self.capture();
        screen.lines().enumerate().find_map(|(y, l)| {
            let byte = l.find(needle)?;
            Some((l[..byte].chars().count() as u16, y as u16))
        })
    }

    fn format(&self, f: &str) -> String {
        tmux(&["display-message", "-p", "-t", &self.name, f]).trim().to_string()
    }

    /// Polls the screen until `pred` holds; panics with the last screen after `secs`.
    fn wait_for(&self, what: &str, secs: u64, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let screen = self.capture();
            if pred(&screen) {
                return screen;
            }
            if Instant::now() > deadline {
                panic!("timed out waiting for {what}; the screen was:\n{screen}");
            }
            sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Pane {
    fn drop(&mut self) {
        let _ = Command::new("tmux").args(["kill-session", "-t", &self.name]).output();
    }
}

/// The demo's pid from the title bar (`DEMO workload pid 1234`).
fn demo_pid(screen: &str) -> Option<u32> {
    let rest = &screen[screen.find("DEMO workload pid ")? + "DEMO workload pid ".len()..];
    rest.split_whitespace().next()?.parse().ok()
}

/// `faults 52.0k (1.0k/s)` from the process detail view: (count, rate) as shown.
fn faults_line(screen: &str) -> Option<(String, String)> {
    let line = screen.lines().find(|l| l.starts_with("faults "))?;
    let mut w = line.split_whitespace().skip(1);
    let count = w.next()?.to_string();
    let rate = w.next()?.trim_start_matches('(').trim_end_matches("/s)").to_string();
    Some((count, rate))
}

fn run_at(w: u16, h: u16) {
    let bin = tierscope_bin().expect("TIERSCOPE_BIN");
    let state = std::env::temp_dir().join(format!("tierscope-tui-test-{}", std::process::id()));
    let name = format!("tierscope-tui-{}-{w}x{h}", std::process::id());
    // After the UI: its exit code and the tty modes it left behind, for the asserts below.
    let command = format!(
        "XDG_STATE_HOME={} {bin} top --demo --tick-ms 500; echo TIERSCOPE-EXIT=$?; stty -a | tr ' ;' '\\n\\n' | grep -x -e '-*icanon' -e '-*echo' | tr '\\n' ' '; echo; sleep 120",
        state.display()
    );
    let pane = Pane::start(&name, w, h, &command);

    let screen = pane.wait_for("the demo workload on the overview", 60, |s| {
        demo_pid(s).is_some_and(|pid| s.lines().any(|l| l.trim_start().starts_with(&format!("{pid} "))))
    });
    let pid = demo_pid(&screen).expect("demo pid");
    assert!(
        screen.contains("1 Overview") && screen.contains("Nodes") && screen.contains("Busiest processes"),
        "{screen}"
    );
    assert_eq!(pane.format("#{alternate_on}"), "1", "the UI runs on the alternate screen");
    assert_eq!(pane.format("#{mouse_standard_flag}#{mouse_sgr_flag}"), "11", "mouse reporting is on (SGR)");
    assert_eq!(pane.format("#{mouse_all_flag}"), "0", "no stream of motion reports");

    // `m` gives the terminal its selection back and takes the mouse again.
    pane.keys(&["m"]);
    pane.wait_for("the mouse-off mark", 10, |s| s.contains("mouse off (m)"));
    assert_eq!(pane.format("#{mouse_standard_flag}#{mouse_sgr_flag}"), "00", "m turns mouse reporting off");
    pane.keys(&["m"]);
    pane.wait_for("the mouse-off mark gone", 10, |s| !s.contains("mouse off (m)"));
    assert_eq!(pane.format("#{mouse_standard_flag}#{mouse_sgr_flag}"), "11", "m turns it back on");

    // A click on a tab switches to its view.
    let (x, y) = pane.find("4 Migrations").expect("the Migrations tab");
    pane.click(x + 1, y);
    pane.wait_for("the Migrations view after a click on its tab", 10, |s| s.contains("Page migrations by reason"));
    pane.keys(&["1"]);
    pane.wait_for("the Overview again", 10, |s| s.contains("Busiest processes"));

    pane.keys(&["Tab"]);
    // The whole screen redrawn: a capture taken mid-redraw once showed the new header above
    // the overview's old lines.
    pane.wait_for("the Processes view after Tab, with nothing of the overview left", 10, |s| {
        s.contains("sorted by") && s.contains("FLT/s") && !s.contains("Busiest processes")
    });

    // Narrow the table to the demo, open it, and read its faults.
    pane.keys(&["/"]);
    pane.keys(&["-l", &pid.to_string()]);
    pane.keys(&["Enter"]);
    pane.wait_for("the filtered table", 10, |s| s.contains(&format!("filter: {pid}")));
    // A click on the selected (only) row opens it, as Enter does.
    let (x, y) = pane
        .wait_for("the demo's row", 10, |s| s.lines().skip(4).any(|l| l.trim_start().starts_with(&format!("{pid} "))))
        .lines()
        .enumerate()
        .skip(4)
        .find_map(|(y, l)| l.trim_start().starts_with(&format!("{pid} ")).then_some((2u16, y as u16)))
        .expect("the demo's row");
    pane.click(x, y);
    let screen = pane.wait_for("nonzero faults of the demo in its detail view", 30, |s| {
        s.lines().any(|l| l.starts_with(&format!("{pid} ")))
            && faults_line(s).is_some_and(|(count, rate)| count != "0" && rate != "0" && rate != "-")
    });
    let (count, rate) = faults_line(&screen).expect("faults line");
    eprintln!("{w}x{h}: demo pid {pid}: faults {count}, {rate}/s");
    assert!(screen.contains("Residency per node"), "{screen}");

    pane.keys(&["Tab"]);
    pane.wait_for("the Migrations view after Tab", 10, |s| s.contains("Page migrations by reason"));
    pane.keys(&["BTab", "BTab", "BTab"]);
    pane.wait_for("the Overview after three shift-Tabs", 10, |s| s.contains("Busiest processes"));
    let screen =
        pane.wait_for("the tiering line on the overview", 10, |s| s.contains("Tiering ") && s.contains("Health "));
    assert!(screen.contains("no CXL memory devices"), "this machine has no CXL: the health line says so:\n{screen}");

    // The Migrations view reads the kernel's tiering counters each tick.
    pane.keys(&["4"]);
    pane.wait_for("the tiering counters in Migrations", 10, |s| {
        s.contains("Kernel tiering counters") && s.lines().any(|l| l.starts_with("machine "))
    });

    // The tier probe runs in the background: progress shows, the keys still work while it
    // measures, and the results come with real figures.
    pane.keys(&["5"]);
    pane.wait_for("the probe's invitation", 10, |s| s.contains("not run yet: press r"));
    pane.keys(&["r"]);
    pane.wait_for("the probe's progress", 10, |s| s.contains("measuring node") || s.contains("measured 0."));
    pane.keys(&["4"]);
    pane.wait_for("Migrations while the probe runs", 5, |s| s.contains("Page migrations by reason"));
    pane.keys(&["5"]);
    let screen = pane.wait_for("the probe's results", 120, |s| s.contains("measures again"));
    let row = screen
        .lines()
        .find(|l| l.trim_start().starts_with("0 ") && l.contains("ns"))
        .unwrap_or_else(|| panic!("no node 0 row:\n{screen}"))
        .to_string();
    let ns: f64 = row
        .split_whitespace()
        .find_map(|w| w.strip_suffix("ns")?.parse().ok())
        .unwrap_or_else(|| panic!("no latency in {row}"));
    eprintln!("{w}x{h}: tier probe node 0: {row}");
    assert!((20.0..2000.0).contains(&ns), "node 0 idle latency {ns} ns is not plausible: {row}");

    for (key, marker) in [("6", "no CXL memory devices"), ("?", "run the tier probe")] {
        pane.keys(&[key]);
        pane.wait_for(marker, 10, |s| s.contains(marker));
    }
    pane.keys(&["Escape"]);

    pane.keys(&["q"]);
    let screen = pane.wait_for("the exit line after q", 20, |s| s.contains("TIERSCOPE-EXIT="));
    assert!(screen.contains("TIERSCOPE-EXIT=0"), "top exits 0 on q:\n{screen}");
    assert_eq!(pane.format("#{alternate_on}"), "0", "back on the main screen");
    assert_eq!(pane.format("#{cursor_flag}"), "1", "the cursor is shown again");
    assert_eq!(
        pane.format("#{mouse_any_flag}#{mouse_standard_flag}#{mouse_button_flag}#{mouse_sgr_flag}"),
        "0000",
        "mouse reporting off again"
    );
    let modes = pane.wait_for("the tty modes", 5, |s| s.contains("icanon"));
    let modes_line = modes.lines().find(|l| l.contains("icanon")).unwrap_or_default().to_string();
    let modes: Vec<&str> = modes_line.split_whitespace().collect();
    assert!(modes.contains(&"icanon") && modes.contains(&"echo"), "raw mode left on: {modes_line}");
    assert!(!screen.contains("WARN") && !screen.contains("ERROR"), "logs reached the screen:\n{screen}");
    // The demo stops with the UI.
    sleep(Duration::from_millis(300));
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "the demo workload {pid} outlived the UI");
    let _ = std::fs::remove_dir_all(&state);
}

#[test]
#[ignore = "needs root and TIERSCOPE_BIN (cargo xtask test runs it)"]
fn top_demo_in_tmux_80x24_and_160x48() {
    require_root_and_agent!();
    assert!(
        Command::new("tmux").arg("-V").output().is_ok(),
        "tmux is not installed: apt-get install tmux (cargo xtask setup installs it)"
    );
    run_at(80, 24);
    run_at(160, 48);
}

/// `frame K/N` from the replay's header.
fn replay_frame(screen: &str) -> Option<(usize, usize)> {
    let rest = &screen[screen.find("  frame ")? + "  frame ".len()..];
    let (k, n) = rest.split_whitespace().next()?.split_once('/')?;
    Some((k.parse().ok()?, n.parse().ok()?))
}

/// Seconds since the start, from the replay's header (`replay run.tscope 0.8 s / 2.4 s`).
fn replay_position(screen: &str) -> f64 {
    let rest = &screen[screen.find("replay ").expect("a replay header") + "replay ".len()..];
    rest.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("no position in {rest}"))
}

/// The workload's row in the process list, running with its touched memory resident (8 MiB or
/// more: numa_maps is read while it touches, so a frame may hold part of the 64 MiB).
fn workload_resident(screen: &str) -> bool {
    screen.lines().filter(|l| l.contains("tierscope-work") && !l.contains("exited")).any(|l| {
        l.split_whitespace()
            .collect::<Vec<_>>()
            .windows(2)
            .any(|w| w[1] == "MiB" && w[0].parse::<f64>().is_ok_and(|v| v >= 8.0))
    })
}

#[test]
#[ignore = "needs root and TIERSCOPE_BIN (cargo xtask test runs it)"]
fn top_replay_in_tmux_pauses_seeks_and_changes_speed() {
    require_root_and_agent!();
    let bin = tierscope_bin().expect("TIERSCOPE_BIN");
    let workload = env!("CARGO_BIN_EXE_tierscope-workload");
    let dir = std::env::temp_dir().join(format!("tierscope-replay-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("run.tscope");
    // Nothing for 0.6 s, then 64 MiB held for a second, then gone.
    let script = format!("sleep 0.6; (printf 'go\\n'; sleep 1) | {workload} touch 64 >/dev/null; sleep 0.6");
    let o = Command::new(&bin)
        .args(["record", "-o", file.to_str().expect("p"), "--interval-ms", "200", "--", "sh", "-c", &script])
        .output()
        .expect("record");
    assert!(o.status.success(), "record: {}", String::from_utf8_lossy(&o.stderr));
    let state = dir.join("state");
    let command = format!(
        "XDG_STATE_HOME={} {bin} top --replay {}; echo TIERSCOPE-EXIT=$?; sleep 120",
        state.display(),
        file.display()
    );
    let pane = Pane::start(&format!("tierscope-replay-{}", std::process::id()), 120, 32, &command);
    pane.keys(&["2"]);
    // It plays at 1x on its own: the frame number goes up.
    let first = pane.wait_for("the replay header", 20, |s| replay_frame(s).is_some());
    let (k0, n) = replay_frame(&first).expect("frame");
    assert!(n >= 10, "a recording of about 2.4 s at 200 ms: {n} frames\n{first}");
    pane.wait_for("playing on", 10, |s| replay_frame(s).is_some_and(|(k, _)| k > k0));
    // Space pauses: the frame stays.
    pane.keys(&["Space"]);
    let paused = pane.wait_for("PAUSED", 5, |s| s.contains("PAUSED 1x"));
    sleep(Duration::from_millis(1200));
    assert_eq!(replay_frame(&pane.capture()), replay_frame(&paused), "paused: the frame stays");
    // Home: the first frame, before the workload ran.
    pane.keys(&["Home"]);
    let start = pane.wait_for("frame 1", 5, |s| replay_frame(s) == Some((1, n)));
    assert!(!start.contains("tierscope-work"), "the workload starts after 0.6 s:\n{start}");
    // Right steps one interval at a time until the workload holds its 64 MiB.
    let mut k = 1;
    let mut positions = vec![replay_position(&start)];
    loop {
        pane.keys(&["Right"]);
        k += 1;
        let s = pane.wait_for(&format!("frame {k}"), 5, |s| replay_frame(s) == Some((k, n)));
        positions.push(replay_position(&s));
        if workload_resident(&s) {
            break;
        }
        assert!(k < n, "the workload never showed its memory resident; last screen:\n{s}");
    }
    // Each step is one interval (200 ms, give or take the recorder's scheduling) later.
    assert!(positions.windows(2).all(|w| w[1] > w[0] && w[1] - w[0] < 0.5), "one interval per step: {positions:?}");
    pane.keys(&["Left"]);
    let back = pane.wait_for("one frame back", 5, |s| replay_frame(s) == Some((k - 1, n)));
    assert_eq!(replay_position(&back), positions[positions.len() - 2], "back to the previous frame's time");
    // End: the last frame, the workload gone.
    pane.keys(&["End"]);
    let end = pane.wait_for("the last frame", 5, |s| replay_frame(s) == Some((n, n)));
    let row = end.lines().find(|l| l.contains("tierscope-work")).unwrap_or_default();
    assert!(row.contains("exited"), "the workload exited before the end (its final totals stay):\n{end}");
    // Speed: + doubles up to 16x, - halves down to 0.5x; at 16x the whole replay takes < 1 s.
    pane.keys(&["-", "-", "-"]);
    pane.wait_for("0.5x", 5, |s| s.contains("PAUSED 0.5x"));
    pane.keys(&["+", "+", "+", "+", "+", "+", "+"]);
    pane.wait_for("16x", 5, |s| s.contains("PAUSED 16x"));
    pane.keys(&["Space"]);
    pane.wait_for("playing again from the start, at 16x", 5, |s| s.contains("▶ 16x") || s.contains("PAUSED 16x"));
    pane.wait_for("the end again, paused there", 10, |s| replay_frame(s) == Some((n, n)) && s.contains("PAUSED 16x"));
    pane.keys(&["q"]);
    let screen = pane.wait_for("the exit line after q", 20, |s| s.contains("TIERSCOPE-EXIT="));
    assert!(screen.contains("TIERSCOPE-EXIT=0"), "top --replay exits 0 on q:\n{screen}");
    assert_eq!(pane.format("#{alternate_on}"), "0", "back on the main screen");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A terminal that goes away without a SIGHUP reaching the UI (its tmux server killed with
/// SIGKILL: the pty's other end just closes) ends the UI within a second or two. crossterm reads
/// end-of-file forever there: before the fix each leaked `top --replay` spun at ~20% of a core.
#[test]
#[ignore = "needs root and TIERSCOPE_BIN (cargo xtask test runs it)"]
fn top_ends_when_its_terminal_vanishes() {
    require_root_and_agent!();
    let bin = tierscope_bin().expect("TIERSCOPE_BIN");
    let dir = std::env::temp_dir().join(format!("tierscope-hangup-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("run.tscope");
    let o = Command::new(&bin)
        .args(["record", "-o", file.to_str().expect("p"), "--interval-ms", "200", "--", "sleep", "0.6"])
        .output()
        .expect("record");
    assert!(o.status.success(), "record: {}", String::from_utf8_lossy(&o.stderr));
    // A tmux server of its own (-L): killing it touches no other test's sessions.
    let socket = format!("tierscope-hangup-{}", std::process::id());
    let pid_file = dir.join("pid");
    let command = format!(
        "echo $$ > {}; XDG_STATE_HOME={} exec {bin} top --replay {}",
        pid_file.display(),
        dir.join("state").display(),
        file.display()
    );
    let ok = Command::new("tmux")
        .args(["-L", &socket, "new-session", "-d", "-s", "hangup", "-x", "100", "-y", "30", &command])
        .status()
        .expect("tmux new-session");
    assert!(ok.success(), "tmux new-session failed");
    let deadline = Instant::now() + Duration::from_secs(10);
    let pid: i32 = loop {
        if let Some(p) = std::fs::read_to_string(&pid_file).ok().and_then(|s| s.trim().parse().ok()) {
            break p;
        }
        assert!(Instant::now() < deadline, "the pane never started");
        sleep(Duration::from_millis(100));
    };
    // The UI is up once it has taken the alternate screen.
    let deadline = Instant::now() + Duration::from_secs(10);
    while tmux(&["-L", &socket, "display-message", "-p", "-t", "hangup", "#{alternate_on}"]).trim() != "1" {
        assert!(Instant::now() < deadline, "top --replay never took the screen");
        sleep(Duration::from_millis(100));
    }
    let server = tmux(&["-L", &socket, "display-message", "-p", "#{pid}"]).trim().to_string();
    let killed = Command::new("kill").args(["-KILL", &server]).status().expect("kill");
    assert!(killed.success(), "killing tmux server {server}");
    let alive = || std::path::Path::new(&format!("/proc/{pid}")).exists();
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive() && Instant::now() < deadline {
        sleep(Duration::from_millis(100));
    }
    let still = alive();
    if still {
        let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!still, "top --replay (pid {pid}) still ran 5 s after its terminal went away");
}

/// The screen's text as one line (wrapped lines joined with a space), for text the view wraps.
fn flowing(screen: &str) -> String {
    screen.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ")
}

/// `N open, M opened and K closed` from the Insights view's header.
fn insight_counts(screen: &str) -> Option<(u32, u32, u32)> {
    let rest = screen.lines().find_map(|l| l.strip_prefix("Insights  "))?;
    let w: Vec<&str> = rest.split_whitespace().take(7).collect();
    match w[..] {
        [open, "open,", opened, "opened", "and", closed, "closed"] => {
            Some((open.parse().ok()?, opened.parse().ok()?, closed.parse().ok()?))
        }
        _ => None,
    }
}

#[test]
#[ignore = "needs root and TIERSCOPE_BIN (cargo xtask test runs it)"]
fn top_replay_in_tmux_shows_a_recorded_insight_while_it_was_open() {
    require_root_and_agent!();
    let bin = tierscope_bin().expect("TIERSCOPE_BIN");
    let dir = std::env::temp_dir().join(format!("tierscope-replay-insight-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = insight_session::record_churning_rank(&dir);
    let (_, insight) = insight_session::churn_insight(&file);
    let opened_s = insight["opened_s"].as_f64().expect("opened_s");
    let about = insight["about"].as_str().expect("about");
    // The report keeps the summary of the insight's worst frame: the replay shows it there.
    let worst_summary = insight["summary"].as_str().expect("summary");
    let command = format!(
        "XDG_STATE_HOME={} {bin} top --replay {}; echo TIERSCOPE-EXIT=$?; sleep 120",
        dir.join("state").display(),
        file.display()
    );
    let pane = Pane::start(&format!("tierscope-replay-insight-{}", std::process::id()), 120, 40, &command);
    pane.wait_for("the replay header", 20, |s| replay_frame(s).is_some());
    pane.keys(&["Space"]);
    pane.wait_for("PAUSED", 5, |s| s.contains("PAUSED 1x"));
    pane.keys(&["7", "Home"]);
    let start = pane.wait_for("frame 1 of the Insights view", 5, |s| {
        replay_frame(s).is_some_and(|(k, _)| k == 1) && insight_counts(s).is_some()
    });
    let n = replay_frame(&start).expect("frame").1;
    assert_eq!(insight_counts(&start), Some((0, 0, 0)), "nothing open at the start:\n{start}");
    assert!(start.contains("none open"), "{start}");
    // Step on until it opens: the frame before was before its opening, and it shows with its
    // subject, then (at its worst frame) the report's summary.
    let (mut k, mut before) = (1, replay_position(&start));
    let mut opened_at = None;
    let mut saw_worst = false;
    while k < n {
        pane.keys(&["Right"]);
        k += 1;
        let s = pane.wait_for(&format!("frame {k}"), 5, |s| replay_frame(s) == Some((k, n)));
        let counts = insight_counts(&s).unwrap_or_else(|| panic!("the Insights header:\n{s}"));
        let position = replay_position(&s);
        if opened_at.is_none() {
            if counts.0 == 0 {
                assert!(!s.contains("allocation_churn"), "not open yet at {position} s:\n{s}");
                before = position;
                continue;
            }
            assert_eq!(counts, (1, 1, 0), "{s}");
            opened_at = Some(position);
        }
        if counts.0 == 0 {
            break;
        }
        let line = s.lines().find(|l| l.contains("allocation_churn")).unwrap_or_else(|| panic!("the insight:\n{s}"));
        assert!(line.starts_with("WARNING") && line.contains(about), "{line}");
        assert!(flowing(&s).contains("try: reuse buffers across steps"), "what to try:\n{s}");
        saw_worst |= flowing(&s).contains(worst_summary);
    }
    let opened_at = opened_at.unwrap_or_else(|| panic!("the insight never showed open; it opened at {opened_s} s"));
    eprintln!(
        "replay: not open at {before} s, open at {opened_at} s (opened {opened_s} s); worst summary seen: {saw_worst}"
    );
    // The header shows one decimal of the position.
    assert!(before <= opened_s + 0.05 && opened_s <= opened_at + 0.05, "{before} < {opened_s} <= {opened_at}");
    assert!(saw_worst, "the summary of its worst frame showed while stepping: {worst_summary}");
    // At the end it is closed, listed under Closed recently; back at the start, nothing again.
    pane.keys(&["End"]);
    let end = pane.wait_for("the last frame", 5, |s| replay_frame(s) == Some((n, n)));
    assert_eq!(insight_counts(&end), Some((0, 1, 1)), "{end}");
    let closed = &end[end.find("Closed recently").unwrap_or_else(|| panic!("Closed recently:\n{end}"))..];
    assert!(closed.contains("allocation_churn") && closed.contains(about), "{end}");
    pane.keys(&["Home"]);
    let start = pane.wait_for("frame 1 again", 5, |s| replay_frame(s) == Some((1, n)));
    assert_eq!(insight_counts(&start), Some((0, 0, 0)), "seeking back before it opened:\n{start}");
    assert!(!start.contains("allocation_churn"), "{start}");
    pane.keys(&["q"]);
    let screen = pane.wait_for("the exit line after q", 20, |s| s.contains("TIERSCOPE-EXIT="));
    assert!(screen.contains("TIERSCOPE-EXIT=0"), "{screen}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// From a shell on a real terminal (tmux's pane: a controlling terminal exists), `top` and
/// `top --replay` with standard output sent to a file refuse in one line instead of drawing on
/// `/dev/tty`: the project's own damaged-sessions test once waited forever on the terminal of
/// whoever ran the suite from an interactive shell.
#[test]
#[ignore = "requires root"]
fn top_with_stdout_not_a_terminal_refuses_even_from_a_terminal() {
    require_root_and_agent!();
    let bin = tierscope_bin().expect("TIERSCOPE_BIN");
    let dir = std::env::temp_dir().join(format!("tierscope-notty-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("run.tscope");
    let o = Command::new(&bin)
        .args(["record", "-o", file.to_str().expect("p"), "--interval-ms", "200", "--", "sleep", "0.6"])
        .output()
        .expect("record");
    assert!(o.status.success(), "record: {}", String::from_utf8_lossy(&o.stderr));
    for (name, args) in
        [("notty-live", "top".to_string()), ("notty-replay", format!("top --replay {}", file.display()))]
    {
        let (out, err) = (dir.join(format!("{name}.out")), dir.join(format!("{name}.err")));
        let command = format!(
            "tty > {d}/{name}.tty; {bin} {args} > {o} 2> {e}; echo TIERSCOPE-EXIT=$?; sleep 120",
            d = dir.display(),
            o = out.display(),
            e = err.display()
        );
        let pane = Pane::start(name, 100, 30, &command);
        let screen = pane.wait_for("top's exit", 60, |s| s.contains("TIERSCOPE-EXIT="));
        let tty = std::fs::read_to_string(dir.join(format!("{name}.tty"))).expect("tty file");
        assert!(tty.starts_with("/dev/pts/"), "the shell runs on a terminal: {tty}");
        assert!(screen.contains("TIERSCOPE-EXIT=1"), "{args}: exit 1: {screen}");
        let e = std::fs::read_to_string(&err).expect("stderr file");
        assert_eq!(e.trim_end().lines().count(), 1, "{args}: one line: {e}");
        assert!(e.starts_with("tierscope: error: ") && e.contains("standard output is not a terminal"), "{args}: {e}");
        // Nothing was drawn: no escape sequence reached the file or the pane.
        assert_eq!(std::fs::read(&out).expect("stdout file"), b"", "{args}: nothing on stdout");
        assert!(!screen.contains("Overview"), "{args}: the UI did not draw on the terminal: {screen}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
