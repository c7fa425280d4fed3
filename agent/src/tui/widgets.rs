//! The drawing helpers every view uses: padded cells, headings, scrolled text, sparklines.
use ratatui::{
    layout::Rect,
    text::{Line, Span},
    widgets::Paragraph,
};

use super::{format, theme};

/// Left-aligned in `w` cells (cut with … when longer).
pub fn pad(s: &str, w: usize) -> String {
    format!("{:<w$}", format::truncate(s, w))
}

/// Right-aligned in `w` cells.
pub fn rpad(s: &str, w: usize) -> String {
    format!("{:>w$}", format::truncate(s, w))
}

/// A section heading line.
pub fn heading(s: &str) -> Line<'static> {
    Line::from(Span::styled(s.to_string(), theme::title()))
}

/// Lines scrolled by `scroll`, clamped so the last line can still reach the bottom.
pub fn scrolled(lines: Vec<Line<'static>>, area: Rect, scroll: usize) -> Paragraph<'static> {
    let max = lines.len().saturating_sub(area.height as usize);
    let top = scroll.min(max).min(u16::MAX as usize) as u16;
    Paragraph::new(lines).scroll((top, 0))
}

/// Values as one row of block characters, scaled to their maximum (blank for zero).
pub fn spark(values: &[u64]) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let max = values.iter().copied().max().unwrap_or(0);
    values
        .iter()
        .map(|&v| {
            if v == 0 || max == 0 {
                ' '
            } else {
                let i = ((v as u128 * 7) / max as u128) as usize;
                BARS[i.min(7)]
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spark_scales_to_the_maximum() {
        assert_eq!(spark(&[0, 1, 7, 14]), " ▁▄█");
        assert_eq!(spark(&[]), "");
        assert_eq!(spark(&[0, 0]), "  ");
        assert_eq!(spark(&[u64::MAX, 1]), "█▁");
    }

    #[test]
    fn padding_keeps_the_width() {
        assert_eq!(pad("python3", 4), "pyt…");
        assert_eq!(rpad("12", 4), "  12");
        assert_eq!(pad("", 2), "  ");
    }
}
