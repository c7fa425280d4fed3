//! Types shared by tierscope's kernel programs (`tierscope-ebpf`) and its agent (`tierscope`).
//!
//! Everything here is `#[repr(C)]`, `Copy`, without `bool`, with explicit padding and a size
//! assertion, so both sides agree on every byte. Map, program and global names are constants here
//! and nowhere else.
#![cfg_attr(not(test), no_std)]

pub mod event;
pub mod layout;
pub mod maps;
pub mod names;
pub mod pinning;
pub mod stack;
pub mod stats;

#[cfg(feature = "user")]
mod pod;
