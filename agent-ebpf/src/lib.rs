//! The kernel programs' library half: lets `tierscope` list this crate as a build-dependency so
//! cargo rebuilds the agent when the kernel programs change (the aya template's arrangement),
//! and holds the one helper that needs an unstable feature.
#![no_std]
#![cfg_attr(target_arch = "bpf", feature(core_intrinsics))]
#![cfg_attr(target_arch = "bpf", allow(internal_features))]

/// Adds `n` to the `u64` at `p` with one BPF atomic add (`lock *(u64 *)(p + 0) += n`, the
/// classic `BPF_XADD`, in every BPF ISA version): exact when several CPUs add to one shared map
/// value at once. This target (`bpfel-unknown-none`, `atomic-cas: false`) has no
/// `AtomicU64::fetch_add`; the intrinsic with its result unused compiles to that one instruction
/// (checked with `--emit asm`). `RUSTC_BOOTSTRAP` names this crate in `.cargo/config.toml`.
///
/// # Safety
/// `p` must point at a live, 8-byte aligned `u64` (a map value the verifier knows).
#[cfg(target_arch = "bpf")]
#[inline(always)]
pub unsafe fn atomic_add(p: *mut u64, n: u64) {
    // SAFETY: the caller's pointer; relaxed is enough for a counter nobody orders against.
    unsafe { core::intrinsics::atomic_xadd::<u64, u64, { core::intrinsics::AtomicOrdering::Relaxed }>(p, n) };
}
