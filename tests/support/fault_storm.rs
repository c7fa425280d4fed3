//! `tierscope-fault-storm [MIB] [ROUNDS] [WAIT_MS]`: the fault-heavy workload `cargo xtask bench`
//! times with and without the agent. It first sleeps WAIT_MS (default 0; not timed: an agent then
//! knows the process before its first fault). Each round maps MIB MiB (default 256) of anonymous
//! memory without huge pages, writes one byte per page (one fault each), and unmaps it. Prints one line:
//! `faults=N elapsed_ns=T ns_per_fault=X cpu_ns_per_fault=Y`, faults being the process's minflt
//! delta and Y its own CPU time per fault (steadier than wall time on a busy machine).

fn usage() -> libc::rusage {
    // SAFETY: getrusage fills the struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    ru
}

fn minflt() -> u64 {
    usage().ru_minflt as u64
}

/// User + system CPU time of this process, ns: what each fault costs the process itself
/// (probes run in its context), whatever else competes for the CPUs.
fn cpu_ns() -> u64 {
    let ru = usage();
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    ns(ru.ru_utime) + ns(ru.ru_stime)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let parse = |i: usize, default: usize| match args.get(i) {
        None => default,
        Some(s) => s.parse().unwrap_or_else(|_| {
            eprintln!(
                "tierscope-fault-storm: {s:?} is not a number; usage: tierscope-fault-storm [MIB] [ROUNDS] [WAIT_MS]"
            );
            std::process::exit(2)
        }),
    };
    let (mib, rounds, wait_ms) = (parse(0, 256), parse(1, 4), parse(2, 0));
    std::thread::sleep(std::time::Duration::from_millis(wait_ms as u64));
    let bytes = mib << 20;
    let (f0, c0) = (minflt(), cpu_ns());
    let t = std::time::Instant::now();
    for _ in 0..rounds {
        let p = tierscope_tests::map_anon(bytes).unwrap_or_else(|e| {
            eprintln!("tierscope-fault-storm: mmap {mib} MiB: {e}; try fewer MiB");
            std::process::exit(1);
        });
        // SAFETY: our fresh mapping, written inside its bounds, then unmapped.
        unsafe {
            // One fault per base page: the bench measures the per-fault cost, not THP's.
            libc::madvise(p.cast(), bytes, libc::MADV_NOHUGEPAGE);
            for off in (0..bytes).step_by(4096) {
                p.add(off).write_volatile(1);
            }
            libc::munmap(p.cast(), bytes);
        }
    }
    let ns = t.elapsed().as_nanos() as u64;
    let faults = minflt() - f0;
    let cpu = cpu_ns() - c0;
    println!(
        "faults={faults} elapsed_ns={ns} ns_per_fault={:.1} cpu_ns_per_fault={:.1}",
        ns as f64 / faults.max(1) as f64,
        cpu as f64 / faults.max(1) as f64
    );
}
