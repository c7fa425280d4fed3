//! A small reader of the kernel's BTF (`/sys/kernel/btf/vmlinux`): enough to find where a struct
//! keeps a field, so kernel programs can read fields whose offsets change with every kernel
//! config (handed over as globals, like the tracepoint layouts). The parser is pure over bytes.
//!
//! Format: `Documentation/bpf/btf.rst` — a header, a type section of variable-length records
//! (ids from 1 in order), and a string section the records point into.
use std::path::Path;

use tierscope_common::layout::TaskLayout;

const MAGIC: u16 = 0xeb9f;
const HEADER_LEN: usize = 24;
const TYPE_LEN: usize = 12;

const KIND_INT: u32 = 1;
const KIND_PTR: u32 = 2;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_FWD: u32 = 7;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_FUNC: u32 = 12;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_FLOAT: u32 = 16;
const KIND_DECL_TAG: u32 = 17;
const KIND_TYPE_TAG: u32 = 18;
const KIND_ENUM64: u32 = 19;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BtfError {
    #[error("not BTF (magic {0:#06x}, expected 0xeb9f in this machine's byte order)")]
    BadMagic(u16),
    #[error("BTF truncated or malformed: {0}")]
    Malformed(&'static str),
    #[error("BTF type kind {0} is unknown to this reader")]
    UnknownKind(u32),
    #[error("BTF has no struct {0}")]
    NoStruct(String),
    #[error("BTF struct {0} has no field {1}")]
    NoField(String, String),
    #[error("BTF field {0}.{1} is a bitfield")]
    Bitfield(String, String),
}

/// A field's place in its struct.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    /// Bytes from the start of the struct.
    pub offset: u32,
    /// Bytes, when the type has a size (ints, enums, structs, pointers count as 8).
    pub size: Option<u32>,
}

/// Parsed BTF: the byte ranges of every type record, by id.
pub struct Btf<'a> {
    types: &'a [u8],
    strings: &'a [u8],
    /// Start of each type record in `types`; index 0 is id 1.
    starts: Vec<usize>,
}

fn u32_at(b: &[u8], at: usize) -> Result<u32, BtfError> {
    b.get(at..at + 4)
        .map(|s| u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or(BtfError::Malformed("a record runs past its section"))
}

impl<'a> Btf<'a> {
    pub fn parse(data: &'a [u8]) -> Result<Btf<'a>, BtfError> {
        let magic = data.get(..2).map(|m| u16::from_ne_bytes([m[0], m[1]])).ok_or(BtfError::Malformed("no header"))?;
        if magic != MAGIC {
            return Err(BtfError::BadMagic(magic));
        }
        let hdr_len = u32_at(data, 4)? as usize;
        if hdr_len < HEADER_LEN {
            return Err(BtfError::Malformed("header shorter than 24 bytes"));
        }
        let section = |off_at: usize, len_at: usize| -> Result<&'a [u8], BtfError> {
            let off = hdr_len.checked_add(u32_at(data, off_at)? as usize).ok_or(BtfError::Malformed("offset"))?;
            let len = u32_at(data, len_at)? as usize;
            data.get(off..off.checked_add(len).ok_or(BtfError::Malformed("length"))?)
                .ok_or(BtfError::Malformed("a section runs past the end"))
        };
        let types = section(8, 12)?;
        let strings = section(16, 20)?;
        let mut starts = Vec::new();
        let mut at = 0;
        while at < types.len() {
            starts.push(at);
            let info = u32_at(types, at + 4)?;
            at += TYPE_LEN + extra_len(kind(info), vlen(info))?;
        }
        if at != types.len() {
            return Err(BtfError::Malformed("the last type record runs past the type section"));
        }
        Ok(Btf { types, strings, starts })
    }

    fn name(&self, name_off: u32) -> &'a [u8] {
        let s = self.strings.get(name_off as usize..).unwrap_or_default();
        &s[..s.iter().position(|&b| b == 0).unwrap_or(s.len())]
    }

    /// (name_off, info, size_or_type, start of the kind-specific data) of type `id`.
    fn record(&self, id: u32) -> Result<(u32, u32, u32, usize), BtfError> {
        let at = *id
            .checked_sub(1)
            .and_then(|i| self.starts.get(i as usize))
            .ok_or(BtfError::Malformed("a type id points nowhere"))?;
        Ok((u32_at(self.types, at)?, u32_at(self.types, at + 4)?, u32_at(self.types, at + 8)?, at + TYPE_LEN))
    }

    /// The byte size of type `id`, following typedefs and qualifiers.
    fn size_of(&self, mut id: u32) -> Option<u32> {
        for _ in 0..32 {
            let (_, info, size_or_type, _) = self.record(id).ok()?;
            match kind(info) {
                KIND_INT | KIND_ENUM | KIND_ENUM64 | KIND_STRUCT | KIND_UNION | KIND_FLOAT => {
                    return Some(size_or_type)
                }
                KIND_PTR => return Some(8),
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => id = size_or_type,
                _ => return None,
            }
        }
        None
    }

    /// Follows typedefs and qualifiers to a struct or union: (info, members start).
    fn aggregate(&self, mut id: u32) -> Option<(u32, usize)> {
        for _ in 0..32 {
            let (_, info, next, data) = self.record(id).ok()?;
            match kind(info) {
                KIND_STRUCT | KIND_UNION => return Some((info, data)),
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => id = next,
                _ => return None,
            }
        }
        None
    }

    /// The id of struct `name`.
    fn struct_id(&self, name: &str) -> Result<u32, BtfError> {
        (1..=self.starts.len() as u32)
            .find(|&id| {
                self.record(id).is_ok_and(|(name_off, info, _, _)| {
                    kind(info) == KIND_STRUCT && self.name(name_off) == name.as_bytes()
                })
            })
            .ok_or_else(|| BtfError::NoStruct(name.into()))
    }

    /// The size of struct `name` in bytes.
    pub fn struct_size(&self, name: &str) -> Result<u32, BtfError> {
        let id = self.struct_id(name)?;
        self.size_of(id).ok_or(BtfError::Malformed("a struct without a size"))
    }

    /// Where struct `name` keeps `field`, looking into anonymous struct and union members (the
    /// kernel wraps fields in them, e.g. for randomized layouts).
    pub fn field(&self, name: &str, field: &str) -> Result<Field, BtfError> {
        let id = self.struct_id(name)?;
        let (info, data) = self.aggregate(id).ok_or_else(|| BtfError::NoStruct(name.into()))?;
        match self.find_member(info, data, field.as_bytes(), 0, 0)? {
            Some(m) if m.bitfield || m.bits % 8 != 0 => Err(BtfError::Bitfield(name.into(), field.into())),
            Some(m) => Ok(Field { offset: m.bits / 8, size: self.size_of(m.ty) }),
            None => Err(BtfError::NoField(name.into(), field.into())),
        }
    }

    /// `field` among the members at `data`, with its bit offset from the outer struct.
    fn find_member(
        &self,
        info: u32,
        data: usize,
        field: &[u8],
        base_bits: u32,
        depth: u32,
    ) -> Result<Option<Member>, BtfError> {
        if depth > 8 {
            return Ok(None);
        }
        let kind_flag = info & (1 << 31) != 0;
        for i in 0..vlen(info) as usize {
            let m = data + i * 12;
            let (name_off, ty, raw) = (u32_at(self.types, m)?, u32_at(self.types, m + 4)?, u32_at(self.types, m + 8)?);
            // With the kind flag, the top 8 bits hold a bitfield's size.
            let (bits, bitfield) = if kind_flag { (raw & 0xff_ffff, raw >> 24 != 0) } else { (raw, false) };
            let bits = base_bits.saturating_add(bits);
            if name_off != 0 && self.name(name_off) == field {
                return Ok(Some(Member { bits, ty, bitfield }));
            }
            if name_off == 0 {
                if let Some((inner_info, inner_data)) = self.aggregate(ty) {
                    if let Some(found) = self.find_member(inner_info, inner_data, field, bits, depth + 1)? {
                        return Ok(Some(found));
                    }
                }
            }
        }
        Ok(None)
    }
}

struct Member {
    bits: u32,
    ty: u32,
    bitfield: bool,
}

fn kind(info: u32) -> u32 {
    (info >> 24) & 0x1f
}

fn vlen(info: u32) -> u32 {
    info & 0xffff
}

/// Bytes that follow the 12-byte common part of a record of this kind.
fn extra_len(kind: u32, vlen: u32) -> Result<usize, BtfError> {
    let v = vlen as usize;
    Ok(match kind {
        KIND_INT | KIND_VAR | KIND_DECL_TAG => 4,
        KIND_PTR | KIND_FWD | KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_FUNC | KIND_FLOAT
        | KIND_TYPE_TAG => 0,
        KIND_ARRAY => 12,
        KIND_STRUCT | KIND_UNION | KIND_DATASEC | KIND_ENUM64 => 12 * v,
        KIND_ENUM | KIND_FUNC_PROTO => 8 * v,
        k => return Err(BtfError::UnknownKind(k)),
    })
}

/// Where `task_struct` keeps `min_flt` and `maj_flt`, from BTF bytes.
pub fn task_layout(btf: &[u8]) -> Result<TaskLayout, BtfError> {
    let btf = Btf::parse(btf)?;
    let field = |f: &str| -> Result<u32, BtfError> {
        let x = btf.field("task_struct", f)?;
        match x.size {
            Some(8) => Ok(x.offset),
            _ => Err(BtfError::Malformed("task_struct fault counters are not 8-byte integers")),
        }
    };
    // `mm` is only a filter for site sampling: without it, every task counts as having one.
    let mm = field("mm").unwrap_or(0);
    // `signal` and its `live` count tell a group's exit from its leader's `pthread_exit`;
    // without them the exit program goes by the leader alone.
    let (signal, signal_live) = match (field("signal"), btf.field("signal_struct", "live")) {
        (Ok(signal), Ok(live)) if live.size == Some(4) => (signal, live.offset),
        _ => (0, 0),
    };
    // A forked child's process id (pid_t): its watch is inherited at fork; without it the child
    // is watched from the agent's next reading.
    let tgid = match btf.field("task_struct", "tgid") {
        Ok(t) if t.size == Some(4) => t.offset,
        _ => 0,
    };
    Ok(TaskLayout {
        min_flt: field("min_flt")?,
        maj_flt: field("maj_flt")?,
        valid: 1,
        mm,
        signal,
        signal_live,
        tgid,
        _pad: 0,
    })
}

/// Where `task_struct` keeps the thread pointer (`thread.fsbase`, x86-64), from BTF bytes.
pub fn task_fsbase(btf: &[u8]) -> Result<u32, BtfError> {
    let btf = Btf::parse(btf)?;
    let thread = btf.field("task_struct", "thread")?;
    let fsbase = btf.field("thread_struct", "fsbase")?;
    match fsbase.size {
        Some(8) => Ok(thread.offset + fsbase.offset),
        _ => Err(BtfError::Malformed("thread_struct.fsbase is not an 8-byte integer")),
    }
}

/// `sizeof(struct page)` from BTF bytes.
pub fn struct_page_size(btf: &[u8]) -> Result<u32, BtfError> {
    Btf::parse(btf)?.struct_size("page")
}

/// Reads the running kernel's BTF and finds the fault counters of `task_struct`.
pub fn read_task_layout(vmlinux: &Path) -> Result<TaskLayout, String> {
    let data = std::fs::read(vmlinux).map_err(|e| format!("{}: {e}", vmlinux.display()))?;
    task_layout(&data).map_err(|e| format!("{}: {e}", vmlinux.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds BTF bytes from type records and a string table, as the kernel lays them out.
    struct Builder {
        types: Vec<u8>,
        strings: Vec<u8>,
    }

    impl Builder {
        fn new() -> Self {
            Builder { types: vec![], strings: vec![0] }
        }
        fn s(&mut self, name: &str) -> u32 {
            if name.is_empty() {
                return 0;
            }
            let at = self.strings.len() as u32;
            self.strings.extend_from_slice(name.as_bytes());
            self.strings.push(0);
            at
        }
        fn words(&mut self, w: &[u32]) {
            for x in w {
                self.types.extend_from_slice(&x.to_ne_bytes());
            }
        }
        fn ty(&mut self, name: &str, kind: u32, vlen: u32, kflag: bool, size_or_type: u32) {
            let n = self.s(name);
            self.words(&[n, (kind << 24) | vlen | (u32::from(kflag) << 31), size_or_type]);
        }
        fn member(&mut self, name: &str, ty: u32, offset: u32) {
            let n = self.s(name);
            self.words(&[n, ty, offset]);
        }
        fn bytes(&self) -> Vec<u8> {
            let mut out = Vec::new();
            out.extend_from_slice(&MAGIC.to_ne_bytes());
            out.extend_from_slice(&[1, 0]);
            for w in [HEADER_LEN as u32, 0, self.types.len() as u32, self.types.len() as u32, self.strings.len() as u32]
            {
                out.extend_from_slice(&w.to_ne_bytes());
            }
            out.extend_from_slice(&self.types);
            out.extend_from_slice(&self.strings);
            out
        }
    }

    /// A task_struct with the counters behind kinds the reader must skip, one of them inside an
    /// anonymous struct, as randomized layouts have them.
    fn kernel_like() -> Vec<u8> {
        let mut b = Builder::new();
        b.ty("unsigned long", KIND_INT, 0, false, 8); // 1
        b.words(&[64]); //   its encoding: 64 bits
        b.ty("", KIND_PTR, 0, false, 1); // 2
        b.ty("", KIND_ARRAY, 0, false, 0); // 3
        b.words(&[1, 1, 16]);
        b.ty("e", KIND_ENUM, 2, false, 4); // 4
        b.words(&[0, 0, 0, 1]);
        b.ty("fp", KIND_FUNC_PROTO, 1, false, 0); // 5
        b.words(&[0, 1]);
        b.ty("task_struct", KIND_FWD, 0, false, 0); // 6: a forward declaration first
        b.ty("ulong_t", KIND_TYPEDEF, 0, false, 1); // 7
        b.ty("", KIND_VOLATILE, 0, false, 7); // 8
        b.ty("", KIND_STRUCT, 2, false, 16); // 9: anonymous, holds the counters
        b.member("min_flt", 8, 0);
        b.member("maj_flt", 1, 64);
        b.ty("task_struct", KIND_STRUCT, 4, true, 4096); // 10: bitfield-flagged
        b.member("flags", 1, (3 << 24) | 8);
        b.member("", 9, 2048 * 8);
        b.member("mm", 2, 2304 * 8);
        b.member("comm", 3, 3000 * 8);
        b.ty("v", KIND_VAR, 0, false, 1); // 11
        b.words(&[1]);
        b.ty("e64", KIND_ENUM64, 1, false, 8); // 12
        b.words(&[0, 0, 0]);
        b.ty(".data", KIND_DATASEC, 1, false, 8); // 13
        b.words(&[11, 0, 8]);
        b.bytes()
    }

    #[test]
    fn finds_fields_through_anonymous_members_typedefs_and_qualifiers() {
        let data = kernel_like();
        let btf = Btf::parse(&data).expect("parse");
        assert_eq!(btf.field("task_struct", "min_flt"), Ok(Field { offset: 2048, size: Some(8) }));
        assert_eq!(btf.field("task_struct", "maj_flt"), Ok(Field { offset: 2056, size: Some(8) }));
        assert_eq!(btf.field("task_struct", "comm"), Ok(Field { offset: 3000, size: None }));
        assert_eq!(btf.field("task_struct", "flags"), Err(BtfError::Bitfield("task_struct".into(), "flags".into())));
        assert_eq!(btf.field("task_struct", "nope"), Err(BtfError::NoField("task_struct".into(), "nope".into())));
        assert_eq!(btf.field("mm_struct", "x"), Err(BtfError::NoStruct("mm_struct".into())));
        assert_eq!(
            task_layout(&data),
            Ok(TaskLayout {
                min_flt: 2048,
                maj_flt: 2056,
                valid: 1,
                mm: 2304,
                signal: 0,
                signal_live: 0,
                tgid: 0,
                _pad: 0
            })
        );
        assert_eq!(btf.struct_size("task_struct"), Ok(4096));
        assert_eq!(btf.struct_size("page"), Err(BtfError::NoStruct("page".into())));
    }

    #[test]
    fn rejects_bad_input_without_panicking() {
        assert_eq!(Btf::parse(&[]).err(), Some(BtfError::Malformed("no header")));
        assert!(Btf::parse(&[0x9f, 0xeb, 1, 0]).is_err(), "a header cut short");
        assert!(matches!(Btf::parse(&[1, 2, 3, 4]).err(), Some(BtfError::BadMagic(_))));
        let good = kernel_like();
        for cut in [HEADER_LEN, HEADER_LEN + 5, good.len() - 40, good.len() - 1] {
            let mut short = good[..cut].to_vec();
            short.resize(cut.max(HEADER_LEN), 0);
            assert!(task_layout(&short).is_err(), "cut at {cut} parsed");
        }
        let mut b = Builder::new();
        b.ty("x", 30, 0, false, 0);
        assert_eq!(Btf::parse(&b.bytes()).err(), Some(BtfError::UnknownKind(30)));
        // Counters that are not 8-byte integers are refused, not read wrongly.
        let mut b = Builder::new();
        b.ty("int", KIND_INT, 0, false, 4);
        b.words(&[32]);
        b.ty("task_struct", KIND_STRUCT, 2, false, 16);
        b.member("min_flt", 1, 0);
        b.member("maj_flt", 1, 32);
        assert!(task_layout(&b.bytes()).is_err());
    }

    #[test]
    fn this_kernel_tells_where_tasks_keep_their_thread_pointer() {
        let data = std::fs::read("/sys/kernel/btf/vmlinux").expect("this kernel's BTF (CONFIG_DEBUG_INFO_BTF)");
        let off = task_fsbase(&data).expect("task_struct.thread.fsbase");
        let size = Btf::parse(&data).and_then(|b| b.struct_size("task_struct")).expect("task_struct");
        assert!(off > 0 && off + 8 <= size, "fsbase at {off} of {size}");
        assert!(task_fsbase(&kernel_like()).is_err(), "no thread_struct there");
    }
}
