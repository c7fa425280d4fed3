# A Python process whose memory the kernel faults in on its behalf: MAP_POPULATE through mmap's
# flags, mlock through ctypes, MADV_POPULATE_WRITE through mmap.madvise. Prints its own counters
# from /proc/self/stat just before it exits (a sleep, then os._exit: no interpreter teardown).
# Usage: python3 populate.py MIB MARKER (the marker lets the test's --match find it).
import ctypes
import mmap
import os
import sys
import time


def faults():
    with open("/proc/self/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return int(rest[7]), int(rest[9])


libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(41, 1, 0, 0, 0)  # PR_SET_THP_DISABLE: one fault per 4 KiB page
size = int(sys.argv[1]) << 20
private = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
before = faults()

a = mmap.mmap(-1, size, flags=private | mmap.MAP_POPULATE)
b = mmap.mmap(-1, size, flags=private)
addr = ctypes.addressof(ctypes.c_char.from_buffer(b))
if libc.mlock(ctypes.c_void_p(addr), ctypes.c_size_t(size)) != 0:
    sys.exit("mlock: " + os.strerror(ctypes.get_errno()))
c = mmap.mmap(-1, size, flags=private)
c.madvise(getattr(mmap, "MADV_POPULATE_WRITE", 23))

minflt, majflt = faults()
print(f"populated={3 * size // 4096} before={before[0] + before[1]} faults={minflt + majflt} major={majflt}", flush=True)
# Live through one of the agent's readings (it names processes it reads alive), faulting no more.
time.sleep(1.5)
os._exit(0)
