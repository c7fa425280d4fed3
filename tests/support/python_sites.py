# A Python process that puts pages on the (declared) CXL node from a named function, called from
# another named function: the allocation site must show both, with their files and lines.
# Usage: python3 python_sites.py MIB [THREADS]. Speaks the workload protocol: prints "ready PID",
# waits for a line on stdin, allocates MIB MiB (bytearray zero-fills every page), prints
# "done bytes=N" and waits for stdin to close. THREADS idle Python threads are started first
# (each a thread state ahead of the main thread's on the interpreter's list).
import os
import sys
import threading


def fill_optimizer_state(mib):
    state = bytearray(mib << 20)  # the allocation site
    return state


def train_step(mib):
    kept = fill_optimizer_state(mib)  # its caller
    return len(kept)


idle = threading.Event()
for _ in range(int(sys.argv[2]) if len(sys.argv) > 2 else 0):
    threading.Thread(target=idle.wait, daemon=True).start()
print("ready", os.getpid(), flush=True)
sys.stdin.readline()
n = train_step(int(sys.argv[1]))
print("done bytes=%d" % n, flush=True)
sys.stdin.read()
