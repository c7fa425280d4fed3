# A training loop stand-in with known steps and phases: after a set-up, STEPS calls of
# train_step, each calling forward (which also maps and touches 16 MiB: 4,096 fresh pages),
# backward and optimizer_step, which burn their thread's CPU for 0.15 s, 0.25 s and 0.10 s
# (CPU time, not sleep: the sampler sees threads on CPU only); then a wrap-up. It writes each
# step's start (CLOCK_MONOTONIC seconds) and the loop's end to OUT as JSON, so a test compares
# the steps tierscope finds with the ones it ran. EXTRA_BACKWARD_S (optional) makes backward
# burn that much more CPU each step: a slowed run, or a straggler rank.
# Usage: python3 python_steps.py STEPS OUT [EXTRA_BACKWARD_S]
import json
import mmap
import sys
import time

MIB = 1 << 20
PAGE = mmap.PAGESIZE


def spin(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def forward():
    m = mmap.mmap(-1, 16 * MIB)
    m.madvise(mmap.MADV_NOHUGEPAGE)
    for i in range(0, 16 * MIB, PAGE):
        m[i] = 1
    m.close()
    spin(0.15)


EXTRA_BACKWARD_S = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0


def backward():
    spin(0.25 + EXTRA_BACKWARD_S)


def optimizer_step():
    spin(0.10)


def train_step():
    forward()
    backward()
    optimizer_step()


def set_up():
    spin(0.2)


def wrap_up():
    spin(0.2)


def main(steps, out):
    set_up()
    starts = []
    for _ in range(steps):
        starts.append(time.monotonic())
        train_step()
    end = time.monotonic()
    wrap_up()
    with open(out, "w") as f:
        json.dump({"starts": starts, "end": end}, f)


main(int(sys.argv[1]), sys.argv[2])
