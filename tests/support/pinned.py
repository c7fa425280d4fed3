# A Python process that pins host memory and reports the kernel's truth about it, then waits
# (blocked on stdin) until the test has the agent's snapshot: `mlock MIB MARKER` mlocks MIB MiB;
# `cuda LIB MIB MARKER` pins MIB MiB through LIB's cuMemHostAlloc, registers MIB/4 MiB of its
# own mapping with cuMemHostRegister_v2, and allocates then frees 8 MiB (not pinned at the end);
# `plain MIB MARKER` only touches MIB MiB (nothing pinned or locked).
# Prints `pid=.. vmlck=.. pinned_pages_node0=..` (pages of the pinned ranges on node 0, from its
# own numa_maps) and the ranges.
import ctypes
import mmap
import os
import sys

libc = ctypes.CDLL(None, use_errno=True)


def numa_pages(start, node):
    """Pages on `node` of the mapping that starts at `start` (its numa_maps line)."""
    for line in open("/proc/self/numa_maps"):
        f = line.split()
        if int(f[0], 16) == start:
            return sum(int(x.split("=")[1]) for x in f if x.startswith(f"N{node}="))
    raise SystemExit(f"no numa_maps line at {start:#x}")


def mapping(size):
    m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    m.write(b"\1" * size)
    return m, ctypes.addressof(ctypes.c_char.from_buffer(m))


how = sys.argv[1]
pages = 0
if how == "mlock":
    size = int(sys.argv[2]) << 20
    keep, addr = mapping(size)
    if libc.mlock(ctypes.c_void_p(addr), ctypes.c_size_t(size)) != 0:
        sys.exit("mlock: " + os.strerror(ctypes.get_errno()))
    pages = numa_pages(addr, 0)
    ranges = f"locked={addr:#x}+{size}"
elif how == "plain":
    size = int(sys.argv[2]) << 20
    keep, addr = mapping(size)
    pages = 0
    ranges = f"plain={addr:#x}+{size} plain_pages_node0={numa_pages(addr, 0)}"
else:
    cuda = ctypes.CDLL(sys.argv[2])
    size = int(sys.argv[3]) << 20
    p, q = ctypes.c_void_p(), ctypes.c_void_p()
    assert cuda.cuMemHostAlloc(ctypes.byref(p), ctypes.c_size_t(size), 0) == 0
    assert cuda.cuMemAllocHost_v2(ctypes.byref(q), ctypes.c_size_t(8 << 20)) == 0
    assert cuda.cuMemFreeHost(q) == 0
    keep, addr = mapping(size // 4)
    assert cuda.cuMemHostRegister_v2(ctypes.c_void_p(addr), ctypes.c_size_t(size // 4), 0) == 0
    pages = numa_pages(p.value, 0) + numa_pages(addr, 0)
    ranges = f"alloc={p.value:#x}+{size} registered={addr:#x}+{size // 4}"
vmlck = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmLck:")) * 1024
print(f"pid={os.getpid()} vmlck={vmlck} pinned_pages_node0={pages} {ranges}", flush=True)
sys.stdin.read()
os._exit(0)
