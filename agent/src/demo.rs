//! The built-in training-like workload of `tierscope top --demo`: a child process (this binary
//! re-executed with a hidden subcommand) that holds parameters, gradients and an optimizer
//! state, the latter bound with mbind(2) to the slowest memory node when there is more than one,
//! and steps in a loop: read parameters, rewrite gradients into fresh pages (faults and page
//! allocations every step, like a framework that frees and reallocates its gradient buffers),
//! update the optimizer state. It dies with the UI (PR_SET_PDEATHSIG, and killed on drop).
use std::{
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::{bail, Context as _, Result};

use crate::topology::{Tier, Topology};

/// Arguments of the hidden `demo-workload` subcommand.
#[derive(clap::Args, Clone, Debug)]
pub struct DemoArgs {
    /// Parameters (MiB), read every step.
    #[arg(long, default_value_t = 64)]
    pub params_mib: usize,
    /// Gradients (MiB), rewritten into fresh pages every step.
    #[arg(long, default_value_t = 16)]
    pub grads_mib: usize,
    /// Optimizer state (MiB), read and written every step.
    #[arg(long, default_value_t = 32)]
    pub optim_mib: usize,
    /// Bind the optimizer state to this node (MPOL_BIND).
    #[arg(long)]
    pub optim_node: Option<u32>,
    /// Pause between steps (ms).
    #[arg(long, default_value_t = 200)]
    pub step_ms: u64,
}

/// A node that could hold the optimizer state, with what ranks it by slowness.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeCandidate {
    pub id: u32,
    pub tier: Tier,
    /// The kernel's memory tier (higher = slower).
    pub memory_tier: Option<u32>,
    pub read_latency_ns: Option<u64>,
    /// SLIT distance from the first node with CPUs.
    pub distance: Option<u32>,
}

/// The slowest of the nodes with memory, and why; `None` with fewer than two such nodes.
/// CXL tier first, then the kernel's memory tier, then HMAT read latency, then SLIT distance.
pub fn slowest_node(nodes: &[NodeCandidate]) -> Option<(u32, String)> {
    if nodes.len() < 2 {
        return None;
    }
    let n = nodes
        .iter()
        .max_by_key(|n| (n.tier == Tier::Cxl, n.memory_tier, n.read_latency_ns, n.distance, std::cmp::Reverse(n.id)))?;
    let why = if n.tier == Tier::Cxl {
        "cxl tier"
    } else if n.memory_tier.is_some() && nodes.iter().any(|o| o.memory_tier < n.memory_tier) {
        "slowest kernel memory tier"
    } else if n.read_latency_ns.is_some() && nodes.iter().any(|o| o.read_latency_ns < n.read_latency_ns) {
        "highest HMAT read latency"
    } else {
        "farthest SLIT distance"
    };
    Some((n.id, why.to_string()))
}

fn candidates(t: &Topology) -> Vec<NodeCandidate> {
    let cpu_node = t.nodes.iter().find(|n| n.has_cpu && n.online).map(|n| n.id);
    let online: Vec<u32> = t.nodes.iter().filter(|n| n.online).map(|n| n.id).collect();
    t.nodes
        .iter()
        .filter(|n| n.online && n.has_memory && n.mem_total_bytes.unwrap_or(0) > 0)
        .map(|n| NodeCandidate {
            id: n.id,
            tier: n.tier,
            memory_tier: n.memory_tier,
            read_latency_ns: n.hmat.as_ref().and_then(|h| h.read_latency_ns),
            distance: cpu_node.and_then(|c| {
                let col = online.iter().position(|&x| x == n.id)?;
                t.node(c)?.distances.get(col).copied()
            }),
        })
        .collect()
}

/// The running demo workload; killed when dropped.
pub struct DemoWorkload {
    child: Child,
    pub pid: u32,
    /// Where the optimizer state went, in words.
    pub placement: String,
}

impl DemoWorkload {
    /// Starts the workload as a child of this process.
    pub fn start(topology: &Topology) -> Result<DemoWorkload> {
        let exe = std::env::current_exe().context("finding the tierscope binary to start the demo workload")?;
        let mut cmd = Command::new(&exe);
        cmd.arg("demo-workload");
        let placement = match slowest_node(&candidates(topology)) {
            Some((node, why)) => {
                cmd.args(["--optim-node", &node.to_string()]);
                format!("optimizer state bound to node {node} ({why})")
            }
            None => "optimizer state not bound: one memory node only".to_string(),
        };
        // Rank variables as a launcher would set them: the demo is tracked as a one-rank job.
        let child = cmd
            .env("RANK", "0")
            .env("LOCAL_RANK", "0")
            .env("WORLD_SIZE", "1")
            .env("TORCHELASTIC_RUN_ID", "tierscope-demo")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting the demo workload ({})", exe.display()))?;
        Ok(DemoWorkload { pid: child.id(), child, placement })
    }

    /// Whether it still runs; the exit status when it stopped.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

impl Drop for DemoWorkload {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid, which we have not reaped yet.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        for _ in 0..50 {
            if self.child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Anonymous private memory, unmapped on drop.
struct Region {
    ptr: *mut u8,
    len: usize,
}

impl Region {
    fn map(mib: usize) -> Result<Region> {
        let len = mib.max(1) << 20;
        // SAFETY: a fresh anonymous private mapping; no existing memory is touched.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            bail!("mmap of {mib} MiB failed: {}", std::io::Error::last_os_error());
        }
        Ok(Region { ptr: ptr.cast(), len })
    }

    /// MPOL_BIND to one node, moving pages already there (MPOL_MF_MOVE).
    fn bind(&self, node: u32) -> Result<()> {
        if node >= 64 {
            bail!("node {node}: the demo binds nodes below 64 only");
        }
        let mask: u64 = 1 << node;
        // SAFETY: mbind on our own mapping with a one-word node mask that outlives the call.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_mbind,
                self.ptr,
                self.len,
                2, /* MPOL_BIND */
                &mask as *const u64,
                64u64,
                2u32, /* MPOL_MF_MOVE */
            )
        };
        if rc != 0 {
            bail!("mbind to node {node} failed: {}", std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Gives the pages back: the next touch faults in fresh zeroed pages.
    fn discard(&self) {
        // SAFETY: MADV_DONTNEED on our own mapping.
        unsafe { libc::madvise(self.ptr.cast(), self.len, libc::MADV_DONTNEED) };
    }

    /// Writes one word per 4 KiB page.
    fn write_pages(&self, value: u64) {
        for off in (0..self.len).step_by(4096) {
            // SAFETY: `off + 8 <= len` within our mapping; volatile so the store is kept.
            unsafe { std::ptr::write_volatile(self.ptr.add(off).cast::<u64>(), value) };
        }
    }

    /// Reads one word per page and returns their sum.
    fn read_pages(&self) -> u64 {
        let mut sum = 0u64;
        for off in (0..self.len).step_by(4096) {
            // SAFETY: as in `write_pages`.
            sum = sum.wrapping_add(unsafe { std::ptr::read_volatile(self.ptr.add(off).cast::<u64>()) });
        }
        sum
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping made in `map`.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// The workload itself (the hidden `demo-workload` subcommand). Runs until killed or orphaned.
pub fn run_workload(args: DemoArgs) -> Result<i32> {
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) };
    // SAFETY: getppid has no preconditions.
    let parent = unsafe { libc::getppid() };
    let params = Region::map(args.params_mib)?;
    let grads = Region::map(args.grads_mib)?;
    let optim = Region::map(args.optim_mib)?;
    if let Some(node) = args.optim_node {
        optim.bind(node)?;
    }
    params.write_pages(1);
    optim.write_pages(0);
    let mut step: u64 = 0;
    loop {
        // SAFETY: as above.
        if unsafe { libc::getppid() } != parent {
            return Ok(0);
        }
        step += 1;
        let loss = params.read_pages(); // forward
        grads.discard();
        grads.write_pages(loss ^ step); // backward into fresh pages
        let m = optim.read_pages(); // optimizer reads its moments...
        optim.write_pages(m.wrapping_add(grads.read_pages())); // ...and writes them back
        std::thread::sleep(Duration::from_millis(args.step_ms.max(1)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(id: u32, tier: Tier, memory_tier: Option<u32>, lat: Option<u64>, distance: Option<u32>) -> NodeCandidate {
        NodeCandidate { id, tier, memory_tier, read_latency_ns: lat, distance }
    }

    #[test]
    fn one_node_is_not_bound() {
        assert_eq!(slowest_node(&[c(0, Tier::Dram, Some(4), None, Some(10))]), None);
        assert_eq!(slowest_node(&[]), None);
    }

    #[test]
    fn cxl_wins_then_kernel_tier_then_latency_then_distance() {
        let nodes = [
            c(0, Tier::Dram, Some(4), Some(90), Some(10)),
            c(1, Tier::Dram, Some(4), Some(140), Some(21)),
            c(2, Tier::Cxl, Some(22), Some(250), Some(40)),
        ];
        assert_eq!(slowest_node(&nodes), Some((2, "cxl tier".into())));
        let nodes = [c(0, Tier::Dram, Some(4), None, Some(10)), c(3, Tier::Unknown, Some(22), None, Some(20))];
        assert_eq!(slowest_node(&nodes), Some((3, "slowest kernel memory tier".into())));
        let nodes = [c(0, Tier::Dram, None, Some(90), Some(10)), c(1, Tier::Dram, None, Some(140), Some(10))];
        assert_eq!(slowest_node(&nodes), Some((1, "highest HMAT read latency".into())));
        let nodes = [c(0, Tier::Dram, None, None, Some(10)), c(1, Tier::Dram, None, None, Some(21))];
        assert_eq!(slowest_node(&nodes), Some((1, "farthest SLIT distance".into())));
    }

    #[test]
    fn regions_map_write_read_and_discard() {
        let r = Region::map(1).expect("mmap 1 MiB");
        r.write_pages(3);
        assert_eq!(r.read_pages(), 3 * 256);
        r.discard();
        assert_eq!(r.read_pages(), 0, "discarded pages come back zeroed");
    }
}
