//! The agent's kernel memory on few and many CPUs (issue 28): the same memory and the same
//! sizing in a 2-CPU and a 64-CPU guest, `check`'s measured total in each (every map's fdinfo
//! memlock), `run` starting there and logging the same figure, and the line through the two
//! measured points drawn to the CPU counts of real training nodes.
use serde_json::Value;

use super::scenarios::{Figure, Report};

/// The target at 256 possible CPUs.
const TARGET_AT_256: f64 = 64.0 * MIB;
const MIB: f64 = (1u64 << 20) as f64;

/// The `kernel_memory` object of the guest's `check --json`.
fn kernel_memory(r: &Report) -> Option<&Value> {
    r.snapshots.get("check")?.get("kernel_memory")
}

fn total(r: &Report) -> Option<f64> {
    kernel_memory(r)?.get("total_bytes")?.as_f64()
}

/// One guest: `check` measured the maps at the guest's possible CPUs, and `run` logged the same
/// total (same sizing, same maps) when it started and served.
pub fn judge(r: &Report) -> Vec<Figure> {
    let km = kernel_memory(r);
    let cpus = km.and_then(|k| k.pointer("/machine/possible_cpus")).and_then(Value::as_f64);
    let measured = total(r).map(|b| b / MIB);
    // The watch's per-process maps as the kernel made them at this CPU count: an LRU map's per-CPU
    // free lists take entries 128 at a time, so at 64 CPUs one of the watch's size would evict
    // live processes' entries long before it is full (issue 41).
    let kind =
        |name: &str| km?.pointer("/maps/maps")?.as_array()?.iter().find(|m| m["name"] == name)?.get("kind")?.as_str();
    let watch_kinds = (kind("CPU_BUDGET"), kind("SITE_PENDING"));
    vec![
        Figure {
            name: format!(
                "the watch's maps at these CPUs: CPU_BUDGET {:?}, SITE_PENDING {:?}",
                watch_kinds.0, watch_kinds.1
            ),
            kernel: None,
            agent: None,
            ok: watch_kinds == (Some("hash"), Some("per_cpu_hash")),
            rule: "plain hashes, never LRU".into(),
        },
        Figure::close("check's possible CPUs", r.truth("possible_cpus"), cpus, 0.0, 0.0),
        // The log line rounds to 0.1 MiB.
        Figure::close(
            "run's logged kernel memory (MiB) = check's",
            measured,
            r.truth("run_kernel_memory_mib"),
            0.0,
            0.06,
        ),
    ]
}

/// Both guests: the line through (2, T2) and (64, T64) measured, its slope against what `check`
/// computes each possible CPU adds (from the maps' types and sizes), the 2-CPU check's own
/// prediction for 64 CPUs against the 64-CPU measurement, and the line's figure at 256 CPUs
/// against the target.
pub fn line(few: &Report, many: &Report) -> (Vec<Figure>, String) {
    let (t2, t64) = (total(few), total(many));
    let slope = t2.zip(t64).map(|(a, b)| (b - a) / 62.0);
    let per_cpu_model = kernel_memory(few).and_then(|k| k.get("bytes_per_possible_cpu")).and_then(Value::as_f64);
    let predicted_64 = kernel_memory(few)
        .and_then(|k| k.get("at_cpus"))
        .and_then(Value::as_array)
        .and_then(|a| a.iter().find(|p| p.get(0).and_then(Value::as_u64) == Some(64)))
        .and_then(|p| p.get(1))
        .and_then(Value::as_f64);
    let sizes = |r: &Report| kernel_memory(r).and_then(|k| k.get("sizes")).cloned();
    let same_sizes = sizes(few).is_some() && sizes(few) == sizes(many);
    let at = |cpus: f64| t2.zip(slope).map(|(t, s)| t + (cpus - 2.0) * s);
    let at_256 = at(256.0);
    let figures = vec![
        Figure {
            name: "both guests sized their maps the same".into(),
            kernel: None,
            agent: None,
            ok: same_sizes,
            rule: format!("2 CPUs {:?} / 64 CPUs {:?}", sizes(few), sizes(many)),
        },
        // fdinfo's memlock of a per-CPU map is its per-CPU values rounded to 8 bytes plus the
        // map's own struct: the model adds what the kernel adds, so they agree to a few bytes.
        Figure::close("bytes per possible CPU: measured line vs check's model", per_cpu_model, slope, 0.01, 64.0),
        Figure::close("at 64 CPUs: measured vs the 2-CPU guest's prediction", predicted_64, t64, 0.01, 0.0),
        Figure {
            name: "the line at 256 CPUs under 64 MiB".into(),
            kernel: Some(TARGET_AT_256 / MIB),
            agent: at_256.map(|b| (b / MIB * 10.0).round() / 10.0),
            ok: at_256.is_some_and(|b| b < TARGET_AT_256),
            rule: "MiB, agent < kernel".into(),
        },
    ];
    let mib = |v: Option<f64>| v.map_or("-".into(), |b| format!("{:.1} MiB", b / MIB));
    let summary = format!(
        "kernel memory {} at 2 CPUs, {} at 64 measured; {:.1} KiB per possible CPU (check's model {:.1}); by the line {} at 256, {} at 384",
        mib(t2),
        mib(t64),
        slope.unwrap_or(f64::NAN) / 1024.0,
        per_cpu_model.unwrap_or(f64::NAN) / 1024.0,
        mib(at_256),
        mib(at(384.0)),
    );
    (figures, summary)
}
