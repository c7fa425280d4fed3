//! EDAC error counters: per memory controller (`/sys/devices/system/edac/mc/mcN/{ce,ue}_count`)
//! and per DIMM (`mcN/dimmM/dimm_{ce,ue}_count`, `dimm_label`). Host DRAM errors, beside the
//! CXL devices' own reports.
use std::path::Path;

use serde::Serialize;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct EdacCounts {
    /// `mc0`, or `mc0/dimm1`.
    pub name: String,
    /// The controller's `mc_name` or the DIMM's `dimm_label`, when set.
    pub label: Option<String>,
    pub ce_count: Option<u64>,
    pub ue_count: Option<u64>,
}

/// Reads every controller and DIMM under `sysfs` (normally `/sys`). No EDAC driver: empty.
pub fn read(sysfs: &Path) -> Vec<EdacCounts> {
    let root = sysfs.join("devices/system/edac/mc");
    let mut out = Vec::new();
    for mc in numbered(&root, "mc") {
        let dir = root.join(&mc);
        out.push(EdacCounts {
            label: text(&dir.join("mc_name")),
            ce_count: number(&dir.join("ce_count")),
            ue_count: number(&dir.join("ue_count")),
            name: mc.clone(),
        });
        // Older kernels call them rankN (csrow layouts): same files, same meaning.
        for prefix in ["dimm", "rank"] {
            for d in numbered(&dir, prefix) {
                let dd = dir.join(&d);
                out.push(EdacCounts {
                    name: format!("{mc}/{d}"),
                    label: text(&dd.join("dimm_label")),
                    ce_count: number(&dd.join("dimm_ce_count")),
                    ue_count: number(&dd.join("dimm_ue_count")),
                });
            }
        }
    }
    out
}

/// `prefixN` entries, sorted by N.
fn numbered(dir: &Path, prefix: &str) -> Vec<String> {
    let mut v: Vec<(u64, String)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.strip_prefix(prefix).and_then(|i| i.parse().ok()).map(|i| (i, n))
        })
        .collect();
    v.sort();
    v.into_iter().map(|(_, n)| n).collect()
}

fn text(p: &Path) -> Option<String> {
    std::fs::read_to_string(p).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

fn number(p: &Path) -> Option<u64> {
    text(p)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_controllers_and_dimms_and_skips_garbage() {
        let dir = std::env::temp_dir().join(format!("tierscope-edac-{}", std::process::id()));
        let mc = dir.join("devices/system/edac/mc");
        for (p, v) in [
            ("mc0/ce_count", "12\n"),
            ("mc0/ue_count", "0\n"),
            ("mc0/mc_name", "Skylake Socket#0 IMC#0\n"),
            ("mc0/dimm2/dimm_ce_count", "12\n"),
            ("mc0/dimm2/dimm_ue_count", "x\n"),
            ("mc0/dimm2/dimm_label", "CPU_SrcID#0_MC#0_Chan#1_DIMM#0\n"),
            ("mc0/dimm10/dimm_ce_count", "0\n"),
            ("mc0/power/control", "auto\n"),
        ] {
            let p = mc.join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, v).unwrap();
        }
        let r = read(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(r.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), vec!["mc0", "mc0/dimm2", "mc0/dimm10"]);
        assert_eq!(
            (r[0].ce_count, r[0].ue_count, r[0].label.as_deref()),
            (Some(12), Some(0), Some("Skylake Socket#0 IMC#0"))
        );
        assert_eq!((r[1].ce_count, r[1].ue_count), (Some(12), None));
        assert!(read(Path::new("/nonexistent")).is_empty());
    }
}
