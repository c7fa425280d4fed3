//! Where the running kernel's `struct page` flags keep the page's node, from its build config.
//!
//! With `CONFIG_SPARSEMEM_VMEMMAP` (every 64-bit distribution kernel) the flags word holds no
//! section number, and the node's `CONFIG_NODES_SHIFT` bits are its topmost
//! (`include/linux/page-flags-layout.h`): the node is `flags >> (64 - NODES_SHIFT)`. The page
//! programs read it only for a page whose memory block the agent has not read yet (memory
//! onlined since), and check it against the block table on about one event in 1,024 (the agent
//! stops reading it at the first disagreement).
use std::{io::Read as _, path::Path};

/// Where a kernel's build config may be, in order: the distributions' copy in /boot (the
/// running release's), the kernel's own (`CONFIG_IKCONFIG_PROC`), and the module build tree's.
fn sources(release: &str) -> [String; 3] {
    [format!("/boot/config-{release}"), "/proc/config.gz".into(), format!("/lib/modules/{release}/build/.config")]
}

/// At most this much of a config file is read (a config is about 300 KB).
const CONFIG_MAX_BYTES: u64 = 4 << 20;

/// The flags' node shift of the running kernel and the file it came from, or why it is not known.
pub fn node_shift() -> Result<(u32, String), String> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").map_err(|e| format!("kernel release: {e}"))?;
    let release = release.trim();
    let mut tried = Vec::new();
    for path in sources(release) {
        match read_config(Path::new(&path)) {
            Ok(text) => {
                return node_shift_from_config(&text).map(|s| (s, path.clone())).map_err(|e| format!("{path}: {e}"))
            }
            Err(e) => tried.push(format!("{path}: {e}")),
        }
    }
    Err(format!("no kernel config found ({})", tried.join("; ")))
}

fn read_config(path: &Path) -> std::io::Result<String> {
    let file = std::fs::File::open(path)?;
    let mut text = String::new();
    if path.extension().is_some_and(|e| e == "gz") {
        flate2::read::GzDecoder::new(file).take(CONFIG_MAX_BYTES).read_to_string(&mut text)?;
    } else {
        file.take(CONFIG_MAX_BYTES).read_to_string(&mut text)?;
    }
    Ok(text)
}

/// The shift from a config's text. Pure.
pub fn node_shift_from_config(text: &str) -> Result<u32, String> {
    let value = |key: &str| {
        text.lines().find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix('=')).map(|v| v.trim().to_string()))
    };
    if value("CONFIG_64BIT").as_deref() != Some("y") {
        return Err("not a 64-bit kernel".into());
    }
    if value("CONFIG_SPARSEMEM_VMEMMAP").as_deref() != Some("y") {
        return Err("CONFIG_SPARSEMEM_VMEMMAP is off: the flags may keep a section number above the node".into());
    }
    if value("CONFIG_NUMA").as_deref() != Some("y") {
        return Err("CONFIG_NUMA is off: one node".into());
    }
    let bits: u32 = value("CONFIG_NODES_SHIFT")
        .ok_or("no CONFIG_NODES_SHIFT")?
        .parse()
        .map_err(|_| "CONFIG_NODES_SHIFT is not a number")?;
    if !(1..=10).contains(&bits) {
        return Err(format!("CONFIG_NODES_SHIFT={bits} is outside 1..=10"));
    }
    Ok(64 - bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEBIAN: &str = "#\n# Automatically generated file; DO NOT EDIT.\nCONFIG_64BIT=y\nCONFIG_NUMA=y\nCONFIG_NODES_SHIFT=10\nCONFIG_SPARSEMEM_VMEMMAP_ENABLE=y\nCONFIG_SPARSEMEM_VMEMMAP=y\n";

    #[test]
    fn a_distribution_kernel_keeps_the_node_in_the_top_ten_bits() {
        assert_eq!(node_shift_from_config(DEBIAN), Ok(54));
        assert_eq!(node_shift_from_config(&DEBIAN.replace("NODES_SHIFT=10", "NODES_SHIFT=6")), Ok(58));
    }

    #[test]
    fn a_layout_it_cannot_read_is_refused_with_its_reason() {
        let no_vmemmap = DEBIAN.replace("CONFIG_SPARSEMEM_VMEMMAP=y\n", "# CONFIG_SPARSEMEM_VMEMMAP is not set\n");
        assert!(node_shift_from_config(&no_vmemmap).expect_err("refused").contains("SPARSEMEM_VMEMMAP"));
        assert!(node_shift_from_config(&DEBIAN.replace("CONFIG_64BIT=y", "")).expect_err("refused").contains("64-bit"));
        assert!(node_shift_from_config(&DEBIAN.replace("CONFIG_NUMA=y", "")).expect_err("refused").contains("NUMA"));
        assert!(node_shift_from_config(&DEBIAN.replace("=10", "=x")).expect_err("refused").contains("not a number"));
        assert!(node_shift_from_config(&DEBIAN.replace("=10", "=12")).expect_err("refused").contains("outside"));
        assert!(node_shift_from_config("").is_err());
    }

    #[test]
    fn a_prefix_of_another_key_is_not_taken_for_it() {
        // `CONFIG_SPARSEMEM_VMEMMAP_ENABLE=y` alone is not `CONFIG_SPARSEMEM_VMEMMAP=y`.
        let only_enable = DEBIAN.replace("CONFIG_SPARSEMEM_VMEMMAP=y\n", "");
        assert!(node_shift_from_config(&only_enable).is_err());
    }

    #[test]
    fn this_machines_config_is_read_or_its_absence_said() {
        match node_shift() {
            Ok((shift, from)) => assert!((54..64).contains(&shift), "{shift} from {from}"),
            Err(e) => assert!(e.contains("config") || e.contains("CONFIG_"), "{e}"),
        }
    }
}
