//! Which GPU a process drives and where its CPU threads run: pure rules over what the collector
//! read (`collect/gpu_use.rs`): the `/dev/nvidiaN` files it holds open, `CUDA_VISIBLE_DEVICES`
//! and `LOCAL_RANK` from its environment (untrusted, capped), its affinity (`Cpus_allowed_list`)
//! and the CPU each of its threads last ran on; mapped onto the machine's GPUs (the topology).
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::topology::{parse::format_id_list, Gpu};

/// The longest `CUDA_VISIBLE_DEVICES` value kept (eight UUIDs are about 330 characters).
pub const MAX_VISIBLE_DEVICES: usize = 1024;

/// What the collector read about a process's GPUs and CPUs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuFacts {
    /// Minors of the `/dev/nvidiaN` files it holds open (sorted, unique).
    pub open_minors: Vec<u32>,
    /// Its `Cpus_allowed_list`, when read.
    pub cpus_allowed: Option<Vec<u32>>,
    /// CPU -> how many of its threads last ran there.
    pub thread_cpus: BTreeMap<u32, u32>,
    /// Threads whose CPU could not be read (gone between listing and reading) or past the cap.
    pub threads_unread: u32,
}

/// The GPU a process drives, and the evidence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuChoice<'g> {
    pub gpu: Option<&'g Gpu>,
    /// Why that GPU (or why none), in words.
    pub how: String,
}

/// `/dev/nvidia3` -> 3; `nvidiactl`, `nvidia-uvm`, `nvidia-caps/...` and anything else -> None.
pub fn nvidia_minor(link: &str) -> Option<u32> {
    let digits = link.strip_prefix("/dev/nvidia")?;
    (!digits.is_empty() && digits.len() <= 5 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// `Cpus_allowed_list:\t0-3,8` of `/proc/PID/status`.
pub fn parse_cpus_allowed(status: &str) -> Option<Vec<u32>> {
    let line = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
    crate::topology::parse::id_list(line).ok()
}

/// The CUDA devices `CUDA_VISIBLE_DEVICES` leaves, in CUDA's order: indices into the NVIDIA GPUs
/// in PCI order, or `GPU-<uuid>` (a unique prefix is enough); CUDA stops at the first entry it
/// cannot use. Unset: every NVIDIA GPU.
pub fn visible<'g>(gpus: &'g [Gpu], value: Option<&str>) -> Vec<&'g Gpu> {
    let mut cuda: Vec<&Gpu> = gpus.iter().filter(|g| g.is_cuda()).collect();
    cuda.sort_by(|a, b| a.pci_address.cmp(&b.pci_address));
    let Some(value) = value else { return cuda };
    let mut out: Vec<&Gpu> = Vec::new();
    for entry in value.split(',').map(str::trim) {
        let found = if let Ok(i) = entry.parse::<usize>() {
            cuda.get(i).copied()
        } else if entry.starts_with("GPU-") {
            let mut m = cuda.iter().filter(|g| g.uuid.as_deref().is_some_and(|u| u.starts_with(entry)));
            match (m.next(), m.next()) {
                (Some(g), None) => Some(*g),
                _ => None,
            }
        } else {
            None
        };
        match found {
            Some(g) if !out.iter().any(|o| o.pci_address == g.pci_address) => out.push(g),
            _ => break,
        }
    }
    out
}

/// Decides which GPU a process drives: the one `/dev/nvidiaN` it holds open; else the
/// `LOCAL_RANK`-th device `CUDA_VISIBLE_DEVICES` leaves (what `torch.cuda.set_device(local_rank)`
/// picks), if it holds that one open or none at all; else the only device left visible.
pub fn choose<'g>(
    gpus: &'g [Gpu],
    open_minors: &[u32],
    visible_devices: Option<&str>,
    local_rank: Option<u32>,
) -> GpuChoice<'g> {
    let opened: Vec<&Gpu> = gpus.iter().filter(|g| g.minor.is_some_and(|m| open_minors.contains(&m))).collect();
    let devs = |gs: &[&Gpu]| gs.iter().filter_map(|g| g.minor).map(|m| format!("/dev/nvidia{m}")).collect::<Vec<_>>();
    if let [g] = opened.as_slice() {
        return GpuChoice { gpu: Some(g), how: format!("holds {} open", devs(&opened).join(", ")) };
    }
    let vis = visible(gpus, visible_devices);
    let cvd = match visible_devices {
        Some(v) => format!("CUDA_VISIBLE_DEVICES={v}"),
        None => "CUDA_VISIBLE_DEVICES unset".to_string(),
    };
    let among = |g: &Gpu| opened.is_empty() || opened.iter().any(|o| o.pci_address == g.pci_address);
    if let Some(lr) = local_rank {
        if let Some(g) = vis.get(lr as usize).filter(|g| among(g)) {
            let held =
                if opened.is_empty() { String::new() } else { format!("; holds {} open", devs(&opened).join(", ")) };
            return GpuChoice { gpu: Some(g), how: format!("LOCAL_RANK {lr} -> CUDA device {lr} ({cvd}){held}") };
        }
    }
    if let [g] = vis.as_slice() {
        if among(g) {
            return GpuChoice { gpu: Some(g), how: format!("the only device {cvd} leaves") };
        }
    }
    let how = match (opened.len(), local_rank) {
        (0, _) if vis.is_empty() => format!("no GPU device open; {cvd} leaves none"),
        (0, None) => format!("no GPU device open, no LOCAL_RANK; {cvd} leaves {}", vis.len()),
        (0, Some(lr)) => format!("no GPU device open; LOCAL_RANK {lr} but {cvd} leaves {}", vis.len()),
        (_, None) => format!("holds {} open and no LOCAL_RANK says which", devs(&opened).join(", ")),
        (_, Some(lr)) => {
            format!("holds {} open, not CUDA device {lr} that LOCAL_RANK {lr} names ({cvd})", devs(&opened).join(", "))
        }
    };
    GpuChoice { gpu: None, how }
}

/// The node of a CPU (`None` for a CPU no node lists).
pub type NodeOfCpu<'a> = &'a dyn Fn(u32) -> Option<u32>;

/// Threads per node, from the CPUs they last ran on (a CPU no node lists is left out).
pub fn threads_by_node(node_of_cpu: NodeOfCpu<'_>, thread_cpus: &BTreeMap<u32, u32>) -> BTreeMap<u32, u32> {
    let mut out = BTreeMap::new();
    for (&cpu, &n) in thread_cpus {
        if let Some(node) = node_of_cpu(cpu) {
            *out.entry(node).or_default() += n;
        }
    }
    out
}

/// The snapshot's `gpu` of a process (also in session files' process records).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuView {
    /// The GPU it drives; null when the evidence does not say (see `how`).
    pub pci_address: Option<String>,
    pub model: Option<String>,
    /// The node that GPU hangs off.
    pub numa_node: Option<u32>,
    pub how: String,
    /// The `/dev/nvidiaN` files it holds open.
    pub open_devices: Vec<String>,
    pub cuda_visible_devices: Option<String>,
}

/// The snapshot's `cpus` of a process: where it may run and where its threads ran.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CpuView {
    /// `Cpus_allowed_list` in the kernel's list format; null when unread.
    pub allowed: Option<String>,
    /// The nodes whose CPUs it may run on.
    pub allowed_nodes: Vec<u32>,
    pub threads_by_node: BTreeMap<String, u32>,
    pub threads_by_cpu: BTreeMap<String, u32>,
    pub threads_unread: u32,
}

/// `gpu` for a process with GPU facts or a `CUDA_VISIBLE_DEVICES` (what it was given is shown
/// even on a machine without GPUs).
pub fn gpu_view(
    gpus: &[Gpu],
    facts: Option<&GpuFacts>,
    visible_devices: Option<&str>,
    local_rank: Option<u32>,
) -> Option<GpuView> {
    if facts.is_none() && visible_devices.is_none() {
        return None;
    }
    let open = facts.map_or(&[][..], |f| &f.open_minors[..]);
    let choice = if gpus.is_empty() {
        GpuChoice { gpu: None, how: "no GPU on this machine (no PCI display or 3D controller in sysfs)".into() }
    } else {
        choose(gpus, open, visible_devices, local_rank)
    };
    Some(GpuView {
        pci_address: choice.gpu.map(|g| g.pci_address.clone()),
        model: choice.gpu.and_then(|g| g.model.clone()),
        numa_node: choice.gpu.and_then(|g| g.numa_node),
        how: choice.how,
        open_devices: open.iter().map(|m| format!("/dev/nvidia{m}")).collect(),
        cuda_visible_devices: visible_devices.map(str::to_string),
    })
}

/// GPU facts again from a recorded [`GpuView`] and affinity (`top --replay`): the devices it held
/// open and its affinity; where its threads ran is not recorded.
pub fn facts_of_record(gpu: Option<&GpuView>, cpus_allowed: Option<&str>) -> Option<GpuFacts> {
    if gpu.is_none() && cpus_allowed.is_none() {
        return None;
    }
    Some(GpuFacts {
        open_minors: gpu.iter().flat_map(|g| g.open_devices.iter()).filter_map(|d| nvidia_minor(d)).collect(),
        cpus_allowed: cpus_allowed.and_then(|c| crate::topology::parse::id_list(c).ok()),
        ..GpuFacts::default()
    })
}

pub fn cpu_view(node_of_cpu: NodeOfCpu<'_>, facts: &GpuFacts) -> CpuView {
    let allowed_nodes: Vec<u32> = {
        let mut v: Vec<u32> = facts.cpus_allowed.iter().flatten().filter_map(|&c| node_of_cpu(c)).collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    CpuView {
        allowed: facts.cpus_allowed.as_deref().map(format_id_list),
        allowed_nodes,
        threads_by_node: threads_by_node(node_of_cpu, &facts.thread_cpus)
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        threads_by_cpu: facts.thread_cpus.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        threads_unread: facts.threads_unread,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 8-GPU two-socket node of `fixtures/sysfs/hand-8gpu-2s`: a BMC VGA, then minors 0-7
    /// in PCI order, 0-3 on node 0 and 4-7 on node 1.
    fn eight() -> Vec<Gpu> {
        let mut v =
            vec![Gpu { pci_address: "0000:03:00.0".into(), vendor_id: 0x1a03, numa_node: Some(0), ..Gpu::default() }];
        for (i, bus) in ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"].iter().enumerate() {
            v.push(Gpu {
                pci_address: format!("0000:{bus}:00.0"),
                vendor_id: 0x10de,
                numa_node: Some(if i < 4 { 0 } else { 1 }),
                minor: Some(i as u32),
                uuid: Some(format!("GPU-0000000{i}-1111")),
                ..Gpu::default()
            });
        }
        v
    }

    #[test]
    fn which_gpu_a_rank_drives() {
        let gpus = eight();
        // (name, open minors, CUDA_VISIBLE_DEVICES, LOCAL_RANK, PCI address, how)
        let cases: &[(&str, &[u32], Option<&str>, Option<u32>, Option<&str>, &str)] = &[
            ("one device open", &[5], None, None, Some("0000:ab:00.0"), "holds /dev/nvidia5 open"),
            ("one open beats LOCAL_RANK", &[5], None, Some(2), Some("0000:ab:00.0"), "holds /dev/nvidia5 open"),
            ("all open, LOCAL_RANK picks", &[0, 1, 2, 3, 4, 5, 6, 7], None, Some(6), Some("0000:ba:00.0"),
             "LOCAL_RANK 6 -> CUDA device 6 (CUDA_VISIBLE_DEVICES unset); holds /dev/nvidia0, /dev/nvidia1, /dev/nvidia2, /dev/nvidia3, /dev/nvidia4, /dev/nvidia5, /dev/nvidia6, /dev/nvidia7 open"),
            ("reordered list", &[], Some("4,5,6,7,0,1,2,3"), Some(1), Some("0000:ab:00.0"), "LOCAL_RANK 1 -> CUDA device 1 (CUDA_VISIBLE_DEVICES=4,5,6,7,0,1,2,3)"),
            ("uuid prefix", &[], Some("GPU-00000003"), Some(0), Some("0000:5d:00.0"), "LOCAL_RANK 0 -> CUDA device 0 (CUDA_VISIBLE_DEVICES=GPU-00000003)"),
            ("only one visible", &[], Some("7"), None, Some("0000:db:00.0"), "the only device CUDA_VISIBLE_DEVICES=7 leaves"),
            ("invalid entry ends the list", &[], Some("2,x,3"), None, Some("0000:3a:00.0"), "the only device CUDA_VISIBLE_DEVICES=2,x,3 leaves"),
            ("ambiguous uuid prefix", &[], Some("GPU-0000000"), None, None, "no GPU device open; CUDA_VISIBLE_DEVICES=GPU-0000000 leaves none"),
            ("LOCAL_RANK past the list", &[], Some("0,1"), Some(2), None, "no GPU device open; LOCAL_RANK 2 but CUDA_VISIBLE_DEVICES=0,1 leaves 2"),
            ("two open, no rank", &[1, 2], None, None, None, "holds /dev/nvidia1, /dev/nvidia2 open and no LOCAL_RANK says which"),
            ("LOCAL_RANK names one it does not hold", &[1, 2], None, Some(5), None,
             "holds /dev/nvidia1, /dev/nvidia2 open, not CUDA device 5 that LOCAL_RANK 5 names (CUDA_VISIBLE_DEVICES unset)"),
            ("empty list", &[], Some(""), Some(0), None, "no GPU device open; CUDA_VISIBLE_DEVICES= leaves none"),
        ];
        for (name, open, cvd, lr, want, how) in cases {
            let c = choose(&gpus, open, *cvd, *lr);
            assert_eq!((c.gpu.map(|g| g.pci_address.as_str()), c.how.as_str()), (*want, *how), "{name}");
        }
        // The BMC's VGA is never a CUDA device.
        assert_eq!(visible(&gpus, None).len(), 8);
    }

    #[test]
    fn device_links_and_affinity() {
        for (link, want) in [
            ("/dev/nvidia0", Some(0)),
            ("/dev/nvidia12", Some(12)),
            ("/dev/nvidiactl", None),
            ("/dev/nvidia-uvm", None),
            ("/dev/nvidia-caps/nvidia-cap1", None),
            ("/dev/nvidia", None),
            ("/dev/nvidia99999999999", None),
            ("socket:[123]", None),
        ] {
            assert_eq!(nvidia_minor(link), want, "{link}");
        }
        let status = "Name:\tpython\nCpus_allowed:\tff\nCpus_allowed_list:\t0-3,8\nMems_allowed_list:\t0\n";
        assert_eq!(parse_cpus_allowed(status), Some(vec![0, 1, 2, 3, 8]));
        assert_eq!(parse_cpus_allowed("Cpus_allowed_list:\tzz\n"), None);
        assert_eq!(parse_cpus_allowed("Name:\tx\n"), None);
        let node_of = |c: u32| (c < 8).then_some(c / 4);
        let facts = GpuFacts {
            cpus_allowed: Some(vec![2, 3, 4]),
            thread_cpus: [(2, 3), (5, 1), (99, 1)].into_iter().collect(),
            ..GpuFacts::default()
        };
        let v = cpu_view(&node_of, &facts);
        assert_eq!((v.allowed.as_deref(), v.allowed_nodes.clone()), (Some("2-4"), vec![0, 1]));
        assert_eq!(v.threads_by_node, [("0".to_string(), 3), ("1".to_string(), 1)].into_iter().collect());
    }
}
