//! Host memory a device driver pins for a process: the CUDA driver API's host allocations and
//! registrations, seen by uprobes on its exported entry points (`cuMemHostAlloc`,
//! `cuMemAllocHost[_v2]`, `cuMemHostRegister[_v2]`, `cuMemFreeHost`, `cuMemHostUnregister`).
//! The NVIDIA driver pins those pages with `pin_user_pages` and accounts them in neither `VmPin`
//! nor `VmLck`, so the calls are the only exact record of which ranges are pinned.

/// What an entry probe saw, kept by thread until its return probe (`PIN_CALLS`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PinCall {
    /// [`PIN_KIND_ALLOC`]: `arg` is the `void **` the driver writes the address to;
    /// [`PIN_KIND_REGISTER`]: `arg` is the address registered.
    pub kind: u32,
    pub _pad: u32,
    pub arg: u64,
    pub bytes: u64,
}
const _: () = assert!(core::mem::size_of::<PinCall>() == 24);

/// `cuMemHostAlloc(void **pp, size_t bytes, unsigned flags)`, `cuMemAllocHost(void **pp, size_t)`.
pub const PIN_KIND_ALLOC: u32 = 1;
/// `cuMemHostRegister(void *p, size_t bytes, unsigned flags)`.
pub const PIN_KIND_REGISTER: u32 = 2;

/// A pinned range of a process (`PINNED`, value: its length in bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PinKey {
    pub tgid: u32,
    /// [`PIN_KIND_ALLOC`] or [`PIN_KIND_REGISTER`]: who pinned it.
    pub kind: u32,
    pub addr: u64,
}
const _: () = assert!(core::mem::size_of::<PinKey>() == 16);

/// Calls in flight at once (`PIN_CALLS`, keyed by thread).
pub const PIN_CALLS_MAX: u32 = 1024;
/// Pinned ranges held at once, all processes together (`PINNED`).
pub const PINNED_MAX: u32 = 8192;
