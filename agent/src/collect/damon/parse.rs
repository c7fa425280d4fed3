//! Pure parsers of DAMON's sysfs files (`/sys/kernel/mm/damon/admin/kdamonds/...`).
use crate::model::hotness::Region;

/// A DAMON sysfs file whose text is not what the kernel writes there.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{file}: unexpected content `{text}` ({expected})")]
pub struct BadValue {
    pub file: String,
    pub text: String,
    pub expected: &'static str,
}

fn bad(file: &str, text: &str, expected: &'static str) -> BadValue {
    BadValue { file: file.to_string(), text: text.trim().chars().take(40).collect(), expected }
}

/// `kdamonds/N/state`: whether that kdamond runs (`on`) or not (`off`).
pub fn state(file: &str, text: &str) -> Result<bool, BadValue> {
    match text.trim() {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(bad(file, text, "on or off")),
    }
}

/// An unsigned decimal (`nr_kdamonds`, `start`, `nr_accesses`, ...).
pub fn number(file: &str, text: &str) -> Result<u64, BadValue> {
    text.trim().parse().map_err(|_| bad(file, text, "an unsigned number"))
}

/// `kdamonds/N/pid`: the kdamond thread's pid; `-1` (none) while it is off.
pub fn pid(file: &str, text: &str) -> Result<Option<u32>, BadValue> {
    let t = text.trim();
    if t == "-1" {
        return Ok(None);
    }
    t.parse().map(Some).map_err(|_| bad(file, text, "a pid or -1"))
}

/// `avail_operations` (one name a line) or `operations` (one name).
pub fn operations(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_string).collect()
}

/// One `tried_regions/N` directory: its `start`, `end`, `nr_accesses` and `age` files.
pub fn region(dir: &str, start: &str, end: &str, nr_accesses: &str, age: &str) -> Result<Region, BadValue> {
    let f = |name: &str, t: &str| number(&format!("{dir}/{name}"), t);
    let r = Region {
        start: f("start", start)?,
        end: f("end", end)?,
        nr_accesses: f("nr_accesses", nr_accesses)?,
        age: f("age", age)?,
    };
    if r.end < r.start {
        return Err(bad(&format!("{dir}/end"), end, "an end at or above start"));
    }
    Ok(r)
}

/// The numbered entries of a directory listing (`0`, `1`, ...), sorted; other names are skipped.
pub fn numbered_entries<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<u32> {
    let mut v: Vec<u32> = names.into_iter().filter_map(|n| n.parse().ok()).collect();
    v.sort_unstable();
    v
}

/// utime + stime (clock ticks) from `/proc/PID/stat`: a kdamond's CPU time. Fields are counted
/// after the last `)` (the comm may hold spaces).
pub fn cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_the_kernel_writes() {
        assert_eq!(state("s", "on\n"), Ok(true));
        assert_eq!(state("s", "off\n"), Ok(false));
        assert!(state("kdamonds/0/state", "running\n").unwrap_err().to_string().contains("kdamonds/0/state"));
        assert_eq!(pid("p", "77\n"), Ok(Some(77)));
        assert_eq!(pid("p", "-1\n"), Ok(None));
        assert!(pid("p", "x").is_err());
        assert_eq!(number("n", "18446744073709551615\n"), Ok(u64::MAX));
        assert!(number("n", "-3").is_err());
        assert_eq!(operations("vaddr\nfvaddr\npaddr\n"), vec!["vaddr", "fvaddr", "paddr"]);
        assert_eq!(operations("paddr\n"), vec!["paddr"]);
        assert!(operations("\n").is_empty());
    }

    #[test]
    fn reads_a_tried_region() {
        let r = region("tried_regions/3", "4294967296\n", "4311744512\n", "17\n", "42\n").unwrap();
        assert_eq!(r, Region { start: 4294967296, end: 4311744512, nr_accesses: 17, age: 42 });
        assert_eq!(r.bytes(), 16 << 20);
        let e = region("tried_regions/3", "10", "5", "0", "0").unwrap_err();
        assert_eq!(e.file, "tried_regions/3/end");
        assert!(region("tried_regions/3", "10", "20", "", "0").is_err());
    }

    #[test]
    fn reads_a_kdamonds_cpu_time() {
        // /proc/77/stat of this host's kdamond.0.
        let stat = "77 (kdamond.0) S 2 0 0 0 -1 2129984 0 0 0 0 3 142 0 0 20 0 1 0 58 0 0 18446744073709551615 0 0 0 0 0 0 0 2147483647 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n";
        assert_eq!(cpu_ticks(stat), Some(145));
        assert_eq!(cpu_ticks("77 (k d) S 2"), None);
    }

    #[test]
    fn lists_numbered_entries_in_order() {
        assert_eq!(numbered_entries(["10", "2", "total_bytes", "0"]), vec![0, 2, 10]);
    }
}
