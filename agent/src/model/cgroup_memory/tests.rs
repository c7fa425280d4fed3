use super::*;

/// The shape of a 6.12 guest's `memory.numa_stat` (two nodes; most lines cut).
const NUMA_STAT: &str = "anon N0=33554432 N1=4096\nfile N0=8192 N1=0\nkernel_stack N0=16384 N1=0\nshmem N0=0 N1=0\nfile_mapped N0=4096 N1=0\n";

const MEMORY_STAT: &str = "anon 33558528\nfile 8192\npgscan 0\npgpromote_success 7\npgdemote_kswapd 11\npgdemote_direct 0\npgdemote_khugepaged 0\nnuma_pages_migrated 7\nnuma_pte_updates 120\nnuma_hint_faults 40\npgactivate 2\n";

/// A 6.1 kernel's: no promotion or demotion counters.
const MEMORY_STAT_6_1: &str = "anon 4096\nfile 0\nnuma_pages_migrated 0\nnuma_pte_updates 0\nnuma_hint_faults 0\n";

#[test]
fn numa_stat_gives_anon_and_file_by_node() {
    let b = parse_numa_stat(NUMA_STAT).expect("a 6.12 numa_stat parses");
    assert_eq!(b[&0], NodeBytes { anon: 33554432, file: 8192 });
    assert_eq!(b[&1], NodeBytes { anon: 4096, file: 0 });
    assert_eq!(b[&0].total(), 33562624);
    assert_eq!(b.len(), 2);
}

#[test]
fn numa_stat_with_gaps_in_node_ids() {
    let b = parse_numa_stat("anon N0=1 N3=2\nfile N0=5 N3=6\n").expect("gaps in node ids parse");
    assert_eq!(b.keys().copied().collect::<Vec<_>>(), vec![0, 3]);
    assert_eq!(b[&3], NodeBytes { anon: 2, file: 6 });
}

#[test]
fn numa_stat_odd_content_is_a_problem_not_a_panic() {
    for (text, says) in [
        ("", "no `anon` or `file` line"),
        ("garbage\x00\u{fffd}", "no `anon` or `file` line"),
        ("anon N0=12x\n", "`N0=12x`"),
        ("anon 0=12\n", "`0=12`"),
        ("file N0=-1\n", "`N0=-1`"),
        ("anon Nx=1\n", "`Nx=1`"),
        ("anon N0=99999999999999999999999\n", "N0=9999"),
    ] {
        let e = parse_numa_stat(text).err().unwrap_or_else(|| panic!("{text:?} parsed"));
        assert!(e.contains(says), "{text:?}: {e}");
    }
    // An `anon` line alone (file missing) still gives its bytes.
    assert_eq!(
        parse_numa_stat("anon N0=10\n").expect("an anon line alone parses")[&0],
        NodeBytes { anon: 10, file: 0 }
    );
}

#[test]
fn memory_stat_tiering_counters() {
    let s = parse_memory_stat(MEMORY_STAT);
    assert_eq!(s.values["pgpromote_success"], 7);
    assert_eq!(s.values["pgdemote_kswapd"], 11);
    assert_eq!(s.values["numa_hint_faults"], 40);
    assert_eq!(s.values["numa_pte_updates"], 120);
    assert_eq!(s.values.len(), 7);
    assert!(s.missing.is_empty());
    assert!(s.problems.is_empty());
}

#[test]
fn memory_stat_of_an_older_kernel_names_the_missing_counters() {
    let s = parse_memory_stat(MEMORY_STAT_6_1);
    assert_eq!(s.missing, vec!["pgpromote_success", "pgdemote_kswapd", "pgdemote_direct", "pgdemote_khugepaged"]);
    assert_eq!(s.values["numa_pages_migrated"], 0);
    assert_eq!(s.values.len(), 3);
}

#[test]
fn memory_stat_garbage_values_are_problems() {
    let s = parse_memory_stat("pgpromote_success lots\npgdemote_kswapd 5 6\npgdemote_direct\nnuma_hint_faults 3\n");
    assert_eq!(s.values.len(), 1);
    assert_eq!(s.values["numa_hint_faults"], 3);
    assert_eq!(s.problems.len(), 3, "{:?}", s.problems);
    assert!(s.problems[0].contains("pgpromote_success lots"));
    // Present but unreadable is not "not on this kernel".
    assert!(!s.missing.contains(&"pgpromote_success"));
    assert!(s.missing.contains(&"numa_pte_updates"));
}

const PATH: &str = "/kubepods.slice/kubepods-podaaaaaaaa_bbbb_cccc_dddd_eeeeeeeeeeee.slice/cri-containerd-0000.scope";

fn pod() -> ContainerIdentity {
    ContainerIdentity {
        pod_uid: Some("aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee".into()),
        pod_name: Some("trainer-0".into()),
        pod_namespace: Some("ml".into()),
        name: Some("worker".into()),
        ..Default::default()
    }
}

fn reading(at_ns: u64, files: Vec<(&str, FileRead, FileRead)>) -> CgroupReading {
    CgroupReading {
        at_ns,
        hierarchy: Hierarchy::Unified,
        cgroups: files
            .into_iter()
            .map(|(p, n, m)| CgroupFiles { path: p.into(), identity: pod(), numa_stat: n, memory_stat: m })
            .collect(),
        over_limit: 0,
    }
}

fn stat(promoted: u64, kswapd: u64) -> FileRead {
    FileRead::Text(format!(
        "pgpromote_success {promoted}\npgdemote_kswapd {kswapd}\npgdemote_direct 0\npgdemote_khugepaged 0\nnuma_pages_migrated {promoted}\nnuma_hint_faults 9\nnuma_pte_updates 9\n"
    ))
}

fn tier(n: u32) -> String {
    if n == 0 {
        "dram".into()
    } else {
        "cxl".into()
    }
}

#[test]
fn deltas_since_the_first_read_and_bytes_by_tier() {
    let mut m = CgroupTiering::default();
    m.apply(reading(1_000_000_000, vec![(PATH, FileRead::Text(NUMA_STAT.into()), stat(100, 50))]));
    m.apply(reading(3_000_000_000, vec![(PATH, FileRead::Text(NUMA_STAT.into()), stat(130, 52))]));
    let v = m.view(tier);
    assert_eq!(v.cgroups.len(), 1);
    let c = &v.cgroups[0];
    assert_eq!(c.pod_name.as_deref(), Some("trainer-0"));
    assert_eq!(c.pod_namespace.as_deref(), Some("ml"));
    assert_eq!(c.container_name.as_deref(), Some("worker"));
    assert_eq!(c.counters_since_first_read["pgpromote_success"], 30);
    assert_eq!(c.counters_since_first_read["pgdemote_kswapd"], 2);
    assert_eq!(c.counters_since_first_read["numa_hint_faults"], 0);
    assert_eq!(c.counters_now["pgpromote_success"], 130);
    assert_eq!(c.bytes_by_tier["dram"], 33562624);
    assert_eq!(c.bytes_by_tier["cxl"], 4096);
    assert_eq!(c.bytes_by_node[&1].total, 4096);
    assert!((c.followed_s - 2.0).abs() < 1e-9);
    assert!(!c.gone);
    assert!(c.not_on_this_kernel.is_empty());
    assert_eq!(v.hierarchy, "unified");
    assert_eq!(v.unavailable, None);
}

#[test]
fn a_counter_that_goes_back_is_a_new_cgroup_under_the_same_path() {
    let mut m = CgroupTiering::default();
    let numa = || FileRead::Text(NUMA_STAT.into());
    m.apply(reading(1, vec![(PATH, numa(), stat(100, 0))]));
    m.apply(reading(2, vec![(PATH, numa(), stat(110, 0))]));
    m.apply(reading(3, vec![(PATH, numa(), stat(4, 0))]));
    assert_eq!(m.view(tier).cgroups[0].counters_since_first_read["pgpromote_success"], 14);
}

#[test]
fn a_gone_cgroup_keeps_its_last_values_until_no_process_names_it() {
    let mut m = CgroupTiering::default();
    m.apply(reading(1, vec![(PATH, FileRead::Text(NUMA_STAT.into()), stat(1, 0))]));
    m.apply(reading(2, vec![(PATH, FileRead::Text(NUMA_STAT.into()), stat(5, 0))]));
    m.apply(reading(3, vec![(PATH, FileRead::Gone, FileRead::Gone)]));
    let c = &m.view(tier).cgroups[0];
    assert!(c.gone);
    assert_eq!(c.counters_since_first_read["pgpromote_success"], 4);
    assert_eq!(c.bytes_by_node[&0].anon, 33554432);
    // Its processes were pruned: the cgroup is no longer listed.
    m.apply(reading(4, vec![]));
    assert!(m.view(tier).cgroups.is_empty());
}

#[test]
fn missing_counters_and_unreadable_files_are_said_per_cgroup() {
    let mut m = CgroupTiering::default();
    let other = "/system.slice/docker-1111.scope";
    m.apply(reading(
        1,
        vec![
            (PATH, FileRead::Text("anon N0=oops\n".into()), FileRead::Text(MEMORY_STAT_6_1.into())),
            (
                other,
                FileRead::Failed("memory.numa_stat: permission denied".into()),
                FileRead::Text("\u{0}\u{1}".into()),
            ),
        ],
    ));
    let v = m.view(tier);
    let by_path = |p: &str| v.cgroups.iter().find(|c| c.path == p).expect("the cgroup is listed");
    let a = by_path(PATH);
    assert_eq!(a.not_on_this_kernel.len(), 4);
    assert!(a.not_on_this_kernel.contains(&"pgpromote_success".to_string()));
    assert!(a.problems[0].contains("N0=oops"), "{:?}", a.problems);
    assert!(a.bytes_by_node.is_empty());
    assert_eq!(a.counters_now["numa_hint_faults"], 0);
    let b = by_path(other);
    assert_eq!(b.problems, vec!["memory.numa_stat: permission denied".to_string()]);
    assert_eq!(b.not_on_this_kernel.len(), 7);
    assert!(b.counters_now.is_empty());
}

#[test]
fn a_v1_node_says_why_once() {
    let mut m = CgroupTiering::default();
    m.apply(CgroupReading {
        at_ns: 1,
        hierarchy: Hierarchy::Unavailable("cgroup v1 only at /sys/fs/cgroup".into()),
        cgroups: vec![],
        over_limit: 0,
    });
    let v = m.view(tier);
    assert_eq!(v.unavailable.as_deref(), Some("cgroup v1 only at /sys/fs/cgroup"));
    let json = serde_json::to_value(&v).expect("the view serialises");
    assert_eq!(json["unavailable"], "cgroup v1 only at /sys/fs/cgroup");
    assert_eq!(json["hierarchy"], "unavailable");
    assert!(json["cgroups"].as_array().is_some_and(|a| a.is_empty()));
}
