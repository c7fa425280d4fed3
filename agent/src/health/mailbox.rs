//! The CXL mailbox's Get Health Info command (opcode 0x4200), sent through the memdev's
//! character device (`/dev/cxl/memX`) the way the `cxl` tool does: `CXL_MEM_QUERY_COMMANDS` says
//! whether the device advertised the command (its Command Effects Log), `CXL_MEM_SEND_COMMAND`
//! runs it. A device that does not advertise it (QEMU's emulated one) is reported as such, never
//! as zeros.
use std::{fs::File, os::fd::AsRawFd, path::Path};

use serde::Serialize;

use super::meaning as m;

/// `CXL_MEM_COMMAND_ID_GET_HEALTH_INFO` in `include/uapi/linux/cxl_mem.h` (the 8th entry of
/// `CXL_CMDS`; ids are ABI and never renumbered).
pub const CMD_GET_HEALTH_INFO: u32 = 7;
/// `CXL_MEM_COMMAND_FLAG_ENABLED`: the device supports the command.
const FLAG_ENABLED: u32 = 1;
/// Get Health Info's output payload size (CXL 2.0 §8.2.9.5.3.1).
pub const HEALTH_INFO_LEN: usize = 0x12;

/// `struct cxl_command_info`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommandInfo {
    pub id: u32,
    pub flags: u32,
    pub size_in: u32,
    pub size_out: u32,
}

/// `struct cxl_send_command` (48 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct SendCommand {
    id: u32,
    flags: u32,
    raw: u32,
    retval: u32,
    in_size: u32,
    in_rsvd: u32,
    in_payload: u64,
    out_size: u32,
    out_rsvd: u32,
    out_payload: u64,
}
const _: () = assert!(std::mem::size_of::<SendCommand>() == 48);

/// `_IOC(dir, 0xCE, nr, size)`.
const fn ioc(dir: u64, nr: u64, size: u64) -> u64 {
    (dir << 30) | (size << 16) | (0xCE << 8) | nr
}
/// `_IOR(0xCE, 1, struct cxl_mem_query_commands)` (8 bytes: the header before the array).
const CXL_MEM_QUERY_COMMANDS: u64 = ioc(2, 1, 8);
/// `_IOWR(0xCE, 2, struct cxl_send_command)`.
const CXL_MEM_SEND_COMMAND: u64 = ioc(3, 2, 48);

/// What Get Health Info reported, decoded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HealthInfo {
    pub health_status: Vec<String>,
    #[serde(skip)]
    pub health_status_bits: u8,
    pub media_status: String,
    #[serde(skip)]
    pub media_status_code: u8,
    /// Levels of life used, temperature and the two corrected-error counters.
    pub additional_status: std::collections::BTreeMap<String, String>,
    pub life_used_percent: Option<u8>,
    pub temperature_c: Option<i16>,
    pub dirty_shutdowns: u32,
    pub corrected_volatile_errors: u32,
    pub corrected_persistent_errors: u32,
}

/// Decodes Get Health Info's output payload; `None` when it is too short.
pub fn parse_health_info(p: &[u8]) -> Option<HealthInfo> {
    if p.len() < HEALTH_INFO_LEN {
        return None;
    }
    let u32_at = |o: usize| u32::from_le_bytes([p[o], p[o + 1], p[o + 2], p[o + 3]]);
    // 0xff life used and 0xffff temperature mean "not implemented" in the specification.
    let life = (p[3] != 0xff).then_some(p[3]);
    let temp = u16::from_le_bytes([p[4], p[5]]);
    Some(HealthInfo {
        health_status: m::flags(None, m::HEALTH_STATUS, u64::from(p[0])),
        health_status_bits: p[0],
        media_status: m::symbol(None, m::MEDIA_STATUS, i64::from(p[1])),
        media_status_code: p[1],
        additional_status: m::additional_status(u64::from(p[2]))
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        life_used_percent: life,
        temperature_c: (temp != 0xffff).then_some(temp as i16),
        dirty_shutdowns: u32_at(6),
        corrected_volatile_errors: u32_at(10),
        corrected_persistent_errors: u32_at(14),
    })
}

/// Whether the command list advertises Get Health Info.
pub fn advertises_health_info(cmds: &[CommandInfo]) -> bool {
    cmds.iter().any(|c| c.id == CMD_GET_HEALTH_INFO && c.flags & FLAG_ENABLED != 0)
}

/// The outcome of asking one device.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum HealthInfoResult {
    Ok(HealthInfo),
    /// The device did not advertise the command.
    NotSupported {
        reason: String,
    },
    /// The command could not be run (no device node, permission, mailbox error).
    Failed {
        reason: String,
    },
}

/// Asks `/dev/cxl/<memdev>` (under `dev_root`, normally `/dev`) for its health.
pub fn read_health_info(dev_root: &Path, memdev: &str) -> HealthInfoResult {
    let path = dev_root.join("cxl").join(memdev);
    let fail =
        |what: &str, e: std::io::Error| HealthInfoResult::Failed { reason: format!("{}: {what}: {e}", path.display()) };
    let file = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return HealthInfoResult::Failed {
                reason: format!(
                    "{} does not exist: is the cxl_mem driver bound to {memdev}? (modprobe cxl_mem)",
                    path.display()
                ),
            }
        }
        Err(e) => return fail("cannot open it (the mailbox needs root)", e),
    };
    let cmds = match query_commands(&file) {
        Ok(c) => c,
        Err(e) => return fail("CXL_MEM_QUERY_COMMANDS failed", e),
    };
    if !advertises_health_info(&cmds) {
        return HealthInfoResult::NotSupported {
            reason: "not supported by this device (Get Health Info is not in its command list)".into(),
        };
    }
    let mut out = [0u8; HEALTH_INFO_LEN];
    let mut cmd = SendCommand {
        id: CMD_GET_HEALTH_INFO,
        out_size: HEALTH_INFO_LEN as u32,
        out_payload: out.as_mut_ptr() as u64,
        ..Default::default()
    };
    // SAFETY: `cmd` is a valid cxl_send_command whose out payload points at `out`, which lives
    // across the call and is as large as out_size says.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), CXL_MEM_SEND_COMMAND as _, &mut cmd as *mut SendCommand) };
    if rc < 0 {
        return fail("CXL_MEM_SEND_COMMAND (Get Health Info) failed", std::io::Error::last_os_error());
    }
    if cmd.retval != 0 {
        return HealthInfoResult::Failed {
            reason: format!("{}: Get Health Info returned mailbox status {:#x}", path.display(), cmd.retval),
        };
    }
    match parse_health_info(&out[..(cmd.out_size as usize).min(HEALTH_INFO_LEN)]) {
        Some(h) => HealthInfoResult::Ok(h),
        None => HealthInfoResult::Failed {
            reason: format!(
                "{}: Get Health Info returned {} bytes, expected {HEALTH_INFO_LEN}",
                path.display(),
                cmd.out_size
            ),
        },
    }
}

fn query_commands(file: &File) -> std::io::Result<Vec<CommandInfo>> {
    // First with room for none: the kernel answers with how many it has.
    let mut head = [0u32; 2];
    // SAFETY: an 8-byte cxl_mem_query_commands with n_commands = 0: the kernel writes only it.
    if unsafe { libc::ioctl(file.as_raw_fd(), CXL_MEM_QUERY_COMMANDS as _, head.as_mut_ptr()) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let n = head[0].min(1024) as usize;
    let mut buf = vec![0u32; 2 + 4 * n];
    buf[0] = n as u32;
    // SAFETY: the buffer holds the header and `n` cxl_command_info entries, as n_commands says.
    if unsafe { libc::ioctl(file.as_raw_fd(), CXL_MEM_QUERY_COMMANDS as _, buf.as_mut_ptr()) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let got = (buf[0] as usize).min(n);
    Ok((0..got)
        .map(|i| {
            let e = &buf[2 + 4 * i..2 + 4 * i + 4];
            CommandInfo { id: e[0], flags: e[1], size_in: e[2], size_out: e[3] }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_numbers_match_the_uapi_header() {
        assert_eq!(CXL_MEM_QUERY_COMMANDS, 0x8008_ce01);
        assert_eq!(CXL_MEM_SEND_COMMAND, 0xc030_ce02);
    }

    #[test]
    fn decodes_a_health_info_payload() {
        // Maintenance needed, media normal, life used warning + temperature critical, 87% used,
        // -5 °C, 2 dirty shutdowns, 300 corrected volatile and 1 persistent error.
        let mut p = vec![0x01, 0x00, 0b1001, 87, 0xfb, 0xff, 2, 0, 0, 0];
        p.extend(300u32.to_le_bytes());
        p.extend(1u32.to_le_bytes());
        let h = parse_health_info(&p).unwrap();
        assert_eq!(h.health_status, vec!["MAINTENANCE_NEEDED"]);
        assert_eq!(h.media_status, "Normal");
        assert_eq!(h.additional_status["life_used"], "Warning");
        assert_eq!(h.additional_status["device_temperature"], "Critical");
        assert_eq!((h.life_used_percent, h.temperature_c, h.dirty_shutdowns), (Some(87), Some(-5), 2));
        assert_eq!((h.corrected_volatile_errors, h.corrected_persistent_errors), (300, 1));
        assert_eq!(parse_health_info(&p[..17]), None);
        p[3] = 0xff;
        p[4] = 0xff;
        assert_eq!(parse_health_info(&p).map(|h| (h.life_used_percent, h.temperature_c)), Some((None, None)));
    }

    #[test]
    fn only_an_enabled_entry_counts_as_advertised() {
        let c = |id, flags| CommandInfo { id, flags, size_in: 0, size_out: 0 };
        assert!(!advertises_health_info(&[c(1, 1), c(7, 0)]), "listed but not enabled (QEMU)");
        assert!(advertises_health_info(&[c(1, 1), c(7, 1)]));
        assert!(!advertises_health_info(&[]));
    }

    #[test]
    fn a_missing_device_node_says_what_to_do() {
        let HealthInfoResult::Failed { reason } = read_health_info(Path::new("/nonexistent"), "mem0") else { panic!() };
        assert!(reason.contains("/nonexistent/cxl/mem0") && reason.contains("modprobe cxl_mem"), "{reason}");
    }
}
