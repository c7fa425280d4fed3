//! A CXL/RAS event's tracefs `format`, with what the generic parser leaves out: the
//! `__print_flags` and `__print_symbolic` tables of the print fmt, whose keys the kernel writes as
//! expressions (`((((1UL))) << (2))`). Decoding a raw record with it keeps every field, known or
//! not, so a kernel that adds fields loses nothing.
use std::collections::BTreeMap;

use serde_json::Value;

use crate::trace_format::{EventFormat, Field};

/// A parsed format plus its value tables.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HealthFormat {
    pub event: EventFormat,
    /// `__print_flags(REC->f, sep, {bit, "NAME"}...)`: field -> (mask, name).
    pub flags: BTreeMap<String, Vec<(u64, String)>>,
    /// `__print_symbolic(REC->f, {value, "name"}...)` with numeric keys: field -> value -> name.
    pub symbols: BTreeMap<String, BTreeMap<i64, String>>,
}

impl HealthFormat {
    /// Parses a format file's text; an error names what was wrong.
    pub fn parse(text: &str) -> Result<HealthFormat, String> {
        let mut event = EventFormat::parse(text)?;
        fix_data_loc_names(&mut event, text);
        let print = text.lines().find_map(|l| l.trim().strip_prefix("print fmt:")).unwrap_or("");
        Ok(HealthFormat {
            event,
            flags: tables(print, "__print_flags(")
                .into_iter()
                .map(|(k, v)| (k, v.into_iter().map(|(m, n)| (m as u64, n)).collect()))
                .collect(),
            symbols: tables(print, "__print_symbolic(")
                .into_iter()
                .map(|(k, v)| (k, v.into_iter().collect()))
                .collect(),
        })
    }

    /// Reads `events/<group>/<name>/format` under a tracefs mount.
    pub fn read(tracefs: &std::path::Path, group: &str, name: &str) -> Result<HealthFormat, String> {
        let path = tracefs.join("events").join(group).join(name).join("format");
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        HealthFormat::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn field(&self, name: &str) -> Option<&Field> {
        self.event.field(name)
    }
}

/// The generic field parser takes `__data_loc char[] memdev` for an array named `char`: name
/// such fields (the dynamic strings: device, host, region) after the word that follows `[]`.
fn fix_data_loc_names(event: &mut EventFormat, text: &str) {
    for line in text.lines().map(str::trim).filter(|l| l.starts_with("field:__data_loc")) {
        let decl = line.trim_start_matches("field:").split(';').next().unwrap_or("");
        let Some(name) = decl.rsplit(|c: char| c.is_whitespace() || c == ']').next().filter(|n| !n.is_empty()) else {
            continue;
        };
        let offset =
            line.split(';').find_map(|p| p.trim().strip_prefix("offset:")).and_then(|o| o.trim().parse::<usize>().ok());
        if let Some(f) = event.fields.iter_mut().find(|f| Some(f.offset) == offset) {
            f.name = name.to_string();
            f.c_type = decl[..decl.len() - name.len()].trim().to_string();
        }
    }
}

/// Finds every `<marker>REC->field, ...{k, "v"}...)` table. Tables whose keys are not numbers
/// (`CXL_EVENT_TYPE_INFO`) or that apply to expressions (`(REC->add_status & 0x3)`) are skipped:
/// the decoder has built-in words for those.
fn tables(print: &str, marker: &str) -> Vec<(String, Vec<(i64, String)>)> {
    let mut out = Vec::new();
    let mut rest = print;
    while let Some(i) = rest.find(marker) {
        rest = &rest[i + marker.len()..];
        let Some(arg) = rest.split(',').next() else { break };
        let arg = arg.trim();
        let field = arg.strip_prefix("REC->").filter(|f| f.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
        // The table ends at the first `)` outside quotes that closes the call: count parentheses.
        let (mut depth, mut in_str, mut end) = (0i32, false, rest.len());
        for (j, c) in rest.char_indices() {
            match c {
                '"' => in_str = !in_str,
                '(' if !in_str => depth += 1,
                ')' if !in_str => {
                    if depth == 0 {
                        end = j;
                        break;
                    }
                    depth -= 1;
                }
                _ => {}
            }
        }
        if let Some(field) = field {
            let mut table = Vec::new();
            for entry in rest[..end].split('{').skip(1) {
                let entry = entry.split('}').next().unwrap_or("");
                let Some((k, v)) = entry.split_once(',') else { continue };
                if let Some(key) = eval_key(k) {
                    table.push((key, v.trim().trim_matches('"').to_string()));
                }
            }
            if !table.is_empty() {
                out.push((field.to_string(), table));
            }
        }
        rest = &rest[end..];
    }
    out
}

/// Evaluates a table key: `0x02`, `3`, or a shifted bit like `((((1UL))) << (5))`.
fn eval_key(k: &str) -> Option<i64> {
    let clean: String = k.chars().filter(|c| !c.is_whitespace() && *c != '(' && *c != ')').collect();
    let num = |s: &str| -> Option<i64> {
        let s = s.trim_end_matches(['U', 'L', 'u', 'l']);
        match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
            Some(h) => i64::from_str_radix(h, 16).ok(),
            None => s.parse().ok(),
        }
    };
    match clean.split_once("<<") {
        Some((a, b)) => num(a)?.checked_shl(u32::try_from(num(b)?).ok()?),
        None => num(&clean),
    }
}

/// The raw fields of a record: every non-`common_` field, by name. Integers become numbers;
/// `__data_loc` strings and `char[]` arrays text; 16-byte `uuid` fields a UUID; other arrays
/// hex. A field beyond the copied bytes is `null` (the record was longer than the copy).
pub fn raw_fields(fmt: &HealthFormat, data: &[u8]) -> BTreeMap<String, Value> {
    fmt.event
        .fields
        .iter()
        .filter(|f| !f.name.starts_with("common_"))
        .map(|f| (f.name.clone(), field_value(f, data).unwrap_or(Value::Null)))
        .collect()
}

fn field_value(f: &Field, data: &[u8]) -> Option<Value> {
    let bytes = data.get(f.offset..f.offset.checked_add(f.size)?)?;
    if f.c_type.starts_with("__data_loc") {
        let loc = u32::from_ne_bytes(bytes.get(..4)?.try_into().ok()?);
        let (off, len) = ((loc & 0xffff) as usize, (loc >> 16) as usize);
        let s = data.get(off..off.checked_add(len)?)?;
        return Some(Value::String(c_string(s)));
    }
    let is_array = f.c_type.contains('[');
    if f.c_type.starts_with("char") && is_array && !f.name.contains("uuid") {
        return Some(Value::String(c_string(bytes)));
    }
    if f.size == 16 && (f.c_type.contains("uuid") || f.name.contains("uuid")) {
        return Some(Value::String(uuid(bytes)));
    }
    if !is_array {
        if let Some(v) = int(bytes, f.signed) {
            return Some(if f.signed { Value::from(v) } else { Value::from(v as u64 & mask(f.size)) });
        }
    }
    Some(Value::String(bytes.iter().map(|b| format!("{b:02x}")).collect()))
}

fn mask(size: usize) -> u64 {
    if size >= 8 {
        u64::MAX
    } else {
        (1u64 << (size * 8)) - 1
    }
}

/// A little-endian-or-native integer of 1, 2, 4 or 8 bytes, sign-extended when signed.
pub fn int(b: &[u8], signed: bool) -> Option<i64> {
    Some(match (b.len(), signed) {
        (1, true) => b[0] as i8 as i64,
        (1, false) => b[0] as i64,
        (2, true) => i16::from_ne_bytes(b.try_into().ok()?) as i64,
        (2, false) => u16::from_ne_bytes(b.try_into().ok()?) as i64,
        (4, true) => i32::from_ne_bytes(b.try_into().ok()?) as i64,
        (4, false) => u32::from_ne_bytes(b.try_into().ok()?) as i64,
        (8, _) => i64::from_ne_bytes(b.try_into().ok()?),
        _ => return None,
    })
}

fn c_string(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

fn uuid(b: &[u8]) -> String {
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) const MEMORY_MODULE: &str =
        include_str!("../../fixtures/tracefs/guest-6.12/cxl/cxl_memory_module/format");
    const GENERAL_MEDIA: &str = include_str!("../../fixtures/tracefs/guest-6.12/cxl/cxl_general_media/format");

    #[test]
    fn reads_flag_and_symbol_tables_from_the_print_fmt() {
        let f = HealthFormat::parse(MEMORY_MODULE).unwrap();
        assert_eq!(
            f.flags["health_status"],
            vec![
                (1, "MAINTENANCE_NEEDED".into()),
                (2, "PERFORMANCE_DEGRADED".into()),
                (4, "REPLACEMENT_NEEDED".into())
            ]
        );
        assert_eq!(f.flags["hdr_flags"][0], (4, "PERMANENT_CONDITION".into()));
        assert_eq!(f.symbols["media_status"][&3], "All Data Lost");
        assert_eq!(f.symbols["event_type"][&3], "Temperature Change");
        // `log`'s table has symbolic keys and `add_status`'s applies to expressions: skipped.
        assert!(!f.symbols.contains_key("log") && !f.symbols.contains_key("add_status"));
        let memdev = f.field("memdev").unwrap();
        assert_eq!((memdev.offset, memdev.c_type.as_str()), (8, "__data_loc char[]"));
        let g = HealthFormat::parse(GENERAL_MEDIA).unwrap();
        assert_eq!(g.symbols["transaction_type"][&5], "Internal Media Scrub");
        assert_eq!(g.symbols["type"][&1], "Invalid Address");
        assert_eq!(g.flags["descriptor"].iter().map(|(m, _)| *m).collect::<Vec<_>>(), vec![1, 2, 4]);
    }

    #[test]
    fn keys_evaluate_shifts_hex_and_suffixes() {
        assert_eq!(eval_key(" ((((1UL))) << (5))"), Some(32));
        assert_eq!(eval_key("0x06"), Some(6));
        assert_eq!(eval_key("CXL_EVENT_TYPE_INFO"), None);
        assert_eq!(eval_key("1 << 99"), None);
    }
}
