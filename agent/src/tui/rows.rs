//! Model values turned into the rows the views show: pure, sorted and filtered here.
use std::cmp::Ordering;

use crate::{model::process::Process, topology::Tier};

use super::{
    app::{App, SortKey},
    history::{DEMOTION, PROMOTION},
    Scene,
};

/// One process as the tables show it. `None` where the figure is not known (yet).
#[derive(Clone, Debug, PartialEq)]
pub struct ProcessRow {
    pub pid: u32,
    pub comm: String,
    pub cmdline: String,
    /// The `--demo` workload.
    pub demo: bool,
    /// Part of a training job (launcher or worker), as classified by the collector.
    pub training: bool,
    pub job: Option<String>,
    /// Its container and pod (all unknown for a process of the host).
    pub container: crate::model::container::ContainerIdentity,
    pub rank: Option<u32>,
    /// For a data-loader worker or other child of a rank: the rank's pid (listed under it).
    pub rank_pid: Option<u32>,
    /// The GPU a rank drives and that GPU's node, short (`gpu3@n0`; `model/gpu.rs`).
    pub gpu: Option<String>,
    /// Resident bytes from the last numa_maps scan.
    pub rss_bytes: Option<u64>,
    pub dram_share: Option<f64>,
    pub cxl_share: Option<f64>,
    pub residency_at_ns: Option<u64>,
    pub faults: u64,
    pub faults_per_s: f64,
    /// Base pages allocated per second on DRAM / CXL nodes over the last tick.
    pub dram_allocs_per_s: Option<f64>,
    pub cxl_allocs_per_s: Option<f64>,
    /// Base pages migrated in this process's context for promotion / demotion.
    pub promoted: u64,
    pub demoted: u64,
    /// When it exited (monotonic ns): its figures are final totals, its rates none.
    pub exited_at_ns: Option<u64>,
}

/// `gpu3@n0` (device minor, else PCI address; the GPU's node) for a rank whose GPU is known.
fn gpu_short(p: &Process, scene: &Scene<'_>) -> Option<String> {
    let open = p.gpu_facts.as_ref().map_or(&[][..], |f| &f.open_minors[..]);
    if scene.model.gpus.is_empty() || (p.gpu_facts.is_none() && p.cuda_visible_devices.is_none()) {
        return None;
    }
    let g =
        crate::model::gpu::choose(&scene.model.gpus, open, p.cuda_visible_devices.as_deref(), p.rank.local_rank).gpu?;
    let name = g.minor.map_or_else(|| g.pci_address.clone(), |m| format!("gpu{m}"));
    Some(match g.numa_node {
        Some(n) => format!("{name}@n{n}"),
        None => name,
    })
}

/// The GPU a rank drives and where its threads may and did run (`model/gpu.rs`).
pub fn gpu_lines(p: &crate::model::process::Process, scene: &Scene<'_>) -> Vec<String> {
    use crate::{model::gpu, topology::parse::format_id_list};
    let mut out = Vec::new();
    let facts = p.gpu_facts.as_ref();
    let view = gpu::gpu_view(&scene.model.gpus, facts, p.cuda_visible_devices.as_deref(), p.rank.local_rank);
    if let Some(v) = view.filter(|_| !scene.model.gpus.is_empty()) {
        let node = v.numa_node.map_or("no node".to_string(), |n| format!("node {n}"));
        out.push(match (&v.pci_address, &v.model) {
            (Some(pci), Some(m)) => format!("GPU {pci} {m}, {node} ({})", v.how),
            (Some(pci), None) => format!("GPU {pci}, {node} ({})", v.how),
            _ => format!("GPU not known: {}", v.how),
        });
    }
    if let Some(f) = facts {
        let allowed = f.cpus_allowed.as_deref().map_or("?".to_string(), format_id_list);
        let threads: u32 = f.thread_cpus.values().sum();
        let cpus: Vec<u32> = f.thread_cpus.keys().copied().collect();
        out.push(format!("CPUs allowed {allowed}; its {threads} threads last ran on CPUs {}", format_id_list(&cpus)));
    }
    out
}

impl ProcessRow {
    pub fn new(p: &Process, scene: &Scene<'_>) -> ProcessRow {
        let (rss_bytes, dram_share, cxl_share, residency_at_ns) = match &p.residency {
            Some((r, at)) => {
                let total = r.total_pages();
                let on = |t: Tier| -> u64 {
                    r.pages_by_node.iter().filter(|(&n, _)| scene.tier_of(n) == t).map(|(_, &v)| v).sum()
                };
                let share = |t: Tier| (total > 0).then(|| on(t) as f64 / total as f64);
                (Some(total.saturating_mul(scene.page_size)), share(Tier::Dram), share(Tier::Cxl), Some(*at))
            }
            None => (None, None, None, None),
        };
        let exited_at_ns = p.exited_at_ns;
        let alloc_rate = |t: Tier| {
            if exited_at_ns.is_some() {
                return None;
            }
            let h = scene.history.processes.get(&p.tgid)?;
            if h.alloc_rate_by_node.is_empty() {
                return None;
            }
            Some(h.alloc_rate_by_node.iter().filter(|(&n, _)| scene.tier_of(n) == t).map(|(_, &v)| v).sum())
        };
        let migrated = |reason: &str| p.migrations.get(reason).map_or(0, |t| t.succeeded);
        ProcessRow {
            pid: p.tgid,
            comm: p.comm.clone(),
            cmdline: p.cmdline.clone(),
            demo: scene.demo.is_some_and(|d| d.pid == p.tgid),
            training: p.role.is_some(),
            job: p.job.clone(),
            container: p.container.clone(),
            rank: p.rank.rank,
            rank_pid: p.rank_pid,
            gpu: gpu_short(p, scene),
            rss_bytes,
            dram_share,
            cxl_share,
            residency_at_ns,
            faults: p.faults,
            faults_per_s: if exited_at_ns.is_some() { 0.0 } else { p.fault_rate },
            dram_allocs_per_s: alloc_rate(Tier::Dram),
            cxl_allocs_per_s: alloc_rate(Tier::Cxl),
            promoted: migrated(PROMOTION),
            demoted: migrated(DEMOTION),
            exited_at_ns,
        }
    }

    /// The name shown: comm, its rank when it has one, marked when it is the demo workload; a
    /// child of a rank hangs from it (`└`).
    pub fn label(&self) -> String {
        let mut s = if self.comm.is_empty() { "?".to_string() } else { self.comm.clone() };
        if self.rank_pid.is_some() {
            s.insert_str(0, "└ ");
        }
        if let Some(r) = self.rank {
            s.push_str(&format!(" r{r}"));
        }
        if let Some(g) = &self.gpu {
            s.push_str(&format!(" {g}"));
        }
        if self.demo {
            s.push_str(" [demo]");
        }
        s
    }

    /// Exited at least `grace` ago without ever showing memory (no resident pages seen, nothing
    /// migrated): the `bash`, `rm`, `cat` a shell leaves behind, kept by the window's records
    /// but not by the views.
    fn gone_without_memory(&self, now_ns: u64, grace_ns: u64) -> bool {
        self.exited_at_ns.is_some_and(|at| now_ns.saturating_sub(at) >= grace_ns)
            && self.rss_bytes.unwrap_or(0) == 0
            && self.promoted == 0
            && self.demoted == 0
            && !self.demo
    }

    fn matches_text(&self, needle: &str) -> bool {
        if needle.is_empty() {
            return true;
        }
        let needle = needle.to_lowercase();
        self.pid.to_string().contains(&needle)
            || self.comm.to_lowercase().contains(&needle)
            || self.cmdline.to_lowercase().contains(&needle)
            || (self.demo && "demo".contains(&needle))
            || (self.exited_at_ns.is_some() && "exited".contains(&needle))
            || self.job.as_ref().is_some_and(|j| j.to_lowercase().contains(&needle))
            || self.container.matches(&needle)
    }
}

fn cmp_opt(a: Option<f64>, b: Option<f64>) -> Ordering {
    // Unknown sorts below every known value.
    match (a, b) {
        (Some(a), Some(b)) => a.total_cmp(&b),
        (Some(_), None) => Ordering::Greater,
        (None, Some(_)) => Ordering::Less,
        (None, None) => Ordering::Equal,
    }
}

fn compare(a: &ProcessRow, b: &ProcessRow, key: SortKey) -> Ordering {
    match key {
        SortKey::Pid => a.pid.cmp(&b.pid),
        SortKey::Comm => a.comm.cmp(&b.comm),
        SortKey::Rss => a.rss_bytes.cmp(&b.rss_bytes),
        SortKey::DramShare => cmp_opt(a.dram_share, b.dram_share),
        SortKey::CxlShare => cmp_opt(a.cxl_share, b.cxl_share),
        SortKey::FaultsPerS => a.faults_per_s.total_cmp(&b.faults_per_s).then(a.faults.cmp(&b.faults)),
        SortKey::DramAllocsPerS => cmp_opt(a.dram_allocs_per_s, b.dram_allocs_per_s),
        SortKey::CxlAllocsPerS => cmp_opt(a.cxl_allocs_per_s, b.cxl_allocs_per_s),
        SortKey::Promotions => a.promoted.cmp(&b.promoted),
        SortKey::Demotions => a.demoted.cmp(&b.demoted),
    }
}

/// How long an exited process that never showed memory stays in the views (as long as the
/// agent keeps an exited process before pruning it: its final figures can be read meanwhile).
pub const EMPTY_EXITED_SHOWN_NS: u64 = 30_000_000_000;

/// The process table: the processes the CLI selection admits (by default those the kernel saw
/// doing memory work, plus the demo) that lived during the window `top` keeps (its history's
/// length): live ones first, then exited ones with their final totals (those that never showed
/// memory only for [`EMPTY_EXITED_SHOWN_NS`] after their exit). Narrowed by the `/` filter,
/// each group sorted by the chosen column (pid breaks ties, so the order is stable from frame
/// to frame); a pid reused by a live process shows the live one.
pub fn process_rows(scene: &Scene<'_>, app: &App) -> Vec<ProcessRow> {
    let jobs = scene.filter.matched_jobs(scene.model);
    let mut seen = std::collections::HashSet::new();
    let mut rows: Vec<ProcessRow> = scene
        .model
        .processes
        .values()
        .chain(scene.model.departed.iter().rev())
        .filter(|p| seen.insert(p.tgid))
        .filter(|p| scene.filter.selects(p, &jobs) || scene.demo.is_some_and(|d| d.pid == p.tgid))
        .map(|p| ProcessRow::new(p, scene))
        .filter(|r| !r.gone_without_memory(scene.now_ns, EMPTY_EXITED_SHOWN_NS))
        .filter(|r| !app.training_only || r.training || r.demo)
        .filter(|r| r.matches_text(&app.filter))
        .collect();
    rows.sort_by(|a, b| {
        let o = compare(a, b, app.sort);
        let o = if app.descending { o.reverse() } else { o };
        o.then(a.pid.cmp(&b.pid))
    });
    let rows = under_their_rank(rows);
    // Exited ones after every live one (each group in its order): a shell's short-lived
    // commands never sit among the busiest.
    let (mut live, exited): (Vec<ProcessRow>, Vec<ProcessRow>) =
        rows.into_iter().partition(|r| r.exited_at_ns.is_none());
    live.extend(exited);
    live
}

/// How many of `rows` (from [`process_rows`]) are live: they come first.
pub fn live_count(rows: &[ProcessRow]) -> usize {
    rows.iter().take_while(|r| r.exited_at_ns.is_none()).count()
}

/// Moves each child of a rank (data-loader workers, helpers) right under its rank when the rank
/// is listed, keeping the sorted order among ranks and among one rank's children.
fn under_their_rank(rows: Vec<ProcessRow>) -> Vec<ProcessRow> {
    let listed: std::collections::HashSet<u32> = rows.iter().map(|r| r.pid).collect();
    let (children, tops): (Vec<ProcessRow>, Vec<ProcessRow>) =
        rows.into_iter().partition(|r| r.rank_pid.is_some_and(|p| listed.contains(&p)));
    let mut out = Vec::with_capacity(tops.len() + children.len());
    for top in tops {
        let pid = top.pid;
        out.push(top);
        out.extend(children.iter().filter(|c| c.rank_pid == Some(pid)).cloned());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tui::test_scene::{Fixture, DEPARTED_EXIT_NS, DEPARTED_PID, S};

    #[test]
    fn rows_carry_residency_shares_rates_and_migrations() {
        let f = Fixture::training();
        let scene = f.scene();
        let rows = process_rows(&scene, &App::default());
        let trainer = rows.iter().find(|r| r.pid == 4242).expect("trainer row");
        // 3000 pages on node 0 (dram), 1000 on node 2 (cxl), 4 KiB pages.
        assert_eq!(trainer.rss_bytes, Some(4000 * 4096));
        assert_eq!(trainer.dram_share, Some(0.75));
        assert_eq!(trainer.cxl_share, Some(0.25));
        assert_eq!(trainer.promoted, 640);
        assert_eq!(trainer.demoted, 0);
        assert_eq!(trainer.faults, 60_000);
        assert_eq!(trainer.faults_per_s, 1000.0);
        assert_eq!(trainer.dram_allocs_per_s, Some(500.0));
        assert_eq!(trainer.cxl_allocs_per_s, Some(250.0));
        assert!(trainer.demo && trainer.training);
        assert_eq!(trainer.label(), "python3 r0 [demo]");
        assert_eq!(trainer.job.as_deref(), Some("llama-run-1"));
    }

    #[test]
    fn default_order_is_busiest_first_and_sort_keys_reorder() {
        let f = Fixture::training();
        let scene = f.scene();
        let pids = |app: &App| process_rows(&scene, app).iter().map(|r| r.pid).collect::<Vec<_>>();
        assert_eq!(pids(&App::default()), vec![4242, 4243, 1200, 75]);
        let by_pid = App { sort: SortKey::Pid, descending: false, ..App::default() };
        assert_eq!(pids(&by_pid), vec![75, 1200, 4242, 4243]);
        let by_cxl = App { sort: SortKey::CxlShare, descending: true, ..App::default() };
        assert_eq!(pids(&by_cxl), vec![4243, 4242, 75, 1200], "unknown share sorts last, by pid");
        let by_comm = App { sort: SortKey::Comm, descending: false, ..App::default() };
        assert_eq!(pids(&by_comm), vec![75, 4242, 4243, 1200]);
    }

    #[test]
    fn filter_matches_pid_comm_and_cmdline_case_insensitively() {
        let f = Fixture::training();
        let scene = f.scene();
        let pids = |filter: &str| {
            let app = App { filter: filter.into(), sort: SortKey::Pid, descending: false, ..App::default() };
            process_rows(&scene, &app).iter().map(|r| r.pid).collect::<Vec<_>>()
        };
        assert_eq!(pids("TRAIN.PY"), vec![4242, 4243]);
        assert_eq!(pids("1200"), vec![1200]);
        assert_eq!(pids("nothing-like-this"), Vec::<u32>::new());
        // By pod name, namespace and container id (rank 0 in a pod, rank 1 in podman).
        assert_eq!(pids("LLAMA-TRAIN-0"), vec![4242]);
        assert_eq!(pids("a18263a04de5"), vec![4243]);
    }

    #[test]
    fn training_only_keeps_job_processes() {
        let f = Fixture::training();
        let scene = f.scene();
        let app = App { training_only: true, sort: SortKey::Pid, descending: false, ..App::default() };
        let pids: Vec<u32> = process_rows(&scene, &app).iter().map(|r| r.pid).collect();
        assert_eq!(pids, vec![4242, 4243]);
        let by_job = App { filter: "llama-run".into(), ..app };
        assert_eq!(process_rows(&scene, &by_job).len(), 2);
    }

    #[test]
    fn a_rank_row_names_its_gpu_and_node_and_its_view_the_evidence() {
        let mut f = Fixture::training();
        f.model.gpus = (0..2)
            .map(|i| crate::topology::Gpu {
                pci_address: format!("0000:{}:00.0", 18 + i * 80),
                vendor_id: 0x10de,
                numa_node: Some(i),
                minor: Some(i),
                model: Some("NVIDIA H100 80GB HBM3".into()),
                ..Default::default()
            })
            .collect();
        let p = f.model.processes.get_mut(&4242).expect("trainer");
        p.rank.local_rank = Some(1);
        p.gpu_facts = Some(crate::model::gpu::GpuFacts {
            open_minors: vec![0, 1],
            cpus_allowed: Some(vec![0, 1, 2, 3]),
            thread_cpus: [(0, 3), (2, 1)].into_iter().collect(),
            threads_unread: 0,
        });
        let scene = f.scene();
        let rows = process_rows(&scene, &App::default());
        let trainer = rows.iter().find(|r| r.pid == 4242).expect("trainer row");
        assert_eq!(trainer.gpu.as_deref(), Some("gpu1@n1"), "LOCAL_RANK 1 of the two devices it holds open");
        assert_eq!(trainer.label(), "python3 r0 gpu1@n1 [demo]");
        let lines = gpu_lines(scene.model.process_in_window(4242).expect("in window"), &scene);
        assert_eq!(
            lines,
            vec![
                "GPU 0000:98:00.0 NVIDIA H100 80GB HBM3, node 1 (LOCAL_RANK 1 -> CUDA device 1 (CUDA_VISIBLE_DEVICES unset); holds /dev/nvidia0, /dev/nvidia1 open)".to_string(),
                "CPUs allowed 0-3; its 4 threads last ran on CPUs 0,2".to_string(),
            ]
        );
        // Rows of processes without GPU facts are as before.
        assert!(rows.iter().filter(|r| r.pid != 4242).all(|r| r.gpu.is_none()));
    }

    #[test]
    fn exited_processes_stay_with_final_totals_and_idle_ones_are_left_out() {
        let mut f = Fixture::training();
        f.model.processes.get_mut(&1200).expect("fixture").exited_at_ns = Some(100 * S);
        f.model.set_identity(77, "sleeper", "", 1);
        let scene = f.scene();
        let rows = process_rows(&scene, &App::default());
        assert!(rows.iter().all(|r| r.pid != 77), "idle processes are left out");
        let redis = rows.iter().find(|r| r.pid == 1200).expect("the exited process stays listed");
        assert_eq!((redis.exited_at_ns, redis.faults, redis.faults_per_s), (Some(100 * S), 120, 0.0));
        assert_eq!(redis.dram_allocs_per_s, None, "no rates after exit");
    }

    #[test]
    fn exited_processes_come_after_live_ones_and_empty_ones_leave_after_their_grace() {
        let mut f = Fixture::training();
        // 1200 exited 3 s ago and was busiest by faults; 75 is live and quieter.
        let p = f.model.processes.get_mut(&1200).expect("fixture");
        p.exited_at_ns = Some(100 * S);
        p.faults = 50_000_000;
        // A shell's `cat`: exited 40 s ago, never held memory.
        f.model.set_identity(88, "cat", "cat /etc/hostname", 1);
        let c = f.model.processes.get_mut(&88).expect("just named");
        c.faults = 90;
        c.exited_at_ns = Some(63 * S);
        let scene = f.scene();
        let rows = process_rows(&scene, &App::default());
        let pids: Vec<u32> = rows.iter().map(|r| r.pid).collect();
        assert_eq!(pids.last(), Some(&1200), "exited at the end whatever its faults: {pids:?}");
        assert_eq!(live_count(&rows), pids.len() - 1);
        assert!(!pids.contains(&88), "an exited process that never held memory leaves after its grace");
        // Within its grace it is still there (its final figures can be read).
        let mut f = Fixture::training();
        f.model.set_identity(88, "cat", "cat /etc/hostname", 1);
        let c = f.model.processes.get_mut(&88).expect("just named");
        c.faults = 90;
        c.exited_at_ns = Some(100 * S);
        let scene = f.scene();
        let rows = process_rows(&scene, &App::default());
        assert_eq!(rows.last().map(|r| r.pid), Some(88));
    }

    #[test]
    fn departed_processes_are_listed_sorted_and_filtered_like_the_others() {
        let f = Fixture::training().with_departed();
        let scene = f.scene();
        let app = App { sort: SortKey::Pid, descending: false, ..App::default() };
        let pids = |app: &App| process_rows(&scene, app).iter().map(|r| r.pid).collect::<Vec<_>>();
        assert_eq!(pids(&app), vec![75, 1200, 4242, 4243, DEPARTED_PID]);
        let gone = process_rows(&scene, &app).into_iter().find(|r| r.pid == DEPARTED_PID).expect("departed row");
        assert_eq!((gone.exited_at_ns, gone.faults, gone.faults_per_s), (Some(DEPARTED_EXIT_NS), 7_000, 0.0));
        assert_eq!(pids(&App { filter: "exited".into(), ..app.clone() }), vec![DEPARTED_PID]);
        assert_eq!(pids(&App { filter: "loader".into(), ..app.clone() }), vec![DEPARTED_PID]);
        assert!(!pids(&App { training_only: true, ..app.clone() }).contains(&DEPARTED_PID));
    }

    #[test]
    fn children_of_a_rank_are_listed_under_it_whatever_the_sort() {
        let mut f = Fixture::training();
        for (pid, faults) in [(5001, 9_000_000), (5002, 1)] {
            f.model.set_identity(pid, "pt_data_worker", "python3 train.py", 4242);
            let p = f.model.processes.get_mut(&pid).expect("just set");
            p.faults = faults;
            p.fault_rate = faults as f64;
            p.rank_pid = Some(4242);
            p.role = Some(crate::model::job::TrainingRole::DataWorker);
            p.rank.rank = Some(0);
        }
        let scene = f.scene();
        let rows = process_rows(&scene, &App::default());
        let pids: Vec<u32> = rows.iter().map(|r| r.pid).collect();
        assert_eq!(pids, vec![4242, 5001, 5002, 4243, 1200, 75], "the busiest worker stays under its rank");
        assert_eq!(rows[1].label(), "└ pt_data_worker r0");
        // Filtered away from its rank, a child is listed on its own.
        let app = App { filter: "pt_data".into(), ..App::default() };
        let alone: Vec<u32> = process_rows(&scene, &app).iter().map(|r| r.pid).collect();
        assert_eq!(alone, vec![5001, 5002]);
    }

    #[test]
    fn an_empty_model_gives_no_rows() {
        let f = Fixture::empty();
        assert!(process_rows(&f.scene(), &App::default()).is_empty());
    }
}
