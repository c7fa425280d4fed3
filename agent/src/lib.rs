//! tierscope: eBPF observability of tiered (DRAM + CXL) memory for AI training nodes.
//!
//! Data flows one way: [`collect`] (kernel maps, ring buffer, /proc, /sys) -> [`model`] (pure
//! state) -> presenters ([`commands`]: TUI, exporters, JSON). See ARCHITECTURE.md.
pub mod cli;
pub mod collect;
pub mod commands;
pub mod demo;
pub mod export;
pub mod fuzz;
pub mod health;
pub mod latency;
pub mod logging;
pub mod model;
pub mod output_file;
pub mod recording;
pub mod report;
pub mod topology;
pub mod trace_format;
pub mod tui;
