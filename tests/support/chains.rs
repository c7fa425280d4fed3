//! Page touches from many distinct call chains, for the site sampler's tests: `chain(page, code,
//! depth)` recurses `depth` levels and at each level calls on from one of two return sites
//! picked by that level's bit of `code`, then touches `page` at the bottom. Written in assembly
//! with frame pointers (the Rust code here is built without them), so the kernel's
//! frame-pointer walk sees exactly these return addresses: 2^depth distinct user stacks.

#[cfg(target_arch = "x86_64")]
core::arch::global_asm!(
    ".text",
    ".globl tierscope_chain",
    ".type tierscope_chain,@function",
    "tierscope_chain:",
    "push rbp",
    "mov rbp, rsp",
    "test edx, edx",
    "jz 3f",
    "dec edx",
    "mov eax, esi",
    "shr esi, 1",
    "test eax, 1",
    "jnz 2f",
    "call tierscope_chain",
    "jmp 4f",
    "2:",
    "call tierscope_chain",
    "jmp 4f",
    "3:",
    "mov byte ptr [rdi], 1",
    "4:",
    "pop rbp",
    "ret",
    ".size tierscope_chain, .-tierscope_chain",
);

#[cfg(target_arch = "x86_64")]
unsafe extern "C" {
    fn tierscope_chain(page: *mut u8, code: u32, depth: u32);
}

/// Levels of the recursion: 2^14 = 16,384 distinct chains.
pub const DEPTH: u32 = 14;

/// Pages touched between pauses.
const BATCH: usize = 500;

/// Touches page `i` of `p` from call chain `i` (mod 2^DEPTH) for every page, pausing 20 ms
/// after every 500 (a sampler delivering every allocation gets time to drain its ring buffer,
/// as it would for a process that computes between allocations); returns pages.
pub fn touch_from_chains(p: *mut u8, pages: usize) -> usize {
    for i in 0..pages {
        if i > 0 && i % BATCH == 0 {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // SAFETY: page i lies inside the caller's mapping of `pages` pages; the assembly only
        // writes that byte and keeps the stack balanced.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            tierscope_chain(p.add(i * 4096), i as u32, DEPTH)
        };
        #[cfg(not(target_arch = "x86_64"))]
        // SAFETY: as above.
        unsafe {
            p.add(i * 4096).write_volatile(1)
        };
    }
    pages
}
