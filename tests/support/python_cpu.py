# A Python process that burns CPU in two named functions for known CPU times: hot_loop for
# HOT seconds of its thread's CPU time, then warm_loop for half as long. The CPU profile must
# put hot_loop's line first, with about twice warm_loop's samples.
# Usage: python3 python_cpu.py HOT [--now]. Speaks the workload protocol (prints "ready PID",
# waits for a line on stdin, burns, prints "done cpu_ns=N hot_ns=N warm_ns=N", waits for stdin
# to close); with --now it burns at once and exits.
import os
import sys
import time


def hot_loop(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def warm_loop(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def burn(hot):
    t0 = time.thread_time_ns()
    hot_loop(hot)
    t1 = time.thread_time_ns()
    warm_loop(hot / 2)
    t2 = time.thread_time_ns()
    return t1 - t0, t2 - t1


hot = float(sys.argv[1])
if "--now" in sys.argv:
    burn(hot)
    sys.exit(0)
print("ready", os.getpid(), flush=True)
sys.stdin.readline()
start = time.process_time_ns()
hot_ns, warm_ns = burn(hot)
print("done cpu_ns=%d hot_ns=%d warm_ns=%d" % (time.process_time_ns() - start, hot_ns, warm_ns), flush=True)
sys.stdin.read()
