//! Decoding ring-buffer records into model events. Pure: bytes in, [`Event`] out.
use tierscope_common::event::{
    EventHeader, EventKind, HealthSource, HealthTraceEvent, LifecycleEvent, PolicyEvent, PolicySyscall, RawSource,
    RawTraceEvent,
};

use crate::{
    model::{
        event::{Event, NumaMove, NumaMoveKind, PolicyDecision},
        policy,
    },
    trace_format::EventFormat,
};

/// Why a record could not be decoded (counted, never fatal).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("record of {0} bytes is shorter than its kind needs")]
    Short(usize),
    #[error("unknown event kind {0}")]
    UnknownKind(u32),
    #[error("unknown raw source {0} or no format for it")]
    NoFormat(u32),
}

/// Decodes records; holds the format files needed for raw tracepoint copies.
#[derive(Clone, Debug, Default)]
pub struct Decoder {
    pub raw_formats: Vec<(RawSource, EventFormat)>,
    /// Formats of the CXL/RAS events this kernel has.
    pub health_formats: Vec<(HealthSource, crate::health::HealthFormat)>,
}

fn read<T: Copy>(buf: &[u8]) -> Result<T, DecodeError> {
    if buf.len() < std::mem::size_of::<T>() {
        return Err(DecodeError::Short(buf.len()));
    }
    // SAFETY: length checked; T is a plain #[repr(C)] integer struct; read_unaligned copes
    // with any alignment.
    Ok(unsafe { std::ptr::read_unaligned(buf.as_ptr().cast::<T>()) })
}

fn comm(raw: &[u8]) -> String {
    let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
    String::from_utf8_lossy(&raw[..end]).into_owned()
}

impl Decoder {
    pub fn decode(&self, buf: &[u8]) -> Result<Event, DecodeError> {
        let h: EventHeader = read(buf)?;
        match EventKind::from_u32(h.kind) {
            Some(EventKind::Exec) => {
                let e: LifecycleEvent = read(buf)?;
                Ok(Event::Exec { tgid: h.tgid, comm: comm(&e.comm), ts_ns: h.ts_ns })
            }
            Some(EventKind::Exit) => {
                let e: LifecycleEvent = read(buf)?;
                Ok(Event::Exit { tgid: h.tgid, comm: comm(&e.comm), ts_ns: h.ts_ns })
            }
            Some(EventKind::Policy) => Ok(Event::Policy(decode_policy(&read::<PolicyEvent>(buf)?))),
            Some(EventKind::RawTrace) => self.decode_raw(&read::<RawTraceEvent>(buf)?),
            Some(EventKind::HealthTrace) => self.decode_health(&read::<HealthTraceEvent>(buf)?),
            // Site samples come through their own ring buffer (`collect::sites`), never this one.
            Some(EventKind::SiteSample | EventKind::CpuSample) | None => Err(DecodeError::UnknownKind(h.kind)),
        }
    }

    fn decode_raw(&self, e: &RawTraceEvent) -> Result<Event, DecodeError> {
        let source = RawSource::from_u32(e.source).ok_or(DecodeError::NoFormat(e.source))?;
        let (_, fmt) = self.raw_formats.iter().find(|(s, _)| *s == source).ok_or(DecodeError::NoFormat(e.source))?;
        let data = &e.data[..(e.len as usize).min(e.data.len())];
        let int = |names: &[&str]| -> Option<i64> {
            let f = names.iter().find_map(|n| fmt.field(n))?;
            let b = data.get(f.offset..f.offset + f.size)?;
            Some(match f.size {
                4 => i32::from_ne_bytes(b.try_into().ok()?) as i64,
                8 => i64::from_ne_bytes(b.try_into().ok()?),
                2 => i16::from_ne_bytes(b.try_into().ok()?) as i64,
                _ => return None,
            })
        };
        let kind = match source {
            RawSource::SchedMoveNuma => NumaMoveKind::Move,
            RawSource::SchedSwapNuma => NumaMoveKind::Swap,
            RawSource::SchedStickNuma => NumaMoveKind::Stick,
        };
        Ok(Event::NumaMove(NumaMove {
            kind,
            tgid: int(&["tgid", "src_tgid"]).map_or(e.header.tgid, |v| v as u32),
            pid: int(&["pid", "src_pid"]).map_or(e.header.pid, |v| v as u32),
            src_nid: int(&["src_nid"]).unwrap_or(-1) as i32,
            dst_nid: int(&["dst_nid"]).unwrap_or(-1) as i32,
            ts_ns: e.header.ts_ns,
        }))
    }
}

impl Decoder {
    fn decode_health(&self, e: &HealthTraceEvent) -> Result<Event, DecodeError> {
        let source = HealthSource::from_u32(e.source).ok_or(DecodeError::NoFormat(e.source))?;
        let (_, fmt) = self.health_formats.iter().find(|(s, _)| *s == source).ok_or(DecodeError::NoFormat(e.source))?;
        let data = &e.data[..(e.len as usize).min(e.data.len())];
        Ok(Event::Health(crate::health::event::decode(source, fmt, data, e.header.ts_ns, e.header.pid)))
    }
}

fn decode_policy(e: &PolicyEvent) -> PolicyDecision {
    let a = e.args;
    let mask = |maxnode: u64| if e.nodemask_valid != 0 { policy::mask_nodes(e.nodemask, maxnode) } else { vec![] };
    let mut d = PolicyDecision {
        tgid: e.header.tgid,
        tid: e.header.pid,
        ts_ns: e.header.ts_ns,
        syscall: "unknown",
        mode: None,
        flags: vec![],
        nodes: vec![],
        start: None,
        len: None,
        target_pid: None,
    };
    match PolicySyscall::from_u32(e.syscall) {
        Some(PolicySyscall::Mbind) => {
            d.syscall = "mbind";
            d.start = Some(a[0]);
            d.len = Some(a[1]);
            d.mode = Some(policy::mode_name(a[2]));
            d.flags = policy::mode_flags(a[2]);
            d.flags.extend(policy::mbind_flags(a[5]));
            d.nodes = mask(a[4]);
        }
        Some(PolicySyscall::SetMempolicy) => {
            d.syscall = "set_mempolicy";
            d.mode = Some(policy::mode_name(a[0]));
            d.flags = policy::mode_flags(a[0]);
            d.nodes = mask(a[2]);
        }
        Some(PolicySyscall::SetMempolicyHomeNode) => {
            d.syscall = "set_mempolicy_home_node";
            d.start = Some(a[0]);
            d.len = Some(a[1]);
            d.nodes = vec![a[2] as u32];
        }
        Some(PolicySyscall::MovePages) => {
            d.syscall = "move_pages";
            d.target_pid = Some(a[0] as u32);
            // `nodes` is an int array: the first two targets, when given.
            if e.nodemask_valid != 0 {
                let n = a[1].min(2) as usize;
                d.nodes = [e.nodemask as u32, (e.nodemask >> 32) as u32][..n].to_vec();
            }
        }
        Some(PolicySyscall::MigratePages) => {
            d.syscall = "migrate_pages";
            d.target_pid = Some(a[0] as u32);
            d.nodes = mask(a[1]);
        }
        None => {}
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes<T>(v: &T) -> Vec<u8> {
        // SAFETY: reading the bytes of a plain #[repr(C)] value.
        unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()).to_vec() }
    }

    fn header(kind: EventKind) -> EventHeader {
        EventHeader { kind: kind as u32, tgid: 100, pid: 101, cpu: 1, ts_ns: 5 }
    }

    #[test]
    fn decodes_mbind_with_mode_flags_and_mask() {
        let e = PolicyEvent {
            header: header(EventKind::Policy),
            syscall: PolicySyscall::Mbind as u32,
            nodemask_valid: 1,
            args: [0x7f00_0000_0000, 1 << 21, 2 | 1 << 15, 0xdead, 65, 2],
            nodemask: 0b110,
        };
        let Event::Policy(d) = Decoder::default().decode(&bytes(&e)).unwrap() else { panic!() };
        assert_eq!((d.syscall, d.mode.as_deref(), d.tgid, d.tid), ("mbind", Some("MPOL_BIND"), 100, 101));
        assert_eq!(d.nodes, vec![1, 2]);
        assert_eq!(d.flags, vec!["MPOL_F_STATIC_NODES", "MPOL_MF_MOVE"]);
        assert_eq!((d.start, d.len), (Some(0x7f00_0000_0000), Some(1 << 21)));
    }

    #[test]
    fn decodes_set_mempolicy_without_a_readable_mask() {
        let e = PolicyEvent {
            header: header(EventKind::Policy),
            syscall: PolicySyscall::SetMempolicy as u32,
            nodemask_valid: 0,
            args: [3, 0, 64, 0, 0, 0],
            nodemask: 0xff,
        };
        let Event::Policy(d) = Decoder::default().decode(&bytes(&e)).unwrap() else { panic!() };
        assert_eq!((d.mode.as_deref(), d.nodes.len()), (Some("MPOL_INTERLEAVE"), 0));
    }

    #[test]
    fn decodes_exec_and_rejects_short_or_unknown_records() {
        let mut comm = [0u8; 16];
        comm[..7].copy_from_slice(b"python3");
        let e = LifecycleEvent { header: header(EventKind::Exec), comm };
        assert_eq!(
            Decoder::default().decode(&bytes(&e)),
            Ok(Event::Exec { tgid: 100, comm: "python3".into(), ts_ns: 5 })
        );
        assert_eq!(Decoder::default().decode(&bytes(&e)[..30]), Err(DecodeError::Short(30)));
        assert_eq!(Decoder::default().decode(&[0; 3]), Err(DecodeError::Short(3)));
        let exit = LifecycleEvent { header: header(EventKind::Exit), comm };
        assert_eq!(
            Decoder::default().decode(&bytes(&exit)),
            Ok(Event::Exit { tgid: 100, comm: "python3".into(), ts_ns: 5 })
        );
        let mut h = header(EventKind::Exit);
        h.kind = 99;
        assert_eq!(Decoder::default().decode(&bytes(&h)), Err(DecodeError::UnknownKind(99)));
    }

    #[test]
    fn decodes_sched_swap_numa_with_the_format_files_offsets() {
        let fmt =
            EventFormat::parse(include_str!("../../fixtures/tracefs/host-6.18/sched/sched_swap_numa/format")).unwrap();
        let mut data = [0u8; 64];
        let mut put = |name: &str, v: i32| {
            let f = fmt.field(name).unwrap();
            data[f.offset..f.offset + 4].copy_from_slice(&v.to_ne_bytes());
        };
        put("src_pid", 4001);
        put("src_tgid", 4000);
        put("src_nid", 0);
        put("dst_nid", 1);
        let e = RawTraceEvent {
            header: header(EventKind::RawTrace),
            source: RawSource::SchedSwapNuma as u32,
            len: 64,
            data,
        };
        let d = Decoder { raw_formats: vec![(RawSource::SchedSwapNuma, fmt)], ..Default::default() };
        let Event::NumaMove(m) = d.decode(&bytes(&e)).unwrap() else { panic!() };
        assert_eq!((m.kind, m.tgid, m.pid, m.src_nid, m.dst_nid), (NumaMoveKind::Swap, 4000, 4001, 0, 1));
        assert_eq!(Decoder::default().decode(&bytes(&e)), Err(DecodeError::NoFormat(2)));
    }
}
