//! `tierscope record -o FILE [--duration S] [--pid P]... [--match RE] [-- CMD ARGS...]`: records
//! a profiling session (see `crate::recording`). With a command, starts it (as the invoking user
//! under sudo), follows it and its children, stops when it exits and returns its exit code;
//! otherwise records what is selected until the duration ends or Ctrl-C / SIGTERM.
use std::{
    collections::{BTreeMap, BTreeSet},
    os::unix::process::ExitStatusExt as _,
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
        redact::Redaction,
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
    // Before anything starts or is written: a bad file is one line.
    let redaction = super::redaction(&args.tiers)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(record(args, filter, redaction))
}

/// A process as `/proc/PID/stat` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Live {
    pub pid: u32,
    pub ppid: u32,
    /// Clock ticks after boot: with the pid, the process's identity across pid reuse.
    pub start: u64,
}

/// The command's live descendants, each as pid -> start time: the root while it lives, those
/// followed before that are still there with the same start time (a child whose parent exited
/// and was re-parented stays followed), and every live process whose parent is one of them, to
/// any depth. One that left is dropped, so the pid the kernel later hands to an unrelated
/// process is not followed.
pub fn follow(before: &BTreeMap<u32, u64>, root: (u32, u64), live: &[Live]) -> BTreeMap<u32, u64> {
    let same = |pid: u32, start: u64| live.iter().any(|l| l.pid == pid && l.start == start);
    let mut set: BTreeMap<u32, u64> = before.iter().map(|(&p, &s)| (p, s)).filter(|&(p, s)| same(p, s)).collect();
    if same(root.0, root.1) {
        set.insert(root.0, root.1);
    }
    loop {
        let before_len = set.len();
        for l in live {
            // A child cannot have started before its parent: a stale parent id is no parent.
            if !set.contains_key(&l.pid) && set.get(&l.ppid).is_some_and(|&ps| l.start >= ps) {
                set.insert(l.pid, l.start);
            }
        }
        if set.len() == before_len {
            return set;
        }
    }
}

/// The processes of the recorded command: the live ones, and those that left but whose final
/// record the model still holds (selected until the model prunes them, unless their pid is
/// already someone else's).
#[derive(Debug, Default)]
pub struct Followed {
    live: BTreeMap<u32, u64>,
    departed: BTreeMap<u32, u64>,
}

impl Followed {
    /// Updates from `/proc` as read now; `held(pid)` says whether the model still holds it.
    pub fn update(&mut self, root: (u32, u64), procs: &[Live], held: impl Fn(u32) -> bool) {
        let now = follow(&self.live, root, procs);
        for (&pid, &start) in &self.live {
            if !now.contains_key(&pid) {
                self.departed.insert(pid, start);
            }
        }
        let running: BTreeSet<u32> = procs.iter().map(|l| l.pid).collect();
        self.departed.retain(|&pid, _| !running.contains(&pid) && held(pid));
        self.live = now;
    }

    /// Every pid to select.
    pub fn pids(&self) -> impl Iterator<Item = u32> + '_ {
        self.live.keys().chain(self.departed.keys()).copied()
    }
}

fn process_tree() -> Vec<Live> {
    procfs::list_pids(Path::new("/proc"))
        .into_iter()
        .filter_map(|pid| procfs::read_stat(pid).map(|st| Live { pid, ppid: st.ppid, start: st.start_time }))
        .collect()
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

async fn record(args: RecordArgs, filter: ProcessFilter, redaction: Redaction) -> Result<i32> {
    let mut opts = super::session_options(&args.tiers, filter.pattern.clone(), redaction.clone());
    // A CPU profile is what a recording is for: every sample that needs a stack copy takes one.
    opts.cpu_stack_copies_per_sec.get_or_insert(crate::model::cpu_profile::RECORD_CPU_STACK_COPIES_PER_SEC);
    let mut s = Session::start_with(opts)?;
    s.model.step_marker = args.tiers.step_marker.clone();
    let hot_cfg = args.hotness.config()?;
    // Hotness (DAMON) joins the frames when asked for; dropping the worker stops its kdamonds.
    let mut hotness = damon::start(&s.topology, &hot_cfg, s.page_size, vec![], &mut s.model.hotness);
    let mut out = SessionWriter::create(&args.output).context("the session file")?;
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
    // The command from its first instruction: watched before it execs, so the kernel gives
    // its children their entries as they fork.
    let mut watched = crate::collect::site_watch::watched_by(&filter, &s.model);
    let mut child = if args.command.is_empty() {
        None
    } else {
        Some(super::held_command::spawn(&args.command, |pid| {
            watched.insert(pid);
            s.watch_sites(&watched);
        })?)
    };
    if child.is_none() {
        s.watch_sites(&watched);
    }
    // Our child is not reaped before try_wait reports it, so its pid names it until then.
    let root = child.as_ref().map(|c| (c.id(), procfs::read_stat(c.id()).map_or(0, |st| st.start_time)));
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
        // The same masking as every command line the model holds.
        command: redaction.redact_args(&args.command),
        selection: redaction.redact(&selection_words(&filter, &args.command)).into_owned(),
        insights_open_after_s: Some(s.model.insights.cfg.open_after_s),
        insights_close_after_s: Some(s.model.insights.cfg.close_after_s),
        page_path: Some(crate::recording::capture::page_path_meta(&s.model.page_path)),
    };
    out.push(&Record::Meta(meta)).context("encoding the session header")?;
    let deadline = args.duration.map(|d| tokio::time::Instant::now() + Duration::from_secs_f64(d));
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut reap = tokio::time::interval(Duration::from_millis(100));
    let mut rec = Recorder {
        capture: Capture::starting_at(started_ns),
        filter,
        explicit_pids,
        root,
        followed: Followed::default(),
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
    root: Option<(u32, u64)>,
    followed: Followed,
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
    root: Option<(u32, u64)>,
    followed: &mut Followed,
    budget: &ScanBudget,
    nodes: &[snapshot::NodeInfo],
    started_ns: u64,
    first: bool,
) -> Result<()> {
    s.read_counters();
    if let Some(root) = root {
        // Children started since the last tick; those that left stay selected while the model
        // holds their final record.
        followed.update(root, &process_tree(), |pid| s.model.processes.contains_key(&pid));
        filter.pids = explicit_pids.iter().copied().chain(followed.pids()).collect();
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

    fn l(pid: u32, ppid: u32, start: u64) -> Live {
        Live { pid, ppid, start }
    }

    #[test]
    fn children_and_grandchildren_are_followed() {
        let live = [l(10, 1, 100), l(11, 10, 101), l(12, 11, 102), l(13, 1, 103), l(14, 12, 104), l(15, 13, 105)];
        let got = follow(&BTreeMap::new(), (10, 100), &live);
        assert_eq!(got, BTreeMap::from([(10, 100), (11, 101), (12, 102), (14, 104)]));
        // A root that is gone follows nothing, even with its pid taken again.
        assert!(follow(&BTreeMap::new(), (99, 1), &live).is_empty());
        assert!(follow(&BTreeMap::new(), (10, 50), &live).is_empty());
    }

    #[test]
    fn only_live_descendants_are_followed_and_a_reused_pid_is_not() {
        let root = (10, 100);
        let mut f = Followed::default();
        f.update(root, &[l(10, 1, 100), l(11, 10, 110), l(12, 11, 120)], |_| true);
        assert_eq!(f.pids().collect::<Vec<_>>(), [10, 11, 12]);
        // 11 exits; its child 12 is re-parented to init and stays followed; 11 stays selected
        // while the model holds its final record.
        f.update(root, &[l(10, 1, 100), l(12, 1, 120)], |_| true);
        assert_eq!(f.live, BTreeMap::from([(10, 100), (12, 120)]));
        assert_eq!(f.pids().collect::<BTreeSet<_>>(), BTreeSet::from([10, 11, 12]));
        // The model pruned 11: it is no longer selected.
        f.update(root, &[l(10, 1, 100), l(12, 1, 120)], |p| p != 11);
        assert_eq!(f.pids().collect::<BTreeSet<_>>(), BTreeSet::from([10, 12]));
        // An unrelated process gets pid 11 (and one gets 13 under a stale parent id): neither
        // is followed.
        f.update(root, &[l(10, 1, 100), l(11, 1, 500), l(12, 1, 120), l(13, 11, 510)], |_| true);
        assert_eq!(f.pids().collect::<BTreeSet<_>>(), BTreeSet::from([10, 12]));
        // A new child of the command that got pid 11 again is followed, with its start time.
        f.update(root, &[l(10, 1, 100), l(11, 10, 600), l(12, 1, 120)], |_| true);
        assert_eq!(f.live, BTreeMap::from([(10, 100), (11, 600), (12, 120)]));
        // A departed pid already someone else's is dropped at once, held or not.
        f.update(root, &[l(10, 1, 100), l(11, 10, 600), l(12, 1, 700)], |_| true);
        assert_eq!(f.live, BTreeMap::from([(10, 100), (11, 600)]));
        assert!(f.departed.is_empty(), "{f:?}");
        // A child that started before its parent is a stale parent id.
        assert_eq!(follow(&BTreeMap::new(), root, &[l(10, 1, 100), l(20, 10, 90)]), BTreeMap::from([(10, 100)]));
    }

    #[test]
    fn the_selection_is_said_in_words() {
        let f = ProcessFilter { pids: vec![3], pattern: Some(regex::Regex::new("py").unwrap()) };
        assert_eq!(selection_words(&f, &[]), "--pid 3, --match py");
        assert_eq!(selection_words(&ProcessFilter::default(), &["a".into()]), "the command and its children");
    }
}
