//! Memory policy words: mode numbers and flag bits of `<linux/mempolicy.h>`.

/// The name of a memory-policy mode (without flag bits).
pub fn mode_name(mode: u64) -> String {
    match mode & 0xff {
        0 => "MPOL_DEFAULT".into(),
        1 => "MPOL_PREFERRED".into(),
        2 => "MPOL_BIND".into(),
        3 => "MPOL_INTERLEAVE".into(),
        4 => "MPOL_LOCAL".into(),
        5 => "MPOL_PREFERRED_MANY".into(),
        6 => "MPOL_WEIGHTED_INTERLEAVE".into(),
        other => format!("MPOL_{other}"),
    }
}

/// Mode flags carried in the high bits of the mode argument.
pub fn mode_flags(mode: u64) -> Vec<&'static str> {
    let mut f = Vec::new();
    if mode & (1 << 15) != 0 {
        f.push("MPOL_F_STATIC_NODES");
    }
    if mode & (1 << 14) != 0 {
        f.push("MPOL_F_RELATIVE_NODES");
    }
    if mode & (1 << 13) != 0 {
        f.push("MPOL_F_NUMA_BALANCING");
    }
    f
}

/// mbind's `flags` argument.
pub fn mbind_flags(flags: u64) -> Vec<&'static str> {
    let mut f = Vec::new();
    if flags & 1 != 0 {
        f.push("MPOL_MF_STRICT");
    }
    if flags & 2 != 0 {
        f.push("MPOL_MF_MOVE");
    }
    if flags & 4 != 0 {
        f.push("MPOL_MF_MOVE_ALL");
    }
    f
}

/// Node ids set in a mask, limited to the first `maxnode` bits (the syscalls' convention).
pub fn mask_nodes(mask: u64, maxnode: u64) -> Vec<u32> {
    (0..64u32).filter(|&b| (b as u64) < maxnode && mask & (1 << b) != 0).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_modes_and_flags() {
        assert_eq!(mode_name(2), "MPOL_BIND");
        assert_eq!(mode_name(2 | 1 << 15), "MPOL_BIND");
        assert_eq!(mode_flags(2 | 1 << 15), vec!["MPOL_F_STATIC_NODES"]);
        assert_eq!(mode_name(6), "MPOL_WEIGHTED_INTERLEAVE");
        assert_eq!(mode_name(42), "MPOL_42");
        assert_eq!(mbind_flags(3), vec!["MPOL_MF_STRICT", "MPOL_MF_MOVE"]);
    }

    #[test]
    fn mask_respects_maxnode() {
        assert_eq!(mask_nodes(0b1011, 64), vec![0, 1, 3]);
        assert_eq!(mask_nodes(0b1011, 2), vec![0, 1]);
        assert_eq!(mask_nodes(u64::MAX, 0), Vec::<u32>::new());
        assert_eq!(mask_nodes(1 << 63, 1025), vec![63]);
    }
}
