//! Residency scans beside `numastat -p`: a target holding 1, 4 and 16 GiB of touched anonymous
//! memory (sizes that do not fit in the memory available are skipped, saying so) runs a stall
//! probe (a thread that maps and unmaps 64 KiB in a loop, which needs the mmap lock a scan holds
//! for reading, and keeps its longest iteration); the agent's scan time (`tierscope snapshot
//! --pid`: `agent.residency_scan_ms` / `residency_scans`) and numastat's wall time are printed
//! with the longest stall each caused, beside the stall of an idle phase of the same length, and
//! the agent's own figure of its longest hold (`agent.residency_longest_hold_ms`: its longest
//! single numa_maps read, one mapping's walk). Each size is held in one mapping, and in 256 MiB
//! mappings (as allocators hold large tensors): the agent reads one mapping per lock hold, so
//! the stall follows the largest mapping, not the process.
use std::{
    io::{BufRead as _, BufReader, Write as _},
    path::Path,
    process::{ChildStdin, ChildStdout, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _, Result};

use crate::bench::verdict;

const SIZES_GIB: [u64; 3] = [1, 4, 16];

/// Mappings of the target: one, or 256 MiB each (0: one).
const CHUNKS_MIB: [u64; 2] = [0, 256];

const TARGET: &str = r#"
import ctypes, mmap, sys, threading, time
n = int(sys.argv[1]) << 30
chunk = (int(sys.argv[2]) << 20) or n
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
keep = []
for _ in range(n // chunk):
    # A guard page after each chunk keeps the kernel from merging neighbours into one mapping.
    a = libc.mmap(None, chunk + 4096, 3, 0x22, -1, 0)
    libc.mprotect(a + chunk, 4096, 0)
    ctypes.memset(a, 1, chunk)
    keep.append(a)
worst = [0.0]
def probe():
    while True:
        t = time.perf_counter()
        x = mmap.mmap(-1, 65536)
        x[0] = 1
        x.close()
        worst[0] = max(worst[0], time.perf_counter() - t)
threading.Thread(target=probe, daemon=True).start()
print("ready", flush=True)
for line in sys.stdin:
    print("stall_ms=%.3f" % (worst[0] * 1e3), flush=True)
    worst[0] = 0.0
"#;

fn mem_available_gib() -> f64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| m.lines().find_map(|l| l.strip_prefix("MemAvailable:"))?.split_whitespace().next()?.parse().ok())
        .map_or(0.0, |kib: f64| kib / (1 << 20) as f64)
}

/// Ends the phase: the longest stall since the last one, in ms.
fn phase(stdin: &mut ChildStdin, out: &mut impl Iterator<Item = std::io::Result<String>>) -> Result<f64> {
    stdin.write_all(b"\n").context("talking to the target")?;
    let line = out.next().context("the target ended")??;
    line.strip_prefix("stall_ms=").and_then(|v| v.parse().ok()).with_context(|| format!("target said {line:?}"))
}

fn measure(agent: &Path, gib: u64, chunk_mib: u64) -> Result<()> {
    let mut target = Command::new("python3")
        .args(["-c", TARGET, &gib.to_string(), &chunk_mib.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("starting the python3 target")?;
    let pid = target.id();
    let mut stdin = target.stdin.take().context("target stdin")?;
    let stdout: ChildStdout = target.stdout.take().context("target stdout")?;
    let mut out = BufReader::new(stdout).lines();
    let result = (|| -> Result<(f64, f64, f64, f64, f64, f64)> {
        match out.next() {
            Some(Ok(l)) if l == "ready" => {}
            other => bail!("the {gib} GiB target did not start: {other:?}"),
        }
        phase(&mut stdin, &mut out)?;
        let t = Instant::now();
        let snap = Command::new(agent)
            .args(["snapshot", "--json", "--duration", "1", "--pid", &pid.to_string()])
            .stderr(Stdio::null())
            .output()
            .context("running tierscope snapshot")?;
        let agent_wall = t.elapsed();
        let stall_agent = phase(&mut stdin, &mut out)?;
        let v: serde_json::Value = serde_json::from_slice(&snap.stdout).context("snapshot gave no JSON")?;
        let scans = v["agent"]["residency_scans"].as_f64().unwrap_or(0.0);
        let scan_ms = v["agent"]["residency_scan_ms"].as_f64().unwrap_or(f64::NAN) / scans.max(1.0);
        let hold_ms = v["agent"]["residency_longest_hold_ms"].as_f64().unwrap_or(f64::NAN);
        let t = Instant::now();
        let ok = Command::new("numastat").args(["-p", &pid.to_string()]).stdout(Stdio::null()).status()?.success();
        let numastat_ms = t.elapsed().as_secs_f64() * 1e3;
        if !ok {
            bail!("numastat -p {pid} failed");
        }
        let stall_numastat = phase(&mut stdin, &mut out)?;
        std::thread::sleep(agent_wall.min(Duration::from_secs(3)));
        let stall_idle = phase(&mut stdin, &mut out)?;
        Ok((scan_ms, hold_ms, numastat_ms, stall_agent, stall_numastat, stall_idle))
    })();
    drop(stdin);
    let _ = target.kill();
    let _ = target.wait();
    let (scan_ms, hold_ms, numastat_ms, stall_agent, stall_numastat, stall_idle) = result?;
    let shape = if chunk_mib == 0 { "1 mapping".to_string() } else { format!("{chunk_mib} MiB mappings") };
    println!(
        "bench:   {gib:>2} GiB in {shape}: agent scan {scan_ms:8.1} ms, numastat -p {numastat_ms:8.1} ms (target: no slower than numastat: {}); longest stall in the target: agent {stall_agent:.1} ms (its own longest hold {hold_ms:.1} ms), numastat {stall_numastat:.1} ms, idle {stall_idle:.1} ms",
        verdict(scan_ms, numastat_ms)
    );
    Ok(())
}

pub fn run(agent: &Path) -> Result<()> {
    println!("bench: residency scan of one process beside `numastat -p` (numastat's time includes its start-up):");
    for gib in SIZES_GIB {
        let avail = mem_available_gib();
        if avail < gib as f64 + 2.0 {
            println!("bench:   {gib:>2} GiB: not measured: {avail:.1} GiB available here, the target needs {gib} GiB + 2 GiB headroom");
            continue;
        }
        for chunk in CHUNKS_MIB {
            if let Err(e) = measure(agent, gib, chunk) {
                println!("bench:   {gib:>2} GiB: not measured: {e:#}");
            }
        }
    }
    Ok(())
}
