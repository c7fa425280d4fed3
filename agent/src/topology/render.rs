//! What `tierscope topology` prints: aligned text tables, or one JSON document.
use std::fmt::Write as _;

use super::{block_ranges_by_node, parse::format_id_list, Topology};

/// The `schema` value of [`json`]'s document.
pub const JSON_SCHEMA: &str = "tierscope.topology/v1";

/// The JSON document of `tierscope topology --json`: the whole model plus a `schema` key.
pub fn json(t: &Topology) -> serde_json::Value {
    let mut v = serde_json::to_value(t).unwrap_or_else(|e| {
        // Serializing plain structs of numbers and strings cannot fail; if it ever does, say so
        // in the output rather than panic.
        serde_json::json!({ "problems": [format!("cannot serialize the topology: {e}")] })
    });
    if let Some(obj) = v.as_object_mut() {
        obj.insert("schema".into(), JSON_SCHEMA.into());
    }
    v
}

/// The text of `tierscope topology`: nodes with tiers and evidence, distances, HMAT, kernel
/// tiers, CXL devices and regions, dax devices, EDAC, promotion/demotion counters, problems.
pub fn text(t: &Topology) -> String {
    let mut out = String::new();
    let mask = |m: &Option<Vec<u32>>| m.as_ref().map_or("?".to_string(), |ids| list_or_none(ids));
    let _ = writeln!(
        out,
        "NUMA nodes (lists of node ids): online: {}; possible: {}; with memory: {}; with CPUs: {}",
        mask(&t.masks.online),
        mask(&t.masks.possible),
        mask(&t.masks.has_memory),
        mask(&t.masks.has_cpu)
    );
    if t.nodes.is_empty() {
        out.push_str("  no NUMA nodes found\n");
    } else {
        let rows = t.nodes.iter().map(|n| {
            vec![
                n.id.to_string(),
                n.tier.as_str().to_string(),
                if n.online { "yes" } else { "no" }.to_string(),
                if n.has_cpu && n.cpus.is_empty() { "yes (?)".to_string() } else { list_or_none(&n.cpus) },
                opt_bytes(n.mem_total_bytes),
                opt_bytes(n.mem_free_bytes),
                n.memory_tier.map_or("-".into(), |id| id.to_string()),
                n.tier_evidence.clone(),
            ]
        });
        table(&mut out, &["NODE", "TIER", "ONLINE", "CPUS", "MEMORY", "FREE", "KTIER", "EVIDENCE"], rows);
    }

    distances(&mut out, t);

    if t.nodes.iter().any(|n| n.hmat.is_some()) {
        out.push_str("\nHMAT access (from the best initiators)\n");
        let rows = t.nodes.iter().filter_map(|n| {
            let h = n.hmat.as_ref()?;
            let num = |v: Option<u64>| v.map_or("-".into(), |v| v.to_string());
            Some(vec![
                n.id.to_string(),
                list_or_none(&h.initiators),
                num(h.read_latency_ns),
                num(h.write_latency_ns),
                num(h.read_bandwidth_mbps),
                num(h.write_bandwidth_mbps),
            ])
        });
        table(&mut out, &["NODE", "INITIATORS", "READ NS", "WRITE NS", "READ MB/S", "WRITE MB/S"], rows);
    }

    if !t.memory_tiers.is_empty() {
        out.push_str("\nKernel memory tiers (higher = slower)\n");
        let rows = t.memory_tiers.iter().map(|mt| vec![format!("memory_tier{}", mt.id), list_or_none(&mt.nodes)]);
        table(&mut out, &["TIER", "NODES"], rows);
    }

    if let Some(b) = &t.memory_blocks {
        let _ = writeln!(out, "\nMemory blocks of {}", bytes(b.block_size_bytes));
        let rows = block_ranges_by_node(b).into_iter().map(|(node, runs)| {
            let count: u64 = runs.iter().map(|r| r[1] - r[0] + 1).sum();
            let runs: Vec<String> = runs
                .iter()
                .map(|r| if r[0] == r[1] { r[0].to_string() } else { format!("{}-{}", r[0], r[1]) })
                .collect();
            vec![node.to_string(), count.to_string(), runs.join(",")]
        });
        table(&mut out, &["NODE", "BLOCKS", "RANGES"], rows);
    }

    if !t.block_states.is_empty() {
        out.push_str("\nMemory blocks by state and zone (what offlining a node depends on)\n");
        let rows = t.block_states.iter().map(|(node, b)| {
            let kernel: Vec<String> = b.online_kernel.iter().map(|(z, n)| format!("{n} {z}")).collect();
            vec![
                node.to_string(),
                b.blocks.to_string(),
                b.online.to_string(),
                b.offline.to_string(),
                b.online_movable.to_string(),
                dash_if_empty(kernel.join(", ")),
                b.online_spanning.to_string(),
                b.unknown.to_string(),
            ]
        });
        table(
            &mut out,
            &["NODE", "BLOCKS", "ONLINE", "OFFLINE", "MOVABLE", "KERNEL ZONES", "SPANNING", "UNKNOWN"],
            rows,
        );
    }

    out.push_str("\nCXL memory devices\n");
    if !t.cxl_bus {
        out.push_str("  none (no /sys/bus/cxl: no CXL hardware, or the cxl_acpi and cxl_pci modules are not loaded)\n");
    } else if t.cxl_memdevs.is_empty() {
        out.push_str("  none\n");
    } else {
        let rows = t.cxl_memdevs.iter().map(|m| {
            vec![
                m.name.clone(),
                m.serial.map_or("?".into(), |s| format!("{s:#x}")),
                m.firmware_version.clone().unwrap_or_else(|| "-".into()),
                opt_bytes(m.ram_size_bytes),
                opt_bytes(m.pmem_size_bytes),
                m.numa_node.map_or("-".into(), |n| n.to_string()),
                dash_if_empty(m.regions.join(",")),
            ]
        });
        table(&mut out, &["DEVICE", "SERIAL", "FIRMWARE", "RAM", "PMEM", "NEAR NODE", "REGIONS"], rows);
    }

    if !t.cxl_regions.is_empty() {
        out.push_str("\nCXL regions\n");
        let rows = t.cxl_regions.iter().map(|r| {
            vec![
                r.name.clone(),
                r.mode.clone().unwrap_or_else(|| "-".into()),
                opt_bytes(r.size_bytes),
                r.resource.map_or("-".into(), |a| format!("{a:#x}")),
                dash_if_empty(r.targets.join(",")),
                dash_if_empty(r.memdevs.join(",")),
                dash_if_empty(r.dax_devices.join(",")),
                list_or_none(&r.nodes),
            ]
        });
        table(&mut out, &["REGION", "MODE", "SIZE", "ADDRESS", "TARGETS", "DEVICES", "DAX", "NODES"], rows);
    }

    if !t.dax_devices.is_empty() {
        out.push_str("\nDAX devices\n");
        let rows = t.dax_devices.iter().map(|d| {
            vec![
                d.name.clone(),
                d.target_node.map_or("-".into(), |n| n.to_string()),
                opt_bytes(d.size_bytes),
                d.driver.clone().unwrap_or_else(|| "-".into()),
                d.cxl_region.clone().unwrap_or_else(|| "-".into()),
            ]
        });
        table(&mut out, &["DAX", "TARGET NODE", "SIZE", "DRIVER", "CXL REGION"], rows);
    }

    gpus(&mut out, t);

    if !t.edac.is_empty() {
        out.push_str("\nEDAC memory controllers\n");
        let num = |v: Option<u64>| v.map_or("?".into(), |v| v.to_string());
        let rows = t.edac.iter().map(|m| {
            vec![m.name.clone(), m.mc_name.clone().unwrap_or_else(|| "-".into()), num(m.ce_count), num(m.ue_count)]
        });
        table(&mut out, &["MC", "NAME", "CORRECTED", "UNCORRECTED"], rows);
    }

    counters(&mut out, t);

    if !t.problems.is_empty() {
        out.push_str("\nProblems\n");
        for p in &t.problems {
            let _ = writeln!(out, "  - {p}");
        }
    }
    out
}

/// GPUs and display controllers: where each hangs off, and its own memory node where the driver
/// onlined one.
fn gpus(out: &mut String, t: &Topology) {
    if t.gpus.is_empty() {
        out.push_str("\nGPUs\n  none (no PCI display or 3D controller under bus/pci/devices)\n");
        return;
    }
    out.push_str("\nGPUs (NODE: the node the device hangs off; MEMORY NODE: its own memory as a node)\n");
    let rows = t.gpus.iter().map(|g| {
        let memory = match (g.memory_node, &g.memory_status) {
            (Some(n), Some(s)) => {
                format!("{n} ({s}{})", g.memory_bytes.map_or(String::new(), |b| format!(", {}", bytes(b))))
            }
            (None, Some(s)) => format!("- ({s})"),
            _ => "-".into(),
        };
        vec![
            g.pci_address.clone(),
            g.vendor.clone(),
            g.kind.clone(),
            g.model.clone().unwrap_or_else(|| "-".into()),
            g.minor.map_or("-".into(), |m| format!("/dev/nvidia{m}")),
            g.numa_node.map_or("none (-1)".into(), |n| n.to_string()),
            memory,
        ]
    });
    table(out, &["PCI", "VENDOR", "KIND", "MODEL", "DEVICE", "NODE", "MEMORY NODE"], rows);
}

/// The SLIT matrix. Rows are as the kernel prints them: one column per online node.
fn distances(out: &mut String, t: &Topology) {
    let columns: Vec<u32> = match &t.masks.online {
        Some(ids) => ids.clone(),
        None => t.nodes.iter().filter(|n| n.online).map(|n| n.id).collect(),
    };
    let rows: Vec<Vec<String>> = t
        .nodes
        .iter()
        .filter(|n| !n.distances.is_empty())
        .map(|n| {
            let mut row = vec![n.id.to_string()];
            row.extend(n.distances.iter().map(u32::to_string));
            row
        })
        .collect();
    if rows.is_empty() {
        return;
    }
    out.push_str("\nDistances (SLIT)\n");
    let widest = rows.iter().map(Vec::len).max().unwrap_or(1);
    let mut header = vec!["NODE".to_string()];
    // A row longer than the online mask (a partial tree) still gets a header per column.
    header.extend((0..widest - 1).map(|i| columns.get(i).map_or("?".into(), |c| c.to_string())));
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    table(out, &header, rows.into_iter());
}

/// Promotion/demotion and NUMA placement counters: a few key columns per node.
fn counters(out: &mut String, t: &Topology) {
    const KEYS: [&str; 6] =
        ["pgpromote_success", "pgdemote_kswapd", "pgdemote_direct", "numa_hit", "numa_miss", "numa_foreign"];
    let nodes: Vec<_> = t.nodes.iter().filter(|n| !n.vmstat.is_empty()).collect();
    if nodes.is_empty() {
        return;
    }
    out.push_str("\nPromotion, demotion and NUMA counters (nodeN/vmstat)\n");
    let rows = nodes.iter().map(|n| {
        let mut row = vec![n.id.to_string()];
        row.extend(KEYS.iter().map(|k| n.vmstat.get(*k).map_or("-".into(), |v| v.to_string())));
        row
    });
    let mut header = vec!["NODE"];
    header.extend(KEYS);
    table(out, &header, rows);
}

/// Left-aligned columns, two spaces apart, indented by two; rows shorter than the header are
/// padded and longer ones print their extra cells unaligned rather than being cut.
fn table(out: &mut String, header: &[&str], rows: impl Iterator<Item = Vec<String>>) {
    let rows: Vec<Vec<String>> = rows.collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut s = String::from("  ");
        for (i, cell) in cells.enumerate() {
            if i > 0 {
                s.push_str("  ");
            }
            let _ = write!(s, "{cell:<w$}", w = widths.get(i).copied().unwrap_or(0));
        }
        out.push_str(s.trim_end());
        out.push('\n');
    };
    line(&mut header.iter().copied());
    for row in &rows {
        line(&mut row.iter().map(String::as_str));
    }
}

fn list_or_none(ids: &[u32]) -> String {
    dash_if_empty(format_id_list(ids))
}

fn dash_if_empty(s: String) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s
    }
}

fn opt_bytes(b: Option<u64>) -> String {
    b.map_or("?".into(), bytes)
}

/// Binary units with one decimal (`6.3 GiB`); exact bytes below 1 KiB.
pub fn bytes(b: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if b < 1024 {
        return format!("{b} B");
    }
    let mut v = b as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sizes() {
        for (b, want) in
            [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (256 << 20, "256.0 MiB"), (u64::MAX, "16.0 EiB")]
        {
            assert_eq!(bytes(b), want);
        }
    }

    #[test]
    fn tables_align_and_tolerate_ragged_rows() {
        let mut out = String::new();
        table(
            &mut out,
            &["A", "BB"],
            vec![vec!["xyz".into(), "1".into()], vec!["q".into()], vec!["1".into(), "2".into(), "extra".into()]]
                .into_iter(),
        );
        assert_eq!(out, "  A    BB\n  xyz  1\n  q\n  1    2   extra\n");
    }
}
