# On the GPU machine: a process that pins 2 GiB through CUDA and fills it, then fills a pageable
# buffer of the same size, printing its own fault counters (/proc/self/stat) around each step and
# just before it exits. pinned_faults.sh runs it under `tierscope snapshot` and compares.
# Usage: python3 pinned_faults.py MARKER (the marker lets --match find it).
import os
import sys
import time

import torch


def faults():
    with open("/proc/self/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return int(rest[7]), int(rest[9])


def show(what, before, after):
    print(f"{what}: minflt +{after[0] - before[0]} majflt +{after[1] - before[1]}", flush=True)


assert torch.cuda.is_available(), "no CUDA device"
torch.cuda.init()
start = faults()
pinned = torch.empty(512 * 1024 * 1024, dtype=torch.float32, pin_memory=True)
pinned.fill_(1.0)
after_pinned = faults()
show("pinned 2 GiB (allocate + fill)", start, after_pinned)
pageable = torch.empty(512 * 1024 * 1024, dtype=torch.float32)
pageable.fill_(1.0)
after_pageable = faults()
show("pageable 2 GiB (allocate + fill)", after_pinned, after_pageable)
assert pinned.is_pinned() and not pageable.is_pinned()
minflt, majflt = faults()
print(f"final pid={os.getpid()} faults={minflt + majflt} minflt={minflt} majflt={majflt} "
      f"pinned_pages={2 * 1024 * 1024 * 1024 // os.sysconf('SC_PAGE_SIZE')}", flush=True)
# Live through one of the agent's readings, faulting no more, then leave without teardown.
time.sleep(2)
os._exit(0)
