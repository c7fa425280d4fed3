//! The agent's life as an operator sees it: signals (SIGINT and SIGTERM stop it promptly even
//! while it is busy; SIGHUP reloads the configuration, keeping the running one when the new one
//! is broken), and processes' lives as it sees them (exits lost in a ring overflow found anyway,
//! a reused pid told apart, a leader that calls `pthread_exit` kept until its threads end).
//! Needs root and TIERSCOPE_BIN; `harness = false` (the binary doubles as the workload child,
//! see export_support).
mod export_support;

use std::{
    path::Path,
    time::{Duration, Instant},
};

use export_support::*;

#[path = "process_lives.rs"]
mod lives;

/// Matched processes that keep the agent busy with numa_maps reads on every turn.
const BUSY_CHILDREN: usize = 300;
/// How long a stop may take: one turn of the loop plus the flush.
const STOP_BOUND: Duration = Duration::from_secs(10);

fn write_config(path: &Path, listen: &str, pattern: &str) {
    std::fs::write(
        path,
        format!(
            "[prometheus]\nlisten = \"{listen}\"\n[collect]\nread_interval_ms = 100\nresidency_interval_ms = 100\nmax_tracked = 1000\n[track]\nmatch = \"{pattern}\"\n"
        ),
    )
    .expect("writing the config");
}

fn signal(agent: &Agent, sig: i32) {
    // SAFETY: kill has no memory preconditions; the pid is our child's.
    assert_eq!(unsafe { libc::kill(agent.pid() as i32, sig) }, 0, "kill({sig})");
}

fn stderr_has(agent: &Agent, what: &str) -> bool {
    agent.stderr.lock().expect("stderr lock").contains(what)
}

/// SIGINT while every turn reads hundreds of numa_maps: the agent stops within the bound, cleanly.
fn sigint_stops_a_busy_agent(bin: &std::path::PathBuf, dir: &Path) {
    let marker = format!("tierscope-busy-{}", std::process::id());
    let children: Vec<Workload> = (0..BUSY_CHILDREN).map(|_| Workload::start(64, &marker)).collect();
    let listen = format!("127.0.0.1:{}", free_port());
    let config = dir.join("busy.toml");
    write_config(&config, &listen, &marker);
    let mut agent = Agent::start(bin, &["--config", config.to_str().expect("utf-8 path")], &[]);
    // Busy: the matched processes are tracked (their residency is what the turns read).
    wait_for(Duration::from_secs(30), || {
        let (_, body) = http_get(&listen, "/metrics").ok()?;
        (body.matches("tierscope_process_memory_resident_bytes{").count() >= BUSY_CHILDREN / 2).then_some(())
    })
    .unwrap_or_else(|| {
        panic!("the busy children were not tracked; stderr:\n{}", agent.stderr.lock().expect("stderr lock"))
    });
    agent.assert_alive();
    let sent = Instant::now();
    signal(&agent, libc::SIGINT);
    let status = loop {
        if let Some(st) = agent.child.try_wait().expect("try_wait") {
            break st;
        }
        assert!(
            sent.elapsed() < STOP_BOUND,
            "still running {:?} after SIGINT; stderr:\n{}",
            STOP_BOUND,
            agent.stderr.lock().expect("stderr lock")
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0), "exit status after SIGINT");
    std::thread::sleep(Duration::from_millis(100)); // the stderr reader's last lines
    assert!(stderr_has(&agent, "SIGINT: flushing and stopping"), "{}", agent.stderr.lock().expect("stderr lock"));
    println!("sigint_stops_a_busy_agent: stopped {:?} after SIGINT with {BUSY_CHILDREN} tracked", sent.elapsed());
    drop(children);
}

/// SIGHUP with a broken file keeps the old configuration; with a valid one applies it.
fn sighup_reloads_or_keeps_the_config(bin: &std::path::PathBuf, dir: &Path) {
    let marker = format!("tierscope-reload-{}", std::process::id());
    let work = Workload::start(256, &marker);
    let pid = work.pid().to_string();
    let listen = format!("127.0.0.1:{}", free_port());
    let config = dir.join("reload.toml");
    write_config(&config, &listen, "no-such-process-matches-this");
    let mut agent = Agent::start(bin, &["--config", config.to_str().expect("utf-8 path")], &[]);
    let tracked = |listen: &str| {
        let (_, body) = http_get(listen, "/metrics").ok()?;
        sample(&body, "tierscope_process_memory_resident_bytes", &[("process_pid", &pid)])
    };
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(tracked(&listen), None, "tracked before it was asked for");

    std::fs::write(&config, "[track]\nmatch = \"(unclosed\"\n").expect("writing the config");
    signal(&agent, libc::SIGHUP);
    wait_for(Duration::from_secs(10), || stderr_has(&agent, "SIGHUP: keeping the running configuration").then_some(()))
        .unwrap_or_else(|| panic!("no reload refusal; stderr:\n{}", agent.stderr.lock().expect("stderr lock")));
    agent.assert_alive();
    assert!(
        stderr_has(&agent, "track.match: not a valid regular expression"),
        "{}",
        agent.stderr.lock().expect("stderr lock")
    );
    // Still serving, on the old configuration.
    assert!(http_get(&listen, "/metrics").is_ok_and(|(s, _)| s == 200), "the endpoint went away");

    write_config(&config, &listen, &marker);
    signal(&agent, libc::SIGHUP);
    wait_for(Duration::from_secs(10), || stderr_has(&agent, "applied: track.match").then_some(())).unwrap_or_else(
        || panic!("the valid config was not applied; stderr:\n{}", agent.stderr.lock().expect("stderr lock")),
    );
    let resident = wait_for(Duration::from_secs(20), || tracked(&listen)).unwrap_or_else(|| {
        panic!("not tracked after the reload; stderr:\n{}", agent.stderr.lock().expect("stderr lock"))
    });
    assert!(resident >= (256 * PAGE) as f64, "resident {resident}");
    agent.assert_alive();
    assert_eq!(agent.stop(), Some(0), "SIGTERM after reloads");
    println!("sighup_reloads_or_keeps_the_config: ok");
    drop(work);
}

/// A token on a command line: masked in the snapshot, absent from the Prometheus endpoint.
fn secrets_never_leave_the_agent(bin: &std::path::PathBuf) {
    const SECRET: &str = "SuperSecret0123456789";
    let marker = format!("tierscope-secret-{} --api_key={SECRET}", std::process::id());
    let work = Workload::start(256, &marker);
    let pid = work.pid().to_string();
    let matcher = format!("tierscope-secret-{}", std::process::id());
    let out = std::process::Command::new(bin)
        .args(["snapshot", "--json", "--duration", "1", "--match", &matcher])
        .output()
        .expect("running tierscope snapshot");
    assert!(out.status.success(), "snapshot: {}", String::from_utf8_lossy(&out.stderr));
    let doc = String::from_utf8_lossy(&out.stdout);
    assert!(doc.contains(&format!("{matcher} --api_key=***")), "the command line is not shown masked:\n{doc}");
    assert!(!doc.contains(SECRET), "the secret is in the snapshot");

    let listen = format!("127.0.0.1:{}", free_port());
    let agent = Agent::start(bin, &["--prometheus", &listen, "--match", &matcher], &[]);
    let body = wait_for(Duration::from_secs(20), || {
        let (_, body) = http_get(&listen, "/metrics").ok()?;
        sample(&body, "tierscope_process_memory_resident_bytes", &[("process_pid", &pid)]).map(|_| body)
    })
    .unwrap_or_else(|| panic!("not tracked; stderr:\n{}", agent.stderr.lock().expect("stderr lock")));
    assert!(!body.contains(SECRET), "the secret is on /metrics");
    assert!(!agent.stderr.lock().expect("stderr lock").contains(SECRET), "the secret is in the log");
    println!("secrets_never_leave_the_agent: ok");
    drop(work);
}

fn main() {
    if child_mode() || lives::child_mode() {
        return;
    }
    let Some(bin) = agent_bin("agent_lifecycle") else { return summary(0, 6) };
    // A name given on the command line runs only the tests whose names contain it.
    let only: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with("--"));
    let wanted = |name: &str| only.as_deref().is_none_or(|o| name.contains(o));
    let lives: [(&str, fn()); 3] = [
        ("a_ring_overflow_leaves_no_ghost", lives::a_ring_overflow_leaves_no_ghost),
        ("a_reused_pid_is_two_processes", lives::a_reused_pid_is_two_processes),
        ("a_pthread_exit_leader_lives_until_its_threads_end", lives::a_pthread_exit_leader_lives_until_its_threads_end),
    ];
    let mut ran = 0;
    for (name, test) in lives.into_iter().filter(|(n, _)| wanted(n)) {
        test();
        passed(&format!("agent_lifecycle::{name}"));
        ran += 1;
    }
    if only.is_some() && !wanted("signals secrets") {
        return summary(ran, 0);
    }
    let dir = std::env::temp_dir().join(format!("tierscope-lifecycle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    secrets_never_leave_the_agent(&bin);
    passed("agent_lifecycle::secrets_never_leave_the_agent");
    sighup_reloads_or_keeps_the_config(&bin, &dir);
    passed("agent_lifecycle::sighup_reloads_or_keeps_the_config");
    sigint_stops_a_busy_agent(&bin, &dir);
    passed("agent_lifecycle::sigint_stops_a_busy_agent");
    let _ = std::fs::remove_dir_all(&dir);
    summary(ran + 3, 0);
}
