//! Collect: reading the system. The kernel programs' maps and ring buffer, /proc and /sys.
//! Everything here is bounded and hands plain values to the model.
pub mod attach;
pub mod btf;
pub mod caps;
pub mod counters;
pub mod damon;
pub mod events;
pub mod map_batch;
pub mod module_file;
pub mod page_path;
pub mod probes;
pub mod process_file;
pub mod process_memory;
pub mod procfs;
pub mod prog_stats;
pub mod programs;
pub mod python;
pub mod python_layout;
pub mod python_lines;
pub mod ringbuf;
pub mod session;
pub mod site_watch;
pub mod sites;
pub mod symbols;
pub mod task_faults;
pub mod tracefs;
pub mod unwind;
