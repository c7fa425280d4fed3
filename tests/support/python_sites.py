# A Python process that puts pages on the (declared) CXL node from a named function, called from
# another named function: the allocation site must show both, with their files and lines.
# Usage: python3 python_sites.py MIB. Prints "ready", waits for a line on stdin, allocates and
# touches MIB MiB (bytearray zero-fills it), prints "done" and waits for stdin to close.
import sys


def fill_optimizer_state(mib):
    state = bytearray(mib << 20)
    return state


def train_step(mib):
    kept = fill_optimizer_state(mib)
    return len(kept)


print("ready", flush=True)
sys.stdin.readline()
n = train_step(int(sys.argv[1]))
print("done", n, flush=True)
sys.stdin.read()
