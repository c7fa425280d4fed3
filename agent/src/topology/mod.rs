//! The memory topology of the machine: nodes, tiers and why, memory blocks, CXL devices.
pub mod memory_blocks;
