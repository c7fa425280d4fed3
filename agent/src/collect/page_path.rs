//! The page path: how `mm_page_alloc` / `mm_page_free` are counted. tp_btf (the default) is about
//! 100 ns cheaper per event than a classic tracepoint, but it sees a `struct page` pointer, not a
//! pfn. The pfn is `(page - vmemmap base) >> log2(sizeof(struct page))`; the base is found at
//! start-up by attaching a tp_btf and a classic program to the same allocations for a moment and
//! letting every event vote for `page / sizeof(struct page) - pfn` (taken relative to a map
//! slot's address, which the verifier needs: `pages.rs`). When that fails (no BTF, no
//! tracefs, a `struct page` whose size is no power of two, votes that disagree) the classic
//! programs count instead, and `check` says why.
use std::{collections::HashMap, path::PathBuf, time::Duration};

use aya::{
    maps::{Array, HashMap as BpfHashMap},
    programs::{tp_btf::BtfTracePointLink, BtfTracePoint, Program, TracePoint},
    Btf, Ebpf,
};
use tierscope_common::{
    maps::{PAGE_BASE_INDEX, PAGE_NODE_SHIFT_INDEX},
    names::{map, program},
};

use super::{
    attach::{attach, attach_with_link},
    page_cycle::Cycled,
    programs::{Hook, ProgramSpec},
};
use crate::model::agent::{Attach, ProgramStatus};

const ALLOC_FEATURE: &str = "page allocations per node";
const FREE_FEATURE: &str = "page frees per node";

/// The two ways each page event can be counted, in the order they are tried.
const BTF_PROGRAMS: [ProgramSpec; 2] = [
    ProgramSpec {
        name: program::MM_PAGE_ALLOC_BTF,
        hook: Hook::TpBtf { group: "kmem", name: "mm_page_alloc" },
        feature: ALLOC_FEATURE,
    },
    ProgramSpec {
        name: program::MM_PAGE_FREE_BTF,
        hook: Hook::TpBtf { group: "kmem", name: "mm_page_free" },
        feature: FREE_FEATURE,
    },
];
const CLASSIC_PROGRAMS: [ProgramSpec; 2] = [
    ProgramSpec {
        name: program::MM_PAGE_ALLOC,
        hook: Hook::Tracepoint { group: "kmem", name: "mm_page_alloc" },
        feature: ALLOC_FEATURE,
    },
    ProgramSpec {
        name: program::MM_PAGE_FREE,
        hook: Hook::Tracepoint { group: "kmem", name: "mm_page_free" },
        feature: FREE_FEATURE,
    },
];

/// Votes needed before the base is believed, and the share the winner must hold.
const MIN_VOTES: u64 = 64;
const MIN_SHARE: f64 = 0.9;
/// How long the calibration may take at most.
const CALIBRATION_ROUNDS: u32 = 20;

/// The log2 of `sizeof(struct page)`, when it is a power of two (the tp_btf path shifts).
pub fn struct_page_shift(size: u32) -> Result<u32, String> {
    if size.is_power_of_two() {
        Ok(size.trailing_zeros())
    } else {
        Err(format!("struct page is {size} bytes, not a power of two"))
    }
}

/// The vmemmap base the votes agree on: the most voted candidate, when there are enough votes
/// and nearly all of them name it.
pub fn elect_base(votes: &HashMap<u64, u64>) -> Result<u64, String> {
    let total: u64 = votes.values().sum();
    let Some((&base, &n)) = votes.iter().max_by_key(|(_, &n)| n) else {
        return Err("no page allocation was seen by both hooks".into());
    };
    if total < MIN_VOTES {
        return Err(format!("only {total} page allocations were seen by both hooks (need {MIN_VOTES})"));
    }
    if (n as f64) < MIN_SHARE * total as f64 {
        return Err(format!("the hooks disagree on the vmemmap base ({n} of {total} votes for the best candidate)"));
    }
    if base == 0 {
        return Err("the hooks agree on a vmemmap base of 0".into());
    }
    Ok(base)
}

/// Attaches the page programs: tp_btf with a calibrated base, or the classic ones. Returns the
/// status of `mm_page_alloc` and `mm_page_free` as `check` lists them (under those names,
/// whichever hook counts).
/// The object's program behind a status: the page events are listed under their classic
/// names whichever way they attached, so a tp_btf one is its `_btf` program.
pub fn object_program(status: &ProgramStatus) -> &'static str {
    BTF_PROGRAMS
        .iter()
        .zip(CLASSIC_PROGRAMS)
        .find(|(b, c)| c.name == status.name && status.hook == b.hook.describe())
        .map_or(status.name, |(b, _)| b.name)
}

/// With `sampled`, the tp_btf programs' links are handed back with their descriptors for the
/// duty cycle (`page_cycle.rs`); the classic fallback is never cycled.
pub fn attach_page_path(
    ebpf: &mut Ebpf,
    btf: Result<&Btf, &String>,
    tracefs: Result<&PathBuf, &String>,
    struct_shift: &Result<u32, String>,
    sampled: bool,
) -> (Vec<ProgramStatus>, Vec<Cycled>) {
    let why_not = match (btf, struct_shift) {
        (Err(e), _) => Err(format!("no kernel BTF: {e}")),
        (_, Err(e)) => Err(e.clone()),
        (Ok(btf), Ok(_)) => calibrate(ebpf, btf, tracefs).and_then(|base| write_base(ebpf, base)),
    };
    let fallback = match why_not {
        Ok(()) => {
            let mut cycled = vec![];
            let mut statuses = vec![];
            for spec in &BTF_PROGRAMS {
                let (status, link) = attach_with_link(ebpf, spec, btf, tracefs, sampled);
                if let Some(c) = link.and_then(|l| cycled_program(ebpf, spec.name, l)) {
                    cycled.push(c);
                }
                statuses.push(status);
            }
            if statuses.iter().all(|s| s.status == Attach::Attached) {
                let statuses = statuses
                    .into_iter()
                    .zip(CLASSIC_PROGRAMS)
                    .map(|(s, c)| ProgramStatus { name: c.name, ..s })
                    .collect();
                return (statuses, cycled);
            }
            drop(cycled);
            // One half attached would count the other twice once the classic one joins.
            for spec in BTF_PROGRAMS {
                unload(ebpf, spec.name);
            }
            let reasons: Vec<String> = statuses.into_iter().filter_map(|s| s.reason).collect();
            format!("tp_btf page programs did not attach: {}", reasons.join("; "))
        }
        Err(e) => e,
    };
    tracing::info!("page events through classic tracepoints: {fallback}");
    let statuses = CLASSIC_PROGRAMS
        .iter()
        .map(|spec| {
            let mut st = attach(ebpf, spec, btf, tracefs);
            if st.status == Attach::Attached {
                st.reason = Some(format!("classic tracepoint (about 100 ns dearer per event than tp_btf): {fallback}"));
            }
            st
        })
        .collect();
    (statuses, vec![])
}

/// A tp_btf program attached with its link in hand, ready for the duty cycle: its descriptor
/// cloned (`None`, the link dropped and so detached, when that fails).
pub fn cycled_program(ebpf: &Ebpf, name: &'static str, link: BtfTracePointLink) -> Option<Cycled> {
    let fd = ebpf.program(name)?.fd().ok()?.try_clone();
    match fd {
        Ok(fd) => Some(Cycled { name, fd, first_link: link }),
        Err(e) => {
            tracing::warn!("{name}: cloning its descriptor for the duty cycle: {e}; left detached");
            None
        }
    }
}

/// Attaches the calibration pair, makes some page allocations of its own, and elects the base.
fn calibrate(ebpf: &mut Ebpf, btf: &Btf, tracefs: Result<&PathBuf, &String>) -> Result<u64, String> {
    if let Err(e) = tracefs {
        return Err(format!("the start-up calibration needs the classic hook: {e}"));
    }
    let result = (|| -> Result<u64, String> {
        let prog = ebpf.program_mut(program::PAGE_BASE_BTF).ok_or("calibration program missing (build bug)")?;
        let p: &mut BtfTracePoint = prog.try_into().map_err(|e| format!("{e}"))?;
        p.load("mm_page_alloc", btf).map_err(|e| format!("loading the tp_btf calibration program: {e}"))?;
        p.attach().map_err(|e| format!("attaching tp_btf kmem:mm_page_alloc: {e}"))?;
        let prog = ebpf.program_mut(program::PAGE_BASE_TP).ok_or("calibration program missing (build bug)")?;
        let p: &mut TracePoint = prog.try_into().map_err(|e| format!("{e}"))?;
        p.load().map_err(|e| format!("loading the classic calibration program: {e}"))?;
        p.attach("kmem", "mm_page_alloc").map_err(|e| format!("attaching tracepoint kmem:mm_page_alloc: {e}"))?;
        let mut votes = HashMap::new();
        for _ in 0..CALIBRATION_ROUNDS {
            allocate_some_pages();
            votes = read_votes(ebpf)?;
            if votes.values().sum::<u64>() >= 4 * MIN_VOTES {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        elect_base(&votes)
    })();
    unload(ebpf, program::PAGE_BASE_BTF);
    unload(ebpf, program::PAGE_BASE_TP);
    result
}

fn unload(ebpf: &mut Ebpf, name: &str) {
    match ebpf.program_mut(name) {
        Some(Program::BtfTracePoint(p)) => drop(p.unload()),
        Some(Program::TracePoint(p)) => drop(p.unload()),
        _ => {}
    }
}

fn read_votes(ebpf: &Ebpf) -> Result<HashMap<u64, u64>, String> {
    let m = ebpf.map(map::PAGE_BASE_VOTES).ok_or("PAGE_BASE_VOTES missing (build bug)")?;
    let votes = BpfHashMap::<_, u64, u64>::try_from(m).map_err(|e| format!("{e}"))?;
    Ok(votes.iter().flatten().collect())
}

fn write_base(ebpf: &mut Ebpf, base: u64) -> Result<(), String> {
    let m = ebpf.map_mut(map::PAGE_BASE).ok_or("PAGE_BASE missing (build bug)")?;
    let mut arr = Array::<_, u64>::try_from(m).map_err(|e| format!("{e}"))?;
    arr.set(PAGE_BASE_INDEX, base, 0).map_err(|e| format!("writing the vmemmap base: {e}"))
}

/// Writes where `struct page`'s flags keep the node (0: not read), for pages whose memory block
/// the table does not hold yet (`kernel_config.rs`).
pub fn write_node_shift(ebpf: &mut Ebpf, shift: u32) -> Result<(), String> {
    let m = ebpf.map_mut(map::PAGE_BASE).ok_or("PAGE_BASE missing (build bug)")?;
    let mut arr = Array::<_, u64>::try_from(m).map_err(|e| format!("{e}"))?;
    arr.set(PAGE_NODE_SHIFT_INDEX, u64::from(shift), 0).map_err(|e| format!("writing the flags' node shift: {e}"))
}

/// A descriptor of the map holding the page events' weight slot, for the sampling thread.
pub fn weight_map_fd(ebpf: &Ebpf) -> Result<std::os::fd::OwnedFd, String> {
    use std::os::fd::AsFd as _;
    match ebpf.map(map::PAGE_BASE) {
        Some(aya::maps::Map::Array(data)) => {
            data.fd().as_fd().try_clone_to_owned().map_err(|e| format!("PAGE_BASE's descriptor: {e}"))
        }
        _ => Err("PAGE_BASE missing or not an array (build bug)".into()),
    }
}

/// Maps 2 MiB, touches every page (no transparent huge page: each is one allocation) and
/// unmaps it: a few hundred allocations both calibration hooks see.
fn allocate_some_pages() {
    const LEN: usize = 2 << 20;
    // SAFETY: a private anonymous mapping of our own, written within its length and unmapped.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            LEN,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            return;
        }
        libc::madvise(p, LEN, libc::MADV_NOHUGEPAGE);
        for off in (0..LEN).step_by(4096) {
            std::ptr::write_volatile((p as *mut u8).add(off), 1);
        }
        libc::munmap(p, LEN);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_program_shown_by_its_classic_name_is_found_by_its_hook() {
        let status = |name, hook: &str| ProgramStatus {
            name,
            hook: hook.into(),
            feature: ALLOC_FEATURE,
            status: Attach::Attached,
            reason: None,
        };
        assert_eq!(object_program(&status("mm_page_alloc", "tp_btf kmem:mm_page_alloc")), "mm_page_alloc_btf");
        assert_eq!(object_program(&status("mm_page_free", "tp_btf kmem:mm_page_free")), "mm_page_free_btf");
        assert_eq!(object_program(&status("mm_page_alloc", "tracepoint kmem:mm_page_alloc")), "mm_page_alloc");
        assert_eq!(
            object_program(&status("sys_enter_mbind", "tracepoint syscalls:sys_enter_mbind")),
            "sys_enter_mbind"
        );
    }

    #[test]
    fn the_base_needs_enough_votes_that_agree() {
        let votes = |v: &[(u64, u64)]| v.iter().copied().collect::<HashMap<_, _>>();
        assert_eq!(elect_base(&votes(&[(0xffff_ea00_0000_0000, 500), (0x1234, 3)])), Ok(0xffff_ea00_0000_0000));
        assert!(elect_base(&votes(&[])).expect_err("an error").contains("no page allocation"));
        assert!(elect_base(&votes(&[(0xffff_ea00_0000_0000, 10)])).expect_err("an error").contains("only 10"));
        let split = elect_base(&votes(&[(0xffff_ea00_0000_0000, 300), (0xffff_eb00_0000_0000, 200)]));
        assert!(split.expect_err("an error").contains("disagree"), "a split vote is no base");
        assert!(elect_base(&votes(&[(0, 500)])).is_err());
    }

    #[test]
    fn struct_page_must_shift() {
        assert_eq!(struct_page_shift(64), Ok(6));
        assert_eq!(struct_page_shift(128), Ok(7));
        assert!(struct_page_shift(72).expect_err("an error").contains("72 bytes"));
    }
}
