# A Python process that puts pages on the (declared) CXL node from a named function, called from
# another named function: the allocation site must show both, with their files and lines.
# Usage: python3 python_sites.py MIB. Speaks the workload protocol: prints "ready PID", waits for
# a line on stdin, allocates MIB MiB (bytearray zero-fills every page), prints "done bytes=N" and
# waits for stdin to close.
import os
import sys


def fill_optimizer_state(mib):
    state = bytearray(mib << 20)  # the allocation site
    return state


def train_step(mib):
    kept = fill_optimizer_state(mib)  # its caller
    return len(kept)


print("ready", os.getpid(), flush=True)
sys.stdin.readline()
n = train_step(int(sys.argv[1]))
print("done bytes=%d" % n, flush=True)
sys.stdin.read()
