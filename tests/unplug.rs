//! Root integration tests: who would block an unplug. Node 0 is declared the CXL node
//! (`--cxl-node 0`); three processes hold memory there: one pins it through the CUDA driver's
//! entry points (a stand-in library with libcuda's names, probed as the real one is: see
//! tests/pinned.rs), one mlocks it, one only touches it. The snapshot's `unplug` key must name
//! the pinning one as the blocker with its pinned bytes as its own numa_maps counts them, list
//! the mlocking one as a holder whose locked pages move (mlock does not stop migration), and the
//! plain one as a holder that blocks nothing; the node's memory blocks as sysfs counts them.
use std::{collections::HashMap, path::Path, process::Child};

use tierscope_tests::{kv_num, pinned_py, require_root_and_agent, shared_library, Agent, UNTIL_INTERRUPTED};

const PAGE: u64 = 4096;

fn release(mut child: Child) {
    drop(child.stdin.take());
    child.wait().expect("pinned.py");
}

fn u(v: &serde_json::Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("no {key} in {v}"))
}

/// Node 0's online blocks by zone, as sysfs says (the agent must count the same).
fn node0_blocks() -> (u64, u64) {
    let (mut online, mut movable) = (0, 0);
    for e in std::fs::read_dir("/sys/devices/system/node/node0").expect("node0").flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.strip_prefix("memory").is_some_and(|n| n.parse::<u64>().is_ok()) {
            continue;
        }
        let b = Path::new("/sys/devices/system/memory").join(&name);
        if std::fs::read_to_string(b.join("state")).unwrap_or_default().trim() == "online" {
            online += 1;
            movable +=
                u64::from(std::fs::read_to_string(b.join("valid_zones")).unwrap_or_default().starts_with("Movable"));
        }
    }
    (online, movable)
}

#[test]
#[ignore = "needs root and TIERSCOPE_BIN (cargo xtask test runs it)"]
fn a_pinning_process_is_the_blocker_an_mlocking_or_plain_one_is_not() {
    require_root_and_agent!();
    let lib = shared_library("unplug", "cuda_stand_in.c", "libcuda.so.1");
    let lib = lib.to_str().expect("utf-8 path");
    let marker = "tierscope_unplug_holder";
    let agent = Agent::snapshot_with(
        &[],
        &[("TIERSCOPE_CUDA_LIBRARIES", lib)],
        &["--duration", UNTIL_INTERRUPTED, "--match", marker, "--cxl-node", "0", "--page-path", "exact"],
    );
    let (pinner, pk) = pinned_py(&["cuda", lib, "48", marker]);
    let (locker, lk) = pinned_py(&["mlock", "32", marker]);
    let (plain, qk) = pinned_py(&["plain", "24", marker]);
    // The window ends (its last reading) while all three still hold their memory.
    let snap = agent.interrupt();
    for c in [pinner, locker, plain] {
        release(c);
    }
    let _ = std::fs::remove_dir_all(Path::new(lib).parent().expect("its scratch folder"));

    let unplug = &snap["unplug"];
    let node0 = unplug["nodes"]
        .as_array()
        .and_then(|ns| ns.iter().find(|n| n["node"] == 0))
        .unwrap_or_else(|| panic!("no node 0 in {unplug}"));
    assert_eq!(node0["tier"], "cxl", "--cxl-node 0: {node0}");
    let holder = |kv: &HashMap<String, String>| {
        node0["holders"]
            .as_array()
            .and_then(|hs| hs.iter().find(|h| h["pid"].to_string() == kv["pid"]))
            .unwrap_or_else(|| panic!("pid {} not a holder on node 0: {}", kv["pid"], node0["holders"]))
            .clone()
    };

    // The pinning process: its pinned ranges' pages on node 0, as its own numa_maps counts them
    // (48 MiB allocated + 12 MiB registered).
    let p = holder(&pk);
    let pinned = kv_num(&pk, "pinned_pages_node0") * PAGE;
    assert_eq!(pinned, 60 << 20, "{pk:?}");
    assert_eq!((u(&p, "pinned_bytes"), p["blocks"].as_bool()), (pinned, Some(true)), "{p}");
    assert!(u(&p, "resident_bytes") >= pinned, "its pinned pages are resident: {p}");
    assert_eq!(u(node0, "pinned_bytes"), pinned, "the only blocker's bytes: {node0}");
    assert_eq!(u(node0, "blockers"), 1, "{node0}");
    assert_eq!(node0["offline"], "no", "{node0}");
    // A matched process is a job of its own (`python3-PID`): named with it.
    let said = format!("pinned: 60.0 MiB by pid {} (python3, job python3-{}) blocks it", pk["pid"], pk["pid"]);
    assert!(
        node0["reasons"].as_array().is_some_and(|rs| rs
            .iter()
            .any(|r| r["effect"] == "blocks" && r["text"].as_str().is_some_and(|t| t.starts_with(&said)))),
        "{said:?} not in {}",
        node0["reasons"]
    );

    // The mlocking process: a holder whose VmLck (all of it on node 0, one node here) moves.
    let l = holder(&lk);
    assert_eq!(
        (u(&l, "locked_bytes"), u(&l, "pinned_bytes"), l["blocks"].as_bool()),
        (kv_num(&lk, "vmlck"), 0, Some(false)),
        "{l}"
    );
    assert!(kv_num(&lk, "vmlck") >= 32 << 20, "{lk:?}");

    // The plain process: a holder with its touched pages, blocking nothing.
    let q = holder(&qk);
    assert!(u(&q, "resident_bytes") >= kv_num(&qk, "plain_pages_node0") * PAGE, "{q} vs {qk:?}");
    assert_eq!((u(&q, "pinned_bytes"), u(&q, "locked_bytes"), q["blocks"].as_bool()), (0, 0, Some(false)), "{q}");

    // The node's blocks as sysfs counts them.
    let (online, movable) = node0_blocks();
    assert_eq!(
        (u(&node0["blocks"], "online"), u(&node0["blocks"], "online_movable")),
        (online, movable),
        "{}",
        node0["blocks"]
    );
}
