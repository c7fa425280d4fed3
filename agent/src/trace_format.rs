//! A tracepoint's `format` file (`events/<group>/<name>/format`), parsed: field offsets and
//! sizes and the kernel's own names for enum values, so record layouts are taken from the running
//! kernel instead of being compiled in. Pure: the collector reads the file, and both it and the
//! health decoder use the parsed value.
use std::collections::BTreeMap;

/// One field of a tracepoint record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    /// The C declaration's type, e.g. `unsigned long` or `char[16]`.
    pub c_type: String,
    pub offset: usize,
    pub size: usize,
    pub signed: bool,
}

/// A parsed `events/<group>/<name>/format` file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventFormat {
    pub name: String,
    pub id: Option<u32>,
    pub fields: Vec<Field>,
    /// `__print_symbolic(REC->field, {value, "name"}, ...)` tables from the print fmt: the
    /// kernel's own names for enum values (migration reasons and modes, for instance).
    pub symbols: BTreeMap<String, BTreeMap<i64, String>>,
}

impl EventFormat {
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// One past the last byte of the record's fields.
    pub fn record_len(&self) -> usize {
        self.fields.iter().map(|f| f.offset + f.size).max().unwrap_or(0)
    }

    /// Parses a format file's text. Lines it does not understand are skipped; a file with no
    /// fields at all is an error naming what was wrong.
    pub fn parse(text: &str) -> Result<EventFormat, String> {
        let mut f = EventFormat::default();
        for line in text.lines() {
            let line = line.trim();
            if let Some(n) = line.strip_prefix("name:") {
                f.name = n.trim().to_string();
            } else if let Some(id) = line.strip_prefix("ID:") {
                f.id = id.trim().parse().ok();
            } else if line.starts_with("field:") {
                if let Some(field) = parse_field(line) {
                    f.fields.push(field);
                }
            } else if let Some(fmt) = line.strip_prefix("print fmt:") {
                f.symbols = parse_symbolic_tables(fmt);
            }
        }
        if f.fields.is_empty() {
            return Err("no `field:` lines".into());
        }
        Ok(f)
    }
}

/// `field:unsigned long pfn;    offset:8;    size:8;    signed:0;`
fn parse_field(line: &str) -> Option<Field> {
    let mut decl = None;
    let (mut offset, mut size, mut signed) = (None, None, false);
    for part in line.split(';').map(str::trim) {
        if let Some(d) = part.strip_prefix("field:") {
            decl = Some(d.trim());
        } else if let Some(o) = part.strip_prefix("offset:") {
            offset = o.trim().parse().ok();
        } else if let Some(s) = part.strip_prefix("size:") {
            size = s.trim().parse().ok();
        } else if let Some(s) = part.strip_prefix("signed:") {
            signed = s.trim() == "1";
        }
    }
    let decl = decl?.trim();
    // The name is the last token, without an array suffix or pointer stars: `char comm[16]`,
    // `const char * name`, and `__data_loc char[] memdev` (where the brackets precede the name).
    let split = decl.rfind(char::is_whitespace).map_or(0, |i| i + 1);
    let (head, last) = decl.split_at(split);
    let (name, array) = match last.find('[') {
        Some(i) => (&last[..i], &last[i..]),
        None => (last, ""),
    };
    let name = name.trim_start_matches('*');
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return None;
    }
    let c_type = format!("{}{}", head.trim(), array);
    Some(Field { name: name.to_string(), c_type, offset: offset?, size: size?, signed })
}

/// Finds `__print_symbolic(REC->x, { 0, "a" }, { 1, "b" })` tables.
fn parse_symbolic_tables(fmt: &str) -> BTreeMap<String, BTreeMap<i64, String>> {
    let mut out = BTreeMap::new();
    let mut rest = fmt;
    while let Some(i) = rest.find("__print_symbolic(") {
        rest = &rest[i + "__print_symbolic(".len()..];
        let Some(field) = rest
            .split(',')
            .next()
            .map(|s| s.trim().trim_start_matches("REC->").trim_matches(|c| c == '(' || c == ')').to_string())
        else {
            break;
        };
        // The table ends at the first `)` outside quotes.
        let mut end = rest.len();
        let mut in_str = false;
        for (j, c) in rest.char_indices() {
            match c {
                '"' => in_str = !in_str,
                ')' if !in_str => {
                    end = j;
                    break;
                }
                _ => {}
            }
        }
        let mut table = BTreeMap::new();
        for entry in rest[..end].split('{').skip(1) {
            let entry = entry.split('}').next().unwrap_or("");
            let mut kv = entry.splitn(2, ',');
            let (Some(k), Some(v)) = (kv.next(), kv.next()) else { continue };
            if let Some(value) = parse_int(k.trim()) {
                table.insert(value, v.trim().trim_matches('"').to_string());
            }
        }
        if !table.is_empty() {
            out.insert(field, table);
        }
        rest = &rest[end..];
    }
    out
}

fn parse_int(s: &str) -> Option<i64> {
    match s.strip_prefix("0x") {
        Some(h) => i64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Captured from this machine's 6.18 kernel.
    const MIGRATE_6_18: &str = include_str!("../fixtures/tracefs/host-6.18/migrate/mm_migrate_pages/format");
    const PAGE_ALLOC_6_18: &str = include_str!("../fixtures/tracefs/host-6.18/kmem/mm_page_alloc/format");
    const SWAP_NUMA_6_18: &str = include_str!("../fixtures/tracefs/host-6.18/sched/sched_swap_numa/format");

    #[test]
    fn parses_mm_migrate_pages_fields_and_reason_names() {
        let f = EventFormat::parse(MIGRATE_6_18).unwrap();
        assert_eq!(f.name, "mm_migrate_pages");
        let s = f.field("succeeded").unwrap();
        assert_eq!((s.offset, s.size, s.c_type.as_str()), (8, 8, "unsigned long"));
        assert!(f.field("reason").is_some() && f.field("mode").is_some());
        let reasons = &f.symbols["reason"];
        assert_eq!(reasons.get(&0).map(String::as_str), Some("compaction"));
        assert_eq!(reasons.get(&5).map(String::as_str), Some("numa_misplaced"));
        assert_eq!(reasons.get(&8).map(String::as_str), Some("demotion"));
        assert_eq!(f.symbols["mode"].get(&0).map(String::as_str), Some("MIGRATE_ASYNC"));
    }

    #[test]
    fn parses_page_alloc_offsets() {
        let f = EventFormat::parse(PAGE_ALLOC_6_18).unwrap();
        assert_eq!(f.field("pfn").map(|x| (x.offset, x.size)), Some((8, 8)));
        assert_eq!(f.field("order").map(|x| (x.offset, x.size)), Some((16, 4)));
        assert_eq!(f.field("common_pid").map(|x| (x.offset, x.signed)), Some((4, true)));
    }

    #[test]
    fn parses_sched_swap_numa() {
        let f = EventFormat::parse(SWAP_NUMA_6_18).unwrap();
        assert_eq!(f.field("src_nid").map(|x| x.size), Some(4));
        assert!(f.record_len() <= tierscope_common::event::RAW_TRACE_BYTES);
    }

    #[test]
    fn parses_arrays_pointers_and_moved_fields() {
        let text = "name: x\nID: 7\nformat:\n\tfield:char comm[16];\toffset:12;\tsize:16;\tsigned:0;\n\
                    \tfield:const char * name;\toffset:28;\tsize:8;\tsigned:0;\n\
                    \tfield:int reason;\toffset:40;\tsize:4;\tsigned:1;\n\nprint fmt: \"%s\", __print_symbolic(REC->reason, { 0x1, \"one\" }, { 2, \"t,wo)\" })\n";
        let f = EventFormat::parse(text).unwrap();
        assert_eq!(f.id, Some(7));
        assert_eq!(f.field("comm").map(|x| (x.offset, x.c_type.as_str())), Some((12, "char[16]")));
        assert_eq!(f.field("name").map(|x| x.offset), Some(28));
        let dl = EventFormat::parse("field:__data_loc char[] memdev;\toffset:8;\tsize:4;\tsigned:0;\n").unwrap();
        assert_eq!(dl.field("memdev").map(|x| (x.offset, x.c_type.as_str())), Some((8, "__data_loc char[]")));
        assert_eq!(f.symbols["reason"].get(&1).map(String::as_str), Some("one"));
        assert_eq!(f.symbols["reason"].get(&2).map(String::as_str), Some("t,wo)"));
    }

    #[test]
    fn rejects_garbage() {
        assert!(EventFormat::parse("").is_err());
        assert!(EventFormat::parse("field:;offset:x;").is_err());
        assert!(EventFormat::parse("\u{0}\u{1}field:int;offset:1;size:").is_err());
    }
}
