//! tierscope's kernel programs. One file per probe family; the maps and globals they share live
//! in `maps.rs`, the helpers every program uses in `common.rs`.
//!
//! Hot events (faults, page allocations and frees) use tp_btf with a per-CPU pending slot in
//! front of the per-tgid map (the page programs compute the pfn from the `struct page` pointer;
//! their classic-tracepoint twins stand by for kernels where that cannot be calibrated); rare
//! events go to the one ring buffer.
#![no_std]
#![no_main]

mod common;
mod cpu_samples;
mod cxl_events;
mod fault_latency;
mod faults;
mod lifecycle;
mod maps;
mod migrate;
mod pages;
mod pinning;
mod policy;
mod python_frames;
mod sched_numa;
mod user_stack;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
