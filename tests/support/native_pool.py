# A Python process whose allocation runs in a native worker pool (native_pool.c, loaded with
# ctypes): the workers have no Python thread state; the main thread waits in the foreign call at
# the line that handed them the work. Usage: python3 native_pool.py LIBRARY MIB THREADS. Speaks
# the workload protocol: prints "ready PID", waits for a line on stdin, fills MIB MiB in THREADS
# native threads, prints "done bytes=N" and waits for stdin to close.
import ctypes
import os
import sys

pool = ctypes.CDLL(sys.argv[1])
pool.pool_fill.restype = ctypes.c_long
pool.pool_fill.argtypes = [ctypes.c_long, ctypes.c_int]


def optimizer_step(mib, threads):
    return pool.pool_fill(mib, threads)  # the work handed to the pool


print("ready", os.getpid(), flush=True)
sys.stdin.readline()
n = optimizer_step(int(sys.argv[2]), int(sys.argv[3]))
print("done bytes=%d" % n, flush=True)
sys.stdin.read()
