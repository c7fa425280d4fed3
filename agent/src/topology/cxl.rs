//! CXL memory devices and regions (`/sys/bus/cxl/devices`), the dax devices that online a
//! region's memory as a NUMA node (`/sys/bus/dax/devices`), and EDAC memory controllers.
use std::collections::BTreeMap;

use super::{
    memory_blocks::MemoryBlocks,
    parse,
    sysfs::{Need, Sysfs},
};

/// A CXL Type 3 memory device (`/sys/bus/cxl/devices/memX`).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CxlMemdev {
    /// `mem0`.
    pub name: String,
    /// The device serial number; the `hw.id` of its health metrics.
    #[serde(serialize_with = "serialize_hex")]
    pub serial: Option<u64>,
    pub firmware_version: Option<String>,
    /// Volatile capacity (`ram/size`).
    pub ram_size_bytes: Option<u64>,
    /// Persistent capacity (`pmem/size`).
    pub pmem_size_bytes: Option<u64>,
    /// The node the *device* is attached near (its PCI host bridge), not where its memory lands.
    pub numa_node: Option<u32>,
    /// Regions that use this device (through an endpoint decoder).
    pub regions: Vec<String>,
}

/// A CXL region (`/sys/bus/cxl/devices/regionN`): host address space interleaved over memdevs.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CxlRegion {
    /// `region0`.
    pub name: String,
    /// `ram` or `pmem` (the region's `mode`; absent before Linux 6.3).
    pub mode: Option<String>,
    pub size_bytes: Option<u64>,
    /// Host physical start address.
    #[serde(serialize_with = "serialize_hex")]
    pub resource: Option<u64>,
    pub interleave_ways: Option<u64>,
    /// Endpoint decoders (`decoder2.0`) in interleave order.
    pub targets: Vec<String>,
    /// The memdevs behind the targets.
    pub memdevs: Vec<String>,
    /// The dax devices carved from this region.
    pub dax_devices: Vec<String>,
    /// The NUMA nodes its memory is onlined as.
    pub nodes: Vec<u32>,
}

/// A device-dax instance (`/sys/bus/dax/devices/daxX.Y`); with the `kmem` driver its memory is
/// system RAM on `target_node`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct DaxDevice {
    /// `dax0.0`.
    pub name: String,
    /// The node its memory is (or would be) onlined as.
    pub target_node: Option<u32>,
    pub size_bytes: Option<u64>,
    #[serde(serialize_with = "serialize_hex")]
    pub resource: Option<u64>,
    /// The bound driver: `kmem` (system RAM) or `device_dax` (a character device).
    pub driver: Option<String>,
    /// The CXL region it was carved from, if any (else it is e.g. soft-reserved or pmem memory).
    pub cxl_region: Option<String>,
}

/// An EDAC memory controller (`/sys/devices/system/edac/mc/mcN`).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct EdacMc {
    /// `mc0`.
    pub name: String,
    pub mc_name: Option<String>,
    /// Corrected errors since boot (or since the counters were reset).
    pub ce_count: Option<u64>,
    /// Uncorrected errors.
    pub ue_count: Option<u64>,
}

fn serialize_hex<S: serde::Serializer>(v: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.serialize_str(&format!("{v:#x}")),
        None => s.serialize_none(),
    }
}

/// What the CXL and dax buses hold, cross-referenced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct CxlView {
    /// Whether `/sys/bus/cxl` exists at all.
    pub bus_present: bool,
    pub memdevs: Vec<CxlMemdev>,
    pub regions: Vec<CxlRegion>,
    pub dax: Vec<DaxDevice>,
}

/// Reads memdevs, regions and dax devices and links them: targets -> memdevs, dax -> region,
/// region -> nodes (from dax `target_node`, and from the memory blocks its address range covers).
pub(super) fn read_cxl(fs: &mut Sysfs<'_>, blocks: Option<&MemoryBlocks>) -> CxlView {
    let bus = fs.path("bus/cxl/devices");
    let names = fs.dir_names(&bus, Need::Optional, "CXL devices are not shown");
    let bus_present = names.is_some();
    let names = names.unwrap_or_default();
    let mut memdevs = Vec::new();
    let mut regions = Vec::new();
    for name in &names {
        if parse::numbered(name, "mem").is_some() {
            memdevs.push(read_memdev(fs, name));
        } else if parse::numbered(name, "region").is_some() {
            regions.push(read_region(fs, name));
        }
    }
    let dax = read_dax(fs);
    let mut view = CxlView { bus_present, memdevs, regions, dax };
    link(&mut view, blocks);
    view
}

fn read_memdev(fs: &mut Sysfs<'_>, name: &str) -> CxlMemdev {
    let dir = fs.path(&format!("bus/cxl/devices/{name}"));
    let lost = |what: &str| format!("the {what} of CXL device {name} is not shown");
    CxlMemdev {
        name: name.to_string(),
        serial: fs.parsed(&dir.join("serial"), Need::Required, &lost("serial number"), parse::hex),
        firmware_version: fs.parsed(
            &dir.join("firmware_version"),
            Need::Optional,
            &lost("firmware version"),
            parse::text_value,
        ),
        ram_size_bytes: fs.parsed(&dir.join("ram/size"), Need::Optional, &lost("volatile size"), parse::hex),
        pmem_size_bytes: fs.parsed(&dir.join("pmem/size"), Need::Optional, &lost("persistent size"), parse::hex),
        numa_node: fs
            .parsed(&dir.join("numa_node"), Need::Optional, &lost("attachment node"), parse::optional_node)
            .flatten(),
        regions: Vec::new(),
    }
}

fn read_region(fs: &mut Sysfs<'_>, name: &str) -> CxlRegion {
    let dir = fs.path(&format!("bus/cxl/devices/{name}"));
    let lost = |what: &str| format!("the {what} of CXL region {name} is not shown");
    let mut targets = Vec::new();
    let mut numbered_targets: Vec<(u32, String)> = fs
        .dir_names(&dir, Need::Required, &lost("targets"))
        .unwrap_or_default()
        .into_iter()
        .filter_map(|n| Some((parse::numbered(&n, "target")?, n)))
        .collect();
    numbered_targets.sort();
    for (_, file) in numbered_targets {
        // Unset targets read as an empty line; they are not a problem.
        if let Some(t) = fs.text(&dir.join(&file), Need::Optional, &lost("targets")) {
            let t = t.trim();
            if !t.is_empty() {
                targets.push(t.to_string());
            }
        }
    }
    CxlRegion {
        name: name.to_string(),
        mode: fs.parsed(&dir.join("mode"), Need::Optional, &lost("mode"), parse::text_value),
        size_bytes: fs.parsed(&dir.join("size"), Need::Required, &lost("size"), parse::hex),
        resource: fs.parsed(&dir.join("resource"), Need::Required, &lost("address"), parse::hex),
        interleave_ways: fs.parsed(
            &dir.join("interleave_ways"),
            Need::Optional,
            &lost("interleave ways"),
            parse::decimal,
        ),
        memdevs: targets.iter().filter_map(|t| memdev_of_decoder(fs, t)).collect(),
        targets,
        dax_devices: Vec::new(),
        nodes: Vec::new(),
    }
}

/// An endpoint decoder `decoderP.D` belongs to port `endpointP`, whose `uport` link names the memdev.
fn memdev_of_decoder(fs: &mut Sysfs<'_>, decoder: &str) -> Option<String> {
    let port = decoder.strip_prefix("decoder")?.split_once('.')?.0;
    fs.link_name(&fs.path(&format!("bus/cxl/devices/endpoint{port}/uport")))
}

fn read_dax(fs: &mut Sysfs<'_>) -> Vec<DaxDevice> {
    let bus = fs.path("bus/dax/devices");
    let names = fs.dir_names(&bus, Need::Optional, "dax devices are not shown").unwrap_or_default();
    let mut out = Vec::new();
    for name in names.iter().filter(|n| n.starts_with("dax")) {
        let dir = bus.join(name);
        let lost = |what: &str| format!("the {what} of dax device {name} is not known");
        out.push(DaxDevice {
            name: name.clone(),
            target_node: fs
                .parsed(&dir.join("target_node"), Need::Required, &lost("target node"), parse::optional_node)
                .flatten(),
            // Unlike the CXL attributes, dax prints its size in decimal.
            size_bytes: fs.parsed(&dir.join("size"), Need::Optional, &lost("size"), parse::decimal),
            resource: fs.parsed(&dir.join("resource"), Need::Optional, &lost("address"), parse::hex),
            driver: fs.link_name(&dir.join("driver")),
            cxl_region: fs
                .device_path_components(&dir)
                .into_iter()
                .rev()
                .find(|c| parse::numbered(c, "region").is_some()),
        });
    }
    out
}

/// Cross-references the three lists. Pure, so the linking rules are tested without files.
fn link(view: &mut CxlView, blocks: Option<&MemoryBlocks>) {
    // A dax device whose sysfs path did not show its region (a capture that flattened the
    // symlinks) still belongs to the region whose address range holds its start address.
    for dax in &mut view.dax {
        if dax.cxl_region.is_none() {
            if let Some(start) = dax.resource {
                dax.cxl_region = view.regions.iter().find(|r| region_contains(r, start)).map(|r| r.name.clone());
            }
        }
    }
    for region in &mut view.regions {
        let mut nodes = Vec::new();
        for dax in view.dax.iter().filter(|d| d.cxl_region.as_deref() == Some(region.name.as_str())) {
            region.dax_devices.push(dax.name.clone());
            nodes.extend(dax.target_node);
        }
        if let Some(blocks) = blocks {
            nodes.extend(nodes_of_range(region, blocks).into_keys());
        }
        nodes.sort_unstable();
        nodes.dedup();
        region.nodes = nodes;
    }
    for memdev in &mut view.memdevs {
        memdev.regions =
            view.regions.iter().filter(|r| r.memdevs.contains(&memdev.name)).map(|r| r.name.clone()).collect();
    }
}

fn region_contains(region: &CxlRegion, addr: u64) -> bool {
    match (region.resource, region.size_bytes) {
        (Some(start), Some(size)) if size > 0 => addr >= start && addr - start < size,
        _ => false,
    }
}

/// The memory blocks inside a region's address range, grouped by the node that owns them:
/// evidence that the region is online as that node even when no dax device says so.
pub(super) fn nodes_of_range(region: &CxlRegion, blocks: &MemoryBlocks) -> BTreeMap<u32, Vec<u64>> {
    let mut out: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    let (Some(start), Some(size)) = (region.resource, region.size_bytes) else {
        return out;
    };
    if size == 0 || blocks.block_size_bytes == 0 {
        return out;
    }
    let first = start / blocks.block_size_bytes;
    let last = start.saturating_add(size - 1) / blocks.block_size_bytes;
    for (&block, &node) in blocks.node_of_block.range(first..=last) {
        out.entry(node).or_default().push(block);
    }
    out
}

/// Reads the EDAC memory controllers; absent on machines without an EDAC driver.
pub(super) fn read_edac(fs: &mut Sysfs<'_>) -> Vec<EdacMc> {
    let dir = fs.path("devices/system/edac/mc");
    let names = fs.dir_names(&dir, Need::Optional, "EDAC memory controllers are not shown").unwrap_or_default();
    let mut out = Vec::new();
    for name in names.into_iter().filter(|n| parse::numbered(n, "mc").is_some()) {
        let mc = dir.join(&name);
        let lost = |what: &str| format!("the {what} of EDAC controller {name} is not shown");
        out.push(EdacMc {
            mc_name: fs.parsed(&mc.join("mc_name"), Need::Optional, &lost("name"), parse::text_value),
            ce_count: fs.parsed(&mc.join("ce_count"), Need::Required, &lost("corrected error count"), parse::decimal),
            ue_count: fs.parsed(&mc.join("ue_count"), Need::Required, &lost("uncorrected error count"), parse::decimal),
            name,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(name: &str, resource: u64, size: u64) -> CxlRegion {
        CxlRegion {
            name: name.into(),
            resource: Some(resource),
            size_bytes: Some(size),
            memdevs: vec!["mem0".into()],
            ..CxlRegion::default()
        }
    }

    fn blocks(pairs: &[(u64, u32)]) -> MemoryBlocks {
        MemoryBlocks { block_size_bytes: 128 << 20, node_of_block: pairs.iter().copied().collect() }
    }

    #[test]
    fn links_dax_to_region_by_path_or_address_and_region_to_nodes() {
        let cases = [
            // (dax region from path, dax resource, blocks, want region nodes, want dax region)
            (Some("region0"), None, None, vec![2], Some("region0")),
            (None, Some(0x5_d000_0000), None, vec![2], Some("region0")),
            (None, Some(0x1000), None, vec![], None),
            // No dax device on the region, but its blocks 186-187 are online on node 2.
            (None, None, Some(blocks(&[(0, 0), (186, 2), (187, 2), (188, 1)])), vec![2], None),
        ];
        for (path_region, resource, blocks, want_nodes, want_region) in cases {
            let has_dax = path_region.is_some() || resource.is_some();
            let mut view = CxlView {
                bus_present: true,
                memdevs: vec![CxlMemdev { name: "mem0".into(), ..CxlMemdev::default() }],
                regions: vec![region("region0", 0x5_d000_0000, 256 << 20)],
                dax: if has_dax {
                    vec![DaxDevice {
                        name: "dax0.0".into(),
                        target_node: Some(2),
                        resource,
                        cxl_region: path_region.map(String::from),
                        ..DaxDevice::default()
                    }]
                } else {
                    vec![]
                },
            };
            link(&mut view, blocks.as_ref());
            assert_eq!(view.regions[0].nodes, want_nodes, "{path_region:?} {resource:?}");
            assert_eq!(view.dax.first().and_then(|d| d.cxl_region.as_deref()), want_region);
            assert_eq!(view.memdevs[0].regions, vec!["region0".to_string()]);
        }
    }

    #[test]
    fn region_ranges_do_not_overflow() {
        let r = region("region9", u64::MAX - 10, u64::MAX);
        assert!(region_contains(&r, u64::MAX));
        assert!(!region_contains(&r, 0));
        let b = blocks(&[(0, 0)]);
        assert!(nodes_of_range(&r, &b).is_empty());
        assert!(nodes_of_range(&region("empty", 0, 0), &b).is_empty());
    }
}
