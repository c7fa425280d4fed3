# A Python process that frees a code object and makes another at its address (as a training
# script's start-up `exec` and a function defined later do): `<string>`'s module code burns CPU,
# is freed, and `backward`'s code object takes its address, then burns CPU in turn. The CPU
# profile must name the second by its own file and function, not the first's.
# Usage: python3 python_reuse.py SECONDS. Workload protocol: prints "ready PID", waits for a line
# on stdin, burns, prints "done reused=0|1", waits for stdin to close.
import os
import sys
import time

seconds = float(sys.argv[1])
print("ready", os.getpid(), flush=True)
sys.stdin.readline()
first = compile("while t() < end:\n    pass\n", "<string>", "exec")
at = id(first)
exec(first, {"t": time.thread_time, "end": time.thread_time() + seconds})
del first
ns = {}
exec(compile("def backward(end, t):\n    while t() < end:\n        pass\n", "reused_steps.py", "exec"), ns)
reused = int(id(ns["backward"].__code__) == at)
ns["backward"](time.thread_time() + seconds, time.thread_time)
print("done reused=%d" % reused, flush=True)
sys.stdin.read()
