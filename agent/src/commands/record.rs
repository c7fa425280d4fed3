//! `tierscope record -o FILE [--duration S] [--pid P]... [--match RE] [-- CMD ARGS...]`: records
//! a profiling session (see `crate::recording`). With a command, starts it (as the invoking user
//! under sudo), follows it and its children, stops when it exits and returns its exit code;
//! otherwise records what is selected until the duration ends or Ctrl-C / SIGTERM.
use std::{
    collections::BTreeSet,
    os::unix::process::{CommandExt as _, ExitStatusExt as _},
    path::Path,
    process::{Child, ExitStatus},
    time::Duration,
};

use anyhow::{Context as _, Result};
use tokio::signal::unix::{signal, SignalKind};

use crate::{
    cli::RecordArgs,
    collect::{counters, damon, procfs, session::Session},
    model::{
        scan_plan::ScanBudget,
        snapshot::{self, ProcessFilter, SnapshotContext},
    },
    recording::{
        capture::{self, Capture},
        records::{EndRec, Meta, Record, SCHEMA},
        SessionWriter,
    },
};

/// Why recording stopped.
enum Stop {
    Duration,
    Interrupted,
    Terminated,
    Exited(ExitStatus),
}

pub fn run(args: RecordArgs) -> Result<i32> {
    if let Some(d) = args.duration {
        if !(d.is_finite() && d > 0.0 && d < 7.0 * 86_400.0) {
            eprintln!("tierscope: --duration {d}: give seconds between 0 and 604800");
            return Ok(2);
        }
    }
    if !(100..=60_000).contains(&args.interval_ms) {
        eprintln!("tierscope: --interval-ms {}: give milliseconds between 100 and 60000", args.interval_ms);
        return Ok(2);
    }
    let filter = args.select.filter()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(record(args, filter))
}

/// Every process below `root` in the (pid, ppid) pairs, `root` included.
pub fn descendants(root: u32, pairs: &[(u32, u32)]) -> BTreeSet<u32> {
    let mut set = BTreeSet::from([root]);
    loop {
        let before = set.len();
        for &(pid, ppid) in pairs {
            if set.contains(&ppid) {
                set.insert(pid);
            }
        }
        if set.len() == before {
            return set;
        }
    }
}

fn process_tree() -> Vec<(u32, u32)> {
    procfs::list_pids(Path::new("/proc")).into_iter().filter_map(|p| Some((p, procfs::read_stat(p)?.ppid))).collect()
}

/// Starts the command; under sudo as the user who ran sudo.
fn spawn(command: &[String]) -> Result<Child> {
    let mut cmd = std::process::Command::new(&command[0]);
    cmd.args(&command[1..]);
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if let (true, Some(uid), Some(gid)) =
        (root, crate::recording::sudo_id("SUDO_UID"), crate::recording::sudo_id("SUDO_GID"))
    {
        // std drops the supplementary groups when a uid is set.
        cmd.uid(uid).gid(gid);
    }
    cmd.spawn().with_context(|| format!("starting {:?} (is it on PATH?)", command[0]))
}

fn exit_code(s: ExitStatus) -> i32 {
    s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0))
}

fn selection_words(filter: &ProcessFilter, command: &[String]) -> String {
    let mut w = vec![];
    if !command.is_empty() {
        w.push("the command and its children".to_string());
    }
    w.extend(filter.pids.iter().map(|p| format!("--pid {p}")));
    w.extend(filter.pattern.as_ref().map(|re| format!("--match {}", re.as_str())));
    if w.is_empty() {
        "every process doing memory work, and training processes".into()
    } else {
        w.join(", ")
    }
}

async fn record(args: RecordArgs, filter: ProcessFilter) -> Result<i32> {
    let mut s = Session::start_with(super::session_options(&args.tiers, filter.pattern.clone()))?;
    let hot_cfg = args.hotness.config()?;
    // Hotness (DAMON) joins the frames when asked for; dropping the worker stops its kdamonds.
    let mut hotness = damon::start(&s.topology, &hot_cfg, s.page_size, vec![], &mut s.model.hotness);
    let mut out = SessionWriter::create(&args.output)
        .with_context(|| format!("creating the session file {}", args.output.display()))?;
    // Handlers before the loop: a signal arriving during a busy tick waits in the stream.
    let mut int = signal(SignalKind::interrupt()).context("SIGINT handler")?;
    let mut term = signal(SignalKind::terminate()).context("SIGTERM handler")?;
    let explicit_pids = filter.pids.clone();
    // The processes selected now have their first allocations' sites sampled too.
    if !filter.pids.is_empty() || filter.pattern.is_some() {
        s.discover(|pid, comm, cmdline| {
            filter.pids.contains(&pid)
                || filter.pattern.as_ref().is_some_and(|re| re.is_match(comm) || re.is_match(cmdline))
        });
    }
    let mut child = if args.command.is_empty() { None } else { Some(spawn(&args.command)?) };
    let root = child.as_ref().map(Child::id);
    // The command from its first moments (its children from the tick they are found).
    let mut watched = crate::collect::site_watch::watched_by(&filter, &s.model);
    watched.extend(root);
    s.watch_sites(&watched);
    let followed: BTreeSet<u32> = root.into_iter().collect();
    let started_ns = counters::monotonic_ns();
    let started_unix_ms =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    let interval = Duration::from_millis(args.interval_ms);
    eprintln!(
        "tierscope: recording to {} every {} ms{}",
        args.output.display(),
        args.interval_ms,
        child.as_ref().map_or(String::new(), |c| format!(" (pid {} and its children)", c.id()))
    );
    let meta = Meta {
        schema: SCHEMA.into(),
        tool_version: env!("CARGO_PKG_VERSION").into(),
        host: super::snapshot::hostname(),
        kernel: super::check::kernel_release(),
        started_unix_ms,
        interval_ms: args.interval_ms,
        page_size: s.page_size,
        site_sample_every: s.site_sample_every,
        command: args.command.clone(),
        selection: selection_words(&filter, &args.command),
        insights_open_after_s: Some(s.model.insights.cfg.open_after_s),
        insights_close_after_s: Some(s.model.insights.cfg.close_after_s),
    };
    out.push(&Record::Meta(meta)).context("encoding the session header")?;
    let deadline = args.duration.map(|d| tokio::time::Instant::now() + Duration::from_secs_f64(d));
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut reap = tokio::time::interval(Duration::from_millis(100));
    let mut rec = Recorder {
        capture: Capture::default(),
        filter,
        explicit_pids,
        root,
        followed,
        budget: ScanBudget { cpu_fraction: 0.05, min_interval_ns: interval.as_nanos() as u64, ..ScanBudget::default() },
        nodes: s.node_infos(),
        started_ns,
        first: true,
    };
    let stop = loop {
        tokio::select! {
            _ = tick.tick() => {
                if let Some(w) = &hotness {
                    w.set_processes(damon::wanted_processes(&s.model, &rec.filter));
                    w.drain_into(&mut s.model.hotness);
                }
            }
            _ = reap.tick() => {
                match child.as_mut().map(Child::try_wait).transpose().context("waiting for the command")?.flatten() {
                    Some(status) => break Stop::Exited(status),
                    None => continue,
                }
            }
            _ = async { tokio::time::sleep_until(deadline.unwrap_or_else(tokio::time::Instant::now)).await }, if deadline.is_some() => break Stop::Duration,
            _ = int.recv() => {
                // The terminal sent it to the command too: record until the command is gone.
                match child.as_mut() {
                    Some(_) => eprintln!("tierscope: interrupted: recording until the command exits"),
                    None => break Stop::Interrupted,
                }
                continue;
            }
            _ = term.recv() => {
                if let Some(c) = &child {
                    // SAFETY: kill with a pid we started.
                    unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
                }
                break Stop::Terminated;
            }
        }
        rec.write(&mut s, &mut out)?;
    };
    // The last interval: what the kernel delivered up to the end.
    s.flush_events().await;
    rec.write(&mut s, &mut out)?;
    drop(hotness.take());
    let (reason, code) = match &stop {
        Stop::Duration => ("duration", None),
        Stop::Interrupted => ("interrupted", None),
        Stop::Terminated => ("terminated", None),
        Stop::Exited(st) => ("command exited", Some(exit_code(*st))),
    };
    let mut drops: std::collections::BTreeMap<String, u64> = s
        .model
        .kernel_stats
        .iter()
        .filter(|(k, _)| **k != "agent_filtered")
        .map(|(k, v)| (format!("kernel.{k}"), *v))
        .collect();
    drops.insert("agent.event_channel_full".into(), s.channel_dropped());
    drops.insert("kernel.recursion_misses".into(), s.model.program_counters.recursion_misses().total);
    let t_ms = (counters::monotonic_ns() - started_ns) / 1_000_000;
    out.push(&Record::End(EndRec { t_ms, reason: reason.into(), exit_code: code, drops }))?;
    let path = out.path.clone();
    let bytes = out.finish().with_context(|| format!("writing {}", path.display()))?;
    eprintln!("tierscope: recorded {:.1} s to {} ({bytes} bytes, {reason})", t_ms as f64 / 1e3, path.display());
    Ok(match stop {
        Stop::Exited(st) => exit_code(st),
        Stop::Terminated => 143,
        Stop::Interrupted => 130,
        Stop::Duration => 0,
    })
}

/// Reads the kernel, writes one interval's records as one chunk.
#[allow(clippy::too_many_arguments)]
/// What a recording carries from one interval to the next.
struct Recorder {
    capture: Capture,
    filter: ProcessFilter,
    /// `--pid` as given; the followed command's tree is added to it each interval.
    explicit_pids: Vec<u32>,
    root: Option<u32>,
    followed: BTreeSet<u32>,
    budget: ScanBudget,
    nodes: Vec<snapshot::NodeInfo>,
    started_ns: u64,
    first: bool,
}

impl Recorder {
    /// Reads the session and writes one interval (the topology before the first).
    fn write(&mut self, s: &mut Session, out: &mut SessionWriter) -> Result<()> {
        let Recorder { capture, filter, explicit_pids, root, followed, budget, nodes, started_ns, first } = self;
        let (root, started_ns) = (*root, *started_ns);
        write_interval(s, out, capture, filter, explicit_pids, root, followed, budget, nodes, started_ns, *first)?;
        *first = false;
        Ok(())
    }
}

fn write_interval(
    s: &mut Session,
    out: &mut SessionWriter,
    capture: &mut Capture,
    filter: &mut ProcessFilter,
    explicit_pids: &[u32],
    root: Option<u32>,
    followed: &mut BTreeSet<u32>,
    budget: &ScanBudget,
    nodes: &[snapshot::NodeInfo],
    started_ns: u64,
    first: bool,
) -> Result<()> {
    s.read_counters();
    if let Some(root) = root {
        // Children started since the last tick; exited ones stay selected until pruned.
        followed.extend(descendants(root, &process_tree()));
        filter.pids = explicit_pids.iter().copied().chain(followed.iter().copied()).collect();
    }
    if !filter.pids.is_empty() || filter.pattern.is_some() {
        s.discover(|pid, comm, cmdline| {
            filter.pids.contains(&pid)
                || filter.pattern.as_ref().is_some_and(|re| re.is_match(comm) || re.is_match(cmdline))
        });
    }
    s.watch_sites_of(filter);
    let jobs = filter.matched_jobs(&s.model);
    let selected: Vec<u32> = s.model.processes.values().filter(|p| filter.selects(p, &jobs)).map(|p| p.tgid).collect();
    s.refresh_residency(&selected, budget);
    let now = counters::monotonic_ns();
    let snap = snapshot::build(
        &s.model,
        filter,
        SnapshotContext {
            host: String::new(),
            kernel: String::new(),
            duration_s: (now - started_ns) as f64 / 1e9,
            nodes,
            page_size: s.page_size,
            programs: vec![],
            channel_dropped: 0,
            now_ns: now,
            site_sample_every: s.site_sample_every,
            site_samples_per_sec: s.site_samples_per_sec,
            site_unnormalized: s.site_reader.stats.unnormalized.load(std::sync::atomic::Ordering::Relaxed),
            site_stacks: s.site_reader.stats.stacks(),
            window_start_ns: started_ns,
            map_entries_forgotten: s.entries_forgotten,
            memory_block_checks: s.block_checks,
            memory_block_slots_rewritten: s.block_slots_rewritten,
        },
    );
    if first {
        out.push(&capture::topology(&snap))?;
    }
    for r in capture.observe(&snap, &s.model, (now - started_ns) / 1_000_000) {
        out.push(&r)?;
    }
    out.flush().with_context(|| format!("writing {}", out.path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_and_grandchildren_are_followed() {
        let pairs = [(10, 1), (11, 10), (12, 11), (13, 1), (14, 12), (15, 13)];
        assert_eq!(descendants(10, &pairs), BTreeSet::from([10, 11, 12, 14]));
        assert_eq!(descendants(99, &pairs), BTreeSet::from([99]));
    }

    #[test]
    fn the_selection_is_said_in_words() {
        let f = ProcessFilter { pids: vec![3], pattern: Some(regex::Regex::new("py").unwrap()) };
        assert_eq!(selection_words(&f, &[]), "--pid 3, --match py");
        assert_eq!(selection_words(&ProcessFilter::default(), &["a".into()]), "the command and its children");
    }
}
