//! The model's unit tests: readings, events, pruning, jobs, and processes whose exit or pid
//! the collector found late.
use super::*;

fn reading(at_ns: u64, faults: &[(u32, u64)], allocs: &[((u32, u32), u64)]) -> CounterReading {
    CounterReading::of(at_ns, faults, allocs)
}

#[test]
fn readings_replace_cumulative_values_and_give_rates() {
    let mut m = Model::default();
    m.apply_reading(&reading(1_000_000_000, &[(7, 100)], &[((7, 0), 50), ((7, 1), 10), ((8, 1), 5)]));
    m.apply_reading(&reading(3_000_000_000, &[(7, 500)], &[((7, 0), 80), ((7, 1), 10), ((8, 1), 5)]));
    let p = &m.processes[&7];
    assert_eq!(p.faults, 500);
    assert_eq!(p.fault_rate, 200.0);
    assert_eq!(p.alloc_pages_by_node, BTreeMap::from([(0, 80), (1, 10)]));
    assert_eq!(m.alloc_pages_by_node, BTreeMap::from([(0, 80), (1, 15)]));
}

#[test]
fn a_lagging_fault_reading_never_goes_backwards() {
    let mut m = Model::default();
    m.apply_reading(&reading(1, &[(7, 100)], &[]));
    m.apply_reading(&reading(2, &[(7, 97)], &[]));
    assert_eq!(m.processes[&7].faults, 100);
    assert_eq!(m.processes[&7].fault_rate, 0.0);
}

#[test]
fn migrations_are_named_and_summed_over_modes() {
    let mut m = Model::default();
    let t = |s, f| MigrationTotals { calls: 1, succeeded: s, failed: f, ..Default::default() };
    let mut r = reading(1, &[], &[]);
    r.migrations.insert((50, 8, 0), t(100, 1));
    r.migrations.insert((50, 8, 2), t(20, 0));
    r.migrations.insert((9, 0, 0), t(3, 4));
    m.apply_reading(&r);
    assert_eq!(m.migrations["demotion"].succeeded, 120);
    assert_eq!(m.migrations["demotion"].calls, 2);
    assert_eq!(m.processes[&9].migrations["compaction"].failed, 4);
}

#[test]
fn pruned_processes_keep_totals_and_their_final_record_for_open_windows() {
    let t = |s| MigrationTotals { calls: 1, succeeded: s, ..Default::default() };
    let mut m = Model::default();
    let window = m.departed.open_window(0);
    let mut r = reading(1, &[(5, 10), (6, 1)], &[((5, 1), 100), ((6, 1), 7)]);
    r.migrations.insert((5, 8, 0), t(40));
    m.apply_reading(&r);
    m.apply_event(Event::Exit { tgid: 5, comm: "w".into(), ts_ns: 2 });
    assert!(m.prune_exited(3, 10).is_empty(), "still within the grace period");
    assert_eq!(m.prune_exited(20, 10), vec![5]);
    // The kernel entries of 5 are deleted: the next reading no longer carries it.
    m.apply_reading(&reading(30, &[(6, 2)], &[((6, 1), 9)]));
    assert!(!m.processes.contains_key(&5));
    assert_eq!(m.alloc_pages_by_node[&1], 109, "retired 100 + live 9");
    assert_eq!(m.migrations["demotion"].succeeded, 40);
    assert_eq!(m.retired_faults, 10);
    let kept: Vec<_> = m.processes_in_window().map(|p| (p.tgid, p.faults, p.exited_at_ns)).collect();
    assert_eq!(kept, vec![(6, 2, None), (5, 10, Some(2))], "the window still lists 5 with its totals");
    m.departed.close_window(window);
    assert_eq!(m.processes_in_window().count(), 1);
    // The pid is reused by a process that never execs: it counts from zero.
    m.apply_reading(&reading(50, &[(5, 4)], &[]));
    assert_eq!(m.processes[&5].faults, 4);
}

#[test]
fn a_pending_slot_holding_an_exited_process_delays_its_pruning() {
    let mut m = Model::default();
    let mut r = reading(1, &[(5, 10)], &[]);
    r.held_by_slots.insert(5);
    m.apply_reading(&r);
    m.apply_event(Event::Exit { tgid: 5, comm: "w".into(), ts_ns: 2 });
    assert!(m.prune_exited(100, 10).is_empty(), "a flush could still recreate its entry");
    m.apply_reading(&reading(101, &[(5, 12)], &[]));
    assert_eq!(m.prune_exited(102, 10), vec![5]);
    assert_eq!(m.retired_faults, 12, "the flushed count is in the final total");
}

#[test]
fn a_child_that_exits_before_any_reading_is_created_exited() {
    let mut m = Model::default();
    m.apply_event(Event::Exit { tgid: 77, comm: "sh".into(), ts_ns: 5 });
    assert!(!m.processes.contains_key(&77), "an exit alone does not create a process");
    m.apply_reading(&reading(10, &[(77, 3)], &[((77, 0), 8)]));
    let p = &m.processes[&77];
    assert_eq!((p.exited_at_ns, p.comm.as_str(), p.faults), (Some(5), "sh", 3));
    assert_eq!(m.prune_exited(20, 10), vec![77], "so it is pruned like any other");
    assert!(m.processes.is_empty());
    // An exit whose counters never show is forgotten after the grace period.
    m.apply_event(Event::Exit { tgid: 78, comm: "true".into(), ts_ns: 30 });
    m.prune_exited(50, 10);
    m.apply_reading(&reading(60, &[(78, 1)], &[]));
    assert_eq!(m.processes[&78].exited_at_ns, None, "a later process with that pid is alive");
}

/// A process that ran between two windows of the sampled page path has only its exited
/// threads' counts in the kernel: it gets a record, exits with its exit event and its entry is
/// freed (10,000 such children were left in the map before).
#[test]
fn a_process_seen_only_in_its_exit_counts_is_created_and_its_entries_freed() {
    let mut m = Model::default();
    m.apply_event(Event::Exit { tgid: 77, comm: "sh".into(), ts_ns: 5 });
    let mut r = reading(10, &[], &[]);
    r.exited_faults.insert(77, faults::KernelFaults { minor: 40, major: 1 });
    m.apply_reading(&r);
    let p = &m.processes[&77];
    assert_eq!((p.exited_at_ns, p.comm.as_str()), (Some(5), "sh"));
    assert_eq!(m.entries_to_free(), vec![77]);
}

#[test]
fn allocation_counts_never_go_backwards_on_a_lagging_reading() {
    let mut m = Model::default();
    m.apply_reading(&reading(1, &[], &[((7, 0), 100), ((8, 0), 10)]));
    // The slot of 7 flushed between the map read and the slot read: 7 reads low once.
    m.apply_reading(&reading(2, &[], &[((7, 0), 96), ((8, 0), 11)]));
    assert_eq!(m.processes[&7].alloc_pages_by_node[&0], 100);
    assert_eq!(m.alloc_pages_by_node[&0], 111);
}

#[test]
fn workers_join_their_launchers_job() {
    use job::{Rank, TrainingRole};
    let mut m = Model::default();
    m.set_identity(100, "torchrun", "torchrun --nproc-per-node 2 t.py", 1);
    m.set_identity(101, "python3", "python3 t.py", 100);
    m.set_identity(102, "python3", "python3 t.py", 100);
    m.set_identity(200, "python3", "python3 solo.py", 1);
    m.set_identity(300, "bash", "bash", 1);
    m.set_training(100, Some(TrainingRole::Launcher), Rank::default(), None);
    for (pid, r) in [(101, 0), (102, 1)] {
        m.set_training(
            pid,
            Some(TrainingRole::Worker),
            Rank { rank: Some(r), local_rank: Some(r), world_size: Some(2) },
            None,
        );
    }
    m.set_training(200, Some(TrainingRole::Worker), Rank::default(), None);
    m.assign_jobs();
    assert_eq!(m.processes[&101].job.as_deref(), Some("torchrun-100"));
    assert_eq!(m.processes[&102].job.as_deref(), Some("torchrun-100"));
    assert_eq!(m.processes[&100].job.as_deref(), Some("torchrun-100"));
    assert_eq!(m.processes[&200].job.as_deref(), Some("python3-200"));
    assert_eq!(m.processes[&300].job, None);
    m.set_training(101, Some(TrainingRole::Worker), Rank::default(), Some("llama".into()));
    m.assign_jobs();
    assert_eq!(m.processes[&102].job.as_deref(), Some("llama"));
}

#[test]
fn data_loader_workers_and_helpers_serve_their_rank() {
    use job::{Rank, TrainingRole};
    let mut m = Model::default();
    let r = |n| Rank { rank: Some(n), local_rank: Some(n), world_size: Some(2) };
    // torchrun 100 -> ranks 101 (r0), 102 (r1); 101 -> 4 DataLoader workers (the torchrun job
    // of the GPU machine), one of which forked a helper; 102 -> a compile worker.
    m.set_identity(100, "torchrun", "torchrun --nproc-per-node 2 t.py", 1);
    m.set_training(100, Some(TrainingRole::Launcher), Rank::default(), None);
    for (pid, comm, ppid, rank) in [
        (101, "python3", 100, r(0)),
        (102, "python3", 100, r(1)),
        (110, "pt_data_worker", 101, r(0)),
        (111, "pt_data_worker", 101, r(0)),
        (112, "pt_data_worker", 101, r(0)),
        (113, "pt_data_worker", 101, r(0)),
        (120, "python3", 113, r(0)),
        (130, "python3", 102, r(1)),
    ] {
        m.set_identity(pid, comm, "python3 t.py", ppid);
        m.set_training(pid, Some(TrainingRole::Worker), rank, None);
    }
    // A lone trainer under a wrapper script that --match also took for a worker.
    m.set_identity(200, "bash", "bash train.sh", 1);
    m.set_training(200, Some(TrainingRole::Worker), Rank::default(), None);
    m.set_identity(201, "python3", "python3 train.py", 200);
    m.set_training(201, Some(TrainingRole::Worker), Rank::default(), None);
    m.set_identity(202, "pt_data_worker", "python3 train.py", 201);
    m.set_training(202, Some(TrainingRole::Worker), Rank::default(), None);
    m.assign_jobs();
    let of = |m: &Model, pid: u32| (m.processes[&pid].role, m.processes[&pid].rank_pid);
    assert_eq!(of(&m, 101), (Some(TrainingRole::Worker), None));
    assert_eq!(of(&m, 102), (Some(TrainingRole::Worker), None));
    for pid in 110..=113 {
        assert_eq!(of(&m, pid), (Some(TrainingRole::DataWorker), Some(101)), "pid {pid}");
        assert_eq!(m.processes[&pid].job.as_deref(), Some("torchrun-100"));
    }
    assert_eq!(of(&m, 120), (Some(TrainingRole::RankChild), Some(101)), "a child of a data worker serves rank 0");
    assert_eq!(of(&m, 130), (Some(TrainingRole::RankChild), Some(102)));
    assert_eq!(of(&m, 201), (Some(TrainingRole::Worker), None), "a wrapper's trainer is a rank");
    assert_eq!(of(&m, 202), (Some(TrainingRole::DataWorker), Some(201)));
    // Classification is kept: reassigning gives the same answer.
    m.assign_jobs();
    assert_eq!(of(&m, 113), (Some(TrainingRole::DataWorker), Some(101)));
}

#[test]
fn alloc_rates_follow_readings() {
    let mut m = Model::default();
    m.apply_reading(&reading(1_000_000_000, &[], &[((7, 2), 100)]));
    m.apply_reading(&reading(2_000_000_000, &[], &[((7, 2), 612)]));
    assert_eq!(m.processes[&7].alloc_rate_by_node[&2], 512.0);
}

#[test]
fn site_samples_add_up_per_site_and_keep_their_names() {
    let mut m = Model::default();
    m.set_identity(7, "train", "", 1);
    let mut t = site::SiteTally::default();
    for pages in [40, 50] {
        t.add(7, 55, pages);
    }
    t.add(7, 56, 1);
    m.apply_sites(t);
    let frames = vec![site::SiteFrame::unnamed("libcuda.so.1", 0x1a2b3c)];
    m.apply_sites(site::SiteTally { named: vec![(7, 55, frames.clone())], ..Default::default() });
    m.apply_sites(site::SiteTally {
        samples: [((7, 55), site::SiteTotals { pages: 10, samples: 1 })].into(),
        ..Default::default()
    });
    let p = &m.processes[&7];
    assert_eq!(p.cxl_sites[&55], site::SiteTotals { pages: 100, samples: 3 });
    assert_eq!(p.cxl_sites[&56].pages, 1);
    assert_eq!(p.site_frames[&55], frames);
    assert_eq!(m.site_samples_received, 4);
    assert_eq!(m.events_seen, 0, "samples are not events");
    // A pruned process is not brought back by a late sample or name.
    m.apply_event(Event::Exit { tgid: 7, comm: String::new(), ts_ns: 1 });
    assert_eq!(m.prune_exited(100, 10), vec![7]);
    let mut t = site::SiteTally::default();
    t.add(7, 55, 3);
    t.named.push((7, 55, frames));
    m.apply_sites(t);
    assert!(!m.processes.contains_key(&7));
    assert_eq!(m.site_samples_received, 5);
}

#[test]
fn events_update_identity_and_history() {
    let mut m = Model::default();
    m.apply_event(Event::Exec { tgid: 5, comm: "python3".into(), ts_ns: 1 });
    for i in 0..(process::POLICY_HISTORY as u64 + 3) {
        m.apply_event(Event::Policy(event::PolicyDecision {
            tgid: 5,
            tid: 5,
            ts_ns: i,
            syscall: "mbind",
            mode: Some("MPOL_BIND".into()),
            flags: vec![],
            nodes: vec![1],
            start: None,
            len: None,
            target_pid: None,
        }));
    }
    m.apply_event(Event::Exit { tgid: 5, comm: "ignored".into(), ts_ns: 99 });
    m.apply_event(Event::Exit { tgid: 6, comm: "sh".into(), ts_ns: 99 });
    let p = &m.processes[&5];
    assert_eq!(p.comm, "python3", "the exec's comm wins over the exit's");
    assert_eq!(p.policy_events.len(), process::POLICY_HISTORY);
    assert_eq!(p.policy_events.front().map(|d| d.ts_ns), Some(3));
    assert_eq!(p.policy_calls, process::POLICY_HISTORY as u64 + 3, "every call is counted, not only the kept ones");
    assert_eq!(p.exited_at_ns, Some(99));
    assert!(!m.processes.contains_key(&6), "an exit alone does not create a process");
    assert_eq!(m.events_seen, 1 + process::POLICY_HISTORY as u64 + 3 + 2);
}

fn look(at_ns: u64, pids: &[u32], confirmed: bool) -> liveness::ProcLook {
    liveness::ProcLook { at_ns, pids: pids.iter().copied().collect(), confirmed, known: None }
}

#[test]
fn an_exit_no_event_reported_is_found_dated_and_its_entries_freed() {
    let mut m = Model::default();
    m.apply_reading(&reading(10, &[(5, 10), (6, 3)], &[((5, 0), 7)]));
    assert!(m.judge_liveness(&look(20, &[6], false), 0).is_empty());
    assert_eq!(m.processes[&5].exited_at_ns, None, "one miss is not an exit yet");
    assert!(m.entries_to_free().is_empty());
    assert!(m.judge_liveness(&look(30, &[6], false), 0).is_empty(), "nobody took its pid");
    assert_eq!(m.processes[&5].exited_at_ns, Some(20), "dated when first found gone");
    assert_eq!(m.exits_found_late, 1);
    assert_eq!(m.entries_to_free(), vec![5]);
    m.entries_freed(&[5]);
    assert!(m.entries_to_free().is_empty());
    assert_eq!(m.exited_holding_entries(), 0);
    // An exit event that comes after all does not count it again, nor move its time.
    m.apply_event(Event::Exit { tgid: 5, comm: String::new(), ts_ns: 25 });
    assert_eq!((m.processes[&5].exited_at_ns, m.exits_found_late), (Some(20), 1));
    // The agent itself and the idle pseudo-process are never judged.
    m.apply_reading(&reading(40, &[(0, 1), (99, 1)], &[]));
    for at in [50, 60] {
        m.judge_liveness(&look(at, &[6], true), 99);
    }
    assert!(m.processes[&0].exited_at_ns.is_none() && m.processes[&99].exited_at_ns.is_none());
}

#[test]
fn a_pid_reused_after_the_entries_were_freed_is_a_new_process_with_its_own_totals() {
    let t = |s| MigrationTotals { calls: 1, succeeded: s, ..Default::default() };
    let mut m = Model::default();
    let w = m.departed.open_window(0);
    let mut r = reading(10, &[(5, 100)], &[((5, 1), 40)]);
    r.migrations.insert((5, 8, 0), t(9));
    m.apply_reading(&r);
    m.set_origin(5, Default::default(), 1000);
    m.apply_event(Event::Exit { tgid: 5, comm: "old".into(), ts_ns: 12 });
    assert_eq!(m.entries_to_free(), vec![5]);
    m.entries_freed(&[5]);
    // A reading without its entries keeps every total, the migrations included.
    m.apply_reading(&reading(20, &[], &[]));
    assert_eq!((m.processes[&5].faults, m.migrations["demotion"].succeeded), (100, 9));
    assert_eq!(m.processes[&5].migrations["demotion"].succeeded, 9);
    // Counts under pid 5 again: another process.
    m.apply_reading(&reading(30, &[(5, 4)], &[((5, 1), 2)]));
    let new = &m.processes[&5];
    assert_eq!((new.faults, new.exited_at_ns, new.start_time), (4, None, 0));
    assert_eq!(new.alloc_pages_by_node[&1], 2, "not hidden under the old process's 40");
    let old: Vec<_> = m.departed.iter().map(|p| (p.tgid, p.faults, p.exited_at_ns, p.start_time)).collect();
    assert_eq!(old, vec![(5, 100, Some(12), 1000)], "the old one listed exited with its own totals");
    assert_eq!((m.pids_reused, std::mem::take(&mut m.reused_pending)), (1, vec![5]));
    assert_eq!(m.alloc_pages_by_node[&1], 42, "the node's total adds both");
    assert_eq!(m.migrations["demotion"].succeeded, 9);
    m.departed.close_window(w);
}

#[test]
fn an_exec_under_an_exited_pid_is_a_new_process_not_the_dead_one_alive_again() {
    let mut m = Model::default();
    let _w = m.departed.open_window(0);
    m.apply_reading(&reading(10, &[(5, 100)], &[]));
    m.apply_event(Event::Exit { tgid: 5, comm: "old".into(), ts_ns: 12 });
    m.apply_event(Event::Exec { tgid: 5, comm: "new".into(), ts_ns: 14 });
    // The entries still hold the old one's last counts: that reading is its.
    assert_eq!(m.processes[&5].exited_at_ns, Some(12), "not alive again");
    m.apply_reading(&reading(20, &[(5, 130)], &[]));
    assert_eq!(m.entries_to_free(), vec![5]);
    m.entries_freed(&[5]);
    let p = &m.processes[&5];
    assert_eq!((p.comm.as_str(), p.exited_at_ns, p.faults), ("new", None, 0));
    assert_eq!(m.departed.iter().map(|p| (p.faults, p.exited_at_ns)).collect::<Vec<_>>(), vec![(130, Some(12))]);
    // Entries freed already: an exec under the pid is a new process at once.
    m.apply_event(Event::Exit { tgid: 5, comm: String::new(), ts_ns: 30 });
    m.entries_freed(&m.entries_to_free());
    m.apply_event(Event::Exec { tgid: 5, comm: "third".into(), ts_ns: 40 });
    assert_eq!((m.processes[&5].comm.as_str(), m.processes[&5].exited_at_ns, m.departed.len()), ("third", None, 2));
}

#[test]
fn a_pid_taken_while_its_exit_was_lost_ends_the_old_record_at_once() {
    let mut m = Model::default();
    let _w = m.departed.open_window(0);
    m.apply_reading(&reading(10, &[(5, 100)], &[]));
    assert!(m.judge_liveness(&look(20, &[], false), 0).is_empty());
    // Listed again: the pid is another process's; the old one exited when first missed.
    assert_eq!(m.judge_liveness(&look(30, &[5], false), 0), vec![5]);
    assert!(!m.processes.contains_key(&5));
    assert_eq!(m.departed.iter().map(|p| p.exited_at_ns).collect::<Vec<_>>(), vec![Some(20)]);
    assert_eq!((m.exits_found_late, m.pids_reused), (1, 1));
    // Its entries mix it with the process that took the pid: no record takes them until freed.
    assert_eq!(m.entries_to_free(), vec![5]);
    m.apply_reading(&reading(40, &[(5, 150)], &[]));
    assert!(!m.processes.contains_key(&5), "the mixed count went to nobody");
    m.entries_freed(&[5]);
    m.apply_reading(&reading(50, &[(5, 3)], &[]));
    assert_eq!(m.processes[&5].faults, 3, "the new process counts from its fresh entries");
    // The start time told it apart (the collector read another start under the pid).
    assert!(m.exit_found_late(5, 60, true));
    assert_eq!((m.exits_found_late, m.pids_reused, m.departed.len()), (2, 2, 2));
    assert_eq!(m.departed.iter().last().map(|p| (p.faults, p.exited_at_ns)), Some((3, Some(60))));
}

#[test]
fn an_exec_after_the_exit_of_a_process_never_seen_keeps_the_dead_ones_counts_apart() {
    let mut m = Model::default();
    let _w = m.departed.open_window(0);
    m.apply_event(Event::Exit { tgid: 8, comm: "old".into(), ts_ns: 5 });
    m.apply_event(Event::Exec { tgid: 8, comm: "new".into(), ts_ns: 6 });
    m.apply_reading(&reading(10, &[(8, 500)], &[]));
    assert_eq!((m.processes[&8].comm.as_str(), m.processes[&8].faults), ("old", 500));
    m.entries_freed(&m.entries_to_free());
    let p = &m.processes[&8];
    assert_eq!((p.comm.as_str(), p.faults, p.exited_at_ns), ("new", 0, None));
    assert_eq!(m.departed.iter().map(|p| (p.comm.as_str(), p.faults)).collect::<Vec<_>>(), vec![("old", 500)]);
}
