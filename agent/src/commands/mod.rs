//! One file per subcommand: each turns model values into what the user sees.
pub mod check;
pub mod probe_latency;
pub mod run;
pub mod snapshot;
pub mod top;
pub mod topology;
