//! Fuzz targets for every parser of outside input, each a pure `fn(&[u8])` that must never panic,
//! and a mutation driver that runs them from seeds (the captured fixtures). `cargo xtask fuzz
//! [--seconds N]` runs each target for N seconds; the unit tests run each for a short pass.
//! A panicking input is written to `target/fuzz-crashes/` and fails the run.
//!
//! Why not libFuzzer: cargo-fuzz builds the whole agent (aya, tokio, opentelemetry...) again with
//! the nightly compiler and sanitizers, more than 10 minutes on this project's 2-core machines
//! for each CI run; the targets are plain functions, so a cargo-fuzz crate can wrap them as is.
use std::path::Path;

/// A target: its name, the function, and seed inputs.
pub struct Target {
    pub name: &'static str,
    pub run: fn(&[u8]),
    pub seeds: fn() -> Vec<Vec<u8>>,
}

fn text(data: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(data)
}

fn numa_maps(data: &[u8]) {
    let r = crate::model::residency::parse_numa_maps(&text(data), 4096);
    let _ = r.total_pages();
}

/// The sysfs topology files: the first byte picks the parser.
fn sysfs(data: &[u8]) {
    use crate::topology::parse::*;
    let Some((&which, rest)) = data.split_first() else { return };
    let t = text(rest);
    match which % 8 {
        0 => drop(id_list(&t)),
        1 => drop(node_meminfo(&t)),
        2 => drop(distances(&t)),
        3 => drop(tiering_vmstat(&t)),
        4 => drop(decimal(&t)),
        5 => drop(hex(&t)),
        6 => drop(optional_node(&t)),
        _ => drop(crate::collect::tracefs::tracefs_mounts(&t)),
    }
}

fn trace_format(data: &[u8]) {
    if let Ok(f) = crate::trace_format::EventFormat::parse(&text(data)) {
        let _ = f.record_len();
    }
    if let Ok(f) = crate::health::HealthFormat::parse(&text(data)) {
        let _ = crate::health::format::raw_fields(&f, data);
    }
}

/// A decoder that knows the raw formats of the captured kernels (sched NUMA moves, CXL, EDAC).
fn decoder() -> crate::collect::events::Decoder {
    use tierscope_common::event::{HealthSource, RawSource};
    let ev = |t: &str| crate::trace_format::EventFormat::parse(t).ok();
    let hf = |t: &str| crate::health::HealthFormat::parse(t).ok();
    let raw = [
        (RawSource::SchedMoveNuma, ev(MOVE_NUMA)),
        (RawSource::SchedSwapNuma, ev(SWAP_NUMA)),
        (RawSource::SchedStickNuma, ev(STICK_NUMA)),
    ];
    let health = [
        (HealthSource::CxlGeneralMedia, hf(GENERAL_MEDIA)),
        (HealthSource::CxlDram, hf(DRAM)),
        (HealthSource::CxlMemoryModule, hf(MEMORY_MODULE)),
        (HealthSource::CxlPoison, hf(POISON)),
        (HealthSource::CxlAerUncorrectable, hf(AER_UE)),
        (HealthSource::CxlOverflow, hf(OVERFLOW)),
        (HealthSource::McEvent, hf(MC_EVENT)),
    ];
    crate::collect::events::Decoder {
        raw_formats: raw.into_iter().filter_map(|(s, f)| Some((s, f?))).collect(),
        health_formats: health.into_iter().filter_map(|(s, f)| Some((s, f?))).collect(),
    }
}

thread_local! {
    static DECODER: crate::collect::events::Decoder = decoder();
}

/// Ring-buffer records as the reader decodes them (every kind, the raw and CXL/EDAC ones with
/// the captured formats).
fn ring_record(data: &[u8]) {
    DECODER.with(|d| {
        let _ = d.decode(data);
    });
}

/// CXL and EDAC event records: the first byte picks the source, the rest is the raw record.
fn cxl_event(data: &[u8]) {
    use tierscope_common::event::HealthSource;
    let Some((&which, rest)) = data.split_first() else { return };
    let (source, _, _) = HealthSource::ALL[usize::from(which) % HealthSource::ALL.len()];
    DECODER.with(|d| {
        if let Some((_, f)) = d.health_formats.iter().find(|(s, _)| *s == source) {
            let _ = crate::health::event::decode(source, f, rest, 1, 1);
        }
    });
}

fn config(data: &[u8]) {
    if let Ok(file) = crate::export::config::parse_file(&text(data)) {
        let _ = crate::export::config::resolve(&file, &Default::default(), &Default::default());
    }
}

fn session_file(data: &[u8]) {
    let _ = crate::recording::parse(data, Path::new("fuzz.tscope"));
}

/// Session records behind valid framing (a chunk with the right checksum around the input), so
/// the record decoder is reached.
fn session_records(data: &[u8]) {
    let Ok(chunk) = crate::recording::format::encode_chunk(data) else { return };
    let mut file = crate::recording::format::header().to_vec();
    file.extend_from_slice(&chunk);
    let _ = crate::recording::parse(&file, Path::new("fuzz.tscope"));
}

const MOVE_NUMA: &str = include_str!("../fixtures/tracefs/host-6.18/sched/sched_move_numa/format");
const SWAP_NUMA: &str = include_str!("../fixtures/tracefs/host-6.18/sched/sched_swap_numa/format");
const STICK_NUMA: &str = include_str!("../fixtures/tracefs/host-6.18/sched/sched_stick_numa/format");
const GENERAL_MEDIA: &str = include_str!("../fixtures/tracefs/guest-6.12/cxl/cxl_general_media/format");
const DRAM: &str = include_str!("../fixtures/tracefs/guest-6.12/cxl/cxl_dram/format");
const MEMORY_MODULE: &str = include_str!("../fixtures/tracefs/guest-6.12/cxl/cxl_memory_module/format");
const POISON: &str = include_str!("../fixtures/tracefs/guest-6.12/cxl/cxl_poison/format");
const AER_UE: &str = include_str!("../fixtures/tracefs/guest-6.12/cxl/cxl_aer_uncorrectable_error/format");
const OVERFLOW: &str = include_str!("../fixtures/tracefs/guest-6.12/cxl/cxl_overflow/format");
const MC_EVENT: &str = include_str!("../fixtures/tracefs/host-6.18/ras/mc_event/format");
const NUMA_MAPS: &str = include_str!("../fixtures/proc/numa_maps-python-64mib.txt");
const PAGE_ALLOC: &str = include_str!("../fixtures/tracefs/host-6.18/kmem/mm_page_alloc/format");
const MIGRATE: &str = include_str!("../fixtures/tracefs/guest-6.12/migrate/mm_migrate_pages/format");

fn seeds_of(texts: &[&str]) -> Vec<Vec<u8>> {
    texts.iter().map(|t| t.as_bytes().to_vec()).collect()
}

/// Every target.
pub const TARGETS: &[Target] = &[
    Target { name: "numa_maps", run: numa_maps, seeds: || seeds_of(&[NUMA_MAPS]) },
    Target {
        name: "sysfs",
        run: sysfs,
        seeds: || {
            let files = [
                "0-3,8-11\n",
                "Node 0 MemTotal: 1024 kB\nNode 0 MemFree: 512 kB\n",
                "10 20\n",
                "pgpromote_success 3\npgdemote_kswapd 4\n",
                "42\n",
                "0x1000\n",
                "-1\n",
                "35 22 0:12 / /sys/kernel/tracing rw - tracefs nodev rw\n",
            ];
            files.iter().enumerate().map(|(i, f)| [&[i as u8][..], f.as_bytes()].concat()).collect()
        },
    },
    Target {
        name: "trace_format",
        run: trace_format,
        seeds: || seeds_of(&[PAGE_ALLOC, MIGRATE, MOVE_NUMA, GENERAL_MEDIA, MC_EVENT]),
    },
    Target { name: "ring_record", run: ring_record, seeds: ring_seeds },
    Target {
        name: "cxl_event",
        run: cxl_event,
        seeds: || (0..8u8).map(|i| [&[i][..], &[0u8; 256][..]].concat()).collect(),
    },
    Target {
        name: "config",
        run: config,
        seeds: || {
            seeds_of(&[
                "[otlp]\nendpoint = \"http://127.0.0.1:4317\"\nprotocol = \"grpc\"\ntimeout_ms = 1000\n[otlp.headers]\na = \"b\"\n",
                "[prometheus]\nlisten = \"127.0.0.1:9464\"\n[collect]\nread_interval_ms = 100\nevent_ring_kib = 64\nmax_tracked = 10\n",
                "[track]\nmatch = \"python\"\npids = [1, 2]\n[tiers]\ncxl = [2]\n[privacy]\nredact = [\"tok_[a-z]+\"]\n[export]\nqueue_batches = 4\n",
            ])
        },
    },
    Target { name: "session_file", run: session_file, seeds: session_seeds },
    Target { name: "session_records", run: session_records, seeds: || vec![vec![0u8; 64], b"{}".to_vec()] },
];

/// One record of each kind, with a plausible header.
fn ring_seeds() -> Vec<Vec<u8>> {
    (0..12u32)
        .map(|kind| {
            let mut b = vec![0u8; 256];
            b[..4].copy_from_slice(&kind.to_le_bytes());
            b[4..8].copy_from_slice(&1234u32.to_le_bytes());
            b
        })
        .collect()
}

/// A small real session: the header and one framed chunk.
fn session_seeds() -> Vec<Vec<u8>> {
    let mut file = crate::recording::format::header().to_vec();
    if let Ok(c) = crate::recording::format::encode_chunk(b"\x01\x00\x00\x00{\"schema\":1}") {
        file.extend_from_slice(&c);
    }
    vec![file]
}

/// xorshift64*: reproducible from the printed seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

/// Bytes that matter to these text and binary formats.
const INTERESTING: &[u8] = b"\0\n\t ;:=,-0123456789xX\xff\x7f\x80[]\"{}N";

/// One mutation of `input`, sometimes spliced with `other`.
fn mutate(rng: &mut Rng, input: &mut Vec<u8>, other: &[u8]) {
    let len = input.len();
    match rng.below(9) {
        0 if len > 0 => {
            let i = rng.below(len);
            input[i] ^= 1 << rng.below(8);
        }
        1 if len > 0 => {
            let i = rng.below(len);
            input[i] = INTERESTING[rng.below(INTERESTING.len())];
        }
        2 => {
            let i = rng.below(len + 1);
            input.insert(i, INTERESTING[rng.below(INTERESTING.len())]);
        }
        3 if len > 0 => {
            let (a, n) = (rng.below(len), 1 + rng.below(16));
            input.drain(a..(a + n).min(len));
        }
        4 if len > 0 => {
            let (a, n) = (rng.below(len), 1 + rng.below(64));
            let piece: Vec<u8> = input[a..(a + n).min(len)].to_vec();
            let at = rng.below(input.len() + 1);
            input.splice(at..at, piece);
        }
        5 => input.truncate(rng.below(len + 1)),
        6 if !other.is_empty() => {
            let (a, n) = (rng.below(other.len()), 1 + rng.below(256));
            let at = rng.below(len + 1);
            input.splice(at..at, other[a..(a + n).min(other.len())].iter().copied());
        }
        7 if len >= 8 => {
            // A little-endian integer field set to an edge value.
            let i = rng.below(len - 7);
            let v: u64 = [0, 1, u64::MAX, u64::from(u32::MAX), 1 << 31, 4096, 65535][rng.below(7)];
            input[i..i + 8].copy_from_slice(&v.to_le_bytes());
        }
        _ => {
            let i = rng.below(len + 1);
            let digits = (rng.next() % 100_000_000_000).to_string();
            input.splice(i..i, digits.bytes());
        }
    }
}

/// What one target's run did.
#[derive(Debug)]
pub struct Outcome {
    pub execs: u64,
    /// A panicking input, saved where this names.
    pub crash: Option<String>,
}

/// Runs `t` for `seconds` from its seeds (random seed `seed`); a panicking input is written
/// under `crash_dir`.
pub fn run_target(t: &Target, seconds: f64, seed: u64, crash_dir: &Path) -> Outcome {
    let seeds = (t.seeds)();
    let mut rng = Rng(seed | 1);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs_f64(seconds);
    let mut execs = 0u64;
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut crash = None;
    let mut input = Vec::new();
    while std::time::Instant::now() < deadline && crash.is_none() {
        for _ in 0..64 {
            input.clone_from(&seeds[rng.below(seeds.len())]);
            let other = &seeds[rng.below(seeds.len())];
            for _ in 0..1 + rng.below(8) {
                mutate(&mut rng, &mut input, other);
            }
            input.truncate(1 << 16);
            execs += 1;
            if std::panic::catch_unwind(|| (t.run)(&input)).is_err() {
                let _ = std::fs::create_dir_all(crash_dir);
                let path = crash_dir.join(format!("{}-{seed:x}-{execs}.bin", t.name));
                let _ = std::fs::write(&path, &input);
                crash = Some(path.display().to_string());
                break;
            }
        }
    }
    std::panic::set_hook(hook);
    Outcome { execs, crash }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The short pass (`cargo xtask fuzz` sets `TIERSCOPE_FUZZ_SECONDS` for a long one).
    #[test]
    fn no_parser_panics_on_mutated_input() {
        let seconds: f64 = std::env::var("TIERSCOPE_FUZZ_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(2.0);
        let seed =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64);
        let crash_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/fuzz-crashes");
        let mut crashes = Vec::new();
        for t in TARGETS {
            // Every seed is accepted without a panic first.
            for s in (t.seeds)() {
                (t.run)(&s);
            }
            let o = run_target(t, seconds, seed, &crash_dir);
            println!("fuzz {:<16} {:>9} inputs in {seconds} s (seed {seed:#x})", t.name, o.execs);
            crashes.extend(o.crash);
        }
        assert!(crashes.is_empty(), "inputs that panic (replay them with the target): {crashes:?}");
    }
}
