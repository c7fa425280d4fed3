//! The two machine shapes and one boot: QEMU 10 under TCG, serial console on stdout, QMP on a
//! unix socket, a 9p share for results, and a deadline on everything.
use std::{
    fs,
    io::{BufRead as _, BufReader, Write as _},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _, Result};

use super::{fetch::Fetched, qmp::Qmp};

/// The guest's memory layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Node 0: 512 MiB DRAM with both CPUs; node 1: 512 MiB, CPU-less, 3x the latency and a
    /// quarter of the bandwidth (HMAT), so the kernel puts it in a lower memory tier.
    Hmat,
    /// `Hmat` plus a 256 MiB volatile CXL Type 3 device behind a CXL host bridge; the guest
    /// onlines it as node 2 with `cxl create-region`.
    Cxl,
    /// Two sockets: node 0 with CPU 0 and node 1 with CPU 1, 512 MiB each, one memory tier (no
    /// HMAT): the CPU/memory affinity question without a slow tier.
    TwoSockets,
    /// Node 0 with both CPUs and node 1 CPU-less, 512 MiB each, with neither HMAT nor a CXL
    /// device: nothing says what node 1's memory is, and the kernel keeps both nodes in one
    /// memory tier (issue 29: such a node is far memory of unknown kind, not "cxl").
    Bare,
    /// One node of 1536 MiB with 2 CPUs: the few-CPU end of the kernel-memory line.
    Cpus2,
    /// The same memory with 64 CPUs (about two minutes of boot under TCG on two host cores):
    /// every per-CPU map is allocated for 64 possible CPUs.
    Cpus64,
}

impl Shape {
    pub fn name(self) -> &'static str {
        match self {
            Shape::Hmat => "hmat",
            Shape::Cxl => "cxl",
            Shape::TwoSockets => "two-sockets",
            Shape::Bare => "bare",
            Shape::Cpus2 => "cpus-2",
            Shape::Cpus64 => "cpus-64",
        }
    }

    /// More kernel arguments: the many-CPU guest skips calibrating each CPU's delay loop (the
    /// value the 2-CPU guest's boot computes from the timer), a second or more per CPU under TCG.
    fn kernel_args(self) -> &'static str {
        match self {
            Shape::Cpus64 => " lpj=10384128",
            _ => "",
        }
    }

    /// The guest's CPUs.
    pub fn cpus(self) -> u32 {
        match self {
            Shape::Cpus64 => 64,
            _ => 2,
        }
    }

    fn args(self) -> Vec<String> {
        let machine = match self {
            Shape::Hmat => "q35,hmat=on",
            Shape::Cxl => "q35,hmat=on,cxl=on",
            Shape::TwoSockets | Shape::Bare => "q35",
            Shape::Cpus2 | Shape::Cpus64 => "q35",
        };
        if matches!(self, Shape::Cpus2 | Shape::Cpus64) {
            // One TCG thread runs every vCPU in turn: with a thread per vCPU, each IPI round of
            // the boot (TLB flushes, stop_machine) waits until 64 host threads were scheduled on
            // two cores, and the boot crawled (past 600 s on a loaded host).
            return [
                "-machine",
                "q35",
                "-accel",
                "tcg,thread=single",
                "-cpu",
                "max,hypervisor=off",
                "-smp",
                &self.cpus().to_string(),
                "-m",
                "1536M",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
        }
        let mut a: Vec<String> = [
            "-machine",
            machine,
            // One TCG thread for both vCPUs, in every shape: with a thread per vCPU, a BPF
            // program attaching (text patched while the other vCPU runs it) can leave a stale
            // int3 behind, and the guest panics (insights-cxl did, in CI, after 36 s).
            "-accel",
            "tcg,thread=single",
            // hypervisor=off: the CXL driver refuses to create a region on a CPU that says it is
            // virtualized ("Failed to synchronize CPU cache state").
            "-cpu",
            "max,hypervisor=off",
            "-smp",
            "2",
            "-m",
            if self == Shape::TwoSockets { "1024M" } else { "1024M,slots=4,maxmem=16G" },
            "-object",
            "memory-backend-ram,id=m0,size=512M",
            "-object",
            "memory-backend-ram,id=m1,size=512M",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let numa: &[&str] = if self == Shape::TwoSockets {
            &["node,nodeid=0,cpus=0,memdev=m0", "node,nodeid=1,cpus=1,memdev=m1"]
        } else if self == Shape::Bare {
            &["node,nodeid=0,cpus=0-1,memdev=m0", "node,nodeid=1,memdev=m1"]
        } else {
            &[
                "node,nodeid=0,cpus=0-1,memdev=m0,initiator=0",
                "node,nodeid=1,memdev=m1,initiator=0",
                "hmat-lb,initiator=0,target=0,hierarchy=memory,data-type=access-latency,latency=100",
                "hmat-lb,initiator=0,target=0,hierarchy=memory,data-type=access-bandwidth,bandwidth=20G",
                "hmat-lb,initiator=0,target=1,hierarchy=memory,data-type=access-latency,latency=300",
                "hmat-lb,initiator=0,target=1,hierarchy=memory,data-type=access-bandwidth,bandwidth=5G",
            ]
        };
        for n in numa {
            a.extend(["-numa".to_string(), n.to_string()]);
        }
        if self == Shape::Cxl {
            a.extend(
                [
                    "-object",
                    "memory-backend-ram,id=cxlm0,share=on,size=256M",
                    "-device",
                    "pxb-cxl,bus_nr=12,bus=pcie.0,id=cxl.1",
                    "-device",
                    "cxl-rp,port=0,bus=cxl.1,id=rp0,chassis=0,slot=2",
                    "-device",
                    "cxl-type3,bus=rp0,volatile-memdev=cxlm0,id=cxl-mem0,sn=0x1234",
                    "-M",
                    "cxl-fmw.0.targets.0=cxl.1,cxl-fmw.0.size=4G",
                ]
                .iter()
                .map(|s| s.to_string()),
            );
        }
        a
    }
}

/// One boot's inputs.
pub struct Boot<'a> {
    pub fetched: &'a Fetched,
    pub initramfs: &'a Path,
    pub shape: Shape,
    /// The scenario script name the guest's `/init` runs (`tests/vm/scenarios/<name>.sh`).
    pub scenario: &'a str,
    /// Host directory shared with the guest as `/out` (9p); also holds console.log and qmp.sock.
    pub run_dir: &'a Path,
    pub timeout: Duration,
}

/// What came back from the guest.
pub struct Outcome {
    /// The status the scenario script exited with (from the `TS-EXIT` marker line).
    pub status: i32,
    /// Every console line.
    pub lines: Vec<String>,
    pub elapsed: Duration,
    /// QEMU start to the scenario's start (`TS-START`): the boot under TCG.
    pub boot: Option<Duration>,
}

/// The marker `/init` prints after the scenario, with its exit status.
const EXIT_MARKER: &str = "TS-EXIT ";
/// A line the guest prints to ask the host for a QMP command: `TS-QMP <id> <json>`; the host
/// answers by writing `<run_dir>/qmp-reply.<id>` (the guest sees it through the 9p share).
const QMP_MARKER: &str = "TS-QMP ";

/// Boots the guest, relays QMP requests, and waits for the exit marker or the deadline.
pub fn boot(b: &Boot) -> Result<Outcome> {
    let _ = fs::remove_dir_all(b.run_dir);
    fs::create_dir_all(b.run_dir)?;
    let share = b.run_dir.join("out");
    fs::create_dir_all(&share)?;
    let qmp_sock = b.run_dir.join("qmp.sock");
    let log_path = b.run_dir.join("console.log");
    let kernel_log = b.run_dir.join("kernel.log");
    let mut log = fs::File::create(&log_path)?;
    let bpo = &b.fetched.bpo_root;

    let mut cmd = Command::new(b.fetched.qemu());
    cmd.env("QEMU_MODULE_DIR", bpo.join("usr/lib/x86_64-linux-gnu/qemu"))
        // The data package's firmware files are symlinks into /usr/share/seabios: name both.
        .arg("-L")
        .arg(bpo.join("usr/share/qemu"))
        .arg("-L")
        .arg(bpo.join("usr/share/seabios"))
        .args(b.shape.args())
        .arg("-kernel")
        .arg(&b.fetched.kernel)
        .arg("-initrd")
        .arg(b.initramfs)
        .arg("-append")
        // Two serial ports: the kernel's console (ttyS1) goes to kernel.log, and /init moves its
        // own output to ttyS0 (our stdout), so kernel messages never split a protocol line.
        .arg(format!("console=ttyS1 panic=-1 ts.scenario={}{}", b.scenario, b.shape.kernel_args()))
        .args(["-display", "none", "-serial", "stdio"])
        .arg("-serial")
        .arg(format!("file:{}", kernel_log.display()))
        .args(["-monitor", "none", "-no-reboot", "-nic", "none"])
        .arg("-qmp")
        .arg(format!("unix:{},server=on,wait=off", qmp_sock.display()))
        .arg("-fsdev")
        .arg(format!("local,id=fs0,path={},security_model=none", share.display()))
        .args(["-device", "virtio-9p-pci,fsdev=fs0,mount_tag=hostshare,bus=pcie.0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = cmd.spawn().with_context(|| format!("cannot start {}", b.fetched.qemu().display()))?;
    let (tx, rx) = mpsc::channel::<Line>();
    let stdout = child.stdout.take().context("qemu stdout")?;
    let stderr = child.stderr.take().context("qemu stderr")?;
    let tx2 = tx.clone();
    std::thread::spawn(move || {
        for l in BufReader::new(stdout).split(b'\n').map_while(|l| l.ok()) {
            let s = String::from_utf8_lossy(&l).trim_end_matches('\r').to_string();
            if tx.send(Line::Out(s)).is_err() {
                break;
            }
        }
        let _ = tx.send(Line::Closed);
    });
    std::thread::spawn(move || {
        for l in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
            if tx2.send(Line::Err(l)).is_err() {
                break;
            }
        }
    });

    let deadline = start + b.timeout;
    let mut lines = Vec::new();
    let mut errs = Vec::new();
    let mut status = None;
    let mut booted = None;
    let mut qmp: Option<Qmp> = None;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(Line::Out(l)) => {
                writeln!(log, "{l}")?;
                if std::env::var_os("TS_VM_VERBOSE").is_some() {
                    println!("  | {l}");
                }
                // Only at the start of a line: a check line may quote a request.
                if let Some(req) = l.trim_start().strip_prefix(QMP_MARKER) {
                    let reply = relay_qmp(&mut qmp, &qmp_sock, req);
                    let (id, _) = req.split_once(' ').unwrap_or(("0", ""));
                    // Written then renamed, so the guest never reads half a reply.
                    let tmp = share.join(format!(".qmp-reply.{id}"));
                    fs::write(&tmp, format!("{reply}\n"))?;
                    fs::rename(&tmp, share.join(format!("qmp-reply.{id}")))?;
                }
                if booted.is_none() && l.starts_with("TS-START ") {
                    booted = Some(start.elapsed());
                }
                if let Some(s) = find_after(&l, EXIT_MARKER) {
                    status = s.trim().parse::<i32>().ok();
                }
                lines.push(l);
            }
            Ok(Line::Err(l)) => {
                writeln!(log, "qemu: {l}")?;
                errs.push(l);
            }
            Ok(Line::Closed) => break,
            Err(_) => {
                kill(&mut child);
                bail!(
                    "guest `{}` ({} shape) did not finish within {} s; last console line {:?}, last kernel line {:?} (logs: {}, {})",
                    b.scenario,
                    b.shape.name(),
                    b.timeout.as_secs(),
                    lines.last().map(String::as_str).unwrap_or("<none>"),
                    last_line(&kernel_log),
                    log_path.display(),
                    kernel_log.display()
                );
            }
        }
    }
    // stdout closed: QEMU is exiting; give it the rest of the deadline.
    let exit = wait_until(&mut child, deadline)?;
    let elapsed = start.elapsed();
    match status {
        Some(status) => Ok(Outcome { status, lines, elapsed, boot: booted }),
        None => bail!(
            "QEMU ({}) ended without the guest's exit marker for `{}`: {}; last kernel line {:?} (logs: {}, {})",
            exit,
            b.scenario,
            errs.last().or(lines.last()).map(String::as_str).unwrap_or("no output"),
            last_line(&kernel_log),
            log_path.display(),
            kernel_log.display()
        ),
    }
}

/// The last non-empty line of a log file (for one-line errors).
fn last_line(path: &Path) -> String {
    let text = fs::read(path).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default();
    text.lines().rev().map(str::trim).find(|l| !l.is_empty()).unwrap_or("<empty>").to_string()
}

enum Line {
    Out(String),
    Err(String),
    Closed,
}

/// The text after `marker` when the line contains it (kernel messages can precede it on a line).
fn find_after<'a>(line: &'a str, marker: &str) -> Option<&'a str> {
    line.find(marker).map(|i| &line[i + marker.len()..])
}

/// Sends `req` (`<id> <json command>`) to QMP, connecting on first use; returns the reply line
/// or `{"error": ...}` with the reason, so the guest always gets an answer.
fn relay_qmp(qmp: &mut Option<Qmp>, sock: &Path, req: &str) -> String {
    let (_, json) = req.split_once(' ').unwrap_or(("", req));
    if qmp.is_none() {
        match Qmp::connect(sock) {
            Ok(q) => *qmp = Some(q),
            Err(e) => return serde_json::json!({ "error": format!("{e:#}") }).to_string(),
        }
    }
    let reply = match qmp.as_mut().map(|q| q.execute_raw(json)) {
        Some(Ok(v)) => v.to_string(),
        Some(Err(e)) => serde_json::json!({ "error": format!("{e:#}") }).to_string(),
        None => unreachable!("connected above"),
    };
    println!("  qmp: {json} -> {reply}");
    reply
}

fn wait_until(child: &mut Child, deadline: Instant) -> Result<String> {
    loop {
        if let Some(s) = child.try_wait()? {
            return Ok(s.to_string());
        }
        if Instant::now() >= deadline {
            kill(child);
            return Ok("killed at the deadline".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Where one run of a scenario keeps its files.
pub fn run_dir(cache: &Path, scenario: &str) -> PathBuf {
    cache.join("runs").join(scenario)
}
