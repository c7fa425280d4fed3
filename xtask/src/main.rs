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
    let args = if args.is_empty() { vec!["top".into(), "--demo".into()] } else { args };
    cmd::exec(&bin, &args)
}
