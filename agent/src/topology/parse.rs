//! Pure parsers for the sysfs files the topology reads. Each takes the file's text and returns a
//! value or a [`ParseError`] saying what was wrong; the caller adds the file name (see `read.rs`).
use std::collections::BTreeMap;

/// The largest id a cpulist/nodelist may name. Linux caps CPUs at 8192 (NR_CPUS) and nodes at
/// 1024 (MAX_NUMNODES); anything beyond 65535 is garbage, and refusing it keeps a hostile range
/// such as `0-4294967295` from allocating gigabytes.
pub const MAX_LIST_ID: u32 = 65_535;

/// Why a sysfs file's text could not be understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("file is empty")]
    Empty,
    #[error("`{0}` is not a number")]
    NotANumber(String),
    #[error("`{0}` is not a range list like `0-3,8`")]
    BadList(String),
    #[error("range `{0}` goes backwards or names an id above {MAX_LIST_ID}")]
    BadRange(String),
    #[error("no {what} in `{text}`")]
    Missing { what: &'static str, text: String },
}

/// Parses the kernel's list format (`cpulist`, `nodelist`, `online`, `has_cpu`...):
/// `0-3,8,10-11`, possibly empty (a CPU-less node's `cpulist` is an empty line).
/// Ids come back sorted and without duplicates.
pub fn id_list(text: &str) -> Result<Vec<u32>, ParseError> {
    let text = text.trim();
    let mut ids = Vec::new();
    if text.is_empty() {
        return Ok(ids);
    }
    for part in text.split(',') {
        let part = part.trim();
        let (lo, hi) = match part.split_once('-') {
            Some((lo, hi)) => (list_id(lo, part)?, list_id(hi, part)?),
            None => {
                let id = list_id(part, part)?;
                (id, id)
            }
        };
        if lo > hi {
            return Err(ParseError::BadRange(part.to_string()));
        }
        ids.extend(lo..=hi);
    }
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}

fn list_id(s: &str, part: &str) -> Result<u32, ParseError> {
    let s = s.trim();
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ParseError::BadList(part.to_string()));
    }
    match s.parse::<u32>() {
        Ok(id) if id <= MAX_LIST_ID => Ok(id),
        _ => Err(ParseError::BadRange(part.to_string())),
    }
}

/// Formats ids back into the kernel's list format (`0-3,8`); the inverse of [`id_list`].
pub fn format_id_list(ids: &[u32]) -> String {
    let mut sorted = ids.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        out.push(if start == end { start.to_string() } else { format!("{start}-{end}") });
        i += 1;
    }
    out.join(",")
}

/// A node's memory totals from `nodeN/meminfo`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NodeMeminfo {
    pub total_bytes: Option<u64>,
    pub free_bytes: Option<u64>,
}

/// Parses `nodeN/meminfo` (`Node 0 MemTotal:  6645964 kB` lines). Lines it does not understand
/// are skipped; it fails only when neither MemTotal nor MemFree is there.
pub fn node_meminfo(text: &str) -> Result<NodeMeminfo, ParseError> {
    let mut info = NodeMeminfo::default();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        // "Node" "<id>" "<Key>:" "<value>" ["kB"]
        let (Some("Node"), Some(_), Some(key), Some(value)) = (words.next(), words.next(), words.next(), words.next())
        else {
            continue;
        };
        let unit = words.next();
        let Ok(value) = value.parse::<u64>() else { continue };
        let bytes = match unit {
            Some("kB") => value.checked_mul(1024),
            None => Some(value),
            Some(_) => None,
        };
        match key {
            "MemTotal:" => info.total_bytes = bytes,
            "MemFree:" => info.free_bytes = bytes,
            _ => {}
        }
    }
    if info.total_bytes.is_none() && info.free_bytes.is_none() {
        return Err(ParseError::Missing { what: "MemTotal or MemFree line", text: first_line(text) });
    }
    Ok(info)
}

/// Parses `nodeN/distance`: one SLIT distance per node in `possible`'s order (`10 20`).
pub fn distances(text: &str) -> Result<Vec<u32>, ParseError> {
    let words: Vec<&str> = text.split_whitespace().collect();
    if words.is_empty() {
        return Err(ParseError::Empty);
    }
    words.into_iter().map(|w| w.parse::<u32>().map_err(|_| ParseError::NotANumber(clip(w)))).collect()
}

/// Keeps only the counters tierscope shows per node: promotion, demotion and NUMA placement.
pub fn is_tiering_counter(name: &str) -> bool {
    name.starts_with("pgpromote_") || name.starts_with("pgdemote_") || name.starts_with("numa_")
}

/// Parses `nodeN/vmstat` (`name value` lines), keeping the [`is_tiering_counter`] ones.
/// Malformed lines are skipped: one odd counter must not hide the rest.
pub fn tiering_vmstat(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let (name, value) = (words.next()?, words.next()?);
            // pgmigrate_success too: every page moved between nodes (migratepages, mbind with
            // MPOL_MF_MOVE), which tells the residency scans that a process's pages may have moved.
            if !is_tiering_counter(name) && name != "pgmigrate_success" {
                return None;
            }
            Some((name.to_string(), value.parse::<u64>().ok()?))
        })
        .collect()
}

/// Parses a decimal unsigned number (`ce_count`, `read_latency`, `interleave_ways`).
pub fn decimal(text: &str) -> Result<u64, ParseError> {
    let t = text.trim();
    if t.is_empty() {
        return Err(ParseError::Empty);
    }
    t.parse::<u64>().map_err(|_| ParseError::NotANumber(clip(t)))
}

/// Parses a node id that may be `-1` for "none" (`numa_node`, dax `target_node`).
pub fn optional_node(text: &str) -> Result<Option<u32>, ParseError> {
    let t = text.trim();
    if t.is_empty() {
        return Err(ParseError::Empty);
    }
    match t.parse::<i64>() {
        Ok(n) if n < 0 => Ok(None),
        Ok(n) => u32::try_from(n).map(Some).map_err(|_| ParseError::NotANumber(clip(t))),
        Err(_) => Err(ParseError::NotANumber(clip(t))),
    }
}

/// Parses the CXL and dax attributes printed as `%#llx` (`0x10000000`; the kernel prints zero as
/// `0`). A bare number without `0x` is taken as hex too, as `block_size_bytes` is.
pub fn hex(text: &str) -> Result<u64, ParseError> {
    let t = text.trim();
    if t.is_empty() {
        return Err(ParseError::Empty);
    }
    let digits = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")).unwrap_or(t);
    u64::from_str_radix(digits, 16).map_err(|_| ParseError::NotANumber(clip(t)))
}

/// Parses a one-line text attribute (`firmware_version`, `mc_name`, region `mode`); an empty
/// file is an error because every such attribute the kernel prints has a value.
pub fn text_value(text: &str) -> Result<String, ParseError> {
    let t = text.trim();
    if t.is_empty() {
        return Err(ParseError::Empty);
    }
    Ok(clip(t))
}

/// The number in a sysfs directory name with `prefix` (`node12` -> 12, `memory_tier54` -> 54).
pub fn numbered(name: &str, prefix: &str) -> Option<u32> {
    let rest = name.strip_prefix(prefix)?;
    if rest.is_empty() || !rest.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    rest.parse().ok()
}

fn first_line(text: &str) -> String {
    clip(text.lines().next().unwrap_or("").trim())
}

/// Garbage can be long or binary: quote at most 40 characters of it in messages, with control
/// characters escaped so a NUL or an escape sequence cannot garble the terminal.
fn clip(s: &str) -> String {
    let mut out: String = s
        .chars()
        .take(40)
        .flat_map(|c| if c.is_control() { c.escape_default().collect::<Vec<_>>() } else { vec![c] })
        .collect();
    if s.chars().nth(40).is_some() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn id_lists() {
        let cases: &[(&str, Result<Vec<u32>, ParseError>)] = &[
            ("0\n", Ok(vec![0])),
            ("0-1\n", Ok(vec![0, 1])),
            ("0-3,8\n", Ok(vec![0, 1, 2, 3, 8])),
            ("0,3\n", Ok(vec![0, 3])),
            ("8,0-1\n", Ok(vec![0, 1, 8])),
            ("\n", Ok(vec![])),
            ("", Ok(vec![])),
            ("3-1", Err(ParseError::BadRange("3-1".into()))),
            ("0-4294967295", Err(ParseError::BadRange("0-4294967295".into()))),
            ("0-99999999999", Err(ParseError::BadRange("0-99999999999".into()))),
            ("a-b", Err(ParseError::BadList("a-b".into()))),
            ("0,,1", Err(ParseError::BadList("".into()))),
            ("-1", Err(ParseError::BadList("-1".into()))),
            ("0-", Err(ParseError::BadList("0-".into()))),
            ("+1", Err(ParseError::BadList("+1".into()))),
        ];
        for (text, want) in cases {
            assert_eq!(&id_list(text), want, "{text:?}");
        }
    }

    #[test]
    fn id_lists_format_back() {
        for (ids, want) in [(&[][..], ""), (&[0], "0"), (&[0, 1, 2, 3, 8], "0-3,8"), (&[3, 0, 1], "0-1,3")] {
            assert_eq!(format_id_list(ids), want);
        }
    }

    fn missing(text: &str) -> ParseError {
        ParseError::Missing { what: "MemTotal or MemFree line", text: text.into() }
    }

    #[test]
    fn meminfo() {
        let this_host = "Node 0 MemTotal:        6645964 kB\nNode 0 MemFree:         4819780 kB\n\
                         Node 0 MemUsed:         1826184 kB\nNode 0 HugePages_Total:     0\n";
        let cases: &[(&str, Result<NodeMeminfo, ParseError>)] = &[
            (this_host, Ok(NodeMeminfo { total_bytes: Some(6645964 * 1024), free_bytes: Some(4819780 * 1024) })),
            (
                "Node 1 MemTotal: 0 kB\nNode 1 MemFree: 0 kB\n",
                Ok(NodeMeminfo { total_bytes: Some(0), free_bytes: Some(0) }),
            ),
            ("Node 2 MemFree: 12 kB\n", Ok(NodeMeminfo { total_bytes: None, free_bytes: Some(12 * 1024) })),
            ("Node 0 MemTotal: lots kB\n", Err(missing("Node 0 MemTotal: lots kB"))),
            ("", Err(missing(""))),
            (
                "Node 0 MemTotal: 18446744073709551615 kB\nNode 0 MemFree: 1 kB",
                Ok(NodeMeminfo { total_bytes: None, free_bytes: Some(1024) }),
            ),
        ];
        for (text, want) in cases {
            assert_eq!(&node_meminfo(text), want, "{text:?}");
        }
    }

    #[test]
    fn distance_rows() {
        let cases: &[(&str, Result<Vec<u32>, ParseError>)] = &[
            ("10\n", Ok(vec![10])),
            ("10 20 20\n", Ok(vec![10, 20, 20])),
            ("", Err(ParseError::Empty)),
            ("10 x", Err(ParseError::NotANumber("x".into()))),
        ];
        for (text, want) in cases {
            assert_eq!(&distances(text), want, "{text:?}");
        }
    }

    #[test]
    fn vmstat_keeps_tiering_counters() {
        let text = "nr_free_pages 100\nnuma_hit 7168123\nnuma_miss 0\npgpromote_success 16384\n\
                    pgdemote_kswapd 42000\npgdemote_direct x\npgmigrate_success 9\npgmigrate_fail 1\nbroken\n";
        let got = tiering_vmstat(text);
        let want: BTreeMap<String, u64> = [
            ("numa_hit", 7168123),
            ("numa_miss", 0),
            ("pgpromote_success", 16384),
            ("pgdemote_kswapd", 42000),
            ("pgmigrate_success", 9),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn numbers() {
        assert_eq!(hex("0x1234\n"), Ok(0x1234));
        assert_eq!(hex("0\n"), Ok(0));
        assert_eq!(hex("8000000\n"), Ok(0x800_0000));
        assert_eq!(hex("0xzz"), Err(ParseError::NotANumber("0xzz".into())));
        assert_eq!(hex(" "), Err(ParseError::Empty));
        assert_eq!(decimal("300\n"), Ok(300));
        assert_eq!(decimal("-3"), Err(ParseError::NotANumber("-3".into())));
        assert_eq!(optional_node("2\n"), Ok(Some(2)));
        assert_eq!(optional_node("-1\n"), Ok(None));
        assert_eq!(optional_node("99999999999"), Err(ParseError::NotANumber("99999999999".into())));
        assert_eq!(text_value("2.0\n"), Ok("2.0".into()));
        assert_eq!(text_value("\n"), Err(ParseError::Empty));
    }

    #[test]
    fn numbered_names() {
        assert_eq!(numbered("node12", "node"), Some(12));
        assert_eq!(numbered("memory_tier54", "memory_tier"), Some(54));
        assert_eq!(numbered("node", "node"), None);
        assert_eq!(numbered("nodelist", "node"), None);
        assert_eq!(numbered("node+1", "node"), None);
        assert_eq!(numbered("node99999999999", "node"), None);
    }

    #[test]
    fn clip_escapes_binary_garbage() {
        assert_eq!(decimal("\u{0}\u{1b}[2J7"), Err(ParseError::NotANumber("\\u{0}\\u{1b}[2J7".into())));
    }

    #[test]
    fn clip_quotes_long_garbage_briefly() {
        let long = "x".repeat(100);
        assert_eq!(decimal(&long), Err(ParseError::NotANumber(format!("{}…", "x".repeat(40)))));
    }

    proptest! {
        #[test]
        fn parsers_never_panic(s in "\\PC*", t in "[-0-9,x \\n]{0,40}") {
            for input in [s.as_str(), t.as_str()] {
                let _ = id_list(input);
                let _ = node_meminfo(input);
                let _ = distances(input);
                let _ = tiering_vmstat(input);
                let _ = decimal(input);
                let _ = optional_node(input);
                let _ = hex(input);
                let _ = text_value(input);
                let _ = numbered(input, "node");
            }
        }

        #[test]
        fn id_list_round_trips(ids in proptest::collection::vec(0u32..2000, 0..50)) {
            let text = format_id_list(&ids);
            let mut want = ids.clone();
            want.sort_unstable();
            want.dedup();
            prop_assert_eq!(id_list(&text), Ok(want));
        }
    }
}
