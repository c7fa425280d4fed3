//! Numbers as the screen shows them: short, unit-bearing, never panicking on odd values.

/// Bytes in binary units: `512 B`, `3.2 MiB`, `14.0 GiB`.
pub fn bytes(b: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i < UNITS.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[i])
    }
}

/// A count with k/M/G suffixes: `950`, `12.3k`, `4.0M`.
pub fn count(n: u64) -> String {
    si(n as f64)
}

/// A rate per second, `-` when unknown: `0`, `3.1k`.
pub fn rate(r: Option<f64>) -> String {
    match r {
        Some(r) if r.is_finite() && r >= 0.0 => si(r),
        _ => "-".into(),
    }
}

fn si(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if a < 1000.0 {
        if a == a.trunc() || a >= 100.0 {
            format!("{v:.0}")
        } else {
            format!("{v:.1}")
        }
    } else if a < 1e6 {
        format!("{:.1}k", v / 1e3)
    } else if a < 1e9 {
        format!("{:.1}M", v / 1e6)
    } else {
        format!("{:.1}G", v / 1e9)
    }
}

/// A share 0..=1 as a percentage, `-` when unknown.
pub fn percent(s: Option<f64>) -> String {
    match s {
        Some(s) if s.is_finite() => format!("{:.0}%", (s * 100.0).clamp(0.0, 100.0)),
        _ => "-".into(),
    }
}

/// Nanoseconds as a short duration: `850ns`, `12.3us`, `4.1ms`, `2.0s`.
pub fn nanos(ns: u64) -> String {
    let v = ns as f64;
    if ns == u64::MAX {
        ">18s".into()
    } else if v < 1e3 {
        format!("{ns}ns")
    } else if v < 1e6 {
        format!("{:.1}us", v / 1e3)
    } else if v < 1e9 {
        format!("{:.1}ms", v / 1e6)
    } else {
        format!("{:.1}s", v / 1e9)
    }
}

/// The age of a value taken at `at_ns`, seen at `now_ns`: `0.4s ago`, `3m ago`.
pub fn age(at_ns: u64, now_ns: u64) -> String {
    let s = now_ns.saturating_sub(at_ns) as f64 / 1e9;
    if s < 60.0 {
        format!("{s:.1}s ago")
    } else if s < 3600.0 {
        format!("{:.0}m ago", s / 60.0)
    } else {
        format!("{:.1}h ago", s / 3600.0)
    }
}

/// A horizontal bar of `width` cells filled to `share` (0..=1), with eighth-cell resolution.
pub fn bar(share: f64, width: usize) -> String {
    const PARTS: [char; 8] = [' ', '▏', '▎', '▍', '▌', '▋', '▊', '▉'];
    let share = if share.is_finite() { share.clamp(0.0, 1.0) } else { 0.0 };
    let eighths = (share * width as f64 * 8.0).round() as usize;
    let full = eighths / 8;
    let mut s: String = "█".repeat(full.min(width));
    if full < width {
        s.push(PARTS[eighths % 8]);
        s.push_str(&" ".repeat(width - full - 1));
    }
    s
}

/// Cuts `s` to at most `n` characters, marking the cut with `…`.
pub fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        return s.to_string();
    }
    if n == 0 {
        return String::new();
    }
    let mut out: String = s.chars().take(n - 1).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(6_645_964 * 1024), "6.3 GiB");
        assert_eq!(bytes(u64::MAX), "16384.0 PiB");
        assert_eq!(count(950), "950");
        assert_eq!(count(12_345), "12.3k");
        assert_eq!(rate(Some(2.5)), "2.5");
        assert_eq!(rate(None), "-");
        assert_eq!(rate(Some(f64::NAN)), "-");
        assert_eq!(percent(Some(0.256)), "26%");
        assert_eq!(percent(Some(7.0)), "100%");
        assert_eq!(nanos(850), "850ns");
        assert_eq!(nanos(4_100_000), "4.1ms");
        assert_eq!(age(1_000_000_000, 1_400_000_000), "0.4s ago");
        assert_eq!(age(5, 1), "0.0s ago");
    }

    #[test]
    fn bars_fill_exactly_their_width() {
        assert_eq!(bar(0.0, 4), "    ");
        assert_eq!(bar(1.0, 4), "████");
        assert_eq!(bar(0.5, 4), "██  ");
        assert_eq!(bar(0.5 + 1.0 / 32.0, 4), "██▏ ");
        assert_eq!(bar(f64::NAN, 3), "   ");
        assert_eq!(bar(2.0, 0), "");
        for i in 0..=100 {
            assert_eq!(bar(i as f64 / 100.0, 7).chars().count(), 7);
        }
    }

    #[test]
    fn truncation_marks_the_cut() {
        assert_eq!(truncate("python3", 10), "python3");
        assert_eq!(truncate("python3", 4), "pyt…");
        assert_eq!(truncate("python3", 0), "");
    }
}
