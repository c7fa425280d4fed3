//! `cargo xtask`: setup, build, run, image, test, vm-test, layers, fuzz, soak, bench.
//!
//! Every command that builds calls `setup` first, which installs what a fresh Debian machine lacks
//! and skips what is present.
mod bench;
mod bench_bpf;
mod bench_hotness;
mod bench_residency;
mod bench_storm;
mod bench_tracked;
mod build;
mod cmd;
mod deploy_tools;
mod fuzz;
mod image;
mod layers;
mod paired;
mod readers;
mod setup;
mod soak;
mod tally;
mod test;
mod vm;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "tierscope's build, setup and test tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install the apt packages, bpf-linker and the rustup toolchain link (idempotent; root).
    Setup,
    /// Build the agent (release) with its kernel programs.
    Build,
    /// Build everything and open the live TUI (`tierscope top --demo`).
    Run {
        /// Arguments passed to `tierscope` instead of `top --demo`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// The agent's container image (`FROM scratch`: the binary and its libraries), built with podman.
    Image(image::ImageArgs),
    /// Run every test: unit tests, root integration tests, then the QEMU guest scenarios.
    Test {
        /// Skip the QEMU guest scenarios.
        #[arg(long)]
        no_vm: bool,
    },
    /// Run the scenarios in a QEMU guest with real memory tiers and an emulated CXL device.
    VmTest(vm::VmTestArgs),
    /// Check the agent's layers against ARCHITECTURE.md's table, and every file's length.
    Layers,
    /// Fuzz every parser (numa_maps, sysfs, tracefs formats, ring-buffer records, CXL events, the
    /// config file, session files) for N seconds each; crashing inputs go to target/fuzz-crashes/.
    Fuzz {
        /// Seconds per target.
        #[arg(long, default_value_t = 30.0)]
        seconds: f64,
    },
    /// The agent under churn: 10,000 short-lived processes, then steady churn; RSS over time and
    /// its slope, registry and kernel map entries bounded.
    Soak(soak::SoakArgs),
    /// The agent's cost to a fault-heavy workload: interleaved runs with and without it, ratios.
    Bench(bench::BenchArgs),
}

fn main() {
    let cli = Cli::parse();
    let result: Result<()> = match cli.task {
        Task::Setup => setup::run(),
        Task::Build => setup::run().and_then(|()| build::agent_release()).map(|_| ()),
        Task::Run { args } => run(args),
        Task::Image(args) => setup::run().and_then(|()| image::run(&args)).map(|_| ()),
        Task::Test { no_vm } => test::run(!no_vm),
        Task::VmTest(args) => setup::run().and_then(|()| vm::run(args)).map(|_| ()),
        Task::Layers => layers::run(),
        Task::Soak(args) => soak::run(args),
        Task::Fuzz { seconds } => setup::run().and_then(|()| fuzz::run(seconds)),
        Task::Bench(args) => setup::run().and_then(|()| bench::run(args)),
    };
    if let Err(e) = result {
        eprintln!("xtask: error: {e:#}");
        std::process::exit(1);
    }
}

fn run(args: Vec<String>) -> Result<()> {
    setup::run()?;
    let bin = build::agent_release()?;
    let args = if args.is_empty() { first_screen(std::path::Path::new("/sys"), &cmd::workspace_root()) } else { args };
    println!("xtask: opening `{} {}`", bin.display(), args.join(" "));
    cmd::exec(&bin, &args)
}

/// The session recorded in the QEMU guest with a CXL memory expander (`vm-test --only recorded-demo
/// --update-fixtures` records it again): what `cargo xtask run` replays where there is no slower
/// tier to show.
const TIERED_SESSION: &str = "agent/fixtures/sessions/tiered-guest.tscope";

/// What `cargo xtask run` opens: on a machine whose memory is all one node (no slower tier to
/// show), the session recorded in the guest with a CXL node (promotions, demotions, a CXL
/// allocation site with Python frames, an open insight), and it says how to get the live view;
/// elsewhere the live UI with its demo workload.
fn first_screen(sysfs: &std::path::Path, root: &std::path::Path) -> Vec<String> {
    let with_memory = std::fs::read_to_string(sysfs.join("devices/system/node/has_memory")).unwrap_or_default();
    let session = root.join(TIERED_SESSION);
    if matches!(with_memory.trim(), "0" | "") {
        if session.exists() {
            println!(
                "xtask: this machine has one memory node (DRAM only), so there is no slower tier to show: \
                 replaying a session recorded in a QEMU guest with a CXL memory expander ({TIERED_SESSION}: \
                 promotions, demotions, a CXL allocation site with its Python frames, an open insight). \
                 This machine live: `cargo xtask run top --demo` (add `--cxl-node 0` to declare node 0 the CXL tier)"
            );
            return vec!["top".into(), "--replay".into(), session.display().to_string()];
        }
        println!(
            "xtask: this machine has one memory node (DRAM only): node 0 is declared the CXL tier \
             (--cxl-node 0) so the demo's memory shows on a slow tier; for the machine as it is, \
             run `target/release/tierscope top --demo`"
        );
        return vec!["top".into(), "--demo".into(), "--cxl-node".into(), "0".into()];
    }
    println!(
        "xtask: memory nodes {}: the live machine as it is (add --cxl-node N after `cargo xtask run top --demo` to declare one; \
         a recorded tiered machine: `cargo xtask run top --replay {TIERED_SESSION}`)",
        with_memory.trim()
    );
    vec!["top".into(), "--demo".into()]
}

#[cfg(test)]
mod first_screen_tests {
    use super::*;

    /// A sysfs with `has_memory` and a checkout with or without the recorded session.
    fn machine(nodes: &str, shipped: bool) -> (std::path::PathBuf, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("xtask-first-screen-{}-{nodes}-{shipped}", std::process::id()));
        let (sys, root) = (dir.join("sys"), dir.join("root"));
        std::fs::create_dir_all(sys.join("devices/system/node")).expect("sysfs");
        std::fs::write(sys.join("devices/system/node/has_memory"), format!("{nodes}\n")).expect("has_memory");
        if shipped {
            let s = root.join(TIERED_SESSION);
            std::fs::create_dir_all(s.parent().expect("dir")).expect("root");
            std::fs::write(&s, b"session").expect("session");
        }
        (sys, root)
    }

    #[test]
    fn one_node_replays_the_recorded_tiered_machine_else_declares_node_0() {
        let (sys, root) = machine("0", true);
        let args = first_screen(&sys, &root);
        assert_eq!(args[..2], ["top", "--replay"]);
        assert!(args[2].ends_with(TIERED_SESSION), "{args:?}");
        let (sys, root) = machine("0", false);
        assert_eq!(first_screen(&sys, &root), ["top", "--demo", "--cxl-node", "0"]);
        let (sys, root) = machine("0-2", true);
        assert_eq!(first_screen(&sys, &root), ["top", "--demo"], "a tiered machine: live");
    }

    #[test]
    fn the_recorded_tiered_session_is_shipped() {
        assert!(cmd::workspace_root().join(TIERED_SESSION).is_file(), "{TIERED_SESSION} is missing");
    }
}
