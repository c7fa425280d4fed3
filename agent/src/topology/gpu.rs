//! GPUs: PCI display and 3D controllers from sysfs (`bus/pci/devices/*/{class,vendor,device,numa_node}`)
//! and, where the NVIDIA driver shows them, their model, UUID and device minor
//! (`/proc/driver/nvidia/gpus/<pci>/information`) and the NUMA node of their coherent memory
//! (`.../numa_status`, present on GH200/GB200-style machines). The driver's files are untrusted
//! text: read bounded, every value cleaned and capped.
use std::{
    io::Read,
    path::{Path, PathBuf},
};

use super::{
    parse,
    sysfs::{Need, Sysfs},
};

/// PCI class codes (`class` >> 8): VGA-compatible display controller and 3D controller.
const CLASS_VGA: u32 = 0x0300;
const CLASS_3D: u32 = 0x0302;
/// The most of a driver file read: `information` is about 400 bytes.
const MAX_DRIVER_FILE: u64 = 16 * 1024;
/// The longest value kept from a driver file.
const MAX_VALUE: usize = 96;

/// One GPU (or other display controller) on the PCI bus.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Gpu {
    /// PCI address, `0000:18:00.0`.
    pub pci_address: String,
    /// `nvidia`, `amd`, `intel`, `aspeed`..., or the vendor id in hex.
    pub vendor: String,
    pub vendor_id: u16,
    pub device_id: u16,
    /// `3d` (a 3D controller: datacenter GPUs) or `vga` (a display controller; a server's BMC
    /// shows as one).
    pub kind: String,
    /// The NUMA node the device hangs off (`numa_node`); `None` where the firmware says nothing (-1).
    pub numa_node: Option<u32>,
    /// From the driver's `information`, when present.
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub uuid: Option<String>,
    /// `Device Minor`: the process holding `/dev/nvidia<minor>` open drives this GPU.
    #[serde(default)]
    pub minor: Option<u32>,
    /// The node the GPU's own memory is onlined as (driver `numa_status`), and its status and size.
    #[serde(default)]
    pub memory_node: Option<u32>,
    #[serde(default)]
    pub memory_status: Option<String>,
    #[serde(default)]
    pub memory_bytes: Option<u64>,
}

impl Gpu {
    /// CUDA enumerates NVIDIA devices only.
    pub fn is_cuda(&self) -> bool {
        self.vendor_id == 0x10de
    }

    /// The GPU in words for views: `NVIDIA H200 (0000:18:00.0)`.
    pub fn label(&self) -> String {
        match &self.model {
            Some(m) => format!("{m} ({})", self.pci_address),
            None => format!("{} {} ({})", self.vendor, self.kind, self.pci_address),
        }
    }
}

/// Where the NVIDIA driver's per-GPU files are for a sysfs root: `/proc/driver/nvidia` for the
/// real `/sys`, else `proc/driver/nvidia` inside the given tree (fixture trees carry them there;
/// no real sysfs has a `proc` directory).
pub fn driver_root(sysfs_root: &Path) -> PathBuf {
    if sysfs_root == Path::new("/sys") {
        PathBuf::from("/proc/driver/nvidia")
    } else {
        sysfs_root.join("proc/driver/nvidia")
    }
}

pub(super) fn read_gpus(fs: &mut Sysfs<'_>, driver: &Path) -> Vec<Gpu> {
    let dir = fs.path("bus/pci/devices");
    let names = fs.dir_names(&dir, Need::Optional, "the GPUs are not known").unwrap_or_default();
    let mut gpus = Vec::new();
    for name in names.iter().filter(|n| is_pci_address(n)) {
        let dev = dir.join(name);
        let lost = format!("PCI device {name} is not known");
        let Some(class) = fs.parsed(&dev.join("class"), Need::Optional, &lost, parse::hex) else { continue };
        let kind = match (class >> 8) as u32 {
            CLASS_VGA => "vga",
            CLASS_3D => "3d",
            _ => continue,
        };
        let lost = format!("GPU {name}'s identity is not known");
        let vendor_id = fs.parsed(&dev.join("vendor"), Need::Required, &lost, parse::hex).unwrap_or(0) as u16;
        let device_id = fs.parsed(&dev.join("device"), Need::Required, &lost, parse::hex).unwrap_or(0) as u16;
        let numa_node = fs
            .parsed(
                &dev.join("numa_node"),
                Need::Optional,
                &format!("GPU {name}'s NUMA node is not known"),
                parse::optional_node,
            )
            .flatten();
        let mut gpu = Gpu {
            pci_address: name.clone(),
            vendor: vendor_name(vendor_id),
            vendor_id,
            device_id,
            kind: kind.into(),
            numa_node,
            ..Gpu::default()
        };
        let gdir = driver.join("gpus").join(name);
        if let Some(text) = bounded_text(fs, &gdir.join("information")) {
            let info = parse_information(&text);
            gpu.model = info.model;
            gpu.uuid = info.uuid;
            gpu.minor = info.minor;
        }
        if let Some(text) = bounded_text(fs, &gdir.join("numa_status")) {
            let status = parse_numa_status(&text);
            gpu.memory_node = status.node;
            gpu.memory_status = status.status;
            gpu.memory_bytes = status.size_bytes;
        }
        gpus.push(gpu);
    }
    gpus
}

/// A driver file's text, at most [`MAX_DRIVER_FILE`] bytes; absent is normal (no driver).
fn bounded_text(fs: &mut Sysfs<'_>, path: &Path) -> Option<String> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            fs.problems.push(format!(
                "{}: cannot read ({e}); that GPU's model and memory node are not known. Run as root to read the NVIDIA driver's files",
                path.display()
            ));
            return None;
        }
    };
    let mut bytes = Vec::new();
    if let Err(e) = file.take(MAX_DRIVER_FILE).read_to_end(&mut bytes) {
        fs.problems
            .push(format!("{}: cannot read ({e}); that GPU's model and memory node are not known", path.display()));
        return None;
    }
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// `0000:18:00.0`: domain, bus, device, function in hex.
fn is_pci_address(name: &str) -> bool {
    let b = name.as_bytes();
    name.len() >= 12
        && name.split([':', '.']).count() == 4
        && b.iter().all(|c| c.is_ascii_hexdigit() || *c == b':' || *c == b'.')
}

fn vendor_name(id: u16) -> String {
    match id {
        0x10de => "nvidia".into(),
        0x1002 => "amd".into(),
        0x8086 => "intel".into(),
        0x1a03 => "aspeed".into(),
        0x1d17 => "zhaoxin".into(),
        other => format!("{other:#06x}"),
    }
}

/// What the driver's `information` file says.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct DriverInformation {
    pub model: Option<String>,
    pub uuid: Option<String>,
    pub minor: Option<u32>,
}

/// `Model: \t\t NVIDIA H200` ... `Device Minor: \t 0`: `Key: value` lines, values cleaned.
pub fn parse_information(text: &str) -> DriverInformation {
    let mut info = DriverInformation::default();
    for (key, value) in key_values(text) {
        match key {
            "Model" => info.model = clean(value),
            "GPU UUID" => info.uuid = clean(value),
            "Device Minor" => info.minor = value.parse().ok().filter(|&m| m <= parse::MAX_LIST_ID),
            _ => {}
        }
    }
    info
}

/// What the driver's `numa_status` says: `Node: 1`, `Status: online`, `Size: <hex>`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct NumaStatus {
    pub node: Option<u32>,
    pub status: Option<String>,
    pub size_bytes: Option<u64>,
}

pub fn parse_numa_status(text: &str) -> NumaStatus {
    let mut s = NumaStatus::default();
    for (key, value) in key_values(text) {
        match key {
            // -1 while the GPU's memory has no node.
            "Node" => {
                s.node =
                    value.parse::<i64>().ok().filter(|n| (0..=parse::MAX_LIST_ID as i64).contains(n)).map(|n| n as u32)
            }
            "Status" => s.status = clean(value),
            "Size" => s.size_bytes = u64::from_str_radix(value.trim_start_matches("0x"), 16).ok(),
            _ => {}
        }
    }
    s
}

fn key_values(text: &str) -> impl Iterator<Item = (&str, &str)> {
    text.lines().filter_map(|l| {
        let (k, v) = l.split_once(':')?;
        Some((k.trim(), v.trim()))
    })
}

/// Printable characters only, at most [`MAX_VALUE`] of them; nothing left is `None`.
fn clean(value: &str) -> Option<String> {
    let s: String = value.chars().filter(|c| !c.is_control()).take(MAX_VALUE).collect();
    let s = s.trim().to_string();
    (!s.is_empty()).then_some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn information_fields() {
        // The layout of open-gpu-kernel-modules' nv-procfs.c (`Model: \t\t %s`, ...).
        let h200 = "Model: \t\t NVIDIA H200\nIRQ:   \t\t 35\nGPU UUID: \t GPU-5e8c1a2b-0d3f-4c1e-9a7b-1f2e3d4c5b6a\n\
                    Video BIOS: \t 96.00.a5.00.01\nBus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\n\
                    Bus Location: \t 0000:18:00.0\nDevice Minor: \t 3\nGPU Excluded:\t No\n";
        // Captured on the GPU machine (driver 580.159.04, one H200 in a VM), 2026-12-02.
        let captured = "Model: \t\t NVIDIA H200\nIRQ:   \t\t 41\nGPU UUID: \t GPU-ae3a9903-20d7-ddb6-121b-7aa0f52856b5\n\
                        Video BIOS: \t 96.00.a5.00.1a\nBus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\n\
                        Bus Location: \t 0000:00:06.0\nDevice Minor: \t 0\nGPU Firmware: \t 580.159.04\nGPU Excluded:\t No\n";
        let cases: &[(&str, &str, DriverInformation)] = &[
            (
                "captured h200",
                captured,
                DriverInformation {
                    model: Some("NVIDIA H200".into()),
                    uuid: Some("GPU-ae3a9903-20d7-ddb6-121b-7aa0f52856b5".into()),
                    minor: Some(0),
                },
            ),
            (
                "h200",
                h200,
                DriverInformation {
                    model: Some("NVIDIA H200".into()),
                    uuid: Some("GPU-5e8c1a2b-0d3f-4c1e-9a7b-1f2e3d4c5b6a".into()),
                    minor: Some(3),
                },
            ),
            ("empty", "", DriverInformation::default()),
            ("garbage", "Model: \x1b\u{7}\nDevice Minor: -4\nDevice Minor: 99999999\n", DriverInformation::default()),
            (
                "control characters dropped",
                "Model: A\x1bB\tC\n",
                DriverInformation { model: Some("ABC".into()), ..Default::default() },
            ),
        ];
        for (name, text, want) in cases {
            assert_eq!(&parse_information(text), want, "{name}");
        }
        let long = format!("Model: {}\n", "x".repeat(10_000));
        assert_eq!(parse_information(&long).model.map(|m| m.len()), Some(MAX_VALUE));
    }

    #[test]
    fn numa_status_fields() {
        let gh200 = "Node:      1\nStatus:    online\nAddress:   400000000000\nSize:      17f0000000\n";
        assert_eq!(
            parse_numa_status(gh200),
            NumaStatus { node: Some(1), status: Some("online".into()), size_bytes: Some(0x17f0000000) }
        );
        let not_ready = "Node:      -1\nStatus:    offline\n";
        assert_eq!(
            parse_numa_status(not_ready),
            NumaStatus { node: None, status: Some("offline".into()), size_bytes: None }
        );
        assert_eq!(parse_numa_status("Node: x\nSize: zz\n"), NumaStatus::default());
    }

    #[test]
    fn pci_addresses() {
        for (name, want) in [
            ("0000:18:00.0", true),
            ("0009:01:00.0", true),
            ("pci0000:00", false),
            ("0000:18:00", false),
            ("..", false),
        ] {
            assert_eq!(is_pci_address(name), want, "{name}");
        }
    }
}
