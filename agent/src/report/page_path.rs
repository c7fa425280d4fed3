//! How a recording's page path counted, as its report says it: exact (every page event
//! counted), sampled (which of the report's figures are estimates, the weights used and the
//! time at each, and why that mode), or not recorded (a recording made before tierscope kept
//! it); and the warning `diff` puts first when two runs did not count the same way. Pure.
use serde::{Deserialize, Serialize};

use crate::{
    model::page_path::{PagePathMode, PagePathReason},
    recording::records::{Meta, PagePathFrame},
};

/// The report's figures that are estimates in sampled mode (Horvitz-Thompson: each page event
/// the programs saw counted w times, `docs/how-it-measures.md`).
pub const ESTIMATED: [&str; 4] = [
    "pages allocated and freed per node",
    "pages allocated per process and node",
    "the CXL allocation sites' pages",
    "each training step's pages allocated",
];

/// The time spent at one weight.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WeightTime {
    pub weight: u64,
    pub ms: u64,
    /// Share of the time at any weight, percent.
    pub share_pct: f64,
}

/// The page path of one recording.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PagePathUse {
    /// `exact` or `sampled`; absent when the recording does not say (made before tierscope
    /// recorded it).
    pub mode: Option<PagePathMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<PagePathReason>,
    /// Why, in words.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub chosen: String,
    /// Why the mode wanted is not the one that ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The report's figures that are estimates (sampled mode).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub estimated: Vec<String>,
    /// The time at each weight up to the last frame, lowest weight first (sampled mode).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub weights: Vec<WeightTime>,
    /// The weight in use at the last frame (sampled mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_at_end: Option<u64>,
}

impl PagePathUse {
    pub fn sampled(&self) -> bool {
        self.mode == Some(PagePathMode::Sampled)
    }

    /// One word for tables: `exact`, `sampled` or `not recorded`.
    pub fn word(&self) -> &'static str {
        self.mode.map_or("not recorded", PagePathMode::name)
    }
}

/// The page path of a recording from its `meta` record and the sampling's state at its last
/// frame.
pub fn analyze(meta: &Meta, last: Option<&PagePathFrame>) -> PagePathUse {
    let Some(pp) = &meta.page_path else { return PagePathUse::default() };
    let mut u = PagePathUse {
        mode: Some(pp.mode),
        reason: pp.reason,
        chosen: pp.chosen.clone(),
        note: pp.note.clone(),
        ..PagePathUse::default()
    };
    if pp.mode == PagePathMode::Sampled {
        u.estimated = ESTIMATED.iter().map(|s| s.to_string()).collect();
        if let Some(f) = last {
            let all: u64 = f.ms_by_weight.values().sum();
            u.weights = f
                .ms_by_weight
                .iter()
                .filter(|(_, &ms)| ms > 0)
                .map(|(&weight, &ms)| WeightTime {
                    weight,
                    ms,
                    share_pct: if all > 0 { ms as f64 * 100.0 / all as f64 } else { 0.0 },
                })
                .collect();
            u.weight_at_end = Some(f.weight);
        }
    }
    u
}

/// The weights as words: `w=1 12.0% of the time, w=8 88.0%`.
fn weights_words(u: &PagePathUse) -> String {
    let mut parts: Vec<String> = u
        .weights
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let of = if i == 0 { " of the time" } else { "" };
            format!("w={} {:.1}%{of}", w.weight, w.share_pct)
        })
        .collect();
    if let Some(w) = u.weight_at_end {
        parts.push(format!("w={w} at the end"));
    }
    if parts.is_empty() {
        "no frame recorded the weights".into()
    } else {
        parts.join(", ")
    }
}

/// What the report says of the page path, one paragraph without its "Page path:" label.
pub fn words(u: &PagePathUse) -> String {
    match u.mode {
        None => "not recorded (a recording made before tierscope kept it): its allocation and free counts may be \
                 exact or estimates (a node with a CXL tier samples by default); record with this tierscope to know"
            .into(),
        Some(PagePathMode::Exact) => match &u.note {
            Some(note) => format!("exact, every page event counted (sampled was wanted, not possible: {note})"),
            None if u.chosen.is_empty() => "exact, every page event counted".into(),
            None => format!("exact, every page event counted ({})", u.chosen),
        },
        Some(PagePathMode::Sampled) => format!(
            "sampled: estimates (each page event seen counted w times, the programs attached 1/w of the time): {}. \
             Weights: {}. Exact: faults, residency, migrations. Why sampled: {}",
            u.estimated.join(", "),
            weights_words(u),
            if u.chosen.is_empty() { "not recorded" } else { u.chosen.as_str() }
        ),
    }
}

/// `diff`'s warning when the two runs did not count pages the same way (modes differ, or one
/// recording does not say); `None` when both say the same mode, or neither says.
pub fn diff_warning(a: &PagePathUse, b: &PagePathUse, a_name: &str, b_name: &str) -> Option<String> {
    if a.mode == b.mode {
        return None;
    }
    let how = |u: &PagePathUse| match u.mode {
        Some(PagePathMode::Sampled) => "sampled (its allocation counts are estimates)",
        Some(PagePathMode::Exact) => "exact (every page event counted)",
        None => "with a page path it does not record (made before tierscope kept it)",
    };
    Some(format!(
        "the runs' page paths differ: A ({a_name}) was recorded {}, B ({b_name}) {}. Pages allocated and freed per \
         node, per process and at the CXL sites are not comparable one to one: an estimate against an exact count, \
         or against a count of unknown kind. Record both the same way: `tierscope record --page-path exact` (or \
         `--page-path sampled`) for each run",
        how(a),
        how(b)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::records::PagePathRec;

    fn meta(mode: PagePathMode, reason: PagePathReason, chosen: &str) -> Meta {
        Meta {
            page_path: Some(PagePathRec { mode, reason: Some(reason), chosen: chosen.into(), note: None }),
            ..Meta::default()
        }
    }

    #[test]
    fn a_sampled_recording_names_its_estimates_weights_and_why() {
        let m = meta(
            PagePathMode::Sampled,
            PagePathReason::DefaultCxlTier,
            "the default on a node with a CXL tier (node 2)",
        );
        let last = PagePathFrame { weight: 8, ms_by_weight: [(1, 1_000), (8, 3_000), (16, 0)].into() };
        let u = analyze(&m, Some(&last));
        assert!(u.sampled());
        assert_eq!(u.estimated.len(), ESTIMATED.len());
        let w: Vec<(u64, f64)> = u.weights.iter().map(|w| (w.weight, w.share_pct)).collect();
        assert_eq!(w, vec![(1, 25.0), (8, 75.0)], "a weight never used is left out");
        assert_eq!(u.weight_at_end, Some(8));
        let s = words(&u);
        for want in [
            "sampled: estimates",
            "pages allocated and freed per node",
            "pages allocated per process and node",
            "the CXL allocation sites' pages",
            "w=1 25.0% of the time, w=8 75.0%, w=8 at the end",
            "Why sampled: the default on a node with a CXL tier (node 2)",
        ] {
            assert!(s.contains(want), "{want:?} in {s}");
        }
        // Without a frame that carried the sampling: said, not made up.
        assert!(words(&analyze(&m, None)).contains("Weights: no frame recorded the weights"));
    }

    #[test]
    fn an_exact_recording_says_one_short_thing_and_an_old_one_that_it_does_not_know() {
        let u = analyze(&meta(PagePathMode::Exact, PagePathReason::Asked, "asked for (--page-path)"), None);
        assert!(!u.sampled() && u.estimated.is_empty() && u.weights.is_empty());
        assert_eq!(words(&u), "exact, every page event counted (asked for (--page-path))");
        let mut fell_back = meta(PagePathMode::Exact, PagePathReason::SampledUnavailable, "x");
        fell_back.page_path.as_mut().expect("recorded").note = Some("classic tracepoints".into());
        assert!(words(&analyze(&fell_back, None)).contains("not possible: classic tracepoints"));
        let old = analyze(&Meta::default(), Some(&PagePathFrame::default()));
        assert_eq!((old.mode, old.word()), (None, "not recorded"));
        assert!(words(&old).starts_with("not recorded"), "{}", words(&old));
    }

    #[test]
    fn diff_warns_when_the_modes_differ_or_one_is_unknown_and_not_when_equal() {
        let sampled = analyze(&meta(PagePathMode::Sampled, PagePathReason::DefaultCxlTier, "x"), None);
        let exact = analyze(&meta(PagePathMode::Exact, PagePathReason::Asked, "x"), None);
        let old = PagePathUse::default();
        let w = diff_warning(&sampled, &exact, "a.tscope", "b.tscope").expect("modes differ");
        assert!(w.contains("A (a.tscope) was recorded sampled") && w.contains("B (b.tscope) exact"), "{w}");
        assert!(w.contains("not comparable one to one") && w.contains("--page-path exact"), "{w}");
        let w = diff_warning(&old, &exact, "a", "b").expect("one unknown");
        assert!(w.contains("does not record"), "{w}");
        assert_eq!(diff_warning(&sampled, &sampled, "a", "b"), None);
        assert_eq!(diff_warning(&exact, &exact, "a", "b"), None);
        assert_eq!(diff_warning(&old, &old, "a", "b"), None, "neither says: nothing to compare");
    }
}
